"""AlphaZero search over many games at once: simple implementations of the `Evaluator` protocol
(`amazons.evaluator`, re-exported here), the search configuration, and `BatchedSearch`, the
checked wrapper around `amazons.mcts_numba`. The training targets read off a searched root are
in `amazons.search_targets`, below this module: the driver samples its temperature moves from
their arithmetic.

One search round alternates Numba kernels with batch calls into the Cython engine, so the rules
exist only in the engine and no Python loop ever runs over moves or nodes:

1. `select_leaves` (Numba) descends every game's tree with PUCT and virtual loss (at a Gumbel
   root, `root="gumbel"`, the root's move comes from sequential halving; at a noised root with
   `forced_playouts_k`, a move owed forced playouts comes first) and returns up to K leaf paths
   per game;
2. `engine.play_paths` turns root positions + paths into leaf positions, and `engine.legal_moves`
   lists their moves (CSR), both in one call for all G x K leaves;
3. the evaluator scores all non-terminal leaves in one call (terminal leaves are exact losses for
   their side to move and never reach it);
4. `expand_and_backup` (Numba) writes the new edge blocks and backs the values up, negating per ply.

Everything is in canonical frames: the side to move's view, so the search never deals with
colours, and every value is for the side to move at its node. This module imports numpy and the
engine only; it never imports torch (network evaluators implement the same protocol elsewhere).

One search serves one board size (6..10), fixed at construction: its roots and leaves are
`(n, 3 * W) uint64` positions of that size (`W` words per bitboard, `engine.geometry(size)`), its
rules the engine's compiled module of that size (`engine.rules(size)`). The Numba kernels never
see the size (squares are ints below N*N), so every size runs the same compiled kernels.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from amazons import engine
from amazons import mcts_numba as kernels
from amazons.engine import MAX_MOVES, MOVE_DTYPE, OFFSET_DTYPE, POSITION_DTYPE, adjudicated_plies
from amazons.evaluator import Evaluator, EvaluatorError
from amazons.search_targets import SearchInputError, completed_q_policy, pruned_visits

__all__ = [
    "EDGE_BYTES",
    "NODE_BYTES",
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
    "adjudicated_plies",
    "warm_up",
]


NODE_BYTES = 49  # bytes per tree node: the node_* arrays of amazons.mcts_numba.TreeArrays
# bytes per tree edge: the edge_* arrays (move 3 x int8, prior, visits, value, squared values,
# in-flight, child, proof, proof plies)
EDGE_BYTES = 30


class SearchConfigError(ValueError):
    """A `SearchConfig` field is out of range; the message names the field."""


ROOT_RULES = ("puct", "gumbel")


@dataclass(frozen=True)
class SearchConfig:
    """Parameters of one search; frozen, so one object can be passed to every process."""

    # simulations per search and game (each ends at a new leaf or a terminal)
    simulations: int = 800
    # K: leaves one game adds to an evaluator batch (virtual loss keeps them apart)
    leaves_per_game: int = 8
    c_puct: float = 1.25  # exploration constant c_init in Q + c * P * sqrt(N_parent) / (1 + N)
    # c grows as c_puct + log((1 + N_parent + base) / base); 0 = constant c
    c_puct_base: float = 19652.0
    # unvisited edges score Q_parent - this * sqrt(prior mass already selected)
    fpu_reduction: float = 0.25
    virtual_loss: float = 1.0  # each in-flight selection counts as this many lost visits (0 = none)
    root_noise: bool = False  # mix Dirichlet noise into the root priors once per root (self-play)
    # total concentration; alpha per move = this / number of legal moves
    dirichlet_total_alpha: float = 10.0
    dirichlet_fraction: float = 0.25  # root prior = (1 - fraction) * prior + fraction * noise
    temperature_moves: int = 0  # plies (from the game start) whose move is sampled from the visits
    temperature: float = 1.0  # sample proportional to visits ** (1 / temperature) in those plies
    reuse_tree: bool = True  # keep the played move's subtree (and its statistics) as the next root
    solver: bool = True  # MCTS-solver: prove wins and losses in the tree, play proven wins at once
    # with the solver: leaves whose separated regions decide the game are proven
    adjudicate: bool = True
    # root selection: "puct", or "gumbel" (sequential halving; no Dirichlet noise, no lcb)
    root: str = "puct"
    gumbel_m: int = 16  # gumbel: root moves sampled by Gumbel-top-m into sequential halving
    # gumbel: scale of the Gumbel noise (0: the m highest priors, no randomness)
    gumbel_scale: float = 1.0
    # gumbel: sigma(q) = (c_visit + most visits of a root move) * c_scale * rescaled q
    c_visit: float = 50.0
    # gumbel: see c_visit (the same transform as the completed-Q policy target)
    c_scale: float = 0.1
    # play the root move with the highest lower confidence bound of Q (root="puct")
    lcb: bool = False
    # lcb: candidates have >= this fraction of the most visits (and >= 2)
    lcb_min_visits_fraction: float = 0.15
    lcb_stdevs: float = 5.0  # lcb: bound = mean - t(lcb_stdevs, N) * sqrt(variance / N)
    # KataGo's forced playouts at a root with Dirichlet noise (root="puct", self-play): a root
    # move already visited gets at least sqrt(k * noisy prior * root visits) visits; 0 = off
    forced_playouts_k: float = 0.0
    node_capacity: int = 4096  # nodes per game allocated up front
    edge_capacity: int = 1 << 18  # edges (moves) per game allocated up front, 30 bytes each
    node_capacity_max: int = 1 << 17  # nodes per game the arrays may grow to (doubling), never more
    edge_capacity_max: int = 1 << 22  # edges per game the arrays may grow to (~96 MB per game)

    def __post_init__(self) -> None:
        positive_ints = ("simulations", "leaves_per_game", "node_capacity", "edge_capacity")
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise SearchConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.temperature_moves < 0:
            raise SearchConfigError(f"temperature_moves must be >= 0, got {self.temperature_moves}")
        for name in ("c_puct", "c_puct_base", "virtual_loss", "dirichlet_total_alpha"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise SearchConfigError(f"{name} must be a finite number >= 0, got {value!r}")
        if not np.isfinite(self.fpu_reduction):
            raise SearchConfigError(f"fpu_reduction must be finite, got {self.fpu_reduction!r}")
        if not 0.0 <= self.dirichlet_fraction <= 1.0:
            raise SearchConfigError(
                f"dirichlet_fraction must be in [0, 1], got {self.dirichlet_fraction!r}")
        if self.root_noise and self.dirichlet_total_alpha <= 0:
            raise SearchConfigError("dirichlet_total_alpha must be > 0 when root_noise is on")
        if not self.temperature > 0:
            raise SearchConfigError(f"temperature must be > 0, got {self.temperature!r}")
        if self.root not in ROOT_RULES:
            raise SearchConfigError(f"root must be one of {ROOT_RULES}, got {self.root!r}")
        if (not isinstance(self.gumbel_m, (int, np.integer)) or isinstance(self.gumbel_m, bool)
                or self.gumbel_m < 1):
            raise SearchConfigError(f"gumbel_m must be a positive integer, got {self.gumbel_m!r}")
        for name in ("gumbel_scale", "c_visit", "c_scale"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise SearchConfigError(f"{name} must be a finite number >= 0, got {value!r}")
        if not 0.0 <= self.lcb_min_visits_fraction <= 1.0:
            raise SearchConfigError(
                f"lcb_min_visits_fraction must be in [0, 1], got {self.lcb_min_visits_fraction!r}")
        if not (np.isfinite(self.lcb_stdevs) and self.lcb_stdevs > 0):
            raise SearchConfigError(
                f"lcb_stdevs must be a finite number > 0, got {self.lcb_stdevs!r}")
        if not (isinstance(self.forced_playouts_k, (int, float, np.integer, np.floating))
                and not isinstance(self.forced_playouts_k, bool)
                and np.isfinite(self.forced_playouts_k) and self.forced_playouts_k >= 0):
            raise SearchConfigError(
                f"forced_playouts_k must be a finite number >= 0, got {self.forced_playouts_k!r}")
        if self.forced_playouts_k > 0 and self.root != "puct":
            raise SearchConfigError(
                f"forced_playouts_k ({self.forced_playouts_k!r}) applies to the PUCT root; "
                f"root={self.root!r} allocates its root visits by sequential halving "
                f"(set forced_playouts_k=0)")
        if self.forced_playouts_k > 0 and not self.root_noise:
            raise SearchConfigError(
                f"forced_playouts_k ({self.forced_playouts_k!r}) applies at roots with Dirichlet "
                f"noise (self-play): set root_noise=True, or forced_playouts_k=0")
        if self.node_capacity < 2:
            raise SearchConfigError(f"node_capacity must be >= 2, got {self.node_capacity}")
        if self.edge_capacity < MAX_MOVES:
            raise SearchConfigError(
                f"edge_capacity must be >= {MAX_MOVES} (one position's moves), "
                f"got {self.edge_capacity}"
            )
        if self.node_capacity_max < self.node_capacity:
            raise SearchConfigError("node_capacity_max must be >= node_capacity")
        if self.edge_capacity_max < self.edge_capacity:
            raise SearchConfigError("edge_capacity_max must be >= edge_capacity")
        if self.edge_capacity_max >= 1 << 31 or self.node_capacity_max >= 1 << 31:
            raise SearchConfigError("capacities must stay below 2**31 (int32 indices)")

    def replace(self, **changes: object) -> SearchConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def with_tree_memory(self, megabytes: float, moves_per_node: int = 32) -> SearchConfig:
        """A copy whose trees take at most `megabytes` MiB per game, allocated once at that size.

        The capacities are fixed (initial = maximum), so the arrays never grow: growing doubles
        them and holds the old and the new arrays at once. Numpy takes such large zeroed arrays
        from the operating system, which backs their pages with memory only when the search
        first writes them, so resident memory follows the nodes and edges in use up to the
        bound. A full tree stops expanding (see `SearchStats.overflows`).

        Args:
            megabytes: the trees' share of memory, per game, in MiB.
            moves_per_node: edges budgeted per node (nodes are small, and positions with fewer
                legal moves than this come late in a game, when trees are small).

        Raises:
            SearchConfigError: the budget does not hold one position's moves and two nodes.
        """
        if not (math.isfinite(megabytes) and megabytes > 0) or moves_per_node < 1:
            raise SearchConfigError(
                f"megabytes must be > 0 and moves_per_node >= 1, "
                f"got {megabytes!r}, {moves_per_node!r}")
        edges = int(megabytes * 2**20 / (EDGE_BYTES + NODE_BYTES / moves_per_node))
        nodes = edges // moves_per_node
        if edges < MAX_MOVES or nodes < 2:
            raise SearchConfigError(
                f"{megabytes} MiB hold {edges} edges and {nodes} nodes; a tree needs at least "
                f"{MAX_MOVES} edges (one position's moves) and 2 nodes")
        return self.replace(node_capacity=nodes, node_capacity_max=nodes, edge_capacity=edges,
                            edge_capacity_max=edges)


def uniform_priors(move_offsets: np.ndarray) -> np.ndarray:
    """`(M,) float32` priors, uniform over each position's moves.

    `move_offsets` `(B + 1,)` are the CSR offsets of the positions' moves."""
    counts = np.diff(move_offsets)
    share = np.zeros(counts.shape[0], np.float32)
    np.divide(1.0, counts, out=share, where=counts > 0, casting="unsafe")
    return np.repeat(share, counts)


