"""Data-parallel training with DistributedDataParallel, its ranks beyond the learner on Ray actors.

The learner in the driver process is rank 0: it samples the run's replay buffer, takes the
optimizer steps of `amazons.train.Run.train`, checkpoints and logs, as in the local backend.
Ranks 1..W-1 are `TrainingRank` actors that Ray places where their CPUs (and, when the learner
trains on CUDA, a GPU each) are free. Each keeps its own in-memory copy of the replay window
(the learner forwards every delivered `GameSamples` by object reference) and samples its own
stream from it, with its own symmetries.

Every rank wraps the same network in `torch.nn.parallel.DistributedDataParallel` (gloo on the CPU,
NCCL on GPUs): it broadcasts rank 0's parameters and buffers when it is built and averages the
gradients during every backward pass, so all ranks take the same optimizer steps and their
parameters stay identical. One step equals one step of a single process on the W batches
concatenated, with one difference: batch norm normalizes each rank's batch by that batch's own
statistics (and rank 0's running statistics are the ones kept, broadcast before every forward).

The rendezvous is a TCP store on the learner's host (`init_process_group` in every rank: Ray
actors that call it, chosen over Ray Train's `TorchTrainer`, which needs the `ray[train]` extra's
pandas and pyarrow and owns the training loop). A rank that dies makes the learner's next
collective fail after `ray.train_timeout_s`; the run then stops like any crash, and `--resume`
continues from the last checkpoint.

Imports torch, Ray, the learner, the network and replay.
"""

from __future__ import annotations

import datetime
import socket
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
import torch
import torch.distributed as dist
from ray.exceptions import GetTimeoutError, RayError
from torch.nn.parallel import DistributedDataParallel

from amazons.distributed import RayBackendError
from amazons.distributed.node import owned_samples
from amazons.neural.learner import Learner, SampleBatch, augment_batch
from amazons.neural.model import PolicyValueNet
from amazons.train.replay import GameSamples, ReplayBuffer

if TYPE_CHECKING:
    from amazons.train.config import TrainConfig

RANK_STREAM = 0xDD9  # tags the seed streams of the ranks' sampling and symmetry draws


def process_group_backend(device: torch.device) -> str:
    """NCCL for CUDA devices, gloo otherwise."""
    return "nccl" if device.type == "cuda" else "gloo"


