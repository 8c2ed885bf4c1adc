"""Botzone bot: reply times and peak memory of whole keep-running games, measured from outside.

For each model the suite starts a fresh `python -m amazons.botzone` process (keep-running, the
default; cold: a new interpreter, imports, model load, Numba's kernels from its on-disk cache as
this checkout has it), sends Black's first request at once and times the first reply from the
process start; then it plays the whole game against the greedy player (`amazons.players.player`),
timing each later reply from the moment the request is written. The talk is Botzone's JSON
interaction, so every reply's `debug` field says how many simulations the search ran and whether the
tree filled up. After the last reply it reads the bot process's peak resident memory (`VmHWM` in
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

The C++ bot (`python -m amazons.export default --botzone DIR`, built with g++ -O2 as Botzone
builds it) at Botzone's own clock, 1 s of CPU a turn and 2 s for the first (its defaults), in a
whole keep-running JSON game as Black against the greedy player; CPU times are read from
`/proc/PID/stat` around each request, so they include the bot's input and output:
* `cpp_forward_pos_per_s`: positions per CPU second of the C++ network (features, forward pass,
  priors of the legal moves; one position per call, as its search calls it) over 200 positions
  of seeded random games; `cpp_npnet_pos_per_s`: `NumpyEvaluator.evaluate` on the same
  positions one at a time (batch 1, one BLAS thread), the same work; `cpp_forward_speedup` their
  ratio; `cpp_npnet_b8_pos_per_s`: npnet at batch 8 (the Python bot's leaves per network call);
* `cpp_simulations_median`, `cpp_simulations_first`: simulations of a later turn (median) and of
  the first turn;
* `cpp_turn_cpu_s_max`, `cpp_turn_cpu_s_median`: CPU seconds of the later turns (request
  written to reply read); `cpp_first_cpu_s`: CPU seconds from process start to the first reply;
* `cpp_max_rss_mb`: peak resident memory over the game (VmHWM, MiB; target <= 200);
* `cpp_turns`, `cpp_tree_full_turns`: the bot's replies, and those that ended with a full tree.

The C++ bot's clock, the figures behind tests/test_cpp_clock.py's properties (the tests check
that the search stops at its deadline and reads the clock after costly work, in counts; these
say how long it takes on this machine):
* `cpp_clock_gap_ms`, `cpp_slowest_simulation_ms`: in a position whose tree holds separated leaves
  that are costly to adjudicate (`costly_position`), at `--time 0.1 --margin 0`, the most CPU
  between two reads of the clock and the slowest simulation (`--root-stats`);
* `cpp_overrun_ms_max`: two whole games against random moves, each of the bot's turns a fresh
  process at `--time 0.1 --first-time 0.1 --margin 0` (its CPU from the kernel): the most CPU a
  turn used past its 0.1 s, through the endgames the adjudication decides.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from amazons import engine
from amazons.board import BLACK, Board, Move
from amazons.botzone.bot import MOVE_KEYS, TimeControl
from amazons.botzone.cpp_export import SOURCE_NAME, compile_command, write_bot
from amazons.botzone.memory import peak_rss_mb, rss_mb
from amazons.export import random_positions
from amazons.models import default_model_path
from amazons.neural import numpy_net
from amazons.players.keep_running import KeptProcess
from amazons.players.player import GreedyPlayer

REPO = Path(__file__).resolve().parents[1]
FIRST_REQUEST = {"requests": [dict.fromkeys(MOVE_KEYS, -1)], "responses": []}


def _kept_bot(args: list[str], command: list[str] | None = None) -> KeptProcess:
    """A bot process in keep-running mode (the Python bot with `args`, or the program `command`
    names), one OpenMP thread."""
    return KeptProcess(command or [sys.executable, "-m", "amazons.botzone", *args], cwd=REPO,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})


def _ask(bot: KeptProcess, request: dict, timeout: float = 60.0) -> tuple[dict, float]:
    """Send one JSON input; the decoded reply and its perf_counter() arrival time."""
    return json.loads(bot.ask(json.dumps(request), timeout)), bot.replied_at


def _close(bot: KeptProcess) -> None:
    code, stderr = bot.close(60.0)
    if code != 0:
        raise RuntimeError(f"the bot failed (status {code}): {stderr}")


def _move_text(response: dict) -> str:
    return " ".join(str(response[key]) for key in MOVE_KEYS)


def _play_out(bot: KeptProcess, reply: dict, seed: int,
              ask: Callable[[dict], dict]) -> list[str]:
    """Play the bot's game against greedy from its first `reply` to the end; `ask` sends each later
    request and returns the reply (the caller times it). Returns every reply's debug text.

    Raises:
        RuntimeError: the bot played an illegal move (named, with the board).
    """
    board, opponent = Board(), GreedyPlayer(seed=seed)
    debugs = [reply["debug"]]
    while True:
        move = Move.from_botzone(_move_text(reply["response"]))
        if not board.is_legal(move):
            raise RuntimeError(f"the bot {' '.join(bot.process.args)} "
                               f"played an illegal move {move} on\n{board}")
        board.push(move)
        if board.is_game_over():
            return debugs
        answer = opponent.choose_move(board)
        board.push(answer)
        if board.is_game_over():
            return debugs
        reply = ask(dict(zip(MOVE_KEYS, map(int, answer.to_botzone().split()), strict=True)))
        debugs.append(reply["debug"])


def play_game(model: str, turn_seconds: float, first_seconds: float, seed: int = 0) -> dict:
    """One whole keep-running game of the bot (Black) against the greedy player.

    Returns:
        `{"first": s, "later": [s, ...], "peak_mib": float, "simulations": [...], "full": int}`.

    Raises:
        RuntimeError: the bot failed, played an illegal move, or has torch in its process.
    """
    bot = _kept_bot(["--model", model, "--time", str(turn_seconds),
                     "--first-time", str(first_seconds), "--seed", str(seed)])
    try:
        reply, arrived = _ask(bot, FIRST_REQUEST)
        first, later = arrived - bot.started, []

        def timed_ask(request: dict) -> dict:
            sent = time.perf_counter()
            answer, arrived = _ask(bot, request)
            later.append(arrived - sent)
            return answer

        debugs = _play_out(bot, reply, seed, timed_ask)
        peak, end = peak_rss_mb(bot.process.pid), rss_mb(bot.process.pid)
        if "torch" in Path(f"/proc/{bot.process.pid}/maps").read_text():
            raise RuntimeError(f"torch is loaded in the bot process ({model})")
        _close(bot)
    finally:
        bot.kill()
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


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build_cpp_bot(directory: Path) -> Path:
    """Export the shipped model's C++ bot into `directory` and build it as Botzone does."""
    write_bot(numpy_net.load_model(default_model_path()), directory)
    binary = directory / "bot"
    subprocess.run(compile_command(directory / SOURCE_NAME, binary), check=True,
                   capture_output=True, text=True)
    return binary


