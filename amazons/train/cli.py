"""The command line of the main job, `python -m amazons.train`: its parser and the names of the
self-play backends, with neither torch nor the training stack imported.

`amazons.train.__main__` parses the command line with it before it imports the main job, so that
a command line that does not parse fails at once and the forkserver starts only for one that runs
the local backend (`amazons._processes.start_forkserver`); `amazons.train.run.main` builds its
parser here too, so the command has one definition of its arguments.
"""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points
from pathlib import Path

__all__ = ["BACKENDS_GROUP", "backend_names", "build_parser"]

BACKENDS_GROUP = "amazons.backends"  # entry-point group of the backends beside the local one


def backend_names() -> list[str]:
    """`local` and the installed backends' names."""
    return ["local", *sorted(point.name for point in entry_points(group=BACKENDS_GROUP))]


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The parser of `python -m amazons.train`'s arguments, with `description` atop its help."""
    parser = argparse.ArgumentParser(prog="python -m amazons.train", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=("cpu", "gpu"), default=None,
                        help="default: gpu when CUDA is available, else cpu")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: runs/<preset>")
    parser.add_argument("--iterations", type=int, default=None,
                        help="iterations to reach (overrides the config)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --run-dir")
    parser.add_argument("--init", default=None, metavar="MODEL",
                        help="start a new run from a model's weights (a .pt model or learner "
                             "checkpoint, or 'default': the shipped model) with a fresh optimizer; "
                             "sets init_model")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (logs only)")
    parser.add_argument("--backend", choices=backend_names(), default="local",
                        help="local: this machine's processes; ray: self-play on every node of a "
                             "Ray cluster, DDP training (pip install 'amazons[ray]'; "
                             "docs/distributed.md)")
    parser.add_argument("--address", default=None,
                        help="a backend that joins a cluster (ray): the cluster ('auto': the one "
                             "`ray start` began on this machine, or HOST:PORT); default: start one "
                             "on this machine")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="config overrides, e.g. net.blocks=4")
    return parser
