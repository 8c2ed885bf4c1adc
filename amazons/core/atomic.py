"""Atomic file writes: a temporary file in the target's folder, fsync, rename, fsync the folder.

A reader sees the old file or the whole new one, never a half-written one, even after a crash.
Used by checkpoints, replay chunks and the training run's state. Imports nothing from the package.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
    """Call `write(stream)` on a temporary file, then rename it onto `path`; return `path`.

    The temporary file is removed if `write` raises (the exception propagates).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return path
    try:
        os.fsync(folder)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename has still happened
    finally:
        os.close(folder)
    return path
