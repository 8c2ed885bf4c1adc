"""Benchmark suite `gpu`: what the design's GPU system does on one CUDA device, in one command.

`python benchmarks/run.py --suite gpu --json bench_results/gpu.json` (not part of `all`). On a
machine without CUDA it says so and exits with status 1 before measuring anything. Five parts,
each a function of the device and the sizes, so that `tests/test_benchmarks.py` runs the same
code on a CPU with a tiny net (`device="cpu"`):

* **Inference through the production path** (`inference`): the inference server's evaluator, built
  by the function the main job calls (`amazons.neural.served.server_evaluator_factory` with the
  gpu preset's `inference_batch_size`, 1,024: the model `prepare_for_inference` makes, autocast, a
  CUDA graph per batch bucket up to 1,024) on ResNet-40 in bf16, at batch 256 and 1024:
  - `gpu.inference.b<N>.forward_positions_per_s`: the evaluator's forward (`_forward`: padded to
    its bucket, the bucket's graph replayed) on a feature batch already on the device;
  - `gpu.inference.b<N>.flop_fraction`: that rate x `gpu.flops_per_position` (counted by
    `torch.utils.flop_counter`, 3.05e9 for ResNet-40) / the device's dense bf16 peak
    (`gpu.peak_bf16_flops`: from the device name, or `AMAZONS_GPU_PEAK_FLOPS`); left out when the
    peak is unknown. Target at batch 1024: >= 0.4;
  - `gpu.inference.b<N>.evaluate_positions_per_s`: the whole `evaluate` call as the server makes
    it (features from the engine on the host, the uploads from pinned buffers, the forward, the
    priors of every legal move, the one copy back) on real positions.
* **Self-play through the server** (`selfplay`, `suite_selfplay.measure`): the gpu preset's 12
  actor processes x 64 games, K = 4 leaves per game, the server's batches up to its 1,024 rows
  merged across actors, ResNet-40 bf16, 100 simulations per move, one generation of games (768):
  `gpu.selfplay.evals_ratio_to_standalone` = `gpu.selfplay.evals_per_s` (leaves evaluated per
  second in self-play) / `gpu.selfplay.standalone_evals_per_s` (the same evaluator, built the
  same way, in full batches of the configured 1,024 rows on a sample of the leaves the server
  evaluated; an under-filled server shows as a lower ratio; target >= 0.8; see
  `suite_selfplay`), `gpu.selfplay.sims_per_s`, `.positions_per_s`, `.mean_batch_fill` (rows per
  batch / 1024), `.mean_batch_rows`, `.server_roundtrip_ms`, `.mean_game_plies`.
* **Publishing weights** (`weights`): the async pipeline's publish of ResNet-40 at the gpu
  preset's batch, as `amazons.train.pipeline.WeightsPublisher` and the server run it, without the
  processes: `gpu.weights.publish_s`, the learner's side (its weights from the device into a host
  buffer, `flatten_weights`: what the learner's thread pays per publish), and
  `gpu.weights.load_s`, the server's side (`load_flat_weights`: into its CPU model, batch norms
  folded there, copied into the prepared model in place: what the batches wait per publish);
  medians of 5; `gpu.weights.bytes`. It raises if a load made the evaluator capture its CUDA
  graphs again.
* **The learner** (`learner`): the gpu preset's learner (ResNet-40, AdamW fused on the device,
  bf16 autocast, batch 512) fed the way the main job feeds it (`ReplayBuffer.sample` from a
  200,000-position window, `augment_batch`, `Learner.train_step_tensors`, metrics summed on the
  device and read once at the end): `gpu.learner.samples_per_s`.
* **The main job** (`preset_run`): `python -m amazons.train --preset gpu` for 180 s, stopped with
  SIGTERM, with `PRESET_RUN_OVERRIDES`: the preset's network, actors, batches, learner and async
  pipeline at 100 simulations per move and 192 games per iteration, without evaluation, so that
  iterations close inside the window (at the preset's 400 simulations the first games end after it).
  From the metrics lines written: `gpu.preset.iterations`, `gpu.preset.first_iteration_s`, and over
  the iterations after the first `gpu.preset.positions_per_s`, `.samples_per_s`, `.evals_per_s`,
  `.samples_per_position`, `.learner_wait_share` (the learner's wait for games over the iterations'
  seconds), `.weights_lag_steps`. `gpu.preset.iteration_s_at_preset_sims` estimates one iteration of
  the preset itself: `games_per_iteration` x `gpu.selfplay.mean_game_plies` x its simulations /
  `gpu.selfplay.sims_per_s`.

Its running time on an H200 is in docs/BENCHMARKS.md (GPU); the main job's window is 3 minutes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from amazons import engine
from amazons.neural.checkpoint import save_model
from amazons.neural.learner import Learner, MetricSums, SampleBatch, augment_batch
from amazons.neural.model import PolicyValueNet, flatten_weights, net_config, weights_elements
from amazons.neural.served import server_evaluator_factory
from amazons.serving.server import InferenceConfig
from amazons.train.config import preset_config

REPOSITORY = Path(__file__).resolve().parents[1]
GPU_PRESET = preset_config("gpu")
INFERENCE_BATCHES = (256, GPU_PRESET.inference.inference_batch_size)
SELFPLAY = {"actors": GPU_PRESET.selfplay.num_actors,
            "games_in_parallel": GPU_PRESET.selfplay.games_in_parallel,
            "simulations": 100, "batch": GPU_PRESET.inference.inference_batch_size}
LEARNER_WINDOW = 200_000
LEARNER_STEPS = 40
PRESET_RUN_S = 180.0
PRESET_RUN_OVERRIDES = ("selfplay.search.simulations=100", "games_per_iteration=192",
                        "eval.every=0")


class NoCudaError(SystemExit):
    """The suite needs a CUDA device and this machine has none: status 1, a message on stderr."""


def require_cuda() -> torch.device:
    """The CUDA device the suite measures.

    Raises:
        NoCudaError: torch sees no CUDA device (a CPU-only build, no driver, no GPU).
    """
    if not torch.cuda.is_available():
        raise NoCudaError(
            "suite gpu needs a CUDA device, and torch.cuda.is_available() is False on this "
            f"machine (torch {torch.__version__}, built with CUDA {torch.version.cuda}). Run it on "
            "a machine with an NVIDIA GPU and a CUDA build of torch "
            "(make TORCH=\"torch==2.13.0 --index-url ...\" install); the CPU figures are in "
            "--suite nn, selfplay and train.")
    return torch.device("cuda")


def inference(device: torch.device, preset: str = "resnet40", precision: str = "bf16",
              batches: tuple[int, ...] = INFERENCE_BATCHES,
              window_s: float = 1.0) -> dict[str, float]:
    """The production evaluator's forward and whole call at each batch (module docstring)."""
    from suite_nn import flops_per_position, gpu_peak_flops, random_batch, seconds_per_call

    torch.manual_seed(0)
    model = PolicyValueNet(net_config(preset))
    flops = flops_per_position(model)
    peak = gpu_peak_flops(device) if device.type == "cuda" else None
    with tempfile.TemporaryDirectory(prefix="amazons-bench-gpu-") as folder:
        model_path = save_model(Path(folder) / "model.pt", model)
        evaluator = server_evaluator_factory(
            model_path, str(device), precision,
            InferenceConfig(inference_batch_size=max(batches), backend="torch"))()
    positions = random_batch(np.random.default_rng(0), max(batches)).positions
    metrics = {"gpu.flops_per_position": flops}
    if peak is not None:
        metrics["gpu.peak_bf16_flops"] = peak
    stem = evaluator.model.stem.conv.weight
    for batch in batches:
        rows = np.ascontiguousarray(positions[:batch])
        moves, offsets = engine.legal_moves(rows)
        chunks = evaluator._chunks(batch)
        features = (torch.from_numpy(engine.features(rows, model.config.num_planes))
                    .to(device).to(stem.dtype))
        if stem.is_contiguous(memory_format=torch.channels_last):
            features = features.contiguous(memory_format=torch.channels_last)
        padded = torch.zeros((chunks[-1][0] + chunks[-1][2], *features.shape[1:]),
                             dtype=features.dtype,
                             device=device).contiguous(memory_format=torch.channels_last)
        padded[:batch] = features

        def forward(padded=padded, chunks=chunks) -> object:
            with torch.inference_mode(), torch.autocast(device.type, dtype=evaluator.dtype,
                                                        enabled=evaluator.dtype != torch.float32,
                                                        cache_enabled=not evaluator.cuda_graphs):
                return evaluator._forward(padded, chunks)

        rate = batch / seconds_per_call(forward, device, window_s)
        metrics[f"gpu.inference.b{batch}.forward_positions_per_s"] = rate
        if peak is not None:
            metrics[f"gpu.inference.b{batch}.flop_fraction"] = rate * flops / peak
        metrics[f"gpu.inference.b{batch}.evaluate_positions_per_s"] = batch / seconds_per_call(
            lambda rows=rows, moves=moves, offsets=offsets: evaluator.evaluate(rows, moves,
                                                                               offsets),
            device, window_s)
    return metrics


