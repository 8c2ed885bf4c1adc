"""The suite's safety net (`tests/harness.py`), each part in a real pytest session of its own
(`pytester`, in a subprocess that loads the plugin): a hung test fails with its stack at its
ceiling and the session goes on; a failed comparison of large values reports in a few lines,
fast, where pytest's own report under `CI` ran for minutes; a process left running is named,
the session fails, and the process is gone afterwards."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from harness import SESSION_MARK, large_comparison_report, session_processes

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """Run pytest in a subprocess on `pytester`'s files with the harness plugin loaded (and none
    of this suite's conftest); returns `run(*arguments, timeout=...)`."""
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)

    def run(*arguments: str, timeout: float = 120) -> pytest.RunResult:
        return pytester.runpytest_subprocess("-p", "harness", "-p", "no:cacheprovider",
                                             "-o", "markers=slow", *arguments, timeout=timeout)

    return run


HANGING_TESTS = """
import time

import pytest


def test_hangs():
    time.sleep(120)


@pytest.mark.slow
def test_slow_within_its_longer_ceiling():
    time.sleep(1.5)


@pytest.mark.slow
def test_slow_hangs():
    time.sleep(120)


def test_after_them():
    pass
"""


def test_a_hung_test_fails_at_its_ceiling_with_its_stack_and_the_session_goes_on(pytester,
                                                                                  inner):
    """A ceiling of 1 s (a slow test: 4 s): the hung tests fail naming the line they hung on,
    the slow test within its longer ceiling passes, and the test after them runs."""
    pytester.makepyfile(test_hanging=HANGING_TESTS)
    result = inner("-o", "timeout=1", "-o", "timeout_method=signal", timeout=100)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*test_hangs*", "*time.sleep(120)*", "*Timeout (>1.0s)*"])
    result.stdout.fnmatch_lines(["*test_slow_hangs*", "*Timeout (>4.0s)*"])


LARGE_COMPARISONS = """
def test_two_long_lists_that_differ_everywhere():
    left = [f"{index:6d} " + "0.123456789 " * 8 for index in range(2000)]
    right = [f"{index:6d} " + "0.123456788 " * 8 for index in range(2000)]
    assert left == right


def test_two_short_lists():
    assert [1, 2, 3] == [1, 2, 4]
"""


def test_a_failed_comparison_of_large_lists_reports_in_a_few_lines_under_ci(pytester, inner,
                                                                             monkeypatch):
    """Under `CI` pytest's own report of two lists of 2,000 long strings that differ everywhere
    diffs them with difflib for minutes (killed after 70 s, where this report takes well under a
    second): the harness reports the sizes, the first difference and the count; a small
    comparison keeps pytest's report."""
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_large=LARGE_COMPARISONS)
    result = inner(timeout=60)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*left has 2000 items, right has 2000*",
        "*first difference at index 0:*",
        "*left:  '     0 0.123456789 *",
        "*right: '     0 0.123456788 *",
        "*2000 of the 2000 compared items differ*",
    ])
    result.stdout.fnmatch_lines(["*At index 2 diff: 3 != 4*", "*Full diff*"])  # pytest's own
    # both reports, each twice (the failure and the summary): pytest's of the long lists would be
    # over 4,000 lines
    assert len(result.stdout.lines) < 100, len(result.stdout.lines)


def test_the_large_comparison_report_of_texts_mappings_and_arrays():
    lines = [f"line {index}" for index in range(500)]
    changed = [*lines[:300], "line 300 changed", *lines[301:], "an extra line"]
    report = large_comparison_report("==", "\n".join(lines), "\n".join(changed))
    assert "left has 500 lines, right has 501" in report
    assert "first difference at index 300:" in report and "  right: 'line 300 changed'" in report
    assert "1 of the 500 compared lines differ" in report
    assert "first extra line (right, index 500): 'an extra line'" in report

    left = {key: key for key in range(300)}
    right = {key: -key for key in range(1, 301)}
    report = large_comparison_report("==", left, right)
    assert report[2:] == ["left has 300 keys, right has 300",
                          "1 keys only in left, the first: 0",
                          "1 keys only in right, the first: 300",
                          "299 keys differ in value, the first 1:", "  left:  1", "  right: -1"]

    rows = np.zeros((200, 3))
    other = rows.copy()
    other[150, 2] = 1.0
    report = large_comparison_report("==", list(rows), list(other))
    assert "first difference at index 150:" in report
    assert "1 of the 200 compared items differ" in report

    assert large_comparison_report("==", [1, 2], [1, 3]) is None  # small: pytest's report
    assert large_comparison_report("!=", lines, lines) is None


LEFT_RUNNING = """
import subprocess
import sys


def test_leaves_a_child_running():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def test_leaves_a_detached_process_running():
    # its parent exits at once: the process is adopted by init, outside this session's tree
    subprocess.run([sys.executable, "-c",
                    "import os, time\\nif os.fork():\\n    os._exit(0)\\nos.setsid()\\n"
                    "time.sleep(120)"], check=True)
"""


def test_a_process_left_running_fails_the_session_by_name_and_is_killed(pytester, inner):
    pytester.makepyfile(test_left=LEFT_RUNNING)
    result = inner("-o", "straggler_grace=1")
    result.assert_outcomes(passed=2, errors=1)
    output = result.stdout.str()
    assert "the test session left 2 processes running 1 s after its last test; killed now" \
        in output, output
    # the report as the ERRORS section prints it (with CI set, the short summary repeats it whole)
    report = output.split("short test summary info")[0]
    pids = [int(pid) for pid in re.findall(r"pid (\d+) \(parent \d+, started", report)]
    assert len(pids) == 2 and report.count("import time; time.sleep(120)") == 1
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", pid


NOTHING_LEFT = """
import multiprocessing
import subprocess
import sys
import time


def test_starts_the_forkserver_and_ends_its_child():
    context = multiprocessing.get_context("forkserver")
    child = context.Process(target=time.sleep, args=(0.1,))
    child.start()
    child.join(60)
    assert child.exitcode == 0


def test_leaves_a_process_that_ends_within_the_grace():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
"""


def test_the_sessions_own_forkserver_and_a_straggler_that_ends_in_time_pass(pytester, inner):
    """The forkserver of the session's process runs until that process exits, by design: not a
    leftover. A process that ends within the grace is not one either."""
    pytester.makepyfile(test_clean=NOTHING_LEFT)
    result = inner("-o", "straggler_grace=10")
    result.assert_outcomes(passed=2)


def test_this_session_marks_the_processes_it_starts():
    """The mark is this process's pid, inherited by what it starts."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 30
        while child.pid not in {process.pid for process in session_processes()}:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert psutil.Process(child.pid).environ()[SESSION_MARK] == str(psutil.Process().pid)
    finally:
        child.kill()
        child.wait()
