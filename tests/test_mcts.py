"""Tests of the search: Numba kernels against the naive oracle, statistics, reuse, capacity, noise.

Tests whose name contains `kernel` are also run with NUMBA_DISABLE_JIT=1 (in a subprocess, see
`test_kernel_tests_pass_without_jit`), so they are kept small.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amazons import engine
from amazons import mcts_numba as kernels
from amazons.board import Board, Move
from amazons.mcts import (
    EDGE_BYTES,
    NODE_BYTES,
    BatchedSearch,
    Evaluator,
    EvaluatorError,
    RolloutEvaluator,
    SearchConfig,
    SearchConfigError,
    SearchInputError,
    SearchResult,
    UniformEvaluator,
)
from amazons.players.player import MCTSPlayer
from amazons.search_targets import improved_policy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from naive_mcts import NaiveMCTS  # noqa: E402

# Black to move; White's amazons are boxed in except h1, whose only way out is g2 (square 54).
# Every move that lands on or shoots at g2 wins at once: 22 of Black's 73 legal moves.
IMMEDIATE_WIN = "Wxxxx1xW/xxBxxxxx/xxxxxxxx/xBxxxxxx/xxxxx3/4xB2/xxx4x/WxxxxBxW b"


def random_position(seed: int, plies: int) -> np.ndarray:
    """Canonical position after `plies` uniformly random moves from the start (seeded)."""
    rng = np.random.default_rng(seed)
    position = engine.start_position().reshape(1, 3)
    for _ in range(plies):
        moves, _ = engine.legal_moves(position)
        if moves.shape[0] == 0:
            break
        move = np.ascontiguousarray(moves[rng.integers(moves.shape[0])].reshape(1, 3))
        child = engine.apply_moves(position, move)
        if engine.is_terminal(child)[0]:
            break
        position = child
    return position[0].copy()


class HashEvaluator:
    """Deterministic, position-dependent, non-uniform priors and values (for exact comparisons)."""

    def evaluate(self, positions, moves, move_offsets):
        counts = np.diff(move_offsets)
        mix = (positions[:, 0] * np.uint64(0x9E3779B97F4A7C15)) ^ (
            positions[:, 1] * np.uint64(0xBF58476D1CE4E5B9)) ^ positions[:, 2]
        owner = np.repeat(np.arange(positions.shape[0]), counts)
        salt = (mix % np.uint64(97)).astype(np.int64)[owner]
        weights = 1.0 + (moves[:, 0] * 7 + moves[:, 1] * 13 + moves[:, 2] * 29 + salt) % 17
        totals = np.add.reduceat(weights, move_offsets[:-1])
        priors = (weights / np.repeat(totals, counts)).astype(np.float32)
        values = (((mix >> np.uint64(11)) % np.uint64(2001)).astype(np.float64) - 1000.0) / 1000.0
        return priors, values.astype(np.float32)


def winning_mask(position: np.ndarray, moves: np.ndarray) -> np.ndarray:
    """Which canonical `moves` leave the opponent without a legal move."""
    children = engine.apply_moves(np.repeat(position.reshape(1, 3), moves.shape[0], axis=0),
                                  np.ascontiguousarray(moves, dtype=np.int32))
    return engine.is_terminal(children)


def root_edges(search: BatchedSearch, game: int = 0) -> slice:
    tree = search.tree
    first = int(tree.node_first_edge[game, 0])
    return slice(first, first + int(tree.node_edge_count[game, 0]))


def assert_same_tree(tree, game: int, naive_root) -> None:
    """The Numba tree of `game` and the naive tree are identical, statistics included.

    Bit for bit on purpose: the oracle repeats the kernels' scalar IEEE-754 operations in their
    order (float32 stores rounded alike; Numba without fastmath reorders nothing), and those give
    the same bits on every CPU. Last bits differ between CPUs in vector and BLAS kernels, which
    neither side uses here; a float from a network would need a tolerance (tests/floats.py)."""
    stack = [(0, naive_root)]
    seen = 0
    while stack:
        node, naive = stack.pop()
        seen += 1
        assert tree.node_visits[game, node] == naive.visits
        assert tree.node_value_sum[game, node] == naive.value_sum
        assert bool(tree.node_terminal[game, node]) == naive.terminal
        count = int(tree.node_edge_count[game, node])
        assert count == len(naive.edges)
        first = int(tree.node_first_edge[game, node])
        block = slice(first, first + count)
        assert tree.edge_move[game, block].tolist() == [list(edge.move) for edge in naive.edges]
        assert tree.edge_visits[game, block].tolist() == [edge.visits for edge in naive.edges]
        np.testing.assert_array_equal(tree.edge_value_sum[game, block],
                                      np.array([edge.value_sum for edge in naive.edges],
                                               np.float32))
        np.testing.assert_array_equal(tree.edge_value_sq_sum[game, block],
                                      np.array([edge.value_sq_sum for edge in naive.edges],
                                               np.float32))
        np.testing.assert_array_equal(tree.edge_prior[game, block],
                                      np.array([edge.prior for edge in naive.edges], np.float32))
        for offset, edge in enumerate(naive.edges):
            child = int(tree.edge_child[game, first + offset])
            if edge.child is None:
                assert child == kernels.NO_CHILD
            else:
                stack.append((child, edge.child))
    assert seen == tree.nodes_used[game]


def check_invariants(tree, game: int) -> tuple[int, int]:
    """Walk the tree of `game`; check links, counts and that no virtual loss is left.

    Returns:
        (reachable nodes, edges of reachable nodes), which must equal the allocation counters.
    """
    nodes_used, edges_used = int(tree.nodes_used[game]), int(tree.edges_used[game])
    assert not tree.node_inflight[game, :nodes_used].any()
    assert not tree.edge_inflight[game, :edges_used].any()
    assert not (tree.edge_child[game, :edges_used] == kernels.PENDING).any()
    reachable, edges, stack = 0, 0, [0]
    while stack:
        node = stack.pop()
        reachable += 1
        count = int(tree.node_edge_count[game, node])
        if count == kernels.NOT_EXPANDED:
            assert node == 0
            continue
        first = int(tree.node_first_edge[game, node])
        assert 0 <= first and first + count <= edges_used
        edges += count
        if tree.node_terminal[game, node]:
            assert count == 0
            continue
        block = slice(first, first + count)
        assert tree.node_visits[game, node] == 1 + tree.edge_visits[game, block].sum()
        for edge in range(first, first + count):
            child = int(tree.edge_child[game, edge])
            if child < 0:
                # Unexpanded: never visited (these tests never run out of capacity).
                assert child == kernels.NO_CHILD and tree.edge_visits[game, edge] == 0
                continue
            assert child > node
            assert tree.node_parent[game, child] == node
            assert tree.node_parent_edge[game, child] == edge
            assert tree.edge_visits[game, edge] == tree.node_visits[game, child]
            assert tree.edge_value_sum[game, edge] == pytest.approx(
                -tree.node_value_sum[game, child], abs=1e-3)
            stack.append(child)
    assert (reachable, edges) == (nodes_used, edges_used)
    return reachable, edges


# ----------------------------------------------------------------------------------------------
# The Numba search against the naive oracle


@pytest.mark.parametrize(
    ("plies", "simulations", "config"),
    [
        (28, 200, SearchConfig(leaves_per_game=1)),
        (28, 200, SearchConfig(leaves_per_game=8)),
        (30, 300, SearchConfig(leaves_per_game=8, c_puct_base=0.0, fpu_reduction=0.0)),
        (38, 300, SearchConfig(leaves_per_game=4, virtual_loss=0.0)),  # collisions
    ],
)
def test_kernel_matches_naive_uniform(plies, simulations, config):
    position = random_position(plies, plies)
    search = BatchedSearch(UniformEvaluator(), config)
    search.set_roots(position)
    stats = search.search(simulations)
    naive = NaiveMCTS(UniformEvaluator(), config, position)
    naive.search(simulations)
    assert_same_tree(search.tree, 0, naive.root)
    assert (stats.collisions, stats.terminal_hits) == (naive.collisions, naive.terminal_hits)
    assert stats.collisions > 0 or config.virtual_loss > 0
    check_invariants(search.tree, 0)


@pytest.mark.parametrize(
    ("plies", "simulations", "leaves_per_game"), [(0, 64, 8), (12, 200, 1), (12, 200, 8)])
def test_matches_naive_early_in_the_game(plies, simulations, leaves_per_game):
    config = SearchConfig(leaves_per_game=leaves_per_game)
    position = random_position(plies, plies)
    search = BatchedSearch(UniformEvaluator(), config)
    search.set_roots(position)
    search.search(simulations)
    naive = NaiveMCTS(UniformEvaluator(), config, position)
    naive.search(simulations)
    assert_same_tree(search.tree, 0, naive.root)


def test_kernel_matches_naive_many_games_with_reuse():
    """G games in lockstep equal G separate naive searches, before and after tree reuse."""
    config = SearchConfig(leaves_per_game=8, virtual_loss=0.5)
    positions = np.stack([random_position(100 + game, 22 + 4 * game) for game in range(3)])
    search = BatchedSearch(HashEvaluator(), config, num_games=3)
    search.set_roots(positions)
    naives = [NaiveMCTS(HashEvaluator(), config, position) for position in positions]
    reused = 0
    for round_ in range(3):
        stats = search.search(120)
        for game, naive in enumerate(naives):
            naive.search(120)
            assert_same_tree(search.tree, game, naive.root)
            check_invariants(search.tree, game)
        assert stats.collisions == sum(naive.collisions for naive in naives)
        for naive in naives:
            naive.collisions = 0
        moves = search.select_moves(plies=99)
        for game, naive in enumerate(naives):
            # Alternate between the most visited move and a barely explored one.
            move = moves[game] if round_ != 1 else search.tree.edge_move[
                game, root_edges(search, game).stop - 1].astype(np.int32)
            search.advance(game, move)
            naive.advance(tuple(move.tolist()))
            if naive.root.edges is not None:
                reused += 1
                assert_same_tree(search.tree, game, naive.root)
            check_invariants(search.tree, game)
    assert reused >= 3


# ----------------------------------------------------------------------------------------------
# Statistics


def test_kernel_root_visits_sum_to_simulations_and_no_virtual_loss_remains():
    position = random_position(3, 30)
    search = BatchedSearch(UniformEvaluator(), SearchConfig(leaves_per_game=8, virtual_loss=3.0))
    search.set_roots(position)
    stats = search.search(157)
    tree = search.tree
    assert tree.edge_visits[0, root_edges(search)].sum() == 157 == stats.simulations
    assert tree.node_visits[0, 0] == 158  # the root's own expansion counts once
    check_invariants(tree, 0)
    stats = search.search(40)
    assert tree.edge_visits[0, root_edges(search)].sum() == 197
    assert stats.simulations == 40
    check_invariants(tree, 0)


def test_kernel_terminal_leaves_back_up_exact_values():
    board = Board(IMMEDIATE_WIN)
    position = board.canonical_position()
    # Without the solver (which proves the root at once and plays no simulation: test_solver.py).
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=200, solver=False))
    search.set_roots(position)
    stats = search.search()
    tree = search.tree
    block = root_edges(search)
    wins = winning_mask(position, tree.edge_move[0, block].astype(np.int32))
    visits = tree.edge_visits[0, block]
    values = tree.edge_value_sum[0, block]
    assert (wins & (visits > 0)).any() and stats.terminal_hits > 0
    for edge in np.flatnonzero(wins & (visits > 0)):
        child = tree.edge_child[0, block.start + edge]
        assert tree.node_terminal[0, child]
        assert values[edge] == visits[edge]  # each simulation was worth exactly +1 to the mover
        assert tree.node_value_sum[0, child] == -visits[edge]
    # With the uniform evaluator every other leaf is worth exactly 0.
    assert np.all(values[~wins] == 0.0)
    check_invariants(tree, 0)


@pytest.mark.parametrize("leaves_per_game", [1, 8])
def test_immediate_win_gets_most_simulations(leaves_per_game):
    """A sign error in backup sends the search away from the winning moves (solver off: with it
    the root is proven before any simulation)."""
    for text in (IMMEDIATE_WIN, _rotated(IMMEDIATE_WIN)):
        position = Board(text).canonical_position()
        search = BatchedSearch(UniformEvaluator(),
                               SearchConfig(leaves_per_game=leaves_per_game, solver=False))
        search.set_roots(position)
        search.search(800)
        result = search.root_result(0)
        wins = winning_mask(position, result.moves)
        assert result.visits[wins].sum() >= 0.8 * 800
        assert wins[0]  # the most visited move wins
        assert result.root_value > 0.5


def _rotated(text: str) -> str:
    """The same position with colours swapped and the board turned 180 degrees.

    The other side is to move."""
    rows, side = text.split()
    board = Board(f"{rows} {side}")
    black, white, arrows = board.bitboards()
    squares = []
    for square in range(64):
        source = 63 - square
        squares.append("W" if black >> source & 1 else "B" if white >> source & 1
                       else "x" if arrows >> source & 1 else ".")
    new_rows = []
    for y in range(8):
        row, empty = "", 0
        for char in squares[8 * y: 8 * y + 8]:
            if char == ".":
                empty += 1
                continue
            row += (str(empty) if empty else "") + char
            empty = 0
        new_rows.append(row + (str(empty) if empty else ""))
    return "/".join(new_rows) + (" w" if side == "b" else " b")


def test_rotated_position_has_the_same_canonical_form():
    assert np.array_equal(Board(IMMEDIATE_WIN).canonical_position(),
                          Board(_rotated(IMMEDIATE_WIN)).canonical_position())


def test_rollout_evaluator_search_finds_immediate_win():
    position = Board(IMMEDIATE_WIN).canonical_position()
    search = BatchedSearch(RolloutEvaluator(seed=5), SearchConfig(), seed=0)
    search.set_roots(position)
    search.search(800)
    result = search.root_result(0)
    assert winning_mask(position, result.moves)[0]


# ----------------------------------------------------------------------------------------------
# Tree reuse and memory


def test_kernel_tree_reuse_keeps_subtree_counts():
    position = random_position(9, 28)
    search = BatchedSearch(HashEvaluator(), SearchConfig(leaves_per_game=8))
    search.set_roots(position)
    search.search(200)
    tree = search.tree
    block = root_edges(search)
    best = block.start + int(np.argmax(tree.edge_visits[0, block]))
    child = int(tree.edge_child[0, best])
    child_block = slice(int(tree.node_first_edge[0, child]),
                        int(tree.node_first_edge[0, child] + tree.node_edge_count[0, child]))
    expected = {
        "visits": int(tree.node_visits[0, child]),
        "value": float(tree.node_value_sum[0, child]),
        "moves": tree.edge_move[0, child_block].copy(),
        "edge_visits": tree.edge_visits[0, child_block].copy(),
        "priors": tree.edge_prior[0, child_block].copy(),
    }
    move = tree.edge_move[0, best].astype(np.int32)
    search.advance(0, move)
    tree = search.tree
    assert np.array_equal(search.root_positions[0], engine.apply_moves(
        position.reshape(1, 3), move.reshape(1, 3))[0])
    block = root_edges(search)
    assert tree.node_visits[0, 0] == expected["visits"] > 1
    assert tree.node_value_sum[0, 0] == expected["value"]
    assert np.array_equal(tree.edge_move[0, block], expected["moves"])
    assert np.array_equal(tree.edge_visits[0, block], expected["edge_visits"])
    assert np.array_equal(tree.edge_prior[0, block], expected["priors"])
    assert tree.node_parent[0, 0] == kernels.NO_PARENT
    check_invariants(tree, 0)
    search.search(50)
    assert tree.edge_visits[0, block].sum() == expected["edge_visits"].sum() + 50
    check_invariants(tree, 0)


def test_reuse_off_clears_the_tree():
    position = random_position(4, 10)
    search = BatchedSearch(UniformEvaluator(), SearchConfig(reuse_tree=False))
    search.set_roots(position)
    search.search(100)
    search.advance(0, search.select_moves(0)[0])
    assert search.tree.nodes_used[0] == 1
    assert search.tree.node_edge_count[0, 0] == kernels.NOT_EXPANDED
    search.search(30)
    assert search.root_result(0).simulations == 30


def test_memory_stays_bounded_over_200_moves():
    """200 consecutive moves over several games: usage is exactly the live tree, capacity fixed."""
    config = SearchConfig(simulations=64, leaves_per_game=8, temperature_moves=200,
                          node_capacity=4096, edge_capacity=1 << 18)
    search = BatchedSearch(UniformEvaluator(), config, seed=1)
    board = Board()
    search.set_roots(board.canonical_position())
    peak_nodes = 0
    games = 0
    for _ in range(200):
        search.search()
        move = search.select_moves(board.ply)[0]
        search.advance(0, move)
        board.push(board_move(board, move))
        nodes, _ = check_invariants(search.tree, 0)
        peak_nodes = max(peak_nodes, nodes)
        if board.is_game_over():
            games += 1
            board = Board()
            search.set_roots(board.canonical_position())
    usage = search.tree_usage()
    assert games >= 3
    assert (usage["node_capacity"], usage["edge_capacity"]) == (4096, 1 << 18)
    # A tree never holds more than one game's simulations (56 plies x 64) plus the root.
    assert peak_nodes <= 56 * 64 + 1


def board_move(board: Board, canonical: np.ndarray) -> Move:
    return Move(*board.canonical_to_real(canonical).tolist())


def test_kernel_capacity_overflow_is_handled():
    """A full tree at its maximum stops expanding, reports it, and still counts simulations."""
    config = SearchConfig(leaves_per_game=4, node_capacity=8, node_capacity_max=8,
                          edge_capacity=engine.MAX_MOVES, edge_capacity_max=engine.MAX_MOVES)
    search = BatchedSearch(UniformEvaluator(), config)
    search.set_roots(engine.start_position())
    stats = search.search(40)
    assert stats.overflows > 0 and stats.simulations == 40
    tree = search.tree
    assert tree.edge_visits[0, root_edges(search)].sum() == 40
    assert tree.edges_used[0] <= engine.MAX_MOVES and tree.nodes_used[0] <= 8
    assert not tree.node_inflight[0].any() and not tree.edge_inflight[0].any()
    assert not (tree.edge_child[0] == kernels.PENDING).any()


def test_capacity_grows_up_to_its_bound():
    config = SearchConfig(node_capacity=2, node_capacity_max=256, edge_capacity=engine.MAX_MOVES,
                          edge_capacity_max=4 * engine.MAX_MOVES)
    search = BatchedSearch(UniformEvaluator(), config, num_games=2)
    search.set_roots(np.stack([engine.start_position()] * 2))
    stats = search.search(100)
    usage = search.tree_usage()
    assert usage["edge_capacity"] == 4 * engine.MAX_MOVES
    assert 2 < usage["node_capacity"] <= 256
    assert stats.overflows > 0 and stats.simulations == 200
    for game in range(2):
        assert search.tree.edge_visits[game, root_edges(search, game)].sum() == 100


# ----------------------------------------------------------------------------------------------
# Noise, temperature and results


def test_dirichlet_noise_scales_with_legal_moves():
    fraction = 0.25
    config = SearchConfig(root_noise=True, dirichlet_total_alpha=10.0, dirichlet_fraction=fraction)
    search = BatchedSearch(UniformEvaluator(), config, seed=3)
    search.set_roots(engine.start_position())
    search.search(8)
    priors = search.tree.edge_prior[0, root_edges(search)].astype(np.float64)
    assert priors.shape == (1232,)
    assert priors.sum() == pytest.approx(1.0, abs=1e-4)
    noise = (priors - (1 - fraction) / 1232) / fraction
    assert noise.min() >= -1e-6
    # Total concentration 10 spreads over 1,232 moves: a few moves take most of the noise. With
    # a fixed alpha of 0.3 per move (total 370) the largest share would be about 0.01.
    assert noise.max() > 0.05
    assert np.sort(noise)[-20:].sum() > 0.5
    before = priors.copy()
    search.search(8)  # noise is mixed in once per root
    assert np.array_equal(search.tree.edge_prior[0, root_edges(search)], before.astype(np.float32))


def test_temperature_sampling_follows_visits():
    position = random_position(21, 24)
    config = SearchConfig(temperature_moves=10, fpu_reduction=0.0)
    search = BatchedSearch(UniformEvaluator(), config, seed=0)
    search.set_roots(position)
    search.search(400)
    result = search.root_result(0)
    argmax = search.select_moves(plies=10)[0]
    assert argmax.tolist() == result.moves[0].tolist()
    draws = [tuple(search.select_moves(plies=0)[0].tolist()) for _ in range(2000)]
    index = {tuple(move): i for i, move in enumerate(result.moves.tolist())}
    counts = np.bincount([index[draw] for draw in draws], minlength=len(index))
    expected = result.policy * 2000
    assert np.abs(counts - expected).max() < 5 * np.sqrt(expected.max()) + 5


def test_result_fields():
    position = random_position(5, 18)
    search = BatchedSearch(RolloutEvaluator(seed=1), SearchConfig(fpu_reduction=0.0))
    search.set_roots(position)
    search.search(300)
    result = search.root_result(0)
    assert result.simulations == 300 and result.policy.sum() == pytest.approx(1.0)
    assert np.all(np.diff(result.visits) <= 0)
    assert result.num_legal_moves == engine.count_legal_moves(position)[0]
    assert -1.0 <= result.root_value <= 1.0
    visited = result.visits > 0
    assert np.all(np.abs(result.q_values[visited]) <= 1.0)
    assert np.isnan(result.q_values[~visited & (result.move_proofs == 0)]).all()
    assert result.moves.shape == (result.num_legal_moves, 3)  # every legal move, visited first
    assert visited[: int(visited.sum())].all()
    assert result.proven == 0 and -1.0 <= result.raw_value <= 1.0
    pv = result.principal_variation
    assert pv.shape[0] >= 1 and pv[0].tolist() == result.moves[0].tolist()
    engine.play_paths(position.reshape(1, 3), np.zeros(1, np.int32),
                      np.ascontiguousarray(pv.reshape(1, -1, 3)), np.array([len(pv)], np.int32))


# ----------------------------------------------------------------------------------------------
# Evaluators and input checking


def test_evaluators_follow_the_protocol():
    positions = np.stack([random_position(seed, 10) for seed in range(4)])
    moves, offsets = engine.legal_moves(positions)
    for evaluator in (UniformEvaluator(), RolloutEvaluator(seed=1), RolloutEvaluator(3, seed=1)):
        assert isinstance(evaluator, Evaluator)
        priors, values = evaluator.evaluate(positions, moves, offsets)
        assert priors.dtype == np.float32 and priors.shape == (moves.shape[0],)
        assert values.dtype == np.float32 and values.shape == (4,)
        np.testing.assert_allclose(np.add.reduceat(priors, offsets[:-1]), 1.0, rtol=1e-5)
        assert np.all(np.abs(values) <= 1.0)
    _, once = RolloutEvaluator(seed=7).evaluate(positions, moves, offsets)
    _, again = RolloutEvaluator(seed=7).evaluate(positions, moves, offsets)
    assert set(np.unique(once)) <= {-1.0, 1.0} and np.array_equal(once, again)
    _, averaged = RolloutEvaluator(4, seed=7).evaluate(positions, moves, offsets)
    assert set(np.unique(averaged * 4)) <= {-4.0, -2.0, 0.0, 2.0, 4.0}


class _BadEvaluator:
    def __init__(self, mutate):
        self.mutate = mutate

    def evaluate(self, positions, moves, move_offsets):
        priors, values = UniformEvaluator().evaluate(positions, moves, move_offsets)
        return self.mutate(priors, values)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p, v: (p[:-1], v),
        lambda p, v: (p, v[:-1]),
        lambda p, v: (p, v + 2.0),
        lambda p, v: (p, np.full_like(v, np.nan)),
        lambda p, v: (p * 2.0, v),
        lambda p, v: (-p, v),
        lambda p, v: (p.astype(np.int64), v),
        lambda p, v: p,
    ],
)
def test_evaluator_errors_are_reported(mutate):
    search = BatchedSearch(_BadEvaluator(mutate))
    search.set_roots(random_position(1, 8))
    with pytest.raises(EvaluatorError):
        search.search(16)


class _FlakyEvaluator:
    """Uniform, but raises on one call (a dead inference server, a keyboard interrupt)."""

    def __init__(self, failing_call):
        self.calls = 0
        self.failing_call = failing_call

    def evaluate(self, positions, moves, move_offsets):
        self.calls += 1
        if self.calls == self.failing_call:
            raise RuntimeError("evaluator failed")
        return UniformEvaluator().evaluate(positions, moves, move_offsets)


def test_a_failed_batch_leaves_no_pending_leaves():
    search = BatchedSearch(_FlakyEvaluator(failing_call=4), SearchConfig(leaves_per_game=8),
                           num_games=2)
    search.set_roots(np.stack([random_position(seed, 24) for seed in (1, 2)]))
    with pytest.raises(RuntimeError, match="evaluator failed"):
        search.search(100)
    stats = search.search(100)
    assert stats.simulations == 200
    for game in range(2):
        assert search.root_result(game).simulations == 100
        check_invariants(search.tree, game)


def test_bad_inputs_raise_value_errors():
    search = BatchedSearch(UniformEvaluator(), num_games=2)
    with pytest.raises(SearchInputError, match="no root"):
        search.search(8)
    with pytest.raises(SearchInputError, match="uint64"):
        search.set_roots(np.zeros((2, 3), np.int64))
    with pytest.raises(SearchInputError, match="rows"):
        search.set_roots(np.stack([engine.start_position()] * 3))
    with pytest.raises(SearchInputError, match="overlapping"):
        search.set_roots(np.array([[1, 1, 0], [2, 4, 8]], np.uint64))
    with pytest.raises(SearchInputError, match="game indices"):
        search.set_roots(engine.start_position(), games=[2])
    search.set_roots(np.stack([engine.start_position()] * 2))
    with pytest.raises(SearchInputError, match="not legal"):
        search.advance(0, np.array([0, 1, 2], np.int32))
    with pytest.raises(SearchInputError, match="search it first"):
        search.select_moves(0)
    lost = Board(IMMEDIATE_WIN)
    lost.push(board_move(lost, search_winning_move(lost)))
    search.set_roots(lost.canonical_position(), games=[1])
    with pytest.raises(SearchInputError, match="terminal"):
        search.search(8)
    for field, value in [("simulations", 0), ("leaves_per_game", -1), ("c_puct", -1.0),
                         ("dirichlet_fraction", 1.5), ("edge_capacity", 100), ("temperature", 0.0),
                         ("node_capacity_max", 10)]:
        with pytest.raises(SearchConfigError, match=field):
            SearchConfig(**{field: value})


def test_kernel_search_takes_per_game_counts_and_explore_flags():
    """One call, different simulation counts per game (a playout cap's full and fast searches in
    the same batches); games that do not explore get no root noise."""
    config = SearchConfig(leaves_per_game=4, root_noise=True, solver=False)
    search = BatchedSearch(UniformEvaluator(), config, num_games=3, seed=0)
    search.set_roots(np.stack([random_position(seed, 20) for seed in range(3)]))
    stats = search.search(np.array([24, 4, 0]), explore=np.array([True, False, False]))
    assert stats.simulations == 28
    assert [int(search.tree.node_visits[game, 0]) - 1 for game in range(3)] == [24, 4, 0]
    assert search._noised.tolist() == [True, False, False]
    block = root_edges(search, 1)
    priors = search.tree.edge_prior[1, block]
    assert np.allclose(priors, priors[0])  # uniform: no noise mixed in
    for game in range(3):
        check_invariants(search.tree, game)
    with pytest.raises(SearchInputError, match="num_simulations"):
        search.search(np.array([4, 4]))
    with pytest.raises(SearchInputError, match="num_simulations"):
        search.search(np.array([4, -1, 4]))
    with pytest.raises(SearchInputError, match="explore"):
        search.search(4, explore=np.array([True, False]))


def search_winning_move(board: Board) -> np.ndarray:
    position = board.canonical_position()
    moves, _ = engine.legal_moves(position)
    return moves[np.flatnonzero(winning_mask(position, moves))[0]]


def test_kernel_tests_pass_without_jit():
    """The kernel tests of this file, test_solver.py, test_root_selection.py and
    test_forced_playouts.py again with NUMBA_DISABLE_JIT=1: the kernels are plain Python too.
    The rerun takes hypothesis's `dev` profile: it checks that the same code runs without the
    JIT, and the compiled run above it already takes CI's `ci` profile's examples."""
    root = Path(__file__).resolve().parents[1]
    env = {name: value for name, value in os.environ.items() if name != "CI"}
    env["NUMBA_DISABLE_JIT"] = "1"
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(Path(__file__)),
         str(Path(__file__).with_name("test_solver.py")),
         str(Path(__file__).with_name("test_root_selection.py")),
         str(Path(__file__).with_name("test_forced_playouts.py")),
         "-k", "kernel and not without_jit"],
        cwd=root, env=env, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert " passed" in completed.stdout


def _result(q: list[float], priors: list[float], visits: list[int], raw_value: float = 0.0,
            proofs: list[int] | None = None) -> SearchResult:
    count = len(q)
    return SearchResult(
        moves=np.stack([np.zeros(count), np.ones(count), np.arange(2, 2 + count)],
                       axis=1).astype(np.int32),
        visits=np.array(visits, np.int32), q_values=np.array(q, np.float32),
        priors=np.array(priors, np.float32),
        move_proofs=np.array(proofs if proofs is not None else [0] * count, np.int8),
        move_proof_plies=np.zeros(count, np.int16), root_value=0.0, raw_value=raw_value, proven=0,
        proof_plies=0, principal_variation=np.zeros((0, 3), np.int32), num_legal_moves=count)


@given(
    q=st.lists(st.floats(-1, 1), min_size=1, max_size=12),
    data=st.data(),
)
def test_improved_policy_is_a_distribution_ordered_by_value_at_equal_priors(q, data):
    visits = data.draw(st.lists(st.integers(1, 50), min_size=len(q), max_size=len(q)))
    target = improved_policy(_result(q, [1.0 / len(q)] * len(q), visits))
    assert target.dtype == np.float32 and target.shape == (len(q),)
    assert target.sum() == pytest.approx(1.0, abs=1e-5) and (target >= 0).all()
    order = np.argsort(q, kind="stable")
    assert (np.diff(target[order].astype(np.float64)) >= -1e-6).all()


def test_improved_policy_without_value_differences_is_the_renormalized_prior():
    target = improved_policy(_result([0.3, 0.3, 0.3], [0.1, 0.3, 0.2], [1, 5, 2]))
    np.testing.assert_allclose(target, [1 / 6, 3 / 6, 2 / 6], rtol=1e-5)
    sharper = improved_policy(_result([-1.0, 1.0], [0.5, 0.5], [1, 1]), c_scale=0.2)
    assert sharper[1] / sharper[0] == pytest.approx(np.exp((50 + 1) * 0.2), rel=1e-4)


def test_improved_policy_completes_unvisited_moves_with_the_mixed_value():
    """A hand computation of Gumbel MuZero's completed-Q target (mctx's mix-value transform).

    priors p = (0.5, 0.3, 0.2), visits (3, 1, 0), Q = (0.2, -0.4, unvisited), raw value 0.1:
    sum_visited(p q) / sum_visited(p) = (0.1 - 0.12) / 0.8 = -0.025;
    v_mix = (0.1 + 4 * -0.025) / (1 + 4) = 0.0;
    completed Q = (0.2, -0.4, 0.0), rescaled by min -0.4 and span 0.6: (1, 0, 2/3);
    sigma = (50 + 3) * 0.1 * rescaled = (5.3, 0, 3.5333);
    target = p * exp(sigma) / Z = (100.168, 0.3, 6.8476) / 107.316.
    """
    target = improved_policy(_result([0.2, -0.4, float("nan")], [0.5, 0.3, 0.2], [3, 1, 0],
                                     raw_value=0.1))
    np.testing.assert_allclose(target, [0.933397, 0.0027955, 0.0638076], rtol=1e-4)
    # Only visited moves: the unvisited move's mass would vanish (the defect this replaces).
    assert target[2] > 0.05


def test_improved_policy_uses_exact_values_of_proven_moves():
    # The third move is a proven win it never had to visit; the first is a proven loss.
    target = improved_policy(_result([0.5, 0.1, float("nan")], [0.4, 0.4, 0.2], [6, 2, 0],
                                     proofs=[-1, 0, 1]))
    assert np.argmax(target) == 2 and target[0] < target[1]


def test_noise_does_not_reach_the_policy_label():
    """Root noise steers selection only: with the same visits and Q, the label is the same."""
    position = random_position(3, 12)
    noisy = BatchedSearch(HashEvaluator(), SearchConfig(simulations=64, root_noise=True,
                                                        dirichlet_fraction=0.5), seed=1)
    noisy.set_roots(position)
    noisy.search()
    clean = BatchedSearch(HashEvaluator(), SearchConfig(simulations=64), seed=1)
    clean.set_roots(position)
    clean.search(0)
    # Give the noise-free search exactly the noisy search's statistics.
    for name in ("edge_visits", "edge_value_sum", "node_visits", "node_value_sum", "edge_child",
                 "nodes_used", "edges_used"):
        getattr(clean.tree, name)[:] = getattr(noisy.tree, name)
    noisy_result, clean_result = noisy.root_result(0), clean.root_result(0)
    np.testing.assert_array_equal(noisy_result.moves, clean_result.moves)
    np.testing.assert_array_equal(noisy_result.visits, clean_result.visits)
    np.testing.assert_array_equal(noisy_result.priors, clean_result.priors)
    np.testing.assert_array_equal(improved_policy(noisy_result), improved_policy(clean_result))
    # The noise really changed what the selection saw.
    block = root_edges(noisy)
    assert not np.allclose(noisy.tree.edge_prior[0, block], clean.tree.edge_prior[0, block])


def test_tree_memory_sets_fixed_capacities_that_fit_the_budget():
    config = SearchConfig().with_tree_memory(8.0)
    assert config.node_capacity == config.node_capacity_max
    assert config.edge_capacity == config.edge_capacity_max
    search = BatchedSearch(UniformEvaluator(), config)
    tree_bytes = sum(array.nbytes for array in search.tree) - search.tree.nodes_used.nbytes \
        - search.tree.edges_used.nbytes
    per_node = sum(getattr(search.tree, name).nbytes for name in kernels.TreeArrays._fields
                   if name.startswith("node_")) / config.node_capacity
    per_edge = sum(getattr(search.tree, name).nbytes for name in kernels.TreeArrays._fields
                   if name.startswith("edge_")) / config.edge_capacity
    assert (per_node, per_edge) == (NODE_BYTES, EDGE_BYTES)
    assert 7.9 * 2**20 < tree_bytes <= 8 * 2**20
    with pytest.raises(SearchConfigError, match="2916 edges"):
        SearchConfig().with_tree_memory(0.01)
    with pytest.raises(SearchConfigError, match="megabytes"):
        SearchConfig().with_tree_memory(float("nan"))


@pytest.mark.serial  # timed on the wall clock
def test_a_full_tree_never_grows_and_the_player_stops_in_time():
    config = SearchConfig(leaves_per_game=4).with_tree_memory(0.2)
    player = MCTSPlayer(UniformEvaluator(), config, time_budget=5.0, seed=0, stop_when_full=True)
    started = time.perf_counter()
    move = player.choose_move(Board())
    assert time.perf_counter() - started < 2.0 and player.tree_full
    assert Board().is_legal(move)
    usage = player.search.tree_usage()
    assert usage["edge_capacity"] == config.edge_capacity  # allocated once, never grown
    assert usage["edges_used"][0] <= config.edge_capacity
