"""The Python face of the engine: `Board`, `Move`, notation and position strings.

A `Board` is a game in the real (Botzone) frame with make/unmake; its rules live in
`amazons._engine.State`. `Move` is a small immutable value for boundaries (notation, logs, tests);
hot paths use int arrays instead.

Notation:
* Botzone: `"x0 y0 x1 y1 x2 y2"` (amazon's square, landing square, arrow square), x = column,
  y = row from the top.
* Algebraic: `d8-d4/f6`, files `a..h` = x 0..7, ranks `8..1` = y 0..7 (so `a8` is square 0).
* Position string: eight rows from y = 0 down, `/`-separated, digits for runs of empty squares,
  `B` Black amazon, `W` White amazon, `x` arrow; then the side to move (`b`/`w`) and the ply, e.g.
  the start `2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 0`.

Imports `amazons._engine`, `amazons.engine` and `amazons.symmetry`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from amazons import _engine
from amazons.engine import (
    MAX_MOVES,
    MOVE_DTYPE,
    MY_LOWER,
    MY_UPPER,
    POSITION_DTYPE,
    THEIR_LOWER,
    THEIR_UPPER,
    adjudicate,
    adjudicated_plies,
    perft_position,
    territory,
)
from amazons.symmetry import BLACK, WHITE, canonical_to_real

Square = int
FILES = "abcdefgh"
COLOR_NAMES = ("black", "white")
START_POSITION = "2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 0"


class NotationError(ValueError):
    """A move, square or position string could not be parsed; the message names the bad token."""


class IllegalMoveError(ValueError):
    """A well-formed move is not legal in the position; the board is left unchanged."""


def square_index(x: int, y: int) -> Square:
    """Square of Botzone coordinates (x = column, y = row from the top).

    Raises:
        NotationError: if x or y is outside 0..7.
    """
    if not (0 <= x < 8 and 0 <= y < 8):
        raise NotationError(f"square ({x}, {y}) is off the 8x8 board")
    return y * 8 + x


def square_name(square: Square) -> str:
    """Algebraic name of a square: `square_name(0) == 'a8'`."""
    if not 0 <= square < 64:
        raise NotationError(f"square {square} is off the board (0..63)")
    return f"{FILES[square % 8]}{8 - square // 8}"


def parse_square(name: str) -> Square:
    """Square of an algebraic name (`a8` -> 0, `h1` -> 63).

    Raises:
        NotationError: naming the token when it is not a square a1..h8.
    """
    match = re.fullmatch(r"([a-h])([1-8])", name.strip().lower())
    if not match:
        raise NotationError(f"bad square {name!r}: expected a file a-h and a rank 1-8, like 'd4'")
    return square_index(FILES.index(match.group(1)), 8 - int(match.group(2)))


@dataclass(frozen=True, slots=True)
class Move:
    """One move: the amazon's square, its landing square, the arrow square (real frame)."""

    src: Square
    dst: Square
    arrow: Square

    def __post_init__(self) -> None:
        for field_name in ("src", "dst", "arrow"):
            value = getattr(self, field_name)
            if not isinstance(value, (int, np.integer)) or not 0 <= value < 64:
                raise NotationError(f"move {field_name} {value!r} is not a square 0..63")
            object.__setattr__(self, field_name, int(value))

    @classmethod
    def from_botzone(cls, text: str) -> Move:
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
        squares = [square_index(values[i], values[i + 1]) for i in (0, 2, 4)]
        return cls(*squares)

    def to_botzone(self) -> str:
        """Botzone's `"x0 y0 x1 y1 x2 y2"`."""
        return " ".join(f"{square % 8} {square // 8}"
                        for square in (self.src, self.dst, self.arrow))

    @classmethod
    def parse(cls, text: str) -> Move:
        """Parse algebraic `d8-d4/f6` (also `d8d4f6`, `d8 d4 f6`) or Botzone `3 0 3 4 5 2`.

        Raises:
            NotationError: naming the bad token.
        """
        stripped = text.strip()
        if len(stripped.split()) == 6 or re.fullmatch(r"[\d\s-]+", stripped):
            return cls.from_botzone(stripped)
        tokens = [token for token in re.split(r"[-/\s,x]+", stripped.lower()) if token]
        if len(tokens) == 1 and len(tokens[0]) == 6:
            tokens = [tokens[0][i : i + 2] for i in (0, 2, 4)]
        if len(tokens) != 3:
            raise NotationError(f"bad move {text!r}: expected three squares like 'd8-d4/f6'")
        return cls(*(parse_square(token) for token in tokens))

    def __str__(self) -> str:
        return f"{square_name(self.src)}-{square_name(self.dst)}/{square_name(self.arrow)}"

    def __repr__(self) -> str:
        return f"Move.parse({str(self)!r})"

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


