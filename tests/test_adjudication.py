"""Adjudication of separated positions and queen-distance territory, against exhaustive searches.

Every expected value comes from code in this file or `tests/oracle.py`, written from the rules:
separation by a plain flood fill over `(x, y)` squares, the longest fill a side can play alone by
exhaustive search over the oracle's legal moves, the game's result by exhaustive minimax over the
oracle's legal moves (both players, to the end), and territory by a breadth-first search over
queen moves. The engine's adjudicator must never contradict the play-out, and on regions small
enough for its exhaustive fill search it must decide every separated position.

Separated positions come from two sources: small regions walled in by arrows, built from a seed
(hypothesis draws the seed and the sizes, and shrinks towards few, small regions), and the late
plies of the oracle's random games.
"""

from __future__ import annotations

import random

import numpy as np
import oracle
import pytest
from conftest import SAMPLE_GAME_SEEDS, game_positions, oracle_line
from hypothesis import given
from hypothesis import strategies as st

from amazons import BLACK, WHITE, Adjudication, Board, engine
from amazons.engine import MY_LOWER, MY_UPPER, THEIR_LOWER, THEIR_UPPER, EngineInputError

Triple = tuple[frozenset, frozenset, frozenset]  # (side to move's amazons, the other's, arrows)


# ---------------------------------------------------------------------------------------------
# References, from the rules
# ---------------------------------------------------------------------------------------------

def king_neighbours(square: oracle.Square) -> list[oracle.Square]:
    """The up to 8 squares a king step away."""
    x, y = square
    return [(x + dx, y + dy) for dx, dy in oracle.DIRECTIONS if oracle.on_board((x + dx, y + dy))]


def region_of(start: oracle.Square, passable: set) -> set:
    """Squares of `passable` 8-connected to `start` (a plain depth-first flood fill)."""
    seen, stack = {start}, [start]
    while stack:
        for neighbour in king_neighbours(stack.pop()):
            if neighbour in passable and neighbour not in seen:
                seen.add(neighbour)
                stack.append(neighbour)
    return seen


def separated(mine: frozenset, theirs: frozenset, arrows: frozenset) -> bool:
    """Whether no region of non-arrow squares holds amazons of both sides."""
    passable = set(oracle.ALL_SQUARES) - set(arrows)
    return all(not (region_of(amazon, passable) & theirs) for amazon in mine)


def reachable_empties(amazons: frozenset, obstacles: frozenset) -> int:
    """Empty squares in the regions of `amazons` (the adjudicator's upper bound)."""
    passable = set(oracle.ALL_SQUARES) - set(obstacles)
    empties = set()
    for amazon in amazons:
        empties |= region_of(amazon, passable)
    return len(empties - amazons)


def longest_fill(amazons: frozenset, obstacles: frozenset) -> int:
    """Most moves `amazons` can play in a row alone; `obstacles` = everything else that blocks."""
    memo: dict = {}

    def longest(movers: frozenset, blocked: frozenset, most: int) -> int:
        # Each move fills one empty square (the amazon's old square frees as its new one fills,
        # the arrow fills one), so `most`, the empties left of those reachable at the start,
        # bounds the rest: a line that long ends the search of this position.
        if (movers, blocked) not in memo:
            best = 0
            for move in oracle.legal_moves(movers, frozenset(), blocked):
                moved, shots = oracle.play_move(movers, frozenset(), blocked, move)
                best = max(best, 1 + longest(moved, shots, most - 1))
                if best == most:
                    break
            memo[movers, blocked] = best
        return memo[movers, blocked]

    return longest(amazons, obstacles, reachable_empties(amazons, obstacles))


