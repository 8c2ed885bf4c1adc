"""KataGo's forced playouts at a noised PUCT root and the pruning of its policy target.

The kernels are checked against the naive oracle (`tests/naive_mcts.py`, which mirrors the
Dirichlet noise and the forcing rule) with tree reuse, the forcing guarantee on real searches,
the pruning against a hand computation, the target with and without pruning, the switches, and
a self-play run through `play_games` with both on. Tests whose name contains `kernel` also run
without the JIT (see `test_kernel_tests_pass_without_jit` in tests/test_mcts.py).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amazons import engine
from amazons import mcts_numba as kernels
from amazons.mcts import (
    BatchedSearch,
    SearchConfig,
    SearchConfigError,
    SearchInputError,
)
from amazons.players.factory import NET_SEARCH, PlayerSpecError, apply_search_overrides
from amazons.search_targets import improved_policy, prune_forced_visits
from amazons.train.config import apply_overrides, preset_config
from amazons.train.selfplay import SelfPlayConfig, play_games

sys.path.insert(0, str(Path(__file__).resolve().parent))
from naive_mcts import NaiveMCTS  # noqa: E402
from test_mcts import HashEvaluator, assert_same_tree, check_invariants, random_position  # noqa: E402

FORCED = SearchConfig(root_noise=True, forced_playouts_k=2.0, dirichlet_fraction=0.5,
                      leaves_per_game=4)


def root_block(search: BatchedSearch, game: int = 0) -> slice:
    first = int(search.tree.node_first_edge[game, 0])
    return slice(first, first + int(search.tree.node_edge_count[game, 0]))


def forced_shares(search: BatchedSearch, k: float, game: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(visits, floor(n_forced)) of every root edge, where
    n_forced = sqrt(k * noisy prior * root visits)."""
    block = root_block(search, game)
    visits = search.tree.edge_visits[game, block].astype(np.int64)
    priors = search.tree.edge_prior[game, block].astype(np.float64)
    return visits, np.floor(np.sqrt(k * priors * visits.sum())).astype(np.int64)


# ----------------------------------------------------------------------------------------------
# The search


@pytest.mark.parametrize(
    ("plies", "simulations", "config"),
    [
        (20, 48, FORCED.replace(leaves_per_game=1)),
        (30, 64, FORCED),
        (40, 48, FORCED.replace(dirichlet_fraction=0.25, leaves_per_game=8)),  # proofs late on
    ],
)
def test_kernel_forced_playouts_match_naive(plies, simulations, config):
    """The same trees, noisy root priors included, before and after tree reuse; the forcing
    changed the search (without it, the same noise gives other visits)."""
    position = random_position(plies, plies)
    search = BatchedSearch(HashEvaluator(), config, seed=plies)
    search.set_roots(position)
    naive = NaiveMCTS(HashEvaluator(), config, position, rng=np.random.default_rng(plies))
    for round_ in range(2):
        stats = search.search(simulations)
        naive.search(simulations)
        assert_same_tree(search.tree, 0, naive.root)
        assert (stats.collisions, stats.terminal_hits) == (naive.collisions, naive.terminal_hits)
        naive.collisions = naive.terminal_hits = 0
        check_invariants(search.tree, 0)
        if round_ == 0:
            unforced = BatchedSearch(HashEvaluator(), config.replace(forced_playouts_k=0.0),
                                     seed=plies)
            unforced.set_roots(position)
            unforced.search(simulations)
            block = root_block(search)
            np.testing.assert_array_equal(unforced.tree.edge_prior[0, block],
                                          search.tree.edge_prior[0, block])
            assert (unforced.tree.edge_visits[0, block].tolist()
                    != search.tree.edge_visits[0, block].tolist())
        move = search.select_moves(99)[0]
        search.advance(0, move)
        naive.advance(tuple(move.tolist()))
        if engine.is_terminal(search.root_positions[:1])[0]:
            break


