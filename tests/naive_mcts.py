"""A naive MCTS in plain Python objects: the oracle for `amazons.mcts.BatchedSearch`.

It implements the same search with the same formulas, written the obvious way: a node object per
position holding a list of edge objects, one game at a time, positions computed one node at a
time with the engine. It must visit exactly what the Numba search visits, so it mirrors every
choice the search makes (documented in `amazons/mcts_numba.py`):

* the root is expanded before the simulations start and that expansion is not a simulation;
* a round gathers up to K leaves with virtual loss (in-flight counters); a descent that reaches a
  pending leaf is a collision: discarded, and the round stops gathering;
* a descent that reaches a known terminal node backs up -1 at once;
* first-play urgency: Q_parent - fpu_reduction * sqrt(prior mass of the edges selected so far,
  summed in the order they were first selected);
* PUCT: Q + c * P * sqrt(N_parent) / (1 + N), c = c_puct + log((1 + N_parent + base) / base);
* ties go to the first edge in the engine's move order;
* edge value sums are stored in float32, node value sums in float64.

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

    __slots__ = ("move", "prior", "visits", "value_sum", "inflight", "child", "pending")

    def __init__(self, move: tuple[int, int, int], prior: float) -> None:
        self.move = move
        self.prior = prior
        self.visits = 0
        self.value_sum = 0.0
        self.inflight = 0
        self.child: NaiveNode | None = None
        self.pending = False


class NaiveNode:
    """A position in the tree; `edges` is None until it is expanded."""

    __slots__ = ("position", "visits", "value_sum", "inflight", "visited_mass", "edges", "terminal")

    def __init__(self, position: np.ndarray) -> None:
        self.position = position
        self.visits = 0
        self.value_sum = 0.0
        self.inflight = 0
        self.visited_mass = 0.0  # priors of edges selected so far, summed in order of selection
        self.edges: list[NaiveEdge] | None = None
        self.terminal = False


class NaiveMCTS:
    """Single-game MCTS over Python objects, matching `BatchedSearch` visit for visit."""

    def __init__(self, evaluator, config: SearchConfig, root_position: np.ndarray) -> None:
        self.evaluator = evaluator
        self.config = config
        self.root = NaiveNode(np.asarray(root_position, np.uint64).copy())
        self.collisions = 0
        self.terminal_hits = 0

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
            if remove_inflight:
                node.inflight -= 1
                edge.inflight -= 1
            value = -value
        if leaf is not None:
            leaf.visits += 1
            leaf.value_sum += value

    def evaluate(self, nodes: list[NaiveNode]) -> list[tuple[list, list, float]]:
        """Legal moves, priors and value of each node's position (terminal: no moves, -1)."""
        move_lists = [engine.legal_moves(node.position)[0].copy() for node in nodes]
        live = [i for i, moves in enumerate(move_lists) if len(moves) > 0]
        results = [([], [], -1.0) for _ in nodes]
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
                              [float(p) for p in priors[block]], float(values[row]))
        return results

    @staticmethod
    def expand(node: NaiveNode, moves: list, priors: list) -> None:
        node.edges = [NaiveEdge(move, prior) for move, prior in zip(moves, priors, strict=True)]
        node.terminal = not moves

    # -- the search --------------------------------------------------------------------------

    def search(self, num_simulations: int | None = None) -> None:
        cfg = self.config
        remaining = cfg.simulations if num_simulations is None else num_simulations
        if self.root.edges is None:
            ((moves, priors, value),) = self.evaluate([self.root])
            if not moves:
                raise ValueError("the root is terminal")
            self.expand(self.root, moves, priors)
            self.backup([], self.root, value, True)
        while remaining > 0:
            leaves: list[list[tuple[NaiveNode, NaiveEdge]]] = []
            while len(leaves) < cfg.leaves_per_game and remaining > 0:
                node, path, outcome = self.root, [], None
                while outcome is None:
                    if node.terminal:
                        outcome = "terminal"
                        break
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
                    self.backup(path, node, -1.0, False)
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
                children.append(NaiveNode(engine.apply_moves(parent.position.reshape(1, 3), move)[0]))
            for path, child, (moves, priors, value) in zip(
                    leaves, children, self.evaluate(children), strict=True):
                edge = path[-1][1]
                edge.pending = False
                edge.child = child
                self.expand(child, moves, priors)
                self.backup(path, child, value, True)

    def advance(self, move: tuple[int, int, int]) -> None:
        """Play `move` at the root, keeping its subtree when it exists (and reuse is on)."""
        move = tuple(int(square) for square in move)
        for edge in self.root.edges or []:
            if edge.move == move and edge.child is not None and self.config.reuse_tree:
                self.root = edge.child
                return
        child = engine.apply_moves(self.root.position.reshape(1, 3), np.array([move], np.int32))[0]
        self.root = NaiveNode(child)

    def root_visits(self) -> np.ndarray:
        """(n,) int visits of every root edge, in move order."""
        return np.array([edge.visits for edge in self.root.edges], np.int64)
