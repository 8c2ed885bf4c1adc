"""The Game of the Amazons as an OpenSpiel game on the engine, and conversion to OpenSpiel's own.

`python_amazons` (registered with `pyspiel.register_game` when this module is imported; load it
with `pyspiel.load_game("python_amazons")`, or `{"board_size": 10}` for the standard 10x10 game)
is a sequential, deterministic, perfect-information, zero-sum game with terminal rewards
(+1 / -1): OpenSpiel's algorithms (MCTS, AlphaZero, the evaluation tools) run on it. The rules
are the engine's (`amazons.board.Board`).

Parameters: `board_size` (6 to 10, 8 by default, as OpenSpiel's own `amazons` takes it; the
board is that size's named start in `amazons.boards`: `botzone8`, `standard10`, `openspiel6`;
7 and 9 have none and are refused) and `num_planes` (3 or 7). Player 0 is the side that moves
first: Black on `botzone8`, White on `standard10` and `openspiel6`; player 1 the other.

Actions: one action is one whole move, the flat encoding of `amazons.envs.actions` for the
board's size (33,344 actions on 8x8, 86,980 on 10x10, in the acting player's canonical frame:
White's are rotated 180 degrees), the same as in the PettingZoo and Gymnasium environments.
`action_to_string` gives the real-frame move in algebraic notation (`c8-c6/d7`). The
observation tensor of a player is its feature planes (`(C, N, N)` float32, C from
`num_planes`, 7 by default), in its own frame.

OpenSpiel's C++ `amazons` (`pyspiel.load_game("amazons", {"board_size": N})`) plays the same
game differently:

* one move is three actions by the same player: the amazon's cell, its landing cell, the arrow
  cell (`N * N` actions, each a cell `row * N + column`, row 0 at the top as `str(state)`
  prints it);
* its player 0 (`X`, moving first) starts at the bottom of that picture. A board converts when
  it is OpenSpiel's start up to a flip of the rows: `standard10` and `openspiel6` are OpenSpiel's
  10x10 and 6x6 starts as they stand (cell = square, `X` = White); `botzone8` is OpenSpiel's
  8x8 start upside down (Botzone square `y * 8 + x` is cell `(7 - y) * 8 + x`, `X` = Black).
  `openspiel_cells(board)` gives the map.

`to_openspiel_amazons` and `from_openspiel_amazons` convert states between the two by replaying
the moves (the C++ game has no way to set up a position), so a state converts when its game was
played from the start, and an OpenSpiel state converts when it is at a move boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
import pyspiel
from open_spiel.python.observation import IIGObserverForPublicInfoGame

from amazons.board import BLACK, Board, IllegalMoveError, Move, NotationError
from amazons.boards import BoardSpec, board_spec, default_start
from amazons.engine import FEATURE_PLANES
from amazons.envs.actions import (
    ActionError,
    IllegalActionError,
    action_table,
    action_to_move,
    legal_actions,
    move_to_action,
    num_actions,
    observation_planes,
)
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
    "openspiel_cells",
    "to_openspiel_amazons",
]

GAME_NAME = "python_amazons"
CPP_GAME_PARAMETERS = {"board_size": 8}  # OpenSpiel's own `amazons`, on Botzone's board's size
DEFAULT_BOARD_SIZE = 8
DECISIONS_PER_MOVE = 3  # in the C++ game: amazon, landing cell, arrow
DEFAULT_NUM_PLANES = 7

_GAME_TYPE = pyspiel.GameType(
    short_name=GAME_NAME,
    long_name="Python Amazons (6x6 to 10x10, amazons engine)",
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
    parameter_specification={"num_planes": DEFAULT_NUM_PLANES,
                             "board_size": DEFAULT_BOARD_SIZE},
)


def _game_info(spec: BoardSpec) -> pyspiel.GameInfo:
    return pyspiel.GameInfo(
        num_distinct_actions=num_actions(spec.size),
        max_chance_outcomes=0,
        num_players=2,
        min_utility=-1.0,
        max_utility=1.0,
        utility_sum=0.0,
        max_game_length=spec.max_game_plies,  # every move fills one empty square with an arrow
    )


class ConversionError(ValueError):
    """A state cannot be converted between this game and OpenSpiel's C++ `amazons`."""


