"""`amazons._processes.end_processes`: every started process is gone when it returns, a process
that ignores SIGTERM included, within one shared grace."""

from __future__ import annotations

import multiprocessing as mp
import signal
import time

from amazons._processes import end_processes


def _ignore_sigterm_and_sleep(ready) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(60)


def _sleep() -> None:
    time.sleep(60)


def test_a_process_that_ignores_sigterm_is_killed_after_one_shared_grace():
    context = mp.get_context("fork")
    events = [context.Event() for _ in range(2)]
    stubborn = [context.Process(target=_ignore_sigterm_and_sleep, args=(event,))
                for event in events]
    polite = context.Process(target=_sleep)
    done = context.Process(target=time.sleep, args=(0,))
    never_started = context.Process(target=_sleep)
    for process in (*stubborn, polite, done):
        process.start()
    for event in events:
        assert event.wait(30)
    done.join(30)
    started = time.monotonic()
    end_processes([*stubborn, polite, done, never_started], grace=0.5)
    seconds = time.monotonic() - started
    assert [process.exitcode for process in stubborn] == [-signal.SIGKILL] * 2
    assert polite.exitcode == -signal.SIGTERM and done.exitcode == 0
    assert never_started.pid is None
    assert seconds < 10.0  # one grace for both stubborn processes, not one each
