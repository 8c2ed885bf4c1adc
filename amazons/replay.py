"""Self-play data: finished games as samples, compressed chunks on disk, and the replay window.

A sample is one position of a finished game: the compact canonical position `(3,) uint64`, the
sparse visit distribution of the search at that position (canonical moves with their raw visit
counts) and the outcome `z` in {-1, +1} for the side to move there. Labels are never decoded by the
engine: they are square triples from the search, in the same canonical frame as the position.
A sample's `policy_weight` says how much its policy target counts in training: 1 for a full
search, 0 for a playout cap's fast search, whose label is empty (its value target still counts).

On disk, games are stored in chunks `replay/chunk-NNNNNNNN.npz` (numpy's compressed archive, no
pickles), each written to a temporary file and renamed, so a crash loses at most the games not yet
flushed. A chunk that cannot be read or whose arrays do not fit together raises
`ReplayChunkError` naming the file; `ReplayBuffer` skips such chunks and reports them. Chunks
carry `format_version` (CHUNK_FORMAT_VERSION); version 1 chunks (no version array, written before
`policy_weight` existed) load with every policy weight 1.

The buffer keeps a sliding window of the newest positions (sized in positions) and samples
uniformly from it; `amazons.learn.augment_batch` then gives each sample a random one of the 8
symmetries.

Imports numpy only.
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from amazons._atomic import atomic_write

CHUNK_PATTERN = re.compile(r"chunk-(\d{8})\.npz$")
CHUNK_FORMAT_VERSION = 2  # 1: no policy_weight (every sample a full search); 2: policy_weight
_CHUNK_KEYS_V1 = (
    "positions",
    "label_moves",
    "label_visits",
    "label_policy",
    "label_offsets",
    "z",
    "played_moves",
    "game_offsets",
)
_CHUNK_KEYS = _CHUNK_KEYS_V1 + ("policy_weight",)


class ReplayChunkError(ValueError):
    """A replay chunk is unreadable or inconsistent; the message names the file and the fault."""


@dataclass
class GameSamples:
    """The samples of one or more finished games, concatenated (CSR layout for the labels).

    Attributes:
        positions: `(T, 3) uint64` canonical positions, in play order.
        label_moves: `(N, 3) int32` canonical moves the search visited.
        label_visits: `(N,) int32` raw visit counts of those moves.
        label_policy: `(N,) float32` the policy target over those moves (sums to 1 per position):
            visit shares, or the improved policy of `amazons.mcts.improved_policy`.
        label_offsets: `(T + 1,) int64`; position t's label is rows `label_offsets[t]:label_offsets[t+1]`
            (empty only where its policy weight is 0).
        z: `(T,) int8` outcome for the side to move at each position (+1 win, -1 loss).
        played_moves: `(T, 3) int32` the moves actually played, real (Botzone) frame.
        game_offsets: `(G + 1,) int64`; game g is positions `game_offsets[g]:game_offsets[g+1]`.
        policy_weight: `(T,) float32` in [0, 1], how much each position's policy target counts
            (0: a playout cap's fast search, no target); None means 1 everywhere.
    """

    positions: np.ndarray
    label_moves: np.ndarray
    label_visits: np.ndarray
    label_policy: np.ndarray
    label_offsets: np.ndarray
    z: np.ndarray
    played_moves: np.ndarray
    game_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    policy_weight: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.policy_weight is None and isinstance(self.positions, np.ndarray):
            self.policy_weight = np.ones(self.positions.shape[0], np.float32)

    @property
    def num_positions(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_games(self) -> int:
        return int(self.game_offsets.shape[0] - 1)

    def validate(self, source: str = "samples") -> None:
        """Check dtypes, shapes and contents.

        Raises:
            ReplayChunkError: naming `source` and the first inconsistency found.
        """
        expected = {
            "positions": (np.uint64, 2),
            "label_moves": (np.int32, 2),
            "label_visits": (np.int32, 1),
            "label_policy": (np.float32, 1),
            "label_offsets": (np.int64, 1),
            "z": (np.int8, 1),
            "played_moves": (np.int32, 2),
            "game_offsets": (np.int64, 1),
            "policy_weight": (np.float32, 1),
        }
        for name, (dtype, ndim) in expected.items():
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim != ndim:
                raise ReplayChunkError(f"{source}: {name} must be a {ndim}-d {np.dtype(dtype).name} array")
        count = self.num_positions
        problems = []
        if self.positions.shape[1:] != (3,) or self.played_moves.shape != (count, 3):
            problems.append("positions and played_moves must be (T, 3)")
        if self.label_moves.shape[1:] != (3,) or not (
            self.label_visits.shape[0] == self.label_policy.shape[0] == self.label_moves.shape[0]
        ):
            problems.append("label_moves (N, 3), label_visits (N,) and label_policy (N,) disagree")
        if self.label_offsets.shape[0] != count + 1 or self.z.shape[0] != count or (
                self.policy_weight.shape[0] != count):
            problems.append("label_offsets must be (T + 1,), z and policy_weight (T,)")
        elif self.label_offsets[0] != 0 or self.label_offsets[-1] != self.label_moves.shape[0] or (
            np.diff(self.label_offsets) < 0
        ).any():
            problems.append("label_offsets must rise from 0 to N")
        elif not (np.isfinite(self.policy_weight).all() and (self.policy_weight >= 0).all()
                  and (self.policy_weight <= 1).all()):
            problems.append("policy_weight holds values outside [0, 1]")
        elif ((np.diff(self.label_offsets) == 0) & (self.policy_weight > 0)).any():
            problems.append("a position with a policy weight has an empty label")
        if self.game_offsets.shape[0] < 1 or self.game_offsets[0] != 0 or self.game_offsets[-1] != count or (
            np.diff(self.game_offsets) <= 0
        ).any():
            problems.append("game_offsets must rise strictly from 0 to T")
        if self.label_moves.size and (self.label_moves.min() < 0 or self.label_moves.max() > 63):
            problems.append("label_moves hold squares outside 0..63")
        if self.label_visits.size and self.label_visits.min() < 0:
            problems.append("label_visits hold negative counts")
        if self.label_policy.size and not (np.isfinite(self.label_policy).all() and self.label_policy.min() >= 0):
            problems.append("label_policy holds negative or non-finite probabilities")
        elif not problems and self.label_policy.size:
            counts = np.diff(self.label_offsets)
            sums = np.bincount(np.repeat(np.arange(count), counts), weights=self.label_policy, minlength=count)
            if np.abs(sums[counts > 0] - 1.0).max() > 1e-3:
                problems.append("label_policy does not sum to 1 over each position's moves")
        if not np.isin(self.z, (-1, 1)).all():
            problems.append("z holds values other than -1 and +1")
        if problems:
            raise ReplayChunkError(f"{source}: {problems[0]}")

    @staticmethod
    def concatenate(parts: list[GameSamples]) -> GameSamples:
        """One `GameSamples` holding all games of `parts`, in order."""
        if not parts:
            raise ValueError("nothing to concatenate")
        label_base = np.cumsum([0] + [part.label_moves.shape[0] for part in parts[:-1]])
        position_base = np.cumsum([0] + [part.num_positions for part in parts[:-1]])
        return GameSamples(
            positions=np.concatenate([part.positions for part in parts]),
            label_moves=np.concatenate([part.label_moves for part in parts]),
            label_visits=np.concatenate([part.label_visits for part in parts]),
            label_policy=np.concatenate([part.label_policy for part in parts]),
            label_offsets=np.concatenate(
                [np.zeros(1, dtype=np.int64)]
                + [part.label_offsets[1:] + base for part, base in zip(parts, label_base, strict=True)]
            ),
            z=np.concatenate([part.z for part in parts]),
            played_moves=np.concatenate([part.played_moves for part in parts]),
            game_offsets=np.concatenate(
                [np.zeros(1, dtype=np.int64)]
                + [part.game_offsets[1:] + base for part, base in zip(parts, position_base, strict=True)]
            ),
            policy_weight=np.concatenate([part.policy_weight for part in parts]),
        )


def save_chunk(path: str | os.PathLike, samples: GameSamples) -> None:
    """Write `samples` to `path` atomically (temporary file in the same folder, then rename)."""
    samples.validate(str(path))
    arrays = {key: getattr(samples, key) for key in _CHUNK_KEYS}
    arrays["format_version"] = np.array(CHUNK_FORMAT_VERSION, np.int64)
    atomic_write(path, lambda stream: np.savez_compressed(stream, **arrays))


def load_chunk(path: str | os.PathLike) -> GameSamples:
    """Read and validate one chunk (any format version up to CHUNK_FORMAT_VERSION).

    Raises:
        ReplayChunkError: naming the file, if it is truncated, not an archive, misses an array,
            holds inconsistent arrays or comes from a newer format version.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            version = int(archive["format_version"]) if "format_version" in archive.files else 1
            if not 1 <= version <= CHUNK_FORMAT_VERSION:
                raise ReplayChunkError(
                    f"{path}: format_version {version}; this code reads 1 to {CHUNK_FORMAT_VERSION}")
            keys = _CHUNK_KEYS_V1 if version == 1 else _CHUNK_KEYS
            missing = [key for key in keys if key not in archive.files]
            if missing:
                raise ReplayChunkError(f"{path}: missing arrays {missing}")
            arrays = {key: archive[key] for key in keys}
    except ReplayChunkError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise ReplayChunkError(f"{path}: unreadable replay chunk ({error})") from None
    samples = GameSamples(**arrays)
    samples.validate(str(path))
    return samples


# Tags the sampling generator's stream. Seeded with the bare run seed, the buffer and the learner
# would draw the same numbers in lockstep, so the symmetry a sample gets would be a function of
# where it sits in the buffer: each position would always be seen in one orientation, and the
# network would memorize positions instead of learning from the 8-fold augmentation.
SAMPLING_STREAM = 0x5A3B1E


class ReplayBuffer:
    """The newest `window_positions` samples, persisted as chunks under `directory`.

    Args:
        directory: where chunks live; existing chunks are loaded (newest first, up to the window).
            None keeps the window in memory only (a training rank's copy of a window that the
            learner persists): fill it with `add_to_window`.
        window_positions: how many of the newest positions are kept for sampling.
        seed: seed of the sampling generator. The generator is a stream of its own
            (`SAMPLING_STREAM`), so it never repeats the draws of another generator seeded
            with the same integer, such as the learner's symmetry draws.

    Attributes:
        skipped_chunks: (path, reason) of chunks that could not be loaded.
    """

    def __init__(self, directory: str | os.PathLike | None, window_positions: int, seed: int = 0) -> None:
        if window_positions < 1:
            raise ValueError(f"window_positions must be >= 1, got {window_positions}")
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.window_positions = window_positions
        self.rng = np.random.default_rng([seed, SAMPLING_STREAM])
        self.skipped_chunks: list[tuple[str, str]] = []
        self._chunks: list[GameSamples] = []
        self._next_index = 0
        self.total_games = 0
        self.total_positions = 0
        if self.directory is not None:
            self._load_existing()

    def _chunk_paths(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.iterdir():
            match = CHUNK_PATTERN.search(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def _load_existing(self) -> None:
        paths = self._chunk_paths()
        if paths:
            self._next_index = paths[-1][0] + 1
        held = 0
        loaded: list[GameSamples] = []
        for _, path in reversed(paths):
            if held >= self.window_positions:
                break
            try:
                chunk = load_chunk(path)
            except ReplayChunkError as error:
                self.skipped_chunks.append((str(path), str(error)))
                continue
            loaded.append(chunk)
            held += chunk.num_positions
        self._chunks = loaded[::-1]
        self.total_games = sum(chunk.num_games for chunk in self._chunks)
        self.total_positions = held

    def add(self, samples: GameSamples) -> Path:
        """Persist `samples` as a new chunk and add them to the window; return the chunk's path.

        Raises:
            ValueError: if the buffer has no directory (use `add_to_window`).
        """
        if self.directory is None:
            raise ValueError("this replay buffer keeps no chunks on disk (directory None): use add_to_window")
        path = self.directory / f"chunk-{self._next_index:08d}.npz"
        save_chunk(path, samples)
        self._next_index += 1
        self.add_to_window(samples)
        return path

    def add_to_window(self, samples: GameSamples) -> None:
        """Add `samples` to the sampling window without writing a chunk."""
        self._chunks.append(samples)
        self.total_games += samples.num_games
        self.total_positions += samples.num_positions
        self._evict()

    @property
    def window(self) -> tuple[GameSamples, ...]:
        """The chunks in the window, oldest first (to copy the window to another buffer)."""
        return tuple(self._chunks)

    def _evict(self) -> None:
        held = sum(chunk.num_positions for chunk in self._chunks)
        while len(self._chunks) > 1 and held - self._chunks[0].num_positions >= self.window_positions:
            held -= self._chunks.pop(0).num_positions

    def __len__(self) -> int:
        """Positions available for sampling (the window may hold a little more than its size)."""
        return sum(chunk.num_positions for chunk in self._chunks)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Draw `batch_size` samples uniformly from the window.

        Returns:
            The arrays of an `amazons.learn.SampleBatch` (which augments them with the 8
            symmetries): `positions (B, 3) uint64`, `label_moves (N, 3) int32`,
            `label_probs (N,) float32` (the stored policy target, renormalized),
            `label_offsets (B + 1,) int64`, `z (B,) float32`,
            `policy_weight (B,) float32` (0 for fast searches, whose labels are empty).

        Raises:
            ValueError: if the buffer is empty.
        """
        if not self._chunks:
            raise ValueError("the replay buffer is empty")
        sizes = np.array([chunk.num_positions for chunk in self._chunks])
        ends = np.cumsum(sizes)
        picks = self.rng.integers(0, ends[-1], size=batch_size)
        chunk_of = np.searchsorted(ends, picks, side="right")
        within = picks - (ends - sizes)[chunk_of]
        positions = np.empty((batch_size, 3), dtype=np.uint64)
        z = np.empty(batch_size, dtype=np.float32)
        policy_weight = np.empty(batch_size, dtype=np.float32)
        label_parts, policy_parts, counts = [], [], np.empty(batch_size, dtype=np.int64)
        for row, (chunk_index, index) in enumerate(zip(chunk_of.tolist(), within.tolist(), strict=True)):
            chunk = self._chunks[chunk_index]
            start, stop = chunk.label_offsets[index], chunk.label_offsets[index + 1]
            positions[row] = chunk.positions[index]
            z[row] = chunk.z[index]
            policy_weight[row] = chunk.policy_weight[index]
            label_parts.append(chunk.label_moves[start:stop])
            policy_parts.append(chunk.label_policy[start:stop])
            counts[row] = stop - start
        policy = np.concatenate(policy_parts).astype(np.float64)
        label_offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts)])
        totals = np.bincount(np.repeat(np.arange(batch_size), counts), weights=policy, minlength=batch_size)
        return {
            "positions": positions,
            "label_moves": np.concatenate(label_parts),
            "label_probs": (policy / np.repeat(totals, counts)).astype(np.float32),
            "label_offsets": label_offsets,
            "z": z,
            "policy_weight": policy_weight,
        }
