"""Tests of the rules engine on every board size (6x6 to 10x10; docs/engine.md "Board sizes").

The published 10x10 perft figures from the standard start; move sets and terminal flags against
OpenSpiel's C++ `amazons` (board sizes 6, 8, 10) along random games; on 6, 7, 9 and 10, every
batch call against a plain-Python oracle written below from the rules (squares as `y * N + x`
ints, queen steps one square at a time, breadth-first searches) and against each other (count,
list, terminal, apply, paths, features, territory, adjudication, winning moves, rollouts, perft,
State in both frames); the classical terms on 10x10 against breadth-first searches; bad widths and
off-board bits refused with the argument named.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from amazons import engine
from amazons.engine import EngineInputError

OTHER_SIZES = (6, 7, 9, 10)
DIRECTIONS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (1, -1), (-1, 1), (-1, -1))
KING_STEPS = DIRECTIONS  # one square along each of the same eight directions
WORD_MASK = (1 << 64) - 1
# The contest term sums at most 100 powers of two no smaller than 2^-99: both computations add
# the same dyadic numbers, so they differ at most by the rounding of ~100 additions of doubles
# below 100, far under this bound.
CONTEST_TOLERANCE = 1e-9


# ---------------------------------------------------------------------------------------------
# The oracle: plain Python over square indices
# ---------------------------------------------------------------------------------------------

def squares_of(board: int) -> list[int]:
    """The squares (bit indices) of a bitboard given as a Python int."""
    return [square for square in range(board.bit_length()) if (board >> square) & 1]


def board_of(squares) -> int:
    """The bitboard (a Python int) of a collection of squares."""
    return sum(1 << square for square in set(squares))


def rays(square: int, blocked: set[int], size: int, steps=DIRECTIONS, queen: bool = True):
    """Squares reached from `square` along `steps` one at a time until the edge or `blocked`."""
    x0, y0 = square % size, square // size
    for dx, dy in steps:
        x, y = x0 + dx, y0 + dy
        while 0 <= x < size and 0 <= y < size and y * size + x not in blocked:
            yield y * size + x
            if not queen:
                break
            x, y = x + dx, y + dy


def oracle_moves(mine: int, theirs: int, arrows: int, size: int) -> set[tuple[int, int, int]]:
    """Every legal (src, dst, arrow) of the side owning `mine`, in the frame given."""
    blocked = set(squares_of(mine | theirs | arrows))
    moves = set()
    for src in squares_of(mine):
        for dst in rays(src, blocked, size):
            for arrow in rays(dst, blocked - {src}, size):
                moves.add((src, dst, arrow))
    return moves


def oracle_distances(sources: int, blocked: set[int], size: int, queen: bool) -> dict[int, int]:
    """Fewest queen moves (or king steps) from `sources` to each square, through empty squares."""
    distance: dict[int, int] = {}
    frontier = deque((square, 0) for square in squares_of(sources))
    while frontier:
        square, level = frontier.popleft()
        for reached in rays(square, blocked, size, queen=queen):
            if reached not in distance:
                distance[reached] = level + 1
                frontier.append((reached, level + 1))
    return distance


def oracle_region(seeds: int, passable: set[int], size: int) -> set[int]:
    """Squares of `passable` 8-connected to `seeds` within `passable`."""
    region = {square for square in squares_of(seeds) if square in passable}
    frontier = list(region)
    while frontier:
        square = frontier.pop()
        for reached in rays(square, set(), size, queen=False):
            if reached in passable and reached not in region:
                region.add(reached)
                frontier.append(reached)
    return region


def rotate(board: int, size: int) -> int:
    """Square s -> N * N - 1 - s: White's view of a real bitboard, and back."""
    return board_of(size * size - 1 - square for square in squares_of(board))


# ---------------------------------------------------------------------------------------------
# Positions as (3 * W,) uint64 rows and as Python ints
# ---------------------------------------------------------------------------------------------

def to_row(mine: int, theirs: int, arrows: int, size: int) -> np.ndarray:
    """A canonical position row `(3 * W,) uint64`: each bitboard as W words, low squares first."""
    words = engine.geometry(size).words
    return np.array([(board >> (64 * word)) & WORD_MASK
                     for board in (mine, theirs, arrows) for word in range(words)], np.uint64)


def from_row(row: np.ndarray, size: int) -> tuple[int, int, int]:
    """The three bitboards of a position row as Python ints."""
    words = engine.geometry(size).words
    return tuple(sum(int(row[board * words + word]) << (64 * word) for word in range(words))
                 for board in range(3))


