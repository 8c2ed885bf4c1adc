"""Numba kernels of the search: flat search trees, PUCT selection, expansion, backup, reuse.

This module owns the tree arithmetic and nothing else: it never sees the rules (the Cython engine
turns paths into positions and legal-move lists) and never sees an evaluator (`amazons.mcts` calls
it between kernels). It imports only numpy and numba; every `@njit(cache=True)` kernel of the
search lives here, because Numba's cache does not notice edits in other files.

The trees of `G` games live in one `TreeArrays` bundle of struct-of-arrays, row `g` per game.
Per game, node 0 is the root; nodes and edges are allocated left to right and a node's edges are
one contiguous block (CSR), never a dense nodes x moves table (8x8 positions have up to 2,916
moves, 10x10 ones 4,900). The kernels never see the board size: squares are plain ints below
N*N (at most 100, so an edge's move fits three int8), and the path buffers hold the longest game
of the largest board. Everything is in canonical frames: an edge's move is in the frame of the
node that owns it, and values are always for the side to move at the node (so edge statistics,
owned by the node the edge leaves, are for the side choosing the edge).

Invariants the kernels rely on and keep:

* A node exists only once expanded (its edge block written), except the root before its first
  expansion (`node_edge_count == NOT_EXPANDED`). A terminal node is expanded with no edges.
* A node's index is larger than its parent's, and edge blocks are laid out in node order. Tree
  reuse can therefore compact the kept subtree in place by sliding it to the left.
* `edge_child` is `NO_CHILD` until the edge's leaf is expanded; while a selected leaf waits for
  its evaluation it is `PENDING`, so a second selection of it in the same batch is a collision.
* Virtual loss lives in separate integer counters (`*_inflight`), so backing a leaf up removes
  it exactly, leaving no floating-point residue in the statistics.

The MCTS-solver (Winands, Bjornsson and Saito, "Monte-Carlo Tree Search Solver", 2008) keeps
proofs beside the statistics when it is on. `edge_proof` is the proven result of a move for the
side choosing it (PROOF_WIN, PROOF_LOSS or PROOF_NONE) and `edge_proof_plies` the plies from that
move to the end of the game under best play (the winner hurries, the loser resists); a node's
proof is for its side to move. Expansion proves a node at once when one of its moves leaves the
opponent without a move (the engine marks those moves), when it is terminal (a loss in 0), or when
the caller adjudicated it. A proof climbs the path: a child proven lost for its side to move
proves its edge a win and the parent a win (the shortest win counts); a parent all of whose edges
are proven losses is a proven loss (the longest resistance counts). Selection never enters a
proven node: reaching one backs up its exact value at once, and proven-lost edges are never
chosen. A leaf proven at expansion skips the evaluator (`node_evaluated` False): its priors are
uniform placeholders, never used while it is proven and below the root. A root is proven only by its
edges (never by adjudication alone), so a search always has moves to compare; a proven root needs no
more simulations.

Gumbel root search ("Policy improvement by planning with Gumbel", Danihelka et al., ICLR 2022;
DeepMind's `mctx.gumbel_muzero_policy`) replaces PUCT at the root only, with root rule
ROOT_GUMBEL; interior nodes keep PUCT. Per game, `GumbelArrays` holds a Gumbel(0, 1) draw g per
root edge and the state of sequential halving: the m edges with the largest g + log prior that
are not proven lost are sampled into the remaining set; a phase gives each remaining edge
max(1, floor(n / (ceil(log2 m) * size))) new visits (n the planned budget, size the phase's
nominal set size; in-flight selections count, so K leaves of one batch fill the allocation
together); a root selection takes the remaining edge with the fewest new visits below the
phase's target (the highest score on ties); when every remaining edge has reached the target,
the set is cut to its best max(2, size // 2) by score = g + log prior + sigma(completed Q), the
completed-Q transform of `amazons.search_targets.improved_policy`, and the next phase starts.
Proven-lost edges leave the set; if none is left, the next m edges by g + log prior refill it.
Visits from earlier searches of the same root (tree reuse) do not count towards an allocation
(`base_visits`). The move to play is the remaining edge with the highest score (`gumbel_choice`).

Forced playouts (KataGo, Wu 2019, "Accelerating Self-Play Learning in Go", section 3.2) apply
at a PUCT root whose priors carry Dirichlet noise, with a per-game coefficient k > 0: a root edge
that already has a completed visit and has been selected fewer times than
n_forced = sqrt(k * P * sum of the root edges' selections) (P its noisy prior, selections =
completed visits + in-flight ones) is chosen before any PUCT score is compared, the first such
edge in edge order (`_forced_root_edge`). As in KataGo, only edges PUCT has already tried are
forced, so the rule concentrates visits on moves noise lifted without spreading them over every
legal move; the self-play target can prune the forced visits afterwards
(`amazons.search_targets.prune_forced_visits`).

LCB move selection (`lcb_edge`, as in KataGo) plays, among the edges with at least
max(2, fraction x the most visits), the one whose Q has the highest lower confidence bound
mean - t * sqrt(variance / N); the variance is the sample variance of the values backed up
through the edge (`edge_value_sq_sum` keeps their squares), t the Student-t counterpart of
`stdevs` normal standard deviations for N samples.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

NO_CHILD = -1  # edge_child: the edge's leaf has not been expanded
PENDING = -2  # edge_child: the edge's leaf was selected in this batch and awaits its evaluation
NOT_EXPANDED = -1  # node_edge_count of a root that has not been expanded yet
NO_PARENT = -1  # node_parent / node_parent_edge of the root

PROOF_WIN = 1  # *_proof: proven win for the side to move at the node (or choosing the edge)
PROOF_LOSS = -1  # *_proof: proven loss
PROOF_NONE = 0  # *_proof: not proven

# Path buffer length: a game has at most N*N - 8 plies (56 on 8x8, 92 on 10x10, the largest
# board), so no path from any root is longer on any size.
MAX_DEPTH = 96

# Status codes returned by kernels (0 = fine).
STATUS_OK = 0
STATUS_PATH_TOO_LONG = 1  # a selection path outgrew the path buffer (corrupt tree)
STATUS_ROOT_CAPACITY = 2  # a root's moves do not fit in the edge arrays

# Outcomes of one descent (select_leaves' per-game statistics columns).
STAT_LEAVES = 0  # leaves gathered for evaluation
STAT_TERMINALS = 1  # simulations ended at a known terminal or proven node, backed up at once
STAT_COLLISIONS = 2  # descents that hit a leaf already pending in this batch (discarded)
NUM_STATS = 3

# Root selection rules (select_leaves' root_rule).
ROOT_PUCT = 0  # PUCT at the root as everywhere else
ROOT_GUMBEL = 1  # sequential halving over Gumbel-sampled root edges (see the module docstring)

FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # priors are floored here before their log


class TreeArrays(NamedTuple):
    """Search trees of `G` games; `N` nodes and `E` edges of capacity per game."""

    node_visits: np.ndarray  # [G, N] int32, completed simulations through it (expansion included)
    node_value_sum: np.ndarray  # [G, N] float64, sum of backed-up values, side to move at the node
    node_inflight: np.ndarray  # [G, N] int32, selections through the node awaiting backup
    node_visited_mass: np.ndarray  # [G, N] float64, prior mass of edges selected so far (for FPU)
    node_first_edge: np.ndarray  # [G, N] int32, index of the node's first edge
    node_edge_count: np.ndarray  # [G, N] int32, edges (legal moves); NOT_EXPANDED at a fresh root
    node_parent: np.ndarray  # [G, N] int32, parent node; NO_PARENT at the root
    node_parent_edge: np.ndarray  # [G, N] int32, edge from the parent; NO_PARENT at the root
    node_terminal: np.ndarray  # [G, N] bool, the side to move has no legal move (it has lost)
    node_evaluated: np.ndarray  # [G, N] bool, the evaluator scored the node (False: proven at
    #                             expansion, uniform priors; `amazons.mcts` evaluates such a root)
    node_raw_value: np.ndarray  # [G, N] float32, evaluator's value at expansion (exact if proven)
    node_proof: np.ndarray  # [G, N] int8, PROOF_* for the side to move at the node
    node_proof_plies: np.ndarray  # [G, N] int16, plies to the end under best play when proven
    edge_move: np.ndarray  # [G, E, 3] int8, canonical (src, dst, arrow), owning node's frame
    edge_prior: np.ndarray  # [G, E] float32, prior of the move (root: Dirichlet noise mixed in)
    edge_proof: np.ndarray  # [G, E] int8, PROOF_* of the move for the side choosing it
    edge_proof_plies: np.ndarray  # [G, E] int16, plies from the move to the end when proven
    edge_visits: np.ndarray  # [G, E] int32, completed simulations through the edge
    edge_value_sum: np.ndarray  # [G, E] float32, sum of values for the side choosing the edge
    edge_value_sq_sum: np.ndarray  # [G, E] float32, sum of squares of those values (variance, LCB)
    edge_inflight: np.ndarray  # [G, E] int32, selections through the edge awaiting backup
    edge_child: np.ndarray  # [G, E] int32, child node, or NO_CHILD / PENDING
    nodes_used: np.ndarray  # [G] int32, nodes allocated (the next free node index)
    edges_used: np.ndarray  # [G] int32, edges allocated (the next free edge index)


def allocate_tree(num_games: int, node_capacity: int, edge_capacity: int) -> TreeArrays:
    """Allocate empty trees (every root unexpanded) for `num_games` games."""
    g, n, e = num_games, node_capacity, edge_capacity
    tree = TreeArrays(
        node_visits=np.zeros((g, n), np.int32),
        node_value_sum=np.zeros((g, n), np.float64),
        node_inflight=np.zeros((g, n), np.int32),
        node_visited_mass=np.zeros((g, n), np.float64),
        node_first_edge=np.zeros((g, n), np.int32),
        node_edge_count=np.zeros((g, n), np.int32),
        node_parent=np.zeros((g, n), np.int32),
        node_parent_edge=np.zeros((g, n), np.int32),
        node_terminal=np.zeros((g, n), np.bool_),
        node_evaluated=np.zeros((g, n), np.bool_),
        node_raw_value=np.zeros((g, n), np.float32),
        node_proof=np.zeros((g, n), np.int8),
        node_proof_plies=np.zeros((g, n), np.int16),
        edge_move=np.zeros((g, e, 3), np.int8),
        edge_prior=np.zeros((g, e), np.float32),
        edge_proof=np.zeros((g, e), np.int8),
        edge_proof_plies=np.zeros((g, e), np.int16),
        edge_visits=np.zeros((g, e), np.int32),
        edge_value_sum=np.zeros((g, e), np.float32),
        edge_value_sq_sum=np.zeros((g, e), np.float32),
        edge_inflight=np.zeros((g, e), np.int32),
        edge_child=np.zeros((g, e), np.int32),
        nodes_used=np.zeros(g, np.int32),
        edges_used=np.zeros(g, np.int32),
    )
    reset_trees(tree, np.arange(g, dtype=np.int32))
    return tree


def grow_tree(tree: TreeArrays, node_capacity: int, edge_capacity: int) -> TreeArrays:
    """A copy of `tree` with larger capacities (each at least the current one); contents kept."""
    old_nodes, old_edges = tree.node_visits.shape[1], tree.edge_prior.shape[1]
    grown = allocate_tree(tree.nodes_used.shape[0], max(node_capacity, old_nodes),
                          max(edge_capacity, old_edges))
    for name in TreeArrays._fields:
        source, target = getattr(tree, name), getattr(grown, name)
        if source.ndim == 1:
            target[:] = source
        else:
            width = old_nodes if name.startswith("node_") else old_edges
            target[:, :width] = source
    return grown


@njit(cache=True)
def _init_node(tree, g, node, parent, parent_edge):
    tree.node_visits[g, node] = 0
    tree.node_value_sum[g, node] = 0.0
    tree.node_inflight[g, node] = 0
    tree.node_visited_mass[g, node] = 0.0
    tree.node_first_edge[g, node] = tree.edges_used[g]
    tree.node_edge_count[g, node] = NOT_EXPANDED
    tree.node_parent[g, node] = parent
    tree.node_parent_edge[g, node] = parent_edge
    tree.node_terminal[g, node] = False
    tree.node_evaluated[g, node] = False
    tree.node_raw_value[g, node] = 0.0
    tree.node_proof[g, node] = PROOF_NONE
    tree.node_proof_plies[g, node] = 0


@njit(cache=True)
def reset_trees(tree, games):
    """Clear the trees of `games` [n] int32: one unexpanded root each."""
    for i in range(games.shape[0]):
        g = games[i]
        tree.nodes_used[g] = 1
        tree.edges_used[g] = 0
        _init_node(tree, g, 0, NO_PARENT, NO_PARENT)


@njit(cache=True)
def _select_edge(tree, g, node, c_puct, c_puct_base, fpu_reduction, virtual_loss):
    """PUCT choice among the edges of an expanded, non-terminal node; the first best on ties.

    score = Q + c * P * sqrt(N_parent) / (1 + N), counting each in-flight selection as
    `virtual_loss` lost visits. Edges with N = 0 take the first-play urgency value
    Q_parent - fpu_reduction * sqrt(node_visited_mass), the prior mass of the edges selected so
    far. With c_puct_base > 0 the exploration constant grows as
    c = c_puct + log((1 + N_parent + base) / base). Edges proven lost for the side choosing them
    are never chosen (the node is not a proven loss, so some other edge is open).
    """
    first = tree.node_first_edge[g, node]
    last = first + tree.node_edge_count[g, node]
    parent_visits = tree.node_visits[g, node] + virtual_loss * tree.node_inflight[g, node]
    c = c_puct
    if c_puct_base > 0.0:
        c = c_puct + math.log((1.0 + parent_visits + c_puct_base) / c_puct_base)
    scale = c * math.sqrt(parent_visits)
    parent_q = tree.node_value_sum[g, node] / tree.node_visits[g, node]
    fpu = parent_q - fpu_reduction * math.sqrt(tree.node_visited_mass[g, node])
    best_edge = first
    best_score = -np.inf
    if tree.node_inflight[g, node] == 0:
        # No selection in flight below this node, so no edge has any: the same scores, faster.
        for e in range(first, last):
            if tree.edge_proof[g, e] == PROOF_LOSS:
                continue
            visits = tree.edge_visits[g, e]
            if visits > 0:
                score = (tree.edge_value_sum[g, e] / visits
                         + scale * tree.edge_prior[g, e] / (1.0 + visits))
            else:
                score = fpu + scale * tree.edge_prior[g, e] / 1.0
            if score > best_score:
                best_score = score
                best_edge = e
        return best_edge
    for e in range(first, last):
        if tree.edge_proof[g, e] == PROOF_LOSS:
            continue
        inflight = virtual_loss * tree.edge_inflight[g, e]
        visits = tree.edge_visits[g, e] + inflight
        if visits > 0.0:
            q = (tree.edge_value_sum[g, e] - inflight) / visits
        else:
            q = fpu
        score = q + scale * tree.edge_prior[g, e] / (1.0 + visits)
        if score > best_score:
            best_score = score
            best_edge = e
    return best_edge


@njit(cache=True)
def _forced_root_edge(tree, g, forced_k):
    """The first root edge of game g owed a forced playout, or -1 if none.

    An edge is owed one if it is not proven lost, has at least one completed visit, and its
    selections n (completed + in flight) satisfy n * n < forced_k * P * total, that is
    n < sqrt(forced_k * P * total), with P its prior (noisy at a noised root) and total the
    selections of all root edges.
    """
    first = tree.node_first_edge[g, 0]
    last = first + tree.node_edge_count[g, 0]
    total = 0
    for e in range(first, last):
        total += tree.edge_visits[g, e] + tree.edge_inflight[g, e]
    for e in range(first, last):
        if tree.edge_proof[g, e] == PROOF_LOSS or tree.edge_visits[g, e] == 0:
            continue
        selected = tree.edge_visits[g, e] + tree.edge_inflight[g, e]
        if selected * selected < forced_k * tree.edge_prior[g, e] * total:
            return e
    return -1


@njit(cache=True)
def _backup(tree, g, path_edges, depth, leaf_value, remove_inflight):
    """Add one simulation worth `leaf_value` (side to move at the leaf) along a path from the root.

    Walks the `depth` edges of `path_edges` [>= depth] from the root, negating the value once per
    ply; the node at the end of the path (if it exists) gets the visit too. With
    `remove_inflight`, the path's virtual loss is removed at the same time.
    """
    value = leaf_value if depth % 2 == 0 else -leaf_value
    node = 0
    for i in range(depth):
        e = path_edges[i]
        tree.node_visits[g, node] += 1
        tree.node_value_sum[g, node] += value
        tree.edge_visits[g, e] += 1
        tree.edge_value_sum[g, e] += value
        tree.edge_value_sq_sum[g, e] += np.float64(value) * value  # exact square, one rounding
        if remove_inflight:
            tree.node_inflight[g, node] -= 1
            tree.edge_inflight[g, e] -= 1
        node = tree.edge_child[g, e]
        value = -value
    if node >= 0:
        tree.node_visits[g, node] += 1
        tree.node_value_sum[g, node] += value


@njit(cache=True)
def select_leaves(tree, games, remaining, leaves_per_game, c_puct, c_puct_base, fpu_reduction,
                  virtual_loss, root_forced_k, root_rule, gumbel, gumbel_m, c_visit, c_scale,
                  out_leaf_game, out_leaf_parent, out_path_edges, out_path_moves, out_path_lengths,
                  out_stats):
    """Gather up to `leaves_per_game` leaves per game for one evaluator batch.

    For each game in `games` (in order), descends from the root by PUCT until it leaves the tree
    (with `root_rule` ROOT_GUMBEL, the root's edge comes from sequential halving instead; with
    `root_forced_k[g]` > 0, an edge owed a forced playout comes first, `_forced_root_edge`).
    A descent that ends on an unexpanded edge yields a leaf: its path gets virtual loss and the
    edge becomes PENDING. A descent that ends on a known terminal node or a proven node is backed
    up at once with its exact value (-1 terminal, +-1 proven; no evaluation needed). A game whose
    root is proven needs nothing more: its `remaining` drops to 0. A descent that reaches a PENDING
    edge is a collision: it is discarded (nothing was changed) and the game gathers no more leaves
    in this batch. Every leaf and every terminal descent uses up one unit of `remaining[g]`.

    Args:
        tree: TreeArrays; every root in `games` must be expanded and non-terminal.
        games: [A] int32, games to gather from.
        remaining: [G] int32, simulations still to run per game; decremented here.
        leaves_per_game: int, K, the most leaves one game adds to the batch.
        c_puct, c_puct_base, fpu_reduction, virtual_loss: float, see `amazons.mcts.SearchConfig`.
        root_forced_k: [G] float64, k of the forced playouts at each game's root (0: none; read
            only with ROOT_PUCT).
        root_rule: ROOT_PUCT or ROOT_GUMBEL.
        gumbel: GumbelArrays, started (`start_gumbel`) for every game in `games` with ROOT_GUMBEL.
        gumbel_m, c_visit, c_scale: int, float, float, see `amazons.mcts.SearchConfig`
            (ROOT_GUMBEL).
        out_leaf_game: [B] int32, receives each leaf's game.
        out_leaf_parent: [B] int32, receives the node the leaf's edge leaves.
        out_path_edges: [B, L] int32, receives the edges from the root to each leaf.
        out_path_moves: [B, L, 3] int32, receives the same path as canonical moves (for the engine).
        out_path_lengths: [B] int32, receives each path's length (>= 1).
        out_stats: [G, NUM_STATS] int64, per-game counters, incremented.

    Returns:
        (number of leaves written, status): STATUS_OK, or STATUS_PATH_TOO_LONG.
    """
    capacity = out_leaf_game.shape[0]
    max_depth = out_path_edges.shape[1]
    count = 0
    for i in range(games.shape[0]):
        g = games[i]
        gathered = 0
        if tree.node_proof[g, 0] != PROOF_NONE:
            remaining[g] = 0
        while gathered < leaves_per_game and remaining[g] > 0 and count < capacity:
            node = 0
            depth = 0
            outcome = -1  # 0 leaf, 1 terminal or proven, 2 collision
            while outcome < 0:
                if tree.node_terminal[g, node] or (
                        depth > 0 and tree.node_proof[g, node] != PROOF_NONE):
                    outcome = 1
                    break
                if depth >= max_depth:
                    return count, STATUS_PATH_TOO_LONG
                e = -1
                if depth == 0 and root_rule == ROOT_GUMBEL:
                    e = _gumbel_root_edge(tree, gumbel, g, gumbel_m, c_visit, c_scale)
                elif depth == 0 and root_forced_k[g] > 0.0:
                    e = _forced_root_edge(tree, g, root_forced_k[g])
                if e < 0:
                    e = _select_edge(tree, g, node, c_puct, c_puct_base, fpu_reduction,
                                     virtual_loss)
                out_path_edges[count, depth] = e
                for k in range(3):
                    out_path_moves[count, depth, k] = tree.edge_move[g, e, k]
                depth += 1
                child = tree.edge_child[g, e]
                if child == NO_CHILD:
                    outcome = 0
                    out_leaf_parent[count] = node
                elif child == PENDING:
                    outcome = 2
                else:
                    node = child
            if outcome == 2:
                out_stats[g, STAT_COLLISIONS] += 1
                break
            remaining[g] -= 1
            if outcome == 1:
                exact = -1.0 if tree.node_terminal[g, node] else float(tree.node_proof[g, node])
                _backup(tree, g, out_path_edges[count], depth, exact, False)
                out_stats[g, STAT_TERMINALS] += 1
                continue
            node = 0
            for d in range(depth):
                e = out_path_edges[count, d]
                if tree.edge_visits[g, e] == 0 and tree.edge_inflight[g, e] == 0:
                    # First selection of this edge (edges on terminal paths were all visited).
                    tree.node_visited_mass[g, node] += tree.edge_prior[g, e]
                tree.node_inflight[g, node] += 1
                tree.edge_inflight[g, e] += 1
                node = tree.edge_child[g, e]
            tree.edge_child[g, out_path_edges[count, depth - 1]] = PENDING
            out_leaf_game[count] = g
            out_path_lengths[count] = depth
            out_stats[g, STAT_LEAVES] += 1
            gathered += 1
            count += 1
    return count, STATUS_OK


class GumbelArrays(NamedTuple):
    """Sequential halving at the roots of `G` games (root rule ROOT_GUMBEL); `A` root edges of
    capacity.

    Entries of a root edge sit at its offset within the root's edge block. Valid from
    `start_gumbel` until the root changes (the caller starts it again for a new root).
    """

    noise: np.ndarray  # [G, A] float64, g: scaled Gumbel(0, 1) noise of each root edge
    base_visits: np.ndarray  # [G, A] int32, the edge's visits when sampled (not counted as new)
    considered: np.ndarray  # [G, A] bool, the edge is in the remaining set
    budget: np.ndarray  # [G] int32, n: simulations the schedule plans for
    sampled: np.ndarray  # [G] int32, m: edges sampled into the set (the schedule's log2(m))
    phase_size: np.ndarray  # [G] int32, the remaining set's nominal size in the current phase
    phase_target: np.ndarray  # [G] int32, new visits each remaining edge has when the phase ends


def allocate_gumbel(num_games: int, max_root_moves: int) -> GumbelArrays:
    """Empty sequential-halving state for `num_games` roots of up to `max_root_moves` moves."""
    g, a = num_games, max_root_moves
    return GumbelArrays(
        noise=np.zeros((g, a), np.float64),
        base_visits=np.zeros((g, a), np.int32),
        considered=np.zeros((g, a), np.bool_),
        budget=np.zeros(g, np.int32),
        sampled=np.zeros(g, np.int32),
        phase_size=np.zeros(g, np.int32),
        phase_target=np.zeros(g, np.int32),
    )


@njit(cache=True)
def _log_prior(prior):
    return math.log(max(prior, FLOAT32_TINY))


@njit(cache=True)
def phase_visits(budget, sampled, size):
    """New visits per remaining edge in a phase of `size` edges, for `sampled` edges and budget n.

    max(1, floor(n / (ceil(log2(sampled)) * size))); a single sampled edge takes the whole budget.
    """
    log2 = 0
    while (1 << log2) < sampled:
        log2 += 1
    if log2 == 0:
        return max(1, budget)
    return max(1, budget // (log2 * size))


@njit(cache=True)
def root_sigma_terms(tree, g, c_visit, c_scale):
    """The completed-Q transform at game g's root (as `amazons.search_targets.improved_policy`).

    A root edge is known if visited (Q = mean value) or proven (Q = +-1); unknown edges complete
    with v_mix = (v_raw + N * sum_known(p q) / sum_known(p)) / (1 + N), N the root edges' visits,
    p the priors (floored at FLOAT32_TINY). sigma(e) = scale * (completed Q(e) - low) / span.

    Returns:
        (v_mix, low, span, scale): low the least completed Q, span max(highest - low, 1e-8),
        scale (c_visit + most visits of an edge) * c_scale.
    """
    first = tree.node_first_edge[g, 0]
    last = first + tree.node_edge_count[g, 0]
    total = 0
    most = 0
    weighted = 0.0
    mass = 0.0
    for e in range(first, last):
        visits = tree.edge_visits[g, e]
        total += visits
        most = max(most, visits)
        if tree.edge_proof[g, e] != PROOF_NONE or visits > 0:
            prior = max(np.float64(tree.edge_prior[g, e]), FLOAT32_TINY)
            weighted += prior * _known_q(tree, g, e)
            mass += prior
    v_mix = np.float64(tree.node_raw_value[g, 0])
    if mass > 0.0:
        v_mix = (v_mix + total * (weighted / mass)) / (total + 1.0)
    low = np.inf
    high = -np.inf
    for e in range(first, last):
        q = _completed_q(tree, g, e, v_mix)
        low = min(low, q)
        high = max(high, q)
    return v_mix, low, max(high - low, 1e-8), (c_visit + most) * c_scale


@njit(cache=True)
def _known_q(tree, g, e):
    if tree.edge_proof[g, e] != PROOF_NONE:
        return np.float64(tree.edge_proof[g, e])
    return np.float64(tree.edge_value_sum[g, e]) / tree.edge_visits[g, e]


@njit(cache=True)
def _completed_q(tree, g, e, v_mix):
    if tree.edge_proof[g, e] != PROOF_NONE or tree.edge_visits[g, e] > 0:
        return _known_q(tree, g, e)
    return v_mix


@njit(cache=True)
def _gumbel_score(tree, gumbel, g, e, v_mix, low, span, scale):
    """g + log prior + sigma(completed Q) of root edge e: what halving and the final choice rank."""
    offset = e - tree.node_first_edge[g, 0]
    sigma = scale * (_completed_q(tree, g, e, v_mix) - low) / span
    return gumbel.noise[g, offset] + _log_prior(np.float64(tree.edge_prior[g, e])) + sigma


@njit(cache=True)
def _gumbel_sample(tree, gumbel, g, m):
    """Make the m root edges with the largest g + log prior (not proven lost; the first on ties)
    the remaining set, their visits so far the base, and start the first phase of the schedule."""
    first = tree.node_first_edge[g, 0]
    count = tree.node_edge_count[g, 0]
    for i in range(count):
        gumbel.considered[g, i] = False
    chosen = 0
    while chosen < m:
        best = -1
        best_key = -np.inf
        for i in range(count):
            e = first + i
            if gumbel.considered[g, i] or tree.edge_proof[g, e] == PROOF_LOSS:
                continue
            key = gumbel.noise[g, i] + _log_prior(np.float64(tree.edge_prior[g, e]))
            if best < 0 or key > best_key:
                best = i
                best_key = key
        if best < 0:
            break
        gumbel.considered[g, best] = True
        gumbel.base_visits[g, best] = (tree.edge_visits[g, first + best]
                                       + tree.edge_inflight[g, first + best])
        chosen += 1
    gumbel.sampled[g] = chosen
    gumbel.phase_size[g] = chosen
    gumbel.phase_target[g] = phase_visits(gumbel.budget[g], chosen, chosen)


@njit(cache=True)
def start_gumbel(tree, gumbel, g, noise, m, budget):
    """Start sequential halving at game g's expanded root.

    Args:
        tree: TreeArrays; the root of game g is expanded.
        gumbel: GumbelArrays.
        g: int, the game.
        noise: [L] float64, g of each of the root's L edges, in edge order (already scaled).
        m: int, edges to sample (fewer if fewer are not proven lost).
        budget: int, n, the simulations the schedule plans for.
    """
    for i in range(noise.shape[0]):
        gumbel.noise[g, i] = noise[i]
    gumbel.budget[g] = budget
    _gumbel_sample(tree, gumbel, g, m)


@njit(cache=True)
def _gumbel_halve(tree, gumbel, g, v_mix, low, span, scale):
    """End a phase: keep the best max(2, size // 2) remaining edges by score, start the next one."""
    first = tree.node_first_edge[g, 0]
    count = tree.node_edge_count[g, 0]
    size = gumbel.phase_size[g]
    keep = max(2, size // 2) if size > 1 else 1
    alive = np.empty(count, np.int64)
    scores = np.empty(count, np.float64)
    num = 0
    for i in range(count):
        if gumbel.considered[g, i]:
            if tree.edge_proof[g, first + i] == PROOF_LOSS:
                gumbel.considered[g, i] = False
                continue
            alive[num] = i
            scores[num] = _gumbel_score(tree, gumbel, g, first + i, v_mix, low, span, scale)
            num += 1
    for a in range(num):
        better = 0
        for b in range(num):
            if scores[b] > scores[a] or (scores[b] == scores[a] and b < a):
                better += 1
        if better >= keep:
            gumbel.considered[g, alive[a]] = False
    gumbel.phase_size[g] = keep
    gumbel.phase_target[g] += phase_visits(gumbel.budget[g], gumbel.sampled[g], keep)


@njit(cache=True)
def _gumbel_root_edge(tree, gumbel, g, m, c_visit, c_scale):
    """The root edge of game g's next simulation under sequential halving (-1 if none).

    Among the remaining edges not proven lost, the one with the fewest new visits (completed and
    in flight, minus its base) below the phase's target, the highest score on ties; when none is
    below the target the phase ends (halving), and when none is left the set is refilled.
    """
    first = tree.node_first_edge[g, 0]
    count = tree.node_edge_count[g, 0]
    v_mix, low, span, scale = root_sigma_terms(tree, g, c_visit, c_scale)
    for _ in range(3):
        target = gumbel.phase_target[g]
        chosen = -1
        chosen_new = 0
        chosen_score = -np.inf
        alive = 0
        for i in range(count):
            e = first + i
            if not gumbel.considered[g, i]:
                continue
            if tree.edge_proof[g, e] == PROOF_LOSS:
                gumbel.considered[g, i] = False  # proven lost: out of the set for good
                continue
            alive += 1
            new = tree.edge_visits[g, e] + tree.edge_inflight[g, e] - gumbel.base_visits[g, i]
            if new >= target:
                continue
            score = _gumbel_score(tree, gumbel, g, e, v_mix, low, span, scale)
            if chosen < 0 or new < chosen_new or (new == chosen_new and score > chosen_score):
                chosen = e
                chosen_new = new
                chosen_score = score
        if chosen >= 0:
            return chosen
        if alive == 0:
            _gumbel_sample(tree, gumbel, g, m)
        else:
            _gumbel_halve(tree, gumbel, g, v_mix, low, span, scale)
    return -1


@njit(cache=True)
def gumbel_choice(tree, gumbel, g, c_visit, c_scale):
    """The move to play at game g's root after sequential halving, as an edge index (-1 if none).

    A proven root plays `best_edge` (the shortest win, or the longest resistance). Otherwise the
    remaining edge not proven lost with the highest g + log prior + sigma(completed Q) (the first
    on ties); if no remaining edge is left, the best such edge of the whole root.
    """
    if tree.node_proof[g, 0] != PROOF_NONE:
        return best_edge(tree, g, 0)
    first = tree.node_first_edge[g, 0]
    count = tree.node_edge_count[g, 0]
    v_mix, low, span, scale = root_sigma_terms(tree, g, c_visit, c_scale)
    for restricted in (True, False):
        chosen = -1
        chosen_score = -np.inf
        for i in range(count):
            e = first + i
            if (restricted and not gumbel.considered[g, i]) or tree.edge_proof[g, e] == PROOF_LOSS:
                continue
            score = _gumbel_score(tree, gumbel, g, e, v_mix, low, span, scale)
            if chosen < 0 or score > chosen_score:
                chosen = e
                chosen_score = score
        if chosen >= 0:
            return chosen
    return -1


@njit(cache=True)
def _t_quantile(z, n):
    """The Student-t counterpart of a normal quantile z for n samples (n >= 2), approximately.

    sqrt(n * (exp(z^2 (n - 1.5) / (n - 1)^2) - 1)): z as n grows, larger for few samples.
    """
    return math.sqrt(n * math.expm1(z * z * (n - 1.5) / ((n - 1.0) * (n - 1.0))))


@njit(cache=True)
def lcb_edge(tree, g, node, min_visits_fraction, stdevs):
    """The edge with the highest lower confidence bound of Q at an expanded `node` of game g.

    A proven node plays `best_edge`. Otherwise, among edges not proven lost with at least
    max(2, min_visits_fraction x the most visits of such an edge) visits, the one with the
    highest mean - t * sqrt(variance / N), variance = max(mean of squares - mean^2, 0) of the
    values backed up through it, t = `_t_quantile(stdevs, N)`; ties go to more visits, then to
    the first edge. With no edge qualifying, `best_edge`. Returns -1 when `best_edge` does.
    """
    most = best_edge(tree, g, node)
    if most < 0 or tree.node_proof[g, node] != PROOF_NONE:
        return most
    threshold = max(2.0, min_visits_fraction * tree.edge_visits[g, most])
    first = tree.node_first_edge[g, node]
    chosen = most
    chosen_bound = -np.inf
    for e in range(first, first + tree.node_edge_count[g, node]):
        visits = tree.edge_visits[g, e]
        if tree.edge_proof[g, e] == PROOF_LOSS or visits < threshold:
            continue
        mean = np.float64(tree.edge_value_sum[g, e]) / visits
        variance = max(np.float64(tree.edge_value_sq_sum[g, e]) / visits - mean * mean, 0.0)
        bound = mean - _t_quantile(stdevs, np.float64(visits)) * math.sqrt(variance / visits)
        if bound > chosen_bound or (bound == chosen_bound and visits > tree.edge_visits[g, chosen]):
            chosen = e
            chosen_bound = bound
    return chosen


@njit(cache=True)
def _propagate_proof(tree, g, node):
    """Carry the proof of `node` (game g) up towards the root while it proves its ancestors.

    The edge into a proven node gets the opposite result, one ply longer. Its parent is then a
    proven win if that edge wins (the shortest winning edge sets the plies), or a proven loss if
    every one of its edges is a proven loss (the longest one sets the plies); otherwise the climb
    stops.
    """
    while node != 0 and tree.node_proof[g, node] != PROOF_NONE:
        parent = tree.node_parent[g, node]
        e = tree.node_parent_edge[g, node]
        tree.edge_proof[g, e] = -tree.node_proof[g, node]
        tree.edge_proof_plies[g, e] = tree.node_proof_plies[g, node] + 1
        if tree.edge_proof[g, e] == PROOF_WIN:
            plies = tree.edge_proof_plies[g, e]
            if (tree.node_proof[g, parent] == PROOF_WIN
                    and tree.node_proof_plies[g, parent] <= plies):
                return
            tree.node_proof[g, parent] = PROOF_WIN
            tree.node_proof_plies[g, parent] = plies
        else:
            first = tree.node_first_edge[g, parent]
            longest = 0
            for other in range(first, first + tree.node_edge_count[g, parent]):
                if tree.edge_proof[g, other] != PROOF_LOSS:
                    return
                longest = max(longest, np.int64(tree.edge_proof_plies[g, other]))
            tree.node_proof[g, parent] = PROOF_LOSS
            tree.node_proof_plies[g, parent] = longest
        node = parent


@njit(cache=True)
def refresh_root_proof(tree, g):
    """Set the root's proof of game g from its edges alone (adjudication never proves a root).

    Returns the root's proof (PROOF_*).
    """
    count = tree.node_edge_count[g, 0]
    proof = PROOF_NONE
    plies = 0
    if count > 0:
        first = tree.node_first_edge[g, 0]
        shortest_win = 1 << 30
        longest_loss = 0
        losses = 0
        for e in range(first, first + count):
            if tree.edge_proof[g, e] == PROOF_WIN:
                shortest_win = min(shortest_win, np.int64(tree.edge_proof_plies[g, e]))
            elif tree.edge_proof[g, e] == PROOF_LOSS:
                losses += 1
                longest_loss = max(longest_loss, np.int64(tree.edge_proof_plies[g, e]))
        if shortest_win < 1 << 30:
            proof, plies = PROOF_WIN, shortest_win
        elif losses == count:
            proof, plies = PROOF_LOSS, longest_loss
    tree.node_proof[g, 0] = proof
    tree.node_proof_plies[g, 0] = plies
    return proof


@njit(cache=True)
def expand_and_backup(tree, num_leaves, leaf_game, leaf_parent, path_edges, path_lengths,
                      leaf_terminal, leaf_values, moves, priors, move_offsets, solver, move_wins,
                      leaf_proof, leaf_proof_plies, out_overflow):
    """Expand evaluated leaves (in batch order) and back their values up.

    A leaf with path length 0 is its game's root (expanded in place). Any other leaf gets a new
    node after its parent's last one and an edge block after the game's last edge; if either does
    not fit, the leaf is not expanded (its edge stays a leaf, `out_overflow[g]` counts it) but its
    value is still backed up, so the simulation counts and nothing is corrupted.

    With `solver`, expansion also proves what it can: a terminal leaf is a loss in 0, a leaf with
    a move in `move_wins` is a win in 1 (that edge is marked), and otherwise `leaf_proof` (the
    caller's adjudication; ignored at a root) stands. A proven leaf backs up its exact value and
    its proof climbs towards the root (`_propagate_proof`). Such a leaf (not a root) never reached
    the evaluator, so its node is marked not evaluated (`node_evaluated`): its priors are the
    caller's uniform ones until it becomes a root.

    Args:
        tree: TreeArrays.
        num_leaves: int, B, leaves to process.
        leaf_game, leaf_parent, path_edges, path_lengths: as written by `select_leaves`.
        leaf_terminal: [B] bool, the leaf's side to move has no legal move.
        leaf_values: [B] float32, value for the side to move at the leaf (terminal: ignored, -1).
        moves: [M, 3] int32, canonical legal moves of all leaves, concatenated.
        priors: [M] float32, their priors.
        move_offsets: [B + 1] int64, leaf i owns rows move_offsets[i]:move_offsets[i + 1].
        solver: bool, prove and propagate results (the MCTS-solver).
        move_wins: [M] uint8, 1 where the move leaves the opponent without a move (read only
            with `solver`).
        leaf_proof: [B] int8, PROOF_* of each leaf's side to move from adjudication.
        leaf_proof_plies: [B] int16, plies to the end for adjudicated leaves.
        out_overflow: [G] int64, incremented per leaf left unexpanded for lack of capacity.

    Returns:
        STATUS_OK, or STATUS_ROOT_CAPACITY if a root's moves did not fit (nothing else changed
        for that leaf).
    """
    node_capacity = tree.node_visits.shape[1]
    edge_capacity = tree.edge_prior.shape[1]
    for b in range(num_leaves):
        g = leaf_game[b]
        depth = path_lengths[b]
        start = move_offsets[b]
        num_moves = move_offsets[b + 1] - start
        fits = (tree.nodes_used[g] < node_capacity
                and tree.edges_used[g] + num_moves <= edge_capacity)
        if depth == 0:
            if tree.edges_used[g] + num_moves > edge_capacity:
                return STATUS_ROOT_CAPACITY
            node = 0
        elif fits:
            node = tree.nodes_used[g]
            tree.nodes_used[g] += 1
            last_edge = path_edges[b, depth - 1]
            _init_node(tree, g, node, leaf_parent[b], last_edge)
            tree.edge_child[g, last_edge] = node
        else:
            node = -1
            tree.edge_child[g, path_edges[b, depth - 1]] = NO_CHILD
            out_overflow[g] += 1
        value = -1.0 if leaf_terminal[b] else leaf_values[b]
        proof = PROOF_NONE
        plies = 0
        if solver:
            if leaf_terminal[b]:
                proof = PROOF_LOSS
            elif depth > 0 and leaf_proof[b] != PROOF_NONE:
                proof = leaf_proof[b]
                plies = leaf_proof_plies[b]
            for i in range(num_moves):
                if move_wins[start + i]:
                    proof = PROOF_WIN
                    plies = 1
                    break
            if proof != PROOF_NONE:
                value = float(proof)
        if node >= 0:
            first = tree.edges_used[g]
            last = first + num_moves
            tree.node_first_edge[g, node] = first
            tree.node_edge_count[g, node] = num_moves
            tree.node_terminal[g, node] = leaf_terminal[b]
            # The caller sends every leaf to the evaluator but the terminal ones and, with the
            # solver, the non-root leaves proven here (their priors are uniform).
            tree.node_evaluated[g, node] = not leaf_terminal[b] and (
                depth == 0 or proof == PROOF_NONE)
            tree.node_raw_value[g, node] = value
            # One simple loop per array: each compiles to a copy or a fill.
            for i in range(num_moves):
                tree.edge_move[g, first + i, 0] = moves[start + i, 0]
                tree.edge_move[g, first + i, 1] = moves[start + i, 1]
                tree.edge_move[g, first + i, 2] = moves[start + i, 2]
            tree.edge_prior[g, first:last] = priors[start:start + num_moves]
            tree.edge_visits[g, first:last] = 0
            tree.edge_value_sum[g, first:last] = 0.0
            tree.edge_value_sq_sum[g, first:last] = 0.0
            tree.edge_inflight[g, first:last] = 0
            tree.edge_child[g, first:last] = NO_CHILD
            tree.edge_proof[g, first:last] = PROOF_NONE
            tree.edge_proof_plies[g, first:last] = 0
            if solver and proof == PROOF_WIN and plies == 1:
                for i in range(num_moves):
                    if move_wins[start + i]:
                        tree.edge_proof[g, first + i] = PROOF_WIN
                        tree.edge_proof_plies[g, first + i] = 1
            tree.edges_used[g] = last
            tree.node_proof[g, node] = proof
            tree.node_proof_plies[g, node] = plies
        _backup(tree, g, path_edges[b], depth, value, True)
        if node > 0 and proof != PROOF_NONE:
            _propagate_proof(tree, g, node)
    return STATUS_OK


@njit(cache=True)
def compact_subtree(tree, g, new_root, scratch_index, scratch_shift):
    """Make node `new_root` of game `g` the root, keeping its subtree's statistics.

    Everything outside the subtree is freed: the kept nodes and their edge blocks slide left in
    place (indices only ever decrease, so a forward copy is safe), and child / parent links are
    renumbered. Must not run while leaves are pending.

    Args:
        tree: TreeArrays.
        g: int, the game.
        new_root: int, a node of game g (0 keeps the whole tree).
        scratch_index: [N] int32 scratch (old node -> new node or -1).
        scratch_shift: [N] int32 scratch (old node -> how far its edge block moves).
    """
    used = tree.nodes_used[g]
    for n in range(used):
        scratch_index[n] = -1
    scratch_index[new_root] = 0
    kept = 1
    for n in range(new_root + 1, used):
        parent = tree.node_parent[g, n]
        if parent >= 0 and scratch_index[parent] >= 0:
            scratch_index[n] = kept
            kept += 1
    next_edge = 0
    for n in range(new_root, used):
        m = scratch_index[n]
        if m < 0:
            continue
        first = tree.node_first_edge[g, n]
        count = tree.node_edge_count[g, n]
        scratch_shift[n] = first - next_edge
        if count > 0:
            for i in range(count):
                src = first + i
                dst = next_edge + i
                for k in range(3):
                    tree.edge_move[g, dst, k] = tree.edge_move[g, src, k]
                tree.edge_prior[g, dst] = tree.edge_prior[g, src]
                tree.edge_proof[g, dst] = tree.edge_proof[g, src]
                tree.edge_proof_plies[g, dst] = tree.edge_proof_plies[g, src]
                tree.edge_visits[g, dst] = tree.edge_visits[g, src]
                tree.edge_value_sum[g, dst] = tree.edge_value_sum[g, src]
                tree.edge_value_sq_sum[g, dst] = tree.edge_value_sq_sum[g, src]
                tree.edge_inflight[g, dst] = tree.edge_inflight[g, src]
                child = tree.edge_child[g, src]
                tree.edge_child[g, dst] = scratch_index[child] if child >= 0 else child
        tree.node_visits[g, m] = tree.node_visits[g, n]
        tree.node_value_sum[g, m] = tree.node_value_sum[g, n]
        tree.node_inflight[g, m] = tree.node_inflight[g, n]
        tree.node_visited_mass[g, m] = tree.node_visited_mass[g, n]
        tree.node_first_edge[g, m] = next_edge
        tree.node_edge_count[g, m] = count
        tree.node_terminal[g, m] = tree.node_terminal[g, n]
        tree.node_evaluated[g, m] = tree.node_evaluated[g, n]
        tree.node_raw_value[g, m] = tree.node_raw_value[g, n]
        tree.node_proof[g, m] = tree.node_proof[g, n]
        tree.node_proof_plies[g, m] = tree.node_proof_plies[g, n]
        if m == 0:
            tree.node_parent[g, m] = NO_PARENT
            tree.node_parent_edge[g, m] = NO_PARENT
        else:
            parent = tree.node_parent[g, n]
            tree.node_parent[g, m] = scratch_index[parent]
            tree.node_parent_edge[g, m] = tree.node_parent_edge[g, n] - scratch_shift[parent]
        if count > 0:
            next_edge += count
    tree.nodes_used[g] = kept
    tree.edges_used[g] = next_edge


@njit(cache=True)
def find_edge(tree, g, node, src, dst, arrow):
    """Index of the edge of `node` (game g) playing canonical (src, dst, arrow), or -1."""
    first = tree.node_first_edge[g, node]
    for e in range(first, first + max(tree.node_edge_count[g, node], 0)):
        if (tree.edge_move[g, e, 0] == src and tree.edge_move[g, e, 1] == dst
                and tree.edge_move[g, e, 2] == arrow):
            return e
    return -1


@njit(cache=True)
def best_edge(tree, g, node):
    """The edge a player should choose at an expanded `node` of game g, or -1 if none.

    A proven win first (the shortest; the most visited among equals); otherwise the most visited
    edge that is not a proven loss (the first on ties), or, when every visited edge has been
    proven lost since, the open edge with the highest prior; if every edge is a proven loss, the
    longest one. Returns -1 when nothing was searched yet (no simulation and no proof).
    """
    first = tree.node_first_edge[g, node]
    last = first + max(tree.node_edge_count[g, node], 0)
    chosen = -1
    if tree.node_proof[g, node] == PROOF_WIN:
        for e in range(first, last):
            if tree.edge_proof[g, e] == PROOF_WIN and (
                    chosen < 0 or tree.edge_proof_plies[g, e] < tree.edge_proof_plies[g, chosen]
                    or (tree.edge_proof_plies[g, e] == tree.edge_proof_plies[g, chosen]
                        and tree.edge_visits[g, e] > tree.edge_visits[g, chosen])):
                chosen = e
        return chosen
    if tree.node_proof[g, node] == PROOF_LOSS:
        for e in range(first, last):
            if chosen < 0 or tree.edge_proof_plies[g, e] > tree.edge_proof_plies[g, chosen] or (
                    tree.edge_proof_plies[g, e] == tree.edge_proof_plies[g, chosen]
                    and tree.edge_visits[g, e] > tree.edge_visits[g, chosen]):
                chosen = e
        return chosen
    best_visits = 0
    for e in range(first, last):
        if tree.edge_proof[g, e] != PROOF_LOSS and tree.edge_visits[g, e] > best_visits:
            best_visits = tree.edge_visits[g, e]
            chosen = e
    if chosen < 0 and tree.node_visits[g, node] > 1:
        # Every visited edge was proven lost since: the open edge with the highest prior.
        for e in range(first, last):
            if tree.edge_proof[g, e] != PROOF_LOSS and (
                    chosen < 0 or tree.edge_prior[g, e] > tree.edge_prior[g, chosen]):
                chosen = e
    return chosen


@njit(cache=True)
def open_edge(tree, g, node):
    """The edge of `node` (game g) with the highest prior that is not a proven loss (the first on
    ties), or -1. What a searched root plays when every move it visited was proven lost and the
    open moves got no visit (`best_edge` finds nothing there)."""
    first = tree.node_first_edge[g, node]
    chosen = -1
    for e in range(first, first + max(tree.node_edge_count[g, node], 0)):
        if tree.edge_proof[g, e] != PROOF_LOSS and (
                chosen < 0 or tree.edge_prior[g, e] > tree.edge_prior[g, chosen]):
            chosen = e
    return chosen


@njit(cache=True)
def principal_variation(tree, g, out_moves):
    """Follow `best_edge` from the root of game g: proven wins, else the most visited moves.

    Args:
        out_moves: [L, 3] int32, receives the moves, each in its own node's canonical frame.

    Returns:
        The number of moves written: the walk stops where `best_edge` finds nothing, at an
        unexpanded node, or after L moves.
    """
    node = 0
    length = 0
    while length < out_moves.shape[0] and tree.node_edge_count[g, node] > 0:
        edge = best_edge(tree, g, node)
        if edge < 0:
            break
        for k in range(3):
            out_moves[length, k] = tree.edge_move[g, edge, k]
        length += 1
        node = tree.edge_child[g, edge]
        if node < 0:
            break
    return length


@njit(cache=True)
def principal_variation_after(tree, g, edge, out_moves):
    """Like `principal_variation`, but starting with root edge `edge` of game g (the move a
    root rule other than the most visits chose), then `best_edge` below it.

    Returns:
        The number of moves written (at least 1 when `out_moves` has a row).
    """
    if out_moves.shape[0] == 0:
        return 0
    for k in range(3):
        out_moves[0, k] = tree.edge_move[g, edge, k]
    length = 1
    node = tree.edge_child[g, edge]
    while node >= 0 and length < out_moves.shape[0] and tree.node_edge_count[g, node] > 0:
        chosen = best_edge(tree, g, node)
        if chosen < 0:
            break
        for k in range(3):
            out_moves[length, k] = tree.edge_move[g, chosen, k]
        length += 1
        node = tree.edge_child[g, chosen]
    return length


@njit(cache=True)
def recompute_visited_mass(tree, g, node):
    """Set `node_visited_mass` of `node` (game g) from its current priors, in edge order.

    Needed after the priors change (root noise); otherwise `select_leaves` keeps the mass up to
    date as edges are first selected.
    """
    first = tree.node_first_edge[g, node]
    mass = 0.0
    for e in range(first, first + max(tree.node_edge_count[g, node], 0)):
        if tree.edge_visits[g, e] > 0 or tree.edge_inflight[g, e] > 0:
            mass += tree.edge_prior[g, e]
    tree.node_visited_mass[g, node] = mass
