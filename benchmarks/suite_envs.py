"""RL interface costs (`amazons.envs`): action masks, environment steps, OpenSpiel plies.

* `envs.mask_us`: one legal-action mask `(33344,) int8` from a canonical position (the engine's
  move list, one table lookup), microseconds, over positions along seeded random games;
  `envs.masks_batch_positions_per_s`: the same positions in one `action_masks` call.
* `envs.pettingzoo_steps_per_s` / `envs.gymnasium_steps_per_s`: whole random games (uniform
  over the mask), each step with its `last()` / returned observation (7 feature planes and the
  mask), timed inside the environment only (not the agent's choice from the mask). A Gymnasium
  step also plays the `random` opponent's reply.
* `envs.openspiel_python_plies_per_s`: uniformly random games of `python_amazons` (one action a
  move); `envs.openspiel_cpp_plies_per_s`: random games of OpenSpiel's C++ `amazons` (three
  actions a move, each uniform over that decision's legal actions), both driven from Python the
  same way (`legal_actions`, a random choice, `apply_action`).

Every figure is the best of 5 timed rounds (2 with `--quick`). Needs the `envs` and `bench` extras.
"""

from __future__ import annotations

import time

import numpy as np

from amazons.board import Board
from amazons.envs.actions import action_mask, action_masks
from amazons.players.player import RandomPlayer


def _positions(games: int) -> np.ndarray:
    """Canonical positions at every ply of seeded random games, `(B, 3) uint64`."""
    positions = []
    for seed in range(games):
        board, player = Board(), RandomPlayer(seed=seed)
        while not board.is_game_over():
            positions.append(board.canonical_position())
            board.push(player.choose_move(board))
    return np.stack(positions)


def _best(rounds: int, work) -> float:
    """Shortest wall time of `rounds` calls of `work()`."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def _pettingzoo_games(games: int) -> tuple[int, float]:
    """Steps of random games and the seconds spent in `step` and `last` (not in the agent)."""
    from amazons.envs.pettingzoo_env import env

    steps, seconds, rng, game = 0, 0.0, np.random.default_rng(0), env()
    for seed in range(games):
        game.reset(seed=seed)
        for _ in game.agent_iter():
            started = time.perf_counter()
            observation, _, termination, _, _ = game.last()
            seconds += time.perf_counter() - started
            action = (None if termination
                      else int(rng.choice(np.flatnonzero(observation["action_mask"]))))
            started = time.perf_counter()
            game.step(action)
            seconds += time.perf_counter() - started
            steps += 1
    return steps, seconds


def _gymnasium_games(games: int) -> tuple[int, float]:
    """Steps of random games and the seconds spent in `reset` and `step` (not in the agent)."""
    from amazons.envs.gymnasium_env import AmazonsEnv

    steps, seconds, rng, env = (0, 0.0, np.random.default_rng(0),
                                AmazonsEnv("random", agent_color="random"))
    for seed in range(games):
        started = time.perf_counter()
        observation, _ = env.reset(seed=seed)
        seconds += time.perf_counter() - started
        terminated = False
        while not terminated:
            action = int(rng.choice(np.flatnonzero(observation["action_mask"])))
            started = time.perf_counter()
            observation, _, terminated, _, _ = env.step(action)
            seconds += time.perf_counter() - started
            steps += 1
    return steps, seconds


def _openspiel_games(game, games: int) -> tuple[int, float]:
    """Actions applied in uniformly random games of an OpenSpiel game, and the seconds taken."""
    actions, rng = 0, np.random.default_rng(0)
    started = time.perf_counter()
    for _ in range(games):
        state = game.new_initial_state()
        while not state.is_terminal():
            state.apply_action(int(rng.choice(state.legal_actions())))
            actions += 1
    return actions, time.perf_counter() - started


def run(quick: bool) -> dict[str, float]:
    """Measure the figures named in the module docstring."""
    import pyspiel

    from amazons.envs.openspiel_game import CPP_GAME_PARAMETERS, GAME_NAME

    rounds, games = (2, 4) if quick else (5, 20)
    positions = _positions(4)
    metrics: dict[str, float] = {}

    def masks_one_by_one() -> None:
        for position in positions:
            action_mask(position)

    masks_one_by_one()  # warm-up
    metrics["envs.mask_us"] = _best(rounds, masks_one_by_one) / len(positions) * 1e6
    metrics["envs.masks_batch_positions_per_s"] = (len(positions)
                                                   / _best(rounds, lambda: action_masks(positions)))

    for name, play in (("pettingzoo", _pettingzoo_games), ("gymnasium", _gymnasium_games)):
        play(1)  # warm-up: imports
        metrics[f"envs.{name}_steps_per_s"] = max(steps / seconds for steps, seconds in
                                                  (play(games) for _ in range(rounds)))

    for name, game in (("python", pyspiel.load_game(GAME_NAME)),
                       ("cpp", pyspiel.load_game("amazons", CPP_GAME_PARAMETERS))):
        _openspiel_games(game, 1)
        actions_per_ply = 1 if name == "python" else 3  # the C++ game: three actions a move
        metrics[f"envs.openspiel_{name}_plies_per_s"] = max(
            actions / actions_per_ply / seconds
            for actions, seconds in (_openspiel_games(game, games) for _ in range(rounds)))
    metrics["envs.openspiel_python_over_cpp"] = (metrics["envs.openspiel_python_plies_per_s"]
                                                 / metrics["envs.openspiel_cpp_plies_per_s"])
    return metrics
