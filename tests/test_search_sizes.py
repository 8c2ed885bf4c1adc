"""The search on every board size: 6x6, 8x8 and 10x10 searches with the uniform and the rollout
evaluators, their moves and principal variations replayed through the engine of their size, the
solver on 10x10 positions whose squares sit in the high word, the board size resolved from the
evaluator and refused where the two disagree, and a 10x10 search served by a real inference
server process.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from floats import assert_close, rounding_tolerance

from amazons import engine
from amazons import mcts_numba as kernels
from amazons.board import Board
from amazons.boards import default_start
from amazons.evaluator import EvaluatorInputError, check_batch
from amazons.mcts import (
    BatchedSearch,
    RolloutEvaluator,
    SearchConfig,
    SearchConfigError,
    SearchInputError,
    UniformEvaluator,
)
from amazons.serving.server import InferenceClient, InferenceError, InferenceServer
from amazons.symmetry import position_words


def canonical(size: int, mine, theirs, arrows=()) -> np.ndarray:
    """A canonical position `(3 * W,) uint64` of a `size` board from its squares (side to move's
    view), written bit by bit: square s is bit s % 64 of word s // 64 of its bitboard."""
    words = position_words(size)
    position = np.zeros(3 * words, np.uint64)
    for board, squares in enumerate((mine, theirs, arrows)):
        for square in squares:
            position[board * words + square // 64] |= np.uint64(1) << np.uint64(square % 64)
    return position


def start_position(size: int) -> np.ndarray:
    """The named start of `size` (`amazons.boards.default_start`) as a canonical position
    `(3 * W,) uint64`."""
    return Board(start=default_start(size)).canonical_position()


def legal_set(position: np.ndarray, size: int) -> set[tuple[int, int, int]]:
    moves, _ = engine.legal_moves(position.reshape(1, -1), size=size)
    return {tuple(move) for move in moves.tolist()}


def replay(position: np.ndarray, moves: np.ndarray, size: int) -> np.ndarray:
    """The canonical position after `moves` `(P, 3)` (move i in the frame of ply i), each checked
    legal by the engine of `size` before it is played."""
    for ply, move in enumerate(moves.astype(np.int32)):
        assert tuple(move.tolist()) in legal_set(position, size), f"move {ply} {move} is illegal"
        position = engine.apply_moves(position.reshape(1, -1), move.reshape(1, 3), size=size)[0]
    return position


def evaluator_for(kind: str, size: int):
    return UniformEvaluator() if kind == "uniform" else RolloutEvaluator(seed=size,
                                                                        board_size=size)


@pytest.mark.parametrize("kind", ["uniform", "rollout"])
@pytest.mark.parametrize("size", [6, 8, 10])
def test_a_search_of_each_size_visits_its_simulations_and_plays_legal_moves(size, kind):
    geometry = engine.geometry(size)
    root = start_position(size)
    config = SearchConfig(simulations=48, leaves_per_game=4)
    search = BatchedSearch(evaluator_for(kind, size), config, num_games=2, seed=1, size=size)
    assert search.size == size
    search.set_roots(np.stack([root, root]))
    assert search.root_positions.shape == (2, geometry.position_width)
    stats = search.search()
    assert stats.simulations == 2 * 48
    legal = legal_set(root, size)
    for game in range(2):
        result = search.root_result(game)
        assert result.visits.sum() == 48
        assert result.num_legal_moves == len(legal)
        assert {tuple(move) for move in result.moves.tolist()} == legal
        assert result.moves.max() < size * size
        replay(root, result.principal_variation, size)
    moves = search.select_moves(0)
    assert all(tuple(move) in legal for move in moves.tolist())
    kept = search.root_result(0).visits[np.all(search.root_result(0).moves == moves[0], axis=1)]
    search.advance(0, moves[0])
    child = engine.apply_moves(root.reshape(1, -1), moves[:1], size=size)[0]
    np.testing.assert_array_equal(search.root_positions[0], child)
    search.search(16, games=[0])
    result = search.root_result(0)
    assert result.visits.sum() == int(kept[0]) - 1 + 16  # the child's expansion is no visit
    assert {tuple(move) for move in result.moves.tolist()} == legal_set(child, size)


def test_a_10x10_principal_variation_longer_than_an_8x8_game_replays_to_the_end():
    """With PUCT's exploration off and unvisited moves scoring far below visited ones, every
    simulation follows the line already searched and adds one node: the tree is one line, as
    long as the game (92 plies at most on 10x10, more than the 64 plies the path buffers held
    when the search was 8x8 only)."""
    size = 10
    root = start_position(size)
    config = SearchConfig(simulations=120, leaves_per_game=1, c_puct=0.0, c_puct_base=0.0,
                          fpu_reduction=10.0, solver=False)
    search = BatchedSearch(UniformEvaluator(), config, seed=0, size=size)
    search.set_roots(root)
    search.search()
    line = search.root_result(0).principal_variation
    end = replay(root, line, size)
    assert engine.is_terminal(end.reshape(1, -1), size=size)[0]
    assert kernels.MAX_DEPTH >= engine.geometry(size).max_game_plies
    assert line.shape[0] > 64


def test_the_solver_proves_a_10x10_win_in_one_in_the_high_word():
    """The opponent's amazons on squares 96..99 (the bottom row's right end, the high word) have
    one empty neighbour, 95; every other square around them holds an arrow. A move to 95, or an
    arrow shot there, wins at once."""
    size = 10
    theirs = [96, 97, 98, 99]
    arrows = [85, 86, 87, 88, 89]
    mine = [0, 9, 50, 93]
    position = canonical(size, mine, theirs, arrows)
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=32), size=size)
    search.set_roots(position)
    search.search()
    result = search.root_result(0)
    assert (result.proven, result.proof_plies) == (kernels.PROOF_WIN, 1)
    winning = result.moves[result.move_proofs == kernels.PROOF_WIN]
    assert len(winning) > 0 and all(95 in move[1:] for move in winning.tolist())
    move = search.select_moves(0)
    after = engine.apply_moves(position.reshape(1, -1), move, size=size)
    assert engine.is_terminal(after, size=size)[0]


