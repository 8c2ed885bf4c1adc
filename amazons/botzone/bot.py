"""The Botzone bot: `python -m amazons.botzone [--model PATH|default|none] [--time S] ...`.

Speaks Botzone's protocol on stdin/stdout (see `docs/botzone.md`), on Botzone's 8x8 board or on
the board `--board` names (`--board standard10`: the standard 10x10 game, White first, for
matches with other 10x10 programs; the protocol is the same, its squares `x y` run 0..N-1, x the
column, y the row from the top):

* simple interaction: a turn number `n`, then `2n - 1` lines `x0 y0 x1 y1 x2 y2` alternating the
  opponent's moves (requests) and this bot's earlier replies (responses), ending with the newest
  request; the first request of the side that moves first (Black on Botzone's board, White on
  `standard10`) is `-1 -1 -1 -1 -1 -1`. The reply is one such line.
* JSON interaction (the input's first non-blank character is `{`): one line
  `{"requests": [...], "responses": [...], "time_limit": ...}`, answered by one line
  `{"response": {"x0": ..., ...}, "debug": "..."}`. `time_limit` is read by
  `botzone_limits.read_limit`: a number or a string holding one lowers the turn's allowance;
  any other value (Botzone's wiki shows `""`) leaves the bot's own allowance, never a refusal.
* keep-running (the default): after each reply the bot prints
  `>>>BOTZONE_REQUEST_KEEP_RUNNING<<<` and waits for the next input, which holds only the newest
  request; the search tree and the model stay loaded between turns. End of input ends the process
  (exit 0). `--restart-per-turn` answers one turn and exits instead (Botzone then starts the bot
  again for every turn, with the whole history).

Every move of the history is checked on a `Board`; malformed input, an illegal move or a model
that cannot be loaded ends the process with a message on stderr and exit status 2, and nothing is
written to stdout for that turn. The protocol parsing (`parse_simple`, `parse_json`,
`parse_update`), the turn logic (`Bot`) and the clock (`TimeControl`) are plain functions and
classes; `main` wires them to the streams.

Memory: the network runs in numpy from an exported model (`amazons.neural.numpy_net`), never torch;
the search trees are allocated once at `--tree-mb` MiB (`SearchConfig.with_tree_memory`) and a full
tree ends the turn's search early; after loading Numba's kernels the bot gives back LLVM's code
pages (`amazons.botzone.memory`). See docs/botzone.md for the measured peak.

The player is built by `amazons.players.factory.build_model_player` (the builder of every
model-backed player), with the bot's choices: the tree's memory bound, a search that stops when
the tree is full, and `--simulations` (when given) instead of the clock.

Imports `amazons.board`, `amazons.boards`, `amazons.mcts`, `amazons.players.factory`,
`amazons.players.player`, `amazons.botzone.memory` and Botzone's limits and protocol constants
(`amazons.players.botzone_limits`, which the arena's player for Botzone programs reads too);
never torch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO

from amazons.board import Board, IllegalMoveError, Move, NotationError
from amazons.boards import BOARDS, DEFAULT_BOARD, BoardSpec, board_spec
from amazons.botzone.memory import release_library_pages, releasing_library_pages
from amazons.mcts import SearchConfigError, warm_up
from amazons.players import botzone_limits
from amazons.players.botzone_limits import KEEP_RUNNING_MARKER, MOVE_KEYS, NO_MOVE
from amazons.players.factory import build_model_player
from amazons.players.player import MCTSPlayer, describe_territory, predicted_territory

__all__ = [
    "KEEP_RUNNING_MARKER",
    "NO_MOVE",
    "Bot",
    "BotzoneInput",
    "ProtocolError",
    "TREE_MEMORY_MB",
    "TimeControl",
    "format_json_reply",
    "format_simple_reply",
    "main",
    "parse_json",
    "parse_move_line",
    "parse_simple",
    "parse_update",
    "process_start_time",
]

EXIT_OK, EXIT_BAD_INPUT = 0, 2
MIN_SEARCH_SECONDS = 1e-3  # a turn whose time is already spent still searches one round
# The search tree's share of memory. Besides it the process holds the interpreter, numpy,
# Numba's runtime and kernels, the engine and the model; with 64 MiB of tree a whole game's peak
# stays inside Botzone's 256 MB (docs/botzone.md says why; the measured peak is in
# docs/BENCHMARKS.md, "Botzone bot"). The default network's search fills this early in an
# opening turn (about 1,000 to 2,000 legal moves per node, every one an edge), so there memory,
# not the time budget, ends a turn; later positions have fewer moves and the turn's time runs
# out first.
TREE_MEMORY_MB = 64.0
LLVM_LIBRARY = "libllvmlite"  # Numba's LLVM, whose code pages the bot gives back after loading


class ProtocolError(ValueError):
    """The input breaks Botzone's protocol or the rules; the message names the line or move."""


