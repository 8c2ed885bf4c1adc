"""Self-play data: finished games as samples, compressed chunks on disk, and the replay window.

A sample is one position of a finished game: the compact canonical position `(3 * W,) uint64`, the
policy target of the search at that position (canonical moves with their target probabilities, and
the search's raw visit counts where they were kept) and the outcome `z` in {-1, +1} for the side to
move there. Labels are never decoded by the engine: they are square triples from the search, in the
same canonical frame as the position. A sample's `policy_weight` says how much its policy target
counts in training: 1 for a full search, 0 for a value-only sample, whose label is empty (its value
target still counts): self-play records only full searches (a playout cap's fast searches are
played, not recorded), and keeps the last position of a game that had none as such a sample. A
sample's `sample_weight` says how often the window draws it relative to the others (1 for every
sample unless self-play weights them by policy surprise, `amazons.train.selfplay.surprise_weights`:
a game's surprising positions are drawn more often, its unsurprising ones less, the game's total
unchanged).

The ownership target (an auxiliary target after KataGo's) is stored sparsely: one map per game of
each square's owner at the game's final (or adjudicated) position, in the real frame with Black
+1, a mask of the squares that count (every square but the final arrows), and per sample the side
to move as a sign (+1 Black, -1 White, 0 no target). `GameSamples.ownership_targets` turns them
into each sample's target in its own canonical frame (+1 the side to move's square).

On disk, games are stored in chunks `replay/chunk-NNNNNNNN.npz` (numpy's compressed archive, no
pickles), each written to a temporary file and renamed (`amazons.core.atomic`). A `ReplayBuffer`
with a directory writes them from a thread of its own (`ChunkWriter`), which gathers the games
added into one chunk until it holds `chunk_games` games or its oldest game waited `chunk_seconds`
seconds: a crash loses at most that unwritten batch, `flush` and `close` write it. A chunk that
cannot be read or whose arrays do not fit together raises `ReplayChunkError` naming the file;
`ReplayBuffer` skips such chunks and reports them. Chunks carry `format_version`
(CHUNK_FORMAT_VERSION); version 1 chunks (no version array, written before `policy_weight`
existed) load with every policy weight 1, version 1 and 2 chunks (before the ownership arrays)
load with no ownership target, and version 4 chunks carry `first_game`, the serial number of their
first game in the run (`ReplayBuffer.games_since`), and store labels as the window does (below);
they load with int32 squares, float32 probabilities and no visit counts. Version 5 adds
`sample_weight`; older chunks load with every sample weight 1. Version 6 records the board the games
were played on (`board`: `amazons.boards.BoardSpec.to_dict()` as JSON text); older chunks are
botzone8's, so botzone8's chunks are still written as version 5, the same files as before, which
code from before board sizes reads too.

Boards: a `GameSamples` holds the games of one board (`GameSamples.board`, botzone8 unless
given), whose size sets its shapes: positions `(T, 3 * W)` (W = 1 up to 8x8, 2 on 9x9 and 10x10),
squares below N*N, ownership maps `(G, N*N)`. A `ReplayBuffer` holds one board: a chunk or games
of another board are refused by name (`ReplayBoardError`). Training on several boards at once
would need a window per board; nothing asks for it.

The buffer keeps a sliding window of the newest positions (sized in positions) in flat arrays, one
row per position and one per label entry, and samples from it with vectorized gathers (the labels
through their CSR offsets: no Python step per sample), uniformly, or in proportion to
`sample_weight` once a sample of another weight has entered the window;
`amazons.neural.learner.augment_batch` then gives each sample a random one of the 8 symmetries. The
window stores labels compactly: a label entry is its three squares as uint8 and its probability as
float16 (5 bytes), without visit counts, which no training target uses
(`ReplayBuffer.bytes_per_position` measures it); `sample` hands the learner int32 squares and
float32 probabilities renormalized over each position, so the window changes the targets by float16
rounding only (a relative 2**-11 at most; 3e-8 absolute below float16's normal range, 6e-5).

Imports numpy, the standard library and `amazons.boards`.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from amazons.boards import BoardSpec, NotationError, board_spec
from amazons.core.atomic import atomic_write

CHUNK_PATTERN = re.compile(r"chunk-(\d{8})\.npz$")
# 1: no policy_weight (every sample a full search); 2: policy_weight; 3: the ownership target;
# 4: first_game; labels as uint8 squares and float16 probabilities, no visit counts;
# 5: sample_weight; 6: board (the BoardSpec's dict as JSON text)
CHUNK_FORMAT_VERSION = 6
BOTZONE8_CHUNK_VERSION = 5  # the version botzone8's chunks are written in (no board array)
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
_CHUNK_KEYS_V2 = _CHUNK_KEYS_V1 + ("policy_weight",)
_CHUNK_KEYS_V3 = _CHUNK_KEYS_V2 + ("ownership", "ownership_mask", "ownership_sign")
# version 4: no visit counts
_CHUNK_KEYS_V4 = tuple(key for key in _CHUNK_KEYS_V3 if key != "label_visits")
_CHUNK_KEYS = _CHUNK_KEYS_V4 + ("sample_weight",)
NUM_SQUARES = 64  # the squares of the default board, botzone8 (`GameSamples.num_squares`)
# The window's label entry: three uint8 squares and a float16 probability.
LABEL_ENTRY_BYTES = 3 * np.dtype(np.uint8).itemsize + np.dtype(np.float16).itemsize


class ReplayChunkError(ValueError):
    """A replay chunk is unreadable or inconsistent; the message names the file and the fault."""


class ReplayBoardError(ValueError):
    """Games or a chunk of another board than the replay window's; the message names both
    boards (and the chunk)."""


def check_same_board(board: BoardSpec, expected: BoardSpec, what: str) -> None:
    """Refuse `board` unless it is `expected` (the same size, start squares and first side).

    Raises:
        ReplayBoardError: naming `what` and both boards.
    """
    if not board.same_start(expected):
        raise ReplayBoardError(f"{what}: played on the {board.label()} board "
                               f"({board.size}x{board.size}), the replay holds the "
                               f"{expected.label()} board ({expected.size}x{expected.size}); "
                               "a replay window trains on one board")


@dataclass
class GameSamples:
    """The samples of one or more finished games, concatenated (CSR layout for the labels).

    Attributes:
        positions: `(T, 3 * W) uint64` canonical positions, in play order (W words per
            bitboard of `board`: 1 up to 8x8, 2 on 9x9 and 10x10).
        label_moves: `(N, 3) int32` canonical moves of the target.
        label_visits: `(N,) int32` the search's raw visit counts of those moves, or None where
            they were not kept (the replay window keeps none: no training target uses them).
        label_policy: `(N,) float32` the policy target over those moves (sums to 1 per position):
            visit shares, or the improved policy of `amazons.search_targets.improved_policy`.
        label_offsets: `(T + 1,) int64`; position t's label is rows
            `label_offsets[t]:label_offsets[t+1]` (empty only where its policy weight is 0).
        z: `(T,) int8` outcome for the side to move at each position (+1 win, -1 loss).
        played_moves: `(T, 3) int32` the moves actually played, real (Botzone) frame.
        game_offsets: `(G + 1,) int64`; game g is positions `game_offsets[g]:game_offsets[g+1]`.
        policy_weight: `(T,) float32` in [0, 1], how much each position's policy target counts
            (0: a value-only sample, no policy target); None means 1 everywhere.
        ownership: `(G, N*N) int8`, each game's owner of every square at its final (or
            adjudicated) position, real frame: +1 Black's, -1 White's, 0 neutral or an arrow
            (`amazons.train.selfplay.final_ownership`); None means 0 everywhere.
        ownership_mask: `(G, N*N) bool`, the squares the ownership target counts (all but the
            final arrows); all False for a game without a target (None: every game).
        ownership_sign: `(T,) int8`, the side to move at each position, +1 Black, -1 White, 0 for
            a position without an ownership target (None: every position).
        sample_weight: `(T,) float32` >= 0, how often the replay window draws each position
            relative to a position of weight 1 (policy surprise weighting,
            `amazons.train.selfplay.surprise_weights`); None means 1 everywhere.
        board: the board every game was played on (`amazons.boards.BoardSpec`; botzone8 when
            not given); its size sets the shapes above.
    """

    positions: np.ndarray
    label_moves: np.ndarray
    label_visits: np.ndarray | None
    label_policy: np.ndarray
    label_offsets: np.ndarray
    z: np.ndarray
    played_moves: np.ndarray
    game_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    policy_weight: np.ndarray | None = None
    ownership: np.ndarray | None = None
    ownership_mask: np.ndarray | None = None
    ownership_sign: np.ndarray | None = None
    sample_weight: np.ndarray | None = None
    board: BoardSpec = field(default_factory=board_spec)

    def __post_init__(self) -> None:
        squares = self.board.num_squares
        if self.policy_weight is None and isinstance(self.positions, np.ndarray):
            self.policy_weight = np.ones(self.positions.shape[0], np.float32)
        if self.sample_weight is None and isinstance(self.positions, np.ndarray):
            self.sample_weight = np.ones(self.positions.shape[0], np.float32)
        if isinstance(self.game_offsets, np.ndarray) and isinstance(self.positions, np.ndarray):
            games = max(self.game_offsets.shape[0] - 1, 0)
            if self.ownership is None:
                self.ownership = np.zeros((games, squares), np.int8)
            if self.ownership_mask is None:
                self.ownership_mask = np.zeros((games, squares), np.bool_)
            if self.ownership_sign is None:
                self.ownership_sign = np.zeros(self.positions.shape[0], np.int8)

    @property
    def num_positions(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_games(self) -> int:
        return int(self.game_offsets.shape[0] - 1)

    @property
    def num_squares(self) -> int:
        """N*N, the squares of the games' board."""
        return self.board.num_squares

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
            "ownership": (np.int8, 2),
            "ownership_mask": (np.bool_, 2),
            "ownership_sign": (np.int8, 1),
            "sample_weight": (np.float32, 1),
        }
        if self.label_visits is None:
            del expected["label_visits"]
        for name, (dtype, ndim) in expected.items():
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim != ndim:
                raise ReplayChunkError(
                    f"{source}: {name} must be a {ndim}-d {np.dtype(dtype).name} array")
        count = self.num_positions
        problems = []
        width, squares = 3 * self.board.words, self.num_squares
        if self.positions.shape[1:] != (width,) or self.played_moves.shape != (count, 3):
            problems.append(f"positions must be (T, {width}) on the {self.board.label()} board "
                            f"and played_moves (T, 3)")
        visits = self.label_policy if self.label_visits is None else self.label_visits
        if self.label_moves.shape[1:] != (3,) or not (
            visits.shape[0] == self.label_policy.shape[0] == self.label_moves.shape[0]
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
        if self.game_offsets.shape[0] < 1 or self.game_offsets[0] != 0 or (
                self.game_offsets[-1] != count) or (np.diff(self.game_offsets) <= 0).any():
            problems.append("game_offsets must rise strictly from 0 to T")
        if self.label_moves.size and (self.label_moves.min() < 0
                                      or self.label_moves.max() >= squares):
            problems.append(f"label_moves hold squares outside 0..{squares - 1}")
        if count and (self.played_moves.min() < 0 or self.played_moves.max() >= squares):
            problems.append(f"played_moves hold squares outside 0..{squares - 1}")
        if self.label_visits is not None and self.label_visits.size and self.label_visits.min() < 0:
            problems.append("label_visits hold negative counts")
        if self.label_policy.size and not (np.isfinite(self.label_policy).all()
                                           and self.label_policy.min() >= 0):
            problems.append("label_policy holds negative or non-finite probabilities")
        elif not problems and self.label_policy.size:
            counts = np.diff(self.label_offsets)
            sums = np.bincount(np.repeat(np.arange(count), counts), weights=self.label_policy,
                               minlength=count)
            if np.abs(sums[counts > 0] - 1.0).max() > 1e-3:
                problems.append("label_policy does not sum to 1 over each position's moves")
        if not np.isin(self.z, (-1, 1)).all():
            problems.append("z holds values other than -1 and +1")
        if self.sample_weight.shape != (count,):
            problems.append("sample_weight must be (T,)")
        elif not (np.isfinite(self.sample_weight).all() and (self.sample_weight >= 0).all()):
            problems.append("sample_weight holds negative or non-finite values")
        games = self.num_games
        if self.ownership.shape != (games, squares) \
                or self.ownership_mask.shape != (games, squares) \
                or self.ownership_sign.shape != (count,):
            problems.append(f"ownership and ownership_mask must be (G, {squares}), "
                            f"ownership_sign (T,)")
        elif not (np.isin(self.ownership, (-1, 0, 1)).all()
                  and np.isin(self.ownership_sign, (-1, 0, 1)).all()):
            problems.append("ownership and ownership_sign hold values other than -1, 0 and +1")
        if problems:
            raise ReplayChunkError(f"{source}: {problems[0]}")

    @staticmethod
    def concatenate(parts: list[GameSamples]) -> GameSamples:
        """One `GameSamples` holding all games of `parts`, in order (with visit counts only if
        every part has them).

        Raises:
            ReplayBoardError: the parts were played on different boards.
        """
        if not parts:
            raise ValueError("nothing to concatenate")
        board = parts[0].board
        for part in parts[1:]:
            check_same_board(part.board, board, "games to concatenate")
        with_visits = all(part.label_visits is not None for part in parts)
        label_base = np.cumsum([0] + [part.label_moves.shape[0] for part in parts[:-1]])
        position_base = np.cumsum([0] + [part.num_positions for part in parts[:-1]])
        return GameSamples(
            positions=np.concatenate([part.positions for part in parts]),
            label_moves=np.concatenate([part.label_moves for part in parts]),
            label_visits=(np.concatenate([part.label_visits for part in parts]) if with_visits
                          else None),
            label_policy=np.concatenate([part.label_policy for part in parts]),
            label_offsets=np.concatenate(
                [np.zeros(1, dtype=np.int64)]
                + [part.label_offsets[1:] + base
                   for part, base in zip(parts, label_base, strict=True)]
            ),
            z=np.concatenate([part.z for part in parts]),
            played_moves=np.concatenate([part.played_moves for part in parts]),
            game_offsets=np.concatenate(
                [np.zeros(1, dtype=np.int64)]
                + [part.game_offsets[1:] + base
                   for part, base in zip(parts, position_base, strict=True)]
            ),
            policy_weight=np.concatenate([part.policy_weight for part in parts]),
            ownership=np.concatenate([part.ownership for part in parts]),
            ownership_mask=np.concatenate([part.ownership_mask for part in parts]),
            ownership_sign=np.concatenate([part.ownership_sign for part in parts]),
            sample_weight=np.concatenate([part.sample_weight for part in parts]),
            board=board,
        )

    def ownership_targets(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ownership targets of the positions at `indices`, each in its own canonical frame.

        The canonical frame is the side to move's view (White's is the real board turned by 180
        degrees: canonical square s is real square N*N - 1 - s), and +1 marks the side to move's
        squares.

        Args:
            indices: `(K,)` integer position indices in 0..T-1.

        Returns:
            `(ownership (K, N*N) int8, mask (K, N*N) bool)`: the target and the squares it counts;
            a position without a target (sign 0) gets zeros and an all-False mask.
        """
        indices = np.asarray(indices, dtype=np.int64)
        games = np.searchsorted(self.game_offsets, indices, side="right") - 1
        sign = self.ownership_sign[indices]
        count = self.num_squares
        squares = np.where((sign < 0)[:, None], count - 1 - np.arange(count), np.arange(count))
        rows = games[:, None]
        ownership = (self.ownership[rows, squares] * sign[:, None]).astype(np.int8)
        mask = self.ownership_mask[rows, squares] & (sign != 0)[:, None]
        return ownership, mask


def save_chunk(path: str | os.PathLike, samples: GameSamples,
               first_game: int | None = None) -> None:
    """Write `samples` to `path` atomically (temporary file in the same folder, then rename), in
    format version 6: labels as uint8 squares and float16 probabilities, no visit counts, the
    board as JSON text; botzone8's games in version 5, without the board (the chunks written
    before board sizes, which older code reads too).

    Args:
        path: the chunk file.
        samples: its games (validated first).
        first_game: the serial number of its first game in the run, if known.

    Raises:
        ReplayChunkError: `samples` are inconsistent (names `path`).
    """
    samples.validate(str(path))
    arrays = {key: getattr(samples, key) for key in _CHUNK_KEYS}  # every key of the current version
    # Labels as the window keeps them: a quarter of the bytes to compress and to store.
    arrays["label_moves"] = samples.label_moves.astype(np.uint8)
    arrays["label_policy"] = samples.label_policy.astype(np.float16)
    if samples.board.same_start(board_spec()):
        arrays["format_version"] = np.array(BOTZONE8_CHUNK_VERSION, np.int64)
    else:
        arrays["format_version"] = np.array(CHUNK_FORMAT_VERSION, np.int64)
        arrays["board"] = np.array(json.dumps(samples.board.to_dict()))
    if first_game is not None:
        arrays["first_game"] = np.array(first_game, np.int64)
    atomic_write(path, lambda stream: np.savez_compressed(stream, **arrays))


def load_chunk(path: str | os.PathLike) -> GameSamples:
    """Read and validate one chunk (any format version up to CHUNK_FORMAT_VERSION).

    Chunks before version 6 record no board: they are botzone8's.

    Raises:
        ReplayChunkError: naming the file, if it is truncated, not an archive, misses an array,
            holds inconsistent arrays or an unreadable board, or comes from a newer format
            version.
    """
    return _load_chunk(path)[0]


def _load_chunk(path: str | os.PathLike) -> tuple[GameSamples, int | None]:
    """`load_chunk`, and the chunk's `first_game` (None when it has none)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            version = int(archive["format_version"]) if "format_version" in archive.files else 1
            if not 1 <= version <= CHUNK_FORMAT_VERSION:
                raise ReplayChunkError(
                    f"{path}: format_version {version}; "
                    f"this code reads 1 to {CHUNK_FORMAT_VERSION}")
            keys = {1: _CHUNK_KEYS_V1, 2: _CHUNK_KEYS_V2, 3: _CHUNK_KEYS_V3,
                    4: _CHUNK_KEYS_V4}.get(version, _CHUNK_KEYS)
            missing = [key for key in keys if key not in archive.files]
            if missing:
                raise ReplayChunkError(f"{path}: missing arrays {missing}")
            arrays = {key: archive[key] for key in keys}
            arrays.setdefault("label_visits", archive["label_visits"]
                              if "label_visits" in archive.files else None)
            if version >= 4:  # compact labels
                arrays["label_moves"] = arrays["label_moves"].astype(np.int32)
                arrays["label_policy"] = arrays["label_policy"].astype(np.float32)
            first_game = int(archive["first_game"]) if "first_game" in archive.files else None
            arrays["board"] = _chunk_board(path, archive) if version >= 6 else board_spec()
    except ReplayChunkError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise ReplayChunkError(f"{path}: unreadable replay chunk ({error})") from None
    samples = GameSamples(**arrays)
    samples.validate(str(path))
    return samples, first_game


