"""OpenSpiel's C++ `MCTSBot` with random rollouts as an arena opponent: `openspiel-mcts`.

OpenSpiel (pip package `open-spiel`, the `bench` extra) plays Amazons on 6x6, 8x8 and 10x10 as
three decisions by the same player: the amazon's cell, its landing cell, the arrow cell, each
`row * N + column`, its player 0 moving first. Its starts are `openspiel6`, `openspiel8` and
`standard10` square for square (`amazons.boards`), and Botzone's `botzone8` with the rows
flipped (Botzone's Black, on top, moves first), so Botzone `(x, y)` is cell `(7 - y) * 8 + x`
there. The player replays the game so far into an OpenSpiel state and asks the bot for the three
decisions in turn, giving each a third of the move's time budget (or `simulations` simulations
each). Spec: `openspiel-mcts` or `openspiel-mcts:N` (N rollouts per leaf), built by
`amazons.players.factory`. It plays those four boards; another is refused by name. This module
imports `pyspiel` only when a player is built.
"""

from __future__ import annotations

from amazons.board import Board, Move
from amazons.players.player import BasePlayer, PlayerError

__all__ = ["OPENSPIEL_BOARDS", "OpenSpielMCTSPlayer", "cell_of", "square_of"]

UCT_C = 2.0  # OpenSpiel's default exploration constant for its MCTS examples
MAX_MEMORY_MB = 1000
DEFAULT_SIMULATIONS = 1000  # per decision, when neither simulations nor a time budget is given


# The boards OpenSpiel's `amazons` plays, and whether its rows are Botzone's flipped.
OPENSPIEL_BOARDS = {"botzone8": True, "openspiel8": False, "openspiel6": False,
                    "standard10": False}


def cell_of(square: int, size: int = 8, flip: bool = True) -> int:
    """OpenSpiel cell of a Botzone square `y * N + x` (`flip`: botzone8's rows upside down)."""
    x, y = square % size, square // size
    return ((size - 1 - y) if flip else y) * size + x


def square_of(cell: int, size: int = 8, flip: bool = True) -> int:
    """Botzone square `y * N + x` of an OpenSpiel cell (`cell_of`'s inverse)."""
    row, column = divmod(cell, size)
    return ((size - 1 - row) if flip else row) * size + column


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
        self._settings = (simulations, time_budget, rollouts, seed)
        self._bots: dict[int, tuple[object, object]] = {}  # size -> (game, bot)

    def _bot_for(self, size: int) -> tuple[object, object]:
        """OpenSpiel's game of `size` and the bot on it, built on first use."""
        if size not in self._bots:
            pyspiel = self._pyspiel
            simulations, time_budget, rollouts, seed = self._settings
            game = pyspiel.load_game("amazons", {"board_size": size})
            evaluator = pyspiel.RandomRolloutEvaluator(rollouts, seed)
            if time_budget is not None:
                bot = pyspiel.MCTSBot(game, evaluator, UCT_C, 10**9, MAX_MEMORY_MB, True, seed,
                                      False, pyspiel.ChildSelectionPolicy.UCT, time_budget / 3.0)
            else:
                bot = pyspiel.MCTSBot(game, evaluator, UCT_C, simulations or DEFAULT_SIMULATIONS,
                                      MAX_MEMORY_MB, True, seed, False)
            self._bots[size] = (game, bot)
        return self._bots[size]

    def choose_move(self, board: Board) -> Move:
        """The bot's move on `board` (the game is replayed from the start into OpenSpiel)."""
        if board.is_game_over():
            raise PlayerError("the game is over: the side to move has no legal move")
        name = board.start.name if board.start is not None else ""
        if name not in OPENSPIEL_BOARDS:
            label = (board.start.label() if board.start is not None
                     else f"a {board.size}x{board.size} position without a named start")
            raise PlayerError(f"{self.name} plays OpenSpiel's boards "
                              f"({', '.join(OPENSPIEL_BOARDS)}) only, not {label}")
        size, flip = board.size, OPENSPIEL_BOARDS[name]
        game, bot = self._bot_for(size)
        state = game.new_initial_state()
        for move in board.move_stack:
            for square in move.as_tuple():
                state.apply_action(cell_of(square, size, flip))
        squares = []
        for _ in range(3):
            action = bot.step(state)
            squares.append(square_of(action, size, flip))
            state.apply_action(action)
        move = Move(*squares, size=size)
        if move.as_tuple() not in {legal.as_tuple() for legal in board.legal_moves()}:
            raise PlayerError(
                f"OpenSpiel's MCTSBot chose {move.to_botzone()}, which is not legal here")
        return move
