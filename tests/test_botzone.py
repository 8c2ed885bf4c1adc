"""Tests of the Botzone bot: protocol parsing, turn logic, and real bot processes end to end.

Bot processes run `python -m amazons.botzone` with the real engine and search; games between two
of them are relayed line by line through Botzone's protocol and checked on a `Board`.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from botzone_inputs import LIMIT_FORMS, move_json, wiki_json_line

from amazons.board import BLACK, Board, Move
from amazons.botzone.bot import (
    KEEP_RUNNING_MARKER,
    NO_MOVE,
    TREE_MEMORY_MB,
    Bot,
    ProtocolError,
    TimeControl,
    format_json_reply,
    main,
    parse_json,
    parse_simple,
    parse_update,
)
from amazons.players import botzone_limits
from amazons.players.factory import build_model_player
from amazons.players.keep_running import KeptProcess, KeptProcessError
from amazons.players.player import RandomPlayer

REPO = Path(__file__).resolve().parents[1]
BOT = [sys.executable, "-m", "amazons.botzone"]
BOT_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Black's third turn in the Botzone wiki's sample match (shared/reference/AMAZONS.md).
WIKI_TURN_3 = """3
-1 -1 -1 -1 -1 -1
5 0 3 2 6 5
0 5 4 5 3 4
0 2 0 3 3 0
2 7 2 5 1 4
"""
WIKI_MOVES = ["5 0 3 2 6 5", "0 5 4 5 3 4", "0 2 0 3 3 0", "2 7 2 5 1 4"]

# The tests that time replies on the wall clock run alone, after the parallel part (Makefile).
TIMED = pytest.mark.serial


def move_object(text: str) -> dict[str, int]:
    return dict(zip(("x0", "y0", "x1", "y1", "x2", "y2"), map(int, text.split()), strict=True))


def response_text(response: dict[str, int]) -> str:
    """The Botzone move text of a JSON reply's `response` object."""
    return " ".join(str(response[key]) for key in ("x0", "y0", "x1", "y1", "x2", "y2"))


def json_input(history: list[str], black: bool, time_limit: float | None = None) -> str:
    """A Botzone JSON request for the side to move after `history` (Botzone move texts); its
    `time_limit` and `memory_limit` as Botzone's wiki shows them (`""`) unless `time_limit` is
    given."""
    turns = ([NO_MOVE] if black else []) + history
    value: dict = {"requests": [move_object(text) for text in turns[0::2]],
                   "responses": [move_object(text) for text in turns[1::2]],
                   "data": "", "globaldata": "",
                   "time_limit": "" if time_limit is None else time_limit, "memory_limit": ""}
    return json.dumps(value)


def simple_input(history: list[str]) -> str:
    """A simple-interaction transcript for the side to move after `history`."""
    lines = ([NO_MOVE] if len(history) % 2 == 0 else []) + history
    return f"{(len(lines) + 1) // 2}\n" + "\n".join(lines) + "\n"


def finished_game(seed: int) -> list[str]:
    """A whole random game (Botzone texts); the side to move after it has no legal move."""
    board, player = Board(), RandomPlayer(seed=seed)
    moves = []
    while not board.is_game_over():
        move = player.choose_move(board)
        board.push(move)
        moves.append(move.to_botzone())
    return moves


def run_main(args: list[str], text: str) -> tuple[int, str, str]:
    """`main` in this process; one turn unless `args` ask to keep running."""
    if "--keep-running" not in args:
        args = ["--restart-per-turn", *args]
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main(args, io.StringIO(text), stdout, stderr, started=time.perf_counter())
    return code, stdout.getvalue(), stderr.getvalue()


