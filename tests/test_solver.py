"""Tests of the MCTS-solver: immediate wins marked by the engine, proofs in the tree, the root's
choice, the naive oracle in step, and tree reuse keeping proofs.

Positions with wins at depth 1 and 3 are checked here by brute force over the engine's moves.
Tests whose name contains `kernel` also run without the JIT (see tests/test_mcts.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amazons import engine
from amazons import mcts_numba as kernels
from amazons.board import Board, Move
from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from naive_mcts import NaiveMCTS  # noqa: E402
from test_mcts import IMMEDIATE_WIN, HashEvaluator, assert_same_tree, random_position  # noqa: E402

# White's four amazons sit in corners walled by arrows but for b7; Black's four are free in the
# middle: 1,003 legal moves, of which the 25 that land on or shoot at b7 win at once.
WIN_AMONG_A_THOUSAND = "Wx4xW/x5xx/2B2B2/8/8/2B2B2/xx4xx/Wx4xW b 20"
# Late positions from random games (found by brute force) with a forced win in 3 plies and none
# in 1.
WIN_IN_THREE = (
    "xBxxx1xW/Bxx1xxWx/1xxxxBx1/BxxWxxxx/xxxxxxxx/x1xxx2x/1xx1xxxW/x3xxx1 w 43",
    "Bx2xx1x/xx1xxxBx/xxxxBxxB/2xxxxxx/xxW1xxWx/W1x2x1x/xxxxxx2/xxWxxxxx w 43",
)


def children(position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Legal moves of a canonical position and the canonical positions after each."""
    moves, _ = engine.legal_moves(position.reshape(1, 3))
    kids = engine.apply_moves(np.repeat(position.reshape(1, 3), moves.shape[0], axis=0),
                              np.ascontiguousarray(moves))
    return moves, kids


def wins_in_one(position: np.ndarray) -> np.ndarray:
    """Brute force: which moves leave the opponent without a legal reply."""
    _, kids = children(position)
    return engine.count_legal_moves(kids) == 0


def wins_in_three(position: np.ndarray) -> np.ndarray:
    """Brute force: which moves win by the third ply whatever the opponent replies."""
    moves, kids = children(position)
    result = np.zeros(moves.shape[0], bool)
    for row, kid in enumerate(kids):
        if engine.count_legal_moves(kid.reshape(1, 3))[0] == 0:
            result[row] = True
            continue
        _, grandchildren = children(kid)
        result[row] = all(wins_in_one(grandchild).any() for grandchild in grandchildren)
    return result


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), plies=st.integers(20, 44))
def test_engine_marks_exactly_the_immediate_wins(seed, plies):
    position = random_position(seed, plies)
    moves, offsets = engine.legal_moves(position.reshape(1, 3))
    marked = engine.winning_moves(position.reshape(1, 3), moves, offsets)
    np.testing.assert_array_equal(marked, wins_in_one(position))


def test_engine_marks_wins_over_a_batch():
    positions = np.stack([Board(WIN_AMONG_A_THOUSAND).canonical_position(),
                          Board(IMMEDIATE_WIN).canonical_position(), random_position(1, 30)])
    moves, offsets = engine.legal_moves(positions)
    marked = engine.winning_moves(positions, moves, offsets)
    expected = np.concatenate([wins_in_one(position) for position in positions])
    np.testing.assert_array_equal(marked, expected)
    assert marked[offsets[0]:offsets[1]].sum() == 25 and offsets[1] == 1003


def test_a_win_among_a_thousand_moves_is_proven_at_expansion():
    board = Board(WIN_AMONG_A_THOUSAND)
    position = board.canonical_position()
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=800))
    search.set_roots(position)
    stats = search.search()
    result = search.root_result(0)
    assert stats.simulations == 0 and result.proven == 1 and result.proof_plies == 1
    wins = wins_in_one(position)
    index = {tuple(move): row for row, move in enumerate(children(position)[0].tolist())}
    proven = [index[tuple(move)] for move in result.moves[result.move_proofs == 1].tolist()]
    assert sorted(proven) == sorted(np.flatnonzero(wins).tolist())
    assert wins[index[tuple(search.select_moves(board.ply)[0].tolist())]]
    assert wins[index[tuple(result.moves[0].tolist())]]
    assert result.principal_variation.shape[0] == 1


