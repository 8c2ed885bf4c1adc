"""Clean up after a node actor once the actor is gone, however it went.

Run as a script by `amazons.distributed.node.SelfPlayNode` (never imported), with its standard
input a pipe from the actor: `python _janitor.py`. It detaches at once (its first process exits,
the second is adopted by init), so that Ray, which kills a worker's children and process group
when the worker ends, does not take it along. It then reads lines until the pipe closes: when
the actor closes it after a clean stop, or when the actor process dies (`ray.shutdown()`, a crash,
SIGKILL). Each line names a shared-memory segment or a named semaphore (`sem.mp-...`) (a bare name:
removed from /dev/shm, where Linux keeps POSIX shared memory and named semaphores) or the actor's
scratch folder (an absolute path whose last part starts with `amazons-node`: removed with everything
in it). Whatever the actor removed itself is simply gone already.
"""

import os
import re
import shutil
import sys

_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def main() -> None:
    if os.fork():
        os._exit(0)
    lines = [line.strip() for line in sys.stdin]
    for line in lines:
        if _SEGMENT.fullmatch(line):
            try:
                os.unlink(os.path.join("/dev/shm", line))
            except OSError:
                pass
        elif os.path.isabs(line) and os.path.basename(line).startswith("amazons-node"):
            shutil.rmtree(line, ignore_errors=True)


if __name__ == "__main__":
    main()
