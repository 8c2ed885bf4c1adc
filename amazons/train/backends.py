"""The main job's backends: the `Backend` protocol, and the one registry that finds a backend by
its name (`local`, this machine's processes: `amazons.train.run.Run`; the others are entry points
of the `amazons.backends` group, such as `ray`: `amazons.distributed.ray_backend.RayRun`).

The backends beside the local one register themselves from above, as entry points in
pyproject.toml, so the main job never imports them. `backend_names` imports neither torch nor the
training stack (the command line lists the names before anything else starts): the local
backend's module is imported only when it is loaded.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from amazons.train.config import TrainConfig
    from amazons.train.run import Run

__all__ = ["BACKENDS_GROUP", "Backend", "backend_names", "load_backend"]

BACKENDS_GROUP = "amazons.backends"  # entry-point group of the backends beside the local one


def backend_names() -> list[str]:
    """`local` and the installed backends' names."""
    return ["local", *sorted(point.name for point in entry_points(group=BACKENDS_GROUP))]


class Backend(Protocol):
    """A self-play backend: builds the run for a resolved config. The local backend is `Run`;
    others (`--backend ray`: `amazons.distributed.ray_backend.RayRun`) register under the
    entry-point group `amazons.backends` (pyproject.toml), so the main job never imports them.
    `fit_config` first adapts the preset's settings it does not run; the backend then refuses,
    with a `ValueError` naming the field, settings it does not honour."""

    def fit_config(self, config: TrainConfig, overrides: list[str]) -> TrainConfig:
        """The config this backend runs for `config`, resolved with the KEY=VALUE `overrides`."""
        ...

    def __call__(self, config: TrainConfig, run_dir: Path, resume: bool,
                 address: str | None = None) -> Run:
        ...


def load_backend(name: str) -> Backend:
    """The backend called `name`: `Run` for `local`, else the entry point of that name.

    Raises:
        ValueError: no backend of that name is installed (lists those that are).
    """
    if name == "local":
        from amazons.train.run import Run

        return Run
    points = [point for point in entry_points(group=BACKENDS_GROUP) if point.name == name]
    if not points:
        raise ValueError(f"no backend named {name!r} is installed; "
                         f"installed: {', '.join(backend_names())}")
    return points[0].load()
