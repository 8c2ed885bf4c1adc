"""The checked batch API (`amazons.engine`) against the pure-Python oracle and the perft counts.

Every expected value comes from the oracle (`tests/oracle.py`) or from the published perft
counts in `shared/reference/AMAZONS.md`, never from the engine itself.
"""

from __future__ import annotations

import numpy as np
import oracle
import pytest
from conftest import game_positions, oracle_line, random_games
from hypothesis import given
from hypothesis import strategies as st

from amazons import engine
from amazons.engine import MAX_MOVES, EngineInputError

START_PERFT = {0: 1, 1: 1_232, 2: 1_331_198, 3: 1_358_441_750}


def canonical_array(position: oracle.Position) -> np.ndarray:
    """The oracle's canonical view of a real position as `(3,) uint64`."""
    return oracle.triple_array(*position.canonical())


def boxed_in_position() -> tuple[frozenset, frozenset, frozenset]:
    """A canonical triple whose side to move is walled in by arrows (terminal), opponent free."""
    mine = frozenset({(0, 0), (7, 0), (0, 7), (3, 3)})
    arrows = set()
    for amazon in mine:
        for dx, dy in oracle.DIRECTIONS:
            neighbour = (amazon[0] + dx, amazon[1] + dy)
            if oracle.on_board(neighbour):
                arrows.add(neighbour)
    theirs = frozenset({(6, 6), (5, 7), (7, 5), (5, 5)})
    return mine, theirs, frozenset(arrows - theirs)


# ---------------------------------------------------------------------------------------------
# perft
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_perft_from_start_matches_published_counts(depth: int) -> None:
    assert engine.perft_position(engine.start_position(), depth) == START_PERFT[depth]


def test_oracle_agrees_with_published_counts_at_depth_two() -> None:
    # Keeps the oracle honest: it is the reference for everything below.
    start = oracle.Position().canonical()
    assert oracle.perft(*start, 1) == START_PERFT[1]
    assert oracle.perft(*start, 2) == START_PERFT[2]


@given(game_positions(min_ply=30))
def test_perft_two_matches_oracle_late_in_games(position: oracle.Position) -> None:
    triple = position.canonical()
    assert engine.perft_position(oracle.triple_array(*triple), 1) == oracle.perft(*triple, 1)
    if oracle.perft(*triple, 1) < 200:
        assert engine.perft_position(oracle.triple_array(*triple), 2) == oracle.perft(*triple, 2)


def test_perft_of_a_terminal_position_is_zero_past_depth_zero() -> None:
    position = oracle.triple_array(*boxed_in_position())
    assert engine.perft_position(position, 0) == 1
    assert engine.perft_position(position, 1) == 0
    assert engine.perft_position(position, 2) == 0


def test_perft_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="depth"):
        engine.perft_position(engine.start_position(), -1)
    overlapping = np.array([1, 1, 0], dtype=np.uint64)
    with pytest.raises(ValueError, match="overlap"):
        engine.perft_position(overlapping, 1)
    with pytest.raises(EngineInputError, match="position"):
        engine.perft_position(np.zeros(3, dtype=np.int64), 1)


# ---------------------------------------------------------------------------------------------
# start position, move lists, counts, terminal flags
# ---------------------------------------------------------------------------------------------

def test_start_position_is_the_botzone_start() -> None:
    start = engine.start_position()
    assert start.dtype == np.uint64 and start.shape == (3,)
    assert oracle.triple_of(start) == oracle.Position().canonical()
    assert oracle.squares_of(start[0]) == oracle.START_BLACK


def test_legal_moves_batch_equals_oracle(canonical_sample, oracle_canonical_moves) -> None:
    moves, offsets = engine.legal_moves(canonical_sample)
    assert moves.dtype == np.int32 and moves.shape[1] == 3
    assert offsets.dtype == np.int64 and offsets.shape == (len(canonical_sample) + 1,)
    assert offsets[0] == 0 and offsets[-1] == len(moves)
    for index, expected in enumerate(oracle_canonical_moves):
        rows = moves[offsets[index] : offsets[index + 1]]
        assert len(rows) == len(expected), f"position {index}: duplicate or missing moves"
        assert oracle.rows_as_set(rows) == expected, f"position {index}"


@given(game_positions())
def test_legal_moves_of_one_position_equal_oracle(position: oracle.Position) -> None:
    moves, offsets = engine.legal_moves(canonical_array(position))
    expected = oracle.move_index_set(position.canonical_legal_moves())
    assert offsets.tolist() == [0, len(expected)]
    assert len(moves) == len(expected) and oracle.rows_as_set(moves) == expected


