"""Process entry points and an echo evaluator for the inference-server tests.

Lives in its own module so spawned processes can import it. `EchoEvaluator` is a deterministic
stand-in for the network whose every output encodes its input (the position and the move), so a
row delivered to the wrong actor or in the wrong order is detected exactly.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from amazons import engine
from amazons.serving.server import ClientHandle, InferenceClient, InferenceError


def echo_outputs(
    positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Priors encode (position, move); values encode the position. Exact in float32."""
    counts = np.diff(move_offsets)
    row_of_move = np.repeat(np.arange(positions.shape[0]), counts)
    position_code = ((positions[:, 0] ^ (positions[:, 1] >> np.uint64(3)) ^ positions[:, 2])
                     % np.uint64(97))
    move_code = moves[:, 0] * 4096 + moves[:, 1] * 64 + moves[:, 2]
    priors = (move_code + 262144 * position_code[row_of_move].astype(np.int64)).astype(np.float32)
    values = (position_code.astype(np.float32) / 97.0).astype(np.float32)
    return priors, values


class EchoEvaluator:
    """Evaluator whose outputs encode its inputs (see `echo_outputs`); optional delay per call."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def evaluate(self, positions, moves, move_offsets):
        if self.delay_s:
            time.sleep(self.delay_s)
        return echo_outputs(positions, moves, move_offsets)


def make_echo_evaluator(delay_s: float = 0.0) -> EchoEvaluator:
    """Picklable factory for the server process."""
    return EchoEvaluator(delay_s)


class VersionedEchoEvaluator(EchoEvaluator):
    """An echo evaluator with "weights": `load_weights(".../weights-N.pt")` adds N to every value,
    so a reply whose rows came from two different weights is detected exactly."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def load_weights(self, path: str) -> None:
        self.version = int(Path(path).stem.rsplit("-", 1)[1])

    def evaluate(self, positions, moves, move_offsets):
        priors, values = echo_outputs(positions, moves, move_offsets)
        return priors, values + np.float32(self.version)


class SlowFlatWeightsEchoEvaluator(EchoEvaluator):
    """An echo evaluator whose flat "weights" (`load_flat_weights`, from shared memory) add their
    first float to every value; each load takes `load_s` seconds, long enough for a test to see
    the server busy loading."""

    def __init__(self, load_s: float = 0.5) -> None:
        super().__init__()
        self.load_s = load_s
        self.offset = np.float32(0.0)

    def load_flat_weights(self, flat: np.ndarray) -> None:
        time.sleep(self.load_s)
        self.offset = np.float32(flat[0])

    def evaluate(self, positions, moves, move_offsets):
        priors, values = echo_outputs(positions, moves, move_offsets)
        return priors, values + self.offset


def random_leaves(rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` canonical positions reached by short random games from the start."""
    positions = np.repeat(engine.start_position()[None], count, axis=0)
    for _ in range(int(rng.integers(0, 12))):
        moves, offsets = engine.legal_moves(positions)
        counts = np.diff(offsets)
        alive = counts > 0
        if not alive.all():
            break
        picks = offsets[:-1] + rng.integers(0, counts)
        positions = engine.apply_moves(positions, np.ascontiguousarray(moves[picks]))
    return positions


def echo_actor(handle: ClientHandle, requests: int, seed: int, results) -> None:
    """Send `requests` random batches; report (client_id, mismatches, rows) on `results`."""
    client = InferenceClient(handle)
    rng = np.random.default_rng(seed)
    mismatches, rows = 0, 0
    try:
        for _ in range(requests):
            positions = random_leaves(rng, int(rng.integers(1, 40)))
            moves, offsets = engine.legal_moves(positions)
            priors, values = client.evaluate(positions, moves, offsets)
            expected_priors, expected_values = echo_outputs(positions, moves, offsets)
            mismatches += int((priors != expected_priors).sum() + (values != expected_values).sum())
            rows += positions.shape[0]
    except InferenceError as error:
        results.put((handle.client_id, "error", str(error)))
        return
    client.close()
    results.put((handle.client_id, mismatches, rows))


def looping_actor(handle: ClientHandle, results) -> None:
    """Evaluate forever; report the InferenceError that ends it."""
    client = InferenceClient(handle)
    positions = engine.start_position()[None]
    moves, offsets = engine.legal_moves(positions)
    try:
        while True:
            client.evaluate(positions, moves, offsets)
    except InferenceError as error:
        results.put((handle.client_id, "error", str(error)))


def amazons_modules() -> list[str]:
    """The package's modules this process has imported."""
    return sorted(name for name in sys.modules if name == "amazons" or name.startswith("amazons."))


def modules_actor(handle: ClientHandle, results) -> None:
    """An actor process as self-play starts one (its entry point's module imported): report the
    package's modules it holds, after one round trip."""
    import amazons.train.selfplay  # noqa: F401  (what `actor_main` needs)

    with InferenceClient(handle) as client:
        positions = engine.start_position()[None]
        client.evaluate(positions, *engine.legal_moves(positions))
        results.put(amazons_modules())


@dataclass(frozen=True)
class ModulesReportingFactory:
    """Builds `inner()` in the server process, then writes the package's modules it holds
    to `path`."""

    inner: Callable[[], object]
    path: str

    def __call__(self) -> object:
        evaluator = self.inner()
        Path(self.path).write_text(json.dumps(amazons_modules()))
        return evaluator


def uneven_actor(handle: ClientHandle, requests: int, seed: int, max_rows: int, pause_s: float,
                 results) -> None:
    """Send `requests` batches of 1 to `max_rows` random leaves, sleeping up to `pause_s` before
    each; report (client_id, mismatches, rows, weights versions seen) on `results`.

    Values are checked against the echo plus the weights version the reply names (0 for an
    evaluator without weights; see `VersionedEchoEvaluator`)."""
    client = InferenceClient(handle)
    rng = np.random.default_rng(seed)
    mismatches, rows, versions = 0, 0, set()
    try:
        for _ in range(requests):
            time.sleep(float(rng.uniform(0, pause_s)))
            positions = random_leaves(rng, int(rng.integers(1, max_rows + 1)))
            moves, offsets = engine.legal_moves(positions)
            priors, values = client.evaluate(positions, moves, offsets)
            expected_priors, expected_values = echo_outputs(positions, moves, offsets)
            expected_values = expected_values + np.float32(max(client.weights_version, 0))
            mismatches += int((priors != expected_priors).sum() + (values != expected_values).sum())
            rows += positions.shape[0]
            versions.add(client.weights_version)
    except InferenceError as error:
        results.put((handle.client_id, "error", str(error)))
        return
    client.close()
    results.put((handle.client_id, mismatches, rows, sorted(versions)))


class VersionedUniformEvaluator:
    """Uniform priors and value 0, with "weights" whose version `load_weights(".../weights-N.pt")`
    records (for self-play through a real server that receives published weights)."""

    def __init__(self) -> None:
        self.version = 0

    def load_weights(self, path: str) -> None:
        self.version = int(Path(path).stem.rsplit("-", 1)[1])

    def evaluate(self, positions, moves, move_offsets):
        counts = np.diff(move_offsets)
        priors = np.repeat(1.0 / np.maximum(counts, 1), counts).astype(np.float32)
        return priors, np.zeros(positions.shape[0], np.float32)