def rendezvous_address() -> str:
    """`tcp://IP:PORT` on this host with a port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return f"tcp://{ray.util.get_node_ip_address()}:{port}"


def join_process_group(learner: Learner, address: str, rank: int, world_size: int,
                       timeout_s: float) -> None:
    """Join the default process group as `rank` and train `learner` through DistributedDataParallel.

    Blocks until all `world_size` ranks have joined (at most `timeout_s`); building the wrapper is
    itself a collective (rank 0's parameters and buffers are broadcast).
    """
    dist.init_process_group(process_group_backend(learner.device), init_method=address, rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s))
    if learner.device.type == "cuda":
        device_index = (learner.device.index if learner.device.index is not None
                        else torch.cuda.current_device())
        learner.wrap_model(lambda model: DistributedDataParallel(model, device_ids=[device_index]))
    else:
        learner.wrap_model(DistributedDataParallel)


def leave_process_group() -> None:
    """Destroy the default process group, if this process is in one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def cpu_state(value: Any) -> Any:
    """`value` (nested dicts, lists, tuples of tensors and plain values) with every tensor
    on the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: cpu_state(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_state(item) for item in value)
    return value


def rank_seed(config: TrainConfig, iteration: int, rank: int) -> int:
    """The seed of rank `rank`'s sampling and symmetry streams in a group started at `iteration`."""
    return int(np.random.SeedSequence([config.seed, iteration, rank, RANK_STREAM])
               .generate_state(1)[0])


def average_metrics(per_step: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over the steps that reported it."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for metrics in per_step:
        for key, value in metrics.items():
            totals[key] = totals.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    return {key: value / counts[key] for key, value in totals.items()}


@ray.remote
class TrainingRank:
    """One data-parallel rank beyond the learner: the same learner state, its own replay window.

    Args:
        config: the run's resolved config (`net`, `optim`, `train_batch_size`,
            `replay_window_positions`, `seed`, `torch_threads` are used).
        rank: this rank's number, 1..world_size-1.
        device: "cpu" or "cuda" (the learner's device type; Ray gives the actor its own GPU).
        learner_state: `[reference]` to the learner's `state_dict()` with CPU tensors.
        iteration: the run's iteration when the group started (seeds the rank's streams).
    """

    def __init__(self, config: TrainConfig, rank: int, device: str,
                 learner_state: list[ray.ObjectRef], iteration: int) -> None:
        torch.set_num_threads(config.torch_threads)
        self.config = config
        self.rank = rank
        self.learner = Learner(PolicyValueNet(config.net), config.optim, device)
        self.learner.load_state_dict(ray.get(learner_state[0]))
        seed = rank_seed(config, iteration, rank)
        self.learner.rng = np.random.default_rng(seed)
        self.replay = ReplayBuffer(None, config.replay_window_positions, seed=seed,
                                   board=config.board_spec)

    def ready(self) -> dict[str, Any]:
        """Where this rank runs: `rank`, `host`, `device`."""
        return {"rank": self.rank, "host": socket.gethostname(), "device": str(self.learner.device)}

    def join(self, address: str, world_size: int) -> None:
        """Join the process group (see `join_process_group`)."""
        join_process_group(self.learner, address, self.rank, world_size,
                           self.config.ray.train_timeout_s)

    def add_games(self, samples: GameSamples) -> None:
        """Add delivered games to this rank's replay window."""
        self.replay.add_to_window(owned_samples(samples))

    def step(self, batch: SampleBatch) -> dict[str, float]:
        """One data-parallel optimizer step on `batch` (every rank must step together)."""
        return self.learner.train_step(batch)

    def train(self, steps: int) -> dict[str, float]:
        """`steps` steps on batches drawn from this rank's window; the mean of their metrics."""
        per_step = []
        for _ in range(steps):
            batch = augment_batch(SampleBatch(**self.replay.sample(self.config.train_batch_size),
                                              board_size=self.replay.board.size),
                                  self.learner.rng)
            per_step.append(self.step(batch))
        return average_metrics(per_step) if per_step else {}

    def state_dict(self) -> dict[str, Any]:
        """The rank's learner state (CPU tensors)."""
        return cpu_state(self.learner.state_dict())


class TrainingGroup:
    """The learner (rank 0, in this process) and `world_size - 1` `TrainingRank` actors.

    Starts the ranks with the learner's state and `window` (the replay window's chunks), joins the
    process group, and leaves the learner training through DistributedDataParallel.

    Args:
        config: the run's resolved config (`ray.train_world_size`, `ray.rank_cpus`,
            `ray.train_timeout_s`).
        learner: rank 0's learner (wrapped in place).
        window: the chunks already in the replay window, oldest first.
        iteration: the run's iteration (seeds the ranks' streams).

    Raises:
        RayBackendError: the rank actors cannot start (no CPUs or GPUs free for them) within
            `ray.train_timeout_s`, or one fails while starting.
    """

    def __init__(self, config: TrainConfig, learner: Learner, window: tuple[GameSamples, ...] = (),
                 iteration: int = 0) -> None:
        self.config = config
        self.world_size = config.ray.train_world_size
        self.timeout_s = config.ray.train_timeout_s
        gpus = 1 if learner.device.type == "cuda" else 0
        state = ray.put(cpu_state(learner.state_dict()))
        self.ranks = [
            TrainingRank.options(num_cpus=config.ray.rank_cpus, num_gpus=gpus, max_restarts=0)
            .remote(config, rank, learner.device.type, [state], iteration)
            for rank in range(1, self.world_size)
        ]
        try:
            self._get([rank.ready.remote() for rank in self.ranks], "start")
            for chunk in window:
                self.add_games(ray.put(chunk))
            address = rendezvous_address()
            joined = [rank.join.remote(address, self.world_size) for rank in self.ranks]
            join_process_group(learner, address, 0, self.world_size, self.timeout_s)
            self._get(joined, "join the process group")
        except BaseException:
            self.close()
            raise

    def _get(self, refs: list[ray.ObjectRef], what: str) -> list[Any]:
        try:
            return ray.get(refs, timeout=self.timeout_s)
        except GetTimeoutError:
            raise RayBackendError(
                f"the {self.world_size - 1} training rank actors did not {what} within "
                f"{self.timeout_s:.0f} s (ray.train_timeout_s): does the cluster have "
                f"{self.config.ray.rank_cpus} free CPUs (and a GPU when training on CUDA) "
                f"for each?") from None
        except RayError as error:
            raise RayBackendError(f"a training rank failed to {what}: {error}") from None

    def add_games(self, samples: ray.ObjectRef) -> None:
        """Send delivered games (by reference) to every remote rank's window."""
        for rank in self.ranks:
            rank.add_games.remote(samples)

    def start_training(self, steps: int) -> list[ray.ObjectRef]:
        """Start `steps` steps on every remote rank; the learner then takes the same number."""
        return [rank.train.remote(steps) for rank in self.ranks]

    def finish_training(self, started: list[ray.ObjectRef]) -> list[dict[str, float]]:
        """Wait for the remote ranks' steps; their mean metrics, rank 1 first.

        Raises:
            RayBackendError: a rank failed or did not finish within `ray.train_timeout_s`.
        """
        return self._get(started, "finish their training steps")

    def close(self) -> None:
        """Leave the process group and end the rank actors (a rank may be waiting in a collective
        that will never complete, so they are not asked to finish first)."""
        leave_process_group()
        for rank in self.ranks:
            try:
                ray.kill(rank, no_restart=True)
            except RayError:
                pass
        self.ranks = []