def test_legal_moves_into_caller_buffers(canonical_sample, oracle_canonical_moves) -> None:
    batch = canonical_sample[:20]
    out_moves = np.full((len(batch) * MAX_MOVES, 3), -7, dtype=np.int32)
    out_offsets = np.full(len(batch) + 1, -7, dtype=np.int64)
    moves, offsets = engine.legal_moves(batch, out_moves=out_moves, out_offsets=out_offsets)
    assert offsets is out_offsets
    assert np.shares_memory(moves, out_moves)
    expected_total = sum(len(moves_set) for moves_set in oracle_canonical_moves[:20])
    assert len(moves) == expected_total
    assert (out_moves[expected_total:] == -7).all(), "rows past the total were written"


def test_count_legal_moves_equals_oracle(canonical_sample, oracle_canonical_moves) -> None:
    counts = engine.count_legal_moves(canonical_sample)
    assert counts.dtype == np.int32
    assert counts.tolist() == [len(moves) for moves in oracle_canonical_moves]
    out = np.empty(len(canonical_sample), dtype=np.int32)
    assert engine.count_legal_moves(canonical_sample, out=out) is out


def test_is_terminal_equals_oracle(positions_sample, canonical_sample) -> None:
    flags = engine.is_terminal(canonical_sample)
    expected = [position.is_terminal() for position in positions_sample]
    assert flags.dtype == np.bool_
    assert flags.tolist() == expected
    assert any(expected) and not all(expected), "the sample must hold both kinds"


def test_is_terminal_on_constructed_positions() -> None:
    boxed = boxed_in_position()
    mine, theirs, arrows = boxed
    batch = np.stack(
        [oracle.triple_array(*boxed), oracle.triple_array(theirs, mine, arrows)]
    )
    assert engine.is_terminal(batch).tolist() == [True, False]
    assert oracle.legal_moves(*boxed) == []
    assert engine.count_legal_moves(batch)[0] == 0
    # A single free neighbour is enough: step there and shoot back onto the square just left.
    almost = (mine, theirs, arrows - {(1, 1)})
    assert engine.is_terminal(oracle.triple_array(*almost)).tolist() == [False]
    assert engine.count_legal_moves(oracle.triple_array(*almost))[0] == \
        len(oracle.legal_moves(*almost))


def test_empty_batch() -> None:
    empty = np.zeros((0, 3), dtype=np.uint64)
    moves, offsets = engine.legal_moves(empty)
    assert moves.shape == (0, 3) and offsets.tolist() == [0]
    assert engine.count_legal_moves(empty).shape == (0,)
    assert engine.is_terminal(empty).shape == (0,)
    assert engine.features(empty).shape == (0, 7, 8, 8)


# ---------------------------------------------------------------------------------------------
# apply_moves and play_paths: canonical children, checked through the real frame
# ---------------------------------------------------------------------------------------------

@given(random_games(min_plies=1))
def test_apply_moves_gives_the_canonical_view_of_the_real_child(game) -> None:
    _, moves = game
    line = oracle.play_line(moves)
    parents = np.stack([canonical_array(position) for position in line[:-1]])
    canonical_moves = np.array(
        [
            oracle.move_indices(parent.canonical_move(real_move))
            for parent, real_move in zip(line[:-1], moves, strict=True)
        ],
        dtype=np.int32,
    )
    children = engine.apply_moves(parents, canonical_moves)
    expected = np.stack([canonical_array(position) for position in line[1:]])
    np.testing.assert_array_equal(children, expected)


def test_apply_moves_every_legal_move_of_a_position() -> None:
    position = oracle_line(3)[9]
    triple = position.canonical()
    canonical_moves = sorted(position.canonical_legal_moves())
    parents = np.tile(oracle.triple_array(*triple), (len(canonical_moves), 1))
    moves = np.array([oracle.move_indices(move) for move in canonical_moves], dtype=np.int32)
    out = np.empty_like(parents)
    assert engine.apply_moves(parents, moves, out=out) is out
    for row, move in enumerate(canonical_moves):
        child = position.play(position.real_move(move))
        assert oracle.triple_of(out[row]) == child.canonical(), move


