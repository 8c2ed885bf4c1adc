"""Botzone's limits and protocol constants, and what the project's bots keep back from the
limits: one definition for all.

Read by the arena's `botzone:` player (`amazons.players.program`: the CPU limits it charges, the
`time_limit` / `memory_limit` it tells JSON programs, the protocol's constants), the Python bot
(`amazons.botzone`: how it reads a JSON `time_limit`, the margin it keeps, the protocol's
constants) and the C++ bot (`amazons.botzone.cpp_export.settings_block` writes these numbers and
texts into its source). Imports nothing of the project.

What Botzone documents (the wiki's pages "Bot" and "Amazons"; docs/botzone.md quotes them):

* a turn may use 1 s of CPU time for C++ and 6 s for Python; a bot's first turn of a game gets
  double; memory is limited to 256 MB; one core;
* a JSON input's `time_limit` is that per-turn limit for this program, in seconds (1 for C++), and
  its `memory_limit` the memory limit in MB; the wiki's example input shows both as strings, empty
  (`"time_limit":"","memory_limit":""`).

How the bots read a JSON limit (`read_limit`; the C++ bot's `read_limit` in
amazons/native/protocol.h mirrors it): a number, or a string holding one (`_NUMBER_TEXT`,
surrounding blanks ignored), that is finite and positive is the limit; anything else (`""`, `null`,
a missing field, other text, 0, a negative or non-finite value, true/false, a list or object) is no
limit, and the bot's own allowance applies. A limit never refuses an input: it can only lower the
allowance, never raise it.

What is assumed here (Botzone does not say): the first turn's double applies to a JSON
`time_limit` too (so the first turn may use `FIRST_TURN_FACTOR * time_limit`); the first turn is
timed from the process's start; the memory limit is on resident memory. The margins below are
this project's choices, not Botzone's.

The margin rule (`kept_back_seconds`): each bot stops its search before its allowance is spent,
keeping back its margin (`CPP_MARGIN_SECONDS`, `PYTHON_MARGIN_SECONDS`, or the bot's `--margin`)
but never more than `MARGIN_FRACTION` of the allowance. Botzone's clocks leave the margin whole
(the C++ bot's 0.1 s of a 1 s turn); a short clock (CodinGame's 0.1 s, a test's 0.03 s) keeps a
quarter of itself back and searches the rest, where a whole margin would leave nothing.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "CPP_MARGIN_SECONDS",
    "CPP_PEAK_MEMORY_MIB",
    "CPP_TREE_MIB",
    "FIRST_TURN_FACTOR",
    "KEEP_RUNNING_MARKER",
    "LANGUAGE_TURN_SECONDS",
    "MARGIN_FRACTION",
    "MEMORY_LIMIT_MB",
    "MOVE_KEYS",
    "NO_MOVE",
    "PYTHON_BOT_TURN_SECONDS",
    "PYTHON_MARGIN_SECONDS",
    "first_turn_seconds",
    "is_empty_limit",
    "kept_back_seconds",
    "read_limit",
    "turn_seconds_from_time_limit",
]

# The protocol (the wiki's pages "Bot" and "Amazons"): the line a bot prints after its reply to be
# kept running, the six coordinates of a move (a JSON move object's keys, in a move line's order),
# and the move line of Black's first request, which is also a bot's reply when it has no move.
KEEP_RUNNING_MARKER = ">>>BOTZONE_REQUEST_KEEP_RUNNING<<<"
MOVE_KEYS = ("x0", "y0", "x1", "y1", "x2", "y2")
NO_MOVE = "-1 -1 -1 -1 -1 -1"

LANGUAGE_TURN_SECONDS = {"cpp": 1.0, "python": 6.0}  # CPU seconds a turn may use, per language
FIRST_TURN_FACTOR = 2.0  # a bot's first turn of a game may use this many times the turn's limit
MEMORY_LIMIT_MB = 256  # Botzone's memory limit (MB), told to JSON programs as `memory_limit`

# Margins kept back from each allowance, in seconds: the C++ bot's search stops this much before
# its CPU allowance is spent (writing the reply, the clock's granularity, a busy machine); the
# Python bot, timed on the wall clock, keeps more (moving the tree, the interpreter's pauses).
CPP_MARGIN_SECONDS = 0.1
PYTHON_MARGIN_SECONDS = 0.3
# The most of an allowance a margin keeps back (kept_back_seconds): a quarter leaves a short
# clock three quarters to search and still covers what follows the search's last reading of the
# clock: the C++ bot's worst turn at --time 0.1 --margin 0 overran by 2.8 ms (docs/botzone.md),
# under the 7.5 ms a quarter of 0.03 s keeps (tests/test_cpp_clock.py runs both clocks).
MARGIN_FRACTION = 0.25
# The Python bot's own allowance per reply (its --time default, wall-clock seconds): Python's 6 s
# less 2 s kept for a machine slower or busier than the one it was measured on; its first reply
# gets first_turn_seconds of it.
PYTHON_BOT_TURN_SECONDS = 4.0
# Memory: the C++ bot's peak resident memory stays under CPP_PEAK_MEMORY_MIB (219 MiB = 230 MB,
# 26 MB short of MEMORY_LIMIT_MB), its search tree taking CPP_TREE_MIB (its default --tree-mb)
# beside the rest of the process (the network cache's 8 MiB, the weights, the program: about
# 11 MiB), even where every page of the tree has been written.
CPP_PEAK_MEMORY_MIB = 219.0
CPP_TREE_MIB = 200.0


def first_turn_seconds(turn_seconds: float) -> float:
    """The seconds of a bot's first turn of a game when its later turns have `turn_seconds`."""
    return FIRST_TURN_FACTOR * turn_seconds


def kept_back_seconds(allowance: float, margin: float) -> float:
    """The seconds a bot keeps back from a turn's `allowance`: its `margin`, but never more than
    `MARGIN_FRACTION` of the allowance (so a short clock still searches; the module doc)."""
    return min(margin, MARGIN_FRACTION * allowance)


def turn_seconds_from_time_limit(time_limit: float, first_turn: bool) -> float:
    """The seconds a turn may use under a JSON input's `time_limit` (the per-turn limit, doubled
    for the bot's first turn of the game)."""
    return first_turn_seconds(time_limit) if first_turn else time_limit


# A string that holds a limit: an optional sign, digits with an optional fraction (or a fraction
# alone), an optional exponent; ASCII only. protocol.h's `limit_number_text` accepts the same.
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BLANKS = " \t\r\n"


def read_limit(value: object) -> float | None:
    """A JSON input's `time_limit` or `memory_limit` field, as Botzone may send it.

    Args:
        value: the field's decoded JSON value (None for `null` or a missing field).

    Returns:
        The limit: a finite positive number, given as a JSON number or as a string holding one
        (blanks around it ignored). None for every other value (`""`, `null`, text that is not a
        number, 0, a negative or non-finite number, true/false, a list or an object): no limit.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip(_BLANKS)
        if _NUMBER_TEXT.fullmatch(text) is None:
            return None
        value = text
    if not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float: not a usable limit
        return None
    return number if math.isfinite(number) and number > 0 else None


def is_empty_limit(value: object) -> bool:
    """Whether a limit field holds one of the empty forms Botzone's wiki shows or implies (`""`,
    `null` or a missing field, given as None); the bots read these as no limit, without a note."""
    return value is None or value == ""
