"""Training pipeline benchmark: the main job itself, in the async mode and in the sync mode.

Runs `python -m amazons.train --preset cpu --iterations 3` (the preset as production runs it,
evaluation included: every 2 iterations, so once, at iteration 2) in a temporary run directory,
with `pipeline.mode=async` once with the inference server on torch and once on the compiled
native evaluator (`inference.backend=torch|native`), and with `pipeline.mode=sync` on the native
one, one after the other in the same command, and reports for each `<mode>.<backend>` (below
`<mode>` for short):

* `train.<mode>.core_utilization`: CPU seconds of every process of the run (the main process and
  all its descendants: the inference server, the actors, the arena's workers, which the arena
  forks from a forkserver), divided by (wall seconds x the cores this process may use). The
  process tree is read every 0.2 s (`psutil`), each process's last reading counts (a process
  that ends loses at most its last 0.2 s); `getrusage(RUSAGE_CHILDREN)` would miss the arena
  workers, whose parent, the forkserver, is never waited for. The whole command counts:
  start-up, the 3 iterations, the evaluation;
* `train.<mode>.core_utilization_after_1`: the same from the moment the first iteration's
  metrics line is written to the end (iterations 2 and 3, the evaluation, the end): without the
  start-up and the first iteration, whose learner has nothing to train on until the first
  games end;
* `train.<mode>.other_load`: CPU seconds of every other process on the machine during the run
  (from `/proc/stat`), over the same wall seconds x cores: how much of the machine other jobs
  took while it ran (0 on a quiet machine);
* `train.<mode>.positions_per_s`: self-play positions of the 3 iterations (`selfplay/positions`
  of the metrics lines) per wall second of the command;
* `train.<mode>.samples_per_s`: training samples drawn (steps x batch) per wall second;
* `train.<mode>.wall_s`, `train.<mode>.iteration_s` (mean `iteration_seconds`),
  `train.<mode>.samples_per_position`;
* async only, `train.<mode>.actor_throttle_share` and `train.<mode>.learner_wait_share`: the
  share of iterations 2 and 3's seconds the actors were paused because the learner owed more than
  `pipeline.slack_steps` steps, and the learner waited for games: the balance between the two
  (both near 0 when neither waits for the other).

And the learner alone: `train.replay_sample_ms`, milliseconds for `ReplayBuffer.sample(256)`
from a 200,000-position window of short uniform-search games (about 4,000 chunks), median of 7
rounds of 50 draws (`replay_sample_ms()` uses only the buffer's public calls, so it measures
older checkouts too); `train.learner_step_ms.eager` and `train.learner_step_ms.compiled` (not
with `--quick`), one `Learner.train_step` of the cpu preset's learner (tiny net, fp32, one
thread, batch 256 drawn from that window and augmented) without and with `OptimConfig.compile`
(`torch.compile` of the forward pass; its compilation not counted), the median of 6
interleaved rounds of 8 steps. With `--quick` too, the learner's step as
`benchmarks/profile_learner.py` profiles it (`learner_figures`: the cpu preset's learner with
its default settings, batches drawn from a 20,000-position window of the same games and each
prepared before its step, as the prefetch thread prepares it, the median of 5 rounds of 16
steps): `train.learner.samples_per_s` (by the thread's CPU time, which other processes on the
machine disturb less than the wall clock), `train.learner.step_ms` and `.step_wall_ms`,
`train.learner.prepare_ms` (the batch's features, labels and targets, on the prefetch thread),
`train.learner.outside_conv_share` (the share of the step's self CPU time under
`torch.profiler` in ops that are not convolutions, forward or backward) and
`train.learner.gflops_per_s` (3 x the forward convolutions' FLOPs, plus the matrix products',
over the step's CPU time).

Beside them, self-play alone (no learner, no evaluation): the cpu preset's actors and inference
server with the tiny net playing endless tasks for 20 s after an 8 s warm-up,
`train.selfplay_alone.core_utilization`, `.server_cores` and `.actor_cores` (CPU seconds per
wall second of the server and of each actor), `.positions_per_s`: what the learner has left to
fill. The server runs each backend in turn: the keys are `train.selfplay_alone.<backend>.*`.
`train.{selfplay_alone,async}.native_over_torch.positions_per_s` (and `async`'s `samples_per_s`)
are the native backend's figures over torch's. Where the extension is not built, torch alone.

`python benchmarks/suite_train.py MODE [KEY=VALUE ...]` runs one mode with config overrides
(e.g. `async sample_reuse=16`) and prints its figures.

On a machine with CUDA the preset is still `cpu` (this suite measures the 2-core pipeline the
issue names; `--suite selfplay` and `--suite nn` measure a GPU). `--quick` plays 16 games per
iteration instead of 64.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import torch
from profile_learner import learner_figures
from replay_window import uniform_window

from amazons.mcts import warm_up
from amazons.neural.checkpoint import save_model
from amazons.neural.learner import Learner, SampleBatch, augment_batch
from amazons.neural.model import PolicyValueNet, net_config
from amazons.neural.native import native_available
from amazons.neural.served import server_evaluator_factory
from amazons.serving.server import InferenceServer
from amazons.train.config import preset_config
from amazons.train.selfplay import SelfPlayWorkers

ITERATIONS = 3
MODES = ("async", "sync")
# the server's network (InferenceConfig.backend), both in one sitting
BACKENDS = ("torch", "native")
REPOSITORY = Path(__file__).resolve().parents[1]


def run_mode(mode: str, run_dir: Path, overrides: list[str],
             label: str | None = None) -> dict[str, float]:
    """Run the main job in `mode`; its figures (see the module docstring), under
    `train.<label>.` (default: the mode)."""
    command = [sys.executable, "-m", "amazons.train", "--preset", "cpu", "--run-dir", str(run_dir),
               "--iterations", str(ITERATIONS), "--no-progress", f"pipeline.mode={mode}",
               *overrides]
    mode = label or mode
    cores = len(os.sched_getaffinity(0))
    machine_before = _machine_busy_seconds()
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, cwd=REPOSITORY, stdout=log, stderr=subprocess.STDOUT,
                                   text=True)
        cpu_by_process, first_line = _watch_tree(process, run_dir / "metrics.jsonl")
        wall = time.perf_counter() - started
        log.seek(0)
        output = log.read()
    machine = _machine_busy_seconds() - machine_before
    if process.returncode != 0:
        raise RuntimeError(f"train ({mode}) exited with {process.returncode}:\n{output}")
    print(output, end="")
    cpu = sum(cpu_by_process.values())
    first_line_at, cpu_at_first_line = first_line
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    if len(lines) != ITERATIONS:
        raise RuntimeError(f"train ({mode}) wrote {len(lines)} metrics lines, "
                           f"expected {ITERATIONS}")
    config = json.loads((run_dir / "config.json").read_text())
    positions = sum(line["selfplay/positions"] for line in lines)
    samples = sum(line["train/steps"] for line in lines) * config["train_batch_size"]
    return {
        f"train.{mode}.core_utilization": cpu / (wall * cores),
        f"train.{mode}.core_utilization_after_1": (cpu - cpu_at_first_line)
        / ((wall - (first_line_at - started)) * cores),
        f"train.{mode}.positions_per_s": positions / wall,
        f"train.{mode}.samples_per_s": samples / wall,
        f"train.{mode}.samples_per_position": samples / positions,
        f"train.{mode}.wall_s": wall,
        f"train.{mode}.iteration_s": sum(line["iteration_seconds"] for line in lines) / len(lines),
        f"train.{mode}.cpu_s": cpu,
        f"train.{mode}.other_load": max(0.0, machine - cpu) / (wall * cores),
        **_balance(mode, config["pipeline"]["mode"], lines[1:]),
    }


def _balance(label: str, pipeline_mode: str, lines: list[dict]) -> dict[str, float]:
    """The async pipeline's balance over iterations 2 on (the first waits for its first games),
    under `train.<label>.`: the share of their seconds the actors were paused for the learner
    (`pipeline/actor_throttle_s`) and the learner waited for games (`pipeline/learner_wait_s`).
    Nothing for the sync pipeline, whose phases take turns."""
    seconds = sum(line["iteration_seconds"] for line in lines)
    if pipeline_mode != "async" or not lines or seconds <= 0:
        return {}
    return {f"train.{label}.{name}_share": sum(line.get(f"pipeline/{name}_s", 0.0)
                                               for line in lines) / seconds
            for name in ("actor_throttle", "learner_wait")}


def _watch_tree(process: subprocess.Popen, metrics: Path, interval_s: float = 0.2
                ) -> tuple[dict[tuple[int, float], float], tuple[float, float]]:
    """Until `process` ends: CPU seconds (user + system) of it and of each descendant, as last
    read; and (perf_counter, total CPU seconds) when `metrics` first held a line."""
    root = psutil.Process(process.pid)
    seen: dict[tuple[int, float], float] = {}
    first_line = (math.inf, 0.0)
    while process.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        for member in tree:
            try:
                with member.oneshot():
                    times = member.cpu_times()
                    seen[(member.pid, member.create_time())] = times.user + times.system
            except psutil.Error:
                pass
        if first_line[0] == math.inf and metrics.exists() and metrics.stat().st_size:
            first_line = (time.perf_counter(), sum(seen.values()))
        time.sleep(interval_s)
    process.wait()
    return seen, first_line


def _machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (all but idle and iowait), from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def replay_sample_ms(window: int = 200_000, batch: int = 256, rounds: int = 7,
                     draws: int = 50) -> float:
    """Median milliseconds of `ReplayBuffer.sample(batch)` over a window of `window` positions."""
    buffer = uniform_window(window)
    buffer.sample(batch)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(draws):
            buffer.sample(batch)
        times.append((time.perf_counter() - started) / draws)
    return 1000 * statistics.median(times)


def learner_step_ms(rounds: int = 6, steps: int = 8) -> dict[str, float]:
    """Median milliseconds of the cpu preset's learner step, eager and under torch.compile."""
    torch.set_num_threads(1)
    buffer = uniform_window(20_000)
    batches = [augment_batch(SampleBatch(**buffer.sample(256)), np.random.default_rng(index))
               for index in range(steps)]
    optim = preset_config("cpu").optim
    learners = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        learners[compiled] = Learner(PolicyValueNet(net_config("tiny")),
                                     optim.replace(compile=compiled), seed=0)
        for batch in batches[:3]:  # compiles (a recompilation for the varying label count included)
            learners[compiled].train_step(batch)
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for compiled, learner in learners.items():
            started = time.perf_counter()
            for batch in batches:
                learner.train_step(batch)
            times[compiled].append((time.perf_counter() - started) / steps)
    return {f"train.learner_step_ms.{'compiled' if compiled else 'eager'}":
            1000 * statistics.median(values)
            for compiled, values in times.items()}


