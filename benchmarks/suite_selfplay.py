"""Self-play benchmark: the whole pipeline (actors, shared-memory server, network, search).

Measures end-to-end self-play on this machine with a small net: positions/s, network
evaluations/s and search simulations/s, the ratio of evaluations/s in self-play to the same
network's standalone throughput, the server's round-trip latency seen by the actors, and the
mean batch fill. On a GPU the net is ResNet-40 in bf16.

`selfplay.evals_ratio_to_standalone` compares like with like: the standalone figure runs the
same evaluator code (`NetworkEvaluatorFactory`, in this process) over the positions of the
timed self-play games themselves (every search root, in game order, with its legal moves), in
batches of the server's mean batch size.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from amazons import engine
from amazons.checkpoint import save_model
from amazons.inference import InferenceConfig, InferenceServer
from amazons.mcts import SearchConfig
from amazons.net import PolicyValueNet, net_config
from amazons.netplay import NetworkEvaluatorFactory, resolve_inference_dtype
from amazons.selfplay import SelfPlayConfig, SelfPlayWorkers


def standalone_evals_per_s(model_path: str, device: str, batch: int, positions: np.ndarray,
                           seconds: float) -> float:
    """The same network's throughput through the same evaluator code, in this process, over
    `positions` `(N, 3) uint64` (non-terminal) in batches of `batch`, cycling for `seconds`."""
    factory = NetworkEvaluatorFactory(model_path, device)
    evaluator = factory()
    batches = []
    for first in range(0, positions.shape[0] - batch + 1, batch):
        chunk = np.ascontiguousarray(positions[first:first + batch])
        batches.append((chunk, *engine.legal_moves(chunk)))
    if not batches:
        raise RuntimeError(f"self-play gave {positions.shape[0]} positions, fewer than one batch of {batch}")
    evaluator.evaluate(*batches[0])
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        evaluator.evaluate(*batches[calls % len(batches)])
        calls += 1
    return calls * batch / (time.perf_counter() - started)


def run(quick: bool) -> dict[str, float]:
    torch.set_num_threads(1)
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    preset = "resnet40" if gpu else "tiny"
    actors, games_in_parallel = (12, 64) if gpu else (2, 16)
    leaves = 4
    search = SearchConfig(simulations=48 if not gpu else 200, leaves_per_game=leaves, root_noise=True,
                          temperature_moves=10, node_capacity=1024, edge_capacity=1 << 17)
    batch = min(256, actors * games_in_parallel * leaves)
    games = (actors * games_in_parallel) if not quick else actors * 2
    with tempfile.TemporaryDirectory() as folder:
        model_path = str(Path(folder) / "model.pt")
        torch.manual_seed(0)
        save_model(model_path, PolicyValueNet(net_config(preset)))
        factory = NetworkEvaluatorFactory(model_path, device)
        config = SelfPlayConfig(num_actors=actors, games_in_parallel=games_in_parallel, search=search,
                                start_jitter_s=0.0)
        with InferenceServer(factory, actors, InferenceConfig(inference_batch_size=batch)) as server:
            with SelfPlayWorkers(server, config) as workers:
                workers.play(actors, lambda samples, texts: None, iteration=0)  # warm-up: imports, JIT cache
                played: list[np.ndarray] = []
                report = workers.play(
                    games, lambda samples, texts: played.extend(game.positions for game in samples),
                    iteration=1)
            stats_before = dict(server.stats)
        server_stats = server.stats or stats_before
        standalone = standalone_evals_per_s(
            model_path, device, int(max(1, round(server_stats.get("mean_batch_rows", batch)))),
            np.concatenate(played), 2.0 if quick else 5.0)
    round_trips = sum(stats["round_trips"] for stats in report.actor_stats)
    waited = sum(stats["round_trip_seconds"] for stats in report.actor_stats)
    print(f"selfplay: net {preset}, {resolve_inference_dtype('auto', device)}, {actors} actors x "
          f"{games_in_parallel} games, {search.simulations} simulations, K = {leaves}")
    return {
        "selfplay.positions_per_s": report.positions_per_s,
        "selfplay.evals_per_s": report.evals_per_s,
        "selfplay.sims_per_s": report.simulations_per_s,
        "selfplay.standalone_evals_per_s": standalone,
        "selfplay.evals_ratio_to_standalone": report.evals_per_s / standalone,
        "selfplay.server_roundtrip_ms": 1000 * waited / max(round_trips, 1),
        "selfplay.mean_batch_fill": server_stats.get("mean_batch_fill", float("nan")),
        "selfplay.mean_batch_rows": server_stats.get("mean_batch_rows", float("nan")),
        "selfplay.games": float(report.games),
        "selfplay.standalone_positions": float(sum(positions.shape[0] for positions in played)),
        "selfplay.actors": float(actors),
    }
