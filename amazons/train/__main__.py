"""`python -m amazons.train`: the main job (`amazons.train.run.main`).

The forkserver that forks the job's processes (the inference servers, the actors, the arena's
workers) starts first, so that it imports their modules (the search kernels; torch and the
network evaluators, which every network server needs) on another core while this process
imports its own, and the first of them start at once (`amazons._processes.start_forkserver`).
"""

import sys

from amazons._processes import NETWORK_PRELOAD, start_forkserver


def _main() -> int:
    if not {"-h", "--help"} & set(sys.argv[1:]):
        start_forkserver(NETWORK_PRELOAD)
    from amazons.train.run import main

    return main()


raise SystemExit(_main())
