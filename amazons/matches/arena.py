"""Matches between two players: the arena's library (its command line is `amazons.arena`,
`python -m amazons.arena A B --games N`).

Players are named by specs (`random`, `greedy`, `mcts-uniform`, `mcts-rollout`, `mcts-net:MODEL`,
`policy-net:MODEL`, `openspiel-mcts`, `botzone:[OPTIONS:]COMMAND`, `human`, and whatever
`register_player` adds), built by `amazons.players.factory.make_player`.

A player that faults (`amazons.players.player.PlayerFault`: a Botzone program's timeout, crash,
malformed reply or illegal move) loses the game: its record keeps the moves so far, the result, and
the headers `Termination` (the reason) and `Fault` (the side, the player and the message), and the
result counts each player's faults by reason. Every player is closed after its game
(`BasePlayer.close`: a program's process ends), also when the game fails or is interrupted.

Every game of a match is played on one board (`board`: a name in `amazons.boards.BOARDS` such
as `standard10`, a start position string or a `BoardSpec`; Botzone's 8x8 by default): the
openings, the players (built for its size, `make_player(..., board=...)`), the records (their
`Board` header) and the result (`ArenaResult.board`) all name it.

A match plays games in pairs: both games of a pair start from the same seeded short random opening,
with colours swapped, so deterministic players do not replay one game and neither side profits from
a lucky opening. Games run in parallel worker processes (`ArenaWorkers`, spawn or forkserver; one
process when they cannot start). The result gives wins, the win rate of A and the Elo difference
A - B with a 95% interval (Wilson score interval on the win rate, mapped to Elo), and every game as
an `amazons.players.records.GameRecord` (`--record FILE` writes them).

Served network players: `ArenaWorkers` keeps worker processes and one inference server per
network (`amazons.serving.server.InferenceServer`, one slot per worker) across matches. A network
player whose spec is served scores its leaves through its worker's `InferenceClient`, so the
network is loaded once, on the GPU when there is one, and batched across the workers, instead of
once per process on one CPU thread. The command line serves `mcts-net` and `policy-net` players
whenever it runs more than one process (`--no-server` loads them in every process instead);
evaluation in training always serves them (`amazons.matches.evaluation`).

Stopping: a match stopped by Ctrl-C or by a failure ends every worker before its exception
leaves `ArenaWorkers`: a worker gets `ABORT_GRACE_S` to end its game (Ctrl-C reaches the workers
too, and a worker's players are closed as the interrupt unwinds), then SIGTERM, then SIGKILL
`TERMINATE_GRACE_S` later, and is reaped, also when a second Ctrl-C interrupts the shutdown. A
Botzone program dies with the worker that started it, however the worker ends
(`amazons.players.program`). A worker that dies while writing a result (SIGKILL, the OOM killer,
a signal to its process group) fails the match with an `ArenaError` naming it: the results are
read as raw bytes (`amazons.core.queue_reader`), never waiting for the rest of a message.

Torch-free: network models are loaded by `amazons.players.factory` (in the workers, or in the
servers' processes).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait
from typing import Any

import numpy as np

from amazons.board import BLACK, COLOR_NAMES, Board, Move
from amazons.boards import BoardSpec, NotationError, board_spec
from amazons.core.processes import (
    TERMINATE_GRACE_S,
    end_processes,
    factory_preload,
    process_context,
)
from amazons.core.queue_reader import QueueMessageError, QueueReader
from amazons.mcts import Evaluator, SearchConfig
from amazons.players.factory import (
    NETWORK_PLAYERS,
    PlayerFactory,
    PlayerSpecError,
    apply_search_overrides,
    make_player,
    player_factories,
    register_player,
    served_evaluator_factory,
    split_spec,
)
from amazons.players.player import FAULT_REASONS, Player, PlayerFault
from amazons.players.records import GameRecord
from amazons.serving.server import (
    ClientHandle,
    InferenceClient,
    InferenceConfig,
    InferenceError,
    InferenceServer,
)

__all__ = [
    "ArenaError",
    "ArenaResult",
    "ArenaWorkers",
    "GameForfeit",
    "elo_from_score",
    "elo_interval",
    "network_servers",
    "play_game",
    "random_opening",
    "run_arena",
]

Z_95 = 1.959963984540054  # two-sided 95% quantile of the standard normal
# What the forkserver that forks the arena's workers imports for them: the servers' client and
# the search kernels loaded (`amazons.mcts.warm_up`, called there once).
ARENA_PRELOAD = ("amazons.serving.server", "amazons.mcts:warm_up")
ABORT_GRACE_S = 2.0  # seconds the workers of a failed or interrupted match get to end their games


# ----------------------------------------------------------------------------------------------
# Games


def random_opening(plies: int, seed: int, start: BoardSpec | str | None = None) -> list[Move]:
    """`plies` uniformly random legal moves from `start` (Botzone's 8x8 when None; fewer moves if
    the game would end)."""
    rng = np.random.default_rng(seed)
    board = Board(start=start)
    opening = []
    for _ in range(plies):
        moves = board.legal_move_array()
        if moves.shape[0] == 0:
            break
        move = Move(*moves[int(rng.integers(moves.shape[0]))].tolist(), size=board.size)
        # Stop before a move that leaves the opponent without a reply: the game would be over.
        board.push(move)
        if board.is_game_over():
            board.pop()
            break
        opening.append(move)
    return opening


class GameForfeit(Exception):
    """A player faulted (`amazons.players.player.PlayerFault`) and lost the game `play_game` was
    playing.

    Attributes:
        loser: BLACK or WHITE, the side that faulted.
        moves: the moves played before the fault, opening included.
        fault: the player's fault (its `reason` and `message`).
    """

    def __init__(self, loser: int, moves: list[Move], fault: PlayerFault) -> None:
        super().__init__(f"{COLOR_NAMES[loser]} forfeits after {len(moves)} plies: {fault}")
        self.loser = loser
        self.moves = moves
        self.fault = fault


def play_game(black: Player, white: Player, opening: Sequence[Move] = (),
              start: BoardSpec | str | None = None) -> tuple[int, list[Move]]:
    """Play one game from `start` (Botzone's 8x8 when None) after `opening`; returns (winner, all
    moves).

    Both players are reset first and observe every move (opening included), so players that keep
    state across turns follow the game.

    Raises:
        IllegalMoveError: if a player returns an illegal move (names the move).
        GameForfeit: a player faulted (`PlayerFault`): it loses; carries the moves so far.
    """
    players = (black, white)
    for player in players:
        player.reset()
    board = Board(start=start)
    played: list[Move] = []
    for index in range(len(opening) + board.num_squares):
        if board.is_game_over():
            return board.winner(), played
        if index < len(opening):
            move = opening[index]
        else:
            try:
                move = players[board.turn].choose_move(board.copy())
            except PlayerFault as fault:
                raise GameForfeit(board.turn, played, fault) from fault
        for player in players:
            player.observe(board, move)
        board.push(move)
        played.append(move)
    # impossible: every move fills an empty square
    raise RuntimeError(f"a game lasted more than {board.num_squares} plies")


@dataclass(frozen=True)
class _Side:
    """One player of a match as a worker builds it."""

    spec: str
    search: tuple[tuple[str, str], ...] = ()  # SearchConfig overrides
    # the search before the overrides (None: the player's default)
    base_search: SearchConfig | None = None
    served: str | None = None  # the `ArenaWorkers` server whose evaluator the player uses


@dataclass(frozen=True)
class _GameTask:
    index: int
    a: _Side
    b: _Side
    a_is_black: bool
    opening: tuple[Move, ...]
    seed: int
    simulations: int | None
    time_budget: float | None
    device: str = "auto"
    precision: str = "auto"
    board: BoardSpec = field(default_factory=board_spec)  # the board every game is played on


def _make_side(side: _Side, seed: int, task: _GameTask,
               evaluators: Mapping[str, Evaluator]) -> Player:
    evaluator = None
    if side.served is not None:
        if side.served not in evaluators:
            raise ArenaError(f"{side.spec} is served by {side.served!r}, "
                             f"which this process does not reach")
        evaluator = evaluators[side.served]
    return make_player(side.spec, seed, task.simulations, task.time_budget, side.search,
                       base_search=side.base_search, evaluator=evaluator, device=task.device,
                       precision=task.precision, board=task.board)


def _play_task(task: _GameTask, evaluators: Mapping[str, Evaluator] | None = None) -> GameRecord:
    """One game of the match as a record: Round is the game number (from 1), Opening the plies
    of the random opening (part of the moves); a forfeited game adds Termination and Fault."""
    evaluators = evaluators or {}
    players: list[Player] = []
    try:
        players.append(_make_side(task.a, task.seed * 2, task, evaluators))
        players.append(_make_side(task.b, task.seed * 2 + 1, task, evaluators))
        black, white = players if task.a_is_black else players[::-1]
        names = (task.a.spec, task.b.spec) if task.a_is_black else (task.b.spec, task.a.spec)
        extra = {}
        winner = None
        try:
            _, moves = play_game(black, white, task.opening, task.board)
        except GameForfeit as forfeit:
            moves, winner = forfeit.moves, 1 - forfeit.loser
            extra = {"Termination": forfeit.fault.reason,
                     "Fault": f"{COLOR_NAMES[forfeit.loser]} {names[forfeit.loser]}: "
                              f"{forfeit.fault.message}"}
        return GameRecord.from_game(moves, black=names[0], white=names[1], event="arena",
                                    winner=winner, start=task.board, Round=str(task.index + 1),
                                    Opening=str(len(task.opening)), **extra)
    finally:
        for player in players:
            close = getattr(player, "close", None)  # players outside BasePlayer may lack it
            if close is not None:
                close()


def _init_worker(factories: dict[str, PlayerFactory]) -> None:
    for name, factory in factories.items():
        register_player(name, factory, replace=True)


# ----------------------------------------------------------------------------------------------
# Served network players: persistent workers, one inference server per network


class ArenaError(RuntimeError):
    """An arena worker process or one of its inference servers failed; the message says which."""


def _serving_worker(handles: dict[str, ClientHandle], tasks: Any, results: Any,
                    factories: dict[str, PlayerFactory]) -> None:
    """Worker process: play the games of `tasks` until a None, scoring served players' leaves
    through one `InferenceClient` per server; put `(index, record, error text)` on `results`.

    A Ctrl-C (SIGINT to the process group, the parent's included) ends the worker with exit
    status 130 once its players and clients are closed, without a traceback: the parent reports
    the stop (or, if it alone was signalled, the dead worker)."""
    _init_worker(factories)
    clients = {name: InferenceClient(handle) for name, handle in handles.items()}
    try:
        while (task := tasks.get()) is not None:
            try:
                results.put((task.index, _play_task(task, clients), None))
            except Exception:  # reported to the parent, which stops the match
                results.put((task.index, None, traceback.format_exc()))
    except KeyboardInterrupt:
        raise SystemExit(128 + signal.SIGINT) from None
    finally:
        for client in clients.values():
            client.close()


class ArenaWorkers:
    """Arena worker processes and their network players' inference servers, kept across matches.

    Each server holds one network (built in its own process by a picklable evaluator factory, e.g.
    `amazons.neural.served.NetworkEvaluatorFactory`) and one slot per worker; every worker
    holds one `InferenceClient` of every server. `run_arena(..., workers=self, served={spec: name})`
    plays a match on these workers, the player `spec` scoring its leaves through server `name`.
    `publish_weights` loads new weights into a server between matches (evaluation in training
    keeps one server for the new model and one for the previous, `amazons.matches.evaluation`).

    Example:
        >>> servers = network_servers(["mcts-net:runs/cpu/models/model-0010.pt"])  # doctest: +SKIP
        >>> with ArenaWorkers(2, servers) as workers:
        ...     result = run_arena("mcts-net:runs/cpu/models/model-0010.pt", "greedy", 10,
        ...                        workers=workers, served={name: name for name in servers})

    Args:
        processes: worker processes.
        servers: server name -> zero-argument evaluator factory, run in the server's process.
        inference: the servers' batching (default: batches of up to 8 leaves per worker, flushed
            after 1 ms).
        factories: player factories the workers register (plug-ins registered in this process;
            the built-in players are always there).

    Raises:
        ValueError: processes < 1.
    """

    def __init__(self, processes: int, servers: Mapping[str, Callable[[], Evaluator]],
                 inference: InferenceConfig | None = None,
                 factories: Mapping[str, PlayerFactory] | None = None) -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        self.processes = processes
        self.inference = inference or InferenceConfig(inference_batch_size=8 * processes,
                                                      flush_deadline_ms=1.0)
        self.factories = dict(factories or {})
        self.stats: dict[str, dict[str, float]] = {}  # each server's statistics, after `close`
        self._factories = dict(servers)
        self._context = process_context((*ARENA_PRELOAD, *(
            name for factory in servers.values() for name in factory_preload(factory))))
        self._servers: dict[str, InferenceServer] = {}
        self._workers: list[multiprocessing.process.BaseProcess] = []
        self._tasks: Any = None
        self._results: Any = None
        self._reader: QueueReader | None = None  # reads `_results` as raw bytes
        self._failed: str | None = None

    @property
    def server_names(self) -> list[str]:
        """Names of the servers."""
        return list(self._factories)

    @property
    def slot_names(self) -> list[str]:
        """The shared-memory segments of every server (all unlinked by `close`)."""
        return [name for server in self._servers.values() for name in server.slot_names]

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers."""
        return [worker.pid for worker in self._workers]

    def start(self) -> None:
        """Start the servers (each builds its evaluator), then the workers.

        Raises:
            amazons.serving.server.InferenceError: a server failed to start (its traceback
                is included).
        """
        try:
            for name, factory in self._factories.items():
                server = InferenceServer(factory, self.processes, self.inference, self._context)
                self._servers[name] = server
                server.start()
            self._tasks, self._results = self._context.Queue(), self._context.Queue()
            self._reader = QueueReader(self._results)
            for index in range(self.processes):
                handles = {name: server.handle(index) for name, server in self._servers.items()}
                worker = self._context.Process(
                    target=_serving_worker,
                    args=(handles, self._tasks, self._results, self.factories),
                    name=f"amazons-arena-{index}", daemon=True)
                worker.start()
                self._workers.append(worker)
                # the worker holds its own copy now: see InferenceServer.start_actor
                for handle in handles.values():
                    handle.connection.close()
        except BaseException:
            self.close(timeout=ABORT_GRACE_S)
            raise

    def publish_weights(self, server: str, path: str | os.PathLike, version: int) -> None:
        """Have server `server` load the weights of checkpoint `path` before its next batch.

        Raises:
            KeyError: no such server. amazons.serving.server.InferenceError: the server has failed.
        """
        self._servers[server].publish_weights(str(path), version)

    def _failure(self) -> str | None:
        """Why the workers cannot go on (a worker died, a server failed), or None."""
        for index, worker in enumerate(self._workers):
            if worker.exitcode is not None:
                return (f"arena worker {index} (pid {worker.pid}) exited with code "
                        f"{worker.exitcode} during a match")
        for name, server in self._servers.items():
            try:
                server.check()
            except InferenceError as error:
                return f"inference server {name!r} failed: {error}"
        return None

    def play(self, tasks: Sequence[_GameTask], timeout_s: float | None = None) -> list[GameRecord]:
        """Play `tasks` on the workers; the records in task order.

        Raises:
            ArenaError: a worker died, a server failed or a game raised (the first failure is
                named; the workers cannot be used again: `close` them), or `timeout_s` passed.
                After any exception, a KeyboardInterrupt included, the workers cannot be used again.
        """
        if self._failed is not None:
            raise ArenaError(f"the arena workers failed before: {self._failed}")
        if not self._workers:
            raise ArenaError("the arena workers are not started")
        try:
            return self._play(tasks, timeout_s)
        except BaseException as error:  # Ctrl-C included: the workers hold this match's games
            if self._failed is None:
                self._failed = f"a match was stopped by {type(error).__name__}"
            raise

    def _play(self, tasks: Sequence[_GameTask], timeout_s: float | None) -> list[GameRecord]:
        for task in tasks:
            self._tasks.put(task)
        records: list[GameRecord | None] = [None] * len(tasks)
        position = {task.index: order for order, task in enumerate(tasks)}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        waiting = len(tasks)
        while waiting:
            # Raw reads: a worker killed while writing a result leaves half of it in the pipe,
            # and `Queue.get` would wait for the rest for ever (`amazons.core.queue_reader`).
            try:
                results = self._reader.receive(0.2)
            except QueueMessageError as error:
                self._failed = f"a result of the arena workers cannot be read: {error}"
                raise ArenaError(self._failed) from None
            if not results:
                failure = self._failure()
                if failure is None and deadline is not None and time.monotonic() > deadline:
                    failure = f"the match did not finish within {timeout_s} s"
                if failure is not None:
                    self._failed = failure
                    raise ArenaError(failure)
                continue
            for index, record, error in results:
                if error is not None:
                    time.sleep(0.2)  # a dead worker explains the others' errors better: let it show
                    self._failed = (self._failure()
                                    or f"game {index + 1} failed in an arena worker:\n{error}")
                    raise ArenaError(self._failed)
                records[position[index]] = record
                waiting -= 1
        return records

    def close(self, timeout: float = 30.0) -> dict[str, dict[str, float]]:
        """Stop the workers, then the servers, and unlink every segment; returns each server's
        statistics (`amazons.serving.server` batches, rows, ...), also kept in `stats`.

        Each worker is sent its stop and given `timeout` seconds, for all together, to exit
        (`ABORT_GRACE_S` after a failed or interrupted match, whose workers are mid-game; results
        nobody reads are dropped meanwhile, so no worker waits on a full pipe). Workers still alive
        then are terminated, and killed `TERMINATE_GRACE_S` later; all are reaped before `close`
        returns, also when a KeyboardInterrupt interrupts it.
        """
        grace = timeout if self._failed is None else min(timeout, ABORT_GRACE_S)
        try:
            self._stop_workers(grace)
        finally:
            try:
                self._end_workers()
                if self._tasks is not None:
                    self._tasks.cancel_join_thread()  # tasks a failed match left behind are dropped
                    self._tasks.close()
                if self._reader is not None:
                    self._reader.close()  # both ends of the results' pipe, here
                elif self._results is not None:
                    self._results.close()
                self._workers, self._tasks, self._results, self._reader = [], None, None, None
            finally:
                self._stop_servers()
        return self.stats

    def _stop_servers(self) -> None:
        """Stop every server and keep its statistics: each one also when stopping another raised
        (a second Ctrl-C), so every server's segments are unlinked."""
        with contextlib.ExitStack() as stops:  # it calls them last first: the servers in order
            for name, server in reversed(self._servers.items()):
                stops.callback(self._stop_server, name, server)
            self._servers = {}

    def _stop_server(self, name: str, server: InferenceServer) -> None:
        self.stats[name] = dict(server.stop())

    def _stop_workers(self, grace: float) -> None:
        """Send every live worker its stop sentinel; wait up to `grace` seconds for all to exit."""
        if self._tasks is not None:
            for worker in self._workers:
                if worker.exitcode is None:
                    self._tasks.put(None)
        deadline = time.monotonic() + grace
        while (alive := [worker for worker in self._workers if worker.exitcode is None]) \
                and (left := deadline - time.monotonic()) > 0:
            sentinels = [worker.sentinel for worker in alive]
            if self._reader is None:
                wait(sentinels, left)
            else:  # dropped as raw bytes: a worker cannot exit while its queue holds results
                self._reader.discard(left, sentinels)

    def _end_workers(self) -> None:
        """Terminate the live workers, kill those alive `TERMINATE_GRACE_S` later, reap all."""
        end_processes(self._workers, TERMINATE_GRACE_S)

    def __enter__(self) -> ArenaWorkers:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def network_servers(specs: Sequence[str], device: str = "auto", precision: str = "auto",
                    max_batch: int = 256,
                    board: BoardSpec | str | None = None) -> dict[str, Callable[[], Evaluator]]:
    """The network players among `specs` (`mcts-net:MODEL`, `policy-net:MODEL`) -> the evaluator
    factory of a server for each, keyed by the spec
    (`amazons.players.factory.served_evaluator_factory`), serving `board`'s size (Botzone's 8x8
    when None).

    Raises:
        PlayerSpecError: an unknown player, a network player without a model, or a model that
            cannot play the board's size.
        FileNotFoundError: a model file does not exist.
    """
    size = board_spec(board).size
    servers: dict[str, Callable[[], Evaluator]] = {}
    for spec in specs:
        name, argument = split_spec(spec)
        if name in NETWORK_PLAYERS and spec not in servers:
            if not argument or argument == "none":
                raise PlayerSpecError(f"{name} needs a model, e.g. {name}:default")
            servers[spec] = served_evaluator_factory(argument, device, precision, max_batch,
                                                     board_size=size)
    return servers


