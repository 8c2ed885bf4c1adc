"""Tests of terminal play and replay (`python -m amazons.play`): scripted sessions through `main`
with string streams, the real engine and real players (rollout MCTS, and a tiny network)."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amazons.board import BLACK, WHITE, Board, Move
from amazons.mcts import RolloutEvaluator
from amazons.play import PlaySession, ReplaySession, main, render_board
from amazons.players.factory import ROLLOUT_SEARCH
from amazons.players.player import MCTSPlayer
from amazons.players.records import GameRecord, read_records, write_records

FAST = ["--model", "none", "--simulations", "16", "--seed", "3"]
AI_MOVE = re.compile(r"^AI \((black|white)\) plays [a-h][1-8]-[a-h][1-8]/[a-h][1-8]  "
                     r"\((\d ){5}\d\)$", re.MULTILINE)
AI_SUMMARY = re.compile(r"^  value [+-]\d\.\d\d for (black|white), \d+ simulations, \d+\.\d s$",
                        re.MULTILINE)


def run_main(args: list[str], typed: str = "", stdout: io.StringIO | None = None
             ) -> tuple[int, str, str]:
    """Exit status, output and errors of `main(args)` with `typed` as the input."""
    stdout = io.StringIO() if stdout is None else stdout
    stderr = io.StringIO()
    status = main(args, stdin=io.StringIO(typed), stdout=stdout, stderr=stderr)
    return status, stdout.getvalue(), stderr.getvalue()


class TerminalOutput(io.StringIO):
    """An output stream that says it is a terminal, as a real one would."""

    def isatty(self) -> bool:
        return True


def test_scripted_session_plays_undoes_hints_and_saves_on_quit(tmp_path):
    save = tmp_path / "games.txt"
    typed = "\n".join([
        "help", "moves", "hint",
        "nonsense", "z9-a1/a2", "9 9 9 9 9 9", "c8-c1/c2", "f1-f2/f3",  # unreadable or illegal
        "c8-c6/d7", "undo", "undo", "2 0 2 2 3 1", "board", "quit",
    ]) + "\n"
    status, out, err = run_main(FAST + ["--side", "black", "--save", str(save)], typed)
    assert status == 0, err
    assert "Commands: moves" in out
    assert re.search(r"^1232 legal moves, for example:\n  c8-a8/b8  \(2 0 0 0 1 0\)$", out,
                     re.MULTILINE)
    hint = out[out.index("Hint (values for black"):]
    assert re.match(r"Hint \(values for black, the side to move\):\nvalue [+-]\d\.\d{3} after "
                    r"16 simulations\n(  [a-h][1-8]-[a-h][1-8]/[a-h][1-8] +\d+\.\d%  "
                    r"q [+-]\d\.\d{3}\n){5}"
                    r"line: ", hint)
    assert "Bad move 'nonsense'" in out and "Bad square 'z9'" in out
    assert "Square (9, 9) is off the 8x8 board." in out
    assert "Illegal move c8-c1/c2 for black: the amazon on c8 cannot reach c1." in out
    assert "Illegal move f1-f2/f3 for black: f1 holds no black amazon." in out
    assert "You play c8-c6/d7  (2 0 2 2 3 1)" in out
    assert len(AI_MOVE.findall(out)) == 2 and len(AI_SUMMARY.findall(out)) == 2
    assert "Took back your move c8-c6/d7 and the AI's reply" in out
    assert "Nothing to undo: you have not moved yet." in out
    assert out.count("black to move, ply 2") == 3  # after each AI reply and after `board`
    assert f"Game saved to {save}" in out
    (record,) = read_records(save)
    assert record.black == "human" and record.white == "mcts-rollout" and record.result == "*"
    assert record.headers["Model"] == "none" and record.headers["Search"] == "16 simulations"
    assert record.moves[0] == Move.parse("c8-c6/d7") and len(record.moves) == 2

    status, out, _ = run_main(["--replay", str(save)])  # not a terminal: every position in turn
    assert status == 0
    assert re.findall(r"^ply (\d+):", out, re.MULTILINE) == ["0", "1", "2"]
    assert "ply 1: black c8-c6/d7  (2 0 2 2 3 1)" in out
    assert "end of the record: result * (not finished)" in out


def test_ai_moves_first_for_white_and_end_of_input_saves_under_games(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, _ = run_main(FAST + ["--side", "white"])
    assert status == 0 and "You play white (W); the AI (mcts-rollout) plays black." in out
    assert AI_MOVE.search(out).group(1) == "black"
    (path,) = (tmp_path / "games").glob("play-*.txt")
    (record,) = read_records(path)
    assert record.black == "mcts-rollout" and record.white == "human" and len(record.moves) == 1
    assert record.headers["Seed"] == "3" and record.headers["Event"] == "play"


def test_quitting_before_any_move_saves_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, _ = run_main(FAST + ["--side", "black"], "quit\n")
    assert status == 0 and "nothing saved" in out and not (tmp_path / "games").exists()


class _Interrupt(io.StringIO):
    """Input that is interrupted (Ctrl-C) once its lines are used up."""

    def readline(self, size: int = -1) -> str:
        line = super().readline(size)
        if not line:
            raise KeyboardInterrupt
        return line


def test_ctrl_c_saves_the_game_and_exits_130(tmp_path):
    save = tmp_path / "interrupted.txt"
    stdout, stderr = io.StringIO(), io.StringIO()
    status = main(FAST + ["--save", str(save)], stdin=_Interrupt("c8-c6/d7\n"), stdout=stdout,
                  stderr=stderr)
    assert status == 130 and "interrupted" in stdout.getvalue()
    assert len(read_records(save)[0].moves) == 2


class _Typist(io.TextIOBase):
    """Types a random legal move for the session's board whenever asked, in either notation."""

    def __init__(self, seed: int) -> None:
        self.session: PlaySession | None = None
        self.rng = np.random.default_rng(seed)
        self.typed = 0

    def readable(self) -> bool:
        return True

    def readline(self, size: int = -1) -> str:
        moves = self.session.board.legal_moves()
        move = moves[int(self.rng.integers(len(moves)))]
        self.typed += 1
        return (str(move) if self.typed % 2 else move.to_botzone()) + "\n"


