"""The test session's safety net, a pytest plugin (`pytest_plugins` in tests/conftest.py): a hung
test fails with its stack, a failed comparison of large values reports in a few lines, and
nothing the session started outlives it. Each part is checked in tests/test_harness.py.

* **Ceilings.** pytest-timeout's `timeout` (pyproject.toml) is every test's ceiling; a test
  marked `slow` gets `SLOW_TIMEOUT_FACTOR` times it. Its `signal` method raises in the hung test,
  which fails with the stack where it hung while the session goes on. The `thread` method ends
  the whole process instead: under pytest-xdist with `--dist loadfile` (Makefile) the crashed
  worker's file went to a fresh worker, which hung and crashed in turn (a hung test crashed 9
  workers, one ceiling each, before xdist gave up) and its stack went nowhere. A ceiling given
  for one run (`--timeout`, `PYTEST_TIMEOUT`) holds for every test as given.
* **Large comparisons.** A failed `assert left == right` on large sequences, texts or mappings
  reports the sizes, the first difference (both sides) and how many differ, in place of
  pytest's own report, which pretty-prints both sides and diffs them with `difflib.ndiff` when
  `CI` is set or `-v` is given (quadratic: two lists of 2,000 long strings ran for minutes).
  A `pytest_assertrepr_compare` hook cannot prevent that: pluggy calls every implementation,
  pytest's own included, before the first report is taken. So for each test the function that
  the rewritten `assert` calls (`_pytest.assertion.util._reprcompare`, which pytest's assertion
  plugin sets per test) is wrapped: a large comparison never reaches pytest's report.
* **Leftovers.** At the end of each session (each xdist worker has its own) every process that
  it started and that still runs is named and killed, and the session fails. A process counts
  as the session's when it descends from the pytest process or carries `SESSION_MARK` (this
  process's pid) in the environment it started with, which finds a process that left the tree
  (a daemon that detached, a program whose parent died) too. The multiprocessing forkserver and
  resource tracker of the pytest process itself run until it exits, by design: they are left
  alone, found as its own children by their command lines (the processes the forkserver forked
  are checked).
"""

from __future__ import annotations

import os
import reprlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import psutil
import pytest
from _pytest.assertion import util as assertion_util

# The ceiling of a test marked slow, in ceilings of an ordinary one (pyproject's `timeout`, 300
# s): 1,200 s. The longest slow test, the learning test, took 135-230 s alone and up to 334 s
# beside the other worker (docs/experiments.md); the longest others take under a minute.
SLOW_TIMEOUT_FACTOR = 4

# A comparison is large when a side holds more items than this (a sequence's elements, a
# mapping's keys, a text's lines) or, for texts, more characters than `LARGE_TEXT_CHARS`.
# pytest's own report of 100 differing lines takes well under a second.
LARGE_ITEMS = 100
LARGE_TEXT_CHARS = 10_000

# The environment variable that marks the processes a test session started: the pid of its
# pytest process, set as the plugin loads (before any test runs), so that every process started
# since inherits it.
SESSION_MARK = "AMAZONS_TEST_SESSION"
os.environ[SESSION_MARK] = str(os.getpid())

# How long a process left at the session's end may take to exit by itself before it is named
# (a program whose player just closed, a watchdog that leaves once idle, Ray's processes after
# `ray.shutdown`; the `straggler_grace` ini option's default), and how long a killed one may
# take to go.
STRAGGLER_GRACE_S = 10.0
KILL_WAIT_S = 5.0

# The command lines of what a process's own multiprocessing keeps running until it exits.
KEPT_UNTIL_EXIT = ("from multiprocessing.forkserver import main",
                   "from multiprocessing.resource_tracker import main")

_short = reprlib.Repr()  # an item of a report
_short.maxstring = _short.maxother = 160
_short.maxlist = _short.maxtuple = _short.maxdict = 8
_summary = reprlib.Repr()  # a whole side, in the report's first line
_summary.maxstring = _summary.maxother = 40
_summary.maxlist = _summary.maxtuple = _summary.maxdict = 3


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("straggler_grace", "seconds a process left running at the end of the session "
                  "may take to exit by itself before the session fails naming it "
                  "(tests/harness.py)", default=str(STRAGGLER_GRACE_S))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give the tests marked slow `SLOW_TIMEOUT_FACTOR` times the ceiling in the config file."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    if config.getoption("timeout", None) is not None or os.environ.get("PYTEST_TIMEOUT"):
        return  # a ceiling given for this run holds for every test
    ceiling = float(config.getini("timeout") or 0)
    if ceiling <= 0:
        return
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_FACTOR * ceiling))


