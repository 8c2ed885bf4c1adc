"""The C++ bot speaks Botzone's protocol: simple and JSON interaction, kept and restarted processes.

The protocol part (`amazons/native/protocol.h`) is built alone and fed Botzone's inputs; the bot
plays whole games against random moves through both interactions and both process modes (every
reply checked on a `Board`), directly and as the arena's `botzone:` player; it answers the wiki's
documented input with its limits in every form, reads a `time_limit` as
`amazons.players.botzone_limits.read_limit` does, and refuses bad input and bad options with a
message and exit status 2. Helpers and the compiled bot: `tests/cpp_bot.py`, `default_bot` in
`tests/conftest.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from botzone_inputs import LIMIT_FORMS, move_json, wiki_json_line
from cpp_bot import (
    FAST,
    MARKER,
    NEEDS_GXX,
    KeptBot,
    botzone_line,
    first_input,
    history_input,
    move_object,
    parse_reply,
    root_search,
    search_cpu_seconds,
)

from amazons import BLACK, WHITE
from amazons.board import Board, Move
from amazons.botzone.cpp_export import NATIVE_DIR
from amazons.matches.arena import run_arena
from amazons.players import botzone_limits

pytestmark = NEEDS_GXX

# time_limit values as JSON texts: strings of every shape, numbers, and what is neither
TIME_LIMIT_TEXTS = ['"0.05"', '" 0.05\\t"', '"5e-2"', '".05"', '"+0.05"', '"\\u0030.05"', '0.05',
                    '5e-2', '"0.05."', '"0x1p-5"', '"nan"', '"inf"', '"Infinity"', '"1e999"',
                    '1e999', '""', '"abc"', '"0.05s"', '"-0.05"', '-0.05', '0', '"0"', 'null',
                    'true', '[0.05]', '{"s": 0.05}']


# ------------------------------------------------------------------------------------------------
# The protocol part alone

PROTOCOL_DRIVER = r"""
#include "protocol.h"

