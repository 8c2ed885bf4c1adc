"""Which growth trains better: the learner alone, on the same batches, from the same trained net.

    python benchmarks/growth_methods.py --model amazons/models/default.pt \\
        --replay RUN_DIR/replay --steps 600 net.blocks=4 net.channels=48

The model is grown into the config the `net.*` overrides make of its own (`amazons.neural.growth`)
by each method, "net2net" and "silent"; two references train beside them: the model itself
(ungrown) and the bigger net from a fresh initialization. Every arm is a `Learner` with the cpu
preset's optimizer settings (a fresh optimizer and schedule, as `--init` starts a run) and takes
the same batches: drawn from the replay's games with one seeded generator and augmented with the
same symmetries. The replay's last `--holdout` share of games is held out; every `--every` steps
each arm's loss on the same held-out positions is measured in eval mode.

The figure that decides is the held-out loss at the end (lower is better), and how soon each
grown arm gets below the ungrown one. At step 0 both grown arms equal the ungrown net (the held-out
loss agrees to float rounding): a check that growth kept the function. One torch thread; run
nothing beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from amazons.neural.checkpoint import init_weights_from, load_model_for_play  # noqa: E402
from amazons.neural.growth import GROWTH_METHODS, net_shape  # noqa: E402
from amazons.neural.learner import Learner, SampleBatch, augment_batch  # noqa: E402
from amazons.neural.model import NetConfig, PolicyValueNet, count_parameters  # noqa: E402
from amazons.train.config import apply_overrides, preset_config  # noqa: E402
from amazons.train.replay import CHUNK_PATTERN, GameSamples, ReplayBuffer, load_chunk  # noqa: E402

ARMS = ("ungrown", *GROWTH_METHODS, "scratch")


def split_replay(replay: Path, holdout: float) -> tuple[GameSamples, GameSamples]:
    """The games of the replay's chunks (in order), split into training and held-out games by
    chunk: the last `holdout` share of chunks is held out."""
    paths = sorted((int(CHUNK_PATTERN.search(path.name).group(1)), path)
                   for path in replay.iterdir() if CHUNK_PATTERN.search(path.name))
    if len(paths) < 2:
        raise SystemExit(f"{replay}: need at least two replay chunks, found {len(paths)}")
    held = max(1, round(len(paths) * holdout))
    chunks = [load_chunk(path) for _, path in paths]
    return (GameSamples.concatenate(chunks[:-held]), GameSamples.concatenate(chunks[-held:]))


def fixed_batches(samples: GameSamples, count: int, batch_size: int, seed: int,
                  augment: bool) -> list[SampleBatch]:
    """`count` batches drawn from `samples` with generator `seed` (augmented with the 8 board
    symmetries when `augment`), the same list for every arm."""
    buffer = ReplayBuffer(None, samples.num_positions + 1, seed=seed)
    buffer.add_to_window(samples)
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        batch = SampleBatch(**buffer.sample(batch_size))
        batches.append(augment_batch(batch, rng) if augment else batch)
    return batches


def held_out_loss(learner: Learner, batches: list[SampleBatch]) -> dict[str, float]:
    """The mean loss terms of `batches` in eval mode."""
    sums: dict[str, float] = {}
    for batch in batches:
        for name, value in learner.validation_metrics(batch).items():
            sums[name] = sums.get(name, 0.0) + value
    return {name: value / len(batches) for name, value in sums.items()}


def arm_model(arm: str, model_path: Path, small: PolicyValueNet, config: NetConfig,
              seed: int) -> PolicyValueNet:
    """The network an arm starts from."""
    if arm == "ungrown":
        return small
    torch.manual_seed(seed)
    model = PolicyValueNet(config)
    if arm != "scratch":
        init_weights_from(model_path, model, arm, seed)
    return model


def main(argv: list[str] | None = None) -> int:
    """Train every arm on the same batches and print the held-out loss table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, type=Path, help="the trained model to grow")
    parser.add_argument("--replay", required=True, type=Path, help="a run's replay folder")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--holdout", type=float, default=0.15)
    parser.add_argument("--held-out-batches", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("overrides", nargs="+", metavar="net.FIELD=VALUE",
                        help="the bigger net, as changes of the model's own config")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    small_config = load_model_for_play(args.model).config
    preset = preset_config("cpu")
    config = apply_overrides(dataclasses.replace(preset, net=small_config), args.overrides).net
    optim = preset.optim
    train, held = split_replay(args.replay, args.holdout)
    print(f"{args.model}: {net_shape(small_config)} into {net_shape(config)}; "
          f"{train.num_positions:,} training and {held.num_positions:,} held-out positions",
          flush=True)
    batches = fixed_batches(train, args.steps, preset.train_batch_size, args.seed, augment=True)
    held_batches = fixed_batches(held, args.held_out_batches, 256, args.seed + 1, augment=False)
    results: dict[str, dict] = {}
    for arm in args.arms.split(","):
        small = load_model_for_play(args.model).train()
        model = arm_model(arm, args.model, small, config, args.seed)
        learner = Learner(model, optim, seed=args.seed)
        curve = [(0, held_out_loss(learner, held_batches)["loss"])]
        train_losses = []
        started = time.perf_counter()
        for step, batch in enumerate(batches, start=1):
            train_losses.append(learner.train_step(batch)["loss"])
            if step % args.every == 0 or step == len(batches):
                curve.append((step, held_out_loss(learner, held_batches)["loss"]))
        seconds = time.perf_counter() - started
        results[arm] = {"net": net_shape(model.config), "parameters": count_parameters(model),
                        "held_out": curve, "train_last_100": float(np.mean(train_losses[-100:])),
                        "seconds": seconds}
        print(f"{arm:8s} {net_shape(model.config):>6s} {count_parameters(model):>9,} params "
              f"held-out loss " + " ".join(f"{step}:{loss:.4f}" for step, loss in curve)
              + f"  ({seconds:.0f} s)", flush=True)
    steps = [step for step, _ in next(iter(results.values()))["held_out"]]
    print("\n| arm | net | parameters | " + " | ".join(f"step {s}" for s in steps)
          + " | train loss, last 100 | seconds |")
    print("|---|---|---:|" + "---:|" * len(steps) + "---:|---:|")
    for arm, result in results.items():
        print(f"| {arm} | {result['net']} | {result['parameters']:,} | "
              + " | ".join(f"{loss:.4f}" for _, loss in result["held_out"])
              + f" | {result['train_last_100']:.4f} | {result['seconds']:.0f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