class UniformEvaluator:
    """Uniform priors and value 0: search guided by exact terminal results only.

    For tests and benchmarks. It works on every board size (it has no `board_size`): the search
    it serves decides the size."""

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """See `Evaluator.evaluate`."""
        return uniform_priors(move_offsets), np.zeros(positions.shape[0], np.float32)


class RolloutEvaluator:
    """Uniform priors; value = mean result of uniformly random playouts run by the engine.

    Args:
        rollouts_per_leaf: playouts averaged per position (more = less noisy, slower).
        seed: seeds the playouts; two evaluators with one seed give the same values.
        board_size: the board's side N (6..10); positions are `(B, 3 * W)` of that size.

    Raises:
        SearchConfigError: rollouts_per_leaf < 1, or a board size the engine has no rules for.
    """

    def __init__(self, rollouts_per_leaf: int = 1, seed: int | None = None,
                 board_size: int = 8) -> None:
        if rollouts_per_leaf < 1:
            raise SearchConfigError(f"rollouts_per_leaf must be >= 1, got {rollouts_per_leaf}")
        try:
            self.board_size = engine.geometry(board_size).size
        except (TypeError, ValueError) as error:
            raise SearchConfigError(f"board_size: {error}") from None
        self.rollouts_per_leaf = int(rollouts_per_leaf)
        self._rng = np.random.default_rng(seed)

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """See `Evaluator.evaluate`."""
        seed = int(self._rng.integers(1 << 62))
        repeated = positions if self.rollouts_per_leaf == 1 else np.repeat(
            positions, self.rollouts_per_leaf, axis=0)
        results = engine.random_rollouts(np.ascontiguousarray(repeated), seed,
                                         size=self.board_size)
        values = results.reshape(positions.shape[0], self.rollouts_per_leaf).mean(axis=1)
        return uniform_priors(move_offsets), values.astype(np.float32)


