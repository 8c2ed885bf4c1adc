"""`amazons._processes`: `end_processes` leaves no started process behind, one that ignores SIGTERM
included, within one shared grace; `process_context`'s forkserver imports what its callers asked
for."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import signal
import subprocess
import sys
import time

import pytest

from amazons._processes import NETWORK_PRELOAD, end_processes, factory_preload
from amazons.mcts import UniformEvaluator
from amazons.neural.production import NetworkEvaluatorFactory


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


REPORT_SCRIPT = """
import sys

from amazons._processes import process_context


def report(queue):
    queue.put(sorted(name for name in ("torch", "amazons.neural.production", "amazons.mcts")
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
    ((), ["amazons.mcts"]),
    (NetworkEvaluatorFactory.preload, ["amazons.mcts", "amazons.neural.production", "torch"]),
])
def test_the_forkserver_imports_what_its_process_asked_for_before_it_started(tmp_path, asked,
                                                                            loaded):
    """A child starts with the search loaded, and with torch only where a caller of the process
    (a network's server) asked for it. Each case in a fresh interpreter: a forkserver is one per
    process, and this one's may have started already."""
    script = tmp_path / "report.py"
    script.write_text(REPORT_SCRIPT)
    result = subprocess.run([sys.executable, str(script), *asked], capture_output=True,
                            text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(loaded)


START_SCRIPT = """
import sys

import psutil

from amazons._processes import process_context, start_forkserver


def report(queue):
    queue.put("torch" in sys.modules)


if __name__ == "__main__":
    start_forkserver(sys.argv[1:])
    running = any("forkserver" in " ".join(child.cmdline())
                  for child in psutil.Process().children())
    context = process_context()
    queue = context.Queue()
    child = context.Process(target=report, args=(queue,))
    child.start()
    print(running, queue.get(timeout=120))
    child.join(60)
"""


def test_the_main_job_can_start_its_forkserver_before_its_first_worker(tmp_path):
    """`start_forkserver` (what `python -m amazons.train` calls first) leaves a forkserver
    running before any worker starts, with the modules it was given: its children have torch."""
    script = tmp_path / "start.py"
    script.write_text(START_SCRIPT)
    result = subprocess.run([sys.executable, str(script), *NETWORK_PRELOAD],
                            capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


def test_a_network_factory_names_torch_for_its_servers_forkserver():
    assert factory_preload(NetworkEvaluatorFactory("model.pt")) == NETWORK_PRELOAD
    assert NETWORK_PRELOAD == ("amazons.neural.production",)
    assert factory_preload(UniformEvaluator) == ()
    # a preload is not a field: factories compare by their settings alone
    assert NetworkEvaluatorFactory("model.pt") == NetworkEvaluatorFactory("model.pt")
    assert "preload" not in {field.name for field in dataclasses.fields(NetworkEvaluatorFactory)}
