"""`python -m amazons.train` parses its command line before anything else: one that does not parse
exits 2 without importing torch or starting a forkserver, help starts none, and one that runs the
local backend starts its forkserver before the main job's imports; its parser
(`amazons.train.cli`) is the one the main job parses with (`amazons.train.command.main`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

PROBE = "AMAZONS_TRAIN_COMMAND_PROBE"  # marks the processes of one command started here


def forkservers_of(command: list[str], output: Path,
                   linger: float) -> tuple[subprocess.CompletedProcess, set[int]]:
    """Run `command` (its output in files under `output`: a pipe that nobody reads meanwhile could
    fill and stop it), and the pids of the forkservers that it or its children ran, watched while
    it runs (2 minutes at most) and `linger` seconds after it exits (one that it started would
    still be importing its modules then)."""
    probe = f"{os.getpid()}-{time.monotonic_ns()}"
    output.mkdir(exist_ok=True)
    stdout_path, stderr_path = output / "stdout", output / "stderr"
    with open(stdout_path, "w") as stdout, open(stderr_path, "w") as stderr:
        process = subprocess.Popen(command, env={**os.environ, PROBE: probe}, stdout=stdout,
                                   stderr=stderr)
    seen: set[int] = set()
    deadline, ended_at = time.monotonic() + 120, None
    while ended_at is None or time.monotonic() < ended_at + linger:
        for candidate in psutil.process_iter(["cmdline", "environ"]):
            if ((candidate.info["environ"] or {}).get(PROBE) == probe
                    and "multiprocessing.forkserver" in " ".join(candidate.info["cmdline"] or ())):
                seen.add(candidate.pid)
        if ended_at is None and (process.poll() is not None or time.monotonic() > deadline):
            ended_at = time.monotonic()
        time.sleep(0.05)
    if process.poll() is None:
        process.kill()
    process.wait()
    return subprocess.CompletedProcess(command, process.returncode, stdout_path.read_text(),
                                       stderr_path.read_text()), seen


@pytest.mark.parametrize(("arguments", "message"), [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--backend", "nosuch"], "argument --backend: invalid choice: 'nosuch'"),
    (["--backend", "ray", "--iterations", "many"], "argument --iterations: invalid int value"),
])
def test_a_command_line_that_does_not_parse_exits_2_before_any_forkserver_or_torch(tmp_path,
                                                                                  arguments,
                                                                                  message):
    result, forkservers = forkservers_of(
        [sys.executable, "-X", "importtime", "-m", "amazons.train", *arguments], tmp_path,
        linger=1.0)
    assert result.returncode == 2, result.stderr
    assert f"python -m amazons.train: error: {message}" in result.stderr
    assert forkservers == set()
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "amazons.train.cli" in imported and "torch" not in imported


def test_help_starts_no_forkserver_and_a_local_run_starts_one_before_its_imports(tmp_path):
    """Help is printed by the main job, with its description, and starts nothing. A command line
    that parses and runs the local backend starts the forkserver; this one then fails in the
    main job (nothing to resume in an empty folder), after the forkserver started."""
    result, forkservers = forkservers_of([sys.executable, "-m", "amazons.train", "--help"],
                                         tmp_path / "help", linger=1.0)
    assert result.returncode == 0 and "An iteration is" in result.stdout
    assert forkservers == set()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result, forkservers = forkservers_of(
        [sys.executable, "-m", "amazons.train", "--resume", "--run-dir", str(run_dir)],
        tmp_path / "resume", linger=0.5)
    assert result.returncode == 1 and "holds no finished iteration" in result.stderr
    assert len(forkservers) == 1
    # it leaves once its imports are done, its starter gone
    gone = psutil.wait_procs([psutil.Process(pid) for pid in forkservers
                              if psutil.pid_exists(pid)], timeout=60)[1] == []
    assert gone
