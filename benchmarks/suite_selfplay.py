"""Self-play benchmark: the whole pipeline (actors, shared-memory server, network, search).

Measures end-to-end self-play on this machine with a small net: positions/s, network
evaluations/s and search simulations/s, the ratio of evaluations/s in self-play to the same
network's standalone throughput, the server's round-trip latency seen by the actors, and the
mean batch fill. On a GPU the net is ResNet-40 in bf16. The server runs the production
evaluator, built by the function the main job calls
(`amazons.neural.served.server_evaluator_factory`: the model `prepare_for_inference` makes,
autocast at the resolved precision, on a GPU CUDA graphs over batch buckets up to the server's
`inference_batch_size`).

On a CPU the suite runs twice, the server on the torch backend and on the compiled native one
(`InferenceConfig.backend`), the keys under `selfplay.torch.` and `selfplay.native.`, and
`selfplay.native_over_torch.{sims_per_s,positions_per_s}` their ratios; on a GPU once, under
`selfplay.` (the torch backend).

`selfplay.evals_ratio_to_standalone` = `selfplay.evals_per_s` / `selfplay.standalone_evals_per_s`:
leaves evaluated per second in self-play (every leaf the searches sent to the server, over the
timed games' wall time) over the same production evaluator's rate standalone, in this process,
**at the configured `inference_batch_size`** (full batches, each one call of `evaluate`: features,
forward, priors of every legal move, copy back) **on the leaves the server evaluated** (a uniform
sample of them, `STANDALONE_BATCHES` batches, recorded by the server's evaluator; not the search
roots, whose move counts differ). An under-filled server (mean batch below
`inference_batch_size`), the round trips and the actors' search time all lower it: 1.0 means
self-play gets everything the network can give at that batch size.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from amazons import engine
from amazons.mcts import Evaluator, SearchConfig
from amazons.neural.checkpoint import save_model
from amazons.neural.model import PolicyValueNet, net_config, resolve_precision
from amazons.neural.native import native_available
from amazons.neural.served import NetworkEvaluatorFactory, server_evaluator_factory
from amazons.serving.server import InferenceConfig, InferenceServer
from amazons.train.selfplay import SelfPlayConfig, SelfPlayWorkers

STANDALONE_BATCHES = 16  # full batches of recorded leaves the standalone figure cycles through


class LeafRecorder:
    """The server's evaluator, unchanged, keeping a uniform sample of the leaves it evaluates
    (reservoir sampling, `capacity` rows) and saving it to `path` when the server closes it.

    Only `(B, 3) uint64` positions are copied per call; every attribute but `evaluate` and
    `close` is the wrapped evaluator's (`load_weights`, `graph_captures`, ...).
    """

    def __init__(self, evaluator: Evaluator, path: str, capacity: int, seed: int = 0) -> None:
        self.evaluator = evaluator
        self.path = path
        self.sample = np.zeros((capacity, 3), dtype=np.uint64)
        self.seen = 0
        self.rng = np.random.default_rng(seed)

    def evaluate(self, positions: np.ndarray, moves: np.ndarray,
                 move_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        capacity = self.sample.shape[0]
        index = self.seen + np.arange(positions.shape[0])
        fill = index < capacity
        self.sample[index[fill]] = positions[fill]
        slots = (self.rng.random(int((~fill).sum())) * (index[~fill] + 1)).astype(np.int64)
        kept = slots < capacity
        self.sample[slots[kept]] = positions[~fill][kept]
        self.seen += positions.shape[0]
        return self.evaluator.evaluate(positions, moves, move_offsets)

    def close(self) -> None:
        """Save the sample (`min(seen, capacity)` rows) atomically to `path`."""
        with open(f"{self.path}.part", "wb") as file:
            np.save(file, self.sample[:min(self.seen, self.sample.shape[0])])
        os.replace(f"{self.path}.part", self.path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.evaluator, name)


@dataclass(frozen=True)
class LeafRecordingFactory:
    """Builds `factory`'s evaluator inside a `LeafRecorder` (picklable, for the server process)."""

    factory: NetworkEvaluatorFactory
    path: str
    capacity: int

    def __call__(self) -> LeafRecorder:
        return LeafRecorder(self.factory(), self.path, self.capacity)


