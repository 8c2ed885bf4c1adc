"""amazons: an AlphaZero system for the Game of the Amazons: Botzone's 8x8, the standard 10x10,
every board from 6x6 to 10x10 (`amazons.boards`).

The public API of the game and the search lives here; compiled modules and kernels are private
(`_engine`, `mcts_numba`). Torch-free by design at this level, and light: importing `amazons`
loads the engine, the board, the symmetries and the `Evaluator` protocol (numpy only). The
search's names (which load Numba and LLVM) are re-exported on first use, so the inference server,
the learner and the web board's server never load Numba to name a protocol. The root imports
nothing above the search (tools/architecture.py): the players, the matches, the network and the
commands are imported by their paths (`amazons.players`, `amazons.matches.arena`,
`amazons.neural.model`, `amazons.train`, ...).
"""

import importlib
from typing import Any

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
from amazons.boards import BOARDS, BoardSpec, board_spec
from amazons.engine import MAX_MOVES, EngineInputError
from amazons.evaluator import Evaluator, EvaluatorError
from amazons.symmetry import SYMMETRIES, SymmetryError, canonical_to_real, real_to_canonical

__version__ = "0.4.0"

_SEARCH_NAMES = frozenset({"BatchedSearch", "RolloutEvaluator", "SearchConfig", "SearchConfigError",
                           "SearchInputError", "SearchResult", "SearchStats", "UniformEvaluator"})


def __getattr__(name: str) -> Any:
    """The search's names, imported when first used."""
    if name in _SEARCH_NAMES:
        value = getattr(importlib.import_module("amazons.mcts"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'amazons' has no attribute {name!r}")

__all__ = [
    "BatchedSearch",
    "Evaluator",
    "EvaluatorError",
    "RolloutEvaluator",
    "SearchConfig",
    "SearchConfigError",
    "SearchInputError",
    "SearchResult",
    "SearchStats",
    "UniformEvaluator",
    "Adjudication",
    "BLACK",
    "BOARDS",
    "BoardSpec",
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
    "board_spec",
    "canonical_to_real",
    "parse_square",
    "perft",
    "real_to_canonical",
    "square_index",
    "square_name",
]
