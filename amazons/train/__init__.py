"""The main job, `python -m amazons.train`, and its parts.

`run` (the local backend `Run`), `backends` (the backend protocol and registry), `command` (the
command line's `main`), `cli` (its parser), `signals` (how SIGINT and SIGTERM stop a run),
`progress` (the progress bars), `config` (`TrainConfig`, the `cpu` and `gpu` presets, `KEY=VALUE`
overrides), `selfplay` (the actor processes), `replay` (chunks and the window) and `pipeline` (the
async pipeline's step budget, weights publishing, the evaluation thread). Each iteration's
matches are `amazons.matches.evaluation`, a layer below; the Ray backend is
`amazons.distributed`, beside this package.

Importing the package imports none of them (self-play actors load `selfplay` without the main
job); `Run`, `main` and the backend functions are re-exported on first use, so
`from amazons.train import Run` works.
"""

from __future__ import annotations

import importlib
from typing import Any

# The re-exported names and their modules (read as imports by tools/architecture.py).
_RUN_NAMES = {"Run": "amazons.train.run", "SelfPlaySource": "amazons.train.run",
              "WeightsSink": "amazons.train.run", "Backend": "amazons.train.backends",
              "backend_names": "amazons.train.backends", "load_backend": "amazons.train.backends",
              "main": "amazons.train.command", "resolve_config": "amazons.train.command"}


def __getattr__(name: str) -> Any:
    if name in _RUN_NAMES:
        return getattr(importlib.import_module(_RUN_NAMES[name]), name)
    raise AttributeError(f"module 'amazons.train' has no attribute {name!r}")
