"""The rules engine per board size, and 8x8 against another build of it.

    python benchmarks/engine_sizes.py                      # perft(2) and move listing per size
    python benchmarks/engine_sizes.py --against ../other   # 8x8: this tree's amazons._engine
                                                           # against another checkout's build

Per size, from a start of four amazons a side on the edges, Black on the top and side edges,
White mirrored below (8x8: Botzone's start; 9x9 and 10x10: N // 3 squares in from the corners,
10x10's standard start; 6x6 and 7x7: one square in): perft(2) and its leaf moves per second,
and `engine.legal_moves` on 256 copies of the start, each the fastest of 10 calls.

With `--against`, the two 8x8 modules (`amazons/_engine*.so` of this tree and of the other
one, built) are loaded side by side in one process and timed alternately in 5 rounds, each
round keeping each module's fastest of a few calls; the figure is the median of the 5 rounds:
perft(2) and perft(3) from the start, and `legal_moves_batch` and `features_batch` (7 planes) on
256 positions of seeded uniformly random games (0 to 39 plies from the start).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from amazons import engine  # noqa: E402


def edge_start(size: int) -> np.ndarray:
    """A canonical start `(3 * W,) uint64`, Black to move (see the module's docstring)."""
    if size == 8:
        return engine.start_position()
    inset = size // 3 if size >= 9 else size // 3 - 1
    black = [(0, inset), (inset, 0), (size - 1 - inset, 0), (size - 1, inset)]
    white = [(x, size - 1 - y) for x, y in black]
    state = engine.rules(size).State()
    state.set_position(sum(1 << (y * size + x) for x, y in black),
                       sum(1 << (y * size + x) for x, y in white), 0, 0, 0)
    position = np.empty(engine.geometry(size).position_width, np.uint64)
    state.canonical_into(position)
    return position


def fastest_time(call, calls: int) -> float:
    """The fastest of `calls` calls, in seconds: what an undisturbed core does on a shared
    machine (another job's time slice lengthens some calls, never shortens one)."""
    fastest = float("inf")
    for _ in range(calls):
        begin = time.perf_counter()
        call()
        fastest = min(fastest, time.perf_counter() - begin)
    return fastest


def per_size() -> None:
    """Print perft(2) and move-listing throughput for every size."""
    for size in engine.BOARD_SIZES:
        start = edge_start(size)
        batch = np.repeat(start.reshape(1, -1), 256, axis=0)
        out_moves = np.empty((256 * engine.geometry(size).max_moves, 3), np.int32)
        out_offsets = np.empty(257, np.int64)
        leaves = engine.perft_position(start, 2, size=size)
        perft = fastest_time(lambda start=start, size=size: engine.perft_position(start, 2,
                                                                                  size=size), 10)
        listing = fastest_time(lambda batch=batch, out_moves=out_moves, out_offsets=out_offsets,
                               size=size: engine.legal_moves(batch, out_moves, out_offsets,
                                                             size=size), 10)
        print(f"{size}x{size}: perft(2) {leaves:,} in {perft * 1e3:.2f} ms "
              f"({leaves / perft:.2e} leaf moves/s); legal_moves on 256 copies of the start: "
              f"{int(out_offsets[-1]) / listing:.2e} moves/s")


def load_engine(root: Path, tag: str):
    """The built 8x8 module `amazons/_engine*.so` under `root`, under a name of its own."""
    paths = glob.glob(str(root / "amazons" / "_engine.cpython-*.so"))
    if not paths:
        raise SystemExit(f"no built amazons/_engine under {root}")
    spec = importlib.util.spec_from_file_location(f"amazons_{tag}._engine", paths[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def against(other_root: Path) -> None:
    """Print 8x8 timings of another build (`other`) and this tree's (`this`), side by side."""
    modules = {"other": load_engine(other_root, "other"),
               "this": load_engine(Path(__file__).resolve().parents[1], "this")}
    rules = modules["this"]
    start = engine.start_position()
    rng = np.random.default_rng(7)
    buffer = np.empty((rules.MAX_MOVES, 3), np.int32)
    offsets = np.empty(2, np.int64)
    rows = []
    while len(rows) < 256:
        position = start.reshape(1, 3).copy()
        for _ in range(int(rng.integers(0, 40))):
            total = rules.legal_moves_batch(position, buffer, offsets)
            if total == 0:
                break
            child = np.empty_like(position)
            rules.apply_moves_batch(position, buffer[rng.integers(total)].reshape(1, 3).copy(),
                                    child)
            position = child
        rows.append(position[0])
    positions = np.ascontiguousarray(np.stack(rows))
    out_moves = np.empty((256 * rules.MAX_MOVES, 3), np.int32)
    out_offsets = np.empty(257, np.int64)
    planes = np.empty((256, 7, 8, 8), np.float32)
    cases = {
        "perft(2) from the start": (lambda m: m.perft_position(start, 2), 20),
        "perft(3) from the start": (lambda m: m.perft_position(start, 3), 2),
        "legal_moves_batch, 256 positions": (
            lambda m: m.legal_moves_batch(positions, out_moves, out_offsets), 20),
        "features_batch (7 planes), 256 positions": (
            lambda m: m.features_batch(positions, planes), 20),
    }
    for name, (call, inner) in cases.items():
        rounds: dict[str, list[float]] = {tag: [] for tag in modules}
        for _ in range(5):
            for tag, module in modules.items():
                rounds[tag].append(fastest_time(lambda call=call, module=module: call(module),
                                                inner))
        other, this = (float(np.median(rounds[tag])) * 1e3 for tag in ("other", "this"))
        print(f"{name}: other {other:.3f} ms, this {this:.3f} ms, this / other {this / other:.3f}")


def main() -> None:
    """Run the per-size figures, or the 8x8 comparison with `--against`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path,
                        help="another checkout whose built 8x8 amazons._engine to compare with")
    arguments = parser.parse_args()
    if arguments.against is None:
        per_size()
    else:
        against(arguments.against)


if __name__ == "__main__":
    main()
