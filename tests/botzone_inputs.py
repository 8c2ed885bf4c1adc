"""Botzone's documented JSON input, as the tests of both bots send it.

The Botzone wiki (page "Bot") shows the JSON input as one compact line, `{"requests":[...],
"responses":[...],"data":"...","globaldata":"...","time_limit":"","memory_limit":""}` (here
broken in two), with `time_limit` and `memory_limit` as strings, empty. `wiki_json_line` writes
that line for an Amazons game (Black's first request all -1), with the limit fields as given;
`LIMIT_FORMS` are the forms of those fields each bot must answer (never refuse), and whether the
bot writes its one note about an ignored `time_limit` for the form.
"""

from __future__ import annotations

from collections.abc import Sequence

MOVE_KEYS = ("x0", "y0", "x1", "y1", "x2", "y2")
NO_MOVE = "-1 -1 -1 -1 -1 -1"
WIKI_LIMITS = ('"time_limit":""', '"memory_limit":""')

# name: (the limit fields, written as they appear in the line; whether the bot notes one ignored)
LIMIT_FORMS: dict[str, tuple[tuple[str, ...], bool]] = {
    "wiki": (WIKI_LIMITS, False),
    "time-text-1": (('"time_limit":"1"', '"memory_limit":""'), False),
    "time-empty": (('"time_limit":""',), False),
    "memory-empty": (('"time_limit":1', '"memory_limit":""'), False),
    "time-null": (('"time_limit":null',), False),
    "time-text-abc": (('"time_limit":"abc"',), True),
    "time-zero": (('"time_limit":0',), True),
    "missing": ((), False),
}


def move_json(text: str) -> str:
    """A Botzone move text (`x0 y0 x1 y1 x2 y2`) as a compact JSON move object."""
    values = text.split()
    fields = (f'"{key}":{value}' for key, value in zip(MOVE_KEYS, values, strict=True))
    return "{" + ",".join(fields) + "}"


def wiki_json_line(history: Sequence[str], limits: Sequence[str] = WIKI_LIMITS) -> str:
    """The wiki's input line for the side to move after `history` (Botzone move texts, oldest
    first; Black's first request, all -1, comes first when Black is to move), its limit fields
    `limits` (raw `"name":value` texts, in order), without a newline."""
    turns = ([NO_MOVE] if len(history) % 2 == 0 else []) + list(history)
    fields = [f'"requests":[{",".join(move_json(text) for text in turns[0::2])}]',
              f'"responses":[{",".join(move_json(text) for text in turns[1::2])}]',
              '"data":""', '"globaldata":""', *limits]
    return "{" + ",".join(fields) + "}"