@dataclass(frozen=True)
class SearchResult:
    """What a search found at one game's root: every legal move, canonical, in the root's frame.

    Moves come in the order a player should prefer them: proven wins (shortest first), then
    unproven moves by visits (most first; unvisited ones by prior), then proven losses (the
    longest resistance first). So `moves[0]` is the move to play after a deterministic search;
    with `root="gumbel"` or `lcb` that move (the halving winner, the best lower confidence bound)
    is put first even where another has more visits.
    """

    moves: np.ndarray  # (L,) x 3 int32, every legal root move, in the order above
    visits: np.ndarray  # (L,) int32, visit counts (the soft training label, unnormalized)
    q_values: np.ndarray  # (L,) float32, mean value for the root's side to move; exact +-1 if
    #                      proven; NaN for a move neither visited nor proven
    priors: np.ndarray  # (L,) float32, the evaluator's priors (noise-free even when noise was on)
    move_proofs: np.ndarray  # (L,) int8, +1 proven win for the root's side to move, -1 loss,
    #                          0 unknown
    move_proof_plies: np.ndarray  # (L,) int16, plies from the move to the end when proven
    root_value: float  # mean value of the root for its side to move, in [-1, 1]
    raw_value: float  # the evaluator's value of the root position (exact if the root is proven)
    proven: int  # +1: the side to move has a proven win, -1: a proven loss, 0: unknown
    proof_plies: int  # plies to the end under best play when proven (a bound when adjudicated)
    principal_variation: np.ndarray  # (P, 3) int32, best line; move i in the frame of ply i
    num_legal_moves: int  # legal moves at the root
    pruned_visits: np.ndarray | None = None  # (L,) int32, `visits` less the forced playouts that
    #                      fail the PUCT check (`amazons.search_targets.prune_forced_visits`)
    #                      where forced playouts ran at this root; None elsewhere

    @property
    def simulations(self) -> int:
        """Visits below the root (every completed simulation adds one)."""
        return int(self.visits.sum())

    @property
    def policy(self) -> np.ndarray:
        """(L,) float32 visit shares: the search policy over `moves`."""
        return (self.visits / max(self.simulations, 1)).astype(np.float32)


@dataclass
class SearchStats:
    """Counters of one `BatchedSearch.search` call, summed over its games."""

    simulations: int = 0  # completed simulations
    leaves_evaluated: int = 0  # positions sent to the evaluator (root expansions included)
    terminal_hits: int = 0  # simulations that ended at a known terminal or proven node
    collisions: int = 0  # descents discarded because their leaf was already pending
    overflows: int = 0  # leaves left unexpanded because the tree was full at its maximum
    batches: int = 0  # evaluator calls


def _check_positions(positions: np.ndarray, name: str, geometry: engine.Geometry) -> np.ndarray:
    """`positions` as a C-contiguous `(n, 3 * W) uint64` array of `geometry`'s board (one row
    `(3 * W,)` is taken as `n = 1`), each square used once.

    Raises:
        SearchInputError: a wrong dtype or shape (the board size named), or overlapping bitboards.
    """
    positions = np.asarray(positions)
    width, words, size = geometry.position_width, geometry.words, geometry.size
    if positions.dtype != POSITION_DTYPE:
        raise SearchInputError(f"{name} must have dtype uint64, got {positions.dtype}")
    if positions.shape == (width,):
        positions = positions.reshape(1, width)
    if positions.ndim != 2 or positions.shape[1] != width:
        raise SearchInputError(f"{name} must have shape (n, {width}) on a {size}x{size} board "
                               f"(3 bitboards of {words} words), got {positions.shape}")
    mine, theirs, arrows = (positions[:, k * words:(k + 1) * words] for k in range(3))
    overlap = ((mine & theirs) | (mine & arrows) | (theirs & arrows)).any(axis=1)
    if np.any(overlap):
        row = int(np.flatnonzero(overlap)[0])
        raise SearchInputError(f"{name}[{row}] has a square used twice (overlapping bitboards)")
    return np.ascontiguousarray(positions)


def _board_size(evaluator: Evaluator, size: int | None) -> int:
    """The board size a search with `evaluator` runs on: `size` when given, else the evaluator's
    `board_size`, else 8.

    Raises:
        SearchInputError: `size` and the evaluator's `board_size` disagree, or the size is not one
            the engine has rules for.
    """
    evaluator_size = getattr(evaluator, "board_size", None)
    if size is None:
        size = 8 if evaluator_size is None else evaluator_size
    elif evaluator_size is not None and evaluator_size != size:
        raise SearchInputError(
            f"the search was asked for size {size} ({size}x{size}) but its evaluator "
            f"{type(evaluator).__name__} has board_size {evaluator_size} "
            f"({evaluator_size}x{evaluator_size})")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
        raise SearchInputError(f"size must be an int board side (6..10), got {size!r}")
    return int(size)


