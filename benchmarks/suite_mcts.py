"""Search speed: simulations per second of `BatchedSearch` with the uniform evaluator (tree work
plus the engine's batch calls, no network), at the start and at mid-game positions, for G = 1 and
G = 64 games per process, and the naive pure-Python MCTS of `tests/naive_mcts.py` doing the same
work, and with the Gumbel root (`root="gumbel"`, sequential halving) at mid-game for G = 64. One
process, one core (no threads anywhere on this path).

Rates are simulations per CPU-second of this process (`time.process_time`), i.e. per core: the
figures then hold on a shared machine too. `mcts.wall_sims_per_s_mid_g64` gives the wall-clock
rate of the same run for comparison (equal on an idle machine).

Mid-game positions are the positions after 20 seeded uniformly random plies (about 180 legal
moves each on average); every game of a batch gets its own.

Against the naive search, like for like: the same 64 mid-game positions, the same simulations per
position, the same evaluator and settings, and the same visits (the suite checks that every
root's visit counts agree), timed with the same statistic (the best of `repeats` runs):
* `mcts.speedup_vs_naive`: one game at a time (`BatchedSearch` with G = 1, the 64 positions one
  after the other) against the naive search one game at a time;
* `mcts.speedup_vs_naive_batched`: the 64 games in lockstep (G = 64, one search call, as
  self-play runs) against the same naive searches;
* `mcts.speedup_vs_naive_start`: the start position, one game, each side.
The `BatchedSearch` objects are built once and reused (`set_roots` clears their trees), as
self-play reuses them; `mcts.first_search_s_mid_g64` is the first search of a fresh G = 64
object, which also pays for the operating system handing over its arrays' pages.
`mcts.standard10_sims_per_s_mid_g64` is the G = 64 mid-game rate on the standard 10x10 game
(ply 20 of random games from its start, about 600 legal moves each).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from naive_mcts import NaiveMCTS  # noqa: E402

from amazons import Board, engine  # noqa: E402
from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator  # noqa: E402

MID_GAME_PLIES = 20
LEAVES_PER_GAME = 8


def mid_game_positions(count: int, seed: int = 2024, start: np.ndarray | None = None,
                       size: int = 8) -> np.ndarray:
    """`(count, 3 * W) uint64`: positions after MID_GAME_PLIES random plies (seeded, none
    terminal) from `start` (the Botzone start by default) on a `size x size` board."""
    rng = np.random.default_rng(seed)
    start = engine.start_position() if start is None else start
    positions = np.repeat(start.reshape(1, -1), count, axis=0)
    for _ in range(MID_GAME_PLIES):
        moves, offsets = engine.legal_moves(positions, size=size)
        counts = np.diff(offsets)
        picks = offsets[:-1] + (rng.random(count) * counts).astype(np.int64)
        children = engine.apply_moves(positions, np.ascontiguousarray(moves[picks]), size=size)
        keep = engine.is_terminal(children, size=size)
        positions = np.where(keep[:, None], positions, children)
    return positions


def batched_rate(positions: np.ndarray, simulations: int, repeats: int,
                 root: str = "puct", size: int = 8) -> tuple[float, float]:
    """Best simulations per CPU-second (and per wall second) over `repeats` fresh searches."""
    config = SearchConfig(simulations=simulations, leaves_per_game=LEAVES_PER_GAME, root=root,
                          edge_capacity=1 << 18, edge_capacity_max=1 << 20)
    search = BatchedSearch(UniformEvaluator(), config, num_games=positions.shape[0], seed=0,
                           size=size)
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


def naive_search(positions: np.ndarray, simulations: int) -> tuple[float, list[np.ndarray]]:
    """CPU seconds of the naive MCTS over `positions`, one after the other, and each
    root's visits."""
    config = SearchConfig(simulations=simulations, leaves_per_game=LEAVES_PER_GAME)
    visits = []
    started = time.process_time()
    for position in positions:
        naive = NaiveMCTS(UniformEvaluator(), config, position)
        naive.search(simulations)
        visits.append(naive.root_visits())
    return time.process_time() - started, visits


def root_visits(search: BatchedSearch, game: int) -> np.ndarray:
    """Visit counts of every root edge of `game`, in move order."""
    tree = search.tree
    first, count = int(tree.node_first_edge[game, 0]), int(tree.node_edge_count[game, 0])
    return tree.edge_visits[game, first:first + count].astype(np.int64)


