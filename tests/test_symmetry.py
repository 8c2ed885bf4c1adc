"""Canonical form and the 8 symmetries (`amazons.symmetry`), against the oracle's geometry.

The oracle knows the 8 symmetries only as maps on `(x, y)`; each row of `SYMMETRIES` must be
exactly one of them, and everything else (positions, moves, labels, legal-move sets) is checked
against that naive map.
"""

from __future__ import annotations

import numpy as np
import oracle
import pytest
from conftest import game_positions, sample_positions
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from amazons import engine
from amazons.board import Board
from amazons.symmetry import (
    BLACK,
    INVERSE,
    NUM_SYMMETRIES,
    SYMMETRIES,
    WHITE,
    SymmetryError,
    canonical_to_real,
    real_to_canonical,
    transform_moves,
    transform_pair_labels,
    transform_positions,
    transform_square_labels,
)

symmetry_indices = st.integers(min_value=0, max_value=NUM_SYMMETRIES - 1)
batch_sizes = st.integers(min_value=1, max_value=6)


def naive_transform(k: int):
    """The oracle's `(x, y)` map that `SYMMETRIES[k]` is, found by comparing every square."""
    matches = [
        transform
        for transform in oracle.D4_TRANSFORMS.values()
        if all(
            SYMMETRIES[k, square] == oracle.square_index(transform(*oracle.square_at(square)))
            for square in range(64)
        )
    ]
    assert len(matches) == 1, f"SYMMETRIES[{k}] is not one of the 8 symmetries of the square"
    return matches[0]


def naive_position(position: np.ndarray, k: int) -> np.ndarray:
    transform = naive_transform(k)
    return oracle.triple_array(
        *(oracle.map_squares(transform, part) for part in oracle.triple_of(position))
    )


def moves_array(draw, count: int) -> np.ndarray:
    return draw(hnp.arrays(np.int32, (count, 3), elements=st.integers(0, 63)))


@pytest.fixture(scope="module")
def some_positions() -> np.ndarray:
    """About 60 canonical positions from fixed random games, built by the oracle."""
    positions = sample_positions(step=5)
    return np.stack([oracle.triple_array(*position.canonical()) for position in positions])


# ---------------------------------------------------------------------------------------------
# the tables
# ---------------------------------------------------------------------------------------------

def test_symmetries_are_the_eight_maps_of_the_square() -> None:
    assert SYMMETRIES.shape == (8, 64) and SYMMETRIES.dtype == np.int64
    assert (SYMMETRIES[0] == np.arange(64)).all(), "transform 0 must be the identity"
    found = [naive_transform(k) for k in range(NUM_SYMMETRIES)]
    assert len({id(transform) for transform in found}) == NUM_SYMMETRIES


def test_inverse_undoes_each_symmetry() -> None:
    assert INVERSE.shape == (8,)
    for k in range(NUM_SYMMETRIES):
        assert (SYMMETRIES[INVERSE[k]][SYMMETRIES[k]] == np.arange(64)).all()
        assert (SYMMETRIES[k][SYMMETRIES[INVERSE[k]]] == np.arange(64)).all()


# ---------------------------------------------------------------------------------------------
# canonical <-> real
# ---------------------------------------------------------------------------------------------

@given(st.data(), st.sampled_from([BLACK, WHITE]))
def test_canonical_to_real_is_an_involution(data, turn: int) -> None:
    moves = moves_array(data.draw, data.draw(st.integers(0, 20)))
    real = canonical_to_real(moves, turn)
    assert real.dtype == moves.dtype and real.shape == moves.shape
    np.testing.assert_array_equal(real_to_canonical(real, turn), moves)
    np.testing.assert_array_equal(canonical_to_real(real, turn), moves)
    expected = [
        oracle.move_indices(
            oracle.map_move(oracle.D4_TRANSFORMS["rotate_half"], oracle.move_from_indices(row))
        )
        if turn == WHITE
        else tuple(row)
        for row in moves.tolist()
    ]
    assert [tuple(row) for row in real.tolist()] == expected


@given(game_positions())
def test_canonical_moves_are_the_real_legal_moves_mapped(position: oracle.Position) -> None:
    board = Board(position.position_string(0))
    canonical = board.canonical_position()
    assert oracle.triple_of(canonical) == position.canonical()
    canonical_moves, _ = engine.legal_moves(canonical)
    real_moves = board.legal_move_array()
    expected_real = oracle.move_index_set(position.legal_moves())
    assert oracle.rows_as_set(real_moves) == expected_real
    assert oracle.rows_as_set(canonical_to_real(canonical_moves, position.turn)) == expected_real
    assert oracle.rows_as_set(board.canonical_to_real(canonical_moves)) == expected_real
    assert oracle.rows_as_set(board.real_to_canonical(real_moves)) == oracle.rows_as_set(
        canonical_moves
    )
    assert oracle.rows_as_set(real_to_canonical(real_moves, position.turn)) == (
        oracle.move_index_set(position.canonical_legal_moves())
    )


