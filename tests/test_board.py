"""`Board`, `Move`, notation and position strings, against the oracle and the Botzone rules."""

from __future__ import annotations

import numpy as np
import oracle
import pytest
from conftest import game_positions, oracle_game, oracle_line, random_games
from hypothesis import given
from hypothesis import strategies as st

from amazons import (
    BLACK,
    MAX_MOVES,
    START_POSITION,
    WHITE,
    Board,
    IllegalMoveError,
    Move,
    NotationError,
    parse_square,
    perft,
    square_index,
    square_name,
)

squares = st.integers(min_value=0, max_value=63)

# The Botzone wiki's sample match (shared/reference/AMAZONS.md): Black's and White's moves in
# the order played; Black's opening request `-1 -1 -1 -1 -1 -1` is not a move.
BOTZONE_WIKI_MOVES = ("5 0 3 2 6 5", "0 5 4 5 3 4", "0 2 0 3 3 0", "2 7 2 5 1 4")

# Black amazons spread out, White's in the corners, no arrows: 1,778 legal moves.
CROWDED_BLACK = (14, 29, 34, 44)
CROWDED_WHITE = (0, 1, 55, 63)


def oracle_move(move: Move) -> oracle.Move:
    return oracle.move_from_indices(move.as_tuple())


def board_of(position: oracle.Position, ply: int = 0) -> Board:
    return Board(position.position_string(ply))


def snapshot(board: Board) -> tuple:
    """Everything a failed push must leave alone."""
    return (board.position_string(), board.zobrist_hash, board.turn, board.ply, board.move_stack)


def expected_algebraic(square: int) -> str:
    x, y = oracle.square_at(square)
    return "abcdefgh"[x] + str(8 - y)


# ---------------------------------------------------------------------------------------------
# squares and moves
# ---------------------------------------------------------------------------------------------

def test_square_names_follow_the_documented_layout() -> None:
    for square in range(64):
        x, y = oracle.square_at(square)
        assert square_index(x, y) == square
        assert square_name(square) == expected_algebraic(square)
        assert parse_square(expected_algebraic(square)) == square
        assert parse_square(expected_algebraic(square).upper()) == square
    assert (square_name(0), square_name(63)) == ("a8", "h1")


@given(squares, squares, squares)
def test_move_notations_round_trip(src: int, dst: int, arrow: int) -> None:
    move = Move(src, dst, arrow)
    assert str(move) == ("-".join([expected_algebraic(src), expected_algebraic(dst)])
                         + "/" + expected_algebraic(arrow))
    botzone = " ".join(f"{x} {y}" for x, y in oracle.move_from_indices((src, dst, arrow)))
    assert move.to_botzone() == botzone
    assert Move.parse(str(move)) == move
    assert Move.parse(botzone) == move
    assert Move.from_botzone(botzone) == move
    assert eval(repr(move)) == move  # noqa: S307  (repr round-trips by contract)
    assert move.as_tuple() == (src, dst, arrow)
    compact = "".join(expected_algebraic(square) for square in (src, dst, arrow))
    assert Move.parse(compact) == move
    assert Move.parse(" ".join(expected_algebraic(square) for square in (src, dst, arrow))) == move


def test_move_accepts_numpy_integers_and_is_hashable() -> None:
    move = Move(np.int32(2), np.int64(10), np.int32(18))
    assert move == Move(2, 10, 18) and hash(move) == hash(Move(2, 10, 18))
    assert type(move.src) is int


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("z9-d4/f6", "z9"),
        ("d8-d4/i1", "i1"),
        ("d8-d0/f6", "d0"),
        ("d8-d4", "d8-d4"),
        ("d8-d4/f6/g7", "d8-d4/f6/g7"),
        ("", "''"),
        ("3 0 3 9 5 2", "(3, 9)"),
        ("8 0 3 4 5 2", "(8, 0)"),
        ("-1 -1 -1 -1 -1 -1", "(-1, -1)"),
        ("3 0 3 4 5", "3 0 3 4 5"),
        ("3 0 3 4 5 2 1", "3 0 3 4 5 2 1"),
        ("3 0 3 a 5 2", "3 0 3 a 5 2"),
    ],
)
def test_bad_move_text_raises_naming_the_token(text: str, token: str) -> None:
    with pytest.raises(NotationError) as raised:
        Move.parse(text)
    assert token in str(raised.value)
    board = Board()
    before = snapshot(board)
    with pytest.raises(NotationError):
        board.push_str(text)
    assert snapshot(board) == before