@pytest.mark.parametrize("leaves_per_game", [1, 4])
def test_kernel_forced_playouts_give_each_visited_move_its_share(leaves_per_game):
    """Within the simulation budget, every visited root move ends with at least
    floor(sqrt(k * P * sum N)) visits; without forcing, the same noise leaves some short."""
    config = FORCED.replace(leaves_per_game=leaves_per_game, simulations=96)
    short_without = 0
    for seed in range(3):
        position = random_position(seed + 40, 24)
        for k, search in ((2.0, BatchedSearch(HashEvaluator(), config, seed=seed)),
                          (0.0, BatchedSearch(HashEvaluator(),
                                              config.replace(forced_playouts_k=0.0), seed=seed))):
            search.set_roots(position)
            search.search()
            visits, owed = forced_shares(search, 2.0)
            assert visits.sum() == 96 and search.tree.node_proof[0, 0] == kernels.PROOF_NONE
            visited = visits > 0
            if k > 0:
                assert (visits[visited] >= owed[visited]).all(), (visits[visited], owed[visited])
            else:
                short_without += int((visits[visited] < owed[visited]).sum())
    assert short_without > 0


def test_forced_playouts_stay_off_without_noise():
    """A search that does not explore (a player's, a playout cap's fast one) draws no noise, so
    nothing is forced or pruned: the same tree as with k = 0. Players' configs refuse k > 0
    without noise."""
    position = random_position(7, 18)
    trees = []
    for k in (2.0, 0.0):
        search = BatchedSearch(HashEvaluator(), FORCED.replace(forced_playouts_k=k), seed=3)
        search.set_roots(position)
        search.search(64, explore=False)
        assert search.root_result(0).pruned_visits is None
        trees.append(search.tree.edge_visits[0, root_block(search)].copy())
    np.testing.assert_array_equal(trees[0], trees[1])
    with pytest.raises(PlayerSpecError, match="forced_playouts_k"):
        apply_search_overrides(NET_SEARCH, [("forced_playouts_k", "2")])


# ----------------------------------------------------------------------------------------------
# Pruning


def test_pruning_by_hand():
    """c = 1 (c_puct_base 0), root visits N_parent = 100 (99 below it), so U = 10, k = 2.

    best A: N 60, P 0.3, Q 0.1: score* = 0.1 + 10 * 0.3 / 61 = 0.149180.
    B: N 20, P 0.4, Q -0.1, cap floor(sqrt(2 * 0.4 * 99)) = 8: -0.1 + 4 / n < score* for n > 16.05,
       so it gives up visits down to 16 (4 / 16 = 0.25 is not below 0.24918).
    C: N 12, P 0.05, Q -0.5, cap floor(sqrt(9.9)) = 3: always below, the cap stops it at 9.
    D: N 3, P 0.06, Q -0.2, cap 3: 0.6 / 3 and 0.6 / 2 are below 0.34918, 0.6 / 1 is not: reduced
       to one visit, so dropped to 0.
    E: N 1, P 0.01, Q -0.3, cap floor(sqrt(1.98)) = 1: -0.3 + 0.1 / 1 is below: 0.
    F: N 3, P 0.08, Q 0.2: its score stays above score* whatever its visits: kept.
    G: unvisited: 0.
    """
    visits = np.array([60, 20, 12, 3, 1, 3, 0])
    q = np.array([0.1, -0.1, -0.5, -0.2, -0.3, 0.2, np.nan])
    priors = np.array([0.3, 0.4, 0.05, 0.06, 0.01, 0.08, 0.1], np.float32)
    config = SearchConfig(root_noise=True, forced_playouts_k=2.0, c_puct=1.0, c_puct_base=0.0)
    pruned = prune_forced_visits(visits, q, priors, np.zeros(7, np.int8), 100, config)
    assert pruned.dtype == np.int32
    assert pruned.tolist() == [60, 16, 9, 0, 0, 3, 0]
    # The best move is never pruned, even when a proven loss has more visits (it is never c*).
    proofs = np.array([0, 0, 0, 0, 0, 0, 0], np.int8)
    lost_first = prune_forced_visits(np.array([80, 60, 5]), np.array([-1.0, 0.1, -0.2]),
                                     np.array([0.5, 0.3, 0.2], np.float32),
                                     np.array([-1, 0, 0], np.int8), 146, config)
    assert lost_first[1] == 60 and lost_first[0] < 80
    # k = 0: nothing is forced, nothing is pruned.
    unforced = dataclasses.replace(config, forced_playouts_k=0.0, root_noise=False)
    assert prune_forced_visits(visits, q, priors, proofs, 100, unforced).tolist() == visits.tolist()
    with pytest.raises(SearchInputError, match="shapes"):
        prune_forced_visits(visits, q[:3], priors, proofs, 100, config)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), count=st.integers(1, 12))
