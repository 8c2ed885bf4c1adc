"""The main job, `python -m amazons.train`, and its parts.

`run` (the local backend `Run`, the backend protocol, `main`), `config` (`TrainConfig`, the `cpu`
and `gpu` presets, `KEY=VALUE` overrides), `selfplay` (the actor processes), `replay` (chunks and
the window), `pipeline` (the async pipeline's step budget, weights publishing, the evaluation
thread) and `evaluation` (each iteration's matches and the Elo ladder). The Ray backend is
`amazons.distributed`, beside this package.

Importing the package imports none of them (self-play actors load `selfplay` without the main
job); `Run`, `main` and the backend functions are re-exported on first use, so
`from amazons.train import Run` works.
"""

from __future__ import annotations

import importlib
from typing import Any

_RUN_NAMES = frozenset({"Backend", "Run", "SelfPlaySource", "WeightsSink", "backend_names",
                        "load_backend", "main", "resolve_config"})


def __getattr__(name: str) -> Any:
    if name in _RUN_NAMES:
        return getattr(importlib.import_module("amazons.train.run"), name)
    raise AttributeError(f"module 'amazons.train' has no attribute {name!r}")