# ------------------------------------------------------------------------------------------------
# Parsing


def parse_move_line(text: str, where: str, allow_no_move: bool = False,
                    size: int = 8) -> Move | None:
    """A move line `x0 y0 x1 y1 x2 y2` on a `size x size` board; None for `-1 -1 -1 -1 -1 -1`
    when `allow_no_move`.

    Args:
        text: the line.
        where: how error messages name the line, e.g. "line 3".
        allow_no_move: accept the first side's first request (all six values -1) and return
            None.
        size: the board's side N; coordinates run 0..N-1.

    Raises:
        ProtocolError: naming `where` and the bad token (not six integers, off the board, or
            the all -1 request where it is not allowed).
    """
    if text.split() == ["-1"] * 6:
        if allow_no_move:
            return None
        raise ProtocolError(f"{where}: {text.strip()!r} is only valid as the first request of "
                            "the side that moves first")
    try:
        return Move.from_botzone(text, size)
    except NotationError as error:
        raise ProtocolError(f"{where}: {error}") from None


def parse_simple(lines: Sequence[str], size: int = 8) -> list[Move]:
    """The moves played so far, oldest first, from a simple-interaction transcript.

    Args:
        lines: the turn number `n`, then exactly `2n - 1` move lines (requests and responses
            alternating, the newest request last). Blank lines before the turn number are
            skipped; a blank line after it counts as a bad move line.
        size: the board's side N.

    Returns:
        The moves of both sides in the order they were played; the first side's first request
        (`-1 -1 -1 -1 -1 -1`) is not a move and is left out.

    Raises:
        ProtocolError: naming the line (counted from 1 at the turn number) that is not a turn
            number or not a move, or saying how many move lines were expected and found.
    """
    lines = [line.rstrip("\r\n") for line in lines]
    while lines and not lines[0].strip():
        lines = lines[1:]
    if not lines:
        raise ProtocolError("empty input: expected a turn number")
    turn = _parse_turn_number(lines[0], "line 1")
    expected = 2 * turn - 1
    move_lines = lines[1:]
    while move_lines and len(move_lines) > expected and not move_lines[-1].strip():
        move_lines = move_lines[:-1]
    if len(move_lines) != expected:
        raise ProtocolError(
            f"turn {turn} needs 2n-1 = {expected} move lines after the turn number, "
            f"got {len(move_lines)}")
    moves = []
    for index, text in enumerate(move_lines):
        move = parse_move_line(text, f"line {index + 2}", allow_no_move=index == 0, size=size)
        if move is not None:
            moves.append(move)
    return moves


def _parse_turn_number(text: str, where: str) -> int:
    token = text.strip()
    try:
        turn = int(token)
    except ValueError:
        raise ProtocolError(f"{where}: {token!r} is not a turn number "
                            "(a positive integer)") from None
    if turn < 1:
        raise ProtocolError(f"{where}: turn number {turn} must be >= 1")
    return turn


