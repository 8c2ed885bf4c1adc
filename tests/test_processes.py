"""`amazons.core.processes`: `end_processes` leaves no started process behind, one that ignores
SIGTERM included, within one shared grace, and returns within its bound when a killed process's end
cannot be seen; `process_context`'s forkserver imports what its callers asked for, refuses a name
that is no module, names on stderr a module that fails to import in it and serves on, and is
never asked to run the main script."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import time

import pytest

from amazons.core.processes import (
    PRELOAD_VARIABLE,
    end_processes,
    factory_preload,
    process_context,
)
from amazons.matches.arena import ARENA_PRELOAD
from amazons.mcts import UniformEvaluator
from amazons.neural.served import NETWORK_PRELOAD, NetworkEvaluatorFactory
from amazons.serving.server import SERVER_PRELOAD
from amazons.train.cli import JOB_PRELOAD
from amazons.train.selfplay import SELFPLAY_PRELOAD


def _ignore_sigterm_and_sleep(ready) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(60)


def _sleep() -> None:
    time.sleep(60)


# One grace for all: 3 processes that ignore SIGTERM are killed GRACE_S after the SIGTERM, where a
# grace each would take 3 * GRACE_S; the kill and the reaping take milliseconds, so the bound of
# 2 * GRACE_S tells the two apart with a whole grace to spare for a loaded machine.
GRACE_S = 2.0
STUBBORN = 3


def test_a_process_that_ignores_sigterm_is_killed_after_one_shared_grace():
    context = mp.get_context("fork")
    events = [context.Event() for _ in range(STUBBORN)]
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
    end_processes([*stubborn, polite, done, never_started], grace=GRACE_S)
    seconds = time.monotonic() - started
    assert [process.exitcode for process in stubborn] == [-signal.SIGKILL] * STUBBORN
    assert polite.exitcode == -signal.SIGTERM and done.exitcode == 0
    assert never_started.pid is None
    # the stubborn ones had the whole grace, and one grace for all of them, not one each
    assert GRACE_S <= seconds < 2 * GRACE_S, seconds


STOPPED_FORKSERVER_SCRIPT = """
import signal
import sys
import time
import warnings

import psutil

from amazons.core.processes import end_processes, process_context


def ignore_sigterm(ready):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(120)


if __name__ == "__main__":
    grace, kill_wait = float(sys.argv[1]), float(sys.argv[2])
    context = process_context()
    ready = context.Event()
    child = context.Process(target=ignore_sigterm, args=(ready,))
    child.start()
    assert ready.wait(120)
    forkserver = next(process for process in psutil.Process().children()
                      if "multiprocessing.forkserver" in " ".join(process.cmdline()))
    # The forkserver reaps its children and reports their exits: stopped, it reports none.
    forkserver.suspend()
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        end_processes([child], grace=grace, kill_wait=kill_wait)
    seconds = time.monotonic() - started
    unjoined = child.exitcode is None
    forkserver.resume()
    child.join(60)
    print(seconds, unjoined, child.pid, child.exitcode, [str(w.message) for w in caught])
"""


def test_ending_processes_returns_within_its_bound_when_a_kill_is_not_seen(tmp_path):
    """A forkserver child whose forkserver is stopped: killed, it is gone, but nothing reports
    its end, where the last join waited forever. `end_processes` returns after its grace and its
    wait for the kill, naming the process; it is reaped once the forkserver runs again."""
    script = tmp_path / "stopped.py"
    script.write_text(STOPPED_FORKSERVER_SCRIPT)
    grace, kill_wait = 0.5, 1.0
    result = subprocess.run([sys.executable, str(script), str(grace), str(kill_wait)],
                            capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    seconds, unjoined, pid, exitcode, warned = result.stdout.strip().split(" ", 4)
    # waited the grace and the kill's wait, then returned (well before another such wait)
    assert grace + kill_wait <= float(seconds) < grace + 2 * kill_wait, seconds
    assert unjoined == "True" and exitcode == str(-signal.SIGKILL)
    assert f"processes [{pid}] did not end within 1 s of their SIGKILL" in warned, warned


REPORT_SCRIPT = """
import sys

from amazons.core.processes import process_context


def report(queue):
    queue.put(sorted(name for name in ("torch", "amazons.neural.served", "amazons.mcts")
                     if name in sys.modules))


if __name__ == "__main__":
    context = process_context(sys.argv[1:])
    context = process_context()  # a later caller asking for nothing takes nothing back
    queue = context.Queue()
    child = context.Process(target=report, args=(queue,))
    child.start()
    print(queue.get(timeout=120))
    child.join(60)
