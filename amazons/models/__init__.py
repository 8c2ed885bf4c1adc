"""The trained model shipped with the package.

`default.pt` is a model checkpoint (`amazons.checkpoint.save_model`) produced by
`python -m amazons.train`; `default.json` next to it records how: the training config, the
wall-clock training time, the hardware, and the measured strength. `--model default` in
`amazons.botzone` and `amazons.play` loads it. This module never imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_MODEL_NAME", "default_model_info", "default_model_path"]

DEFAULT_MODEL_NAME = "default.pt"
_HERE = Path(__file__).resolve().parent


def default_model_path() -> Path:
    """Path of the shipped model checkpoint.

    Raises:
        FileNotFoundError: the package was installed without its model file.
    """
    path = _HERE / DEFAULT_MODEL_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"the shipped model {path} is missing; reinstall the package or pass --model PATH")
    return path


def default_model_info() -> dict[str, Any]:
    """What `default.json` records about the shipped model (config, training time, hardware,
    strength); an empty dict when the file is absent."""
    path = _HERE / "default.json"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)
