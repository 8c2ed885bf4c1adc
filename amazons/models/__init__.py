"""The trained models shipped with the package, one per first-class board.

* `default.*`: the 8x8 model (Botzone's board; flat value head, `amazons.neural.model`);
* `standard10.*`: the 10x10 model (the standard game; pooled value head, so it plays every size).

Each is a model checkpoint `NAME.pt` (`amazons.neural.checkpoint.save_model`) produced by
`python -m amazons.train`; `NAME.json` next to it records how: the training config, the
wall-clock training time, the hardware, and the measured strength. `NAME.npz` is the same
network exported for torch-free play (`python -m amazons.export amazons/models/NAME.pt
amazons/models/NAME.npz`, format `amazons.neural.numpy_net`); the checkpoint stays for training
and torch-side tools.

`--model default` (the bot, terminal play, the arena, the web board) and `--init default`
(training) name the shipped model of the board being played: `default.*` on 8x8,
`standard10.*` on every other size (`shipped_model_name`). This module never imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_CHECKPOINT_NAME",
    "DEFAULT_MODEL_NAME",
    "SHIPPED_MODELS",
    "default_checkpoint_path",
    "default_model_info",
    "default_model_path",
    "shipped_model_name",
]

# Board size -> the stem of the model trained on it ("default" keeps the 8x8 model's old name).
SHIPPED_MODELS = {8: "default", 10: "standard10"}
DEFAULT_MODEL_NAME = f"{SHIPPED_MODELS[8]}.npz"  # the 8x8 exported model (numpy, no torch)
DEFAULT_CHECKPOINT_NAME = f"{SHIPPED_MODELS[8]}.pt"  # the torch checkpoint it was exported from
_HERE = Path(__file__).resolve().parent


def shipped_model_name(board_size: int = 8) -> str:
    """The stem of the shipped model that `default` names on `board_size` boards: the one
    trained on that size, else the 10x10 model, whose pooled value head plays every size (the
    8x8 model's flat head plays 8x8 only)."""
    return SHIPPED_MODELS.get(board_size, SHIPPED_MODELS[10])


def _shipped(name: str) -> Path:
    path = _HERE / name
    if not path.is_file():
        raise FileNotFoundError(
            f"the shipped model {path} is missing; reinstall the package or pass --model PATH")
    return path


def default_model_path(board_size: int = 8) -> Path:
    """Path of the shipped exported model for `board_size` boards (`default.npz` on 8x8,
    `standard10.npz` elsewhere), what `--model default` loads there.

    Raises:
        FileNotFoundError: the package was installed without it.
    """
    return _shipped(f"{shipped_model_name(board_size)}.npz")


def default_checkpoint_path(board_size: int = 8) -> Path:
    """Path of the torch checkpoint of the shipped model for `board_size` boards (`default.pt`
    on 8x8, `standard10.pt` elsewhere), what `--init default` starts a run of that size from.

    Raises:
        FileNotFoundError: the package was installed without it.
    """
    return _shipped(f"{shipped_model_name(board_size)}.pt")


def default_model_info(board_size: int = 8) -> dict[str, Any]:
    """What `NAME.json` records about the shipped model for `board_size` boards (config,
    training time, hardware, strength); an empty dict when the file is absent."""
    path = _HERE / f"{shipped_model_name(board_size)}.json"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)
