"""Shared fixtures and hypothesis strategies for the tests.

Random games come from the pure-Python oracle (`tests/oracle.py`), never from the engine, so a
rules bug in the engine cannot shape the games that test it. A game is drawn from a seed: the
same seed always gives the same game, and hypothesis shrinks towards small seeds and short games.

The session fails if it leaves anything in `/dev/shm` that it owns: shared-memory segments
named after this process (`amazons_PID_...`) or named semaphores of multiprocessing's queues and
locks created by this process or the processes it starts through multiprocessing (their names
carry this session's prefix, `sem.mp-amazons-test-PID-...`). Processes started otherwise (a
`python -m amazons.train` subprocess, Ray's workers) are checked by their own tests.

The suite's safety net is the plugin `tests/harness.py` (loaded below): every test's ceiling (a
hung test fails with its stack), short reports of failed comparisons of large values, and the
session-end check that nothing the session started is still running.

Hypothesis profiles: `ci` (chosen when the `CI` environment variable is set) runs more examples;
`dev` (the default) keeps the whole engine test set well under a minute on a laptop. Both
switch the per-example deadline off: the oracle is slow on purpose and timings vary.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Python's bytecode caches on, whatever the environment says (PYTHONDONTWRITEBYTECODE is set on
# some machines of this kind): each pytest process (the xdist workers, the serial part) and every
# `python -m amazons...` subprocess that a test starts then compiles the package and the
# assertion-rewritten test modules once, instead of each time (collection: about 15 s to 5 s).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle  # noqa: E402  (needs the path above when tests/ is imported as a package)

pytest_plugins = ("harness", "pytester")

from amazons.core.processes import process_context  # noqa: E402
from amazons.serving.server import segment_prefix  # noqa: E402
from amazons.train.cli import JOB_PRELOAD  # noqa: E402

# Most of the suite's inference servers run a network: the forkserver of each pytest process
# (started by its first test that starts a process, whatever that test's servers are) imports
# what a main job's does: the actors' modules, the search kernels loaded, torch and the network
# evaluators.
process_context(JOB_PRELOAD)

# Multiprocessing names its semaphores `<semprefix>-<random>` and copies the prefix into every
# process it starts (spawn and forkserver alike), so this session's semaphores are recognizable.
SEMAPHORE_PREFIX = f"mp-amazons-test-{os.getpid()}"
multiprocessing.current_process()._config["semprefix"] = f"/{SEMAPHORE_PREFIX}"
SHM = Path("/dev/shm")


def owned_shm_entries() -> set[str]:
    """The `/dev/shm` entries this session owns (segments of this process, its semaphores)."""
    owned = (segment_prefix(os.getpid()), f"sem.{SEMAPHORE_PREFIX}-")
    return ({path.name for path in SHM.iterdir() if path.name.startswith(owned)}
            if SHM.is_dir() else set())


@pytest.fixture(scope="session", autouse=True)
def nothing_left_in_dev_shm():
    """Fail the session if it leaves segments or semaphores of its own in /dev/shm."""
    before = owned_shm_entries()
    yield
    gc.collect()  # queues and locks of finished tests that only garbage still holds
    left = sorted(owned_shm_entries() - before)
    assert not left, f"the test session left these in /dev/shm: {left}"

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Seeds of the fixed sample of games that the batch tests sweep (every ply of each).
SAMPLE_GAME_SEEDS = tuple(range(12))

game_seeds = st.integers(min_value=0, max_value=2**32 - 1)


@functools.lru_cache(maxsize=512)
def oracle_game(seed: int) -> tuple:
    """A complete uniformly random game (real-frame oracle moves) for `seed`, cached."""
    return tuple(oracle.random_game(seed))


@functools.lru_cache(maxsize=512)
def oracle_line(seed: int) -> tuple:
    """The positions along `oracle_game(seed)`, the start and the final position included."""
    return tuple(oracle.play_line(oracle_game(seed)))


@st.composite
def random_games(draw, min_plies: int = 0) -> list:
    """A prefix of a random legal game: `(seed, moves)` with real-frame oracle moves.

    The prefix length is drawn from 0 up to the whole game, so games that end (the side to move
    has no move) are produced too.
    """
    seed = draw(game_seeds)
    moves = oracle_game(seed)
    plies = draw(st.integers(min_value=min(min_plies, len(moves)), max_value=len(moves)))
    return seed, list(moves[:plies])


@st.composite
def game_positions(draw, min_ply: int = 0) -> oracle.Position:
    """An oracle `Position` at some ply of a random game (final positions included)."""
    seed = draw(game_seeds)
    line = oracle_line(seed)
    return line[draw(st.integers(min_value=min(min_ply, len(line) - 1), max_value=len(line) - 1))]


def sample_positions(step: int = 1) -> list[oracle.Position]:
    """Positions at every `step`-th ply of the fixed sample games, each game's final one
    included."""
    positions = []
    for seed in SAMPLE_GAME_SEEDS:
        line = oracle_line(seed)
        positions.extend(line[::step])
        if (len(line) - 1) % step:
            positions.append(line[-1])
    return positions


@pytest.fixture(scope="session")
def positions_sample() -> list[oracle.Position]:
    """About 300 oracle positions from the start to the end of fixed random games."""
    return sample_positions(step=2)


@pytest.fixture(scope="session")
def canonical_sample(positions_sample) -> np.ndarray:
    """`positions_sample` as canonical `(B, 3) uint64` positions, built by the oracle."""
    return np.stack([oracle.triple_array(*position.canonical()) for position in positions_sample])


@pytest.fixture(scope="session")
def oracle_canonical_moves(positions_sample) -> list[set]:
    """The oracle's canonical legal moves of each of `positions_sample`, as index triples."""
    return [oracle.move_index_set(position.canonical_legal_moves())
            for position in positions_sample]


@pytest.fixture(scope="session")
def default_bot(tmp_path_factory, request) -> Path:
    """The shipped model's C++ bot, built as Botzone builds it (C++11, -O2, warnings as errors),
    once per test session for every test file of the C++ bot: pytest-xdist's workers share it
    through their session's temporary folder. An identical compilation (same source, command and
    compiler) of an earlier session is reused from pytest's cache (`.pytest_cache`; not with
    `-p no:cacheprovider`)."""
    from cpp_bot import export_default_bot  # imported here: the other tests never need it

    cache = request.config.cache.mkdir("botzone-cpp") if hasattr(request.config, "cache") else None
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return export_default_bot(tmp_path_factory.mktemp("botzone-cpp"), cache)
    # A worker's base folder is <session folder>/popen-gwN: its parent is this session's alone.
    return export_default_bot(tmp_path_factory.getbasetemp().parent / "botzone-cpp", cache)


# The files whose tests take longest in all (`--durations`, `make test`), longest first.
# pytest-xdist with `--dist loadfile --no-loadscope-reorder` (Makefile) hands whole files to the
# workers in collection order, so a long file collected last would run alone at the end while the
# other worker idles: these go first. (Without `--no-loadscope-reorder` xdist orders the files by
# their number of tests, and the learning test's file of two tests, the longest, ran last.)
LONG_FILES = ("test_train.py", "test_distributed.py", "test_benchmarks.py",
              "test_replay_selfplay.py", "test_ablation.py", "test_cpp_parity.py",
              "test_evaluation.py", "test_botzone_player.py", "test_botzone.py", "test_web_api.py",
              "test_layering.py", "test_learn.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the files of `LONG_FILES` first, in its order; every file keeps its tests' order."""
    rank = {name: index for index, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
