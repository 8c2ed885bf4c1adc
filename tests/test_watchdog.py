"""The watchdog of Botzone programs on its own (`amazons.botzone.watchdog`): real process groups,
killed when the watchdog's input ends, spared once let go; and its start loads nothing of the
package. The whole path through a player is in `tests/test_botzone_player.py`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amazons.botzone import watchdog

REPO = Path(__file__).resolve().parents[1]


def start_group() -> subprocess.Popen:
    """A sleeping process that leads a process group of its own (its pid is the group's number)."""
    return subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, start_new_session=True)


def wait_for(process: subprocess.Popen, seconds: float = 10.0) -> int | None:
    """`process`'s exit status once it ends, None if it is still running after `seconds`."""
    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return process.returncode


def ended(pid: int) -> bool:
    """Whether process `pid` has exited (gone, or a zombie nobody has reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def module_command() -> list[str]:
    return [sys.executable, "-m", "amazons.botzone.watchdog"]


@pytest.mark.parametrize("make_command", [watchdog.command, module_command],
                         ids=["by-path", "python-m"])
def test_the_groups_still_held_are_killed_when_the_input_ends(make_command):
    held, let_go, never_named = start_group(), start_group(), start_group()
    environment = dict(os.environ, PYTHONPATH=str(REPO))
    guard = subprocess.Popen(make_command(), stdin=subprocess.PIPE, cwd=REPO, env=environment,
                             start_new_session=True)
    try:
        guard.stdin.write(f"+{held.pid}\n+{let_go.pid}\n-{let_go.pid}\nnot a line\n+\n".encode())
        guard.stdin.flush()
        time.sleep(0.2)
        assert held.poll() is None and guard.poll() is None  # nothing dies before the input ends
        guard.stdin.close()
        assert wait_for(guard) == 0
        assert wait_for(held) == -signal.SIGKILL
        assert let_go.poll() is None and never_named.poll() is None
    finally:
        for process in (guard, held, let_go, never_named):
            if process.poll() is None:
                process.kill()
            process.wait()


def test_the_whole_group_dies_not_only_its_leader():
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    child = int(leader.stdout.readline())
    guard = subprocess.Popen(watchdog.command(), stdin=subprocess.PIPE)
    try:
        guard.communicate(f"+{leader.pid}\n".encode(), timeout=10)
        assert wait_for(leader) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while not ended(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ended(child)
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
        leader.stdout.close()


def test_a_group_that_has_ended_is_skipped_and_the_others_still_die():
    gone, alive = start_group(), start_group()
    gone.kill()
    gone.wait()
    guard = subprocess.Popen(watchdog.command(), stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, errors = guard.communicate(f"+{gone.pid}\n+{alive.pid}\n".encode(), timeout=10)
        assert guard.returncode == 0 and errors == b""
        assert wait_for(alive) == -signal.SIGKILL
    finally:
        if alive.poll() is None:
            alive.kill()
        alive.wait()


def test_held_groups_reads_plus_and_minus_lines_and_ignores_the_rest():
    lines = [b"+12\n", b"+7\n", b"-12\n", b"+x\n", b"\n", b"-99\n", b"+ 5 \n", b"*3\n", b"+7\n"]
    assert watchdog.held_groups(lines) == {7, 5}  # "*3" lets 3 go, as any line but "+" does


def test_the_watchdog_starts_without_the_package_or_numpy():
    result = subprocess.run([*watchdog.command()[:-1], "-X", "importtime", watchdog.command()[-1]],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    loaded = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert "os" in loaded and "signal" in loaded  # the listing is real
    assert not {name for name in loaded if name.split(".")[0] in ("amazons", "numpy", "typing")}
