"""Benchmark suite `nn`: network inference and training throughput.

Inference figures measure the path production runs: the model of
`amazons.neural.served.ReloadableNetworkEvaluator` (the inference server's, the arena's network
players', the web board's and evaluation's evaluator), i.e. `prepare_for_inference(model)` (batch
norms folded, channels_last, eval, no autograd, fp32 weights) under autocast to the precision.

Keys (all numbers):

* `nn.<preset>.<precision>.b<batch>.positions_per_s`: forward passes of that production model on
  a ready feature tensor; the best of three timing windows. `precision` is fp32 or bf16 (bf16
  autocast, as the server runs it on a GPU). Batches 1 to 1024 (quick: 1, 16, 256). On a CPU a
  measurement whose single call would take longer than `CPU_CALL_LIMIT_S` (extrapolated from the
  previous batch size) is not run; the key `nn.<preset>.<precision>.b<batch>.skipped_on_cpu` = 1
  says so.
* `nn.tiny.<precision>.b256.evaluator_positions_per_s`: the production evaluator's whole
  `evaluate` call (features from the engine, forward, priors of every legal move) on real
  positions, at the precision "auto" resolves to on the device (fp32 on a CPU); on CUDA with its
  CUDA graphs over batch buckets.
* `nn.<preset>.native.b<batch>.evaluator_positions_per_s` and
  `nn.<preset>.fp32.b<batch>.evaluator_positions_per_s` (tiny and small, batches 1, 16, 64, 256,
  the --quick grid too): the whole `evaluate` call of the compiled CPU evaluator
  (`amazons.neural.native.NativeEvaluator`, one thread, the kernels the CPU runs) and of the torch
  production evaluator on the CPU (fp32, torch on one thread), on the same positions, in one
  sitting; `nn.<preset>.native_over_torch.b<batch>` is their ratio, and
  `nn.<preset>.native_2threads.b<batch>.evaluator_positions_per_s` (batches 64 and 256) the native
  evaluator on two threads. Left out where the extension is not built.
* `nn.<preset>.pooled10.native.b64.evaluator_positions_per_s`,
  `nn.<preset>.pooled10.torch_fp32.b64.evaluator_positions_per_s` and their ratio
  `nn.<preset>.pooled10.native_over_torch.b64` (tiny and small with the pooled value head, the
  --quick grid too): the same two production evaluators on 10x10 (`board_size=10`), one
  sitting, on positions of random 10x10 playouts from the standard start. Left out where the
  extension is not built.
* `nn.tiny.fp32.b256.compiled.positions_per_s` (not with --quick): the same forward as the grid's
  under `torch.compile` with inductor's `freezing` (weights as constants: convolutions pre-packed
  and fused with their ReLU / residual add), a variant production does not run. The compile time
  (tens of seconds) is not counted.
* `nn.<preset>.train_samples_per_s` at batch `nn.<preset>.train_batch`: `Learner.train_step`
  (features, forward, losses, backward, clipping, AdamW), fp32 on a CPU, bf16 autocast on a GPU.
* `nn.<preset>.flops_per_position`: multiply-adds x 2 of one forward pass (convolutions, matrix
  products), counted by `torch.utils.flop_counter`; `nn.resnet40.trunk_flops_per_position`: the
  40 trunk convolutions alone (3.02e9).
* GPU only: `nn.resnet40.bf16.b256.evaluator_positions_per_s`: the production evaluator's whole
  call on ResNet-40 (bf16 autocast, a CUDA graph per batch bucket), and
  `nn.resnet40.bf16.b256.evaluator_no_graphs_positions_per_s`, the same without graphs.
* GPU only:
  `nn.resnet40.bf16.b{256,1024}.{eager,compiled,cudagraph,compiled_cudagraph}.positions_per_s` and
  `.flop_fraction` = positions/s x flops_per_position / the GPU's dense bf16 peak
  (`nn.gpu_peak_bf16_flops`; from the device name, or the `AMAZONS_GPU_PEAK_FLOPS` environment
  variable); `nn.resnet40.bf16.b1024.flop_fraction` is the best variant.
  `compiled` = `torch.compile` (default mode), `cudagraph` = the eager model captured in a CUDA
  graph, `compiled_cudagraph` = `torch.compile(mode="reduce-overhead")`; both compiled variants
  with inductor's `freezing`.

A variant that fails (no compiler, an inductor error) is reported as `<key>.failed` = 1 and the
others go on; when every ResNet-40 GPU variant fails the suite raises, and a figure that no
variant produced is left out, never reported as 0.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
import torch._inductor.config as inductor_config
from torch.utils.flop_counter import FlopCounterMode

from amazons import Board, engine
from amazons.boards import default_start
from amazons.neural.learner import Learner, OptimConfig, SampleBatch
from amazons.neural.model import PRESETS, PolicyValueNet, net_config, prepare_for_inference
from amazons.neural.native import NativeEvaluator, native_available
from amazons.neural.served import NativeReloadableEvaluator, ReloadableNetworkEvaluator

PRECISIONS = ("fp32", "bf16")
BATCHES = (1, 4, 16, 64, 256, 1024)
QUICK_BATCHES = (1, 16, 256)
CPU_CALL_LIMIT_S = 2.0  # skip CPU measurements whose one call would take longer than this
WINDOW_S = 0.25  # each timing window runs at least this long
TRAIN_BATCH = {"tiny": 256, "small": 256, "medium": 64, "resnet40": 16}
GPU_TRAIN_BATCH = 256
# Dense bf16 tensor-core peaks (FLOP/s, no sparsity) by device-name fragment, most specific first.
GPU_PEAKS = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("H800", 989e12),
             ("A100", 312e12), ("A10G", 70e12), ("L40S", 362e12), ("L4", 121e12), ("4090", 165e12))


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op off CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(call: Callable[[], object], device: torch.device, window_s: float) -> float:
    """Best per-call time over three windows of n calls each, n sized from one timed call."""
    for _ in range(3):  # warm-up (allocations, kernel selection; oneDNN's first calls are slower)
        call()
    synchronize(device)
    started = time.perf_counter()
    call()
    synchronize(device)
    single = time.perf_counter() - started
    repeats = max(1, math.ceil(window_s / max(single, 1e-6)))
    best = single
    for _ in range(3):
        synchronize(device)
        started = time.perf_counter()
        for _ in range(repeats):
            call()
        synchronize(device)
        best = min(best, (time.perf_counter() - started) / repeats)
    return best


def random_batch(rng: np.random.Generator, count: int) -> SampleBatch:
    """Positions from random playouts of 0..40 plies, labels on 1..8 of their legal moves."""
    positions = random_positions_of_size(rng, count, 8)
    moves, offsets = engine.legal_moves(positions)
    label_moves, label_weights = [], []
    for row in range(count):
        own = moves[offsets[row]:offsets[row + 1]]
        picked = rng.choice(own.shape[0], size=min(own.shape[0], int(rng.integers(1, 9))),
                            replace=False)
        label_moves.append(own[picked])
        label_weights.append(rng.integers(1, 50, size=picked.shape[0]))
    return SampleBatch.from_samples(positions, label_moves, label_weights,
                                    rng.choice([-1.0, 1.0], count))


def flops_per_position(model: PolicyValueNet) -> float:
    """FLOPs (2 x multiply-adds) of one forward pass for one position."""
    features = torch.zeros(1, model.config.num_planes, 8, 8)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model.eval()(features)
    return float(counter.get_total_flops())


def _autocast_forward(evaluator: ReloadableNetworkEvaluator, x: torch.Tensor) -> object:
    """The production model's forward as `NetworkEvaluator.evaluate` runs it: autocast entered for
    the call (so bf16 weights are cast again at every call, as in production)."""
    with torch.autocast(x.device.type, dtype=evaluator.dtype,
                        enabled=evaluator.dtype != torch.float32):
        return evaluator.model(x)


def _inference_grid(device: torch.device, batches: tuple[int, ...], window_s: float,
                    rng: np.random.Generator) -> dict[str, float]:
    metrics: dict[str, float] = {}
    features = torch.from_numpy(engine.features(random_batch(rng, max(batches)).positions, 7))
    for preset in PRESETS:
        torch.manual_seed(0)
        model = PolicyValueNet(net_config(preset))
        metrics[f"nn.{preset}.flops_per_position"] = flops_per_position(model)
        for precision in PRECISIONS:
            production = ReloadableNetworkEvaluator(model, str(device), precision,
                                                    cuda_graphs=False)
            previous_rate = None
            for batch in batches:
                key = f"nn.{preset}.{precision}.b{batch}"
                if device.type == "cpu" and previous_rate is not None \
                        and batch / previous_rate > CPU_CALL_LIMIT_S:
                    metrics[f"{key}.skipped_on_cpu"] = 1.0
                    continue
                x = features[:batch].to(device=device).contiguous(
                    memory_format=torch.channels_last)
                with torch.inference_mode():
                    seconds = seconds_per_call(lambda e=production, x=x: _autocast_forward(e, x),
                                               device, window_s)
                previous_rate = batch / seconds
                metrics[f"{key}.positions_per_s"] = previous_rate
    return metrics


def _evaluator_rate(preset: str, device: torch.device, window_s: float, rng: np.random.Generator,
                    cuda_graphs: bool | None = None) -> tuple[str, float]:
    """(precision, positions/s) of the production evaluator's whole call on 256 real positions."""
    torch.manual_seed(0)
    evaluator = ReloadableNetworkEvaluator(PolicyValueNet(net_config(preset)), str(device), "auto",
                                           cuda_graphs=cuda_graphs)
    positions = random_batch(rng, 256).positions
    moves, offsets = engine.legal_moves(positions)
    seconds = seconds_per_call(lambda: evaluator.evaluate(positions, moves, offsets), device,
                               window_s)
    return evaluator.precision, 256 / seconds


