"""Standard RL interfaces to the engine: PettingZoo, Gymnasium and OpenSpiel.

* `amazons.envs.actions`: the flat action encoding of each board size (one action = one whole
  move, in the side to move's canonical frame: 33,344 actions on 8x8, 86,980 on 10x10,
  `num_actions(size)`) and the feature-plane observations; numpy only.
* `amazons.envs.pettingzoo_env`: `AmazonsAECEnv`, a two-agent PettingZoo AEC environment
  (`black_0`, `white_0`) with action masks, on any board (`board="standard10"`).
* `amazons.envs.gymnasium_env`: `AmazonsEnv`, a single-agent Gymnasium environment against any
  `amazons` player (`amazons.players.factory.make_player` specs), registered as
  `amazons/Amazons-v0`, on any board.
* `amazons.envs.openspiel_game`: `python_amazons`, an OpenSpiel game on the engine
  (`board_size` 6, 8 or 10), and state conversion to and from OpenSpiel's own C++ `amazons`.

Each RL library (the `envs` extra: pettingzoo, gymnasium; open-spiel from the `bench` extra) is
imported only when its module or one of its names is first used: `from amazons.envs import
AmazonsEnv` imports gymnasium but not pettingzoo or pyspiel. `import amazons` imports none of
this package. Everything here sits on top of the library (board, engine, players.factory);
nothing in the library imports it.
"""

from __future__ import annotations

import importlib
from typing import Any

from amazons.envs.actions import (
    NUM_ACTIONS,
    ActionError,
    IllegalActionError,
    action_mask,
    action_table,
    action_to_move,
    decode_actions,
    encode_moves,
    legal_actions,
    move_to_action,
    num_actions,
)

# Public names of the modules that import an RL library, loaded on first use (PEP 562).
_LAZY = {
    "AmazonsAECEnv": "amazons.envs.pettingzoo_env",
    "pettingzoo_env": "amazons.envs.pettingzoo_env",
    "AmazonsEnv": "amazons.envs.gymnasium_env",
    "gymnasium_env": "amazons.envs.gymnasium_env",
    "AmazonsGame": "amazons.envs.openspiel_game",
    "AmazonsState": "amazons.envs.openspiel_game",
    "openspiel_game": "amazons.envs.openspiel_game",
}

__all__ = [
    "NUM_ACTIONS",
    "ActionError",
    "IllegalActionError",
    "action_mask",
    "action_table",
    "action_to_move",
    "decode_actions",
    "encode_moves",
    "legal_actions",
    "move_to_action",
    "num_actions",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'amazons.envs' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    return module if name == _LAZY[name].rpartition(".")[2] else getattr(module, name)
