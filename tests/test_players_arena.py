"""Tests of the players, the player registry, game play, Elo statistics and the arena command."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amazons.board import BLACK, WHITE, Board, Move
from amazons.matches.arena import (
    elo_from_score,
    elo_interval,
    play_game,
    random_opening,
    run_arena,
)
from amazons.mcts import RolloutEvaluator, SearchConfig, UniformEvaluator
from amazons.players.factory import PlayerSpecError, make_player, player_names, register_player
from amazons.players.player import (
    GreedyPlayer,
    HumanPlayer,
    MCTSPlayer,
    Player,
    PlayerError,
    RandomPlayer,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_mcts import IMMEDIATE_WIN, _rotated  # noqa: E402


def wins_at_once(board: Board, move: Move) -> bool:
    after = board.copy()
    after.push(move)
    return after.is_game_over() and after.winner() == board.turn


@pytest.mark.parametrize("text", [IMMEDIATE_WIN, _rotated(IMMEDIATE_WIN)])
def test_greedy_and_mcts_take_an_immediate_win_with_either_colour(text):
    board = Board(text)
    for player in (GreedyPlayer(seed=0), MCTSPlayer(UniformEvaluator(), simulations=400, seed=0)):
        move = player.choose_move(board)
        assert wins_at_once(board, move), (player.name, move)


def test_random_player_is_legal_and_seeded():
    board = Board()
    first = [RandomPlayer(seed=4).choose_move(board) for _ in range(2)]
    assert first[0] == first[1] and board.is_legal(first[0])
    player = RandomPlayer(seed=5)
    chosen = {player.choose_move(board) for _ in range(20)}
    assert len(chosen) > 10


def test_players_refuse_finished_games():
    board = Board(IMMEDIATE_WIN)
    board.push(GreedyPlayer().choose_move(board))
    assert board.is_game_over()
    for player in (RandomPlayer(), GreedyPlayer(), MCTSPlayer(UniformEvaluator(), simulations=8)):
        with pytest.raises(PlayerError):
            player.choose_move(board)


def test_mcts_player_reports_its_search_in_the_real_frame():
    board = Board.from_moves(random_opening(5, seed=2))
    assert board.turn == WHITE
    player = MCTSPlayer(RolloutEvaluator(seed=0), SearchConfig(fpu_reduction=0.0),
                        simulations=200, seed=0)
    move = player.choose_move(board)
    report = player.last_report
    assert report is not None and report.simulations == 200
    assert report.moves[0] == move
    assert all(board.is_legal(candidate) for candidate in report.moves)
    assert report.visit_shares.sum() == pytest.approx(1.0)
    assert report.principal_variation[0] == move
    replay = board.copy()
    for pv_move in report.principal_variation:  # alternating sides, each a legal real move
        replay.push(pv_move)
    assert "value" in report.format()


def test_mcts_player_keeps_its_tree_across_turns():
    board = Board()
    player = MCTSPlayer(UniformEvaluator(), SearchConfig(fpu_reduction=0.25), simulations=300,
                        seed=0)
    move = player.choose_move(board.copy())
    player.observe(board, move)
    board.push(move)
    kept_after_own_move = int(player.search.tree.node_visits[0, 0])
    assert kept_after_own_move > 1
    reply = player.search.root_result(0).moves[0]  # the reply the tree explored most
    reply_move = Move(*board.canonical_to_real(reply).tolist())
    player.observe(board, reply_move)
    board.push(reply_move)
    kept = int(player.search.tree.node_visits[0, 0])
    assert kept > 1
    player.choose_move(board.copy())
    assert player.last_report.simulations == kept - 1 + 300
    # A move observed on a position the tree is not at invalidates the tree.
    player.observe(Board(), Board().legal_moves()[0])
    player.choose_move(board.copy())
    assert player.last_report.simulations == 300
    player.reset()
    player.choose_move(board.copy())
    assert player.last_report.simulations == 300


def test_mcts_player_time_budget():
    player = MCTSPlayer(UniformEvaluator(), time_budget=0.2, seed=0, chunk=32)
    board = Board.from_moves(random_opening(10, seed=1))
    started = time.perf_counter()
    move = player.choose_move(board)
    elapsed = time.perf_counter() - started
    assert board.is_legal(move)
    # The search stops up to about a round and a quarter before the deadline (`_search_until`).
    assert 0.15 <= elapsed < 1.5
    assert player.last_report.simulations >= 32
    with pytest.raises(PlayerError):
        MCTSPlayer(UniformEvaluator(), time_budget=0.0)


def test_human_player_asks_until_the_move_is_legal():
    board = Board()
    legal = board.legal_moves()[3]
    answers = iter(["nonsense", "a1-a2/a3", "moves", "hint", str(legal)])
    output = io.StringIO()
    player = HumanPlayer(input_fn=lambda prompt: next(answers), output=output)
    assert player.choose_move(board) == legal
    text = output.getvalue()
    assert "bad move" in text and "not legal" in text and "1232 legal moves" in text
    assert "no hint player" in text
    quitter = HumanPlayer(input_fn=lambda prompt: "quit", output=io.StringIO())
    with pytest.raises(EOFError):
        quitter.choose_move(board)
    script = iter(["hint", str(legal)])
    hinted = HumanPlayer(input_fn=lambda prompt: next(script), output=output,
                         hint_player=MCTSPlayer(UniformEvaluator(), simulations=16))
    assert hinted.choose_move(board) == legal
    assert "after 16 simulations" in output.getvalue()


def test_player_registry():
    assert {"random", "greedy", "mcts-uniform", "mcts-rollout", "human"} <= set(player_names())
    board = Board()
    for spec in ("random", "greedy", "mcts-uniform", "mcts-rollout", "mcts-rollout:2"):
        player = make_player(spec, seed=1, simulations=16)
        assert isinstance(player, Player)
        assert board.is_legal(player.choose_move(board))
    for bad in ("alphabeta", "random:3", "mcts-rollout:many", ""):
        with pytest.raises(PlayerSpecError):
            make_player(bad)
    register_player("test-fixed", _fixed_player_factory, replace=True)
    assert make_player("test-fixed:7").choose_move(board) == board.legal_moves()[7]
    with pytest.raises(PlayerSpecError, match="already registered"):
        register_player("test-fixed", _fixed_player_factory)


class _FixedPlayer(RandomPlayer):
    def __init__(self, index):
        super().__init__(name="fixed")
        self.index = index

    def choose_move(self, board):
        moves = board.legal_moves()
        return moves[min(self.index, len(moves) - 1)]


def _fixed_player_factory(argument, options):
    return _FixedPlayer(int(argument or 0))


def test_random_opening_is_seeded_and_legal():
    assert random_opening(6, seed=3) == random_opening(6, seed=3)
    assert random_opening(6, seed=3) != random_opening(6, seed=4)
    board = Board.from_moves(random_opening(6, seed=3))
    assert board.ply == 6 and not board.is_game_over()
    assert random_opening(0, seed=1) == []


def test_play_game_records_a_legal_finished_game():
    opening = random_opening(4, seed=8)
    winner, moves = play_game(GreedyPlayer(seed=0), RandomPlayer(seed=0), opening)
    assert moves[:4] == opening
    board = Board.from_moves(moves)
    assert board.is_game_over() and board.winner() == winner
    assert len(moves) <= 56


def test_elo_from_known_outcomes():
    assert elo_from_score(0.5) == 0.0
    assert elo_from_score(0.75) == pytest.approx(400 * math.log10(3))  # 190.85
    assert elo_from_score(1.0) == math.inf and elo_from_score(0.0) == -math.inf
    # Wilson 95% intervals, computed independently: 50/100 -> score in [0.4038, 0.5962].
    elo, low, high = elo_interval(50, 100)
    assert elo == 0.0
    assert low == pytest.approx(-67.7, abs=0.2) and high == pytest.approx(67.7, abs=0.2)
    # 75/100 -> score in [0.6570, 0.8245].
    elo, low, high = elo_interval(75, 100)
    assert elo == pytest.approx(190.85, abs=0.01)
    assert low == pytest.approx(112.9, abs=0.2) and high == pytest.approx(268.8, abs=0.2)
    # Everything won: the Elo is unbounded above, but the lower end is finite: the Wilson lower
    # bound of 10/10 is n / (n + z^2) = 0.7225.
    elo, low, high = elo_interval(10, 10)
    assert elo == math.inf and high == math.inf
    assert low == pytest.approx(elo_from_score(10 / (10 + 1.959964**2)), abs=0.01)
    assert low == pytest.approx(166.2, abs=0.2)
    elo, low, high = elo_interval(0, 10)
    assert elo == -math.inf and low == -math.inf and high == pytest.approx(-166.2, abs=0.2)
    narrow = elo_interval(500, 1000)
    assert narrow[2] - narrow[1] < 0.35 * (67.7 * 2)
    with pytest.raises(ValueError):
        elo_interval(5, 4)


def test_arena_alternates_colours_and_is_reproducible_in_parallel():
    parallel = run_arena("greedy", "random", games=4, processes=2, seed=3)
    sequential = run_arena("greedy", "random", games=4, processes=1, seed=3)
    assert [r.moves for r in parallel.records] == [r.moves for r in sequential.records]
    assert [r.black for r in parallel.records] == ["greedy", "random", "greedy", "random"]
    # a pair shares its opening
    assert parallel.records[0].moves[:4] == parallel.records[1].moves[:4]
    assert parallel.records[0].moves[:4] != parallel.records[2].moves[:4]
    assert parallel.wins_a + parallel.wins_b == 4
    assert parallel.wins_a == sum(
        (r.winner == BLACK) == (r.black == "greedy") for r in parallel.records)
    assert parallel.wins_a_as_black + parallel.wins_a_as_white == parallel.wins_a
    with pytest.raises(PlayerSpecError):
        run_arena("greedy", "nobody", games=2)


def test_arena_command_line(tmp_path):
    out = tmp_path / "result.json"
    completed = subprocess.run(
        [sys.executable, "-m", "amazons.arena", "random", "greedy", "--games", "2",
         "--processes", "1", "--seed", "5", "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert completed.returncode == 0, completed.stderr
    assert "Elo difference" in completed.stdout
    result = json.loads(out.read_text())
    assert result["games"] == 2 and result["wins_a"] + result["wins_b"] == 2
    bad = subprocess.run([sys.executable, "-m", "amazons.arena", "random", "nobody"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "unknown player" in bad.stderr


@pytest.mark.slow
def test_mcts_rollout_beats_random():
    result = run_arena("mcts-rollout", "random", games=40, processes=2, seed=11)
    assert result.wins_a >= 38, result.summary()


def test_registry_mcts_player_plays_a_whole_game():
    winner, moves = play_game(make_player("mcts-uniform", simulations=16),
                              make_player("random", seed=2), random_opening(2, seed=1))
    assert Board.from_moves(moves).winner() == winner


def test_search_overrides_reach_the_players_search():
    player = make_player("mcts-uniform", search=[("solver", "false"), ("c_puct", "3")])
    assert player.config.solver is False and player.config.c_puct == 3.0
    with pytest.raises(PlayerSpecError, match="no field 'solvr'"):
        make_player("mcts-uniform", search=[("solvr", "false")])
    with pytest.raises(PlayerSpecError, match="expected a bool"):
        make_player("mcts-uniform", search=[("solver", "maybe")])
    result = run_arena("mcts-uniform", "random", games=2, simulations=8, processes=1,
                       search_a=[("solver", "false")])
    assert result.games == 2
