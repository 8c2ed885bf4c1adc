"""Ending child processes that may not end by themselves: SIGTERM, a grace, then SIGKILL.

A process that ignores SIGTERM, or cannot act on it (stopped with SIGSTOP, stuck in native code
with the signal blocked), outlives `terminate`; one `join(timeout)` after another then waits the
timeout once per such process and still leaves them all alive. `end_processes` gives all of them
one shared grace and kills whatever is left, so every process is gone when it returns. The arena's
workers (`amazons.arena`) and the self-play actors (`amazons.train.selfplay`) are ended so.

Imports nothing from the package.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from multiprocessing.process import BaseProcess

__all__ = ["end_processes"]


def end_processes(processes: Sequence[BaseProcess], grace: float) -> None:
    """Terminate the live `processes`, kill those still alive `grace` seconds later, reap all.

    Processes never started are skipped. Returns when every started process has exited and been
    joined, also when a KeyboardInterrupt arrives during the grace: the kill and the joins run
    before it propagates.
    """
    alive = [process for process in processes
             if process.pid is not None and process.exitcode is None]
    try:
        for process in alive:
            process.terminate()
        deadline = time.monotonic() + grace
        for process in alive:
            process.join(max(0.0, deadline - time.monotonic()))
    finally:
        for process in alive:
            if process.exitcode is None:
                process.kill()
        for process in alive:
            process.join()