class BatchedSearch:
    """MCTS trees for `num_games` games searched in lockstep, sharing one evaluator.

    Each game has a root position (canonical), a tree in flat arrays (`tree`, see
    `amazons.mcts_numba.TreeArrays`) and a random stream for noise and temperature sampling.
    Typical use, once per move of G self-play games:

        search.set_roots(positions)              # or keep the roots advance() left
        search.search()                          # config.simulations per game, one batch per round
        moves = search.select_moves(plies)       # (G, 3) canonical moves
        result = search.root_result(g)           # visit distribution, value, principal variation
        search.advance(g, moves[g])              # reuse the subtree (or clear it, by config)

    Args:
        evaluator: any object with the `Evaluator` protocol's `evaluate`.
        config: search parameters (defaults: `SearchConfig()`).
        num_games: G, games searched together.
        seed: seeds Dirichlet noise and temperature sampling.
        size: the board's side N (6..10); default: the evaluator's `board_size`, else 8. Roots
            and leaves are `(n, 3 * W) uint64` positions of this size (`engine.geometry`).

    Attributes:
        size: the board side the search runs on; `geometry`: its `engine.Geometry`.

    Raises:
        SearchInputError: `size` and the evaluator's `board_size` disagree (both are named), a
            size the engine has no rules for, no `evaluate` method, or num_games < 1.
        SearchConfigError: `config.edge_capacity` does not hold one position's moves of the size.
    """

    def __init__(
        self,
        evaluator: Evaluator,
        config: SearchConfig | None = None,
        num_games: int = 1,
        seed: int | None = None,
        size: int | None = None,
    ) -> None:
        if not callable(getattr(evaluator, "evaluate", None)):
            raise SearchInputError(
                "evaluator must have an evaluate(positions, moves, move_offsets) method")
        if num_games < 1:
            raise SearchInputError(f"num_games must be >= 1, got {num_games}")
        size = _board_size(evaluator, size)
        try:
            self.geometry = engine.geometry(size)
        except ValueError as error:
            raise SearchInputError(f"size {size}: {error}") from None
        self.size = self.geometry.size
        # The compiled rules of this size: the hot loop calls their kernels directly.
        self._rules = engine.rules(self.size)
        self.evaluator = evaluator
        self.config = config if config is not None else SearchConfig()
        max_moves = self.geometry.max_moves
        if self.config.edge_capacity < max_moves:
            raise SearchConfigError(
                f"edge_capacity must be >= {max_moves} (one {size}x{size} position's moves), "
                f"got {self.config.edge_capacity}")
        self.num_games = int(num_games)
        self._rng = np.random.default_rng(seed)
        self.tree = kernels.allocate_tree(self.num_games, self.config.node_capacity,
                                          self.config.edge_capacity)
        width = self.geometry.position_width
        self._roots = np.zeros((self.num_games, width), POSITION_DTYPE)
        self._has_root = np.zeros(self.num_games, np.bool_)
        self._noised = np.zeros(self.num_games, np.bool_)
        self._clean_root_priors: list[np.ndarray | None] = [None] * self.num_games
        self._gumbel = kernels.allocate_gumbel(self.num_games,
                                               max_moves if self.config.root == "gumbel" else 0)
        # sequential halving runs at this root
        self._gumbel_started = np.zeros(self.num_games, np.bool_)
        # forced playouts' k per root (0: off)
        self._root_forced_k = np.zeros(self.num_games, np.float64)
        batch = self.num_games * self.config.leaves_per_game
        self._leaf_game = np.zeros(batch, np.int32)
        self._leaf_parent = np.zeros(batch, np.int32)
        self._path_edges = np.zeros((batch, kernels.MAX_DEPTH), np.int32)
        self._path_moves = np.zeros((batch, kernels.MAX_DEPTH, 3), MOVE_DTYPE)
        self._path_lengths = np.zeros(batch, np.int32)
        self._leaf_positions = np.zeros((batch, width), POSITION_DTYPE)
        self._moves = np.empty((batch * max_moves, 3), MOVE_DTYPE)
        self._offsets = np.zeros(batch + 1, OFFSET_DTYPE)
        self._wins = np.zeros(batch * max_moves, np.bool_)
        self._leaf_proof = np.zeros(batch, np.int8)
        self._leaf_proof_plies = np.zeros(batch, np.int16)
        self._leaf_bounds = np.zeros((batch, 4), np.int16)
        self._remaining = np.zeros(self.num_games, np.int32)
        self._stats = np.zeros((self.num_games, kernels.NUM_STATS), np.int64)
        self._overflow = np.zeros(self.num_games, np.int64)
        self._allocate_scratch()

    # ------------------------------------------------------------------------------------------
    # Roots

    @property
    def root_positions(self) -> np.ndarray:
        """`(G, 3 * W) uint64` canonical root positions of the search's size, a copy.

        Rows of games without a root are 0."""
        return self._roots.copy()

    def set_roots(self, positions: np.ndarray, games: np.ndarray | list[int] | None = None) -> None:
        """Start fresh trees at canonical `positions` `(n, 3 * W) uint64` (the search's size; one
        `(3 * W,)` row for one game) for `games`.

        `games` defaults to all G games.

        Raises:
            SearchInputError: positions of another width (the board sizes named), overlapping
                bitboards, or a row count that does not match `games`.
        """
        positions = _check_positions(positions, "positions", self.geometry)
        games = self._check_games(games, require_root=False)
        if positions.shape[0] != games.shape[0]:
            raise SearchInputError(
                f"positions has {positions.shape[0]} rows for {games.shape[0]} games")
        self._roots[games] = positions
        self._has_root[games] = True
        self._noised[games] = False
        self._gumbel_started[games] = False
        kernels.reset_trees(self.tree, games)

    def clear(self, games: np.ndarray | list[int] | None = None) -> None:
        """Drop the trees (not the roots) of `games` (default: all)."""
        games = self._check_games(games, require_root=False)
        self._noised[games] = False
        self._gumbel_started[games] = False
        kernels.reset_trees(self.tree, games)

    def advance(self, game: int, move: np.ndarray) -> None:
        """Play canonical `move` `(3,) int32` (root frame) in `game`; the child becomes the root.

        With `config.reuse_tree` and an expanded child, the child's subtree is kept with its
        statistics and compacted to the front of the arrays; otherwise the tree is cleared.

        Raises:
            SearchInputError: if the game has no root or the move is not legal there.
        """
        game = int(self._check_games([game])[0])
        move = np.asarray(move)
        if move.shape != (3,) or not np.issubdtype(move.dtype, np.integer):
            raise SearchInputError(f"move must be 3 integers (src, dst, arrow), got {move!r}")
        move = move.astype(MOVE_DTYPE).reshape(1, 3)
        try:
            child_position = engine.apply_moves(self._roots[game : game + 1], move,
                                                size=self.size)
        except engine.EngineInputError:
            raise SearchInputError(
                f"move {move[0].tolist()} is not legal at the root of game {game}") from None
        tree = self.tree
        child = kernels.NO_CHILD
        if self.config.reuse_tree and tree.node_edge_count[game, 0] > 0:
            edge = kernels.find_edge(tree, game, 0, int(move[0, 0]), int(move[0, 1]),
                                     int(move[0, 2]))
            if edge >= 0:
                child = int(tree.edge_child[game, edge])
        if child > 0:
            kernels.compact_subtree(tree, game, child, self._scratch_index, self._scratch_shift)
        else:
            kernels.reset_trees(tree, np.array([game], np.int32))
        self._roots[game] = child_position[0]
        self._noised[game] = False
        self._gumbel_started[game] = False

    # ------------------------------------------------------------------------------------------
    # Search

    def search(
        self,
        num_simulations: int | np.ndarray | None = None,
        games: np.ndarray | list[int] | None = None,
        *,
        planned_simulations: int | np.ndarray | None = None,
        explore: bool | np.ndarray = True,
    ) -> SearchStats:
        """Run `num_simulations` (default `config.simulations`) more simulations in each game.

        Unexpanded roots are expanded first (one batch, not counted as simulations), and a root
        whose priors the evaluator never gave (a leaf proven at expansion that `advance` made
        the root, unless its edges prove it) is evaluated first too; with `config.root_noise`,
        Dirichlet noise is mixed into each root's priors once per root.
        With `config.root="gumbel"`, sequential halving starts at each root not yet started
        (a fresh root, or one `advance` just reached): Gumbel noise is drawn for its moves and
        its m moves are sampled, with the schedule planned for `planned_simulations`. Later
        searches of the same root continue the same halving. Afterwards each game's root visits
        have grown by exactly its `num_simulations`, except in a game whose root is proven (with
        `config.solver`): it stops as soon as the proof is known.

        Games with different counts are searched in the same batches (the ones with fewer
        simulations drop out first), so a playout cap's fast searches ride along with full ones.

        Args:
            num_simulations: one count for every game, or `(n,)` int counts, one per game.
            games: which games (default: all G, in order).
            planned_simulations: with root="gumbel", the budget n the halving schedule plans
                for, one for all or `(n,)`: a root starting now plans for this (default: its
                `num_simulations`); a root already started plans for this from now on (default:
                unchanged). A time-budgeted player passes its estimate. Ignored with "puct".
            explore: `False` (one for all, or `(n,)` bool) searches without root noise (neither
                Dirichlet nor Gumbel noise is drawn for a root starting now), e.g. a playout
                cap's fast searches, which should play their strongest move.

        Raises:
            SearchInputError: a game has no root, or its root is terminal (the game is over), or
                a count is negative or does not match `games`.
            EvaluatorError: the evaluator broke the protocol.
            Whatever the evaluator raises. After any error the searched games' trees are
            cleared (their roots are kept), so the next search starts clean.
        """
        games = self._check_games(games)
        simulations = self._per_game(
            self.config.simulations if num_simulations is None else num_simulations, games,
            "num_simulations")
        planned = None if planned_simulations is None else self._per_game(
            planned_simulations, games, "planned_simulations")
        explore = np.asarray(explore)
        if explore.ndim == 0:
            explore = np.broadcast_to(explore, games.shape)
        if explore.shape != games.shape or explore.dtype != np.bool_:
            raise SearchInputError(
                f"explore must be a bool or {games.shape[0]} bools, got {explore!r}")
        terminal = engine.is_terminal(self._roots[games], size=self.size)
        if np.any(terminal):
            raise SearchInputError(
                f"the root of game {int(games[np.flatnonzero(terminal)[0]])} is terminal "
                f"(game over)")
        stats = SearchStats()
        self._stats[:] = 0
        self._overflow[:] = 0
        try:
            self._run(games, simulations, stats, planned, explore)
        except BaseException:
            # Leaves of the interrupted batch are still pending: drop these trees, keep the roots.
            self.clear(games)
            raise
        totals = self._stats.sum(axis=0)
        stats.terminal_hits = int(totals[kernels.STAT_TERMINALS])
        stats.collisions = int(totals[kernels.STAT_COLLISIONS])
        stats.simulations = int(totals[kernels.STAT_LEAVES]) + stats.terminal_hits
        stats.overflows = int(self._overflow.sum())
        return stats

    @staticmethod
    def _per_game(counts: int | np.ndarray, games: np.ndarray, name: str) -> np.ndarray:
        """`(n,) int64` counts for `games` from one count or one per game (all >= 0)."""
        array = np.asarray(counts)
        if array.ndim == 0:
            array = np.broadcast_to(array, games.shape)
        if array.shape != games.shape or (array.size
                                          and not np.issubdtype(array.dtype, np.integer)):
            raise SearchInputError(
                f"{name} must be an int or {games.shape[0]} ints, got {counts!r}")
        if array.size and array.min() < 0:
            raise SearchInputError(f"{name} must be >= 0, got {counts!r}")
        return array.astype(np.int64)

    def _run(self, games: np.ndarray, simulations: np.ndarray, stats: SearchStats,
             planned: np.ndarray | None, explore: np.ndarray) -> None:
        """Expand the roots, add noise (or start sequential halving), then run rounds until every
        game has its simulations."""
        unexpanded = games[self.tree.node_edge_count[games, 0] == kernels.NOT_EXPANDED]
        if unexpanded.shape[0]:
            count = unexpanded.shape[0]
            self._leaf_game[:count] = unexpanded
            self._path_lengths[:count] = 0
            self._leaf_positions[:count] = self._roots[unexpanded]
            self._evaluate_and_expand(count, stats)
        for game in games.tolist():
            kernels.refresh_root_proof(self.tree, game)
        self._evaluate_roots(games, stats)
        gumbel = self.config.root == "gumbel"
        if self.config.root_noise and not gumbel:
            self._add_root_noise(games[~self._noised[games] & explore])
        if gumbel:
            self._start_gumbel(games, simulations if planned is None else planned,
                               planned is not None, explore)
        # Forced playouts run where the root's priors carry noise: self-play's full searches.
        self._root_forced_k[:] = np.where(self._noised, self.config.forced_playouts_k, 0.0)
        self._remaining[:] = 0
        self._remaining[games] = simulations
        cfg = self.config
        while True:
            active = np.flatnonzero(self._remaining > 0).astype(np.int32)
            if active.shape[0] == 0:
                break
            count, status = kernels.select_leaves(
                self.tree, active, self._remaining, cfg.leaves_per_game, float(cfg.c_puct),
                float(cfg.c_puct_base), float(cfg.fpu_reduction), float(cfg.virtual_loss),
                self._root_forced_k, kernels.ROOT_GUMBEL if gumbel else kernels.ROOT_PUCT,
                self._gumbel, int(cfg.gumbel_m), float(cfg.c_visit), float(cfg.c_scale),
                self._leaf_game, self._leaf_parent, self._path_edges, self._path_moves,
                self._path_lengths, self._stats)
            if status != kernels.STATUS_OK:
                raise RuntimeError(f"select_leaves failed with status {status} (corrupt tree)")
            if count == 0:
                continue
            bad = self._rules.play_paths_batch(self._roots, self._leaf_game[:count],
                                               self._path_moves[:count],
                                               self._path_lengths[:count],
                                               self._leaf_positions[:count])
            if bad >= 0:
                raise RuntimeError(f"leaf path {bad} is illegal (corrupt tree)")
            self._evaluate_and_expand(count, stats)

    def _evaluate_and_expand(self, count: int, stats: SearchStats) -> None:
        """Evaluate leaves 0..count-1 of the batch buffers, grow the arrays if needed, expand.

        Leaves whose result is already exact never reach the evaluator: terminal ones, and with
        the solver, non-root leaves with a winning move or (with `adjudicate`) decided by
        `engine.adjudicate`. Their moves get uniform priors, unused while the leaf is proven
        below the root; if it becomes a root, `_evaluate_roots` asks the evaluator for them.
        """
        # The batch buffers were allocated with the engine's dtypes and shapes (and a move buffer
        # of G x K x max_moves rows), so the engine's kernels are called without the checking
        # wrappers of `amazons.engine`: this runs once per round, where the checks would cost
        # as much as the kernels.
        positions = self._leaf_positions[:count]
        offsets = self._offsets[: count + 1]
        total = self._rules.legal_moves_batch(positions, self._moves, offsets)
        moves = self._moves[:total]
        counts = np.diff(offsets)
        terminal = counts == 0
        exact = terminal.copy()
        wins = self._wins[:total]
        self._leaf_proof[:count] = 0
        if self.config.solver and total > 0:
            below_root = self._path_lengths[:count] > 0
            if self._rules.winning_moves_batch(positions, moves, offsets, wins.view(np.uint8)):
                cumulative = np.concatenate(([0], np.cumsum(wins, dtype=np.int64)))
                exact |= (cumulative[offsets[1:]] > cumulative[offsets[:-1]]) & below_root
            if self.config.adjudicate and self._adjudicate_leaves(count):
                exact |= (self._leaf_proof[:count] != 0) & below_root
        values = np.zeros(count, np.float32)
        if exact.all():
            priors = uniform_priors(offsets)
        elif exact.any():
            priors = uniform_priors(offsets)
            live = np.flatnonzero(~exact)
            live_moves = np.repeat(~exact, counts)
            live_offsets = np.concatenate(([0], np.cumsum(counts[live]))).astype(OFFSET_DTYPE)
            live_priors, values[live] = self._call_evaluator(
                np.ascontiguousarray(positions[live]), np.ascontiguousarray(moves[live_moves]),
                live_offsets)
            priors[live_moves] = live_priors
            stats.leaves_evaluated += live.shape[0]
            stats.batches += 1
        else:
            priors, values = self._call_evaluator(positions, moves, offsets)
            stats.leaves_evaluated += count
            stats.batches += 1
        self._ensure_capacity(self._leaf_game[:count], counts)
        status = kernels.expand_and_backup(
            self.tree, count, self._leaf_game, self._leaf_parent, self._path_edges,
            self._path_lengths, terminal, values, moves, priors, offsets, self.config.solver,
            wins.view(np.uint8), self._leaf_proof, self._leaf_proof_plies, self._overflow)
        if status != kernels.STATUS_OK:
            raise RuntimeError(f"expand_and_backup failed with status {status}")

    def _evaluate_roots(self, games: np.ndarray, stats: SearchStats) -> None:
        """Give the evaluator's priors to the roots of `games` that never had them.

        A leaf proven at expansion skipped the evaluator and got uniform priors; when `advance`
        makes it a root that its edges do not prove (an adjudicated leaf: adjudication never
        proves a root), its moves are searched and its policy target written from those priors.
        So such roots are evaluated first, in one batch; their raw value stays the exact one.
        """
        tree = self.tree
        stale = games[(tree.node_edge_count[games, 0] > 0) & ~tree.node_evaluated[games, 0]
                      & (tree.node_proof[games, 0] == kernels.PROOF_NONE)]
        if stale.shape[0] == 0:
            return
        firsts = tree.node_first_edge[stale, 0].astype(np.int64)
        counts = tree.node_edge_count[stale, 0].astype(np.int64)
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(OFFSET_DTYPE)
        moves = np.concatenate([tree.edge_move[game, first:first + count]
                                for game, first, count in zip(stale.tolist(), firsts.tolist(),
                                                              counts.tolist(), strict=True)]
                                ).astype(MOVE_DTYPE)
        priors, _ = self._call_evaluator(np.ascontiguousarray(self._roots[stale]), moves, offsets)
        for row, (game, first, count) in enumerate(zip(stale.tolist(), firsts.tolist(),
                                                       counts.tolist(), strict=True)):
            tree.edge_prior[game, first:first + count] = priors[offsets[row]:offsets[row + 1]]
            tree.node_evaluated[game, 0] = True
            kernels.recompute_visited_mass(tree, game, 0)
        stats.leaves_evaluated += stale.shape[0]
        stats.batches += 1

    def _adjudicate_leaves(self, count: int) -> bool:
        """Exact results of the batch's separated leaves into `_leaf_proof` / `_leaf_proof_plies`
        (`adjudicated_plies`); whether any leaf was decided."""
        result, bounds = self._leaf_proof[:count], self._leaf_bounds[:count]
        self._rules.adjudicate_batch(self._leaf_positions[:count], result, bounds)
        if not result.any():
            return False
        self._leaf_proof_plies[:count] = adjudicated_plies(result, bounds)
        return True

    def _call_evaluator(
        self, positions: np.ndarray, moves: np.ndarray, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        result = self.evaluator.evaluate(positions, moves, offsets)
        if not isinstance(result, tuple) or len(result) != 2:
            raise EvaluatorError("evaluate() must return a (priors, values) tuple")
        priors, values = np.asarray(result[0]), np.asarray(result[1])
        if priors.shape != (moves.shape[0],):
            raise EvaluatorError(f"priors has shape {priors.shape}; expected ({moves.shape[0]},)")
        if values.shape != (positions.shape[0],):
            raise EvaluatorError(
                f"values has shape {values.shape}; expected ({positions.shape[0]},)")
        for name, array in (("priors", priors), ("values", values)):
            if array.dtype.kind != "f":
                raise EvaluatorError(f"{name} must be floating point, got {array.dtype}")
        if priors.dtype != np.float32 or not priors.flags.c_contiguous:
            priors = np.ascontiguousarray(priors, dtype=np.float32)
        if values.dtype != np.float32:
            values = values.astype(np.float32)
        # Comparisons with NaN are false, so these also reject NaN.
        if not (values.min() >= -1.0 - 1e-4 and values.max() <= 1.0 + 1e-4):
            raise EvaluatorError("values must be finite and in [-1, 1]")
        if not priors.min() >= 0.0:
            raise EvaluatorError("priors must be finite and >= 0")
        sums = np.add.reduceat(priors, offsets[:-1], dtype=np.float64)
        error = np.abs(sums - 1.0)
        if not error.max() <= 1e-3:
            bad = int(np.flatnonzero(~(error <= 1e-3))[0])
            raise EvaluatorError(f"priors of position {bad} sum to {sums[bad]:.6f}, not 1")
        return priors, np.clip(values, -1.0, 1.0)

    def _ensure_capacity(self, leaf_games: np.ndarray, move_counts: np.ndarray) -> None:
        """Grow the tree arrays (doubling, up to the configured maxima) so the leaves fit."""
        cfg = self.config
        tree = self.tree
        node_cap, edge_cap = tree.node_visits.shape[1], tree.edge_prior.shape[1]
        if (int(tree.nodes_used.max()) + leaf_games.shape[0] <= node_cap
                and int(tree.edges_used.max()) + int(move_counts.sum()) <= edge_cap):
            return  # fits even if every leaf belonged to the fullest game
        need_nodes = tree.nodes_used + np.bincount(leaf_games, minlength=self.num_games)
        need_edges = tree.edges_used + np.bincount(leaf_games, weights=move_counts,
                                                   minlength=self.num_games).astype(np.int64)
        most_nodes, most_edges = int(need_nodes.max()), int(need_edges.max())
        new_node_cap, new_edge_cap = node_cap, edge_cap
        if most_nodes > node_cap and node_cap < cfg.node_capacity_max:
            new_node_cap = min(cfg.node_capacity_max, max(2 * node_cap, most_nodes))
        if most_edges > edge_cap and edge_cap < cfg.edge_capacity_max:
            new_edge_cap = min(cfg.edge_capacity_max, max(2 * edge_cap, most_edges))
        if (new_node_cap, new_edge_cap) != (node_cap, edge_cap):
            self.tree = kernels.grow_tree(tree, new_node_cap, new_edge_cap)
            self._allocate_scratch()

    def _allocate_scratch(self) -> None:
        nodes = self.tree.node_visits.shape[1]
        self._scratch_index = np.zeros(nodes, np.int32)
        self._scratch_shift = np.zeros(nodes, np.int32)

    def _start_gumbel(self, games: np.ndarray, budgets: np.ndarray, replan: bool,
                      explore: np.ndarray) -> None:
        """Start sequential halving at the roots of `games` not started yet, planned for `budgets`
        `(n,)`; with `replan`, started roots plan for `budgets` from now on.

        Gumbel(0, 1) noise times `gumbel_scale` is drawn from the search's generator for each
        root's moves (in edge order), unless the game does not `explore` or the scale is 0.
        """
        cfg = self.config
        tree = self.tree
        for game, budget, noisy in zip(games.tolist(), budgets.tolist(), explore.tolist(),
                                       strict=True):
            budget = min(int(budget), np.iinfo(np.int32).max)
            if self._gumbel_started[game]:
                if replan:
                    self._gumbel.budget[game] = budget
                continue
            count = int(tree.node_edge_count[game, 0])
            if noisy and cfg.gumbel_scale > 0:
                noise = self._rng.gumbel(size=count) * cfg.gumbel_scale
            else:
                noise = np.zeros(count)
            kernels.start_gumbel(tree, self._gumbel, game, noise, int(cfg.gumbel_m), budget)
            self._gumbel_started[game] = True

    def _add_root_noise(self, games: np.ndarray) -> None:
        """Mix Dirichlet(total_alpha / n, ..., n times) noise into each root's n priors."""
        cfg = self.config
        tree = self.tree
        for game in games.tolist():
            first, count = int(tree.node_first_edge[game, 0]), int(tree.node_edge_count[game, 0])
            noise = self._rng.gamma(cfg.dirichlet_total_alpha / count, size=count)
            total = noise.sum()
            noise = noise / total if total > 0 else np.full(count, 1.0 / count)
            priors = tree.edge_prior[game, first : first + count]
            self._clean_root_priors[game] = priors.copy()
            priors[:] = (1.0 - cfg.dirichlet_fraction) * priors + cfg.dirichlet_fraction * noise
            kernels.recompute_visited_mass(tree, game, 0)
            self._noised[game] = True

    # ------------------------------------------------------------------------------------------
    # Results

    def root_result(self, game: int) -> SearchResult:
        """The root statistics of `game` after a search (moves canonical, root frame).

        Priors are the evaluator's, without the root noise that steered the selection: the noise
        explores, it is not something the search found. Where forced playouts ran (a noised root
        with `forced_playouts_k` > 0), `pruned_visits` holds the visits with the forced playouts
        that fail the PUCT check removed (`search_targets.prune_forced_visits`). With
        root="gumbel" or `lcb`, the move a deterministic `select_moves` plays comes first (and
        starts the principal variation) even where another move has more visits.
        """
        game = int(self._check_games([game])[0])
        tree = self.tree
        count = int(tree.node_edge_count[game, 0])
        first = int(tree.node_first_edge[game, 0])
        if count <= 0:
            raise SearchInputError(f"game {game} has not been searched (its root is not expanded)")
        block = slice(first, first + count)
        visits = tree.edge_visits[game, block].astype(np.int32)
        proofs = tree.edge_proof[game, block].copy()
        plies = tree.edge_proof_plies[game, block].copy()
        clean = self._clean_root_priors[game]
        priors = (clean.copy() if self._noised[game] and clean is not None
                  else tree.edge_prior[game, block].copy())
        pruned = self._pruned_root_visits(game) if self._forced_at(game) else None
        with np.errstate(invalid="ignore", divide="ignore"):
            q_values = (tree.edge_value_sum[game, block] / visits).astype(np.float32)
        q_values = np.where(proofs != 0, proofs.astype(np.float32), q_values)
        rank = np.where(proofs > 0, 0, np.where(proofs < 0, 2, 1))
        plies_key = np.where(proofs > 0, plies, np.where(proofs < 0, -plies.astype(np.int32), 0))
        order = np.lexsort((-priors, -visits, plies_key, rank))
        pv = np.zeros((kernels.MAX_DEPTH, 3), MOVE_DTYPE)
        pick = self._deterministic_edge(game) if self._chooses_otherwise() else -1
        if pick >= 0:
            order = np.concatenate(([pick - first], order[order != pick - first]))
            length = kernels.principal_variation_after(tree, game, pick, pv)
        else:
            length = kernels.principal_variation(tree, game, pv)
        root_visits = max(int(tree.node_visits[game, 0]), 1)
        return SearchResult(
            moves=tree.edge_move[game, block][order].astype(MOVE_DTYPE),
            visits=visits[order],
            q_values=q_values[order],
            priors=priors[order],
            move_proofs=proofs[order],
            move_proof_plies=plies[order],
            root_value=float(tree.node_value_sum[game, 0] / root_visits),
            raw_value=float(tree.node_raw_value[game, 0]),
            proven=int(tree.node_proof[game, 0]),
            proof_plies=int(tree.node_proof_plies[game, 0]),
            principal_variation=pv[:length].copy(),
            num_legal_moves=count,
            pruned_visits=None if pruned is None else pruned[order],
        )

    def select_moves(
        self, plies: int | np.ndarray, games: np.ndarray | list[int] | None = None
    ) -> np.ndarray:
        """Choose each game's move from its root, `(n, 3) int32` canonical.

        A root with a proven win plays its shortest win. Otherwise, games at ply <
        `config.temperature_moves` sample a move with probability proportional to
        visits ** (1 / temperature) among the moves not proven lost (with root="gumbel": to
        the completed-Q policy `search_targets.improved_policy` ** (1 / temperature), since
        halving leaves most moves unvisited; where forced playouts ran: to the visits less the
        forced playouts that fail the PUCT check, `search_targets.prune_forced_visits`, as
        KataGo chooses its moves);
        later plies take the most visited such move (the first on ties), or with root="gumbel"
        the sequential-halving winner (`mcts_numba.gumbel_choice`), or with `lcb` the move with
        the highest lower confidence bound (`mcts_numba.lcb_edge`); a root proven lost plays its
        longest resistance. Where every visited move was proven lost and the open moves got no
        visit, the open move with the highest prior is played.

        Args:
            plies: the ply (moves played since the game start) of each game, or one int for all.
            games: which games (default: all G, in order).

        Raises:
            SearchInputError: a game has neither root visits nor a proof (search it first).
        """
        games = self._check_games(games)
        plies = np.broadcast_to(np.asarray(plies, dtype=np.int64), games.shape)
        chosen = np.zeros((games.shape[0], 3), MOVE_DTYPE)
        tree = self.tree
        for row, (game, ply) in enumerate(zip(games.tolist(), plies.tolist(), strict=True)):
            first, count = int(tree.node_first_edge[game, 0]), int(tree.node_edge_count[game, 0])
            pick = self._deterministic_edge(game) if count > 0 else -1
            if pick < 0:
                raise SearchInputError(f"game {game} has no root visits: search it first")
            if (ply < self.config.temperature_moves
                    and tree.node_proof[game, 0] == kernels.PROOF_NONE):
                block = slice(first, first + count)
                if self.config.root == "gumbel":
                    weights = self._root_policy(game).astype(np.float64)
                elif self._forced_at(game):
                    weights = self._pruned_root_visits(game).astype(np.float64)
                else:
                    weights = tree.edge_visits[game, block].astype(np.float64)
                weights[tree.edge_proof[game, block] == kernels.PROOF_LOSS] = 0.0
                weights = weights ** (1.0 / self.config.temperature)
                if weights.sum() > 0:  # else only proven-lost moves were visited: keep `pick`
                    pick = first + int(self._rng.choice(count, p=weights / weights.sum()))
            chosen[row] = tree.edge_move[game, pick]
        return chosen

    def _chooses_otherwise(self) -> bool:
        """Whether the deterministic move may differ from the most visited one (gumbel, lcb)."""
        return self.config.root == "gumbel" or self.config.lcb

    def _deterministic_edge(self, game: int) -> int:
        """The root edge a deterministic choice plays in `game` (-1 if none): the halving winner
        where sequential halving ran, the best lower confidence bound with `lcb` (root="puct"),
        otherwise `best_edge`; proofs take precedence in all three. A searched root whose
        visited moves are all proven lost plays its open move with the highest prior."""
        cfg = self.config
        if cfg.root == "gumbel" and self._gumbel_started[game]:
            pick = kernels.gumbel_choice(self.tree, self._gumbel, game, float(cfg.c_visit),
                                         float(cfg.c_scale))
        elif cfg.lcb and cfg.root == "puct":
            pick = kernels.lcb_edge(self.tree, game, 0, float(cfg.lcb_min_visits_fraction),
                                    float(cfg.lcb_stdevs))
        else:
            pick = kernels.best_edge(self.tree, game, 0)
        if pick < 0 and self.tree.node_visits[game, 0] > 1:
            # Searched, but every visited move was proven lost and the open ones got no visit.
            pick = kernels.open_edge(self.tree, game, 0)
        return int(pick)

    def _forced_at(self, game: int) -> bool:
        """Whether forced playouts ran at the root of `game` (its priors carry noise, k > 0)."""
        return self.config.forced_playouts_k > 0 and bool(self._noised[game])

    def _pruned_root_visits(self, game: int) -> np.ndarray:
        """`search_targets.prune_forced_visits` over the root edges of `game`, in edge order
        `(L,) int32`."""
        tree = self.tree
        first, count = int(tree.node_first_edge[game, 0]), int(tree.node_edge_count[game, 0])
        block = slice(first, first + count)
        visits = tree.edge_visits[game, block]
        with np.errstate(invalid="ignore", divide="ignore"):
            q_values = tree.edge_value_sum[game, block] / visits
        cfg = self.config
        return pruned_visits(visits, q_values, tree.edge_prior[game, block],
                             tree.edge_proof[game, block], int(tree.node_visits[game, 0]),
                             cfg.forced_playouts_k, cfg.c_puct, cfg.c_puct_base)

    def _root_policy(self, game: int) -> np.ndarray:
        """`search_targets.improved_policy` over the root edges of `game` (noise-free priors),
        in edge order `(L,) float32`."""
        cfg = self.config
        tree = self.tree
        first, count = int(tree.node_first_edge[game, 0]), int(tree.node_edge_count[game, 0])
        block = slice(first, first + count)
        visits = tree.edge_visits[game, block]
        clean = self._clean_root_priors[game]
        priors = clean if self._noised[game] and clean is not None else tree.edge_prior[game, block]
        with np.errstate(invalid="ignore", divide="ignore"):
            q_values = tree.edge_value_sum[game, block] / visits
        return completed_q_policy(priors, visits, q_values, tree.edge_proof[game, block],
                                  float(tree.node_raw_value[game, 0]), float(cfg.c_visit),
                                  float(cfg.c_scale))

    def tree_usage(self) -> dict[str, np.ndarray | int]:
        """Nodes and edges in use per game `(G,) int32`, and the current capacities."""
        return {
            "nodes_used": self.tree.nodes_used.copy(),
            "edges_used": self.tree.edges_used.copy(),
            "node_capacity": int(self.tree.node_visits.shape[1]),
            "edge_capacity": int(self.tree.edge_prior.shape[1]),
        }

    # ------------------------------------------------------------------------------------------

    def _check_games(
        self, games: np.ndarray | list[int] | None, require_root: bool = True
    ) -> np.ndarray:
        if games is None:
            games = np.arange(self.num_games, dtype=np.int32)
        games = np.asarray(games)
        if games.ndim != 1 or (games.shape[0] and not np.issubdtype(games.dtype, np.integer)):
            raise SearchInputError(f"games must be a 1-d list of game indices, got {games!r}")
        games = games.astype(np.int32)
        if np.any((games < 0) | (games >= self.num_games)):
            raise SearchInputError(
                f"game indices must be in 0..{self.num_games - 1}, got {games.tolist()}")
        if np.unique(games).shape[0] != games.shape[0]:
            raise SearchInputError(f"game indices repeat: {games.tolist()}")
        if require_root and not np.all(self._has_root[games]):
            missing = int(games[~self._has_root[games]][0])
            raise SearchInputError(f"game {missing} has no root position: call set_roots first")
        return games


def warm_up() -> float:
    """Compile every search kernel (or load it from Numba's on-disk cache) with small searches
    (PUCT with noise and tree reuse, the Gumbel root, LCB).

    `make build` runs this once, so the first search of a later process (the Botzone bot's
    first turn above all) loads the kernels instead of compiling them. The kernels never see the
    board size (their arrays have the same types on every size), so these 8x8 searches load
    everything a search of another size runs (`tests/test_search_sizes.py` checks it).

    Returns:
        The seconds it took.
    """
    started = time.perf_counter()
    search = BatchedSearch(UniformEvaluator(),
                           SearchConfig(simulations=16, leaves_per_game=4, root_noise=True,
                                        temperature_moves=1),
                           num_games=2, seed=0)
    search.set_roots(np.repeat(engine.start_position().reshape(1, 3), 2, axis=0))
    search.search()
    move = search.select_moves(0)
    search.root_result(0)
    search.advance(0, move[0])
    search.search(games=[0])
    for config in (SearchConfig(simulations=16, leaves_per_game=4, root="gumbel",
                                temperature_moves=1),
                   SearchConfig(simulations=16, leaves_per_game=4, lcb=True)):
        other = BatchedSearch(UniformEvaluator(), config, seed=0)
        other.set_roots(engine.start_position())
        other.search()
        other.select_moves(0)
        other.select_moves(1)
        other.root_result(0)
    return time.perf_counter() - started