@pytest.mark.parametrize(
    "bad_move",
    [
        (0, 8, 16),  # (0, 0) is empty: no amazon there
        (40, 41, 42),  # (0, 5) holds the opponent's amazon
        (2, 6, 7),  # (2, 0) -> (6, 0) slides through the amazon on (5, 0)
        (16, 23, 22),  # the destination (7, 2) holds my own amazon
        (16, 16, 8),  # an amazon must move
        (16, 17, 34),  # (1, 2) -> (2, 4) is not a queen line
        (16, 8, 48),  # the arrow from (0, 1) down to (0, 6) flies through (0, 5)
        (16, 19, 40),  # the arrow lands on the opponent's amazon on (0, 5)
        (16, 17, 17),  # the arrow lands on the amazon that just moved
        (16, 17, 80),  # arrow off the board
        (16, -1, 8),  # destination off the board
    ],
)
def test_apply_moves_rejects_an_illegal_move_naming_the_row(bad_move) -> None:
    start = engine.start_position()
    mine, theirs, arrows = oracle.triple_of(start)
    assert oracle.move_from_indices(bad_move) not in set(oracle.legal_moves(mine, theirs, arrows))
    legal = oracle.move_indices(sorted(oracle.legal_moves(mine, theirs, arrows))[0])
    positions = np.tile(start, (3, 1))
    moves = np.array([legal, legal, bad_move], dtype=np.int32)
    with pytest.raises(EngineInputError, match=r"moves\[2\]"):
        engine.apply_moves(positions, moves)


@given(st.lists(random_games(), min_size=1, max_size=6), st.data())
def test_play_paths_equals_oracle(games, data) -> None:
    roots, root_games = [], []
    for _, moves in games:
        split = data.draw(st.integers(0, len(moves)))
        line = oracle.play_line(moves)
        roots.append(canonical_array(line[split]))
        root_games.append((line, moves, split))
    paths = []  # (root index, canonical moves, expected final oracle position)
    for _ in range(data.draw(st.integers(1, 8))):
        root = data.draw(st.integers(0, len(roots) - 1))
        line, moves, split = root_games[root]
        length = data.draw(st.integers(0, len(moves) - split))
        canonical_moves = [
            oracle.move_indices(line[ply].canonical_move(moves[ply]))
            for ply in range(split, split + length)
        ]
        paths.append((root, canonical_moves, line[split + length]))
    max_length = max(1, max(len(moves) for _, moves, _ in paths))
    path_moves = np.zeros((len(paths), max_length, 3), dtype=np.int32)
    for index, (_, moves, _) in enumerate(paths):
        if moves:
            path_moves[index, : len(moves)] = moves
    path_roots = np.array([root for root, _, _ in paths], dtype=np.int32)
    path_lengths = np.array([len(moves) for _, moves, _ in paths], dtype=np.int32)
    ends = engine.play_paths(np.stack(roots), path_roots, path_moves, path_lengths)
    assert ends.shape == (len(paths), 3) and ends.dtype == np.uint64
    for index, (_, _, end) in enumerate(paths):
        assert oracle.triple_of(ends[index]) == end.canonical(), f"path {index}"


def test_play_paths_rejects_bad_paths() -> None:
    start = engine.start_position()[None, :]
    first = sorted(oracle.Position().legal_moves())[0]
    child = oracle.Position().play(first)
    illegal = (0, 8, 16)  # no amazon on (0, 0) in the child's canonical frame
    assert oracle.move_from_indices(illegal) not in set(child.canonical_legal_moves())
    path_moves = np.array([[oracle.move_indices(first), illegal]], dtype=np.int32)
    ok_lengths = np.array([1], dtype=np.int32)
    roots = np.array([0], dtype=np.int32)
    engine.play_paths(start, roots, path_moves, ok_lengths)
    with pytest.raises(EngineInputError, match="path 0"):
        engine.play_paths(start, roots, path_moves, np.array([2], dtype=np.int32))
    with pytest.raises(EngineInputError, match="path 0"):
        engine.play_paths(start, roots, path_moves, np.array([3], dtype=np.int32))
    with pytest.raises(EngineInputError, match="path 0"):
        engine.play_paths(start, roots, path_moves, np.array([-1], dtype=np.int32))
    with pytest.raises(EngineInputError, match="path 0"):
        engine.play_paths(start, np.array([1], dtype=np.int32), path_moves, ok_lengths)


