"""Old import paths of modules that moved into subpackages, kept working for one release.

`import amazons.net` (and every other path in `MOVED`) still works: it returns the module at its
new path, registered under the old name too, after a `DeprecationWarning` that names the new path.
The package root installs the finder; nothing else uses it. The README's changelog lists the moves.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED = {  # old path -> new path (release 0.2)
    "amazons.net": "amazons.neural.model",
    "amazons.npnet": "amazons.neural.numpy_net",
    "amazons.nativenet": "amazons.neural.native",
    "amazons.netplay": "amazons.neural.production",
    "amazons.learn": "amazons.neural.learner",
    "amazons.checkpoint": "amazons.neural.checkpoint",
    "amazons.botzone_cpp": "amazons.botzone.cpp_export",
    "amazons.botzone_limits": "amazons.botzone.limits",
    "amazons.botzone_player": "amazons.botzone.program",
    "amazons.train_config": "amazons.train.config",
    "amazons.selfplay": "amazons.train.selfplay",
    "amazons.replay": "amazons.train.replay",
    "amazons.pipeline": "amazons.train.pipeline",
    "amazons.evaluation": "amazons.train.evaluation",
}


class _MovedLoader(importlib.abc.Loader):
    """Loads an old path as the module at its new path (one module object under both names)."""

    def __init__(self, new_name: str) -> None:
        self.new_name = new_name
        self.new_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new_name}; "
                      f"the old path goes in the next release",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new_name)
        self.new_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the old path's spec on the module: give it back its own.
        module.__spec__ = self.new_spec


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths in `MOVED`, and only those."""

    def find_spec(self, fullname: str, path: object, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        new_name = MOVED.get(fullname)
        if new_name is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(new_name))


def install() -> None:
    """Put the finder first on `sys.meta_path`, once: it answers for the old paths only, and
    before the path finders, so that a stale copy of an old module left by an earlier install
    is never imported beside its new self."""
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())