def playout(mine: frozenset, theirs: frozenset, arrows: frozenset) -> tuple[int, int]:
    """Exhaustive minimax to the end: `(result, plies)` for the side to move.

    result is +1 (it wins) or -1; plies is how long the game lasts when the winner ends it as
    fast as it can and the loser holds out as long as it can.
    """
    memo: dict = {}

    def play(me: frozenset, them: frozenset, shots: frozenset) -> tuple[int, int]:
        key = (me, them, shots)
        if key not in memo:
            outcomes = []
            for move in oracle.legal_moves(me, them, shots):
                moved, new_shots = oracle.play_move(me, them, shots, move)
                result, plies = play(them, moved, new_shots)
                outcomes.append((-result, plies + 1))
            wins = [plies for result, plies in outcomes if result > 0]
            if wins:
                memo[key] = (1, min(wins))
            else:
                memo[key] = (-1, max((plies for _, plies in outcomes), default=0))
        return memo[key]

    return play(mine, theirs, arrows)


def played_out_result(mine: frozenset, theirs: frozenset, arrows: frozenset) -> int:
    """`playout`'s result alone (+1: the side to move wins), by a search that stops at the
    first winning move it finds: the same minimax, without the game lengths that need every
    move searched."""
    memo: dict = {}

    def wins(me: frozenset, them: frozenset, shots: frozenset) -> bool:
        key = (me, them, shots)
        if key not in memo:
            replies = (oracle.play_move(me, them, shots, move)
                       for move in oracle.legal_moves(me, them, shots))
            memo[key] = any(not wins(them, moved, new_shots) for moved, new_shots in replies)
        return memo[key]

    return 1 if wins(mine, theirs, arrows) else -1


def queen_distances(amazons: frozenset, obstacles: set) -> dict:
    """Queen-move distance from the nearest of `amazons` to every square it reaches (BFS)."""
    distance = {}
    frontier = set(amazons)
    level = 0
    while frontier:
        level += 1
        reached = set()
        for square in frontier:
            reached |= oracle.queen_reach(square, obstacles)
        frontier = {square for square in reached if square not in distance}
        for square in frontier:
            distance[square] = level
    return distance


def territory_reference(mine: frozenset, theirs: frozenset, arrows: frozenset) -> np.ndarray:
    """`(64,) int8`: +1 where `mine` is strictly nearer in queen moves, -1 where `theirs` is."""
    obstacles = set(mine) | set(theirs) | set(arrows)
    near_mine, near_theirs = queen_distances(mine, obstacles), queen_distances(theirs, obstacles)
    owned = np.zeros(64, dtype=np.int8)
    for square in set(near_mine) | set(near_theirs):
        ours, others = near_mine.get(square, 99), near_theirs.get(square, 99)
        owned[oracle.square_index(square)] = 1 if ours < others else -1 if others < ours else 0
    return owned


def adjudicate_triple(mine, theirs, arrows) -> tuple[int, list[int]]:
    """The engine's `(result, bounds)` for one canonical triple of square sets."""
    result, bounds = engine.adjudicate(oracle.triple_array(mine, theirs, arrows))
    return int(result[0]), bounds[0].tolist()


def from_rows(rows: list[str]) -> Triple:
    """A triple from 8 strings of 8 characters: `M` side to move, `T` the other, `.` empty,
    `#` arrow."""
    assert len(rows) == 8 and all(len(row) == 8 for row in rows)
    squares = {char: frozenset((x, y) for y, row in enumerate(rows)
                               for x, c in enumerate(row) if c == char)
               for char in "MT#"}
    return squares["M"], squares["T"], squares["#"]


# ---------------------------------------------------------------------------------------------
# Separated positions: small regions walled in by arrows
# ---------------------------------------------------------------------------------------------

def grow_region(rng: random.Random, size: int, forbidden: set) -> set:
    """A connected set of up to `size` squares outside `forbidden`, by random king steps."""
    free = [square for square in oracle.ALL_SQUARES if square not in forbidden]
    if not free:
        return set()
    region = {rng.choice(free)}
    for _ in range(8 * size):
        if len(region) >= size:
            break
        step = rng.choice(king_neighbours(rng.choice(sorted(region))))
        if step not in forbidden:
            region.add(step)
    return region


