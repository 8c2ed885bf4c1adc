"""The `Evaluator` protocol: what the search asks of anything that scores positions.

It lives apart from the search (`amazons.mcts`, which loads Numba and LLVM) so that modules that
only name the protocol, or implement it, load numpy alone: the inference server and its clients
(`amazons.inference`), the learner, the network evaluators (`amazons.net`, `amazons.npnet`) and the
web board. `amazons.mcts` re-exports both names.

Imports numpy only.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Evaluator", "EvaluatorError"]


class EvaluatorError(ValueError):
    """An evaluator returned arrays of the wrong shape or dtype, or values out of range."""


@runtime_checkable
class Evaluator(Protocol):
    """Scores leaf positions for the search; implementations must not keep the input arrays."""

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Priors over each position's legal moves and a value for its side to move.

        Args:
            positions: `(B, 3) uint64` canonical leaf positions, none of them terminal.
            moves: `(M, 3) int32` canonical legal moves of all positions, concatenated.
            move_offsets: `(B + 1,) int64`; position i owns `moves[move_offsets[i]:move_offsets[i + 1]]`.

        Returns:
            `(priors, values)`: `priors` `(M,) float32`, summing to 1 over each position's moves;
            `values` `(B,) float32` in [-1, 1], for the side to move at each position.
        """
        ...
