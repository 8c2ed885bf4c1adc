"""The learner's step, op by op: where one `Learner.train_step` of the cpu preset spends its time.

    python benchmarks/profile_learner.py [--steps N] [--rounds R] [--top K] [KEY=VALUE ...]
    python benchmarks/profile_learner.py --ablation [--rounds R] [--loss-steps S]

The profile builds the cpu preset's learner (`amazons.train.config` preset "cpu": its `net`,
`optim` with the `KEY=VALUE` overrides, e.g. `dense_policy_targets=false`, and
`train_batch_size`) on one torch thread, and `--steps` batches (default 16) drawn from a replay
window of real self-play samples (`replay_window.uniform_window`: short uniform-search games, every
legal move a label, as the completed-Q target labels them) and augmented. It prints:

* the step's wall and CPU milliseconds and samples per second, each batch prepared before its
  step's clock starts (`Learner.prepare`: features, labels, the dense targets), as the prefetch
  thread prepares it: the median over `--rounds` (default 5) rounds of the `--steps` steps,
  after a warm-up round (the CPU time is the thread's, `time.thread_time`: what other processes
  on the machine take shows less in it); and the CPU milliseconds of the batch's own work, on
  the prefetch thread by default: the draw from the window with its augmentation, and the
  preparation;
* the CPU time by op under `torch.profiler` (one more round, the batches prepared before):
  each op's self CPU time per step and its share of the step's, the `--top` largest (default
  20), and the share outside the
  convolutions (`aten::convolution_backward` and the forward's `aten::mkldnn_convolution`, or
  whichever convolution kernel the build dispatches to: every op with "conv" in its name);
* the step's GFLOP: the forward convolutions' and the matrix products' (forward and backward)
  as the profiler counts them (`with_flops=True`), and the convolutions' backward estimated at
  twice their forward (a gradient for the input and one for the weights); achieved GFLOP/s of the
  convolutions over their own time and of the whole step over its time;
* the core's fp32 peak: FMA units x fp32 lanes x 2 flops a cycle x the clock, with 2 FMA units,
  8 lanes with AVX2 and 16 with AVX-512 (`avx512f`), the clock as /proc/cpuinfo reports it ("cpu
  MHz"; a virtual machine reports the nominal clock, so the true peak may be higher while the
  core boosts), and whether the core has native bf16 (`avx512_bf16`, `amx_bf16`).

`--ablation` measures the learner's settings (`OptimConfig.metrics_every`,
`dense_policy_targets`, `fused_adamw`, `compile_step`) and the batch prefetch
(`TrainConfig.prefetch_batches`):

* samples/s of the step with every setting off ("off": `metrics_every=1`,
  `dense_policy_targets=false`, `fused_adamw=false`), with each one alone on, with all on (the
  defaults) and with all on plus `compile_step=true` (its compilation not timed): on each batch
  every arm steps in turn, so a slow moment of the machine falls on all of them; per arm the
  median over `--rounds` rounds of `--steps` batches of the CPU time a step, and the median of
  each round's speed-up over the "off" arm in the same round; once with each step preparing its
  batch (`Learner.prepare`: features, labels, the dense targets), once with the batch prepared
  before the step's clock starts, as the prefetch thread prepares it, the preparation's CPU time
  beside;
* the loss check: `--loss-steps` steps (default 200) of each arm from the same initial weights
  and over the same batches, the mean loss of the last 50 steps, beside the same figure of the
  "off" arm from other initial weights (seed 1): the spread that counts as noise;
* the prefetch: wall-clock samples/s of drawing a batch from the window (`ReplayBuffer.sample`,
  augmentation), preparing it and stepping, one after the other, against the same with the
  draw and preparation on a `BatchPrefetcher` thread, the default settings.

`learner_figures()` gives `--suite train` its `train.learner.*` keys.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch
from replay_window import uniform_window

from amazons.neural.learner import (
    BatchPrefetcher,
    Learner,
    PreparedBatch,
    SampleBatch,
    augment_batch,
)
from amazons.neural.model import PolicyValueNet
from amazons.train.config import apply_overrides, preset_config
from amazons.train.replay import ReplayBuffer

WINDOW_POSITIONS = 20_000  # the replay window the batches are drawn from
FMA_UNITS = 2  # 256-bit fused multiply-add units a core has (Zen 2 on, Intel since Haswell)
# the settings' arms of `--ablation`: every setting off, then each alone on, then the defaults
OFF = {"metrics_every": 1, "dense_policy_targets": False, "fused_adamw": False}
ARMS: dict[str, dict[str, object]] = {
    "off": OFF,
    "metrics_every=16": {**OFF, "metrics_every": 16},
    "dense_policy_targets": {**OFF, "dense_policy_targets": True},
    "fused_adamw": {**OFF, "fused_adamw": True},
    "all on (defaults)": {},
    "all on + compile_step": {"compile_step": True},
}


def cpu_peak() -> dict[str, object]:
    """The core's fp32 peak from /proc/cpuinfo: `clock_ghz`, `lanes` (fp32 per vector),
    `flops_per_cycle`, `peak_gflops`, `native_bf16` and the vector extension's name."""
    clock_mhz, flags = 0.0, set()
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("cpu MHz") and not clock_mhz:
                clock_mhz = float(line.split(":", 1)[1])
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    if not clock_mhz or not flags:
        raise RuntimeError("/proc/cpuinfo names no 'cpu MHz' or no 'flags'")
    vector, lanes = (("AVX-512", 16) if "avx512f" in flags else ("AVX2", 8) if "avx2" in flags
                     else ("SSE", 4))
    fma = "fma" in flags
    per_cycle = FMA_UNITS * lanes * (2 if fma else 1)
    return {"clock_ghz": clock_mhz / 1000, "vector": vector + ("+FMA" if fma else ""),
            "lanes": lanes, "flops_per_cycle": per_cycle,
            "peak_gflops": per_cycle * clock_mhz / 1000,
            "native_bf16": "avx512_bf16" in flags or "amx_bf16" in flags}