# ---------------------------------------------------------------------------------------------
# Large comparisons


def _same(left: Any, right: Any) -> bool:
    """Whether two items are equal, arrays included (whose `==` is elementwise)."""
    try:
        return bool(left == right)
    except (TypeError, ValueError):
        try:
            return bool(np.array_equal(left, right))
        except (TypeError, ValueError):
            return False


def _is_text(value: Any) -> bool:
    return isinstance(value, (str, bytes))


def _is_sequence(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    return isinstance(value, Sequence) and not _is_text(value)


def _sequence_report(left: Sequence, right: Sequence, what: str = "items") -> list[str]:
    compared = min(len(left), len(right))
    differing = [index for index in range(compared) if not _same(left[index], right[index])]
    lines = [f"left has {len(left)} {what}, right has {len(right)}"]
    if differing:
        first = differing[0]
        lines += [f"first difference at index {first}:",
                  f"  left:  {_short.repr(left[first])}",
                  f"  right: {_short.repr(right[first])}",
                  f"{len(differing)} of the {compared} compared {what} differ"]
    else:
        lines.append(f"the first {compared} {what} are equal")
    if len(left) != len(right):
        longer, name = (left, "left") if len(left) > len(right) else (right, "right")
        lines.append(f"first extra {what[:-1]} ({name}, index {compared}): "
                     f"{_short.repr(longer[compared])}")
    return lines


def _text_report(left: str | bytes, right: str | bytes) -> list[str]:
    compared = min(len(left), len(right))
    offset = next((index for index in range(compared) if left[index] != right[index]), compared)
    lines = [f"left has {len(left)} characters, right has {len(right)}; "
             f"the first difference is at character {offset}"]
    return lines + _sequence_report(left.splitlines(), right.splitlines(), "lines")


def _mapping_report(left: Mapping, right: Mapping) -> list[str]:
    only_left = [key for key in left if key not in right]
    only_right = [key for key in right if key not in left]
    differing = [key for key in left if key in right and not _same(left[key], right[key])]
    lines = [f"left has {len(left)} keys, right has {len(right)}"]
    for name, keys in (("left", only_left), ("right", only_right)):
        if keys:
            lines.append(f"{len(keys)} keys only in {name}, the first: {_short.repr(keys[0])}")
    if differing:
        key = differing[0]
        lines += [f"{len(differing)} keys differ in value, the first {_short.repr(key)}:",
                  f"  left:  {_short.repr(left[key])}", f"  right: {_short.repr(right[key])}"]
    return lines


def large_comparison_report(op: str, left: Any, right: Any) -> list[str] | None:
    """A short report of a failed `left == right` between large values (more than `LARGE_ITEMS`
    items, or `LARGE_TEXT_CHARS` characters of text), in place of pytest's diff: the sizes, the
    first difference with both sides, how many differ. None for any other comparison, which
    keeps pytest's own report."""
    if op != "==":
        return None
    if _is_text(left) and _is_text(right) and type(left) is type(right):
        large = (max(len(left), len(right)) > LARGE_TEXT_CHARS
                 or max(left.count("\n" if isinstance(left, str) else b"\n"),
                        right.count("\n" if isinstance(right, str) else b"\n")) > LARGE_ITEMS)
        body = _text_report(left, right) if large else None
    elif _is_sequence(left) and _is_sequence(right):
        large = max(len(left), len(right)) > LARGE_ITEMS
        body = _sequence_report(left, right) if large else None
    elif isinstance(left, Mapping) and isinstance(right, Mapping):
        large = max(len(left), len(right)) > LARGE_ITEMS
        body = _mapping_report(left, right) if large else None
    else:
        body = None
    if body is None:
        return None
    return [f"{_summary.repr(left)} == {_summary.repr(right)}",
            "(a large comparison: its sizes and first difference, tests/harness.py)", *body]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """For the duration of a test, answer the rewritten `assert`'s request for a comparison
    report with `large_comparison_report` where it applies, and with pytest's own otherwise."""
    pytest_report = assertion_util._reprcompare
    if pytest_report is None:  # assertion rewriting is off
        return (yield)
    rewrite = item.config.getvalue("assertmode") == "rewrite"

    def report(op: str, left: Any, right: Any) -> str | None:
        lines = large_comparison_report(op, left, right)
        if lines is None:
            return pytest_report(op, left, right)
        # formatted as pytest formats a hook's report (`_pytest.assertion.callbinrepr`)
        text = "\n~".join(line.replace("\n", "\\n") for line in lines)
        return text.replace("%", "%%") if rewrite else text

    assertion_util._reprcompare = report
    try:
        return (yield)
    finally:
        assertion_util._reprcompare = pytest_report


# ---------------------------------------------------------------------------------------------
# Leftovers


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline()) or f"[{process.name()}]"
    except psutil.Error:
        return "?"