def _color_of(spec: BoardSpec, player: int) -> int:
    """The colour of OpenSpiel player `player` (0 moves first) on a board."""
    return spec.first if player == 0 else 1 - spec.first


class AmazonsGame(pyspiel.Game):
    """`python_amazons`: Amazons on the engine (see the module). Parameters `board_size` (6, 8
    or 10; 8 by default) and `num_planes` (3 or 7).

    Raises:
        ValueError: for a `num_planes` other than 3 or 7, or a `board_size` without a named start.
    """

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        params = dict(params or {})
        size = int(params.get("board_size", DEFAULT_BOARD_SIZE))
        try:
            spec = default_start(size)
        except NotationError as error:
            raise ValueError(f"python_amazons: {error}") from None
        if spec is None:
            raise ValueError(f"python_amazons: board_size {size} has no named start "
                             "(amazons.boards names starts for 6, 8 and 10)")
        super().__init__(_GAME_TYPE, _game_info(spec), params)
        self.board_spec = spec
        self.num_planes = int(self.get_parameters().get("num_planes", DEFAULT_NUM_PLANES))
        if self.num_planes not in FEATURE_PLANES:
            raise ValueError(f"num_planes must be 3 or 7, got {self.num_planes}")

    def new_initial_state(self) -> AmazonsState:
        """The board's start, its first side (player 0) to move."""
        return AmazonsState(self)

    def state_from_board(self, board: Board) -> AmazonsState:
        """The state after `board`'s moves, played from the start (so its history is theirs).

        Raises:
            ConversionError: if `board` is not its move history played from this game's start (a
                board set from a position string has no such history; another start is refused).
        """
        _require_history(board, self.board_spec)
        state = self.new_initial_state()
        replay = Board(start=self.board_spec)
        for move in board.move_stack:
            state.apply_action(move_to_action(replay, move))
            replay.push(move)
        return state

    def make_py_observer(self, iig_obs_type: Any = None, params: Any = None) -> Any:
        """The feature-plane observer, or OpenSpiel's history-based one for information states."""
        if iig_obs_type is None or (iig_obs_type.public_info and not iig_obs_type.perfect_recall):
            return AmazonsObserver(self.num_planes, self.board_spec.size, params)
        return IIGObserverForPublicInfoGame(iig_obs_type, params)


class AmazonsState(pyspiel.State):
    """A `python_amazons` state: a `Board` (read it through `board`, a copy)."""

    def __init__(self, game: AmazonsGame) -> None:
        super().__init__(game)
        self._spec = game.board_spec
        self._board = Board(start=game.board_spec)

    @property
    def board(self) -> Board:
        """A copy of the game so far (real frame, with its move history)."""
        return self._board.copy()

    def current_player(self) -> int:
        """0 (the side that moves first) or 1 to move, or `pyspiel.PlayerId.TERMINAL`."""
        if self._board.is_game_over():
            return pyspiel.PlayerId.TERMINAL
        return 0 if self._board.turn == self._spec.first else 1

    def _legal_actions(self, player: int) -> list[int]:
        """Sorted legal actions of the player to move."""
        return legal_actions(self._board.canonical_position(), self._board.size).tolist()

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
        size = self._board.size
        canonical = action_table(size).moves[action]
        squares = canonical_to_real(canonical, _color_of(self._spec, player), size).tolist()
        return str(Move(*squares, size=size))

    def is_terminal(self) -> bool:
        """Whether the side to move has no legal move (and has lost)."""
        return self._board.is_game_over()

    def returns(self) -> list[float]:
        """`[player 0, player 1]`: +1 / -1 once the game is over, else 0."""
        winner = self._board.winner()
        if winner is None:
            return [0.0, 0.0]
        return [1.0, -1.0] if winner == self._spec.first else [-1.0, 1.0]

    def __str__(self) -> str:
        return str(self._board)


