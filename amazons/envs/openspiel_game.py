"""The Game of the Amazons as an OpenSpiel game on the engine, and conversion to OpenSpiel's own.

`python_amazons` (registered with `pyspiel.register_game` when this module is imported; load it
with `pyspiel.load_game("python_amazons")`) is a sequential, deterministic, perfect-information,
zero-sum game with terminal rewards (+1 / -1): OpenSpiel's algorithms (MCTS, AlphaZero, the
evaluation tools) run on it. Player 0 is Black (moves first), player 1 White, on Botzone's 8x8
board; the rules are the engine's (`amazons.board.Board`).

Actions: one action is one whole move, the flat encoding of `amazons.envs.actions` (33,344
actions, in the acting player's canonical frame: White's are rotated 180 degrees), the same as in
the PettingZoo and Gymnasium environments. `action_to_string` gives the real-frame move in
algebraic notation (`c8-c6/d7`). The observation tensor of a player is its feature planes
(`(C, 8, 8)` float32, C from the game parameter `num_planes`, 7 by default), in its own frame.

OpenSpiel's C++ `amazons` (`pyspiel.load_game("amazons", {"board_size": 8})`) plays the same
game differently:

* one move is three actions by the same player: the amazon's cell, its landing cell, the arrow
  cell (64 actions, each a cell `row * 8 + column`);
* its rows count from the bottom of Botzone's picture: Botzone square `y * 8 + x` is its cell
  `(7 - y) * 8 + x` (`amazons.players.openspiel.cell_of` / `square_of`); its player 0 is Black.

`to_openspiel_amazons` and `from_openspiel_amazons` convert states between the two by replaying
the moves (the C++ game has no way to set up a position), so a state converts when its game was
played from the start, and an OpenSpiel state converts when it is at a move boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyspiel
from open_spiel.python.observation import IIGObserverForPublicInfoGame

from amazons.board import BLACK, Board, IllegalMoveError, Move
from amazons.engine import FEATURE_PLANES
from amazons.envs.actions import (
    ACTION_MOVES,
    NUM_ACTIONS,
    ActionError,
    IllegalActionError,
    action_to_move,
    legal_actions,
    move_to_action,
    observation_planes,
)
from amazons.players.openspiel import cell_of, square_of
from amazons.symmetry import canonical_to_real

__all__ = [
    "CPP_GAME_PARAMETERS",
    "GAME_NAME",
    "AmazonsGame",
    "AmazonsState",
    "ConversionError",
    "from_openspiel_amazons",
    "move_to_openspiel_actions",
    "openspiel_actions_to_move",
    "to_openspiel_amazons",
]

GAME_NAME = "python_amazons"
CPP_GAME_PARAMETERS = {"board_size": 8}  # OpenSpiel's own `amazons`, on Botzone's board
MAX_GAME_LENGTH = 56  # every move fills one of the 56 empty squares with an arrow
DECISIONS_PER_MOVE = 3  # in the C++ game: amazon, landing cell, arrow
DEFAULT_NUM_PLANES = 7

_GAME_TYPE = pyspiel.GameType(
    short_name=GAME_NAME,
    long_name="Python Amazons (Botzone 8x8, amazons engine)",
    dynamics=pyspiel.GameType.Dynamics.SEQUENTIAL,
    chance_mode=pyspiel.GameType.ChanceMode.DETERMINISTIC,
    information=pyspiel.GameType.Information.PERFECT_INFORMATION,
    utility=pyspiel.GameType.Utility.ZERO_SUM,
    reward_model=pyspiel.GameType.RewardModel.TERMINAL,
    max_num_players=2,
    min_num_players=2,
    provides_information_state_string=True,
    provides_information_state_tensor=False,
    provides_observation_string=True,
    provides_observation_tensor=True,
    parameter_specification={"num_planes": DEFAULT_NUM_PLANES},
)
_GAME_INFO = pyspiel.GameInfo(
    num_distinct_actions=NUM_ACTIONS,
    max_chance_outcomes=0,
    num_players=2,
    min_utility=-1.0,
    max_utility=1.0,
    utility_sum=0.0,
    max_game_length=MAX_GAME_LENGTH,
)


class ConversionError(ValueError):
    """A state cannot be converted between this game and OpenSpiel's C++ `amazons`."""


