"""Ending child processes that may not end by themselves: SIGTERM, a grace, then SIGKILL.

A process that ignores SIGTERM, or cannot act on it (stopped with SIGSTOP, stuck in native code
with the signal blocked), outlives `terminate`; one `join(timeout)` after another then waits the
timeout once per such process and still leaves them all alive. `end_processes` gives all of them
one shared grace and kills whatever is left, so every process is gone when it returns. The arena's
workers (`amazons.arena`) and the self-play actors (`amazons.train.selfplay`) are ended so.

`process_context` is how the package starts those processes, and its inference servers: from a
forkserver that imported their modules once (NumPy, Numba, the engine, the search), so a new
actor or worker is a fork of a ready process instead of a fresh interpreter that imports them
again (about 2.4 s of CPU an actor on a 2-core EPYC, and again for each arena worker and server).
A network's server process also needs torch and the network evaluators (about 2.2 s more): an
evaluator factory names such modules in its `preload` attribute
(`amazons.neural.production.NetworkEvaluatorFactory` does), and the forkserver of a process that
starts such a server imports them too.

`check_niceness` and `apply_niceness` are the one check and the one `os.nice` call of the `nice`
that the inference server's and the self-play actors' configs add to their processes.

Imports nothing from the package (the forkserver's modules are named, not imported).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import time
from collections.abc import Iterable, Sequence
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess

__all__ = ["FORKSERVER_PRELOAD", "MAX_NICENESS", "NETWORK_PRELOAD", "TERMINATE_GRACE_S",
           "apply_niceness", "check_niceness", "end_processes", "factory_preload",
           "process_context", "start_forkserver"]

# What the forkserver imports once for every process it forks: the parent's main module (as
# multiprocessing's own default does), the inference protocol, self-play, and the search kernels
# themselves, loaded (`amazons.mcts_warm`). Torch is not among them unless a caller asks (a
# network's server): an actor or an arena worker never needs it. Importing torch initializes no
# CUDA, so the children that use a GPU still can.
FORKSERVER_PRELOAD = ("__main__", "amazons.inference", "amazons.train.selfplay",
                      "amazons.mcts_warm")

# What a network's inference server imports anyway: torch and the network evaluators
# (`amazons.neural.production.NetworkEvaluatorFactory.preload`).
NETWORK_PRELOAD = ("amazons.neural.production",)

# What this process's forkserver imports when it starts: FORKSERVER_PRELOAD, then what the
# process's callers asked for, in the order asked.
_preload: list[str] = list(FORKSERVER_PRELOAD)


def process_context(preload: Iterable[str] = ()) -> BaseContext:
    """The multiprocessing context for the package's worker processes: a forkserver that preloads
    `FORKSERVER_PRELOAD` where the platform has one, else spawn.

    Args:
        preload: more modules for the forkserver to import, such as a network server's torch
            (an evaluator factory's `preload`). They add to what earlier calls of this process
            asked for; none is ever taken back.

    The forkserver is one per process and starts on first use, with the modules asked for until
    then (a forkserver already started keeps the ones it was given: a server asked for later
    imports its own in its process). Its children take the parent's `sys.path` and working
    directory at their start, as spawn's do, but the environment of the moment the forkserver
    started.
    """
    _preload.extend(name for name in preload if name not in _preload)
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(_preload))
    return context


def start_forkserver(preload: Iterable[str] = ()) -> None:
    """Start this process's forkserver now, with `FORKSERVER_PRELOAD`, `preload` and what earlier
    calls of `process_context` asked for, instead of when the first worker process starts.

    The forkserver imports its modules in its own process: started before this process imports
    its own (torch, the network, the learner), it does so on another core meanwhile, and the
    first workers fork at once. A forkserver already running is left as it is; where the
    platform has none, nothing is started.
    """
    context = process_context(preload)
    if context.get_start_method() == "forkserver":
        multiprocessing.forkserver.ensure_running()


def factory_preload(factory: object) -> tuple[str, ...]:
    """The modules an evaluator factory's server process imports anyway, as the factory names
    them in its `preload` attribute (none where it has no such attribute)."""
    return tuple(getattr(factory, "preload", ()))


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


TERMINATE_GRACE_S = 5.0  # seconds from a worker's SIGTERM to its SIGKILL (arena workers, actors)
MAX_NICENESS = 19  # the largest niceness Linux gives a process (`nice` adds 0..19)


def check_niceness(nice: int) -> None:
    """Refuse a niceness increment outside 0..MAX_NICENESS (a config's `nice` field).

    Raises:
        ValueError: `nice` is negative (only root may lower its niceness) or above 19.
    """
    if not 0 <= nice <= MAX_NICENESS:
        raise ValueError(f"nice must be in 0..{MAX_NICENESS}, got {nice}")


def apply_niceness(nice: int) -> None:
    """Add `nice` to this process's niceness (a worker process, as it starts): > 0 lets a busier
    process on the same cores (the learner) run first; 0 leaves it as its parent's."""
    if nice:
        os.nice(nice)
