"""The learner's side of self-play on a Ray cluster: `NodePool`.

The pool starts one `SelfPlayNode` actor per node (or per share of a node's GPUs) and hands out
requests of whole games, at most `max_games_in_flight` games per node (back-pressure: a node
plays only what it was asked for, and the learner never holds more than that many unread games
per node). It delivers each iteration's games exactly as `SelfPlayWorkers.play` does, and keeps
every node within `max_weights_lag` weights versions of the latest: with a lag of L, requests for
the next L iterations are handed out ahead (they play during training), and before version v is
published every request played with weights older than v - L has come back.

Faults: a request that fails (the node actor died, or its pipeline raised) loses only its own games,
which are asked of the other nodes again. The pool logs the failure, stops sending to that node and
asks it for a sign of life (asking again when no answer comes within `PROBE_RETRY_S`: a call made
while Ray was replacing the actor may never be answered); when Ray provides a replacement (it
restarts the actor up to `node_max_restarts` times, on a live node) the node takes requests again.
A node is given up after `node_max_failures` failures without a finished request in between, or
when Ray reports it dead for good. The run stops with `RayBackendError` only when no node can play
for `node_timeout_s`.

Imports Ray, the node actor, replay, records and self-play's report.
"""

from __future__ import annotations

import pickle
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import ActorDiedError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from amazons.distributed import RayBackendError
from amazons.distributed.node import (
    GameRequest,
    NodeResult,
    SelfPlayNode,
    owned_samples,
    request_stream,
)
from amazons.players.records import GameRecord
from amazons.train.replay import GameSamples
from amazons.train.selfplay import SelfPlayReport

if TYPE_CHECKING:
    from amazons.train.config import TrainConfig


@dataclass
class _Node:
    """The pool's view of one node actor."""

    index: int
    handle: Any  # the actor handle
    node_id: str  # the Ray node it was placed on (it may be replaced elsewhere)
    state: str = "starting"  # starting | active | recovering | gone
    pid: int = -1
    host: str = ""
    in_flight: int = 0  # games requested and not yet returned
    failures: int = 0  # failures since its last finished request
    probe: ray.ObjectRef | None = None  # a pending `ready()` call
    probe_sent: float = 0.0  # when `probe` was sent
    # when to send the next `ready()` call (Ray is restarting the actor)
    probe_at: float | None = None
    unavailable_since: float = 0.0


@dataclass
class _Request:
    node: int
    request: GameRequest
    samples: ray.ObjectRef
    result: ray.ObjectRef


@dataclass
class _Finished:
    pending: _Request
    samples: GameSamples  # owned copy
    result: NodeResult
    bytes: int  # pickled size of what came back