def selfplay(device: torch.device, preset: str = "resnet40", actors: int = SELFPLAY["actors"],
             games_in_parallel: int = SELFPLAY["games_in_parallel"],
             simulations: int = SELFPLAY["simulations"], batch: int = SELFPLAY["batch"],
             games: int | None = None, standalone_s: float = 5.0) -> dict[str, float]:
    """Self-play through the server (`suite_selfplay.measure`); by default one generation."""
    from suite_selfplay import measure

    return measure(str(device), preset, actors, games_in_parallel, simulations, batch,
                   games if games is not None else actors * games_in_parallel, standalone_s,
                   prefix="gpu.selfplay")


def weights(device: torch.device, preset: str = "resnet40", precision: str = "bf16",
            batch: int = GPU_PRESET.inference.inference_batch_size,
            repeats: int = 5) -> dict[str, float]:
    """One publish of `preset`'s weights, both sides, timed `repeats` times (module docstring).

    Raises:
        RuntimeError: a load made the evaluator capture a CUDA graph again.
    """
    from suite_nn import random_batch, synchronize

    torch.manual_seed(0)
    learner_model = PolicyValueNet(net_config(preset))
    with tempfile.TemporaryDirectory(prefix="amazons-bench-gpu-") as folder:
        evaluator = server_evaluator_factory(
            save_model(Path(folder) / "model.pt", learner_model), str(device), precision,
            InferenceConfig(inference_batch_size=batch, backend="torch"))()
    learner_model = learner_model.to(device)
    positions = random_batch(np.random.default_rng(0), batch).positions
    leaves = (positions, *engine.legal_moves(positions))
    evaluator.evaluate(*leaves)  # captures the batch's graph on CUDA
    captures = evaluator.graph_captures
    flat = np.empty(weights_elements(learner_model), np.float32)
    publish, load = [], []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        flatten_weights(learner_model, torch.from_numpy(flat))
        publish.append(time.perf_counter() - started)
        started = time.perf_counter()
        evaluator.load_flat_weights(flat)
        synchronize(device)
        load.append(time.perf_counter() - started)
    evaluator.evaluate(*leaves)
    if evaluator.graph_captures != captures:
        raise RuntimeError(f"loading weights made the evaluator capture CUDA graphs again "
                           f"({captures} -> {evaluator.graph_captures})")
    return {"gpu.weights.publish_s": float(np.median(publish)),
            "gpu.weights.load_s": float(np.median(load)),
            "gpu.weights.bytes": float(flat.nbytes)}


