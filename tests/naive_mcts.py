"""A naive MCTS in plain Python objects: the oracle for `amazons.mcts.BatchedSearch`.

It implements the same search with the same formulas, written the obvious way: a node object per
position holding a list of edge objects, one game at a time, positions computed one node at a
time with the engine. It must visit exactly what the Numba search visits, so it mirrors every
choice the search makes (documented in `amazons/mcts_numba.py`):

* the root is expanded before the simulations start and that expansion is not a simulation;
* a round gathers up to K leaves with virtual loss (in-flight counters); a descent that reaches a
  pending leaf is a collision: discarded, and the round stops gathering;
* a descent that reaches a known terminal node backs up -1 at once;
* with `config.solver`, the MCTS-solver: a terminal leaf is a proven loss in 0, a leaf with a move
  after which the opponent has no move (found here by playing each move and counting the
  opponent's replies) is a proven win in 1 and skips the evaluator, proofs climb the path (a win
  if some edge wins, shortest first; a loss if every edge loses, longest first), proven-lost
  edges are never selected, a descent into a proven node backs up its exact value, and a search
  whose root is proven (by its edges) stops; with `config.adjudicate` too, a non-root leaf that
  `engine.adjudicate` decides is proven with its exact value (plies: 2b + 1 for a win against b
  moves, 2a for a loss with a moves, from the bounds' upper ends) and skips the evaluator;
* a leaf proven at expansion (a winning move, or adjudicated) is not evaluated (uniform priors);
  when it becomes the root and its edges do not prove it, the evaluator gives its priors before
  the search starts (its raw value stays exact);
* first-play urgency: Q_parent - fpu_reduction * sqrt(prior mass of the edges selected so far,
  summed in the order they were first selected);
* PUCT: Q + c * P * sqrt(N_parent) / (1 + N), c = c_puct + log((1 + N_parent + base) / base);
* ties go to the first edge in the engine's move order;
* edge value sums (and sums of squared values) are stored in float32, node value sums in float64;
* with `config.root="gumbel"`, the root's edge comes from sequential halving (`gumbel_edge`):
  Gumbel noise drawn from `rng` for the root's moves when its halving starts, the m moves with
  the largest g + log prior sampled, per phase max(1, n // (ceil(log2 m) * size)) new visits
  per remaining move (in-flight selections count; visits from earlier searches of the root do
  not), the fewest new visits first, then halving to max(2, size // 2) by g + log prior +
  sigma(completed Q); proven-lost moves drop out, an empty set is refilled with the next m;
* with `config.root_noise` (root "puct"), Dirichlet(total_alpha / n) noise drawn from `rng` once
  per root, after its expansion, mixed into the root's float32 priors with `dirichlet_fraction`
  (the prior mass of the root's selected edges is then summed again in edge order);
* with `config.forced_playouts_k` k > 0 at such a noised root, forced playouts come before PUCT:
  the first root edge, not proven lost, with a completed visit whose selections n (completed and
  in flight) satisfy n * n < k * P * (the selections of all root edges), P its noisy prior.

Used by tests/test_mcts.py and as the baseline in benchmarks/suite_mcts.py.
"""

from __future__ import annotations

import math

import numpy as np

from amazons import engine
from amazons.mcts import SearchConfig


def float32(value: float) -> float:
    """Round to the nearest float32, as storing into a float32 array does."""
    return float(np.float32(value))


class NaiveEdge:
    """One legal move of a node, with its statistics (for the side choosing it)."""

    __slots__ = ("move", "prior", "visits", "value_sum", "value_sq_sum", "inflight", "child",
                 "pending", "proof", "proof_plies")

    def __init__(self, move: tuple[int, int, int], prior: float) -> None:
        self.move = move
        self.prior = prior
        self.visits = 0
        self.value_sum = 0.0
        self.value_sq_sum = 0.0
        self.inflight = 0
        self.child: NaiveNode | None = None
        self.pending = False
        self.proof = 0  # +1 the move wins for the side choosing it, -1 it loses, 0 unknown
        self.proof_plies = 0