def random_positions(size: int, count: int, seed: int) -> np.ndarray:
    """`count` canonical positions `(count, 3 * W) uint64`: 4 amazons a side on random squares,
    then 0 to N * N - 8 uniformly random plies (fewer when the game ends: some are terminal)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        squares = rng.choice(size * size, 8, replace=False).tolist()
        position = to_row(board_of(squares[:4]), board_of(squares[4:]), 0, size).reshape(1, -1)
        for _ in range(int(rng.integers(0, size * size - 7))):
            moves, _ = engine.legal_moves(position, size=size)
            if moves.shape[0] == 0:
                break
            move = np.ascontiguousarray(moves[rng.integers(moves.shape[0])].reshape(1, 3))
            position = engine.apply_moves(position, move, size=size)
        rows.append(position[0])
    return np.ascontiguousarray(np.stack(rows))


def first_difference(actual, expected, what: str) -> str:
    """A short message naming the first of the differing entries and their count."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    wrong = np.argwhere(actual != expected)
    return (f"{what}: {len(wrong)} entries differ; first at {wrong[0].tolist()}: "
            f"{actual[tuple(wrong[0])]} vs {expected[tuple(wrong[0])]}")


# ---------------------------------------------------------------------------------------------
# Geometry and perft
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", (6, 7, 8, 9, 10))
def test_geometry_matches_the_board(size):
    geometry = engine.geometry(size)
    module = engine.rules(size)
    widest = max(sum(1 for _ in rays(square, set(), size)) for square in range(size * size))
    expected = (size, size * size, widest)
    assert (geometry.size, geometry.num_squares, geometry.queen_reach) == expected
    assert geometry.words == (1 if size <= 8 else 2) == module.WORDS
    assert geometry.position_width == 3 * geometry.words
    assert geometry.max_moves == 4 * widest ** 2 == module.MAX_MOVES
    assert geometry.max_game_plies == size * size - 8 == module.MAX_GAME_PLIES
    assert (module.BOARD_SIZE, module.NUM_SQUARES, module.QUEEN_REACH) == expected
    assert module.HISTORY_PLIES == size * size


def test_geometry_figures_of_the_contract():
    assert (engine.geometry(8).queen_reach, engine.geometry(8).max_moves) == (27, 2_916)
    assert (engine.geometry(10).queen_reach, engine.geometry(10).max_moves) == (35, 4_900)
    assert engine.geometry(8).max_game_plies == 56 and engine.geometry(10).max_game_plies == 92
    assert engine.rules(8) is engine.rules() and engine.MAX_MOVES == engine.geometry(8).max_moves
    for bad in (5, 11, "8"):
        with pytest.raises(EngineInputError, match="size"):
            engine.geometry(bad)


def standard10_state():
    """The 10x10 standard start in a State: White a4 d1 g1 j4, Black a7 d10 g10 j7, White first."""
    state = engine.rules(10).State()
    white = board_of(y * 10 + x for x, y in ((0, 6), (3, 9), (6, 9), (9, 6)))
    black = board_of(y * 10 + x for x, y in ((0, 3), (3, 0), (6, 0), (9, 3)))
    state.set_position(black, white, 0, 1, 0)
    return state


def test_perft_from_the_10x10_standard_start_matches_the_published_figures():
    state = standard10_state()
    position = np.empty(6, np.uint64)
    state.canonical_into(position)
    assert engine.perft_position(position, 1, size=10) == 2_176 == state.count_legal_moves()
    assert engine.perft_position(position, 2, size=10) == 4_307_152


def test_perft_on_8x8_is_unchanged():
    start = engine.start_position()
    assert engine.perft_position(start, 1) == 1_232
    assert engine.perft_position(start, 2) == 1_331_198


# ---------------------------------------------------------------------------------------------
# OpenSpiel's C++ amazons as a peer (6, 8, 10)
# ---------------------------------------------------------------------------------------------

def openspiel_moves(state) -> set[tuple[int, int, int]]:
    """Every full move of an OpenSpiel amazons state at its from-square phase."""
    moves = set()
    for src in state.legal_actions():
        picked = state.child(src)
        for dst in picked.legal_actions():
            moved = picked.child(dst)
            moves.update((src, dst, arrow) for arrow in moved.legal_actions())
    return moves