def learner(device: torch.device, preset: str = "gpu", window: int = LEARNER_WINDOW,
            steps: int = LEARNER_STEPS, batch_size: int | None = None) -> dict[str, float]:
    """Samples/s of the `preset`'s learner fed as the main job feeds it (module docstring)."""
    from replay_window import uniform_window
    from suite_nn import synchronize

    config = preset_config(preset)
    batch_size = batch_size or config.train_batch_size
    buffer = uniform_window(window)
    torch.manual_seed(0)
    learner = Learner(PolicyValueNet(config.net), config.optim, device=device, seed=0)

    def step() -> dict:
        batch = augment_batch(SampleBatch(**buffer.sample(batch_size)), learner.rng)
        return learner.train_step_tensors(batch)

    for _ in range(3):  # warm-up: allocations, kernel choices
        step()
    synchronize(device)
    sums = MetricSums()
    started = time.perf_counter()
    for _ in range(steps):
        sums.add(step())
    means = sums.means()  # the one read of the step metrics, as a metrics line makes it
    synchronize(device)
    seconds = time.perf_counter() - started
    if not np.isfinite(means["loss"]):
        raise RuntimeError(f"the learner's loss is {means['loss']} after {steps} steps")
    return {"gpu.learner.samples_per_s": steps * batch_size / seconds,
            "gpu.learner.batch": float(batch_size)}


