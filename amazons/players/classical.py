"""A classical (non-neural) player: an Amazong-style evaluation and a selective alpha-beta search.

This is the kind of program that won the Computer Olympiads before networks (Amazong, Invader,
8QP) and the yardstick a model is judged against on any board. It owns the weighting of the
evaluation terms (`ClassicalConfig`, `classical_values`) and the search (`ClassicalPlayer`); the
terms themselves are counted by the engine (`amazons.engine.classical_terms`), which walks the
positions.

The evaluation (after J. Lieberum, "An evaluation function for the game of Amazons", Theoretical
Computer Science 349 (2005), the evaluation of his program Amazong), from the side to move's view:

    t1 = queen balance + tempo * queen ties        (Lieberum's t1, with his tie term kappa)
    t2 = king balance + tempo * king ties          (his t2)
    m  = mobility (the one-move queen reach of my amazons minus theirs)
    p  = w / empty squares, in [0, 1]              (w: Lieberum's contest measure, see the engine)
    value = (1 - p) * late_queen * t1
            + p * (early_queen * t1 + early_king * t2 + early_mobility * m)

Lieberum weighs his terms by functions of w, so that the king-distance term and mobility count
while the armies are interwoven (w large) and queen-distance territory decides once they are
apart (w -> 0); the linear blend in p and the weights of `ClassicalConfig` are this project's
choice in that spirit, not figures from the paper. A side with no legal move has lost: -WIN.

The search: iterative deepening of a negamax alpha-beta, selective as Amazons programs are (the
root of an 8x8 game has up to 2,176 moves). A node expands all its children in one batch (the
engine's move generation, move application and evaluation, each one call), orders them by their
static value, and searches only the best `width` of them deeper (`root_width` at the root); the
last ply is full width, a batch maximum. An immediate win is played at once. The search stops at
`max_depth` or when the time budget is spent; the deepest finished iteration decides, or an
unfinished one where it already found a better move than the last (its first candidate is the last
iteration's best). With a depth limit and no time cut the player is deterministic given its seed,
which breaks ties among equal moves.

Every board size 6..10 is played with the same weights: the terms are counts of squares, so they
scale with the board, and the player reads the size from the board it is given.

Imports numpy, `amazons.engine`, `amazons.board`, `amazons.symmetry` and `players.player`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from amazons import engine
from amazons.board import Board, Move
from amazons.players.player import BasePlayer, PlayerError
from amazons.symmetry import canonical_to_real

__all__ = ["WIN", "ClassicalConfig", "ClassicalPlayer", "classical_values"]

WIN = 1.0e6  # the value of a won position; far above any territory count


@dataclass(frozen=True)
class ClassicalConfig:
    """Weights of the evaluation and limits of the search (see the module doc)."""

    tempo: float = 0.2  # share of a tied square credited to the side to move (Lieberum's kappa)
    late_queen: float = 1.0  # weight of t1 once the armies are apart (p = 0)
    early_queen: float = 0.6  # weight of t1 while they are interwoven (p = 1)
    early_king: float = 0.4  # weight of t2 at p = 1
    early_mobility: float = 0.2  # weight of mobility (squares) at p = 1
    max_depth: int = 5  # plies searched at most (iterative deepening from 1)
    width: int = 8  # children searched deeper at an inner node, the best by static value
    root_width: int = 24  # root moves searched deeper than one ply

    def __post_init__(self) -> None:
        if self.max_depth < 1 or self.width < 1 or self.root_width < 1:
            raise PlayerError(f"classical: max_depth, width and root_width must be >= 1, got "
                              f"{self.max_depth}, {self.width}, {self.root_width}")


def classical_values(positions: np.ndarray, config: ClassicalConfig, size: int = 8) -> np.ndarray:
    """The evaluation of canonical positions `(B, 3 * W) uint64` of a `size x size` board,
    `(B,) float64`, from each side to move's view; -WIN where the side to move has no legal move
    (see the module doc).

    Raises:
        amazons.engine.EngineInputError: on a wrong dtype or shape, or a size without rules.
    """
    terms = engine.classical_terms(positions, size=size)
    geometry = engine.geometry(size)
    positions = positions.reshape(-1, geometry.position_width)
    # every square holds at most one thing, so the set bits of the three bitboards count the
    # occupied squares (of every word; the bits past N*N are never set)
    occupied = np.bitwise_count(positions).sum(axis=1, dtype=np.int64)
    empties = geometry.num_squares - occupied.astype(np.float64)
    phase = np.minimum(1.0, terms[:, engine.CONTEST] / np.maximum(empties, 1.0))
    queen = terms[:, engine.QUEEN_BALANCE] + config.tempo * terms[:, engine.QUEEN_TIES]
    king = terms[:, engine.KING_BALANCE] + config.tempo * terms[:, engine.KING_TIES]
    early = (config.early_queen * queen + config.early_king * king
             + config.early_mobility * terms[:, engine.MOBILITY])
    values = (1.0 - phase) * config.late_queen * queen + phase * early
    values[engine.is_terminal(positions, size=size)] = -WIN
    return values


class _OutOfTime(Exception):
    """The move's time budget ran out inside an iteration."""