def test_botzone_parser_names_a_non_integer_token() -> None:
    with pytest.raises(NotationError, match="'a'"):
        Move.from_botzone("3 0 3 a 5 2")


@pytest.mark.parametrize("squares_", [(64, 0, 0), (0, -1, 0), (0, 0, 99)])
def test_move_rejects_off_board_squares(squares_) -> None:
    with pytest.raises(NotationError, match=str(max(squares_, key=lambda s: abs(s - 31.5)))):
        Move(*squares_)


@pytest.mark.parametrize(("x", "y"), [(-1, 0), (8, 0), (0, 8), (0, -1)])
def test_square_index_rejects_off_board(x: int, y: int) -> None:
    with pytest.raises(NotationError, match=rf"\({x}, {y}\)"):
        square_index(x, y)


def test_square_name_and_parse_square_reject_bad_input() -> None:
    with pytest.raises(NotationError, match="64"):
        square_name(64)
    for bad in ("a9", "i1", "a", "a10", ""):
        with pytest.raises(NotationError, match=repr(bad)):
            parse_square(bad)


# ---------------------------------------------------------------------------------------------
# position strings
# ---------------------------------------------------------------------------------------------

def test_start_position_string() -> None:
    assert Board().position_string() == oracle.Position().position_string(0) == START_POSITION
    assert Board(START_POSITION) == Board()


@given(random_games())
def test_position_strings_match_oracle_and_round_trip(game) -> None:
    _, moves = game
    board = Board()
    for move in moves:
        board.push(Move(*oracle.move_indices(move)))
    expected = oracle.play_line(moves)[-1]
    text = board.position_string()
    assert text == expected.position_string(len(moves))
    again = Board(text)
    assert again.position_string() == text and again == board
    assert again.ply == len(moves) and again.turn == expected.turn
    assert again.zobrist_hash == board.zobrist_hash, "incremental hash differs from a fresh one"
    black, white, arrows = again.bitboards()
    assert (black, white, arrows) == tuple(
        oracle.bitboard(squares_) for squares_ in (expected.black, expected.white, expected.arrows)
    )
    assert again.amazons(BLACK) == sorted(oracle.square_index(s) for s in expected.black)
    assert again.amazons(WHITE) == sorted(oracle.square_index(s) for s in expected.white)
    assert again.arrows() == sorted(oracle.square_index(s) for s in expected.arrows)


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("2B2B2/8/B6B/8/8/W6W/8 b 0", "7 rows"),
        ("2B2B2/8/B6B/8/8/W6W/8/2W2W2/8 b 0", "9 rows"),
        ("2B2B2/8/B6B/8/8/W6W/8/2W2W3 b 0", "2W2W3"),
        ("2B2B2/8/B6B/8/8/W6W/8/2W2W b 0", "2W2W"),
        ("2B2B2/8/B6B/8/8/W6W/8/2W2Q2 b 0", "'Q'"),
        ("2B2B2/8/B6B/8/8/W6W/8/2W2W2 x 0", "'x'"),
        ("2B2B2/8/B6B/8/8/W6W/8/2W2W2 b -1", "'-1'"),
        ("2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 1.5", "'1.5'"),
        ("2B2B2/8/B6B/8/8/W6W/8/2W2W2", "ROWS SIDE"),
        ("08/8/8/8/8/8/8/8 b 0", "'0'"),
    ],
)
def test_bad_position_strings_raise_naming_the_token(text: str, token: str) -> None:
    board = Board()
    board.push_str("c8-c6/d7")
    before = snapshot(board)
    with pytest.raises(NotationError) as raised:
        board.set_position(text)
    assert token in str(raised.value)
    assert snapshot(board) == before
    with pytest.raises(NotationError):
        Board(text)


# ---------------------------------------------------------------------------------------------
# games: legal moves, terminal flags, winners, push/pop
# ---------------------------------------------------------------------------------------------

@given(random_games())
def test_legal_moves_terminal_flags_and_winners_match_oracle_along_games(game) -> None:
    _, moves = game
    board = Board()
    for ply, position in enumerate(oracle.play_line(moves)):
        expected = oracle.move_index_set(position.legal_moves())
        array = board.legal_move_array()
        assert array.dtype == np.int32 and array.shape == (len(expected), 3), f"ply {ply}"
        assert oracle.rows_as_set(array) == expected, f"ply {ply}"
        assert {move.as_tuple() for move in board.legal_moves()} == expected
        assert board.count_legal_moves() == len(expected)
        assert board.is_game_over() == position.is_terminal()
        assert board.winner() == position.winner()
        assert board.turn == position.turn and board.ply == ply
        if ply < len(moves):
            board.push(Move(*oracle.move_indices(moves[ply])))


