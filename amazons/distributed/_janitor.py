"""Unlink a node actor's shared-memory segments once the actor is gone, however it went.

Run as a script by `amazons.distributed.node.SelfPlayNode` (never imported), with its standard
input a pipe from the actor: `python _janitor.py`. It detaches at once (its first process exits,
the second is adopted by init), so that Ray, which kills a worker's children and process group
when the worker ends, does not take it along. It then reads segment names, one per line, until
the pipe closes: when the actor closes it after a clean stop, or when the actor process dies
(`ray.shutdown()`, a crash, SIGKILL). It then removes every named segment that still exists
under /dev/shm (Linux's POSIX shared memory) and exits. Segments the actor unlinked itself are
simply gone already.
"""

import os
import re
import sys

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def main() -> None:
    if os.fork():
        os._exit(0)
    names = [line.strip() for line in sys.stdin]
    for name in names:
        if _NAME.fullmatch(name):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


if __name__ == "__main__":
    main()
