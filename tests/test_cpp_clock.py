"""The C++ bot keeps Botzone's limits: its CPU clock and its memory.

The clock is the process's CPU time, so a search reaches its deadline on any machine: the tests
check that a turn stops soon after it (within `PAST_DEADLINE_SECONDS`), that a JSON `time_limit`
is read as Botzone's per-turn limit, that a short clock keeps back only a share of itself for its
margin and searches the rest inside its allowance, that the clock is read right after a costly
simulation, and that the bot links no clock outside the C library. A process's CPU time is its
own, from `os.wait4` (`own_cpu_seconds`). The memory: the default tree and the rest of
the process stay under Botzone's limit with a margin, `--info` reports the capacity the tree
allocates, and a full tree ends the search with a legal reply. The figures (how far past, how
many simulations) are `--suite botzone`'s. Helpers and the compiled bot: `tests/cpp_bot.py`,
`default_bot` in `tests/conftest.py`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from botzone_inputs import MOVE_KEYS
from cpp_bot import (
    FAST,
    FIRST_REQUEST_JSON,
    NEEDS_GXX,
    KeptBot,
    first_input,
    history_input,
    move_object,
    parse_reply,
    root_search,
    search_cpu_seconds,
    turn_simulations,
)

# The clock test's position is the one `--suite botzone` times (one definition of it).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from suite_botzone import costly_position  # noqa: E402

from amazons import BLACK
from amazons.board import Board
from amazons.botzone.cpp_export import SOURCE_NAME
from amazons.players import botzone_limits

pytestmark = NEEDS_GXX

# What the clock tests allow a reply past its deadline, in CPU seconds: the search reads the clock
# after every simulation or few, so it stops within a simulation (tens of microseconds, an
# adjudication a few milliseconds) on any machine; a search that ignored its deadline would run on
# for seconds. The figures (how far past, how many simulations) are `--suite botzone`'s.
PAST_DEADLINE_SECONDS = 0.25


def own_cpu_seconds(command: Sequence[str], text: str, timeout: float = 30.0) -> tuple[float, str]:
    """CPU seconds (user + system) of one process of `command` given `text`, and its stdout.

    The time is that process's own: the resource usage `os.wait4` returns for that one child as
    it is reaped (not this process's `RUSAGE_CHILDREN`, which also counts any other child reaped
    meanwhile). Its input and output are files, so it never blocks on a pipe.

    Raises:
        AssertionError: a non-zero exit status (its stderr quoted), or no exit within `timeout`.
    """
    with (tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as output,
          tempfile.TemporaryFile() as errors):
        given.write(text.encode())
        given.seek(0)
        process = subprocess.Popen([str(part) for part in command], stdin=given, stdout=output,
                                   stderr=errors)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise AssertionError(f"{command[0]} ran past {timeout} s")
            time.sleep(0.002)
        process.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        errors.seek(0)
        assert process.returncode == 0, errors.read().decode(errors="replace")[-2000:]
        return usage.ru_utime + usage.ru_stime, output.read().decode()


def process_cpu_seconds(binary: Path, text: str, *args: str) -> tuple[float, str]:
    """CPU seconds of one `--restart-per-turn` process answering `text`, and its reply line."""
    return own_cpu_seconds([binary, "--restart-per-turn", *args], text)


def test_the_cpu_clock_counts_the_measured_process_alone():
    # Another child of this process (here a thread's, as another test's might be) that burns CPU
    # and is reaped while the measured process runs must not be charged to it. The measured
    # process waits, sleeping, until the other child has been reaped.
    with tempfile.TemporaryDirectory() as folder:
        flag = Path(folder) / "running"
        flag.touch()
        burn = ("import time\nstarted = time.process_time()\n"
                "while time.process_time() - started < 0.3:\n    pass\n")
        wait = (f"import os, time\nwhile os.path.exists({str(flag)!r}):\n    time.sleep(0.01)\n"
                "print('done')\n")

        def burn_then_release() -> None:
            subprocess.run([sys.executable, "-c", burn], timeout=60, check=True)
            flag.unlink()

        other = threading.Thread(target=burn_then_release)
        other.start()
        try:
            used, output = own_cpu_seconds([sys.executable, "-c", wait], "", timeout=60)
        finally:
            other.join(60)
    assert output == "done\n"
    assert used < 0.25, used  # the sleeper's start-up and polls, not the other child's 0.3 s


# ------------------------------------------------------------------------------------------------
# The clock


def test_the_clock_is_read_after_a_costly_simulation(default_bot):
    # The clock must be read right after a simulation whose adjudication ran FILL_NODES_PER_READ
    # nodes of the exhaustive fill, not up to 7 simulations later: counted in fill nodes, so on
    # any machine, no simulation starts with that many run since the last read (`unread_fill`),
    # over a search that ran many times that many (the figures in time, the longest gap between
    # reads and the slowest simulation, are `--suite botzone`'s).
    source = (default_bot.parent / SOURCE_NAME).read_text()
    pattern = r"static const int64_t FILL_NODES_PER_READ = (\d+);"
    per_read = int(re.search(pattern, source).group(1))
    _, _, counters = root_search(default_bot, costly_position(), "--time", "0.5", "--margin", "0",
                                 simulations=None)
    assert counters["fill_nodes"] >= 8 * per_read, counters  # the search met the costly leaves
    assert counters["unread_fill"] < per_read, counters


def test_turns_stay_inside_their_time_through_adjudicated_endgames(default_bot):
    # Whole games against random moves, each of the bot's turns a fresh process with the game so
    # far (its CPU measured exactly) and no margin: a turn overruns its time by the work after the
    # last read of the clock, which stays small through the endgames the adjudication decides
    # (how small on this machine: --suite botzone's cpp_overrun_ms_max).
    worst, proven = 0.0, 0
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        board = Board()
        while not board.is_game_over():
            if board.turn == BLACK:
                used, reply = process_cpu_seconds(default_bot,
                                                  history_input(board.move_stack, use_json=True),
                                                  "--time", "0.1", "--first-time", "0.1",
                                                  "--margin", "0")
                worst = max(worst, used)
                proven += "proven" in json.loads(reply)["debug"]
                board.push(parse_reply(reply, use_json=True))
            else:
                legal = board.legal_moves()
                board.push(legal[int(rng.integers(len(legal)))])
    assert proven >= 2  # the games' ends were proven, separated regions adjudicated
    print(f"slowest turn {worst:.4f} s of CPU at --time 0.1 --margin 0")
    assert worst <= 0.1 + PAST_DEADLINE_SECONDS, worst


def test_turns_stay_inside_their_cpu_budget(default_bot):
    # The whole process, start-up included, searches to its deadline (0.6 - 0.05 s of CPU: a CPU
    # clock gets there on any machine) and stops soon after; kept, every later turn the same.
    used, reply = process_cpu_seconds(default_bot, first_input([None], [], use_json=True),
                                      "--first-time", "0.6", "--margin", "0.05")
    assert 0.55 - 0.01 <= used <= 0.55 + PAST_DEADLINE_SECONDS, used
    assert Board().is_legal(parse_reply(reply, use_json=True))
    kept = KeptBot(default_bot, "--time", "0.25", "--first-time", "0.4", "--margin", "0.05")
    try:
        board = Board()
        reply = parse_reply(kept.ask(first_input([None], [], use_json=True)), use_json=True)
        board.push(reply)
        for _ in range(3):
            answer = board.legal_moves()[0]
            board.push(answer)
            text = kept.ask(json.dumps(move_object(answer)) + "\n")
            seconds = search_cpu_seconds(text)
            assert 0.1 < seconds <= 0.2 + PAST_DEADLINE_SECONDS, seconds
            board.push(parse_reply(text, use_json=True))
    finally:
        assert kept.close() == 0


def test_a_json_time_limit_is_the_turns_limit_doubled_for_the_first_turn(default_bot):
    # One reading for the C++ bot, the Python bot and the arena (amazons.players.botzone_limits):
    # the first turn may use FIRST_TURN_FACTOR x time_limit, a later one time_limit, each less the
    # margin (written into the source from botzone_limits, as the defaults are).
    source = (default_bot.parent / SOURCE_NAME).read_text()
    for name, value in (("TURN_SECONDS", botzone_limits.LANGUAGE_TURN_SECONDS["cpp"]),
                        ("FIRST_TURN_FACTOR", botzone_limits.FIRST_TURN_FACTOR),
                        ("MARGIN_SECONDS", botzone_limits.CPP_MARGIN_SECONDS),
                        ("MARGIN_FRACTION", botzone_limits.MARGIN_FRACTION)):
        assert f"static const double {name} = {value!r};" in source
    # The first turn searches until 2 x 0.25 - 0.1 = 0.4 s of CPU from process start (the clock is
    # CPU time, so the search reaches it on any machine), and stops soon after.
    first = dict(FIRST_REQUEST_JSON, time_limit=0.25)
    used, reply = process_cpu_seconds(default_bot, json.dumps(first) + "\n")
    assert 0.4 - 0.01 <= used <= 0.4 + PAST_DEADLINE_SECONDS, used
    board = Board()
    board.push(parse_reply(reply, use_json=True))
    board.push(board.legal_moves()[0])
    # A later turn gets time_limit, not twice it: 0.2 less a quarter of it (the margin rule:
    # never more than MARGIN_FRACTION of the allowance) is 0.15 s of CPU from process start, and
    # the process ends inside its 0.2 s (twice it would search to 0.3 s).
    later = {"requests": [dict.fromkeys(MOVE_KEYS, -1), move_object(board.move_stack[1])],
             "responses": [move_object(board.move_stack[0])], "time_limit": 0.2}
    used, reply = process_cpu_seconds(default_bot, json.dumps(later) + "\n")
    assert 0.15 - 0.01 <= used <= 0.2, used
    assert board.is_legal(parse_reply(reply, use_json=True))


@pytest.mark.parametrize("turn_seconds", [0.03, 0.1], ids=["0.03s", "codingame-0.1s"])
def test_a_short_clock_keeps_back_a_share_of_it_and_searches_the_rest(default_bot, turn_seconds):
    # The default margin (0.1 s) would swallow these allowances whole and leave one simulation a
    # move; the margin rule keeps back at most MARGIN_FRACTION of an allowance
    # (botzone_limits.kept_back_seconds), so every turn searches most of its allowance and still
    # ends inside it. Fresh processes: the first turn (FIRST_TURN_FACTOR x --time from process
    # start) and a later one (--time from process start), each process's own CPU time measured
    # exactly; then a kept process's later turns (--time from reading the input), by the search
    # time the bot reports.
    board = Board()
    board.push(board.legal_moves()[5])
    board.push(board.legal_moves()[7])
    time_option = ("--time", f"{turn_seconds:g}")
    for history, allowance in (([], botzone_limits.first_turn_seconds(turn_seconds)),
                               (board.move_stack, turn_seconds)):
        used, reply = process_cpu_seconds(default_bot, history_input(history, use_json=True),
                                          *time_option)
        print(f"--time {turn_seconds:g}, a fresh process's {'later' if history else 'first'} "
              f"turn: {used:.4f} s of CPU, {turn_simulations(reply)} simulations")
        assert turn_simulations(reply) > 1, reply
        assert allowance / 2 <= used <= allowance, (allowance, used, reply)
    kept = KeptBot(default_bot, *time_option)
    try:
        board = Board()
        board.push(parse_reply(kept.ask(first_input([None], [], use_json=True)), use_json=True))
        for _ in range(3):
            answer = board.legal_moves()[0]
            board.push(answer)
            text = kept.ask(json.dumps(move_object(answer)) + "\n")
            seconds = search_cpu_seconds(text)
            assert turn_simulations(text) > 1, text
            assert turn_seconds / 2 <= seconds <= turn_seconds, text
            board.push(parse_reply(text, use_json=True))
    finally:
        assert kept.close() == 0


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_the_bot_needs_no_clock_outside_the_c_library(default_bot):
    # clock_gettime lives in librt before glibc 2.17 (a link needs -lrt there); std::clock() is
    # the C library's everywhere.
    symbols = subprocess.run(["nm", "-D", "--undefined-only", str(default_bot)],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    assert "clock_gettime" not in symbols and " clock@" in symbols, symbols


# ------------------------------------------------------------------------------------------------
# The memory


def peak_rss_mib(binary: Path, *args: str) -> tuple[float, str]:
    """Peak resident memory (MiB) of one `--restart-per-turn` process on Black's first turn, and
    its JSON reply."""
    code = ("import resource, subprocess, sys; "
            "out = subprocess.run(sys.argv[1:], input=sys.stdin.read(), capture_output=True, "
            "text=True, check=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
            "print(out.stdout, end='')")
    result = subprocess.run([sys.executable, "-c", code, str(binary), "--restart-per-turn", *args],
                            input=json.dumps(FIRST_REQUEST_JSON) + "\n", capture_output=True,
                            text=True, timeout=60, check=True)
    peak_kib, reply = result.stdout.split("\n", 1)
    return int(peak_kib) / 1024, reply


def test_the_tree_uses_botzones_memory_with_a_margin(default_bot):
    # botzone_limits: the default tree (CPP_TREE_MIB) and everything else in the process stay under
    # CPP_PEAK_MEMORY_MIB (230 MB of Botzone's 256 MB) even if every page of the tree were written;
    # the rest is measured with a tree of 1 MiB. (How many simulations the first turn runs in its
    # 2 s, and whether the tree fills, are `--suite botzone`'s cpp_simulations_first and
    # cpp_tree_full_turns: figures of the machine.)
    source = (default_bot.parent / SOURCE_NAME).read_text()
    assert f"static const double TREE_MB_DEFAULT = {botzone_limits.CPP_TREE_MIB!r};" in source
    rest, _ = peak_rss_mib(default_bot, "--tree-mb", "1", "--simulations", "50")
    print(f"rest of the process {rest:.1f} MiB")
    assert rest - 1 + botzone_limits.CPP_TREE_MIB <= botzone_limits.CPP_PEAK_MEMORY_MIB, rest


def test_info_reports_the_capacity_the_tree_allocates(default_bot):
    def capacity(tree_mb: str) -> tuple[int, int]:
        result = subprocess.run([str(default_bot), "--info", "--tree-mb", tree_mb],
                                capture_output=True, text=True, timeout=30, check=False)
        assert result.returncode == 0, result.stderr
        edges, nodes = re.search(r"tree (-?\d+) edges and (-?\d+) nodes", result.stdout).groups()
        return int(edges), int(nodes)

    # The tree's own formula: a tree too small to allocate names the same counts in its refusal.
    small = subprocess.run([str(default_bot), "--tree-mb", "0.01", *FAST],
                           input=first_input([None], [], False), capture_output=True, text=True,
                           timeout=30, check=False)
    assert small.returncode == 2
    edges, nodes = capacity("0.01")
    assert f"--tree-mb 0.01 holds {edges} edges and {nodes} nodes" in small.stderr, small.stderr
    edges, nodes = capacity("200")
    assert edges > 2e7 and nodes == edges // 32
    # An int holds at most 2**31 - 1: the tree caps its edges at 2e9, and so does the report.
    assert capacity("1e9") == capacity("5e8") == (2_000_000_000, 2_000_000_000 // 32)


def test_a_full_tree_ends_the_search_with_a_legal_reply(default_bot):
    # 1 MiB holds about 130,000 edges: an opening search fills it long before 100,000 simulations.
    result = subprocess.run([str(default_bot), "--tree-mb", "1", "--simulations", "100000",
                             "--restart-per-turn"], input=json.dumps(FIRST_REQUEST_JSON) + "\n",
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    debug = json.loads(result.stdout)["debug"]
    assert "tree full" in debug and int(debug.split()[0]) < 100_000, debug
    assert Board().is_legal(parse_reply(result.stdout, use_json=True))
