"""amazons: an AlphaZero system for the Game of the Amazons (8x8, Botzone rules).

The public API lives here; compiled modules and kernels are private (`_engine`, `mcts_numba`).
Torch-free by design at this level, and light: importing `amazons` loads the engine, the board,
the symmetries and the `Evaluator` protocol (numpy only). The search and the players (which load
Numba and LLVM), the arena's API (`run_arena`, `elo_interval`, `ArenaResult`) and the player
registry (`make_player`, `register_player`, `player_names`) are re-exported on first use, so the
inference server, the learner and the web board's server never load Numba to name a protocol, and
self-play actors never load the arena. It never imports a command module. The network, training
and inference-server modules are imported by name (`amazons.neural.model`, `amazons.train`, ...).
"""

import importlib
from typing import Any

from amazons import _moved
from amazons.board import (
    BLACK,
    START_POSITION,
    WHITE,
    Adjudication,
    Board,
    IllegalMoveError,
    Move,
    NotationError,
    parse_square,
    perft,
    square_index,
    square_name,
)
from amazons.engine import MAX_MOVES, EngineInputError
from amazons.evaluator import Evaluator, EvaluatorError
from amazons.symmetry import SYMMETRIES, SymmetryError, canonical_to_real, real_to_canonical

__version__ = "0.2.0"

_moved.install()  # old import paths of moved modules, for one release (README: changelog)

_LAZY = {
    "BatchedSearch": "amazons.mcts",
    "RolloutEvaluator": "amazons.mcts",
    "SearchConfig": "amazons.mcts",
    "SearchConfigError": "amazons.mcts",
    "SearchInputError": "amazons.mcts",
    "SearchResult": "amazons.mcts",
    "SearchStats": "amazons.mcts",
    "UniformEvaluator": "amazons.mcts",
    "GreedyPlayer": "amazons.players",
    "HumanPlayer": "amazons.players",
    "MCTSPlayer": "amazons.players",
    "Player": "amazons.players",
    "PlayerError": "amazons.players",
    "PolicyPlayer": "amazons.players",
    "RandomPlayer": "amazons.players",
    "ArenaResult": "amazons.arena",
    "elo_interval": "amazons.arena",
    "run_arena": "amazons.arena",
    "make_player": "amazons.player_factory",
    "player_names": "amazons.player_factory",
    "register_player": "amazons.player_factory",
}


def __getattr__(name: str) -> Any:
    """The search's, the players', the arena's and the player registry's names, imported when
    first used."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'amazons' has no attribute {name!r}")

__all__ = [
    "ArenaResult",
    "BatchedSearch",
    "Evaluator",
    "EvaluatorError",
    "GreedyPlayer",
    "HumanPlayer",
    "MCTSPlayer",
    "Player",
    "PlayerError",
    "PolicyPlayer",
    "RandomPlayer",
    "RolloutEvaluator",
    "SearchConfig",
    "SearchConfigError",
    "SearchInputError",
    "SearchResult",
    "SearchStats",
    "UniformEvaluator",
    "elo_interval",
    "make_player",
    "player_names",
    "register_player",
    "run_arena",
    "Adjudication",
    "BLACK",
    "MAX_MOVES",
    "START_POSITION",
    "SYMMETRIES",
    "WHITE",
    "Board",
    "EngineInputError",
    "IllegalMoveError",
    "Move",
    "NotationError",
    "SymmetryError",
    "canonical_to_real",
    "parse_square",
    "perft",
    "real_to_canonical",
    "square_index",
    "square_name",
]