def openspiel_boards(state, size: int) -> tuple[int, int, int]:
    """(X, O, arrows) of an OpenSpiel state read from its picture: cell `row * N + col`, row 0 on
    top, which is our square `y * N + x`."""
    text = "".join(str(state).split())
    assert len(text) == size * size
    return tuple(board_of(i for i, cell in enumerate(text) if cell == mark) for mark in "XO#")


@pytest.mark.parametrize("size, games, per_game", [(6, 10, 10), (8, 6, 12), (10, 4, 14)])
def test_move_sets_and_terminals_match_openspiel(size, games, per_game):
    pyspiel = pytest.importorskip("pyspiel")
    game = pyspiel.load_game("amazons", {"board_size": size})
    rng = np.random.default_rng(size)
    rules = engine.rules(size)
    checked = terminal = 0
    for _ in range(games):
        state = game.new_initial_state()
        snapshots = []
        while True:
            snapshots.append(state.clone())
            if state.is_terminal():
                break
            for _ in range(3):
                actions = state.legal_actions()
                state.apply_action(actions[rng.integers(len(actions))])
        picks = sorted(set(rng.choice(len(snapshots) - 1, min(per_game, len(snapshots) - 1),
                                      replace=False).tolist()) | {len(snapshots) - 1})
        for ply in picks:
            snapshot = snapshots[ply]
            crosses, noughts, arrows = openspiel_boards(snapshot, size)
            turn = ply % 2  # X, player 0, moves first: our Black
            ours = rules.State()
            ours.set_position(crosses, noughts, arrows, turn, ply)
            position = np.empty(engine.geometry(size).position_width, np.uint64)
            ours.canonical_into(position)
            assert bool(engine.is_terminal(position, size=size)[0]) == snapshot.is_terminal()
            if snapshot.is_terminal():
                terminal += 1
                assert ours.count_legal_moves() == 0
                continue
            assert snapshot.current_player() == turn
            expected = openspiel_moves(snapshot)
            buffer = np.empty((engine.geometry(size).max_moves, 3), np.int32)
            real = {tuple(move) for move in buffer[:ours.legal_moves_into(buffer)].tolist()}
            canonical, _ = engine.legal_moves(position, size=size)
            if turn == 1:
                canonical = size * size - 1 - canonical
            assert real == expected, (f"{size}x{size} ply {ply}: {len(real - expected)} extra, "
                                      f"{len(expected - real)} missing")
            assert {tuple(move) for move in canonical.tolist()} == expected
            checked += 1
    assert checked >= games * 4 and terminal == games


# ---------------------------------------------------------------------------------------------
# Every batch call on 6, 7, 9, 10
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=OTHER_SIZES)
def sized_positions(request):
    """(size, canonical positions) for each other size: 30 positions of random games."""
    return request.param, random_positions(request.param, 30, seed=request.param)


def test_moves_counts_and_terminals_agree_with_the_oracle(sized_positions):
    size, positions = sized_positions
    moves, offsets = engine.legal_moves(positions, size=size)
    counts = engine.count_legal_moves(positions, size=size)
    terminal = engine.is_terminal(positions, size=size)
    assert (np.diff(offsets) == counts).all() and (terminal == (counts == 0)).all()
    assert terminal.any() and not terminal.all()
    assert moves.min() >= 0 and moves.max() < size * size
    for row, position in enumerate(positions):
        expected = oracle_moves(*from_row(position, size), size)
        listed = {tuple(move) for move in moves[offsets[row]:offsets[row + 1]].tolist()}
        assert listed == expected, f"{size}x{size} row {row}"
        assert engine.perft_position(position, 1, size=size) == len(expected)
    buffer = np.empty((len(positions) * engine.geometry(size).max_moves, 3), np.int32)
    again, _ = engine.legal_moves(positions, buffer, size=size)
    assert (again == moves).all()