class ClassicalPlayer(BasePlayer):
    """Amazong-style evaluation and selective alpha-beta (see the module doc).

    Args:
        config: weights and search limits (default `ClassicalConfig()`).
        time_budget: seconds per move; None searches to `config.max_depth` whatever it takes.
        seed: breaks ties among equally valued moves.
        name: the player's name in the arena.

    Raises:
        PlayerError: a time budget <= 0.
    """

    def __init__(self, config: ClassicalConfig | None = None, time_budget: float | None = 1.0,
                 seed: int | None = None, name: str = "classical") -> None:
        if time_budget is not None and time_budget <= 0:
            raise PlayerError(f"classical: time budget must be > 0, got {time_budget}")
        self.config = config or ClassicalConfig()
        self.time_budget = time_budget
        self.name = name
        self._rng = np.random.default_rng(seed)
        self._deadline = float("inf")
        self._size = 8  # the board side of the move being chosen
        self.last_depth = 0  # deepest iteration that decided the last move
        self.last_value = 0.0  # its value of the move, from the mover's view

    def _expand(self, position: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Moves `(K, 3) int32`, children `(K, 3 * W) uint64` and the children's values from the
        mover's view `(K,) float64` (WIN where the opponent is left without a move), on the
        board of the move being chosen."""
        size = self._size
        root = position[None]
        moves, _ = engine.legal_moves(root, size=size)
        moves = np.ascontiguousarray(moves)
        children = engine.apply_moves(np.repeat(root, moves.shape[0], axis=0), moves, size=size)
        return moves, children, -classical_values(children, self.config, size)

    def _negamax(self, position: np.ndarray, depth: int, alpha: float, beta: float) -> float:
        """The value of `position` for its side to move, searched `depth` >= 1 plies."""
        if time.perf_counter() > self._deadline:
            raise _OutOfTime
        _, children, values = self._expand(position)
        if values.shape[0] == 0:
            return -WIN
        best = float(values.max())
        if depth == 1 or best >= WIN:
            return best
        best = -np.inf
        for index in np.argsort(-values, kind="stable")[:self.config.width]:
            value = -self._negamax(children[index], depth - 1, -beta, -alpha)
            best = max(best, value)
            alpha = max(alpha, value)
            if alpha >= beta:
                break
        return best

    def choose_move(self, board: Board) -> Move:
        """The move the deepest finished search prefers (see the module doc).

        Raises:
            PlayerError: the game is over (the side to move has no legal move).
        """
        start = time.perf_counter()
        self._size = board.size
        self._deadline = start + self.time_budget if self.time_budget is not None else np.inf
        root = board.canonical_position()
        moves, children, values = self._expand(root)
        if moves.shape[0] == 0:
            raise PlayerError("the game is over: the side to move has no legal move")
        equals = np.flatnonzero(values == values.max())
        best = int(equals[self._rng.integers(equals.shape[0])])
        best_value, self.last_depth = float(values[best]), 1
        # the order the next iteration tries the root moves in: the best first, then by value
        order = np.argsort(-values, kind="stable")
        for depth in range(2, self.config.max_depth + 1):
            if best_value >= WIN:
                break
            candidates = [best] + [int(i) for i in order[:self.config.root_width] if i != best]
            alpha, iteration_best = -np.inf, None
            try:
                for index in candidates:
                    value = -self._negamax(children[index], depth - 1, -np.inf, -alpha)
                    if iteration_best is None or value > alpha:
                        alpha, iteration_best = value, index
            except _OutOfTime:
                if iteration_best is not None and iteration_best != best:
                    best, best_value, self.last_depth = iteration_best, alpha, depth
                break
            best, best_value, self.last_depth = iteration_best, alpha, depth
        self.last_value = best_value
        return Move(*canonical_to_real(moves[best], board.turn, board.size).tolist(),
                    size=board.size)