class NaiveNode:
    """A position in the tree; `edges` is None until it is expanded."""

    __slots__ = ("position", "visits", "value_sum", "inflight", "visited_mass", "edges", "terminal",
                 "proof", "proof_plies", "adjudicated", "raw_value", "evaluated")

    def __init__(self, position: np.ndarray) -> None:
        self.position = position
        self.visits = 0
        self.value_sum = 0.0
        self.inflight = 0
        self.visited_mass = 0.0  # priors of edges selected so far, summed in order of selection
        self.edges: list[NaiveEdge] | None = None
        self.terminal = False
        self.proof = 0  # for the side to move here
        self.proof_plies = 0
        self.adjudicated = (0, 0)  # (result, plies) of the engine's adjudication; (0, 0) undecided
        self.raw_value = 0.0  # the value backed up when it was expanded (evaluator's, or exact)
        self.evaluated = False  # the evaluator gave its priors


class NaiveHalving:
    """Sequential halving at one root, by the book: lists indexed like the root's edges."""

    def __init__(self, noise: list[float], budget: int) -> None:
        self.noise = noise
        self.budget = budget
        self.base = [0] * len(noise)
        self.considered = [False] * len(noise)
        self.sampled = 0
        self.phase_size = 0
        self.phase_target = 0


def log_prior(prior: float) -> float:
    return math.log(max(prior, float(np.finfo(np.float32).tiny)))