def preset_learner(overrides: dict[str, object] | None = None, seed: int = 0) -> Learner:
    """The cpu preset's learner, its `OptimConfig` with `overrides`, initial weights from
    `seed`."""
    config = preset_config("cpu")
    torch.manual_seed(seed)
    return Learner(PolicyValueNet(config.net), config.optim.replace(**(overrides or {})),
                   seed=seed)


def preset_batches(count: int, window: ReplayBuffer | None = None) -> list[SampleBatch]:
    """`count` augmented batches of the cpu preset's size from `window` (default: a fresh
    `uniform_window`), each drawn with its own seed."""
    window = window if window is not None else uniform_window(WINDOW_POSITIONS)
    size = preset_config("cpu").train_batch_size
    return [augment_batch(SampleBatch(**window.sample(size)), np.random.default_rng(index))
            for index in range(count)]


def step_times(learners: dict[str, Learner], batches: list[SampleBatch], rounds: int,
               prepared: bool = False) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """Wall and CPU milliseconds per step of each learner, and the CPU milliseconds of its
    `Learner.prepare`, one figure per round: a round takes every batch in turn, each learner
    stepping on it one after the other (so a slow moment of the machine falls on every learner
    alike), `rounds` rounds after a warm-up round. With `prepared`, each batch is prepared
    before its step's clock starts (as the prefetch thread does it); otherwise the step prepares
    it (and the preparation's figure is 0)."""
    wall: dict[str, list[float]] = {name: [] for name in learners}
    cpu: dict[str, list[float]] = {name: [] for name in learners}
    prepare: dict[str, list[float]] = {name: [] for name in learners}
    for round_index in range(rounds + 1):
        spent = {name: [0.0, 0.0, 0.0] for name in learners}
        for batch in batches:
            for name, learner in learners.items():
                step_input: SampleBatch | PreparedBatch = batch
                if prepared:
                    started_cpu = time.thread_time()
                    step_input = learner.prepare(batch)
                    spent[name][2] += time.thread_time() - started_cpu
                started, started_cpu = time.perf_counter(), time.thread_time()
                learner.train_step(step_input)
                spent[name][0] += time.perf_counter() - started
                spent[name][1] += time.thread_time() - started_cpu
        if round_index:
            for name, (wall_s, cpu_s, prepare_s) in spent.items():
                wall[name].append(1000 * wall_s / len(batches))
                cpu[name].append(1000 * cpu_s / len(batches))
                prepare[name].append(1000 * prepare_s / len(batches))
    return {name: (wall[name], cpu[name], prepare[name]) for name in learners}


