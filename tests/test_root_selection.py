"""Root rules beyond PUCT: Gumbel root search with sequential halving, and LCB move selection.

Sequential halving's visit allocation is checked by hand on a small tree, the completed-Q
transform of the kernels against a direct numpy computation (and against the self-play target
`improved_policy`), the kernels against the naive oracle (`tests/naive_mcts.py`) with tree reuse
and proofs, and the search's strength at 8 simulations on a position with a win in one. LCB is
checked on a constructed tree. Tests whose name contains `kernel` also run without the JIT (see
`test_kernel_tests_pass_without_jit` in tests/test_mcts.py), so they are kept small.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from amazons import engine
from amazons import mcts_numba as kernels
from amazons.board import Board
from amazons.matches.arena import run_arena
from amazons.mcts import (
    BatchedSearch,
    SearchConfig,
    SearchConfigError,
    UniformEvaluator,
)
from amazons.players.factory import PlayerSpecError, apply_search_overrides
from amazons.players.player import MCTSPlayer
from amazons.search_targets import improved_policy
from amazons.train.selfplay import play_games

sys.path.insert(0, str(Path(__file__).resolve().parent))
from naive_mcts import NaiveMCTS  # noqa: E402
from test_mcts import (  # noqa: E402
    IMMEDIATE_WIN,
    HashEvaluator,
    assert_same_tree,
    check_invariants,
    random_position,
    winning_mask,
)
from test_solver import WIN_IN_THREE, children, wins_in_three  # noqa: E402

TINY = float(np.finfo(np.float32).tiny)


def root_block(search: BatchedSearch, game: int = 0) -> slice:
    first = int(search.tree.node_first_edge[game, 0])
    return slice(first, first + int(search.tree.node_edge_count[game, 0]))


def root_arrays(search: BatchedSearch, game: int = 0) -> dict[str, np.ndarray]:
    """The root's edge statistics in edge order, float64."""
    tree, block = search.tree, root_block(search, game)
    visits = tree.edge_visits[game, block].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = tree.edge_value_sum[game, block].astype(np.float64) / visits
    return {
        "priors": tree.edge_prior[game, block].astype(np.float64),
        "visits": visits,
        "q": q,
        "proofs": tree.edge_proof[game, block].astype(np.float64),
        "raw": float(tree.node_raw_value[game, 0]),
        "noise": search._gumbel.noise[game, : visits.shape[0]].copy(),
    }


def sigma_by_hand(arrays: dict[str, np.ndarray], c_visit: float = 50.0,
                  c_scale: float = 0.1) -> np.ndarray:
    """sigma(completed Q) of every root edge, written out from the paper's formulas."""
    priors = np.maximum(arrays["priors"], TINY)
    visits, proofs = arrays["visits"], arrays["proofs"]
    known = (visits > 0) | (proofs != 0)
    q = np.where(proofs != 0, proofs, arrays["q"])
    total = visits.sum()
    v_mix = arrays["raw"]
    if known.any():
        v_mix = ((v_mix + total * (priors[known] * q[known]).sum() / priors[known].sum())
                 / (total + 1))
    completed = np.where(known, q, v_mix)
    rescaled = (completed - completed.min()) / max(completed.max() - completed.min(), 1e-8)
    return (c_visit + visits.max()) * c_scale * rescaled