def test_the_solver_proves_a_separated_10x10_position_by_adjudication():
    """Everything is an arrow but two rows' ends: my four amazons on squares 90..93 (the bottom
    row, the high word) with six empty squares beside them, theirs on 0..3 (the top row) with
    two. The regions are apart, so every leaf is adjudicated: I have more moves, and win."""
    size = 10
    mine, theirs = [90, 91, 92, 93], [0, 1, 2, 3]
    empty = {94, 95, 96, 97, 98, 99, 4, 5}
    arrows = [s for s in range(100) if s not in empty and s not in mine and s not in theirs]
    position = canonical(size, mine, theirs, arrows)
    result, _ = engine.adjudicate(position.reshape(1, -1), size=size)
    assert result[0] == 1
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=64, leaves_per_game=1),
                           size=size)
    search.set_roots(position)
    stats = search.search()
    root = search.root_result(0)
    assert root.proven == kernels.PROOF_WIN
    assert stats.simulations < 64  # a proven root stops simulating
    move = search.select_moves(0)[0]
    assert root.move_proofs[np.all(root.moves == move, axis=1)][0] == kernels.PROOF_WIN
    replay(position, root.principal_variation, size)


def test_the_size_comes_from_the_argument_the_evaluator_or_8_and_a_disagreement_names_both():
    assert BatchedSearch(UniformEvaluator()).size == 8
    assert BatchedSearch(UniformEvaluator(), size=10).size == 10
    assert BatchedSearch(RolloutEvaluator(board_size=6)).size == 6
    assert BatchedSearch(RolloutEvaluator(board_size=10), size=10).size == 10
    with pytest.raises(SearchInputError, match=r"size 10 .*board_size 8"):
        BatchedSearch(RolloutEvaluator(), size=10)
    with pytest.raises(SearchInputError, match=r"size 8 .*board_size 10"):
        BatchedSearch(RolloutEvaluator(board_size=10), size=8)
    with pytest.raises(SearchInputError, match="size"):
        BatchedSearch(UniformEvaluator(), size=11)