def op_profile(learner: Learner, batches: list[SampleBatch]) -> dict[str, object]:
    """One round of `batches`, each prepared before (`Learner.prepare`, as the prefetch thread
    prepares it), its steps under `torch.profiler`: `ops` [(name, self CPU ms per step)]
    largest first, `total_ms`, `conv_ms` (ops with "conv" in their name), `conv_forward_gflop`,
    `matmul_gflop` (bmm, mm, addmm as counted, backward's included) and `other_gflop` per
    step."""
    from torch.profiler import ProfilerActivity, profile

    prepared = [learner.prepare(batch) for batch in batches]
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as profiler:
        for batch in prepared:
            learner.train_step(batch)
    steps = len(batches)
    events = profiler.key_averages()
    ops = sorted(((event.key, event.self_cpu_time_total / 1000 / steps) for event in events
                  if event.self_cpu_time_total > 0), key=lambda item: -item[1])
    flops = {event.key: event.flops / steps for event in events if event.flops}
    conv_forward = sum(value for key, value in flops.items() if "conv" in key.lower())
    matmul = sum(value for key, value in flops.items() if key in ("aten::bmm", "aten::mm",
                                                                  "aten::addmm"))
    return {"ops": ops, "total_ms": sum(ms for _, ms in ops),
            "conv_ms": sum(ms for name, ms in ops if "conv" in name.lower()),
            "conv_forward_gflop": conv_forward / 1e9, "matmul_gflop": matmul / 1e9,
            "other_gflop": (sum(flops.values()) - conv_forward - matmul) / 1e9}


def learner_figures(steps: int = 16, rounds: int = 5) -> dict[str, float]:
    """`--suite train`'s figures of the cpu preset's learner (its default settings, each batch
    prepared before its step, as the prefetch thread prepares it): samples/s (median CPU time
    per step), the step's milliseconds, the preparation's, the share of the step's CPU time
    outside the convolutions and its achieved GFLOP/s."""
    torch.set_num_threads(1)
    batches = preset_batches(steps)
    learner = preset_learner()
    wall_ms, cpu_ms, prepare_ms = map(
        statistics.median, step_times({"learner": learner}, batches, rounds, prepared=True)[
            "learner"])
    profiled = op_profile(learner, batches)
    gflop = 3 * profiled["conv_forward_gflop"] + profiled["matmul_gflop"]
    return {
        "train.learner.samples_per_s": batches[0].size / (cpu_ms / 1000),
        "train.learner.step_ms": cpu_ms,
        "train.learner.step_wall_ms": wall_ms,
        "train.learner.prepare_ms": prepare_ms,
        "train.learner.outside_conv_share": 1 - profiled["conv_ms"] / profiled["total_ms"],
        "train.learner.gflops_per_s": gflop / (cpu_ms / 1000),
    }