class AmazonsObserver:
    """OpenSpiel observer: a player's feature planes, `tensor` `(C * N * N,)`,
    `dict["observation"]` `(C, N, N)`."""

    def __init__(self, num_planes: int, size: int = 8, params: Any = None) -> None:
        if params:
            raise ValueError(f"python_amazons observations take no parameters, got {params}")
        self.tensor = np.zeros(num_planes * size * size, dtype=np.float32)
        self.dict = {"observation": self.tensor.reshape(num_planes, size, size)}

    def set_from(self, state: AmazonsState, player: int) -> None:
        """Write `player`'s feature planes of `state` into `tensor`."""
        color = _color_of(state._spec, player)
        self.dict["observation"][...] = observation_planes(state._board, color,
                                                           self.dict["observation"].shape[0])

    def string_from(self, state: AmazonsState, player: int) -> str:
        """The position string (real frame; the game has perfect information)."""
        return state._board.position_string()


@cache
def _cpp_start(size: int) -> tuple[frozenset[int], frozenset[int]]:
    """The cells of OpenSpiel's `X` (player 0) and `O` amazons at the start, read from the
    picture `str(state)` prints (row 0 at the top)."""
    state = pyspiel.load_game("amazons", {"board_size": size}).new_initial_state()
    text = "".join(line.strip() for line in str(state).splitlines() if line.strip())
    return (frozenset(cell for cell, mark in enumerate(text) if mark == "X"),
            frozenset(cell for cell, mark in enumerate(text) if mark == "O"))