def run_bot(args: list[str], text: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """One turn of a bot process (`--restart-per-turn`)."""
    return subprocess.run(BOT + ["--restart-per-turn", *args], input=text, capture_output=True,
                          text=True, cwd=REPO, env=BOT_ENV, timeout=timeout, check=False)


def reply_is_legal_after(history: list[str], reply: str) -> bool:
    board = Board.from_moves([Move.from_botzone(text) for text in history])
    return board.is_legal(Move.from_botzone(reply))


def bot_process(args: list[str]) -> KeptProcess:
    """The project's bot (`python -m amazons.botzone ARGS`) in keep-running mode, one torch and
    BLAS thread, read line by line with timeouts."""
    return KeptProcess(BOT + args, cwd=REPO, env=BOT_ENV)


# ------------------------------------------------------------------------------------------------
# Parsing


def test_parse_simple_reads_the_wiki_example():
    moves = parse_simple(WIKI_TURN_3.splitlines())
    assert [move.to_botzone() for move in moves] == WIKI_MOVES
    board = Board.from_moves(moves)  # every move legal in sequence
    assert board.turn == BLACK


def test_parse_simple_for_white_and_for_blacks_first_turn():
    assert parse_simple(["1", NO_MOVE]) == []
    assert parse_simple(["", "1", "5 0 3 2 6 5"]) == [Move.from_botzone("5 0 3 2 6 5")]


@pytest.mark.parametrize("lines, named", [
    (["3", NO_MOVE, "5 0 3 2 6 5"], "needs 2n-1 = 5 move lines"),
    (["2", NO_MOVE, "5 0 3 2 6 5", "0 5 4 5 3 4", "0 2 0 3 3 0"], "got 4"),
    (["two", NO_MOVE], "line 1: 'two' is not a turn number"),
    (["0"], "turn number 0"),
    (["1", "5 0 3 2 6"], "line 2"),
    (["2", NO_MOVE, "5 0 3 2 6 x", "0 5 4 5 3 4"], "'x' is not an integer"),
    (["2", NO_MOVE, "5 0 3 2 6 5", "0 5 4 5 3 9"], "line 4: square (3, 9) is off the 8x8 board"),
    (["2", NO_MOVE, "5 0 3 2 6 5", NO_MOVE], "line 4: '-1 -1 -1 -1 -1 -1' is only valid"),
    (["2", NO_MOVE, "", "0 5 4 5 3 4"], "line 3"),
    ([], "empty input"),
])
def test_parse_simple_names_the_bad_line(lines, named):
    with pytest.raises(ProtocolError) as caught:
        parse_simple(lines)
    assert named in str(caught.value)


def test_parse_json_full_and_bare():
    request = parse_json(json_input(WIKI_MOVES, black=True, time_limit=6))
    assert [move.to_botzone() for move in request.history] == WIKI_MOVES
    assert request.complete and request.time_limit == 6.0
    bare = parse_json(json.dumps(move_object("2 7 2 5 1 4")))
    assert not bare.complete and bare.history == [Move.from_botzone("2 7 2 5 1 4")]
    white = parse_json(json_input(WIKI_MOVES[:1], black=False))
    assert white.history == [Move.from_botzone(WIKI_MOVES[0])] and white.time_limit is None


@pytest.mark.parametrize("text, named", [
    ('{"requests": [', "bad JSON input"),
    ("[1, 2]", "must be an object"),
    ('{"requests": []}', "non-empty list"),
    ('{"requests": [{"x0": -1, "y0": -1, "x1": -1, "y1": -1, "x2": -1, "y2": -1}], '
     '"responses": [{}]}', "one request more"),
    ('{"requests": [{"x0": 5, "y0": 0, "x1": 3, "y1": 2, "x2": 6}]}', "requests[0]: move object"),
    ('{"requests": [{"x0": 5, "y0": 0, "x1": 3, "y1": 2, "x2": 6, "y2": true}]}', "y2 = True"),
    ('{"requests": [{"x0": 5, "y0": 0, "x1": 3, "y1": 2, "x2": 6, "y2": 8}]}', "off the 8x8 board"),
    ('{"requests": {"x0": 5, "y0": 0, "x1": 3, "y1": 2, "x2": 6, "y2": 5}}',
     "'requests' must be a non-empty list"),
    ('{"requests": [{"x0": 5, "y0": 0, "x1": 3, "y1": 2, "x2": 6, "y2": 5}], "time_limit": NaN}',
     "bad JSON input: NaN is not JSON"),
    ('{"hello": 1}', "neither"),
])
def test_parse_json_names_the_problem(text, named):
    with pytest.raises(ProtocolError) as caught:
        parse_json(text)
    assert named in str(caught.value)


# ------------------------------------------------------------------------------------------------
# Botzone's documented input: `time_limit` and `memory_limit` as strings, empty
# (tests/botzone_inputs.py)


@pytest.mark.parametrize(("value", "expected"), [
    (6, 6.0), (0.25, 0.25), ("6", 6.0), (" 0.5\t", 0.5), ("5e-1", 0.5), (".5", 0.5), ("+1", 1.0),
    ("1.", 1.0), ("", None), (None, None), ("abc", None), ("1s", None), (".", None), ("1e", None),
    ("0x10", None), ("1_0", None), ("\u0663", None), ("nan", None), ("inf", None),
    ("Infinity", None), ("1e999", None), (float("inf"), None), (float("nan"), None),
    (10**400, None), (0, None), ("0", None), (-1, None), ("-0.5", None), (True, None), ([1], None),
    ({"s": 1}, None),
])
def test_a_limit_is_a_positive_number_or_text_holding_one_else_none(value, expected):
    assert botzone_limits.read_limit(value) == expected


def test_only_the_empty_forms_of_a_limit_pass_without_a_note():
    assert botzone_limits.is_empty_limit(None) and botzone_limits.is_empty_limit("")
    assert not any(botzone_limits.is_empty_limit(value) for value in ("abc", " ", 0, -1, [], "1"))


def test_a_time_limit_given_as_text_is_read():
    request = parse_json(wiki_json_line(WIKI_MOVES, ('"time_limit":"6"', '"memory_limit":"256"')))
    assert request.time_limit == 6.0 and request.notes == ()
    assert [move.to_botzone() for move in request.history] == WIKI_MOVES


READ_TIME_LIMITS = {"time-text-1": 1.0, "memory-empty": 1.0}  # LIMIT_FORMS that hold a limit


@pytest.mark.parametrize("form", sorted(LIMIT_FORMS))
def test_parse_json_reads_every_form_of_the_limits_botzone_documents(form):
    limits, noted = LIMIT_FORMS[form]
    request = parse_json(wiki_json_line([], limits))
    assert request.complete and request.history == []
    assert request.time_limit == READ_TIME_LIMITS.get(form)
    assert len(request.notes) == noted and all("time_limit" in note for note in request.notes)


@pytest.mark.parametrize("form", sorted(LIMIT_FORMS))
def test_main_answers_botzones_documented_input_when_restarted_per_turn(form):
    limits, noted = LIMIT_FORMS[form]
    code, out, err = run_main(["--model", "none", "--simulations", "16"],
                              wiki_json_line([], limits) + "\n")
    assert code == 0, err
    assert Board().is_legal(Move.from_botzone(response_text(json.loads(out)["response"])))
    assert len(err.splitlines()) == noted and err.count("note: time_limit") == noted, err


class ThreadedBot:
    """`main` in keep-running mode on a thread of this process, talking through pipes as a bot
    process does; every reply is read whole, with its keep-running line."""

    def __init__(self, args: list[str]) -> None:
        bot_in, to_bot = os.pipe()
        from_bot, bot_out = os.pipe()
        self.writer = open(to_bot, "w")
        self.reader = open(from_bot)
        self.stderr = io.StringIO()
        self.code: int | None = None
        stdin, stdout = open(bot_in), open(bot_out, "w")

        def run() -> None:
            try:
                self.code = main(args, stdin, stdout, self.stderr, started=time.perf_counter())
            finally:
                stdout.close()
                stdin.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def ask(self, line: str) -> str:
        self.writer.write(line + "\n")
        self.writer.flush()
        reply = self.reader.readline()
        assert reply, f"the bot ended: {self.stderr.getvalue()}"
        assert self.reader.readline() == KEEP_RUNNING_MARKER + "\n"
        return reply.rstrip("\n")

    def close(self) -> tuple[int | None, str]:
        """End the input; the exit code and stderr once the bot has ended."""
        self.writer.close()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        self.reader.close()
        return self.code, self.stderr.getvalue()


@pytest.mark.parametrize("form", sorted(LIMIT_FORMS))
def test_main_answers_botzones_documented_input_in_keep_running_mode(form):
    """The wiki's line first, then (its limits again) a whole object mid-game, a bare move, and a
    whole object once more: every reply legal, at most one note for the whole process."""
    limits, noted = LIMIT_FORMS[form]
    bot = ThreadedBot(["--model", "none", "--simulations", "16", "--seed", "3"])
    board, opponent = Board(), RandomPlayer(seed=4)
    try:
        for turn in range(4):
            history = [move.to_botzone() for move in board.move_stack]
            line = move_json(history[-1]) if turn == 2 else wiki_json_line(history, limits)
            reply = Move.from_botzone(response_text(json.loads(bot.ask(line))["response"]))
            assert board.is_legal(reply), (turn, reply)
            board.push(reply)
            board.push(opponent.choose_move(board))
    finally:
        code, err = bot.close()
    assert code == 0, err
    assert len(err.splitlines()) == noted and err.count("note: time_limit") == noted, err


def test_parse_update_tolerates_blank_and_turn_number_lines():
    assert parse_update(["\n", "4\n", "2 7 2 5 1 4\n"]) == Move.from_botzone("2 7 2 5 1 4")
    with pytest.raises(ProtocolError, match="line 2"):
        parse_update(["4", "2 7 2 5"])
    with pytest.raises(ProtocolError, match="no move line"):
        parse_update(["", "4"])


def test_json_reply_format():
    reply = json.loads(format_json_reply(Move.from_botzone("2 0 2 2 3 1"), "8 simulations"))
    assert reply == {"response": move_object("2 0 2 2 3 1"), "debug": "8 simulations"}
    assert json.loads(format_json_reply(None, ""))["response"] == move_object(NO_MOVE)


def test_time_control_deadlines():
    clock = TimeControl(turn_seconds=4.0, first_turn_seconds=8.0, reply_margin=0.2)
    assert clock.deadline(100.0, first_turn=True) == pytest.approx(107.8)
    assert clock.deadline(100.0, first_turn=False) == pytest.approx(103.8)
    # A JSON time_limit is Botzone's per-turn limit (botzone_limits), doubled for the first turn,
    # as the C++ bot and the arena's `botzone:` player read it.
    assert clock.deadline(100.0, first_turn=False, time_limit=2.0) == pytest.approx(101.8)
    assert clock.deadline(100.0, first_turn=True, time_limit=2.0) == pytest.approx(103.8)
    assert clock.deadline(100.0, first_turn=True, time_limit=6.0) == pytest.approx(107.8)
    # A margin never keeps back more than MARGIN_FRACTION (a quarter) of a short allowance, so a
    # short clock searches three quarters of its turn (the rule the C++ bot keeps too).
    assert botzone_limits.MARGIN_FRACTION == 0.25
    short = TimeControl(turn_seconds=0.1, first_turn_seconds=0.2, reply_margin=0.3)
    assert short.deadline(100.0, first_turn=False) == pytest.approx(100.075)
    assert short.deadline(100.0, first_turn=True) == pytest.approx(100.15)
    assert clock.deadline(100.0, first_turn=False, time_limit=0.4) == pytest.approx(100.3)
    assert clock.deadline(100.0, first_turn=False, time_limit=1.0) == pytest.approx(100.8)
    with pytest.raises(ValueError, match="turn_seconds"):
        TimeControl(turn_seconds=0.0)


# ------------------------------------------------------------------------------------------------
# Turn logic, in this process


def test_bot_replies_legally_and_keeps_its_tree_across_turns():
    bot = Bot(build_model_player("none", simulations=64, seed=0, tree_memory_mb=TREE_MEMORY_MB,
                                 stop_when_full=True))
    history = [Move.from_botzone(text) for text in WIKI_MOVES]
    move = bot.reply(history)
    assert bot.board.move_stack == history + [move]
    opponent = RandomPlayer(seed=1).choose_move(bot.board)
    kept = np.array_equal(bot.player.search.root_positions[0], bot.board.canonical_position())
    assert kept  # the tree followed the bot's own move
    second = bot.reply(history + [move, opponent])
    assert bot.board.move_stack == history + [move, opponent, second]
    assert "simulations" in bot.debug_text()


def test_bot_rejects_an_illegal_history_naming_the_move():
    bot = Bot(build_model_player("none", simulations=8, seed=0, tree_memory_mb=TREE_MEMORY_MB,
                                 stop_when_full=True))
    history = [Move.from_botzone(text) for text in WIKI_MOVES]
    history[2] = Move.from_botzone("0 5 0 4 0 3")  # a White amazon, on Black's move
    with pytest.raises(ProtocolError, match="move 3 of the game, '0 5 0 4 0 3'.*black"):
        bot.reply(history)


@TIMED
def test_bot_with_a_time_budget_stops_near_its_deadline():
    # A tree large enough that the deadline, not the memory bound, ends the search.
    bot = Bot(build_model_player("none", time_budget=1.0, seed=0, tree_memory_mb=1024,
                                 stop_when_full=True))
    bot.reply([], deadline=time.perf_counter() + 0.05)  # Numba kernels load here
    started = time.perf_counter()
    bot.reply([bot.board.move_stack[0], RandomPlayer(seed=2).choose_move(bot.board)],
              deadline=started + 0.6)
    assert 0.3 < time.perf_counter() - started < 0.8
    assert bot.player.last_report.simulations > 50


# ------------------------------------------------------------------------------------------------
# main() in this process


def test_main_simple_and_json_transcripts():
    code, out, err = run_main(["--model", "none", "--simulations", "32", "--seed", "1"],
                              WIKI_TURN_3)
    assert code == 0 and err == ""
    assert out.endswith("\n") and len(out.splitlines()) == 1
    assert reply_is_legal_after(WIKI_MOVES, out.strip())

    code, out, err = run_main(["--model", "none", "--simulations", "32"],
                              json_input(WIKI_MOVES[:3], black=False, time_limit=6))
    assert code == 0 and err == ""
    reply = json.loads(out)
    assert "simulations" in reply["debug"]
    assert reply_is_legal_after(WIKI_MOVES[:3], response_text(reply["response"]))


def test_main_blacks_first_request():
    code, out, _ = run_main(["--model", "none", "--simulations", "16"], "1\n-1 -1 -1 -1 -1 -1\n")
    assert code == 0 and Board().is_legal(Move.from_botzone(out))
    code, out, _ = run_main(["--model", "none", "--simulations", "16"], json_input([], black=True))
    assert Board().is_legal(Move.from_botzone(response_text(json.loads(out)["response"])))


@pytest.mark.parametrize("seed", [3, 4])
def test_main_without_a_legal_move_replies_minus_ones(seed):
    moves = finished_game(seed)
    code, out, err = run_main(["--model", "none", "--simulations", "8"], simple_input(moves))
    assert (code, out, err) == (0, NO_MOVE + "\n", "")
    code, out, _ = run_main(["--model", "none", "--simulations", "8"],
                            json_input(moves, black=len(moves) % 2 == 0))
    assert code == 0 and json.loads(out)["response"] == move_object(NO_MOVE)


@pytest.mark.parametrize("text, named", [
    ("", "input ended before the turn number"),
    ("3\n-1 -1 -1 -1 -1 -1\n5 0 3 2 6 5\n", "input ended after 2 of the 5 move lines"),
    ("2\n-1 -1 -1 -1 -1 -1\n5 0 3 2 6 5\n0 5 4 5 3\n", "line 4"),
    ("2\n-1 -1 -1 -1 -1 -1\n5 0 3 2 6 5\n0 5 4 5 7 5\n", "move 2 of the game, '0 5 4 5 7 5'"),
    ("x\n", "'x' is not a turn number"),
    ('{"requests": [{"x0": 1}]}\n', "requests[0]"),
    ('{"x0": 5, "y0": 0, "x1": 3, "y1": 2, "x2": 6, "y2": 5}\n', "must hold 'requests'"),
])
def test_main_rejects_bad_input_with_exit_2(text, named):
    code, out, err = run_main(["--model", "none", "--simulations", "8"], text)
    assert code == 2 and out == ""
    assert named in err


@pytest.mark.parametrize("args, named", [
    (["--model", "none", "--time", "0"], "--time must be > 0"),
    (["--model", "none", "--first-time", "inf"], "--first-time must be > 0"),
    (["--model", "none", "--simulations", "0"], "--simulations must be > 0"),
    (["--model", "none", "--colour", "black"], "unrecognized arguments"),
])
def test_main_rejects_bad_options_with_exit_2(args, named):
    code, out, err = run_main(args, WIKI_TURN_3)
    assert code == 2 and out == "" and named in err


# ------------------------------------------------------------------------------------------------
# Bot processes


def test_process_answers_the_wiki_example_and_json():
    result = run_bot(["--model", "none", "--simulations", "32"], WIKI_TURN_3)
    assert result.returncode == 0, result.stderr
    assert reply_is_legal_after(WIKI_MOVES, result.stdout.strip())
    # The wiki's JSON line as it shows it: "time_limit":"","memory_limit":"" (the bot's own time)
    result = run_bot(["--model", "none", "--time", "0.5"], wiki_json_line(WIKI_MOVES) + "\n")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert reply_is_legal_after(WIKI_MOVES, response_text(json.loads(result.stdout)["response"]))


@pytest.mark.parametrize("args, text, named", [
    (["--model", "none"], "3\n-1 -1 -1 -1 -1 -1\n5 0 3 2 6 5\n", "input ended after 2 of the 5"),
    (["--model", "none"], "2\n-1 -1 -1 -1 -1 -1\n5 0 3 2 6 5\n0 5 4 5 7 5\n", "'0 5 4 5 7 5'"),
    (["--model", "none"], '{"requests": [{"x0": -1, "y0": -1, ', "bad JSON input"),
    (["--model", "no/such/model.pt"], WIKI_TURN_3, "no/such/model.pt does not exist"),
])
def test_process_exits_2_on_bad_input_or_options(args, text, named):
    result = run_bot(args, text)
    assert result.returncode == 2 and result.stdout == ""
    assert named in result.stderr


# A first input nested deeper than the decoder recurses (Python's default recursion limit is
# 1,000 frames), and one holding an integer longer than int() converts (4,300 digits).
DEEP_JSON = '{"requests": ' + "[" * 100_000 + "\n"
LONG_INTEGER_JSON = '{"requests": [{"x0": ' + "9" * 5000 + "}]}\n"


@pytest.mark.parametrize("text, named", [(DEEP_JSON, "bad JSON input: nested deeper"),
                                         (LONG_INTEGER_JSON, "bad JSON input: Exceeds the limit")],
                         ids=["deep", "long-integer"])
@pytest.mark.parametrize("keep_running", [False, True], ids=["first-input", "later-input"])
def test_process_exits_2_on_json_the_decoder_cannot_take(text, named, keep_running):
    # Malformed as any other input: exit 2 with a message, never a traceback; on a kept process's
    # later turn too.
    first = "1\n-1 -1 -1 -1 -1 -1\n" if keep_running else ""
    result = subprocess.run(BOT + ["--model", "none", "--simulations", "8"], input=first + text,
                            capture_output=True, text=True, cwd=REPO, env=BOT_ENV, timeout=60,
                            check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert named in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
    replies = result.stdout.splitlines()
    assert len(replies) == (2 if keep_running else 0), replies  # the first turn's reply, marker


def test_process_rejects_a_corrupt_model_and_a_torch_checkpoint(tmp_path):
    path = tmp_path / "broken.npz"
    path.write_bytes(b"not a model")
    result = run_bot(["--model", str(path)], WIKI_TURN_3)
    assert result.returncode == 2 and result.stdout == ""
    assert "cannot load model" in result.stderr and "not a readable model file" in result.stderr
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"a torch checkpoint, by its name")
    result = run_bot(["--model", str(checkpoint)], WIKI_TURN_3)
    assert result.returncode == 2 and result.stdout == ""
    assert f"python -m amazons.export {checkpoint} {tmp_path / 'model.npz'}" in result.stderr


def test_keep_running_is_the_default():
    stdout, stderr = io.StringIO(), io.StringIO()
    assert main(["--model", "none", "--simulations", "8"], io.StringIO("1\n" + NO_MOVE + "\n"),
                stdout, stderr, started=time.perf_counter()) == 0
    lines = stdout.getvalue().splitlines()
    assert len(lines) == 2 and lines[1] == KEEP_RUNNING_MARKER and stderr.getvalue() == ""
    assert main(["--model", "none", "--keep-running", "--restart-per-turn"], io.StringIO(""),
                io.StringIO(), stderr) == 2
    assert "not allowed with argument" in stderr.getvalue()


@TIMED
def test_a_full_tree_ends_the_search_in_time():
    """A tree of 0.1 MiB (134 nodes, 4,300 edges) fills at once: the bot answers early, legally,
    and says so; a budget that cannot hold one position's moves is refused."""
    stdout, stderr = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    code = main(["--model", "none", "--time", "2", "--tree-mb", "0.1", "--restart-per-turn"],
                io.StringIO(json_input(WIKI_MOVES, black=True)), stdout, stderr, started=started)
    assert code == 0, stderr.getvalue()
    reply = json.loads(stdout.getvalue())
    assert time.perf_counter() - started < 2.0
    assert reply["debug"].endswith("tree full")
    assert reply_is_legal_after(WIKI_MOVES, response_text(reply["response"]))
    code, out, err = run_main(["--model", "none", "--tree-mb", "0.01"], WIKI_TURN_3)
    assert code == 2 and out == "" and "--tree-mb" in err and "2916 edges" in err


def test_a_kept_process_reads_replies_and_names_what_went_wrong():
    with bot_process(["--model", "none", "--simulations", "8"]) as bot:
        reply = bot.ask("1\n" + NO_MOVE, timeout=60)
        assert Board().is_legal(Move.from_botzone(reply)) and bot.replied_at > bot.started
        assert bot.close() == (0, "")
    # no keep-running line after the reply; silence past the timeout; an exit, stderr quoted
    script = ("import sys, time\nprint('0 2 0 3 0 4', flush=True)\nprint('next', flush=True)\n"
              "time.sleep(float(sys.stdin.readline()))\nsys.exit('gave up')\n")
    with KeptProcess([sys.executable, "-c", script]) as program:
        with pytest.raises(KeptProcessError, match="expected >>>BOTZONE.*got 'next'"):
            program.reply(timeout=30)
        program.send("0.5")
        with pytest.raises(KeptProcessError, match="no line from the program within 0.1 s"):
            program.read_line(timeout=0.1)
        with pytest.raises(KeptProcessError, match="exited \\(status 1\\): gave up"):
            program.read_line(timeout=30)
        with pytest.raises(KeptProcessError, match="exited"):  # the end stays the end
            program.read_line(timeout=30)


def test_keep_running_game_between_two_bot_processes():
    """Black talks simple interaction, White JSON; the test relays every move and checks it."""
    black = bot_process(["--model", "none", "--simulations", "32", "--seed", "1"])
    white = bot_process(["--model", "none", "--simulations", "32", "--seed", "2"])
    try:
        board, history = Board(), []
        black.send("1\n" + NO_MOVE)
        reply = black.reply()
        while True:
            if reply == NO_MOVE:
                assert board.is_game_over()
                break
            move = Move.from_botzone(reply)
            assert board.is_legal(move), (board, reply)
            board.push(move)
            history.append(reply)
            mover = white if board.turn == 1 else black
            ply = len(history)
            if ply == 1:
                white.send(json_input(history, black=False))
            elif mover is white and ply % 4 == 1:
                white.send(json_input(history, black=False))  # a whole requests object again
            elif mover is white:
                white.send(json.dumps(move_object(reply)))
            elif ply % 4 == 0:
                black.send(f"\n{ply // 2 + 1}\n{reply}")  # a blank and a turn-number line first
            else:
                black.send(reply)
            answer = mover.reply()
            reply = response_text(json.loads(answer)["response"]) if mover is white else answer
        assert board.winner() is not None and len(history) > 20
        for process in (black, white):
            assert process.close() == (0, "")
    finally:
        black.kill()
        white.kill()


@TIMED
def test_replies_arrive_within_the_time_budget():
    budget = 1.0
    # Rollouts fill the default tree within a second in the opening; a larger one lets the
    # deadline end the search.
    bot = bot_process(["--model", "none", "--time", str(budget), "--tree-mb", "512"])
    try:
        bot.send("1\n" + NO_MOVE)
        reply = bot.reply()
        # the first turn gets twice --time
        assert time.perf_counter() - bot.started < 2 * budget + 1.0
        board = Board()
        opponent = RandomPlayer(seed=5)
        for _ in range(2):
            board.push(Move.from_botzone(reply))
            move = opponent.choose_move(board)
            board.push(move)
            sent = bot.send(move.to_botzone())
            reply = bot.reply()
            elapsed = time.perf_counter() - sent
            assert budget - 0.5 < elapsed < budget + 1.0
            assert board.is_legal(Move.from_botzone(reply))
        assert bot.close() == (0, "")
    finally:
        bot.kill()


@TIMED
@pytest.mark.slow
def test_network_model_exported_from_a_checkpoint(tmp_path):
    import torch

    from amazons.export import export_checkpoint
    from amazons.neural.checkpoint import save_model
    from amazons.neural.model import PolicyValueNet, net_config

    torch.set_num_threads(1)
    torch.manual_seed(0)
    checkpoint = save_model(tmp_path / "tiny.pt", PolicyValueNet(net_config("tiny")))
    path, _ = export_checkpoint(checkpoint, tmp_path / "tiny.npz")
    budget = 0.5
    bot = bot_process(["--model", str(path), "--time", str(budget), "--first-time", "4"])
    try:
        bot.send(json_input(WIKI_MOVES, black=True, time_limit=12))
        first = json.loads(bot.reply(timeout=60))
        response = response_text(first["response"])
        assert reply_is_legal_after(WIKI_MOVES, response)
        board = Board.from_moves([Move.from_botzone(text) for text in WIKI_MOVES + [response]])
        move = RandomPlayer(seed=6).choose_move(board)
        sent = bot.send(json.dumps(move_object(move.to_botzone())))
        second = json.loads(bot.reply())
        assert time.perf_counter() - sent < budget + 1.0
        board.push(move)
        assert board.is_legal(Move.from_botzone(response_text(second["response"])))
        assert bot.close() == (0, "")
    finally:
        bot.kill()


def test_keep_running_in_process_ends_cleanly_at_the_end_of_input():
    args = ["--model", "none", "--simulations", "8", "--keep-running"]
    code, out, err = run_main(args, "1\n" + NO_MOVE + "\n\n")
    lines = out.splitlines()
    assert (code, err, len(lines), lines[1]) == (0, "", 2, KEEP_RUNNING_MARKER)
    assert Board().is_legal(Move.from_botzone(lines[0]))
    code, out, err = run_main(args, "1\n" + NO_MOVE + "\n\n5\n")
    assert code == 2 and len(out.splitlines()) == 2 and "'5' without a move line" in err


def status_kib(pid: int, field: str) -> int:
    """A `/proc/PID/status` field in KiB (VmHWM: peak resident memory)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@TIMED
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_a_whole_game_with_the_default_model_stays_under_200_mb():
    """Keep-running, the shipped model, the default tree: peak RSS over a whole game against the
    greedy player; no torch in the process."""
    from amazons.players.player import GreedyPlayer

    bot = bot_process(["--model", "default", "--time", "1", "--first-time", "3"])
    try:
        board, opponent = Board(), GreedyPlayer(seed=3)
        bot.send("1\n" + NO_MOVE)
        reply = bot.reply(timeout=60)
        assert time.perf_counter() - bot.started < 3.0 + 0.3 + 1.0  # the slack of a busy machine
        while reply != NO_MOVE:
            board.push(Move.from_botzone(reply))
            if board.is_game_over():
                break
            move = opponent.choose_move(board)
            board.push(move)
            sent = bot.send(move.to_botzone())
            reply = bot.reply(timeout=30)
            assert time.perf_counter() - sent < 1.0 + 0.3 + 0.5
        assert board.is_game_over() and board.ply > 20
        maps = Path(f"/proc/{bot.process.pid}/maps").read_text()
        assert "torch" not in maps and "libllvmlite" in maps
        peak_mib = status_kib(bot.process.pid, "VmHWM") / 1024
        assert peak_mib <= 200, peak_mib
        assert bot.close() == (0, "")
    finally:
        bot.kill()