def standalone_evals_per_s(model_path: str, device: str, inference: InferenceConfig,
                           leaves: np.ndarray, seconds: float) -> float:
    """The production evaluator's rate in this process, built as the server builds it
    (`server_evaluator_factory` with `inference`), on `leaves` `(N, 3) uint64` (non-terminal,
    N >= `inference.inference_batch_size`) in full batches of `inference.inference_batch_size`,
    cycling for `seconds`.

    Raises:
        RuntimeError: fewer leaves than one batch.
    """
    batch = inference.inference_batch_size
    evaluator = server_evaluator_factory(model_path, device, "auto", inference)()
    batches = []
    for first in range(0, leaves.shape[0] - batch + 1, batch):
        chunk = np.ascontiguousarray(leaves[first:first + batch])
        batches.append((chunk, *engine.legal_moves(chunk)))
    if not batches:
        raise RuntimeError(f"the server evaluated {leaves.shape[0]} leaves, "
                           f"fewer than one batch of {batch}")
    evaluator.evaluate(*batches[0])
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        evaluator.evaluate(*batches[calls % len(batches)])
        calls += 1
    return calls * batch / (time.perf_counter() - started)


def measure(device: str, preset: str, actors: int, games_in_parallel: int, simulations: int,
            batch: int, games: int, standalone_s: float, prefix: str = "selfplay",
            backend: str = "auto") -> dict[str, float]:
    """Self-play through the shared-memory server on `device`: `actors` processes x
    `games_in_parallel` games of `simulations` simulations (K = 4 leaves per game), the server's
    batch up to `batch` rows, `games` timed games after a warm-up of one game per actor; then the
    standalone figure at batch `batch` over the leaves the server evaluated, for `standalone_s`
    seconds; the server's network on `backend` (`InferenceConfig.backend`).

    Returns the figures under `<prefix>.` (see the module docstring)."""
    torch.set_num_threads(1)
    leaves = 4
    search = SearchConfig(simulations=simulations, leaves_per_game=leaves, root_noise=True,
                          temperature_moves=10, node_capacity=1024, edge_capacity=1 << 17)
    with tempfile.TemporaryDirectory() as folder:
        model_path = str(Path(folder) / "model.pt")
        torch.manual_seed(0)
        save_model(model_path, PolicyValueNet(net_config(preset)))
        inference = InferenceConfig(inference_batch_size=batch, backend=backend)
        leaves_path = str(Path(folder) / "leaves.npy")
        factory = LeafRecordingFactory(
            server_evaluator_factory(model_path, device, "auto", inference), leaves_path,
            STANDALONE_BATCHES * batch)
        config = SelfPlayConfig(num_actors=actors, games_in_parallel=games_in_parallel,
                                search=search, start_jitter_s=0.0)
        with InferenceServer(factory, actors, inference) as server:
            with SelfPlayWorkers(server, config) as workers:
                # warm-up: imports, JIT cache
                workers.play(actors, lambda samples, texts: None, iteration=0)
                played: list[np.ndarray] = []
                report = workers.play(
                    games, lambda samples, texts: played.extend(game.positions for game in samples),
                    iteration=1)
            stats_before = dict(server.stats)
        server_stats = server.stats or stats_before
        sampled = np.load(leaves_path)
        leaves_sampled = sampled.shape[0]
        standalone = standalone_evals_per_s(model_path, device, inference, sampled, standalone_s)
    round_trips = sum(stats["round_trips"] for stats in report.actor_stats)
    waited = sum(stats["round_trip_seconds"] for stats in report.actor_stats)
    print(f"{prefix}: net {preset}, backend {backend}, {resolve_precision('auto', device)}, "
          f"{actors} actors x {games_in_parallel} games, {simulations} simulations, "
          f"K = {leaves}, batch {batch}")
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
        f"{prefix}.mean_game_plies": (sum(positions.shape[0] for positions in played)
                                      / max(report.games, 1)),
        f"{prefix}.standalone_leaves": float(leaves_sampled),
        f"{prefix}.standalone_batch": float(batch),
        f"{prefix}.actors": float(actors),
    }


def run(quick: bool) -> dict[str, float]:
    """Measure the suite; see the module docstring for the keys."""
    gpu = torch.cuda.is_available()
    actors, games_in_parallel = (12, 64) if gpu else (2, 16)
    games = (actors * games_in_parallel) if not quick else actors * 2
    device, preset = ("cuda", "resnet40") if gpu else ("cpu", "tiny")
    args = (device, preset, actors, games_in_parallel, 200 if gpu else 48,
            min(256, actors * games_in_parallel * 4), games, 2.0 if quick else 5.0)
    if gpu:
        return measure(*args)
    # On a CPU both backends of the server, one after the other in this sitting.
    metrics: dict[str, float] = {}
    for backend in ("torch", "native") if native_available() else ("torch",):
        metrics.update(measure(*args, prefix=f"selfplay.{backend}", backend=backend))
    if native_available():
        for what in ("sims_per_s", "positions_per_s"):
            metrics[f"selfplay.native_over_torch.{what}"] = (metrics[f"selfplay.native.{what}"]
                                                             / metrics[f"selfplay.torch.{what}"])
    return metrics