# ----------------------------------------------------------------------------------------------
# Statistics


def elo_from_score(score: float) -> float:
    """Elo difference whose expected score is `score` in [0, 1] (+-inf at the ends)."""
    if score <= 0.0:
        return -math.inf
    if score >= 1.0:
        return math.inf
    return -400.0 * math.log10(1.0 / score - 1.0)


def elo_interval(wins: float, games: int, z: float = Z_95) -> tuple[float, float, float]:
    """Elo difference and its confidence interval from `wins` (draws count 1/2) out of `games`.

    Uses the Wilson score interval for the score, mapped through `elo_from_score`; it stays
    finite on one side even when one player won every game.

    Returns:
        (elo, low, high); elo is +-inf when one side won everything.

    Raises:
        ValueError: if games < 1 or wins is outside 0..games.
    """
    if games < 1 or not 0 <= wins <= games:
        raise ValueError(f"need 0 <= wins <= games and games >= 1, got wins={wins} games={games}")
    score = wins / games
    denominator = 1.0 + z * z / games
    centre = (score + z * z / (2 * games)) / denominator
    half = z * math.sqrt(score * (1.0 - score) / games + z * z / (4 * games * games)) / denominator
    # At wins == 0 (games) the exact bound is 0 (1); rounding must not turn it into a finite Elo.
    low = -math.inf if wins == 0 else elo_from_score(centre - half)
    high = math.inf if wins == games else elo_from_score(centre + half)
    return elo_from_score(score), low, high


