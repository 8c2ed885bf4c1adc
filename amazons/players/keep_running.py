"""A Botzone program in keep-running mode, driven line by line from Python.

`KeptProcess` starts a command (the project's bot, its C++ export, any Botzone program), pumps
its stdout on a thread and reads it with timeouts: send one turn's input, get the reply line, the
keep-running line after it checked. Scripts, benchmarks and tests talk to a bot this way:

    import sys

    from amazons.players.keep_running import KeptProcess

    with KeptProcess([sys.executable, "-m", "amazons.botzone", "--model", "none"]) as bot:
        print(bot.ask("1\\n-1 -1 -1 -1 -1 -1"))  # Black's first move, as Botzone asks for it
        print(bot.close())                       # (0, ''): the end of input ends the bot

The program's stderr goes to an unlinked temporary file, not a pipe: a pipe nobody reads blocks a
program that writes more than it holds (64 KiB on Linux; `--root-stats` writes that much) where
its next reply is due, and the block looked like a timeout. The whole of it is kept (`close`,
`stderr_text`); errors quote its end. `kill` and `close` leave no pipe or file of the program
open here.

It judges nothing: the arena's `botzone:` player (`amazons.players.program.BotzonePlayer`) also
counts the program's CPU clock, pauses it between turns as Botzone does and turns every failure
into a fault. Imports `amazons.players.botzone_limits` (the marker) only.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence

from amazons.players.botzone_limits import KEEP_RUNNING_MARKER

__all__ = ["KeptProcess", "KeptProcessError"]

QUOTED_STDERR_CHARS = 4000  # the end of the program's stderr that an error quotes, at most
PUMP_END_S = 5.0  # how long `kill` waits for the end of the program's stdout before closing it


class KeptProcessError(RuntimeError):
    """The program exited, fell silent past a timeout, or broke the keep-running protocol."""


class KeptProcess:
    """A program in keep-running mode: its stdout lines arrive on `lines` (None once it closed).

    Args:
        command: the program and its arguments (run without a shell).
        cwd, env: its working directory and environment (default: this process's).

    Attributes:
        process: the `subprocess.Popen` (text mode, line-buffered stdin and stdout pipes; its
            `stderr` reads the program's stderr file from where the last read stopped).
        started: `time.perf_counter()` just before the program was started.
        replied_at: `time.perf_counter()` when the last reply line arrived (`reply`).
        lines: the queue the pump thread fills with stdout lines, newline removed; None at the end.
    """

    def __init__(self, command: Sequence[str], cwd: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        descriptor, path = tempfile.mkstemp(prefix="amazons-kept-stderr-")
        try:
            # the program writes through one handle and this process reads through another, so
            # neither moves the other's offset; the name goes at once, the file with its last handle
            appended = open(path, "ab")
            stderr = open(path, errors="replace")
        finally:
            os.close(descriptor)
            os.unlink(path)
        try:
            self.started = time.perf_counter()
            self.process = subprocess.Popen(
                [str(part) for part in command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=appended, text=True, bufsize=1, cwd=cwd,
                env=None if env is None else dict(env))
        except BaseException:
            stderr.close()
            raise
        finally:
            appended.close()  # the program holds its own
        self.process.stderr = stderr
        self._stderr_at_kill: str | None = None  # the whole of it, once `kill` closed the file
        self.replied_at = self.started
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def __enter__(self) -> KeptProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()

    def send(self, text: str) -> float:
        """Write `text` (a newline added if it lacks one); `time.perf_counter()` once flushed."""
        self.process.stdin.write(text if text.endswith("\n") else text + "\n")
        self.process.stdin.flush()
        return time.perf_counter()

    def read_line(self, timeout: float = 30.0) -> str:
        """The next stdout line.

        Raises:
            KeptProcessError: no line within `timeout` seconds, or the program exited (the end
                of its stderr quoted).
        """
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise KeptProcessError(f"no line from the program within {timeout:g} s") from None
        if line is None:
            self.lines.put(None)  # the end stays the end for a later read
            try:
                status = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                raise KeptProcessError("the program closed its output but did not exit") from None
            stderr = self.stderr_text().strip()
            if len(stderr) > QUOTED_STDERR_CHARS:
                stderr = "..." + stderr[-QUOTED_STDERR_CHARS:]
            raise KeptProcessError(f"the program exited (status {status}): {stderr}")
        return line

    def reply(self, timeout: float = 30.0) -> str:
        """The next reply line, then the keep-running line that must follow it.

        Raises:
            KeptProcessError: see `read_line`; also another line where the marker belongs.
        """
        line = self.read_line(timeout)
        self.replied_at = time.perf_counter()
        marker = self.read_line(timeout)
        if marker != KEEP_RUNNING_MARKER:
            raise KeptProcessError(f"expected {KEEP_RUNNING_MARKER} after the reply {line!r}, "
                                   f"got {marker!r}")
        return line

    def ask(self, text: str, timeout: float = 30.0) -> str:
        """`send(text)`, then the reply line (`reply`)."""
        self.send(text)
        return self.reply(timeout)

    def stderr_text(self) -> str:
        """Everything the program has written to stderr so far (undecodable bytes replaced)."""
        if self._stderr_at_kill is not None:
            return self._stderr_at_kill
        descriptor = self.process.stderr.fileno()
        data = os.pread(descriptor, os.fstat(descriptor).st_size, 0)
        return data.decode(self.process.stderr.encoding, errors="replace")

    def close(self, timeout: float = 30.0) -> tuple[int, str]:
        """End the input and wait for the program: its exit status and the whole of its stderr.
        Its pipes and its stderr file are closed then (`kill`).

        Raises:
            subprocess.TimeoutExpired: the program did not exit within `timeout` seconds (it
                still runs: `kill` it).
        """
        with contextlib.suppress(OSError):  # a program gone already: nothing left to flush
            self.process.stdin.close()
        code = self.process.wait(timeout)
        stderr = self.stderr_text()
        self.kill()
        return code, stderr

    def kill(self) -> None:
        """Kill the program if it still runs, reap it, and close its pipes and its stderr file.

        The stdout pipe is closed once the pump thread has read its end, which comes as the
        program exits; a process the program started that still holds the pipe keeps it open
        until it exits too (the pump thread closes nothing, and a close would wait on it).
        """
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        if self._stderr_at_kill is None:
            self._stderr_at_kill = self.stderr_text()
            self.process.stderr.close()
        self._pump_thread.join(PUMP_END_S)
        if not self._pump_thread.is_alive():
            self.process.stdout.close()
