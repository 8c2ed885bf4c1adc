"""Players: whatever picks a move for a `Board`, for the arena, the Botzone bot and terminal play.

A player has `choose_move(board) -> Move` (a real, Botzone-frame move, legal on `board`) and two
optional hooks: `reset()` before a new game and `observe(board, move)` after any move is chosen
(by either side; `board` is the position *before* `move` is played), which lets `MCTSPlayer` keep
its tree across turns. `BasePlayer` gives both hooks as no-ops, and `close()`, which the arena
calls after each game (a player that runs a program ends its process there).

A player that cannot give a move for a reason the game must record (an external program's
timeout, crash, malformed reply or illegal move: `amazons.players.program`) raises `PlayerFault`;
the arena ends the game as that player's loss with the reason in the record.

Players here: `RandomPlayer`, `GreedyPlayer` (one-ply mobility/territory heuristic),
`MCTSPlayer` (any `Evaluator`; a simulation count or a time budget), `PolicyPlayer` (an
evaluator's highest prior, no search) and `HumanPlayer` (terminal).

Every player plays the size of the board it is given (`Board.size`, 6..10): moves come back as
`Move`s of that size. A searching player builds its search for the board's size when it first
sees it, and again when a board of another size comes. An evaluator tied to one size (its
`board_size`: a network's, playouts') serves only that size; a board of another size is refused
with a `PlayerError` naming the player and both sizes. They never import torch: a
network player is an `MCTSPlayer` or a `PolicyPlayer` given a network evaluator, built by
`amazons.players.factory`.

`predicted_territory` reads an evaluator's ownership head (`NumpyEvaluator.ownership`,
`NetworkEvaluator.ownership`) as Black's expected territory lead; `describe_territory` words it
for terminal play's `hint` and the Botzone bot's debug line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TextIO, runtime_checkable

import numpy as np

from amazons import engine
from amazons.board import BLACK, COLOR_NAMES, WHITE, Board, Move, NotationError
from amazons.mcts import BatchedSearch, Evaluator, SearchConfig, SearchResult
from amazons.symmetry import canonical_to_real, real_to_canonical

__all__ = [
    "BasePlayer",
    "GreedyPlayer",
    "HumanPlayer",
    "MCTSPlayer",
    "Player",
    "FAULT_REASONS",
    "PlayerError",
    "PlayerFault",
    "PolicyPlayer",
    "RandomPlayer",
    "SearchReport",
    "describe_territory",
    "predicted_territory",
]


class PlayerError(ValueError):
    """A player was asked to move in a finished game, or was built with bad arguments."""


FAULT_REASONS = ("timeout", "crash", "malformed", "illegal")  # why a player forfeits a game


class PlayerFault(RuntimeError):
    """A player could not give a legal move: it forfeits the game.

    Args:
        reason: one of `FAULT_REASONS`: `timeout` (past its time limit), `crash` (its program
            ended without a reply or with a non-zero status), `malformed` (a reply that is not a
            move), `illegal` (a move the rules forbid).
        message: one line saying what happened (limits, exit status, the reply, the program's
            last stderr lines).

    Raises:
        ValueError: an unknown reason.
    """

    def __init__(self, reason: str, message: str) -> None:
        if reason not in FAULT_REASONS:
            raise ValueError(f"unknown fault reason {reason!r}; known: {', '.join(FAULT_REASONS)}")
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@runtime_checkable
class Player(Protocol):
    """What the arena, the Botzone bot and terminal play need from a player."""

    name: str

    def choose_move(self, board: Board) -> Move:
        """A legal move (real frame) for the side to move on `board`; `board` is not modified."""
        ...

    def reset(self) -> None:
        """Forget the previous game."""
        ...

    def observe(self, board: Board, move: Move) -> None:
        """`move` was chosen on `board` (the position before it) and is about to be played."""
        ...


class BasePlayer:
    """No-op `reset` / `observe` hooks, and a check that the game is not over."""

    name = "player"

    def reset(self) -> None:
        """Forget the previous game (nothing to forget here)."""

    def observe(self, board: Board, move: Move) -> None:
        """Ignore moves (nothing to update here)."""

    def close(self) -> None:
        """Release what the player holds once its games are over (nothing here)."""

    @staticmethod
    def _legal_moves(board: Board) -> np.ndarray:
        moves = board.legal_move_array()
        if moves.shape[0] == 0:
            raise PlayerError("the game is over: the side to move has no legal move")
        return moves


class RandomPlayer(BasePlayer):
    """Uniformly random legal moves (seeded)."""

    def __init__(self, seed: int | None = None, name: str = "random") -> None:
        self.name = name
        self._rng = np.random.default_rng(seed)

    def choose_move(self, board: Board) -> Move:
        """A uniformly random legal move."""
        moves = self._legal_moves(board)
        return Move(*moves[int(self._rng.integers(moves.shape[0]))].tolist(), size=board.size)


class GreedyPlayer(BasePlayer):
    """One-ply heuristic: play a winning move if any, else maximise territory and mobility.

    Every legal move is tried at once (one batch call into the engine). After the move, with the
    opponent to move, a square is *mine* if one of my amazons reaches it with one queen move and
    no opponent amazon does, and the other way round; the score is
    (my squares - the opponent's squares) + `mobility_weight` * (squares I reach - squares it
    reaches). Ties are broken at random (seeded).
    """

    def __init__(self, seed: int | None = None, mobility_weight: float = 0.5,
                 name: str = "greedy") -> None:
        self.name = name
        self.mobility_weight = float(mobility_weight)
        self._rng = np.random.default_rng(seed)

    def move_scores(self, board: Board) -> tuple[np.ndarray, np.ndarray]:
        """Canonical legal moves `(K, 3) int32` and their scores `(K,) float64` (wins: +inf)."""
        size = board.size
        root = board.canonical_position()[None]
        moves, _ = engine.legal_moves(root, size=size)
        if moves.shape[0] == 0:
            raise PlayerError("the game is over: the side to move has no legal move")
        children = engine.apply_moves(np.repeat(root, moves.shape[0], axis=0),
                                      np.ascontiguousarray(moves), size=size)
        planes = engine.features(children, num_planes=7, size=size)
        # Children are the opponent's view: plane 3 is its one-move reach, plane 4 is mine.
        theirs = planes[:, 3].reshape(moves.shape[0], size * size) > 0
        mine = planes[:, 4].reshape(moves.shape[0], size * size) > 0
        territory = (mine & ~theirs).sum(axis=1) - (theirs & ~mine).sum(axis=1)
        mobility = mine.sum(axis=1) - theirs.sum(axis=1)
        scores = territory + self.mobility_weight * mobility.astype(np.float64)
        scores[engine.is_terminal(children, size=size)] = np.inf
        return moves, scores

    def choose_move(self, board: Board) -> Move:
        """The best-scoring legal move (a random one among equals)."""
        moves, scores = self.move_scores(board)
        best = np.flatnonzero(scores == scores.max())
        pick = int(best[self._rng.integers(best.shape[0])])
        return Move(*canonical_to_real(moves[pick], board.turn, board.size).tolist(),
                    size=board.size)


@dataclass(frozen=True)
class SearchReport:
    """The last search of an `MCTSPlayer`, in the real frame (for a `hint` command or logs)."""

    moves: list[Move]  # root moves visited or proven, in the search's order of preference
    visit_shares: np.ndarray  # (K,) float32, their share of the root visits
    q_values: np.ndarray  # (K,) float32, each move's mean value (side to move; exact if proven)
    move_proofs: np.ndarray  # (K,) int8, +1 proven win, -1 proven loss, 0 unknown
    move_proof_plies: np.ndarray  # (K,) int16, plies to the end of proven moves
    root_value: float  # value of the position for the side to move, in [-1, 1]
    proven: int  # +1 the side to move has a proven win, -1 a proven loss, 0 unknown
    proof_plies: int  # plies to the end under best play when proven
    principal_variation: list[Move]  # best line, alternating sides, real frame
    simulations: int  # visits below the root (including ones kept from earlier turns)

    def verdict(self) -> str:
        """`"proven win in N plies"`, `"proven loss in N plies"`, or `""` when unproven."""
        if self.proven == 0:
            return ""
        return f"proven {'win' if self.proven > 0 else 'loss'} in {self.proof_plies} plies"

    def format(self, top: int = 5) -> str:
        """A few lines: root value (or proof), the `top` moves with shares and values, the main
        line."""
        headline = f"value {self.root_value:+.3f} after {self.simulations} simulations"
        if self.proven:
            headline += f"; {self.verdict()} for the side to move"
        lines = [headline]
        for move, share, q, proof, plies in zip(self.moves[:top], self.visit_shares[:top],
                                                self.q_values[:top], self.move_proofs[:top],
                                                self.move_proof_plies[:top], strict=False):
            note = f"  {'wins' if proof > 0 else 'loses'} in {plies}" if proof else ""
            lines.append(f"  {move!s:<12} {share:6.1%}  q {q:+.3f}{note}")
        lines.append("line: " + " ".join(str(move) for move in self.principal_variation))
        return "\n".join(lines)


def _report(result: SearchResult, turn: int, size: int) -> SearchReport:
    pv = [Move(*canonical_to_real(move, turn if ply % 2 == 0 else 1 - turn, size).tolist(),
               size=size)
          for ply, move in enumerate(result.principal_variation)]
    shown = (result.visits > 0) | (result.move_proofs != 0)
    return SearchReport(
        moves=[Move(*row, size=size)
               for row in canonical_to_real(result.moves[shown], turn, size).tolist()],
        visit_shares=result.policy[shown],
        q_values=result.q_values[shown],
        move_proofs=result.move_proofs[shown],
        move_proof_plies=result.move_proof_plies[shown],
        root_value=result.root_value,
        proven=result.proven,
        proof_plies=result.proof_plies,
        principal_variation=pv,
        simulations=result.simulations,
    )


class MCTSPlayer(BasePlayer):
    """AlphaZero search with any evaluator; keeps its tree across turns through `observe`.

    The root draws noise (Dirichlet with root="puct", Gumbel with root="gumbel") only when
    `config.root_noise` asks for it (`BatchedSearch.search(explore=...)`); otherwise the player
    plays its strongest move, the same one whatever its seed.

    The search (`search`, an `amazons.mcts.BatchedSearch`) is built for the size of the first
    board the player sees, and built again when a board of another size comes: an evaluator that
    works on any size (uniform priors) plays every size; one tied to a size (`board_size`) only
    that one. Read before any board, `search` is built for the evaluator's size (8 for one that
    works on any size).

    Args:
        evaluator: an `amazons.mcts.Evaluator` (uniform, rollouts, a network).
        config: search parameters; `config.simulations` per move unless `simulations` is given.
        simulations: simulations per move (overrides the config).
        time_budget: seconds per move instead of a simulation count. The search runs in chunks
            sized from the speed of the chunk before, so that it ends at the deadline rather
            than past it: one evaluator round (`config.leaves_per_game` simulations) at least,
            then whole rounds while one more is expected to fit.
        seed: seeds noise and temperature sampling.
        chunk: the most simulations per chunk under a time budget.
        stop_when_full: end a time-budget search as soon as the tree is full at its maximum
            capacity (the Botzone bot, whose tree is sized to its memory limit). Otherwise the
            search goes on: leaves that do not fit are still evaluated and backed up.
    """

    def __init__(self, evaluator: Evaluator, config: SearchConfig | None = None,
                 simulations: int | None = None, time_budget: float | None = None,
                 seed: int | None = None, name: str = "mcts", chunk: int = 64,
                 stop_when_full: bool = False) -> None:
        self.name = name
        self.config = config if config is not None else SearchConfig()
        if simulations is not None and simulations < 1:
            raise PlayerError(f"simulations must be >= 1, got {simulations}")
        if time_budget is not None and not time_budget > 0:
            raise PlayerError(f"time_budget must be > 0 seconds, got {time_budget}")
        self.simulations = self.config.simulations if simulations is None else int(simulations)
        self.time_budget = time_budget
        self.chunk = int(chunk)
        self.stop_when_full = stop_when_full
        self.evaluator = evaluator
        self._seed = seed
        self._search: BatchedSearch | None = None  # built for the first board's size
        self.last_report: SearchReport | None = None
        self.tree_full = False  # the last search found the tree full
        self._tree_valid = False
        self._last_budget_simulations = self.simulations  # a time-budgeted search's size last turn

    def reset(self) -> None:
        """Drop the tree."""
        self._tree_valid = False
        self.last_report = None

    @property
    def search(self) -> BatchedSearch:
        """The search of the last board's size (before any board: the evaluator's size, else
        8)."""
        if self._search is None:
            return self.search_for(getattr(self.evaluator, "board_size", None) or 8)
        return self._search

    def search_for(self, size: int) -> BatchedSearch:
        """The player's search on `size x size` boards: the one it has when it is of that size,
        else a new one (the tree of the other size is dropped).

        Raises:
            PlayerError: the evaluator is tied to another size (its `board_size`); the message
                names the player and both sizes.
        """
        if self._search is not None and self._search.size == size:
            return self._search
        evaluator_size = getattr(self.evaluator, "board_size", None)
        if evaluator_size is not None and evaluator_size != size:
            raise PlayerError(
                f"{self.name} cannot play a {size}x{size} board: its evaluator "
                f"{type(self.evaluator).__name__} serves {evaluator_size}x{evaluator_size} "
                f"boards (build the player for the board, e.g. make_player(spec, board=...))")
        self._search = BatchedSearch(self.evaluator, self.config, num_games=1, seed=self._seed,
                                     size=size)
        self._tree_valid = False
        return self._search

    def _sync_root(self, board: Board) -> BatchedSearch:
        search = self.search_for(board.size)
        position = board.canonical_position()
        if not (self._tree_valid and np.array_equal(search.root_positions[0], position)):
            search.set_roots(position[None])
            self._tree_valid = True
        return search

    def choose_move(self, board: Board) -> Move:
        """Search from `board` (reusing the tree when it is still there) and pick a move.

        Raises:
            PlayerError: the game is over, or the evaluator serves another board size.
        """
        if board.is_game_over():
            raise PlayerError("the game is over: the side to move has no legal move")
        search = self._sync_root(board)
        self.tree_full = False
        if self.time_budget is None:
            self.tree_full = search.search(self.simulations,
                                           explore=self.config.root_noise).overflows > 0
        else:
            self._search_until(time.perf_counter() + self.time_budget)
        canonical = search.select_moves(board.ply)[0]
        self.last_report = _report(search.root_result(0), board.turn, board.size)
        return Move(*canonical_to_real(canonical, board.turn, board.size).tolist(),
                    size=board.size)

    def _search_until(self, deadline: float) -> None:
        """Search in chunks of whole evaluator rounds until the next would end past `deadline`.

        A round (one evaluator batch) costs about the same whatever its number of leaves, so
        chunks are multiples of `leaves_per_game` simulations. Each chunk is sized from the
        seconds per simulation of the chunk before it (the first one also pays for the root's
        expansion and any kernel compilation, which only makes the next chunk smaller) to fit
        the time left with a quarter to spare: the search stops at most about a round and a
        quarter before `deadline`, and passes it only when a chunk runs more than 25% slower
        than the one before. It stops early when the root becomes proven (more simulations would
        add nothing), and, with `stop_when_full`, when a chunk finds the tree full at its maximum
        capacity (`SearchStats.overflows`; `tree_full` is set either way).

        With root="gumbel", sequential halving needs its budget in advance: the first chunk plans
        for as many simulations as the previous time-budgeted turn ran (`simulations` on the
        first turn), and every later chunk replans for the simulations done plus those the time
        left affords at the measured speed.
        """
        round_size = self.config.leaves_per_game
        largest = max(round_size, self.chunk // round_size * round_size)
        simulations = min(round_size, self.chunk)
        planned = max(self._last_budget_simulations, simulations)
        done = 0
        while simulations > 0:
            started = time.perf_counter()
            stats = self.search.search(simulations, planned_simulations=planned,
                                       explore=self.config.root_noise)
            if stats.simulations < simulations:
                return  # the root is proven: more simulations would add nothing
            done += simulations
            self._last_budget_simulations = done
            if stats.overflows:
                self.tree_full = True
                if self.stop_when_full:
                    return  # the tree is at its memory bound: more simulations would add no node
            now = time.perf_counter()
            seconds_per_simulation = max(now - started, 1e-9) / simulations
            affordable = int((deadline - now) / (1.25 * seconds_per_simulation))
            simulations = min(largest, affordable // round_size * round_size)
            planned = done + affordable // round_size * round_size

    def observe(self, board: Board, move: Move) -> None:
        """Move the tree's root along `move` (keeping the subtree) if the tree is at `board`."""
        if not self._tree_valid or self._search is None or self._search.size != board.size:
            return
        if not np.array_equal(self.search.root_positions[0], board.canonical_position()):
            self._tree_valid = False
            return
        canonical = real_to_canonical(np.array(move.as_tuple(), np.int32), board.turn, board.size)
        self.search.advance(0, canonical)


