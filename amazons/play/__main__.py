"""`python -m amazons.play`: terminal play's command line (`amazons.play.main`)."""

import os
import sys

from amazons.play import main

try:
    exit_status = main()
except BrokenPipeError:  # e.g. a replay piped into `head`: stop quietly
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    exit_status = 1
raise SystemExit(exit_status)