def test_without_the_solver_a_uniform_search_can_miss_the_win():
    """The motivating failure: visits spread over a thousand moves; the solver needs none."""
    board = Board(WIN_AMONG_A_THOUSAND)
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=200, solver=False))
    search.set_roots(board.canonical_position())
    search.search()
    result = search.root_result(0)
    assert result.proven == 0 and result.simulations == 200


@pytest.mark.parametrize("text", WIN_IN_THREE)
def test_search_proves_and_plays_a_win_in_three(text):
    board = Board(text)
    position = board.canonical_position()
    assert not wins_in_one(position).any()
    winning = wins_in_three(position)
    assert winning.any()
    # The tree's own proofs (adjudication would prove some of these late positions first).
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=300, leaves_per_game=4,
                                                            adjudicate=False))
    search.set_roots(position)
    stats = search.search()
    result = search.root_result(0)
    assert result.proven == 1 and result.proof_plies == 3
    assert stats.simulations < 300  # it stopped once the root was proven
    index = {tuple(move): row for row, move in enumerate(children(position)[0].tolist())}
    chosen = search.select_moves(board.ply)[0]
    assert winning[index[tuple(chosen.tolist())]]
    assert chosen.tolist() == result.moves[0].tolist()
    # Every move the tree calls a win in 3 is one by brute force.
    for move in result.moves[(result.move_proofs == 1) & (result.move_proof_plies == 3)].tolist():
        assert winning[index[tuple(move)]]
    # The loser's side of it: after the winning move, every reply is proven lost in 2.
    loser = engine.apply_moves(position.reshape(1, 3), chosen.reshape(1, 3).astype(np.int32))[0]
    reply_search = BatchedSearch(UniformEvaluator(),
                                 SearchConfig(simulations=2000, adjudicate=False))
    reply_search.set_roots(loser)
    reply_search.search()
    reply = reply_search.root_result(0)
    assert reply.proven == -1 and reply.proof_plies == 2
    assert np.all(reply.move_proofs == -1)


def test_proven_losing_moves_get_no_more_visits():
    board = Board(WIN_IN_THREE[0])
    position = engine.apply_moves(board.canonical_position().reshape(1, 3),
                                  np.array([[8, 0, 8]], np.int32))[0]
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=8, leaves_per_game=1))
    search.set_roots(position)
    search.search()
    block = slice(int(search.tree.node_first_edge[0, 0]),
                  int(search.tree.node_first_edge[0, 0] + search.tree.node_edge_count[0, 0]))
    for _ in range(40):
        lost = search.tree.edge_proof[0, block] == kernels.PROOF_LOSS
        before = search.tree.edge_visits[0, block].copy()
        search.search(4)
        after = search.tree.edge_visits[0, block]
        assert np.array_equal(after[lost], before[lost])
        if search.tree.node_proof[0, 0] != kernels.PROOF_NONE:
            break


def proofs_against_naive(config: SearchConfig, seeds: range, plies: int) -> int:
    """Search late random positions with the kernels and the naive oracle, check that the trees
    and proofs are identical, and return how many non-root nodes were proven."""
    proven = 0
    for seed in seeds:
        position = random_position(seed, plies)
        if engine.is_terminal(position.reshape(1, 3))[0]:
            continue
        search = BatchedSearch(HashEvaluator(), config)
        search.set_roots(position)
        search.search()
        naive = NaiveMCTS(HashEvaluator(), config, position)
        naive.search()
        assert_same_tree(search.tree, 0, naive.root)
        assert_same_proofs(search.tree, naive.root)
        proven += int(np.count_nonzero(search.tree.node_proof[0, 1 : search.tree.nodes_used[0]]))
    return proven


