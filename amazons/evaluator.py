"""The `Evaluator` protocol: what the search asks of anything that scores positions, and the
batch it is handed (`check_batch`, which every evaluator that checks its input calls).

It lives apart from the search (`amazons.mcts`, which loads Numba and LLVM) so that modules that
only name the protocol, or implement it, load numpy alone: the inference server and its clients
(`amazons.serving.server`), the learner, the network evaluators (`amazons.neural.model`,
`amazons.neural.numpy_net`) and the web board. `amazons.mcts` re-exports both names.

Board sizes (6..10): an evaluator tied to one size says so in an attribute `board_size: int`, and
hands its `size` to the checks here; positions are `(B, 3 * W) uint64` with `W` 64-bit words per
bitboard (the N*N squares' bits, 64 a word: 1 up to 8x8, 2 above; `amazons.engine.geometry`),
squares `0 .. N*N - 1`.

Imports numpy only.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Evaluator",
    "EvaluatorError",
    "EvaluatorInputError",
    "check_batch",
    "check_positions",
    "describe_array",
    "position_width",
]


class EvaluatorError(ValueError):
    """An evaluator returned arrays of the wrong shape or dtype, or values out of range."""


class EvaluatorInputError(ValueError):
    """A batch handed to an evaluator breaks the protocol's contract (`check_batch`)."""


def describe_array(array: object) -> str:
    """What an input error names when an array is not what was asked: its shape and dtype, or
    the type of what came instead."""
    if isinstance(array, np.ndarray):
        return f"shape {array.shape} dtype {array.dtype}"
    return type(array).__name__


def position_width(size: int) -> int:
    """uint64 words of a position row of a `size x size` board: three bitboards of
    `ceil(size * size / 64)` words each (3 up to 8x8, 6 on 9x9 and 10x10)."""
    return 3 * ((size * size + 63) // 64)


def check_positions(positions: np.ndarray, size: int = 8) -> None:
    """Refuse `positions` unless it is a `(B, 3 * W) uint64` array of a `size x size` board
    (`position_width`: `(B, 3)` up to 8x8, `(B, 6)` above).

    Raises:
        EvaluatorInputError: naming what `positions` is instead, and the board size.
    """
    width = position_width(size)
    if not isinstance(positions, np.ndarray) or positions.dtype != np.uint64 \
            or positions.ndim != 2 or positions.shape[1] != width:
        raise EvaluatorInputError(
            f"positions must be a (B, {width}) uint64 array on a {size}x{size} board, got "
            f"{describe_array(positions)}")


def check_batch(positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray,
                size: int = 8) -> None:
    """Refuse a batch that breaks `Evaluator.evaluate`'s contract on a `size x size` board: its
    dtypes and shapes (`check_positions`), offsets that rise from 0 to the number of moves,
    squares 0 .. size*size - 1. Whether the positions and moves are legal is the caller's to
    know (the native evaluator refuses those it cannot hold).

    Raises:
        EvaluatorInputError: naming the array and what is wrong with it.
    """
    check_positions(positions, size)
    if not isinstance(moves, np.ndarray) or moves.dtype != np.int32 or moves.ndim != 2 \
            or moves.shape[1] != 3:
        raise EvaluatorInputError(
            f"moves must be an (M, 3) int32 array, got {describe_array(moves)}")
    rows = positions.shape[0]
    if not isinstance(move_offsets, np.ndarray) or move_offsets.dtype != np.int64 \
            or move_offsets.shape != (rows + 1,):
        raise EvaluatorInputError(
            f"move_offsets must be a ({rows + 1},) int64 array, got {describe_array(move_offsets)}")
    if move_offsets[0] != 0 or move_offsets[-1] != moves.shape[0] \
            or np.any(np.diff(move_offsets) < 0):
        raise EvaluatorInputError(
            f"move_offsets must rise from 0 to {moves.shape[0]} (the number of moves), "
            f"got {move_offsets[0]}..{move_offsets[-1]}")
    squares = size * size
    if moves.size and (moves.min() < 0 or moves.max() >= squares):
        raise EvaluatorInputError(
            f"moves on a {size}x{size} board must hold squares 0..{squares - 1}, "
            f"got {moves.min()}..{moves.max()}")


@runtime_checkable
class Evaluator(Protocol):
    """Scores leaf positions for the search; implementations must not keep the input arrays.

    An evaluator tied to one board size has an attribute `board_size: int` (6..10; 8 for every
    evaluator built without one), and `amazons.mcts.BatchedSearch` searches that size with it
    (another size is refused). One that works on any size (uniform priors) may lack it.
    """

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Priors over each position's legal moves and a value for its side to move.

        Args:
            positions: `(B, 3 * W) uint64` canonical leaf positions of the evaluator's board
                size (`W` 64-bit words per bitboard: `(B, 3)` up to 8x8, `(B, 6)` on 9x9 and
                10x10), none of them terminal.
            moves: `(M, 3) int32` canonical legal moves of all positions, concatenated (squares
                below N*N).
            move_offsets: `(B + 1,) int64`; position i owns
                `moves[move_offsets[i]:move_offsets[i + 1]]`.

        Returns:
            `(priors, values)`: `priors` `(M,) float32`, summing to 1 over each position's moves;
            `values` `(B,) float32` in [-1, 1], for the side to move at each position.
        """
        ...