class AmazonsGame(pyspiel.Game):
    """`python_amazons`: Amazons on the engine (see the module). Parameter `num_planes`: 3 or 7.

    Raises:
        ValueError: for a `num_planes` other than 3 or 7.
    """

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(_GAME_TYPE, _GAME_INFO, params or {})
        self.num_planes = int(self.get_parameters().get("num_planes", DEFAULT_NUM_PLANES))
        if self.num_planes not in FEATURE_PLANES:
            raise ValueError(f"num_planes must be 3 or 7, got {self.num_planes}")

    def new_initial_state(self) -> AmazonsState:
        """Botzone's start, Black (player 0) to move."""
        return AmazonsState(self)

    def state_from_board(self, board: Board) -> AmazonsState:
        """The state after `board`'s moves, played from the start (so its history is theirs).

        Raises:
            ConversionError: if `board` is not its move history played from the start (a board
                set from a position string has no such history).
        """
        _require_history(board)
        state = self.new_initial_state()
        replay = Board()
        for move in board.move_stack:
            state.apply_action(move_to_action(replay, move))
            replay.push(move)
        return state

    def make_py_observer(self, iig_obs_type: Any = None, params: Any = None) -> Any:
        """The feature-plane observer, or OpenSpiel's history-based one for information states."""
        if iig_obs_type is None or (iig_obs_type.public_info and not iig_obs_type.perfect_recall):
            return AmazonsObserver(self.num_planes, params)
        return IIGObserverForPublicInfoGame(iig_obs_type, params)


class AmazonsState(pyspiel.State):
    """A `python_amazons` state: a `Board` (read it through `board`, a copy)."""

    def __init__(self, game: AmazonsGame) -> None:
        super().__init__(game)
        self._board = Board()

    @property
    def board(self) -> Board:
        """A copy of the game so far (real frame, with its move history)."""
        return self._board.copy()

    def current_player(self) -> int:
        """0 (Black) or 1 (White) to move, or `pyspiel.PlayerId.TERMINAL`."""
        return pyspiel.PlayerId.TERMINAL if self._board.is_game_over() else self._board.turn

    def _legal_actions(self, player: int) -> list[int]:
        """Sorted legal actions of the player to move."""
        return legal_actions(self._board.canonical_position()).tolist()

    def _apply_action(self, action: int) -> None:
        """Play `action`.

        Raises:
            IllegalActionError: naming the action and its move when it is not legal here.
        """
        try:
            move = action_to_move(self._board, action)
            self._board.push(move)
        except (ActionError, IllegalMoveError) as error:
            raise IllegalActionError(f"action {action} is not a legal move here: {error}") from None

    def _action_to_string(self, player: int, action: int) -> str:
        """The real-frame move of `player`'s `action`, in algebraic notation (`c8-c6/d7`)."""
        return str(Move(*canonical_to_real(ACTION_MOVES[action], player).tolist()))

    def is_terminal(self) -> bool:
        """Whether the side to move has no legal move (and has lost)."""
        return self._board.is_game_over()

    def returns(self) -> list[float]:
        """`[black, white]`: +1 / -1 once the game is over, else 0."""
        winner = self._board.winner()
        if winner is None:
            return [0.0, 0.0]
        return [1.0, -1.0] if winner == BLACK else [-1.0, 1.0]

    def __str__(self) -> str:
        return str(self._board)


class AmazonsObserver:
    """OpenSpiel observer: a player's feature planes, `tensor` `(C * 64,)`,
    `dict["observation"]` `(C, 8, 8)`."""

    def __init__(self, num_planes: int, params: Any = None) -> None:
        if params:
            raise ValueError(f"python_amazons observations take no parameters, got {params}")
        self.tensor = np.zeros(num_planes * 64, dtype=np.float32)
        self.dict = {"observation": self.tensor.reshape(num_planes, 8, 8)}

    def set_from(self, state: AmazonsState, player: int) -> None:
        """Write `player`'s feature planes of `state` into `tensor`."""
        self.dict["observation"][...] = observation_planes(state._board, player,
                                                           self.dict["observation"].shape[0])

    def string_from(self, state: AmazonsState, player: int) -> str:
        """The position string (real frame; the game has perfect information)."""
        return state._board.position_string()


