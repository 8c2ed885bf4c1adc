"""Canonical form and the 8 symmetries of the board, as square permutations, on every size.

Everything here is pure numpy and never calls the engine: augmentation of training data
(positions, sparse move labels, per-square and per-square-pair label tables) is one vectorized
gather per call, whatever the batch size.

* `symmetry_tables(size)` gives, for an `size x size` board, `table[k, s]`: the image of square `s`
  under transform `k` (`(8, size * size) int64`), and `inverse[k]`, the transform that undoes `k`.
  Transform 0 is the identity. `SYMMETRIES` and `INVERSE` are the 8x8 tables.
* The canonical frame is the side to move's view: for White the board is rotated 180 degrees
  (square `s` -> `N * N - 1 - s`, i.e. `(r, c) -> (N - 1 - r, N - 1 - c)`) and the colours
  swapped. Canonical and real moves map onto each other with the same `N * N - 1 - s` on all
  three squares; the map is an involution.
* Functions whose input does not show the size (square indices, moves, bitboard positions of one
  64-bit word) take `size=8`; label tables carry it in their last axes (`N * N`).

Imports nothing from the package.
"""

from __future__ import annotations

from functools import cache

import numpy as np

BLACK, WHITE = 0, 1
NUM_SYMMETRIES = 8
MIN_SIZE, MAX_SIZE = 6, 10

# Each transform as a map (x, y) -> (x', y') on an n x n board, x = column, y = row; `m = n - 1`.
_TRANSFORMS = (
    ("identity", lambda x, y, m: (x, y)),
    ("rotate90", lambda x, y, m: (m - y, x)),
    ("rotate180", lambda x, y, m: (m - x, m - y)),
    ("rotate270", lambda x, y, m: (y, m - x)),
    ("flip_x", lambda x, y, m: (m - x, y)),
    ("flip_y", lambda x, y, m: (x, m - y)),
    ("transpose", lambda x, y, m: (y, x)),
    ("anti_transpose", lambda x, y, m: (m - y, m - x)),
)
SYMMETRY_NAMES = tuple(name for name, _ in _TRANSFORMS)


class SymmetryError(ValueError):
    """A symmetry index, a board size or an array passed to a transform is invalid."""


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) \
            or not MIN_SIZE <= size <= MAX_SIZE:
        raise SymmetryError(f"board size must be an integer {MIN_SIZE}..{MAX_SIZE}, got {size!r}")
    return int(size)


