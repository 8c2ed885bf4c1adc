"""Game records: a small text format for finished (or unfinished) games.

A file holds one or more games separated by blank lines. Each game is header lines, then one move
per line in Botzone coordinates (`x0 y0 x1 y1 x2 y2`), from the start position, Black first:

    [Event "selfplay"]
    [Black "net-v3"]
    [White "net-v3"]
    [Date "2026-11-21"]
    [Result "1-0"]
    2 0 2 3 5 6
    5 7 5 3 5 2
    ...

`Result` is `1-0` (Black won), `0-1` (White won) or `*` (unfinished). Lines starting with `#` are
comments. Reading replays every move on a `Board`, so an illegal or malformed move is reported
with its line number.

Imports `amazons.board` only.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from amazons.board import BLACK, WHITE, Board, IllegalMoveError, Move, NotationError

RESULT_TEXT = {BLACK: "1-0", WHITE: "0-1", None: "*"}
_HEADER = re.compile(r'^\[(\w+)\s+"(.*)"\]$')


class RecordError(ValueError):
    """A game record is malformed or holds an illegal move; the message names file and line."""


@dataclass
class GameRecord:
    """One game: headers (ordered) and moves in the real (Botzone) frame."""

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
        **extra: str,
    ) -> GameRecord:
        """A record with standard headers; the result is computed by replaying the moves."""
        moves = list(moves)
        board = Board.from_moves(moves)
        headers = {
            "Event": event,
            "Black": black,
            "White": white,
            "Date": date or datetime.date.today().isoformat(),
            "Result": RESULT_TEXT[board.winner()],
        }
        headers.update({key: str(value) for key, value in extra.items()})
        return cls(moves, headers)

    @property
    def winner(self) -> int | None:
        """BLACK or WHITE from the Result header, None when unfinished."""
        return {"1-0": BLACK, "0-1": WHITE}.get(self.headers.get("Result", "*"))

    def board(self) -> Board:
        """The position after all moves."""
        return Board.from_moves(self.moves)

    def to_text(self) -> str:
        """The record in the file format (no trailing blank line)."""
        lines = [f'[{key} "{value}"]' for key, value in self.headers.items()]
        lines += [move.to_botzone() for move in self.moves]
        return "\n".join(lines)


def parse_records(text: str, source: str = "<text>") -> list[GameRecord]:
    """Parse every game in `text`; each is replayed to check legality.

    Raises:
        RecordError: naming `source`, the line number and the bad line.
    """
    records: list[GameRecord] = []
    headers: dict[str, str] = {}
    moves: list[Move] = []
    board = Board()

    def finish() -> None:
        nonlocal headers, moves, board
        if headers or moves:
            records.append(GameRecord(moves, headers))
        headers, moves, board = {}, [], Board()

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            finish()
            continue
        if line.startswith("#"):
            continue
        header = _HEADER.match(line)
        if header:
            if moves:
                finish()
            headers[header.group(1)] = header.group(2)
            continue
        try:
            move = Move.from_botzone(line)
            board.push(move)
        except (NotationError, IllegalMoveError) as error:
            raise RecordError(f"{source}:{number}: {line!r}: {error}") from None
        moves.append(move)
    finish()
    return records


def read_records(path: str | os.PathLike) -> list[GameRecord]:
    """Read all games of a record file (see `parse_records`)."""
    return parse_records(Path(path).read_text(), str(path))


def write_records(path: str | os.PathLike, records: Iterable[GameRecord], append: bool = False) -> None:
    """Write games to `path`, blank-line separated (appending keeps earlier games)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "\n\n".join(record.to_text() for record in records)
    if not body:
        return
    prefix = "\n" if append and path.exists() and path.stat().st_size else ""
    with open(path, "a" if append else "w") as stream:
        stream.write(prefix + body + "\n")
