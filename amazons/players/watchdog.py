"""The watchdog of Botzone programs: kills their process groups when the process that started
them dies, however it dies (SIGKILL included), and exits soon after either side ends.

It reads lines from its input: `+GROUP` (a program's process group to kill if the starter
dies) and `-GROUP` (a group that has ended: never kill it, its number may be reused). Other
lines are ignored. It ends in one of three ways:

* its input ends: the process that started it has exited or died (the kernel closes the pipe's
  write end either way), or closed the pipe; it kills every group it still holds with SIGKILL
  and exits;
* the process that started it is gone while the input is still open (a copy of the pipe's write
  end leaked into a process that lives on): it checks its parent every `PARENT_POLL_SECONDS`
  (`os.getppid()` no longer the starter's pid: it was reparented) and does the same;
* it has held no group for `IDLE_EXIT_SECONDS` (every program it watched has ended): it exits,
  killing nothing, so a watchdog never outlives the programs it watches by more than that while
  its starter lives on. A fresh watchdog waits for its first line however long it takes (its
  starter writes the groups right after starting it).

The starter may write `+GROUP` to a watchdog that has held nothing for a while only if the write
completes within `IDLE_EXIT_SECONDS` of when it wrote the line that left the watchdog idle: the
watchdog's last look at its input before an idle exit comes after that much time, so such a line
is always read. Otherwise the starter lets the group go again (`-GROUP`), closes the pipe and
starts a fresh watchdog (`amazons.players.program._Watchdog` keeps this rule).

`amazons.players.program` starts one with `command()`: this file run by its path under `python
-I -S`, so it loads the standard library only (neither the package nor numpy), and starts in a
few tens of milliseconds; the command names the starter's pid. `python -m
amazons.players.watchdog [PID]` runs the same `main()`, after importing the package's root.

Standard library only, and only modules that load fast (no `typing`): nothing of the package
may be imported here.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Iterable

_FILE = os.path.abspath(__file__)
IDLE_EXIT_SECONDS = 2.0  # a watchdog that has held no group this long exits
PARENT_POLL_SECONDS = 0.25  # how often it checks that the process that started it is alive


def command() -> list[str]:
    """The command line that starts a watchdog for this process: this file by path, isolated
    (`-I -S`), with this process's pid (the starter it watches)."""
    return [sys.executable, "-I", "-S", _FILE, str(os.getpid())]


def apply_lines(groups: set[int], lines: Iterable[bytes]) -> None:
    """Update `groups` with `lines` (`+GROUP` holds one, `-GROUP` lets it go); a line whose text
    after its first byte is not an integer is ignored."""
    for line in lines:
        try:
            group = int(line[1:])
        except ValueError:
            continue
        if line[:1] == b"+":
            groups.add(group)
        else:
            groups.discard(group)


def held_groups(lines: Iterable[bytes]) -> set[int]:
    """The process groups still held after `lines` (see `apply_lines`)."""
    groups: set[int] = set()
    apply_lines(groups, lines)
    return groups


def kill_groups(groups: Iterable[int]) -> None:
    """SIGKILL every process group in `groups`; a group that is gone already is skipped."""
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass


def watch(fd: int, starter: int) -> set[int]:
    """Read `+GROUP` / `-GROUP` lines from file descriptor `fd` until the input ends or the
    process `starter` is no longer this process's parent (the groups still held are returned:
    to be killed), or until no group has been held for `IDLE_EXIT_SECONDS` (an empty set)."""
    groups: set[int] = set()
    pending = b""
    idle_since: float | None = None  # None until the first line
    while True:
        starter_gone = os.getppid() != starter
        timeout = 0.0 if starter_gone else PARENT_POLL_SECONDS
        if idle_since is not None and not groups and not starter_gone:
            left = idle_since + IDLE_EXIT_SECONDS - time.monotonic()
            # Past the deadline, one last look at the input (taken after it) decides.
            if left <= 0 and not select.select([fd], [], [], 0)[0]:
                return set()
            timeout = min(timeout, max(left, 0.0))
        if not select.select([fd], [], [], timeout)[0]:
            if starter_gone:  # what it wrote before it died has been read
                return groups
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return groups
        *lines, pending = (pending + chunk).split(b"\n")
        apply_lines(groups, lines)
        if lines and not groups:
            idle_since = time.monotonic()


def main(argv: list[str] | None = None) -> None:
    """Watch standard input for the process named by the first argument (default: this
    process's parent now), then kill the groups still held when the watch ends."""
    argv = sys.argv[1:] if argv is None else argv
    starter = int(argv[0]) if argv else os.getppid()
    kill_groups(watch(sys.stdin.fileno(), starter))


if __name__ == "__main__":
    main()
