"""The Python face of the engine: `Board`, `Move`, notation and position strings, on every size.

A `Board` is a game in the real (Botzone) frame with make/unmake, on the board a `BoardSpec` names
(`amazons.boards`: Botzone's 8x8 by default, `standard10`, any start of 6x6 to 10x10); its rules
live in the engine's `State` for that size. `Move` is a small immutable value for boundaries
(notation, logs, tests); hot paths use int arrays instead.

Notation (the square functions and position strings are `amazons.boards`'):
* Botzone: `"x0 y0 x1 y1 x2 y2"` (amazon's square, landing square, arrow square), x = column,
  y = row from the top.
* Algebraic: `d8-d4/f6`, files `a..` = x 0.., ranks `N..1` = y 0..N-1 (so `a8` is square 0 on 8x8,
  `a10` on 10x10).
* Position string: `N` rows from y = 0 down, `/`-separated, numbers for runs of empty squares,
  `B` Black amazon, `W` White amazon, `x` arrow; then the side to move (`b`/`w`) and the ply, e.g.
  the Botzone start `2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 0`.

Imports `amazons.engine`, `amazons.boards` and `amazons.symmetry`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from amazons import _engine
from amazons.boards import (
    COLOR_NAMES,
    FILES,
    BoardSpec,
    NotationError,
    bit_squares,
    board_spec,
    default_start,
    format_position,
    parse_position,
    parse_square,
    square_index,
    square_name,
)
from amazons.engine import (
    MOVE_DTYPE,
    MY_LOWER,
    MY_UPPER,
    POSITION_DTYPE,
    THEIR_LOWER,
    THEIR_UPPER,
    adjudicate,
    adjudicated_plies,
    geometry,
    perft_position,
    rules,
    territory,
)
from amazons.symmetry import BLACK, WHITE, canonical_to_real

Square = int
START_POSITION = "2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 0"


class IllegalMoveError(ValueError):
    """A well-formed move is not legal in the position; the board is left unchanged."""


_COMPACT_SQUARE = re.compile(r"[a-j]\d{1,2}")


@dataclass(frozen=True, slots=True)
class Move:
    """One move: the amazon's square, its landing square, the arrow square (real frame), on a
    `size x size` board (8 unless given)."""

    src: Square
    dst: Square
    arrow: Square
    size: int = 8

    def __post_init__(self) -> None:
        # Plain ints (every Move the engine's lists make) pass without a conversion: Board.pop
        # and every legal-move list build Moves in a Python loop.
        size = self.size
        if type(size) is not int:
            if isinstance(size, bool) or not isinstance(size, np.integer):
                raise NotationError(f"move board size {size!r} is not 6..10")
            size = int(size)
            object.__setattr__(self, "size", size)
        if not 6 <= size <= 10:
            raise NotationError(f"move board size {size!r} is not 6..10")
        last = size * size - 1
        for field_name in ("src", "dst", "arrow"):
            value = getattr(self, field_name)
            if type(value) is int and 0 <= value <= last:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not 0 <= value <= last:
                raise NotationError(f"move {field_name} {value!r} is not a square 0..{last}")
            object.__setattr__(self, field_name, int(value))

    @classmethod
    def from_botzone(cls, text: str, size: int = 8) -> Move:
        """Parse Botzone's `"x0 y0 x1 y1 x2 y2"`.

        Raises:
            NotationError: naming the bad token (not six integers, or a coordinate off the board).
        """
        tokens = text.split()
        if len(tokens) != 6:
            raise NotationError(f"bad Botzone move {text!r}: expected 6 integers "
                                "'x0 y0 x1 y1 x2 y2'")
        try:
            values = [int(token) for token in tokens]
        except ValueError:
            bad = next(token for token in tokens if not re.fullmatch(r"-?\d+", token))
            raise NotationError(f"bad Botzone move {text!r}: {bad!r} is not an integer") from None
        squares = [square_index(values[i], values[i + 1], size) for i in (0, 2, 4)]
        return cls(*squares, size=size)

    def to_botzone(self) -> str:
        """Botzone's `"x0 y0 x1 y1 x2 y2"`."""
        return " ".join(f"{square % self.size} {square // self.size}"
                        for square in (self.src, self.dst, self.arrow))

    @classmethod
    def parse(cls, text: str, size: int = 8) -> Move:
        """Parse algebraic `d8-d4/f6` (also `d8d4f6`, `d8 d4 f6`) or Botzone `3 0 3 4 5 2`, on a
        `size x size` board (`Move.parse("d1-d7/g7", size=10)`).

        Raises:
            NotationError: naming the bad token.
        """
        stripped = text.strip()
        if len(stripped.split()) == 6 or re.fullmatch(r"[\d\s-]+", stripped):
            return cls.from_botzone(stripped, size)
        tokens = [token for token in re.split(r"[-/\s,x]+", stripped.lower()) if token]
        if len(tokens) == 1:
            compact = _COMPACT_SQUARE.findall(tokens[0])
            if len(compact) == 3 and "".join(compact) == tokens[0]:
                tokens = compact
        if len(tokens) != 3:
            raise NotationError(f"bad move {text!r}: expected three squares like 'd8-d4/f6'")
        return cls(*(parse_square(token, size) for token in tokens), size=size)

    def __str__(self) -> str:
        return "{}-{}/{}".format(*(square_name(square, self.size)
                                   for square in (self.src, self.dst, self.arrow)))

    def __repr__(self) -> str:
        if self.size == 8:
            return f"Move.parse({str(self)!r})"
        return f"Move.parse({str(self)!r}, size={self.size})"

    def as_tuple(self) -> tuple[int, int, int]:
        """`(src, dst, arrow)`."""
        return (self.src, self.dst, self.arrow)


