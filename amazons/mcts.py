"""AlphaZero search over many games at once: the Evaluator protocol, its simple implementations,
the search configuration, and `BatchedSearch`, the checked wrapper around `amazons.mcts_numba`.

One search round alternates Numba kernels with batch calls into the Cython engine, so the rules
exist only in the engine and no Python loop ever runs over moves or nodes:

1. `select_leaves` (Numba) descends every game's tree with PUCT and virtual loss and returns up to
   K leaf paths per game;
2. `engine.play_paths` turns root positions + paths into leaf positions, and `engine.legal_moves`
   lists their moves (CSR), both in one call for all G x K leaves;
3. the evaluator scores all non-terminal leaves in one call (terminal leaves are exact losses for
   their side to move and never reach it);
4. `expand_and_backup` (Numba) writes the new edge blocks and backs the values up, negating per ply.

Everything is in canonical frames: the side to move's view, so the search never deals with
colours, and every value is for the side to move at its node. This module imports numpy and the
engine only; it never imports torch (network evaluators implement the same protocol elsewhere).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from amazons import engine
from amazons import mcts_numba as kernels
from amazons.engine import MAX_MOVES, MOVE_DTYPE, OFFSET_DTYPE, POSITION_DTYPE

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
    "improved_policy",
    "warm_up",
]


NODE_BYTES = 41  # bytes per tree node: the node_* arrays of amazons.mcts_numba.TreeArrays
EDGE_BYTES = 23  # bytes per tree edge: the edge_* arrays (move 3 x int8, prior, visits, value, in-flight, child)


class SearchConfigError(ValueError):
    """A `SearchConfig` field is out of range; the message names the field."""


class SearchInputError(ValueError):
    """A position, game index or move passed to `BatchedSearch` is wrong; the message says which."""


class EvaluatorError(ValueError):
    """An evaluator returned arrays of the wrong shape or dtype, or values out of range."""


@dataclass(frozen=True)
class SearchConfig:
    """Parameters of one search; frozen, so one object can be passed to every process."""

    simulations: int = 800  # simulations per search and game (each ends at a new leaf or a terminal)
    leaves_per_game: int = 8  # K: leaves one game adds to an evaluator batch (virtual loss keeps them apart)
    c_puct: float = 1.25  # exploration constant c_init in Q + c * P * sqrt(N_parent) / (1 + N)
    c_puct_base: float = 19652.0  # c grows as c_puct + log((1 + N_parent + base) / base); 0 = constant c
    fpu_reduction: float = 0.25  # unvisited edges score Q_parent - this * sqrt(prior mass already selected)
    virtual_loss: float = 1.0  # each in-flight selection counts as this many lost visits (0 = none)
    root_noise: bool = False  # mix Dirichlet noise into the root priors once per root (self-play)
    dirichlet_total_alpha: float = 10.0  # total concentration; alpha per move = this / number of legal moves
    dirichlet_fraction: float = 0.25  # root prior = (1 - fraction) * prior + fraction * noise
    temperature_moves: int = 0  # plies (from the game start) whose move is sampled from the visits
    temperature: float = 1.0  # sample proportional to visits ** (1 / temperature) in those plies
    reuse_tree: bool = True  # keep the played move's subtree (and its statistics) as the next root
    node_capacity: int = 4096  # nodes per game allocated up front
    edge_capacity: int = 1 << 18  # edges (moves) per game allocated up front, 23 bytes each
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
            raise SearchConfigError(f"dirichlet_fraction must be in [0, 1], got {self.dirichlet_fraction!r}")
        if self.root_noise and self.dirichlet_total_alpha <= 0:
            raise SearchConfigError("dirichlet_total_alpha must be > 0 when root_noise is on")
        if not self.temperature > 0:
            raise SearchConfigError(f"temperature must be > 0, got {self.temperature!r}")
        if self.node_capacity < 2:
            raise SearchConfigError(f"node_capacity must be >= 2, got {self.node_capacity}")
        if self.edge_capacity < MAX_MOVES:
            raise SearchConfigError(
                f"edge_capacity must be >= {MAX_MOVES} (one position's moves), got {self.edge_capacity}"
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
                f"megabytes must be > 0 and moves_per_node >= 1, got {megabytes!r}, {moves_per_node!r}")
        edges = int(megabytes * 2**20 / (EDGE_BYTES + NODE_BYTES / moves_per_node))
        nodes = edges // moves_per_node
        if edges < MAX_MOVES or nodes < 2:
            raise SearchConfigError(
                f"{megabytes} MiB hold {edges} edges and {nodes} nodes; a tree needs at least "
                f"{MAX_MOVES} edges (one position's moves) and 2 nodes")
        return self.replace(node_capacity=nodes, node_capacity_max=nodes, edge_capacity=edges,
                            edge_capacity_max=edges)


@runtime_checkable
class Evaluator(Protocol):
    """Scores leaf positions for the search; implementations must not keep the input arrays."""

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Priors over each position's legal moves and a value for its side to move.

        Args:
            positions: `(B, 3) uint64` canonical leaf positions, none of them terminal.
            moves: `(M, 3) int32` canonical legal moves of all positions, concatenated.
            move_offsets: `(B + 1,) int64`; position i owns `moves[move_offsets[i]:move_offsets[i + 1]]`.

        Returns:
            `(priors, values)`: `priors` `(M,) float32`, summing to 1 over each position's moves;
            `values` `(B,) float32` in [-1, 1], for the side to move at each position.
        """
        ...


