"""The command line of the main job, `python -m amazons.train`: its parser and what its
forkserver preloads, with neither torch nor the training stack imported.

`amazons.train.__main__` parses the command line with it before it imports the main job, so that
a command line that does not parse fails at once and the forkserver starts only for one that runs
the local backend (`amazons.core.processes.start_forkserver`); `amazons.train.command.main` builds
its parser here too, so the command has one definition of its arguments.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from amazons.train.backends import backend_names

__all__ = ["JOB_PRELOAD", "build_parser"]

# What the forkserver of the local backend imports, started before the main job imports its own
# modules (named, not imported, so that it does so on another core): the actors' modules and the
# search kernels loaded (`amazons.train.selfplay.SELFPLAY_PRELOAD`) and a network server's torch
# (`amazons.neural.served.NETWORK_PRELOAD`).
JOB_PRELOAD = ("amazons.serving.server", "amazons.train.selfplay", "amazons.mcts:warm_up",
               "amazons.neural.served")


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
