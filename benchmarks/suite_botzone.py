"""Botzone bot timing: how long replies take, measured from outside the bot process.

For each model the suite starts a fresh `python -m amazons.botzone --keep-running` process (cold:
a new interpreter, imports, model load; Numba's on-disk cache as this checkout has it), sends
Black's first request at once and times the first reply from the process start; then it plays
later turns against a seeded random opponent and times each reply from the moment the request
is written. Botzone's limits for Python are 6 s a turn and 12 s for the first.

Models: `--model none` (random playouts; `botzone.none_*`) and a network (the bare
`botzone.*` figures): `amazons/models/default.pt` when it exists, else an untrained `tiny`
network saved to a temporary folder (`botzone.net_is_default` says which; the script prints it).
Full runs use the bot's default time control; `--quick` uses 1 s a turn and 3 s for the first.
"""

from __future__ import annotations

import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from amazons.board import Board, Move
from amazons.botzone import KEEP_RUNNING_MARKER, NO_MOVE, TimeControl
from amazons.models import DEFAULT_MODEL_NAME
from amazons.players import RandomPlayer

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO / "amazons" / "models" / DEFAULT_MODEL_NAME


class _KeepRunningBot:
    """A bot process in keep-running mode with a line reader that can time out."""

    def __init__(self, args: list[str]) -> None:
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "amazons.botzone", "--keep-running", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            bufsize=1, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def ask(self, text: str, timeout: float = 60.0) -> tuple[str, float]:
        """Send one input; return the reply line and its perf_counter() arrival time."""
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        reply = self._lines.get(timeout=timeout)
        arrived = time.perf_counter()
        if reply is None:
            raise RuntimeError(f"the bot exited: {self.process.stderr.read()}")
        if self._lines.get(timeout=timeout) != KEEP_RUNNING_MARKER:
            raise RuntimeError("the bot did not ask to keep running")
        return reply, arrived

    def close(self) -> None:
        self.process.stdin.close()
        if self.process.wait(timeout=60) != 0:
            raise RuntimeError(f"the bot failed: {self.process.stderr.read()}")


def time_game(model: str, turn_seconds: float, first_seconds: float, later_turns: int,
              seed: int = 0) -> tuple[float, list[float]]:
    """Seconds from process start to the first reply, and each later reply's seconds."""
    bot = _KeepRunningBot(["--model", model, "--time", str(turn_seconds),
                           "--first-time", str(first_seconds), "--seed", str(seed)])
    try:
        board, opponent = Board(), RandomPlayer(seed=seed)
        reply, arrived = bot.ask(f"1\n{NO_MOVE}")
        first = arrived - bot.started
        later = []
        for _ in range(later_turns):
            board.push(Move.from_botzone(reply))
            if board.is_game_over():
                break
            move = opponent.choose_move(board)
            board.push(move)
            sent = time.perf_counter()
            reply, arrived = bot.ask(move.to_botzone())
            if reply == NO_MOVE:
                break
            later.append(arrived - sent)
        bot.close()
    finally:
        if bot.process.poll() is None:
            bot.process.kill()
            bot.process.wait()
    return first, later


def _figures(prefix: str, first: float, later: list[float]) -> dict[str, float]:
    return {
        f"{prefix}first_reply_s": first,
        f"{prefix}reply_s_median": statistics.median(later),
        f"{prefix}reply_s_max": max(later),
    }


def run(quick: bool) -> dict[str, float]:
    """Measure; returns `botzone.*` metrics (seconds)."""
    clock = TimeControl()
    turn_seconds, first_seconds, later_turns = (
        (1.0, 3.0, 3) if quick else (clock.turn_seconds, clock.first_turn_seconds, 6))
    none_first, none_later = time_game("none", turn_seconds, first_seconds, later_turns)
    with tempfile.TemporaryDirectory() as folder:
        if DEFAULT_MODEL.is_file():
            model, label = str(DEFAULT_MODEL), f"the shipped model {DEFAULT_MODEL}"
        else:
            import torch

            from amazons.checkpoint import save_model
            from amazons.net import PolicyValueNet, net_config

            torch.set_num_threads(1)
            torch.manual_seed(0)
            model = str(save_model(Path(folder) / "tiny.pt", PolicyValueNet(net_config("tiny"))))
            label = f"an untrained tiny network ({DEFAULT_MODEL_NAME} is not there)"
        net_first, net_later = time_game(model, turn_seconds, first_seconds, later_turns)
    print(f"botzone: network = {label}; budget {turn_seconds} s a turn, first reply "
          f"{first_seconds} s from process start; {later_turns} later turns per model")
    return {
        **_figures("botzone.", net_first, net_later),
        "botzone.budget_s": turn_seconds,
        "botzone.first_budget_s": first_seconds,
        "botzone.net_is_default": float(DEFAULT_MODEL.is_file()),
        **_figures("botzone.none_", none_first, none_later),
    }