def phase_visits(budget: int, sampled: int, size: int) -> int:
    log2 = math.ceil(math.log2(sampled)) if sampled > 1 else 0
    return max(1, budget) if log2 == 0 else max(1, budget // (log2 * size))


class NaiveMCTS:
    """Single-game MCTS over Python objects, matching `BatchedSearch` visit for visit."""

    def __init__(self, evaluator, config: SearchConfig, root_position: np.ndarray,
                 rng: np.random.Generator | None = None) -> None:
        self.evaluator = evaluator
        self.config = config
        self.root = NaiveNode(np.asarray(root_position, np.uint64).copy())
        self.collisions = 0
        self.terminal_hits = 0
        self.rng = rng  # draws the Gumbel or Dirichlet noise, as BatchedSearch's seeded generator
        self.halving: NaiveHalving | None = None
        self.noised = False  # Dirichlet noise was mixed into the current root's priors

    # -- one node at a time ------------------------------------------------------------------

    def select_edge(self, node: NaiveNode) -> NaiveEdge:
        cfg = self.config
        vl = cfg.virtual_loss
        parent_visits = node.visits + vl * node.inflight
        c = cfg.c_puct
        if cfg.c_puct_base > 0.0:
            c = cfg.c_puct + math.log((1.0 + parent_visits + cfg.c_puct_base) / cfg.c_puct_base)
        scale = c * math.sqrt(parent_visits)
        fpu = node.value_sum / node.visits - cfg.fpu_reduction * math.sqrt(node.visited_mass)
        best, best_score = node.edges[0], -math.inf
        for edge in node.edges:
            if edge.proof == -1:
                continue
            visits = edge.visits + vl * edge.inflight
            q = (edge.value_sum - vl * edge.inflight) / visits if visits > 0.0 else fpu
            score = q + scale * edge.prior / (1.0 + visits)
            if score > best_score:
                best, best_score = edge, score
        return best

    @staticmethod
    def backup(path: list[tuple[NaiveNode, NaiveEdge]], leaf: NaiveNode | None, value: float,
               remove_inflight: bool) -> None:
        value = value if len(path) % 2 == 0 else -value
        for node, edge in path:
            node.visits += 1
            node.value_sum += value
            edge.visits += 1
            edge.value_sum = float32(edge.value_sum + value)
            edge.value_sq_sum = float32(edge.value_sq_sum + value * value)
            if remove_inflight:
                node.inflight -= 1
                edge.inflight -= 1
            value = -value
        if leaf is not None:
            leaf.visits += 1
            leaf.value_sum += value

    @staticmethod
    def winning_moves(position: np.ndarray, moves: np.ndarray) -> list[bool]:
        """For each move, whether the opponent has no legal reply after it."""
        if len(moves) == 0:
            return []
        children = engine.apply_moves(np.repeat(position.reshape(1, 3), len(moves), axis=0), moves)
        return (engine.count_legal_moves(children) == 0).tolist()

    def evaluate(self, nodes: list[NaiveNode],
                 at_root: bool = False) -> list[tuple[list, list, float, list]]:
        """Legal moves, priors, value and winning-move marks of each node's position.

        Terminal positions have no moves and value -1; with the solver, a non-root position with
        a winning move skips the evaluator (uniform priors, value +1).
        """
        move_lists = [engine.legal_moves(node.position)[0].copy() for node in nodes]
        solver = self.config.solver
        wins = [self.winning_moves(node.position, moves) if solver else [False] * len(moves)
                for node, moves in zip(nodes, move_lists, strict=True)]
        if solver and self.config.adjudicate and not at_root:
            for node in nodes:
                self.adjudicate(node)
        live = [i for i, moves in enumerate(move_lists)
                if len(moves) > 0 and (at_root or not (any(wins[i]) or nodes[i].adjudicated[0]))]
        results = [([tuple(m) for m in moves.tolist()],
                    [float(np.float32(1.0 / len(moves)))] * len(moves), 1.0, wins[i])
                   if len(moves) else ([], [], -1.0, [])
                   for i, moves in enumerate(move_lists)]
        if live:
            positions = np.stack([nodes[i].position for i in live])
            moves = np.concatenate([move_lists[i] for i in live]).astype(np.int32)
            offsets = np.zeros(len(live) + 1, np.int64)
            offsets[1:] = np.cumsum([len(move_lists[i]) for i in live])
            priors, values = self.evaluator.evaluate(positions, moves, offsets)
            priors = np.asarray(priors, np.float32)
            values = np.clip(np.asarray(values, np.float32), -1.0, 1.0)
            for row, i in enumerate(live):
                block = slice(offsets[row], offsets[row + 1])
                results[i] = ([tuple(m) for m in moves[block].tolist()],
                              [float(p) for p in priors[block]], float(values[row]), wins[i])
        return results

    @staticmethod
    def adjudicate(node: NaiveNode) -> None:
        """Store the engine's adjudication of the node's position as (result, plies)."""
        result, bounds = engine.adjudicate(node.position.reshape(1, 3))
        result = int(result[0])
        plies = (2 * int(bounds[0, engine.THEIR_UPPER]) + 1 if result > 0
                 else 2 * int(bounds[0, engine.MY_UPPER]) if result < 0 else 0)
        node.adjudicated = (result, plies)

    def expand(self, node: NaiveNode, moves: list, priors: list, wins: list) -> None:
        node.edges = [NaiveEdge(move, prior) for move, prior in zip(moves, priors, strict=True)]
        node.terminal = not moves
        if not self.config.solver:
            return
        if node.terminal:
            node.proof, node.proof_plies = -1, 0
        elif node.adjudicated[0]:
            node.proof, node.proof_plies = node.adjudicated
        for edge, win in zip(node.edges, wins, strict=True):
            if win:
                edge.proof, edge.proof_plies = 1, 1
                node.proof, node.proof_plies = 1, 1

    @staticmethod
    def propagate(path: list[tuple[NaiveNode, NaiveEdge]], leaf: NaiveNode) -> None:
        """Carry the leaf's proof up the path while it proves the nodes above."""
        child = leaf
        for node, edge in reversed(path):
            if child.proof == 0:
                return
            edge.proof, edge.proof_plies = -child.proof, child.proof_plies + 1
            if edge.proof == 1:
                if node.proof == 1 and node.proof_plies <= edge.proof_plies:
                    return
                node.proof, node.proof_plies = 1, edge.proof_plies
            elif all(other.proof == -1 for other in node.edges):
                node.proof, node.proof_plies = -1, max(other.proof_plies for other in node.edges)
            else:
                return
            child = node

    def refresh_root_proof(self) -> None:
        """The root's proof from its edges alone."""
        root = self.root
        wins = [edge.proof_plies for edge in root.edges if edge.proof == 1]
        if wins:
            root.proof, root.proof_plies = 1, min(wins)
        elif all(edge.proof == -1 for edge in root.edges):
            root.proof, root.proof_plies = -1, max(edge.proof_plies for edge in root.edges)
        else:
            root.proof, root.proof_plies = 0, 0

    # -- Gumbel root ----------------------------------------------------------------------------

    def sigma_terms(self) -> tuple[float, float, float, float]:
        """(v_mix, low, span, scale) of the completed-Q transform at the root."""
        edges = self.root.edges
        total = sum(edge.visits for edge in edges)
        most = max(edge.visits for edge in edges)
        weighted, mass = 0.0, 0.0
        for edge in edges:
            if edge.proof or edge.visits:
                prior = max(edge.prior, float(np.finfo(np.float32).tiny))
                weighted += prior * self.known_q(edge)
                mass += prior
        v_mix = self.root.raw_value
        if mass > 0.0:
            v_mix = (v_mix + total * (weighted / mass)) / (total + 1.0)
        completed = [self.completed_q(edge, v_mix) for edge in edges]
        low, high = min(completed), max(completed)
        return v_mix, low, max(high - low, 1e-8), (self.config.c_visit + most) * self.config.c_scale

    @staticmethod
    def known_q(edge: NaiveEdge) -> float:
        return float(edge.proof) if edge.proof else edge.value_sum / edge.visits

    def completed_q(self, edge: NaiveEdge, v_mix: float) -> float:
        return self.known_q(edge) if edge.proof or edge.visits else v_mix

    def score(self, index: int, terms: tuple[float, float, float, float]) -> float:
        """g + log prior + sigma(completed Q) of root edge `index`."""
        v_mix, low, span, scale = terms
        edge = self.root.edges[index]
        sigma = scale * (self.completed_q(edge, v_mix) - low) / span
        return self.halving.noise[index] + log_prior(edge.prior) + sigma

    def sample(self) -> None:
        """The m root edges with the largest g + log prior, not proven lost, become the set."""
        halving, edges = self.halving, self.root.edges
        halving.considered = [False] * len(edges)
        open_edges = [i for i, edge in enumerate(edges) if edge.proof != -1]
        ranked = sorted(open_edges,
                        key=lambda i: (-(halving.noise[i] + log_prior(edges[i].prior)), i))
        for i in ranked[: self.config.gumbel_m]:
            halving.considered[i] = True
            halving.base[i] = edges[i].visits + edges[i].inflight
        halving.sampled = halving.phase_size = min(len(ranked), self.config.gumbel_m)
        halving.phase_target = phase_visits(halving.budget, halving.sampled, halving.sampled)

    def gumbel_edge(self) -> NaiveEdge | None:
        """The root edge of the next simulation under sequential halving."""
        halving, edges = self.halving, self.root.edges
        terms = self.sigma_terms()
        for _ in range(3):
            alive = [i for i, edge in enumerate(edges)
                     if halving.considered[i] and edge.proof != -1]
            new = {i: edges[i].visits + edges[i].inflight - halving.base[i] for i in alive}
            below = [i for i in alive if new[i] < halving.phase_target]
            if below:
                return edges[min(below, key=lambda i: (new[i], -self.score(i, terms), i))]
            if not alive:
                self.sample()
                continue
            keep = max(2, halving.phase_size // 2) if halving.phase_size > 1 else 1
            ranked = sorted(alive, key=lambda i: (-self.score(i, terms), i))
            halving.considered = [i in ranked[:keep] for i in range(len(edges))]
            halving.phase_size = keep
            halving.phase_target += phase_visits(halving.budget, halving.sampled, keep)
        return None

    def gumbel_choice(self) -> tuple[int, int, int]:
        """The move to play: the remaining edge with the best score (proven roots aside)."""
        edges = self.root.edges
        terms = self.sigma_terms()
        for restricted in (True, False):
            open_edges = [i for i, edge in enumerate(edges)
                          if edge.proof != -1 and (self.halving.considered[i] or not restricted)]
            if open_edges:
                return edges[min(open_edges, key=lambda i: (-self.score(i, terms), i))].move
        raise ValueError("no move to play")

    # -- Dirichlet noise and forced playouts at a PUCT root -------------------------------------

    def add_root_noise(self) -> None:
        """Mix Dirichlet(total_alpha / n, ..., n times) noise into the root's n priors."""
        cfg, edges = self.config, self.root.edges
        count = len(edges)
        noise = self.rng.gamma(cfg.dirichlet_total_alpha / count, size=count)
        total = noise.sum()
        noise = noise / total if total > 0 else np.full(count, 1.0 / count)
        priors = np.array([edge.prior for edge in edges], np.float32)
        priors[:] = (1.0 - cfg.dirichlet_fraction) * priors + cfg.dirichlet_fraction * noise
        for edge, prior in zip(edges, priors.tolist(), strict=True):
            edge.prior = prior
        self.root.visited_mass = sum(edge.prior for edge in edges if edge.visits or edge.inflight)
        self.noised = True

    def forced_edge(self) -> NaiveEdge | None:
        """The first root edge owed a forced playout, or None."""
        edges = self.root.edges
        total = sum(edge.visits + edge.inflight for edge in edges)
        for edge in edges:
            if edge.proof == -1 or edge.visits == 0:
                continue
            selected = edge.visits + edge.inflight
            if selected * selected < self.config.forced_playouts_k * edge.prior * total:
                return edge
        return None

    # -- the search --------------------------------------------------------------------------

    def search(self, num_simulations: int | None = None,
               planned_simulations: int | None = None) -> None:
        cfg = self.config
        remaining = cfg.simulations if num_simulations is None else num_simulations
        if self.root.edges is None:
            ((moves, priors, value, wins),) = self.evaluate([self.root], at_root=True)
            if not moves:
                raise ValueError("the root is terminal")
            self.expand(self.root, moves, priors, wins)
            self.root.evaluated = bool(moves)
            self.root.raw_value = float32(float(self.root.proof) if self.root.proof else value)
            self.backup([], self.root, float(self.root.proof) if self.root.proof else value, True)
        self.refresh_root_proof()
        if not self.root.evaluated and self.root.proof == 0:
            self.evaluate_root_priors()
        if cfg.root_noise and cfg.root != "gumbel" and not self.noised:
            self.add_root_noise()
        forced = self.noised and cfg.forced_playouts_k > 0
        if cfg.root == "gumbel":
            budget = remaining if planned_simulations is None else planned_simulations
            if self.halving is None:
                count = len(self.root.edges)
                noise = (self.rng.gumbel(size=count) * cfg.gumbel_scale if cfg.gumbel_scale > 0
                         else np.zeros(count))
                self.halving = NaiveHalving(noise.tolist(), budget)
                self.sample()
            elif planned_simulations is not None:
                self.halving.budget = budget
        while remaining > 0:
            if self.root.proof != 0:
                break
            leaves: list[list[tuple[NaiveNode, NaiveEdge]]] = []
            while len(leaves) < cfg.leaves_per_game and remaining > 0:
                node, path, outcome = self.root, [], None
                while outcome is None:
                    if node.terminal or (path and node.proof != 0):
                        outcome = "terminal"
                        break
                    edge = None
                    if node is self.root and cfg.root == "gumbel":
                        edge = self.gumbel_edge()
                    elif node is self.root and forced:
                        edge = self.forced_edge()
                    if edge is None:
                        edge = self.select_edge(node)
                    path.append((node, edge))
                    if edge.pending:
                        outcome = "collision"
                    elif edge.child is None:
                        outcome = "leaf"
                    else:
                        node = edge.child
                if outcome == "collision":
                    self.collisions += 1
                    break
                remaining -= 1
                if outcome == "terminal":
                    self.terminal_hits += 1
                    self.backup(path, node, -1.0 if node.terminal else float(node.proof), False)
                    continue
                for path_node, path_edge in path:
                    if path_edge.visits == 0 and path_edge.inflight == 0:
                        path_node.visited_mass += path_edge.prior
                    path_node.inflight += 1
                    path_edge.inflight += 1
                path[-1][1].pending = True
                leaves.append(path)
            if not leaves:
                continue
            children = []
            for path in leaves:
                parent, edge = path[-1]
                move = np.array([edge.move], np.int32)
                children.append(NaiveNode(
                    engine.apply_moves(parent.position.reshape(1, 3), move)[0]))
            for path, child, (moves, priors, value, wins) in zip(
                    leaves, children, self.evaluate(children), strict=True):
                edge = path[-1][1]
                edge.pending = False
                edge.child = child
                self.expand(child, moves, priors, wins)
                child.evaluated = not child.terminal and child.proof == 0
                child.raw_value = float32(float(child.proof) if child.proof else value)
                self.backup(path, child, float(child.proof) if child.proof else value, True)
                self.propagate(path, child)

    def evaluate_root_priors(self) -> None:
        """The evaluator's priors for a root that was a leaf proven at expansion."""
        root = self.root
        moves = np.array([edge.move for edge in root.edges], np.int32)
        priors, _ = self.evaluator.evaluate(root.position.reshape(1, 3), moves,
                                            np.array([0, len(moves)], np.int64))
        for edge, prior in zip(root.edges, np.asarray(priors, np.float32).tolist(), strict=True):
            edge.prior = prior
        root.visited_mass = sum(edge.prior for edge in root.edges if edge.visits or edge.inflight)
        root.evaluated = True

    def advance(self, move: tuple[int, int, int]) -> None:
        """Play `move` at the root, keeping its subtree when it exists (and reuse is on)."""
        move = tuple(int(square) for square in move)
        self.halving = None
        self.noised = False
        for edge in self.root.edges or []:
            if edge.move == move and edge.child is not None and self.config.reuse_tree:
                self.root = edge.child
                return
        child = engine.apply_moves(self.root.position.reshape(1, 3), np.array([move], np.int32))[0]
        self.root = NaiveNode(child)

    def root_visits(self) -> np.ndarray:
        """(n,) int visits of every root edge, in move order."""
        return np.array([edge.visits for edge in self.root.edges], np.int64)