# ---------------------------------------------------------------------------------------------
# features
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_planes", [3, 7])
def test_features_equal_naive_planes(positions_sample, canonical_sample, num_planes: int) -> None:
    planes = engine.features(canonical_sample, num_planes=num_planes)
    assert planes.dtype == np.float32 and planes.shape == (len(canonical_sample), num_planes, 8, 8)
    for index, position in enumerate(positions_sample):
        expected = oracle.feature_planes(*position.canonical(), num_planes=num_planes)
        for channel in range(num_planes):
            np.testing.assert_array_equal(
                planes[index, channel], expected[channel],
                err_msg=f"position {index} plane {channel}"
            )


def test_features_write_into_out_and_default_to_seven_planes(canonical_sample) -> None:
    out = np.full((4, 7, 8, 8), 9.0, dtype=np.float32)
    assert engine.features(canonical_sample[:4], out=out) is out
    assert set(np.unique(out).tolist()) <= {0.0, 1.0}


# ---------------------------------------------------------------------------------------------
# random rollouts
# ---------------------------------------------------------------------------------------------

def test_rollouts_of_decided_positions() -> None:
    boxed = boxed_in_position()
    mine, theirs, arrows = boxed
    # Side to move walled in: it has lost. Opponent walled in: any move of mine wins at once.
    batch = np.stack([oracle.triple_array(*boxed), oracle.triple_array(theirs, mine, arrows)])
    for seed in range(5):
        assert engine.random_rollouts(batch, seed).tolist() == [-1.0, 1.0]


def test_rollouts_reach_only_possible_outcomes() -> None:
    cases = []
    for seed in range(40):
        line = oracle_line(seed)
        for position in line[-6:]:
            outcomes = oracle.possible_outcomes(*position.canonical(), limit=3_000)
            if outcomes is not None:
                cases.append((position, outcomes))
    assert any(len(outcomes) == 2 for _, outcomes in cases), "need undecided positions too"
    batch = np.stack([canonical_array(position) for position, _ in cases])
    seen = [set() for _ in cases]
    for seed in range(8):
        values = engine.random_rollouts(batch, seed)
        assert values.dtype == np.float32
        for index, value in enumerate(values.tolist()):
            assert value in cases[index][1], f"case {index} ({cases[index][0]}): {value}"
            seen[index].add(value)
    undecided = [index for index, (_, outcomes) in enumerate(cases) if len(outcomes) == 2]
    assert any(len(seen[index]) == 2 for index in undecided), "rollouts never varied"


def test_rollouts_are_deterministic_per_seed(canonical_sample) -> None:
    batch = canonical_sample[:64]
    first = engine.random_rollouts(batch, seed=123)
    np.testing.assert_array_equal(first, engine.random_rollouts(batch, seed=123))
    out = np.empty(len(batch), dtype=np.float32)
    assert engine.random_rollouts(batch, seed=123, out=out) is out
    np.testing.assert_array_equal(out, first)
    assert set(first.tolist()) <= {-1.0, 1.0}
    many = engine.random_rollouts(np.tile(engine.start_position(), (400, 1)), seed=7)
    assert 0.3 < (many > 0).mean() < 0.7, "rows should use independent random streams"


# ---------------------------------------------------------------------------------------------
# capacity, dtype and shape errors
# ---------------------------------------------------------------------------------------------

def test_legal_moves_capacity_error_names_the_rows_needed(canonical_sample) -> None:
    batch = canonical_sample[:3]
    total = int(engine.count_legal_moves(batch).sum())
    exact = np.empty((total, 3), dtype=np.int32)
    moves, _ = engine.legal_moves(batch, out_moves=exact)
    assert len(moves) == total
    with pytest.raises(EngineInputError, match=f"{total} legal moves"):
        engine.legal_moves(batch, out_moves=np.empty((total - 1, 3), dtype=np.int32))


def test_max_moves_buffer_holds_the_crowded_position() -> None:
    mine = frozenset(oracle.square_at(square) for square in (14, 29, 34, 44))
    theirs = frozenset(oracle.square_at(square) for square in (0, 1, 55, 63))
    expected = oracle.move_index_set(oracle.legal_moves(mine, theirs, frozenset()))
    assert len(expected) >= 1_778 and MAX_MOVES == 2_916
    buffer = np.empty((MAX_MOVES, 3), dtype=np.int32)
    moves, _ = engine.legal_moves(oracle.triple_array(mine, theirs, frozenset()), out_moves=buffer)
    assert oracle.rows_as_set(moves) == expected and len(moves) == len(expected)


