"""Boards as data: a size, a start position, the side that moves first; squares and their names.

A board of the Game of the Amazons is `N x N` (6 to 10 here; 8x8 is Botzone's, 10x10 the standard
game everywhere else) with four amazons a side on given squares, and one side that moves first.
`BoardSpec` holds exactly that, so a start is data that records, checkpoints, replay and the
command line can name or carry:

* `botzone8`: Botzone's 8x8, Black (top) on c8 f8 a6 h6, White on a3 h3 c1 f1, **Black first**;
* `standard10`: the standard game (Olympiad, Little Golem), White on a4 d1 g1 j4, Black on a7 d10
  g10 j7, **White first**;
* `openspiel6` and `openspiel8`: OpenSpiel's `amazons` starts, the bottom side (White) first.

Any legal placement of four amazons a side is accepted as well (`board_spec` reads a position
string), and checked with an error that names what is wrong.

Squares are `y * N + x` in Botzone's coordinates (x = column, y = row from the top). Algebraic
names put `a1` at the bottom left: file `a + x`, rank `N - y` (`a8` is square 0 on 8x8, `a10` on
10x10).

Position strings: `N` rows from y = 0 down, `/`-separated, numbers for runs of empty squares, `B`
a Black amazon, `W` a White amazon, `x` an arrow; then the side to move (`b` or `w`) and the ply,
e.g. Botzone's start `2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 0`.

Imports `amazons.symmetry` only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from amazons.symmetry import BLACK, MAX_SIZE, MIN_SIZE, WHITE, position_words

Square = int
FILES = "abcdefghij"
COLOR_NAMES = ("black", "white")
AMAZONS_PER_SIDE = 4
SIZES = tuple(range(MIN_SIZE, MAX_SIZE + 1))


class NotationError(ValueError):
    """A move, square, position string or board could not be parsed; the message names the bad
    token."""


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size not in SIZES:
        raise NotationError(f"board size must be one of {MIN_SIZE}..{MAX_SIZE}, got {size!r}")
    return size


def square_index(x: int, y: int, size: int = 8) -> Square:
    """Square of Botzone coordinates (x = column, y = row from the top) on a `size x size` board.

    Raises:
        NotationError: if x or y is outside 0..size-1.
    """
    if not (0 <= x < size and 0 <= y < size):
        raise NotationError(f"square ({x}, {y}) is off the {size}x{size} board")
    return y * size + x


def square_name(square: Square, size: int = 8) -> str:
    """Algebraic name of a square: `square_name(0) == 'a8'`, `square_name(0, 10) == 'a10'`."""
    if not 0 <= square < size * size:
        raise NotationError(f"square {square} is off the {size}x{size} board "
                            f"(0..{size * size - 1})")
    return f"{FILES[square % size]}{size - square // size}"


def parse_square(name: str, size: int = 8) -> Square:
    """Square of an algebraic name on a `size x size` board (`a8` -> 0, `h1` -> 63 on 8x8).

    Raises:
        NotationError: naming the token when it is not a square of the board.
    """
    last_file = FILES[size - 1]
    match = re.fullmatch(r"([a-j])(\d{1,2})", name.strip().lower())
    if not match or match.group(1) > last_file or not 1 <= int(match.group(2)) <= size:
        raise NotationError(f"bad square {name!r}: expected a file a-{last_file} and a rank "
                            f"1-{size}, like 'd4'")
    return square_index(FILES.index(match.group(1)), size - int(match.group(2)), size)


def square_bits(squares: tuple[Square, ...] | list[Square]) -> int:
    """The bitboard (a Python int) of a set of squares."""
    board = 0
    for square in squares:
        board |= 1 << square
    return board


def bit_squares(board: int, size: int = 8) -> list[Square]:
    """The squares set in a bitboard (a Python int), increasing."""
    return [square for square in range(size * size) if (board >> square) & 1]


@dataclass(frozen=True, slots=True)
class ParsedPosition:
    """A position string read: size, bitboards (Python ints), side to move, ply."""

    size: int
    black: int
    white: int
    arrows: int
    turn: int
    ply: int


_TOKEN = re.compile(r"\d+|[BWx]")


def parse_position(text: str) -> ParsedPosition:
    """Read a position string (`ROWS SIDE [PLY]`); the number of rows is the board's size.

    Raises:
        NotationError: naming the bad row, character, side or ply, or more than four amazons a side.
    """
    fields = text.split()
    if len(fields) not in (2, 3):
        raise NotationError(f"bad position {text!r}: expected 'ROWS SIDE [PLY]'")
    rows = fields[0].split("/")
    size = len(rows)
    if size not in SIZES:
        raise NotationError(f"bad position {text!r}: {size} rows, expected a board of "
                            f"{MIN_SIZE}..{MAX_SIZE} rows")
    boards = {"B": 0, "W": 0, "x": 0}
    for y, row in enumerate(rows):
        x, at = 0, 0
        for token in _TOKEN.finditer(row):
            if token.start() != at:
                raise NotationError(f"bad position row {row!r}: unexpected {row[at]!r}")
            at = token.end()
            piece = token.group()
            if piece.isdigit():
                if piece.startswith("0"):
                    raise NotationError(f"bad position row {row!r}: empty run {piece!r}")
                x += int(piece)
            else:
                if x < size:
                    boards[piece] |= 1 << (y * size + x)
                x += 1
        if at != len(row):
            raise NotationError(f"bad position row {row!r}: unexpected {row[at]!r}")
        if x != size:
            raise NotationError(f"bad position row {row!r}: covers {x} squares, expected {size}")
    for piece, name in (("B", "black"), ("W", "white")):
        count = boards[piece].bit_count()
        if count > AMAZONS_PER_SIDE:
            raise NotationError(f"bad position {text!r}: {count} {name} amazons, at most "
                                f"{AMAZONS_PER_SIDE}")
    if fields[1] not in ("b", "w"):
        raise NotationError(f"bad side to move {fields[1]!r}: expected 'b' or 'w'")
    ply_text = fields[2] if len(fields) == 3 else "0"
    if not ply_text.isdigit():
        raise NotationError(f"bad ply {ply_text!r}: expected a non-negative integer")
    return ParsedPosition(size, boards["B"], boards["W"], boards["x"], "bw".index(fields[1]),
                          int(ply_text))


def format_position(size: int, black: int, white: int, arrows: int, turn: int, ply: int) -> str:
    """The position string of bitboards (Python ints); `parse_position` reads it back."""
    rows = []
    for y in range(size):
        row, empty = "", 0
        for x in range(size):
            bit = 1 << (y * size + x)
            piece = "B" if black & bit else "W" if white & bit else "x" if arrows & bit else ""
            if piece:
                row += (str(empty) if empty else "") + piece
                empty = 0
            else:
                empty += 1
        rows.append(row + (str(empty) if empty else ""))
    return f"{'/'.join(rows)} {'bw'[turn]} {ply}"


@dataclass(frozen=True, slots=True)
class BoardSpec:
    """A board: its size, the squares of each side's four amazons at the start, who moves first.

    Attributes:
        size: `N` of the `N x N` board, 6..10.
        black, white: the start squares of each side's amazons, increasing.
        first: `BLACK` or `WHITE`, the side that moves first.
        name: the named start's name (`botzone8`, `standard10`, ...), or "" for a user's start.

    Raises:
        NotationError: naming what is wrong (size, square, count, overlap, first side).
    """

    size: int
    black: tuple[Square, ...]
    white: tuple[Square, ...]
    first: int
    name: str = ""

    def __post_init__(self) -> None:
        size = _check_size(self.size)
        for color, squares in ((BLACK, self.black), (WHITE, self.white)):
            side = COLOR_NAMES[color]
            squares = tuple(int(square) for square in squares)
            if len(squares) != AMAZONS_PER_SIDE or len(set(squares)) != AMAZONS_PER_SIDE:
                raise NotationError(f"a start needs {AMAZONS_PER_SIDE} {side} amazons on "
                                    f"distinct squares, got {list(squares)}")
            for square in squares:
                if not 0 <= square < size * size:
                    raise NotationError(f"{side} amazon on square {square} is off the "
                                        f"{size}x{size} board")
            object.__setattr__(self, COLOR_NAMES[color], tuple(sorted(squares)))
        shared = set(self.black) & set(self.white)
        if shared:
            names = ", ".join(square_name(square, size) for square in sorted(shared))
            raise NotationError(f"black and white amazons share {names}")
        if self.first not in (BLACK, WHITE):
            raise NotationError(f"first must be 0 (black) or 1 (white), got {self.first!r}")

    @property
    def num_squares(self) -> int:
        """`N * N`."""
        return self.size * self.size

    @property
    def words(self) -> int:
        """64-bit words per bitboard: 1 up to 8x8, 2 above."""
        return position_words(self.size)

    @property
    def max_game_plies(self) -> int:
        """The longest possible game: every move fills one of the squares empty at the start."""
        return self.num_squares - 2 * AMAZONS_PER_SIDE

    def bitboards(self) -> tuple[int, int]:
        """(black amazons, white amazons) at the start, as Python ints, real frame."""
        return square_bits(self.black), square_bits(self.white)

    def position_string(self) -> str:
        """The start as a position string, ply 0."""
        black, white = self.bitboards()
        return format_position(self.size, black, white, 0, self.first, 0)

    def label(self) -> str:
        """The name of a named start, else its position string."""
        return self.name or self.position_string()

    def to_dict(self) -> dict:
        """A plain-data form (records, checkpoints, replay); `board_spec` reads it back."""
        return {"name": self.name, "size": self.size, "black": list(self.black),
                "white": list(self.white), "first": COLOR_NAMES[self.first]}

    def same_start(self, other: BoardSpec) -> bool:
        """Whether two specs describe the same start (their names aside)."""
        return (self.size, self.black, self.white, self.first) == \
            (other.size, other.black, other.white, other.first)

    def __str__(self) -> str:
        return self.label()


def _named(name: str, size: int, black: str, white: str, first: int) -> BoardSpec:
    return BoardSpec(size, tuple(parse_square(square, size) for square in black.split()),
                     tuple(parse_square(square, size) for square in white.split()), first, name)


BOARDS: dict[str, BoardSpec] = {
    spec.name: spec for spec in (
        _named("botzone8", 8, "c8 f8 a6 h6", "a3 h3 c1 f1", BLACK),
        _named("standard10", 10, "d10 g10 a7 j7", "a4 j4 d1 g1", WHITE),
        _named("openspiel6", 6, "b6 e6 a5 f5", "a2 f2 b1 e1", WHITE),
        _named("openspiel8", 8, "c8 f8 a6 h6", "a3 h3 c1 f1", WHITE),
    )
}
DEFAULT_BOARD = "botzone8"
# The start a size gets when only its size is known (a position string of that many rows).
DEFAULT_STARTS = {8: "botzone8", 10: "standard10", 6: "openspiel6"}


def board_spec(value: BoardSpec | str | Mapping | None = None) -> BoardSpec:
    """The board a value names: None (`botzone8`), a `BoardSpec`, a name in `BOARDS`, a start
    position string (four amazons a side, no arrows, the side that moves first), or `to_dict()`'s
    mapping.

    Raises:
        NotationError: naming what is wrong: an unknown name (listing the known ones), a bad
            position string, arrows or a ply in a start, a wrong amazon count, a bad mapping.
    """
    if value is None:
        return BOARDS[DEFAULT_BOARD]
    if isinstance(value, BoardSpec):
        return value
    if isinstance(value, Mapping):
        return _spec_from_mapping(value)
    if not isinstance(value, str):
        raise NotationError(f"a board is a name, a position string or a mapping, got "
                            f"{type(value).__name__}")
    text = value.strip()
    if text in BOARDS:
        return BOARDS[text]
    if "/" not in text:
        raise NotationError(f"unknown board {value!r}: expected one of {', '.join(BOARDS)} or a "
                            "start position string like '2B2B2/8/B6B/8/8/W6W/8/2W2W2 b'")
    parsed = parse_position(text)
    if parsed.arrows:
        raise NotationError(f"a start position holds no arrows: {value!r}")
    if parsed.ply:
        raise NotationError(f"a start position is at ply 0: {value!r}")
    return BoardSpec(parsed.size, tuple(bit_squares(parsed.black, parsed.size)),
                     tuple(bit_squares(parsed.white, parsed.size)), parsed.turn)


def _spec_from_mapping(value: Mapping) -> BoardSpec:
    try:
        size, black, white, first = (value["size"], value["black"], value["white"],
                                     value["first"])
    except KeyError as missing:
        raise NotationError(f"a board mapping needs size, black, white and first; "
                            f"{missing.args[0]!r} is missing") from None
    if first not in COLOR_NAMES:
        raise NotationError(f"first must be 'black' or 'white', got {first!r}")
    if not isinstance(black, (list, tuple)) or not isinstance(white, (list, tuple)):
        raise NotationError("a board mapping's black and white are lists of squares")
    spec = BoardSpec(size, tuple(black), tuple(white), COLOR_NAMES.index(first))
    name = str(value.get("name") or "")
    if name:
        if name not in BOARDS or not BOARDS[name].same_start(spec):
            raise NotationError(f"board {name!r} does not have the start the mapping gives")
        return BOARDS[name]
    return spec


def default_start(size: int) -> BoardSpec | None:
    """The named start of a size (`botzone8`, `standard10`, `openspiel6`), None for 7 and 9."""
    name = DEFAULT_STARTS.get(_check_size(size))
    return BOARDS[name] if name else None


__all__ = [
    "AMAZONS_PER_SIDE",
    "BLACK",
    "BOARDS",
    "BoardSpec",
    "COLOR_NAMES",
    "DEFAULT_BOARD",
    "FILES",
    "NotationError",
    "ParsedPosition",
    "SIZES",
    "WHITE",
    "bit_squares",
    "board_spec",
    "default_start",
    "format_position",
    "parse_position",
    "parse_square",
    "square_bits",
    "square_index",
    "square_name",
]
