"""Ray benchmark: self-play with `--backend ray` against the local pipeline, and what crosses Ray.

Both backends run in this process, one after the other in rounds (in alternating order), with the
self-play suite's configuration (the `tiny` net in fp32, 2 actor processes x 16 games in lockstep,
48 simulations, K = 4; ResNet-40 in bf16 with 12 x 64 games on a GPU) and the same games: the local
pipeline (`SelfPlayWorkers` on an `InferenceServer`, as `--backend local` runs it) plays each round
with the seed stream of the Ray request of that round. The Ray side is a `NodePool` on a Ray
instance started on this machine: one `SelfPlayNode` actor, which runs that same local pipeline, one
request per round. The ratio of positions/s therefore measures what Ray adds: the request, the
weights by reference, the games back through the object store and the learner's copy of them.

Ray starts its workers at nice 15 (`RAY_worker_niceness`) so that its own daemons stay
responsive; the local backend's processes run at nice 0. On a machine shared with other work that
alone decides how much CPU each side gets, so the suite starts its Ray instance with
`RAY_worker_niceness=0` (unless set otherwise) to compare the two mechanisms at equal priority.

Also reported: the bytes that cross Ray per game and per position and per weights update
(pickled sizes: what Ray's serializer stores for these numpy arrays and byte strings), the label
entries per position (completed-Q targets list every legal move), Ray's time per request beyond
the node's own playing time, the learner's cost to take a game into the replay (its thread: the
window and the hand-over to the writer thread, batched as the cpu preset batches them) and the
writer thread's cost to persist it, and the replay window's bytes per position.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import ray
import torch

from amazons.distributed.node import request_stream
from amazons.distributed.pool import NodePool
from amazons.distributed.ray_backend import connect
from amazons.mcts import SearchConfig
from amazons.neural.checkpoint import save_model
from amazons.neural.model import PolicyValueNet, net_config
from amazons.neural.served import NetworkEvaluatorFactory
from amazons.serving.server import InferenceConfig, InferenceServer
from amazons.train.config import RayConfig, TrainConfig, preset_config
from amazons.train.replay import GameSamples, ReplayBuffer
from amazons.train.selfplay import SelfPlayConfig, SelfPlayReport, SelfPlayWorkers


def bench_config(games: int, gpu: bool) -> TrainConfig:
    """The self-play suite's settings as a run config, one Ray request per round."""
    actors, games_in_parallel = (12, 64) if gpu else (2, 16)
    search = SearchConfig(simulations=200 if gpu else 48, leaves_per_game=4, root_noise=True,
                          temperature_moves=10, node_capacity=1024, edge_capacity=1 << 17)
    return TrainConfig(
        preset="bench", device="cuda" if gpu else "cpu",
        net=net_config("resnet40" if gpu else "tiny"),
        selfplay=SelfPlayConfig(num_actors=actors, games_in_parallel=games_in_parallel,
                                search=search, start_jitter_s=0.0),
        inference=InferenceConfig(inference_batch_size=min(256, actors * games_in_parallel * 4)),
        games_per_iteration=games,
        ray=RayConfig(node_gpus=1.0 if gpu else 0.0, games_per_request=games,
                      max_games_in_flight=games, max_weights_lag=0, num_cpus=os.cpu_count() or 1,
                      object_store_mb=0 if gpu else 100),
    )


def model_file_bytes(preset: str, folder: str) -> int:
    """Size of a freshly initialized `preset` network's model file (sent by one weights update)."""
    path = Path(folder) / f"{preset}.pt"
    save_model(path, PolicyValueNet(net_config(preset)))
    size = path.stat().st_size
    path.unlink()
    return size


