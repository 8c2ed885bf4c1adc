"""How the main job takes SIGINT and SIGTERM: a stop becomes a KeyboardInterrupt that shuts the
run down cleanly, and a file being written is finished before the stop is taken."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import typing
from collections.abc import Iterator

__all__ = ["signals_deferred", "stop_on_sigterm"]


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block is done, then deliver the first that came.

    A KeyboardInterrupt raised inside `torch.save` (Ctrl-C, or SIGTERM through the main job's
    handler) leaves its zip writer half done, whose cleanup then fails with its own error: the run
    would end with that error instead of the stop, and the checkpoint and `state.json` could
    disagree. Off the main thread, where handlers cannot be set, the block just runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: object) -> None:
        pending.append(signum)

    previous = {signum: signal.signal(signum, hold) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        if pending:
            os.kill(os.getpid(), pending[0])  # now to the handler it was meant for


def stop_on_sigterm(stopped_by: list[int]) -> typing.Any:
    """Make SIGTERM (`kill PID`, a scheduler's stop) shut the run down like Ctrl-C: actors, server
    and shared memory cleaned up, finished iterations kept for `--resume`. Further SIGTERMs are
    ignored while that happens. Returns the previous handler (None off the main thread, where
    handlers cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: object) -> None:
        if stopped_by:  # a signal that arrived before the first call could ignore it
            return
        stopped_by.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, stop)
