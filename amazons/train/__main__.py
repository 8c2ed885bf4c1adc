"""`python -m amazons.train`: the main job (`amazons.train.command.main`).

The command line is parsed first, with the main job's parser (`amazons.train.cli`, which imports
neither torch nor the training stack): one that does not parse exits 2 at once, with the
parser's message, and starts nothing. One that runs the local backend then starts the forkserver
that forks the job's processes (the inference servers, the actors, the arena's workers), before
this process imports the main job: the forkserver imports their modules (the search kernels;
torch and the network evaluators, which every network server needs) on another core while this
process imports its own, and the first of them start at once
(`amazons.core.processes.start_forkserver`). Another backend (`--backend ray`) starts no local
workers, and a request for help starts nothing: `main` prints the help, with the job's
description.
"""

import contextlib
import io
import sys

from amazons.core.processes import start_forkserver
from amazons.train.cli import JOB_PRELOAD, build_parser


def _main() -> int:
    messages = io.StringIO()
    try:
        with contextlib.redirect_stdout(messages), contextlib.redirect_stderr(messages):
            arguments = build_parser().parse_args(sys.argv[1:])
    except SystemExit as exit_request:
        if exit_request.code != 0:  # a usage error, reported as `main` would report it
            sys.stderr.write(messages.getvalue())
            return exit_request.code
        arguments = None  # help, which `main` prints with the job's description
    if arguments is not None and arguments.backend == "local":
        start_forkserver(JOB_PRELOAD)
    from amazons.train.command import main

    return main()


raise SystemExit(_main())