def _evaluator_figure(device: torch.device, window_s: float,
                      rng: np.random.Generator) -> dict[str, float]:
    precision, rate = _evaluator_rate("tiny", device, window_s, rng)
    return {f"nn.tiny.{precision}.b256.evaluator_positions_per_s": rate}


EVALUATOR_BATCHES = (1, 16, 64, 256)


def _native_against_torch(window_s: float, rng: np.random.Generator) -> dict[str, float]:
    """The native evaluator's whole call against the torch production evaluator's on the CPU:
    the same positions, one thread each, batches `EVALUATOR_BATCHES`."""
    if not native_available():
        print("suite_nn: amazons._native is not built; the native evaluator's keys are left out",
              file=sys.stderr)
        return {}
    cpu = torch.device("cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    metrics: dict[str, float] = {}
    positions = random_batch(rng, max(EVALUATOR_BATCHES)).positions
    try:
        for preset in ("tiny", "small"):
            torch.manual_seed(0)
            model = PolicyValueNet(net_config(preset))
            evaluators = {"native": NativeReloadableEvaluator(model),
                          "fp32": ReloadableNetworkEvaluator(model, "cpu", "fp32",
                                                             cuda_graphs=False)}
            for batch in EVALUATOR_BATCHES:
                rows = np.ascontiguousarray(positions[:batch])
                moves, offsets = engine.legal_moves(rows)
                for name, evaluator in evaluators.items():
                    seconds = seconds_per_call(
                        lambda e=evaluator, r=rows, m=moves, o=offsets: e.evaluate(r, m, o),
                        cpu, window_s)
                    metrics[f"nn.{preset}.{name}.b{batch}.evaluator_positions_per_s"] = (
                        batch / seconds)
                key = f"nn.{preset}.{{}}.b{batch}.evaluator_positions_per_s"
                metrics[f"nn.{preset}.native_over_torch.b{batch}"] = (
                    metrics[key.format("native")] / metrics[key.format("fp32")])
                if batch >= 64:  # what a second thread buys where a batch has rows for two
                    two = NativeEvaluator(evaluators["native"].native.net, threads=2)
                    seconds = seconds_per_call(
                        lambda e=two, r=rows, m=moves, o=offsets: e.evaluate(r, m, o),
                        cpu, window_s)
                    metrics[f"nn.{preset}.native_2threads.b{batch}.evaluator_positions_per_s"] = (
                        batch / seconds)
    finally:
        torch.set_num_threads(threads)
    return metrics


def random_positions_of_size(rng: np.random.Generator, count: int, size: int) -> np.ndarray:
    """Canonical positions of random playouts of 0..40 plies from the size's standard start."""
    start = Board(start=default_start(size)).canonical_position()
    positions = np.repeat(start[None], count, axis=0)
    plies = rng.integers(0, 41, size=count)
    for ply in range(40):
        live = np.flatnonzero(plies > ply)
        if live.size == 0:
            break
        current = np.ascontiguousarray(positions[live])
        moves, offsets = engine.legal_moves(current, size=size)
        counts = np.diff(offsets)
        picks = offsets[:-1] + rng.integers(0, np.maximum(counts, 1))
        movable = counts > 0
        children = engine.apply_moves(current[movable], np.ascontiguousarray(moves[picks[movable]]),
                                      size=size)
        keep = ~engine.is_terminal(children, size=size)
        positions[live[movable][keep]] = children[keep]
    return positions


def _native_against_torch_10x10(window_s: float, rng: np.random.Generator) -> dict[str, float]:
    """The native evaluator's whole call against the torch production evaluator's on the CPU on
    10x10, batch 64, with the pooled value head (the flat one runs 8x8 only); see the module
    docstring."""
    if not native_available():
        return {}
    cpu = torch.device("cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    metrics: dict[str, float] = {}
    batch, size = 64, 10
    positions = random_positions_of_size(rng, batch, size)
    moves, offsets = engine.legal_moves(positions, size=size)
    try:
        for preset in ("tiny", "small"):
            torch.manual_seed(0)
            model = PolicyValueNet(net_config(preset, value_head="pooled"))
            evaluators = {"native": NativeReloadableEvaluator(model, board_size=size),
                          "torch_fp32": ReloadableNetworkEvaluator(model, "cpu", "fp32",
                                                                   cuda_graphs=False,
                                                                   board_size=size)}
            key = f"nn.{preset}.pooled10.{{}}.b{batch}.evaluator_positions_per_s"
            for name, evaluator in evaluators.items():
                seconds = seconds_per_call(
                    lambda e=evaluator: e.evaluate(positions, moves, offsets), cpu, window_s)
                metrics[key.format(name)] = batch / seconds
            metrics[f"nn.{preset}.pooled10.native_over_torch.b{batch}"] = (
                metrics[key.format("native")] / metrics[key.format("torch_fp32")])
    finally:
        torch.set_num_threads(threads)
    return metrics


def _compiled_tiny(device: torch.device, window_s: float,
                   rng: np.random.Generator) -> dict[str, float]:
    """The tiny net at batch 256 under torch.compile with inductor's freezing (weights become
    constants, so convolutions get their fused, pre-packed form); fp32 on a CPU."""
    torch.manual_seed(0)
    model = prepare_for_inference(PolicyValueNet(net_config("tiny"))).to(device)
    x = (torch.from_numpy(engine.features(random_batch(rng, 256).positions, 7)).to(device)
         .contiguous(memory_format=torch.channels_last))
    key = "nn.tiny.fp32.b256.compiled"
    try:
        with inductor_config.patch(freezing=True), torch.inference_mode():
            compiled = torch.compile(model, dynamic=False)
            seconds = seconds_per_call(lambda: compiled(x), device, window_s)
    except Exception as error:  # no C++ compiler, or an inductor failure: report, go on
        print(f"suite_nn: {key} failed: {type(error).__name__}: {error}", file=sys.stderr)
        return {f"{key}.failed": 1.0}
    return {f"{key}.positions_per_s": 256 / seconds}


def _training(device: torch.device, presets: tuple[str, ...], window_s: float,
              rng: np.random.Generator) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for preset in presets:
        batch_size = GPU_TRAIN_BATCH if device.type == "cuda" else TRAIN_BATCH[preset]
        batch = random_batch(rng, batch_size)
        torch.manual_seed(0)
        learner = Learner(PolicyValueNet(net_config(preset)), OptimConfig(), device=device, seed=0)
        seconds = seconds_per_call(lambda lr=learner, b=batch: lr.train_step(b), device, window_s)
        metrics[f"nn.{preset}.train_samples_per_s"] = batch_size / seconds
        metrics[f"nn.{preset}.train_batch"] = float(batch_size)
    return metrics


def gpu_peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak of the GPU, from `AMAZONS_GPU_PEAK_FLOPS` or its name; None if unknown."""
    if os.environ.get("AMAZONS_GPU_PEAK_FLOPS"):
        return float(os.environ["AMAZONS_GPU_PEAK_FLOPS"])
    name = torch.cuda.get_device_name(device)
    for fragment, peak in GPU_PEAKS:
        if fragment in name:
            return peak
    return None


def _bound(function: Callable[[torch.Tensor], object], x: torch.Tensor) -> Callable[[], object]:
    return lambda: function(x)


def _cuda_graph_call(model: torch.nn.Module, example: torch.Tensor) -> Callable[[], object]:
    """The model's forward on a fixed input buffer, captured once in a CUDA graph."""
    static_input = example.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            model(static_input)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(static_input)
    return graph.replay


def _gpu_resnet40(device: torch.device, window_s: float,
                  rng: np.random.Generator) -> dict[str, float]:
    metrics: dict[str, float] = {}
    torch.manual_seed(0)
    model = PolicyValueNet(net_config("resnet40"))
    flops = flops_per_position(model)
    config = model.config
    metrics["nn.resnet40.trunk_flops_per_position"] = float(
        2 * config.blocks * 2 * config.channels**2 * 9 * 64)
    peak = gpu_peak_flops(device)
    if peak is not None:
        metrics["nn.gpu_peak_bf16_flops"] = peak
    prepared = prepare_for_inference(model, torch.bfloat16).to(device)
    features = torch.from_numpy(engine.features(random_batch(rng, 1024).positions, 7))
    variants: dict[str, Callable[[torch.Tensor], Callable[[], object]]] = {
        "eager": lambda x: _bound(prepared, x),
        "cudagraph": lambda x: _cuda_graph_call(prepared, x),
        "compiled": lambda x: _bound(torch.compile(prepared, dynamic=False), x),
        "compiled_cudagraph": lambda x: _bound(
            torch.compile(prepared, mode="reduce-overhead", dynamic=False), x),
    }
    fractions_b1024: list[float] = []
    failures: list[str] = []
    for batch in (256, 1024):
        x = features[:batch].to(device=device, dtype=torch.bfloat16).contiguous(
            memory_format=torch.channels_last)
        for name, build in variants.items():
            key = f"nn.resnet40.bf16.b{batch}.{name}"
            try:
                with inductor_config.patch(freezing=True), torch.inference_mode():
                    call = build(x)
                    seconds = seconds_per_call(call, device, window_s)
            except Exception as error:  # one failing variant must not hide the others' figures
                print(f"suite_nn: {key} failed: {type(error).__name__}: {error}", file=sys.stderr)
                metrics[f"{key}.failed"] = 1.0
                failures.append(f"{key}: {type(error).__name__}: {error}")
                continue
            rate = batch / seconds
            metrics[f"{key}.positions_per_s"] = rate
            if peak is not None:
                metrics[f"{key}.flop_fraction"] = rate * flops / peak
                if batch == 1024:
                    fractions_b1024.append(rate * flops / peak)
    for key, graphs in (("evaluator", None), ("evaluator_no_graphs", False)):
        try:
            _, rate = _evaluator_rate("resnet40", device, window_s, rng, cuda_graphs=graphs)
            metrics[f"nn.resnet40.bf16.b256.{key}_positions_per_s"] = rate
        except Exception as error:  # reported like the variants below, never as a 0
            print(f"suite_nn: nn.resnet40.bf16.b256.{key} failed: {type(error).__name__}: {error}",
                  file=sys.stderr)
            metrics[f"nn.resnet40.bf16.b256.{key}.failed"] = 1.0
    if len(failures) == 2 * len(variants):
        raise RuntimeError("every ResNet-40 GPU variant failed:\n" + "\n".join(failures))
    if peak is not None and fractions_b1024:  # no figure at all rather than a 0.0
        metrics["nn.resnet40.bf16.b1024.flop_fraction"] = max(fractions_b1024)
    return metrics


def run(quick: bool) -> dict[str, float]:
    """Measure the suite; see the module docstring for the keys."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(0)
    window_s = WINDOW_S / 2 if quick else WINDOW_S
    metrics = _inference_grid(device, QUICK_BATCHES if quick else BATCHES, window_s, rng)
    metrics.update(_evaluator_figure(device, window_s, rng))
    metrics.update(_native_against_torch(window_s, rng))
    metrics.update(_native_against_torch_10x10(window_s, rng))
    if not quick:
        metrics.update(_compiled_tiny(device, window_s, rng))
    train_presets = ("tiny", "small") if quick else tuple(PRESETS)
    metrics.update(_training(device, train_presets, window_s, rng))
    if device.type == "cuda":
        metrics.update(_gpu_resnet40(device, window_s, rng))
    else:
        config = PRESETS["resnet40"]
        metrics["nn.resnet40.trunk_flops_per_position"] = float(
            2 * config.blocks * 2 * config.channels**2 * 9 * 64)
    return metrics