def test_roots_of_another_size_are_refused_naming_the_board():
    search = BatchedSearch(UniformEvaluator(), size=10)
    with pytest.raises(SearchInputError, match=r"\(n, 6\) on a 10x10 board.*\(1, 3\)"):
        search.set_roots(start_position(8).reshape(1, 3))
    eight = BatchedSearch(UniformEvaluator())
    with pytest.raises(SearchInputError, match=r"\(n, 3\) on a 8x8 board"):
        eight.set_roots(start_position(10))


def test_overlapping_bitboards_are_found_in_the_high_word():
    position = canonical(10, [0, 1, 2, 99], [3, 4, 5, 6], [99])
    with pytest.raises(SearchInputError, match="used twice"):
        BatchedSearch(UniformEvaluator(), size=10).set_roots(position)


def test_the_edge_capacity_must_hold_one_position_of_the_size():
    config = SearchConfig(edge_capacity=engine.geometry(8).max_moves)
    BatchedSearch(UniformEvaluator(), config, size=8)
    with pytest.raises(SearchConfigError, match=r">= 4900 \(one 10x10 position's moves\)"):
        BatchedSearch(UniformEvaluator(), config, size=10)


def test_a_10x10_search_compiles_no_kernel_an_8x8_search_did_not():
    """The kernels never see the board size (their arrays have the same types on every size), so
    `amazons.mcts.warm_up`'s 8x8 searches load everything a 10x10 search runs."""
    used = ("select_leaves", "expand_and_backup", "reset_trees", "principal_variation",
            "best_edge", "compact_subtree", "refresh_root_proof")
    for size in (8, 10):
        search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=16), size=size)
        search.set_roots(start_position(size))
        search.search()
        move = search.select_moves(0)[0]
        search.root_result(0)
        search.advance(0, move)
        if size == 8:
            signatures = {name: list(getattr(kernels, name).signatures) for name in used}
    assert {name: list(getattr(kernels, name).signatures) for name in used} == signatures


def test_the_batch_check_refuses_squares_and_widths_of_another_size():
    position = start_position(10).reshape(1, 6)
    moves, offsets = engine.legal_moves(position, size=10)
    check_batch(position, moves, offsets, 10)
    with pytest.raises(EvaluatorInputError, match=r"\(B, 3\) uint64 array on a 8x8 board"):
        check_batch(position, moves, offsets)
    off_board = np.ascontiguousarray(moves[moves.max(axis=1) >= 36][:1])  # off a 6x6 board
    with pytest.raises(EvaluatorInputError, match=r"squares 0\.\.35, got"):
        check_batch(start_position(6).reshape(1, 3), off_board, np.array([0, 1]), 6)


class SizedRolloutFactory:
    """An evaluator factory that says its size, as `amazons.neural.served`'s does."""

    def __init__(self, board_size: int) -> None:
        self.board_size = board_size

    def __call__(self) -> RolloutEvaluator:
        return RolloutEvaluator(seed=0, board_size=self.board_size)


def test_a_10x10_search_through_a_real_inference_server():
    factory = functools.partial(RolloutEvaluator, seed=0, board_size=10)
    with InferenceServer(factory, num_clients=1, board_size=10) as server:
        assert server.board_size == 10
        client = InferenceClient(server.handle(0))
        try:
            assert client.board_size == 10
            search = BatchedSearch(client, SearchConfig(simulations=40, leaves_per_game=4),
                                   num_games=2, seed=0)
            assert search.size == 10
            root = start_position(10)
            search.set_roots(np.stack([root, root]))
            assert search.search().simulations == 80
            for game in range(2):
                result = search.root_result(game)
                assert result.visits.sum() == 40
                replay(root, result.principal_variation, 10)
            with pytest.raises(SearchInputError, match=r"size 8 .*board_size 10"):
                BatchedSearch(client, size=8)
            with pytest.raises(EvaluatorInputError, match="10x10"):
                client.evaluate(start_position(8).reshape(1, 3), np.zeros((0, 3), np.int32),
                                np.zeros(2, np.int64))
        finally:
            client.close()
    assert server.stats["rows"] > 0