def test_children_match_state_push_in_the_real_frame(sized_positions):
    size, positions = sized_positions
    rules = engine.rules(size)
    rng = np.random.default_rng(size + 100)
    width = engine.geometry(size).position_width
    for position in positions:
        mine, theirs, arrows = from_row(position, size)
        moves, _ = engine.legal_moves(position, size=size)
        if moves.shape[0] == 0:
            continue
        picked = np.ascontiguousarray(moves[rng.choice(moves.shape[0], 5)])
        children = engine.apply_moves(np.repeat(position.reshape(1, -1), 5, axis=0), picked,
                                      size=size)
        for turn in (0, 1):
            state = rules.State()
            if turn == 0:
                state.set_position(mine, theirs, arrows, 0, 10)
            else:  # the same canonical position with White to move: the real board rotated
                state.set_position(rotate(theirs, size), rotate(mine, size),
                                   rotate(arrows, size), 1, 10)
            canonical = np.empty(width, np.uint64)
            state.canonical_into(canonical)
            assert (canonical == position).all()
            hash_before = state.zobrist_hash
            for move, child in zip(picked.tolist(), children, strict=True):
                real = move if turn == 0 else [size * size - 1 - square for square in move]
                assert state.push(*real) == rules.PushStatus.PUSH_OK
                state.canonical_into(canonical)
                assert (canonical == child).all()
                assert state.history_moves() == [tuple(real)] and state.ply == 11
                assert state.pop() == tuple(real)
                assert state.zobrist_hash == hash_before and state.ply == 10
            assert (state.black, state.white) == ((mine, theirs) if turn == 0 else
                                                  (rotate(theirs, size), rotate(mine, size)))
        assert all(sum(from_row(child, size)) >> (size * size) == 0 for child in children)
        # The opponent's moves in the child are the oracle's from its side of the child.
        child_mine, child_theirs, child_arrows = from_row(children[0], size)
        assert (child_mine, child_theirs) == (rotate(theirs, size), rotate(
            (mine & ~(1 << int(picked[0, 0]))) | (1 << int(picked[0, 1])), size))
        assert child_arrows == rotate(arrows | (1 << int(picked[0, 2])), size)


def test_paths_winning_moves_rollouts_and_perft_agree(sized_positions):
    size, positions = sized_positions
    live = positions[engine.count_legal_moves(positions, size=size) > 0][:8]
    rng = np.random.default_rng(size + 200)
    path_moves = np.zeros((len(live), 2, 3), np.int32)
    lengths = np.zeros(len(live), np.int32)
    expected_ends = live.copy()
    for row, position in enumerate(live):
        current = position.reshape(1, -1)
        for step in range(2):
            moves, _ = engine.legal_moves(current, size=size)
            if moves.shape[0] == 0:
                break
            path_moves[row, step] = moves[rng.integers(moves.shape[0])]
            current = engine.apply_moves(current, path_moves[row, step:step + 1].copy(), size=size)
            lengths[row] = step + 1
        expected_ends[row] = current[0]
        moves, offsets = engine.legal_moves(position, size=size)
        kids = engine.apply_moves(np.repeat(position.reshape(1, -1), len(moves), axis=0), moves,
                                  size=size)
        kid_counts = engine.count_legal_moves(kids, size=size)
        wins = engine.winning_moves(position.reshape(1, -1), moves, offsets, size=size)
        assert (wins == (kid_counts == 0)).all()
        if len(moves) < 400:
            assert engine.perft_position(position, 2, size=size) == int(kid_counts.sum())
    ends = engine.play_paths(live, np.arange(len(live), dtype=np.int32), path_moves, lengths,
                             size=size)
    assert (ends == expected_ends).all()
    values = engine.random_rollouts(positions, seed=5, size=size)
    assert set(values.tolist()) <= {-1.0, 1.0}
    assert (engine.random_rollouts(positions, seed=5, size=size) == values).all()
    assert (values[engine.is_terminal(positions, size=size)] == -1).all()


