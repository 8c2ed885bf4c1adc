"""Checked batch entry points over the Cython rules engine, for every board size.

Each function checks dtypes and shapes once, allocates the output when none is given, and calls
the `nogil` kernel of the size's rules module (`amazons._engine` for 8x8, `amazons._engine6`,
`_engine7`, `_engine9`, `_engine10` for the others: one source, docs/engine.md "Board sizes"),
which writes straight into the numpy buffers (no copies, no per-move Python objects). Positions
are canonical: `(B, 3 * W) uint64` rows `[MINE, THEIRS, ARROWS]` of W words per bitboard (W = 1
up to 8x8, 2 on 9x9 and 10x10), from the side to move's view (see docs/ARCHITECTURE.md). Every
batch call takes `size` (keyword, default 8); the module-level constants below are 8x8's, and
`geometry(size)` gives any size's.

Imports only the compiled rules modules.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from amazons import _engine

POSITION_DTYPE = np.uint64
MOVE_DTYPE = np.int32
OFFSET_DTYPE = np.int64
MINE, THEIRS, ARROWS = 0, 1, 2
NUM_SQUARES = 64
MAX_MOVES = _engine.MAX_MOVES  # 2,916: the 8x8 upper bound on legal moves in one position
FEATURE_PLANES = (3, 7)
BOARD_SIZES = (6, 7, 8, 9, 10)


class EngineInputError(ValueError):
    """An array passed to a batch call has the wrong dtype, shape or contents, or a size is not
    one of `BOARD_SIZES`."""


@dataclass(frozen=True)
class Geometry:
    """The numbers of one board size, read from its rules module.

    Attributes:
        size: N, squares per row and per column; square `y * N + x`.
        words: uint64 words per bitboard in a position row (1 for N <= 8, else 2).
        num_squares: N * N.
        queen_reach: the most squares a queen reaches on the empty board (8x8: 27).
        max_moves: upper bound on the legal moves of a position with 4 amazons a side,
            4 * queen_reach ** 2 (8x8: 2,916); `B * max_moves` rows always hold a batch's moves.
        max_game_plies: N * N - 8, the longest game from a start with 4 amazons a side.
        position_width: uint64 columns of a canonical position row, 3 * words.
    """

    size: int
    words: int
    num_squares: int
    queen_reach: int
    max_moves: int
    max_game_plies: int
    position_width: int


_RULES: dict[int, ModuleType] = {8: _engine}
# The other sizes' modules, imported on first use (each name written out, for the layer rule).
_LOADERS = {
    6: lambda: importlib.import_module("amazons._engine6"),
    7: lambda: importlib.import_module("amazons._engine7"),
    9: lambda: importlib.import_module("amazons._engine9"),
    10: lambda: importlib.import_module("amazons._engine10"),
}
_GEOMETRIES: dict[int, Geometry] = {}


def rules(size: int = 8) -> ModuleType:
    """The compiled rules module of `size` (`amazons._engine` for 8, `amazons._engine<size>`).

    Raises:
        EngineInputError: if `size` is not one of `BOARD_SIZES`.
    """
    module = _RULES.get(size)
    if module is None:
        if size not in _LOADERS:
            raise EngineInputError(f"size must be one of {BOARD_SIZES}, got {size!r}")
        module = _RULES[size] = _LOADERS[size]()
    return module


def geometry(size: int = 8) -> Geometry:
    """The `Geometry` of `size` (squares, words, move bounds), from its rules module.

    Raises:
        EngineInputError: if `size` is not one of `BOARD_SIZES`.
    """
    found = _GEOMETRIES.get(size)
    if found is None:
        module = rules(size)
        found = _GEOMETRIES[size] = Geometry(
            size=module.BOARD_SIZE, words=module.WORDS, num_squares=module.NUM_SQUARES,
            queen_reach=module.QUEEN_REACH, max_moves=module.MAX_MOVES,
            max_game_plies=module.MAX_GAME_PLIES, position_width=3 * module.WORDS)
    return found


def _require(array: object, name: str, dtype: type, ndim: int,
             shape: tuple | None = None) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise EngineInputError(f"{name} must be a numpy array, got {type(array).__name__}")
    if array.dtype != dtype:
        raise EngineInputError(
            f"{name} must have dtype {np.dtype(dtype).name}, got {array.dtype.name}")
    if array.ndim != ndim:
        raise EngineInputError(f"{name} must have {ndim} dimensions, got shape {array.shape}")
    if shape is not None:
        for axis, (actual, expected) in enumerate(zip(array.shape, shape, strict=True)):
            if expected is not None and actual != expected:
                raise EngineInputError(
                    f"{name} has shape {array.shape}; axis {axis} must be {expected}"
                )
    if not array.flags.c_contiguous:
        raise EngineInputError(f"{name} must be C-contiguous")
    return array


def _off_board_rows(positions: np.ndarray, size: int) -> np.ndarray:
    """Rows of `(B, 3 * W) uint64` positions with a bit at or above N * N (none exist on 8x8)."""
    squares = size * size
    top_words = positions[:, 1::2] if squares > 64 else positions
    return np.flatnonzero((top_words >> np.uint64(squares % 64)).any(axis=1))


def _positions(positions: np.ndarray, name: str = "positions", size: int = 8) -> np.ndarray:
    """Check a batch of canonical positions of `size`; a single row becomes a batch of one.

    On sizes other than 8 (where every bit of the word is a square), a row with a bit off the
    board is refused: one vectorized pass over the batch.
    """
    width = 3 if size == 8 else geometry(size).position_width
    if isinstance(positions, np.ndarray) and positions.ndim == 1 and positions.shape == (width,):
        positions = positions.reshape(1, width)
    positions = _require(positions, name, POSITION_DTYPE, 2, (None, width))
    if size != 8:
        bad = _off_board_rows(positions, size)
        if bad.size:
            raise EngineInputError(
                f"{name}[{bad[0]}] has bits at or above square {size * size} of a "
                f"{size}x{size} board ({bad.size} such rows)")
    return positions


def _output(out: np.ndarray | None, name: str, dtype: type, shape: tuple) -> np.ndarray:
    if out is None:
        return np.empty(shape, dtype=dtype)
    return _require(out, name, dtype, len(shape), shape)


def start_position() -> np.ndarray:
    """The Botzone start as a canonical position, `(3,) uint64` (Black to move)."""
    position = np.empty(3, dtype=POSITION_DTYPE)
    _engine.State().canonical_into(position)
    return position


def legal_moves(
    positions: np.ndarray,
    out_moves: np.ndarray | None = None,
    out_offsets: np.ndarray | None = None,
    *,
    size: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """Legal moves of a batch of canonical positions, concatenated (CSR layout).

    Args:
        positions: `(B, 3 * W) uint64` canonical positions (or one `(3 * W,)` position).
        out_moves: optional `(capacity, 3) int32` buffer; `B * geometry(size).max_moves` rows
            always suffice (8x8: `MAX_MOVES`).
        out_offsets: optional `(B + 1,) int64` buffer.
        size: the board size N.

    Returns:
        `(moves, offsets)`: `moves` is a `(M, 3) int32` view of `out_moves` with (src, dst, arrow)
        rows in each position's canonical frame; position `i` owns rows
        `offsets[i]:offsets[i + 1]`.

    Raises:
        EngineInputError: on a wrong dtype or shape, or when `out_moves` is too small (the
            message gives the number of rows needed).
    """
    positions = _positions(positions, size=size)
    module = rules(size)
    count = positions.shape[0]
    offsets = _output(out_offsets, "out_offsets", OFFSET_DTYPE, (count + 1,))
    if out_moves is None:
        counts = np.empty(count, dtype=np.int32)
        module.count_moves_batch(positions, counts)
        out_moves = np.empty((int(counts.sum()), 3), dtype=MOVE_DTYPE)
    else:
        _require(out_moves, "out_moves", MOVE_DTYPE, 2, (None, 3))
    total = module.legal_moves_batch(positions, out_moves, offsets)
    if total > out_moves.shape[0]:
        raise EngineInputError(
            f"out_moves holds {out_moves.shape[0]} rows but the positions have {total} legal moves"
        )
    return out_moves[:total], offsets


def count_legal_moves(positions: np.ndarray, out: np.ndarray | None = None, *,
                      size: int = 8) -> np.ndarray:
    """Number of legal moves of each canonical position, `(B,) int32`, without listing them."""
    positions = _positions(positions, size=size)
    out = _output(out, "out", np.int32, (positions.shape[0],))
    rules(size).count_moves_batch(positions, out)
    return out


def is_terminal(positions: np.ndarray, out: np.ndarray | None = None, *,
                size: int = 8) -> np.ndarray:
    """Whether the side to move has no legal move (and so has lost), `(B,) bool`.

    Needs only each amazon's neighbourhood: no move is enumerated.
    """
    positions = _positions(positions, size=size)
    out = _output(out, "out", np.bool_, (positions.shape[0],))
    rules(size).terminal_batch(positions, out.view(np.uint8))
    return out


def winning_moves(
    positions: np.ndarray, moves: np.ndarray, offsets: np.ndarray, out: np.ndarray | None = None,
    *, size: int = 8,
) -> np.ndarray:
    """Which legal moves leave the opponent without a move (immediate wins), `(M,) bool`.

    Args:
        positions: `(B, 3 * W) uint64` canonical positions.
        moves: `(M, 3) int32` their legal moves, concatenated as `legal_moves` returns them.
        offsets: `(B + 1,) int64` CSR offsets: position `i` owns rows `offsets[i]:offsets[i + 1]`.
        out: optional `(M,) bool` buffer.
        size: the board size N.

    Raises:
        EngineInputError: on a wrong dtype or shape, or offsets that do not fit the moves.
    """
    positions = _positions(positions, size=size)
    _require(moves, "moves", MOVE_DTYPE, 2, (None, 3))
    _require(offsets, "offsets", OFFSET_DTYPE, 1, (positions.shape[0] + 1,))
    out = _output(out, "out", np.bool_, (moves.shape[0],))
    try:
        rules(size).winning_moves_batch(positions, moves, offsets, out.view(np.uint8))
    except ValueError as error:
        raise EngineInputError(str(error)) from None
    return out


def apply_moves(
    positions: np.ndarray, moves: np.ndarray, out: np.ndarray | None = None, *, size: int = 8
) -> np.ndarray:
    """Canonical children: position `i` after canonical move `moves[i]`, from the opponent's view.

    Raises:
        EngineInputError: on a wrong dtype or shape, or an illegal move (the row is named).
    """
    positions = _positions(positions, size=size)
    moves = _require(moves, "moves", MOVE_DTYPE, 2, (positions.shape[0], 3))
    out = _output(out, "out", POSITION_DTYPE, positions.shape)
    bad = rules(size).apply_moves_batch(positions, moves, out)
    if bad >= 0:
        raise EngineInputError(
            f"moves[{bad}] = {moves[bad].tolist()} is not legal in positions[{bad}]")
    return out


def play_paths(
    root_positions: np.ndarray,
    path_roots: np.ndarray,
    path_moves: np.ndarray,
    path_lengths: np.ndarray,
    out: np.ndarray | None = None,
    *,
    size: int = 8,
) -> np.ndarray:
    """Positions at the ends of paths of canonical moves played from root positions.

    Args:
        root_positions: `(G, 3 * W) uint64` canonical roots.
        path_roots: `(B,) int32`, the root each path starts from.
        path_moves: `(B, L, 3) int32`; path `i` is `path_moves[i, :path_lengths[i]]`, each move in
            the frame of the position it is played from.
        path_lengths: `(B,) int32`, between 0 and L.
        out: optional `(B, 3 * W) uint64` buffer.
        size: the board size N.

    Returns:
        `(B, 3 * W) uint64` canonical positions.

    Raises:
        EngineInputError: on a wrong dtype or shape, a root index or length out of range, or an
            illegal move in a path (the path is named).
    """
    root_positions = _positions(root_positions, "root_positions", size)
    path_roots = _require(path_roots, "path_roots", np.int32, 1)
    count = path_roots.shape[0]
    path_moves = _require(path_moves, "path_moves", MOVE_DTYPE, 3, (count, None, 3))
    path_lengths = _require(path_lengths, "path_lengths", np.int32, 1, (count,))
    out = _output(out, "out", POSITION_DTYPE, (count, root_positions.shape[1]))
    bad = rules(size).play_paths_batch(root_positions, path_roots, path_moves, path_lengths, out)
    if bad >= 0:
        raise EngineInputError(
            f"path {bad} (root {path_roots[bad]}, length {path_lengths[bad]}) "
            f"is out of range or illegal"
        )
    return out


def features(
    positions: np.ndarray, num_planes: int = 7, out: np.ndarray | None = None, *, size: int = 8
) -> np.ndarray:
    """Feature planes of canonical positions, `(B, C, N, N) float32` with C = 3 or 7.

    Plane order (docs/ARCHITECTURE.md): 3-plane set = mine, opponent's, arrows; 7-plane set =
    mine, opponent's, all obstacles, my mobility, opponent's mobility, my shoot potential,
    opponent's shoot potential. `planes[b, c, y, x]` is square `y * N + x`.
    """
    if num_planes not in FEATURE_PLANES:
        raise EngineInputError(f"num_planes must be 3 or 7, got {num_planes}")
    positions = _positions(positions, size=size)
    out = _output(out, "out", np.float32, (positions.shape[0], num_planes, size, size))
    rules(size).features_batch(positions, out)
    return out


def random_rollouts(positions: np.ndarray, seed: int, out: np.ndarray | None = None, *,
                    size: int = 8) -> np.ndarray:
    """Result of one uniformly random playout per position, `(B,) float32` in {-1, +1}.

    The value is for the side to move at each position (+1: it went on to win). Deterministic for
    a given `seed`; different rows use different random streams.
    """
    positions = _positions(positions, size=size)
    out = _output(out, "out", np.float32, (positions.shape[0],))
    rules(size).rollouts_batch(positions, int(seed) % (1 << 64), out)
    return out


def perft_position(position: np.ndarray, depth: int, *, size: int = 8) -> int:
    """perft(depth) of one canonical position `(3 * W,) uint64`: the number of move sequences of
    `depth` plies."""
    width = 3 if size == 8 else geometry(size).position_width
    position = _require(np.ascontiguousarray(position), "position", POSITION_DTYPE, 1, (width,))
    _positions(position.reshape(1, width), "position", size)
    return int(rules(size).perft_position(position, int(depth)))


# Columns of `adjudicate`'s bounds: move counts each side can make alone in its own regions.
MY_LOWER, MY_UPPER, THEIR_LOWER, THEIR_UPPER = 0, 1, 2, 3
EXACT_FILL_SQUARES = _engine.EXACT_FILL_SQUARES  # regions this small get the exhaustive fill search
EXACT_FILL_NODES = _engine.EXACT_FILL_NODES  # node budget of one region's exhaustive search
FILL_TABLE_ENTRIES = _engine.FILL_TABLE_ENTRIES  # transposition entries of one region's search
# room for the moves of one region of EXACT_FILL_SQUARES
EXACT_FILL_MOVES = _engine.EXACT_FILL_MOVES


def adjudicate(
    positions: np.ndarray,
    out_result: np.ndarray | None = None,
    out_bounds: np.ndarray | None = None,
    *,
    size: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """Decide canonical positions whose amazons are separated, when move bounds settle the race.

    A position is separated when no 8-connected region of non-arrow squares (empty squares and
    amazons) holds amazons of both sides: from then on each side plays alone in its regions, and
    every move fills exactly one empty square there. A side can make at most as many moves as
    there are empty squares its amazons reach (the upper bound), and at least as many as a fill
    it really can play: a greedy fill, or, for a region with at most `EXACT_FILL_SQUARES` empty
    squares, an exhaustive search for the longest fill (within `EXACT_FILL_NODES` nodes; when it
    finishes, the region's upper bound is that exact length too). The side to move wins iff it can
    make more moves than the opponent (it moves first; equal counts lose).

    Args:
        positions: `(B, 3 * W) uint64` canonical positions (or one `(3 * W,)` position).
        out_result: optional `(B,) int8` buffer.
        out_bounds: optional `(B, 4) int16` buffer.
        size: the board size N.

    Returns:
        `(result, bounds)`. `result` is `(B,) int8` for the side to move: +1 win (its lower bound
        exceeds the opponent's upper bound), -1 loss (its upper bound is at most the opponent's
        lower bound), 0 undecided (not separated, or the bounds overlap). `bounds` is `(B, 4)
        int16` with columns `MY_LOWER, MY_UPPER, THEIR_LOWER, THEIR_UPPER` (moves each side can
        make alone); all four are -1 when the position is not separated, so
        `bounds[:, MY_LOWER] >= 0` marks the separated positions. The guaranteed margin of a
        decided result, in moves, is `MY_LOWER - THEIR_UPPER` for a win and `THEIR_LOWER -
        MY_UPPER` for a loss (0 then means equal counts: the side to move runs out first).

    Raises:
        EngineInputError: on a wrong dtype or shape.
    """
    positions = _positions(positions, size=size)
    count = positions.shape[0]
    result = _output(out_result, "out_result", np.int8, (count,))
    bounds = _output(out_bounds, "out_bounds", np.int16, (count, 4))
    rules(size).adjudicate_batch(positions, result, bounds)
    return result, bounds



def adjudicated_plies(result: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The plies to the game's end that decided adjudications imply, in the tree's convention (a
    terminal node is lost in 0 plies, a winning move wins in 1).

    The side to move with a moves against b loses in 2a plies (a <= b: after a moves each it is
    stuck) or wins in 2b + 1 (a > b: its move after the opponent's b-th leaves the opponent
    stuck); with the upper bounds for a and b these are bounds, exact where the bounds are. The
    C++ search's `adjudicated_plies` (`amazons/native/adjudicate.h`) is held to this by a test.

    Args:
        result: `(N,)` +1 (the side to move wins) or -1 (it loses), from `adjudicate`.
        bounds: `(N, 4)` its bounds (`engine.MY_LOWER` ... `THEIR_UPPER`).

    Returns:
        `(N,) int32` plies; 0 where `result` is 0 (undecided).
    """
    their_upper = bounds[:, THEIR_UPPER].astype(np.int32)
    my_upper = bounds[:, MY_UPPER].astype(np.int32)
    plies = np.where(result > 0, 2 * their_upper + 1, np.where(result < 0, 2 * my_upper, 0))
    return plies.astype(np.int32)

def territory(positions: np.ndarray, out: np.ndarray | None = None, *,
              size: int = 8) -> np.ndarray:
    """Queen-distance ownership of every square, `(B, N * N) int8`, in each position's canonical
    frame.

    The queen distance of an empty square from a side is the least number of queen moves through
    empty squares that brings one of its amazons there (amazons and arrows block). A square is +1
    where the side to move's distance is strictly smaller, -1 where the opponent's is, and 0 where
    they are equal, where neither side reaches it, and on amazons and arrows.

    Args:
        positions: `(B, 3 * W) uint64` canonical positions (or one `(3 * W,)` position).
        out: optional `(B, N * N) int8` buffer.
        size: the board size N.

    Raises:
        EngineInputError: on a wrong dtype or shape.
    """
    positions = _positions(positions, size=size)
    out = _output(out, "out", np.int8, (positions.shape[0], size * size))
    rules(size).territory_batch(positions, out)
    return out


# Columns of `classical_terms`' output, each from the side to move's view.
(QUEEN_BALANCE, QUEEN_TIES, KING_BALANCE, KING_TIES, MOBILITY, CONTEST) = range(6)
EVAL_TERMS = _engine.EVAL_TERMS


def classical_terms(positions: np.ndarray, out: np.ndarray | None = None, *,
                    size: int = 8) -> np.ndarray:
    """The terms of an Amazong-style evaluation (Lieberum 2005), `(B, EVAL_TERMS) float64`.

    Distances run through empty squares (amazons and arrows block): the queen distance of a square
    from a side is the least number of queen moves that brings one of its amazons there, the king
    distance the least number of king steps. Per position, from the side to move's view:

    * `QUEEN_BALANCE`: empty squares the side to move is strictly queen-closer to, minus those the
      opponent is (Lieberum's t1 without its tie term);
    * `QUEEN_TIES`: empty squares both sides reach at the same queen distance;
    * `KING_BALANCE`, `KING_TIES`: the same with king distances (t2);
    * `MOBILITY`: the one-queen-move reach of each of the mover's amazons, summed, minus the
      opponent's;
    * `CONTEST`: w = sum over empty squares both sides reach of 2^-|D_mine - D_theirs| (queen
      distances): large while the armies are interwoven, 0 once they are separated.

    Balances and mobility change sign when the sides are swapped; ties and `CONTEST` do not.
    `amazons.players.classical` weighs them.

    Args:
        positions: `(B, 3 * W) uint64` canonical positions (or one `(3 * W,)` position).
        out: optional `(B, EVAL_TERMS) float64` buffer.
        size: the board size N.

    Raises:
        EngineInputError: on a wrong dtype or shape.
    """
    positions = _positions(positions, size=size)
    out = _output(out, "out", np.float64, (positions.shape[0], EVAL_TERMS))
    rules(size).classical_terms_batch(positions, out)
    return out