def like_for_like(positions: np.ndarray, simulations: int, repeats: int) -> dict[str, float]:
    """The naive search, G = 1 one game at a time and G = 64 in lockstep, on the same positions.

    Raises:
        RuntimeError: the searches did not visit the same moves (they would not be doing the same
            work, so their times could not be compared).
    """
    config = SearchConfig(simulations=simulations, leaves_per_game=LEAVES_PER_GAME)
    single = BatchedSearch(UniformEvaluator(), config, num_games=1, seed=0)
    lockstep = BatchedSearch(UniformEvaluator(), config, num_games=positions.shape[0], seed=0)
    lockstep.set_roots(positions)
    started = time.perf_counter()
    lockstep.search(simulations)
    first_search = time.perf_counter() - started
    naive_best = single_best = lockstep_best = float("inf")
    for _ in range(repeats):
        seconds, naive_visits = naive_search(positions, simulations)
        naive_best = min(naive_best, seconds)
        started = time.process_time()
        single_visits = []
        for position in positions:
            single.set_roots(position.reshape(1, 3))
            single.search(simulations)
            single_visits.append(root_visits(single, 0))
        single_best = min(single_best, time.process_time() - started)
        lockstep.set_roots(positions)
        started = time.process_time()
        lockstep.search(simulations)
        lockstep_best = min(lockstep_best, time.process_time() - started)
        for game, expected in enumerate(naive_visits):
            if not (np.array_equal(single_visits[game], expected)
                    and np.array_equal(root_visits(lockstep, game), expected)):
                raise RuntimeError(f"position {game}: BatchedSearch and the naive search visited "
                                   "different moves, so they did not do the same work")
    total = positions.shape[0] * simulations
    return {
        "mcts.naive_sims_per_s_mid": total / naive_best,
        "mcts.same_work_sims_per_s_mid_g1": total / single_best,
        "mcts.same_work_sims_per_s_mid_g64": total / lockstep_best,
        "mcts.speedup_vs_naive": naive_best / single_best,
        "mcts.speedup_vs_naive_batched": naive_best / lockstep_best,
        "mcts.first_search_s_mid_g64": first_search,
        "mcts.same_work_positions": float(positions.shape[0]),
        "mcts.same_work_simulations": float(simulations),
    }


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
        "mcts.mid_game_legal_moves": float(engine.count_legal_moves(mid).mean()),
    }
    # The standard 10x10 game: the same search at ply 20 of random games from its start.
    standard = mid_game_positions(64, start=Board(start="standard10").canonical_position(),
                                  size=10)
    metrics["mcts.standard10_sims_per_s_mid_g64"] = batched_rate(standard, mid_sims, repeats,
                                                                 size=10)[0]
    metrics["mcts.standard10_mid_game_legal_moves"] = float(
        engine.count_legal_moves(standard, size=10).mean())
    same_positions = mid[:16] if quick else mid
    metrics.update(like_for_like(same_positions, 50 if quick else 200, 1 if quick else 2))
    naive_start, _ = naive_search(start, start_sims)
    single_start = float("inf")
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=start_sims,
                                                            leaves_per_game=LEAVES_PER_GAME))
    for _ in range(repeats):
        search.set_roots(start)
        started = time.process_time()
        search.search(start_sims)
        single_start = min(single_start, time.process_time() - started)
    metrics["mcts.naive_sims_per_s_start"] = start_sims / naive_start
    metrics["mcts.speedup_vs_naive_start"] = naive_start / single_start
    return metrics


def profile_per_game(simulations: int = 200, top: int = 15) -> None:
    """Print where one-game-at-a-time search spends its time (`cProfile`, the same 64 positions
    and simulations as `mcts.speedup_vs_naive`), grouped by module, then the top functions."""
    import cProfile
    import pstats

    positions = mid_game_positions(64)
    config = SearchConfig(simulations=simulations, leaves_per_game=LEAVES_PER_GAME)
    search = BatchedSearch(UniformEvaluator(), config, num_games=1, seed=0)
    search.set_roots(positions[:1])
    search.search(16)  # kernels load outside the profile

    def one_game_at_a_time() -> None:
        for position in positions:
            search.set_roots(position.reshape(1, 3))
            search.search(simulations)

    profiler = cProfile.Profile()
    profiler.runcall(one_game_at_a_time)
    stats = pstats.Stats(profiler)
    groups: dict[str, float] = {}
    for (filename, _, function), (_, _, own, _, _) in stats.stats.items():
        if "mcts_numba" in filename:
            group = "Numba kernels (amazons/mcts_numba.py)"
        elif filename.endswith("amazons/engine.py") or "_engine" in function:
            group = "engine wrappers and batch calls (amazons/engine.py, _engine)"
        elif filename.endswith("amazons/mcts.py"):
            group = "search glue (amazons/mcts.py, evaluator included)"
        elif "numpy" in filename or filename == "~":
            group = "numpy and builtins called from the glue"
        else:
            group = "other"
        groups[group] = groups.get(group, 0.0) + own
    total = sum(groups.values())
    print(f"{positions.shape[0]} positions x {simulations} simulations, one game at a time: "
          f"{total:.3f} s under the profiler")
    for group, seconds in sorted(groups.items(), key=lambda item: -item[1]):
        print(f"  {100 * seconds / total:5.1f}%  {group}")
    stats.sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    profile_per_game()
