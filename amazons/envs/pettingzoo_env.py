"""The Game of the Amazons as a PettingZoo AEC environment: two agents, action masks.

The board is any `amazons.boards` start (`board="standard10"`, a `BoardSpec` or a start position
string; Botzone's 8x8 `botzone8` by default), and the spaces are sized from it: on an `N x N`
board with `A = amazons.envs.actions.num_actions(N)` actions (33,344 on 8x8, 86,980 on 10x10).
Agents are `black_0` and `white_0`; the board's first side moves first (Black on `botzone8`,
White on `standard10`). Each observation is a dict:

    observation  (C, N, N) float32   feature planes of the position seen by that agent
                                     (`amazons.envs.actions.observation_planes`, C = 3 or 7)
    action_mask  (A,) int8           1 for the legal actions of the agent to move, all 0 for the
                                     other agent and once the game is over

Both are in the observing agent's canonical frame (its own amazons are "mine"; White sees the
board rotated 180 degrees), and so are the actions (`amazons.envs.actions`). The reward is +1
for the winner and -1 for the loser on the move that ends the game (the side left without a
legal move loses; there are no draws and no truncation: a game lasts at most `N * N - 8`
plies, 56 on 8x8). An
illegal action raises `IllegalActionError` naming it and changes nothing; wrap the raw
environment in `pettingzoo.utils.wrappers.TerminateIllegalWrapper(env, illegal_reward=-1)` to
make it a loss instead. The rules are the engine's (`amazons.board.Board`).

    from amazons.envs.pettingzoo_env import env
    game = env()                     # env(board="standard10") for the 10x10 game
    game.reset(seed=0)
    for agent in game.agent_iter():
        observation, reward, termination, truncation, info = game.last()
        action = (None if termination
                  else game.action_space(agent).sample(observation["action_mask"]))
        game.step(action)
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from pettingzoo import AECEnv
from pettingzoo.utils import AgentSelector
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

from amazons.board import Board, IllegalMoveError
from amazons.boards import BoardSpec, board_spec
from amazons.engine import FEATURE_PLANES
from amazons.envs.actions import (
    ActionError,
    IllegalActionError,
    action_mask,
    action_to_move,
    num_actions,
    observation_planes,
)

__all__ = ["AGENTS", "AmazonsAECEnv", "env", "observation_space", "raw_env"]

AGENTS = ("black_0", "white_0")  # indexed by colour: amazons.board.BLACK (0), WHITE (1)
RENDER_MODES = ("ansi", "human")


def observation_space(spec: BoardSpec, num_planes: int) -> gymnasium.spaces.Dict:
    """`Dict(observation=Box(0, 1, (num_planes, N, N)), action_mask=Box(0, 1, (A,), int8))` of
    a board."""
    size = spec.size
    return gymnasium.spaces.Dict({
        "observation": gymnasium.spaces.Box(0.0, 1.0, (num_planes, size, size), np.float32),
        "action_mask": gymnasium.spaces.Box(0, 1, (num_actions(size),), np.int8),
    })


class AmazonsAECEnv(AECEnv):
    """Two-player Amazons for PettingZoo's AEC API, on any board of `amazons.boards`.

    Args:
        num_planes: feature planes per observation, 3 or 7.
        board: the start: a name in `amazons.boards.BOARDS` (`"standard10"`), a `BoardSpec` or a
            start position string; None is `botzone8`.
        render_mode: None, `"ansi"` (`render()` returns the board diagram) or `"human"` (prints it
            after every move).

    Raises:
        ValueError: on a bad `num_planes`, `render_mode` or `board` (naming it).
    """

    metadata = {"name": "amazons_v0", "render_modes": list(RENDER_MODES),
                "is_parallelizable": False}

    def __init__(self, num_planes: int = 7, render_mode: str | None = None,
                 board: BoardSpec | str | None = None) -> None:
        super().__init__()
        self.board_spec = board_spec(board)
        if num_planes not in FEATURE_PLANES:
            raise ValueError(f"num_planes must be 3 or 7, got {num_planes!r}")
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be None, 'ansi' or 'human', got {render_mode!r}")
        self.num_planes = num_planes
        self.render_mode = render_mode
        self.possible_agents = list(AGENTS)
        self.num_actions = num_actions(self.board_spec.size)
        self.observation_spaces = {agent: observation_space(self.board_spec, num_planes)
                                   for agent in AGENTS}
        self.action_spaces = {agent: gymnasium.spaces.Discrete(self.num_actions)
                              for agent in AGENTS}
        self._board = Board(start=self.board_spec)
        # The agent order starts with the side that moves first on this board.
        first = AGENTS[self.board_spec.first]
        self._order = [first, *(agent for agent in AGENTS if agent != first)]
        self._selector = AgentSelector(self._order)

    @property
    def board(self) -> Board:
        """A copy of the game so far (real frame, with its move history)."""
        return self._board.copy()

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        """The `Dict(observation, action_mask)` space of `agent` (the same object every call)."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        """`Discrete(A)` (`Discrete(33344)` on 8x8): the flat move encoding of
        `amazons.envs.actions` for the board's size."""
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start a new game from the board's start, its first side to move (on `botzone8`
        Black, `black_0`).

        The game has no randomness: `seed` only seeds the agents' action spaces (so that
        `action_space(agent).sample(mask)` repeats); `options` is not used.
        """
        if seed is not None:
            for index, agent in enumerate(self.possible_agents):
                self.action_spaces[agent].seed(seed + index)
        self._board = Board(start=self.board_spec)
        self.agents = self.possible_agents[:]
        self.rewards = dict.fromkeys(self.agents, 0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {} for agent in self.agents}
        self._selector.reinit(self._order)
        self.agent_selection = self._selector.reset()

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """`agent`'s observation: its feature planes and its action mask (see the module)."""
        color = AGENTS.index(agent)
        planes = observation_planes(self._board, color, self.num_planes)
        if color == self._board.turn:
            mask = action_mask(self._board.canonical_position(), self.board_spec.size)
        else:
            mask = np.zeros(self.num_actions, dtype=np.int8)
        return {"observation": planes, "action_mask": mask}

    def step(self, action: int | None) -> None:
        """Play `action` for `agent_selection`; after the game ends, each agent steps `None` once.

        Raises:
            IllegalActionError: `action` is not an integer in range or not a legal move here
                (the message names the action and the move it encodes); nothing changes.
        """
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if isinstance(action, np.ndarray) and action.shape == ():
            action = action.item()
        try:
            move = action_to_move(self._board, action)
        except ActionError as error:
            raise IllegalActionError(f"{agent}: {error}") from None
        try:
            self._board.push(move)
        except IllegalMoveError as error:
            raise IllegalActionError(f"{agent}: action {action} is not legal here: "
                                     f"{error}") from None
        self._cumulative_rewards[agent] = 0
        if self._board.is_game_over():
            winner = AGENTS[self._board.winner()]
            loser = AGENTS[1 - self._board.winner()]
            self.rewards[winner], self.rewards[loser] = 1, -1
            self.terminations = dict.fromkeys(self.agents, True)
            self._accumulate_rewards()
        self.agent_selection = self._selector.next()
        if self.render_mode == "human":
            self.render()

    def render(self) -> str | None:
        """The board diagram (`"ansi"`: returned; `"human"`: printed); None without a mode."""
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; pass render_mode='ansi'")
            return None
        text = str(self._board)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Nothing to release (no window, no process)."""


raw_env = AmazonsAECEnv


def env(num_planes: int = 7, render_mode: str | None = None,
        board: BoardSpec | str | None = None) -> OrderEnforcingWrapper:
    """`AmazonsAECEnv` in PettingZoo's `OrderEnforcingWrapper` (errors on use before `reset`)."""
    return OrderEnforcingWrapper(AmazonsAECEnv(num_planes=num_planes, render_mode=render_mode,
                                               board=board))