@dataclass(frozen=True)
class ArenaResult:
    """Outcome of a match of A against B."""

    player_a: str
    player_b: str
    games: int
    wins_a: int
    wins_b: int
    wins_a_as_black: int
    wins_a_as_white: int
    win_rate: float  # of A
    elo: float  # Elo of A minus Elo of B
    elo_low: float  # 95% interval
    elo_high: float
    seconds: float
    records: list[GameRecord] = field(default_factory=list)  # game i; A has Black in even games
    # games A forfeited, by reason (FAULT_REASONS)
    faults_a: dict[str, int] = field(default_factory=dict)
    faults_b: dict[str, int] = field(default_factory=dict)
    board: BoardSpec = field(default_factory=board_spec)  # every game's board

    def summary(self) -> str:
        """Two lines for the terminal, and a third with the faults when a player faulted."""
        text = (
            f"{self.player_a} vs {self.player_b} on {self.board.label()}: {self.games} games, "
            f"{self.player_a} won "
            f"{self.wins_a} ({self.wins_a_as_black} as black, {self.wins_a_as_white} as white), "
            f"{self.player_b} won {self.wins_b}  [{self.seconds:.1f} s]\n"
            f"win rate of {self.player_a}: {self.win_rate:.3f}; Elo difference "
            f"{self.elo:+.0f} (95% interval {self.elo_low:+.0f} .. {self.elo_high:+.0f})"
        )
        if self.faults_a or self.faults_b:
            sides = []
            for label, player, faults in (("A", self.player_a, self.faults_a),
                                          ("B", self.player_b, self.faults_b)):
                counts = ", ".join(f"{reason} {count}"
                                   for reason, count in faults.items()) or "none"
                sides.append(f"{label} ({player}) {counts}")
            text += "\nforfeits by fault: " + "; ".join(sides)
        return text

    def to_json(self) -> dict[str, Any]:
        """The result as JSON-ready values; the board as `BoardSpec.to_dict()`, each game as its
        headers and Botzone moves."""
        fields = {key: value for key, value in asdict(self).items()
                  if key not in ("records", "board")}
        fields["board"] = self.board.to_dict()
        fields["records"] = [
            {"headers": dict(record.headers), "moves": [move.to_botzone() for move in record.moves]}
            for record in self.records
        ]
        return fields