def test_kernel_solver_matches_naive_on_late_positions():
    """The naive oracle mirrors the solver: same trees, proofs included, on positions
    with proofs."""
    config = SearchConfig(leaves_per_game=4, simulations=60, adjudicate=False)
    assert proofs_against_naive(config, range(4), 40) > 0


def assert_same_proofs(tree: kernels.TreeArrays, naive_root) -> None:
    """Node and edge proofs of game 0 equal the naive tree's."""
    stack = [(0, naive_root)]
    while stack:
        node, naive = stack.pop()
        assert tree.node_proof[0, node] == naive.proof
        assert tree.node_proof_plies[0, node] == naive.proof_plies
        first = tree.node_first_edge[0, node]
        for offset, edge in enumerate(naive.edges or []):
            e = first + offset
            assert ((tree.edge_proof[0, e], tree.edge_proof_plies[0, e])
                    == (edge.proof, edge.proof_plies))
            if edge.child is not None:
                stack.append((int(tree.edge_child[0, e]), edge.child))


def test_kernel_tree_reuse_keeps_proofs():
    board = Board(WIN_IN_THREE[1])
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=300, leaves_per_game=4,
                                                            adjudicate=False))
    search.set_roots(board.canonical_position())
    search.search()
    move = search.select_moves(board.ply)[0]
    search.advance(0, move)
    # The opponent's root is proven lost in 2 from the kept subtree, before any new search.
    assert search.tree.node_proof[0, 0] == kernels.PROOF_LOSS
    assert search.tree.node_proof_plies[0, 0] == 2
    stats = search.search()
    assert stats.simulations == 0 and search.root_result(0).proven == -1


def test_solver_off_keeps_the_tree_free_of_proofs():
    board = Board(WIN_IN_THREE[1])
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=300, solver=False))
    search.set_roots(board.canonical_position())
    search.search()
    assert not search.tree.node_proof.any() and not search.tree.edge_proof.any()
    assert search.root_result(0).simulations == 300


def test_players_play_the_proven_win_at_once():
    from amazons.players.player import MCTSPlayer

    board = Board(WIN_IN_THREE[0])
    winning = wins_in_three(board.canonical_position())
    player = MCTSPlayer(UniformEvaluator(), SearchConfig(simulations=400, adjudicate=False),
                        time_budget=5.0)
    started = time.perf_counter()
    move = player.choose_move(board)
    assert time.perf_counter() - started < 2.5  # it stopped at the proof, not at the budget
    canonical = board.real_to_canonical(np.array([move.as_tuple()], np.int32))[0]
    index = {tuple(m): row
             for row, m in enumerate(children(board.canonical_position())[0].tolist())}
    assert winning[index[tuple(canonical.tolist())]]
    report = player.last_report
    assert report.proven == 1 and report.verdict() == "proven win in 3 plies"
    assert "wins in 3" in report.format()
    board.push(Move(*move.as_tuple()))


@pytest.mark.parametrize("text", WIN_IN_THREE)
def test_adjudicated_leaves_prove_wins_the_adjudicator_confirms(text):
    """With adjudication, decided leaves are proven results: the root is proven sooner, and the
    move it plays leaves a position the adjudicator (or the rules) call lost for the opponent."""
    board = Board(text)
    position = board.canonical_position()
    config = SearchConfig(simulations=300, leaves_per_game=4)
    search = BatchedSearch(UniformEvaluator(), config)
    search.set_roots(position)
    stats = search.search()
    plain = BatchedSearch(UniformEvaluator(), config.replace(adjudicate=False))
    plain.set_roots(position)
    plain_stats = plain.search()
    result = search.root_result(0)
    assert result.proven == 1 and stats.simulations <= plain_stats.simulations
    chosen = search.select_moves(board.ply)[0]
    assert chosen.tolist() == result.moves[0].tolist() and result.move_proofs[0] == 1
    # The solver alone, given time, never finds the opponent a win after that move.
    child = engine.apply_moves(position.reshape(1, 3), chosen.reshape(1, 3).astype(np.int32))[0]
    check = BatchedSearch(UniformEvaluator(), config.replace(simulations=2000, adjudicate=False))
    check.set_roots(child)
    check.search()
    assert check.root_result(0).proven != 1