def print_profile(overrides: list[str], steps: int, rounds: int, top: int) -> None:
    """The profile of the cpu preset's learner with `overrides` of its optim config."""
    torch.set_num_threads(1)
    config = apply_overrides(preset_config("cpu"), [f"optim.{item}" for item in overrides])
    window = uniform_window(WINDOW_POSITIONS)
    batches = preset_batches(steps, window)
    labels = np.mean([batch.label_moves.shape[0] / batch.size for batch in batches])
    torch.manual_seed(0)
    learner = Learner(PolicyValueNet(config.net), config.optim, seed=0)
    wall_ms, cpu_ms, prepare_ms = map(
        statistics.median, step_times({"learner": learner}, batches, rounds, prepared=True)[
            "learner"])
    profiled = op_profile(learner, batches)
    peak = cpu_peak()
    size = batches[0].size
    draw = _draw(window, learner)
    drawn = []
    for _ in range(steps):
        started = time.thread_time()
        draw()
        drawn.append(1000 * (time.thread_time() - started))
    print(f"cpu preset learner: net {config.net.blocks} blocks x {config.net.channels} channels "
          f"({config.net.policy_head} head), batch {size}, {labels:.0f} labels a sample, "
          f"precision {learner.precision}, 1 torch thread, optim overrides {overrides or 'none'}")
    print(f"step: {wall_ms:.1f} ms wall, {cpu_ms:.1f} ms CPU (median of {rounds} rounds of "
          f"{steps}); {size / (cpu_ms / 1000):,.0f} samples/s by CPU time, "
          f"{size / (wall_ms / 1000):,.0f} by wall clock")
    print(f"its batch, before it (CPU ms, medians; on the prefetch thread by default): drawn "
          f"from the window and augmented {statistics.median(drawn):.1f}, prepared (features, "
          f"labels, target tables) {prepare_ms:.1f}")
    total = profiled["total_ms"]
    print(f"\nself CPU time by op under the profiler ({total:.1f} ms a step; the profiler adds "
          f"its own overhead):")
    print(f"  {'op':<44} {'ms/step':>8} {'share':>7}")
    for name, ms in profiled["ops"][:top]:
        print(f"  {name:<44} {ms:8.2f} {ms / total:7.1%}")
    print(f"  {'(the rest)':<44} {sum(ms for _, ms in profiled['ops'][top:]):8.2f} "
          f"{sum(ms for _, ms in profiled['ops'][top:]) / total:7.1%}")
    conv_share = profiled["conv_ms"] / total
    print(f"convolutions (forward and backward): {conv_share:.1%}; outside them: "
          f"{1 - conv_share:.1%}")
    forward = profiled["conv_forward_gflop"]
    conv_gflop = 3 * forward
    step_gflop = conv_gflop + profiled["matmul_gflop"]
    print(f"\nGFLOP a step: convolutions {forward:.3f} forward (counted) + {2 * forward:.3f} "
          f"backward (2 x forward) = {conv_gflop:.3f}; matrix products (bmm, mm, addmm, forward "
          f"and backward, counted) {profiled['matmul_gflop']:.3f}; elementwise (counted) "
          f"{profiled['other_gflop']:.3f}; together {step_gflop:.3f}")
    conv_seconds = profiled["conv_ms"] / 1000 * cpu_ms / total  # the profiled share of the step
    print(f"achieved: convolutions {conv_gflop / conv_seconds:.1f} GFLOP/s over their own time, "
          f"the step {step_gflop / (cpu_ms / 1000):.1f} GFLOP/s over its CPU time")
    print(f"core: {peak['vector']}, {peak['lanes']} fp32 lanes, {FMA_UNITS} FMA units: "
          f"{peak['flops_per_cycle']} flop/cycle x {peak['clock_ghz']:.3f} GHz (/proc/cpuinfo) = "
          f"{peak['peak_gflops']:.1f} GFLOP/s fp32 peak; native bf16: "
          f"{'yes' if peak['native_bf16'] else 'no'}")


def _loss_curve(overrides: dict[str, object], batches: list[SampleBatch], seed: int) -> float:
    """The mean loss of the last 50 of `len(batches)` steps from `seed`'s initial weights."""
    learner = preset_learner(overrides, seed)
    losses = [learner.train_step(batch)["loss"] for batch in batches]
    return float(np.mean(losses[-50:]))


def _draw(window: ReplayBuffer, learner: Learner) -> Callable[[], SampleBatch]:
    size = preset_config("cpu").train_batch_size
    return lambda: augment_batch(SampleBatch(**window.sample(size)), learner.rng)


def prefetch_figures(window: ReplayBuffer, steps: int, rounds: int) -> dict[str, float]:
    """Wall-clock samples/s of draw + prepare + step in turn ("in turn"), and with the draw and
    the preparation on a `BatchPrefetcher` thread ("prefetched"), default settings: `rounds`
    rounds of `steps` steps of each, alternating, medians; "speed-up" is the median of each
    round's ratio."""
    learners = {name: preset_learner() for name in ("in turn", "prefetched")}
    times: dict[str, list[float]] = {name: [] for name in learners}
    size = preset_config("cpu").train_batch_size
    for round_index in range(rounds + 1):
        for name, learner in learners.items():
            draw = _draw(window, learner)
            started = time.perf_counter()
            if name == "in turn":
                for _ in range(steps):
                    learner.train_step(draw())
            else:
                with BatchPrefetcher(learner, draw) as prefetcher:
                    for step in range(steps):
                        learner.train_step(prefetcher.next(more=step + 1 < steps))
            if round_index:
                times[name].append(steps * size / (time.perf_counter() - started))
    figures = {name: statistics.median(values) for name, values in times.items()}
    figures["speed-up"] = statistics.median(
        fast / slow for fast, slow in zip(times["prefetched"], times["in turn"], strict=True))
    return figures


