"""`Board` and `Move` on every size: the standard 10x10 game, OpenSpiel's 6x6, user starts.

The rules themselves are checked against OpenSpiel and published perft figures in
tests/test_engine_sizes.py; here the Python face: notation, push/pop, position strings,
pickling, errors that name what was wrong.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amazons.board import BLACK, WHITE, Board, IllegalMoveError, Move, NotationError, perft
from amazons.boards import BOARDS, board_spec


def random_game(start: str, plies: int, seed: int) -> Board:
    board = Board(start=start)
    rng = np.random.default_rng(seed)
    for _ in range(plies):
        if board.is_game_over():
            break
        moves = board.legal_move_array()
        board.push(Move(*moves[rng.integers(len(moves))], size=board.size))
    return board


def test_the_standard_start() -> None:
    board = Board(start="standard10")
    assert board.size == 10 and board.turn == WHITE and board.ply == 0
    assert board.position_string() == "3B2B3/10/10/B8B/10/10/W8W/10/10/3W2W3 w 0"
    assert board.count_legal_moves() == 2176 and perft(board, 1) == 2176
    assert board.canonical_position().shape == (6,)
    board.push(Move.parse("d1-d7/g7", size=10))
    assert board.turn == BLACK and board.amazons(WHITE).count(Move.parse("d1-d7/g7", 10).dst) == 1
    assert board.arrows() == [Move.parse("d1-d7/g7", size=10).arrow]


def test_openspiel_and_botzone_starts() -> None:
    assert Board(start="openspiel6").turn == WHITE
    assert Board(start="openspiel8").turn == WHITE
    assert Board().start is BOARDS["botzone8"] and Board().turn == BLACK
    assert Board(start="openspiel8").count_legal_moves() == Board().count_legal_moves() == 1232


@pytest.mark.parametrize("start", ["standard10", "openspiel6", "botzone8"])
def test_push_pop_restore_position_and_hash(start: str) -> None:
    board = random_game(start, 12, seed=1)
    text, hash_value = board.position_string(), board.zobrist_hash
    moves = board.move_stack
    for move in reversed(moves):
        assert board.pop() == move
    assert board == Board(start=start) and board.zobrist_hash == Board(start=start).zobrist_hash
    for move in moves:
        board.push(move)
    assert board.position_string() == text and board.zobrist_hash == hash_value


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["standard10", "openspiel6", "botzone8"]), st.integers(0, 40),
       st.integers(0, 2**32 - 1))
def test_position_strings_pickles_and_copies_round_trip(start: str, plies: int, seed: int) -> None:
    board = random_game(start, plies, seed)
    again = Board(board.position_string())
    assert again == board and again.size == board.size and again.start == board.start
    for clone in (pickle.loads(pickle.dumps(board)), copy.deepcopy(board), board.copy()):
        assert clone == board and clone.move_stack == board.move_stack
        assert clone.start == board.start
    assert Board.from_moves([str(move) for move in board.move_stack], start=start) == board
    assert Board.from_moves([move.to_botzone() for move in board.move_stack], start=start) == board


@settings(max_examples=40, deadline=None)
@given(st.integers(6, 10), st.data())
def test_move_notation_round_trips_on_every_size(size: int, data) -> None:
    squares = st.integers(0, size * size - 1)
    move = Move(data.draw(squares), data.draw(squares), data.draw(squares), size=size)
    assert Move.parse(str(move), size) == move
    assert Move.parse(str(move).replace("-", "").replace("/", ""), size) == move
    assert Move.from_botzone(move.to_botzone(), size) == move
    assert eval(repr(move)) == move  # noqa: S307 - repr is Move.parse(...), checked here


def test_a_user_start_plays() -> None:
    start = board_spec("B4B/6/1B2B1/1W2W1/6/W4W b")
    board = Board(start=start)
    assert board.size == 6 and board.turn == BLACK and board.start == start
    assert board.count_legal_moves() > 0
    assert perft(board, 1) == board.count_legal_moves()


def test_errors_name_what_was_wrong() -> None:
    board = Board(start="standard10")
    with pytest.raises(IllegalMoveError, match="for a 8x8 board, this board is 10x10"):
        board.push(Move.parse("c1-c3/c4"))
    with pytest.raises(IllegalMoveError, match="holds no white amazon"):
        board.push(Move.parse("a1-a2/a3", size=10))
    with pytest.raises(NotationError, match="file a-j and a rank 1-10"):
        board.push_str("a11-a2/a3")
    with pytest.raises(NotationError, match="is 8x8 but the start 'standard10' is 10x10"):
        Board("2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 0", start="standard10")
    with pytest.raises(NotationError, match="the board is 10x10"):
        board.set_position("2B2B2/8/B6B/8/8/W6W/8/2W2W2 b 0")
    with pytest.raises(NotationError, match="unknown board 'standard12'"):
        Board(start="standard12")
    with pytest.raises(NotationError, match="move src 100 is not a square 0..99"):
        Move(100, 0, 1, size=10)
    assert board.ply == 0 and not board.is_legal(Move.parse("c1-c3/c4"))


def test_a_nine_by_nine_position_has_no_named_start() -> None:
    board = Board("9/9/9/B7B/9/W7W/9/2B3W2/2W3B2 b 0")
    assert board.size == 9 and board.start is None
    assert board.canonical_position().shape == (6,)
    assert perft(board, 1) == board.count_legal_moves() > 0
    assert pickle.loads(pickle.dumps(board)) == board