def uniform_priors(move_offsets: np.ndarray) -> np.ndarray:
    """`(M,) float32` priors, uniform over each position's moves, for CSR `move_offsets` `(B + 1,)`."""
    counts = np.diff(move_offsets)
    share = np.zeros(counts.shape[0], np.float32)
    np.divide(1.0, counts, out=share, where=counts > 0, casting="unsafe")
    return np.repeat(share, counts)


class UniformEvaluator:
    """Uniform priors and value 0: search guided by exact terminal results only (tests, benchmarks)."""

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
    """

    def __init__(self, rollouts_per_leaf: int = 1, seed: int | None = None) -> None:
        if rollouts_per_leaf < 1:
            raise SearchConfigError(f"rollouts_per_leaf must be >= 1, got {rollouts_per_leaf}")
        self.rollouts_per_leaf = int(rollouts_per_leaf)
        self._rng = np.random.default_rng(seed)

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """See `Evaluator.evaluate`."""
        seed = int(self._rng.integers(1 << 62))
        repeated = positions if self.rollouts_per_leaf == 1 else np.repeat(
            positions, self.rollouts_per_leaf, axis=0)
        results = engine.random_rollouts(np.ascontiguousarray(repeated), seed)
        values = results.reshape(positions.shape[0], self.rollouts_per_leaf).mean(axis=1)
        return uniform_priors(move_offsets), values.astype(np.float32)


@dataclass(frozen=True)
class SearchResult:
    """What a search found at one game's root; moves are canonical, in the root's frame."""

    moves: np.ndarray  # (K, 3) int32, root moves with at least one visit, most visited first
    visits: np.ndarray  # (K,) int32, their visit counts (the soft training label, unnormalized)
    q_values: np.ndarray  # (K,) float32, mean value of each move for the side to move at the root
    priors: np.ndarray  # (K,) float32, their priors at the root (noise included when it was on)
    root_value: float  # mean value of the root for its side to move, in [-1, 1]
    principal_variation: np.ndarray  # (L, 3) int32, most-visited line; move i in the frame of ply i
    num_legal_moves: int  # legal moves at the root

    @property
    def simulations(self) -> int:
        """Visits below the root (every completed simulation adds one)."""
        return int(self.visits.sum())

    @property
    def policy(self) -> np.ndarray:
        """(K,) float32 visit shares: the search policy over `moves`."""
        return (self.visits / max(self.simulations, 1)).astype(np.float32)


def improved_policy(result: SearchResult, c_visit: float = 50.0, c_scale: float = 0.1) -> np.ndarray:
    """A policy target over `result.moves` that uses the search's values, not only its visits.

    With few simulations and a thousand legal moves, most visited moves get one or two visits, so
    visit shares mostly echo the prior that chose which moves to try. This target is the Gumbel
    MuZero policy improvement (Danihelka et al., 2022) restricted to the visited moves:
    `softmax(log prior + sigma(q))`, where q is each move's mean value rescaled to [0, 1] between
    the worst and the best visited move and `sigma(q) = (c_visit + max visits) * c_scale * q`.
    With one visited move, or equal values, it is the renormalized prior.

    Args:
        result: a root's search result (moves with at least one visit).
        c_visit, c_scale: the sigma transform's constants; larger values trust q more.

    Returns:
        `(K,) float32` probabilities over `result.moves`, summing to 1.
    """
    q = result.q_values.astype(np.float64)
    span = float(q.max() - q.min()) if q.size else 0.0
    scaled = (q - q.min()) / span if span > 1e-9 else np.zeros_like(q)
    sigma = (c_visit + float(result.visits.max(initial=0))) * c_scale * scaled
    logits = np.log(np.maximum(result.priors.astype(np.float64), 1e-12)) + sigma
    weights = np.exp(logits - logits.max(initial=0.0))
    return (weights / weights.sum()).astype(np.float32)


@dataclass
class SearchStats:
    """Counters of one `BatchedSearch.search` call, summed over its games."""

    simulations: int = 0  # completed simulations
    leaves_evaluated: int = 0  # positions sent to the evaluator (root expansions included)
    terminal_hits: int = 0  # simulations that ended at a known terminal node
    collisions: int = 0  # descents discarded because their leaf was already pending
    overflows: int = 0  # leaves left unexpanded because the tree was full at its maximum
    batches: int = 0  # evaluator calls


def _check_positions(positions: np.ndarray, name: str) -> np.ndarray:
    positions = np.asarray(positions)
    if positions.dtype != POSITION_DTYPE:
        raise SearchInputError(f"{name} must have dtype uint64, got {positions.dtype}")
    if positions.shape == (3,):
        positions = positions.reshape(1, 3)
    if positions.ndim != 2 or positions.shape[1] != 3:
        raise SearchInputError(f"{name} must have shape (n, 3), got {positions.shape}")
    mine, theirs, arrows = positions[:, 0], positions[:, 1], positions[:, 2]
    overlap = (mine & theirs) | (mine & arrows) | (theirs & arrows)
    if np.any(overlap):
        row = int(np.flatnonzero(overlap)[0])
        raise SearchInputError(f"{name}[{row}] has a square used twice (overlapping bitboards)")
    return np.ascontiguousarray(positions)


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
    """

    def __init__(
        self,
        evaluator: Evaluator,
        config: SearchConfig | None = None,
        num_games: int = 1,
        seed: int | None = None,
    ) -> None:
        if not callable(getattr(evaluator, "evaluate", None)):
            raise SearchInputError("evaluator must have an evaluate(positions, moves, move_offsets) method")
        if num_games < 1:
            raise SearchInputError(f"num_games must be >= 1, got {num_games}")
        self.evaluator = evaluator
        self.config = config if config is not None else SearchConfig()
        self.num_games = int(num_games)
        self._rng = np.random.default_rng(seed)
        self.tree = kernels.allocate_tree(self.num_games, self.config.node_capacity,
                                          self.config.edge_capacity)
        self._roots = np.zeros((self.num_games, 3), POSITION_DTYPE)
        self._has_root = np.zeros(self.num_games, np.bool_)
        self._noised = np.zeros(self.num_games, np.bool_)
        batch = self.num_games * self.config.leaves_per_game
        self._leaf_game = np.zeros(batch, np.int32)
        self._leaf_parent = np.zeros(batch, np.int32)
        self._path_edges = np.zeros((batch, kernels.MAX_DEPTH), np.int32)
        self._path_moves = np.zeros((batch, kernels.MAX_DEPTH, 3), MOVE_DTYPE)
        self._path_lengths = np.zeros(batch, np.int32)
        self._leaf_positions = np.zeros((batch, 3), POSITION_DTYPE)
        self._moves = np.empty((batch * MAX_MOVES, 3), MOVE_DTYPE)
        self._offsets = np.zeros(batch + 1, OFFSET_DTYPE)
        self._remaining = np.zeros(self.num_games, np.int32)
        self._stats = np.zeros((self.num_games, kernels.NUM_STATS), np.int64)
        self._overflow = np.zeros(self.num_games, np.int64)
        self._allocate_scratch()

    # ------------------------------------------------------------------------------------------
    # Roots

    @property
    def root_positions(self) -> np.ndarray:
        """`(G, 3) uint64` canonical root positions (a copy; rows of games without a root are 0)."""
        return self._roots.copy()

    def set_roots(self, positions: np.ndarray, games: np.ndarray | list[int] | None = None) -> None:
        """Start fresh trees at canonical `positions` `(n, 3) uint64` for `games` (default: all G)."""
        positions = _check_positions(positions, "positions")
        games = self._check_games(games, require_root=False)
        if positions.shape[0] != games.shape[0]:
            raise SearchInputError(
                f"positions has {positions.shape[0]} rows for {games.shape[0]} games")
        self._roots[games] = positions
        self._has_root[games] = True
        self._noised[games] = False
        kernels.reset_trees(self.tree, games)

    def clear(self, games: np.ndarray | list[int] | None = None) -> None:
        """Drop the trees (not the roots) of `games` (default: all)."""
        games = self._check_games(games, require_root=False)
        self._noised[games] = False
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
            child_position = engine.apply_moves(self._roots[game : game + 1], move)
        except engine.EngineInputError:
            raise SearchInputError(
                f"move {move[0].tolist()} is not legal at the root of game {game}") from None
        tree = self.tree
        child = kernels.NO_CHILD
        if self.config.reuse_tree and tree.node_edge_count[game, 0] > 0:
            edge = kernels.find_edge(tree, game, 0, int(move[0, 0]), int(move[0, 1]), int(move[0, 2]))
            if edge >= 0:
                child = int(tree.edge_child[game, edge])
        if child > 0:
            kernels.compact_subtree(tree, game, child, self._scratch_index, self._scratch_shift)
        else:
            kernels.reset_trees(tree, np.array([game], np.int32))
        self._roots[game] = child_position[0]
        self._noised[game] = False

    # ------------------------------------------------------------------------------------------
    # Search

    def search(
        self, num_simulations: int | None = None, games: np.ndarray | list[int] | None = None
    ) -> SearchStats:
        """Run `num_simulations` (default `config.simulations`) more simulations in each game.

        Unexpanded roots are expanded first (one batch, not counted as simulations); with
        `config.root_noise`, Dirichlet noise is mixed into each root's priors once per root.
        Afterwards each game's root visits have grown by exactly `num_simulations`.

        Raises:
            SearchInputError: a game has no root, or its root is terminal (the game is over).
            EvaluatorError: the evaluator broke the protocol.
            Whatever the evaluator raises. After any error the searched games' trees are
            cleared (their roots are kept), so the next search starts clean.
        """
        simulations = self.config.simulations if num_simulations is None else int(num_simulations)
        if simulations < 0:
            raise SearchInputError(f"num_simulations must be >= 0, got {simulations}")
        games = self._check_games(games)
        terminal = engine.is_terminal(self._roots[games])
        if np.any(terminal):
            raise SearchInputError(
                f"the root of game {int(games[np.flatnonzero(terminal)[0]])} is terminal (game over)")
        stats = SearchStats()
        self._stats[:] = 0
        self._overflow[:] = 0
        try:
            self._run(games, simulations, stats)
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

    def _run(self, games: np.ndarray, simulations: int, stats: SearchStats) -> None:
        """Expand the roots, add noise, then run rounds until every game has its simulations."""
        unexpanded = games[self.tree.node_edge_count[games, 0] == kernels.NOT_EXPANDED]
        if unexpanded.shape[0]:
            count = unexpanded.shape[0]
            self._leaf_game[:count] = unexpanded
            self._path_lengths[:count] = 0
            self._leaf_positions[:count] = self._roots[unexpanded]
            self._evaluate_and_expand(count, stats)
        if self.config.root_noise:
            self._add_root_noise(games[~self._noised[games]])
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
                self._leaf_game, self._leaf_parent, self._path_edges, self._path_moves,
                self._path_lengths, self._stats)
            if status != kernels.STATUS_OK:
                raise RuntimeError(f"select_leaves failed with status {status} (corrupt tree)")
            if count == 0:
                continue
            engine.play_paths(self._roots, self._leaf_game[:count], self._path_moves[:count],
                              self._path_lengths[:count], out=self._leaf_positions[:count])
            self._evaluate_and_expand(count, stats)

    def _evaluate_and_expand(self, count: int, stats: SearchStats) -> None:
        """Evaluate leaves 0..count-1 of the batch buffers, grow the arrays if needed, expand."""
        positions = self._leaf_positions[:count]
        moves, offsets = engine.legal_moves(positions, out_moves=self._moves,
                                            out_offsets=self._offsets[: count + 1])
        counts = np.diff(offsets)
        terminal = counts == 0
        values = np.full(count, -1.0, np.float32)
        if moves.shape[0] > 0:
            if terminal.any():
                live = ~terminal
                eval_positions = np.ascontiguousarray(positions[live])
                eval_offsets = np.append(offsets[:-1][live], offsets[-1])
            else:
                live = slice(None)
                eval_positions, eval_offsets = positions, offsets
            priors, live_values = self._call_evaluator(eval_positions, moves, eval_offsets)
            values[live] = live_values
            stats.leaves_evaluated += eval_positions.shape[0]
            stats.batches += 1
        else:
            priors = np.zeros(0, np.float32)
        self._ensure_capacity(self._leaf_game[:count], counts)
        status = kernels.expand_and_backup(
            self.tree, count, self._leaf_game, self._leaf_parent, self._path_edges,
            self._path_lengths, terminal, values, moves, priors, offsets, self._overflow)
        if status != kernels.STATUS_OK:
            raise RuntimeError(f"expand_and_backup failed with status {status}")

    def _call_evaluator(
        self, positions: np.ndarray, moves: np.ndarray, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        result = self.evaluator.evaluate(positions, moves, offsets)
        if not isinstance(result, tuple) or len(result) != 2:
            raise EvaluatorError("evaluate() must return a (priors, values) tuple")
        priors, values = (np.asarray(array) for array in result)
        if priors.shape != (moves.shape[0],):
            raise EvaluatorError(f"priors has shape {priors.shape}; expected ({moves.shape[0]},)")
        if values.shape != (positions.shape[0],):
            raise EvaluatorError(f"values has shape {values.shape}; expected ({positions.shape[0]},)")
        for name, array in (("priors", priors), ("values", values)):
            if not np.issubdtype(array.dtype, np.floating):
                raise EvaluatorError(f"{name} must be floating point, got {array.dtype}")
        priors = np.ascontiguousarray(priors, dtype=np.float32)
        values = np.asarray(values, dtype=np.float32)
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
            priors[:] = (1.0 - cfg.dirichlet_fraction) * priors + cfg.dirichlet_fraction * noise
            kernels.recompute_visited_mass(tree, game, 0)
            self._noised[game] = True

    # ------------------------------------------------------------------------------------------
    # Results

    def root_result(self, game: int) -> SearchResult:
        """The root statistics of `game` after a search (moves canonical, root frame)."""
        game = int(self._check_games([game])[0])
        tree = self.tree
        count = int(tree.node_edge_count[game, 0])
        first = int(tree.node_first_edge[game, 0])
        if count <= 0:
            raise SearchInputError(f"game {game} has not been searched (its root is not expanded)")
        block = slice(first, first + count)
        visits = tree.edge_visits[game, block]
        order = np.argsort(-visits, kind="stable")
        order = order[visits[order] > 0]
        picked_visits = visits[order].astype(np.int32)
        q_values = tree.edge_value_sum[game, block][order] / np.maximum(picked_visits, 1)
        pv = np.zeros((kernels.MAX_DEPTH, 3), MOVE_DTYPE)
        length = kernels.principal_variation(tree, game, pv)
        root_visits = max(int(tree.node_visits[game, 0]), 1)
        return SearchResult(
            moves=tree.edge_move[game, block][order].astype(MOVE_DTYPE),
            visits=picked_visits,
            q_values=q_values.astype(np.float32),
            priors=tree.edge_prior[game, block][order].copy(),
            root_value=float(tree.node_value_sum[game, 0] / root_visits),
            principal_variation=pv[:length].copy(),
            num_legal_moves=count,
        )

    def select_moves(
        self, plies: int | np.ndarray, games: np.ndarray | list[int] | None = None
    ) -> np.ndarray:
        """Choose each game's move from its root visits, `(n, 3) int32` canonical.

        Games at ply < `config.temperature_moves` sample a move with probability proportional to
        visits ** (1 / temperature); later plies take the most visited move (the first on ties).

        Args:
            plies: the ply (moves played since the game start) of each game, or one int for all.
            games: which games (default: all G, in order).
        """
        games = self._check_games(games)
        plies = np.broadcast_to(np.asarray(plies, dtype=np.int64), games.shape)
        chosen = np.zeros((games.shape[0], 3), MOVE_DTYPE)
        tree = self.tree
        for row, (game, ply) in enumerate(zip(games.tolist(), plies.tolist(), strict=True)):
            first, count = int(tree.node_first_edge[game, 0]), int(tree.node_edge_count[game, 0])
            visits = tree.edge_visits[game, first : first + max(count, 0)].astype(np.float64)
            if count <= 0 or visits.sum() == 0:
                raise SearchInputError(f"game {game} has no root visits: search it first")
            if ply < self.config.temperature_moves:
                weights = visits ** (1.0 / self.config.temperature)
                pick = int(self._rng.choice(count, p=weights / weights.sum()))
            else:
                pick = int(np.argmax(visits))
            chosen[row] = tree.edge_move[game, first + pick]
        return chosen

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
            raise SearchInputError(f"game indices must be in 0..{self.num_games - 1}, got {games.tolist()}")
        if np.unique(games).shape[0] != games.shape[0]:
            raise SearchInputError(f"game indices repeat: {games.tolist()}")
        if require_root and not np.all(self._has_root[games]):
            missing = int(games[~self._has_root[games]][0])
            raise SearchInputError(f"game {missing} has no root position: call set_roots first")
        return games


def warm_up() -> float:
    """Compile every search kernel (or load it from Numba's on-disk cache) with a small search.

    `make build` runs this once, so the first search of a later process (the Botzone bot's first
    turn above all) loads the kernels instead of compiling them. Returns the seconds it took.
    """
    started = time.perf_counter()
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=16, leaves_per_game=4, root_noise=True,
                                                            temperature_moves=1), num_games=2, seed=0)
    search.set_roots(np.repeat(engine.start_position().reshape(1, 3), 2, axis=0))
    search.search()
    move = search.select_moves(0)
    search.root_result(0)
    search.advance(0, move[0])
    search.search(games=[0])
    return time.perf_counter() - started
