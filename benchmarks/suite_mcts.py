"""Search speed: simulations per second of `BatchedSearch` with the uniform evaluator (tree work plus
the engine's batch calls, no network), at the start and at mid-game positions, for G = 1 and G = 64
games per process, against the naive pure-Python MCTS of `tests/naive_mcts.py` on the same
positions, in the same run, and with the Gumbel root (`root="gumbel"`, sequential halving) at
mid-game for G = 64. One process, one core (no threads anywhere on this path).

Rates are simulations per CPU-second of this process (`time.process_time`), i.e. per core: the
figures then hold on a shared machine too. `mcts.wall_sims_per_s_mid_g64` gives the wall-clock
rate of the same run for comparison (equal on an idle machine).

Mid-game positions are the positions after 20 seeded uniformly random plies (about 180 legal
moves each on average); every game of a batch gets its own.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from naive_mcts import NaiveMCTS  # noqa: E402

from amazons import engine  # noqa: E402
from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator  # noqa: E402

MID_GAME_PLIES = 20
LEAVES_PER_GAME = 8


def mid_game_positions(count: int, seed: int = 2024) -> np.ndarray:
    """`(count, 3) uint64`: positions after MID_GAME_PLIES random plies (seeded, none terminal)."""
    rng = np.random.default_rng(seed)
    positions = np.repeat(engine.start_position().reshape(1, 3), count, axis=0)
    for _ in range(MID_GAME_PLIES):
        moves, offsets = engine.legal_moves(positions)
        counts = np.diff(offsets)
        picks = offsets[:-1] + (rng.random(count) * counts).astype(np.int64)
        children = engine.apply_moves(positions, np.ascontiguousarray(moves[picks]))
        keep = engine.is_terminal(children)
        positions = np.where(keep[:, None], positions, children)
    return positions


def batched_rate(positions: np.ndarray, simulations: int, repeats: int, root: str = "puct") -> tuple[float, float]:
    """Best simulations per CPU-second (and per wall second) over `repeats` fresh searches."""
    config = SearchConfig(simulations=simulations, leaves_per_game=LEAVES_PER_GAME, root=root,
                          edge_capacity=1 << 18, edge_capacity_max=1 << 20)
    search = BatchedSearch(UniformEvaluator(), config, num_games=positions.shape[0], seed=0)
    search.set_roots(positions)
    search.search(simulations)  # grows the arrays to their working size; not timed
    best, best_wall = 0.0, 0.0
    for _ in range(repeats):
        search.set_roots(positions)
        started, started_wall = time.process_time(), time.perf_counter()
        stats = search.search(simulations)
        best = max(best, stats.simulations / (time.process_time() - started))
        best_wall = max(best_wall, stats.simulations / (time.perf_counter() - started_wall))
    return best, best_wall


def naive_rate(positions: np.ndarray, simulations: int) -> float:
    """Simulations per CPU-second of the naive MCTS, one position after the other."""
    config = SearchConfig(simulations=simulations, leaves_per_game=LEAVES_PER_GAME)
    started = time.process_time()
    for position in positions:
        NaiveMCTS(UniformEvaluator(), config, position).search(simulations)
    return positions.shape[0] * simulations / (time.process_time() - started)


def run(quick: bool) -> dict[str, float]:
    """Measure; returns `mcts.*` metrics (simulations per second and speed-up ratios)."""
    start_sims, mid_sims, repeats = (50, 200, 1) if quick else (200, 800, 3)
    start = engine.start_position().reshape(1, 3)
    mid = mid_game_positions(64)
    batched_rate(mid[:2], 16, 1)  # Numba kernels load or compile here, outside the clocks

    mid_g64, mid_g64_wall = batched_rate(mid, mid_sims, repeats)
    metrics = {
        "mcts.sims_per_s_start_g1": batched_rate(start, start_sims, repeats)[0],
        "mcts.sims_per_s_start_g64": batched_rate(np.repeat(start, 64, axis=0), start_sims,
                                                  repeats)[0],
        "mcts.sims_per_s_mid_g1": batched_rate(mid[:1], mid_sims, repeats)[0],
        "mcts.sims_per_s_mid_g64": mid_g64,
        "mcts.wall_sims_per_s_mid_g64": mid_g64_wall,
        "mcts.sims_per_s_mid_g64_gumbel": batched_rate(mid, mid_sims, repeats, root="gumbel")[0],
        "mcts.naive_sims_per_s_start": naive_rate(start, start_sims if quick else 100),
        "mcts.naive_sims_per_s_mid": naive_rate(mid[: 1 if quick else 3], mid_sims),
        "mcts.mid_game_legal_moves": float(engine.count_legal_moves(mid).mean()),
    }
    metrics["mcts.speedup_vs_naive"] = (
        metrics["mcts.sims_per_s_mid_g64"] / metrics["mcts.naive_sims_per_s_mid"])
    metrics["mcts.speedup_vs_naive_g1"] = (
        metrics["mcts.sims_per_s_mid_g1"] / metrics["mcts.naive_sims_per_s_mid"])
    metrics["mcts.speedup_vs_naive_start_g1"] = (
        metrics["mcts.sims_per_s_start_g1"] / metrics["mcts.naive_sims_per_s_start"])
    return metrics
