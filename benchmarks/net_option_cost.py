"""What a network option costs: weights and CPU time per call, the preset as it is against the
preset with the main command's `net.KEY=VALUE` overrides.

    python -m benchmarks.net_option_cost --preset tiny net.arrow_source=true

(from the repository root, so the checkout's `amazons` is the one measured).

Prints a Markdown table, one row per figure, the base network and the changed one side by side:

* weights: `count_parameters`;
* `evaluate` b1 and b256: the production evaluator's whole call (`prepare_for_inference`: batch
  norms folded, channels_last, fp32; features from the engine, forward, the priors of every legal
  move), one position and 256 positions;
* npnet b1: `NumpyEvaluator.evaluate` of the exported network on one position (the Botzone bot's
  and terminal play's path, one BLAS thread);
* train step b256: one `Learner.train_step` (fp32, labels on three legal moves per position).

Times are CPU milliseconds of this process per call (`time.process_time`, one torch thread), the
median over `--rounds` rounds in which the two networks alternate, so the load of other processes
on the machine barely moves them. Positions come from seeded random games (`random_positions`).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from amazons import engine
from amazons.export import export_model, random_positions
from amazons.neural import numpy_net
from amazons.neural.cuda_graphs import NetworkEvaluator
from amazons.neural.learner import Learner, OptimConfig, SampleBatch
from amazons.neural.model import (
    PRESETS,
    NetConfig,
    PolicyValueNet,
    count_parameters,
    prepare_for_inference,
)
from amazons.train.config import apply_overrides, preset_config


def labelled_batch(positions: np.ndarray) -> SampleBatch:
    """`positions` with labels spread evenly over (up to) their first three legal moves."""
    moves, offsets = engine.legal_moves(positions)
    counts = np.minimum(np.diff(offsets), 3)
    label_moves = np.concatenate([moves[offsets[i]:offsets[i] + counts[i]]
                                  for i in range(positions.shape[0])])
    probs = np.concatenate([np.full(count, 1.0 / count, np.float32) for count in counts])
    label_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows = positions.shape[0]
    return SampleBatch(positions, label_moves, probs, label_offsets,
                       np.linspace(-1, 1, rows).astype(np.float32), np.ones(rows, np.float32))


def cpu_ms(call: Callable[[], object], repeats: int) -> float:
    """CPU milliseconds of this process per call of `call`, over `repeats` calls."""
    started = time.process_time()
    for _ in range(repeats):
        call()
    return 1000.0 * (time.process_time() - started) / repeats


def measurements(config: NetConfig, directory: Path) -> tuple[dict[str, Callable[[], float]], int]:
    """Figure name -> a function that measures it once on a network of `config`, and the
    network's weights."""
    torch.manual_seed(0)
    model = PolicyValueNet(config)
    evaluator = NetworkEvaluator(prepare_for_inference(model), config.num_planes)
    numpy_path, _ = export_model(model, directory / f"{id(config)}.npz", check_positions=0)
    numpy_evaluator = numpy_net.NumpyEvaluator.from_file(numpy_path)
    one, many = random_positions(1, seed=1), random_positions(256, seed=2)
    one_moves, many_moves = engine.legal_moves(one), engine.legal_moves(many)
    learner = Learner(PolicyValueNet(config), OptimConfig(precision="fp32", warmup_steps=0), seed=0)
    batch = labelled_batch(many)
    return {
        "evaluate b1 (ms)": lambda: cpu_ms(lambda: evaluator.evaluate(one, *one_moves), 200),
        "evaluate b256 (ms)": lambda: cpu_ms(lambda: evaluator.evaluate(many, *many_moves), 8),
        "npnet b1 (ms)": lambda: cpu_ms(lambda: numpy_evaluator.evaluate(one, *one_moves), 400),
        "train step b256 (ms)": lambda: cpu_ms(lambda: learner.train_step(batch), 3),
    }, count_parameters(model)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS),
                        help="the base network")
    parser.add_argument("--rounds", type=int, default=7,
                        help="rounds of every measurement (the median is printed)")
    parser.add_argument("overrides", nargs="+", metavar="net.KEY=VALUE",
                        help="the changed network's fields")
    args = parser.parse_args(argv)
    if any(not override.startswith("net.") for override in args.overrides):
        parser.error(f"overrides change the network only: net.KEY=VALUE, got {args.overrides}")
    base = dataclasses.replace(preset_config("cpu"), net=PRESETS[args.preset])
    try:
        changed = apply_overrides(base, args.overrides).net
    except ValueError as error:
        parser.error(str(error))
    torch.set_num_threads(1)
    numpy_net.limit_blas_threads(1)
    with tempfile.TemporaryDirectory() as directory:
        (base_figures, base_weights), (changed_figures, changed_weights) = (
            measurements(config, Path(directory)) for config in (base.net, changed))
        times: dict[str, tuple[list[float], list[float]]] = {name: ([], [])
                                                             for name in base_figures}
        for _ in range(args.rounds):
            for name in base_figures:
                times[name][0].append(base_figures[name]())
                times[name][1].append(changed_figures[name]())
    print(f"| {args.preset} | base | {' '.join(args.overrides)} | change |")
    print("|---|---:|---:|---:|")
    print(f"| weights | {base_weights:,} | {changed_weights:,} | "
          f"{changed_weights - base_weights:+,} |")
    for name, (before, after) in times.items():
        old, new = statistics.median(before), statistics.median(after)
        print(f"| {name} | {old:.3f} | {new:.3f} | {100 * (new / old - 1):+.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