@st.composite
def walled_positions(draw, max_region: int = 6) -> Triple:
    """A separated canonical triple: each side's amazons in 1-2 small regions, arrows elsewhere.

    Regions never touch (not even diagonally), so no region holds both colours; a region may get
    no amazon at all (a dead pocket that nobody can fill).
    """
    rng = random.Random(draw(st.integers(min_value=0, max_value=2**32 - 1)))
    forbidden: set = set()
    sides: list[set] = [set(), set()]
    empty: set = set()
    for side in (0, 1, 0, 1, None):
        if side is not None and sides[side] and not draw(st.booleans()):
            continue
        if side is None and not draw(st.booleans()):
            continue
        region = grow_region(rng, draw(st.integers(min_value=1, max_value=max_region)), forbidden)
        if not region:
            continue
        if side is not None:
            room = 4 - len(sides[side])
            count = min(room, len(region), draw(st.integers(min_value=1, max_value=2)))
            amazons = set(rng.sample(sorted(region), count))
            sides[side] |= amazons
            region -= amazons
        empty |= region
        for square in list(region) + list(sides[0] | sides[1]):
            forbidden |= {square, *king_neighbours(square)}
    arrows = set(oracle.ALL_SQUARES) - empty - sides[0] - sides[1]
    return frozenset(sides[0]), frozenset(sides[1]), frozenset(arrows)


# ---------------------------------------------------------------------------------------------
# Separation
# ---------------------------------------------------------------------------------------------

def test_separation_matches_a_plain_flood_fill_along_games() -> None:
    positions = [position for seed in SAMPLE_GAME_SEEDS for position in oracle_line(seed)]
    triples = [position.canonical() for position in positions]
    result, bounds = engine.adjudicate(np.stack([oracle.triple_array(*triple)
                                                 for triple in triples]))
    expected = np.array([separated(*triple) for triple in triples])
    assert ((bounds[:, MY_LOWER] >= 0) == expected).all()
    assert expected.any() and not expected.all()
    # Not separated: never decided, bounds all -1.
    assert (result[~expected] == 0).all() and (bounds[~expected] == -1).all()
    assert (bounds[expected] >= 0).all()


def test_touching_amazons_or_a_diagonal_gap_are_not_separated() -> None:
    # A diagonal line of arrows does not wall anything off: a king steps across it.
    mine, theirs, arrows = from_rows([
        "M..#....",
        "..#.....",
        ".#......",
        "#.......",
        "........",
        "........",
        "........",
        ".......T",
    ])
    assert not separated(mine, theirs, arrows)
    assert adjudicate_triple(mine, theirs, arrows) == (0, [-1, -1, -1, -1])
    # An amazon's own square connects the empties around it: no arrow between M and T here.
    mine, theirs, arrows = from_rows([
        "MT######",
        "########",
        "########",
        "########",
        "########",
        "########",
        "########",
        "########",
    ])
    assert adjudicate_triple(mine, theirs, arrows) == (0, [-1, -1, -1, -1])


# ---------------------------------------------------------------------------------------------
# Bounds and decisions on small regions, against exhaustive search
# ---------------------------------------------------------------------------------------------

@given(walled_positions())
def test_bounds_bracket_the_longest_fill_and_are_exact_on_small_regions(triple: Triple) -> None:
    mine, theirs, arrows = triple
    result, bounds = adjudicate_triple(mine, theirs, arrows)
    for amazons, others, lower, upper in (
        (mine, theirs, bounds[MY_LOWER], bounds[MY_UPPER]),
        (theirs, mine, bounds[THEIR_LOWER], bounds[THEIR_UPPER]),
    ):
        longest = longest_fill(amazons, others | arrows)
        # Regions of at most EXACT_FILL_SQUARES empty squares get the exhaustive search.
        assert lower == longest == upper
        assert upper <= reachable_empties(amazons, others | arrows)


@given(walled_positions(max_region=5))
def test_decisions_agree_with_the_played_out_game(triple: Triple) -> None:
    mine, theirs, arrows = triple
    result, bounds = adjudicate_triple(mine, theirs, arrows)
    # Exact bounds on both sides always decide, and the decision is the game's result.
    assert result == played_out_result(mine, theirs, arrows)


