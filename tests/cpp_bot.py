"""The compiled C++ bot as the tests drive it: building, Botzone's inputs, replies and processes.

The tests of the exported bot (`amazons.botzone.cpp_export`) are split by what they check:
`test_cpp_parity.py` (the native twin against the engine, `npnet` and the Python search),
`test_cpp_protocol.py` (Botzone's protocol, whole games, bad input, the command line),
`test_cpp_clock.py` (the CPU clock and the memory) and `test_cpp_export.py` (the exporter and
the weights file). This module holds what they share; the shipped model's bot is built once per
test session by the session fixture `default_bot` (`tests/conftest.py`, `export_default_bot`).
The bot is built with g++ as Botzone builds it (`-D_BOTZONE_ONLINE`, C++11) with `-Werror`;
without g++ the tests are skipped (`NEEDS_GXX`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from botzone_inputs import MOVE_KEYS, NO_MOVE

from amazons import engine
from amazons.board import Move
from amazons.botzone.cpp_export import SOURCE_NAME, compile_command
from amazons.export import main
from amazons.players.botzone_limits import KEEP_RUNNING_MARKER
from amazons.players.keep_running import KeptProcess

NEEDS_GXX = pytest.mark.skipif(shutil.which("g++") is None,
                               reason="g++ is not installed (the C++ bot needs it)")

MARKER = KEEP_RUNNING_MARKER  # the line a kept bot prints after each reply
FAST = ["--simulations", "12"]  # whole-game tests: a few simulations a turn
# Black's first turn
FIRST_REQUEST_JSON = {"requests": [dict.fromkeys(MOVE_KEYS, -1)], "responses": []}


def binary_path(directory: Path, standard: str = "c++11", optimize: str = "-O2") -> Path:
    """Where `build` puts the binary of `directory/bot.cpp` for a standard and optimization."""
    return directory / f"bot-{standard}{optimize}"


def build(directory: Path, standard: str = "c++11", optimize: str = "-O2") -> Path:
    """Compile `directory/bot.cpp` with warnings as errors; the binary's path."""
    binary = binary_path(directory, standard, optimize)
    command = [*compile_command(directory / SOURCE_NAME, binary, standard, optimize), "-Werror"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0 and not result.stderr, result.stderr
    return binary


def export_default_bot(directory: Path, cache: Path | None = None) -> Path:
    """The shipped model's bot exported into `directory` and built as Botzone builds it (C++11,
    -O2), warnings as errors; the binary's path.

    Built once for every process that asks for the same `directory`: the first takes the lock
    file `directory/build.lock`, exports, builds and writes the binary's path to
    `directory/built`; the others wait on the lock and read it (pytest-xdist's workers of one
    session share a folder). With `cache` (pytest's cache folder), a binary built from the same
    source text by the same compiler and command is taken from there instead of compiled again:
    the export always runs, only an identical compilation is skipped (the suite's serial part and
    a developer's next run reuse the parallel part's build).
    """
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        built = directory / "built"
        if built.exists():
            return Path(built.read_text())
        assert main(["default", "--botzone", str(directory)]) == 0
        binary = build_cached(directory, cache) if cache is not None else build(directory)
        built.write_text(str(binary))
        return binary


def build_key(directory: Path, standard: str = "c++11", optimize: str = "-O2") -> str:
    """SHA-256 over what decides the binary: the source text, the compile command and the
    compiler's version."""
    digest = hashlib.sha256((directory / SOURCE_NAME).read_bytes())
    command = compile_command(SOURCE_NAME, "bot", standard, optimize)
    digest.update(" ".join(command).encode())
    version = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True)
    digest.update(version.stdout.encode())
    return digest.hexdigest()


def build_cached(directory: Path, cache: Path) -> Path:
    """`build(directory)`, or a copy of the binary of an identical earlier build kept under
    `cache`; either way the binary lies in `directory`, beside its source."""
    cached = cache / build_key(directory) / "bot"
    if cached.exists():
        binary = binary_path(directory)
        shutil.copy2(cached, binary)
        return binary
    binary = build(directory)
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"bot.{os.getpid()}.partial")
    shutil.copy2(binary, partial)
    os.replace(partial, cached)  # whole or absent, for a process that looks at the same time
    return binary


