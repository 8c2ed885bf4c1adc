"""Any Botzone program as a player: the arena spec `botzone:[OPTIONS:]COMMAND`.

The program (`COMMAND`, split with `shlex`, run without a shell) is run as Botzone runs a bot
(the Botzone wiki's pages "Bot" and "Amazons"; docs/botzone.md):

* **Input.** Simple interaction (the default): the turn number `n`, then `2n - 1` move lines
  alternating requests (the opponent's moves; the first request of the side that moves first,
  Black on `botzone8`, White on `standard10`, is `-1 -1 -1 -1 -1 -1`) and the
  program's own earlier responses, the newest request last, then the `data` line the program
  saved last turn and an empty `globaldata` line. JSON interaction (option `json`): one line
  `{"requests": [...], "responses": [...], "data": ..., "globaldata": "", "time_limit": S,
  "memory_limit": 256}`, `S` the per-turn limit `time` (the first turn may use twice it:
  Botzone's limits and what `time_limit` means are in `amazons.players.botzone_limits`). Moves a
  random opening played count as the program's responses or requests by colour, as if it had played
  them.
* **Board sizes.** The protocol is the same on every board the arena plays (`--board`): squares
  are `x y` with x the column and y the row from the top, each 0..N-1 on an `N x N` board
  (`3 9 3 3 6 3` is `d1-d7/g7` on 10x10). The program must know the board it plays: Botzone's
  Amazons is 8x8, so a 10x10 program is told so by its command (the project's own bot:
  `python -m amazons.botzone --board standard10`).
* **Output.** The first line is the reply: `x0 y0 x1 y1 x2 y2`, or in JSON
  `{"response": {"x0": .., ..., "y2": ..}, "debug": .., "data": .., "globaldata": ..}`; in simple
  interaction the third line, if any, is the `data` handed back next turn.
* **Process.** A fresh process every turn with the whole history (restart-per-turn), whose
  turn ends when it exits: a non-zero status is a crash. A program that prints
  `>>>BOTZONE_REQUEST_KEEP_RUNNING<<<` after its reply is kept instead: it is paused (SIGSTOP)
  between turns, as Botzone pauses it, and later turns send only the newest request (a move
  line, or one JSON move object), without a turn line. If the game it holds is not the board's
  (a new game, a skipped turn), it is replaced by a fresh process with the whole history.
  The input stays open after each turn, so a program must read lines rather than to the end of
  its input.
* **Time on the program's CPU clock**, as Botzone counts it: user + system time of the process
  and of the children it waited for (`/proc/PID/stat` while it runs, `os.wait4` once it has
  exited). A turn may use `time` seconds (`first-time` for the program's first turn of a game,
  process start-up included); a kept process is charged what it used since its last reply. A
  wall-clock guard (`wall` times the CPU limit) ends a turn whose program sleeps or hangs.

Faults end the game as the program's loss (`amazons.players.player.PlayerFault`, with the reason the
arena records): `timeout` (the CPU limit or the wall guard passed), `crash` (the program exited
without a reply or with a non-zero status, or could not be started), `malformed` (a reply that
is not six integers or not the JSON reply, the keep-running line before any reply, more than
`MAX_OUTPUT_BYTES` of output), `illegal` (six integers that are not a legal move). Each message
quotes the last lines of the program's stderr, which is read as the program runs (the last
`STDERR_TAIL_BYTES` kept).

Every process runs in its own session, is killed with its whole process group when the player
is closed or reset, when it faults, and when the player is garbage-collected or the interpreter
exits, and is reaped. A watchdog process (`amazons.players.watchdog`) kills the groups still
running when the process that started them dies, however it dies (SIGKILL included), so a
killed arena worker leaves none behind; it leaves a couple of seconds after the last of them
has ended (the next program starts a fresh one). Programs are started without a `preexec_fn` (which
Python calls unsafe in a process with threads, as the arena's workers are):
`start_new_session` is done by `subprocess` itself.

Spec options (`botzone:OPTIONS:COMMAND`, comma-separated; without them the spec is
`botzone:COMMAND`): `simple` / `json` (the interaction), `cpp` / `python` (Botzone's limits for
the language: C++ 1 s a turn and 2 s for the first, Python 6 s and 12 s; the default is
`python` when the program's name starts with `python`, else `cpp`), `time=S`, `first-time=S`
(default: twice `time`), `wall=X` (the wall guard as a multiple of the CPU limit, default 3).

Imports `amazons.board`, `amazons.players.botzone_limits` (Botzone's limits and the protocol's
constants, which the project's own bot reads there too), `amazons.players.watchdog` and
`amazons.players.player`; `amazons.players.factory` registers the spec.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amazons.board import Board, IllegalMoveError, Move, NotationError
from amazons.players import botzone_limits, watchdog
from amazons.players.botzone_limits import KEEP_RUNNING_MARKER, MOVE_KEYS, NO_MOVE
from amazons.players.player import BasePlayer, PlayerError, PlayerFault

__all__ = [
    "INTERACTIONS",
    "LANGUAGE_LIMITS",
    "BotzonePlayer",
    "BotzoneSettings",
    "BotzoneTurn",
    "parse_botzone_spec",
    "process_cpu_seconds",
]

INTERACTIONS = ("simple", "json")
# CPU seconds per language (amazons.players.botzone_limits): (a turn, the first turn)
LANGUAGE_LIMITS = {language: (seconds, botzone_limits.first_turn_seconds(seconds))
                   for language, seconds in botzone_limits.LANGUAGE_TURN_SECONDS.items()}
# told to JSON programs as `memory_limit` (not enforced here)
MEMORY_LIMIT_MB = botzone_limits.MEMORY_LIMIT_MB
MAX_OUTPUT_BYTES = 1 << 20  # more stdout than this in one turn is malformed
STDERR_TAIL_BYTES = 8192  # the end of the program's stderr kept for fault messages
STDERR_QUOTED_LINES = 5
# A running turn's CPU clock is read after half the time its limits leave (its CPU cannot outrun
# the wall clock by more than its threads), and at least every POLL_SECONDS near them; its
# output wakes the reader at once.
POLL_SECONDS = 0.01
_OPTION_PREFIX = re.compile(r"[a-z][a-z0-9-]*(=[^,\s:/]*)?(,[a-z][a-z0-9-]*(=[^,\s:/]*)?)*")


# ------------------------------------------------------------------------------------------------
# Settings and specs


@dataclass(frozen=True)
class BotzoneSettings:
    """How a Botzone program is run.

    Raises:
        PlayerError: an empty command, an unknown interaction or a limit that is not positive.
    """

    command: tuple[str, ...]  # the program and its arguments
    interaction: str = "simple"  # "simple" or "json"
    # CPU seconds a turn may use (Botzone: C++ 1 s, Python 6 s)
    turn_seconds: float = LANGUAGE_LIMITS["cpp"][0]
    # CPU seconds of the program's first turn of a game
    first_turn_seconds: float = LANGUAGE_LIMITS["cpp"][1]
    wall_factor: float = 3.0  # a turn's wall-clock guard, as a multiple of its CPU limit

    def __post_init__(self) -> None:
        if not self.command:
            raise PlayerError("botzone: no command to run")
        if self.interaction not in INTERACTIONS:
            raise PlayerError(f"botzone: interaction {self.interaction!r}: expected simple or json")
        for name in ("turn_seconds", "first_turn_seconds", "wall_factor"):
            value = getattr(self, name)
            if not (value > 0 and value < float("inf")):
                raise PlayerError(f"botzone: {name} must be a positive number, got {value!r}")
        if self.wall_factor < 1:
            raise PlayerError(f"botzone: wall={self.wall_factor:g} would stop turns before their "
                              f"CPU limit")


def _number_option(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")):
        raise PlayerError(f"botzone option {name}={text!r}: expected a positive number")
    return value


def parse_botzone_spec(argument: str | None) -> BotzoneSettings:
    """The settings of the spec argument `[OPTIONS:]COMMAND` (what follows `botzone:`).

    The text before the first `:` is read as options when it looks like them (lower-case words,
    `=values` without spaces, slashes or colons, comma-separated); otherwise the whole argument
    is the command. Options: `simple`, `json`, `cpp`, `python`, `time=S`, `first-time=S`,
    `wall=X` (see the module doc).

    Example:
        >>> parse_botzone_spec("json,time=0.5:./bot --fast").command
        ('./bot', '--fast')

    Raises:
        PlayerError: no command, an unknown or malformed option (named), a command `shlex`
            cannot split, or a program that is not found or not executable.
    """
    if not argument or not argument.strip():
        raise PlayerError("botzone needs a command, e.g. botzone:./bot or "
                          "botzone:json:python3 bot.py")
    prefix, colon, rest = argument.partition(":")
    options: list[str] = []
    command_text = argument
    if colon and _OPTION_PREFIX.fullmatch(prefix):
        options, command_text = prefix.split(","), rest
    try:
        command = tuple(shlex.split(command_text))
    except ValueError as error:
        raise PlayerError(f"botzone: cannot split the command {command_text!r}: {error}") from None
    if not command:
        raise PlayerError(f"botzone:{argument}: no command after the options")
    interaction, language, times, wall = "simple", None, {}, 3.0
    for option in options:
        name, _, value = option.partition("=")
        if name in INTERACTIONS and not value:
            interaction = name
        elif name in LANGUAGE_LIMITS and not value:
            language = name
        elif name in ("time", "first-time"):
            times[name] = _number_option(name, value)
        elif name == "wall":
            wall = _number_option(name, value)
        else:
            raise PlayerError(f"unknown botzone option {option!r}; known: simple, json, cpp, "
                              "python, time=S, first-time=S, wall=X")
    if language is None:
        language = "python" if Path(command[0]).name.startswith("python") else "cpp"
    turn, first = LANGUAGE_LIMITS[language]
    if "time" in times:
        turn, first = times["time"], botzone_limits.first_turn_seconds(times["time"])
    first = times.get("first-time", first)
    if shutil.which(command[0]) is None:
        raise PlayerError(f"botzone: program {command[0]!r} is not found or not executable")
    return BotzoneSettings(command, interaction, turn, first, wall)


# ------------------------------------------------------------------------------------------------
# The program's process


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` and of the children it has waited for.

    Reads `/proc/PID/stat` (Linux), which a zombie keeps until it is reaped.

    Raises:
        OSError: no such process, or no `/proc`.
    """
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    # fields[0] is field 3 (state); utime, stime, cutime, cstime are fields 14 to 17
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible wait", "T": "stopped",
           "Z": "exited"}