def print_ablation(steps: int, rounds: int, loss_steps: int) -> None:
    """Samples/s of each arm, the loss check and the prefetch's figures."""
    torch.set_num_threads(1)
    window = uniform_window(WINDOW_POSITIONS)
    batches = preset_batches(steps, window)
    learners = {}
    for name, overrides in ARMS.items():
        learners[name] = preset_learner(overrides)
        if overrides.get("compile_step"):
            started = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for batch in batches[:3]:
                    learners[name].train_step(batch)
            print(f"compile_step: compiled in {time.perf_counter() - started:.0f} s")
    size = batches[0].size
    for prepared in (False, True):
        times = step_times(learners, batches, rounds, prepared)
        off_cpu = times["off"][1]
        where = ("each batch prepared before its step (as the prefetch thread prepares it; "
                 "\"prepare\" its CPU ms)" if prepared
                 else "each step preparing its batch (features, labels, target tables)")
        print(f"\nsamples/s of the cpu preset's step, {where}: {rounds} rounds of {steps} "
              f"batches, the arms stepping in turn on each batch; medians of the rounds' CPU "
              f"and wall ms a step, and of each round's speed-up over the same round's \"off\" "
              f"arm:")
        print(f"  {'arm':<26} {'CPU ms':>8} {'wall ms':>8} {'samples/s':>10} {'vs off':>7} "
              f"{'prepare':>8}")
        for name, (wall, cpu, prepare) in times.items():
            cpu_ms = statistics.median(cpu)
            speedup = statistics.median(off / own for off, own in zip(off_cpu, cpu, strict=True))
            print(f"  {name:<26} {cpu_ms:8.1f} {statistics.median(wall):8.1f} "
                  f"{size / (cpu_ms / 1000):10,.0f} {speedup:7.2f}x "
                  f"{statistics.median(prepare):8.1f}")
    loss_batches = preset_batches(loss_steps, window)
    print(f"\nloss check: mean loss of the last 50 of {loss_steps} steps, same batches:")
    noise = _loss_curve(OFF, loss_batches, seed=1)
    for name, overrides in ARMS.items():
        if not overrides.get("compile_step"):
            print(f"  {name:<26} {_loss_curve(overrides, loss_batches, seed=0):.4f}")
    print(f"  {'off, other weights (seed 1)':<26} {noise:.4f}")
    prefetch = prefetch_figures(window, steps, rounds)
    print(f"\nprefetch (default settings, wall clock, median of {rounds} rounds of {steps}):")
    for name in ("in turn", "prefetched"):
        print(f"  {name:<26} {prefetch[name]:10,.0f} samples/s")
    print(f"  {'prefetched / in turn':<26} {prefetch['speed-up']:10.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=16, help="batches a round (default 16)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--top", type=int, default=20, help="ops listed (default 20)")
    parser.add_argument("--ablation", action="store_true",
                        help="samples/s and the loss of each setting, and the prefetch")
    parser.add_argument("--loss-steps", type=int, default=200,
                        help="steps of the ablation's loss check (default 200, at least 50)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="the cpu preset's optim fields, e.g. dense_policy_targets=false")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.loss_steps < 50:
        parser.error("--steps and --rounds must be >= 1, --loss-steps >= 50")
    bad = [item for item in args.overrides if not re.fullmatch(r"[a-z_]+=.+", item)]
    if bad:
        parser.error(f"overrides are optim fields as KEY=VALUE, got {bad[0]!r}")
    if args.ablation:
        if args.overrides:
            parser.error("--ablation takes no overrides: it runs its own arms")
        print_ablation(args.steps, args.rounds, args.loss_steps)
    else:
        print_profile(args.overrides, args.steps, args.rounds, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