"""


@pytest.mark.parametrize(("asked", "loaded"), [
    ((), []),
    (SELFPLAY_PRELOAD, ["amazons.mcts"]),
    ((*SELFPLAY_PRELOAD, *NetworkEvaluatorFactory.preload),
     ["amazons.mcts", "amazons.neural.served", "torch"]),
])
def test_the_forkserver_imports_what_its_process_asked_for_before_it_started(tmp_path, asked,
                                                                            loaded):
    """A child starts with what the callers of its process asked for: nothing unless asked, the
    search loaded where the actors' caller asked, and torch only where a caller (a network's
    server) asked for it. Each case in a fresh interpreter: a forkserver is one per
    process, and this one's may have started already."""
    script = tmp_path / "report.py"
    script.write_text(REPORT_SCRIPT)
    result = subprocess.run([sys.executable, str(script), *asked], capture_output=True,
                            text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(loaded)


START_SCRIPT = """
import sys
import time
from pathlib import Path

import psutil

from amazons.core.processes import process_context, start_forkserver


def report(queue):
    queue.put("torch" in sys.modules)


def forkserver_has_torch():
    # A child's command line reads empty until its exec is done (start_forkserver returns
    # before), and torch is mapped once the preload imported it.
    for child in psutil.Process().children():
        try:
            if ("multiprocessing.forkserver" in " ".join(child.cmdline())
                    and "libtorch" in Path(f"/proc/{child.pid}/maps").read_text()):
                return True
        except (psutil.Error, OSError):
            pass
    return False


if __name__ == "__main__":
    start_forkserver(sys.argv[1:])
    deadline = time.monotonic() + 120
    while not forkserver_has_torch() and time.monotonic() < deadline:
        time.sleep(0.05)
    loaded = forkserver_has_torch()  # no worker has started yet
    context = process_context()
    queue = context.Queue()
    child = context.Process(target=report, args=(queue,))
    child.start()
    print(loaded, queue.get(timeout=120))
    child.join(60)
"""


def test_the_main_job_can_start_its_forkserver_before_its_first_worker(tmp_path):
    """`start_forkserver` (what `python -m amazons.train` calls once its arguments parse) starts
    a forkserver that imports the modules it was given before any worker starts: it has torch
    loaded with no worker started, and its children have torch.

    The forkserver is found by its command line, which is empty until its exec is done:
    `start_forkserver` returns right after the fork, so a check made at once saw no forkserver
    whenever it read the command line first (2 of 5 runs of the old check in a PID namespace,
    where the scan of /proc is short, as on a fresh machine): the check waits for it instead."""
    script = tmp_path / "start.py"
    script.write_text(START_SCRIPT)
    result = subprocess.run([sys.executable, str(script), *NETWORK_PRELOAD],
                            capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


NO_MODULE_SCRIPT = """
import sys

import psutil

from amazons.core.processes import start_forkserver

try:
    start_forkserver(sys.argv[1:])
except ValueError as error:
    print(error)
print(len(psutil.Process().children()))
"""


@pytest.mark.parametrize(("name", "why"), [("amazons.no_such_module", "no such module"),
                                           ("no_such_package.module", "No module named")])
def test_a_preload_that_names_no_module_is_refused_before_a_forkserver_starts(tmp_path, name,
                                                                             why):
    """multiprocessing's forkserver drops the ImportError of a name it cannot import, without a
    word: the name is refused where it is asked for, and no forkserver starts."""
    script = tmp_path / "no_module.py"
    script.write_text(NO_MODULE_SCRIPT)
    result = subprocess.run([sys.executable, str(script), "amazons.mcts", name],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    message, children = result.stdout.strip().splitlines()
    assert message.startswith(f"the forkserver cannot preload {name!r}: {why}"), message
    assert children == "0"
    with pytest.raises(ValueError, match="cannot preload 'amazons.no_such_module'"):
        process_context(["amazons.no_such_module"])


def test_the_forkserver_is_given_the_packages_modules_and_never_the_main_script():
    """What multiprocessing is handed: the package's preload module alone, the modules it
    imports in the environment the forkserver starts with. `__main__` would run the parent's
    main script in the forkserver from CPython's gh-126631 fix on (3.13.8, 3.14)."""
    context = process_context(SELFPLAY_PRELOAD)
    if context.get_start_method() != "forkserver":
        pytest.skip("no forkserver on this platform")
    assert multiprocessing.forkserver._forkserver._preload_modules == [
        "amazons.core.forkserver_preload"]
    named = os.environ[PRELOAD_VARIABLE].split(",")
    assert set(SELFPLAY_PRELOAD) <= set(named)
    assert "__main__" not in named


def test_the_preload_lists_come_from_their_callers():
    """Each caller names what its processes run; the main job's forkserver, started before the
    job imports them, names them all (the actors', a network server's), and the arena's
    workers are never asked to preload self-play or torch."""
    assert set(JOB_PRELOAD) == {*SELFPLAY_PRELOAD, *SERVER_PRELOAD, *NETWORK_PRELOAD}
    assert "amazons.mcts:warm_up" in SELFPLAY_PRELOAD and "amazons.mcts:warm_up" in ARENA_PRELOAD
    assert not {"amazons.train.selfplay", *NETWORK_PRELOAD} & set(ARENA_PRELOAD)
    with pytest.raises(ValueError, match="'not a name' is no function name"):
        process_context(["amazons.mcts:not a name"])


BROKEN_PRELOAD_SCRIPT = """
import sys

from amazons.core.processes import process_context


def report(queue, broken):
    preloaded = [name for name in ("amazons.mcts", "fine_preload") if name in sys.modules]
    try:
        __import__(broken)
    except Exception as error:
        queue.put((preloaded, f"{type(error).__name__}: {error}"))
    else:
        queue.put((preloaded, "imported"))


if __name__ == "__main__":
    broken = sys.argv[1]
    context = process_context(["amazons.mcts:warm_up", broken, "fine_preload"])
    queue = context.Queue()
    for _ in range(2):
        child = context.Process(target=report, args=(queue, broken))
        child.start()
        print(queue.get(timeout=120), child.pid)
        child.join(60)
"""

BROKEN_MODULES = {
    "broken_by_import": ImportError("libamazons_missing.so: cannot open shared object file"),
    "broken_by_runtime": RuntimeError("the extension was built for another NumPy"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_MODULES))
def test_a_preload_that_fails_in_the_forkserver_is_reported_and_the_forkserver_serves_on(
        tmp_path, broken):
    """A module that exists but raises at import, in the forkserver: multiprocessing dropped an
    ImportError without a word and died of any other exception (every later start then failed
    with an EOFError). Now the failure is one line on stderr naming the module and its error,
    written once (not again by each child), the modules after it are still preloaded, the
    forkserver forks child after child, and a child that imports the module gets its error."""
    error = BROKEN_MODULES[broken]
    (tmp_path / f"{broken}.py").write_text(f"raise {error!r}\n")
    (tmp_path / "fine_preload.py").write_text("")
    script = tmp_path / "broken.py"
    script.write_text(BROKEN_PRELOAD_SCRIPT)
    # The forkserver of Python 3.10 and 3.11 does not take its parent's sys.path (the script's
    # folder): the environment gives it the modules' folder.
    environment = {**os.environ,
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                               os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(script), broken], capture_output=True,
                            text=True, timeout=180, check=False, env=environment)
    assert result.returncode == 0, result.stderr
    described = f"{type(error).__name__}: {error}"
    line = (f"amazons: the forkserver could not preload {broken}: {described}; "
            f"its children import {broken} themselves")
    assert result.stderr.splitlines().count(line) == 1, result.stderr
    reports = result.stdout.strip().splitlines()
    assert len(reports) == 2, result.stdout
    for report in reports:
        assert report.startswith(repr((["amazons.mcts", "fine_preload"], described))), report
    assert reports[0].split()[-1] != reports[1].split()[-1]  # two children, two processes


NO_VARIABLE_SCRIPT = """
import os
import sys

from amazons.core.processes import PRELOAD_VARIABLE, process_context


def report(queue):
    queue.put("amazons.mcts" in sys.modules)


if __name__ == "__main__":
    context = process_context(["amazons.mcts:warm_up"])
    del os.environ[PRELOAD_VARIABLE]
    queue = context.Queue()
    child = context.Process(target=report, args=(queue,))
    child.start()
    print(queue.get(timeout=120))
    child.join(60)
"""


def test_a_forkserver_started_without_its_list_says_it_preloads_nothing(tmp_path):
    """The list travels in the environment: a forkserver started after it was removed from
    there says so, and its children import their modules themselves."""
    script = tmp_path / "no_variable.py"
    script.write_text(NO_VARIABLE_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
    assert (f"amazons: the forkserver was started without {PRELOAD_VARIABLE} in its environment "
            "and preloads nothing") in result.stderr, result.stderr


def test_a_network_factorys_preload_holds_what_its_server_imports_anyway():
    """A network's server unpickles its factory (the factory's module) and runs torch: the
    factory's preload, imported in a fresh interpreter, loads both, so the server's forkserver
    has them. A factory of no network names nothing."""
    factory = NetworkEvaluatorFactory("model.pt")
    code = ("import importlib, sys\n"
            f"for name in {factory_preload(factory)!r}:\n"
            "    importlib.import_module(name)\n"
            f"print(all(name in sys.modules for name in ('torch', {type(factory).__module__!r})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    assert factory_preload(UniformEvaluator) == ()
    # a preload is not a field: factories compare by their settings alone
    assert NetworkEvaluatorFactory("model.pt") == NetworkEvaluatorFactory("model.pt")
    assert "preload" not in {field.name for field in dataclasses.fields(NetworkEvaluatorFactory)}