def _chunk_board(path: str | os.PathLike, archive: np.lib.npyio.NpzFile) -> BoardSpec:
    """The board a version 6 chunk records.

    Raises:
        ReplayChunkError: naming the file, when the board is missing or unreadable.
    """
    if "board" not in archive.files:
        raise ReplayChunkError(f"{path}: missing arrays ['board']")
    try:
        return board_spec(json.loads(str(archive["board"])))
    except (ValueError, TypeError, NotationError) as error:
        raise ReplayChunkError(f"{path}: unreadable board ({error})") from None


class ReplayWriteError(RuntimeError):
    """The replay's writer thread failed; the message names the chunk, the cause is chained."""


class ChunkWriter:
    """Writes games to replay chunks from a thread of its own, several games a chunk.

    Games handed to `add` wait in memory until they number `chunk_games`, or until the oldest of
    them has waited `chunk_seconds`; then the thread writes them as one chunk (of `chunk_games`
    games, or fewer when age, `flush` or `close` called for it; more only when one `add` brought
    more) (atomically, as
    `save_chunk`) and passes their records to `on_written`. The caller's thread never waits for
    the disk except in `flush` and `close`. A failure of the thread (a full disk, an inconsistent
    game) is raised in the caller's thread by the next `add`, `flush` or `close`, as a
    `ReplayWriteError` naming the chunk; the writer takes no games after it.

    Args:
        directory: where the chunks go.
        first_index: the number of the next chunk file (`chunk-NNNNNNNN.npz`).
        first_game: the serial number, in the run, of the next game added.
        chunk_games: write once this many games wait (>= 1).
        chunk_seconds: write once the oldest waiting game is this old (0: at once).
        on_written: called on the writer's thread with the records handed in with the games of
            each chunk, after the chunk is written (a run appends them to its game records).
    """

    def __init__(self, directory: Path, first_index: int, first_game: int, chunk_games: int = 1,
                 chunk_seconds: float = 0.0,
                 on_written: Callable[[list[object]], None] | None = None) -> None:
        if chunk_games < 1:
            raise ValueError(f"chunk_games must be >= 1, got {chunk_games}")
        if chunk_seconds < 0:
            raise ValueError(f"chunk_seconds must be >= 0, got {chunk_seconds}")
        self.directory = directory
        self.next_index = first_index
        self.chunk_games = chunk_games
        self.chunk_seconds = chunk_seconds
        self.on_written = on_written
        self._next_game = first_game  # serial of the next game written
        # games, records, when added
        self._pending: list[tuple[GameSamples, Sequence[object], float]] = []
        self._pending_games = 0
        self._added = 0  # batches added so far
        self._written = 0  # batches written so far
        self._flushing = 0  # callers waiting in flush
        self._closing = False
        self._error: BaseException | None = None
        self._failed_chunk = ""
        self._condition = threading.Condition()
        # A daemon: a process that exits without `close` loses the unwritten batch, as a crash does.
        self._thread = threading.Thread(target=self._work, name="replay-writer", daemon=True)
        self._thread.start()

    def add(self, samples: GameSamples, records: Sequence[object] = ()) -> None:
        """Queue games for writing (with their records, handed to `on_written`).

        Raises:
            ReplayWriteError: the writer failed earlier, or is closed.
        """
        with self._condition:
            self._raise_failure()
            if self._closing:
                raise ReplayWriteError("the replay writer is closed")
            self._pending.append((samples, records, time.monotonic()))
            self._pending_games += samples.num_games
            self._added += 1
            self._condition.notify_all()

    def flush(self) -> None:
        """Wait until every game added so far is written.

        Raises:
            ReplayWriteError: the writer failed.
        """
        with self._condition:
            target = self._added
            self._flushing += 1
            self._condition.notify_all()
            try:
                while self._written < target and self._error is None:
                    self._condition.wait()
            finally:
                self._flushing -= 1
            self._raise_failure()

    def close(self) -> None:
        """Write what is pending, then stop the thread.

        Raises:
            ReplayWriteError: the writer failed (its thread has stopped).
        """
        with self._condition:
            self._closing = True
            self._condition.notify_all()
        self._thread.join()
        with self._condition:
            self._raise_failure()

    @property
    def pending_games(self) -> int:
        """Games added and not yet written."""
        with self._condition:
            return self._pending_games

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise ReplayWriteError(
                f"writing replay chunk {self._failed_chunk} failed: {self._error!r}") \
                from self._error

    def _due(self) -> bool:
        """Whether the pending games should be written now (called holding the lock)."""
        if not self._pending:
            return False
        if self._closing or self._flushing or self._pending_games >= self.chunk_games:
            return True
        return time.monotonic() - self._pending[0][2] >= self.chunk_seconds

    def _work(self) -> None:
        while True:
            with self._condition:
                while not self._due() and not (self._closing and not self._pending):
                    timeout = None
                    if self._pending:
                        timeout = max(self.chunk_seconds
                                      - (time.monotonic() - self._pending[0][2]), 0.0)
                    self._condition.wait(timeout)
                if not self._pending:  # closing, nothing left
                    return
                taken = games = 0
                while taken < len(self._pending) and games < self.chunk_games:
                    games += self._pending[taken][0].num_games
                    taken += 1
                batch, self._pending = self._pending[:taken], self._pending[taken:]
                self._pending_games -= games
            path = self.directory / f"chunk-{self.next_index:08d}.npz"
            try:
                samples = GameSamples.concatenate([games for games, _, _ in batch])
                save_chunk(path, samples, first_game=self._next_game)
                if self.on_written is not None:
                    self.on_written([record for _, records, _ in batch for record in records])
            except BaseException as error:  # handed to the caller's thread, which raises it
                with self._condition:
                    self._error, self._failed_chunk = error, str(path)
                    self._condition.notify_all()
                return
            with self._condition:
                self.next_index += 1
                self._next_game += samples.num_games
                self._written += len(batch)
                self._condition.notify_all()


