"""The base layer: what every other layer may use, importing nothing of the package but itself.

`atomic` (files written whole or not at all), `config` (config dataclasses to and from plain
data), `processes` (the worker processes' forkserver and their end), `forkserver_preload` (what
that forkserver imports), `queue_reader` (reading a worker's results without waiting on a message
cut short) and `backends` (the network backends and the one chooser of them). Standard library
and numpy only; importing the package imports none of them.
"""

# The environment variable that carries the forkserver's preload list, comma-separated: written
# by `processes.process_context`, read in the forkserver by `forkserver_preload`, which
# `processes` hands to multiprocessing by name. One definition for both, here, below the two.
PRELOAD_VARIABLE = "AMAZONS_FORKSERVER_PRELOAD"