def test_canonical_frame_of_white_is_the_half_turn(positions_sample) -> None:
    half_turn = next(
        k for k in range(8) if naive_transform(k) is oracle.D4_TRANSFORMS["rotate_half"]
    )
    for position in positions_sample[:40]:
        board = Board(position.position_string(0))
        black, white, arrows = board.bitboards()
        real = np.array([[black, white, arrows]], dtype=np.uint64)
        if position.turn == WHITE:
            rotated = transform_positions(real, half_turn)[0]
            expected = rotated[[1, 0, 2]]
        else:
            expected = real[0]
        np.testing.assert_array_equal(board.canonical_position(), expected)


# ---------------------------------------------------------------------------------------------
# symmetries and the rules
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", range(NUM_SYMMETRIES))
def test_symmetry_maps_legal_move_sets_onto_legal_move_sets(some_positions, k: int) -> None:
    transformed = transform_positions(some_positions, k)
    assert transformed.dtype == np.uint64 and transformed.shape == some_positions.shape
    transform = naive_transform(k)
    moves, offsets = engine.legal_moves(some_positions)
    image_moves, image_offsets = engine.legal_moves(transformed)
    mapped = transform_moves(moves, k)
    assert mapped.dtype == np.int32
    for index, position in enumerate(some_positions):
        np.testing.assert_array_equal(transformed[index], naive_position(position, k))
        expected = oracle.rows_as_set(mapped[offsets[index] : offsets[index + 1]])
        actual = oracle.rows_as_set(image_moves[image_offsets[index] : image_offsets[index + 1]])
        assert actual == expected, f"position {index}"
        if index % 10 == 0:  # the oracle agrees that the rules are symmetric
            triple = oracle.triple_of(position)
            image = tuple(oracle.map_squares(transform, part) for part in triple)
            oracle_image_moves = oracle.move_index_set(oracle.legal_moves(*image))
            assert oracle_image_moves == actual
            assert {
                oracle.move_indices(oracle.map_move(transform, move))
                for move in oracle.legal_moves(*triple)
            } == actual


@pytest.mark.parametrize("k", range(NUM_SYMMETRIES))
def test_features_are_equivariant(some_positions, k: int) -> None:
    planes = engine.features(some_positions).reshape(len(some_positions), 7, 64)
    image_planes = engine.features(transform_positions(some_positions, k)).reshape(
        len(some_positions), 7, 64
    )
    np.testing.assert_array_equal(transform_square_labels(planes, k), image_planes)


@given(st.data(), symmetry_indices)
def test_transform_moves_matches_naive_map(data, k: int) -> None:
    moves = moves_array(data.draw, data.draw(st.integers(0, 10)))
    transform = naive_transform(k)
    expected = [
        oracle.move_indices(oracle.map_move(transform, oracle.move_from_indices(row)))
        for row in moves.tolist()
    ]
    assert [tuple(row) for row in transform_moves(moves, k).tolist()] == expected


# ---------------------------------------------------------------------------------------------
# labels
# ---------------------------------------------------------------------------------------------

@given(st.data(), symmetry_indices)
def test_square_labels_move_with_the_board(data, k: int) -> None:
    labels = data.draw(hnp.arrays(np.float32, (2, 64), elements=st.floats(-4, 4, width=32)))
    out = transform_square_labels(labels, k)
    expected = np.empty_like(labels)
    for square in range(64):
        expected[:, SYMMETRIES[k, square]] = labels[:, square]
    np.testing.assert_array_equal(out, expected)


@given(st.data(), symmetry_indices)
def test_pair_labels_move_with_the_board(data, k: int) -> None:
    labels = data.draw(hnp.arrays(np.int16, (64, 64), elements=st.integers(-50, 50)))
    out = transform_pair_labels(labels, k)
    expected = np.empty_like(labels)
    for a in range(64):
        for b in range(64):
            expected[SYMMETRIES[k, a], SYMMETRIES[k, b]] = labels[a, b]
    np.testing.assert_array_equal(out, expected)


@given(st.data(), symmetry_indices)
def test_one_hot_labels_follow_their_moves(data, k: int) -> None:
    (src, dst, arrow), = moves_array(data.draw, 1).tolist()
    mapped_src, mapped_dst, mapped_arrow = transform_moves(
        np.array([[src, dst, arrow]], np.int32), k
    )[0]
    source_map = np.zeros(64, np.float32)
    source_map[src] = 1
    assert int(np.argmax(transform_square_labels(source_map, k))) == mapped_src
    joint = np.zeros((64, 64), np.float32)
    joint[src, dst] = 1
    conditional = np.zeros((64, 64), np.float32)
    conditional[dst, arrow] = 1
    assert np.unravel_index(np.argmax(transform_pair_labels(joint, k)), (64, 64)) == (
        mapped_src,
        mapped_dst,
    )
    assert np.unravel_index(np.argmax(transform_pair_labels(conditional, k)), (64, 64)) == (
        mapped_dst,
        mapped_arrow,
    )