# Tags the sampling generator's stream. Seeded with the bare run seed, the buffer and the learner
# would draw the same numbers in lockstep, so the symmetry a sample gets would be a function of
# where it sits in the buffer: each position would always be seen in one orientation, and the
# network would memorize positions instead of learning from the 8-fold augmentation.
SAMPLING_STREAM = 0x5A3B1E


class _Columns:
    """Arrays that share one row range: rows are appended at the end and dropped from the front.

    Live rows are `first:stop` of each array. A row's logical index (`base + physical row`)
    never changes, so other arrays can point at rows across compactions. Appending past the end
    moves the live rows to the front, and makes room for 1.5 times what is live when that is
    not enough: each row is copied a bounded number of times on average.
    """

    def __init__(self, fields: dict[str, tuple[tuple[int, ...], type]]) -> None:
        self.arrays = {name: np.empty((0, *shape), dtype)
                       for name, (shape, dtype) in fields.items()}
        self.base = 0  # logical index of physical row 0
        self.first = 0
        self.stop = 0

    def __len__(self) -> int:
        return self.stop - self.first

    @property
    def logical_stop(self) -> int:
        """The logical index the next appended row gets."""
        return self.base + self.stop

    def append(self, values: dict[str, np.ndarray]) -> None:
        """Append rows (one array per field, equal lengths)."""
        count = next(iter(values.values())).shape[0]
        capacity = next(iter(self.arrays.values())).shape[0]
        if self.stop + count > capacity:
            live = self.stop - self.first
            if live + count > capacity:
                capacity = max(1024, (live + count) * 3 // 2)
                self.arrays = {name: _moved(array, self.first, self.stop, capacity)
                               for name, array in self.arrays.items()}
            else:
                for array in self.arrays.values():
                    array[:live] = array[self.first : self.stop]
            self.base += self.first
            self.first, self.stop = 0, live
        for name, array in self.arrays.items():
            array[self.stop : self.stop + count] = values[name]
        self.stop += count

    def live_nbytes(self) -> int:
        """Bytes of the live rows of every array."""
        return sum(array[self.first : self.stop].nbytes for array in self.arrays.values())

    def drop_front(self, count: int) -> None:
        """Forget the `count` oldest rows."""
        self.first += count

    def take(self, name: str, logical_first: int, count: int) -> np.ndarray:
        """A copy of `count` rows of `name` from logical index `logical_first` on."""
        start = logical_first - self.base
        return self.arrays[name][start : start + count].copy()


def _moved(array: np.ndarray, first: int, stop: int, capacity: int) -> np.ndarray:
    """`array[first:stop]` at the front of a new array of `capacity` rows."""
    grown = np.empty((capacity, *array.shape[1:]), array.dtype)
    grown[: stop - first] = array[first:stop]
    return grown


def _games_from(samples: GameSamples, first: int) -> GameSamples:
    """The games of `samples` from game `first` on."""
    if first == 0:
        return samples
    start = int(samples.game_offsets[first])
    label_start = int(samples.label_offsets[start])
    return GameSamples(
        positions=samples.positions[start:], label_moves=samples.label_moves[label_start:],
        label_visits=None if samples.label_visits is None else samples.label_visits[label_start:],
        label_policy=samples.label_policy[label_start:],
        label_offsets=samples.label_offsets[start:] - label_start,
        z=samples.z[start:], played_moves=samples.played_moves[start:],
        game_offsets=samples.game_offsets[first:] - start,
        policy_weight=samples.policy_weight[start:],
        ownership=samples.ownership[first:], ownership_mask=samples.ownership_mask[first:],
        ownership_sign=samples.ownership_sign[start:], sample_weight=samples.sample_weight[start:],
        board=samples.board)


@dataclass(frozen=True)
class _ChunkSpan:
    """Where one chunk of the window lies in the flat arrays (logical indices)."""

    first_position: int
    positions: int
    first_label: int
    labels: int
    first_game: int
    game_offsets: np.ndarray


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
        chunk_games, chunk_seconds: how the writer thread batches games into chunks
            (`ChunkWriter`): a chunk once this many games wait, or once the oldest waited this long.
        on_written: called on the writer thread with the records added with each chunk's games.
        first_game: the lowest serial number the next game added may get (a run's checkpoint
            may count games that a crash kept from reaching the disk: their numbers stay unused).
        board: the board of every game the window holds (botzone8 when None); games and chunks
            of another board are refused (`ReplayBoardError`).

    The window lives in flat arrays (positions and per-position fields, label entries), chunk
    after chunk, so `sample` gathers a batch with a few vectorized index operations whatever the
    number of chunks. A buffer with a directory starts a writer thread at its first `add`: `close`
    it (or use a `with` block) to write the games still waiting; it starts a new one if more games
    come.

    Raises:
        ReplayBoardError: a chunk under `directory` holds games of another board (names it).

    Attributes:
        skipped_chunks: (path, reason) of chunks that could not be loaded.
        next_game: the serial number (in the run, over every chunk) the next game added gets.
    """

    def __init__(self, directory: str | os.PathLike | None, window_positions: int, seed: int = 0,
                 chunk_games: int = 1, chunk_seconds: float = 0.0,
                 on_written: Callable[[list[object]], None] | None = None,
                 first_game: int = 0, board: BoardSpec | None = None) -> None:
        if window_positions < 1:
            raise ValueError(f"window_positions must be >= 1, got {window_positions}")
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.window_positions = window_positions
        self.board = board_spec(board)
        squares, width = self.board.num_squares, 3 * self.board.words
        self.rng = np.random.default_rng([seed, SAMPLING_STREAM])
        self.skipped_chunks: list[tuple[str, str]] = []
        self._spans: list[_ChunkSpan] = []
        # Compact rows: squares fit a byte, probabilities a float16; visit counts are not kept.
        self._positions = _Columns({
            "positions": ((width,), np.uint64), "z": ((), np.int8),
            "policy_weight": ((), np.float32),
            "played_moves": ((3,), np.uint8),
            "label_start": ((), np.int64),  # logical row of the position's first label entry
            "label_count": ((), np.int32),
            "ownership_sign": ((), np.int8),
            "game_row": ((), np.int64),  # logical row of the position's game in `_games`
            "sample_weight": ((), np.float16),  # how often `sample` draws the row (1: uniform)
            # the sample weights of every row added up to this one
            "weight_through": ((), np.float64),
        })
        self._weighted = False  # a row of another weight than 1 entered the window
        self._weight_total = 0.0  # the sample weights of every row added so far
        self._games = _Columns({"ownership": ((squares,), np.int8),
                                "ownership_mask": ((squares,), np.bool_)})
        self._labels = _Columns({"label_moves": ((3,), np.uint8), "label_policy": ((), np.float16)})
        self.total_games = 0
        self.total_positions = 0
        self.next_game = 0
        self._writer: ChunkWriter | None = None  # started by the first `add`
        # `add_to_window` and `sample` hold it: a learner may draw its next batch on another
        # thread while the main loop adds games (`amazons.neural.learner.BatchPrefetcher`)
        self._window_lock = threading.Lock()
        self._writer_settings = (chunk_games, chunk_seconds, on_written)
        self._next_chunk = 0
        if chunk_games < 1 or chunk_seconds < 0:
            raise ValueError(f"need chunk_games >= 1 and chunk_seconds >= 0, "
                             f"got {chunk_games}, {chunk_seconds}")
        if self.directory is not None:
            self._next_chunk = self._load_existing()
        self.next_game = max(self.next_game, first_game)

    def _chunk_paths(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.iterdir():
            match = CHUNK_PATTERN.search(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def _load_existing(self) -> int:
        """Load the newest chunks up to the window; return the next chunk number."""
        paths = self._chunk_paths()
        held = 0
        loaded: list[GameSamples] = []
        for _, path in reversed(paths):
            if held >= self.window_positions:
                break
            try:
                chunk, first_game = _load_chunk(path)
            except ReplayChunkError as error:
                self.skipped_chunks.append((str(path), str(error)))
                continue
            check_same_board(chunk.board, self.board, f"replay chunk {path}")
            if not loaded:  # the newest readable chunk numbers the games after it
                self.next_game = (first_game or 0) + chunk.num_games
            loaded.append(chunk)
            held += chunk.num_positions
        for chunk in reversed(loaded):
            self._append(chunk)
        self.total_games = sum(chunk.num_games for chunk in loaded)
        self.total_positions = held
        if self.next_game < self.total_games:  # chunks written before games had serial numbers
            self.next_game = self.total_games
        return paths[-1][0] + 1 if paths else 0

    def games_since(self, first_game: int) -> GameSamples | None:
        """The games on disk whose serial number is `first_game` or later, in order (None if none).

        Read from the chunks (newest first, stopping at the first chunk that starts before
        `first_game`; chunks without serial numbers count as older; unreadable chunks are
        skipped, as the window skips them). Games still waiting in the writer are not on disk
        yet: `flush` first.

        Raises:
            ValueError: if the buffer has no directory.
        """
        if self.directory is None:
            raise ValueError("this replay buffer keeps no chunks on disk (directory None)")
        parts: list[GameSamples] = []
        for _, path in reversed(self._chunk_paths()):
            try:
                chunk, first = _load_chunk(path)
            except ReplayChunkError:
                continue
            if first is None or first + chunk.num_games <= first_game:
                break
            skip = max(first_game - first, 0)
            parts.append(_games_from(chunk, skip))
            if first <= first_game:
                break
        return GameSamples.concatenate(parts[::-1]) if parts else None

    def add(self, samples: GameSamples, records: Sequence[object] = ()) -> None:
        """Add `samples` to the window now and hand them to the writer thread, which persists
        them as part of a chunk (and passes `records` to `on_written` once it is written).

        Raises:
            ValueError: if the buffer has no directory (use `add_to_window`).
            ReplayBoardError: `samples` are of another board than the window's.
            ReplayWriteError: the writer thread failed earlier (names the chunk).
        """
        check_same_board(samples.board, self.board, "games added")
        if self.directory is None:
            raise ValueError("this replay buffer keeps no chunks on disk (directory None): "
                             "use add_to_window")
        if self._writer is None:
            self._writer = ChunkWriter(self.directory, self._next_chunk, self.next_game,
                                       *self._writer_settings)
        self._writer.add(samples, records)
        self.next_game += samples.num_games
        self.add_to_window(samples)

    def flush(self) -> None:
        """Wait until every game added is written to a chunk.

        Raises:
            ReplayWriteError: the writer thread failed (names the chunk).
        """
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Write the games still waiting and stop the writer thread (the window stays usable).

        Raises:
            ReplayWriteError: the writer thread failed (names the chunk).
        """
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            finally:
                self._next_chunk = writer.next_index

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def add_to_window(self, samples: GameSamples) -> None:
        """Add `samples` to the sampling window without writing a chunk (safe beside a `sample`
        on another thread).

        Raises:
            ReplayBoardError: `samples` are of another board than the window's.
        """
        check_same_board(samples.board, self.board, "games added")
        with self._window_lock:
            self._append(samples)
            self.total_games += samples.num_games
            self.total_positions += samples.num_positions
            self._evict()

    def _append(self, samples: GameSamples) -> None:
        counts = np.diff(samples.label_offsets)
        games = samples.num_games
        self._spans.append(_ChunkSpan(self._positions.logical_stop, samples.num_positions,
                                      self._labels.logical_stop, int(samples.label_offsets[-1]),
                                      self._games.logical_stop, samples.game_offsets.copy()))
        game_of_position = np.repeat(np.arange(games, dtype=np.int64),
                                     np.diff(samples.game_offsets))
        weights = np.minimum(samples.sample_weight, np.finfo(np.float16).max).astype(np.float16)
        through = self._weight_total + np.cumsum(weights, dtype=np.float64)
        if through.shape[0]:
            self._weight_total = float(through[-1])
        self._positions.append({
            "positions": samples.positions, "z": samples.z, "policy_weight": samples.policy_weight,
            "played_moves": samples.played_moves,
            "label_start": self._labels.logical_stop + samples.label_offsets[:-1],
            "label_count": counts,
            "ownership_sign": samples.ownership_sign,
            "game_row": self._games.logical_stop + game_of_position,
            "sample_weight": weights,
            "weight_through": through,
        })
        self._weighted = self._weighted or bool((weights != 1).any())
        self._labels.append({"label_moves": samples.label_moves,
                             "label_policy": samples.label_policy})
        if games:
            self._games.append({"ownership": samples.ownership,
                                "ownership_mask": samples.ownership_mask})

    @property
    def window(self) -> tuple[GameSamples, ...]:
        """The chunks in the window, oldest first, as the window holds them (copies, to hand the
        window to another buffer): squares back in int32, probabilities in float32 (as float16
        rounded them), no visit counts."""
        chunks = []
        for span in self._spans:
            counts = self._positions.take("label_count", span.first_position, span.positions)
            chunk = {name: self._positions.take(name, span.first_position, span.positions)
                     for name in ("positions", "z", "policy_weight", "ownership_sign")}
            chunk["sample_weight"] = self._positions.take("sample_weight", span.first_position,
                                                          span.positions).astype(np.float32)
            chunk["played_moves"] = self._positions.take("played_moves", span.first_position,
                                                         span.positions).astype(np.int32)
            chunk["label_moves"] = self._labels.take("label_moves", span.first_label,
                                                     span.labels).astype(np.int32)
            chunk["label_policy"] = self._labels.take("label_policy", span.first_label,
                                                      span.labels).astype(np.float32)
            chunk.update({name: self._games.take(name, span.first_game,
                                                 span.game_offsets.shape[0] - 1)
                          for name in ("ownership", "ownership_mask")})
            chunks.append(GameSamples(
                label_offsets=np.concatenate([np.zeros(1, np.int64),
                                              np.cumsum(counts, dtype=np.int64)]),
                label_visits=None, game_offsets=span.game_offsets.copy(), board=self.board,
                **chunk))
        return tuple(chunks)

    @property
    def bytes_per_position(self) -> float:
        """Bytes the window's live rows take per position held (positions, their labels and
        their games' ownership maps), without the room kept for growth (`nbytes`); 0 when empty."""
        live = sum(columns.live_nbytes()
                   for columns in (self._positions, self._labels, self._games))
        return live / len(self) if len(self) else 0.0

    @property
    def nbytes(self) -> int:
        """Bytes the window's arrays take, the room kept for growth included."""
        return sum(array.nbytes for columns in (self._positions, self._labels, self._games)
                   for array in columns.arrays.values())

    def _evict(self) -> None:
        held = len(self._positions)
        while len(self._spans) > 1 and held - self._spans[0].positions >= self.window_positions:
            oldest = self._spans.pop(0)
            self._positions.drop_front(oldest.positions)
            self._labels.drop_front(oldest.labels)
            self._games.drop_front(oldest.game_offsets.shape[0] - 1)
            held -= oldest.positions

    def __len__(self) -> int:
        """Positions available for sampling (the window may hold a little more than its size)."""
        return len(self._positions)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Draw `batch_size` samples from the window: uniformly while every sample weight in it
        has been 1, else each with probability proportional to its `sample_weight`.

        Returns:
            The arrays of an `amazons.neural.learner.SampleBatch` (which augments them with the 8
            symmetries) but its `board_size` (`board.size`): `positions (B, 3 * W) uint64`,
            `label_moves (N, 3) int32`,
            `label_probs (N,) float32` (the stored policy target, renormalized),
            `label_offsets (B + 1,) int64`, `z (B,) float32`,
            `policy_weight (B,) float32` (0 for value-only samples, whose labels are empty),
            `ownership (B, N*N) int8` and `ownership_mask (B, N*N) bool` (each sample's ownership
            target in its canonical frame, `GameSamples.ownership_targets`).

        Safe to call on another thread than the one that adds games (`add`, `add_to_window`).

        Raises:
            ValueError: if the buffer is empty.
        """
        with self._window_lock:
            return self._sample(batch_size)

    def _sample(self, batch_size: int) -> dict[str, np.ndarray]:
        held = len(self._positions)
        if not held:
            raise ValueError("the replay buffer is empty")
        rows = self._positions.first + self._draw(batch_size)
        columns = self._positions.arrays
        counts = columns["label_count"][rows].astype(np.int64)
        label_offsets = np.zeros(batch_size + 1, dtype=np.int64)
        np.cumsum(counts, out=label_offsets[1:])
        # CSR gather: label entry j of the batch is row first_label(sample) + (j - offset(sample)).
        starts = columns["label_start"][rows] - self._labels.base
        label_rows = np.repeat(starts - label_offsets[:-1], counts) + np.arange(label_offsets[-1])
        policy = self._labels.arrays["label_policy"][label_rows].astype(np.float64)
        ownership, ownership_mask = self._ownership_targets(rows)
        totals = np.bincount(np.repeat(np.arange(batch_size), counts), weights=policy,
                             minlength=batch_size)
        return {
            "positions": columns["positions"][rows],
            "label_moves": np.take(self._labels.arrays["label_moves"], label_rows,
                                   axis=0).astype(np.int32),
            "label_probs": (policy / np.repeat(totals, counts)).astype(np.float32),
            "label_offsets": label_offsets,
            "z": columns["z"][rows].astype(np.float32),
            "policy_weight": columns["policy_weight"][rows],
            "ownership": ownership,
            "ownership_mask": ownership_mask,
        }

    def _draw(self, count: int) -> np.ndarray:
        """`count` live rows (offsets from the first), uniform or weighted by `sample_weight`."""
        first, stop = self._positions.first, self._positions.stop
        if not self._weighted:
            return self.rng.integers(0, stop - first, size=count)
        # Running totals over the live rows (kept as rows are added, so no sum over the window per
        # draw): row i is drawn for a point in (through[i] - weight[i], through[i]].
        through = self._positions.arrays["weight_through"][first:stop]
        low = through[0] - float(self._positions.arrays["sample_weight"][first])
        if through[-1] - low <= 0:  # every weight 0: nothing to prefer
            return self.rng.integers(0, stop - first, size=count)
        picks = np.searchsorted(through, low + self.rng.random(count) * (through[-1] - low),
                                side="right")
        return np.minimum(picks, stop - first - 1)

    def _ownership_targets(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ownership targets `(B, N*N) int8` and masks `(B, N*N) bool` of the positions at
        physical `rows`, each in its own canonical frame (as `GameSamples.ownership_targets` gives
        them)."""
        columns = self._positions.arrays
        sign = columns["ownership_sign"][rows]
        games = (columns["game_row"][rows] - self._games.base)[:, None]
        count = self.board.num_squares
        squares = np.where((sign < 0)[:, None], count - 1 - np.arange(count), np.arange(count))
        ownership = (self._games.arrays["ownership"][games, squares]
                     * sign[:, None]).astype(np.int8)
        mask = self._games.arrays["ownership_mask"][games, squares] & (sign != 0)[:, None]
        return ownership, mask