def move_to_openspiel_actions(move: Move) -> tuple[int, int, int]:
    """The C++ game's three actions (cells) of a real-frame move."""
    return (cell_of(move.src), cell_of(move.dst), cell_of(move.arrow))


def openspiel_actions_to_move(actions: Sequence[int]) -> Move:
    """The real-frame move of the C++ game's three actions (amazon, landing, arrow cells).

    Raises:
        ConversionError: unless there are exactly three cells 0..63.
    """
    if len(actions) != DECISIONS_PER_MOVE or not all(0 <= int(cell) < 64 for cell in actions):
        raise ConversionError(f"a move is three OpenSpiel cells 0..63, got {list(actions)}")
    return Move(*(square_of(int(cell)) for cell in actions))


def _require_history(board: Board) -> None:
    try:
        replayed = Board.from_moves(board.move_stack)
    except IllegalMoveError as error:
        raise ConversionError(
            f"the board's move history does not replay from the start: {error}") from None
    if replayed != board or replayed.ply != board.ply:
        raise ConversionError(
            f"the board ({board.position_string()}) is not its move history played from the start "
            "(set from a position string?): OpenSpiel's amazons can only replay moves"
        )


def to_openspiel_amazons(state: AmazonsState | Board,
                         game: pyspiel.Game | None = None) -> pyspiel.State:
    """The C++ `amazons` state of a `python_amazons` state or a `Board` (its moves, replayed).

    Args:
        state: an `AmazonsState` or a `Board` played from the start.
        game: the C++ game, `pyspiel.load_game("amazons", {"board_size": 8})` when None.

    Raises:
        ConversionError: the board was not played from the start, or `game` is not 8x8 amazons.
    """
    board = state.board if isinstance(state, AmazonsState) else state
    _require_history(board)
    game = game if game is not None else pyspiel.load_game("amazons", CPP_GAME_PARAMETERS)
    _require_cpp_game(game)
    cpp_state = game.new_initial_state()
    for move in board.move_stack:
        for cell in move_to_openspiel_actions(move):
            cpp_state.apply_action(cell)
    return cpp_state


def from_openspiel_amazons(cpp_state: pyspiel.State,
                           game: AmazonsGame | None = None) -> AmazonsState:
    """The `python_amazons` state of a C++ `amazons` state (its moves, replayed on the engine).

    Args:
        cpp_state: a state of `amazons` with `board_size` 8, at a move boundary (not after the
            first or second of a move's three actions).
        game: the `python_amazons` game to make the state in (a default one when None).

    Raises:
        ConversionError: the state is of another game or is in the middle of a move.
        IllegalActionError: if the engine does not accept one of its moves (a rules mismatch).
    """
    _require_cpp_game(cpp_state.get_game())
    history = cpp_state.history()
    pending = len(history) % DECISIONS_PER_MOVE
    if pending:
        raise ConversionError(
            f"the OpenSpiel state is in the middle of a move ({pending} of its 3 actions made: "
            f"cells {history[-pending:]}); convert at a move boundary"
        )
    game = game if game is not None else pyspiel.load_game(GAME_NAME)
    state = game.new_initial_state()
    for start in range(0, len(history), DECISIONS_PER_MOVE):
        move = openspiel_actions_to_move(history[start:start + DECISIONS_PER_MOVE])
        state.apply_action(move_to_action(state._board, move))
    return state


def _require_cpp_game(game: pyspiel.Game) -> None:
    name = game.get_type().short_name
    size = game.get_parameters().get("board_size")
    if name != "amazons" or size != CPP_GAME_PARAMETERS["board_size"]:
        raise ConversionError(f"expected OpenSpiel's amazons with board_size 8, "
                              f"got {name} {game.get_parameters()}")


if GAME_NAME not in pyspiel.registered_names():
    pyspiel.register_game(_GAME_TYPE, AmazonsGame)