def test_features_territory_and_adjudication_agree_with_the_oracle(sized_positions):
    size, positions = sized_positions
    squares = size * size
    planes = engine.features(positions, 7, size=size)
    assert planes.shape == (len(positions), 7, size, size)
    three = engine.features(positions, 3, size=size)
    territory = engine.territory(positions, size=size)
    assert territory.shape == (len(positions), squares)
    result, bounds = engine.adjudicate(positions, size=size)
    moves, offsets = engine.legal_moves(positions, size=size)
    for row, position in enumerate(positions):
        mine, theirs, arrows = from_row(position, size)
        occupied = mine | theirs | arrows
        blocked = set(squares_of(occupied))
        flat = planes[row].reshape(7, squares)

        def plane(board: int) -> np.ndarray:
            return np.array([(board >> square) & 1 for square in range(squares)], np.float32)

        assert (three[row].reshape(3, squares) == [plane(mine), plane(theirs), plane(arrows)]).all()
        my_reach = board_of(s for src in squares_of(mine) for s in rays(src, blocked, size))
        their_reach = board_of(s for src in squares_of(theirs) for s in rays(src, blocked, size))
        my_shots = board_of(move[2] for move in moves[offsets[row]:offsets[row + 1]].tolist())
        their_shots = board_of(move[2] for move in oracle_moves(theirs, mine, arrows, size))
        expected = np.stack([plane(mine), plane(theirs), plane(occupied), plane(my_reach),
                             plane(their_reach), plane(my_shots), plane(their_shots)])
        assert (flat == expected).all(), first_difference(flat, expected, f"features row {row}")

        mine_at = oracle_distances(mine, blocked, size, queen=True)
        theirs_at = oracle_distances(theirs, blocked, size, queen=True)
        owner = np.zeros(squares, np.int8)
        for square in set(mine_at) | set(theirs_at):
            near, far = mine_at.get(square, np.inf), theirs_at.get(square, np.inf)
            owner[square] = (near < far) - (far < near)
        assert (territory[row] == owner).all(), first_difference(territory[row], owner, "territory")

        passable = set(range(squares)) - set(squares_of(arrows))
        separated = not (oracle_region(mine, passable, size) & set(squares_of(theirs)))
        assert (bounds[row, engine.MY_LOWER] >= 0) == separated
        if separated:
            empty = passable - set(squares_of(mine | theirs))
            for side, column in ((mine, engine.MY_UPPER), (theirs, engine.THEIR_UPPER)):
                reach = oracle_region(side, empty | set(squares_of(side)), size) & empty
                assert bounds[row, column] >= bounds[row, column - 1] >= 0
                assert bounds[row, column] <= len(reach)
            my_lower, my_upper, their_lower, their_upper = bounds[row].tolist()
            assert result[row] == (1 if my_lower > their_upper else
                                   -1 if my_upper <= their_lower else 0)
        else:
            assert result[row] == 0 and (bounds[row] == -1).all()


def test_state_round_trips_wide_bitboards_and_refuses_off_board_bits():
    for size in OTHER_SIZES:
        rules = engine.rules(size)
        state = rules.State()
        assert (state.black, state.white, state.arrow_board, state.turn) == (0, 0, 0, 0)
        corner = 1 << (size * size - 1)
        state.set_position(corner, 1, 1 << (size * size - 2), 1, 3)
        assert (state.black, state.white, state.arrow_board) == (corner, 1, corner >> 1)
        position = np.empty(engine.geometry(size).position_width, np.uint64)
        state.canonical_into(position)
        assert from_row(position, size) == (corner, 1, 2)  # White's view: rotated
        with pytest.raises(ValueError, match="black"):
            state.set_position(corner << 1, 0, 0, 0, 0)
        with pytest.raises(ValueError, match="arrows"):
            state.set_position(0, 0, -1, 0, 0)
        assert state.black == corner
        with pytest.raises(ValueError, match="entries"):
            state.canonical_into(np.empty(3 * engine.geometry(size).words + 1, np.uint64))


@pytest.mark.parametrize("size", OTHER_SIZES + (8,))
def test_bad_widths_and_off_board_bits_are_refused_naming_the_argument(size):
    geometry = engine.geometry(size)
    good = random_positions(size, 2, seed=size + 300)
    wrong_width = np.zeros((2, 6 if geometry.words == 1 else 3), np.uint64)
    moves = np.zeros((2, 3), np.int32)
    calls = {
        "positions": [
            lambda p: engine.legal_moves(p, size=size),
            lambda p: engine.count_legal_moves(p, size=size),
            lambda p: engine.is_terminal(p, size=size),
            lambda p: engine.apply_moves(p, moves, size=size),
            lambda p: engine.features(p, size=size),
            lambda p: engine.random_rollouts(p, 1, size=size),
            lambda p: engine.adjudicate(p, size=size),
            lambda p: engine.territory(p, size=size),
            lambda p: engine.classical_terms(p, size=size),
            lambda p: engine.winning_moves(p, moves[:0], np.zeros(3, np.int64), size=size),
        ],
        "root_positions": [
            lambda p: engine.play_paths(p, np.zeros(1, np.int32), np.zeros((1, 1, 3), np.int32),
                                        np.zeros(1, np.int32), size=size),
        ],
        "position": [lambda p: engine.perft_position(p[0], 1, size=size)],
    }
    for name, functions in calls.items():
        for call in functions:
            with pytest.raises(EngineInputError, match=name):
                call(wrong_width)
            if size != 8:
                off_board = good.copy()
                off_board[:, -1] |= np.uint64(1 << 63)  # arrows' top word, far off the board
                with pytest.raises(EngineInputError, match=rf"{name}\[0\] has bits"):
                    call(off_board)
    with pytest.raises(EngineInputError, match="out"):
        engine.features(good, 7, np.empty((2, 7, 8 if size != 8 else 9, 8), np.float32),
                        size=size)
    with pytest.raises(EngineInputError, match="out"):
        engine.territory(good, np.empty((2, 64 if size != 8 else 100), np.int8), size=size)