def gumbel_keys(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """g + log prior: what Gumbel-top-m sampling ranks."""
    return arrays["noise"] + np.log(np.maximum(arrays["priors"], TINY))


def top(keys: np.ndarray, count: int, among: np.ndarray | None = None) -> list[int]:
    """Indices of the `count` largest keys (the first on ties), optionally among some indices."""
    indices = np.arange(keys.shape[0]) if among is None else np.asarray(among)
    return sorted(indices.tolist(), key=lambda i: (-keys[i], i))[:count]


# ----------------------------------------------------------------------------------------------
# Sequential halving


def test_kernel_phase_visits_follow_the_paper():
    # max(1, floor(n / (ceil(log2 m) * size)))
    assert [kernels.phase_visits(16, 4, size) for size in (4, 2)] == [2, 4]
    assert [kernels.phase_visits(200, 16, size) for size in (16, 8, 4, 2)] == [3, 6, 12, 25]
    assert kernels.phase_visits(8, 16, 16) == 1  # a budget below m still visits one per phase
    # ceil(log2 5) = 3
    assert kernels.phase_visits(50, 5, 5) == 3 and kernels.phase_visits(50, 5, 2) == 8
    assert kernels.phase_visits(30, 1, 1) == 30  # one move takes the whole budget


@pytest.mark.parametrize("leaves_per_game", [1, 4])
def test_kernel_halving_allocates_visits_by_hand(leaves_per_game):
    """m = 4, n = 16: phase 1 gives each sampled move 2 visits, phase 2 gives the best two 4 more.

    The per-action counts are (6, 6, 2, 2, 0, ...): the four moves with the largest g + log p,
    and of those the two with the largest g + log p + sigma(completed Q) after phase 1.
    """
    config = SearchConfig(root="gumbel", gumbel_m=4, leaves_per_game=leaves_per_game, solver=False)
    search = BatchedSearch(HashEvaluator(), config, seed=1)
    search.set_roots(random_position(7, 20))
    search.search(8, planned_simulations=16)
    arrays = root_arrays(search)
    sampled = top(gumbel_keys(arrays), 4)
    visits = arrays["visits"]
    assert visits[sampled].tolist() == [2, 2, 2, 2] and visits.sum() == 8
    survivors = top(gumbel_keys(arrays) + sigma_by_hand(arrays), 2, among=sampled)
    search.search(8)  # the same halving goes on: n = 16 was planned
    arrays = root_arrays(search)
    expected = np.zeros_like(arrays["visits"])
    expected[sampled] = 2
    expected[survivors] = 6
    np.testing.assert_array_equal(arrays["visits"], expected)
    chosen = top(gumbel_keys(arrays) + sigma_by_hand(arrays), 1, among=survivors)[0]
    assert (search.select_moves(99)[0].tolist()
            == search.tree.edge_move[0, root_block(search).start + chosen].tolist())
    check_invariants(search.tree, 0)


def test_kernel_halving_continues_past_its_budget_with_two_moves():
    """A search that outlives its plan (a time budget) keeps alternating between the last two."""
    config = SearchConfig(root="gumbel", gumbel_m=4, leaves_per_game=1, solver=False)
    search = BatchedSearch(HashEvaluator(), config, seed=2)
    search.set_roots(random_position(8, 20))
    search.search(16)
    search.search(16)  # phases of floor(16 / (2 * 2)) = 4 visits for each of the last two
    visits = np.sort(root_arrays(search)["visits"])[::-1]
    assert visits[:4].tolist() == [14, 14, 2, 2] and visits.sum() == 32


@pytest.mark.parametrize(
    ("plies", "simulations", "config"),
    [
        (20, 16, SearchConfig(root="gumbel", gumbel_m=4, leaves_per_game=1)),
        (24, 64, SearchConfig(root="gumbel", gumbel_m=16, leaves_per_game=8)),
        (40, 50, SearchConfig(root="gumbel", gumbel_m=5, leaves_per_game=4)),  # proofs late on
        (30, 40, SearchConfig(root="gumbel", gumbel_m=8, leaves_per_game=4, gumbel_scale=0.0,
                              solver=False)),
    ],
)
def test_kernel_gumbel_matches_naive(plies, simulations, config):
    """The same trees, root choice included, before and after tree reuse."""
    position = random_position(plies, plies)
    search = BatchedSearch(HashEvaluator(), config, seed=plies)
    search.set_roots(position)
    naive = NaiveMCTS(HashEvaluator(), config, position, rng=np.random.default_rng(plies))
    for _ in range(2):
        stats = search.search(simulations)
        naive.search(simulations)
        assert_same_tree(search.tree, 0, naive.root)
        assert (stats.collisions, stats.terminal_hits) == (naive.collisions, naive.terminal_hits)
        naive.collisions = naive.terminal_hits = 0
        move = search.select_moves(99)[0]
        if naive.root.proof == 0:
            assert tuple(move.tolist()) == naive.gumbel_choice()
        check_invariants(search.tree, 0)
        search.advance(0, move)
        naive.advance(tuple(move.tolist()))
        if engine.is_terminal(search.root_positions[:1])[0]:
            break


def test_kernel_completed_q_matches_a_direct_computation_and_the_policy_target():
    position = random_position(11, 24)
    search = BatchedSearch(HashEvaluator(),
                           SearchConfig(root="gumbel", gumbel_m=8, leaves_per_game=4), seed=3)
    search.set_roots(position)
    search.search(40)
    arrays = root_arrays(search)
    sigma = sigma_by_hand(arrays)
    v_mix, low, span, scale = kernels.root_sigma_terms(search.tree, 0, 50.0, 0.1)
    known = arrays["visits"] > 0
    q = arrays["q"]
    completed = np.where(known, q, v_mix)
    np.testing.assert_allclose(scale * (completed - low) / span, sigma, rtol=1e-9, atol=1e-9)
    assert scale == pytest.approx((50.0 + arrays["visits"].max()) * 0.1)
    # The self-play target is softmax(log p + sigma): the same transform as the root's.
    result = search.root_result(0)
    row_of = {tuple(move): row for row, move in enumerate(result.moves.tolist())}
    moves = search.tree.edge_move[0, root_block(search)].tolist()
    target = improved_policy(result).astype(np.float64)[[row_of[tuple(move)] for move in moves]]
    residual = np.log(target) - np.log(np.maximum(arrays["priors"], TINY)) - sigma
    assert np.ptp(residual) < 1e-4
    # The move played: argmax of g + log p + sigma over the remaining set.
    considered = np.flatnonzero(search._gumbel.considered[0, : len(moves)])
    chosen = top(gumbel_keys(arrays) + sigma, 1, among=considered)[0]
    played = search.select_moves(99)[0].tolist()
    assert played == moves[chosen]
    # It leads the result and its principal variation.
    assert result.moves[0].tolist() == played and result.principal_variation[0].tolist() == played


def test_gumbel_prefers_a_winning_move_at_8_simulations():
    """22 of 73 moves win at once; with the solver off the search must find one by searching.

    Eight simulations visit the 8 sampled moves once each; a visited winner's Q of +1 outweighs
    the Gumbel noise. Drawing the move from the prior alone (the best g + log p) wins about 30%.
    """
    position = Board(IMMEDIATE_WIN).canonical_position()
    config = SearchConfig(root="gumbel", gumbel_m=8, simulations=8, leaves_per_game=4, solver=False)
    wins, prior_wins = 0, 0
    for seed in range(20):
        search = BatchedSearch(UniformEvaluator(), config, seed=seed)
        search.set_roots(position)
        search.search()
        moves = search.tree.edge_move[0, root_block(search)].astype(np.int32)
        winners = winning_mask(position, moves)
        visits = root_arrays(search)["visits"]
        assert visits.sum() == 8 and np.count_nonzero(visits) == 8
        chosen = search.select_moves(99)[0]
        chosen_wins = bool(winners[np.flatnonzero((moves == chosen).all(axis=1))[0]])
        if winners[visits > 0].any():
            assert chosen_wins
        wins += chosen_wins
        prior_wins += bool(winners[top(gumbel_keys(root_arrays(search)), 1)[0]])
    assert wins >= 18 and prior_wins <= 12


def test_gumbel_plays_a_proven_win_at_once():
    board = Board(WIN_IN_THREE[0])
    position = board.canonical_position()
    search = BatchedSearch(UniformEvaluator(),
                           SearchConfig(root="gumbel", simulations=300, leaves_per_game=4),
                           seed=0)
    search.set_roots(position)
    stats = search.search()
    assert search.root_result(0).proven == 1 and stats.simulations < 300
    index = {tuple(move): row for row, move in enumerate(children(position)[0].tolist())}
    assert wins_in_three(position)[index[tuple(search.select_moves(board.ply)[0].tolist())]]


def test_gumbel_never_keeps_proven_losses_while_open_moves_remain():
    """A late position with 6 moves, 5 of which get proven lost while sampled: none of them gets
    another visit once proven, none is played, and the set refills from the unsampled moves."""
    position = random_position(16, 42)
    search = BatchedSearch(UniformEvaluator(),
                           SearchConfig(root="gumbel", gumbel_m=4, leaves_per_game=2), seed=5)
    search.set_roots(position)
    search.search(4, planned_simulations=200)
    block = root_block(search)
    sampled_then_lost = 0
    for _ in range(50):
        lost = search.tree.edge_proof[0, block] == kernels.PROOF_LOSS
        considered = search._gumbel.considered[0, : block.stop - block.start].copy()
        before = search.tree.edge_visits[0, block].copy()
        search.search(4)
        after_lost = search.tree.edge_proof[0, block] == kernels.PROOF_LOSS
        assert np.array_equal(search.tree.edge_visits[0, block][lost], before[lost])
        sampled_then_lost += int((considered & after_lost & ~lost).sum())
        assert not after_lost.all() and search.tree.node_proof[0, 0] == kernels.PROOF_NONE
        chosen = search.select_moves(99)[0]
        row = np.flatnonzero((search.tree.edge_move[0, block] == chosen).all(axis=1))[0]
        assert not after_lost[row]
    assert sampled_then_lost >= 4 and block.stop - block.start == 6


def test_kernel_halving_refills_when_every_sampled_move_is_lost():
    """Constructed: the four sampled moves are marked proven lost; the next four take over."""
    config = SearchConfig(root="gumbel", gumbel_m=4, leaves_per_game=1, solver=False)
    search = BatchedSearch(HashEvaluator(), config, seed=4)
    search.set_roots(random_position(3, 20))
    search.search(0, planned_simulations=16)
    arrays = root_arrays(search)
    ranked = top(gumbel_keys(arrays), 8)
    block = root_block(search)
    search.tree.edge_proof[0, block.start + np.array(ranked[:4])] = kernels.PROOF_LOSS
    search.search(8)
    visits = root_arrays(search)["visits"]
    assert visits[ranked[4:]].tolist() == [2, 2, 2, 2] and visits.sum() == 8
    assert search._gumbel.considered[0, ranked[4:]].all()


# ----------------------------------------------------------------------------------------------
# Gumbel in use: self-play, temperature, arena, a time-budgeted player


def test_gumbel_self_play_records_completed_q_targets():
    config = SearchConfig(root="gumbel", simulations=8, gumbel_m=4, leaves_per_game=4,
                          temperature_moves=4, root_noise=True, edge_capacity=1 << 15,
                          node_capacity=64)
    search = BatchedSearch(UniformEvaluator(), config, num_games=2, seed=0)
    games = []
    stats = play_games(search, 2, lambda samples, moves, verdict: games.append((samples, moves)))
    assert stats["games"] == 2 and stats["full_searches"] == stats["positions"]
    for samples, moves in games:
        samples.validate()
        assert Board.from_moves(moves).is_game_over()
        assert (samples.policy_weight == 1).all()
    # root_noise is not used with gumbel: the tree's root priors stay the evaluator's.
    assert not search._noised.any()


def test_gumbel_temperature_samples_the_completed_q_policy():
    position = random_position(13, 20)
    config = SearchConfig(root="gumbel", gumbel_m=8, leaves_per_game=4, temperature_moves=10)
    search = BatchedSearch(HashEvaluator(), config, seed=0)
    search.set_roots(position)
    search.search(32)
    result = search.root_result(0)
    target = improved_policy(result)
    draws = [tuple(search.select_moves(plies=0)[0].tolist()) for _ in range(3000)]
    row_of = {tuple(move): row for row, move in enumerate(result.moves.tolist())}
    counts = np.bincount([row_of[draw] for draw in draws], minlength=len(row_of))
    expected = target * 3000
    assert np.abs(counts - expected).max() < 5 * np.sqrt(expected.max()) + 5
    assert search.select_moves(plies=10)[0].tolist() == result.moves[0].tolist()


def test_gumbel_through_the_arena_overrides():
    config = apply_search_overrides(SearchConfig(),
                                    [("root", "gumbel"), ("gumbel_m", "8"), ("lcb", "true")])
    assert (config.root, config.gumbel_m, config.lcb) == ("gumbel", 8, True)
    with pytest.raises(PlayerSpecError, match="root"):
        apply_search_overrides(SearchConfig(), [("root", "alphabeta")])
    result = run_arena("mcts-uniform", "random", games=2, simulations=16, processes=1, seed=3,
                       search_a=[("root", "gumbel"), ("gumbel_m", "4")])
    assert result.games == 2 and all(Board.from_moves(r.moves).is_game_over()
                                     for r in result.records)


def test_time_budgeted_gumbel_player_plans_its_halving():
    player = MCTSPlayer(UniformEvaluator(),
                        SearchConfig(root="gumbel", simulations=64, leaves_per_game=8,
                                     fpu_reduction=0.0),
                        time_budget=0.3, seed=0)
    board = Board()
    for _ in range(2):
        started = time.perf_counter()
        move = player.choose_move(board)
        assert time.perf_counter() - started < 3.0  # 0.3 s asked; a loaded machine adds some
        assert board.is_legal(move)
        # The plan follows the time left (from the first chunk's guess of 64 on), so it covers
        # every simulation this turn ran.
        done = player._last_budget_simulations
        assert player.search._gumbel.budget[0] >= done > 64
        player.observe(board, move)
        board.push(move)


def test_gumbel_players_play_without_noise_unless_asked():
    """A player draws no Gumbel noise with root_noise off (the arena's, the bot's, the web
    board's): its move depends on the position and the evaluator, not on its seed. With
    root_noise on, a Gumbel player explores like self-play does."""
    board = Board.from_moves([])
    config = SearchConfig(root="gumbel", simulations=16, gumbel_m=8, leaves_per_game=4)
    moves = {MCTSPlayer(HashEvaluator(), config, seed=seed).choose_move(board) for seed in range(6)}
    assert len(moves) == 1
    exploring = config.replace(root_noise=True)
    moves = {MCTSPlayer(HashEvaluator(), exploring, seed=seed).choose_move(board)
             for seed in range(6)}
    assert len(moves) > 1


# ----------------------------------------------------------------------------------------------
# LCB


def constructed_root(config: SearchConfig) -> tuple[BatchedSearch, slice]:
    """A searched root whose first three edges get hand-made statistics (the others none):

    edge 0: 100 visits, mean 0.0, variance 0.64 (LCB about -0.41 at 5 standard deviations);
    edge 1: 60 visits, mean 0.2, variance 0.0025 (LCB about 0.17);
    edge 2: 10 visits, mean 0.9 (below 15% of the most visits: not a candidate).
    """
    search = BatchedSearch(UniformEvaluator(), config)
    search.set_roots(random_position(5, 12))
    search.search(0)
    tree, block = search.tree, root_block(search)
    tree.edge_visits[0, block] = 0
    for offset, (visits, mean, variance) in enumerate([(100, 0.0, 0.64), (60, 0.2, 0.0025),
                                                       (10, 0.9, 0.0)]):
        edge = block.start + offset
        tree.edge_visits[0, edge] = visits
        tree.edge_value_sum[0, edge] = visits * mean
        tree.edge_value_sq_sum[0, edge] = visits * (variance + mean * mean)
    tree.node_visits[0, 0] = 171
    return search, block


def test_kernel_lcb_prefers_a_well_visited_move_with_a_higher_bound():
    search, block = constructed_root(SearchConfig(lcb=True))
    moves = search.tree.edge_move[0, block]
    assert search.select_moves(99)[0].tolist() == moves[1].tolist()
    result = search.root_result(0)
    assert result.moves[0].tolist() == moves[1].tolist() == result.principal_variation[0].tolist()
    plain, _ = constructed_root(SearchConfig())
    assert plain.select_moves(99)[0].tolist() == moves[0].tolist()  # the most visited
    assert kernels.best_edge(search.tree, 0, 0) == block.start
    # With the same mean and variance, more visits give the tighter bound: the most visited stays.
    search.tree.edge_value_sum[0, block.start] = 100 * 0.2
    search.tree.edge_value_sq_sum[0, block.start] = 100 * (0.0025 + 0.04)
    assert search.select_moves(99)[0].tolist() == moves[0].tolist()


@pytest.mark.parametrize(("stdevs", "expected"), [(5.0, 0), (1.0, 1)])
def test_kernel_lcb_width_follows_the_standard_deviations(stdevs, expected):
    """Edge 0: mean 0.1, standard error 0.01; edge 1: mean 0.2, standard error 0.065. At 5
    standard deviations edge 0's bound is higher (0.05 against -0.16), at 1 edge 1's
    (0.09, 0.14)."""
    search, block = constructed_root(SearchConfig(lcb=True, lcb_stdevs=stdevs))
    tree = search.tree
    tree.edge_value_sum[0, block.start] = 100 * 0.1
    tree.edge_value_sq_sum[0, block.start] = 100 * (0.01 + 0.01)
    tree.edge_value_sq_sum[0, block.start + 1] = 60 * (0.25 + 0.04)
    assert search.select_moves(99)[0].tolist() == tree.edge_move[0, block.start + expected].tolist()


def test_kernel_lcb_lets_proofs_take_precedence():
    search, block = constructed_root(SearchConfig(lcb=True))
    moves = search.tree.edge_move[0, block]
    search.tree.edge_proof[0, block.start + 1] = kernels.PROOF_LOSS
    assert search.select_moves(99)[0].tolist() == moves[0].tolist()
    search.tree.edge_proof[0, block.start + 1] = kernels.PROOF_NONE
    search.tree.edge_proof[0, block.start + 5] = kernels.PROOF_WIN
    search.tree.edge_proof_plies[0, block.start + 5] = 1
    kernels.refresh_root_proof(search.tree, 0)
    assert search.select_moves(99)[0].tolist() == moves[5].tolist()


def test_kernel_value_squares_are_summed_along_the_path():
    """Every edge's sum of squares equals the sum of its backed-up values squared: with values
    in {-1, 0, +1} (uniform evaluator, exact terminal results) that is the count of decided ones."""
    search = BatchedSearch(UniformEvaluator(), SearchConfig(solver=False, leaves_per_game=4))
    search.set_roots(Board(IMMEDIATE_WIN).canonical_position())
    search.search(100)
    tree, block = search.tree, root_block(search)
    moves = tree.edge_move[0, block].astype(np.int32)
    wins = winning_mask(Board(IMMEDIATE_WIN).canonical_position(), moves)
    np.testing.assert_array_equal(tree.edge_value_sq_sum[0, block][wins],
                                  tree.edge_visits[0, block][wins])
    assert (tree.edge_value_sq_sum[0, block][~wins] == 0).all()


# ----------------------------------------------------------------------------------------------
# Configuration


@pytest.mark.parametrize("field, value", [("root", "alphabeta"), ("gumbel_m", 0), ("c_scale", -1.0),
                                          ("c_visit", float("nan")), ("gumbel_scale", -0.5),
                                          ("lcb_stdevs", 0.0), ("lcb_min_visits_fraction", 1.5)])
def test_bad_root_settings_name_the_field(field, value):
    with pytest.raises(SearchConfigError, match=field):
        SearchConfig(**{field: value})


def test_defaults_keep_puct_and_most_visits():
    config = SearchConfig()
    assert (config.root, config.lcb, config.gumbel_m, config.c_visit, config.c_scale) == (
        "puct", False, 16, 50.0, 0.1)