# ---------------------------------------------------------------------------------------------
# inverses and per-row indices
# ---------------------------------------------------------------------------------------------

@given(st.data(), batch_sizes, st.booleans())
def test_inverse_composition_is_the_identity(data, batch: int, per_row: bool) -> None:
    if per_row:
        k = np.array(
            data.draw(st.lists(symmetry_indices, min_size=batch, max_size=batch)), dtype=np.int64
        )
        k_inverse = INVERSE[k]
    else:
        k = data.draw(symmetry_indices)
        k_inverse = int(INVERSE[k])
    positions = data.draw(hnp.arrays(np.uint64, (batch, 3)))
    moves = moves_array(data.draw, batch)
    square_labels = data.draw(
        hnp.arrays(np.float32, (batch, 3, 64), elements=st.floats(-1, 1, width=32))
    )
    pair_labels = data.draw(
        hnp.arrays(np.float32, (batch, 64, 64), elements=st.floats(-1, 1, width=32))
    )
    np.testing.assert_array_equal(
        transform_positions(transform_positions(positions, k), k_inverse), positions
    )
    np.testing.assert_array_equal(transform_moves(transform_moves(moves, k), k_inverse), moves)
    np.testing.assert_array_equal(
        transform_square_labels(transform_square_labels(square_labels, k), k_inverse), square_labels
    )
    np.testing.assert_array_equal(
        transform_pair_labels(transform_pair_labels(pair_labels, k), k_inverse), pair_labels
    )


@given(st.data(), batch_sizes)
def test_per_row_indices_equal_a_per_sample_loop(data, batch: int) -> None:
    k = np.array(
        data.draw(st.lists(symmetry_indices, min_size=batch, max_size=batch)), dtype=np.int64
    )
    positions = data.draw(hnp.arrays(np.uint64, (batch, 3)))
    moves = moves_array(data.draw, batch)
    flat_labels = data.draw(
        hnp.arrays(np.float32, (batch, 64), elements=st.floats(-1, 1, width=32))
    )
    plane_labels = data.draw(
        hnp.arrays(np.float32, (batch, 2, 64), elements=st.floats(-1, 1, width=32))
    )
    pair_labels = data.draw(
        hnp.arrays(np.float32, (batch, 64, 64), elements=st.floats(-1, 1, width=32))
    )
    vectorized = (
        transform_positions(positions, k),
        transform_moves(moves, k),
        transform_square_labels(flat_labels, k),
        transform_square_labels(plane_labels, k),
        transform_pair_labels(pair_labels, k),
    )
    for row in range(batch):
        kk = int(k[row])
        np.testing.assert_array_equal(
            vectorized[0][row], transform_positions(positions[row : row + 1], kk)[0]
        )
        np.testing.assert_array_equal(vectorized[0][row], naive_position(positions[row], kk))
        np.testing.assert_array_equal(
            vectorized[1][row], transform_moves(moves[row : row + 1], kk)[0]
        )
        np.testing.assert_array_equal(
            vectorized[2][row], transform_square_labels(flat_labels[row], kk)
        )
        np.testing.assert_array_equal(
            vectorized[3][row], transform_square_labels(plane_labels[row], kk)
        )
        np.testing.assert_array_equal(
            vectorized[4][row], transform_pair_labels(pair_labels[row], kk)
        )


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "call",
    [
        lambda: transform_moves(np.zeros((2, 3), np.int32), 8),
        lambda: transform_moves(np.zeros((2, 3), np.int32), -1),
        lambda: transform_moves(np.zeros((2, 3), np.int32), 1.5),
        lambda: transform_moves(np.zeros((2, 3), np.int32), np.array([1, 2, 3])),
        lambda: transform_moves(np.zeros((2, 4), np.int32), 1),
        lambda: transform_moves(np.zeros(3, np.int32), 1),
        lambda: transform_positions(np.zeros((2, 3), np.int64), 1),
        lambda: transform_positions(np.zeros((2, 4), np.uint64), 1),
        lambda: transform_positions(np.zeros((2, 3), np.uint64), np.array([1])),
        lambda: transform_square_labels(np.zeros((2, 63)), 1),
        lambda: transform_square_labels(np.zeros((2, 64)), np.array([0, 1, 2])),
        lambda: transform_pair_labels(np.zeros((2, 64, 63)), 1),
        lambda: transform_pair_labels(np.zeros((2, 2, 64, 64)), np.array([0, 1])),
        lambda: canonical_to_real(np.zeros((2, 3), np.int32), 2),
    ],
)
def test_bad_input_raises_symmetry_error(call) -> None:
    with pytest.raises(SymmetryError):
        call()


def test_per_row_indices_with_one_dimensional_labels_raise_symmetry_error() -> None:
    with pytest.raises(SymmetryError):
        transform_square_labels(np.arange(64), np.array([1]))