@cache
def _cells(spec: BoardSpec) -> tuple[tuple[int, ...], tuple[int, ...]]:
    size = spec.size
    x_cells, o_cells = _cpp_start(size)
    first, second = ((spec.black, spec.white) if spec.first == BLACK
                     else (spec.white, spec.black))
    for flip in (False, True):
        cells = tuple(((size - 1 - square // size) if flip else square // size) * size
                      + square % size for square in range(size * size))
        if {cells[s] for s in first} == x_cells and {cells[s] for s in second} == o_cells:
            squares = [0] * len(cells)
            for square, cell in enumerate(cells):
                squares[cell] = square
            return cells, tuple(squares)
    raise ConversionError(f"the board {spec.label()!r} is not OpenSpiel's {size}x{size} amazons "
                          "start (nor that start upside down), so its games have no OpenSpiel "
                          "counterpart")


def openspiel_cells(board: BoardSpec | str | None = None) -> tuple[tuple[int, ...],
                                                                  tuple[int, ...]]:
    """`(cell_of_square, square_of_cell)`: how a board's squares are OpenSpiel's cells.

    `cell_of_square[s]` is the C++ game's cell of square `s` (`y * N + x`), `square_of_cell` the
    inverse. `botzone8` (the default) flips the rows (`(7 - y) * 8 + x`, OpenSpiel's `X` is
    Black); `standard10`, `openspiel6` and `openspiel8` are the identity (`X` is White).

    Raises:
        ConversionError: the board is not OpenSpiel's start of its size, nor that upside down.
    """
    return _cells(board_spec(board))


def _board_of_move(move: Move, board: BoardSpec | str | None) -> BoardSpec:
    spec = default_start(move.size) if board is None else board_spec(board)
    if spec is None or spec.size != move.size:
        raise ConversionError(f"move {move} is on a {move.size}x{move.size} board; name the "
                              "board it is played on")
    return spec


def move_to_openspiel_actions(move: Move,
                              board: BoardSpec | str | None = None) -> tuple[int, int, int]:
    """The C++ game's three actions (cells) of a real-frame move, on `board` (the named start of
    the move's size when None: `botzone8` on 8x8).

    Raises:
        ConversionError: the board has no OpenSpiel counterpart (`openspiel_cells`).
    """
    cells = _cells(_board_of_move(move, board))[0]
    return (cells[move.src], cells[move.dst], cells[move.arrow])


def openspiel_actions_to_move(actions: Sequence[int],
                              board: BoardSpec | str | None = None) -> Move:
    """The real-frame move of the C++ game's three actions (amazon, landing, arrow cells) on
    `board` (`botzone8` when None).

    Raises:
        ConversionError: unless there are exactly three cells of the board, or when the board
            has no OpenSpiel counterpart.
    """
    spec = board_spec(board)
    count = spec.num_squares
    if len(actions) != DECISIONS_PER_MOVE or not all(0 <= int(cell) < count for cell in actions):
        raise ConversionError(f"a move is three OpenSpiel cells 0..{count - 1}, "
                              f"got {list(actions)}")
    squares = _cells(spec)[1]
    return Move(*(squares[int(cell)] for cell in actions), size=spec.size)


def _require_history(board: Board, spec: BoardSpec | None = None) -> BoardSpec:
    start = board.start
    if start is None or (spec is not None and not start.same_start(spec)):
        wanted = "its start" if spec is None else repr(spec.label())
        got = "no start" if start is None else repr(start.label())
        raise ConversionError(f"the board ({board.position_string()}) has {got}, expected "
                              f"{wanted}")
    try:
        replayed = Board.from_moves(board.move_stack, start=start)
    except IllegalMoveError as error:
        raise ConversionError(
            f"the board's move history does not replay from the start: {error}") from None
    if replayed != board or replayed.ply != board.ply:
        raise ConversionError(
            f"the board ({board.position_string()}) is not its move history played from the start "
            "(set from a position string?): OpenSpiel's amazons can only replay moves"
        )
    return start


def to_openspiel_amazons(state: AmazonsState | Board,
                         game: pyspiel.Game | None = None) -> pyspiel.State:
    """The C++ `amazons` state of a `python_amazons` state or a `Board` (its moves, replayed).

    Args:
        state: an `AmazonsState` or a `Board` played from the start.
        game: the C++ game, `pyspiel.load_game("amazons", {"board_size": N})` of the board's size
            when None.

    Raises:
        ConversionError: the board was not played from the start, its start has no OpenSpiel
            counterpart, or `game` is not amazons of the board's size.
    """
    board = state.board if isinstance(state, AmazonsState) else state
    spec = _require_history(board)
    cells = _cells(spec)[0]
    game = game if game is not None else pyspiel.load_game("amazons", {"board_size": board.size})
    _require_cpp_game(game, board.size)
    cpp_state = game.new_initial_state()
    for move in board.move_stack:
        for square in move.as_tuple():
            cpp_state.apply_action(cells[square])
    return cpp_state


def from_openspiel_amazons(cpp_state: pyspiel.State,
                           game: AmazonsGame | None = None) -> AmazonsState:
    """The `python_amazons` state of a C++ `amazons` state (its moves, replayed on the engine).

    Args:
        cpp_state: a state of `amazons` with the `board_size` of `game`, at a move boundary (not
            after the first or second of a move's three actions).
        game: the `python_amazons` game to make the state in (the default, 8x8, when None).

    Raises:
        ConversionError: the state is of another game or size, or is in the middle of a move.
        IllegalActionError: if the engine does not accept one of its moves (a rules mismatch).
    """
    game = game if game is not None else pyspiel.load_game(GAME_NAME)
    spec = game.board_spec
    _require_cpp_game(cpp_state.get_game(), spec.size)
    history = cpp_state.history()
    pending = len(history) % DECISIONS_PER_MOVE
    if pending:
        raise ConversionError(
            f"the OpenSpiel state is in the middle of a move ({pending} of its 3 actions made: "
            f"cells {history[-pending:]}); convert at a move boundary"
        )
    state = game.new_initial_state()
    for start in range(0, len(history), DECISIONS_PER_MOVE):
        move = openspiel_actions_to_move(history[start:start + DECISIONS_PER_MOVE], spec)
        state.apply_action(move_to_action(state._board, move))
    return state


def _require_cpp_game(game: pyspiel.Game, size: int) -> None:
    name = game.get_type().short_name
    if name != "amazons" or game.get_parameters().get("board_size") != size:
        raise ConversionError(f"expected OpenSpiel's amazons with board_size {size}, "
                              f"got {name} {game.get_parameters()}")


if GAME_NAME not in pyspiel.registered_names():
    pyspiel.register_game(_GAME_TYPE, AmazonsGame)