def _process_state(pid: int) -> str:
    """The state of process `pid` in words (`/proc/PID/stat`), e.g. "sleeping"."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return "unknown"
    return _STATES.get(state, state)


def _peak_rss_mb(pid: int) -> float:
    """Peak resident memory of process `pid` in MiB (`VmHWM`), 0.0 when unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


class _Watchdog:
    """This process's watchdog: kills the programs' process groups when this process dies.

    One per process at a time, started with a program when none is running
    (`amazons.players.watchdog`, run by its path under `python -I -S`, in its own session, so a
    Ctrl-C at the terminal does not end it before the process it guards). Once every program it
    watched has ended it holds nothing and leaves: this process ends it (closing the pipe, and
    reaping it) `IDLE_EXIT_SECONDS` later on a timer thread, and it exits by itself then anyway.
    A `+GROUP` line written to a watchdog that holds nothing keeps the watchdog module's rule:
    only within that time of the line that left it idle, else it is retired and a fresh one
    started. A process forked from this one closes its copy of the pipe (the watchdog would
    otherwise wait for the fork too) and starts its own watchdog if it starts programs. `forget`
    also runs in a program's finalizer, which the garbage collector may call inside `watch`: the
    lock is re-entrant, the pipe unbuffered, and every line is written whole.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._process: subprocess.Popen | None = None
        self._groups: set[int] = set()  # the groups the watchdog holds
        # time.monotonic() taken before writing the line that left the watchdog holding nothing
        self._idle_since = 0.0
        os.register_at_fork(after_in_child=self._forget_in_fork)
        atexit.register(self.stop)

    @property
    def pid(self) -> int | None:
        """The watchdog's process id, None before the first program."""
        return None if self._process is None else self._process.pid

    def watch(self, group: int) -> None:
        """Have process group `group` killed if this process dies.

        Raises:
            OSError: no watchdog could be started.
        """
        with self._lock:
            was_idle = not self._groups
            self._groups.add(group)
            if self._process is not None and self._write(f"+{group}\n"):
                if not was_idle or time.monotonic() < (self._idle_since
                                                       + watchdog.IDLE_EXIT_SECONDS):
                    return
                # It may have left, idle, without reading the line: retire it holding nothing.
                self._write(f"-{group}\n")
                self._end()
            # None yet, or it was killed or left: a new one takes every group.
            self._process = subprocess.Popen(
                watchdog.command(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, bufsize=0, start_new_session=True)
            groups = list(self._groups)
            if not self._write("".join(f"+{group}\n" for group in groups)):
                raise OSError("the watchdog exited at its start")
            for group in groups:  # forgotten meanwhile
                if group not in self._groups:
                    self._write(f"-{group}\n")

    def forget(self, group: int) -> None:
        """Group `group` has ended (its leader is killed or reaped): never kill it."""
        with self._lock:
            if group in self._groups:
                self._groups.remove(group)
                if not self._groups:
                    self._idle_since = time.monotonic()
                    if self._process is not None:
                        timer = threading.Timer(watchdog.IDLE_EXIT_SECONDS, self._end_idle,
                                                (self._process,))
                        timer.daemon = True
                        try:
                            timer.start()
                        except RuntimeError:  # at interpreter exit, where `stop` ends it
                            pass
                if self._process is not None:
                    self._write(f"-{group}\n")

    def _end_idle(self, process: subprocess.Popen) -> None:
        """End (and reap) `process`, the watchdog, if it has held nothing since it was left idle
        `IDLE_EXIT_SECONDS` ago (the timer `forget` starts)."""
        with self._lock:
            if (self._process is process and not self._groups
                    and time.monotonic() >= self._idle_since + watchdog.IDLE_EXIT_SECONDS):
                self._end()

    def stop(self) -> None:
        """End the watchdog (registered at exit: it kills the groups it still holds and exits)."""
        with self._lock:
            self._end()

    def _write(self, text: str) -> bool:
        """Write `text` to the watchdog; False (and no watchdog) when it has died."""
        process, data = self._process, memoryview(text.encode())
        try:
            while data:
                data = data[process.stdin.write(data):]
            return True
        except (OSError, ValueError):  # it died (ValueError: a nested call closed the pipe)
            if self._process is process:
                self._end()
            return False

    def _end(self) -> None:
        """Close the watchdog's pipe and reap it (killed after 5 s). `pid` turns None only once
        it is reaped, so that a reader who sees None sees no process, not even a zombie."""
        process = self._process
        if process is None:
            return
        try:
            process.stdin.close()
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        finally:
            if self._process is process:
                self._process = None

    def _forget_in_fork(self) -> None:
        """In a forked child: close the inherited pipe end; the parent's watchdog and groups are
        not this process's (and the watchdog is not its child: nothing to wait for)."""
        self._lock = threading.RLock()
        if self._process is not None:
            self._process.stdin.close()
            self._process.returncode = 0
        self._process, self._groups = None, set()


_WATCHDOG = _Watchdog()


def _end_process(process: subprocess.Popen) -> None:
    """Kill `process` and its process group, reap it and close its pipes."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
    _WATCHDOG.forget(process.pid)  # before the reap, which frees the group's number
    if process.returncode is None:
        process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _describe_status(status: int) -> str:
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


@dataclass(frozen=True)
class _Output:
    """What a program wrote in one turn."""

    lines: list[str]  # stdout lines up to the keep-running line or the end
    kept: bool  # it printed the keep-running line (else it exited with status 0)
    cpu_seconds: float  # charged to the turn
    wall_seconds: float
    peak_rss_mb: float  # the process's peak resident memory so far


class _Program:
    """One process of the program: its pipes, the end of its stderr, its CPU clock."""

    def __init__(self, command: Sequence[str]) -> None:
        try:
            self.process = subprocess.Popen(
                list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
        except OSError as error:
            raise PlayerFault("crash", f"cannot start {shlex.join(command)}: {error}") from None
        self._finalizer = weakref.finalize(self, _end_process, self.process)
        # Until the watchdog holds the group, only the program's input guards it: it sees the end
        # of its input if this process dies now.
        try:
            _WATCHDOG.watch(self.process.pid)
        except OSError as error:
            self.close()
            raise PlayerFault("crash", f"cannot start the watchdog of {shlex.join(command)}: "
                                       f"{error}") from None
        for stream in (self.process.stdout, self.process.stderr):
            os.set_blocking(stream.fileno(), False)
        self.charged = 0.0  # CPU seconds charged to earlier turns
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._exit_cpu: float | None = None  # from wait4, once reaped
        self._exit_rss_mb = 0.0
        self._stopped = False

    def close(self) -> None:
        """Kill the process group and reap the process."""
        self._finalizer()

    def _reap(self) -> bool:
        """Whether the process has exited (reaping it and keeping its CPU time)."""
        if self.process.returncode is not None:
            return True
        pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
        if pid == 0:
            return False
        self._exited(status, usage)
        return True

    def cpu_seconds(self) -> float:
        """The process's CPU seconds so far (its children's that it waited for included)."""
        if self._exit_cpu is not None:
            return self._exit_cpu
        return process_cpu_seconds(self.process.pid)

    def peak_rss_mb(self) -> float:
        """The process's peak resident memory so far, MiB."""
        if self._exit_cpu is not None:
            return self._exit_rss_mb
        return _peak_rss_mb(self.process.pid)

    def stderr_tail(self) -> str:
        """The last lines of stderr, quoted on one line, or '' when it wrote none."""
        self._drain(self.process.stderr, self._stderr)
        lines = [line.strip() for line in self._stderr.decode("utf-8", "replace").splitlines()
                 if line.strip()]
        if not lines:
            return ""
        return "; stderr ends: " + " | ".join(repr(line[:200])
                                              for line in lines[-STDERR_QUOTED_LINES:])

    def _drain(self, stream: Any, buffer: bytearray) -> bool:
        """Read what `stream` holds now into `buffer`; False at its end."""
        if stream is None or stream.closed:
            return False
        while True:
            try:
                chunk = os.read(stream.fileno(), 65536)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            buffer += chunk
            if buffer is self._stderr and len(buffer) > STDERR_TAIL_BYTES:
                del buffer[:-STDERR_TAIL_BYTES]

    def fault(self, reason: str, message: str) -> PlayerFault:
        """Kill the process and make the fault, quoting the end of stderr."""
        self._signal_group(signal.SIGKILL)
        _WATCHDOG.forget(self.process.pid)
        self._reap_blocking()
        return PlayerFault(reason, message + self.stderr_tail())

    def _signal_group(self, signal_number: int) -> None:
        try:
            os.killpg(self.process.pid, signal_number)
        except (ProcessLookupError, PermissionError):
            pass

    def _reap_blocking(self) -> None:
        if self.process.returncode is None:
            _, status, usage = os.wait4(self.process.pid, 0)
            self._exited(status, usage)

    def _exited(self, status: int, usage: Any) -> None:
        # the program exited by itself (else it is forgotten already)
        _WATCHDOG.forget(self.process.pid)
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self._exit_cpu = usage.ru_utime + usage.ru_stime
        self._exit_rss_mb = usage.ru_maxrss / 1024  # KiB on Linux

    def exchange(self, text: str, cpu_limit: float, wall_limit: float, turn: int) -> _Output:
        """Write `text` (resuming a paused process first), then read the turn's output.

        The turn ends at the keep-running line (the process is paused, and the CPU it uses from
        here on is charged to its next turn) or when the process exits.

        Raises:
            PlayerFault: `timeout` (past `cpu_limit` CPU seconds, or `wall_limit` wall seconds),
                `crash` (a non-zero exit, or an exit without output), `malformed` (the
                keep-running line before a reply, too much output). The process is killed.
        """
        started = time.monotonic()
        if self._stopped:
            self._signal_group(signal.SIGCONT)
            self._stopped = False
        try:
            self.process.stdin.write(text.encode())
        except BrokenPipeError:
            pass  # it has exited: reading finds out how
        lines: list[str] = []
        open_streams = {self.process.stdout: self._stdout, self.process.stderr: self._stderr}
        wait = POLL_SECONDS
        while True:
            if open_streams:
                for stream in select.select(list(open_streams), [], [], wait)[0]:
                    if not self._drain(stream, open_streams[stream]):
                        del open_streams[stream]
            else:  # both pipes are at their end: the process is exiting, or holds no output
                time.sleep(POLL_SECONDS)
            exited = self._reap()
            if exited:
                self._drain(self.process.stdout, self._stdout)
            while b"\n" in self._stdout or (exited and self._stdout):
                line, _, rest = bytes(self._stdout).partition(b"\n")
                self._stdout[:] = rest
                text_line = line.decode("utf-8", "replace").rstrip("\r")
                if text_line.strip() == KEEP_RUNNING_MARKER:
                    if not lines:
                        raise self.fault("malformed", f"turn {turn}: {KEEP_RUNNING_MARKER} "
                                                      f"before any reply")
                    cpu = self.cpu_seconds()
                    used, self.charged = cpu - self.charged, cpu
                    if used > cpu_limit:
                        raise self.fault("timeout", f"turn {turn}: used {used:.2f} s of CPU "
                                                    f"time, over its limit of {cpu_limit:g} s")
                    self._signal_group(signal.SIGSTOP)
                    self._stopped = True
                    return _Output(lines, True, used, time.monotonic() - started,
                                   self.peak_rss_mb())
                lines.append(text_line)
            if len(self._stdout) + sum(len(line) for line in lines) > MAX_OUTPUT_BYTES:
                raise self.fault("malformed", f"turn {turn}: more than {MAX_OUTPUT_BYTES} bytes "
                                              f"of output")
            used = self.cpu_seconds() - self.charged
            if exited:
                status = self.process.returncode
                if status != 0 or not lines:
                    raise self.fault(
                        "crash", f"turn {turn}: the program {_describe_status(status)} "
                                 f"{'after its reply' if lines else 'without a reply'}")
                if used > cpu_limit:
                    raise self.fault("timeout", f"turn {turn}: used {used:.2f} s of CPU time, "
                                                f"over its limit of {cpu_limit:g} s")
                return _Output(lines, False, used, time.monotonic() - started, self.peak_rss_mb())
            if used > cpu_limit:
                raise self.fault("timeout", f"turn {turn}: {self._waiting_for(lines)} within its "
                                            f"limit of {cpu_limit:g} s of CPU time "
                                            f"(used {used:.2f} s)")
            wall = time.monotonic() - started
            if wall > wall_limit:
                state = _process_state(self.process.pid)
                raise self.fault("timeout", f"turn {turn}: {self._waiting_for(lines)} after "
                                            f"{wall:.1f} s of wall time (the guard; {used:.2f} s "
                                            f"of CPU time used, limit {cpu_limit:g} s; the "
                                            f"process was {state})")
            wait = max(POLL_SECONDS, min(cpu_limit - used, wall_limit - wall) / 2)

    @staticmethod
    def _waiting_for(lines: list[str]) -> str:
        if lines:
            return f"replied but neither exited nor printed {KEEP_RUNNING_MARKER}"
        return "no reply"


