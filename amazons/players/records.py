"""Game records: the one text format for games, written by self-play, the arena and terminal play.

A file holds one or more games separated by blank lines. Each game is header lines, then one move
per line from the board's start: Botzone coordinates (`x0 y0 x1 y1 x2 y2`, x the column, y the
row from the top), then the same move in algebraic notation of the board's size:

    [Event "play"]
    [Black "human"]
    [White "mcts-rollout"]
    [Date "2026-11-21"]
    [Result "1-0"]
    [Board "standard10"]
    3 9 3 3 6 3  d1-d7/g7
    3 0 3 2 5 2  d10-d8/f8
    ...

* `Board` names the board the game is played on: a name in `amazons.boards.BOARDS`
  (`botzone8`, `standard10`, ...) or a start position string (`BoardSpec.label()`, which
  `amazons.boards.board_spec` reads back into the `BoardSpec` that `to_dict()` writes); a record
  without it (every record before board sizes) is on `botzone8`, Black first.
* A move line's algebraic half is for the reader; reading checks it names the same move as the
  coordinates, and a line with the coordinates only (older records) is read as well.

* Header lines are `[Key "value"]`: a key of letters, digits and `_`; a one-line value in which
  `\\` and `"` are written `\\\\` and `\\"`. Keys keep their order and appear once per game.
* `Result` is `1-0` (Black won), `0-1` (White won) or `*` (unfinished). When the moves end the
  game, the result must name the side that made the last move; a decided result on an unfinished
  game (a resignation, a time loss) is allowed.
* Lines starting with `#` are comments (not kept). Several blank lines count as one.
* How a game ended early is in `Termination`: an adjudication (self-play), or why a player
  forfeited in the arena (`timeout`, `crash`, `malformed`, `illegal`), with `Fault` saying who and
  what happened.

Reading replays every move on a `Board`; a malformed header, a bad move line or an illegal move
raises `RecordError` naming the file, the line number, the line and the game. Writing and reading
back gives the same records (headers in order, moves), and the same text.

Imports `amazons.board`, `amazons.boards` and `amazons.core.atomic` only.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from amazons.board import BLACK, COLOR_NAMES, WHITE, Board, IllegalMoveError, Move, NotationError
from amazons.boards import BoardSpec, board_spec
from amazons.core.atomic import atomic_write

__all__ = [
    "GameRecord",
    "RESULT_TEXT",
    "RecordError",
    "parse_records",
    "read_records",
    "write_records",
]

RESULT_TEXT = {BLACK: "1-0", WHITE: "0-1", None: "*"}
_RESULT_WINNER = {text: winner for winner, text in RESULT_TEXT.items()}
_KEY = re.compile(r"[A-Za-z0-9_]+")
_HEADER = re.compile(r'\[([A-Za-z0-9_]+)\s+"((?:[^"\\]|\\.)*)"\]')
_ESCAPE = re.compile(r"\\(.)")


class RecordError(ValueError):
    """A record is malformed or holds an illegal move; the message names file, line and game."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _unescape(value: str) -> str:
    """Undo `_escape`. Raises ValueError naming an escape other than `\\\\` and `\\"`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(1) not in '\\"':
            raise ValueError(f"unknown escape {match.group(0)!r} (only \\\\ and \\\" are escapes)")
        return match.group(1)

    return _ESCAPE.sub(replace, value)


BOARD_HEADER = "Board"  # the header that names the board (`BoardSpec.label()`)


def _move_line(move: Move) -> str:
    """A move line: Botzone coordinates, two spaces, algebraic notation."""
    return f"{move.to_botzone()}  {move}"


@dataclass
class GameRecord:
    """One game: headers (ordered) and moves in the real (Botzone) frame, from the start of the
    board its `Board` header names (`botzone8` without one)."""

    moves: list[Move]
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_game(
        cls,
        moves: Iterable[Move],
        black: str,
        white: str,
        event: str = "game",
        date: str | None = None,
        winner: int | None = None,
        start: BoardSpec | str | None = None,
        **extra: str,
    ) -> GameRecord:
        """A record with the standard headers (Event, Black, White, Date, Result, Board) and
        `extra` ones.

        The result is computed by replaying the moves from `start` (a `BoardSpec`, a board name
        or a start position string; Botzone's 8x8 when None), `*` when the game is not over, or
        is `winner`'s when the moves stop before the end (an adjudicated or resigned game).

        Raises:
            IllegalMoveError, NotationError: a move that cannot be played (names it), or a bad
                start.
            RecordError: `winner` contradicts a game the moves finish.
        """
        moves = list(moves)
        spec = board_spec(start)
        board = Board.from_moves(moves, start=spec)
        result = board.winner()
        if winner is not None:
            if result is not None and result != winner:
                raise RecordError(f"winner {COLOR_NAMES[winner]} contradicts the moves: "
                                  f"{COLOR_NAMES[result]} won")
            result = winner
        headers = {
            "Event": event,
            "Black": black,
            "White": white,
            "Date": date or datetime.date.today().isoformat(),
            "Result": RESULT_TEXT[result],
            BOARD_HEADER: spec.label(),
        }
        headers.update({key: str(value) for key, value in extra.items()})
        return cls(moves, headers)

    @property
    def black(self) -> str:
        """The Black player's name ("?" when the header is missing)."""
        return self.headers.get("Black", "?")

    @property
    def white(self) -> str:
        """The White player's name ("?" when the header is missing)."""
        return self.headers.get("White", "?")

    @property
    def result(self) -> str:
        """The Result header: "1-0", "0-1" or "*" (also when missing)."""
        return self.headers.get("Result", "*")

    @property
    def termination(self) -> str | None:
        """The Termination header (how the game ended early: an arena forfeit's reason such as
        "timeout", or self-play's adjudication), None when missing."""
        return self.headers.get("Termination")

    @property
    def winner(self) -> int | None:
        """BLACK or WHITE from the Result header, None when unfinished."""
        return _RESULT_WINNER.get(self.result)

    @property
    def start(self) -> BoardSpec:
        """The board the game is played on: its `Board` header's, `botzone8` without one.

        Raises:
            NotationError: a `Board` header that names no board.
        """
        return board_spec(self.headers.get(BOARD_HEADER))

    def board(self) -> Board:
        """The position after all moves, on the record's board."""
        return Board.from_moves(self.moves, start=self.start)

    def to_text(self) -> str:
        """The record in the file format (no trailing newline).

        Raises:
            RecordError: a header key that is not letters, digits and `_`, or a value holding a
                line break.
        """
        lines = []
        for key, value in self.headers.items():
            if not _KEY.fullmatch(key):
                raise RecordError(f"header key {key!r}: use letters, digits and '_' only")
            if "".join(value.splitlines()) != value:
                raise RecordError(f"header {key}: value {value!r} holds a line break")
            lines.append(f'[{key} "{_escape(value)}"]')
        lines += [_move_line(move) for move in self.moves]
        return "\n".join(lines)


class _GameReader:
    """Collects one game's lines, replaying moves as they come."""

    def __init__(self, number: int, source: str) -> None:
        self.number = number
        self.source = source
        self.headers: dict[str, str] = {}
        self.moves: list[Move] = []
        self.board = Board()  # until a Board header names another
        self.last_line = 0

    def error(self, line_number: int, line: str, problem: str) -> RecordError:
        return RecordError(f"{self.source}:{line_number}: {line!r} (game {self.number}): {problem}")

    def header(self, line_number: int, line: str) -> None:
        match = _HEADER.fullmatch(line)
        if match is None:
            raise self.error(line_number, line, 'malformed header: expected [Key "value"]')
        key = match.group(1)
        if key in self.headers:
            raise self.error(line_number, line, f"duplicate header {key}")
        try:
            value = _unescape(match.group(2))
        except ValueError as error:
            raise self.error(line_number, line, str(error)) from None
        if key == "Result" and value not in _RESULT_WINNER:
            raise self.error(line_number, line, 'Result must be "1-0", "0-1" or "*"')
        if key == BOARD_HEADER:
            try:
                self.board = Board(start=value)
            except NotationError as error:
                raise self.error(line_number, line, f"bad Board: {error}") from None
        self.headers[key] = value
        self.last_line = line_number

    def move(self, line_number: int, line: str) -> None:
        ply = len(self.moves) + 1
        tokens = line.split()
        try:
            # six coordinates, then (since board sizes) the move's algebraic name
            move = Move.from_botzone(" ".join(tokens[:6]) if len(tokens) == 7 else line,
                                     self.board.size)
            if len(tokens) == 7 and self.board.parse_move(tokens[6]) != move:
                raise NotationError(f"{tokens[6]!r} is not {move.to_botzone()!r} "
                                    f"({move} on the {self.board.size}x{self.board.size} board)")
        except NotationError as error:
            raise self.error(line_number, line, f"move {ply}: {error}") from None
        if self.board.is_game_over():
            loser = COLOR_NAMES[self.board.turn]
            raise self.error(line_number, line,
                             f"move {ply}: the game is over ({loser} has no move)")
        try:
            self.board.push(move)
        except IllegalMoveError as error:
            raise self.error(line_number, line, f"move {ply}: {error}") from None
        self.moves.append(move)
        self.last_line = line_number

    def finish(self) -> GameRecord:
        record = GameRecord(self.moves, self.headers)
        winner = self.board.winner()
        if winner is not None and record.result != RESULT_TEXT[winner]:
            line = _move_line(self.moves[-1])
            raise self.error(self.last_line, line,
                             f"Result is {record.result!r} but this move ends the game: "
                             f"{COLOR_NAMES[winner]} won ({RESULT_TEXT[winner]})")
        return record


def parse_records(text: str, source: str = "<text>") -> list[GameRecord]:
    """Parse every game in `text`; each is replayed to check legality.

    A header line after moves, without a blank line between, starts a new game.

    Raises:
        RecordError: naming `source`, the line number, the line and the game number: a malformed
            or duplicate header, an unknown Result, a Board that names no board, a line that is not
            a Botzone move (or whose algebraic name is another move), an illegal move, a move after
            the end, or a Result that contradicts a finished game.
    """
    records: list[GameRecord] = []
    game: _GameReader | None = None
    for line_number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if line.startswith("#"):
            continue
        if not line or (line.startswith("[") and game is not None and game.moves):
            if game is not None:
                records.append(game.finish())
                game = None
            if not line:
                continue
        if game is None:
            game = _GameReader(len(records) + 1, source)
        if line.startswith("["):
            game.header(line_number, line)
        else:
            game.move(line_number, line)
    if game is not None:
        records.append(game.finish())
    return records


def read_records(path: str | os.PathLike) -> list[GameRecord]:
    """Read all games of a record file (see `parse_records`).

    Raises:
        RecordError: a malformed record, or a file that is not UTF-8 text (names the file).
        OSError: the file cannot be read.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise RecordError(
            f"{path}: not a UTF-8 text file ({error.reason} at byte {error.start})") from None
    return parse_records(text, str(path))


def write_records(path: str | os.PathLike, records: Iterable[GameRecord],
                  append: bool = False) -> None:
    """Write games to `path`, blank-line separated, creating its folder.

    Without `append` the file is replaced atomically; with it the games are added after the
    earlier ones. Records with neither headers nor moves have no text and are left out; nothing
    is written when no record is left.

    Raises:
        RecordError: a header that cannot be written (see `GameRecord.to_text`).
        OSError: the file cannot be written.
    """
    path = Path(path)
    body = "\n\n".join(text for text in (record.to_text() for record in records) if text)
    if not body:
        return
    if not append:
        atomic_write(path, lambda stream: stream.write((body + "\n").encode("utf-8")))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = "\n" if path.exists() and path.stat().st_size else ""
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(prefix + body + "\n")