def test_kernel_solver_with_adjudication_matches_naive():
    """The naive oracle adjudicates the same leaves: same trees and proofs on late positions."""
    assert proofs_against_naive(SearchConfig(leaves_per_game=4, simulations=60), range(10, 16),
                                44) > 0


@pytest.mark.parametrize("ply", [0, 99])
def test_a_root_whose_visited_moves_are_all_lost_plays_an_open_move(ply):
    """Constructed: the three visited root moves are proven lost, the others open but unvisited
    (a search that spent its few simulations proving losses). The open move with the highest
    prior is played, with or without temperature, rather than an error."""
    search = BatchedSearch(HashEvaluator(), SearchConfig(temperature_moves=10))
    search.set_roots(random_position(5, 12))
    search.search(0)
    tree = search.tree
    first, count = int(tree.node_first_edge[0, 0]), int(tree.node_edge_count[0, 0])
    tree.edge_visits[0, first:first + 3] = [4, 3, 2]
    tree.edge_proof[0, first:first + 3] = kernels.PROOF_LOSS
    tree.node_visits[0, 0] = 10
    priors = tree.edge_prior[0, first:first + count].copy()
    priors[:3] = -1.0
    expected = tree.edge_move[0, first + int(np.argmax(priors))].tolist()
    assert search.select_moves(ply)[0].tolist() == expected
    assert search.root_result(0).proven == 0


# ----------------------------------------------------------------------------------------------
# Distances of decided leaves, against a brute force


def separated_position(seed: int) -> np.ndarray:
    """A small separated canonical position: the side to move's amazons (1 or 2) in a pocket of up
    to 6 squares in the top-left 3 x 3 corner, the opponent's in the bottom-right one, arrows on
    every other square. The pockets are far apart, so every position below it is separated, and
    small, so the adjudicator's bounds are exact."""
    rng = np.random.default_rng(seed)
    parts = []
    for corner in (0, 5):
        cells = [(corner + row) * 8 + corner + column for row in range(3) for column in range(3)]
        pocket = rng.choice(cells, size=int(rng.integers(3, 7)), replace=False)
        amazons = pocket[: int(rng.integers(1, 3))]
        parts.append((
            int(np.bitwise_or.reduce(np.left_shift(np.uint64(1), pocket.astype(np.uint64)))),
            int(np.bitwise_or.reduce(np.left_shift(np.uint64(1), amazons.astype(np.uint64))))))
    (mine_pocket, mine), (their_pocket, theirs) = parts
    arrows = ~(mine_pocket | their_pocket) & ((1 << 64) - 1)
    return np.array([mine, theirs, arrows], np.uint64)


def minimax(position: np.ndarray, memo: dict) -> tuple[int, int]:
    """Plain minimax to the end over the engine's moves: (result, plies) for the side to move,
    +1 or -1, the winner taking its shortest win and the loser its longest resistance (a
    position without a move is lost in 0 plies)."""
    key = tuple(int(part) for part in position)
    if key not in memo:
        moves, kids = children(position)
        outcomes = [minimax(kid, memo) for kid in kids]
        wins = [plies + 1 for result, plies in outcomes if result < 0]
        if wins:
            memo[key] = (1, min(wins))
        else:
            memo[key] = (-1, max((plies + 1 for _, plies in outcomes), default=0))
    return memo[key]