class PolicyPlayer(BasePlayer):
    """Plays the legal move an evaluator's priors rank highest (no search): a network's raw policy.

    Args:
        evaluator: an `amazons.mcts.Evaluator` (a network's; uniform priors would pick the first
            move). One tied to a board size (`board_size`) plays only that size.
    """

    def __init__(self, evaluator: Evaluator, name: str = "policy-net") -> None:
        self.name = name
        self.evaluator = evaluator

    def choose_move(self, board: Board) -> Move:
        """The legal move with the highest prior.

        Raises:
            PlayerError: the game is over, or the evaluator serves another board size.
        """
        size = board.size
        evaluator_size = getattr(self.evaluator, "board_size", None)
        if evaluator_size is not None and evaluator_size != size:
            raise PlayerError(f"{self.name} cannot play a {size}x{size} board: its evaluator "
                              f"serves {evaluator_size}x{evaluator_size} boards")
        position = board.canonical_position()[None]
        moves, offsets = engine.legal_moves(position, size=size)
        if moves.shape[0] == 0:
            raise PlayerError("the game is over: the side to move has no legal move")
        priors, _ = self.evaluator.evaluate(position, moves, offsets)
        return Move(*canonical_to_real(moves[int(np.argmax(priors))], board.turn, size).tolist(),
                    size=size)