GOOD = np.tile(np.array([0x00A5, 0xA500 << 48, 0], dtype=np.uint64), (2, 1))


def _bad_positions() -> list[tuple[str, object]]:
    return [
        ("dtype int64", GOOD.astype(np.int64)),
        ("dtype float", GOOD.astype(np.float64)),
        ("four columns", np.zeros((2, 4), dtype=np.uint64)),
        ("three dimensions", np.zeros((2, 3, 1), dtype=np.uint64)),
        ("not contiguous", np.zeros((2, 6), dtype=np.uint64)[:, ::2]),
        ("a list", GOOD.tolist()),
    ]


@pytest.mark.parametrize(
    "call",
    [
        lambda p: engine.legal_moves(p),
        lambda p: engine.count_legal_moves(p),
        lambda p: engine.is_terminal(p),
        lambda p: engine.features(p),
        lambda p: engine.random_rollouts(p, seed=1),
        lambda p: engine.apply_moves(p, np.zeros((2, 3), dtype=np.int32)),
    ],
    ids=["legal_moves", "count_legal_moves", "is_terminal", "features", "random_rollouts",
         "apply_moves"],
)
@pytest.mark.parametrize("label_and_array", _bad_positions(), ids=lambda case: case[0])
def test_bad_positions_raise_naming_the_argument(call, label_and_array) -> None:
    _, array = label_and_array
    with pytest.raises(EngineInputError, match="positions"):
        call(array)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: engine.count_legal_moves(GOOD, out=np.empty(2, dtype=np.int64)), "out"),
        (lambda: engine.count_legal_moves(GOOD, out=np.empty(3, dtype=np.int32)), "out"),
        (lambda: engine.is_terminal(GOOD, out=np.empty(2, dtype=np.uint8)), "out"),
        (lambda: engine.legal_moves(GOOD, out_moves=np.empty((9, 3), dtype=np.int64)), "out_moves"),
        (lambda: engine.legal_moves(GOOD, out_moves=np.empty((9, 2), dtype=np.int32)), "out_moves"),
        (lambda: engine.legal_moves(GOOD, out_offsets=np.empty(2, dtype=np.int64)), "out_offsets"),
        (lambda: engine.legal_moves(GOOD, out_offsets=np.empty(3, dtype=np.int32)), "out_offsets"),
        (lambda: engine.apply_moves(GOOD, np.zeros((2, 3), dtype=np.int64)), "moves"),
        (lambda: engine.apply_moves(GOOD, np.zeros((3, 3), dtype=np.int32)), "moves"),
        (lambda: engine.apply_moves(GOOD, np.zeros((2, 3), dtype=np.int32)[::-1]), "moves"),
        (lambda: engine.apply_moves(GOOD, np.zeros((2, 3), dtype=np.int32),
                                    out=np.empty((2, 3))), "out"),
        (lambda: engine.features(GOOD, num_planes=5), "num_planes"),
        (lambda: engine.features(GOOD, out=np.empty((2, 3, 8, 8), dtype=np.float32)), "out"),
        (lambda: engine.features(GOOD, out=np.empty((2, 7, 8, 8), dtype=np.float64)), "out"),
        (lambda: engine.random_rollouts(GOOD, 1, out=np.empty(2, dtype=np.float64)), "out"),
        (lambda: engine.play_paths(GOOD, np.zeros(1, np.int64), np.zeros((1, 1, 3), np.int32),
                                   np.zeros(1, np.int32)), "path_roots"),
        (lambda: engine.play_paths(GOOD, np.zeros(1, np.int32), np.zeros((1, 1, 3), np.int64),
                                   np.zeros(1, np.int32)), "path_moves"),
        (lambda: engine.play_paths(GOOD, np.zeros(1, np.int32), np.zeros((2, 1, 3), np.int32),
                                   np.zeros(1, np.int32)), "path_moves"),
        (lambda: engine.play_paths(GOOD, np.zeros(1, np.int32), np.zeros((1, 1, 3), np.int32),
                                   np.zeros(2, np.int32)), "path_lengths"),
        (lambda: engine.play_paths(GOOD.astype(np.int64), np.zeros(1, np.int32),
                                   np.zeros((1, 1, 3), np.int32), np.zeros(1, np.int32)),
         "root_positions"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(call, argument: str) -> None:
    with pytest.raises(EngineInputError, match=rf"\b{argument}\b"):
        call()


def test_engine_input_error_is_a_value_error() -> None:
    assert issubclass(EngineInputError, ValueError)
