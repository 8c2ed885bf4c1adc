"""The watchdog of Botzone programs on its own (`amazons.players.watchdog`): real process groups,
killed when the watchdog's input ends or its starter dies (its input still open elsewhere),
spared once let go; a watchdog holding nothing leaves while its starter lives on, and a line
written within the idle time is read; and its start loads nothing of the package. The whole
path through a player is in `tests/test_botzone_player.py`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amazons.players import watchdog

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


def ends_within(pid: int, seconds: float = 10.0) -> bool:
    """Whether process `pid` has exited (see `ended`) within `seconds`."""
    deadline = time.monotonic() + seconds
    while not ended(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return ended(pid)


def module_command() -> list[str]:
    return [sys.executable, "-m", "amazons.players.watchdog"]


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
        assert ends_within(child)
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


def test_a_watchdog_holding_nothing_leaves_while_its_starter_lives_on():
    # Every program it watched has ended and its starter (this process) lives on with the pipe
    # open: it leaves IDLE_EXIT_SECONDS after the line that let the last group go, killing
    # nothing; while it holds a group it stays, however long.
    held = start_group()
    guard = subprocess.Popen(watchdog.command(), stdin=subprocess.PIPE, start_new_session=True)
    try:
        guard.stdin.write(f"+{held.pid}\n".encode())
        guard.stdin.flush()
        time.sleep(watchdog.IDLE_EXIT_SECONDS + 0.5)
        assert guard.poll() is None
        let_go = time.monotonic()
        guard.stdin.write(f"-{held.pid}\n".encode())
        guard.stdin.flush()
        assert wait_for(guard, watchdog.IDLE_EXIT_SECONDS + 10) == 0
        assert time.monotonic() - let_go >= watchdog.IDLE_EXIT_SECONDS
        assert held.poll() is None  # let go: spared
    finally:
        for process in (guard, held):
            if process.poll() is None:
                process.kill()
            process.wait()
        guard.stdin.close()


def test_a_line_written_within_the_idle_time_is_always_read():
    # The starter's rule (amazons.players.program._Watchdog): a group written to a watchdog that
    # holds nothing, within IDLE_EXIT_SECONDS of the line that left it idle, is held.
    first, second = start_group(), start_group()
    guard = subprocess.Popen(watchdog.command(), stdin=subprocess.PIPE, start_new_session=True)
    try:
        guard.stdin.write(f"+{first.pid}\n".encode())
        guard.stdin.flush()
        let_go = time.monotonic()
        guard.stdin.write(f"-{first.pid}\n".encode())
        guard.stdin.flush()
        time.sleep(max(0.0, let_go + watchdog.IDLE_EXIT_SECONDS - 0.3 - time.monotonic()))
        guard.stdin.write(f"+{second.pid}\n".encode())
        guard.stdin.flush()
        # written within the idle time (else this run would prove nothing)
        assert time.monotonic() < let_go + watchdog.IDLE_EXIT_SECONDS
        time.sleep(1.0)
        assert guard.poll() is None  # it holds the second group
        guard.stdin.close()
        assert wait_for(guard) == 0
        assert wait_for(second) == -signal.SIGKILL and first.poll() is None
    finally:
        for process in (guard, first, second):
            if process.poll() is None:
                process.kill()
            process.wait()


def test_a_starter_that_dies_while_its_pipe_stays_open_still_has_its_groups_killed(tmp_path):
    # A copy of the pipe's write end outlives the starter (here this process holds it, as a
    # process that inherited it would): the input never ends, so the watchdog must notice that
    # its parent is gone, kill the groups it holds and exit.
    held = start_group()
    read_end, write_end = os.pipe()
    code = ("import subprocess, sys, time\n"
            "from amazons.players import watchdog\n"
            "guard = subprocess.Popen(watchdog.command(), stdin=int(sys.argv[1]),\n"
            "                         start_new_session=True)\n"
            "print(guard.pid, flush=True)\n"
            "time.sleep(300)\n")
    starter = subprocess.Popen([sys.executable, "-c", code, str(read_end)], pass_fds=(read_end,),
                               stdout=subprocess.PIPE, text=True, cwd=REPO,
                               env=dict(os.environ, PYTHONPATH=str(REPO)))
    os.close(read_end)
    guard = 0
    try:
        guard = int(starter.stdout.readline())
        os.write(write_end, f"+{held.pid}\n".encode())
        time.sleep(0.5)
        assert held.poll() is None and not ended(guard)
        starter.kill()
        starter.wait()
        assert wait_for(held) == -signal.SIGKILL
        assert ends_within(guard)
    finally:
        os.close(write_end)
        if starter.poll() is None:
            starter.kill()
        starter.wait()
        starter.stdout.close()
        if held.poll() is None:
            held.kill()
        held.wait()
        if guard and not ended(guard):
            os.kill(guard, signal.SIGKILL)


def test_held_groups_reads_plus_and_minus_lines_and_ignores_the_rest():
    lines = [b"+12\n", b"+7\n", b"-12\n", b"+x\n", b"\n", b"-99\n", b"+ 5 \n", b"*3\n", b"+7\n"]
    assert watchdog.held_groups(lines) == {7, 5}  # "*3" lets 3 go, as any line but "+" does


def test_the_watchdog_starts_without_the_package_or_numpy():
    interpreter, *rest = watchdog.command()
    result = subprocess.run([interpreter, "-X", "importtime", *rest], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    loaded = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert "os" in loaded and "signal" in loaded  # the listing is real
    assert not {name for name in loaded if name.split(".")[0] in ("amazons", "numpy", "typing")}
