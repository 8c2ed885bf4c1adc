"""`python -m amazons.train --backend ray`: the main job with self-play on a Ray cluster.

`RayRun` is `amazons.train.Run` with two parts swapped: self-play goes to a `NodePool` (one
`SelfPlayNode` actor per node, each running the local pipeline) instead of this machine's
`SelfPlayWorkers`, and with `ray.train_world_size > 1` training runs data-parallel over a
`TrainingGroup`. Everything else is the local run's: the same config, run directory, replay chunks
(written by the learner alone, so their names are unique whatever the number of nodes), game
records, evaluation, checkpoints, logs and `--resume`. Each iteration's metrics gain the `ray/*`
counters of `NodePool.take_metrics`. It runs the synchronous pipeline (`Run.run_iteration`): the
presets run as written, their async `pipeline.mode` replaced by sync (`Run.fit_config`: a line in
the log, and `config.json` records sync), while an async mode named by an override is refused;
`ray.max_weights_lag` lets nodes play ahead while the learner trains. It is the `ray` entry point of
the `amazons.backends` group (pyproject.toml), which `python -m amazons.train --backend ray` loads.

Imports Ray (through the pool and the group) and the main job.
"""

from __future__ import annotations

import os
from pathlib import Path

try:
    import ray
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError("--backend ray needs Ray: pip install 'amazons[ray]'") from error

from amazons.distributed.ddp import TrainingGroup
from amazons.distributed.pool import NodePool
from amazons.neural.checkpoint import save_model
from amazons.neural.model import count_parameters
from amazons.train.config import RayConfig, TrainConfig, training_steps
from amazons.train.run import Run


def connect(address: str | None, config: RayConfig) -> bool:
    """Connect this process to Ray; returns whether it did (False: it was connected already).

    Args:
        address: a cluster to join ("auto": the one `ray start` began on this machine, or
            "HOST:PORT"); None starts a Ray instance on this machine with `config.num_cpus`
            logical CPUs and a `config.object_store_mb` object store, without the dashboard.
            Ray puts its sockets and logs under `RAY_TMPDIR` (default /tmp/ray).
        config: the run's `ray` group.
    """
    if ray.is_initialized():
        return False
    if address is None:
        ray.init(address="local", num_cpus=config.num_cpus or os.cpu_count(),
                 object_store_memory=config.object_store_mb * 1024**2 or None,
                 include_dashboard=False, log_to_driver=config.log_to_driver)
    else:
        ray.init(address=address, log_to_driver=config.log_to_driver)
    return True


class RayRun(Run):
    """A training run whose self-play (and optionally training) spreads over a Ray cluster.

    Args:
        config: the resolved config; its `ray` group sets the backend's limits.
        run_dir: the run directory (the same layout as the local backend's).
        resume: continue the run in `run_dir`.
        address: see `connect`.
    """

    # a preset's async becomes sync (`Run.fit_config`); an overridden async is refused
    pipeline_modes = ("sync",)

    def __init__(self, config: TrainConfig, run_dir: Path, resume: bool,
                 address: str | None = None) -> None:
        super().__init__(config, run_dir, resume)
        try:
            self.owns_connection = connect(address, config.ray)
        except BaseException:
            super().close()
            raise
        self.world_size = config.ray.train_world_size
        self.nodes: NodePool | None = None
        self.group: TrainingGroup | None = None

    def run(self, progress: bool = True) -> None:
        config = self.config
        path = self.model_path(self.iteration)
        if not path.exists():
            save_model(path, self.learner.model, {"iteration": self.iteration})
        try:
            # before the node actors, so that the ranks get their CPUs and GPUs first
            if self.world_size > 1:
                self.group = TrainingGroup(config, self.learner, self.replay.window, self.iteration)
            with NodePool(config, last_iteration=config.iterations) as nodes:
                self.nodes = nodes
                if self.group is not None:
                    nodes.on_delivery = self.group.add_games
                print(f"run {self.run_dir}: backend ray (sync pipeline), preset {config.preset}, "
                      f"net {count_parameters(self.learner.model):,} parameters, "
                      f"learner on {self.device}, {nodes.active_nodes} self-play node actors, "
                      f"{self.world_size} training rank(s), "
                      f"iteration {self.iteration}/{config.iterations}, "
                      f"replay {len(self.replay):,} positions",
                      flush=True)
                nodes.publish_weights(str(path), self.iteration)
                while self.iteration < config.iterations:
                    self.run_iteration(nodes, nodes, progress)
        finally:
            if self.group is not None:
                self.group.close()
            self.group = None
            self.nodes = None

    def train(self, new_positions: int, progress: bool) -> dict[str, float]:
        """The local training phase on the learner, with the remote ranks stepping alongside."""
        if self.group is None:
            return super().train(new_positions, progress)
        started = self.group.start_training(training_steps(self.config, new_positions,
                                                           self.world_size))
        metrics = super().train(new_positions, progress)
        remote = self.group.finish_training(started)
        losses = [metrics[key] for key in ("train/loss",) if key in metrics]
        losses += [rank["loss"] for rank in remote if "loss" in rank]
        if losses:
            metrics["train/loss_all_ranks"] = sum(losses) / len(losses)
        metrics["train/world_size"] = float(self.world_size)
        return metrics

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        if self.nodes is not None:
            metrics.update(self.nodes.take_metrics())
        super().log(iteration, metrics)

    def close(self) -> None:
        super().close()
        if self.owns_connection and ray.is_initialized():
            ray.shutdown()