def selfplay_alone(seconds: float = 20.0, warm_up_s: float = 8.0,
                   backend: str = "auto") -> dict[str, float]:
    """The cpu preset's self-play without a learner, the server on `backend`: CPU shares of the
    server and the actors, under `train.selfplay_alone.<backend>.`."""
    torch.set_num_threads(1)
    config = preset_config("cpu")
    config = dataclasses.replace(config,
                                 inference=dataclasses.replace(config.inference, backend=backend))
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="amazons-bench-selfplay-") as folder:
        path = str(Path(folder) / "model.pt")
        torch.manual_seed(0)
        save_model(path, PolicyValueNet(config.net))
        factory = server_evaluator_factory(path, "cpu", config.inference_dtype, config.inference)
        with InferenceServer(factory, config.selfplay.num_actors, config.inference) as server:
            with SelfPlayWorkers(server, config.selfplay) as workers:
                workers.start(stream=0)
                time.sleep(warm_up_s)
                workers.collect()
                children = psutil.Process().children(recursive=True)
                before = {child.pid: sum(child.cpu_times()[:2]) for child in children}
                started, positions = time.perf_counter(), 0
                while time.perf_counter() - started < seconds:
                    positions += sum(game.samples.num_positions for game in workers.collect(0.5))
                wall = time.perf_counter() - started
                used = {child.pid: sum(child.cpu_times()[:2]) - before[child.pid]
                        for child in children}
                workers.stop()
        server_pid = int(server.stats["pid"])  # the server's statistics, sent when it stops
    actors = [seconds_used for pid, seconds_used in used.items()
              if pid != server_pid and seconds_used > 0.01]
    prefix = f"train.selfplay_alone.{backend}"
    return {
        f"{prefix}.core_utilization": sum(used.values()) / (wall * cores),
        f"{prefix}.server_cores": used[server_pid] / wall,
        f"{prefix}.actor_cores": sum(actors) / max(len(actors), 1) / wall,
        f"{prefix}.positions_per_s": positions / wall,
    }