def _running(process: psutil.Process) -> bool:
    """Alive and not a zombie (a zombie has exited; only its parent's reaping is left)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def session_processes() -> list[psutil.Process]:
    """The running processes this session started: this process's descendants and the processes
    whose environment carries `SESSION_MARK` with this process's pid, less what this process's
    own multiprocessing keeps until it exits (`KEPT_UNTIL_EXIT`)."""
    this = psutil.Process()
    found = {process.pid: process for process in this.children(recursive=True)}
    mark = str(this.pid)
    for process in psutil.process_iter(["environ"]):
        environment = process.info["environ"] or {}
        if environment.get(SESSION_MARK) == mark and process.pid != this.pid:
            found.setdefault(process.pid, process)
    kept = {child.pid for child in this.children()
            if any(command in _command(child) for command in KEPT_UNTIL_EXIT)}
    return [process for pid, process in sorted(found.items())
            if pid not in kept and _running(process)]


def _start_key(process: psutil.Process) -> tuple[int, float] | None:
    """`(pid, start time)`: a process's identity, a reused pid aside; None once it is gone."""
    try:
        return process.pid, process.create_time()
    except psutil.Error:
        return None


def _await_exit(processes: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Those of `processes` still running after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        processes = [process for process in processes if _running(process)]
        if not processes or time.monotonic() >= deadline:
            return processes
        time.sleep(0.1)


def end_leftovers(started_before: set[tuple[int, float]], grace: float) -> str | None:
    """Name and kill the processes of this session still running `grace` seconds from now,
    except those of `started_before` ((pid, start time) pairs); None when there are none."""
    left = [process for process in session_processes()
            if _start_key(process) not in started_before]
    left = _await_exit(left, grace)
    if not left:
        return None
    now = time.time()
    lines = []
    for process in left:
        try:
            parent, age = process.ppid(), now - process.create_time()
        except psutil.Error:
            parent, age = "?", float("nan")
        lines.append(f"  pid {process.pid} (parent {parent}, started {age:.0f} s ago): "
                     f"{_short.repr(_command(process))[1:-1]}")
    for process in left:
        try:
            process.kill()
        except psutil.Error:
            pass
    survivors = _await_exit(left, KILL_WAIT_S)
    return "\n".join([f"the test session left {len(left)} processes running "
                      f"{grace:g} s after its last test; killed now"
                      + (f" (still running: {[process.pid for process in survivors]})"
                         if survivors else "") + ":", *lines])


@pytest.fixture(scope="session", autouse=True)
def nothing_left_running(pytestconfig: pytest.Config) -> Iterator[None]:
    """Fail the session if a process it started is still running at its end (after the
    `straggler_grace` ini option's seconds), naming each (pid, parent, command line); they are
    killed after the report, so the run still ends."""
    started_before = {_start_key(process) for process in session_processes()} - {None}
    yield
    report = end_leftovers(started_before, float(pytestconfig.getini("straggler_grace")))
    if report is not None:
        pytest.fail(report, pytrace=False)
