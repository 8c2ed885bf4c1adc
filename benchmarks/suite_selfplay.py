"""Self-play benchmark: the whole pipeline (actors, shared-memory server, network, search).

Measures end-to-end self-play on this machine with a small net: positions/s, network
evaluations/s and search simulations/s, the ratio of evaluations/s in self-play to the same
network's standalone throughput, the server's round-trip latency seen by the actors, and the
mean batch fill. On a GPU the net is ResNet-40 in bf16. The server runs the production
evaluator (`amazons.netplay.NetworkEvaluatorFactory`: the model `prepare_for_inference` makes,
autocast at the resolved precision, CUDA graphs over batch buckets on a GPU).

`selfplay.evals_ratio_to_standalone` compares like with like: the standalone figure runs the
same production evaluator (`NetworkEvaluatorFactory`, in this process) over the positions of the
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
from amazons.net import PolicyValueNet, net_config, resolve_precision
from amazons.netplay import NetworkEvaluatorFactory
from amazons.selfplay import SelfPlayConfig, SelfPlayWorkers


def standalone_evals_per_s(model_path: str, device: str, batch: int, positions: np.ndarray,
                           seconds: float) -> float:
    """The same network's throughput through the same evaluator code, in this process, over
    `positions` `(N, 3) uint64` (non-terminal) in batches of `batch`, cycling for `seconds`."""
    factory = NetworkEvaluatorFactory(model_path, device, max_batch=batch)
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


def measure(device: str, preset: str, actors: int, games_in_parallel: int, simulations: int, batch: int,
            games: int, standalone_s: float, prefix: str = "selfplay") -> dict[str, float]:
    """Self-play through the shared-memory server on `device`: `actors` processes x
    `games_in_parallel` games of `simulations` simulations (K = 4 leaves per game), the server's
    batch up to `batch` rows, `games` timed games after a warm-up of one game per actor; then the
    standalone figure over the played positions for `standalone_s` seconds.

    Returns the figures under `<prefix>.` (see the module docstring)."""
    torch.set_num_threads(1)
    leaves = 4
    search = SearchConfig(simulations=simulations, leaves_per_game=leaves, root_noise=True,
                          temperature_moves=10, node_capacity=1024, edge_capacity=1 << 17)
    with tempfile.TemporaryDirectory() as folder:
        model_path = str(Path(folder) / "model.pt")
        torch.manual_seed(0)
        save_model(model_path, PolicyValueNet(net_config(preset)))
        factory = NetworkEvaluatorFactory(model_path, device, max_batch=batch)
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
            np.concatenate(played), standalone_s)
    round_trips = sum(stats["round_trips"] for stats in report.actor_stats)
    waited = sum(stats["round_trip_seconds"] for stats in report.actor_stats)
    print(f"{prefix}: net {preset}, {resolve_precision('auto', device)}, {actors} actors x "
          f"{games_in_parallel} games, {simulations} simulations, K = {leaves}, batch {batch}")
    return {
        f"{prefix}.positions_per_s": report.positions_per_s,
        f"{prefix}.evals_per_s": report.evals_per_s,
        f"{prefix}.sims_per_s": report.simulations_per_s,
        f"{prefix}.standalone_evals_per_s": standalone,
        f"{prefix}.evals_ratio_to_standalone": report.evals_per_s / standalone,
        f"{prefix}.server_roundtrip_ms": 1000 * waited / max(round_trips, 1),
        f"{prefix}.mean_batch_fill": server_stats.get("mean_batch_fill", float("nan")),
        f"{prefix}.mean_batch_rows": server_stats.get("mean_batch_rows", float("nan")),
        f"{prefix}.games": float(report.games),
        f"{prefix}.mean_game_plies": sum(positions.shape[0] for positions in played) / max(report.games, 1),
        f"{prefix}.standalone_positions": float(sum(positions.shape[0] for positions in played)),
        f"{prefix}.actors": float(actors),
    }


def run(quick: bool) -> dict[str, float]:
    """Measure the suite; see the module docstring for the keys."""
    gpu = torch.cuda.is_available()
    actors, games_in_parallel = (12, 64) if gpu else (2, 16)
    games = (actors * games_in_parallel) if not quick else actors * 2
    return measure("cuda" if gpu else "cpu", "resnet40" if gpu else "tiny", actors, games_in_parallel,
                   200 if gpu else 48, min(256, actors * games_in_parallel * 4), games, 2.0 if quick else 5.0)
