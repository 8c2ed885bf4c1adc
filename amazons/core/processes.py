"""Ending child processes that may not end by themselves: SIGTERM, a grace, then SIGKILL.

A process that ignores SIGTERM, or cannot act on it (stopped with SIGSTOP, stuck in native code
with the signal blocked), outlives `terminate`; one `join(timeout)` after another then waits the
timeout once per such process and still leaves them all alive. `end_processes` gives all of them
one shared grace and kills whatever is left, then waits `KILL_WAIT_S` at most, in all, for the
killed ones: every process is gone when it returns, but one whose end cannot be seen (stuck in
the kernel, or a forkserver child whose forkserver is stopped and so never reports its exit) is
named in a warning instead of holding its caller forever. The arena's workers
(`amazons.matches.arena`) and the self-play actors (`amazons.train.selfplay`) are ended so.

`process_context` is how the package starts those processes, and its inference servers: from a
forkserver that imported their modules once (NumPy, Numba, the engine, the search), so a new
actor or worker is a fork of a ready process instead of a fresh interpreter that imports them
again (about 2.4 s of CPU an actor on a 2-core EPYC, and again for each arena worker and server).
What the forkserver imports comes from the callers, never from here: each names the modules its
processes run (`amazons.train.selfplay.SELFPLAY_PRELOAD`, `amazons.matches.arena.ARENA_PRELOAD`,
the server's own module), and a name `module:function` also calls that function once imported
(`amazons.mcts:warm_up`, the search kernels loaded). A network's server process also needs torch
and the network evaluators (about 2.2 s more): an evaluator factory names such modules in its
`preload` attribute (`amazons.neural.served.NetworkEvaluatorFactory` does), and the forkserver of
a process that starts such a server imports them too. Every name is checked when it is asked
for: one whose module does not exist raises `ValueError` there. The forkserver is handed one
module, `amazons.core.forkserver_preload`, and the names in `PRELOAD_VARIABLE`; that module
imports them itself (why, in its docstring): one that exists but fails to import there (a missing
optional dependency, a broken build), or whose function raises, is named with its error in one
line on stderr, the forkserver imports the others and serves on, and a child that needs the
module imports it itself and raises its error. Handed the modules, multiprocessing's forkserver
would drop an ImportError without a word and die of any other exception, every later start then
failing with an error that names nothing.

`check_niceness` and `apply_niceness` are the one check and the one `os.nice` call of the `nice`
that the inference server's and the self-play actors' configs add to their processes.

Imports nothing from the package, and names none: the forkserver's modules are its callers'.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import multiprocessing.forkserver
import os
import time
import warnings
from collections.abc import Iterable, Sequence
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess

from amazons.core import PRELOAD_VARIABLE

__all__ = ["KILL_WAIT_S", "MAX_NICENESS", "PRELOAD_VARIABLE", "TERMINATE_GRACE_S",
           "apply_niceness", "check_niceness", "end_processes", "factory_preload",
           "process_context", "start_forkserver"]

# What this process's forkserver imports when it starts: what the process's callers asked for,
# in the order asked. Never `__main__`, multiprocessing's own default: it does nothing up to
# Python 3.13.7 and, from CPython's gh-126631 fix on (3.13.8, 3.14), runs the parent's main script
# in the forkserver, which is wrong for a script without a `__main__` guard (Ray's worker script,
# a user's); the package's processes run its functions.
_preload: list[str] = []

# The one module multiprocessing's forkserver is handed: it imports the modules named in the
# environment variable PRELOAD_VARIABLE (comma-separated), each failure reported on stderr.
# Named, not imported: importing it preloads.
_PRELOAD_MODULE = "amazons.core.forkserver_preload"


def process_context(preload: Iterable[str] = ()) -> BaseContext:
    """The multiprocessing context for the package's worker processes: a forkserver that preloads
    what the callers asked for where the platform has one, else spawn.

    Args:
        preload: modules for the forkserver to import, the modules the caller's processes run
            (`module:function` also calls the function, once imported, with no arguments), such
            as a network server's torch (an evaluator factory's `preload`). They add to what
            earlier calls of this process asked for; none is ever taken back.

    The forkserver is one per process and starts on first use, with the modules asked for until
    then (a forkserver already started keeps the ones it was given: a server asked for later
    imports its own in its process). A module that fails to import there is named, with its
    error, on stderr, and its children import it themselves. The list is set in this process's
    environment (`PRELOAD_VARIABLE`), where the forkserver reads it whenever it starts. Its
    children take the parent's `sys.path` and working directory at their start, as spawn's do,
    but the environment of the moment the forkserver started.

    Raises:
        ValueError: a name of `preload` names no module, or a function badly (nothing is added
            then).
    """
    added = [name for name in dict.fromkeys(preload) if name not in _preload]
    for name in added:
        _check_module(name)
    _preload.extend(added)
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # The forkserver starts on the first child of any caller, or again after it died: the
    # variable always holds the whole list, so whichever start it is reads it.
    os.environ[PRELOAD_VARIABLE] = ",".join(_preload)
    context.set_forkserver_preload([_PRELOAD_MODULE])
    return context


def _check_module(name: str) -> None:
    """Raise ValueError unless `name` is a module that can be found, or `module:function` with
    such a module and a function name (its parent packages are imported to look, as by an import;
    the module itself is not)."""
    module, colon, function = name.partition(":")
    if colon and not function.isidentifier():
        raise ValueError(f"the forkserver cannot preload {name!r}: "
                         f"{function!r} is no function name")
    name = module
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError) as error:  # a parent package missing, an empty name
        raise ValueError(f"the forkserver cannot preload {name!r}: {error}") from error
    if not found:
        raise ValueError(f"the forkserver cannot preload {name!r}: no such module")


def start_forkserver(preload: Iterable[str] = ()) -> None:
    """Start this process's forkserver now, with `preload` and what earlier calls of
    `process_context` asked for, instead of when the first worker process starts.

    The forkserver imports its modules in its own process: started before this process imports
    its own (torch, the network, the learner), it does so on another core meanwhile, and the
    first workers fork at once. A forkserver already running is left as it is; where the
    platform has none, nothing is started.

    Raises:
        ValueError: a name of `preload` names no module (no forkserver is started then).
    """
    context = process_context(preload)
    if context.get_start_method() == "forkserver":
        multiprocessing.forkserver.ensure_running()


def factory_preload(factory: object) -> tuple[str, ...]:
    """The modules an evaluator factory's server process imports anyway, as the factory names
    them in its `preload` attribute (none where it has no such attribute)."""
    return tuple(getattr(factory, "preload", ()))


def end_processes(processes: Sequence[BaseProcess], grace: float,
                  kill_wait: float | None = None) -> None:
    """Terminate the live `processes`, kill those still alive `grace` seconds later, reap all.

    Processes never started are skipped. Returns when every started process has exited and been
    joined, and after `grace + kill_wait` seconds at most (`kill_wait` default: `KILL_WAIT_S`;
    the killed processes share it): one whose end is not seen by then is named in a
    RuntimeWarning and left unjoined. Also when a KeyboardInterrupt arrives during the grace,
    the kill and the joins run before it propagates.
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
        kill_wait = KILL_WAIT_S if kill_wait is None else kill_wait
        deadline = time.monotonic() + kill_wait
        for process in alive:
            process.join(max(0.0, deadline - time.monotonic()))
        unseen = [process.pid for process in alive if process.exitcode is None]
        if unseen:
            warnings.warn(f"processes {unseen} did not end within {kill_wait:g} s of their "
                          "SIGKILL; left unjoined", RuntimeWarning, stacklevel=2)


TERMINATE_GRACE_S = 5.0  # seconds from a worker's SIGTERM to its SIGKILL (arena workers, actors)
KILL_WAIT_S = 5.0  # seconds `end_processes` waits, at most, for the processes it killed to end
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