@pytest.mark.parametrize("seed", range(6))
def test_complete_games_end_with_the_oracle_winner(seed: int) -> None:
    moves = oracle_game(seed)
    final = oracle_line(seed)[-1]
    board = Board.from_moves([Move(*oracle.move_indices(move)) for move in moves])
    assert board.is_game_over() and final.is_terminal()
    assert board.winner() == final.winner() == 1 - final.turn
    assert board.count_legal_moves() == 0 and len(board.legal_move_array()) == 0


@given(random_games(min_plies=1))
def test_push_pop_restores_position_and_hash(game) -> None:
    _, moves = game
    board = Board()
    history = [snapshot(board)]
    for move in moves:
        board.push(Move(*oracle.move_indices(move)))
        history.append(snapshot(board))
    assert board.move_stack == [Move(*oracle.move_indices(move)) for move in moves]
    for move in reversed(moves):
        history.pop()
        assert board.pop() == Move(*oracle.move_indices(move))
        assert snapshot(board) == history[-1]
    assert board == Board() and board.zobrist_hash == Board().zobrist_hash
    with pytest.raises(IndexError):
        board.pop()


def test_hashes_tell_positions_and_sides_apart(positions_sample) -> None:
    hashes = {}
    for position in positions_sample:
        key = position.position_string(0)
        hashes.setdefault(board_of(position).zobrist_hash, set()).add(key)
    assert all(len(keys) == 1 for keys in hashes.values()), "hash collision in a small sample"
    black_to_move = Board(START_POSITION)
    white_to_move = Board(START_POSITION.replace(" b ", " w "))
    assert black_to_move.zobrist_hash != white_to_move.zobrist_hash
    assert hash(black_to_move) == hash(Board.from_moves([]))  # equal boards, equal hashes


def test_hash_ignores_move_order() -> None:
    # Two Black moves on opposite sides of the board and one White move, in both orders.
    first, second, reply = "c8-c7/b7", "h6-h5/g4", "a3-a2/b2"
    one = Board.from_moves([first, reply, second])
    other = Board.from_moves([second, reply, first])
    assert one == other and one.zobrist_hash == other.zobrist_hash
    assert one.position_string() == other.position_string()


@given(game_positions(), squares, squares, squares, st.booleans())
def test_push_accepts_exactly_the_oracle_legal_moves(position, src, dst, arrow, own_amazon) -> None:
    if own_amazon:
        src = oracle.square_index(sorted(position.mover_and_waiting()[0])[src % 4])
    board = board_of(position, ply=7)
    move = Move(src, dst, arrow)
    legal = oracle.move_from_indices((src, dst, arrow)) in set(position.legal_moves())
    assert oracle.is_legal(*position.mover_and_waiting(), position.arrows,
                           oracle_move(move)) == legal
    assert board.is_legal(move) == legal
    before = snapshot(board)
    if legal:
        board.push(move)
        assert board.position_string() == position.play(oracle_move(move)).position_string(8)
    else:
        with pytest.raises(IllegalMoveError) as raised:
            board.push(move)
        assert any(square_name(square) in str(raised.value) for square in (src, dst, arrow))
        assert snapshot(board) == before


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("a8-a7/a6", "a8"),  # no amazon there
        ("a3-a2/a1", "a3"),  # White's amazon, Black to move
        ("c8-h8/h7", "h8"),  # slides through f8
        ("a6-a5/a2", "a2"),  # the arrow flies through a3
        ("a6-c5/c4", "c5"),  # not a queen line
        ("a6-a5/a5", "a5"),  # arrow onto the amazon itself
    ],
)
def test_illegal_push_names_the_square_and_leaves_the_board_unchanged(text: str,
                                                                       named: str) -> None:
    move = Move.parse(text)
    assert oracle_move(move) not in set(oracle.Position().legal_moves())
    board = Board()
    before = snapshot(board)
    with pytest.raises(IllegalMoveError, match=named):
        board.push(move)
    assert snapshot(board) == before
    assert not board.is_legal(move) and snapshot(board) == before


