"""Following a training run directory (`python -m amazons.train`) for the watch view.

A run directory holds `config.json` (the resolved config), `state.json` (the last finished
iteration), `metrics.jsonl` (one JSON object per iteration: `train/*` losses, `selfplay/*`
speeds, `eval/elo` ...), `elo.json` (the Elo ladder: ratings and matches), `models/model-NNNN.pt`
and `games/selfplay.txt` (self-play game records, appended as games finish). See
`docs/training.md`.

`RunWatcher.poll()` looks at the sizes and modification times of those files and, when one
changed, returns a new snapshot: every metrics line, the ladder, the number of self-play games
and the newest few in full. The game count is kept up to date by reading only the bytes appended
since the last poll, and the newest games come from the end of the file, so a long run costs no
more per poll than a short one. A line or game still being written when it is read is left for
the next poll. The one run directory a request may name is the board's `--run` folder
(`served_run_dirs`). Reads files only; imports `records` and the web package's own modules.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from amazons.players.records import RecordError, parse_records
from amazons.web.inputs import BadRequestError, NotFoundError, ServedPaths
from amazons.web.views import record_view

__all__ = ["RunWatcher", "SELFPLAY_GAMES", "served_run_dirs"]

SELFPLAY_GAMES = Path("games") / "selfplay.txt"
_WATCHED = ("config.json", "state.json", "metrics.jsonl", "elo.json", str(SELFPLAY_GAMES), "models")
_GAME_START = b"\n\n["  # games are blank-line separated and start with their headers
_TAIL_CHUNK = 64 * 1024


def served_run_dirs(run_dirs: Iterable[str | os.PathLike]) -> ServedPaths:
    """The run directories a request may watch: `run_dirs` themselves (the board's `--run`), not
    the folders inside them nor any other folder (`ServedPaths.resolve` gives the real one)."""
    return ServedPaths("run directory", "the board watches only the run directory it was "
                       "started with (--run)", exact=run_dirs)


def _read_json(path: Path) -> Any:
    """A JSON file's value, or None when it is missing or being rewritten."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_metrics(path: Path) -> list[dict[str, float]]:
    """The objects of a `metrics.jsonl` file, finite numbers only; an unfinished line is skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            values = json.loads(line)
        except ValueError:
            continue
        if isinstance(values, dict):
            rows.append({key: float(value) for key, value in values.items()
                         if isinstance(value, (int, float)) and math.isfinite(value)})
    return rows


class RunWatcher:
    """Snapshots of one run directory, rebuilt when its files change.

    Args:
        run_dir: the run directory.
        newest: how many of the newest self-play games a snapshot carries in full.

    Raises:
        NotFoundError: `run_dir` does not exist. BadRequestError: it is not a folder.
    """

    def __init__(self, run_dir: str | os.PathLike, newest: int = 8) -> None:
        self.run_dir = Path(run_dir).expanduser()
        if not self.run_dir.exists():
            raise NotFoundError(f"run directory {str(self.run_dir)!r} does not exist")
        if not self.run_dir.is_dir():
            raise BadRequestError(f"{str(self.run_dir)!r} is not a folder")
        self.newest = newest
        self._fingerprint: tuple | None = None
        self._scanned = 0  # bytes of the games file already counted
        self._games_total = 0

    def _stat_all(self) -> tuple:
        stats = []
        for name in _WATCHED:
            try:
                stat = (self.run_dir / name).stat()
                stats.append((stat.st_size, stat.st_mtime_ns))
            except OSError:
                stats.append(None)
        return tuple(stats)

    def poll(self) -> dict[str, Any] | None:
        """A new snapshot if any watched file changed since the last call (the first call always
        gives one), else None."""
        fingerprint = self._stat_all()
        if fingerprint == self._fingerprint:
            return None
        self._fingerprint = fingerprint
        return self.snapshot()

    def snapshot(self) -> dict[str, Any]:
        """The run as the watch view shows it.

        Returns:
            `run_dir`; `preset` and `iterations` (the target) from the config; `iteration` (the
            last finished one); `metrics` (every line of `metrics.jsonl`); `ratings` (the Elo
            ladder, name -> Elo, RandomPlayer at 0; None before the first evaluation);
            `models` (model files written); `games_total`; `games` (the newest games, newest
            first, each a `record_view` whose `game` is its number in the file).
        """
        config = _read_json(self.run_dir / "config.json") or {}
        state = _read_json(self.run_dir / "state.json") or {}
        metrics = read_metrics(self.run_dir / "metrics.jsonl")
        elo = _read_json(self.run_dir / "elo.json")
        models_dir = self.run_dir / "models"
        models = len(list(models_dir.glob("model-*.pt"))) if models_dir.is_dir() else 0
        games_path = self.run_dir / SELFPLAY_GAMES
        self._count_games(games_path)
        iteration = state.get("iteration") if isinstance(state, dict) else None
        if iteration is None and metrics:
            iteration = int(metrics[-1].get("iteration", 0))
        ratings = elo.get("ratings") if isinstance(elo, dict) else None
        return {
            "run_dir": str(self.run_dir),
            "preset": config.get("preset") if isinstance(config, dict) else None,
            "iterations": config.get("iterations") if isinstance(config, dict) else None,
            "iteration": iteration,
            "metrics": metrics,
            "ratings": ratings if isinstance(ratings, dict) else None,
            "models": models,
            "games_total": self._games_total,
            "games": self._newest_games(games_path),
        }

    def _count_games(self, path: Path) -> None:
        """Count game starts in the bytes appended since the last call (all, if the file shrank)."""
        try:
            size = path.stat().st_size
        except OSError:
            self._scanned, self._games_total = 0, 0
            return
        if size < self._scanned:  # replaced or truncated: count again
            self._scanned, self._games_total = 0, 0
        if size == self._scanned:
            return
        start = max(self._scanned - (len(_GAME_START) - 1), 0)
        with path.open("rb") as stream:
            stream.seek(start)
            chunk = stream.read(size - start)
        self._games_total += chunk.count(_GAME_START) + (start == 0 and chunk.startswith(b"["))
        self._scanned = start + len(chunk)

    def _newest_games(self, path: Path) -> list[dict[str, Any]]:
        """The newest `self.newest` complete games of the file, newest first."""
        try:
            size = path.stat().st_size
        except OSError:
            return []
        chunk_size = _TAIL_CHUNK
        while True:
            start = max(size - chunk_size, 0)
            with path.open("rb") as stream:
                stream.seek(start)
                data = stream.read(size - start)
            blocks = data.decode("utf-8", errors="replace").split("\n\n")
            if start > 0:
                blocks = blocks[1:]  # may begin mid-game
            blocks = [block for block in blocks if block.strip().startswith("[")]
            if len(blocks) > self.newest or start == 0:
                break
            chunk_size *= 4
        games = []
        number = self._games_total
        for block in reversed(blocks):
            if len(games) == self.newest:
                break
            try:
                records = parse_records(block, str(path))
            except RecordError:
                number -= 1
                continue  # still being written; the next poll reads it whole
            if records:
                games.append(record_view(records[0], number))
            number -= 1
        return games
