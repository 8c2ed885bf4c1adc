"""Everything Botzone: the Python bot, its limits, the C++ export, Botzone programs as players.

`python -m amazons.botzone` runs the Python bot (`bot`). Beside it: `limits` (Botzone's time and
memory limits and how a JSON input's limits are read: the one definition every other part
reads), `cpp_export` (the native parts joined into one C++ source to upload, with the model's
weights), `program` (any Botzone program as an arena player, `botzone:COMMAND`) and `watchdog`
(the process that ends those programs when their player's process dies).

Importing the package imports none of them (the arena reads `limits` without loading the bot);
the bot's public names are re-exported on first use, so `from amazons.botzone import Bot` works.
"""

from __future__ import annotations

import importlib
from typing import Any

_BOT_NAMES = frozenset({
    "KEEP_RUNNING_MARKER", "NO_MOVE", "Bot", "BotzoneInput", "ProtocolError", "TREE_MEMORY_MB",
    "TimeControl", "format_json_reply", "format_simple_reply", "main", "parse_json",
    "parse_move_line", "parse_simple", "parse_update", "process_start_time",
})


def __getattr__(name: str) -> Any:
    if name in _BOT_NAMES:
        return getattr(importlib.import_module("amazons.botzone.bot"), name)
    raise AttributeError(f"module 'amazons.botzone' has no attribute {name!r}")