def run_arena(spec_a: str, spec_b: str, games: int, simulations: int | None = None,
              processes: int | None = None, seed: int = 0, opening_plies: int = 4,
              time_budget: float | None = None, search_a: Sequence[tuple[str, str]] = (),
              search_b: Sequence[tuple[str, str]] = (), *,
              base_search_a: SearchConfig | None = None,
              base_search_b: SearchConfig | None = None, workers: ArenaWorkers | None = None,
              served: Mapping[str, str] | None = None, device: str = "auto",
              precision: str = "auto", board: BoardSpec | str | None = None) -> ArenaResult:
    """Play `games` games of A against B, colours alternating (A has Black in even games).

    Args:
        spec_a, spec_b: player specs (see `amazons.players.factory.make_player`).
        games: number of games (pairs share an opening).
        simulations: MCTS simulations per move for MCTS players (None: their default).
        processes: worker processes (default: CPU count, at most `games`); 1 runs in-process.
            Ignored with `workers`.
        seed: seeds openings and players; the same seed replays the same match.
        opening_plies: random plies before the players take over.
        time_budget: seconds per move for MCTS players instead of simulations.
        search_a, search_b: `SearchConfig` overrides for A's and B's MCTS search, e.g.
            `[("solver", "false"), ("adjudicate", "false")]`.
        base_search_a, base_search_b: the search A's and B's MCTS players start from instead of
            their default (the overrides then apply), e.g. an evaluation's configured search.
        workers: play on these started `ArenaWorkers` instead of a pool of fresh processes.
        served: player spec -> the server of `workers` that scores its leaves (A and B may use
            one server each, or share one when they are the same spec).
        device, precision: where and how network players that load their own model run.
        board: the board of every game (a name such as "standard10", a start position string
            or a `BoardSpec`; Botzone's 8x8 when None). Served players' servers must serve its
            size (`network_servers(..., board=...)`).

    Raises:
        PlayerSpecError: for an unknown player, a bad search override or a bad board (checked
            before any game starts).
        ValueError: for games < 1, opening_plies < 0, or a `served` server that `workers` lacks.
        ArenaError: a worker process or a server failed, or a game raised in a worker process.
    """
    if games < 1:
        raise ValueError(f"games must be >= 1, got {games}")
    if opening_plies < 0:
        raise ValueError(f"opening_plies must be >= 0, got {opening_plies}")
    names = {split_spec(spec_a)[0], split_spec(spec_b)[0]}
    try:
        board = board_spec(board)
    except NotationError as error:
        raise PlayerSpecError(f"board: {error}") from None
    search_a, search_b = tuple(search_a), tuple(search_b)
    for base, overrides in ((base_search_a, search_a), (base_search_b, search_b)):
        apply_search_overrides(base or SearchConfig(), overrides)
    served = dict(served or {})
    if served and workers is None:
        raise ValueError("served players need workers (ArenaWorkers)")
    unknown = sorted(set(served.values())
                     - set(workers.server_names if workers is not None else ()))
    if unknown:
        raise ValueError(f"served by unknown servers {unknown}; "
                         f"the workers have {workers.server_names}")
    if "human" in names and workers is None:
        processes = 1
    side_a = _Side(spec_a, search_a, base_search_a, served.get(spec_a))
    side_b = _Side(spec_b, search_b, base_search_b, served.get(spec_b))
    tasks = []
    for index in range(games):
        pair = index // 2
        opening = tuple(random_opening(opening_plies, seed * 1_000_003 + pair, board))
        tasks.append(_GameTask(index, side_a, side_b, index % 2 == 0, opening,
                               seed * 1_000_003 + index, simulations, time_budget, device,
                               precision, board))
    started = time.perf_counter()
    if workers is not None:
        records = workers.play(tasks)
    else:
        records = _run_tasks(tasks, min(games, processes or os.cpu_count() or 1),
                             player_factories(sorted(names)))
    seconds = time.perf_counter() - started
    a_wins = [(record.winner == BLACK) == (index % 2 == 0) for index, record in enumerate(records)]
    wins_a = sum(a_wins)
    as_black = sum(a_wins[0::2])
    elo, low, high = elo_interval(wins_a, games)
    faults: tuple[dict[str, int], dict[str, int]] = ({}, {})
    for a_won, record in zip(a_wins, records, strict=True):
        reason = record.termination
        if reason in FAULT_REASONS:
            loser = faults[1] if a_won else faults[0]
            loser[reason] = loser.get(reason, 0) + 1
    return ArenaResult(spec_a, spec_b, games, wins_a, games - wins_a, as_black, wins_a - as_black,
                       wins_a / games, elo, low, high, seconds, records,
                       *(dict(sorted(counts.items(), key=lambda item: FAULT_REASONS.index(item[0])))
                         for counts in faults), board)


def _run_tasks(tasks: list[_GameTask], processes: int,
               factories: dict[str, PlayerFactory]) -> list[GameRecord]:
    if processes > 1:
        workers = ArenaWorkers(processes, {}, factories=factories)
        try:
            workers.start()
        except (OSError, pickle.PicklingError, AttributeError, TypeError) as error:
            print(f"arena: parallel games unavailable ({error}); using one process",
                  file=sys.stderr)
        else:
            try:
                return workers.play(tasks)
            finally:
                workers.close()
    return [_play_task(task) for task in tasks]
