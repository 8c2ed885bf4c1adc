"""Record files for the replay view: read, checked and parsed once per version of a file.

`RecordLibrary.answer(body)` serves `POST /api/records`: the games of a record file named by a
path on the server's machine, or of record text the browser sends (a file the user picked),
either as a list of summaries or, with `game`, one game with the board after every ply
(`amazons.web.views.record_view`). A path names one of the record files the board serves (its
`--replay` file, files inside the folders it was started with), checked by `ServedPaths`; text
is whatever the browser sends. Parsing replays every move on the engine, so it runs on a worker
thread; a parsed file is kept until its size or modification time changes. Imports `records`
and the web package's own modules.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from amazons.players.records import GameRecord, RecordError, parse_records, read_records
from amazons.web.inputs import BadRequestError, JsonFields, NotFoundError, ServedPaths
from amazons.web.views import record_summary, record_view

__all__ = ["RecordLibrary", "load_record_file"]

RECORD_FIELDS = ("path", "text", "game")
MAX_TEXT_CHARS = 64 * 1024 * 1024


def load_record_file(path: str | os.PathLike) -> list[GameRecord]:
    """The games of a record file.

    Raises:
        NotFoundError: no file at `path`.
        BadRequestError: a folder, an unreadable file, or a malformed record (the record
            error names the line and the game).
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise NotFoundError(f"record file {str(path)!r} does not exist")
    if not path.is_file():
        raise BadRequestError(f"{str(path)!r} is not a file")
    try:
        return read_records(path)
    except RecordError as error:
        raise BadRequestError(f"cannot read the record file: {error}") from None
    except OSError as error:
        raise BadRequestError(f"cannot read {str(path)!r}: {error.strerror or error}") from None


class RecordLibrary:
    """The record files a request may name, parsed: the newest `max_files` kept, each until the
    file changes.

    Safe to call from several worker threads.

    Args:
        files: record files served themselves (the board's `--replay`).
        folders: folders whose files are served (`--records`, `--games-dir`, `--run`,
            `--models`); a path elsewhere is refused (`ServedPaths`).
        max_files: parsed files kept.
    """

    def __init__(self, files: Iterable[str | os.PathLike] = (),
                 folders: Iterable[str | os.PathLike] = (), max_files: int = 4) -> None:
        self.served = ServedPaths(
            "record file", "a file inside a folder the board was started with (--records, "
            "--games-dir, --run, --models) or its --replay file", exact=files, within=folders)
        self.max_files = max_files
        self._files: OrderedDict[tuple[str, int, int], list[GameRecord]] = OrderedDict()
        self._lock = threading.Lock()

    def games(self, path: str | os.PathLike) -> list[GameRecord]:
        """The games of the file at `path`, a path already served (parsed again only when it
        changed).

        Raises:
            NotFoundError, BadRequestError: see `load_record_file`.
        """
        resolved = Path(path).expanduser().resolve()
        try:
            stat = resolved.stat()
        except OSError:
            return load_record_file(resolved)  # raises, naming the problem
        key = (str(resolved), stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if key in self._files:
                self._files.move_to_end(key)
                return self._files[key]
        records = load_record_file(resolved)
        with self._lock:
            self._files[key] = records
            while len(self._files) > self.max_files:
                self._files.popitem(last=False)
        return records

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The answer to `POST /api/records`.

        Body: `path` (a record file the board serves) or `text` (record text), and optionally
        `game` (its number, from 1).

        Returns:
            `{"source", "count", "games": [summary, ...]}` without `game`; with it,
            `{"source", "count", "game": record_view}`.

        Raises:
            BadRequestError: neither or both sources, a path the board does not serve (the same
                words whatever is there), bad record text, a game number that is not in the
                file. NotFoundError: no file at a served `path`.
        """
        fields = JsonFields(body, RECORD_FIELDS)
        if ("path" in fields) == ("text" in fields):
            raise BadRequestError("give either 'path' (a record file) or 'text' (record text)")
        number = fields.integer("game", minimum=1)
        if "path" in fields:
            source = fields.string("path")
            records = self.games(self.served.resolve(source))
        else:
            text = fields.values["text"]
            if not isinstance(text, str):
                raise BadRequestError("field 'text' must be record text (a string)")
            if len(text) > MAX_TEXT_CHARS:
                raise BadRequestError(f"field 'text' holds {len(text):,} characters; at most "
                                      f"{MAX_TEXT_CHARS:,}")
            source = "<uploaded text>"
            try:
                records = parse_records(text, "text")
            except RecordError as error:
                raise BadRequestError(f"cannot read the records: {error}") from None
        answer: dict[str, Any] = {"source": source, "count": len(records)}
        if number is None:
            answer["games"] = [record_summary(record, index + 1)
                               for index, record in enumerate(records)]
            return answer
        if number > len(records):
            raise BadRequestError(f"game {number} is not in {source} "
                                  f"({len(records)} game{'s' if len(records) != 1 else ''})")
        answer["game"] = record_view(records[number - 1], number)
        return answer