# ---------------------------------------------------------------------------------------------
# Classical terms on 10x10
# ---------------------------------------------------------------------------------------------

def oracle_terms(position: np.ndarray, size: int) -> list[float]:
    """The six terms of `engine.classical_terms`, from plain breadth-first searches."""
    mine, theirs, arrows = from_row(position, size)
    blocked = set(squares_of(mine | theirs | arrows))
    terms = []
    for queen in (True, False):
        my_distance = oracle_distances(mine, blocked, size, queen)
        their_distance = oracle_distances(theirs, blocked, size, queen)
        balance = ties = 0
        for square in set(my_distance) | set(their_distance):
            mine_at = my_distance.get(square, np.inf)
            theirs_at = their_distance.get(square, np.inf)
            balance += (mine_at < theirs_at) - (theirs_at < mine_at)
            ties += mine_at == theirs_at
        terms += [balance, ties]
        if queen:
            contest = sum(2.0 ** -abs(my_distance[square] - their_distance[square])
                          for square in set(my_distance) & set(their_distance))
    mobility = (sum(len(list(rays(square, blocked, size))) for square in squares_of(mine))
                - sum(len(list(rays(square, blocked, size))) for square in squares_of(theirs)))
    return [*terms, mobility, contest]


def test_classical_terms_on_10x10_agree_with_breadth_first_searches():
    positions = random_positions(10, 30, seed=11)
    actual = engine.classical_terms(positions, size=10)
    expected = np.array([oracle_terms(position, 10) for position in positions])
    counts = actual[:, :engine.CONTEST] != expected[:, :engine.CONTEST]
    contest = np.abs(actual[:, engine.CONTEST] - expected[:, engine.CONTEST]) > CONTEST_TOLERANCE
    wrong = np.flatnonzero(counts.any(axis=1) | contest)
    assert wrong.size == 0, (f"{wrong.size} of {len(positions)} positions differ; first row "
                             f"{wrong[0]}: {actual[wrong[0]]} vs {expected[wrong[0]]}")


@pytest.mark.parametrize("size", OTHER_SIZES)
def test_walled_corners_stay_apart_through_the_bits_past_the_board(size):
    """My amazon walled into the last square, theirs into the first square of the last row: a
    step sideways from the last square lands past the board, and a step up from there would land
    on theirs; the engine must keep those bits out (separated, and no king distance across)."""
    last, corner = size * size - 1, size * (size - 1)
    arrows = board_of([last - 1, last - size, last - size - 1,
                       corner + 1, corner - size, corner - size + 1])
    mine, theirs = 1 << last, 1 << corner
    position = to_row(mine, theirs, arrows, size)
    result, bounds = engine.adjudicate(position, size=size)
    assert bounds[0].tolist() == [0, 0, 0, 0] and result[0] == -1
    terms = engine.classical_terms(position, size=size)[0]
    assert terms.tolist() == oracle_terms(position, size)
    assert (engine.territory(position, size=size) == 0).all()


def test_the_sizes_agree_with_boards_and_symmetry():
    from amazons import boards, symmetry
    assert engine.BOARD_SIZES == boards.SIZES
    for size in engine.BOARD_SIZES:
        assert engine.geometry(size).words == symmetry.position_words(size)


def test_move_sets_follow_the_eight_symmetries(sized_positions):
    from amazons.symmetry import transform_moves, transform_positions, transform_square_labels
    size, positions = sized_positions
    moves, offsets = engine.legal_moves(positions, size=size)
    territory = engine.territory(positions, size=size)
    for k in range(8):
        images = np.ascontiguousarray(transform_positions(positions, k, size))
        found, found_offsets = engine.legal_moves(images, size=size)
        mapped = transform_moves(moves, k, size)
        for row in range(len(positions)):
            expected = {tuple(m) for m in mapped[offsets[row]:offsets[row + 1]].tolist()}
            listed = {tuple(m) for m in found[found_offsets[row]:found_offsets[row + 1]].tolist()}
            assert listed == expected, f"{size}x{size} symmetry {k} row {row}"
        moved = transform_square_labels(territory, k)
        image_territory = engine.territory(images, size=size)
        assert (image_territory == moved).all(), first_difference(image_territory, moved,
                                                                  f"territory, symmetry {k}")
