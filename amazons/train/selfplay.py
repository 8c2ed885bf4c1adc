"""Self-play: actor processes that play many games at once against themselves.

Each actor runs a `BatchedSearch` over G games in lockstep and evaluates leaves through its
`InferenceClient` (one slot of the shared-memory server), so the network always sees batches of
up to G x K leaves per actor, merged across actors by the server. Every finished game becomes
samples (canonical position, sparse visit counts, outcome z for the side to move, the ownership
target of `final_ownership`) and a game record
(moves in Botzone coordinates); the actor sends them to the parent, which persists them as replay
chunks as they arrive.

Playout cap randomization (KataGo, Wu 2019, section 3.1): with `full_search_prob` < 1, each move
gets the full search (`search.simulations`, root noise) with that probability and is recorded
as a sample; the other moves get `fast_simulations` without root noise and are played, not
recorded (as KataGo: the learner, the replay window and the step budget see full searches only).
A game that ends without any full search keeps its last position as a value-only sample (policy
weight 0, no label), since a replay chunk holds no empty game. Full and fast searches of one
round run in the same batches (`BatchedSearch.search` takes per-game counts).

Policy surprise weighting (KataGo's `docs/KataGoMethods.md`, from its g170 run): with
`policy_surprise_weight` w > 0, each finished game's full-searched positions share their total
sampling weight so that a part 1 - w is spread evenly and a part w in proportion to each position's
policy surprise, the KL divergence from the network's root prior to the policy target
(`surprise_weights`): the replay window draws the positions where the search most corrected the
network more often, at full gradient weight, and the game's total weight, so the learner's step
budget, stays the same.

Boards: every game starts from the run's board (`amazons.boards.BoardSpec`, botzone8 unless
given: `SelfPlayWorkers(..., board=)`, `play_games(..., board=)`), with the side it names first
(White on standard10); the search, the canonical and real moves, adjudication and the ownership
target all work on that board's size, and the samples carry the board.

The parent (`run_selfplay`) watches the actors and the server: a dead actor or a failed server
stops the run with `SelfPlayError`, terminating every process and unlinking every segment.

Imports the engine, board, symmetry, mcts, inference, replay and records modules; never torch.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import multiprocessing as mp
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import numpy as np

from amazons.board import BLACK, WHITE, Adjudication, Board, Move
from amazons.boards import BoardSpec, board_spec
from amazons.core.processes import (
    TERMINATE_GRACE_S,
    apply_niceness,
    check_niceness,
    end_processes,
    process_context,
)
from amazons.core.queue_reader import QueueMessageError, QueueReader
from amazons.mcts import BatchedSearch, SearchConfig, SearchResult
from amazons.players.records import GameRecord
from amazons.search_targets import improved_policy, proof_policy
from amazons.serving.server import ClientHandle, InferenceClient, InferenceError, InferenceServer
from amazons.symmetry import canonical_to_real
from amazons.train.replay import GameSamples


class SelfPlayError(RuntimeError):
    """An actor or the inference server failed during self-play; the message says which."""


# What the forkserver that forks the actors imports for them: the server's client, this module,
# and the search kernels loaded (`amazons.mcts.warm_up`, called there once): each actor then
# starts with them in memory instead of loading them from Numba's cache (about a second of CPU).
SELFPLAY_PRELOAD = ("amazons.serving.server", "amazons.train.selfplay", "amazons.mcts:warm_up")
POLICY_TARGETS = ("completed_q", "visits")
PLAYOUT_CAP_STREAM = 0x9C4F  # tags the generator that draws full or fast searches
ENDLESS_STREAM = 0xE0D1  # tags the seeds of endless tasks (apart from the per-iteration tasks')


def self_play_search_config() -> SearchConfig:
    """Search settings for self-play: root noise on, proportional sampling for the opening plies."""
    return SearchConfig(simulations=200, root_noise=True, temperature_moves=12, leaves_per_game=8)


@dataclass(frozen=True)
class SelfPlayConfig:
    """How self-play runs; frozen and picklable, passed to every actor."""

    num_actors: int = 2  # actor processes (each with its own slot on the server)
    games_in_parallel: int = 16  # G: games each actor searches in lockstep
    search: SearchConfig = field(default_factory=self_play_search_config)  # the search per move
    # each actor sleeps a random 0..this before starting (desynchronizes the actors)
    start_jitter_s: float = 0.5
    seed: int = 0  # base seed; actor i of iteration t uses a stream derived from (seed, t, i)
    policy_target: str = "completed_q"  # "completed_q" (search_targets.improved_policy) or "visits"
    # improved_policy's sigma constants; with search.root="gumbel" they must equal the search's
    # c_visit / c_scale (the target is then the policy the halving ranks moves by)
    target_c_visit: float = 50.0
    target_c_scale: float = 0.1
    # completed-Q target with root="puct" (improved_policy's switches, off by default): moves
    # with fewer visits than this count as unvisited (Q = v_mix); 1 = every visited move counts
    target_min_visits: int = 1
    # completed-Q target with root="puct": a visited move's Q is shrunk toward v_mix as if v_mix
    # had this many visits, q' = (n q + m v_mix) / (n + m); 0 = off
    target_q_prior_visits: float = 0.0
    # KataGo's policy target pruning: the target counts each root move's visits less its forced
    # playouts that fail the PUCT check (amazons.search_targets.prune_forced_visits); needs
    # search.forced_playouts_k > 0
    prune_forced_playouts: bool = False
    adjudicate: bool = True  # end a game once its separated regions decide it (exact result)
    # playout cap randomization: share of moves searched in full (recorded)
    full_search_prob: float = 1.0
    fast_simulations: int = 16  # simulations of the other moves (no root noise, not recorded)
    # KataGo's policy surprise weighting: the share of a game's sampling weight given in proportion
    # to each position's KL(target || prior) (`surprise_weights`); 0 = uniform (off), KataGo 0.5
    policy_surprise_weight: float = 0.0
    # added to each actor process's niceness (os.nice) when it starts: > 0 lets a busier process
    # on the same cores (the learner) run first; 0 leaves it as its parent's
    nice: int = 0

    def __post_init__(self) -> None:
        if self.num_actors < 1 or self.games_in_parallel < 1:
            raise ValueError("num_actors and games_in_parallel must be >= 1")
        check_niceness(self.nice)
        if not 0.0 < self.full_search_prob <= 1.0:
            raise ValueError(f"full_search_prob must be in (0, 1], got {self.full_search_prob!r}")
        if (self.full_search_prob < 1.0
                and not 1 <= self.fast_simulations <= self.search.simulations):
            raise ValueError(f"fast_simulations must be in 1..search.simulations "
                             f"({self.search.simulations}) with a playout cap, "
                             f"got {self.fast_simulations!r}")
        if self.policy_target not in POLICY_TARGETS:
            raise ValueError(f"policy_target must be one of {POLICY_TARGETS}, "
                             f"got {self.policy_target!r}")
        if not (self.target_c_visit >= 0 and self.target_c_scale >= 0):
            raise ValueError("target_c_visit and target_c_scale must be >= 0")
        if not (isinstance(self.target_min_visits, (int, np.integer))
                and not isinstance(self.target_min_visits, bool)
                and self.target_min_visits >= 1):
            raise ValueError(f"target_min_visits must be an integer >= 1, "
                             f"got {self.target_min_visits!r}")
        if not (np.isfinite(self.target_q_prior_visits) and self.target_q_prior_visits >= 0):
            raise ValueError(f"target_q_prior_visits must be a finite number >= 0, "
                             f"got {self.target_q_prior_visits!r}")
        if not isinstance(self.prune_forced_playouts, (bool, np.bool_)):
            raise ValueError(f"prune_forced_playouts must be a bool, "
                             f"got {self.prune_forced_playouts!r}")
        if self.prune_forced_playouts and not self.search.forced_playouts_k > 0:
            raise ValueError("prune_forced_playouts prunes the forced playouts of the search: set "
                             "search.forced_playouts_k > 0 (KataGo uses 2), "
                             "or prune_forced_playouts=False")
        if self.search.root == "gumbel":
            for name, off in (("target_min_visits", 1), ("target_q_prior_visits", 0.0)):
                if getattr(self, name) != off:
                    raise ValueError(f"{name} ({getattr(self, name)!r}) applies to the PUCT "
                                     f"root's target; with search.root='gumbel' the target is "
                                     f"the halving's own policy (set it to {off})")
            for target, searched in (("target_c_visit", "c_visit"), ("target_c_scale", "c_scale")):
                if getattr(self, target) != getattr(self.search, searched):
                    raise ValueError(
                        f"{target} ({getattr(self, target)!r}) differs from search.{searched} "
                        f"({getattr(self.search, searched)!r}) with search.root='gumbel': "
                        f"the Gumbel root's policy target is the completed-Q policy its "
                        f"halving uses; set both")
        if self.start_jitter_s < 0:
            raise ValueError(f"start_jitter_s must be >= 0, got {self.start_jitter_s}")
        if not 0.0 <= self.policy_surprise_weight <= 1.0:
            raise ValueError(f"policy_surprise_weight must be in [0, 1], "
                             f"got {self.policy_surprise_weight!r}")

    def policy_label(self, result: SearchResult) -> np.ndarray:
        """The training target over `result.moves` (every legal move), `(L,) float32` summing to 1.

        A proven root's target is its proof for both kinds (`search_targets.proof_policy`: the
        shortest wins share the mass, or the longest resistances when every move loses); the
        search stops at such a root, so its visits say nothing. Otherwise `completed_q` covers
        every legal move (unvisited ones through the mixed value) and `visits` is zero on the
        moves the search did not visit.

        With `prune_forced_playouts`, both kinds read the visits less the pruned forced playouts
        (`result.pruned_visits`, where forced playouts ran at the root): a move pruned to no
        visit counts as unvisited (its completed Q is the mixed value), and the reduced counts
        weight the mixed value and the Q shrinkage (`target_q_prior_visits`) and decide
        `target_min_visits`.
        """
        if result.proven != 0:
            return proof_policy(result)
        if self.prune_forced_playouts and result.pruned_visits is not None:
            result = dataclasses.replace(result, visits=result.pruned_visits)
        if self.policy_target == "visits":
            return result.policy
        return improved_policy(result, self.target_c_visit, self.target_c_scale,
                               min_visits=self.target_min_visits,
                               q_prior_visits=self.target_q_prior_visits)


def policy_surprise(target: np.ndarray, prior: np.ndarray) -> float:
    """KL(target || prior) in nats over one root's moves: how much the search's policy target
    differs from the network's prior there (terms where the target is 0 add nothing; a prior
    below 1e-8 counts as 1e-8, so a move the network gave nothing costs a bounded surprise).

    Args:
        target: `(L,)` the policy target (sums to 1).
        prior: `(L,)` the network's prior over the same moves (`SearchResult.priors`).
    """
    kept = target > 0
    share = target[kept].astype(np.float64)
    prior_share = np.maximum(prior[kept].astype(np.float64), 1e-8)
    return max(float(np.sum(share * (np.log(share) - np.log(prior_share)))), 0.0)


def surprise_weights(surprise: np.ndarray, counted: np.ndarray, share: float) -> np.ndarray:
    """Sampling weights of one game's positions (KataGo's policy surprise weighting).

    Of the `n` counted positions' total weight `n`, a part `1 - share` is spread evenly and a part
    `share` in proportion to `surprise`: weight `(1 - share) + share * n * s_i / sum(s)`. Positions
    not counted (value-only samples) keep weight 1, and so does every position when no counted
    position has any surprise.

    Args:
        surprise: `(T,)` each position's `policy_surprise`, >= 0.
        counted: `(T,) bool`, the positions that share the weight (those with a policy target).
        share: in [0, 1]; 0 gives every position weight 1.

    Returns:
        `(T,) float32`; the counted positions' weights sum to their number.
    """
    weights = np.ones(surprise.shape[0], np.float32)
    total = float(surprise[counted].sum())
    if share > 0 and total > 0:
        weights[counted] = (1.0 - share) + share * counted.sum() * surprise[counted] / total
    return weights


def final_ownership(board: Board) -> tuple[np.ndarray, np.ndarray]:
    """The ownership target of a finished (or adjudicated) game, from its last position `board`.

    Every square goes to the side whose amazons reach it in fewer queen moves through empty
    squares (`Board.territory`); a square holding an amazon belongs to that amazon's side (both
    sides always have four, so the amazons add nothing to the balance); a square both reach
    equally soon, or neither reaches, is neutral. Arrows are masked out: the loss ignores them.

    Returns:
        `(ownership (N*N,) int8, mask (N*N,) bool)`, real frame: ownership +1 Black's, -1 White's,
        0 neutral or an arrow; mask True on every square but the arrows.
    """
    ownership = board.territory().copy()
    ownership[board.amazons(BLACK)] = 1
    ownership[board.amazons(WHITE)] = -1
    mask = np.ones(board.num_squares, np.bool_)
    mask[board.arrows()] = False
    ownership[~mask] = 0
    return ownership, mask


@dataclass(frozen=True)
class ActorTask:
    """One actor's share of an iteration, or (`num_games` None) an endless task: play on,
    starting a new game in each lane as soon as one ends, until told to stop."""

    actor_id: int
    num_games: int | None
    config: SelfPlayConfig
    seed: int
    player_name: str = "selfplay"
    board: BoardSpec = field(default_factory=board_spec)  # the start of every game


# What the owner may send an actor during an endless task, besides the next task or None (exit).
PAUSE = "pause"  # hold still after the current search round (no CPU, no requests) until RESUME
RESUME = "resume"
STOP = "stop"  # end the endless task now; the games in progress are dropped
FINISH = "finish"  # start no new game; the endless task ends once the games in progress are over


@dataclass
class _GameInProgress:
    board: Board = field(default_factory=Board)  # at the start of the run's board
    adjudication: Adjudication | None = None  # set when the game was decided before its end
    positions: list[np.ndarray] = field(default_factory=list)
    label_moves: list[np.ndarray] = field(default_factory=list)
    label_visits: list[np.ndarray] = field(default_factory=list)
    label_policy: list[np.ndarray] = field(default_factory=list)
    policy_weight: list[float] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    played: list[np.ndarray] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # weights version of each position's search
    # each position's policy_surprise (0 unsearched)
    surprise: list[float] = field(default_factory=list)
    last_fast: tuple | None = None  # the latest fast search's record() arguments, unrecorded

    def record(self, position: np.ndarray, moves: np.ndarray, visits: np.ndarray,
               policy: np.ndarray, weight: float, version: int, turn: int, played: np.ndarray,
               surprise: float = 0.0) -> None:
        """Keep one position as a sample: its label (canonical moves, raw visits, target), policy
        weight, weights version, side to move, the move played there (real frame) and its policy
        surprise."""
        self.positions.append(position)
        self.label_moves.append(moves)
        self.label_visits.append(visits)
        self.label_policy.append(policy)
        self.policy_weight.append(weight)
        self.versions.append(version)
        self.turns.append(turn)
        self.played.append(played)
        self.surprise.append(surprise)

    @property
    def winner(self) -> int | None:
        """The winner: by the rules at the end, or by adjudication; None while undecided."""
        if self.adjudication is not None:
            return self.adjudication.winner
        return self.board.winner()

    def samples(self, surprise_share: float = 0.0) -> GameSamples:
        """The finished game's samples; z = +1 exactly where the side to move went on to win;
        sample weights by `surprise_weights` with `surprise_share` (0: all 1)."""
        winner = self.winner
        if winner is None:
            raise SelfPlayError("samples requested for a game that is not over")
        counts = np.array([moves.shape[0] for moves in self.label_moves], dtype=np.int64)
        ownership, mask = final_ownership(self.board)
        policy_weight = np.array(self.policy_weight, dtype=np.float32)
        return GameSamples(
            positions=np.stack(self.positions).astype(np.uint64),
            label_moves=np.concatenate(self.label_moves).astype(np.int32),
            label_visits=np.concatenate(self.label_visits).astype(np.int32),
            label_policy=np.concatenate(self.label_policy).astype(np.float32),
            label_offsets=np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts)]),
            z=np.where(np.array(self.turns) == winner, 1, -1).astype(np.int8),
            played_moves=np.stack(self.played).astype(np.int32),
            game_offsets=np.array([0, len(self.positions)], dtype=np.int64),
            policy_weight=policy_weight,
            ownership=ownership[None],
            ownership_mask=mask[None],
            ownership_sign=np.where(np.array(self.turns) == BLACK, 1, -1).astype(np.int8),
            sample_weight=surprise_weights(np.array(self.surprise, np.float64), policy_weight > 0,
                                           surprise_share),
            board=self.board.start,
        )


def play_games(
    search: BatchedSearch,
    num_games: int | None,
    on_game: Callable[..., None],
    label: Callable[[SearchResult], np.ndarray] | None = None,
    adjudicate: bool = True,
    full_search_prob: float = 1.0,
    fast_simulations: int = 0,
    rng: np.random.Generator | None = None,
    keep_playing: Callable[[], bool] | None = None,
    start_games: Callable[[], bool] | None = None,
    weights_version: Callable[[], int] | None = None,
    stats: dict[str, float] | None = None,
    policy_surprise_weight: float = 0.0,
    board: BoardSpec | None = None,
) -> dict[str, float]:
    """Play self-play games with `search` (G games at a time) and report each.

    A game that ends frees its lane and a new game starts there at once, while the other lanes
    go on, so every search round evaluates G games' leaves until the last games of a finite run.

    Args:
        search: a BatchedSearch over G games; its evaluator is used for every leaf.
        num_games: games to finish in total; None plays on until `keep_playing` says stop.
        on_game: called with (samples, moves, adjudication) for every finished game;
            `adjudication` is None for a game played to its end. With `weights_version`, also
            with the keyword `versions`: `(T,) int64`, the weights version each position was
            searched with.
        label: the policy target of a root's search result (`SelfPlayConfig.policy_label`);
            default: the completed-Q target with the search's `c_visit` / `c_scale`, the proof
            at proven roots.
        adjudicate: end a game as soon as `Board.adjudicate` decides it; its samples take the
            exact result.
        full_search_prob: playout cap randomization: each move is a full search
            (`search.config.simulations`, recorded as a sample) with this probability, else a
            fast one (`fast_simulations`, no root noise, played but not recorded; a game with no
            full search keeps its last position as a value-only sample, policy weight 0).
        fast_simulations: simulations of a fast search.
        rng: draws full or fast per move (default: a fixed stream); unused when the
            probability is 1.
        keep_playing: asked before every search round; False stops at once, leaving the games
            in progress unfinished (and unreported).
        start_games: with `num_games` None, asked when a game ends: False leaves its lane empty,
            so the run ends once the games in progress have finished (default: always True).
        weights_version: the version of the weights the evaluator answered with last (e.g.
            `InferenceClient.weights_version`), recorded per position.
        stats: counters to update in place as the games go (the same keys as the result), so
            that a caller can read them while an endless run plays on.
        policy_surprise_weight: the share of each game's sampling weight given by policy
            surprise (`surprise_weights`; 0: every sample weight 1).
        board: the start of every game (botzone8 when None); its size must be the search's.

    Returns:
        Counters: games, plies (moves played), positions (samples recorded), full searches
        (positions with a policy target), simulations, leaves evaluated, games adjudicated,
        policy surprise (the sum over full searches of KL(target || prior), nats), seconds.

    Raises:
        ValueError: `full_search_prob` outside (0, 1], or below 1 with `fast_simulations` < 1;
            `num_games` None without `keep_playing`; a `board` of another size than the search's.
    """
    if not 0.0 < full_search_prob <= 1.0 or (full_search_prob < 1.0 and fast_simulations < 1):
        raise ValueError(f"full_search_prob must be in (0, 1] and fast_simulations >= 1 "
                         f"with a playout cap, got {full_search_prob!r} and {fast_simulations!r}")
    if num_games is None and keep_playing is None:
        raise ValueError("num_games None (play on) needs keep_playing to say when to stop")
    start = board_spec(board)
    if start.size != search.size:
        raise ValueError(f"board {start.label()!r} is {start.size}x{start.size}, the search "
                         f"plays {search.size}x{search.size}")
    size = start.size
    if label is None:
        label = SelfPlayConfig(search=search.config, target_c_visit=search.config.c_visit,
                               target_c_scale=search.config.c_scale).policy_label
    started = time.perf_counter()
    cap_rng = rng if rng is not None else np.random.default_rng(PLAYOUT_CAP_STREAM)
    counters = stats if stats is not None else {}
    for key in ("games", "plies", "positions", "full_searches", "simulations", "leaves_evaluated",
                "adjudicated", "policy_surprise"):
        counters[key] = 0.0
    slots = search.num_games if num_games is None else min(search.num_games, num_games)
    games = {slot: _GameInProgress(Board(start=start)) for slot in range(slots)}
    search.set_roots(np.stack([game.board.canonical_position() for game in games.values()]),
                     list(games))
    started_games = slots
    while games and (keep_playing is None or keep_playing()):
        active = np.array(sorted(games), dtype=np.int32)
        full = _full_searches(cap_rng, active.shape[0], full_search_prob)
        round_stats = search.search(np.where(full, search.config.simulations, fast_simulations),
                                    games=active, explore=full)
        counters["simulations"] += round_stats.simulations
        counters["leaves_evaluated"] += round_stats.leaves_evaluated
        version = weights_version() if weights_version is not None else 0
        plies = np.array([games[slot].board.ply for slot in active.tolist()])
        chosen = search.select_moves(plies, games=active)
        for slot, move, is_full in zip(active.tolist(), chosen, full.tolist(), strict=True):
            game = games[slot]
            real = canonical_to_real(move, game.board.turn, size)
            if is_full:
                result = search.root_result(slot)
                probabilities = label(result)
                kept = probabilities > 0  # the visits target leaves unvisited moves out
                surprise = policy_surprise(probabilities, result.priors)
                game.record(search.root_positions[slot], result.moves[kept], result.visits[kept],
                            probabilities[kept], 1.0, version, game.board.turn, real, surprise)
                counters["full_searches"] += 1
                counters["policy_surprise"] += surprise
                counters["positions"] += 1
            else:
                game.last_fast = (search.root_positions[slot], np.zeros((0, 3), np.int32),
                                  np.zeros(0, np.int32), np.zeros(0, np.float32), 0.0, version,
                                  game.board.turn, real)
            game.board.push(Move(*real.tolist(), size=size))
            counters["plies"] += 1
            if adjudicate and not game.board.is_game_over():
                game.adjudication = game.board.adjudicate()
            if game.winner is None:
                search.advance(slot, move)
                continue
            if not game.positions:  # no full search: the last position, for its value target
                game.record(*game.last_fast)
                counters["positions"] += 1
            counters["games"] += 1
            counters["adjudicated"] += game.adjudication is not None
            samples = game.samples(policy_surprise_weight)
            if weights_version is None:
                on_game(samples, game.board.move_stack, game.adjudication)
            else:
                on_game(samples, game.board.move_stack, game.adjudication,
                        versions=np.array(game.versions, dtype=np.int64))
            if ((started_games < num_games) if num_games is not None
                    else (start_games is None or start_games())):
                games[slot] = _GameInProgress(Board(start=start))
                search.set_roots(games[slot].board.canonical_position(), [slot])
                started_games += 1
            else:
                del games[slot]
    counters["seconds"] = time.perf_counter() - started
    return dict(counters)


def _full_searches(rng: np.random.Generator, count: int, probability: float) -> np.ndarray:
    """`(count,) bool`: which of `count` moves get the full search (all of them at
    probability 1)."""
    if probability >= 1.0:
        return np.ones(count, np.bool_)
    return rng.random(count) < probability


def actor_main(handle: ClientHandle, actor_id: int, config: SelfPlayConfig, tasks: Connection,
               results: mp.Queue) -> None:
    """Actor process entry point: play the games each task asks for, until a None task.

    A task is `ActorTask`; for each, the actor sends ("game", actor_id, samples, record, info)
    per finished game (`info`: the weights version of each position, whether it was
    adjudicated, and the actor's simulations and leaves evaluated so far in this task), then
    ("done", actor_id, stats), or ("error", actor_id, text) if it fails and then exits. During
    an endless task it reads PAUSE, RESUME, STOP and FINISH between search rounds. `tasks` is the
    receiving end of a pipe whose only sending end the owner holds, so an owner that dies
    (killed, or stopped by a signal without cleaning up) ends the actor too. A Ctrl-C (SIGINT to
    the process group) ends it with exit status 130 and no traceback: the owner says the stop.
    """
    apply_niceness(config.nice)
    client = InferenceClient(handle)
    pipe = _TaskPipe(tasks)
    search: BatchedSearch | None = None
    try:
        while (task := pipe.next_task()) is not None:
            rng = np.random.default_rng(task.seed)
            time.sleep(float(rng.uniform(0, config.start_jitter_s)))
            if search is None or search.size != task.board.size:
                search = BatchedSearch(client, config.search, config.games_in_parallel,
                                       seed=task.seed, size=task.board.size)
            counters: dict[str, float] = {}

            def send(samples: GameSamples, moves: list[Move], adjudication: Adjudication | None,
                     versions: np.ndarray, task: ActorTask = task,
                     counters: dict[str, float] = counters) -> None:
                extra = {} if adjudication is None else {"Termination": adjudication.describe()}
                record = GameRecord.from_game(
                    moves, task.player_name, task.player_name, event="selfplay",
                    winner=None if adjudication is None else adjudication.winner,
                    start=task.board, Actor=str(actor_id), Weights=str(client.weights_version),
                    **extra,
                )
                info = {"versions": versions, "adjudicated": adjudication is not None,
                        "simulations": counters["simulations"],
                        "leaves_evaluated": counters["leaves_evaluated"]}
                results.put(("game", actor_id, samples, record, info))

            trips, waited = client.round_trips, client.round_trip_seconds
            stats = play_games(search, task.num_games, send, task.config.policy_label,
                               adjudicate=task.config.adjudicate,
                               full_search_prob=task.config.full_search_prob,
                               fast_simulations=task.config.fast_simulations,
                               rng=np.random.default_rng([task.seed, PLAYOUT_CAP_STREAM]),
                               keep_playing=pipe.keep_playing if task.num_games is None else None,
                               start_games=pipe.starts_games,
                               weights_version=lambda: client.weights_version, stats=counters,
                               policy_surprise_weight=task.config.policy_surprise_weight,
                               board=task.board)
            stats["round_trips"] = float(client.round_trips - trips)
            stats["round_trip_seconds"] = client.round_trip_seconds - waited
            results.put(("done", actor_id, stats))
    except InferenceError as error:
        results.put(("error", actor_id, str(error)))
    except Exception:
        results.put(("error", actor_id, traceback.format_exc()))
    except KeyboardInterrupt:  # Ctrl-C to the process group: the owner reports the stop
        raise SystemExit(128 + signal.SIGINT) from None
    finally:
        client.close()
        owner = mp.parent_process()
        if owner is not None and not owner.is_alive():
            results.cancel_join_thread()  # nobody reads the queue any more: do not wait to flush it


class _TaskPipe:
    """An actor's end of its task pipe: tasks, and the PAUSE / RESUME / STOP / FINISH of an
    endless task.

    A closed pipe (the owner is gone, or sent None) ends the actor."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.closed = False
        self.finishing = False  # FINISH came: no new games in this endless task

    def _receive(self) -> object:
        try:
            message = self.connection.recv()
        except (EOFError, OSError):
            message = None
        self.closed = message is None
        return message

    def next_task(self) -> ActorTask | None:
        """The next task, or None when asked to stop or when the owner's end of the pipe is gone."""
        while not self.closed:
            message = self._receive()
            if isinstance(message, ActorTask):
                self.finishing = False
                return message
            # otherwise None, or a PAUSE / RESUME / STOP / FINISH that came after its task ended
        return None

    def keep_playing(self) -> bool:
        """Between search rounds of an endless task: False on STOP (or exit); waits while paused."""
        paused = False
        while paused or self.connection.poll():
            message = self._receive()
            if message is None or message == STOP:
                return False
            self.finishing = self.finishing or message == FINISH
            paused = message == PAUSE or (paused and message == FINISH)
        return True

    def starts_games(self) -> bool:
        """Whether a lane whose game ended starts another (False once FINISH came)."""
        return not self.finishing


@dataclass
class FinishedGame:
    """A game an actor finished during an endless task, as the owner receives it."""

    actor_id: int
    samples: GameSamples
    record: GameRecord
    versions: np.ndarray  # (T,) int64, the weights version each position was searched with
    adjudicated: bool  # ended by adjudication before the rules' end
    # the actor's simulations since its endless task began, when it sent this game
    simulations: float
    leaves_evaluated: float  # likewise, leaves evaluated


@dataclass
class SelfPlayReport:
    """What one self-play run produced."""

    games: int = 0
    positions: int = 0  # samples recorded (with a playout cap: the full searches)
    full_searches: int = 0  # positions searched in full (with a policy target)
    plies: int = 0  # moves played, fast searches included
    simulations: int = 0
    leaves_evaluated: int = 0
    adjudicated: int = 0  # games ended early by adjudication (exact result)
    seconds: float = 0.0
    actor_stats: list[dict[str, float]] = field(default_factory=list)
    server_stats: dict[str, float] = field(default_factory=dict)

    @property
    def positions_per_s(self) -> float:
        return self.positions / max(self.seconds, 1e-9)

    @property
    def simulations_per_s(self) -> float:
        return self.simulations / max(self.seconds, 1e-9)

    @property
    def evals_per_s(self) -> float:
        return self.leaves_evaluated / max(self.seconds, 1e-9)


def split_games(total: int, actors: int) -> list[int]:
    """Share `total` games among `actors` as evenly as possible (earlier actors get the extra)."""
    return [total // actors + (1 if index < total % actors else 0) for index in range(actors)]


class SelfPlayWorkers:
    """Actor processes that stay up for a whole run, each on its own slot of `server`.

    Args:
        server: a started InferenceServer with at least `config.num_actors` slots.
        config: self-play settings (fixed for the workers' lifetime).
        context: multiprocessing context (`amazons.core.processes.process_context` by default).
        board: the start of every game (botzone8 when None), of the server's board size.

    Raises:
        ValueError: the server has too few slots, or serves another board size.

    Two ways to use them: `play(...)` once per iteration (every actor plays its share of the
    games, then waits), or `start(...)` once, then `collect(...)` the games as they finish,
    `pause()` / `resume()` to hold the actors back, and `finish()` (the games in progress are
    played out and handed over) or `stop()` (they are dropped): endless tasks, in which an
    actor starts a new game in a lane as soon as one ends, so its batches stay full. `close()`
    at the end (or a `with` block).
    """

    def __init__(
        self,
        server: InferenceServer,
        config: SelfPlayConfig,
        context: mp.context.BaseContext | None = None,
        board: BoardSpec | None = None,
    ) -> None:
        if server.num_clients < config.num_actors:
            raise ValueError(f"the server has {server.num_clients} slots "
                             f"for {config.num_actors} actors")
        self.server = server
        self.config = config
        self.board = board_spec(board)
        if server.board_size != self.board.size:
            raise ValueError(f"the server serves {server.board_size}x{server.board_size} "
                             f"positions, the board {self.board.label()!r} is "
                             f"{self.board.size}x{self.board.size}")
        context = context or process_context(SELFPLAY_PRELOAD)
        self._results: mp.Queue = context.Queue()
        # Read as raw bytes only: an actor killed while writing leaves half a message, on which
        # `Queue.get` would wait for ever (this process holds the pipe's write end too).
        self._reader = QueueReader(self._results)
        self._received: collections.deque = collections.deque()
        self._tasks: list[Connection] = []
        self._actors = []
        for actor_id in range(config.num_actors):
            receiver, sender = context.Pipe(duplex=False)
            self._actors.append(server.start_actor(actor_id, actor_main,
                                                   (actor_id, config, receiver, self._results)))
            receiver.close()  # the actor holds its own copy; the sending end stays here alone
            self._tasks.append(sender)
        self._endless: set[int] = set()  # actors playing an endless task
        self._winding_down = False  # FINISH sent to the endless tasks
        self._suspects: dict[int, float] = {}
        self._paused_since: float | None = None
        self._paused_seconds = 0.0

    def play(
        self,
        num_games: int,
        on_games: Callable[[list[GameSamples], list[GameRecord]], None],
        iteration: int = 0,
        progress: Callable[[SelfPlayReport], None] | None = None,
        poll_s: float = 0.2,
    ) -> SelfPlayReport:
        """Play `num_games` games shared among the actors.

        Finished games are handed to `on_games(samples, records)` in groups, as soon as the
        result queue runs dry, so a crash loses at most the games still being played.

        Raises:
            SelfPlayError: if an actor dies or reports an error, or the server fails; every actor
                process is terminated before it is raised.
        """
        seeds = np.random.SeedSequence([self.config.seed, iteration]).spawn(self.config.num_actors)
        busy: set[int] = set()
        for actor_id, share in enumerate(split_games(num_games, self.config.num_actors)):
            if share:
                self._tasks[actor_id].send(ActorTask(actor_id, share, self.config,
                                                     int(seeds[actor_id].generate_state(1)[0]),
                                                     board=self.board))
                busy.add(actor_id)
        report = SelfPlayReport()
        started = time.perf_counter()
        suspects: dict[int, float] = {}
        pending_samples: list[GameSamples] = []
        pending_records: list[GameRecord] = []
        try:
            while busy:
                message = self._next_message(poll_s)
                if message is not None:
                    kind, actor_id = message[0], message[1]
                    if kind == "game":
                        pending_samples.append(message[2])
                        pending_records.append(message[3])
                        report.games += 1
                        report.positions += message[2].num_positions
                    elif kind == "done":
                        busy.discard(actor_id)
                        report.actor_stats.append(message[2])
                    else:
                        _check_server(self.server)  # the root cause, when the server stopped first
                        raise SelfPlayError(f"actor {actor_id} failed: {message[2]}")
                if pending_samples and (message is None or not self._message_ready()):
                    on_games(pending_samples, pending_records)
                    pending_samples, pending_records = [], []
                if message is None:
                    _check_server(self.server)
                    _check_actors(self._actors, busy, suspects)
                report.seconds = time.perf_counter() - started
                if progress is not None and message is not None and message[0] == "game":
                    progress(report)
            if pending_samples:
                on_games(pending_samples, pending_records)
        except BaseException:
            self.terminate()
            raise
        report.seconds = time.perf_counter() - started
        report.simulations = int(sum(stats["simulations"] for stats in report.actor_stats))
        report.full_searches = int(sum(stats["full_searches"] for stats in report.actor_stats))
        report.plies = int(sum(stats["plies"] for stats in report.actor_stats))
        report.leaves_evaluated = int(sum(stats["leaves_evaluated"]
                                          for stats in report.actor_stats))
        report.adjudicated = int(sum(stats["adjudicated"] for stats in report.actor_stats))
        return report

    @property
    def semaphore_names(self) -> list[str]:
        """The `/dev/shm` entries (`sem.mp-...`) of the named semaphores behind the actors'
        result queue. Multiprocessing's resource tracker unlinks them if this process dies, but
        not when it is killed together with its process group (as Ray ends a node actor): such an
        owner hands them to a helper that outlives it (`amazons.distributed.node`)."""
        queue_locks = (self._results._rlock, self._results._wlock, self._results._sem)
        names = (getattr(lock._semlock, "name", None) for lock in queue_locks if lock is not None)
        return [f"sem.{name.lstrip('/')}" for name in names if name]

    def start(self, stream: int) -> None:
        """Start an endless task on every actor (seeded from the config's seed and `stream`).

        Raises:
            SelfPlayError: if endless tasks are running already.
        """
        if self._endless:
            raise SelfPlayError("the actors are already playing endless tasks")
        seeds = np.random.SeedSequence([self.config.seed, stream,
                                        ENDLESS_STREAM]).spawn(self.config.num_actors)
        for actor_id, tasks in enumerate(self._tasks):
            tasks.send(ActorTask(actor_id, None, self.config,
                                 int(seeds[actor_id].generate_state(1)[0]), board=self.board))
        self._endless = set(range(self.config.num_actors))
        self._winding_down = False

    def collect(self, timeout: float = 0.0) -> list[FinishedGame]:
        """The games finished since the last call, waiting up to `timeout` seconds for the first.

        Raises:
            SelfPlayError: if an actor dies or reports an error, or the server fails; every actor
                process is terminated before it is raised.
        """
        finished: list[FinishedGame] = []
        try:
            message = self._next_message(timeout)
            while message is not None:
                if message[0] == "game":
                    finished.append(_finished_game(message))
                elif message[0] == "done":
                    self._endless.discard(message[1])
                else:
                    _check_server(self.server)
                    raise SelfPlayError(f"actor {message[1]} failed: {message[2]}")
                message = self._next_message(0.0)
            _check_server(self.server)
            _check_actors(self._actors, self._endless, self._suspects)
        except BaseException:
            self.terminate()
            raise
        return finished

    def _next_message(self, timeout: float) -> tuple | None:
        """The next actor message, waiting up to `timeout` seconds for a whole one (as
        `Queue.get` waits, but never past the timeout on a message cut short); None if none
        came whole by then."""
        self._receive(timeout)
        return self._received.popleft() if self._received else None

    def _message_ready(self) -> bool:
        """Whether a whole message can be taken now, without waiting."""
        self._receive(0.0)
        return bool(self._received)

    def _receive(self, timeout: float) -> None:
        """Take in the messages whole by `timeout` seconds from now, unless some wait already.

        Raises:
            SelfPlayError: a message cannot be read (the ones before it are taken first).
        """
        if self._received:
            return
        try:
            self._received.extend(self._reader.receive(timeout))
        except QueueMessageError as error:
            raise SelfPlayError(f"an actor's message cannot be read: {error}") from error

    def pause(self) -> None:
        """Hold every actor after its current search round (throttling self-play); nothing
        when no endless task is running."""
        if self._paused_since is None and self._endless:
            self._send_endless(PAUSE)
            self._paused_since = time.perf_counter()

    def resume(self) -> None:
        """Let paused actors play on."""
        if self._paused_since is not None:
            self._send_endless(RESUME)
            self._paused_seconds += time.perf_counter() - self._paused_since
            self._paused_since = None

    @property
    def paused(self) -> bool:
        """Whether `pause` holds the actors."""
        return self._paused_since is not None

    @property
    def paused_seconds(self) -> float:
        """Wall seconds the actors have been held by `pause` so far."""
        current = (time.perf_counter() - self._paused_since if self._paused_since is not None
                   else 0.0)
        return self._paused_seconds + current

    def _send_endless(self, message: str) -> None:
        for actor_id in self._endless:
            with contextlib.suppress(OSError):  # a dead actor is reported by the next `collect`
                self._tasks[actor_id].send(message)

    def wind_down(self) -> None:
        """Tell the actors to start no new games: each endless task ends when the games in
        progress have finished (`collect` them as usual; `finish` waits for them)."""
        if not self._winding_down:
            self._send_endless(FINISH)
            self._winding_down = True

    def finish(self, on_games: Callable[[list[FinishedGame]], None],
               timeout: float = 600.0) -> None:
        """End the endless tasks after the games in progress: `wind_down`, resume paused actors,
        and hand every game still to come to `on_games` until each actor reports done.

        Raises:
            SelfPlayError: as `collect`, or if the actors are not done within `timeout` seconds.
        """
        self.wind_down()
        self.resume()
        self._wait_done(on_games, timeout)

    def stop(self, on_games: Callable[[list[FinishedGame]], None] | None = None,
             timeout: float = 60.0) -> None:
        """End the endless tasks: every actor drops the games it is playing and reports done.

        Games that finished before an actor read the stop are handed to `on_games` (else
        dropped).

        Raises:
            SelfPlayError: as `collect`, or if an actor does not stop within `timeout` seconds.
        """
        self._send_endless(STOP)
        if self._paused_since is not None:
            self._paused_seconds += time.perf_counter() - self._paused_since
            self._paused_since = None
        self._wait_done(on_games, timeout)

    def _wait_done(self, on_games: Callable[[list[FinishedGame]], None] | None,
                   timeout: float) -> None:
        """Collect until every endless task has reported done."""
        deadline = time.monotonic() + timeout
        while self._endless:
            if time.monotonic() > deadline:
                self.terminate()
                raise SelfPlayError(f"actors {sorted(self._endless)} did not stop "
                                    f"within {timeout} s")
            late = self.collect(0.2)
            if late and on_games is not None:
                on_games(late)
        self._winding_down = False

    def close(self, timeout: float = 30.0) -> None:
        """Ask every actor to finish, then wait for them, `timeout` seconds for all together
        (terminating any that hang).

        Results nobody collected are read and dropped meanwhile: an actor cannot exit while its
        queue's feeder thread still holds games the pipe has no room for, so without the reads an
        actor that finished games nobody took (endless tasks stopped by Ctrl-C or SIGTERM) would
        wait out the timeout, and one left alive would hold the owner's exit (multiprocessing
        joins its children then) for ever. They are dropped as raw bytes, never read as
        messages: an actor killed while writing one (a signal to the whole process group, as a
        terminal's Ctrl-C or the ablation's stop sends) leaves part of it in the pipe, and a
        message read would wait for the rest for ever, since this process holds the pipe's write
        end too (a stopped run hung so).

        Then the task pipes and the result queue are closed, both ends of its pipe in this
        process included (`QueueReader.close`), also when a KeyboardInterrupt interrupts the
        wait. Closing again does nothing more.
        """
        for tasks, process in zip(self._tasks, self._actors, strict=True):
            if process.is_alive():
                with contextlib.suppress(OSError):
                    tasks.send(None)
        deadline = time.monotonic() + timeout
        reader = self._reader
        self._received.clear()
        try:
            while (left := deadline - time.monotonic()) > 0:
                alive = [process.sentinel for process in self._actors if process.is_alive()]
                if not alive:
                    break
                reader.discard(left, alive)
        finally:  # a second Ctrl-C here still ends the actors: none is left for the exit to wait on
            try:
                self.terminate()
            finally:
                for tasks in self._tasks:
                    tasks.close()
                reader.close()

    def terminate(self) -> None:
        """Stop every actor process now: SIGTERM, then SIGKILL to any alive `TERMINATE_GRACE_S`
        later (a stopped or hung actor), all reaped before it returns."""
        end_processes(self._actors, TERMINATE_GRACE_S)

    def __enter__(self) -> SelfPlayWorkers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _finished_game(message: tuple) -> FinishedGame:
    _, actor_id, samples, record, info = message
    return FinishedGame(actor_id, samples, record, info["versions"], info["adjudicated"],
                        info["simulations"], info["leaves_evaluated"])


def _check_server(server: InferenceServer) -> None:
    try:
        server.check()
    except InferenceError as error:
        raise SelfPlayError(f"inference server failed: {error}") from None


def _check_actors(
    actors: list[mp.process.BaseProcess], busy: set[int], suspects: dict[int, float],
    grace_s: float = 2.0,
) -> None:
    """Raise for an actor that exited (after a grace period for its last messages, which may
    still be in the queue's pipe)."""
    now = time.monotonic()
    for actor_id, process in enumerate(actors):
        if process.is_alive() or (actor_id not in busy and process.exitcode == 0):
            continue
        first_seen = suspects.setdefault(actor_id, now)
        if now - first_seen > grace_s:
            raise SelfPlayError(
                f"actor {actor_id} (pid {process.pid}) died with exit code {process.exitcode}"
            )
