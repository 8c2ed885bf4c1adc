"""Benchmark runner: `python benchmarks/run.py`.

    python benchmarks/run.py
        [--suite engine,mcts,nn,selfplay,botzone,envs,solver,ray,train,gpu|all] [--json PATH]

Each suite lives in `benchmarks/suite_<name>.py` and exposes
`run(quick: bool) -> dict[str, float]`, a flat map from metric name (`<suite>.<what>`) to value.
The runner prints one table and, with `--json`, writes
`{"suite": ..., "machine": {...}, "metrics": {NAME: number}}`.
Numba compilation and other warm-up happen inside each suite before its clocks start.
`all` runs every suite but `gpu`, which needs a CUDA device (on a machine without one it says so
and exits with status 1).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

SUITES = ("engine", "mcts", "nn", "selfplay", "botzone", "envs", "solver", "ray", "train")
EXTRA_SUITES = ("gpu",)  # named explicitly, never part of `all`

# Each suite's module, imported only when it runs (they import what they measure: torch, Ray,
# OpenSpiel). Named in full, so that tools/architecture.py reads these imports as it reads any.
LOADERS = {
    "engine": lambda: importlib.import_module("suite_engine"),
    "mcts": lambda: importlib.import_module("suite_mcts"),
    "nn": lambda: importlib.import_module("suite_nn"),
    "selfplay": lambda: importlib.import_module("suite_selfplay"),
    "botzone": lambda: importlib.import_module("suite_botzone"),
    "envs": lambda: importlib.import_module("suite_envs"),
    "solver": lambda: importlib.import_module("suite_solver"),
    "ray": lambda: importlib.import_module("suite_ray"),
    "train": lambda: importlib.import_module("suite_train"),
    "gpu": lambda: importlib.import_module("suite_gpu"),
}


def machine_facts() -> dict[str, object]:
    """Describe the machine the figures were measured on."""
    facts: dict[str, object] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    facts["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["cuda"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            facts["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        facts["torch"] = None
    return facts


def parse_suites(text: str) -> list[str]:
    """Turn `engine,mcts` or `all` into a list of known suite names."""
    names = (list(SUITES) if text == "all"
             else [name.strip() for name in text.split(",") if name.strip()])
    unknown = [name for name in names if name not in SUITES + EXTRA_SUITES]
    if unknown:
        raise SystemExit(f"unknown suite(s) {unknown}; "
                         f"choose from {', '.join(SUITES + EXTRA_SUITES)} or 'all'")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="engine",
                        help="comma-separated suites, or 'all' (default: engine)")
    parser.add_argument("--json", type=Path, default=None,
                        help="write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true",
                        help="shorter runs (smoke test; figures are noisier)")
    args = parser.parse_args(argv)

    # The suites measure the checkout they sit in, whatever package an environment installed.
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
    metrics: dict[str, float] = {}
    for name in parse_suites(args.suite):
        module = LOADERS[name]()
        started = time.perf_counter()
        suite_metrics = module.run(quick=args.quick)
        if not suite_metrics:
            raise RuntimeError(f"suite {name} measured nothing")
        metrics.update(suite_metrics)
        print(f"\n== suite {name} ({time.perf_counter() - started:.1f} s)")
        width = max((len(key) for key in suite_metrics), default=10)
        for key, value in suite_metrics.items():
            print(f"  {key:<{width}}  {value:>16,.4g}")
    if args.json is not None:
        report = {"suite": args.suite, "machine": machine_facts(), "metrics": metrics}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