def _rollout_ai(simulations: int = 16, seed: int = 0) -> MCTSPlayer:
    return MCTSPlayer(RolloutEvaluator(seed=seed), ROLLOUT_SEARCH, simulations=simulations,
                      seed=seed, name="mcts-rollout")


def test_a_whole_game_ends_with_the_result_and_replays(tmp_path):
    typist, out = _Typist(seed=5), io.StringIO()
    session = PlaySession(_rollout_ai(), WHITE, typist, out, headers={"Model": "none"})
    typist.session = session
    record = session.run()
    board = Board.from_moves(record.moves)
    assert board.is_game_over() and record.winner == board.winner()
    loser = ("black", "white")[1 - record.winner]
    assert re.search(rf"(You win|The AI wins): {loser} has no legal move \({record.result}\)\.",
                     out.getvalue())
    path = tmp_path / "game.txt"
    write_records(path, [record])
    status, replayed, _ = run_main(["--replay", str(path), "--no-color"])
    assert status == 0
    assert len(re.findall(r"^ply \d+:", replayed, re.MULTILINE)) == len(record.moves) + 1
    assert f"end of the record: result {record.result} ({loser} has no legal move)" in replayed


def test_interactive_replay_steps_forward_and_back():
    moves = [Move.parse(text) for text in ("c8-c6/d7", "f1-f4/e4", "f8-f5/f6", "c1-c3/b3")]
    record = GameRecord.from_game(moves, "a", "b")
    out = io.StringIO()
    typed = io.StringIO("\n\nb\nb\nb\n4\n\nwhat\nq\n")
    ReplaySession(record, typed, out, interactive=True).run()
    text = out.getvalue()
    assert re.findall(r"^ply (\d+):", text, re.MULTILINE) == ["0", "1", "2", "1", "0", "4"]
    assert "At the start already." in text and "At the end already (result *)." in text
    assert "Unknown command 'what'" in text and "Result: *" in text


