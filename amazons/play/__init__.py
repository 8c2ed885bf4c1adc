"""Play against the AI in a terminal, or step through a recorded game: `python -m amazons.play`.

    python -m amazons.play [--side black|white|random] [--model PATH|default|none]
                           [--board NAME|START] [--simulations N | --time SECONDS]
                           [--save FILE] [--no-color] [--seed N]
    python -m amazons.play --replay FILE [--game K]

`PlaySession` runs one game of a human against an `MCTSPlayer` over text streams, on any board
(`--board standard10`: the standard 10x10 game, White first; Botzone's 8x8 by default): it reads
moves (algebraic of the board's size, `d8-d4/f6` on 8x8, `d1-d7/g7` on 10x10, or Botzone
coordinates `3 0 3 4 5 2`) and commands (`undo`, `hint`, `moves`, `board`,
`help`, `quit`), answers bad input and asks again, and returns the game as a `GameRecord`.
`ReplaySession` steps through a record. `main(argv, stdin, stdout, stderr)` wires both to the
command line and returns the exit status, so the whole loop runs under tests with string streams.

The AI is built by `amazons.players.factory.build_model_player`, the builder of every model-backed
player: rollout MCTS for `--model none`; a network model (`default`, the shipped one, or an exported
`.npz` model) runs in numpy (`amazons.neural.numpy_net`), one BLAS thread: terminal play never
imports torch. Imports `board`, `players.factory`, `players.player` and `players.records`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from amazons.board import (
    BLACK,
    COLOR_NAMES,
    FILES,
    WHITE,
    Board,
    IllegalMoveError,
    Move,
    NotationError,
)
from amazons.boards import BOARDS, DEFAULT_BOARD, BoardSpec, board_spec
from amazons.players.factory import build_model_player
from amazons.players.player import MCTSPlayer, describe_territory, predicted_territory
from amazons.players.records import (
    RESULT_TEXT,
    GameRecord,
    RecordError,
    read_records,
    write_records,
)

__all__ = ["PlaySession", "ReplaySession", "main", "render_board"]

# ANSI escapes; a terminal that does not understand them is asked for `--no-color` or NO_COLOR.
_RESET = "\x1b[0m"
_STYLE = {
    "B": "\x1b[1;31m",  # Black's amazons: bold red
    "W": "\x1b[1;36m",  # White's amazons: bold cyan
    "x": "\x1b[33m",  # arrows: yellow
    ".": "\x1b[2m",  # empty squares: dim
}
_HIGHLIGHT = "\x1b[7m"  # the last move's three squares: reverse video

def move_help(board: Board) -> str:
    """How to type a move on `board`'s size, with one of its legal moves (the middle one of the
    engine's list) as the example, in both notations."""
    size = board.size
    legal = board.legal_move_array()
    example = Move(*legal[legal.shape[0] // 2].tolist(), size=size) if legal.shape[0] else None
    algebraic, botzone = (str(example), example.to_botzone()) if example else ("", "")
    return (f"Type a move as algebraic  {algebraic}  (amazon's square - landing square / arrow "
            f"square; files a-{FILES[size - 1]}\nleft to right, ranks {size}-1 top to bottom) or "
            f"as Botzone coordinates  {botzone}  (x0 y0 x1 y1 x2 y2;\nx = column 0-{size - 1} "
            f"from the left, y = row 0-{size - 1} from the top).")


MOVE_HELP = move_help(Board())  # Botzone's 8x8
COMMAND_HELP = (
    "Commands: moves (some legal moves), hint (the AI's view of your position), undo (take back\n"
    "your last move and the AI's reply), board (show the board), help, quit (or end of input;\n"
    "the game is saved)."
)


def render_board(board: Board, last_move: Move | None = None, color: bool = False) -> str:
    """The board with algebraic files/ranks and Botzone x/y indices on its edges.

    The last move's squares (from, to, arrow) are bracketed, or in reverse video with `color`,
    which also colours the pieces with ANSI escapes.
    """
    size = board.size
    black, white, arrows = board.bitboards()
    marked = set() if last_move is None else {last_move.src, last_move.dst, last_move.arrow}
    lines = ["    " + "".join(f" {file} " for file in FILES[:size]).rstrip(),
             "    " + "".join(f" {x} " for x in range(size)) + "  x/y"]
    for y in range(size):
        cells = []
        for x in range(size):
            square = y * size + x
            bit = 1 << square
            piece = "B" if black & bit else "W" if white & bit else "x" if arrows & bit else "."
            if color:
                style = _STYLE[piece] + (_HIGHLIGHT if square in marked else "")
                cells.append(f"{style} {piece} {_RESET}")
            else:
                cells.append(f"[{piece}]" if square in marked else f" {piece} ")
        lines.append(f"{size - y:>2}  {''.join(cells)}  {y}")
    return "\n".join(lines)


def _sentence(error: Exception) -> str:
    text = str(error)
    return text[:1].upper() + text[1:] + "."


def _describe_move(move: Move) -> str:
    return f"{move}  ({move.to_botzone()})"


def _wants_color(stream: TextIO, disabled: bool, environ: Mapping[str, str]) -> bool:
    """Colour only on a terminal, unless disabled or NO_COLOR is set (https://no-color.org)."""
    if disabled or environ.get("NO_COLOR", ""):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class _Console:
    """Prompts and lines over text streams; echoes input that does not come from a terminal, so
    a transcript of a scripted session reads like a typed one."""

    def __init__(self, stdin: TextIO, stdout: TextIO) -> None:
        self.stdin = stdin
        self.stdout = stdout
        isatty = getattr(stdin, "isatty", None)
        self.echo = not (isatty and isatty())

    def say(self, text: str = "") -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def ask(self, prompt: str) -> str | None:
        """One stripped line, or None at the end of the input."""
        self.stdout.write(prompt)
        self.stdout.flush()
        line = self.stdin.readline()
        if not line:
            self.say()
            return None
        if self.echo:
            self.say(line.rstrip("\n"))
        return line.strip()


class PlaySession:
    """One game of a human against an `MCTSPlayer`, over text streams.

    Args:
        ai: the AI; it observes every move, so it keeps its search tree across turns.
        human_side: BLACK or WHITE, the human's colour.
        stdin, stdout: where moves and commands are read and everything is written.
        color: ANSI colours in the board diagram.
        human_name: the human's name in the record.
        headers: extra headers for the record (model, search, seed, ...).
        start: the board (a `BoardSpec`, a name such as "standard10" or a start position
            string; Botzone's 8x8 when None); the AI must play its size.
    """

    def __init__(self, ai: MCTSPlayer, human_side: int, stdin: TextIO, stdout: TextIO, *,
                 color: bool = False, human_name: str = "human",
                 headers: Mapping[str, str] | None = None,
                 start: BoardSpec | str | None = None) -> None:
        if human_side not in (BLACK, WHITE):
            raise ValueError(f"human_side must be BLACK (0) or WHITE (1), got {human_side!r}")
        self.ai = ai
        self.human_side = human_side
        self.console = _Console(stdin, stdout)
        self.color = color
        self.human_name = human_name
        self.headers = dict(headers or {})
        self.board = Board(start=start)
        self.started = datetime.datetime.now()
        self._last_move: Move | None = None
        self._board_shown = False
        self._decided = False  # the adjudication has been announced

    # -- the game -------------------------------------------------------------------------------

    def run(self) -> GameRecord:
        """Play until the game ends or the human quits (`quit` or end of input); return the record.

        A KeyboardInterrupt propagates with the board intact: `record()` still gives the game.
        """
        ai_color = COLOR_NAMES[1 - self.human_side]
        self.console.say(f"You play {COLOR_NAMES[self.human_side]} "
                         f"({'BW'[self.human_side]}); the AI ({self.ai.name}) plays {ai_color}.")
        if self.board.start is not None and self.board.start.name != "botzone8":
            self.console.say(f"Board: {self.board.start.label()} ({self.board.size}x"
                             f"{self.board.size}), {COLOR_NAMES[self.board.turn]} moves first.")
        self.console.say(move_help(self.board))
        self.console.say("Type 'help' for the commands.")
        while not self.board.is_game_over():
            if self.board.turn != self.human_side:
                self.ai_move()
                continue
            if not self._board_shown:
                self.show_board()
            line = self.console.ask(f"{COLOR_NAMES[self.board.turn]} to move> ")
            if line is None or line.lower() in ("quit", "exit", "q"):
                self.console.say("Stopped; the game is not finished.")
                return self.record()
            self.handle(line)
        self.show_board()
        winner = self.board.winner()
        outcome = "You win" if winner == self.human_side else "The AI wins"
        self.console.say(f"{outcome}: {COLOR_NAMES[1 - winner]} has no legal move "
                         f"({RESULT_TEXT[winner]}).")
        return self.record()

    def handle(self, line: str) -> None:
        """Answer one line typed by the human (a command or a move) when it is the human's turn."""
        command = line.lower()
        if not command:
            self.console.say("Type a move, or 'help'.")
        elif command in ("help", "?"):
            self.console.say(move_help(self.board))
            self.console.say(COMMAND_HELP)
        elif command == "moves":
            self.list_moves()
        elif command == "hint":
            self.hint()
        elif command == "undo":
            self.undo()
        elif command == "board":
            self.show_board()
        else:
            self.human_move(line)

    def human_move(self, text: str) -> bool:
        """Play `text` for the human if it is a legal move; otherwise explain why not."""
        try:
            move = self.board.parse_move(text)
        except NotationError as error:
            example = Move(*self.board.legal_move_array()[0].tolist(), size=self.board.size)
            self.console.say(f"{_sentence(error)} Type a move like {example} or "
                             f"{example.to_botzone()}, or 'help'.")
            return False
        try:
            self.board.push(move)  # the engine says why a move is illegal
        except IllegalMoveError as error:
            self.console.say(f"{_sentence(error)} Type 'moves' for some legal moves.")
            return False
        self.board.pop()
        self._play(move)
        self.console.say(f"You play {_describe_move(move)}")
        return True

    def ai_move(self) -> Move:
        """Let the AI search, play its move and print the move and a one-line summary."""
        started = time.perf_counter()
        move = self.ai.choose_move(self.board.copy())
        seconds = time.perf_counter() - started
        report = self.ai.last_report
        color = COLOR_NAMES[self.board.turn]
        self._play(move)
        self.console.say(f"AI ({color}) plays {_describe_move(move)}")
        if report is not None:
            verdict = f"; {report.verdict()}" if report.proven else ""
            self.console.say(f"  value {report.root_value:+.2f} for {color}, "
                             f"{report.simulations} simulations, {seconds:.1f} s{verdict}")
        return move

    def _play(self, move: Move) -> None:
        self.ai.observe(self.board, move)
        self.board.push(move)
        self._last_move = move
        self._board_shown = False
        if not self._decided and not self.board.is_game_over():
            adjudication = self.board.adjudicate()
            if adjudication is not None:
                self._decided = True
                self.console.say(adjudication.describe())

    # -- commands -------------------------------------------------------------------------------

    def show_board(self) -> None:
        """Print the board, the last move and whose turn it is."""
        self.console.say()
        self.console.say(render_board(self.board, self._last_move, self.color))
        if self._last_move is not None:
            mover = COLOR_NAMES[1 - self.board.turn]
            self.console.say(f"last move: {mover} {_describe_move(self._last_move)}")
        self.console.say(f"{COLOR_NAMES[self.board.turn]} to move, ply {self.board.ply}")
        self._board_shown = True

    def list_moves(self, count: int = 8) -> None:
        """Print the number of legal moves and `count` of them spread over the list."""
        moves = self.board.legal_move_array()
        spread = np.linspace(0, moves.shape[0] - 1, min(count, moves.shape[0]))
        picks = np.unique(spread.astype(np.int64))
        self.console.say(f"{moves.shape[0]} legal moves, for example:")
        for row in moves[picks].tolist():
            self.console.say(f"  {_describe_move(Move(*row, size=self.board.size))}")

    def hint(self) -> None:
        """Search the current position with the AI and print its top moves, shares and values,
        then, when the model has the ownership head, the territory balance it predicts."""
        self.ai.choose_move(self.board.copy())
        report = self.ai.last_report
        if report is None:
            self.console.say("No hint: the search reported nothing.")
            return
        self.console.say(f"Hint (values for {COLOR_NAMES[self.board.turn]}, the side to move):")
        self.console.say(report.format(top=5))
        balance = predicted_territory(self.ai.evaluator, self.board)
        if balance is not None:
            self.console.say(describe_territory(balance))

    def undo(self) -> None:
        """Take back the human's last move and the AI's reply."""
        if self.board.ply < 2:  # on the human's turn, the human has moved iff two plies exist
            self.console.say("Nothing to undo: you have not moved yet.")
            return
        reply = self.board.pop()
        mine = self.board.pop()
        history = self.board.move_stack
        self._last_move = history[-1] if history else None
        self._board_shown = False
        self._decided = self.board.adjudicate() is not None
        self.console.say(f"Took back your move {mine} and the AI's reply {reply}.")

    # -- the record -----------------------------------------------------------------------------

    def record(self) -> GameRecord:
        """The game so far (Result `*` while unfinished), with the session's headers."""
        names = {self.human_side: self.human_name, 1 - self.human_side: self.ai.name}
        return GameRecord.from_game(
            self.board.move_stack, names[BLACK], names[WHITE], event="play",
            date=self.started.date().isoformat(), start=self.board.start,
            Time=self.started.strftime("%H:%M:%S"), **self.headers,
        )


class ReplaySession:
    """Steps through a recorded game over text streams.

    Interactive: Enter (or `n`) shows the next position, `b` the previous one, a number that ply,
    `q` or end of input stops. Otherwise every position is printed in turn.

    Args:
        record: the game, on the board its `Board` header names.
        stdin, stdout: the streams.
        interactive: ask between positions (for a terminal) or print them all.
        color: ANSI colours in the board diagram.
    """

    def __init__(self, record: GameRecord, stdin: TextIO, stdout: TextIO, *,
                 interactive: bool, color: bool = False) -> None:
        self.record = record
        self.console = _Console(stdin, stdout)
        self.interactive = interactive
        self.color = color
        self.board = Board(start=record.start)

    def run(self) -> None:
        """Show the headers, then the positions."""
        for key, value in self.record.headers.items():
            self.console.say(f"{key}: {value}")
        self.console.say(f"{len(self.record.moves)} moves")
        self.show()
        if not self.interactive:
            while self.board.ply < len(self.record.moves):
                self.board.push(self.record.moves[self.board.ply])
                self.show()
            return
        while True:
            line = self.console.ask("[Enter] next, b back, number: go to ply, q quit> ")
            if line is None or line.lower() in ("q", "quit", "exit"):
                return
            command = line.lower()
            if command in ("", "n", "next"):
                self.go_to(self.board.ply + 1)
            elif command in ("b", "back"):
                self.go_to(self.board.ply - 1)
            elif command.isdigit():
                self.go_to(int(command))
            else:
                self.console.say(f"Unknown command {line!r}: Enter, b, a ply number or q.")

    def go_to(self, ply: int) -> None:
        """Show the position after `ply` moves (explains when it is outside the game)."""
        if ply < 0:
            self.console.say("At the start already.")
            return
        if ply > len(self.record.moves):
            self.console.say(f"At the end already (result {self.record.result}).")
            return
        while self.board.ply > ply:
            self.board.pop()
        while self.board.ply < ply:
            self.board.push(self.record.moves[self.board.ply])
        self.show()

    def show(self) -> None:
        """Print the current position and the move that led to it."""
        ply = self.board.ply
        last = self.record.moves[ply - 1] if ply else None
        self.console.say()
        if last is None:
            self.console.say("ply 0: start")
        else:
            mover = COLOR_NAMES[1 - self.board.turn]  # the side that played `last`
            self.console.say(f"ply {ply}: {mover} {_describe_move(last)}")
        self.console.say(render_board(self.board, last, self.color))
        if ply == len(self.record.moves):
            over = self.board.is_game_over()
            ending = f"{COLOR_NAMES[self.board.turn]} has no legal move" if over else "not finished"
            self.console.say(f"end of the record: result {self.record.result} ({ending})")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m amazons.play",
        description="Play Amazons against the AI in the terminal, or replay a recorded game.")
    parser.add_argument("--side", choices=("black", "white", "random"), default="black",
                        help="your colour (default black; Black moves first on botzone8, White "
                             "on standard10)")
    parser.add_argument("--board", default=DEFAULT_BOARD, metavar="NAME|START",
                        help=f"the board: one of {', '.join(BOARDS)}, or a start position string "
                             f"(default {DEFAULT_BOARD}; off 8x8 a network needs the pooled value "
                             f"head, as the shipped 10x10 model has)")
    parser.add_argument("--model", default="default",
                        help="'default' (the shipped network of the board's size), 'none' "
                             "(rollout MCTS, no network) or an exported .npz model "
                             "(python -m amazons.export; default: default)")
    strength = parser.add_mutually_exclusive_group()
    strength.add_argument("--simulations", type=int, default=None,
                          help="AI simulations per move (default 200)")
    strength.add_argument("--time", type=float, default=None, metavar="SECONDS",
                          help="AI thinking time per move instead of a simulation count")
    parser.add_argument("--save", type=Path, default=None, metavar="FILE",
                        help="add the game to this record file (default: games/play-TIMESTAMP.txt)")
    parser.add_argument("--no-color", action="store_true", help="no ANSI colours")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the AI and of --side random")
    parser.add_argument("--replay", type=Path, default=None, metavar="FILE",
                        help="step through a game of this record file instead of playing")
    parser.add_argument("--game", type=int, default=1, metavar="K",
                        help="with --replay: the game number in the file (default 1)")
    return parser


def _default_save_path(started: datetime.datetime) -> Path:
    stem = f"play-{started:%Y%m%d-%H%M%S}"
    path = Path("games") / f"{stem}.txt"
    copy = 2
    while path.exists():
        path = Path("games") / f"{stem}-{copy}.txt"
        copy += 1
    return path


def _replay(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO,
            color: bool) -> int:
    try:
        records = read_records(args.replay)
    except (OSError, RecordError) as error:
        print(f"play: cannot replay {args.replay}: {error}", file=stderr)
        return 2
    if not 1 <= args.game <= len(records):
        games = f"{len(records)} game{'s' if len(records) != 1 else ''}"
        print(f"play: {args.replay} holds {games}; --game {args.game} is not one of them",
              file=stderr)
        return 2
    isatty = getattr(stdin, "isatty", None)
    ReplaySession(records[args.game - 1], stdin, stdout, interactive=bool(isatty and isatty()),
                  color=color).run()
    return 0


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Command line: play against the AI, or replay with `--replay FILE`; returns the exit status.

    0 after a game (finished or quit) or a replay; 2 for bad arguments, a model that cannot be
    loaded, or a record that cannot be read; 1 when the game cannot be saved; 130 after Ctrl-C
    (the game is saved first).
    """
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    parser = _parser()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv)
            if args.simulations is not None and args.simulations < 1:
                parser.error(f"--simulations must be at least 1, got {args.simulations}")
            if args.time is not None and not args.time > 0:
                parser.error(f"--time must be a positive number of seconds, got {args.time}")
    except SystemExit as exit_:
        return int(exit_.code or 0)
    color = _wants_color(stdout, args.no_color, os.environ)
    if args.replay is not None:
        return _replay(args, stdin, stdout, stderr, color)

    try:
        start = board_spec(args.board)
    except NotationError as error:
        print(f"play: --board: {error}", file=stderr)
        return 2
    try:
        ai = build_model_player(args.model, simulations=args.simulations, time_budget=args.time,
                                seed=args.seed, board_size=start.size)
    except (OSError, ValueError, ImportError) as error:
        hint = "" if args.model == "none" else " (--model none plays without a network)"
        print(f"play: cannot load the model {args.model!r}: {error}{hint}", file=stderr)
        return 2
    if args.side == "random":
        human_side = int(np.random.default_rng(args.seed).integers(2))
    else:
        human_side = BLACK if args.side == "black" else WHITE
    if args.time is not None:
        search = f"{args.time:g} s per move"
    else:
        search = f"{ai.simulations} simulations"
    headers = {"Model": args.model, "Search": search}
    if args.seed is not None:
        headers["Seed"] = str(args.seed)
    session = PlaySession(ai, human_side, stdin, stdout, color=color, headers=headers,
                          start=start)
    status = 0
    try:
        record = session.run()
    except KeyboardInterrupt:
        print("\ninterrupted", file=stdout)
        record, status = session.record(), 130
    if not record.moves:
        print("No moves were played; nothing saved.", file=stdout)
        return status
    path = args.save if args.save is not None else _default_save_path(session.started)
    try:
        write_records(path, [record], append=True)
    except OSError as error:
        print(f"play: cannot save the game to {path}: {error}", file=stderr)
        return 1
    print(f"Game saved to {path} (replay: python -m amazons.play --replay {path})", file=stdout)
    return status