def preset_run(preset: str = "gpu", seconds: float = PRESET_RUN_S,
               overrides: tuple[str, ...] = PRESET_RUN_OVERRIDES,
               iterations: int = 100_000) -> dict[str, float]:
    """`python -m amazons.train --preset <preset> --iterations <iterations>` until it ends or for
    `seconds`, then SIGTERM; the figures of the metrics lines it wrote (see the module
    docstring). The benchmark runs for its seconds; a test asks for a few iterations instead,
    which ends as soon as they are done."""
    with tempfile.TemporaryDirectory(prefix="amazons-bench-gpu-") as folder:
        run_dir = Path(folder) / "run"
        command = [sys.executable, "-m", "amazons.train", "--preset", preset,
                   "--run-dir", str(run_dir), "--iterations", str(iterations), "--no-progress",
                   *overrides]
        with tempfile.TemporaryFile("w+") as log:
            started = time.perf_counter()
            process = subprocess.Popen(command, cwd=REPOSITORY, stdout=log,
                                       stderr=subprocess.STDOUT, text=True)
            first_line_s = None
            metrics_path = run_dir / "metrics.jsonl"
            while process.poll() is None and time.perf_counter() - started < seconds:
                if first_line_s is None and metrics_path.exists() and metrics_path.stat().st_size:
                    first_line_s = time.perf_counter() - started
                time.sleep(0.2)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            log.seek(0)
            output = log.read()
        print(output, end="")
        if process.returncode not in (0, 143):
            raise RuntimeError(f"train --preset {preset} exited with {process.returncode}")
        lines = ([json.loads(line) for line in metrics_path.read_text().splitlines()]
                 if metrics_path.exists() else [])
    metrics = {"gpu.preset.iterations": float(len(lines)),
               "gpu.preset.run_s": time.perf_counter() - started}
    if first_line_s is not None:
        metrics["gpu.preset.first_iteration_s"] = first_line_s
    steady = lines[1:] or lines  # the first iteration includes the start and an empty window
    if steady:
        wall = sum(line["iteration_seconds"] for line in steady)
        positions = sum(line["selfplay/positions"] for line in steady)
        samples = sum(line["pipeline/samples_per_s"] * line["iteration_seconds"] for line in steady)
        metrics.update({
            "gpu.preset.positions_per_s": positions / wall,
            "gpu.preset.samples_per_s": samples / wall,
            "gpu.preset.evals_per_s": sum(line["selfplay/evals_per_s"] * line["iteration_seconds"]
                                          for line in steady) / wall,
            "gpu.preset.samples_per_position": samples / max(positions, 1),
            "gpu.preset.learner_wait_share": sum(line["pipeline/learner_wait_s"]
                                                 for line in steady) / wall,
            "gpu.preset.weights_lag_steps": sum(line["pipeline/weights_lag_steps"]
                                                * line["selfplay/positions"]
                                                for line in steady) / max(positions, 1),
        })
    else:
        print(f"suite gpu: no iteration of --preset {preset} finished within {seconds:.0f} s",
              file=sys.stderr)
    return metrics


def run(quick: bool) -> dict[str, float]:
    """Measure the suite on the CUDA device; see the module docstring for the keys."""
    device = require_cuda()
    torch.set_num_threads(1)
    metrics = inference(device, window_s=0.5 if quick else 1.0)
    metrics.update(selfplay(device, games=SELFPLAY["actors"] * 8 if quick else None))
    metrics.update(weights(device))
    metrics.update(learner(device, steps=10 if quick else LEARNER_STEPS))
    metrics.update(preset_run(seconds=60.0 if quick else PRESET_RUN_S))
    preset = GPU_PRESET
    metrics["gpu.preset.iteration_s_at_preset_sims"] = (
        preset.games_per_iteration * metrics["gpu.selfplay.mean_game_plies"]
        * preset.selfplay.search.simulations / metrics["gpu.selfplay.sims_per_s"])
    print(f"suite gpu: {torch.cuda.get_device_name(device)}, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs", file=sys.stderr)
    return metrics
