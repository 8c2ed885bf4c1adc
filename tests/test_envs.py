"""The RL interfaces: action encoding, PettingZoo, Gymnasium and OpenSpiel (`amazons.envs`).

The encoding is checked against the pure-Python oracle's legal moves, the environments against
their libraries' own conformance tests (`pettingzoo.test.api_test` / `seed_test`,
`gymnasium.utils.env_checker.check_env`, `pyspiel.random_sim_test`), and the OpenSpiel game
against OpenSpiel's C++ `amazons` along random games. Tests of one library skip when it is not
installed (`pip install -e ".[envs,bench]"` installs them all).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import numpy as np
import oracle
import pytest
from conftest import SAMPLE_GAME_SEEDS, oracle_game, oracle_line, random_games
from hypothesis import given

from amazons import BLACK, WHITE, Board, Move
from amazons.envs.actions import (
    ACTION_INDEX,
    ACTION_MOVES,
    NUM_ACTIONS,
    ActionError,
    IllegalActionError,
    action_mask,
    action_masks,
    action_to_move,
    decode_actions,
    encode_moves,
    legal_actions,
    move_to_action,
    observation_planes,
    player_view,
)
from amazons.players.player import RandomPlayer


def board_of(moves) -> Board:
    """The engine board after oracle moves."""
    return Board.from_moves(Move(*oracle.move_indices(move)) for move in moves)


def flipped_side(board: Board) -> Board:
    """The same squares with the other side to move (the engine builds its canonical form)."""
    rows, side, ply = board.position_string().split()
    return Board(f"{rows} {'w' if side == 'b' else 'b'} {ply}")


# ---------------------------------------------------------------------------------------------
# The action encoding

def test_action_tables_enumerate_every_queen_geometry_in_lexicographic_order() -> None:
    assert NUM_ACTIONS == 33_344 == ACTION_MOVES.shape[0]
    assert (ACTION_INDEX >= 0).sum() == NUM_ACTIONS
    assert np.array_equal(ACTION_INDEX[tuple(ACTION_MOVES.T)], np.arange(NUM_ACTIONS))
    keys = ACTION_MOVES[:, 0] * 4096 + ACTION_MOVES[:, 1] * 64 + ACTION_MOVES[:, 2]
    assert np.all(np.diff(keys) > 0)
    assert ACTION_MOVES[0].tolist() == [0, 1, 0] and ACTION_MOVES[-1].tolist() == [63, 62, 63]
    # The oracle's queen moves on an empty board give the same triples: 1,456 (src, dst) lines.
    def reach(square: int) -> set[int]:
        return {oracle.square_index(target)
                for target in oracle.queen_reach(oracle.square_at(square), frozenset())}

    lines = {(src, dst) for src in range(64) for dst in reach(src)}
    assert len(lines) == 1456
    triples = {(src, dst, arrow) for src, dst in lines for arrow in reach(dst)}
    assert oracle.rows_as_set(ACTION_MOVES) == triples


@given(random_games())
def test_mask_and_encoding_agree_with_the_oracles_legal_moves(game) -> None:
    _, moves = game
    position = oracle.play_line(moves)[-1]
    board = board_of(moves)
    canonical = board.canonical_position()
    mask = action_mask(canonical)
    actions = legal_actions(canonical)
    assert mask.dtype == np.int8 and mask.shape == (NUM_ACTIONS,)
    assert np.array_equal(np.flatnonzero(mask), actions)
    assert np.all(np.diff(actions) > 0)
    real = {action_to_move(board, int(action)).as_tuple() for action in actions}
    assert real == oracle.move_index_set(position.legal_moves())
    canonical_moves = decode_actions(actions)
    assert oracle.rows_as_set(canonical_moves) == \
        oracle.move_index_set(position.canonical_legal_moves())
    assert np.array_equal(encode_moves(canonical_moves), actions)
    for move in board.legal_moves()[:50]:
        assert action_to_move(board, move_to_action(board, move)) == move


def test_batched_masks_equal_single_masks() -> None:
    boards = [board_of(oracle_game(seed)[:ply])
              for seed in SAMPLE_GAME_SEEDS[:4] for ply in (0, 9, 30)]
    positions = np.stack([board.canonical_position() for board in boards])
    masks = action_masks(positions)
    assert masks.shape == (len(boards), NUM_ACTIONS)
    for board, mask in zip(boards, masks, strict=True):
        assert np.array_equal(mask, action_mask(board.canonical_position()))
        assert mask.sum() == board.count_legal_moves()


def test_encoding_errors_name_the_bad_move_or_action() -> None:
    with pytest.raises(ActionError, match=r"moves\[1\] = a8-c7/a8 is not two queen lines"):
        encode_moves(np.array([[0, 1, 0], [0, 10, 0]]))
    with pytest.raises(ActionError, match="off the board"):
        encode_moves(np.array([[0, 64, 0]]))
    with pytest.raises(ActionError, match="action 33344 is outside 0..33343"):
        decode_actions(np.array([5, NUM_ACTIONS]))
    with pytest.raises(ActionError, match="an action must be an integer, got 1.5"):
        action_to_move(Board(), 1.5)
    with pytest.raises(ActionError, match="outside"):
        action_to_move(Board(), -1)


def test_player_views_are_the_canonical_positions_of_each_side() -> None:
    for seed in SAMPLE_GAME_SEEDS[:4]:
        for ply in range(0, len(oracle_game(seed)), 7):
            board = board_of(oracle_game(seed)[:ply])
            mover, waiting = board.turn, 1 - board.turn
            assert np.array_equal(player_view(board, mover), board.canonical_position())
            assert np.array_equal(player_view(board, waiting),
                                  flipped_side(board).canonical_position())
            expected = oracle.feature_planes(*oracle_line(seed)[ply].canonical())
            assert np.array_equal(observation_planes(board, mover), expected)
    start = Board()  # symmetric: both sides see the same start
    assert np.array_equal(observation_planes(start, BLACK), observation_planes(start, WHITE))
    assert observation_planes(start, WHITE, num_planes=3).shape == (3, 8, 8)


def test_envs_import_their_libraries_lazily() -> None:
    script = (
        "import sys\n"
        "import amazons\n"
        "heavy = ('pettingzoo', 'gymnasium', 'pyspiel', 'amazons.envs')\n"
        "assert not any(name in sys.modules for name in heavy), 'import amazons'\n"
        "import amazons.envs\n"
        "assert not any(name in sys.modules for name in heavy[:3]), 'import amazons.envs'\n"
        "from amazons.envs import NUM_ACTIONS, AmazonsEnv\n"
        "assert 'gymnasium' in sys.modules and 'pettingzoo' not in sys.modules\n"
        "assert 'pyspiel' not in sys.modules\n"
    )
    pytest.importorskip("gymnasium")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


# ---------------------------------------------------------------------------------------------
# PettingZoo

@pytest.fixture(scope="module")
def pettingzoo_env():
    pytest.importorskip("pettingzoo")
    from amazons.envs import pettingzoo_env

    return pettingzoo_env


def test_pettingzoo_api_and_seed_tests_pass(pettingzoo_env) -> None:
    from pettingzoo.test import api_test, seed_test

    with warnings.catch_warnings():
        # api_test warns that observations are dicts for any env not on its list of classic ones.
        warnings.simplefilter("ignore")
        api_test(pettingzoo_env.env(), num_cycles=200)
        api_test(pettingzoo_env.env(num_planes=3), num_cycles=60)
    seed_test(pettingzoo_env.env, num_cycles=100)


@pytest.mark.parametrize("seed", range(3))
def test_pettingzoo_random_game_rewards_the_winner(pettingzoo_env, seed: int) -> None:
    game = pettingzoo_env.env()
    game.reset(seed=seed)
    rng = np.random.default_rng(seed)
    replay = Board()
    final_rewards = {}
    for agent in game.agent_iter():
        observation, reward, termination, truncation, _ = game.last()
        assert not truncation
        other = "white_0" if agent == "black_0" else "black_0"
        assert not game.observe(other)["action_mask"].any()
        if termination:
            final_rewards[agent] = reward
            game.step(None)
            continue
        assert reward == 0 and agent == ("black_0", "white_0")[replay.turn]
        assert observation["observation"].shape == (7, 8, 8)
        assert observation["action_mask"].sum() == replay.count_legal_moves()
        action = int(rng.choice(np.flatnonzero(observation["action_mask"])))
        replay.push(action_to_move(replay, action))
        game.step(action)
    assert replay.is_game_over() and game.unwrapped.board == replay
    winner = ("black_0", "white_0")[replay.winner()]
    loser = "white_0" if winner == "black_0" else "black_0"
    assert final_rewards == {winner: 1, loser: -1}
    assert game.agents == []


def test_pettingzoo_illegal_action_raises_and_changes_nothing(pettingzoo_env) -> None:
    game = pettingzoo_env.env()
    game.reset()
    move = Move.parse("c8-h8/h7")  # two queen lines, but the amazon on f8 is in the way
    action = move_to_action(Board(), move)
    with pytest.raises(IllegalActionError,
                       match=rf"black_0: action {action} is not legal here: .*c8-h8/h7"):
        game.step(action)
    with pytest.raises(IllegalActionError, match="black_0: action 40000 is outside"):
        game.step(40_000)
    assert game.agent_selection == "black_0" and game.unwrapped.board == Board()
    game.step(np.int64(move_to_action(Board(), Move.parse("c8-c6/d7"))))  # numpy ints are fine
    assert game.agent_selection == "white_0"


def test_pettingzoo_terminate_illegal_wrapper_makes_illegal_moves_a_loss(pettingzoo_env) -> None:
    from pettingzoo.utils.wrappers import TerminateIllegalWrapper

    game = TerminateIllegalWrapper(pettingzoo_env.raw_env(), illegal_reward=-1)
    game.reset()
    game.step(0)  # a8-b8/a8: no amazon on a8
    assert game.terminations == {"black_0": True, "white_0": True}
    assert game.rewards["black_0"] == -1


def test_pettingzoo_render_and_bad_arguments(pettingzoo_env) -> None:
    game = pettingzoo_env.raw_env(render_mode="ansi")
    game.reset()
    assert game.render() == str(Board())
    with pytest.raises(ValueError, match="num_planes must be 3 or 7, got 5"):
        pettingzoo_env.raw_env(num_planes=5)
    with pytest.raises(ValueError, match="render_mode"):
        pettingzoo_env.raw_env(render_mode="rgb_array")


# ---------------------------------------------------------------------------------------------
# Gymnasium

@pytest.fixture(scope="module")
def gymnasium_env():
    pytest.importorskip("gymnasium")
    from amazons.envs import gymnasium_env

    return gymnasium_env


@pytest.mark.parametrize("agent_color", ["black", "white", "random"])
def test_gymnasium_check_env_passes(gymnasium_env, agent_color: str) -> None:
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a warning, but for the render modes that
        warnings.filterwarnings("ignore", message=".*Not able to test alternative render modes")
        check_env(gymnasium_env.AmazonsEnv("greedy", agent_color=agent_color))


def test_gymnasium_make_builds_the_registered_env(gymnasium_env) -> None:
    import gymnasium
    from gymnasium.utils.env_checker import check_env

    env = gymnasium.make(gymnasium_env.ENV_ID, opponent="random", agent_color="white", num_planes=3)
    check_env(env.unwrapped)  # also renders in every declared mode through the spec
    observation, info = env.reset(seed=1)
    assert observation["observation"].shape == (3, 8, 8)
    assert info["agent_color"] == "white" and Move.parse(info["opponent_move"])


@pytest.mark.parametrize(("opponent", "agent_color"), [("random", "black"), ("greedy", "white"),
                                                       ("mcts-rollout", "random")])
def test_gymnasium_random_game_ends_with_the_winners_reward(gymnasium_env, opponent: str,
                                                            agent_color: str) -> None:
    import gymnasium

    env = gymnasium_env.AmazonsEnv(opponent, agent_color=agent_color, opponent_simulations=16)
    observation, info = env.reset(seed=5)
    rng = np.random.default_rng(5)
    rewards, terminated = [], False
    while not terminated:
        assert observation["action_mask"].sum() == env.board.count_legal_moves() > 0
        assert np.array_equal(env.action_masks(), observation["action_mask"].astype(bool))
        action = int(rng.choice(np.flatnonzero(observation["action_mask"])))
        observation, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        assert not truncated and "illegal_action" not in info
    board = env.board
    assert board.is_game_over()
    color = BLACK if info["agent_color"] == "black" else WHITE
    assert rewards[-1] == (1.0 if board.winner() == color else -1.0)
    assert set(rewards[:-1]) <= {0.0}
    assert not observation["action_mask"].any()
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(0)


def test_gymnasium_seeded_episodes_repeat(gymnasium_env) -> None:
    def episode(env, seed: int) -> list:
        observation, info = env.reset(seed=seed)
        trace = [info["opponent_move"]]
        terminated = False
        while not terminated:
            action = int(np.flatnonzero(observation["action_mask"])[0])
            observation, _, terminated, _, info = env.step(action)
            trace.append(info["opponent_move"])
        return trace

    env = gymnasium_env.AmazonsEnv("random", agent_color="random")
    first = [episode(env, 11), episode(env, None), episode(env, None)]
    second = [episode(env, 11), episode(env, None), episode(env, None)]
    assert first == second
    assert len({str(trace) for trace in first}) == 3  # unseeded resets go on with new games
    assert any(episode(env, seed) != first[0] for seed in (12, 13, 14))


def test_gymnasium_illegal_actions_lose_or_raise(gymnasium_env) -> None:
    import gymnasium

    env = gymnasium_env.AmazonsEnv("random")
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(0)  # a8-b8/a8
    assert (reward, terminated, truncated, info["illegal_action"]) == (-1.0, True, False, 0)
    assert env.board == Board()
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(int(np.flatnonzero(observation["action_mask"])[0]))
    strict = gymnasium_env.AmazonsEnv("random", illegal_action="raise")
    strict.reset(seed=0)
    with pytest.raises(IllegalActionError, match=r"action 0 is not a legal move here: .*a8-b8/a8"):
        strict.step(0)
    with pytest.raises(IllegalActionError, match="action -3 is not a legal move here"):
        strict.step(-3)
    assert strict.board == Board()


def test_gymnasium_accepts_a_player_object_and_rejects_bad_arguments(gymnasium_env) -> None:
    from amazons.players.factory import PlayerSpecError

    env = gymnasium_env.AmazonsEnv(RandomPlayer(seed=3), agent_color="white")
    _, info = env.reset()
    assert info["opponent_move"] is not None and env.board.ply == 1
    with pytest.raises(PlayerSpecError, match="unknown player 'nobody'"):
        gymnasium_env.AmazonsEnv("nobody")
    with pytest.raises(ValueError, match="agent_color must be"):
        gymnasium_env.AmazonsEnv(agent_color="red")
    with pytest.raises(ValueError, match="illegal_action must be"):
        gymnasium_env.AmazonsEnv(illegal_action="ignore")


# ---------------------------------------------------------------------------------------------
# OpenSpiel

@pytest.fixture(scope="module")
def openspiel_game():
    pytest.importorskip("pyspiel")
    from amazons.envs import openspiel_game

    return openspiel_game


def test_openspiel_random_simulation_test_passes(openspiel_game) -> None:
    import pyspiel

    game = pyspiel.load_game(openspiel_game.GAME_NAME)
    assert game.num_distinct_actions() == NUM_ACTIONS and game.max_game_length() == 56
    pyspiel.random_sim_test(game, num_sims=5, serialize=True, verbose=False)
    small = pyspiel.load_game(openspiel_game.GAME_NAME, {"num_planes": 3})
    assert small.observation_tensor_shape() == [3, 8, 8]
    pyspiel.random_sim_test(small, num_sims=2, serialize=False, verbose=False)


def test_openspiel_state_reports_the_engines_game(openspiel_game) -> None:
    import pyspiel

    game = pyspiel.load_game(openspiel_game.GAME_NAME)
    state = game.new_initial_state()
    for move in oracle_game(2):
        board = state.board
        player = state.current_player()
        assert player == board.turn
        for planes_player in (BLACK, WHITE):
            tensor = np.array(state.observation_tensor(planes_player)).reshape(7, 8, 8)
            assert np.array_equal(tensor, observation_planes(board, planes_player))
        action = move_to_action(board, Move(*oracle.move_indices(move)))
        assert action in state.legal_actions()
        assert state.action_to_string(player, action) == str(action_to_move(board, action))
        state.apply_action(action)
    assert state.is_terminal()
    assert state.returns() == ([1.0, -1.0] if state.board.winner() == BLACK else [-1.0, 1.0])
    assert pickle.loads(pickle.dumps(state)).board.move_stack == state.board.move_stack


def test_openspiel_mcts_bot_plays_on_the_game(openspiel_game) -> None:
    import pyspiel
    from open_spiel.python.algorithms import mcts

    game = pyspiel.load_game(openspiel_game.GAME_NAME)
    wins = 0
    for seed in range(2):
        bot = mcts.MCTSBot(game, 2.0, 40,
                           mcts.RandomRolloutEvaluator(1, np.random.RandomState(seed)),
                           random_state=np.random.RandomState(seed))
        opponent = np.random.RandomState(100 + seed)
        state = game.new_initial_state()
        mcts_player = seed % 2
        while not state.is_terminal():
            if state.current_player() == mcts_player:
                action = bot.step(state)
            else:
                action = opponent.choice(state.legal_actions())
            assert action in state.legal_actions()
            state.apply_action(action)
        wins += state.returns()[mcts_player] == 1.0
    assert wins == 2  # 40 simulations of UCT with random playouts beat random moves


@pytest.mark.parametrize("seed", range(4))
def test_openspiel_states_convert_both_ways_along_random_games(openspiel_game, seed: int) -> None:
    import pyspiel
    from test_openspiel_peer import openspiel_moves  # full moves of a C++ state, Botzone squares

    game = pyspiel.load_game(openspiel_game.GAME_NAME)
    cpp_game = pyspiel.load_game("amazons", openspiel_game.CPP_GAME_PARAMETERS)
    rng = np.random.default_rng(seed)
    state = game.new_initial_state()
    while True:
        cpp_state = openspiel_game.to_openspiel_amazons(state, cpp_game)
        back = openspiel_game.from_openspiel_amazons(cpp_state, game)
        assert back.board == state.board and back.history() == state.history()
        assert back.board.move_stack == state.board.move_stack
        assert cpp_state.is_terminal() == state.is_terminal()
        if state.is_terminal():
            assert cpp_state.returns() == state.returns()
            break
        assert cpp_state.current_player() == state.current_player()
        if state.move_number() % 5 == 0:
            ours = {action_to_move(state.board, action).as_tuple()
                    for action in state.legal_actions()}
            assert openspiel_moves(cpp_state) == ours, f"ply {state.move_number()}"
        state.apply_action(int(rng.choice(state.legal_actions())))
    # And from OpenSpiel's side: a C++ game played by its own random choices converts back.
    cpp_state = cpp_game.new_initial_state()
    while not cpp_state.is_terminal():
        cpp_state.apply_action(int(rng.choice(cpp_state.legal_actions())))
    ours = openspiel_game.from_openspiel_amazons(cpp_state, game)
    assert ours.is_terminal() and ours.returns() == cpp_state.returns()
    assert openspiel_game.to_openspiel_amazons(ours, cpp_game).history() == cpp_state.history()


def test_openspiel_conversion_refuses_what_it_cannot_convert(openspiel_game) -> None:
    import pyspiel

    cpp_game = pyspiel.load_game("amazons", openspiel_game.CPP_GAME_PARAMETERS)
    cpp_state = cpp_game.new_initial_state()
    cpp_state.apply_action(cpp_state.legal_actions()[0])
    with pytest.raises(openspiel_game.ConversionError, match=r"middle of a move \(1 of its 3"):
        openspiel_game.from_openspiel_amazons(cpp_state)
    with pytest.raises(openspiel_game.ConversionError, match="board_size 8"):
        openspiel_game.from_openspiel_amazons(
            pyspiel.load_game("amazons", {"board_size": 6}).new_initial_state())
    with pytest.raises(openspiel_game.ConversionError, match="not its move history"):
        openspiel_game.to_openspiel_amazons(Board("2B2B2/8/B6B/8/8/W6W/8/2W2W2 w 1"))
    board = Board.from_moves(["c8-c6/d7"])
    cpp_state = openspiel_game.to_openspiel_amazons(board)  # the default C++ game
    assert cpp_state.history() == [58, 42, 51]  # c8, c6, d7 at (7 - y) * 8 + x
    assert openspiel_game.from_openspiel_amazons(cpp_state).board.move_stack == board.move_stack
    game = pyspiel.load_game(openspiel_game.GAME_NAME)
    assert game.state_from_board(board).board.move_stack == board.move_stack
    state = game.new_initial_state()
    with pytest.raises(IllegalActionError, match="action 0 is not a legal move here"):
        state.apply_action(0)
