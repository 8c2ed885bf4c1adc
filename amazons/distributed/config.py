"""`RayConfig`: how `python -m amazons.train --backend ray` spreads a run over a Ray cluster.

It is the `ray` group of `amazons.train.TrainConfig`, so it is written to `config.json`, read back
by `--resume` and overridden like any field (`ray.max_weights_lag=0`). The local backend ignores it.

Imports nothing beyond the standard library (the config module of the main job loads it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RayConfig:
    """Placement, back-pressure, weights staleness and fault limits of the Ray backend."""

    node_cpus: float = 1.0  # logical CPUs each self-play node actor asks Ray for
    node_gpus: float = 0.0  # GPUs each node actor asks for (its inference server uses them); > 0: one actor per that many GPUs of a node
    max_nodes: int = 0  # self-play node actors to start, at most (0 = one per node that fits one, or per GPU share)
    games_per_request: int = 0  # games one request asks a node for (0 = 2 x selfplay.num_actors x selfplay.games_in_parallel)
    max_games_in_flight: int = 0  # games requested from one node and not yet returned, at most (0 = 2 x games_per_request)
    max_weights_lag: int = 1  # a node never plays with weights more than this many versions older than the latest (0 = self-play and training alternate, as in the local backend)
    node_max_restarts: int = 3  # times Ray replaces a node actor that died (a new process on a live node)
    node_max_failures: int = 3  # consecutive failed requests after which a node actor is given up
    node_timeout_s: float = 600.0  # with no node actor able to play, wait this long for one before stopping the run
    train_world_size: int = 1  # DDP ranks: the learner (the driver process) is rank 0, the others are Ray actors
    rank_cpus: float = 1.0  # logical CPUs each remote training rank asks for (plus one GPU when the learner trains on CUDA)
    train_timeout_s: float = 600.0  # a DDP rendezvous or collective waits this long for the other ranks
    num_cpus: int = 0  # only when the backend starts Ray itself (no --address): logical CPUs (0 = os.cpu_count())
    object_store_mb: int = 0  # only when the backend starts Ray itself: object store size in MiB (0 = Ray's default)
    log_to_driver: bool = False  # show the Ray actors' own output in the driver's console

    def __post_init__(self) -> None:
        for name in ("node_cpus", "node_gpus", "rank_cpus"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"ray.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("max_nodes", "games_per_request", "max_games_in_flight", "max_weights_lag",
                     "node_max_restarts", "num_cpus", "object_store_mb"):
            if getattr(self, name) < 0:
                raise ValueError(f"ray.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("node_max_failures", "train_world_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ray.{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("node_timeout_s", "train_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ray.{name} must be > 0, got {getattr(self, name)!r}")
        if self.games_per_request and self.max_games_in_flight and self.max_games_in_flight < self.games_per_request:
            raise ValueError(f"ray.max_games_in_flight ({self.max_games_in_flight}) must be >= "
                             f"ray.games_per_request ({self.games_per_request})")