@cache
def symmetry_tables(size: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(table, inverse, inverse_permutations)` of the `size x size` board, read-only.

    `table[k, s]` is the image of square `s` under transform `k`; `inverse[k]` undoes `k`;
    `inverse_permutations[k] = table[inverse[k]]` says where each square's content comes from.
    """
    size = _check_size(size)
    squares = np.arange(size * size)
    xs, ys = squares % size, squares // size
    table = np.empty((NUM_SYMMETRIES, size * size), dtype=np.int64)
    for index, (_, transform) in enumerate(_TRANSFORMS):
        new_x, new_y = transform(xs, ys, size - 1)
        table[index] = new_y * size + new_x
    inverse = np.empty(NUM_SYMMETRIES, dtype=np.int64)
    for index in range(NUM_SYMMETRIES):
        composed = table[:, table[index]]  # composed[j, s] = table[j, table[index, s]]
        inverse[index] = int(np.flatnonzero((composed == squares).all(axis=1))[0])
    sources = table[inverse]
    for array in (table, inverse, sources):
        array.setflags(write=False)
    return table, inverse, sources


SYMMETRIES, INVERSE, INVERSE_PERMUTATIONS = symmetry_tables(8)


def _size_of_squares(count: int, what: str, shape: tuple) -> int:
    size = int(round(count ** 0.5))
    if size * size != count or not MIN_SIZE <= size <= MAX_SIZE:
        raise SymmetryError(f"{what} must end in an N*N axis for a board of size "
                            f"{MIN_SIZE}..{MAX_SIZE}, got shape {shape}")
    return size


def _indices(k: int | np.ndarray, rows: int | None) -> np.ndarray:
    k = np.asarray(k)
    if not np.issubdtype(k.dtype, np.integer):
        raise SymmetryError(f"symmetry index must be an integer, got dtype {k.dtype}")
    if k.size and (k.min() < 0 or k.max() >= NUM_SYMMETRIES):
        raise SymmetryError(f"symmetry index must be in 0..7, got {k.min()}..{k.max()}")
    if k.ndim == 0:
        return k.astype(np.int64)
    if k.ndim != 1 or (rows is not None and k.shape[0] != rows):
        raise SymmetryError(f"per-row symmetry indices must have shape ({rows},), got {k.shape}")
    return k.astype(np.int64)


def transform_squares(squares: np.ndarray, k: int | np.ndarray, size: int = 8) -> np.ndarray:
    """Map square indices of a `size x size` board through transform `k` (scalar, or one per
    leading row)."""
    table = symmetry_tables(size)[0]
    squares = np.asarray(squares)
    k = _indices(k, squares.shape[0] if squares.ndim else None)
    if k.ndim == 0:
        return table[k][squares]
    return table[k.reshape((-1,) + (1,) * (squares.ndim - 1)), squares]


def transform_moves(moves: np.ndarray, k: int | np.ndarray, size: int = 8) -> np.ndarray:
    """Map `(M, 3)` (src, dst, arrow) moves through transform `k` (scalar or `(M,)`); same dtype."""
    moves = np.asarray(moves)
    if moves.ndim != 2 or moves.shape[1] != 3:
        raise SymmetryError(f"moves must have shape (M, 3), got {moves.shape}")
    return transform_squares(moves, k, size).astype(moves.dtype, copy=False)


def transform_square_labels(labels: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Move per-square values `(..., N * N)` with the board (the size is the last axis's root).

    `out[..., table[k, s]] = labels[..., s]`; `k` is a scalar or one index per row of the
    leading axis.
    """
    labels = np.asarray(labels)
    if labels.ndim < 1:
        raise SymmetryError(f"square labels must have a square axis, got shape {labels.shape}")
    squares = labels.shape[-1]
    sources_table = symmetry_tables(_size_of_squares(squares, "square labels", labels.shape))[2]
    k = _indices(k, labels.shape[0] if labels.ndim > 1 else None)
    if k.ndim == 0:
        return labels[..., sources_table[k]]
    if labels.ndim < 2:
        raise SymmetryError("per-row symmetry indices need labels with a leading batch axis "
                            "(B, ..., N*N)")
    sources = sources_table[k].reshape((k.shape[0],) + (1,) * (labels.ndim - 2) + (squares,))
    return np.take_along_axis(labels, np.broadcast_to(sources, labels.shape), axis=-1)


def transform_pair_labels(labels: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Move per-square-pair tables `(..., N * N, N * N)`, e.g. (src, dst) or (dst, arrow), with the
    board.

    `out[..., table[k, a], table[k, b]] = labels[..., a, b]`; `k` is a scalar or one index per row
    of the leading axis.
    """
    labels = np.asarray(labels)
    if labels.ndim < 2 or labels.shape[-1] != labels.shape[-2]:
        raise SymmetryError(f"pair labels must end in two N*N axes, got shape {labels.shape}")
    sources_table = symmetry_tables(
        _size_of_squares(labels.shape[-1], "pair labels", labels.shape))[2]
    k = _indices(k, labels.shape[0] if labels.ndim > 2 else None)
    if k.ndim == 0:
        sources = sources_table[k]
        return labels[..., sources[:, None], sources[None, :]]
    if labels.ndim != 3:
        raise SymmetryError("per-row symmetry indices need labels of shape (B, N*N, N*N)")
    sources = sources_table[k]
    rows = np.arange(labels.shape[0])[:, None, None]
    return labels[rows, sources[:, :, None], sources[:, None, :]]


def position_words(size: int) -> int:
    """64-bit words per bitboard of a `size x size` board: 1 up to 8x8, 2 above."""
    return 1 if _check_size(size) <= 8 else 2


def transform_positions(positions: np.ndarray, k: int | np.ndarray, size: int = 8) -> np.ndarray:
    """Map `(B, 3 * W) uint64` bitboard positions of a `size x size` board through transform `k`
    (scalar or `(B,)`); `W` = `position_words(size)` words per bitboard, low word first."""
    words = position_words(size)
    positions = np.asarray(positions)
    if positions.dtype != np.uint64 or positions.ndim != 2 or positions.shape[1] != 3 * words:
        raise SymmetryError(
            f"positions of a {size}x{size} board must be (B, {3 * words}) uint64, got "
            f"{positions.shape} {positions.dtype.name}"
        )
    count, squares = positions.shape[0], size * size
    sources_table = symmetry_tables(size)[2]
    k = _indices(k, count)
    as_bytes = np.ascontiguousarray(positions.astype("<u8", copy=False)).view(np.uint8)
    bits = np.unpackbits(as_bytes.reshape(count, 3, 8 * words), axis=-1, bitorder="little")
    if k.ndim == 0:
        moved = bits[..., sources_table[k]]
    else:
        sources = np.broadcast_to(sources_table[k][:, None, :], (count, 3, squares))
        moved = np.take_along_axis(bits[..., :squares], sources, axis=-1)
    padded = np.zeros((count, 3, 64 * words), dtype=np.uint8)
    padded[..., :squares] = moved
    packed = np.packbits(padded, axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8").reshape(count, 3 * words).astype(np.uint64)


def canonical_to_real(moves: np.ndarray, turn: int, size: int = 8) -> np.ndarray:
    """Real-frame moves from canonical ones for the side `turn` to move (identity for Black)."""
    if turn not in (BLACK, WHITE):
        raise SymmetryError(f"turn must be 0 (black) or 1 (white), got {turn}")
    moves = np.asarray(moves)
    if turn == BLACK:
        return moves.copy()
    last = _check_size(size) ** 2 - 1
    return (last - moves).astype(moves.dtype, copy=False)


real_to_canonical = canonical_to_real  # the 180-degree rotation is its own inverse
