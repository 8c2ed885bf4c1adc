"""Canonical form and the 8 symmetries of the board, as square permutations.

Everything here is pure numpy and never calls the engine: augmentation of training data
(positions, sparse move labels, per-square and per-square-pair label tables) is one vectorized
gather per call, whatever the batch size.

* `SYMMETRIES[k, s]` is the image of square `s` under transform `k` (`(8, 64) int64`);
  transform 0 is the identity, `INVERSE[k]` undoes transform `k`.
* The canonical frame is the side to move's view: for White the board is rotated 180 degrees
  (square `s` -> `63 - s`, i.e. `(r, c) -> (7 - r, 7 - c)`) and the colours swapped. Canonical
  and real moves map onto each other with the same `63 - s` on all three squares; the map is an
  involution.

Imports nothing from the package.
"""

from __future__ import annotations

import numpy as np

BLACK, WHITE = 0, 1
NUM_SYMMETRIES = 8

# Each transform as a map (x, y) -> (x', y') on the 8x8 board, x = column, y = row.
_TRANSFORMS = (
    ("identity", lambda x, y: (x, y)),
    ("rotate90", lambda x, y: (7 - y, x)),
    ("rotate180", lambda x, y: (7 - x, 7 - y)),
    ("rotate270", lambda x, y: (y, 7 - x)),
    ("flip_x", lambda x, y: (7 - x, y)),
    ("flip_y", lambda x, y: (x, 7 - y)),
    ("transpose", lambda x, y: (y, x)),
    ("anti_transpose", lambda x, y: (7 - y, 7 - x)),
)
SYMMETRY_NAMES = tuple(name for name, _ in _TRANSFORMS)


def _build_tables() -> tuple[np.ndarray, np.ndarray]:
    squares = np.arange(64)
    xs, ys = squares % 8, squares // 8
    table = np.empty((NUM_SYMMETRIES, 64), dtype=np.int64)
    for index, (_, transform) in enumerate(_TRANSFORMS):
        new_x, new_y = transform(xs, ys)
        table[index] = new_y * 8 + new_x
    inverse = np.empty(NUM_SYMMETRIES, dtype=np.int64)
    for index in range(NUM_SYMMETRIES):
        composed = table[:, table[index]]  # composed[j, s] = table[j, table[index, s]]
        inverse[index] = int(np.flatnonzero((composed == squares).all(axis=1))[0])
    table.setflags(write=False)
    inverse.setflags(write=False)
    return table, inverse


SYMMETRIES, INVERSE = _build_tables()
# INVERSE_PERMUTATIONS[k] = SYMMETRIES[INVERSE[k]]: where each square's content comes from.
INVERSE_PERMUTATIONS = SYMMETRIES[INVERSE]


class SymmetryError(ValueError):
    """A symmetry index or an array passed to a transform is invalid."""


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


def transform_squares(squares: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Map square indices through transform `k` (scalar, or one per leading row)."""
    squares = np.asarray(squares)
    k = _indices(k, squares.shape[0] if squares.ndim else None)
    if k.ndim == 0:
        return SYMMETRIES[k][squares]
    return SYMMETRIES[k.reshape((-1,) + (1,) * (squares.ndim - 1)), squares]


def transform_moves(moves: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Map `(N, 3)` (src, dst, arrow) moves through transform `k` (scalar or `(N,)`); same dtype."""
    moves = np.asarray(moves)
    if moves.ndim != 2 or moves.shape[1] != 3:
        raise SymmetryError(f"moves must have shape (N, 3), got {moves.shape}")
    return transform_squares(moves, k).astype(moves.dtype, copy=False)


def transform_square_labels(labels: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Move per-square values `(..., 64)` with the board.

    `out[..., SYMMETRIES[k, s]] = labels[..., s]`; `k` is a scalar or one index per row of the
    leading axis.
    """
    labels = np.asarray(labels)
    if labels.shape[-1:] != (64,):
        raise SymmetryError(f"square labels must end in a 64 axis, got shape {labels.shape}")
    k = _indices(k, labels.shape[0] if labels.ndim > 1 else None)
    if k.ndim == 0:
        return labels[..., INVERSE_PERMUTATIONS[k]]
    if labels.ndim < 2:
        raise SymmetryError("per-row symmetry indices need labels with a leading batch axis "
                            "(B, ..., 64)")
    sources = INVERSE_PERMUTATIONS[k].reshape((k.shape[0],) + (1,) * (labels.ndim - 2) + (64,))
    return np.take_along_axis(labels, np.broadcast_to(sources, labels.shape), axis=-1)


def transform_pair_labels(labels: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Move per-square-pair tables `(..., 64, 64)`, e.g. (src, dst) or (dst, arrow), with the board.

    `out[..., SYMMETRIES[k, a], SYMMETRIES[k, b]] = labels[..., a, b]`; `k` is a scalar or one
    index per row of the leading axis.
    """
    labels = np.asarray(labels)
    if labels.shape[-2:] != (64, 64):
        raise SymmetryError(f"pair labels must end in (64, 64) axes, got shape {labels.shape}")
    k = _indices(k, labels.shape[0] if labels.ndim > 2 else None)
    if k.ndim == 0:
        sources = INVERSE_PERMUTATIONS[k]
        return labels[..., sources[:, None], sources[None, :]]
    if labels.ndim != 3:
        raise SymmetryError("per-row symmetry indices need labels of shape (B, 64, 64)")
    sources = INVERSE_PERMUTATIONS[k]
    rows = np.arange(labels.shape[0])[:, None, None]
    return labels[rows, sources[:, :, None], sources[:, None, :]]


def transform_positions(positions: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Map `(B, 3) uint64` bitboard positions through transform `k` (scalar or `(B,)`)."""
    positions = np.asarray(positions)
    if positions.dtype != np.uint64 or positions.ndim != 2 or positions.shape[1] != 3:
        raise SymmetryError(
            f"positions must be (B, 3) uint64, got {positions.shape} {positions.dtype.name}"
        )
    count = positions.shape[0]
    k = _indices(k, count)
    as_bytes = np.ascontiguousarray(positions.astype("<u8", copy=False)).view(np.uint8)
    bits = np.unpackbits(as_bytes.reshape(count, 3, 8), axis=-1, bitorder="little")
    if k.ndim == 0:
        moved = bits[..., INVERSE_PERMUTATIONS[k]]
    else:
        sources = np.broadcast_to(INVERSE_PERMUTATIONS[k][:, None, :], bits.shape)
        moved = np.take_along_axis(bits, sources, axis=-1)
    packed = np.packbits(moved, axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8").reshape(count, 3).astype(np.uint64)


def canonical_to_real(moves: np.ndarray, turn: int) -> np.ndarray:
    """Real-frame moves from canonical ones for the side `turn` to move (identity for Black)."""
    if turn not in (BLACK, WHITE):
        raise SymmetryError(f"turn must be 0 (black) or 1 (white), got {turn}")
    moves = np.asarray(moves)
    return moves.copy() if turn == BLACK else (63 - moves).astype(moves.dtype, copy=False)


real_to_canonical = canonical_to_real  # the 180-degree rotation is its own inverse
