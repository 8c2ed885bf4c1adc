"""Stopping the arena's workers (`amazons.matches.arena.ArenaWorkers`): an interrupted match, or a
worker that neither stops nor terminates, leaves no worker process and no Botzone program behind,
within a bounded time (the Ctrl-C of the arena command itself: `tests/test_botzone_player.py`)."""

from __future__ import annotations

import _thread
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
from inference_actors import make_echo_evaluator
from test_botzone_player import TEST_BOT, bot_spec, ended, leftovers, process_report, read_log

from amazons.board import Board, Move
from amazons.core.processes import TERMINATE_GRACE_S
from amazons.matches.arena import ABORT_GRACE_S, ArenaError, ArenaWorkers, run_arena
from amazons.players import factory as player_factory
from amazons.players.factory import PlayerOptions
from amazons.players.player import BasePlayer, Player

SLACK_S = 10.0  # for a loaded machine


def programs(marker: str) -> list[str]:
    """The running test bots whose command line holds `marker`."""
    bot = f"{sys.executable} {TEST_BOT}"
    return [line for line in leftovers(marker) if line.split(": ", 1)[1].startswith(bot)]


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


@pytest.fixture
def sigint_raises():
    """SIGINT raising KeyboardInterrupt in this process during the test, also where the test run
    was started with SIGINT ignored (a shell's background job, `make test &`, inherits it so, and
    Python then installs no handler: `_thread.interrupt_main` would do nothing)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


# Serial: it times the stop on the wall clock, which a neighbouring test's load stretches.
@pytest.mark.serial
def test_an_interrupted_match_ends_its_workers_and_their_programs_promptly(tmp_path, sigint_raises):
    """A KeyboardInterrupt in the main process alone (the workers play on, their programs asleep
    for a minute): the workers are terminated after the abort grace, not after the 30 s a finished
    match gives them, and the programs die with them."""
    log = tmp_path / "interrupted.jsonl"
    spec = bot_spec("time=100", "keep=1", "fault=sleep:60", f"log={log}")
    interrupted_at, returned, reports = [], threading.Event(), []

    def interrupt_once_both_programs_run() -> None:
        wait_until(lambda: len(programs(str(log))) == 2 or returned.is_set(), 60)
        if not returned.is_set():  # never interrupt the tests that follow
            reports.append(process_report())
            interrupted_at.append(time.monotonic())
            _thread.interrupt_main()
        else:
            reports.append(f"the match returned before both programs ran: {programs(str(log))}\n"
                           f"{process_report()}")

    interrupter = threading.Thread(target=interrupt_once_both_programs_run, daemon=True)
    try:
        try:
            with pytest.raises(KeyboardInterrupt):
                with ArenaWorkers(2, {}) as workers:
                    pids = workers.pids
                    interrupter.start()
                    run_arena(spec, "random", games=2, opening_plies=0, workers=workers)
        finally:
            returned.set()
            if interrupter.ident is not None:  # started
                interrupter.join()
        assert interrupted_at, reports
        seconds = time.monotonic() - interrupted_at[0]
        assert seconds < ABORT_GRACE_S + TERMINATE_GRACE_S + SLACK_S, \
            (f"stopping took {seconds:.1f} s; at the interrupt:\n{reports[0]}\n"
             f"now:\n{process_report()}")
        assert all(ended(pid) for pid in pids)
        assert wait_until(lambda: leftovers(str(log)) == [], 5), leftovers(str(log))
    except (AssertionError, pytest.fail.Exception) as failure:
        # The report, also in the run's warnings summary.
        warnings.warn(f"{failure}\nreports: {reports}\nnow:\n{process_report()}", stacklevel=1)
        raise


# Serial: it bounds the stop on the wall clock.
@pytest.mark.serial
def test_close_kills_a_worker_that_neither_stops_nor_terminates():
    """A stopped worker (SIGSTOP: it reads no sentinel, SIGTERM waits) is killed and reaped."""
    workers = ArenaWorkers(1, {})
    workers.start()
    (pid,) = workers.pids
    try:
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        workers.close(timeout=1.0)
        seconds = time.monotonic() - started
        assert ended(pid)
        assert seconds < 1.0 + TERMINATE_GRACE_S + SLACK_S, f"close took {seconds:.1f} s"
    finally:
        if not ended(pid):
            os.kill(pid, signal.SIGKILL)
            workers.close()


class _ExplodingOnceLogged(BasePlayer):
    """Raises on its first move, once the file `log` exists (the other game's program has read
    its input)."""

    name = "exploding-once-logged"

    def __init__(self, log: str) -> None:
        self.log = Path(log)

    def choose_move(self, board: Board) -> Move:
        wait_until(self.log.exists, 60)
        raise ZeroDivisionError("a player's bug")


def _make_exploding_once_logged(argument: str | None, options: PlayerOptions) -> Player:
    return _ExplodingOnceLogged(argument)


# Serial: it bounds the match on the wall clock.
@pytest.mark.serial
def test_a_game_that_raises_in_a_worker_ends_the_other_workers_game_promptly(tmp_path,
                                                                              monkeypatch):
    """Game 2 raises (its Black explodes) while game 1's program sleeps for a minute: the match
    fails with the game's traceback, and game 1's worker and program are ended at once."""
    monkeypatch.setitem(player_factory._REGISTRY, "exploding-once-logged",
                        _make_exploding_once_logged)
    log = tmp_path / "raised.jsonl"
    spec = bot_spec("time=100", "keep=1", "fault=sleep:60", f"log={log}")
    started = time.monotonic()
    with pytest.raises(ArenaError,
                       match=r"game 2 failed in an arena worker:(.|\n)*ZeroDivisionError"):
        run_arena(spec, f"exploding-once-logged:{log}", games=2, processes=2, opening_plies=0)
    seconds = time.monotonic() - started
    assert seconds < ABORT_GRACE_S + TERMINATE_GRACE_S + 2 * SLACK_S, \
        f"the match took {seconds:.1f} s"
    # game 1's program, asleep in its first turn
    assert len({row["pid"] for row in read_log(log)}) == 1
    assert wait_until(lambda: leftovers(str(log)) == [], 5), leftovers(str(log))


def _worker_results():
    """The result queue of the arena worker this is called in (a player's move)."""
    frame = sys._getframe()
    while frame is not None and frame.f_code.co_name != "_serving_worker":
        frame = frame.f_back
    assert frame is not None, "not called in an arena worker"
    return frame.f_locals["results"]


class _KilledMidResult(BasePlayer):
    """Writes the first half of a result into its worker's result queue, as a worker killed while
    writing one leaves it (SIGKILL, the OOM killer, a signal to its process group), then kills its
    worker."""

    name = "killed-mid-result"

    def choose_move(self, board: Board) -> Move:
        writer = _worker_results()._writer
        message = pickle.dumps((0, "a record cut short" * 100, None))
        os.write(writer.fileno(), struct.pack("!i", len(message)) + message[: len(message) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("still alive after SIGKILL")


def _make_killed_mid_result(argument: str | None, options: PlayerOptions) -> Player:
    return _KilledMidResult()


KILLED_MID_RESULT_MATCH = """
import sys
sys.path.insert(0, {tests!r})
from amazons.matches.arena import ArenaError, ArenaWorkers, run_arena
from amazons.players.factory import register_player
from test_arena_shutdown import _make_killed_mid_result

register_player("killed-mid-result", _make_killed_mid_result)
with ArenaWorkers(1, {{}}, factories={{"killed-mid-result": _make_killed_mid_result}}) as workers:
    print("worker", workers.pids[0], flush=True)
    try:
        run_arena("killed-mid-result", "random", games=1, opening_plies=0, workers=workers)
    except ArenaError as error:
        print("ArenaError:", error, flush=True)
"""


def test_a_worker_killed_while_writing_a_result_fails_the_match_instead_of_hanging_it():
    """The worker leaves half a message in the result pipe and dies: the arena names the dead
    worker. The match runs in a process of its own, ended after 120 s, so a hang fails the test."""
    code = KILLED_MID_RESULT_MATCH.format(tests=str(Path(__file__).resolve().parent))
    match = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = match.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(match.pid, signal.SIGKILL)
        out, err = match.communicate()
        pytest.fail(f"the match hung on the half-written result\nstdout:\n{out}\nstderr:\n{err}")
    assert match.returncode == 0, err
    pid = int(out.split()[1])
    named = f"ArenaError: arena worker 0 (pid {pid}) exited with code -9 during a match"
    assert named in out, out + err
    assert ended(pid)


class _UnreadableResult(BasePlayer):
    """Puts a whole result on its worker's result queue that raises TypeError when unpickled
    (`complex("x", "y")`), then plays on."""

    name = "unreadable-result"

    def choose_move(self, board: Board) -> Move:
        _worker_results().put(_LoadsAs(complex, ("x", "y")))
        return board.legal_moves()[0]


class _LoadsAs:
    """Pickles as the call `function(*args)`."""

    def __init__(self, function, args: tuple) -> None:
        self.call = (function, args)

    def __reduce__(self):
        return self.call


def _make_unreadable_result(argument: str | None, options: PlayerOptions) -> Player:
    return _UnreadableResult()


def test_a_result_that_does_not_unpickle_fails_the_match_with_an_arena_error(monkeypatch):
    """Whatever `pickle.loads` raises for a result (here a TypeError, which the arena once let
    through as it was) fails the match as an `ArenaError` that names it."""
    factories = {"unreadable-result": _make_unreadable_result}
    monkeypatch.setitem(player_factory._REGISTRY, "unreadable-result", _make_unreadable_result)
    with ArenaWorkers(1, {}, factories=factories) as workers:
        with pytest.raises(ArenaError, match="cannot be read.*does not unpickle.*TypeError"):
            run_arena("unreadable-result", "random", games=1, opening_plies=0, workers=workers)


def test_an_interrupt_while_close_stops_a_server_still_stops_the_others(sigint_raises):
    """A second Ctrl-C while `close` waits for its first server (stopped: it does not answer)
    still stops the second server and unlinks every segment of both."""
    workers = ArenaWorkers(1, {"first": make_echo_evaluator, "second": make_echo_evaluator})
    workers.start()
    names = workers.slot_names
    first = workers._servers["first"]
    os.kill(first.pid, signal.SIGSTOP)
    # after the worker's stop (well under 3 s), inside the first server's (10 s)
    ctrl_c = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))
    try:
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            workers.close()
        left = [name for name in names if os.path.exists(f"/dev/shm/{name}")]
    finally:
        ctrl_c.cancel()
        for server in (first, workers._servers.get("second")):
            if server is not None:
                server.stop(timeout=1.0)  # what a close that left them behind left
    assert left == [], f"segments left after the interrupt: {left}"