def _bits(board: int) -> list[Square]:
    return [square for square in range(64) if (board >> square) & 1]


class Board:
    """An 8x8 Amazons game in Botzone's frame; Botzone's start, Black to move, by default.

    Example:
        >>> board = Board()
        >>> board.push(Move.parse("c8-c6/d7"))
        >>> len(board.legal_moves()) > 0
        True
    """

    __slots__ = ("_state",)

    def __init__(self, position: str | None = None) -> None:
        self._state = _engine.State()
        if position is not None:
            self.set_position(position)

    @classmethod
    def from_moves(cls, moves: Iterable[Move | str]) -> Board:
        """The board after playing `moves` (Moves, or strings in either notation) from the start.

        Raises:
            NotationError, IllegalMoveError: naming the first bad move and its index.
        """
        board = cls()
        for index, move in enumerate(moves):
            try:
                board.push(Move.parse(move) if isinstance(move, str) else move)
            except (NotationError, IllegalMoveError) as error:
                raise type(error)(f"move {index + 1}: {error}") from None
        return board

    def copy(self) -> Board:
        """An independent copy (history included)."""
        other = Board.__new__(Board)
        other._state = self._state.copy()
        return other

    def __copy__(self) -> Board:
        return self.copy()

    def __deepcopy__(self, memo: dict) -> Board:
        return self.copy()

    def __reduce__(self) -> tuple:
        """Pickle as the position before the move history plus the moves (history kept)."""
        moves = self.move_stack
        root = self.copy()
        for _ in moves:
            root.pop()
        return (_board_from_history, (root.position_string(), [move.as_tuple() for move in moves]))

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
        return [Move(*move) for move in self._state.history_moves()]

    def amazons(self, color: int) -> list[Square]:
        """Squares of `color`'s amazons."""
        return _bits(self._state.black if color == BLACK else self._state.white)

    def arrows(self) -> list[Square]:
        """Squares holding arrows."""
        return _bits(self._state.arrow_board)

    def bitboards(self) -> tuple[int, int, int]:
        """(black amazons, white amazons, arrows) as 64-bit ints, real frame."""
        return (self._state.black, self._state.white, self._state.arrow_board)

    def push(self, move: Move) -> None:
        """Play `move` for the side to move.

        Raises:
            IllegalMoveError: naming the square that makes it illegal; the board is unchanged.
        """
        status = self._state.push(move.src, move.dst, move.arrow)
        if status != _engine.PushStatus.PUSH_OK:
            reason = _PUSH_ERRORS[status].format(
                src=square_name(move.src),
                dst=square_name(move.dst),
                arrow=square_name(move.arrow),
                color=COLOR_NAMES[self.turn],
            )
            raise IllegalMoveError(f"illegal move {move} for {COLOR_NAMES[self.turn]}: {reason}")

    def push_str(self, text: str) -> Move:
        """Parse `text` (either notation), play it, and return the Move."""
        move = Move.parse(text)
        self.push(move)
        return move

    def pop(self) -> Move:
        """Undo the last move and return it. Raises IndexError when there is none."""
        return Move(*self._state.pop())

    def legal_move_array(self) -> np.ndarray:
        """Legal moves of the side to move, `(K, 3) int32` (src, dst, arrow), real frame."""
        buffer = np.empty((MAX_MOVES, 3), dtype=MOVE_DTYPE)
        count = self._state.legal_moves_into(buffer)
        return buffer[:count].copy()

    def legal_moves(self) -> list[Move]:
        """Legal moves of the side to move as `Move` values."""
        return [Move(*row) for row in self.legal_move_array().tolist()]

    def count_legal_moves(self) -> int:
        """Number of legal moves of the side to move."""
        return int(self._state.count_legal_moves())

    def is_legal(self, move: Move) -> bool:
        """Whether `move` is legal for the side to move."""
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
        """The side to move's view, `(3,) uint64` (mine, theirs, arrows); see `amazons.symmetry`."""
        position = np.empty(3, dtype=POSITION_DTYPE)
        self._state.canonical_into(position)
        return position

    def adjudicate(self) -> Adjudication | None:
        """The proved result when the amazons are separated and the move bounds settle the race.

        See `amazons.engine.adjudicate` for the rule and the bounds.

        Returns:
            An `Adjudication` in real colours, or None when the position is not separated or the
            bounds leave the race open.
        """
        result, bounds = adjudicate(self.canonical_position())
        outcome, row = int(result[0]), bounds[0].tolist()
        if outcome == 0:
            return None
        plies = int(adjudicated_plies(result, bounds)[0])
        if outcome > 0:
            return Adjudication(self.turn, row[MY_LOWER] - row[THEIR_UPPER], plies)
        return Adjudication(1 - self.turn, row[THEIR_LOWER] - row[MY_UPPER], plies)

    def territory(self) -> np.ndarray:
        """Queen-distance ownership of the squares, `(64,) int8`, real frame (index = square).

        +1 where Black's nearest amazon is strictly closer in queen moves through empty squares,
        -1 where White's is, 0 on ties, unreachable squares, amazons and arrows (see
        `amazons.engine.territory`, which works in the side to move's canonical frame).
        """
        owned = territory(self.canonical_position())[0]
        if self.turn == BLACK:
            return owned
        return -owned[::-1]  # White's canonical square s is real square 63 - s; +1 meant White

    def canonical_to_real(self, moves: np.ndarray) -> np.ndarray:
        """Real-frame moves from canonical moves of this position's side to move."""
        return canonical_to_real(moves, self.turn)

    def real_to_canonical(self, moves: np.ndarray) -> np.ndarray:
        """Canonical moves of this position's side to move from real-frame ones."""
        return canonical_to_real(moves, self.turn)

    def position_string(self) -> str:
        """Compact position string that `Board(position)` reads back (history not included)."""
        black, white, arrows = self.bitboards()
        rows = []
        for y in range(8):
            row, empty = "", 0
            for x in range(8):
                bit = 1 << (y * 8 + x)
                piece = "B" if black & bit else "W" if white & bit else "x" if arrows & bit else ""
                if piece:
                    row += (str(empty) if empty else "") + piece
                    empty = 0
                else:
                    empty += 1
            rows.append(row + (str(empty) if empty else ""))
        return f"{'/'.join(rows)} {'bw'[self.turn]} {self.ply}"

    def set_position(self, position: str) -> None:
        """Set the board from a position string (the move history is cleared).

        Raises:
            NotationError: naming the bad row, character, side or ply.
        """
        fields = position.split()
        if len(fields) not in (2, 3):
            raise NotationError(f"bad position {position!r}: expected 'ROWS SIDE [PLY]'")
        rows = fields[0].split("/")
        if len(rows) != 8:
            raise NotationError(f"bad position {position!r}: {len(rows)} rows, expected 8")
        boards = {"B": 0, "W": 0, "x": 0}
        for y, row in enumerate(rows):
            x = 0
            for char in row:
                if char.isdigit() and char != "0":
                    x += int(char)
                elif char in boards:
                    if x < 8:
                        boards[char] |= 1 << (y * 8 + x)
                    x += 1
                else:
                    raise NotationError(f"bad position row {row!r}: unexpected {char!r}")
            if x != 8:
                raise NotationError(f"bad position row {row!r}: covers {x} squares, expected 8")
        for piece, name in (("B", "black"), ("W", "white")):
            count = boards[piece].bit_count()
            if count > 4:
                raise NotationError(f"bad position {position!r}: {count} {name} amazons, at most 4")
        if fields[1] not in ("b", "w"):
            raise NotationError(f"bad side to move {fields[1]!r}: expected 'b' or 'w'")
        ply_text = fields[2] if len(fields) == 3 else "0"
        if not ply_text.isdigit():
            raise NotationError(f"bad ply {ply_text!r}: expected a non-negative integer")
        self._state.set_position(
            boards["B"], boards["W"], boards["x"], "bw".index(fields[1]), int(ply_text)
        )

    def __str__(self) -> str:
        black, white, arrows = self.bitboards()
        lines = ["    " + " ".join(FILES), "    " + " ".join("01234567") + "   x/y"]
        for y in range(8):
            cells = []
            for x in range(8):
                bit = 1 << (y * 8 + x)
                cells.append("B" if black & bit else "W" if white & bit
                             else "x" if arrows & bit else ".")
            lines.append(f"{8 - y}   {' '.join(cells)}   {y}")
        lines.append(f"{COLOR_NAMES[self.turn]} to move, ply {self.ply}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Board({self.position_string()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Board):
            return NotImplemented
        return self.bitboards() == other.bitboards() and self.turn == other.turn

    def __hash__(self) -> int:
        return self.zobrist_hash


def _board_from_history(position: str, moves: list[tuple[int, int, int]]) -> Board:
    """The board `position` after `moves` (unpickling a `Board`)."""
    board = Board(position)
    for move in moves:
        board.push(Move(*move))
    return board


def perft(board: Board, depth: int) -> int:
    """Number of move sequences of exactly `depth` plies from `board` (bulk-counted leaves)."""
    return perft_position(board.canonical_position(), depth)


__all__ = [
    "Adjudication",
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
