"""The watchdog of Botzone programs: kills their process groups when the process that started
them dies, however it dies (SIGKILL included).

It reads lines from its input: `+GROUP` (a program's process group to kill if the starter
dies) and `-GROUP` (a group that has ended: never kill it, its number may be reused). Its input
ends when the process that started it has exited or died (the kernel closes the pipe's write
end either way); it then kills every group it still holds with SIGKILL and exits. Other lines
are ignored.

`amazons.botzone.program` starts one per process that starts programs, with `command()`: this
file run by its path under `python -I -S`, so it loads the standard library only (neither the
package nor numpy), and starts in a few tens of milliseconds. `python -m
amazons.botzone.watchdog` runs the same `main()`, after importing the package's root.

Standard library only, and only modules that load fast (no `typing`): nothing of the package
may be imported here.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable

_FILE = os.path.abspath(__file__)


def command() -> list[str]:
    """The command line that starts a watchdog: this file by path, isolated (`-I -S`)."""
    return [sys.executable, "-I", "-S", _FILE]


def held_groups(lines: Iterable[bytes]) -> set[int]:
    """The process groups still held after `lines` (`+GROUP` holds one, `-GROUP` lets it go).

    A line whose text after its first byte is not an integer is ignored.
    """
    groups: set[int] = set()
    for line in lines:
        try:
            group = int(line[1:])
        except ValueError:
            continue
        if line[:1] == b"+":
            groups.add(group)
        else:
            groups.discard(group)
    return groups


def kill_groups(groups: Iterable[int]) -> None:
    """SIGKILL every process group in `groups`; a group that is gone already is skipped."""
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass


def main(lines: Iterable[bytes] | None = None) -> None:
    """Read `+GROUP` / `-GROUP` lines (default: standard input's, as bytes) until they end, then
    kill the groups still held."""
    kill_groups(held_groups(sys.stdin.buffer if lines is None else lines))


if __name__ == "__main__":
    main()