def test_pruning_removes_only_visits_that_fail_the_puct_check(data, count):
    visits = np.array(data.draw(st.lists(st.integers(0, 40), min_size=count, max_size=count)))
    q = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=count, max_size=count)))
    weights = np.array(data.draw(st.lists(st.floats(0.01, 1), min_size=count, max_size=count)))
    priors = (weights / weights.sum()).astype(np.float32)
    config = SearchConfig(root_noise=True, forced_playouts_k=2.0)
    parent = int(visits.sum()) + 1
    pruned = prune_forced_visits(visits, q, priors, np.zeros(count, np.int8), parent, config)
    assert (pruned >= 0).all() and (pruned <= visits).all()
    if visits.sum() == 0:
        return
    best = int(np.argmax(visits))
    assert pruned[best] == visits[best]
    c = config.c_puct + math.log((1 + parent + config.c_puct_base) / config.c_puct_base)
    scale = c * math.sqrt(parent)
    best_score = q[best] + scale * priors[best] / (1 + visits[best])
    caps = np.floor(np.sqrt(2.0 * priors.astype(np.float64) * visits.sum()))
    for move in np.flatnonzero(pruned < visits):
        kept = max(int(pruned[move]), 1) if visits[move] > 1 else 0  # 1 if dropped after reduction
        # Every visit taken failed the check: the last one taken (count kept + 1 -> kept) too.
        assert q[move] + scale * priors[move] / (kept + 1) < best_score
        assert visits[move] - kept <= caps[move]


def searched_root(seed: int = 5, config: SearchConfig | None = None) -> BatchedSearch:
    """A search of 48 simulations with forced playouts, 16 random plies into a game."""
    search = BatchedSearch(HashEvaluator(), config or FORCED.replace(simulations=48), seed=seed)
    search.set_roots(random_position(seed, 16))
    search.search()
    return search


def test_pruned_target_differs_on_a_noisy_root_and_sums_to_one():
    """Both target kinds read the pruned counts: a move pruned to no visit counts as unvisited
    for the completed-Q target (as if the search had never visited it) and has no share of
    the visits target."""
    result = searched_root().root_result(0)
    pruned = result.pruned_visits
    assert pruned is not None and pruned.dtype == np.int32
    assert (pruned <= result.visits).all() and pruned[0] == result.visits[0]
    assert pruned.sum() < result.visits.sum() and ((pruned == 0) & (result.visits > 0)).any()
    for target in ("visits", "completed_q"):
        plain = SelfPlayConfig(search=FORCED, policy_target=target).policy_label(result)
        pruning = SelfPlayConfig(search=FORCED, policy_target=target,
                                 prune_forced_playouts=True).policy_label(result)
        for label in (plain, pruning):
            assert label.sum() == pytest.approx(1.0, abs=1e-5) and (label >= 0).all()
        assert not np.allclose(plain, pruning)
    visits_label = SelfPlayConfig(search=FORCED, policy_target="visits",
                                  prune_forced_playouts=True).policy_label(result)
    np.testing.assert_allclose(visits_label, pruned / pruned.sum(), rtol=1e-6)
    completed = SelfPlayConfig(search=FORCED, prune_forced_playouts=True).policy_label(result)
    unvisited = result.q_values.copy()
    unvisited[pruned == 0] = np.nan
    as_if_unvisited = dataclasses.replace(result, visits=pruned, q_values=unvisited)
    np.testing.assert_allclose(completed, improved_policy(as_if_unvisited), rtol=1e-6)