class HumanPlayer(BasePlayer):
    """Reads moves from a terminal: algebraic `d8-d4/f6` or Botzone `3 0 3 4 5 2`, on the
    board's size (`d1-d7/g7` on 10x10).

    Commands: `moves` (count and a few legal moves), `hint` (when a hint player is given: its
    search report), `quit` (raises EOFError). Bad input is explained and asked again.

    Args:
        input_fn: reads one line given a prompt (default: `input`).
        output: where the board and messages go (default: stdout).
        hint_player: an `MCTSPlayer` consulted by `hint`.
    """

    def __init__(self, input_fn: Callable[[str], str] = input, output: TextIO | None = None,
                 hint_player: MCTSPlayer | None = None, name: str = "human") -> None:
        self.name = name
        self._input = input_fn
        self._output = output
        self.hint_player = hint_player

    def _say(self, text: str) -> None:
        print(text, file=self._output if self._output is not None else sys.stdout)

    def choose_move(self, board: Board) -> Move:
        """Ask until the user types a legal move."""
        legal = self._legal_moves(board)
        self._say(str(board))
        side = "black" if board.turn == 0 else "white"
        while True:
            text = self._input(f"{side} to move> ").strip()
            if text in ("quit", "exit"):
                raise EOFError("the human player quit")
            if text == "moves":
                sample = ", ".join(str(Move(*row, size=board.size))
                                   for row in legal[:10].tolist())
                self._say(f"{legal.shape[0]} legal moves, e.g. {sample}")
                continue
            if text == "hint":
                if self.hint_player is None:
                    self._say("no hint player configured")
                else:
                    self.hint_player.choose_move(board)
                    self._say(self.hint_player.last_report.format())
                continue
            try:
                move = board.parse_move(text)
            except NotationError as error:
                example = Move(*legal[0].tolist(), size=board.size)
                self._say(f"{error}; type a move like {example} or {example.to_botzone()}, or "
                          "'moves', 'hint', 'quit'")
                continue
            if not board.is_legal(move):
                self._say(f"{move} is not legal here")
                continue
            return move


