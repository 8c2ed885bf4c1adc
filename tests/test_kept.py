"""`amazons.players.keep_running.KeptProcess` with real child processes: a program that writes more
to stderr than a pipe holds still replies, and `kill` and `close` leave nothing of the program open
in this process. (Its replies and errors with the Python bot: `tests/test_botzone.py`; with the
C++ bot: `tests/test_cpp_protocol.py`.)"""

from __future__ import annotations

import os
import sys

import pytest

from amazons.players.keep_running import KEEP_RUNNING_MARKER, KeptProcess, KeptProcessError

PIPE_BYTES = 1 << 16  # what a Linux pipe holds by default: a writer past it waits for a reader
LOUD_STDERR = 3 * PIPE_BYTES

# Writes LOUD_STDERR characters and a line to stderr, replies as a kept bot, then writes one more
# line once its input ends.
LOUD_PROGRAM = f"""
import sys
sys.stderr.write("x" * {LOUD_STDERR} + "\\n")
sys.stderr.write("the root's statistics\\n")
sys.stderr.flush()
print("0 2 0 3 0 4", flush=True)
print({KEEP_RUNNING_MARKER!r}, flush=True)
sys.stdin.read()
sys.stderr.write("the end\\n")
"""

# Replies as a kept bot with a line on stderr, then waits for the end of its input.
QUIET_PROGRAM = f"""
import sys
sys.stderr.write("the root's statistics\\n")
sys.stderr.flush()
print("0 2 0 3 0 4", flush=True)
print({KEEP_RUNNING_MARKER!r}, flush=True)
sys.stdin.read()
"""


def open_objects() -> set[tuple[int, int]]:
    """The (device, inode) of every pipe and file this process holds open."""
    objects = set()
    for entry in os.scandir("/proc/self/fd"):
        try:
            status = os.stat(entry.path)
        except OSError:  # the descriptor scandir itself held, closed since
            continue
        objects.add((status.st_dev, status.st_ino))
    return objects


def held_by(program: KeptProcess) -> set[tuple[int, int]]:
    """The (device, inode) of the program's stdin and stdout pipes and its stderr file, here."""
    streams = (program.process.stdin, program.process.stdout, program.process.stderr)
    return {(status.st_dev, status.st_ino)
            for status in (os.fstat(stream.fileno()) for stream in streams)}


def test_a_program_that_writes_more_to_stderr_than_a_pipe_holds_still_replies():
    """Before, stderr was a pipe nobody read: the program blocked in its write and its reply
    never came (a timeout, where `--root-stats` was the cause)."""
    with KeptProcess([sys.executable, "-c", LOUD_PROGRAM]) as program:
        assert program.reply(timeout=20) == "0 2 0 3 0 4"
        assert "the root's statistics" in program.stderr_text()
        code, stderr = program.close(timeout=20)
    assert code == 0
    lines = stderr.splitlines()
    assert lines[1:] == ["the root's statistics", "the end"], lines[1:]
    assert lines[0] == "x" * LOUD_STDERR, f"{len(lines[0])} characters"


def test_an_exit_is_reported_with_the_end_of_the_programs_stderr():
    script = "import sys\nsys.stderr.write('x' * 10_000)\nsys.exit('gave up')\n"
    with KeptProcess([sys.executable, "-c", script]) as program:
        with pytest.raises(KeptProcessError) as raised:
            program.read_line(timeout=20)
    message = str(raised.value)
    quoted = len(message)
    assert quoted < 5000, f"the error quotes {quoted} characters, not their end"
    assert message.startswith("the program exited (status 1): ...x"), message[:100]
    assert message.endswith("x" * 100 + "gave up"), message[-200:]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_kill_closes_the_programs_pipes_and_its_stderr_file_here():
    program = KeptProcess([sys.executable, "-c", QUIET_PROGRAM])
    try:
        assert program.reply(timeout=20) == "0 2 0 3 0 4"
        held = held_by(program)
        assert held <= open_objects()
    finally:
        program.kill()
    assert program.process.returncode is not None
    left = held & open_objects()
    assert not left, f"{len(left)} of the program's 3 pipes and files left open"
    assert "the root's statistics" in program.stderr_text()  # kept after the file closed
    program.kill()  # again: nothing more


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_close_leaves_nothing_of_the_program_open_here():
    program = KeptProcess([sys.executable, "-c", QUIET_PROGRAM])
    try:
        program.reply(timeout=20)
        held = held_by(program)
        assert program.close(timeout=20)[0] == 0
    finally:
        program.kill()
    left = held & open_objects()
    assert not left, f"{len(left)} of the program's 3 pipes and files left open"
