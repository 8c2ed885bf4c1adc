"""Beyond one machine: self-play on a Ray cluster and data-parallel training (`--backend ray`).

* `node`: `SelfPlayNode`, the Ray actor that runs one node's local self-play pipeline (the
  shared-memory inference server and its actor processes);
* `pool`: `NodePool`, the learner's side: requests of whole games with back-pressure, weights by
  object reference, node failures and replacements.
* `ddp`: `TrainingGroup`, DistributedDataParallel training whose ranks beyond the learner are Ray
  actors (`TrainingRank`), each sampling its own copy of the replay window.
* `ray_backend`: `RayRun`, the main job's `Run` on top of these, and `connect`.

`RayConfig`, the `ray` group of `TrainConfig`, lives in `amazons.train.config`, so the main job
never imports this package: `--backend ray` loads `ray_backend` through the `amazons.backends` entry
point. These modules import Ray. Per-leaf evaluations never cross Ray: only whole games, weights and
metrics do.
"""


class RayBackendError(RuntimeError):
    """The Ray backend cannot go on (no node can play, a rank failed); the message says why."""
