"""The RL environments on every board size: PettingZoo and Gymnasium sized from their board, and
`python_amazons` at `board_size` 6, 8 and 10 against OpenSpiel's own C++ `amazons`.

The oracles: the engine's legal moves (`Board.legal_moves`) for the action masks, a board with
the other side to move for the observations of the side not to move, and OpenSpiel's C++ game,
whose full move sets (expanded over its three decisions) must equal ours on random games.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from amazons.board import BLACK, WHITE, Board, Move
from amazons.boards import BOARDS, BoardSpec, board_spec, format_position
from amazons.envs.actions import (
    ActionError,
    action_mask,
    action_table,
    action_to_move,
    decode_actions,
    encode_moves,
    move_to_action,
    num_actions,
    observation_planes,
    player_view,
)

SIZES = (6, 7, 8, 9, 10)
GAME_BOARDS = ("openspiel6", "standard10")  # whole random games in PettingZoo and Gymnasium


def queen_reach(size: int, square: int) -> int:
    """Squares a queen reaches from `square` on an empty board, by walking its eight rays."""
    x, y = square % size, square // size
    count = 0
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            if dx or dy:
                step = 1
                while 0 <= x + step * dx < size and 0 <= y + step * dy < size:
                    count, step = count + 1, step + 1
    return count


@pytest.mark.parametrize("size", SIZES)
def test_action_table_is_every_move_geometry_in_order(size: int) -> None:
    table = action_table(size)
    squares = size * size
    # Every action is a (src, dst) queen line followed by a (dst, arrow) one: reach(dst)^2 of them.
    assert table.num_actions == num_actions(size) == sum(
        queen_reach(size, square) ** 2 for square in range(squares))
    assert table.index.shape == (squares, squares, squares)
    moves = table.moves.astype(np.int64)
    keys = (moves[:, 0] * squares + moves[:, 1]) * squares + moves[:, 2]
    assert np.all(np.diff(keys) > 0)  # lexicographic, so sorting actions sorts moves
    actions = np.arange(table.num_actions)
    assert np.array_equal(table.index[moves[:, 0], moves[:, 1], moves[:, 2]], actions)
    assert int((table.index >= 0).sum()) == table.num_actions
    assert np.array_equal(encode_moves(table.moves, size), actions)
    assert np.array_equal(decode_actions(actions, size), table.moves)
    with pytest.raises(ActionError, match=f"outside 0..{table.num_actions - 1}"):
        decode_actions(np.array([table.num_actions]), size)
    with pytest.raises(ActionError, match="off the board"):
        encode_moves(np.array([[0, 1, squares]]), size)


def test_the_8x8_table_is_the_one_the_environments_always_had() -> None:
    assert num_actions(8) == 33_344 and num_actions(10) == 86_980 and num_actions(6) == 9_412
    with pytest.raises(ActionError, match="board size must be one of"):
        action_table(11)


def random_game_boards(start: str, seed: int) -> list[Board]:
    """Every position of a random game from `start`, the last one over."""
    board, rng, boards = Board(start=start), np.random.default_rng(seed), []
    while True:
        boards.append(board.copy())
        if board.is_game_over():
            return boards
        moves = board.legal_moves()
        board.push(moves[int(rng.integers(len(moves)))])


def other_side_to_move(board: Board) -> Board:
    """The same squares with the other side to move (the oracle of the side not to move's view)."""
    return Board(format_position(board.size, *board.bitboards(), 1 - board.turn, board.ply),
                 start=board.start)


@pytest.mark.parametrize("start", ["openspiel6", "standard10", "botzone8", "openspiel8"])
def test_masks_and_views_are_the_engines_on_every_ply(start: str) -> None:
    size = BOARDS[start].size
    for board in random_game_boards(start, seed=size)[::3]:
        mask = action_mask(board.canonical_position(), size)
        assert mask.shape == (num_actions(size),) and mask.dtype == np.int8
        moves = {action_to_move(board, int(action)) for action in np.flatnonzero(mask)}
        assert moves == set(board.legal_moves())
        for move in list(moves)[:20]:
            assert mask[move_to_action(board, move)] == 1
        other = 1 - board.turn
        flipped = other_side_to_move(board)
        assert np.array_equal(player_view(board, other), flipped.canonical_position())
        assert np.array_equal(player_view(board, board.turn), board.canonical_position())
        planes = observation_planes(board, other, 7)
        assert planes.shape == (7, size, size) and planes.dtype == np.float32


def test_a_move_of_another_size_has_no_action() -> None:
    board = Board(start="standard10")
    with pytest.raises(ActionError, match="8x8 board, the board is 10x10"):
        move_to_action(board, Board().legal_moves()[0])


@pytest.mark.parametrize("start", GAME_BOARDS)
def test_pettingzoo_plays_whole_random_games_sized_from_its_board(start: str) -> None:
    from pettingzoo.test import api_test

    from amazons.envs.pettingzoo_env import env

    spec = board_spec(start)
    size, actions = spec.size, num_actions(spec.size)
    game = env(board=start)
    raw = game.unwrapped
    for agent in raw.possible_agents:
        assert game.observation_space(agent)["observation"].shape == (7, size, size)
        assert game.observation_space(agent)["action_mask"].shape == (actions,)
        assert game.action_space(agent).n == actions
    game.reset(seed=size)
    rng = np.random.default_rng(size)
    first = ("black_0", "white_0")[spec.first]
    assert game.agent_selection == first
    rewards = {}
    for agent in game.agent_iter():
        observation, reward, termination, truncation, _ = game.last()
        assert observation["observation"].shape == (7, size, size)
        assert observation["action_mask"].shape == (actions,)
        board = raw.board
        if termination:
            rewards[agent] = reward
            game.step(None)
            continue
        assert agent == ("black_0", "white_0")[board.turn]
        legal = np.flatnonzero(observation["action_mask"])
        assert {action_to_move(board, int(a)) for a in legal} == set(board.legal_moves())
        game.step(int(rng.choice(legal)))
    final = raw.board
    assert final.is_game_over() and final.start.same_start(spec)
    winner = ("black_0", "white_0")[final.winner()]
    loser = ("black_0", "white_0")[1 - final.winner()]
    assert rewards == {winner: 1, loser: -1}
    with warnings.catch_warnings():  # the dict observation is not one of its built-in games'
        warnings.simplefilter("ignore")
        api_test(env(board=start), num_cycles=10)


@pytest.mark.parametrize("start", GAME_BOARDS)
@pytest.mark.parametrize("agent_color", ["black", "white"])
def test_gymnasium_plays_whole_random_games_against_a_player(start: str, agent_color: str) -> None:
    from gymnasium.utils.env_checker import check_env

    from amazons.envs.gymnasium_env import AmazonsEnv

    spec = board_spec(start)
    size, actions = spec.size, num_actions(spec.size)
    env = AmazonsEnv(opponent="random", agent_color=agent_color, board=start)
    assert env.observation_space["observation"].shape == (7, size, size)
    assert env.observation_space["action_mask"].shape == (actions,)
    assert env.action_space.n == actions
    observation, info = env.reset(seed=1)
    color = BLACK if agent_color == "black" else WHITE
    # The opponent moved in reset exactly when its side moves first on this board.
    assert (info["opponent_move"] is not None) == (spec.first != color)
    rng = np.random.default_rng(size)
    terminated, reward = False, 0.0
    while not terminated:
        board = env.board
        assert board.turn == color
        legal = np.flatnonzero(observation["action_mask"])
        assert {action_to_move(board, int(a)) for a in legal} == set(board.legal_moves())
        observation, reward, terminated, truncated, info = env.step(int(rng.choice(legal)))
        assert observation["observation"].shape == (7, size, size) and not truncated
    final = env.board
    assert final.is_game_over() and reward == (1.0 if final.winner() == color else -1.0)
    env.close()
    check_env(AmazonsEnv(opponent="random", agent_color=agent_color, board=start),
              skip_render_check=True)


def test_environments_name_a_bad_board() -> None:
    from amazons.envs.gymnasium_env import AmazonsEnv
    from amazons.envs.pettingzoo_env import AmazonsAECEnv

    with pytest.raises(ValueError, match="unknown board 'standard12'"):
        AmazonsAECEnv(board="standard12")
    with pytest.raises(ValueError, match="unknown board 'standard12'"):
        AmazonsEnv(board="standard12")


def test_an_environment_takes_a_boardspec_and_a_start_string() -> None:
    from amazons.envs.pettingzoo_env import AmazonsAECEnv

    spec = BoardSpec(7, (0, 6, 14, 20), (28, 34, 42, 48), WHITE)
    environment = AmazonsAECEnv(board=spec)
    environment.reset()
    assert environment.agent_selection == "white_0"
    assert environment.action_space("white_0").n == num_actions(7)
    from_string = AmazonsAECEnv(board=spec.position_string())
    assert from_string.board_spec.same_start(spec)


# -- OpenSpiel: python_amazons against OpenSpiel's own amazons ------------------------------------


@pytest.fixture(scope="module")
def openspiel_game():
    pytest.importorskip("pyspiel")
    from amazons.envs import openspiel_game

    return openspiel_game


def cpp_moves(cpp_state, spec: BoardSpec, openspiel_game) -> set[str]:
    """The C++ state's full moves, expanded over its three decisions, in our algebraic notation."""
    moves = set()
    for source in cpp_state.legal_actions():
        picked = cpp_state.child(source)
        for destination in picked.legal_actions():
            moved = picked.child(destination)
            for arrow in moved.legal_actions():
                move = openspiel_game.openspiel_actions_to_move([source, destination, arrow], spec)
                moves.add(str(move))
    return moves


@pytest.mark.parametrize("size", [6, 8, 10])
def test_python_amazons_plays_openspiels_amazons_on_random_games(size: int,
                                                                 openspiel_game) -> None:
    import pyspiel

    game = pyspiel.load_game(openspiel_game.GAME_NAME, {"board_size": size})
    cpp_game = pyspiel.load_game("amazons", {"board_size": size})
    spec = game.board_spec
    assert spec.size == size
    assert game.num_distinct_actions() == num_actions(size)
    assert game.max_game_length() == size * size - 8
    assert game.observation_tensor_shape() == [7, size, size]
    for seed in range(2):
        rng = np.random.default_rng(100 * size + seed)
        state = game.new_initial_state()
        plies = 0
        while True:
            cpp_state = openspiel_game.to_openspiel_amazons(state, cpp_game)
            assert str(cpp_state).strip() == to_cpp_picture(state.board, spec, openspiel_game)
            assert cpp_state.current_player() == state.current_player()
            assert cpp_state.is_terminal() == state.is_terminal()
            if state.is_terminal():
                break
            if plies % 3 == 0:
                ours = {state.action_to_string(state.current_player(), action)
                        for action in state.legal_actions()}
                assert ours == cpp_moves(cpp_state, spec, openspiel_game), (size, seed, plies)
            state.apply_action(int(rng.choice(state.legal_actions())))
            plies += 1
        assert state.returns() == cpp_state.returns()
        back = openspiel_game.from_openspiel_amazons(cpp_state, game)
        assert back.board.move_stack == state.board.move_stack
    pyspiel.random_sim_test(game, num_sims=2, serialize=True, verbose=False)


def to_cpp_picture(board: Board, spec: BoardSpec, openspiel_game) -> str:
    """OpenSpiel's picture of `board` (row 0 on top; X player 0, O player 1, # an arrow), drawn
    from our squares through `openspiel_cells`."""
    size = board.size
    cells = openspiel_game.openspiel_cells(spec)[0]
    black, white, arrows = board.bitboards()
    marks = ["."] * (size * size)
    first, second = (black, white) if spec.first == BLACK else (white, black)
    for square in range(size * size):
        bit = 1 << square
        mark = "X" if first & bit else "O" if second & bit else "#" if arrows & bit else "."
        marks[cells[square]] = mark
    return "\n".join("".join(marks[row * size:(row + 1) * size]) for row in range(size))


def test_openspiel_starts_are_the_named_boards(openspiel_game) -> None:
    # OpenSpiel's own starts, X (player 0) first: standard10 and openspiel6 as they stand.
    for name in ("openspiel6", "openspiel8", "standard10"):
        size = BOARDS[name].size
        assert openspiel_game.openspiel_cells(name)[0] == tuple(range(size * size))
    flipped = openspiel_game.openspiel_cells("botzone8")[0]
    assert flipped[2] == 58  # c8 (Botzone x 2, y 0) is cell (7 - 0) * 8 + 2
    user = BoardSpec(6, (0, 1, 2, 3), (32, 33, 34, 35), WHITE)
    with pytest.raises(openspiel_game.ConversionError,
                       match=r"BBBB2/.* w 0' is not OpenSpiel's 6x6 amazons start"):
        openspiel_game.openspiel_cells(user)


def test_python_amazons_refuses_a_size_without_a_start(openspiel_game) -> None:
    import pyspiel

    with pytest.raises(ValueError, match="board_size 7 has no named start"):
        pyspiel.load_game(openspiel_game.GAME_NAME, {"board_size": 7})
    with pytest.raises(ValueError, match="board size must be one of 6..10, got 12"):
        pyspiel.load_game(openspiel_game.GAME_NAME, {"board_size": 12})
    board = Board.from_moves(["d1-d7/g7"], start="standard10")
    with pytest.raises(openspiel_game.ConversionError, match="expected 'botzone8'"):
        pyspiel.load_game(openspiel_game.GAME_NAME).state_from_board(board)
    cpp_state = openspiel_game.to_openspiel_amazons(board)  # the C++ game of its size
    assert cpp_state.get_game().get_parameters()["board_size"] == 10
    with pytest.raises(openspiel_game.ConversionError, match="board_size 8"):
        openspiel_game.from_openspiel_amazons(cpp_state)


def test_gymnasium_builds_its_opponent_for_its_board() -> None:
    from amazons.envs.gymnasium_env import AmazonsEnv
    from amazons.models import default_model_path
    from amazons.players.factory import PlayerSpecError

    flat = default_model_path(8)  # the shipped 8x8 model, flat value head
    with pytest.raises(PlayerSpecError, match=re.escape(f"model {flat} cannot play 10x10 boards")):
        AmazonsEnv(opponent=f"mcts-net:{flat}", board="standard10")
    # "default" is the board's shipped model: on 10x10 the 10x10 one
    assert AmazonsEnv(opponent="mcts-net:default", board="standard10").opponent is not None
    env = AmazonsEnv(opponent="mcts-rollout", opponent_simulations=16, agent_color="black",
                     board="standard10")
    _, info = env.reset(seed=0)
    move = Move.parse(info["opponent_move"], size=10)  # White, the opponent, opened
    assert move in Board(start="standard10").legal_moves()
