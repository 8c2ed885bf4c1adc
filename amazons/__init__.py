"""amazons: an AlphaZero system for the Game of the Amazons (8x8, Botzone rules).

The public API lives here; compiled modules and kernels are private (`_engine`, `mcts_numba`).
Torch-free by design at this level: importing `amazons` loads numba but not torch; the network,
training and inference-server modules are imported by name (`amazons.net`, `amazons.train`, ...).
"""

from amazons.arena import (
    ArenaResult,
    elo_interval,
    make_player,
    player_names,
    register_player,
    run_arena,
)
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
from amazons.mcts import (
    BatchedSearch,
    Evaluator,
    EvaluatorError,
    RolloutEvaluator,
    SearchConfig,
    SearchConfigError,
    SearchInputError,
    SearchResult,
    SearchStats,
    UniformEvaluator,
)
from amazons.players import GreedyPlayer, HumanPlayer, MCTSPlayer, Player, PlayerError, RandomPlayer
from amazons.symmetry import SYMMETRIES, SymmetryError, canonical_to_real, real_to_canonical

__version__ = "0.1.0"

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