def test_late_positions_of_random_games_agree_with_the_played_out_game() -> None:
    checked = decided = 0
    for seed in SAMPLE_GAME_SEEDS:
        for position in oracle_line(seed)[-8:]:
            mine, theirs, arrows = position.canonical()
            result, bounds = adjudicate_triple(mine, theirs, arrows)
            if not separated(mine, theirs, arrows):
                assert (result, bounds) == (0, [-1, -1, -1, -1])
                continue
            checked += 1
            decided += result != 0
            assert result in (0, played_out_result(mine, theirs, arrows))
            assert bounds[MY_LOWER] <= longest_fill(mine, theirs | arrows) <= bounds[MY_UPPER]
            assert bounds[THEIR_LOWER] <= longest_fill(theirs, mine | arrows) <= bounds[THEIR_UPPER]
    assert checked >= 5 and decided == checked


def test_a_defective_region_gets_its_exact_length_as_the_upper_bound() -> None:
    # Two dead ends beside the amazon that no queen line joins: whichever it steps into, the
    # other is lost, so 1 move although 2 squares are empty. The opponent has 1 move too.
    mine, theirs, arrows = from_rows([
        ".#######",
        "#M.#####",
        "########",
        "########",
        "########",
        "#####T.#",
        "########",
        "########",
    ])
    assert longest_fill(mine, theirs | arrows) == 1
    assert adjudicate_triple(mine, theirs, arrows) == (-1, [1, 1, 1, 1])


def test_exact_search_on_one_amazon_regions_of_ten_squares() -> None:
    # Seeded random regions; seeds 1055 and 2087 give regions whose longest fill is one short of
    # their empty squares, so the upper bound must come from the finished exhaustive search.
    defective = 0
    for seed in (*range(12), 1055, 2087):
        rng = random.Random(seed)
        region = grow_region(rng, 11, set())
        mine = frozenset({rng.choice(sorted(region))})
        arrows = frozenset(set(oracle.ALL_SQUARES) - region)
        result, bounds = adjudicate_triple(mine, frozenset(), arrows)
        longest = longest_fill(mine, arrows)
        assert bounds[MY_LOWER] == longest == bounds[MY_UPPER]
        assert result == (1 if longest > 0 else -1)
        defective += longest < len(region) - 1
    assert defective >= 2


def test_a_corridor_needs_the_right_first_move() -> None:
    # The amazon must step along the corridor and shoot back; the side to move makes 3 moves,
    # the opponent 2, so the side to move wins.
    mine, theirs, arrows = from_rows([
        "########",
        "########",
        "########",
        "###.M###",
        "###.####",
        "###.####",
        "########",
        "#T..####",
    ])
    assert longest_fill(mine, theirs | arrows) == 3
    assert adjudicate_triple(mine, theirs, arrows) == (1, [3, 3, 2, 2])


def test_large_regions_get_sound_bounds() -> None:
    # A wall splits the board; neither side's region is small enough for the exhaustive search,
    # so the lower bound is a greedy fill (which here reaches the upper bound on both sides).
    mine, theirs, arrows = from_rows([
        "M......M",
        "........",
        "........",
        "########",
        "........",
        "........",
        "........",
        "...T....",
    ])
    result, bounds = adjudicate_triple(mine, theirs, arrows)
    assert bounds == [22, 22, 31, 31] and result == -1
    assert bounds[MY_UPPER] == reachable_empties(mine, theirs | arrows)