def cpp_forward_speed(binary: Path, directory: Path) -> dict[str, float]:
    """Positions per CPU second of the C++ network and of npnet on the same 200 positions."""
    positions = random_positions(200, seed=7, max_plies=40)
    listing = directory / "positions.txt"
    np.savetxt(listing, positions, fmt="%d")
    output = subprocess.run([str(binary), "--forward-speed", str(listing)], check=True,
                            capture_output=True, text=True).stdout
    cpp = float(output.split()[0])
    evaluator = numpy_net.NumpyEvaluator.from_file(default_model_path())
    numpy_net.limit_blas_threads(1)
    rows = [positions[i:i + 1] for i in range(positions.shape[0])]
    lists = [engine.legal_moves(row) for row in rows]

    def timed(batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> float:
        started, done = time.process_time(), 0
        while done == 0 or time.process_time() - started < 1.0:
            for batch, moves, offsets in batches:
                evaluator.evaluate(batch, moves, offsets)
                done += batch.shape[0]
        return done / (time.process_time() - started)

    single = timed([(row, moves, offsets)
                    for row, (moves, offsets) in zip(rows, lists, strict=True)])
    eights = [positions[i:i + 8] for i in range(0, positions.shape[0], 8)]
    batched = timed([(batch, *engine.legal_moves(batch)) for batch in eights])
    return {"botzone.cpp_forward_pos_per_s": cpp, "botzone.cpp_npnet_pos_per_s": single,
            "botzone.cpp_forward_speedup": cpp / single, "botzone.cpp_npnet_b8_pos_per_s": batched}


def play_cpp_game(binary: Path, seed: int = 0) -> dict[str, float]:
    """One whole keep-running JSON game of the C++ bot (Black, its default clock) against greedy."""
    bot = _kept_bot([], command=[str(binary)])
    try:
        reply, _ = _ask(bot, FIRST_REQUEST)
        first_cpu, turn_cpu = _cpu_seconds(bot.process.pid), []

        def cpu_timed_ask(request: dict) -> dict:
            before = _cpu_seconds(bot.process.pid)
            answer, _ = _ask(bot, request)
            turn_cpu.append(_cpu_seconds(bot.process.pid) - before)
            return answer

        debugs = _play_out(bot, reply, seed, cpu_timed_ask)
        peak = peak_rss_mb(bot.process.pid)
        _close(bot)
    finally:
        bot.kill()
    if peak is None or not turn_cpu:
        raise RuntimeError("the C++ bot's game gave no memory reading "
                           "or ended before its second reply")
    turns = [int(text.split("(")[1].split()[0]) for text in debugs]  # "N simulations (M this turn)"
    return {
        "botzone.cpp_simulations_first": float(turns[0]),
        "botzone.cpp_simulations_median": float(statistics.median(turns[1:])),
        "botzone.cpp_first_cpu_s": first_cpu,
        "botzone.cpp_turn_cpu_s_median": statistics.median(turn_cpu),
        "botzone.cpp_turn_cpu_s_max": max(turn_cpu),
        "botzone.cpp_max_rss_mb": peak,
        "botzone.cpp_turns": float(len(debugs)),
        "botzone.cpp_tree_full_turns": float(sum("tree full" in text for text in debugs)),
    }


def _random_game(seed: int, games: int) -> Board:
    """The last of `games` random games drawn from one seeded stream, played to its end."""
    rng = np.random.default_rng(seed)
    for _ in range(games):
        board = Board()
        while not board.is_game_over():
            legal = board.legal_moves()
            board.push(legal[int(rng.integers(len(legal)))])
    return board


def costly_position() -> list[Move]:
    """The game (28 plies) of tests/test_cpp_clock.py's clock test: its tree holds separated
    leaves whose adjudication spends the exhaustive fill's node budget."""
    return _random_game(seed=5, games=39).move_stack[:28]


def _transcript(history: list[Move]) -> str:
    """Botzone's simple input for a fresh process to move after `history`."""
    black = len(history) % 2 == 0
    requests = [None, *history[1::2]] if black else history[0::2]
    responses = history[0::2] if black else history[1::2]
    lines = [str(len(requests))]
    for index, request in enumerate(requests):
        lines.append("-1 -1 -1 -1 -1 -1" if request is None else request.to_botzone())
        if index < len(responses):
            lines.append(responses[index].to_botzone())
    return "\n".join(lines) + "\n"


def _turn_cpu(binary: Path, history: list[Move],
              *args: str) -> tuple[float, subprocess.CompletedProcess]:
    """CPU seconds (the kernel's count) of one `--restart-per-turn` process moving after
    `history`, and the process's result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([str(binary), "--restart-per-turn", *args], input=_transcript(history),
                            capture_output=True, text=True, timeout=60, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), result


def cpp_clock(binary: Path) -> dict[str, float]:
    """The C++ bot's clock figures: `cpp_clock_gap_ms`, `cpp_slowest_simulation_ms`,
    `cpp_overrun_ms_max` (the module's docstring)."""
    _, result = _turn_cpu(binary, costly_position(), "--root-stats", "--time", "0.1",
                          "--margin", "0")
    counters = {tokens[1]: int(tokens[2]) for tokens in map(str.split, result.stderr.splitlines())
                if tokens[0] == "stats"}
    worst = 0.0
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        board = Board()
        while not board.is_game_over():
            if board.turn == BLACK:  # the bot plays Black
                used, result = _turn_cpu(binary, board.move_stack, "--time", "0.1",
                                         "--first-time", "0.1", "--margin", "0")
                worst = max(worst, used - 0.1)
                board.push(Move.from_botzone(result.stdout.strip()))
            else:
                legal = board.legal_moves()
                board.push(legal[int(rng.integers(len(legal)))])
    return {"botzone.cpp_clock_gap_ms": counters["clock_gap_us"] / 1000,
            "botzone.cpp_slowest_simulation_ms": counters["slowest_simulation_us"] / 1000,
            "botzone.cpp_overrun_ms_max": worst * 1000}


def run_cpp() -> dict[str, float]:
    """The C++ bot's keys (`botzone.cpp_*`); raises where g++ is missing."""
    if shutil.which("g++") is None:
        raise RuntimeError("the C++ bot's figures need g++")
    with tempfile.TemporaryDirectory(prefix="botzone-cpp-") as folder:
        directory = Path(folder)
        binary = build_cpp_bot(directory)
        figures = cpp_forward_speed(binary, directory)
        figures.update(play_cpp_game(binary))
        figures.update(cpp_clock(binary))
    print("botzone: C++ bot = the shipped model exported with --botzone, g++ -O2, "
          "its default clock (1 s of CPU a turn, 2 s for the first); "
          "forward speeds at one position per call")
    return figures


def run(quick: bool) -> dict[str, float]:
    """Measure; returns `botzone.*` metrics (seconds, MiB, counts)."""
    clock = TimeControl()
    turn_seconds, first_seconds = ((1.0, 3.0) if quick
                                   else (clock.turn_seconds, clock.first_turn_seconds))
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
        **run_cpp(),
    }