def test_temperature_samples_the_pruned_visits():
    """The opening plies sample from the pruned counts, as KataGo chooses its moves: a move whose
    visits were all pruned is never played."""
    search = searched_root(config=FORCED.replace(simulations=48, temperature_moves=99))
    result = search.root_result(0)
    gone = {tuple(move)
            for move in result.moves[(result.pruned_visits == 0) & (result.visits > 0)].tolist()}
    assert gone
    played = {tuple(search.select_moves(0)[0].tolist()) for _ in range(300)}
    assert len(played) > 1 and not played & gone


# ----------------------------------------------------------------------------------------------
# Switches


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), True, "2"])
def test_forced_playouts_k_rejects_bad_values(value):
    with pytest.raises(SearchConfigError, match="forced_playouts_k"):
        SearchConfig(root_noise=True, forced_playouts_k=value)


def test_forced_playouts_need_a_noised_puct_root_and_pruning_needs_them():
    with pytest.raises(SearchConfigError, match="forced_playouts_k.*gumbel"):
        SearchConfig(root="gumbel", root_noise=True, forced_playouts_k=2.0)
    with pytest.raises(SearchConfigError, match="forced_playouts_k.*root_noise=True"):
        SearchConfig(forced_playouts_k=2.0)
    with pytest.raises(ValueError, match="prune_forced_playouts.*forced_playouts_k"):
        SelfPlayConfig(prune_forced_playouts=True)
    with pytest.raises(ValueError, match="prune_forced_playouts must be a bool"):
        SelfPlayConfig(search=FORCED, prune_forced_playouts="yes")
    defaults = SelfPlayConfig()
    assert defaults.search.forced_playouts_k == 0.0 and defaults.prune_forced_playouts is False
    cpu = preset_config("cpu")
    assert cpu.selfplay.search.forced_playouts_k == 0.0 and not cpu.selfplay.prune_forced_playouts
    arm = apply_overrides(cpu, ["selfplay.search.forced_playouts_k=2",
                                "selfplay.prune_forced_playouts=true"])
    assert arm.selfplay.search.forced_playouts_k == 2.0 and arm.selfplay.prune_forced_playouts
    with pytest.raises(ValueError, match="prune_forced_playouts"):
        apply_overrides(cpu, ["selfplay.prune_forced_playouts=true"])
    with pytest.raises(ValueError, match="forced_playouts_k"):
        apply_overrides(cpu, ["selfplay.search.forced_playouts_k=2", "selfplay.search.root=gumbel"])


# ----------------------------------------------------------------------------------------------
# Self-play


@pytest.mark.parametrize("policy_target", ["visits", "completed_q"])
def test_play_games_with_forced_playouts_and_pruning(policy_target):
    """Self-play with both switches on: games finish, every recorded label sums to 1, and the
    labels are the pruned ones (some differ from the unpruned label of the same search)."""
    search_config = FORCED.replace(simulations=32, temperature_moves=8, edge_capacity=1 << 15,
                                   node_capacity=512)
    config = SelfPlayConfig(search=search_config, policy_target=policy_target,
                            prune_forced_playouts=True)
    unpruned = dataclasses.replace(config, prune_forced_playouts=False)
    differ = []

    def label(result):
        target = config.policy_label(result)
        assert result.proven != 0 or result.pruned_visits is not None
        differ.append(not np.allclose(target, unpruned.policy_label(result)))
        return target

    search = BatchedSearch(HashEvaluator(), search_config, num_games=2, seed=11)
    finished = []
    stats = play_games(search, 2, lambda samples, moves, adjudication: finished.append(samples),
                       label=label)
    assert stats["games"] == 2 and len(finished) == 2
    assert (sum(samples.num_positions for samples in finished) == len(differ)
            == stats["full_searches"])
    for samples in finished:
        for row in range(samples.num_positions):
            block = slice(samples.label_offsets[row], samples.label_offsets[row + 1])
            assert samples.label_policy[block].sum() == pytest.approx(1.0, abs=1e-5)
    assert sum(differ) > len(differ) // 4
