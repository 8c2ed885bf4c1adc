"""The self-play node actor: one Ray actor per node runs that node's local pipeline.

`SelfPlayNode` owns an `InferenceServer` and its `SelfPlayWorkers`, exactly the local main job's
pipeline: the searches' leaves go through shared memory to the node's own server and never cross
Ray. What crosses Ray, per request of the learner (`amazons.distributed.pool.NodePool`):

* to the node: a `GameRequest` (four ints) and the weights, the model file's bytes put into the
  object store once per version and passed by reference; a node fetches each version once;
* from the node: the finished games as one `GameSamples` (numpy arrays, its own object, so the
  learner can forward it to training ranks by reference) and a `NodeResult` (the game records
  and counters).

Ray kills a worker's child processes with it, so a node actor that is killed cannot unlink its
shared memory or remove its scratch folder itself: each node actor starts a detached janitor
(`_janitor.py`) that does.

Imports Ray, the inference server, self-play, replay and records; torch only to limit its
threads and through the server's evaluator factory.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
import torch

from amazons.neural.served import NetworkEvaluatorFactory, server_evaluator_factory
from amazons.players.records import GameRecord
from amazons.serving.server import InferenceServer
from amazons.train.replay import GameSamples
from amazons.train.selfplay import SelfPlayWorkers

if TYPE_CHECKING:
    from amazons.train.config import TrainConfig


# Requests one iteration may hand out (each gets its own seed stream).
STREAMS_PER_ITERATION = 1 << 16


def request_stream(iteration: int, serial: int) -> int:
    """The seed stream of the `serial`-th request of `iteration`: unique across nodes and requests.

    It is what `SelfPlayWorkers.play` takes as `iteration` to seed its actors.
    """
    return iteration * STREAMS_PER_ITERATION + serial % STREAMS_PER_ITERATION


@dataclass(frozen=True)
class GameRequest:
    """Games the learner asks of one node."""

    iteration: int  # the iteration whose replay the games join
    games: int  # games to play
    stream: int  # seeds the node's actors (`request_stream`)
    weights_version: int  # the weights to play them with (passed beside the request by reference)


@dataclass
class NodeResult:
    """What a node returns with the samples of a request."""

    records: list[GameRecord]  # one per game, with a `Node` header naming the node actor
    # games, positions, simulations, leaves_evaluated, seconds, weights_version, pid
    stats: dict[str, float]


def owned_samples(samples: GameSamples) -> GameSamples:
    """A copy of `samples` whose arrays the caller owns.

    Ray hands numpy arrays out read-only and zero-copy from its object store, where they would
    keep the whole object pinned for as long as they live (a replay window holds them for hours).
    """
    values = {item.name: getattr(samples, item.name) for item in fields(GameSamples)}
    return GameSamples(**{name: np.array(value, copy=True) if isinstance(value, np.ndarray)
                          else value for name, value in values.items()})


def node_device(config: TrainConfig) -> str:
    """The inference device of a node actor: `config.device`, where "auto" means CUDA exactly
    when the actor reserved GPUs (`ray.node_gpus > 0`)."""
    if config.device != "auto":
        return config.device
    return "cuda" if config.ray.node_gpus > 0 else "cpu"


def node_evaluator_factory(config: TrainConfig, model_path: str | Path) -> NetworkEvaluatorFactory:
    """The node's inference server evaluator:
    `amazons.neural.served.server_evaluator_factory` (the main job's) on the node's device
    (`node_device`)."""
    return server_evaluator_factory(model_path, node_device(config), config.inference_dtype,
                                    config.inference, board_size=config.board_spec.size)


@ray.remote
class SelfPlayNode:
    """One node's self-play: the shared-memory inference server and its actor processes.

    The pipeline starts with the first request (which brings the weights) and is rebuilt after a
    request fails. Methods run one at a time, in the order the learner sent them.

    Args:
        config: the run's resolved config (`selfplay`, `inference`, `device`, `inference_dtype`
            and `ray` are used).
        index: the node actor's number in the pool (the records' `Node` header).
    """

    def __init__(self, config: TrainConfig, index: int) -> None:
        torch.set_num_threads(1)
        self.config = config
        self.index = index
        self.directory = Path(tempfile.mkdtemp(prefix=f"amazons-node{index}-"))
        self.janitor = _start_janitor()
        self.janitor.stdin.write(f"{self.directory}\n")
        self.janitor.stdin.flush()
        self.server: InferenceServer | None = None
        self.workers: SelfPlayWorkers | None = None
        self.version: int | None = None

    def ready(self) -> dict[str, Any]:
        """Where this actor runs: `pid`, `host`, Ray `node_id`."""
        return {"pid": os.getpid(), "host": socket.gethostname(),
                "node_id": ray.get_runtime_context().get_node_id()}

    @ray.method(num_returns=2)
    def play(self, request: GameRequest,
             weights: list[ray.ObjectRef]) -> tuple[GameSamples, NodeResult]:
        """Play `request.games` games with the weights `weights[0]` (model file bytes, version
        `request.weights_version`; fetched only when the version changes).

        Returns:
            The games' samples, concatenated, and their `NodeResult`.

        Raises:
            amazons.train.selfplay.SelfPlayError, amazons.serving.server.InferenceError: the
                pipeline failed (it is stopped, and started again by the next request).
        """
        try:
            self._use_weights(weights[0], request.weights_version)
            samples: list[GameSamples] = []
            records: list[GameRecord] = []

            def keep(parts: list[GameSamples], texts: list[GameRecord]) -> None:
                samples.extend(parts)
                records.extend(texts)

            report = self.workers.play(request.games, keep, iteration=request.stream)
        except BaseException:
            self._stop_pipeline()
            raise
        for record in records:
            record.headers["Node"] = str(self.index)
        stats = {"games": float(report.games), "plies": float(report.plies),
                 "positions": float(report.positions), "simulations": float(report.simulations),
                 "leaves_evaluated": float(report.leaves_evaluated), "seconds": report.seconds,
                 "weights_version": float(self.version), "pid": float(os.getpid())}
        return GameSamples.concatenate(samples), NodeResult(records, stats)

    def _use_weights(self, reference: ray.ObjectRef, version: int) -> None:
        if self.server is not None and version == self.version:
            return
        path = self.directory / f"weights-{version:08d}.pt"
        path.write_bytes(ray.get(reference))
        if self.server is None:
            self.server = InferenceServer(node_evaluator_factory(self.config, path),
                                          self.config.selfplay.num_actors, self.config.inference)
            self.server.start()
            self.workers = SelfPlayWorkers(self.server, self.config.selfplay,
                                           board=self.config.board_spec)
            names = [*self.server.slot_names, *self.workers.semaphore_names]
            self.janitor.stdin.write("".join(f"{name}\n" for name in names))
            self.janitor.stdin.flush()
        self.server.publish_weights(str(path), version)
        keep = {path.name} | ({f"weights-{self.version:08d}.pt"} if self.version is not None
                              else set())
        self.version = version
        for old in self.directory.glob("weights-*.pt"):
            if old.name not in keep:
                old.unlink()  # the server has loaded every version before the previous one

    def _stop_pipeline(self) -> None:
        workers, server = self.workers, self.server
        self.workers = self.server = None
        self.version = None
        if workers is not None:
            workers.close()
        if server is not None:
            server.stop()

    def close(self) -> None:
        """Stop the actor processes and the server (unlinking its shared memory); remove files."""
        self._stop_pipeline()
        self.janitor.stdin.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _start_janitor() -> subprocess.Popen:
    """Start `_janitor.py`, which removes the segments, the semaphores and the folder named on its
    input once this process is gone (Ray kills a worker's children with it, so the shared-memory
    owner's own clean-up and multiprocessing's resource tracker cannot be relied on when a node
    actor is killed)."""
    janitor = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_janitor.py"))],
                               stdin=subprocess.PIPE, text=True, start_new_session=True)
    janitor.wait()  # its first process exits at once; the detached second one holds the pipe
    return janitor
