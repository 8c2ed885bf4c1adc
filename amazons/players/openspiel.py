"""OpenSpiel's C++ `MCTSBot` with random rollouts as an arena opponent: `openspiel-mcts`.

OpenSpiel (pip package `open-spiel`, the `bench` extra) plays Amazons as three decisions by the
same player: the amazon's cell, its landing cell, the arrow cell, each `row * 8 + column` with
row 0 at the bottom of Botzone's picture, so Botzone `(x, y)` is cell `(7 - y) * 8 + x`; its
player 0 is Black. The player replays the game so far into an OpenSpiel state and asks the bot
for the three decisions in turn, giving each a third of the move's time budget (or
`simulations` simulations each). Spec: `openspiel-mcts` or `openspiel-mcts:N` (N rollouts per
leaf), built by `amazons.players.factory`. It plays Botzone's 8x8 start (`botzone8`) only; another
board is refused by name. This module imports `pyspiel` only when a player is built.
"""

from __future__ import annotations

from amazons.board import Board, Move
from amazons.players.player import BasePlayer, PlayerError

__all__ = ["OpenSpielMCTSPlayer", "cell_of", "square_of"]

UCT_C = 2.0  # OpenSpiel's default exploration constant for its MCTS examples
MAX_MEMORY_MB = 1000
DEFAULT_SIMULATIONS = 1000  # per decision, when neither simulations nor a time budget is given


def cell_of(square: int) -> int:
    """OpenSpiel cell of a Botzone square `y * 8 + x`."""
    x, y = square % 8, square // 8
    return (7 - y) * 8 + x


def square_of(cell: int) -> int:
    """Botzone square `y * 8 + x` of an OpenSpiel cell."""
    row, column = divmod(cell, 8)
    return (7 - row) * 8 + column


class OpenSpielMCTSPlayer(BasePlayer):
    """OpenSpiel's MCTSBot (UCT, random-rollout evaluator, solver on).

    Args:
        simulations: simulations per decision (three decisions per move); ignored with a budget.
        time_budget: seconds per move, split evenly over the three decisions.
        rollouts: random rollouts per leaf evaluation.
        seed: seeds the bot and its rollouts.

    Raises:
        PlayerError: `pyspiel` is not installed, or a bad argument.
    """

    def __init__(self, simulations: int | None = None, time_budget: float | None = None,
                 rollouts: int = 1, seed: int = 0, name: str = "openspiel-mcts") -> None:
        try:
            import pyspiel
        except ImportError:
            raise PlayerError(
                "openspiel-mcts needs the open-spiel package (pip install open-spiel)") from None
        if time_budget is not None and not time_budget > 0:
            raise PlayerError(f"time_budget must be > 0 seconds, got {time_budget}")
        if simulations is not None and simulations < 1:
            raise PlayerError(f"simulations must be >= 1, got {simulations}")
        if rollouts < 1:
            raise PlayerError(f"rollouts must be >= 1, got {rollouts}")
        self.name = name
        self._pyspiel = pyspiel
        self._game = pyspiel.load_game("amazons", {"board_size": 8})
        evaluator = pyspiel.RandomRolloutEvaluator(rollouts, seed)
        if time_budget is not None:
            self._bot = pyspiel.MCTSBot(self._game, evaluator, UCT_C, 10**9, MAX_MEMORY_MB, True,
                                        seed, False, pyspiel.ChildSelectionPolicy.UCT,
                                        time_budget / 3.0)
        else:
            self._bot = pyspiel.MCTSBot(self._game, evaluator, UCT_C,
                                        simulations or DEFAULT_SIMULATIONS, MAX_MEMORY_MB, True,
                                        seed, False)

    def choose_move(self, board: Board) -> Move:
        """The bot's move on `board` (the game is replayed from the start into OpenSpiel)."""
        if board.is_game_over():
            raise PlayerError("the game is over: the side to move has no legal move")
        if board.start is None or board.start.name != "botzone8":
            raise PlayerError(f"{self.name} plays Botzone's 8x8 board (botzone8) only, not "
                              f"{board.start.label() if board.start else board.size}")
        state = self._game.new_initial_state()
        for move in board.move_stack:
            for square in move.as_tuple():
                state.apply_action(cell_of(square))
        squares = []
        for _ in range(3):
            action = self._bot.step(state)
            squares.append(square_of(action))
            state.apply_action(action)
        move = Move(*squares)
        if move.as_tuple() not in {legal.as_tuple() for legal in board.legal_moves()}:
            raise PlayerError(
                f"OpenSpiel's MCTSBot chose {move.to_botzone()}, which is not legal here")
        return move
