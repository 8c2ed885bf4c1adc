"""Players, the arena, terminal play and the Python Botzone bot on boards other than Botzone's 8x8
(issue 51): whole games through the real arena on 6x6, 7x7 and 10x10 with every move checked on
the board, records that carry their board, a real `python -m amazons.botzone --board standard10`
process as an arena player, `python -m amazons.play --board standard10` fed typed moves, and the
bot answering 10x10 requests."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest

from amazons.board import BLACK, WHITE, Board, Move
from amazons.boards import board_spec
from amazons.botzone import bot
from amazons.matches.arena import run_arena
from amazons.mcts import RolloutEvaluator, SearchConfig, UniformEvaluator
from amazons.models import default_model_path
from amazons.play import main as play_main
from amazons.players.factory import PlayerSpecError, make_player
from amazons.players.player import GreedyPlayer, MCTSPlayer, PlayerError, RandomPlayer
from amazons.players.records import GameRecord, RecordError, parse_records

# a 7x7 start no name stands for: the board comes back from the record's position string
SEVEN = "1B3B1/7/B5B/7/W5W/7/1W3W1 w"
FEW = SearchConfig(simulations=8, fpu_reduction=0.0)
FLAT = default_model_path(8)  # the shipped 8x8 model, flat value head
CHECKPOINT = FLAT.with_suffix(".pt")


def check_match(result, board) -> None:
    """Every game of a match: on `board`, legal move by move, its record round-tripping with the
    board, its winner the one the moves give."""
    spec = board_spec(board)
    assert result.board == spec and result.to_json()["board"] == spec.to_dict()
    assert f" on {spec.label()}: " in result.summary()
    for record in result.records:
        assert record.start == spec and record.headers["Board"] == spec.label()
        replay = Board(start=spec)
        for move in record.moves:
            assert move.size == spec.size and replay.is_legal(move), (move, replay)
            replay.push(move)
        assert replay.is_game_over() and record.winner == replay.winner()
        text = record.to_text()
        assert f"{record.moves[0].to_botzone()}  {record.moves[0]}" in text.splitlines()
        (parsed,) = parse_records(text)
        assert parsed == record and parsed.board() == replay


MATCHES = [
    ("random", "greedy"),
    ("classical:depth=2,width=3,root=4,time=none", "mcts-uniform"),
    ("mcts-rollout", "random"),
]


@pytest.mark.parametrize("board", ["openspiel6", "standard10"])
@pytest.mark.parametrize(("spec_a", "spec_b"), MATCHES)
def test_players_play_whole_games_on_the_arena_s_board(board, spec_a, spec_b):
    result = run_arena(spec_a, spec_b, games=2, simulations=8, processes=1, seed=3, board=board)
    check_match(result, board)


def test_a_start_without_a_name_is_played_and_recorded_by_its_position():
    result = run_arena("greedy", "random", games=2, processes=1, opening_plies=2, board=SEVEN)
    check_match(result, SEVEN)
    assert result.records[0].headers["Board"] == "1B3B1/7/B5B/7/W5W/7/1W3W1 w 0"


def test_an_mcts_player_builds_its_search_for_each_board_size_it_meets():
    player = MCTSPlayer(UniformEvaluator(), FEW, seed=0)
    for start in ("standard10", "openspiel6", "botzone8", "standard10"):
        board = Board(start=start)
        move = player.choose_move(board)
        assert player.search.size == board.size and move.size == board.size
        assert board.is_legal(move)
        player.observe(board, move)


def test_an_evaluator_of_one_size_is_refused_on_another_naming_both():
    player = MCTSPlayer(RolloutEvaluator(board_size=8), FEW, name="mcts-rollout")
    with pytest.raises(PlayerError, match=r"mcts-rollout cannot play a 10x10 board: .* 8x8"):
        player.choose_move(Board(start="standard10"))
    ten = make_player("mcts-rollout", simulations=8, board="standard10")
    assert ten.evaluator.board_size == 10
    assert Board(start="standard10").is_legal(ten.choose_move(Board(start="standard10")))


@pytest.mark.parametrize(("spec", "words"), [
    (f"mcts-net:{FLAT}", re.escape(f"model {FLAT} cannot play 10x10 boards") + ".*flat"),
    (f"policy-net:{FLAT}", re.escape(f"model {FLAT} cannot play 10x10 boards") + ".*flat"),
    (f"mcts-net:{CHECKPOINT}",  # the checkpoint, where torch names the head
     re.escape(f"model {CHECKPOINT} on 10x10 boards: ") + ".*flat"),
])
def test_a_flat_model_off_8x8_is_refused_by_model_and_size(spec, words):
    with pytest.raises(PlayerSpecError, match=words):
        make_player(spec, board="standard10")
    with pytest.raises(PlayerSpecError, match="board: unknown board 'nowhere'"):
        make_player("random", board="nowhere")


@pytest.mark.parametrize(("start", "shipped"), [
    ("botzone8", "default.npz"), ("standard10", "standard10.npz"), ("openspiel6", "standard10.npz"),
])
def test_the_default_model_is_the_shipped_model_of_the_board_s_size(start, shipped):
    board = Board(start=start)
    for spec in ("mcts-net:default", "policy-net:default"):
        player = make_player(spec, simulations=8, board=start)
        assert player.evaluator.board_size == board.size
        move = player.choose_move(board)
        assert move.size == board.size and board.is_legal(move)
    assert default_model_path(board.size).name == shipped


@pytest.mark.parametrize("size_start", ["openspiel6", "standard10"])
def test_random_and_greedy_answer_with_moves_of_the_board_s_size(size_start):
    board = Board(start=size_start)
    for player in (RandomPlayer(seed=1), GreedyPlayer(seed=1)):
        move = player.choose_move(board)
        assert move.size == board.size and board.is_legal(move)


def test_records_read_old_games_as_botzone8_and_refuse_a_wrong_algebraic_name():
    (old,) = parse_records("2 0 2 2 3 1\n")
    assert old.start == board_spec("botzone8") and old.moves == [Move.parse("c8-c6/d7")]
    (ten,) = parse_records('[Board "standard10"]\n3 9 3 3 6 3  d1-d7/g7\n')
    assert ten.start.name == "standard10" and ten.moves == [Move.parse("d1-d7/g7", 10)]
    assert ten.board().turn == BLACK  # White moved first
    with pytest.raises(RecordError, match=r":2: .*'d1-d6/g7' is not '3 9 3 3 6 3'"):
        parse_records('[Board "standard10"]\n3 9 3 3 6 3  d1-d6/g7\n')
    with pytest.raises(RecordError, match=r":1: .*bad Board: unknown board 'moon'"):
        parse_records('[Board "moon"]\n')
    with pytest.raises(RecordError, match=r"off the 10x10 board"):
        parse_records('[Board "standard10"]\n3 10 3 3 6 3\n')
    record = GameRecord.from_game([Move.parse("d1-d7/g7", 10)], "a", "b", start="standard10")
    assert record.to_text().endswith('[Board "standard10"]\n3 9 3 3 6 3  d1-d7/g7')


def test_the_python_bot_plays_a_10x10_match_as_a_botzone_program():
    command = (f"{sys.executable} -m amazons.botzone --board standard10 --model none "
               f"--simulations 8 --seed 1")
    spec = f"botzone:python,time=6:{command}"
    result = run_arena(spec, "random", games=2, processes=1, seed=2, board="standard10")
    assert not result.faults_a and not result.faults_b, result.summary()
    check_match(result, "standard10")
    # the bot moved first as White in game 2 (it got -1 first) and second as Black in game 1
    assert [record.white for record in result.records] == ["random", spec]


MOVE_SAID = re.compile(r"^(?:AI \(\w+\) plays|You play) (\S+)  \(", re.MULTILINE)


class _Typist(io.StringIO):
    """Types a legal move whenever terminal play asks, following the game from the moves the
    session prints (its own and the AI's): the command's output is all it reads."""

    def __init__(self, output: io.StringIO, start: str) -> None:
        super().__init__()
        self.output = output
        self.board = Board(start=start)
        self.read_up_to = 0
        self.typed = 0

    def readline(self, size: int = -1) -> str:
        text = self.output.getvalue()
        for match in MOVE_SAID.finditer(text[self.read_up_to:]):
            self.board.push(self.board.parse_move(match.group(1)))
        self.read_up_to = len(text)
        move = self.board.legal_moves()[self.typed * 7 % self.board.count_legal_moves()]
        self.typed += 1
        return (str(move) if self.typed % 2 else move.to_botzone()) + "\n"


def test_terminal_play_plays_a_10x10_game_typed_in_both_notations(tmp_path):
    save = tmp_path / "game.txt"
    out = io.StringIO()
    typist = _Typist(out, "standard10")
    status = play_main(["--board", "standard10", "--model", "none", "--simulations", "4",
                        "--seed", "1", "--side", "black", "--save", str(save), "--no-color"],
                       stdin=typist, stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert status == 0, text[-2000:]
    assert "Board: standard10 (10x10), white moves first." in text
    assert " a  b  c  d  e  f  g  h  i  j" in text and re.search(r"^10 {2}", text, re.MULTILINE)
    assert re.search(r"^AI \(white\) plays [a-j]\d+-[a-j]\d+/[a-j]\d+  \((\d ){5}\d\)$", text,
                     re.MULTILINE)
    (record,) = parse_records(save.read_text())
    board = record.board()
    assert record.start.name == "standard10" and board.is_game_over()
    assert record.winner == board.winner() and typist.typed >= 2
    # the typist followed the game from the output up to its last question
    assert typist.board.move_stack == board.move_stack[:typist.board.ply]


def _bot_reply(argv: list[str], typed: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = bot.main(argv, stdin=io.StringIO(typed), stdout=out, stderr=err, started=0.0)
    return status, out.getvalue(), err.getvalue()


BOT_10 = ["--board", "standard10", "--model", "none", "--simulations", "8", "--seed", "0",
          "--restart-per-turn"]


def test_the_python_bot_answers_10x10_requests_for_either_side():
    status, out, err = _bot_reply(BOT_10, "1\n-1 -1 -1 -1 -1 -1\n")
    assert status == 0, err
    white_move = Move.from_botzone(out.strip(), 10)
    board = Board(start="standard10")
    assert board.turn == WHITE and board.is_legal(white_move)
    board.push(white_move)
    status, out, err = _bot_reply(BOT_10, f"1\n{white_move.to_botzone()}\n")
    assert status == 0, err
    assert board.is_legal(Move.from_botzone(out.strip(), 10))
    keys = ("x0", "y0", "x1", "y1", "x2", "y2")
    request = {"requests": [dict(zip(keys, map(int, white_move.to_botzone().split()),
                                     strict=True))], "responses": []}
    status, out, err = _bot_reply(BOT_10, json.dumps(request) + "\n")
    reply = json.loads(out)["response"]
    assert status == 0 and board.is_legal(Move.from_botzone(
        " ".join(str(reply[key]) for key in keys), 10))
    status, out, err = _bot_reply(BOT_10, "1\n10 0 3 3 6 3\n")
    assert status == 2 and out == "" and "(10, 0) is off the 10x10 board" in err
