"""OpenSpiel's `amazons` (board_size 8) as an independent peer of the engine.

Skipped unless `pyspiel` imports (`pip install open-spiel`, the `bench` extra). OpenSpiel plays a
move as three actions by the same player (from, to, arrow), each a cell `r * 8 + c` with row 0 at
the bottom of Botzone's picture: Botzone `(x, y)` is cell `(7 - y) * 8 + x`, and OpenSpiel's
player 0 is Botzone's Black, who moves first.
"""

from __future__ import annotations

import random

import pytest

from amazons import Board, Move
from amazons.players.openspiel import cell_of, square_of

pyspiel = pytest.importorskip("pyspiel")


def openspiel_moves(state) -> set[tuple[int, int, int]]:
    """All full moves of an OpenSpiel state at a from-square decision, as Botzone squares."""
    moves = set()
    for source in state.legal_actions():
        picked = state.child(source)
        for destination in picked.legal_actions():
            moved = picked.child(destination)
            for arrow in moved.legal_actions():
                moves.add((square_of(source), square_of(destination), square_of(arrow)))
    return moves


@pytest.fixture(scope="module")
def game():
    return pyspiel.load_game("amazons", {"board_size": 8})


def test_coordinate_mapping_is_a_bijection() -> None:
    assert sorted(cell_of(square) for square in range(64)) == list(range(64))
    assert all(square_of(cell_of(square)) == square for square in range(64))


def test_start_positions_agree(game) -> None:
    state = game.new_initial_state()
    assert state.current_player() == 0
    board = Board()
    black_cells = sorted(cell_of(square) for square in board.amazons(0))
    assert sorted(state.legal_actions()) == black_cells
    assert openspiel_moves(state) == {move.as_tuple() for move in board.legal_moves()}


@pytest.mark.parametrize("seed", range(10))
def test_legal_move_sets_agree_along_random_games(game, seed: int) -> None:
    rng = random.Random(seed)
    state = game.new_initial_state()
    board = Board()
    while True:
        assert state.is_terminal() == board.is_game_over(), f"ply {board.ply}"
        if board.is_game_over():
            break
        assert state.current_player() == board.turn, f"ply {board.ply}"
        ours = {move.as_tuple() for move in board.legal_moves()}
        assert openspiel_moves(state) == ours, f"ply {board.ply}"
        move = Move(*rng.choice(sorted(ours)))
        board.push(move)
        for square in move.as_tuple():
            state.apply_action(cell_of(square))
    winner = board.winner()
    assert state.returns()[winner] == 1 and state.returns()[1 - winner] == -1


def test_openspiel_mcts_player_plays_legal_games_in_the_arena() -> None:
    from amazons.matches.arena import run_arena

    result = run_arena("openspiel-mcts", "random", games=2, simulations=30, processes=1, seed=3)
    for record in result.records:
        board = Board.from_moves(record.moves)  # replays and checks every move
        assert board.is_game_over()
    assert result.wins_a + result.wins_b == 2


def test_openspiel_mcts_player_with_a_time_budget() -> None:
    """The path the README's strength figures use (`--time-budget`): the time-budget argument of
    OpenSpiel's MCTSBot (open-spiel 2.0.2), a third of the move's budget per decision."""
    import time

    from amazons.matches.arena import make_player, run_arena

    player = make_player("openspiel-mcts", seed=1, time_budget=0.3)
    board = Board.from_moves([Move.from_botzone(text) for text in ("5 0 3 2 6 5", "0 5 4 5 3 4")])
    started = time.perf_counter()
    move = player.choose_move(board)
    elapsed = time.perf_counter() - started
    assert board.is_legal(move)
    assert 0.2 < elapsed < 1.5, elapsed
    result = run_arena("openspiel-mcts", "random", games=2, time_budget=0.03, processes=1, seed=4)
    assert result.wins_a + result.wins_b == 2
    assert all(Board.from_moves(record.moves).is_game_over() for record in result.records)


@pytest.mark.parametrize("board", ["standard10", "openspiel6", "openspiel8"])
def test_openspiel_mcts_plays_openspiels_own_boards(board: str) -> None:
    """On OpenSpiel's own starts the squares are its cells as they stand (its player 0, on the
    bottom rows, moves first): whole arena games, every move replayed and checked."""
    from amazons.matches.arena import run_arena

    result = run_arena("openspiel-mcts", "random", games=2, simulations=20, processes=1, seed=5,
                       board=board)
    for record in result.records:
        replayed = Board.from_moves(record.moves, start=board)
        assert replayed.is_game_over()
    assert result.wins_a + result.wins_b == 2


def test_openspiel_mcts_refuses_a_board_openspiel_has_not() -> None:
    from amazons.matches.arena import make_player
    from amazons.players.player import PlayerError

    player = make_player("openspiel-mcts", seed=1, simulations=5)
    with pytest.raises(PlayerError, match="plays OpenSpiel's boards .* not a 9x9 position"):
        player.choose_move(Board("9/9/9/B7B/9/W7W/9/2B3W2/2W3B2 b 0"))
