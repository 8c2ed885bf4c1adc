"""Tests of the classical player: the engine's evaluation terms against a plain breadth-first
oracle (the one of every size, tests/test_engine_sizes.py), their symmetries, and the
Amazong-style alpha-beta player (legal, on time, seeded, takes a win, beats random)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from amazons import engine
from amazons.board import BLACK, Board
from amazons.matches.arena import play_game, random_opening
from amazons.players.classical import WIN, ClassicalConfig, ClassicalPlayer, classical_values
from amazons.players.factory import PlayerSpecError, make_player
from amazons.players.player import RandomPlayer
from amazons.symmetry import transform_positions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_engine_sizes import oracle_terms  # noqa: E402  (the BFS oracle of every size)
from test_mcts import IMMEDIATE_WIN, _rotated  # noqa: E402

# The contest term is a sum of at most 64 powers of two no smaller than 2^-63: both computations
# add the same dyadic numbers, so they differ at most by the rounding of a few dozen additions of
# doubles below 64, far under this bound.
CONTEST_TOLERANCE = 1e-9


def random_positions(count: int, seed: int) -> np.ndarray:
    """`count` canonical positions `(count, 3) uint64` after 0 to 50 random plies (seeded)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        position = engine.start_position().reshape(1, 3)
        for _ in range(int(rng.integers(0, 51))):
            moves, _ = engine.legal_moves(position)
            if moves.shape[0] == 0:
                break
            move = np.ascontiguousarray(moves[rng.integers(moves.shape[0])].reshape(1, 3))
            position = engine.apply_moves(position, move)
        rows.append(position[0])
    return np.ascontiguousarray(np.stack(rows))


def assert_terms_equal(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Counts exactly, the contest within CONTEST_TOLERANCE; names the first difference."""
    counts = actual[:, :engine.CONTEST] != expected[:, :engine.CONTEST]
    contest = np.abs(actual[:, engine.CONTEST] - expected[:, engine.CONTEST]) > CONTEST_TOLERANCE
    wrong = np.flatnonzero(counts.any(axis=1) | contest)
    assert wrong.size == 0, (f"{what}: {wrong.size} of {actual.shape[0]} positions differ; first "
                             f"row {wrong[0]}: {actual[wrong[0]]} vs {expected[wrong[0]]}")


def test_terms_agree_with_a_breadth_first_oracle():
    positions = random_positions(40, seed=3)
    expected = np.array([oracle_terms(position, 8) for position in positions])
    assert_terms_equal(engine.classical_terms(positions), expected, "engine vs oracle")


def test_terms_are_invariant_under_the_eight_symmetries():
    positions = random_positions(24, seed=5)
    terms = engine.classical_terms(positions)
    for k in range(8):
        moved = np.ascontiguousarray(transform_positions(positions, k))
        assert_terms_equal(engine.classical_terms(moved), terms, f"symmetry {k}")


def test_swapping_the_sides_negates_balances_and_mobility():
    positions = random_positions(24, seed=7)
    swapped = np.ascontiguousarray(positions[:, [engine.THEIRS, engine.MINE, engine.ARROWS]])
    sign = np.array([-1, 1, -1, 1, -1, 1], dtype=np.float64)
    assert_terms_equal(engine.classical_terms(swapped), engine.classical_terms(positions) * sign,
                       "sides swapped")


def test_values_are_symmetric_and_terminal_positions_are_lost():
    positions = random_positions(24, seed=9)
    values = classical_values(positions, ClassicalConfig())
    for k in range(8):
        moved = np.ascontiguousarray(transform_positions(positions, k))
        # the same terms weighed by the same doubles in the same order
        np.testing.assert_allclose(classical_values(moved, ClassicalConfig()), values,
                                   rtol=0, atol=1e-9)
    lost = Board(IMMEDIATE_WIN)
    lost.push(ClassicalPlayer(time_budget=None, seed=0).choose_move(lost))
    assert lost.is_game_over()
    assert classical_values(lost.canonical_position().reshape(1, 3), ClassicalConfig())[0] == -WIN


@pytest.mark.parametrize("text", [IMMEDIATE_WIN, _rotated(IMMEDIATE_WIN)])
def test_takes_an_immediate_win_with_either_colour(text):
    board = Board(text)
    player = ClassicalPlayer(ClassicalConfig(max_depth=3), time_budget=None, seed=0)
    move = player.choose_move(board)
    after = board.copy()
    after.push(move)
    assert after.is_game_over() and after.winner() == board.turn


# A wall of arrows down the e-file with one gap, e5, beside a White amazon: Black's four amazons
# hold the 28 squares to its left, White's the 20 to its right. Of Black's 515 moves, 11 shoot into
# the gap and seal a separated, adjudicated win; the others let White through.
SEAL_THE_GAP = "B3x2W/4x3/B3x2W/5W2/B3x3/4x3/B3x2W/4x3 b"


@pytest.mark.parametrize("text", [SEAL_THE_GAP, _rotated(SEAL_THE_GAP)])
@pytest.mark.parametrize("depth", [1, 2])
def test_plays_the_move_that_decides_the_territory(text, depth):
    board = Board(text)
    player = ClassicalPlayer(ClassicalConfig(max_depth=depth), time_budget=None, seed=0)
    after = board.copy()
    after.push(player.choose_move(board))
    result = after.adjudicate()
    assert result is not None and result.winner == board.turn


def test_moves_are_legal_and_seeded_on_random_positions():
    config = ClassicalConfig(max_depth=2, width=4, root_width=6)
    for seed, opening in enumerate(random_opening(plies, 11) for plies in (0, 7, 20, 31)):
        board = Board()
        for move in opening:
            board.push(move)
        if board.is_game_over():
            continue
        first = ClassicalPlayer(config, time_budget=None, seed=seed).choose_move(board)
        again = ClassicalPlayer(config, time_budget=None, seed=seed).choose_move(board)
        assert board.is_legal(first) and first == again


def test_stops_on_its_time_budget():
    # deep and wide enough that the depth limit never ends the search within the budget
    player = ClassicalPlayer(ClassicalConfig(max_depth=12, width=30, root_width=200),
                             time_budget=0.2, seed=0)
    board = Board()
    started = time.perf_counter()
    move = player.choose_move(board)
    # one node's expansion past the deadline is milliseconds; 5 s leaves room for a slow machine
    assert time.perf_counter() - started < 0.2 + 5.0
    assert board.is_legal(move) and 1 <= player.last_depth < 12


def test_registry_spec_and_its_errors():
    player = make_player("classical:depth=2,width=3,root=5,time=none", seed=1)
    assert isinstance(player, ClassicalPlayer) and player.time_budget is None
    assert (player.config.max_depth, player.config.width, player.config.root_width) == (2, 3, 5)
    assert make_player("classical", time_budget=0.3).time_budget == 0.3
    for spec in ("classical:speed=2", "classical:depth=x", "classical:depth=0"):
        with pytest.raises(PlayerSpecError):
            make_player(spec)


def test_beats_random_in_a_short_match():
    config = ClassicalConfig(max_depth=2, width=4, root_width=8)
    wins = 0
    for game in range(4):
        classical = ClassicalPlayer(config, time_budget=None, seed=game)
        randomly = RandomPlayer(seed=game)
        black, white = (classical, randomly) if game % 2 == 0 else (randomly, classical)
        winner, _ = play_game(black, white, random_opening(2, game))
        wins += (winner == BLACK) == (game % 2 == 0)
    assert wins == 4