@dataclass(frozen=True)
class BotzoneInput:
    """One JSON input, decoded.

    Attributes:
        history: the moves played so far, oldest first (requests and responses interleaved,
            the first side's `-1` first request left out); for a bare move object, just that
            move.
        complete: True when `history` is the whole game so far (a `requests` object), False for
            a bare move object (keep-running: only the newest request).
        time_limit: the `time_limit` field in seconds, None when it holds no limit
            (`botzone_limits.read_limit`).
        notes: what was ignored, for one line on stderr: a `time_limit` that holds neither a
            limit nor one of the empty forms (`"abc"`, 0, -1), e.g. `'time_limit "abc" is not a
            positive number of seconds: ...'`; empty when nothing was.
    """

    history: list[Move]
    complete: bool
    time_limit: float | None
    notes: tuple[str, ...] = ()


def _move_from_object(value: Any, where: str, allow_no_move: bool, size: int) -> Move | None:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: expected a move object {{\"x0\": .., ..., \"y2\": ..}}, "
                            f"got {value!r}")
    missing = [key for key in MOVE_KEYS if key not in value]
    if missing:
        raise ProtocolError(f"{where}: move object {value!r} lacks {', '.join(missing)}")
    numbers = [value[key] for key in MOVE_KEYS]
    for key, number in zip(MOVE_KEYS, numbers, strict=True):
        if not isinstance(number, int) or isinstance(number, bool):
            raise ProtocolError(f"{where}: {key} = {number!r} is not an integer")
    return parse_move_line(" ".join(str(number) for number in numbers), where, allow_no_move,
                           size)


def parse_json(text: str, size: int = 8) -> BotzoneInput:
    """Decode one JSON input line of a game on a `size x size` board.

    Accepts the full form `{"requests": [...], "responses": [...], "time_limit": ...}` (with
    `len(requests) == len(responses) + 1`; `data`, `globaldata`, `memory_limit` and other fields
    are ignored) and, for keep-running turns, a bare move object `{"x0": .., ..., "y2": ..}`.
    `time_limit` never refuses the input: whatever it holds is read by
    `botzone_limits.read_limit` (Botzone's wiki shows it as a string, empty).

    Raises:
        ProtocolError: bad JSON (JavaScript's `NaN` and `Infinity`, which are not JSON,
            included; nesting deeper than the decoder recurses; an integer of more digits
            than `int()` converts), a field of the wrong type or count, or a bad move, naming
            it (e.g. `requests[2]`).
    """
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise ProtocolError(f"bad JSON input: {error.msg} at column {error.colno}: "
                            f"{text.strip()[:80]!r}") from None
    except RecursionError:  # the decoder recurses once per level of nesting
        raise ProtocolError(f"bad JSON input: nested deeper than this bot reads: "
                            f"{text.strip()[:80]!r}") from None
    except ValueError as error:  # e.g. an integer longer than int() converts (4,300 digits)
        raise ProtocolError(f"bad JSON input: {error}: {text.strip()[:80]!r}") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"JSON input must be an object, got {type(value).__name__}")
    if "requests" not in value:
        if all(key in value for key in MOVE_KEYS):
            move = _move_from_object(value, "move object", allow_no_move=False, size=size)
            return BotzoneInput([move], complete=False, time_limit=None)
        raise ProtocolError("JSON input has neither a 'requests' list nor the fields of a move")
    requests, responses = value["requests"], value.get("responses", [])
    if not isinstance(requests, list) or not requests:
        raise ProtocolError("'requests' must be a non-empty list")
    if not isinstance(responses, list):
        raise ProtocolError("'responses' must be a list")
    if len(requests) != len(responses) + 1:
        raise ProtocolError(
            f"{len(requests)} requests and {len(responses)} responses: expected one request more")
    history: list[Move] = []
    for index, request in enumerate(requests):
        move = _move_from_object(request, f"requests[{index}]", allow_no_move=index == 0,
                                 size=size)
        if move is not None:
            history.append(move)
        if index < len(responses):
            history.append(_move_from_object(responses[index], f"responses[{index}]", False,
                                             size))
    limit = value.get("time_limit")
    time_limit = botzone_limits.read_limit(limit)
    notes = ()
    if time_limit is None and not botzone_limits.is_empty_limit(limit):
        notes = (f"time_limit {json.dumps(limit)} is not a positive number of seconds: "
                 "the bot's own time applies",)
    return BotzoneInput(history, complete=True, time_limit=time_limit, notes=notes)


