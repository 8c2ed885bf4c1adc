"""Imported for its effect: the search kernels loaded in the importing process.

The forkserver of `amazons._processes.process_context` preloads this module, so every self-play
actor and arena worker it forks starts with the kernels in memory, where each would otherwise
load them from Numba's on-disk cache (about a second of CPU a process) or, without a cache,
compile them. `SECONDS` is how long that took here (`amazons.mcts.warm_up`). A failure is kept
in `ERROR`, not raised: the forkserver must start whatever happens, and a process that then
searches meets the same error itself, with its own traceback.
"""

from __future__ import annotations

from amazons.mcts import warm_up

__all__ = ["ERROR", "SECONDS"]

ERROR: str | None = None
SECONDS: float = float("nan")
try:
    SECONDS = warm_up()
except Exception as error:  # reported by the process that searches, see above
    ERROR = repr(error)
