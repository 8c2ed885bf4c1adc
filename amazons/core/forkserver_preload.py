"""What the package's forkserver imports: the one module it is handed, which imports the modules
the forkserver preloads itself, so that one that fails to import there is reported, not silent.

`amazons.core.processes.process_context` hands multiprocessing this module alone and names the
modules to preload in the environment variable `PRELOAD_VARIABLE` (comma-separated, in order).
Imported in the forkserver, it imports each of them, and for one that raises (any `Exception`: a
missing optional dependency, an extension built for another NumPy, a bug at import) writes one
line to stderr naming the module and its error, then goes on with the others. The forkserver
lives on: a child that needs the module imports it in its own process and raises the real error
there, with its traceback.

Why not hand multiprocessing the modules themselves: `multiprocessing.forkserver.main` imports
each with `try: __import__(name) except ImportError: pass`, so an ImportError is dropped without
a word (the children then import the module again, each, slowly), and any other exception ends
the forkserver, after which every `Process.start()` of the parent fails with an EOFError or a
ConnectionError that names nothing. Imported first in a list that also held them, this module
could report the failures, but `main` would then import the failed ones again and die the same
way. Python 3.10 to 3.14 give no hook for it (CPython's `on_error` for the preload, gh-141860,
comes later), and calling or replacing `main` ties the package to a private signature that
changes between them (3.14 adds `authkey_r`, the later releases of 3.13 and 3.14 `sys_argv`):
handing it the name of an ordinary module works on every one.

Why the environment carries the list: the forkserver is a new interpreter (an exec, not a fork),
so a list in the parent's memory is not there, and multiprocessing passes it nothing but module
names and its own preparation data. It is started by `multiprocessing.forkserver.ensure_running`
with the parent's environment of that moment, lazily, on the first `Process.start()` of any
caller (and again after it died), where no code of the package runs around it: a variable set
only for the start would be missed by every start but `start_forkserver`'s. So `process_context`
keeps the variable equal to its list whenever it hands multiprocessing this module; whichever
start it is, the forkserver reads the list that multiprocessing was told about. Its cost: the
parent's other subprocesses inherit the variable, and nothing there reads it. The forkserver's
own command line (`sys.orig_argv`) holds the names too, but in multiprocessing's private format.

What this module cannot report is its own import, and with it the package's root (the engine):
the parent imported both, so the forkserver fails there only where it cannot find the package
(the parent found it through a `sys.path` entry added at run time, which multiprocessing hands
the forkserver only from CPython's gh-117378 fix on, not on 3.10 or 3.11); its children, given
the parent's `sys.path`, still import it.

Imports only `amazons.core.processes` (standard library only) of the package.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import TextIO

from amazons.core import PRELOAD_VARIABLE

__all__ = ["preload"]


def preload(names: Iterable[str], stream: TextIO) -> list[str]:
    """Import the modules `names` in order, each on its own; one that raises does not stop the
    others.

    Args:
        names: dotted module names, or `module:function` to call that function (no arguments)
            once the module is imported.
        stream: where a failure is reported, one line each (the forkserver's stderr).

    Returns:
        The names that failed to import, in order.
    """
    failed = []
    for name in names:
        module_name, _, function = name.partition(":")
        try:
            module = importlib.import_module(module_name)
            if function:
                getattr(module, function)()
        except Exception as error:  # whatever a module raises, the forkserver must serve on
            message = " ".join(str(error).splitlines())
            stream.write(f"amazons: the forkserver could not preload {name}: "
                         f"{type(error).__name__}: {message}; "
                         f"its children import {module_name} themselves\n")
            failed.append(name)
    # Written before the forkserver forks: a line left in the buffer would be written again by
    # every child.
    stream.flush()
    return failed


_asked = os.environ.get(PRELOAD_VARIABLE)
if _asked is None:
    sys.stderr.write(f"amazons: the forkserver was started without {PRELOAD_VARIABLE} in its "
                     "environment and preloads nothing; its children import their modules "
                     "themselves\n")
    sys.stderr.flush()
else:
    preload([name for name in _asked.split(",") if name], sys.stderr)
