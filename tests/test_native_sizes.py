"""The native evaluator on every board size (issue 51): N x N for N in 6..10.

Its feature planes are held to the engine's `features(size=N)` and to a ray-walking oracle
written here, its outputs to `amazons.neural.numpy_net` for small networks with the pooled value
head (both kernels on 6x6, 8x8 and 10x10: the 10x10 Winograd convolution has 3 x 3 tiles, the
6x6 one cuts its outputs; other widths and the factorized head on 7, 9 and 10), and a network
with the flat value head is refused on any size but 8. Positions are random placements of four
amazons a side and some arrows, in the board-size contract's rows of 3 * W words; their moves
are the engine's legal moves.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from floats import assert_close, rounding_tolerance
from test_npnet import random_model

from amazons import engine
from amazons.evaluator import EvaluatorInputError
from amazons.neural import numpy_net as npnet
from amazons.neural.native import NativeEvaluator, NativeUnavailableError, native_available
from amazons.neural.served import numpy_net

pytestmark = pytest.mark.skipif(not native_available(),
                                reason="the extension amazons._native is not built")

torch.set_num_threads(1)

SIZES = (6, 7, 8, 9, 10)
DIRECTIONS = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx or dy]


def words(size: int) -> int:
    return 1 if size * size <= 64 else 2


def row_of(boards: tuple[set, set, set], size: int) -> np.ndarray:
    """The contract's row of 3 * W words of three sets of squares (mine, theirs, arrows)."""
    width = words(size)
    row = np.zeros(3 * width, np.uint64)
    for k, squares in enumerate(boards):
        for square in squares:
            row[k * width + square // 64] |= np.uint64(1 << (square % 64))
    return row


def reach(square: int, blocked: set, size: int) -> set:
    """The squares a queen on `square` reaches, `blocked` in the way (the oracle)."""
    out = set()
    for dx, dy in DIRECTIONS:
        x, y = square % size + dx, square // size + dy
        while 0 <= x < size and 0 <= y < size and y * size + x not in blocked:
            out.add(y * size + x)
            x, y = x + dx, y + dy
    return out


def oracle_planes(mine: set, theirs: set, arrows: set, size: int, planes: int) -> np.ndarray:
    """amazons.engine.features' planes by walking rays: mine, theirs, arrows (3) or mine,
    theirs, occupied, each side's mobility and shoot potential (7)."""
    occupied = mine | theirs | arrows
    boards = [mine, theirs, arrows if planes == 3 else occupied]
    if planes == 7:
        mobility = [set().union(*(reach(s, occupied, size) for s in side))
                    for side in (mine, theirs)]
        shoot = [set().union(*(reach(d, occupied - {s}, size) for s in side
                               for d in reach(s, occupied, size))) for side in (mine, theirs)]
        boards += [*mobility, *shoot]
    out = np.zeros((planes, size * size), np.float32)
    for k, squares in enumerate(boards):
        out[k, sorted(squares)] = 1.0
    return out.reshape(planes, size, size)


def oracle_moves(mine: set, theirs: set, arrows: set, size: int) -> list[tuple[int, int, int]]:
    occupied = mine | theirs | arrows
    return [(src, dst, arrow) for src in sorted(mine) for dst in sorted(reach(src, occupied, size))
            for arrow in sorted(reach(dst, occupied - {src}, size))]


def random_boards(size: int, count: int, seed: int) -> list[tuple[set, set, set]]:
    """Four amazons a side on random squares and 0 to half the board of arrows; every side
    to move has a move."""
    rng = np.random.default_rng(seed)
    boards = []
    while len(boards) < count:
        squares = rng.permutation(size * size)
        arrows = int(rng.integers(0, size * size // 2))
        mine, theirs = set(squares[:4].tolist()), set(squares[4:8].tolist())
        board = (mine, theirs, set(squares[8:8 + arrows].tolist()))
        if oracle_moves(*board, size):
            boards.append(board)
    return boards


def batch_of(size: int, count: int, seed: int):
    """(boards, positions (B, 3W) uint64, moves (M, 3) int32, offsets (B + 1,) int64)."""
    boards = random_boards(size, count, seed)
    positions = np.stack([row_of(board, size) for board in boards])
    moves, offsets = engine.legal_moves(positions, size=size)
    return boards, positions, moves, offsets


def forward_roundings(config: dict, squares: int) -> int:
    """Roundings in the longest chain of sums of one output (Higham's gamma_n, as
    tests/test_growth.py counts them): the trunk's convolutions and attention, then the longer
    of the policy head's products and its softmaxes over the squares, and the pooled value head
    (its mean over the squares); the native core and numpy sum in other orders."""
    tree = math.ceil(math.log2(squares * squares))
    trunk = 9 * config["num_planes"] + config["blocks"] * 2 * 9 * config["channels"]
    trunk += config["attention_blocks"] * (config["channels"] + config["attention_dim"]
                                           + 2 * squares)
    value = config["channels"] + config["value_hidden"] + squares + 3 * config["value_channels"]
    policy = 4 * config["channels"] + 4 * config["head_dim"] + 2 * tree
    return trunk + max(value, policy)


@pytest.fixture(scope="module")
def pooled_net() -> npnet.NumpyNet:
    """A `tiny` network with the pooled value head, the arrow source term and attention."""
    return numpy_net(random_model("tiny", "joint", seed=3, value_head="pooled", arrow_source=True))


# ------------------------------------------------------------------------------------------------
# Feature planes and positions


@pytest.mark.parametrize("size", SIZES)
def test_feature_planes_match_the_oracle(size):
    from amazons import _native

    for board in random_boards(size, 12, seed=size):
        row = row_of(board, size)
        for planes in (3, 7):
            want = oracle_planes(*board, size, planes)
            np.testing.assert_array_equal(_native.board_feature_planes(row, planes, size), want)


@pytest.mark.parametrize("size", SIZES)
def test_feature_planes_match_the_engine(size):
    from amazons import _native

    _, positions, _, _ = batch_of(size, 12, seed=10 + size)
    for planes in (3, 7):
        want = engine.features(positions, planes, size=size)
        for index, row in enumerate(positions):
            np.testing.assert_array_equal(_native.board_feature_planes(row, planes, size),
                                          want[index])


@pytest.mark.parametrize(("size", "square"), [(6, 36), (7, 50), (9, 81), (10, 100), (10, 127)])
def test_a_piece_off_the_board_is_refused(pooled_net, size, square):
    from amazons import _native

    boards = random_boards(size, 1, seed=1)[0]
    row = row_of((boards[0], boards[1], boards[2] | {square}), size)
    with pytest.raises(ValueError, match=f"off the {size}x{size} board"):
        _native.board_feature_planes(row, 7, size)
    evaluator = NativeEvaluator(pooled_net, board_size=size)
    with pytest.raises(ValueError, match=f"position 0: a piece stands off the {size}x{size}"):
        evaluator.evaluate(row[None, :], np.zeros((0, 3), np.int32), np.zeros(2, np.int64))


# ------------------------------------------------------------------------------------------------
# The network


# Widths beside the tiny preset's 32 channels: 24 takes the Winograd products' blocks of 16 and
# 8, 20 the portable convolution; the factorized head and 3 planes.
OTHER_WIDTHS = [
    pytest.param({"channels": 24, "head_dim": 8}, id="c24"),
    pytest.param({"channels": 20, "head_dim": 12, "num_planes": 3, "policy_head": "factorized"},
                 id="c20-factorized-3planes"),
]


def assert_matches_npnet(net: npnet.NumpyNet, size: int, kernels: str, seed: int) -> None:
    planes = net.config["num_planes"]
    boards, positions, moves, offsets = batch_of(size, 24, seed=seed)
    features = np.stack([oracle_planes(*board, size, planes) for board in boards])
    tables, values = net.forward(features)
    want_priors = npnet.legal_priors(tables, moves, offsets)
    priors, got_values = NativeEvaluator(net, kernels=kernels, board_size=size).evaluate(
        positions, moves, offsets)
    # values and priors are at most 1: the roundings' bound is absolute
    tolerance = rounding_tolerance(forward_roundings(net.config, size * size))
    assert_close(got_values, values, atol=tolerance, what=f"{size}x{size} values")
    assert_close(priors, want_priors, atol=tolerance, what=f"{size}x{size} priors")
    assert np.ptp(values) > 0.02 and priors.max() * np.diff(offsets).max() > 2.0  # can fail


@pytest.mark.parametrize("size", (6, 8, 10))
@pytest.mark.parametrize("kernels", ("auto", "portable"))
def test_a_pooled_network_matches_npnet_on_every_size(pooled_net, size, kernels):
    assert_matches_npnet(pooled_net, size, kernels, seed=20 + size)


@pytest.mark.parametrize("size", (7, 9, 10))
@pytest.mark.parametrize("overrides", OTHER_WIDTHS)
def test_pooled_networks_of_other_widths_match_npnet(size, overrides):
    fields = dict(overrides)
    head = fields.pop("policy_head", "joint")
    # seed 6: values spread on every size for both widths
    net = numpy_net(random_model("tiny", head, seed=6, value_head="pooled", **fields))
    assert_matches_npnet(net, size, "auto", seed=30 + size)


def test_a_flat_network_is_refused_on_every_size_but_8(pooled_net):
    flat = numpy_net(random_model("tiny", "joint", seed=3))
    _, positions, moves, offsets = batch_of(10, 2, seed=5)
    for size in (6, 7, 9, 10):
        with pytest.raises(NativeUnavailableError, match="flat value head .* 8x8 only"):
            NativeEvaluator(flat, board_size=size)
    evaluator = NativeEvaluator(flat)
    with pytest.raises(ValueError, match="board size 10: the flat value head runs on 8x8 only"):
        evaluator._core.evaluate(positions, moves, offsets, np.empty(len(moves), np.float32),
                                 np.empty(2, np.float32), 1, 10)
    with pytest.raises(ValueError, match="board_size must be one of"):
        NativeEvaluator(pooled_net, board_size=11)


def test_a_batch_of_another_size_is_refused(pooled_net):
    _, positions, moves, offsets = batch_of(10, 3, seed=6)
    evaluator = NativeEvaluator(pooled_net, board_size=10)
    with pytest.raises(EvaluatorInputError, match=r"\(B, 6\) uint64"):
        evaluator.evaluate(positions[:, :3].copy(), moves, offsets)
    with pytest.raises(EvaluatorInputError, match="squares 0..99"):
        evaluator.evaluate(positions, moves + 100, offsets)
    foreign = moves.copy()
    foreign[0, 0] = next(iter(random_boards(10, 1, seed=6)[0][1]))  # not the mover's amazon
    with pytest.raises(ValueError, match="position 0, move 0"):
        evaluator.evaluate(positions, foreign, offsets)


def test_threads_split_a_10x10_batch_without_changing_it(pooled_net):
    _, positions, moves, offsets = batch_of(10, 9, seed=7)
    one = NativeEvaluator(pooled_net, board_size=10).evaluate(positions, moves, offsets)
    got = NativeEvaluator(pooled_net, threads=3, board_size=10).evaluate(positions, moves, offsets)
    np.testing.assert_array_equal(got[0], one[0])  # the same binary on the same input
    np.testing.assert_array_equal(got[1], one[1])


def test_the_ownership_map_is_of_the_evaluators_size():
    net = numpy_net(random_model("tiny", "joint", seed=5, value_head="pooled",
                                 ownership_head=True))
    _, positions, _, _ = batch_of(10, 3, seed=8)
    ownership = NativeEvaluator(net, board_size=10).ownership(positions)
    assert ownership.shape == (3, 100) and np.all(np.abs(ownership) <= 1.0)
    with pytest.raises(EvaluatorInputError, match=r"\(B, 6\) uint64"):
        NativeEvaluator(net, board_size=10).ownership(positions[:, :3].copy())