@dataclass(frozen=True, slots=True)
class Adjudication:
    """A result proved once the amazons are separated (`Board.adjudicate`), in real colours.

    Attributes:
        winner: `BLACK` or `WHITE`.
        margin: how many more moves the winner can make than the loser, at least (its lower bound
            minus the loser's upper bound). 0 means the side to move loses with as many moves as
            the opponent: it moves first, so it runs out first.
        plies_bound: the game ends within this many plies from this position when the winner
            plays the fill the bounds rest on, whatever the loser does, counted as the search
            counts them (a position without a move is over in 0 plies, a winning move ends it in
            1): `amazons.engine.adjudicated_plies`, the search's own bound.
    """

    winner: int
    margin: int
    plies_bound: int

    def describe(self) -> str:
        """`"decided: Black wins by at least 3 moves"`; at margin 0, `"decided: White wins (Black,
        to move, runs out of moves first)"`."""
        name = COLOR_NAMES[self.winner].capitalize()
        if self.margin == 0:
            loser = COLOR_NAMES[1 - self.winner].capitalize()
            return f"decided: {name} wins ({loser}, to move, runs out of moves first)"
        return (f"decided: {name} wins by at least {self.margin} "
                f"move{'s' if self.margin != 1 else ''}")


_PUSH_ERRORS = {
    _engine.PushStatus.PUSH_NOT_YOUR_AMAZON: "{src} holds no {color} amazon",
    _engine.PushStatus.PUSH_DESTINATION_UNREACHABLE: "the amazon on {src} cannot reach {dst}",
    _engine.PushStatus.PUSH_ARROW_UNREACHABLE: "an arrow from {dst} cannot reach {arrow}",
    _engine.PushStatus.PUSH_GAME_TOO_LONG: "the move history is full",
}


