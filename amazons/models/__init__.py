"""The trained model shipped with the package.

`default.pt` is a model checkpoint (`amazons.neural.checkpoint.save_model`) produced by
`python -m amazons.train`; `default.json` next to it records how: the training config, the
wall-clock training time, the hardware, and the measured strength. `default.npz` is the same
network exported for torch-free play (`python -m amazons.export amazons/models/default.pt
amazons/models/default.npz`, format `amazons.neural.numpy_net`): `--model default` in
`amazons.botzone` and `amazons.play` loads it; the checkpoint stays for training and torch-side
tools. This module never imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_CHECKPOINT_NAME",
    "DEFAULT_MODEL_NAME",
    "default_checkpoint_path",
    "default_model_info",
    "default_model_path",
]

DEFAULT_MODEL_NAME = "default.npz"  # the exported model (numpy, no torch)
DEFAULT_CHECKPOINT_NAME = "default.pt"  # the torch checkpoint it was exported from
_HERE = Path(__file__).resolve().parent


def _shipped(name: str) -> Path:
    path = _HERE / name
    if not path.is_file():
        raise FileNotFoundError(
            f"the shipped model {path} is missing; reinstall the package or pass --model PATH")
    return path


def default_model_path() -> Path:
    """Path of the shipped exported model (`default.npz`), what `--model default` loads.

    Raises:
        FileNotFoundError: the package was installed without it.
    """
    return _shipped(DEFAULT_MODEL_NAME)


def default_checkpoint_path() -> Path:
    """Path of the shipped model's torch checkpoint (`default.pt`).

    Raises:
        FileNotFoundError: the package was installed without it.
    """
    return _shipped(DEFAULT_CHECKPOINT_NAME)


def default_model_info() -> dict[str, Any]:
    """What `default.json` records about the shipped model (config, training time, hardware,
    strength); an empty dict when the file is absent."""
    path = _HERE / "default.json"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)