@pytest.mark.parametrize("seed", [8484, 13176])
def test_overlapping_bounds_on_larger_regions_leave_the_race_open(seed: int) -> None:
    # One amazon in a seeded region of 13 empty squares (too many for the exhaustive search
    # alone), the opponent in the same region turned half a turn. Seed 8484: the longest fill is
    # 13 but the greedy start loses one; seed 13176: the longest fill is 12. Either way both sides
    # have equal counts (the side to move loses), and bounds of 12 to 13 must not decide that.
    rng = random.Random(seed)
    region = grow_region(rng, 14, set())
    amazon = rng.choice(sorted(region))
    turned = {oracle.rotate_half(square) for square in region}
    assert not turned & {near for square in region for near in (square, *king_neighbours(square))}
    mine, theirs = frozenset({amazon}), frozenset({oracle.rotate_half(amazon)})
    arrows = frozenset(set(oracle.ALL_SQUARES) - region - turned)
    result, bounds = adjudicate_triple(mine, theirs, arrows)
    longest = longest_fill(mine, theirs | arrows)
    assert bounds[MY_LOWER] <= longest <= bounds[MY_UPPER] == len(region) - 1
    assert bounds[MY_LOWER] < bounds[MY_UPPER] and bounds[THEIR_LOWER] < bounds[THEIR_UPPER]
    assert result == 0


def test_a_side_without_amazons_or_moves_has_zero_moves() -> None:
    mine, theirs, arrows = from_rows([
        "M#######",
        "##......",
        "#.......",
        "#.......",
        "#.......",
        "#.......",
        "#.......",
        "#......T",
    ])
    assert adjudicate_triple(mine, theirs, arrows)[0] == -1  # boxed in: the side to move has lost
    assert adjudicate_triple(theirs, mine, arrows)[0] == 1
    result, bounds = adjudicate_triple(frozenset(), theirs, arrows)
    assert result == -1 and bounds[:2] == [0, 0] and bounds[THEIR_UPPER] == 47


# ---------------------------------------------------------------------------------------------
# Board faces, in real colours
# ---------------------------------------------------------------------------------------------

def board_of(triple: Triple, turn: int) -> Board:
    """A Board whose side to move `turn` sees `triple` (mine, theirs, arrows) as its
    canonical view."""
    mine, theirs, arrows = triple
    if turn == WHITE:
        mine, theirs, arrows = (oracle.map_squares(oracle.D4_TRANSFORMS["rotate_half"], part)
                                for part in triple)
    black, white = (mine, theirs) if turn == BLACK else (theirs, mine)
    board = Board(oracle.Position(black, white, arrows, turn).position_string(30))
    assert oracle.triple_of(board.canonical_position()) == triple
    return board


@pytest.mark.parametrize("turn", [BLACK, WHITE])
@given(triple=walled_positions(max_region=5))
def test_board_adjudication_names_the_real_winner_and_bounds_the_game(turn: int,
                                                                      triple: Triple) -> None:
    board = board_of(triple, turn)
    verdict = board.adjudicate()
    result, plies = playout(*triple)
    assert played_out_result(*triple) == result  # the two searches of the game agree
    assert isinstance(verdict, Adjudication)
    assert verdict.winner == (turn if result > 0 else 1 - turn)
    assert verdict.margin >= (1 if result > 0 else 0)
    # The winner ends it no later than the bound even against the loser's longest defence.
    assert plies <= verdict.plies_bound
    _, bounds = adjudicate_triple(*triple)
    if result > 0:
        assert verdict.margin == bounds[MY_LOWER] - bounds[THEIR_UPPER]
        assert verdict.plies_bound == 2 * bounds[THEIR_UPPER] + 1
    else:
        assert verdict.margin == bounds[THEIR_LOWER] - bounds[MY_UPPER]
        assert verdict.plies_bound == 2 * bounds[MY_UPPER]
    if bounds[MY_LOWER] == bounds[MY_UPPER] and bounds[THEIR_LOWER] == bounds[THEIR_UPPER]:
        assert plies == verdict.plies_bound  # exact bounds: the bound is the game's length


def test_board_adjudication_of_a_split_board_and_of_an_open_one() -> None:
    assert Board().adjudicate() is None
    # Black: 22 empty squares above the wall, White: 31 below; White wins by 9 either way.
    board = Board("B5B1/8/8/xxxxxxxx/8/8/8/3W4 b 20")
    assert board.adjudicate() == Adjudication(winner=WHITE, margin=9, plies_bound=2 * 22)
    board = Board("B5B1/8/8/xxxxxxxx/8/8/8/3W4 w 20")
    assert board.adjudicate() == Adjudication(winner=WHITE, margin=9, plies_bound=2 * 22 + 1)