// Every turn the protocol part reads from stdin, as the bot reads them: "turn JSON COMPLETE
// TIME_LIMIT COUNT", the COUNT moves in Botzone's text, the JSON reply to the newest move (with a
// debug text to escape), then the keep-running marker.
int main() {
    try {
        Turn turn = read_first_input();
        for (;;) {
            std::printf("turn %d %d %.17g %lu\n", turn.json ? 1 : 0, turn.complete ? 1 : 0,
                        turn.time_limit, (unsigned long)turn.history.size());
            for (size_t i = 0; i < turn.history.size(); ++i)
                std::printf("%s\n", botzone_text(turn.history[i]).c_str());
            const RealMove* newest = turn.history.empty() ? 0 : &turn.history.back();
            std::printf("%s\n%s\n", json_reply(newest, "say \"hi\" \\ bye").c_str(),
                        KEEP_RUNNING_MARKER);
            if (!read_update(&turn)) return 0;
        }
    } catch (const BotError& error) {
        std::fflush(stdout);
        std::fprintf(stderr, "bot: %s\n", error.what());
        return 2;
    }
}
"""


def read_turns(stdout: str) -> list[tuple[bool, bool, float, list[str], dict]]:
    """The driver's turns: (json, complete, time_limit, the moves' texts, the parsed reply)."""
    lines, turns = stdout.splitlines(), []
    while lines:
        _, json_flag, complete, time_limit, count = lines.pop(0).split()
        moves = [lines.pop(0) for _ in range(int(count))]
        reply = json.loads(lines.pop(0))
        assert lines.pop(0) == MARKER
        turns.append((json_flag == "1", complete == "1", float(time_limit), moves, reply))
    return turns


def test_the_protocol_part_alone_reads_botzones_inputs_as_the_python_rules_do(tmp_path):
    # protocol.h needs no other part than common.h (no rules, no settings): built alone, it reads
    # a simple transcript, keep-running updates (blank and lone turn-number lines skipped), whole
    # JSON objects with each time_limit form (read as botzone_limits.read_limit reads it, 0 for
    # none, one note for the process) and a bare JSON move, and writes JSON replies.
    (tmp_path / "driver.cpp").write_text(PROTOCOL_DRIVER)
    binary = tmp_path / "driver"
    built = subprocess.run(["g++", "-std=c++11", "-O1", "-Wall", "-Wextra", "-Werror",
                            f"-I{NATIVE_DIR}", "-o", str(binary), str(tmp_path / "driver.cpp")],
                           capture_output=True, text=True, timeout=120, check=False)
    assert built.returncode == 0 and not built.stderr, built.stderr
    rng = np.random.default_rng(2)
    board = Board()
    for _ in range(9):
        legal = board.legal_moves()
        board.push(legal[int(rng.integers(len(legal)))])
    history = [move.to_botzone() for move in board.move_stack]
    position = wiki_json_line(history, ())[:-1]  # without its closing brace
    text = history_input(board.move_stack) + "\n7\n" + history[-1] + "\n"
    text += "".join(f'{position},"time_limit":{limit}}}\n' for limit in TIME_LIMIT_TEXTS)
    text += move_json(history[0]) + "\n"
    result = subprocess.run([str(binary)], input=text, capture_output=True, text=True, timeout=30,
                            check=False)
    assert result.returncode == 0, result.stderr
    turns = read_turns(result.stdout)
    assert len(turns) == 3 + len(TIME_LIMIT_TEXTS)
    assert turns[0][:4] == (False, True, 0.0, history)
    assert turns[1][:4] == (False, False, 0.0, history[-1:])
    for limit, turn in zip(TIME_LIMIT_TEXTS, turns[2:-1], strict=True):
        expected = botzone_limits.read_limit(json.loads(limit))
        assert turn[:4] == (True, True, expected or 0.0, history), limit
    assert turns[-1][:4] == (True, False, 0.0, history[:1])
    for *_, moves, reply in turns:
        assert reply == {"response": move_object(Move.from_botzone(moves[-1])),
                         "debug": 'say "hi" \\ bye'}
    assert result.stderr.count("bot: note: time_limit") == 1, result.stderr


# ------------------------------------------------------------------------------------------------
# Whole games against random moves


def play_game(binary: Path, bot_colour: int, use_json: bool, keep_running: bool, seed: int,
              restart_at: int | None = None) -> Board:
    """One whole game of the bot against random moves; every reply checked legal on a Board.

    With `restart_at`, the kept process is closed before the bot's turn of that number and a new
    one starts with the whole history.
    """
    rng = np.random.default_rng(seed)
    board = Board()
    requests: list[Move | None] = [None] if bot_colour == BLACK else []
    responses: list[Move] = []
    kept = None
    while not board.is_game_over():
        if board.turn != bot_colour:
            legal = board.legal_moves()
            move = legal[int(rng.integers(len(legal)))]
            board.push(move)
            requests.append(move)
            continue
        turn = len(responses)
        if kept is not None and turn == restart_at:
            assert kept.close() == 0
            kept = None
        if not keep_running:
            result = subprocess.run([str(binary), *FAST, "--restart-per-turn"],
                                    input=first_input(requests, responses, use_json),
                                    capture_output=True, text=True, timeout=60, check=False)
            assert result.returncode == 0, result.stderr
            reply_line, = result.stdout.splitlines()
        elif kept is None:
            kept = KeptBot(binary, *FAST)
            reply_line = kept.ask(first_input(requests, responses, use_json))
        else:
            newest = requests[-1]
            line = json.dumps(move_object(newest)) if use_json else botzone_line(newest)
            reply_line = kept.ask(line + "\n")
        move = parse_reply(reply_line, use_json)
        assert board.is_legal(move), f"illegal reply {move} at ply {board.ply}\n{board}"
        board.push(move)
        responses.append(move)
    if kept is not None:
        assert kept.close() == 0  # the end of input ends a kept process cleanly
    return board


@pytest.mark.parametrize("use_json", [False, True], ids=["simple", "json"])
def test_whole_games_keep_running(default_bot, use_json):
    for colour, seed in ((BLACK, 1), (WHITE, 2)):
        board = play_game(default_bot, colour, use_json, keep_running=True, seed=seed)
        assert board.is_game_over() and board.ply >= 20


@pytest.mark.parametrize("use_json", [False, True], ids=["simple", "json"])
def test_whole_games_restart_per_turn(default_bot, use_json):
    board = play_game(default_bot, WHITE if use_json else BLACK, use_json, keep_running=False,
                      seed=3)
    assert board.is_game_over()


def test_a_kept_process_restarted_mid_game_plays_on(default_bot):
    board = play_game(default_bot, BLACK, use_json=False, keep_running=True, seed=4, restart_at=6)
    assert board.is_game_over() and board.ply > 12


def test_a_restarted_process_replays_a_long_game_without_emptying_its_cache_per_move(default_bot):
    # Botzone may restart a kept bot mid-game with the whole history: replaying it before the first
    # search leaves nothing in the network cache to throw away, so its 8 MiB table is never emptied.
    rng = np.random.default_rng(3)
    board = Board()
    while board.ply < 40:
        legal = board.legal_moves()
        board.push(legal[int(rng.integers(len(legal)))])
    _, _, counters = root_search(default_bot, board.move_stack, simulations=50)
    assert counters["cache_clears"] == 0, counters


def test_the_bot_answers_the_no_move_line_when_it_has_lost(default_bot):
    # A random game to its end; the loser's bot is given the whole game (Botzone would not ask,
    # but a reply must never be a made-up move).
    rng = np.random.default_rng(5)
    board = Board()
    while not board.is_game_over():
        legal = board.legal_moves()
        board.push(legal[int(rng.integers(len(legal)))])
    moves = board.move_stack
    loser = board.turn
    requests = ([None] if loser == BLACK else []) + moves[1 - loser::2]
    responses = moves[loser::2]
    for use_json in (False, True):
        result = subprocess.run([str(default_bot), *FAST, "--restart-per-turn"],
                                input=first_input(requests, responses, use_json),
                                capture_output=True, text=True, timeout=30, check=True)
        reply = json.loads(result.stdout)["response"] if use_json else result.stdout.split()
        assert list(map(int, reply.values() if use_json else reply)) == [-1] * 6


# ------------------------------------------------------------------------------------------------
# Botzone's documented input and its limits


@pytest.mark.parametrize("form", sorted(LIMIT_FORMS))
def test_botzones_documented_input_is_answered_in_both_process_modes(default_bot, form):
    """The wiki's line (tests/botzone_inputs.py), its limits in each form: a legal reply, at most
    one note on stderr. Kept running: the same line first, then a whole object mid-game, a bare
    move, and a whole object once more; one note at most for the whole process."""
    limits, noted = LIMIT_FORMS[form]
    result = subprocess.run([str(default_bot), *FAST, "--restart-per-turn"],
                            input=wiki_json_line([], limits) + "\n", capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert Board().is_legal(parse_reply(result.stdout, use_json=True))
    assert len(result.stderr.splitlines()) == noted
    assert result.stderr.count("bot: note: time_limit") == noted
    kept = KeptBot(default_bot, *FAST)
    board, rng = Board(), np.random.default_rng(7)
    try:
        for turn in range(4):
            history = [move.to_botzone() for move in board.move_stack]
            line = move_json(history[-1]) if turn == 2 else wiki_json_line(history, limits)
            reply = parse_reply(kept.ask(line + "\n"), use_json=True)
            assert board.is_legal(reply), (turn, reply)
            board.push(reply)
            legal = board.legal_moves()
            board.push(legal[int(rng.integers(len(legal)))])
    finally:
        assert kept.close() == 0
    assert len(kept.stderr.splitlines()) == noted
    assert kept.stderr.count("bot: note: time_limit") == noted


def test_the_bot_reads_a_time_limit_as_the_python_definition_does(default_bot):
    # botzone_limits.read_limit is the rule; protocol.h's read_limit mirrors it. A kept bot with
    # 0.2 s a turn is sent the same later position, a whole JSON object each time, with each
    # time_limit: read as a limit (0.05 s), the turn searches until 0.05 s less a quarter of it
    # (the margin rule: at most MARGIN_FRACTION of an allowance); not read, the bot's own 0.2 s
    # less its 0.1 s margin leaves 0.1 s, and the turn searches for that long (the CPU clock gets
    # there on any machine).
    kept = KeptBot(default_bot, "--time", "0.2")
    try:
        first = parse_reply(kept.ask(wiki_json_line([]) + "\n"), use_json=True)
        history = [first.to_botzone(), Board.from_moves([first]).legal_moves()[0].to_botzone()]
        position = wiki_json_line(history, ())[:-1]  # without its closing brace
        read, noted = [], 0
        for text in TIME_LIMIT_TEXTS:
            value = botzone_limits.read_limit(json.loads(text))
            assert value in (None, 0.05), text
            reply = kept.ask(f'{position},"time_limit":{text}}}\n')
            seconds = search_cpu_seconds(reply)
            assert (seconds <= 0.05) == (value is not None), (text, reply)
            assert seconds > 0.05 / 2, (text, reply)  # a limit read leaves the search time too
            read.append(value is not None)
            noted += value is None and not botzone_limits.is_empty_limit(json.loads(text))
    finally:
        assert kept.close() == 0
    assert sum(read) == 8 and noted > 1
    assert len(kept.stderr.splitlines()) == 1, kept.stderr  # one note for the whole process
    assert "bot: note: time_limit" in kept.stderr, kept.stderr


# ------------------------------------------------------------------------------------------------
# Bad input, the command line


BAD_INPUTS = {
    "not a turn number": ("x\n", "line 1: 'x' is not a turn number"),
    "truncated transcript": ("2\n-1 -1 -1 -1 -1 -1\n5 0 3 2 6 5\n",
                             "input ended after 2 of the 3 move lines"),
    "empty input": ("", "input ended before the turn number"),
    "malformed move": ("1\n-1 -1 -1 -1 -1 x\n", "line 2: 'x' is not an integer"),
    "too few numbers": ("2\n-1 -1 -1 -1 -1 -1\n5 0 3 2 6\n0 5 4 5 3 4\n",
                        "line 3: '5 0 3 2 6' is not a move"),
    "off the board": ("1\n9 0 3 2 6 5\n", "line 2: x0 = 9 is off the board"),
    "illegal move": ("2\n-1 -1 -1 -1 -1 -1\n5 0 5 7 6 5\n0 5 4 5 3 4\n",
                     "move 1 of the game, '5 0 5 7 6 5'"),
    "-1 line later": ("2\n-1 -1 -1 -1 -1 -1\n-1 -1 -1 -1 -1 -1\n0 5 4 5 3 4\n",
                      "only valid as Black's first request"),
    "bad JSON": ('{"requests": [\n', "bad JSON input"),
    "bad JSON escape": ('{"requests": [], "data": "\\u00zz"}\n', "bad JSON input: bad \\u escape"),
    "JSON count": ('{"requests": [], "responses": []}\n', "'requests' must be a non-empty list"),
    "JSON field": ('{"requests": [{"x0": 1}], "responses": []}\n',
                   "requests[0]: the move object lacks y0"),
    "JSON float": ('{"requests": [{"x0": 0, "y0": 5, "x1": 4, "y1": 5, "x2": 3, "y2": 4.5}], '
                   '"responses": []}\n', "requests[0]: y2 is not an integer"),
    "JSON responses": ('{"requests": [{"x0": -1, "y0": -1, "x1": -1, "y1": -1, "x2": -1, '
                       '"y2": -1}], "responses": [{"x0": 5, "y0": 0, "x1": 3, "y1": 2, "x2": 6, '
                       '"y2": 5}]}\n', "1 requests and 1 responses"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_is_refused_with_a_message(default_bot, name):
    text, message = BAD_INPUTS[name]
    result = subprocess.run([str(default_bot), *FAST], input=text, capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("bot: ") and message in result.stderr, result.stderr


def test_a_bad_request_in_a_kept_process_ends_it_after_its_good_replies(default_bot):
    kept = KeptBot(default_bot, *FAST)
    reply = parse_reply(kept.ask(first_input([None], [], use_json=False)), use_json=False)
    board = Board()
    board.push(reply)
    kept.process.stdin.write("0 5 0 5 0 4\n")  # not a move: the amazon stays where it is
    kept.process.stdin.flush()
    assert kept.process.wait(timeout=30) == 2
    assert "move 2 of the game, '0 5 0 5 0 4'" in kept.process.stderr.read()
    assert kept.lines.get(timeout=30) is None  # nothing more on stdout


def test_bad_options_are_refused(default_bot):
    for args, message in ((["--time", "0"], "--time must be a positive number"),
                          (["--frobnicate", "1"], "unknown option '--frobnicate'"),
                          (["--perft", "9"], "--perft takes a depth 0..6")):
        result = subprocess.run([str(default_bot), *args], input="", capture_output=True,
                                text=True, timeout=30, check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr


def test_help_prints_the_options(default_bot):
    result = subprocess.run([str(default_bot), "--help"], input="", capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.startswith("usage: bot") and "--tree-mb MB" in result.stdout
    assert "--help" in result.stdout


# ----------------------------------------------------------------------------------------------
# Whole games through the arena's `botzone:` player (amazons.players.program), as Botzone runs it


@pytest.mark.parametrize(("interaction", "process_mode"),
                         [("simple", ()), ("json", ()), ("simple", ("--restart-per-turn",)),
                          ("json", ("--restart-per-turn",))],
                         ids=["simple-kept", "json-kept", "simple-restarted", "json-restarted"])
def test_arena_games_against_random_in_every_interaction(default_bot, interaction, process_mode):
    spec = f"botzone:{interaction}:{default_bot} {' '.join(process_mode)} --simulations 64"
    result = run_arena(spec, "random", games=2, processes=1, seed=5)
    assert not result.faults_a and not result.faults_b, result.summary()
    # 64 simulations with the shipped net beat random moves
    assert result.wins_a == 2, result.summary()
    assert all(record.termination is None and len(record.moves) >= 8
               for record in result.records)


@pytest.mark.slow
@pytest.mark.serial  # the arena's wall-clock guard (3x the CPU limit) fires on a loaded machine
def test_arena_game_against_the_python_bot_in_both_interactions(default_bot):
    python_bot = f"{sys.executable} -m amazons.botzone --model default --time 0.3"
    for interaction in ("simple", "json"):
        # inside the arena's limits of 0.3 s and 0.6 s
        cpp_bot = f"{default_bot} --time 0.25 --first-time 0.5"
        result = run_arena(f"botzone:{interaction},time=0.3:{cpp_bot}",
                           f"botzone:{interaction},wall=6:{python_bot}", games=2, processes=1,
                           seed=9)
        assert not result.faults_a and not result.faults_b, result.summary()
        assert result.wins_a + result.wins_b == 2
