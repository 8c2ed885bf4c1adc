"""Botzone programs as arena players (`botzone:...`): whole games, every fault, the CPU clock,
cleanup.

The programs are real subprocesses: `tests/botzone_test_bot.py` (random legal moves in pure
Python, with a fault on demand) and the project's own bot, `python -m amazons.botzone`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from amazons.board import Board, Move
from amazons.matches.arena import run_arena
from amazons.mcts import warm_up
from amazons.players import factory as player_factory
from amazons.players import program, watchdog
from amazons.players.botzone_limits import KEEP_RUNNING_MARKER
from amazons.players.factory import PlayerOptions, PlayerSpecError, make_player
from amazons.players.player import BasePlayer, Player, PlayerFault
from amazons.players.program import BotzonePlayer, parse_botzone_spec, process_cpu_seconds
from amazons.players.records import read_records

REPO = Path(__file__).resolve().parents[1]
TEST_BOT = REPO / "tests" / "botzone_test_bot.py"


@pytest.fixture(autouse=True)
def _package_on_path(monkeypatch):
    """Programs started by the tests import this checkout's package."""
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def bot_spec(options: str, *arguments: str) -> str:
    return f"botzone:{options}:{sys.executable} {TEST_BOT} {' '.join(arguments)}"


def leftovers(marker: str) -> list[str]:
    """Live processes whose command line holds `marker`, and zombie children of this process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if marker in command:
            found.append(f"{entry.name}: {command}")
        elif fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(f"{entry.name}: zombie child")
    return found


def process_report() -> str:
    """The load average and every live process (pid, parent, group, state, CPU seconds, command),
    for the failure message of a test that timed something on the wall clock."""
    ticks = os.sysconf("SC_CLK_TCK")
    lines = [f"load average {Path('/proc/loadavg').read_text().strip()}"]
    for entry in sorted((e for e in Path("/proc").iterdir() if e.name.isdigit()),
                        key=lambda e: int(e.name)):
        try:
            command = ((entry / "cmdline").read_bytes().replace(b"\0", b" ")
                       .decode(errors="replace").strip())
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            wchan = (entry / "wchan").read_text().strip()
        except OSError:
            continue
        if command:
            cpu = (int(fields[11]) + int(fields[12])) / ticks
            lines.append(f"{entry.name} ppid {fields[1]} pgid {fields[2]} {fields[0]} "
                         f"{wchan or '-'} cpu {cpu:.1f}s: {command[:160]}")
    return "\n".join(lines)


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------------------
# Specs


def test_spec_options_and_the_limits_of_the_language():
    settings = parse_botzone_spec(f"json,time=0.5:{sys.executable} bot.py --fast")
    assert settings.command == (sys.executable, "bot.py", "--fast")
    assert (settings.interaction, settings.turn_seconds,
            settings.first_turn_seconds) == ("json", 0.5, 1.0)
    python = parse_botzone_spec(f"{sys.executable} -m amazons.botzone")
    assert (python.interaction, python.turn_seconds,
            python.first_turn_seconds) == ("simple", 6.0, 12.0)
    cpp = parse_botzone_spec("cpp,first-time=3,wall=5:true")
    assert (cpp.command, cpp.turn_seconds, cpp.first_turn_seconds,
            cpp.wall_factor) == (("true",), 1.0, 3.0, 5.0)
    assert parse_botzone_spec("python:true").turn_seconds == 6.0
    assert make_player("botzone:json:true").name == "botzone:json:true"


@pytest.mark.parametrize(("argument", "words"), [
    ("", "needs a command"),
    ("jsno:true", "unknown botzone option 'jsno'"),
    ("time=fast:true", "time='fast'"),
    ("time=-1:true", "positive"),
    ("wall=0.5:true", "wall=0.5"),
    ("json:", "no command"),
    ("/no/such/bot", "'/no/such/bot' is not found"),
    ("true 'unclosed", "cannot split"),
])
def test_bad_specs_are_refused_naming_the_fault(argument, words):
    with pytest.raises(PlayerSpecError, match=words.replace("(", r"\(").replace(")", r"\)")):
        make_player(f"botzone:{argument}")


# ------------------------------------------------------------------------------------------------
# Whole games


@pytest.mark.parametrize("interaction", ["simple", "json"])
@pytest.mark.parametrize("keep", ["0", "1"])
def test_whole_games_against_random_in_both_interactions_and_process_modes(tmp_path, interaction,
                                                                             keep):
    log = tmp_path / "inputs.jsonl"
    spec = bot_spec(f"{interaction},time=2", f"keep={keep}", f"log={log}")
    result = run_arena(spec, "random", games=2, processes=1, seed=5)
    assert result.wins_a + result.wins_b == 2 and not result.faults_a and not result.faults_b
    for record in result.records:
        assert record.board().is_game_over() and record.termination is None
    inputs = read_log(log)
    processes = sorted({row["pid"] for row in inputs})
    # a process per game, or per turn
    assert len(processes) == 2 if keep == "1" else len(processes) > 10
    saved = []  # the data each process got in its first input
    for pid in processes:
        texts = [row["input"] for row in inputs if row["pid"] == pid]
        if interaction == "json":
            value, later = json.loads(texts[0]), texts[1:]
            assert (len(value["requests"]) == len(value["responses"]) + 1
                    and value["globaldata"] == "")
            # the per-turn limit, also on the first turn (which may use twice it):
            # amazons.players.botzone_limits
            assert value["time_limit"] == 2.0 and value["memory_limit"] == 256
            known = (len(value["requests"]) + len(value["responses"])
                     - (value["requests"][0]["x0"] == -1))
            saved.append((value["data"], known))
            assert all(set(json.loads(text)) == {"x0", "y0", "x1", "y1", "x2", "y2"}
                       for text in later)
        else:
            turns = int(texts[0])  # the turn number comes first
            moves, (data, globaldata), later = (texts[1:2 * turns], texts[2 * turns:2 * turns + 2],
                                                texts[2 * turns + 2:])
            assert globaldata == "\n" and all(len(text.split()) == 6 for text in moves + later)
            saved.append((data.strip(), len(moves) - (moves[0].split()[0] == "-1")))
    # A game's first input has no data; a restarted turn gets what the program saved the turn
    # before.
    assert sum(1 for data, _ in saved if data == "") == 2
    assert all(data == f"seen {known - 1}" for data, known in saved if data)
    assert leftovers(str(log)) == []


def test_two_programs_play_each_other_and_each_side_s_faults_are_its_own(tmp_path):
    kept = bot_spec("time=2", "keep=1", "seed=1")
    restarted = bot_spec("json,time=2", "seed=2", "fault=illegal", "at=3")
    result = run_arena(kept, restarted, games=2, processes=1, seed=4, opening_plies=0)
    assert (result.wins_a, result.faults_a, result.faults_b) == (2, {}, {"illegal": 2})
    # the third turn of White, then Black
    assert [len(record.moves) for record in result.records] == [5, 4]
    assert leftovers(str(TEST_BOT)) == []


def test_the_arena_command_records_forfeits_in_its_json_and_game_records(tmp_path):
    log = tmp_path / "cli.jsonl"
    spec = bot_spec("time=2", "keep=1", "fault=garbage", "at=2", f"log={log}")
    out, records = tmp_path / "result.json", tmp_path / "games.txt"
    command = [sys.executable, "-m", "amazons.arena", spec, "random", "--games", "2",
               "--processes", "2", "--opening-plies", "0", "--json", str(out), "--record",
               str(records)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert f"forfeits by fault: A ({spec}) malformed 2; B (random) none" in done.stdout
    result = json.loads(out.read_text())
    assert (result["wins_b"], result["faults_a"], result["faults_b"]) == (2, {"malformed": 2}, {})
    games = read_records(records)
    assert [game.termination for game in games] == ["malformed", "malformed"]
    assert games[0].headers["Fault"].startswith(f"black {spec}: turn 2: reply 'hello world'")
    assert games[0].headers["Fault"].endswith("stderr ends: 'test bot: turn 1, 0 plies' | "
                                              "'test bot: turn 2, 2 plies'")
    assert ([len(game.moves) for game in games] == [2, 3]
            and [game.result for game in games] == ["0-1", "1-0"])
    assert leftovers(str(log)) == []


# ------------------------------------------------------------------------------------------------
# Faults


FAULTS = [
    ("simple", "crash", "crash", ("exited with status 3 without a reply; stderr ends: ",
                                  "'test bot: turn 2, 3 plies' | "
                                  "'test bot: boom, crashing on purpose'")),
    ("simple", "silent", "crash", "exited with status 0 without a reply"),
    ("simple", "exit-after", "crash", "exited with status 5 after its reply"),
    ("simple", "garbage", "malformed", "reply 'hello world': expected six integers"),
    ("json", "garbage", "malformed", "reply 'hello world' is not JSON"),
    ("json", "badjson", "malformed", "expected {\"response\": {\"x0\": int"),
    ("simple", "marker-first", "malformed", f"{KEEP_RUNNING_MARKER} before any reply"),
    ("simple", "illegal", "illegal", "reply '0 0 0 0 0 0': illegal move a8-a8/a8 for white"),
    ("json", "illegal", "illegal", "illegal move a8-a8/a8 for white"),
    ("simple", "burn", "timeout", "no reply within its limit of 0.3 s of CPU time"),
    ("simple", "linger", "timeout", "replied but neither exited nor printed"),
]
# with keep=1 the same: they end before the keep-running line
ONLY_RESTARTED = ("exit-after", "linger")


@pytest.mark.parametrize(("keep", "interaction", "fault", "reason", "words"), [
    (keep, *case) for keep in ("0", "1") for case in FAULTS
    if keep == "0" or case[1] not in ONLY_RESTARTED])
def test_every_fault_ends_the_game_as_a_loss_with_its_reason(tmp_path, interaction, fault, reason,
                                                             words, keep):
    log = tmp_path / "fault.jsonl"
    spec = bot_spec(f"{interaction},time=0.3,first-time=1,wall=6", f"keep={keep}",
                    f"fault={fault}", "at=2", f"log={log}")
    result = run_arena("random", spec, games=1, processes=1, seed=1, opening_plies=0)
    record = result.records[0]
    assert (result.wins_a, result.faults_b, result.faults_a) == (1, {reason: 1}, {})
    assert record.termination == reason and record.result == "1-0" and len(record.moves) == 3
    assert record.headers["Fault"].startswith(f"white {spec}: turn 2: ")
    for fragment in (words,) if isinstance(words, str) else words:
        assert fragment in record.headers["Fault"], record.headers["Fault"]
    assert leftovers(str(log)) == []


def test_a_program_that_cannot_start_crashes_its_first_turn(tmp_path):
    program = tmp_path / "bot"
    program.write_text("#!/no/such/interpreter\n")
    program.chmod(0o755)
    with (BotzonePlayer(parse_botzone_spec(str(program))) as player,
          pytest.raises(PlayerFault) as caught):
        player.choose_move(Board())
    assert caught.value.reason == "crash" and "cannot start" in caught.value.message


# ------------------------------------------------------------------------------------------------
# The CPU clock


def test_time_is_charged_on_the_cpu_clock_not_the_wall_clock(tmp_path):
    spec = bot_spec("time=0.3,first-time=0.3,wall=6", "fault=sleep:0.5")
    with make_player(spec) as sleeper:
        sleeper.choose_move(Board())
        turn = sleeper.turns[-1]
    assert turn.wall_seconds >= 0.5 and turn.cpu_seconds < 0.3, turn
    with make_player(bot_spec("time=0.3,first-time=0.3,wall=20", "fault=burn")) as burner:
        with pytest.raises(PlayerFault) as caught:
            burner.choose_move(Board())
    assert (caught.value.reason == "timeout"
            and "no reply within its limit of 0.3 s of CPU time" in caught.value.message)


def test_a_kept_program_is_paused_between_turns_and_charged_what_it_uses_after_its_reply(tmp_path):
    board = Board()
    with make_player(bot_spec("time=0.3,first-time=2", "keep=1", "fault=ponder")) as player:
        board.push(player.choose_move(board))
        pid = player._program.process.pid
        time.sleep(0.3)
        with open(f"/proc/{pid}/stat") as handle:
            assert handle.read().rsplit(")", 1)[1].split()[0] == "T"  # stopped by SIGSTOP
        assert process_cpu_seconds(pid) < 0.8  # its 1 s of pondering waits for the next turn
        board.push(board.legal_moves()[0])
        with pytest.raises(PlayerFault) as caught:
            player.choose_move(board)
    assert caught.value.reason == "timeout" and "turn 2" in caught.value.message


def test_a_kept_program_is_replaced_when_the_game_is_not_its_own(tmp_path):
    log = tmp_path / "restart.jsonl"
    board = Board()
    with make_player(bot_spec("time=2", "keep=1", f"log={log}")) as player:
        board.push(player.choose_move(board))
        board.push(board.legal_moves()[0])
        # a move the program never saw: it plays on from the whole history
        board.push(board.legal_moves()[0])
        board.push(board.legal_moves()[0])
        move = player.choose_move(board)
        assert board.is_legal(move) and [turn.kept_running for turn in player.turns] == [True, True]
        assert all(5 < turn.peak_rss_mb < 100 for turn in player.turns), player.turns
    inputs = read_log(log)
    assert len({row["pid"] for row in inputs}) == 2
    assert [row["input"] for row in inputs if row["pid"] == inputs[-1]["pid"]][0] == "3\n"


# ------------------------------------------------------------------------------------------------
# Cleanup


class _Exploding(BasePlayer):
    name = "exploding"

    def choose_move(self, board: Board) -> Move:
        raise ZeroDivisionError("a player's bug")


def _make_exploding(argument: str | None, options: PlayerOptions) -> Player:
    return _Exploding()


def test_an_exception_in_a_game_still_ends_the_program(tmp_path, monkeypatch):
    monkeypatch.setitem(player_factory._REGISTRY, "exploding", _make_exploding)
    log = tmp_path / "boom.jsonl"
    with pytest.raises(ZeroDivisionError):
        run_arena(bot_spec("time=2", "keep=1", f"log={log}"), "exploding", games=1, processes=1,
                  opening_plies=0)
    assert read_log(log)  # it played its first turn and was kept
    assert leftovers(str(log)) == []


def ended(pid: int) -> bool:
    """Whether process `pid` has exited (gone, or a zombie its new parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_program_and_its_children_die_with_the_process_that_started_it(tmp_path):
    """The parent is SIGKILLed (no cleanup of its own runs): its watchdog kills the program's whole
    process group, a child the program started included, and exits."""
    log = tmp_path / "orphan.jsonl"
    nap = f"sleep {300 + os.getpid() % 1000}.5"  # the program's child, in its process group
    spec = (f"botzone:time=2:sh -c '{nap} </dev/null >/dev/null 2>&1 & "
            f"exec {sys.executable} {TEST_BOT} keep=1 log={log}'")
    code = ("import sys\nfrom amazons.players import program\nfrom amazons.board import Board\n"
            f"from amazons.players.factory import make_player\nplayer = make_player({spec!r})\n"
            "player.choose_move(Board())\nprint(program._WATCHDOG.pid, flush=True)\n"
            "import time; time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=REPO)
    try:
        watchdog = int(parent.stdout.readline())
        bot = f"{sys.executable} {TEST_BOT}"
        programs = [line for line in leftovers(str(log))
                    if line.split(": ", 1)[1].startswith(bot)]
        # the parent names it too
        assert len(programs) == 1 and len(leftovers(nap)) == 2, leftovers(nap)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 5
    while ((leftovers(str(log)) or leftovers(nap) or not ended(watchdog))
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert leftovers(str(log)) == [] and leftovers(nap) == []
    assert ended(watchdog)


def test_the_watchdog_leaves_once_its_programs_have_ended_and_the_next_gets_a_fresh_one():
    """This process lives on after its restart-per-turn program's turn (the program exited and
    was reaped): its watchdog is ended and reaped IDLE_EXIT_SECONDS later, leaving no process
    behind, not even a zombie; the next turn's program gets a fresh watchdog."""
    def zombie_child(pid: int) -> bool:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return False
        return fields[0] == "Z" and int(fields[1]) == os.getpid()

    with make_player(bot_spec("time=2")) as player:
        board = Board()
        board.push(player.choose_move(board))
        first = program._WATCHDOG.pid
        assert first is not None
        deadline = time.monotonic() + watchdog.IDLE_EXIT_SECONDS + 10
        while program._WATCHDOG.pid is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert program._WATCHDOG.pid is None
        assert ended(first) and not zombie_child(first)
        board.push(board.legal_moves()[0])
        board.push(player.choose_move(board))
        assert program._WATCHDOG.pid not in (None, first)


def test_a_program_lives_as_long_as_its_player_and_its_whole_group_dies_with_it(tmp_path):
    """A kept program started by a thread that has since ended still answers the next turn: its
    life is the player's. It runs in a session of its own (a Ctrl-C at the terminal is not sent
    to it); closing the player kills its process group, a child the program started included, and
    reaps it (no zombie is left)."""
    log = tmp_path / "group.jsonl"
    nap = f"sleep {300 + os.getpid() % 1000}.25"  # the program's child, in its process group
    spec = (f"botzone:time=2:sh -c '{nap} </dev/null >/dev/null 2>&1 & "
            f"exec {sys.executable} {TEST_BOT} keep=1 log={log}'")
    board = Board()
    with make_player(spec) as player:
        thread = threading.Thread(target=lambda: board.push(player.choose_move(board)))
        thread.start()
        thread.join()
        board.push(board.legal_moves()[0])
        assert board.is_legal(player.choose_move(board))
        assert [turn.kept_running for turn in player.turns] == [True, True]
        pid, = {row["pid"] for row in read_log(log)}  # one process answered both turns
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid != os.getpgid(0)
        assert len(leftovers(nap)) == 1
    deadline = time.monotonic() + 5
    while (leftovers(str(log)) or leftovers(nap)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(str(log)) == [] and leftovers(nap) == []


# Serial: it times the arena's stop on the wall clock, which a neighbouring test's load stretches
# (under two parallel workers the arena's workers were seen to start so late that it missed 30 s).
@pytest.mark.serial
def test_ctrl_c_in_the_arena_command_leaves_no_program_behind(tmp_path):
    log = tmp_path / "interrupted.jsonl"
    spec = bot_spec("time=100", "keep=1", "fault=sleep:60", f"log={log}")
    command = [sys.executable, "-m", "amazons.arena", spec, "random", "--games", "2",
               "--processes", "2", "--opening-plies", "0"]  # both programs' first turns sleep
    # Ctrl-C's default action for the arena, also where this test run was started with SIGINT
    # ignored (a shell's background job, `make test &`), which the arena would inherit.
    arena = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    # the test bots (the arena's own command line holds the log's path too)
    def programs() -> list[str]:
        bot = f"{sys.executable} {TEST_BOT}"
        return [line for line in leftovers(str(log)) if line.split(": ", 1)[1].startswith(bot)]

    try:
        deadline = time.monotonic() + 60
        while len(programs()) < 2 and time.monotonic() < deadline:  # both games' programs run
            time.sleep(0.05)
        if len(programs()) != 2:
            text = (f"{programs()}\n{process_report()}\n"
                    f"{arena.poll() is None or arena.communicate()}")
            warnings.warn(text, stacklevel=1)  # the report, also in the warnings summary
            pytest.fail(text)
        os.killpg(arena.pid, signal.SIGINT)  # what Ctrl-C sends to the terminal's foreground group
        try:
            _, stderr = arena.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            report = process_report()
            os.killpg(arena.pid, signal.SIGKILL)
            _, stderr = arena.communicate()
            text = (f"the arena outlived SIGINT by 30 s\n{report}\narena stderr:\n"
                    f"{stderr.decode()[-4000:]}")
            warnings.warn(text, stacklevel=1)  # the report, also in the warnings summary
            pytest.fail(text)
    finally:
        if arena.poll() is None:
            os.killpg(arena.pid, signal.SIGKILL)
            arena.wait()
    deadline = time.monotonic() + 5
    while leftovers(str(log)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(str(log)) == []
    # a stop, said in one line: no traceback from the command or its worker processes
    assert arena.returncode == 130, stderr.decode()[-4000:]
    assert "Traceback" not in stderr.decode(), stderr.decode()[-4000:]
    assert "arena: stopped by Ctrl-C" in stderr.decode()


# ------------------------------------------------------------------------------------------------
# The project's own bot


@pytest.mark.slow
@pytest.mark.parametrize(("interaction", "mode", "opening"), [
    ("simple", "", 0), ("json", "--restart-per-turn", 36)])
def test_the_project_bot_plays_whole_games_without_a_fault(interaction, mode, opening):
    # the bot loads the search's kernels from Numba's cache: compiling them would take its first
    # turn
    warm_up()
    spec = (f"botzone:{interaction}:{sys.executable} -m amazons.botzone --model none "
            f"--time 0.2 {mode}").strip()
    result = run_arena(spec, "random", games=1, processes=1, seed=2, opening_plies=opening)
    assert not result.faults_a and not result.faults_b, result.records[0].headers.get("Fault")
    assert result.records[0].board().is_game_over()
    assert leftovers("amazons.botzone --model none --time 0.2") == []