def predicted_territory(evaluator: object, board: Board) -> float | None:
    """Black's territory lead at the end of the game, as the evaluator's ownership head sees it.

    The sum of the predicted owners (+1 Black, -1 White, between them an expectation) over every
    square that is not an arrow now: the expected count of squares Black will own minus White's.
    Amazons count for their side in the target, four each, so they cancel in the balance.

    Args:
        evaluator: any evaluator; only one with `has_ownership` true and an `ownership(positions)`
            method answers (a network with the ownership head).
        board: the position.

    Returns:
        The balance (positive: Black leads), or None when the evaluator has no ownership head.
    """
    if not getattr(evaluator, "has_ownership", False):
        return None
    position = board.canonical_position()
    ownership = np.asarray(evaluator.ownership(position[None]), dtype=np.float64)[0]
    words = position.shape[0] // 3  # bitboards of `words` uint64 each: mine, theirs, arrows
    arrows = np.unpackbits(position[2 * words:].astype("<u8").view(np.uint8),
                           bitorder="little")[:board.num_squares].astype(bool)
    balance = float(ownership[~arrows].sum())  # canonical frame: + is the side to move's
    return balance if board.turn == BLACK else -balance


def describe_territory(balance: float) -> str:
    """`"net territory: Black +5.2"`: the side `balance` (Black's lead) favours, and by how much."""
    leader = BLACK if balance >= 0 else WHITE
    return f"net territory: {COLOR_NAMES[leader].capitalize()} +{abs(balance):.1f}"