def test_a_server_whose_evaluator_is_of_another_size_fails_to_start_naming_both():
    factory = functools.partial(RolloutEvaluator, seed=0)
    server = InferenceServer(factory, num_clients=1, board_size=10)
    with pytest.raises(InferenceError, match=r"board_size 10 .*board_size 8"):
        server.start()
    assert server.slot_names == []


def test_a_server_sized_by_its_factory_and_refusing_a_disagreement():
    sized = SizedRolloutFactory(6)
    assert InferenceServer(sized, num_clients=1).board_size == 6
    assert InferenceServer(functools.partial(RolloutEvaluator), num_clients=1).board_size == 8
    with pytest.raises(ValueError, match=r"board_size 10 .*board_size 6"):
        InferenceServer(sized, num_clients=1, board_size=10)


@pytest.fixture(scope="module")
def pooled_model_path(tmp_path_factory):
    """A tiny network with the pooled value head (it runs on every size), as a checkpoint."""
    torch = pytest.importorskip("torch")
    from amazons.neural.checkpoint import save_model
    from amazons.neural.model import PolicyValueNet, net_config

    torch.manual_seed(0)
    model = PolicyValueNet(net_config("tiny", value_head="pooled"))
    return save_model(tmp_path_factory.mktemp("pooled") / "pooled.pt", model)


# The server's process and this one run the same prepared model on the same batch with one
# torch thread each: the same float operations in the same order. The bound leaves each prior
# and value a few ulps (8 roundings of float32) should a kernel take another path for a buffer
# aligned differently.
SERVED_TOLERANCE = rounding_tolerance(8)
# The native forward pass and torch's sum a tiny network's convolutions (at most 32 channels x 9
# taps, 2 blocks) in different orders and the native one through Winograd transforms: each
# output may differ by a few hundred float32 roundings relative to its magnitude.
NATIVE_RTOL = rounding_tolerance(512)


def test_a_10x10_search_served_by_a_pooled_network_in_a_real_server(pooled_model_path):
    from amazons.neural.served import NetworkEvaluatorFactory, load_network_evaluator

    factory = NetworkEvaluatorFactory(str(pooled_model_path), device="cpu", dtype="fp32",
                                      backend="torch", board_size=10)
    local = load_network_evaluator(pooled_model_path, "cpu", "fp32", backend="torch",
                                   board_size=10)
    assert local.board_size == 10
    root = start_position(10)
    with InferenceServer(factory, num_clients=1) as server:
        assert server.board_size == 10
        client = InferenceClient(server.handle(0))
        try:
            search = BatchedSearch(client, SearchConfig(simulations=24, leaves_per_game=4),
                                   num_games=2, seed=0)
            assert search.size == 10
            search.set_roots(np.stack([root, root]))
            assert search.search().simulations == 48
            for game in range(2):
                result = search.root_result(game)
                assert result.visits.sum() == 24
                replay(root, result.principal_variation, 10)
            positions = np.stack([root, *(replay(root, result.principal_variation[:plies], 10)
                                          for plies in (1, 2))])
            moves, offsets = engine.legal_moves(positions, size=10)
            served = client.evaluate(positions, moves, offsets)
        finally:
            client.close()
    expected = local.evaluate(positions, moves, offsets)
    assert_close(served[0], expected[0], atol=SERVED_TOLERANCE, what="priors")
    assert_close(served[1], expected[1], atol=SERVED_TOLERANCE, what="values")


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_a_flat_network_is_refused_on_10x10_naming_the_value_head(tmp_path, backend):
    """On a CPU "auto" would take the native evaluator, which refuses a flat head off 8x8, so
    torch is chosen and refuses it by name."""
    torch = pytest.importorskip("torch")
    from amazons.neural.checkpoint import save_model
    from amazons.neural.model import NetInputError, PolicyValueNet, net_config
    from amazons.neural.served import load_network_evaluator

    torch.manual_seed(0)
    path = save_model(tmp_path / "flat.pt", PolicyValueNet(net_config("tiny")))
    assert load_network_evaluator(path, "cpu", "fp32", backend=backend).board_size == 8
    with pytest.raises(NetInputError, match=r"10x10: the flat value head"):
        load_network_evaluator(path, "cpu", "fp32", backend=backend, board_size=10)


