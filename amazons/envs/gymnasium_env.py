"""The Game of the Amazons as a single-agent Gymnasium environment against an `amazons` player.

The agent plays one colour; the opponent is any player `amazons.players.factory.make_player` builds
(`random`, `greedy`, `mcts-uniform`, `mcts-rollout`, `mcts-net:PATH`, `policy-net:PATH`,
`openspiel-mcts`) or a `Player` object. Observations and actions are the PettingZoo
environment's (`amazons.envs.pettingzoo_env`), from the agent's side, sized from the board
(`board="standard10"`, a `BoardSpec` or a start position string; `botzone8` by default): on an
`N x N` board with `A = amazons.envs.actions.num_actions(N)` actions (33,344 on 8x8):

    observation  (C, N, N) float32   feature planes of the position seen by the agent (C = 3 or 7)
    action_mask  (A,) int8           the agent's legal actions (all 0 once the game is over)
    action       Discrete(A)         one whole move, in the agent's canonical frame

`step(action)` plays the agent's move, then the opponent's reply. The reward is +1 when the
opponent is left without a legal move, -1 when the agent is, 0 otherwise; the game always ends
(at most `N * N - 8` plies, 56 on 8x8), so nothing is truncated. An illegal action, with
`illegal_action="lose"` (the default), ends the episode as a loss (reward -1,
`info["illegal_action"]` names it): an agent that ignores the mask learns to avoid such moves,
and `gymnasium.utils.env_checker` (which steps unmasked random actions) can run. With
`illegal_action="raise"` it raises `IllegalActionError` naming the action and changes nothing.
`action_masks()` returns the mask as booleans (the method sb3-contrib's `MaskablePPO` calls).

Seeding: `reset(seed=...)` seeds the environment's generator, which draws the agent's colour
(`agent_color="random"`) and, at the first reset and at every seeded one, a seed with which an
opponent given as a spec is built again; other resets only `reset()` the opponent, whose random
stream goes on (a network player is not reloaded every episode). So a seeded reset and the same
actions repeat the same episodes (with simulation counts, not time budgets). An opponent passed
as a `Player` object is only ever `reset()`.

Importing this module registers the id `amazons/Amazons-v0` with Gymnasium:

    import gymnasium
    import amazons.envs.gymnasium_env  # registers amazons/Amazons-v0
    env = gymnasium.make("amazons/Amazons-v0", opponent="greedy", agent_color="white")
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from amazons.board import BLACK, COLOR_NAMES, WHITE, Board, IllegalMoveError, Move
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
from amazons.players.factory import make_player
from amazons.players.player import Player

__all__ = ["ENV_ID", "AmazonsEnv"]

ENV_ID = "amazons/Amazons-v0"
AGENT_COLORS = ("black", "white", "random")
ILLEGAL_ACTIONS = ("lose", "raise")
RENDER_MODES = ("ansi", "human")
SEED_BOUND = 2**31  # opponent seeds are drawn from [0, SEED_BOUND)


class AmazonsEnv(gymnasium.Env):
    """Amazons for one agent against an `amazons` player, on any board of `amazons.boards`.

    Args:
        opponent: a player spec for `amazons.players.factory.make_player` (built again with a seed
            from the environment's generator at the first reset and at seeded resets) or a
            `Player` object (only `reset()` between episodes).
        agent_color: `"black"`, `"white"`, or `"random"` (drawn on every reset); the board's
            first side moves first (Black on `botzone8`, White on `standard10`).
        num_planes: feature planes per observation, 3 or 7.
        illegal_action: `"lose"` (an illegal action ends the episode with reward -1) or
            `"raise"` (`IllegalActionError`, nothing changes).
        opponent_simulations: MCTS simulations per move of a spec-built opponent (None: its
            default).
        opponent_time_budget: seconds per move of a spec-built MCTS opponent instead.
        render_mode: None, `"ansi"` (`render()` returns the board diagram) or `"human"`
            (prints it after every step).
        board: the start: a name in `amazons.boards.BOARDS` (`"standard10"`), a `BoardSpec` or
            a start position string; None is `botzone8`. An opponent given as a spec is built
            for it, so a network that cannot play its size is refused here (by model and size).

    Raises:
        ValueError: on a bad argument (a bad `board` is named);
            `amazons.players.factory.PlayerSpecError` for an unknown spec.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}

    def __init__(self, opponent: str | Player = "random", agent_color: str = "black",
                 num_planes: int = 7, illegal_action: str = "lose",
                 opponent_simulations: int | None = None,
                 opponent_time_budget: float | None = None,
                 render_mode: str | None = None,
                 board: BoardSpec | str | None = None) -> None:
        self.board_spec = board_spec(board)
        if agent_color not in AGENT_COLORS:
            raise ValueError(f"agent_color must be 'black', 'white' or 'random', "
                             f"got {agent_color!r}")
        if num_planes not in FEATURE_PLANES:
            raise ValueError(f"num_planes must be 3 or 7, got {num_planes!r}")
        if illegal_action not in ILLEGAL_ACTIONS:
            raise ValueError(f"illegal_action must be 'lose' or 'raise', got {illegal_action!r}")
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be None, 'ansi' or 'human', got {render_mode!r}")
        if not isinstance(opponent, (str, Player)):
            raise ValueError(f"opponent must be a player spec or a Player, "
                             f"got {type(opponent).__name__}")
        self.opponent_spec = opponent if isinstance(opponent, str) else None
        self.opponent_simulations = opponent_simulations
        self.opponent_time_budget = opponent_time_budget
        # Built now so that a bad spec fails at construction, not at the first reset.
        self.opponent = self._build_opponent(seed=0) if self.opponent_spec else opponent
        self._opponent_seeded = False  # built from the environment's generator yet?
        self.agent_color = agent_color
        self.num_planes = num_planes
        self.illegal_action = illegal_action
        self.render_mode = render_mode
        size = self.board_spec.size
        self.num_actions = num_actions(size)
        self.observation_space = gymnasium.spaces.Dict({
            "observation": gymnasium.spaces.Box(0.0, 1.0, (num_planes, size, size), np.float32),
            "action_mask": gymnasium.spaces.Box(0, 1, (self.num_actions,), np.int8),
        })
        self.action_space = gymnasium.spaces.Discrete(self.num_actions)
        self.color = BLACK
        self._board = Board(start=self.board_spec)
        self._episode_over = True  # until the first reset

    def _build_opponent(self, seed: int) -> Player:
        return make_player(self.opponent_spec, seed=seed, simulations=self.opponent_simulations,
                           time_budget=self.opponent_time_budget, board=self.board_spec)

    @property
    def board(self) -> Board:
        """A copy of the game so far (real frame, with its move history)."""
        return self._board.copy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start a game from the board's start; when the opponent's side moves first (White on
        `botzone8`), it plays its first move here.

        Returns:
            `(observation, info)`; info holds `agent_color` and `opponent_move` (algebraic, or
            None when the agent moves first).
        """
        super().reset(seed=seed)
        if self.agent_color == "random":
            self.color = int(self.np_random.integers(2))
        else:
            self.color = BLACK if self.agent_color == "black" else WHITE
        if self.opponent_spec is not None and (seed is not None or not self._opponent_seeded):
            self.opponent = self._build_opponent(int(self.np_random.integers(SEED_BOUND)))
            self._opponent_seeded = True
        self.opponent.reset()
        self._board = Board(start=self.board_spec)
        self._episode_over = False
        opponent_move = self._opponent_moves() if self.color != self._board.turn else None
        if self.render_mode == "human":
            self.render()
        return self._observation(), self._info(opponent_move)

    def step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Play the agent's `action` and the opponent's reply.

        Returns:
            `(observation, reward, terminated, truncated, info)`: reward +1 / -1 when the game
            ends in the agent's win / loss, else 0; `truncated` is always False. `info` holds
            `agent_color`, `opponent_move`, and `illegal_action` after an illegal action.

        Raises:
            IllegalActionError: with `illegal_action="raise"`, when `action` is not a legal move
                here (named with the move it encodes); nothing changes.
            gymnasium.error.ResetNeeded: before the first reset, or once the episode has ended.
        """
        if self._episode_over:
            raise gymnasium.error.ResetNeeded("the episode is over (or not started): "
                                              "call reset() first")
        if isinstance(action, np.ndarray) and action.shape == ():
            action = action.item()
        try:
            move = action_to_move(self._board, action)
            if not self._board.is_legal(move):
                self._board.copy().push(move)  # raises IllegalMoveError saying why
        except (ActionError, IllegalMoveError) as error:
            if self.illegal_action == "raise":
                raise IllegalActionError(f"action {action!r} is not a legal move here: "
                                         f"{error}") from None
            info = self._info(None)
            info["illegal_action"] = action
            self._episode_over = True
            return self._observation(), -1.0, True, False, info
        self.opponent.observe(self._board, move)
        self._board.push(move)
        opponent_move = None if self._board.is_game_over() else self._opponent_moves()
        if self.render_mode == "human":
            self.render()
        winner = self._board.winner()
        self._episode_over = winner is not None
        reward = 0.0 if winner is None else (1.0 if winner == self.color else -1.0)
        return self._observation(), reward, winner is not None, False, self._info(opponent_move)

    def action_masks(self) -> np.ndarray:
        """The agent's legal actions, `(A,) bool` (all False when it is not to move)."""
        return self._mask().astype(bool)

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

    def _opponent_moves(self) -> str:
        move: Move = self.opponent.choose_move(self._board.copy())
        self.opponent.observe(self._board, move)
        self._board.push(move)
        return str(move)

    def _mask(self) -> np.ndarray:
        if self._board.turn != self.color:
            return np.zeros(self.num_actions, dtype=np.int8)
        return action_mask(self._board.canonical_position(), self._board.size)

    def _observation(self) -> dict[str, np.ndarray]:
        return {"observation": observation_planes(self._board, self.color, self.num_planes),
                "action_mask": self._mask()}

    def _info(self, opponent_move: str | None) -> dict[str, Any]:
        return {"agent_color": COLOR_NAMES[self.color], "opponent_move": opponent_move}


if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="amazons.envs.gymnasium_env:AmazonsEnv")