# ---------------------------------------------------------------------------------------------
# Territory
# ---------------------------------------------------------------------------------------------

@given(game_positions())
def test_territory_matches_a_plain_breadth_first_search(position: oracle.Position) -> None:
    triple = position.canonical()
    owned = engine.territory(oracle.triple_array(*triple))
    assert owned.shape == (1, 64) and owned.dtype == np.int8
    assert (owned[0] == territory_reference(*triple)).all()


def test_territory_batch_matches_rows_and_fills_the_buffer(canonical_sample) -> None:
    out = np.full((len(canonical_sample), 64), 7, dtype=np.int8)
    owned = engine.territory(canonical_sample, out=out)
    assert owned is out
    expected = [territory_reference(*oracle.triple_of(row)) for row in canonical_sample[::15]]
    assert (owned[::15] == np.stack(expected)).all()
    occupied = np.unpackbits(
        np.bitwise_or.reduce(canonical_sample, axis=1).astype("<u8").view(np.uint8).reshape(-1, 8),
        axis=1,
        bitorder="little",
    ).astype(bool)
    assert (owned[occupied] == 0).all()


@pytest.mark.parametrize("turn", [BLACK, WHITE])
@given(position=game_positions())
def test_board_territory_is_real_frame_with_black_positive(turn: int,
                                                           position: oracle.Position) -> None:
    board = Board(oracle.Position(position.black, position.white, position.arrows, turn)
                  .position_string(0))
    owned = board.territory()
    assert owned.shape == (64,) and owned.dtype == np.int8
    assert (owned == territory_reference(position.black, position.white, position.arrows)).all()


def test_territory_of_the_start_is_symmetric() -> None:
    owned = Board().territory().reshape(8, 8)
    assert (owned == -owned[::-1, ::-1]).all()
    assert owned.sum() == 0 and (owned[0] >= 0).all() and (owned[7] <= 0).all()


# ---------------------------------------------------------------------------------------------
# The batch calls
# ---------------------------------------------------------------------------------------------

def test_adjudicate_batch_matches_single_calls_and_fills_buffers(canonical_sample) -> None:
    out_result = np.full(len(canonical_sample), 9, dtype=np.int8)
    out_bounds = np.full((len(canonical_sample), 4), 99, dtype=np.int16)
    result, bounds = engine.adjudicate(canonical_sample, out_result, out_bounds)
    assert result is out_result and bounds is out_bounds
    for row in range(0, len(canonical_sample), 7):
        single_result, single_bounds = engine.adjudicate(canonical_sample[row])
        assert single_result[0] == result[row] and (single_bounds[0] == bounds[row]).all()
    separated_rows = bounds[:, MY_LOWER] >= 0
    assert (bounds[separated_rows, MY_LOWER] <= bounds[separated_rows, MY_UPPER]).all()
    assert (bounds[separated_rows, THEIR_LOWER] <= bounds[separated_rows, THEIR_UPPER]).all()
    assert (result == 1).sum() + (result == -1).sum() > 0


def test_bad_input_is_rejected_naming_the_argument() -> None:
    positions = np.stack([engine.start_position()] * 2)
    with pytest.raises(EngineInputError, match="positions"):
        engine.adjudicate(positions.astype(np.int64))
    with pytest.raises(EngineInputError, match="out_result"):
        engine.adjudicate(positions, out_result=np.zeros(3, dtype=np.int8))
    with pytest.raises(EngineInputError, match="out_bounds"):
        engine.adjudicate(positions, out_bounds=np.zeros((2, 4), dtype=np.int32))
    with pytest.raises(EngineInputError, match="out"):
        engine.territory(positions, out=np.zeros((2, 63), dtype=np.int8))
    with pytest.raises(EngineInputError, match="positions"):
        engine.territory(np.zeros((2, 4), dtype=np.uint64))