def node_placements(config: TrainConfig) -> list[str]:
    """Ray node ids, one per self-play node actor to start: every live node with the CPUs a node
    actor asks for gets one, or, with `ray.node_gpus > 0`, one per that many of its GPUs."""
    ray_config = config.ray
    placements: list[str] = []
    for node in ray.nodes():
        resources = node.get("Resources", {})
        if not node.get("Alive") or resources.get("CPU", 0.0) < ray_config.node_cpus:
            continue
        count = 1
        if ray_config.node_gpus > 0:
            count = int(resources.get("GPU", 0.0) // ray_config.node_gpus)
            if ray_config.node_cpus > 0:
                count = min(count, int(resources.get("CPU", 0.0) // ray_config.node_cpus))
        placements += [node["NodeID"]] * count
    if ray_config.max_nodes:
        placements = placements[: ray_config.max_nodes]
    return placements


# A sign-of-life call unanswered for this long is sent again (the old one is dropped): a call made
# while Ray is replacing an actor can stay pending after the replacement is up.
PROBE_RETRY_S = 2.0


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class NodePool:
    """The learner's side of self-play on a Ray cluster: a `SelfPlayWorkers` look-alike.

    `play(num_games, on_games, iteration, progress)` and `publish_weights(path, version)` behave
    like those of `SelfPlayWorkers` and `InferenceServer`, so `amazons.train.Run.run_iteration`
    drives the pool unchanged.

    Args:
        config: the run's resolved config (its `ray` group sets placement and limits).
        last_iteration: no games are requested ahead for iterations after this one.
        log: where failures and replacements are reported (stderr by default).
        poll_s: how long one wait for results lasts before the nodes' health is checked.

    Attributes:
        on_delivery: called with the object reference of every delivered `GameSamples`
            (the training ranks' copies of the replay window are fed from it).
        weights_bytes: size of the last published weights object.

    Raises:
        RayBackendError: no node of the cluster fits a node actor, or none starts in time.
    """

    def __init__(self, config: TrainConfig, last_iteration: int,
                 log: Callable[[str], None] | None = None, poll_s: float = 0.2) -> None:
        self.config = config
        ray_config = config.ray
        selfplay = config.selfplay
        self.games_per_request = (ray_config.games_per_request
                                  or 2 * selfplay.num_actors * selfplay.games_in_parallel)
        self.max_games_in_flight = ray_config.max_games_in_flight or 2 * self.games_per_request
        self.last_iteration = last_iteration
        self.log = log or _stderr
        self.poll_s = poll_s
        self.on_delivery: Callable[[ray.ObjectRef], None] | None = None
        self.version = -1
        self.weights_bytes = 0
        self._weights: ray.ObjectRef | None = None
        self._pending: dict[ray.ObjectRef, _Request] = {}
        self._finished: dict[int, list[_Finished]] = {}
        self._wanted: dict[int, int] = {}
        self._requested: dict[int, int] = {}
        self._serial: dict[int, int] = {}
        self._counters = self._zero_counters()
        placements = node_placements(config)
        if not placements:
            raise RayBackendError(
                f"no live Ray node offers the {ray_config.node_cpus} CPUs and "
                f"{ray_config.node_gpus} GPUs a self-play node actor asks for "
                f"(ray.node_cpus, ray.node_gpus); nodes: "
                f"{[node.get('Resources') for node in ray.nodes() if node.get('Alive')]}")
        self.nodes: list[_Node] = []
        for index, node_id in enumerate(placements):
            handle = SelfPlayNode.options(
                num_cpus=ray_config.node_cpus, num_gpus=ray_config.node_gpus,
                max_restarts=ray_config.node_max_restarts, max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=True),
            ).remote(config, index)
            node = _Node(index, handle, node_id, unavailable_since=time.monotonic())
            self._send_probe(node)
            self.nodes.append(node)
        self._started_up = False
        started = time.monotonic()
        warned = False
        try:
            while any(node.state == "starting" for node in self.nodes) and (
                    not self.active_nodes
                    or time.monotonic() - started < ray_config.node_timeout_s):
                self._wait_once()
                self._check_nodes()
                if not warned and time.monotonic() - started > 30:
                    warned = True
                    self.log(f"ray: waiting for "
                             f"{sum(node.state == 'starting' for node in self.nodes)} self-play "
                             f"node actors to start (up to ray.node_timeout_s): has the cluster "
                             f"the CPUs and GPUs they ask for free?")
        except BaseException:
            self.close()
            raise
        self._started_up = True
        hosts = sorted({node.host for node in self.nodes if node.state == "active"})
        late = sum(node.state == "starting" for node in self.nodes)
        self.log(f"ray: {self.active_nodes} self-play node actors on {len(hosts)} host(s) "
                 f"({', '.join(hosts)}){f', {late} more not started yet' if late else ''}; "
                 f"{self.games_per_request} games per request, at most "
                 f"{self.max_games_in_flight} in flight per node")

    # -- the SelfPlayWorkers / InferenceServer face ------------------------------------------------

    def play(
        self,
        num_games: int,
        on_games: Callable[[list[GameSamples], list[GameRecord]], None],
        iteration: int = 0,
        progress: Callable[[SelfPlayReport], None] | None = None,
    ) -> SelfPlayReport:
        """Deliver `num_games` games for `iteration` (requests are handed out ahead for the next
        `max_weights_lag` iterations, up to `last_iteration`).

        Games reach `on_games([samples], records)` one request at a time, as they come back.

        Raises:
            RayBackendError: no node could play for `ray.node_timeout_s`.
        """
        if self._weights is None:
            raise RayBackendError("NodePool.play before publish_weights: the nodes have no weights "
                                  "to play")
        lag = self.config.ray.max_weights_lag
        for ahead in range(iteration + 1, min(iteration + lag, self.last_iteration) + 1):
            self._wanted.setdefault(ahead, num_games)
        self._wanted[iteration] = max(num_games, self._requested.get(iteration, 0))
        report = SelfPlayReport()
        started = time.perf_counter()
        try:
            while True:
                for finished in self._finished.pop(iteration, []):
                    self._deliver(finished, on_games, report)
                    report.seconds = time.perf_counter() - started
                    if progress is not None:
                        progress(report)
                if report.games >= self._wanted[iteration]:
                    break
                self._top_up(iteration)
                self._wait_once()
                self._check_nodes()
        finally:
            report.seconds = time.perf_counter() - started
        for table in (self._wanted, self._requested, self._serial):
            table.pop(iteration, None)
        return report

    def publish_weights(self, path: str, version: int) -> None:
        """Make the weights in `path` (a model file) version `version` for every later request.

        Requests still playing weights older than `version - max_weights_lag` are waited for
        first (their games are kept for their iteration).
        """
        oldest = version - self.config.ray.max_weights_lag
        while any(pending.request.weights_version < oldest for pending in self._pending.values()):
            self._wait_once()
            self._check_nodes()
        data = Path(path).read_bytes()
        self._weights = ray.put(data)
        self.version = version
        self.weights_bytes = len(pickle.dumps(data, protocol=5))

    # -- state for logs and tests ----------------------------------------------------------------

    @property
    def active_nodes(self) -> int:
        """Node actors currently taking requests."""
        return sum(node.state == "active" for node in self.nodes)

    def node_status(self) -> list[dict[str, Any]]:
        """Per node actor: `index`, `state`, `pid`, `host`, games `in_flight`."""
        return [{"index": node.index, "state": node.state, "pid": node.pid, "host": node.host,
                 "in_flight": node.in_flight} for node in self.nodes]

    def take_metrics(self) -> dict[str, float]:
        """The `ray/*` metrics since the last call: node failures and replacements, games lost,
        bytes per game and per weights update, positions/s of one node while it plays (the
        cluster's rate is about that times the active nodes; `selfplay/positions_per_s` counts
        the games delivered per second of the self-play phase, which with a weights lag of 1 or
        more includes games played during the previous training), the largest weights lag
        delivered."""
        counters = self._counters
        self._counters = self._zero_counters()
        return {
            "ray/nodes_active": float(self.active_nodes),
            "ray/node_failures": counters["node_failures"],
            "ray/node_replacements": counters["node_replacements"],
            "ray/lost_games": counters["lost_games"],
            "ray/bytes_per_game": counters["bytes"] / max(counters["games"], 1.0),
            "ray/node_positions_per_s": counters["positions"] / max(counters["seconds"], 1e-9),
            "ray/weights_bytes": float(self.weights_bytes),
            "ray/weights_lag_max": counters["lag_max"],
        }

    @staticmethod
    def _zero_counters() -> dict[str, float]:
        return dict.fromkeys(("node_failures", "node_replacements", "lost_games", "bytes", "games",
                              "positions", "seconds", "lag_max"), 0.0)

    # -- scheduling ------------------------------------------------------------------------------

    def _top_up(self, iteration: int) -> None:
        """Hand out requests: this iteration's first, then those ahead; the emptiest nodes first,
        each node up to `max_games_in_flight`, an iteration's games shared evenly."""
        for target in sorted(self._wanted):
            if target < iteration:
                continue
            remaining = self._wanted[target] - self._requested.get(target, 0)
            while remaining > 0:
                free = sorted((node for node in self.nodes if node.state == "active"
                               and node.in_flight < self.max_games_in_flight),
                              key=lambda node: node.in_flight)
                if not free:
                    return
                share = -(-remaining // len(free))
                for node in free:
                    games = min(self.games_per_request, share, remaining,
                                self.max_games_in_flight - node.in_flight)
                    if games > 0:
                        self._submit(node, target, games)
                        remaining -= games

    def _submit(self, node: _Node, iteration: int, games: int) -> None:
        serial = self._serial.get(iteration, 0)
        self._serial[iteration] = serial + 1
        request = GameRequest(iteration, games, request_stream(iteration, serial), self.version)
        samples, result = node.handle.play.remote(request, [self._weights])
        self._pending[result] = _Request(node.index, request, samples, result)
        node.in_flight += games
        self._requested[iteration] = self._requested.get(iteration, 0) + games

    def _wait_once(self) -> None:
        """Wait up to `poll_s` for results and probes, and take in all that are ready."""
        now = time.monotonic()
        for node in self.nodes:
            if (node.probe_at is not None and now >= node.probe_at) or (
                    node.probe is not None and now - node.probe_sent > PROBE_RETRY_S):
                self._send_probe(node)
        probes = {node.probe: node for node in self.nodes if node.probe is not None}
        refs = list(self._pending) + list(probes)
        if not refs:
            time.sleep(self.poll_s)
            return
        ready, rest = ray.wait(refs, num_returns=1, timeout=self.poll_s)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        for ref in ready:
            if ref in probes:
                self._on_probe(probes[ref], ref)
            else:
                self._on_result(self._pending.pop(ref))

    def _on_result(self, pending: _Request) -> None:
        node = self.nodes[pending.node]
        node.in_flight -= pending.request.games
        try:
            result: NodeResult = ray.get(pending.result)
            received = ray.get(pending.samples)
        except RayError as error:
            self._on_failure(node, pending, error)
            return
        node.failures = 0
        size = len(pickle.dumps(received, protocol=5)) + len(pickle.dumps(result, protocol=5))
        finished = _Finished(pending, owned_samples(received), result, size)
        self._finished.setdefault(pending.request.iteration, []).append(finished)

    def _deliver(self, finished: _Finished,
                 on_games: Callable[[list[GameSamples], list[GameRecord]], None],
                 report: SelfPlayReport) -> None:
        on_games([finished.samples], finished.result.records)
        if self.on_delivery is not None:
            self.on_delivery(finished.pending.samples)
        stats = finished.result.stats
        report.games += int(stats["games"])
        report.plies += int(stats.get("plies", 0))
        report.positions += int(stats["positions"])
        report.simulations += int(stats["simulations"])
        report.leaves_evaluated += int(stats["leaves_evaluated"])
        report.actor_stats.append(stats)
        self._counters["bytes"] += finished.bytes
        self._counters["games"] += stats["games"]
        self._counters["positions"] += stats["positions"]
        self._counters["seconds"] += stats["seconds"]
        lag = self.version - finished.pending.request.weights_version
        self._counters["lag_max"] = max(self._counters["lag_max"], float(lag))

    def _on_failure(self, node: _Node, pending: _Request, error: Exception) -> None:
        games, iteration = pending.request.games, pending.request.iteration
        self._requested[iteration] = self._requested.get(iteration, 0) - games
        self._counters["lost_games"] += games
        if node.state != "active":
            return  # another request of a node already known to be down
        node.failures += 1
        self._counters["node_failures"] += 1
        died = isinstance(error, RayActorError)
        what = "died" if died else f"failed: {str(error).strip().splitlines()[-1]}"
        self.log(f"ray: node actor {node.index} (pid {node.pid} on {node.host}) {what}; "
                 f"its games in flight are lost and asked of the other nodes")
        node.state = "recovering"
        node.unavailable_since = time.monotonic()
        if node.failures >= self.config.ray.node_max_failures:
            self._give_up(node, f"{node.failures} failures in a row (ray.node_max_failures)")
        else:
            self._send_probe(node)

    @staticmethod
    def _send_probe(node: _Node) -> None:
        """Ask the node actor for a sign of life (`ready()`), replacing any call still pending."""
        node.probe, node.probe_at, node.probe_sent = (node.handle.ready.remote(), None,
                                                      time.monotonic())

    def _on_probe(self, node: _Node, probe: ray.ObjectRef) -> None:
        node.probe = None
        try:
            info = ray.get(probe)
        except ActorDiedError as error:
            self._give_up(node, f"Ray provides no replacement ({type(error).__name__})")
            return
        except RayError:
            node.probe_at = time.monotonic() + self.poll_s  # being restarted: ask again shortly
            return
        starting = node.state == "starting"
        replaced = not starting and info["pid"] != node.pid
        node.state, node.pid, node.host = "active", int(info["pid"]), str(info["host"])
        if replaced:
            self._counters["node_replacements"] += 1
            self.log(f"ray: node actor {node.index} replaced (pid {node.pid} on {node.host}); "
                     "it plays again")
        elif not starting:
            self.log(f"ray: node actor {node.index} (pid {node.pid}) plays again")
        elif self._started_up:
            self.log(f"ray: node actor {node.index} started late (pid {node.pid} on {node.host}); "
                     "it plays now")

    def _give_up(self, node: _Node, reason: str) -> None:
        node.state = "gone"
        node.probe = node.probe_at = None
        self.log(f"ray: node actor {node.index} given up: {reason}")
        try:
            ray.kill(node.handle, no_restart=True)
        except RayError:
            pass

    def _check_nodes(self) -> None:
        if self.active_nodes:
            return
        waiting = [node for node in self.nodes
                   if node.probe is not None or node.probe_at is not None]
        if not waiting:
            raise RayBackendError("no self-play node actor is left: every one failed or was given "
                                  "up (see the log)")
        since = min(node.unavailable_since for node in waiting)
        if time.monotonic() - since > self.config.ray.node_timeout_s:
            raise RayBackendError(f"no self-play node actor could play for "
                                  f"{self.config.ray.node_timeout_s:.0f} s (ray.node_timeout_s)")

    # -- shutdown ----------------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Ask every idle node actor to stop its pipeline (up to `timeout`), then end the actors.

        Busy ones (games still in flight, after an interruption) are ended at once: their
        actor processes and server follow them, and their janitor unlinks the shared memory.
        """
        closing = [node.handle.close.remote() for node in self.nodes
                   if node.state != "gone" and not node.in_flight]
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=timeout)
        for node in self.nodes:
            try:
                ray.kill(node.handle, no_restart=True)
            except RayError:
                pass
            node.state, node.probe, node.probe_at = "gone", None, None
        self._pending.clear()
        self._finished.clear()

    def __enter__(self) -> NodePool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