def run(quick: bool) -> dict[str, float]:
    warm_up()  # the search kernels in Numba's cache, so that neither mode pays their compilation
    overrides = ["games_per_iteration=16"] if quick else []
    metrics: dict[str, float] = {"train.cores": float(len(os.sched_getaffinity(0))),
                                 "train.replay_sample_ms": replay_sample_ms()}
    if not quick:
        metrics.update(learner_step_ms())
    metrics.update(learner_figures())
    backends = BACKENDS if native_available() else ("torch",)
    for backend in backends:
        metrics.update(selfplay_alone(backend=backend))
    with tempfile.TemporaryDirectory(prefix="amazons-bench-train-") as folder:
        for mode in MODES:
            for backend in backends if mode == "async" else backends[-1:]:
                metrics.update(run_mode(mode, Path(folder) / f"{mode}-{backend}",
                                        [*overrides, f"inference.backend={backend}"],
                                        f"{mode}.{backend}"))
    if native_available():
        for key in ("selfplay_alone.{}.positions_per_s", "async.{}.positions_per_s",
                    "async.{}.samples_per_s"):
            ratio = (metrics[f"train.{key.format('native')}"]
                     / metrics[f"train.{key.format('torch')}"])
            metrics[f"train.{key.format('native_over_torch')}"] = ratio
    return metrics


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in MODES:
        raise SystemExit(f"usage: python benchmarks/suite_train.py {{{','.join(MODES)}}} "
                         "[KEY=VALUE ...]")
    warm_up()
    with tempfile.TemporaryDirectory(prefix="amazons-bench-train-") as folder:
        for name, value in run_mode(sys.argv[1], Path(folder) / "run", sys.argv[2:]).items():
            print(f"  {name:<40}  {value:>12,.4g}")
