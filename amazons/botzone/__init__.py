"""The Botzone bot, a command: `python -m amazons.botzone` runs the Python bot (`bot`).

Beside it: `cpp_export` (the native parts joined into one C++ source to upload, with the model's
weights: `python -m amazons.export MODEL --botzone DIR`) and `memory` (the bot's resident memory:
its peak, and giving back the pages of read-only libraries). What the arena and the bot share
sits a layer below, in `amazons.players`: Botzone's limits (`botzone_limits`), any Botzone
program as a player (`program`, `watchdog`) and driving one in keep-running mode
(`keep_running`).

Importing the package imports none of them; the bot's public names are re-exported on first use,
so `from amazons.botzone import Bot` works.
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