def run(quick: bool) -> dict[str, float]:
    torch.set_num_threads(1)
    gpu = torch.cuda.is_available()
    games = 8 if quick else 32
    rounds = 1 if quick else 4
    config = bench_config(games, gpu)
    local_reports: list[SelfPlayReport] = []
    ray_reports: list[SelfPlayReport] = []
    delivered: list[GameSamples] = []
    with tempfile.TemporaryDirectory() as folder:
        model_path = str(Path(folder) / "model.pt")
        torch.manual_seed(0)
        save_model(model_path, PolicyValueNet(config.net))
        factory = NetworkEvaluatorFactory(model_path, config.device)
        os.environ.setdefault("RAY_worker_niceness", "0")
        owns_ray = connect(None, config.ray)
        try:
            with InferenceServer(factory, config.selfplay.num_actors, config.inference) as server, \
                    SelfPlayWorkers(server, config.selfplay) as workers, \
                    NodePool(config, last_iteration=rounds, log=lambda message: None) as pool:
                pool.publish_weights(model_path, 0)
                warm_up = config.selfplay.num_actors
                workers.play(warm_up, lambda samples, records: None, iteration=request_stream(0, 0))
                # node start-up, JIT caches
                pool.play(warm_up, lambda samples, records: None, iteration=0)
                pool.take_metrics()
                for round_index in range(1, rounds + 1):
                    def local(round_index: int = round_index) -> None:
                        local_reports.append(workers.play(games, lambda samples, records: None,
                                                          iteration=request_stream(round_index, 0)))

                    def remote(round_index: int = round_index) -> None:
                        ray_reports.append(pool.play(
                            games, lambda samples, records: delivered.extend(samples),
                            iteration=round_index))

                    # alternate the order
                    for piece in (local, remote) if round_index % 2 else (remote, local):
                        piece()
                crossing = pool.take_metrics()
            cpu = preset_config("cpu")
            replay = ReplayBuffer(Path(folder) / "replay", 1_000_000,
                                  chunk_games=cpu.replay_chunk_games,
                                  chunk_seconds=cpu.replay_chunk_seconds)
            started = time.perf_counter()
            for samples in delivered:
                replay.add(samples)
            ingest_s = time.perf_counter() - started
            replay.close()
            write_s = time.perf_counter() - started
            window_bytes = replay.bytes_per_position
            label_entries = sum(samples.label_moves.shape[0] for samples in delivered)
            weights_resnet40 = model_file_bytes("resnet40", folder)
        finally:
            if owns_ray:
                ray.shutdown()
    local_positions = sum(report.positions for report in local_reports)
    ray_positions = sum(report.positions for report in ray_reports)
    local_rate = local_positions / sum(report.seconds for report in local_reports)
    ray_rate = ray_positions / sum(report.seconds for report in ray_reports)
    node_seconds = sum(stats["seconds"] for report in ray_reports for stats in report.actor_stats)
    requests = sum(len(report.actor_stats) for report in ray_reports)
    ray_games = sum(report.games for report in ray_reports)
    print(f"ray: {rounds} round(s) of {games} games per backend; "
          f"positions local {local_positions}, ray {ray_positions}; "
          f"net {config.net.blocks} x {config.net.channels}; Ray workers at nice "
          f"{os.environ['RAY_worker_niceness']}")
    print("ray: positions/s per round, local / ray: " + ", ".join(
        f"{local.positions_per_s:.0f} / {remote.positions_per_s:.0f}"
        for local, remote in zip(local_reports, ray_reports, strict=True)))
    return {
        "ray.local_positions_per_s": local_rate,
        "ray.ray_positions_per_s": ray_rate,
        "ray.positions_per_s_ratio_to_local": ray_rate / local_rate,
        "ray.overhead_ms_per_request": 1000 * (sum(report.seconds for report in ray_reports)
                                               - node_seconds) / max(requests, 1),
        "ray.bytes_per_game": crossing["ray/bytes_per_game"],
        "ray.bytes_per_position": (crossing["ray/bytes_per_game"] * ray_games
                                   / max(ray_positions, 1)),
        "ray.weights_bytes": crossing["ray/weights_bytes"],
        "ray.weights_bytes_resnet40": float(weights_resnet40),
        "ray.label_entries_per_position": label_entries / max(ray_positions, 1),
        "ray.learner_ingest_ms_per_game": 1000 * ingest_s / max(ray_games, 1),
        "ray.replay_write_ms_per_game": 1000 * write_s / max(ray_games, 1),
        "ray.replay_window_bytes_per_position": window_bytes,
        "ray.games": float(ray_games),
    }