def _refuse_constant(name: str) -> NoReturn:
    raise ProtocolError(f"bad JSON input: {name} is not JSON")


def parse_update(lines: Sequence[str], size: int = 8) -> Move:
    """The newest request of a keep-running turn, from its simple-interaction lines, on a
    `size x size` board.

    Blank lines and a lone turn-number line before the move line are tolerated.

    Raises:
        ProtocolError: naming the bad line, or when no move line is there.
    """
    for index, text in enumerate(lines):
        tokens = text.split()
        if not tokens or (len(tokens) == 1 and tokens[0].isdigit()):
            continue
        return parse_move_line(text, f"line {index + 1}", size=size)
    raise ProtocolError("the input holds no move line")


# ------------------------------------------------------------------------------------------------
# Turn logic


@dataclass(frozen=True)
class TimeControl:
    """How long each reply may take, in wall-clock seconds.

    A turn's clock starts when the process starts (its first turn) or when the turn's input has
    been read (later keep-running turns: Botzone charges CPU used between turns to the next
    one). The search stops `reply_margin` seconds before the allowance is spent, or a quarter of
    the allowance where that is less (`botzone_limits.kept_back_seconds`, the C++ bot's rule too).
    """

    # per reply, from the input being read: Botzone allows Python 6 s (botzone_limits), and 2 s are
    # kept for a machine slower or busier than this one
    turn_seconds: float = botzone_limits.PYTHON_BOT_TURN_SECONDS
    # the bot's first reply, counted from process start: FIRST_TURN_FACTOR times turn_seconds
    first_turn_seconds: float = botzone_limits.first_turn_seconds(
        botzone_limits.PYTHON_BOT_TURN_SECONDS)
    # kept back for picking the move, writing the reply, and a busy machine
    reply_margin: float = botzone_limits.PYTHON_MARGIN_SECONDS

    def __post_init__(self) -> None:
        for name in ("turn_seconds", "first_turn_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if not self.reply_margin >= 0:
            raise ValueError(f"reply_margin must be >= 0 seconds, got {self.reply_margin!r}")

    def deadline(self, clock_start: float, first_turn: bool,
                 time_limit: float | None = None) -> float:
        """The `time.perf_counter()` reading at which the search must stop.

        Args:
            clock_start: when the turn's clock started (`perf_counter()` reading).
            first_turn: the bot's first move of the game (it gets `first_turn_seconds`).
            time_limit: a JSON input's `time_limit` in seconds: Botzone's per-turn limit, doubled
                for the first turn (`botzone_limits.turn_seconds_from_time_limit`), which caps
                the allowance.
        """
        allowance = self.first_turn_seconds if first_turn else self.turn_seconds
        if time_limit is not None:
            allowance = min(allowance,
                            botzone_limits.turn_seconds_from_time_limit(time_limit, first_turn))
        return clock_start + allowance - botzone_limits.kept_back_seconds(allowance,
                                                                          self.reply_margin)


class Bot:
    """Keeps the game on a `Board` and picks replies with an `MCTSPlayer`, reusing its tree.

    Args:
        player: the searcher; with a time budget the bot sets `player.time_budget` each turn
            from the deadline it is given, with a fixed simulation count it searches that many.
        start: the board (a `BoardSpec`, a name such as "standard10" or a start position string;
            Botzone's 8x8 when None); the player must play its size.
    """

    def __init__(self, player: MCTSPlayer, start: BoardSpec | str | None = None) -> None:
        self.player = player
        self.start = board_spec(start)
        self.board = Board(start=self.start)
        self.last_search_seconds = 0.0

    def sync(self, history: Sequence[Move]) -> None:
        """Bring the board to the position after `history` (all moves so far, oldest first).

        When `history` extends the game the bot already holds, only the new moves are played and
        the search tree follows them; otherwise the game is replayed from the start.

        Raises:
            ProtocolError: naming the first illegal move (its number, Botzone text and side).
        """
        known = self.board.move_stack
        if list(history[: len(known)]) != known:
            self.board = Board(start=self.start)
            self.player.reset()
            known = []
        for move in history[len(known):]:
            self.play(move)

    def play(self, move: Move) -> None:
        """Play `move` (either side's) on the board, moving the search tree along.

        Raises:
            ProtocolError: `move` is illegal (naming it, its number and the reason); the board
                is unchanged.
        """
        try:
            self.board.push(move)  # checks the move; the tree must see the board before it
        except IllegalMoveError as error:
            raise ProtocolError(f"move {self.board.ply + 1} of the game, {move.to_botzone()!r}: "
                                f"{error}") from None
        self.board.pop()
        self.player.observe(self.board, move)
        self.board.push(move)

    def reply(self, history: Sequence[Move], deadline: float | None = None) -> Move | None:
        """The bot's move after `history`, already played on its board; None if it has no move.

        Args:
            history: every move played so far, oldest first, ending with the opponent's newest.
            deadline: `time.perf_counter()` reading at which the search stops (time-budget
                players only; None keeps the player's own budget).

        Raises:
            ProtocolError: an illegal move in `history`.
        """
        self.sync(history)
        if self.board.is_game_over():
            return None
        if deadline is not None and self.player.time_budget is not None:
            self.player.time_budget = max(deadline - time.perf_counter(), MIN_SEARCH_SECONDS)
        started = time.perf_counter()
        move = self.player.choose_move(self.board)
        self.last_search_seconds = time.perf_counter() - started
        self.play(move)
        return move

    def debug_text(self) -> str:
        """`"<simulations> simulations, value <v>, <seconds> s[, tree full]"` about the last search,
        then what is known for sure: a proof (`proven win in N plies`) and, once the amazons are
        separated and the regions decide it, `decided: Black wins by at least N moves`; with a
        model that has the ownership head, the territory it predicts after the reply
        (`net territory: Black +5.2`)."""
        report = self.player.last_report
        if report is None:
            return "no search"
        full = ", tree full" if self.player.tree_full else ""
        text = (f"{report.simulations} simulations, value {report.root_value:+.3f}, "
                f"{self.last_search_seconds:.2f} s{full}")
        if report.proven:
            text += f", {report.verdict()}"
        adjudication = None if self.board.is_game_over() else self.board.adjudicate()
        if adjudication is not None:
            text += f", {adjudication.describe()}"
        balance = predicted_territory(self.player.evaluator, self.board)
        if balance is not None:
            text += f", {describe_territory(balance)}"
        return text


# ------------------------------------------------------------------------------------------------
# Output


def format_simple_reply(move: Move | None) -> str:
    """The reply line `x0 y0 x1 y1 x2 y2` (`-1 -1 -1 -1 -1 -1` when there is no move)."""
    return NO_MOVE if move is None else move.to_botzone()


def format_json_reply(move: Move | None, debug: str) -> str:
    """One JSON line `{"response": {"x0": .., ..., "y2": ..}, "debug": ...}`."""
    values = [-1] * 6 if move is None else [int(token) for token in move.to_botzone().split()]
    return json.dumps({"response": dict(zip(MOVE_KEYS, values, strict=True)), "debug": debug})


# ------------------------------------------------------------------------------------------------
# Process


def process_start_time() -> float:
    """The `time.perf_counter()` reading of this process's start (Linux), else of now.

    Botzone's clock for a bot's first turn runs from the launch of the process, so interpreter
    start-up and imports count; `/proc/self/stat` says when the process started.
    """
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    except (OSError, ValueError, IndexError):
        return now
    return now - max(age, 0.0)


class _InputEnded(Exception):
    """End of input where a turn was expected to begin (not an error in keep-running mode)."""


def _read_line(stream: TextIO) -> str:
    line = stream.readline()
    if not line:
        raise EOFError
    return line


@dataclass(frozen=True)
class _Turn:
    history: list[Move]  # every move so far, the newest request last
    time_limit: float | None  # seconds, from a JSON input
    json: bool  # the input was JSON, so the reply is too
    notes: tuple[str, ...] = ()  # what the input held that was ignored (BotzoneInput.notes)


def _read_first_input(stream: TextIO, size: int) -> _Turn:
    """Read one whole first input of the process (a simple transcript or a JSON line) of a
    `size x size` game."""
    try:
        first = _read_line(stream)
        while not first.strip():
            first = _read_line(stream)
    except EOFError:
        raise ProtocolError("input ended before the turn number (or JSON object)") from None
    if first.lstrip().startswith("{"):
        request = parse_json(first, size)
        if not request.complete:
            raise ProtocolError("the first JSON input must hold 'requests' (and 'responses')")
        return _Turn(request.history, request.time_limit, json=True, notes=request.notes)
    turn = _parse_turn_number(first, "line 1")
    lines = [first]
    for _ in range(2 * turn - 1):
        try:
            lines.append(_read_line(stream))
        except EOFError:
            raise ProtocolError(
                f"input ended after {len(lines) - 1} of the {2 * turn - 1} move lines that turn "
                f"{turn} needs") from None
    return _Turn(parse_simple(lines, size), None, json=False)


def _read_update(stream: TextIO, history: list[Move], size: int) -> _Turn:
    """Read a later keep-running input: the newest request, appended to `history`."""
    lines: list[str] = []
    while True:
        try:
            line = _read_line(stream)
        except EOFError:
            if any(text.strip() for text in lines):
                raise ProtocolError(
                    f"input ended after {lines[-1].strip()!r} without a move line") from None
            raise _InputEnded from None
        if line.lstrip().startswith("{"):
            request = parse_json(line, size)
            if not request.history:
                raise ProtocolError("a later turn's JSON input holds no move "
                                    "(only the first side's first request)")
            return _Turn(history + request.history[-1:], request.time_limit, json=True,
                         notes=request.notes)
        lines.append(line)
        tokens = line.split()
        if tokens and not (len(tokens) == 1 and tokens[0].isdigit()):
            return _Turn(history + [parse_update(lines, size)], None, json=False)


class _UsageError(Exception):
    """Bad command-line options (argparse's `error`, without exiting)."""


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="python -m amazons.botzone",
        description="Game of the Amazons bot for Botzone (simple or JSON interaction).")
    parser.add_argument("--model", default="default",
                        help="'default' (the shipped model of the board's size), 'none' (random "
                             "playouts) or an exported .npz model (python -m amazons.export "
                             "CKPT OUT.npz)")
    parser.add_argument("--board", default=DEFAULT_BOARD, metavar="NAME|START",
                        help=f"the board: one of {', '.join(BOARDS)} or a start position string "
                             f"(default {DEFAULT_BOARD}, Botzone's; off 8x8 a network needs the "
                             "pooled value head, as the shipped 10x10 model has)")
    parser.add_argument("--time", type=float, default=TimeControl.turn_seconds,
                        help="seconds per reply, from reading the input (from process start for a "
                             f"process's first input; default {TimeControl.turn_seconds})")
    parser.add_argument("--first-time", type=float, default=None,
                        help="seconds from process start to the bot's first reply (default: "
                             f"{botzone_limits.FIRST_TURN_FACTOR:g} times --time, as Botzone gives "
                             f"the first turn: {TimeControl.first_turn_seconds})")
    parser.add_argument("--simulations", type=int, default=None,
                        help="search this many simulations per move instead of a time budget")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--keep-running", dest="keep_running", action="store_true", default=True,
                      help="stay alive between turns, keeping the tree and the model (the default)")
    mode.add_argument("--restart-per-turn", dest="keep_running", action="store_false",
                      help="answer one turn and exit (Botzone then restarts the bot every turn)")
    parser.add_argument("--tree-mb", type=float, default=TREE_MEMORY_MB,
                        help=f"MiB for the search tree (default {TREE_MEMORY_MB:g}); a full tree "
                             "ends the turn's search early")
    parser.add_argument("--seed", type=int, default=None, help="seed of playouts and root noise")
    return parser


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None,
         started: float | None = None) -> int:
    """Run the bot until its turn is answered (or, keep-running, until the input ends).

    Args:
        argv: command-line arguments (default `sys.argv[1:]`).
        stdin, stdout, stderr: the streams (default the process's).
        started: `time.perf_counter()` reading from which the first turn is timed (default:
            this process's start).

    Returns:
        0 after a normal end; 2 for bad options, a model that cannot be loaded, malformed input
        or an illegal move (with a message on `stderr` and nothing more on `stdout`).
    """
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    clock_start = process_start_time() if started is None else started
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        for option, value in (("--time", args.time), ("--first-time", args.first_time),
                              ("--simulations", args.simulations), ("--tree-mb", args.tree_mb)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise _UsageError(f"{option} must be > 0, got {value}")
        first_time = (botzone_limits.first_turn_seconds(args.time) if args.first_time is None
                      else args.first_time)
        clock = TimeControl(turn_seconds=args.time, first_turn_seconds=first_time)
        try:
            start = board_spec(args.board)
        except NotationError as error:
            raise _UsageError(f"--board: {error}") from None
    except _UsageError as error:
        print(f"{parser.prog}: error: {error}", file=stderr)
        return EXIT_BAD_INPUT
    release_library_pages(LLVM_LIBRARY)  # Numba's import touched LLVM's code: give it back
    # Loading the search kernels from Numba's cache (the tree's first kernel while the player is
    # built, then all of them in warm_up) touches LLVM again; after that LLVM is needed no more.
    with releasing_library_pages(LLVM_LIBRARY):
        try:
            player = build_model_player(
                args.model, simulations=args.simulations,
                time_budget=None if args.simulations is not None else clock.turn_seconds,
                seed=args.seed, tree_memory_mb=args.tree_mb, name=f"botzone:{args.model}",
                stop_when_full=True, board_size=start.size)
        except SearchConfigError as error:
            print(f"{parser.prog}: error: --tree-mb: {error}", file=stderr)
            return EXIT_BAD_INPUT
        except (FileNotFoundError, ValueError, OSError) as error:
            print(f"{parser.prog}: cannot load model {args.model!r}: {error}", file=stderr)
            return EXIT_BAD_INPUT
        player.search_for(start.size)  # the tree, allocated now rather than in the first turn
        warm_up()
    bot = Bot(player, start)
    noted = False  # a note on ignored input is written once per process, not every turn
    try:
        turn = _read_first_input(stdin, start.size)
        while True:
            if turn.notes and not noted:
                print(f"{parser.prog}: note: {turn.notes[0]}", file=stderr, flush=True)
                noted = True
            first_turn = len(turn.history) <= 1
            move = bot.reply(turn.history, clock.deadline(clock_start, first_turn, turn.time_limit))
            reply = (format_json_reply(move, bot.debug_text()) if turn.json
                     else format_simple_reply(move))
            print(reply, file=stdout, flush=True)
            if not args.keep_running:
                return EXIT_OK
            print(KEEP_RUNNING_MARKER, file=stdout, flush=True)
            turn = _read_update(stdin, bot.board.move_stack, start.size)
            clock_start = time.perf_counter()
    except _InputEnded:
        return EXIT_OK
    except ProtocolError as error:
        print(f"{parser.prog}: bad input: {error}", file=stderr)
        return EXIT_BAD_INPUT

