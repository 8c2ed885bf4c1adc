"""Request errors and the checks every JSON body goes through.

Every error a client can cause is a `WebError` (a `ValueError`) carrying its HTTP status; the app
answers it with `{"error": message}` and changes nothing. `JsonFields` reads one JSON object: it
refuses fields it does not know (a typo is an error, not a silent default) and names the field
and the value when a type or range is wrong. `ServedPaths` is the one check of a path a request
names on the server's machine (a model, a record file, a run directory): only what the board was
started with is served. Imports only `amazons.board` (move notation).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from amazons.board import Move, NotationError

__all__ = [
    "BadRequestError",
    "ConflictError",
    "JsonFields",
    "NotFoundError",
    "ServedPaths",
    "WebError",
    "parse_json_object",
    "parse_move",
    "real_path",
]


class WebError(ValueError):
    """A request the server refuses; `status` is the HTTP status of the answer."""

    status = 400


class BadRequestError(WebError):
    """Malformed JSON, an unknown or mistyped field, an illegal move, an unreadable file (400)."""

    status = 400


class NotFoundError(WebError):
    """An unknown game, or a file or folder that does not exist (404)."""

    status = 404


class ConflictError(WebError):
    """A request that is well formed but not possible now: the AI is thinking, it is not the
    human's turn, the game is over, nothing to undo (409)."""

    status = 409


def real_path(path: str | os.PathLike) -> Path | None:
    """`path` as the server reads it, made real: `~` expanded, relative to the working folder,
    every symbolic link followed and `..` collapsed; None where that cannot be done (a loop of
    links, a NUL byte, no home folder)."""
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return None


class ServedPaths:
    """The paths on the server's machine that one kind of request may name, and their one check.

    A path is served when, made real (`real_path`), it is one of `exact` or lies inside one of
    `within` (made real when the board starts). Checking the real path means that a `..` that
    climbs out of a served folder, or a link inside one that points out of it, is refused, and
    the caller reads the real path `resolve` returns, the one checked. Every refusal is the same
    words but for the path quoted, so it never tells whether anything exists at that path.

    Args:
        kind: what a request names, as the refusal calls it ("model", "record file").
        served: the refusal's account of what the board serves.
        exact: paths served themselves (files or folders).
        within: folders whose contents are served, at any depth.
    """

    def __init__(self, kind: str, served: str, exact: Iterable[str | os.PathLike] = (),
                 within: Iterable[str | os.PathLike] = ()) -> None:
        self.kind = kind
        self.served = served
        self.exact = frozenset(real for path in exact if (real := real_path(path)) is not None)
        self.within = tuple(real for path in within if (real := real_path(path)) is not None)

    def resolve(self, path: str) -> Path:
        """The real path to read for the `path` a request names.

        Raises:
            BadRequestError: `path` is not served (whether or not anything is there).
        """
        real = real_path(path)
        if real is not None and (real in self.exact
                                 or any(real.is_relative_to(folder) for folder in self.within)):
            return real
        raise BadRequestError(f"{self.kind} {path!r} is not one this board serves: {self.served}")


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The JSON object in a request body (an empty body is an empty object).

    Raises:
        BadRequestError: the body is not UTF-8 JSON, or not an object.
    """
    if not body.strip():
        return {}
    try:
        value = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequestError("malformed JSON: the body is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise BadRequestError(f"malformed JSON: {error.msg} at line {error.lineno} "
                              f"column {error.colno}") from None
    if not isinstance(value, dict):
        raise BadRequestError(f"the body must be a JSON object, got {type(value).__name__}")
    return value


def parse_move(text: Any, field: str = "move", size: int = 8) -> Move:
    """A move in algebraic (`d8-d4/f6`) or Botzone (`3 0 3 4 5 2`) notation on a `size x size`
    board (`d1-d7/g7` on 10x10).

    Raises:
        BadRequestError: not a string, or not a move (the notation error names the token).
    """
    if not isinstance(text, str):
        raise BadRequestError(f"field {field!r} must be a move string like 'd8-d4/f6', "
                              f"got {json.dumps(text)}")
    try:
        return Move.parse(text, size)
    except NotationError as error:
        raise BadRequestError(f"field {field!r}: {error}") from None


class JsonFields:
    """Typed access to the fields of one JSON object, refusing unknown ones.

    Args:
        values: the decoded object.
        allowed: the field names this request takes.

    Raises:
        BadRequestError: (at construction) a field that is not in `allowed`.
    """

    def __init__(self, values: Mapping[str, Any], allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise BadRequestError(f"unknown field {unknown[0]!r}; this request takes "
                                  f"{', '.join(allowed) if allowed else 'no fields'}")
        self.values = dict(values)

    def __contains__(self, name: str) -> bool:
        return self.values.get(name) is not None

    def string(self, name: str, default: str | None = None,
               choices: Iterable[str] | None = None) -> str | None:
        """A string field (`default` when absent or null); `choices` limits its values."""
        value = self.values.get(name)
        if value is None:
            return default
        if not isinstance(value, str) or not value.strip():
            raise BadRequestError(f"field {name!r} must be a non-empty string, "
                                  f"got {json.dumps(value)}")
        if choices is not None and value not in tuple(choices):
            raise BadRequestError(f"field {name!r} must be one of {', '.join(choices)}; "
                                  f"got {value!r}")
        return value

    def integer(self, name: str, default: int | None = None, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        """An integer field (`default` when absent or null), within [minimum, maximum]."""
        value = self.values.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadRequestError(f"field {name!r} must be an integer, got {json.dumps(value)}")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            bounds = (f"{minimum if minimum is not None else '-inf'}.."
                      f"{maximum if maximum is not None else 'inf'}")
            raise BadRequestError(f"field {name!r} must be in {bounds}, got {value}")
        return value

    def positive_number(self, name: str, default: float | None = None,
                        maximum: float | None = None) -> float | None:
        """A finite number > 0 (`default` when absent or null), at most `maximum`."""
        value = self.values.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise BadRequestError(f"field {name!r} must be a positive number, "
                                  f"got {json.dumps(value)}")
        if maximum is not None and value > maximum:
            raise BadRequestError(f"field {name!r} must be at most {maximum:g}, got {value:g}")
        return float(value)

    def moves(self, name: str, size: int = 8) -> list[Move]:
        """A list of move strings on a `size x size` board (empty when absent or null)."""
        value = self.values.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise BadRequestError(f"field {name!r} must be a list of move strings, "
                                  f"got {json.dumps(value)[:80]}")
        return [parse_move(text, f"{name}[{index}]", size) for index, text in enumerate(value)]
