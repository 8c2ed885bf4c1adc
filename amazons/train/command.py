"""The main job: `python -m amazons.train`.

    python -m amazons.train [--preset cpu|gpu] [--run-dir DIR] [--iterations N]
        [--resume | --init MODEL] [--backend local|ray [--address ADDR]] [KEY=VALUE ...]

An iteration is `games_per_iteration` self-play games and the training steps they are owed,
`ceil(new_positions * sample_reuse / train_batch_size)` (bounded), on uniformly sampled,
symmetry-augmented batches from the replay window; then a model file for play, the checkpoint
(model, optimizer, scheduler, RNGs, step), `state.json` and a metrics line; every `eval.every`
iterations an evaluation (arena matches of the new model against the previous one and the
baseline players, the network players served by inference servers on the run's device
(`amazons.matches.evaluation`), fitted into an Elo ladder with RandomPlayer at 0).

`pipeline.mode` says how the parts share the machine (`amazons.train.pipeline`):
* `async` (the presets'): persistent actor processes play without pause through the
  shared-memory inference server (a lane whose game ends starts the next at once), the learner
  trains in this process at the same time, holding `sample_reuse` samples per position played,
  and publishes its weights to the server through shared memory every
  `pipeline.publish_every_steps` steps or `pipeline.publish_interval_s` seconds; the evaluation
  runs in a thread beside them (`Run.run_async`);
* `sync`: self-play, training and evaluation one after the other, the weights published once
  per iteration (`Run.run_iteration`).

Everything a run needs is in its run directory: `config.json` (the resolved config),
`checkpoints/latest.pt`, `models/model-NNNN.pt`, `replay/chunk-*.npz`, `games/*.txt`,
`metrics.jsonl`, `elo.json` and TensorBoard logs under `tensorboard/`. Ctrl-C stops every
process and unlinks the shared memory; `--resume` continues from the last finished iteration
with all persisted games. The checkpoint is an iteration's commit point: it carries the run's
state (the iteration, the games trained on, the Elo matches, the lineage), and `state.json` is a
copy of that state written after it. A hard kill between the two leaves them an iteration apart:
`--resume` continues from the checkpoint and rewrites `state.json` (`Run.resumed_state`).

`--init MODEL` starts a new run from a trained model's weights (a warm start: fresh optimizer,
schedule and replay, iteration 0 is that model); the path is kept as `init_model` in `config.json`.

Config overrides use dotted paths into `TrainConfig`, e.g. `selfplay.search.simulations=64` or
`net.blocks=4`.

`--backend ray` runs the same iterations with self-play on every node of a Ray cluster and,
optionally, data-parallel training (`amazons.distributed`, docs/distributed.md); it runs the
presets in the sync mode (`Run.fit_config`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from pathlib import Path

import torch

from amazons.core.config import config_from_dict, config_to_dict
from amazons.train.backends import load_backend
from amazons.train.cli import build_parser
from amazons.train.config import TrainConfig, apply_overrides, preset_config
from amazons.train.signals import stop_on_sigterm

__all__ = ["main", "resolve_config"]

# The module docstring above is the command's help. This module is the command: the run's config
# resolved from the command line (`resolve_config`), the backend chosen
# (`amazons.train.backends`), the run run, and its stop by Ctrl-C or SIGTERM reported with how to
# resume (`amazons.train.signals`). The parser is `amazons.train.cli`'s, parsed before anything
# heavy is imported.


def resolve_config(args: argparse.Namespace) -> TrainConfig:
    """The run's config: from `run_dir/config.json` when resuming, else from the preset; then
    `--iterations` and the KEY=VALUE overrides.

    A resumed run takes every override (optimizer, schedule, self-play, search, evaluation,
    replay) except a change of the board or of the network, which it refuses naming the field.
    """
    init = getattr(args, "init", None)
    if init is not None and args.resume:
        raise SystemExit("--init starts a new run from a model's weights; --resume continues from "
                         "the run's own checkpoint: pass one of them")
    config_path = args.run_dir / "config.json"
    if args.resume:
        if not (args.run_dir / "checkpoints" / "latest.pt").exists() or not config_path.exists():
            raise SystemExit(f"--resume: {args.run_dir} holds no finished iteration to resume from")
        config = config_from_dict(TrainConfig, json.loads(config_path.read_text()))
    else:
        if (args.run_dir / "checkpoints" / "latest.pt").exists():
            raise SystemExit(f"{args.run_dir} already holds a run: "
                             "pass --resume, or another --run-dir")
        preset = args.preset or ("gpu" if torch.cuda.is_available() else "cpu")
        config = preset_config(preset)
    stored = config
    config = apply_overrides(config, args.overrides)
    if args.resume and not config.board_spec.same_start(stored.board_spec):
        raise SystemExit(f"--resume cannot change the board ({stored.board} -> {config.board}): "
                         f"start a new run in another --run-dir, e.g. with --init from this "
                         f"run's model")
    if args.resume and config.net != stored.net:
        changed = [f"net.{name}: {getattr(stored.net, name)!r} -> {getattr(config.net, name)!r}"
                   for name in (item.name for item in dataclasses.fields(config.net))
                   if getattr(stored.net, name) != getattr(config.net, name)]
        raise SystemExit(f"--resume cannot change the network's shape or head "
                         f"({'; '.join(changed)}): start a new run in another --run-dir")
    if args.iterations is not None:
        config = dataclasses.replace(config, iterations=args.iterations)
    if init is not None:
        if init == "default":
            from amazons.models import default_checkpoint_path

            init = str(default_checkpoint_path(config.board_spec.size))
        config = dataclasses.replace(config, init_model=str(Path(init).resolve()))
    if not args.resume and config.init_model and not Path(config.init_model).is_file():
        raise SystemExit(f"init_model: no such model file {config.init_model}")
    return config


def main(argv: list[str] | None = None) -> int:
    """Command line entry point (exit status 0, or 130 / 143 after SIGINT / SIGTERM)."""
    parser = build_parser(__doc__)
    args = parser.parse_args(argv)
    if args.run_dir is None:
        args.run_dir = Path("runs") / (args.preset
                                       or ("gpu" if torch.cuda.is_available() else "cpu"))
    try:
        backend = load_backend(args.backend)
        config = backend.fit_config(resolve_config(args), args.overrides)
    except ValueError as error:
        parser.error(str(error))
    args.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        run = backend(config, args.run_dir, args.resume, address=args.address)
    except ValueError as error:
        parser.error(str(error))
    (args.run_dir / "config.json").write_text(json.dumps(config_to_dict(config), indent=2) + "\n")
    stopped_by: list[int] = []
    previous_handler = stop_on_sigterm(stopped_by)
    try:
        run.run(progress=not args.no_progress)
    except KeyboardInterrupt:
        signum = stopped_by[0] if stopped_by else signal.SIGINT
        print(f"\n{signal.Signals(signum).name}: stopped after iteration {run.iteration}; "
              f"continue with: python -m amazons.train --run-dir {args.run_dir} --resume"
              + (f" --backend {args.backend}" if args.backend != "local" else ""), file=sys.stderr)
        return 128 + signum
    finally:
        run.close()
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
    print(f"finished {run.iteration} iterations in {args.run_dir}")
    return 0
