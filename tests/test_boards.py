"""Boards as data (`amazons.boards`) and the symmetries on every size (`amazons.symmetry`).

The symmetries are checked against a naive `(x, y)` map of each of the 8 transforms, written here
independently of `symmetry_tables`, on every size 6..10; positions of more than 64 squares use
two words a bitboard.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amazons.boards import (
    BLACK,
    BOARDS,
    WHITE,
    BoardSpec,
    NotationError,
    board_spec,
    default_start,
    format_position,
    parse_position,
    parse_square,
    square_name,
)
from amazons.symmetry import (
    NUM_SYMMETRIES,
    SYMMETRY_NAMES,
    SymmetryError,
    canonical_to_real,
    position_words,
    symmetry_tables,
    transform_moves,
    transform_pair_labels,
    transform_positions,
    transform_square_labels,
)

SIZES = (6, 7, 8, 9, 10)
sizes = st.sampled_from(SIZES)
symmetry_indices = st.integers(0, NUM_SYMMETRIES - 1)

# The 8 maps of the square, (x, y) -> (x', y') with m = N - 1, by name.
NAIVE = {
    "identity": lambda x, y, m: (x, y),
    "rotate90": lambda x, y, m: (m - y, x),
    "rotate180": lambda x, y, m: (m - x, m - y),
    "rotate270": lambda x, y, m: (y, m - x),
    "flip_x": lambda x, y, m: (m - x, y),
    "flip_y": lambda x, y, m: (x, m - y),
    "transpose": lambda x, y, m: (y, x),
    "anti_transpose": lambda x, y, m: (m - y, m - x),
}


def naive_square(square: int, k: int, size: int) -> int:
    x, y = NAIVE[SYMMETRY_NAMES[k]](square % size, square // size, size - 1)
    return y * size + x


def to_words(board: int, words: int) -> list[int]:
    return [(board >> (64 * word)) & (2**64 - 1) for word in range(words)]


def from_words(row: np.ndarray) -> int:
    return sum(int(word) << (64 * index) for index, word in enumerate(row))


@st.composite
def sized_positions(draw):
    """A size and a batch of random disjoint (mine, theirs, arrows) square sets, as Python ints
    and as the `(B, 3 * W) uint64` rows of the board-size contract."""
    size = draw(sizes)
    words = position_words(size)
    rows, sets = [], []
    for _ in range(draw(st.integers(1, 4))):
        squares = draw(st.permutations(range(size * size)))
        mine, theirs = squares[:4], squares[4:8]
        arrows = squares[8 : 8 + draw(st.integers(0, size * size - 8))]
        parts = [sum(1 << s for s in part) for part in (mine, theirs, arrows)]
        sets.append(parts)
        rows.append([word for part in parts for word in to_words(part, words)])
    return size, sets, np.array(rows, dtype=np.uint64)


# ---------------------------------------------------------------------------------------------
# symmetries on every size
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES)
def test_tables_are_the_eight_naive_maps(size: int) -> None:
    table, inverse, sources = symmetry_tables(size)
    squares = np.arange(size * size)
    assert table.shape == (8, size * size) and not table.flags.writeable
    for k in range(NUM_SYMMETRIES):
        assert table[k].tolist() == [naive_square(s, k, size) for s in squares]
        assert sorted(table[k].tolist()) == squares.tolist(), "a symmetry is a permutation"
        assert (table[inverse[k]][table[k]] == squares).all(), "inverse[k] undoes k"
        assert (sources[k] == table[inverse[k]]).all()


@settings(max_examples=60, deadline=None)
@given(sized_positions(), symmetry_indices)
def test_positions_move_bit_by_bit(case, k: int) -> None:
    size, sets, rows = case
    words = position_words(size)
    moved = transform_positions(rows, k, size=size)
    assert moved.shape == rows.shape and moved.dtype == np.uint64
    for row, parts in zip(moved, sets, strict=True):
        for index, part in enumerate(parts):
            expected = sum(1 << naive_square(s, k, size)
                           for s in range(size * size) if (part >> s) & 1)
            assert from_words(row[index * words : (index + 1) * words]) == expected
    back = transform_positions(moved, symmetry_tables(size)[1][k], size=size)
    assert (back == rows).all()


@settings(max_examples=40, deadline=None)
@given(sized_positions(), st.data())
def test_per_row_indices_equal_one_call_per_row(case, data) -> None:
    size, _, rows = case
    ks = np.array(data.draw(st.lists(symmetry_indices, min_size=len(rows), max_size=len(rows))))
    together = transform_positions(rows, ks, size=size)
    for row, k, result in zip(rows, ks, together, strict=True):
        assert (transform_positions(row[None], int(k), size=size)[0] == result).all()


@settings(max_examples=40, deadline=None)
@given(sizes, symmetry_indices, st.data())
def test_moves_and_labels_follow_the_squares(size: int, k: int, data) -> None:
    n = size * size
    moves = np.array(data.draw(st.lists(st.tuples(*[st.integers(0, n - 1)] * 3), min_size=1,
                                        max_size=5)), dtype=np.int32)
    moved = transform_moves(moves, k, size=size)
    assert moved.dtype == np.int32
    assert moved.tolist() == [[naive_square(int(s), k, size) for s in move] for move in moves]
    labels = np.arange(n, dtype=np.float32)
    out = transform_square_labels(labels, k)
    assert all(out[naive_square(s, k, size)] == labels[s] for s in range(n))
    pairs = np.arange(n * n, dtype=np.float32).reshape(n, n)
    out_pairs = transform_pair_labels(pairs, k)
    a, b = moves[0, 0], moves[0, 1]
    assert out_pairs[naive_square(a, k, size), naive_square(b, k, size)] == pairs[a, b]


@pytest.mark.parametrize("size", SIZES)
def test_canonical_and_real_moves_rotate_by_half_a_turn(size: int) -> None:
    moves = np.array([[0, 1, size * size - 1], [size, 2 * size + 3, 5]], dtype=np.int32)
    real = canonical_to_real(moves, WHITE, size)
    rotate = SYMMETRY_NAMES.index("rotate180")
    assert (real == transform_moves(moves, rotate, size=size)).all()
    assert (canonical_to_real(real, WHITE, size) == moves).all()
    assert (canonical_to_real(moves, BLACK, size) == moves).all()


def test_sizes_and_shapes_are_checked() -> None:
    with pytest.raises(SymmetryError, match="board size"):
        symmetry_tables(11)
    with pytest.raises(SymmetryError, match=r"\(B, 6\) uint64"):
        transform_positions(np.zeros((2, 3), np.uint64), 1, size=10)
    with pytest.raises(SymmetryError, match="N\\*N axis"):
        transform_square_labels(np.zeros(50), 1)
    with pytest.raises(SymmetryError, match="board size"):
        canonical_to_real(np.zeros((1, 3), np.int32), WHITE, 5)


# ---------------------------------------------------------------------------------------------
# boards as data
# ---------------------------------------------------------------------------------------------

def test_named_starts() -> None:
    standard = board_spec("standard10")
    assert standard.size == 10 and standard.first == WHITE and standard.words == 2
    assert [square_name(s, 10) for s in standard.white] == ["a4", "j4", "d1", "g1"]
    assert [square_name(s, 10) for s in standard.black] == ["d10", "g10", "a7", "j7"]
    assert standard.max_game_plies == 92
    botzone = board_spec(None)
    assert botzone is BOARDS["botzone8"] and botzone.first == BLACK
    assert botzone.position_string() == "2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 0"
    assert botzone.max_game_plies == 56
    assert board_spec("openspiel6").position_string() == "1B2B1/B4B/6/6/W4W/1W2W1 w 0"
    assert default_start(10) is standard and default_start(9) is None


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_a_spec_round_trips_through_its_forms(name: str) -> None:
    spec = BOARDS[name]
    assert board_spec(spec.to_dict()) is spec
    user = board_spec(spec.position_string().rsplit(" ", 1)[0])
    assert user.same_start(spec) and user.name == ""
    assert board_spec(user.to_dict()) == user


def test_squares_are_named_with_a1_at_the_bottom_left() -> None:
    assert square_name(0) == "a8" and square_name(63) == "h1"
    assert square_name(0, 10) == "a10" and square_name(99, 10) == "j1"
    for size in SIZES:
        for square in range(size * size):
            assert parse_square(square_name(square, size), size) == square
    with pytest.raises(NotationError, match="file a-h and a rank 1-8"):
        parse_square("j10")
    with pytest.raises(NotationError, match="file a-j and a rank 1-10"):
        parse_square("k1", 10)


def test_position_strings_with_runs_of_ten() -> None:
    text = "3B2B3/10/10/B8B/10/10/W8W/10/10/3W2W3 w 0"
    parsed = parse_position(text)
    assert parsed.size == 10 and parsed.turn == WHITE
    assert format_position(10, parsed.black, parsed.white, parsed.arrows, parsed.turn,
                           parsed.ply) == text


@pytest.mark.parametrize("text, words", [
    ("bogus", "unknown board 'bogus'"),
    ("2B2B2/8/B6B/8/8/W6W/8/2W2W1 b", "covers 7 squares, expected 8"),
    ("2B2B2/8/B6B/8/8/W6W/8/2W2x2 b", "holds no arrows"),
    ("2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 3", "at ply 0"),
    ("2B2B2/8/B6B/8/8/W6W/8/2W5 b", "4 white amazons"),
    ("BBBBB3/8/8/8/8/8/8/WWWW4 b", "5 black amazons"),
    ("4/4/4/4 b", "expected a board of 6..10 rows"),
    ("2B2B2/8/B6B/8/8/W6W/8/2W2W2 q", "bad side to move 'q'"),
    ("2B2B2/8/B6B/8/8/W6W/8/2W2W?2 b", "unexpected '\\?'"),
])
def test_bad_starts_are_refused_by_name(text: str, words: str) -> None:
    with pytest.raises(NotationError, match=words):
        board_spec(text)


def test_bad_specs_are_refused_by_name() -> None:
    with pytest.raises(NotationError, match="share a1"):
        BoardSpec(8, (56, 1, 2, 3), (56, 60, 61, 62), BLACK)
    with pytest.raises(NotationError, match="off the 6x6 board"):
        BoardSpec(6, (0, 1, 2, 40), (10, 11, 12, 13), BLACK)
    with pytest.raises(NotationError, match="board size"):
        BoardSpec(11, (0, 1, 2, 3), (10, 11, 12, 13), BLACK)
    mapping = BOARDS["standard10"].to_dict() | {"first": "black"}
    with pytest.raises(NotationError, match="does not have the start"):
        board_spec(mapping)
    with pytest.raises(NotationError, match="'size' is missing"):
        board_spec({"black": [], "white": [], "first": "black"})