def game_endings(games: int, plies: int, seed: int) -> np.ndarray:
    """`(N, 3) uint64` canonical positions: the last `plies` positions before the end of each of
    `games` seeded uniformly random games, where separated positions, decided or not, abound."""
    rng = np.random.default_rng(seed)
    positions = []
    for _ in range(games):
        line, position = [], engine.start_position()
        while True:
            moves, _ = engine.legal_moves(position)
            if moves.shape[0] == 0:
                break
            line.append(position)
            move = moves[rng.integers(moves.shape[0])]
            position = engine.apply_moves(position[None], move[None])[0]
        positions += line[-plies:]
    return np.array(positions)


def botzone_line(move: Move | None) -> str:
    """A move as Botzone's text `x0 y0 x1 y1 x2 y2`; None: the no-move line (all -1)."""
    return NO_MOVE if move is None else move.to_botzone()


def move_object(move: Move | None) -> dict:
    """A move as Botzone's JSON move object; None: all -1."""
    return dict(zip(MOVE_KEYS, map(int, botzone_line(move).split()), strict=True))


def first_input(requests: list[Move | None], responses: list[Move], use_json: bool) -> str:
    """The whole game so far as Botzone sends it to a fresh process."""
    if use_json:
        return json.dumps({"requests": [move_object(m) for m in requests],
                           "responses": [move_object(m) for m in responses], "data": "",
                           "time_limit": 1}) + "\n"
    lines = [str(len(requests))]
    for index, request in enumerate(requests):
        lines.append(botzone_line(request))
        if index < len(responses):
            lines.append(botzone_line(responses[index]))
    return "\n".join(lines) + "\n"


def history_input(history: list[Move], use_json: bool = False) -> str:
    """The first input of a fresh process for the bot to move after `history`."""
    black = len(history) % 2 == 0
    requests = [None, *history[1::2]] if black else history[0::2]
    responses = history[0::2] if black else history[1::2]
    return first_input(requests, responses, use_json)


def parse_reply(text: str, use_json: bool) -> Move:
    """The move of a reply line; a JSON reply must carry the search's debug text."""
    if use_json:
        reply = json.loads(text)
        assert "simulations" in reply["debug"]
        return Move.from_botzone(" ".join(str(reply["response"][key]) for key in MOVE_KEYS))
    return Move.from_botzone(text)


def turn_simulations(reply: str) -> int:
    """The simulations of the turn a JSON reply answers ("N simulations (M this turn), ...")."""
    return int(json.loads(reply)["debug"].split("(")[1].split()[0])


def search_cpu_seconds(reply: str) -> float:
    """The CPU seconds the search of the turn a JSON reply answers took ("..., S s cpu, ...")."""
    return float(json.loads(reply)["debug"].split(" s cpu")[0].rsplit(" ", 1)[1])


class KeptBot(KeptProcess):
    """The compiled bot in keep-running mode (`amazons.players.keep_running.KeptProcess`); `close`
    returns the exit status alone and keeps stderr's text in `stderr`."""

    def __init__(self, binary: Path, *args: str) -> None:
        super().__init__([binary, *args])
        self.stderr = ""

    def close(self, timeout: float = 30.0) -> int:  # type: ignore[override]
        """End the input; the exit status (stderr's text is kept in `stderr`)."""
        code, self.stderr = super().close(timeout)
        return code


def root_search(binary: Path, history: list[Move], *args: str,
                simulations: int | None = 400) -> tuple[Move, list[tuple], dict[str, int]]:
    """A fresh process's reply to the game `history` at `simulations` (None: by its clock), and
    what `--root-stats` prints (`root_stats`): the root's moves and the search's counters."""
    count = [] if simulations is None else ["--simulations", str(simulations)]
    result = subprocess.run([str(binary), "--restart-per-turn", *count, "--root-stats", *args],
                            input=history_input(history), capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return parse_reply(result.stdout.splitlines()[0], use_json=False), *root_stats(result.stderr)


def root_stats(text: str) -> tuple[list[tuple], dict[str, int]]:
    """`--root-stats` output: the root's moves (move, visits, value sum, sum of squares, proof,
    proof plies), and the "stats NAME VALUE" lines as a dict."""
    moves, counters = [], {}
    for line in text.splitlines():
        tokens = line.split()
        if tokens[0] == "stats":
            counters[tokens[1]] = int(tokens[2])
            continue
        assert tokens[0] == "root", line
        moves.append((Move.from_botzone(" ".join(tokens[1:7])), int(tokens[7]), float(tokens[8]),
                      float(tokens[9]), int(tokens[10]), int(tokens[11])))
    return moves, counters


def most_visited(stats: list[tuple]) -> tuple:
    """The statistics of the most visited move not proven lost (the first of equals)."""
    return max((s for s in stats if s[4] != -1), key=lambda s: s[1])