def test_the_native_evaluator_serves_a_pooled_network_on_10x10(pooled_model_path):
    from amazons.neural.native import native_available
    from amazons.neural.served import NativeReloadableEvaluator, load_network_evaluator

    if not native_available():
        pytest.skip("the native extension is not built")
    evaluator = load_network_evaluator(pooled_model_path, "cpu", "fp32", backend="native",
                                       board_size=10)
    assert isinstance(evaluator, NativeReloadableEvaluator) and evaluator.board_size == 10
    assert BatchedSearch(evaluator).size == 10
    positions = start_position(10).reshape(1, 6)
    moves, offsets = engine.legal_moves(positions, size=10)
    priors, values = evaluator.evaluate(positions, moves, offsets)
    torch_priors, torch_values = load_network_evaluator(
        pooled_model_path, "cpu", "fp32", backend="torch", board_size=10).evaluate(
            positions, moves, offsets)
    assert_close(priors, torch_priors, rtol=NATIVE_RTOL, atol=NATIVE_RTOL / len(moves),
                 what="native priors")
    assert_close(values, torch_values, atol=NATIVE_RTOL, what="native values")


def test_a_bucketed_10x10_evaluator_pads_with_empty_10x10_boards(pooled_model_path):
    """Batches padded to a bucket (empty boards of the size, their outputs dropped) give what the
    unpadded batch gives."""
    from amazons.neural.checkpoint import load_model_for_play
    from amazons.neural.cuda_graphs import NetworkEvaluator, batch_buckets
    from amazons.neural.model import prepare_for_inference

    model = prepare_for_inference(load_model_for_play(pooled_model_path, "cpu"))
    root = start_position(10)
    positions = np.stack([root, *(replay(root, np.array([move]), 10) for move in
                                  sorted(legal_set(root, 10))[:4])])
    moves, offsets = engine.legal_moves(positions, size=10)
    plain = NetworkEvaluator(model, 7, board_size=10)
    bucketed = NetworkEvaluator(model, 7, batch_buckets=batch_buckets(8), board_size=10)
    assert [size for _, _, size in bucketed._chunks(5)] == [8]
    expected = plain.evaluate(positions, moves, offsets)
    # Rows of one batch are independent in eval mode, but a batch of 8 may run other kernels than
    # one of 5 (another blocking of the same sums over at most 32 channels x 9 taps): each output
    # within 64 float32 roundings of its magnitude.
    tolerance = rounding_tolerance(64)
    for actual, wanted, what in zip(bucketed.evaluate(positions, moves, offsets), expected,
                                    ("priors", "values"), strict=True):
        assert_close(actual, wanted, rtol=tolerance, atol=tolerance / len(moves), what=what)


def test_the_ownership_map_of_a_10x10_evaluator_has_a_square_each():
    torch = pytest.importorskip("torch")
    from amazons.neural.cuda_graphs import NetworkEvaluator
    from amazons.neural.model import PolicyValueNet, net_config

    torch.manual_seed(0)
    model = PolicyValueNet(net_config("tiny", value_head="pooled", ownership_head=True))
    evaluator = NetworkEvaluator(model, 7, board_size=10)
    ownership = evaluator.ownership(np.stack([start_position(10)] * 3))
    assert ownership.shape == (3, 100) and np.all(np.abs(ownership) <= 1.0)
    assert evaluator.ownership(np.zeros((0, 6), np.uint64)).shape == (0, 100)