def test_bad_arguments_models_and_records_exit_2(tmp_path):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    status, _, err = run_main(["--model", str(tmp_path / "missing.pt")])
    assert status == 2 and "cannot load the model" in err and "does not exist" in err
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    status, _, err = run_main(["--model", str(junk)])
    assert status == 2 and f"cannot load the model {str(junk)!r}" in err
    corrupt = tmp_path / "corrupt.txt"
    corrupt.write_text('[Event "x"]\n2 0 2 2 3 1\n2 0 2 3 3 1\n')
    status, _, err = run_main(["--replay", str(corrupt)])
    assert status == 2 and f"{corrupt}:3: '2 0 2 3 3 1' (game 1): move 2: illegal move" in err
    status, _, err = run_main(["--replay", str(tmp_path / "nowhere.txt")])
    assert status == 2 and "cannot replay" in err
    write_records(corrupt, [GameRecord.from_game(moves=[], black="a", white="b")])
    status, _, err = run_main(["--replay", str(corrupt), "--game", "2"])
    assert status == 2 and "holds 1 game; --game 2 is not one of them" in err
    status, _, err = run_main(["--simulations", "0"])
    assert status == 2 and "--simulations must be at least 1" in err
    status, _, err = run_main(["--simulations", "5", "--time", "1"])
    assert status == 2 and "not allowed with argument" in err


def test_a_session_against_a_tiny_network(tmp_path):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from amazons.export import export_checkpoint
    from amazons.neural.checkpoint import save_model
    from amazons.neural.model import PolicyValueNet, net_config

    torch.manual_seed(0)
    checkpoint = save_model(tmp_path / "tiny.pt", PolicyValueNet(net_config("tiny")))
    status, _, err = run_main(["--model", str(checkpoint), "--simulations", "8"], "quit\n")
    assert status == 2 and "python -m amazons.export" in err  # terminal play runs without torch
    model_path, _ = export_checkpoint(checkpoint, tmp_path / "tiny.npz")
    save = tmp_path / "net-game.txt"
    status, out, err = run_main(
        ["--model", str(model_path), "--simulations", "8", "--seed", "1", "--save", str(save)],
        "hint\nc8-c6/d7\nquit\n")
    assert status == 0, err
    assert "You play black (B); the AI (mcts-net:" in out and "after 8 simulations" in out
    assert len(AI_MOVE.findall(out)) == 1 and AI_SUMMARY.search(out)
    (record,) = read_records(save)
    assert record.white == f"mcts-net:{model_path}" and record.headers["Model"] == str(model_path)
    assert len(record.moves) == 2 and Board.from_moves(record.moves).ply == 2


def test_board_diagram_coordinates_highlight_and_colour(monkeypatch):
    board = Board()
    move = Move.parse("c8-c6/d7")
    board.push(move)
    plain = render_board(board, move).splitlines()
    assert plain[0].split() == list("abcdefgh") and plain[1].split() == [*"01234567", "x/y"]
    assert plain[2] == " 8   .  . [.] .  .  B  .  .   0"
    assert plain[3] == " 7   .  .  . [x] .  .  .  .   1"
    assert plain[4] == " 6   B  . [B] .  .  .  .  B   2"
    assert plain[9] == " 1   .  .  W  .  .  W  .  .   7"
    coloured = render_board(board, move, color=True)
    assert "\x1b[7m" in coloured and "[" not in coloured.replace("\x1b[", "")

    monkeypatch.delenv("NO_COLOR", raising=False)
    _, out, _ = run_main(FAST, "quit\n", stdout=TerminalOutput())
    assert "\x1b[1;31m B " in out  # a terminal gets colours
    _, out, _ = run_main(FAST + ["--no-color"], "quit\n", stdout=TerminalOutput())
    assert "\x1b[" not in out
    monkeypatch.setenv("NO_COLOR", "1")
    _, out, _ = run_main(FAST, "quit\n", stdout=TerminalOutput())
    assert "\x1b[" not in out


@given(st.lists(st.text(max_size=16), max_size=6))
def test_any_typed_text_is_answered_without_crashing(lines):
    out = io.StringIO()
    session = PlaySession(_rollout_ai(simulations=4), BLACK, io.StringIO("\n".join(lines)), out)
    record = session.run()
    assert Board.from_moves(record.moves).ply == len(record.moves)
    assert out.getvalue().count("to move>") >= 1