class Board:
    """An Amazons game in Botzone's frame: Botzone's 8x8 start, Black to move, by default; any
    board `amazons.boards` names (`Board(start="standard10")`) or a position string's.

    Example:
        >>> board = Board()
        >>> board.push(Move.parse("c8-c6/d7"))
        >>> len(board.legal_moves()) > 0
        True
        >>> Board(start="standard10").count_legal_moves()
        2176
    """

    __slots__ = ("_state", "_start", "_size")

    def __init__(self, position: str | None = None, *,
                 start: BoardSpec | str | Mapping | None = None) -> None:
        """A board at `start` (a `BoardSpec`, a name such as "standard10", a start position
        string; Botzone's 8x8 when None), or at `position` (a position string; its number of rows
        is the size, and it must match `start`'s when both are given).

        Raises:
            NotationError: naming what is wrong with the position or the start.
        """
        parsed = parse_position(position) if position is not None else None
        if start is None and parsed is not None:
            spec = default_start(parsed.size)
        else:
            spec = board_spec(start)
        size = parsed.size if parsed is not None else spec.size
        if spec is not None and spec.size != size:
            raise NotationError(f"position {position!r} is {size}x{size} but the start "
                                f"{spec.label()!r} is {spec.size}x{spec.size}")
        self._start, self._size = spec, size
        self._state = rules(size).State()
        if parsed is not None:
            self._set(parsed.black, parsed.white, parsed.arrows, parsed.turn, parsed.ply)
        elif spec.name != "botzone8":  # the engine's own default start is Botzone's
            black, white = spec.bitboards()
            self._set(black, white, 0, spec.first, 0)

    def _set(self, black: int, white: int, arrows: int, turn: int, ply: int) -> None:
        try:
            self._state.set_position(black, white, arrows, turn, ply)
        except ValueError as error:
            raise NotationError(f"bad position: {error}") from None

    @classmethod
    def from_moves(cls, moves: Iterable[Move | str],
                   start: BoardSpec | str | Mapping | None = None) -> Board:
        """The board after playing `moves` (Moves, or strings in either notation) from `start`.

        Raises:
            NotationError, IllegalMoveError: naming the first bad move and its index.
        """
        board = cls(start=start)
        for index, move in enumerate(moves):
            try:
                board.push(board.parse_move(move) if isinstance(move, str) else move)
            except (NotationError, IllegalMoveError) as error:
                raise type(error)(f"move {index + 1}: {error}") from None
        return board

    @property
    def size(self) -> int:
        """`N` of the `N x N` board."""
        return self._size

    @property
    def start(self) -> BoardSpec | None:
        """The board's start (None for a 7x7 or 9x9 position string, which names none)."""
        return self._start

    @property
    def num_squares(self) -> int:
        """`N * N`."""
        return self._size * self._size

    def parse_move(self, text: str) -> Move:
        """`Move.parse` on this board's size."""
        return Move.parse(text, self._size)

    def copy(self) -> Board:
        """An independent copy (history included)."""
        other = Board.__new__(Board)
        other._state = self._state.copy()
        other._start, other._size = self._start, self._size
        return other

    def __copy__(self) -> Board:
        return self.copy()

    def __deepcopy__(self, memo: dict) -> Board:
        return self.copy()

    def __reduce__(self) -> tuple:
        """Pickle as the position before the move history plus the moves (history kept), and the
        start."""
        moves = self.move_stack
        root = self.copy()
        for _ in moves:
            root.pop()
        start = None if self._start is None else self._start.to_dict()
        return (_board_from_history,
                (root.position_string(), [move.as_tuple() for move in moves], start))

    @property
    def turn(self) -> int:
        """Side to move: `BLACK` (0) or `WHITE` (1)."""
        return self._state.turn

    @property
    def ply(self) -> int:
        """Plies played since the start."""
        return self._state.ply

    @property
    def zobrist_hash(self) -> int:
        """64-bit Zobrist hash of the position and side to move."""
        return self._state.zobrist_hash

    @property
    def move_stack(self) -> list[Move]:
        """Moves `pop` can undo, oldest first."""
        return [Move(*move, size=self._size) for move in self._state.history_moves()]

    def amazons(self, color: int) -> list[Square]:
        """Squares of `color`'s amazons."""
        return bit_squares(self._state.black if color == BLACK else self._state.white, self._size)

    def arrows(self) -> list[Square]:
        """Squares holding arrows."""
        return bit_squares(self._state.arrow_board, self._size)

    def bitboards(self) -> tuple[int, int, int]:
        """(black amazons, white amazons, arrows) as ints of `N * N` bits, real frame."""
        return (self._state.black, self._state.white, self._state.arrow_board)

    def push(self, move: Move) -> None:
        """Play `move` for the side to move.

        Raises:
            IllegalMoveError: naming the square that makes it illegal; the board is unchanged.
        """
        if move.size != self._size:
            raise IllegalMoveError(f"move {move} is for a {move.size}x{move.size} board, this "
                                   f"board is {self._size}x{self._size}")
        status = self._state.push(move.src, move.dst, move.arrow)
        if status != _engine.PushStatus.PUSH_OK:
            reason = _PUSH_ERRORS[status].format(
                src=square_name(move.src, self._size),
                dst=square_name(move.dst, self._size),
                arrow=square_name(move.arrow, self._size),
                color=COLOR_NAMES[self.turn],
            )
            raise IllegalMoveError(f"illegal move {move} for {COLOR_NAMES[self.turn]}: {reason}")

    def push_str(self, text: str) -> Move:
        """Parse `text` (either notation, this board's size), play it, and return the Move."""
        move = self.parse_move(text)
        self.push(move)
        return move

    def pop(self) -> Move:
        """Undo the last move and return it. Raises IndexError when there is none."""
        return Move(*self._state.pop(), size=self._size)

    def legal_move_array(self) -> np.ndarray:
        """Legal moves of the side to move, `(K, 3) int32` (src, dst, arrow), real frame."""
        buffer = np.empty((geometry(self._size).max_moves, 3), dtype=MOVE_DTYPE)
        count = self._state.legal_moves_into(buffer)
        return buffer[:count].copy()

    def legal_moves(self) -> list[Move]:
        """Legal moves of the side to move as `Move` values."""
        return [Move(*row, size=self._size) for row in self.legal_move_array().tolist()]

    def count_legal_moves(self) -> int:
        """Number of legal moves of the side to move."""
        return int(self._state.count_legal_moves())

    def is_legal(self, move: Move) -> bool:
        """Whether `move` is legal for the side to move."""
        if move.size != self._size:
            return False
        if self._state.push(move.src, move.dst, move.arrow) != _engine.PushStatus.PUSH_OK:
            return False
        self._state.pop()
        return True

    def is_game_over(self) -> bool:
        """Whether the side to move has no legal move (there are no draws)."""
        return bool(self._state.is_terminal())

    def winner(self) -> int | None:
        """`BLACK` or `WHITE` once the game is over (the side left without a move loses),
        else None."""
        return 1 - self.turn if self.is_game_over() else None

    def canonical_position(self) -> np.ndarray:
        """The side to move's view, `(3 * W,) uint64` (mine, theirs, arrows; `W` words a
        bitboard); see `amazons.symmetry`."""
        position = np.empty(geometry(self._size).position_width, dtype=POSITION_DTYPE)
        self._state.canonical_into(position)
        return position

    def adjudicate(self) -> Adjudication | None:
        """The proved result when the amazons are separated and the move bounds settle the race.

        See `amazons.engine.adjudicate` for the rule and the bounds.

        Returns:
            An `Adjudication` in real colours, or None when the position is not separated or the
            bounds leave the race open.
        """
        result, bounds = adjudicate(self.canonical_position(), size=self._size)
        outcome, row = int(result[0]), bounds[0].tolist()
        if outcome == 0:
            return None
        plies = int(adjudicated_plies(result, bounds)[0])
        if outcome > 0:
            return Adjudication(self.turn, row[MY_LOWER] - row[THEIR_UPPER], plies)
        return Adjudication(1 - self.turn, row[THEIR_LOWER] - row[MY_UPPER], plies)

    def territory(self) -> np.ndarray:
        """Queen-distance ownership of the squares, `(N * N,) int8`, real frame (index = square).

        +1 where Black's nearest amazon is strictly closer in queen moves through empty squares,
        -1 where White's is, 0 on ties, unreachable squares, amazons and arrows (see
        `amazons.engine.territory`, which works in the side to move's canonical frame).
        """
        owned = territory(self.canonical_position(), size=self._size)[0]
        if self.turn == BLACK:
            return owned
        return -owned[::-1]  # White's canonical square s is real square N*N-1-s; +1 meant White

    def canonical_to_real(self, moves: np.ndarray) -> np.ndarray:
        """Real-frame moves from canonical moves of this position's side to move."""
        return canonical_to_real(moves, self.turn, self._size)

    def real_to_canonical(self, moves: np.ndarray) -> np.ndarray:
        """Canonical moves of this position's side to move from real-frame ones."""
        return canonical_to_real(moves, self.turn, self._size)

    def position_string(self) -> str:
        """Compact position string that `Board(position)` reads back (history not included)."""
        return format_position(self._size, *self.bitboards(), self.turn, self.ply)

    def set_position(self, position: str) -> None:
        """Set the board from a position string of its size (the move history is cleared).

        Raises:
            NotationError: naming the bad row, character, side or ply, or a size that is not the
                board's.
        """
        parsed = parse_position(position)
        if parsed.size != self._size:
            raise NotationError(f"position {position!r} is {parsed.size}x{parsed.size}, the board "
                                f"is {self._size}x{self._size}")
        self._set(parsed.black, parsed.white, parsed.arrows, parsed.turn, parsed.ply)

    def __str__(self) -> str:
        size = self._size
        black, white, arrows = self.bitboards()
        lines = ["    " + " ".join(FILES[:size]),
                 "    " + " ".join(str(x) for x in range(size)) + "   x/y"]
        for y in range(size):
            cells = []
            for x in range(size):
                bit = 1 << (y * size + x)
                cells.append("B" if black & bit else "W" if white & bit
                             else "x" if arrows & bit else ".")
            lines.append(f"{size - y:<2}  {' '.join(cells)}   {y}")
        lines.append(f"{COLOR_NAMES[self.turn]} to move, ply {self.ply}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Board({self.position_string()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Board):
            return NotImplemented
        return (self._size == other._size and self.bitboards() == other.bitboards()
                and self.turn == other.turn)

    def __hash__(self) -> int:
        return self.zobrist_hash


def _board_from_history(position: str, moves: list[tuple[int, int, int]],
                        start: Mapping | None = None) -> Board:
    """The board `position` after `moves` (unpickling a `Board`)."""
    board = Board(position, start=start)
    for move in moves:
        board.push(Move(*move, size=board.size))
    return board


def perft(board: Board, depth: int) -> int:
    """Number of move sequences of exactly `depth` plies from `board` (bulk-counted leaves)."""
    return perft_position(board.canonical_position(), depth, size=board.size)


__all__ = [
    "Adjudication",
    "BoardSpec",
    "BLACK",
    "WHITE",
    "Board",
    "IllegalMoveError",
    "Move",
    "NotationError",
    "START_POSITION",
    "parse_square",
    "perft",
    "square_index",
    "square_name",
]