# ------------------------------------------------------------------------------------------------
# The player


@dataclass(frozen=True)
class BotzoneTurn:
    """One answered turn of a Botzone program."""

    turn: int  # the program's turn of the game, from 1
    cpu_seconds: float  # charged on its CPU clock
    cpu_limit: float
    wall_seconds: float  # from writing the input to the end of the turn
    peak_rss_mb: float  # the process's peak resident memory so far, MiB (not limited here)
    kept_running: bool  # it asked to keep running
    debug: str  # the JSON reply's "debug", or the second line of a simple reply


def _history_messages(history: Sequence[Move], color: int,
                      first: int) -> tuple[list[Move | None], list[Move]]:
    """(requests, responses) of the program playing `color` after `history`, `first` the side
    that made the first move; None is the first side's first request."""
    moves: list[Move | None] = [None, *history] if color == first else list(history)
    return moves[0::2], moves[1::2]  # type: ignore[return-value]


def _move_object(move: Move | None) -> dict[str, int]:
    text = NO_MOVE if move is None else move.to_botzone()
    return dict(zip(MOVE_KEYS, (int(token) for token in text.split()), strict=True))


class BotzonePlayer(BasePlayer):
    """A Botzone program as a player (see the module doc); built by the spec `botzone:...`.

    Args:
        settings: the command, interaction and limits (`parse_botzone_spec`).
        name: the player's name (default `botzone:` and the command).

    `turns` (`BotzoneTurn`, one per answered turn of the game) says what each turn cost: the
    slowest turn's CPU time is `max(turn.cpu_seconds for turn in player.turns)`. `close()` (or
    `reset()`, before a game) ends a kept process; the player is also a context manager.
    """

    def __init__(self, settings: BotzoneSettings, name: str | None = None) -> None:
        self.settings = settings
        self.name = name or f"botzone:{shlex.join(settings.command)}"
        self.turns: list[BotzoneTurn] = []
        self._program: _Program | None = None
        self._known: list[Move] = []  # the game as the kept process has it, its own reply last
        self._data = ""  # what the program saved for its next turn

    def reset(self) -> None:
        """End a kept process and forget the game."""
        self.close()
        self.turns = []
        self._data = ""

    def close(self) -> None:
        """End the program's process, if one is kept."""
        if self._program is not None:
            self._program.close()
            self._program = None
        self._known = []

    def __enter__(self) -> BotzonePlayer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def choose_move(self, board: Board) -> Move:
        """Ask the program for its move on `board` (a turn under its limits).

        Raises:
            PlayerFault: the program timed out, crashed, wrote a malformed reply or an illegal
                move; its process is ended.
            PlayerError: the game is over.
        """
        if board.is_game_over():
            raise PlayerError("the game is over: the side to move has no legal move")
        history = board.move_stack
        turn = len(self.turns) + 1
        limit = self.settings.first_turn_seconds if turn == 1 else self.settings.turn_seconds
        update = self._program is not None and len(history) == len(self._known) + 1 \
            and history[:-1] == self._known
        if not update:
            self.close()
            self._program = _Program(self.settings.command)
        # the side that moved first: the side to move after an even number of moves
        first = board.turn ^ (len(history) % 2)
        text = self._update_input(history[-1]) if update else self._full_input(history,
                                                                                 board.turn, first)
        try:
            output = self._program.exchange(text, limit, limit * self.settings.wall_factor, turn)
            try:
                move, debug = self._parse_reply(output.lines, board, turn)
            except PlayerFault as fault:
                raise self._program.fault(fault.reason, fault.message) from None
        except PlayerFault:
            self.close()
            raise
        self.turns.append(BotzoneTurn(turn, output.cpu_seconds, limit, output.wall_seconds,
                                      output.peak_rss_mb, output.kept, debug))
        if output.kept:
            self._known = [*history, move]
        else:
            self.close()  # it has exited: close its pipes
        return move

    def _full_input(self, history: Sequence[Move], color: int, first: int) -> str:
        requests, responses = _history_messages(history, color, first)
        if self.settings.interaction == "json":
            # time_limit is the per-turn limit, also on the first turn, which may use twice it
            # (amazons.players.botzone_limits: one reading for this player and both bots)
            value = {"requests": [_move_object(move) for move in requests],
                     "responses": [_move_object(move) for move in responses],
                     "data": self._data, "globaldata": "", "time_limit": self.settings.turn_seconds,
                     "memory_limit": MEMORY_LIMIT_MB}
            return json.dumps(value, separators=(",", ":")) + "\n"
        lines = [str(len(requests))]
        for index, request in enumerate(requests):
            lines.append(NO_MOVE if request is None else request.to_botzone())
            if index < len(responses):
                lines.append(responses[index].to_botzone())
        return "\n".join([*lines, self._data, ""]) + "\n"

    def _update_input(self, request: Move) -> str:
        if self.settings.interaction == "json":
            return json.dumps(_move_object(request), separators=(",", ":")) + "\n"
        return request.to_botzone() + "\n"

    def _parse_reply(self, lines: list[str], board: Board, turn: int) -> tuple[Move, str]:
        """The move of the turn's output lines, checked on `board`, and its debug text."""
        reply = lines[0]
        where = f"turn {turn}: reply {reply[:200]!r}"
        if self.settings.interaction == "json":
            try:
                value = json.loads(reply)
            except json.JSONDecodeError as error:
                raise PlayerFault("malformed", f"{where} is not JSON ({error.msg})") from None
            response = value.get("response") if isinstance(value, dict) else None
            if not isinstance(response, dict) or any(
                    not isinstance(response.get(key), int) or isinstance(response.get(key), bool)
                    for key in MOVE_KEYS):
                raise PlayerFault("malformed", f"{where}: expected {{\"response\": "
                                               f"{{\"x0\": int, ..., \"y2\": int}}}}")
            text = " ".join(str(response[key]) for key in MOVE_KEYS)
            debug, data = str(value.get("debug", "")), value.get("data", "")
            self._data = data if isinstance(data, str) else json.dumps(data)
        else:
            text = reply
            debug = lines[1] if len(lines) > 1 else ""
            self._data = lines[2] if len(lines) > 2 else ""
            tokens = text.split()
            if len(tokens) != 6 or not all(re.fullmatch(r"-?\d+", token) for token in tokens):
                raise PlayerFault("malformed", f"{where}: expected six integers "
                                               f"'x0 y0 x1 y1 x2 y2'")
        try:
            move = Move.from_botzone(text, board.size)
            board.copy().push(move)
        except (NotationError, IllegalMoveError) as error:
            count = board.count_legal_moves()
            raise PlayerFault("illegal", f"{where}: {error} ({count} legal moves)") from None
        return move, debug