def test_botzone_wiki_example_replays_legally() -> None:
    position = oracle.Position()
    board = Board()
    for text in BOTZONE_WIKI_MOVES:
        move = Move.from_botzone(text)
        assert oracle_move(move) in set(position.legal_moves()), text
        position = position.play(oracle_move(move))
        board.push_str(text)
        assert board.position_string() == position.position_string(board.ply)
    assert board.turn == BLACK and board.ply == 4
    assert Board.from_moves(list(BOTZONE_WIKI_MOVES)) == board
    assert [move.to_botzone() for move in board.move_stack] == list(BOTZONE_WIKI_MOVES)


def test_from_moves_names_the_bad_move() -> None:
    with pytest.raises(IllegalMoveError, match="move 3"):
        Board.from_moves(["c8-c6/d7", "c1-c3/d2", "c8-c7/c6"])  # c8 is empty by then
    with pytest.raises(NotationError, match="move 2.*q9"):
        Board.from_moves(["c8-c6/d7", "c1-c3/q9"])


def test_from_moves_mixes_notations_and_move_values() -> None:
    moves = [oracle.move_indices(move) for move in oracle_game(4)[:6]]
    mixed = [
        Move(*moves[0]),
        str(Move(*moves[1])),
        Move(*moves[2]).to_botzone(),
        Move(*moves[3]),
        str(Move(*moves[4])).replace("-", "").replace("/", ""),
        Move(*moves[5]).to_botzone(),
    ]
    assert Board.from_moves(mixed).position_string() == oracle_line(4)[6].position_string(6)


def test_crowded_position_fits_in_max_moves() -> None:
    black = frozenset(oracle.square_at(square) for square in CROWDED_BLACK)
    white = frozenset(oracle.square_at(square) for square in CROWDED_WHITE)
    position = oracle.Position(black, white, frozenset(), BLACK)
    expected = oracle.move_index_set(position.legal_moves())
    assert 1_778 <= len(expected) <= MAX_MOVES
    board = board_of(position)
    array = board.legal_move_array()
    assert len(array) == len(expected) and oracle.rows_as_set(array) == expected
    assert board.count_legal_moves() == len(expected)


def test_copy_is_independent_and_equality_ignores_history() -> None:
    board = Board.from_moves(BOTZONE_WIKI_MOVES[:2])
    copy = board.copy()
    copy.push_str(BOTZONE_WIKI_MOVES[2])
    assert board.ply == 2 and copy.ply == 3
    assert copy.move_stack[:2] == board.move_stack
    assert Board(board.position_string()) == board  # same position, no history


def test_copy_module_and_pickle_keep_the_position_and_its_history() -> None:
    import copy
    import pickle

    midgame = Board("2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 6")  # a position string starts the history
    for move in BOTZONE_WIKI_MOVES[:3]:
        midgame.push_str(move)
    for board in (Board(), Board.from_moves(BOTZONE_WIKI_MOVES), midgame):
        for clone in (copy.copy(board), copy.deepcopy(board), pickle.loads(pickle.dumps(board))):
            assert clone == board and clone is not board
            assert (clone.ply, clone.zobrist_hash) == (board.ply, board.zobrist_hash)
            assert clone.move_stack == board.move_stack
            clone.push(clone.legal_moves()[0])  # independent of the original
            assert clone != board and board.ply == clone.ply - 1


def test_perft_of_boards_matches_published_counts() -> None:
    assert perft(Board(), 1) == 1_232
    assert perft(Board(), 2) == 1_331_198
    white_start = Board(START_POSITION.replace(" b ", " w "))
    assert perft(white_start, 1) == 1_232  # the start looks the same to both sides


def test_board_text_shows_every_piece() -> None:
    board = Board.from_moves(BOTZONE_WIKI_MOVES)
    text = str(board)
    assert text.count("B") == 4 and text.count("W") == 4
    assert sum(line.count("x") for line in text.splitlines()[2:10]) == 4
    assert "black to move" in text


def test_too_many_amazons_are_rejected() -> None:
    text = "2B3B1/4B3/1B6/8/5B2/3B4/8/B6B b 0"  # 8 Black amazons, spread out, no White ones
    black = frozenset(oracle.square_at(square) for square in (2, 6, 12, 17, 37, 43, 56, 63))
    expected = oracle.move_index_set(
        oracle.Position(black, frozenset(), frozenset(), BLACK).legal_moves())
    assert len(expected) > MAX_MOVES
    with pytest.raises(NotationError, match="8 black amazons"):
        Board(text)
