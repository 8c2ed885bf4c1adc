"""Botzone bot: reply times and peak memory of whole keep-running games, measured from outside.

For each model the suite starts a fresh `python -m amazons.botzone` process (keep-running, the
default; cold: a new interpreter, imports, model load, Numba's kernels from its on-disk cache as
this checkout has it), sends Black's first request at once and times the first reply from the
process start; then it plays the whole game against the greedy player (`amazons.players`), timing
each later reply from the moment the request is written. The talk is Botzone's JSON interaction,
so every reply's `debug` field says how many simulations the search ran and whether the tree
filled up. After the last reply it reads the bot process's peak resident memory (`VmHWM` in
`/proc/PID/status`) and checks that torch is not mapped into it.

Keys, for the shipped model `amazons/models/default.npz` (bare `botzone.*`) and for
`--model none` (random playouts, `botzone.none_*`):
* `first_reply_s`: process start to the first reply (Botzone allows 12 s to Python; the bot's
  default budget is 8 s);
* `reply_s_median`, `reply_s_max`: the later replies (Botzone: 6 s; the bot's budget: 4 s);
* `max_rss_mb`: peak resident memory of the process over the game, in MiB (2**20 bytes);
  `end_rss_mb`: its resident memory after the last reply;
* `turns`, `tree_full_turns`, `simulations_median`: the bot's replies, how many of them ended
  because the tree had filled its `--tree-mb` share, and the median simulations per reply.
`botzone.budget_s` and `botzone.first_budget_s` record the time control. Full runs use the bot's
defaults (4 s a turn, 8 s for the first reply); `--quick` uses 1 s and 3 s.
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from amazons._memory import peak_rss_mb, rss_mb
from amazons.board import Board, Move
from amazons.botzone import KEEP_RUNNING_MARKER, MOVE_KEYS, TimeControl
from amazons.models import default_model_path
from amazons.players import GreedyPlayer

REPO = Path(__file__).resolve().parents[1]
FIRST_REQUEST = {"requests": [dict.fromkeys(MOVE_KEYS, -1)], "responses": []}


class _KeepRunningBot:
    """A bot process in keep-running mode with a line reader that can time out."""

    def __init__(self, args: list[str]) -> None:
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "amazons.botzone", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            bufsize=1, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def ask(self, request: dict, timeout: float = 60.0) -> tuple[dict, float]:
        """Send one JSON input; return the decoded reply and its perf_counter() arrival time."""
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = self._lines.get(timeout=timeout)
        arrived = time.perf_counter()
        if reply is None:
            raise RuntimeError(f"the bot exited: {self.process.stderr.read()}")
        if self._lines.get(timeout=timeout) != KEEP_RUNNING_MARKER:
            raise RuntimeError("the bot did not ask to keep running")
        return json.loads(reply), arrived

    def close(self) -> None:
        self.process.stdin.close()
        if self.process.wait(timeout=60) != 0:
            raise RuntimeError(f"the bot failed: {self.process.stderr.read()}")


def _move_text(response: dict) -> str:
    return " ".join(str(response[key]) for key in MOVE_KEYS)


def play_game(model: str, turn_seconds: float, first_seconds: float, seed: int = 0) -> dict:
    """One whole keep-running game of the bot (Black) against the greedy player.

    Returns:
        `{"first": s, "later": [s, ...], "peak_mib": float, "simulations": [...], "full": int}`.

    Raises:
        RuntimeError: the bot failed, played an illegal move, or has torch in its process.
    """
    bot = _KeepRunningBot(["--model", model, "--time", str(turn_seconds),
                           "--first-time", str(first_seconds), "--seed", str(seed)])
    try:
        board, opponent = Board(), GreedyPlayer(seed=seed)
        reply, arrived = bot.ask(FIRST_REQUEST)
        first, later, debugs = arrived - bot.started, [], [reply["debug"]]
        while True:
            move = Move.from_botzone(_move_text(reply["response"]))
            if not board.is_legal(move):
                raise RuntimeError(f"the bot played an illegal move {move} on\n{board}")
            board.push(move)
            if board.is_game_over():
                break
            answer = opponent.choose_move(board)
            board.push(answer)
            if board.is_game_over():
                break
            sent = time.perf_counter()
            reply, arrived = bot.ask(dict(zip(MOVE_KEYS, map(int, answer.to_botzone().split()),
                                              strict=True)))
            later.append(arrived - sent)
            debugs.append(reply["debug"])
        peak, end = peak_rss_mb(bot.process.pid), rss_mb(bot.process.pid)
        if "torch" in Path(f"/proc/{bot.process.pid}/maps").read_text():
            raise RuntimeError(f"torch is loaded in the bot process ({model})")
        bot.close()
    finally:
        if bot.process.poll() is None:
            bot.process.kill()
            bot.process.wait()
    if peak is None or end is None:
        raise RuntimeError("cannot read the bot's memory from /proc")
    return {"first": first, "later": later, "peak_mib": peak, "end_mib": end, "debugs": debugs,
            "simulations": [int(text.split()[0]) for text in debugs],
            "full": sum(text.endswith("tree full") for text in debugs)}


def _figures(prefix: str, game: dict) -> dict[str, float]:
    if not game["later"]:
        raise RuntimeError(f"{prefix}: the game ended before the bot's second reply")
    return {
        f"{prefix}first_reply_s": game["first"],
        f"{prefix}reply_s_median": statistics.median(game["later"]),
        f"{prefix}reply_s_max": max(game["later"]),
        f"{prefix}max_rss_mb": game["peak_mib"],
        f"{prefix}end_rss_mb": game["end_mib"],
        f"{prefix}turns": float(len(game["simulations"])),
        f"{prefix}tree_full_turns": float(game["full"]),
        f"{prefix}simulations_median": float(statistics.median(game["simulations"])),
    }


def run(quick: bool) -> dict[str, float]:
    """Measure; returns `botzone.*` metrics (seconds, MiB, counts)."""
    clock = TimeControl()
    turn_seconds, first_seconds = (1.0, 3.0) if quick else (clock.turn_seconds, clock.first_turn_seconds)
    model = str(default_model_path())
    network = play_game("default", turn_seconds, first_seconds)
    rollouts = play_game("none", turn_seconds, first_seconds)
    print(f"botzone: network = the shipped model {model}; budget {turn_seconds} s a turn, first "
          f"reply {first_seconds} s from process start; whole games against greedy")
    return {
        **_figures("botzone.", network),
        "botzone.budget_s": turn_seconds,
        "botzone.first_budget_s": first_seconds,
        **_figures("botzone.none_", rollouts),
    }