def test_kernel_decided_leaves_are_as_far_from_the_end_as_a_brute_force_says():
    """A terminal leaf is lost in 0 and a winning move wins in 1 (the tree's convention), so a side
    to move with a moves against b loses in 2a plies (a <= b) or wins in 2b + 1 (a > b): every
    proven root move, decided by adjudication or by the rules, is 1 ply longer than the brute
    force's distance of the position it leads to, and a root whose moves all lose is exactly as
    long as the brute force says."""
    memo: dict = {}
    adjudicated = losses = 0
    for seed in range(12):
        position = separated_position(seed)
        if engine.is_terminal(position.reshape(1, 3))[0]:
            continue
        moves, kids = children(position)
        search = BatchedSearch(UniformEvaluator(),
                               SearchConfig(simulations=4 * moves.shape[0], leaves_per_game=1))
        search.set_roots(position)
        search.search()
        tree = search.tree
        first = int(tree.node_first_edge[0, 0])
        for row, kid in enumerate(kids):
            edge = first + row
            if tree.edge_proof[0, edge] == kernels.PROOF_NONE:
                continue
            result, plies = minimax(kid, memo)
            assert ((tree.edge_proof[0, edge], tree.edge_proof_plies[0, edge])
                    == (-result, plies + 1))
            adjudicated += bool(engine.adjudicate(kid.reshape(1, 3))[0][0] != 0
                                and not engine.is_terminal(kid.reshape(1, 3))[0])
        result = search.root_result(0)
        if result.proven < 0:
            losses += 1
            assert (result.proven, result.proof_plies) == minimax(position, memo)
    assert adjudicated > 10 and losses > 0


def test_kernel_a_decided_leaf_that_becomes_the_root_is_evaluated_first():
    """A leaf proven by adjudication skipped the evaluator (uniform priors). Once `advance` makes
    it the root, which its edges do not prove, the next search asks the evaluator for its priors
    before searching (one more leaf evaluated), keeps its exact raw value, and the naive oracle
    does the same, node for node."""
    config = SearchConfig(simulations=24, leaves_per_game=2)
    checked = 0
    for seed in range(12):
        position = separated_position(seed)
        if engine.is_terminal(position.reshape(1, 3))[0]:
            continue
        search = BatchedSearch(HashEvaluator(), config)
        search.set_roots(position)
        search.search()
        tree = search.tree
        block = range(int(tree.node_first_edge[0, 0]),
                      int(tree.node_first_edge[0, 0] + tree.node_edge_count[0, 0]))
        candidates = [edge for edge in block if tree.edge_child[0, edge] > 0
                      and not tree.node_evaluated[0, tree.edge_child[0, edge]]
                      and not tree.node_terminal[0, tree.edge_child[0, edge]]
                      and tree.node_proof_plies[0, tree.edge_child[0, edge]] > 1]
        if not candidates:
            continue
        move = tree.edge_move[0, candidates[0]].astype(np.int32)
        naive = NaiveMCTS(HashEvaluator(), config, position)
        naive.search()
        search.advance(0, move)
        naive.advance(tuple(move.tolist()))
        exact = float(search.tree.node_raw_value[0, 0])
        assert abs(exact) == 1.0 and not search.tree.node_evaluated[0, 0]
        stats = search.search(4)
        naive.search(4)
        assert stats.leaves_evaluated >= 1 and search.tree.node_evaluated[0, 0]
        assert search.tree.node_raw_value[0, 0] == exact
        root = search.root_positions[0].reshape(1, 3)
        moves, offsets = engine.legal_moves(root)
        first = int(search.tree.node_first_edge[0, 0])
        np.testing.assert_array_equal(search.tree.edge_prior[0, first:first + moves.shape[0]],
                                      HashEvaluator().evaluate(root, moves, offsets)[0])
        assert_same_tree(search.tree, 0, naive.root)
        assert_same_proofs(search.tree, naive.root)
        checked += 1
    assert checked >= 3
