"""The Botzone C++ export (`amazons.botzone.cpp_export`, `python -m amazons.export MODEL --botzone DIR`).

The generated bot is a native twin of the engine, `npnet` and the bot's search, so it is
checked against the Python originals: its perft counts, legal-move lists and adjudication of
separated positions against the engine,
its network's value and priors against `npnet` on 200 positions from seeded random games (for
the shipped model and for random models of both policy heads, the arrow source term, both feature
sets, attention in and after the trunk, a channel count that takes the portable kernels and one
that splits the Winograd kernels' output channels into blocks of 16 and 8), and whole games
through its protocols against random moves, every reply checked on a `Board`. The bot is built
with g++ as Botzone builds it (`-D_BOTZONE_ONLINE`, C++11) with `-Werror`, once per session;
without g++ these tests are skipped.
"""

from __future__ import annotations

import json
import os
import queue
import re
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from botzone_inputs import LIMIT_FORMS, move_json, wiki_json_line
from test_npnet import random_model

from amazons import BLACK, WHITE, engine
from amazons.arena import run_arena
from amazons.board import Board, Move
from amazons.botzone import cpp_export
from amazons.botzone import limits as botzone_limits
from amazons.botzone.cpp_export import (
    SOURCE_NAME,
    BotzoneExportError,
    compile_command,
    weights_file_bytes,
    write_bot,
)
from amazons.export import TOLERANCE, main, model_arrays, random_positions
from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator
from amazons.mcts_numba import _t_quantile
from amazons.models import default_model_path
from amazons.neural import numpy_net

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed (the C++ bot needs it)")

MARKER = ">>>BOTZONE_REQUEST_KEEP_RUNNING<<<"
KEYS = ("x0", "y0", "x1", "y1", "x2", "y2")
NO_MOVE = "-1 -1 -1 -1 -1 -1"
FAST = ["--simulations", "12"]  # whole-game tests: a few simulations a turn
FIRST_REQUEST_JSON = {"requests": [dict.fromkeys(KEYS, -1)], "responses": []}  # Black's first turn
# What the clock tests allow a reply past its deadline, in CPU seconds: the search reads the clock
# after every simulation or few, so it stops within a simulation (tens of microseconds, an
# adjudication a few milliseconds) on any machine; a search that ignored its deadline would run on
# for seconds. The figures (how far past, how many simulations) are `--suite botzone`'s.
PAST_DEADLINE_SECONDS = 0.25


def build(directory: Path, standard: str = "c++11", optimize: str = "-O2") -> Path:
    """Compile `directory/bot.cpp` with warnings as errors; the binary's path."""
    binary = directory / f"bot-{standard}{optimize}"
    command = [*compile_command(directory / SOURCE_NAME, binary, standard, optimize), "-Werror"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0 and not result.stderr, result.stderr
    return binary


@pytest.fixture(scope="session")
def default_bot(tmp_path_factory) -> Path:
    """The shipped model's bot, built as Botzone builds it (C++11, -O2), warnings as errors."""
    directory = tmp_path_factory.mktemp("botzone-cpp")
    assert main(["default", "--botzone", str(directory)]) == 0
    return build(directory)


@pytest.fixture(scope="session")
def positions() -> np.ndarray:
    """200 canonical positions from seeded random games (0 to 50 plies, none terminal)."""
    return random_positions(200, seed=21, max_plies=50)


def selftest(binary: Path, positions: np.ndarray, tmp_path: Path, *extra: str) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """`(value, moves (K, 3) int32, priors (K,) float64)` per position, from `--selftest`."""
    listing = tmp_path / "positions.txt"
    np.savetxt(listing, positions, fmt="%d")
    result = subprocess.run([str(binary), "--selftest", str(listing), *extra], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    rows = []
    for line in result.stdout.splitlines():
        tokens = line.split()
        count = int(tokens[1])
        table = np.array(tokens[2:], dtype=np.float64).reshape(count, 4)
        rows.append((float(tokens[0]), table[:, :3].astype(np.int32), table[:, 3]))
    assert len(rows) == positions.shape[0]
    return rows


def assert_matches_npnet(binary: Path, net: numpy_net.NumpyNet, positions: np.ndarray, tmp_path: Path,
                         *extra: str) -> None:
    """The bot's legal moves are the engine's (same order); its value and priors npnet's."""
    moves, offsets = engine.legal_moves(positions)
    priors, values = numpy_net.NumpyEvaluator(net).evaluate(positions, moves, offsets)
    worst_value = worst_prior = 0.0
    for index, (value, bot_moves, bot_priors) in enumerate(selftest(binary, positions, tmp_path, *extra)):
        block = slice(offsets[index], offsets[index + 1])
        np.testing.assert_array_equal(bot_moves, moves[block])
        worst_value = max(worst_value, abs(value - values[index]))
        worst_prior = max(worst_prior, float(np.abs(bot_priors - priors[block]).max()))
    assert worst_value <= TOLERANCE and worst_prior <= TOLERANCE, (worst_value, worst_prior)
    # The comparison means something: values spread out, priors far from uniform.
    assert np.ptp(values) > 0.1 and priors.max() * np.diff(offsets).max() > 3.0


# ------------------------------------------------------------------------------------------------
# Building, rules, network


def test_perft_from_the_start(default_bot):
    for depth, expected in ((1, 1232), (2, 1_331_198)):
        result = subprocess.run([str(default_bot), "--perft", str(depth)], capture_output=True, text=True,
                                timeout=60, check=True)
        assert int(result.stdout) == expected == engine.perft_position(engine.start_position(), depth)


def test_the_shipped_model_matches_npnet_with_either_kernels(default_bot, positions, tmp_path):
    net = numpy_net.load_model(default_model_path())
    assert_matches_npnet(default_bot, net, positions, tmp_path)
    assert_matches_npnet(default_bot, net, positions, tmp_path, "--portable")


def test_adjudication_matches_the_engine(default_bot, tmp_path):
    # The last 25 positions of 120 seeded random games: separated ones among them, decided or not.
    rng = np.random.default_rng(8)
    positions = []
    for _ in range(120):
        line, position = [], engine.start_position()
        while True:
            moves, _ = engine.legal_moves(position)
            if moves.shape[0] == 0:
                break
            line.append(position)
            position = engine.apply_moves(position[None], moves[rng.integers(moves.shape[0])][None])[0]
        positions += line[-25:]
    positions = np.array(positions)
    listing = tmp_path / "positions.txt"
    np.savetxt(listing, positions, fmt="%d")
    output = subprocess.run([str(default_bot), "--adjudicate", str(listing)], capture_output=True, text=True,
                            timeout=120, check=True).stdout
    table = np.array([line.split() for line in output.splitlines()], dtype=np.int64)
    result, bounds = engine.adjudicate(positions)
    np.testing.assert_array_equal(table[:, 0], result)
    np.testing.assert_array_equal(table[:, 1:], bounds)
    assert (result > 0).sum() > 20 and (result < 0).sum() > 20 and (bounds[:, 0] < 0).sum() > 1000


@pytest.mark.slow
def test_compiles_without_warnings_under_a_current_standard(tmp_path):
    write_bot(numpy_net.load_model(default_model_path()), tmp_path)
    binary = build(tmp_path, "c++17", "-O1")
    assert subprocess.run([str(binary), "--perft", "1"], capture_output=True, text=True, check=True).stdout == "1232\n"


@pytest.mark.slow
@pytest.mark.parametrize(("head", "overrides"), [
    ("joint", {"attention_placement": "spread"}),  # residual, attention, residual
    ("factorized", {"num_planes": 3, "channels": 20, "head_dim": 12}),  # 20: not a multiple of 8
    ("joint", {"num_planes": 3, "channels": 24, "head_dim": 8}),  # 24 = 16 + 8; 3 planes padded to 8
    ("joint", {"arrow_source": True}),  # the joint head's arrow source term
])
def test_random_models_match_npnet(head, overrides, positions, tmp_path):
    config, trunk, arrays = model_arrays(random_model("tiny", head, seed=3, **overrides))
    net = numpy_net.NumpyNet(config, trunk, arrays)
    assert "attention" in trunk and "residual" in trunk
    write_bot(net, tmp_path)
    binary = build(tmp_path, optimize="-O1")
    assert_matches_npnet(binary, net, positions[:80], tmp_path)
    assert_matches_npnet(binary, net, positions[:80], tmp_path, "--portable")


# ------------------------------------------------------------------------------------------------
# Whole games against random moves


def botzone_line(move: Move | None) -> str:
    return NO_MOVE if move is None else move.to_botzone()


def move_object(move: Move | None) -> dict:
    return dict(zip(KEYS, map(int, botzone_line(move).split()), strict=True))


def first_input(requests: list[Move | None], responses: list[Move], use_json: bool) -> str:
    """The whole game so far as Botzone sends it to a fresh process."""
    if use_json:
        return json.dumps({"requests": [move_object(m) for m in requests],
                           "responses": [move_object(m) for m in responses], "data": "", "time_limit": 1}) + "\n"
    lines = [str(len(requests))]
    for index, request in enumerate(requests):
        lines.append(botzone_line(request))
        if index < len(responses):
            lines.append(botzone_line(responses[index]))
    return "\n".join(lines) + "\n"


def parse_reply(text: str, use_json: bool) -> Move:
    if use_json:
        reply = json.loads(text)
        assert "simulations" in reply["debug"]
        return Move.from_botzone(" ".join(str(reply["response"][key]) for key in KEYS))
    return Move.from_botzone(text)


class KeptBot:
    """A bot process in keep-running mode; every read has a timeout (a thread pumps its lines)."""

    def __init__(self, binary: Path, *args: str) -> None:
        self.process = subprocess.Popen([str(binary), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def read_line(self, timeout: float = 30.0) -> str:
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"the bot exited: {self.process.stderr.read()}"
        return line

    def ask(self, text: str) -> str:
        self.process.stdin.write(text)
        self.process.stdin.flush()
        reply = self.read_line()
        assert self.read_line() == MARKER
        return reply

    def close(self) -> int:
        """End the input; the exit code (stderr's text is kept in `stderr`)."""
        self.process.stdin.close()
        code = self.process.wait(timeout=30)
        self.stderr = self.process.stderr.read()
        self.process.stderr.close()
        return code


def play_game(binary: Path, bot_colour: int, use_json: bool, keep_running: bool, seed: int,
              restart_at: int | None = None) -> Board:
    """One whole game of the bot against random moves; every reply checked legal on a Board.

    With `restart_at`, the kept process is closed before the bot's turn of that number and a new
    one starts with the whole history.
    """
    rng = np.random.default_rng(seed)
    board = Board()
    requests: list[Move | None] = [None] if bot_colour == BLACK else []
    responses: list[Move] = []
    kept = None
    while not board.is_game_over():
        if board.turn != bot_colour:
            legal = board.legal_moves()
            move = legal[int(rng.integers(len(legal)))]
            board.push(move)
            requests.append(move)
            continue
        turn = len(responses)
        if kept is not None and turn == restart_at:
            assert kept.close() == 0
            kept = None
        if not keep_running:
            result = subprocess.run([str(binary), *FAST, "--restart-per-turn"], input=first_input(requests, responses, use_json),
                                    capture_output=True, text=True, timeout=60, check=False)
            assert result.returncode == 0, result.stderr
            reply_line, = result.stdout.splitlines()
        elif kept is None:
            kept = KeptBot(binary, *FAST)
            reply_line = kept.ask(first_input(requests, responses, use_json))
        else:
            newest = requests[-1]
            reply_line = kept.ask(json.dumps(move_object(newest)) + "\n" if use_json else botzone_line(newest) + "\n")
        move = parse_reply(reply_line, use_json)
        assert board.is_legal(move), f"illegal reply {move} at ply {board.ply}\n{board}"
        board.push(move)
        responses.append(move)
    if kept is not None:
        assert kept.close() == 0  # the end of input ends a kept process cleanly
    return board


@pytest.mark.parametrize("use_json", [False, True], ids=["simple", "json"])
def test_whole_games_keep_running(default_bot, use_json):
    for colour, seed in ((BLACK, 1), (WHITE, 2)):
        board = play_game(default_bot, colour, use_json, keep_running=True, seed=seed)
        assert board.is_game_over() and board.ply >= 20


@pytest.mark.parametrize("use_json", [False, True], ids=["simple", "json"])
def test_whole_games_restart_per_turn(default_bot, use_json):
    board = play_game(default_bot, WHITE if use_json else BLACK, use_json, keep_running=False, seed=3)
    assert board.is_game_over()


def test_a_kept_process_restarted_mid_game_plays_on(default_bot):
    board = play_game(default_bot, BLACK, use_json=False, keep_running=True, seed=4, restart_at=6)
    assert board.is_game_over() and board.ply > 12


def test_the_network_cache_changes_no_reply(default_bot):
    # A few hundred simulations a turn reach some positions twice (transpositions); taking the
    # network's outputs from the node that has one must leave every reply, root visit count and
    # value as the network makes them, through tree reuse and compaction.
    rng = np.random.default_rng(6)
    board = Board()
    bots = [KeptBot(default_bot, "--simulations", "400"), KeptBot(default_bot, "--simulations", "400", "--no-cache")]
    request = json.dumps(FIRST_REQUEST_JSON) + "\n"
    cached = 0
    while True:
        cached_reply, uncached_reply = (json.loads(bot.ask(request)) for bot in bots)
        assert cached_reply["response"] == uncached_reply["response"]
        # "N simulations (M this turn), value V, S s cpu, H cached[, ...]": all but the CPU time
        with_cache, without = (reply["debug"].split(", ") for reply in (cached_reply, uncached_reply))
        assert with_cache[:2] == without[:2] and with_cache[4:] == without[4:], (with_cache, without)
        assert without[3] == "0 cached"
        cached += int(with_cache[3].split()[0])
        board.push(parse_reply(json.dumps(cached_reply), use_json=True))
        if board.is_game_over():
            break
        legal = board.legal_moves()
        move = legal[int(rng.integers(len(legal)))]
        board.push(move)
        if board.is_game_over():
            break
        request = json.dumps(move_object(move)) + "\n"
    assert [bot.close() for bot in bots] == [0, 0]
    assert board.ply >= 20 and cached > 0


def history_input(history: list[Move], use_json: bool = False) -> str:
    """The first input of a fresh process for the bot to move after `history`."""
    black = len(history) % 2 == 0
    requests = [None, *history[1::2]] if black else history[0::2]
    responses = history[0::2] if black else history[1::2]
    return first_input(requests, responses, use_json)


def root_search(binary: Path, history: list[Move], *args: str,
                simulations: int | None = 400) -> tuple[Move, list[tuple], dict[str, int]]:
    """A fresh process's reply to the game `history` at `simulations` (None: by its clock), and
    what `--root-stats` prints (`root_stats`): the root's moves and the search's counters."""
    count = [] if simulations is None else ["--simulations", str(simulations)]
    result = subprocess.run([str(binary), "--restart-per-turn", *count, "--root-stats", *args],
                            input=history_input(history), capture_output=True, text=True, timeout=60, check=False)
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


def lcb_choice(stats: list[tuple], stdevs: float, fraction: float = 0.15) -> Move:
    """KataGo's rule as docs/search.md states it: among the moves not proven lost with at least
    max(2, fraction x the most visits), the highest mean - t(stdevs, N) * sqrt(variance / N)."""
    most = most_visited(stats)
    threshold = max(2.0, fraction * most[1])
    chosen, chosen_bound = most, -np.inf
    for s in stats:
        move, visits, total, squares, proof, _ = s
        if proof == -1 or visits < threshold:
            continue
        mean = total / visits
        variance = max(squares / visits - mean * mean, 0.0)
        bound = mean - _t_quantile(stdevs, float(visits)) * np.sqrt(variance / visits)
        if bound > chosen_bound or (bound == chosen_bound and visits > chosen[1]):
            chosen, chosen_bound = s, bound
    return chosen[0]


def test_the_bot_plays_the_best_lower_confidence_bound(default_bot):
    # The Python bot's rule (SearchConfig.lcb, on by default): checked on the root statistics the
    # bot prints, at its default width, at a narrow one that often overrides the visits, and off.
    rng = np.random.default_rng(11)
    board, histories = Board(), []
    while board.ply < 36 and not board.is_game_over():
        if board.ply % 4 == 2:
            histories.append(list(board.move_stack))
        legal = board.legal_moves()
        board.push(legal[int(rng.integers(len(legal)))])
    overridden = 0
    for history in histories:
        for args, stdevs in (((), 5.0), (("--lcb-stdevs", "0.5"), 0.5), (("--no-lcb",), None)):
            reply, stats, _ = root_search(default_bot, history, *args)
            if any(s[4] == 1 for s in stats):
                continue  # a proven win is played as the proof says (tested with the solver)
            assert sum(s[1] for s in stats) == 400
            expected = most_visited(stats)[0] if stdevs is None else lcb_choice(stats, stdevs)
            assert reply == expected, (len(history), args)
            overridden += stdevs is not None and expected != most_visited(stats)[0]
    assert len(histories) >= 8 and overridden > 0


def test_the_bots_search_settings_follow_their_python_definitions(default_bot, tmp_path, monkeypatch):
    # The exporter writes the search's constants from NET_SEARCH (settings_block), read when the
    # bot is written: change them on the Python side and the bot's search follows, with nothing
    # typed twice in the C++.
    from amazons import player_factory

    changed = player_factory.NET_SEARCH.replace(c_puct=0.05, c_puct_base=0.0, lcb=False)
    monkeypatch.setattr(player_factory, "NET_SEARCH", changed)
    write_bot(numpy_net.load_model(default_model_path()), tmp_path)
    source = (tmp_path / SOURCE_NAME).read_text()
    assert "static const double C_PUCT = 0.05;" in source and "static const double C_PUCT_BASE = 0.0;" in source
    assert "static const bool LCB_DEFAULT = false;" in source
    assert "static const double FPU_REDUCTION = 0.25;" in source  # the rest as NET_SEARCH has them
    binary = build(tmp_path)
    rng = np.random.default_rng(3)
    board = Board()
    for _ in range(12):
        legal = board.legal_moves()
        board.push(legal[int(rng.integers(len(legal)))])
    history = list(board.move_stack)
    _, default_stats, _ = root_search(default_bot, history)
    reply, changed_stats, _ = root_search(binary, history)
    # c_puct 0.05 and no growth: the search follows the priors and values far more greedily, so
    # fewer moves get visits and the most visited move takes more of them.
    tried = [sum(s[1] > 0 for s in stats) for stats in (default_stats, changed_stats)]
    top = [most_visited(stats)[1] for stats in (default_stats, changed_stats)]
    assert tried[1] < tried[0] and top[1] > top[0], (tried, top)
    # LCB off by default now: the reply is the most visited move, with no --no-lcb.
    assert reply == most_visited(changed_stats)[0]


def separated_games(count: int, seed: int) -> list[Board]:
    """Seeded random games stopped at their first separated position (a side to move with moves)."""
    rng = np.random.default_rng(seed)
    boards = []
    while len(boards) < count:
        board = Board()
        while not board.is_game_over():
            if engine.adjudicate(board.canonical_position())[1][0, engine.MY_LOWER] >= 0:
                boards.append(board)
                break
            legal = board.legal_moves()
            board.push(legal[int(rng.integers(len(legal)))])
    return boards


def test_proofs_of_separated_positions_count_the_plies_as_the_python_search_does(default_bot):
    # The tree's convention (amazons.mcts._adjudicate_leaves): a terminal node is lost in 0 plies,
    # a winning move wins in 1, so a side to move with a moves against b loses in 2a plies or wins
    # in 2b + 1. A root move whose child the adjudication decides at its expansion gets the same
    # proof and plies in the bot's tree as in the Python search's (move_proof_plies).
    compared = {1: 0, -1: 0}
    for board in separated_games(16, seed=12):
        search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=600))
        search.set_roots(board.canonical_position())
        search.search()
        result = search.root_result(0)
        children = engine.apply_moves(np.repeat(board.canonical_position()[None], len(result.moves), 0),
                                      result.moves.astype(np.int32))
        decided = engine.adjudicate(children)[0] != 0
        python = {Move(*real.tolist()): (int(proof), int(plies), bool(exact)) for real, proof, plies, exact in
                  zip(board.canonical_to_real(result.moves), result.move_proofs, result.move_proof_plies, decided,
                      strict=True)}
        _, stats, _ = root_search(default_bot, board.move_stack, simulations=600)
        for move, _, _, _, proof, plies in stats:
            python_proof, python_plies, exact = python[move]
            if proof == 0 or python_proof == 0 or not exact:
                continue  # compared where both trees hold the child the adjudication decides
            assert (proof, plies) == (python_proof, python_plies), (board.ply, move)
            compared[proof] += 1
    assert compared[1] >= 5 and compared[-1] >= 20, compared


def test_the_bot_answers_the_no_move_line_when_it_has_lost(default_bot):
    # A random game to its end; the loser's bot is given the whole game (Botzone would not ask,
    # but a reply must never be a made-up move).
    rng = np.random.default_rng(5)
    board = Board()
    while not board.is_game_over():
        legal = board.legal_moves()
        board.push(legal[int(rng.integers(len(legal)))])
    moves = board.move_stack
    loser = board.turn
    requests = ([None] if loser == BLACK else []) + moves[1 - loser::2]
    responses = moves[loser::2]
    for use_json in (False, True):
        result = subprocess.run([str(default_bot), *FAST, "--restart-per-turn"],
                                input=first_input(requests, responses, use_json), capture_output=True, text=True,
                                timeout=30, check=True)
        reply = json.loads(result.stdout)["response"] if use_json else result.stdout.split()
        assert list(map(int, reply.values() if use_json else reply)) == [-1] * 6


def random_game(seed: int, games: int) -> Board:
    """The last of `games` random games drawn from one seeded stream, played to its end."""
    rng = np.random.default_rng(seed)
    for _ in range(games):
        board = Board()
        while not board.is_game_over():
            legal = board.legal_moves()
            board.push(legal[int(rng.integers(len(legal)))])
    return board


def costly_position() -> list[Move]:
    """A position whose tree holds separated leaves that cost milliseconds to adjudicate (their
    regions' exhaustive fill spends its node budget), a hundred simulations with the network."""
    return random_game(seed=5, games=39).move_stack[:28]


def test_the_clock_is_read_after_a_costly_simulation(default_bot):
    # The clock must be read right after a simulation whose adjudication ran FILL_NODES_PER_READ
    # nodes of the exhaustive fill, not up to 7 simulations later: counted in fill nodes, so on
    # any machine, no simulation starts with that many run since the last read (`unread_fill`),
    # over a search that ran many times that many (the figures in time, the longest gap between
    # reads and the slowest simulation, are `--suite botzone`'s).
    source = (default_bot.parent / SOURCE_NAME).read_text()
    per_read = int(re.search(r"static const int64_t FILL_NODES_PER_READ = (\d+);", source).group(1))
    _, _, counters = root_search(default_bot, costly_position(), "--time", "0.5", "--margin", "0",
                                 simulations=None)
    assert counters["fill_nodes"] >= 8 * per_read, counters  # the search met the costly leaves
    assert counters["unread_fill"] < per_read, counters


def test_turns_stay_inside_their_time_through_adjudicated_endgames(default_bot):
    # Whole games against random moves, each of the bot's turns a fresh process with the game so
    # far (its CPU measured exactly) and no margin: a turn overruns its time by the work after the
    # last read of the clock, which stays small through the endgames the adjudication decides
    # (how small on this machine: --suite botzone's cpp_overrun_ms_max).
    worst, proven = 0.0, 0
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        board = Board()
        while not board.is_game_over():
            if board.turn == BLACK:
                used, reply = process_cpu_seconds(default_bot, history_input(board.move_stack, use_json=True),
                                                  "--time", "0.1", "--first-time", "0.1", "--margin", "0")
                worst = max(worst, used)
                proven += "proven" in json.loads(reply)["debug"]
                board.push(parse_reply(reply, use_json=True))
            else:
                legal = board.legal_moves()
                board.push(legal[int(rng.integers(len(legal)))])
    assert proven >= 2  # the games' ends were proven, separated regions adjudicated
    print(f"slowest turn {worst:.4f} s of CPU at --time 0.1 --margin 0")
    assert worst <= 0.1 + PAST_DEADLINE_SECONDS, worst


def test_a_restarted_process_replays_a_long_game_without_emptying_its_cache_per_move(default_bot):
    # Botzone may restart a kept bot mid-game with the whole history: replaying it before the first
    # search leaves nothing in the network cache to throw away, so its 8 MiB table is never emptied.
    rng = np.random.default_rng(3)
    board = Board()
    while board.ply < 40:
        legal = board.legal_moves()
        board.push(legal[int(rng.integers(len(legal)))])
    _, _, counters = root_search(default_bot, board.move_stack, simulations=50)
    assert counters["cache_clears"] == 0, counters


# ------------------------------------------------------------------------------------------------
# The clock


def test_turns_stay_inside_their_cpu_budget(default_bot):
    # The whole process, start-up included, searches to its deadline (0.6 - 0.05 s of CPU: a CPU
    # clock gets there on any machine) and stops soon after; kept, every later turn the same.
    used, reply = process_cpu_seconds(default_bot, first_input([None], [], use_json=True),
                                      "--first-time", "0.6", "--margin", "0.05")
    assert 0.55 - 0.01 <= used <= 0.55 + PAST_DEADLINE_SECONDS, used
    assert Board().is_legal(parse_reply(reply, use_json=True))
    kept = KeptBot(default_bot, "--time", "0.25", "--first-time", "0.4", "--margin", "0.05")
    try:
        board = Board()
        reply = parse_reply(kept.ask(first_input([None], [], use_json=True)), use_json=True)
        board.push(reply)
        for _ in range(3):
            answer = board.legal_moves()[0]
            board.push(answer)
            text = kept.ask(json.dumps(move_object(answer)) + "\n")
            seconds = float(json.loads(text)["debug"].split(" s cpu")[0].rsplit(" ", 1)[1])
            assert 0.1 < seconds <= 0.2 + PAST_DEADLINE_SECONDS, seconds
            board.push(parse_reply(text, use_json=True))
    finally:
        assert kept.close() == 0


def process_cpu_seconds(binary: Path, text: str, *args: str) -> tuple[float, str]:
    """CPU seconds of one `--restart-per-turn` process answering `text`, and its reply line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([str(binary), "--restart-per-turn", *args], input=text, capture_output=True, text=True,
                            timeout=30, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), result.stdout


def turn_simulations(reply: str) -> int:
    """The simulations of the turn a JSON reply answers ("N simulations (M this turn), ...")."""
    return int(json.loads(reply)["debug"].split("(")[1].split()[0])


def test_a_json_time_limit_is_the_turns_limit_doubled_for_the_first_turn(default_bot):
    # One reading for the C++ bot, the Python bot and the arena (amazons.botzone.limits): the
    # first turn may use FIRST_TURN_FACTOR x time_limit, a later one time_limit, each less the
    # margin (written into the source from botzone_limits, as the defaults are).
    source = (default_bot.parent / SOURCE_NAME).read_text()
    for name, value in (("TURN_SECONDS", botzone_limits.LANGUAGE_TURN_SECONDS["cpp"]),
                        ("FIRST_TURN_FACTOR", botzone_limits.FIRST_TURN_FACTOR),
                        ("MARGIN_SECONDS", botzone_limits.CPP_MARGIN_SECONDS)):
        assert f"static const double {name} = {value!r};" in source
    # The first turn searches until 2 x 0.25 - 0.1 = 0.4 s of CPU from process start (the clock is
    # CPU time, so the search reaches it on any machine), and stops soon after.
    first = dict(FIRST_REQUEST_JSON, time_limit=0.25)
    used, reply = process_cpu_seconds(default_bot, json.dumps(first) + "\n")
    assert 0.4 - 0.01 <= used <= 0.4 + PAST_DEADLINE_SECONDS, used
    board = Board()
    board.push(parse_reply(reply, use_json=True))
    board.push(board.legal_moves()[0])
    # A later turn gets time_limit, not twice it: 0.09 - 0.1 leaves no time, so it searches one
    # simulation (twice it would leave 0.08 s).
    later = {"requests": [dict.fromkeys(KEYS, -1), move_object(board.move_stack[1])],
             "responses": [move_object(board.move_stack[0])], "time_limit": 0.09}
    _, reply = process_cpu_seconds(default_bot, json.dumps(later) + "\n")
    assert turn_simulations(reply) == 1, reply
    assert board.is_legal(parse_reply(reply, use_json=True))


@pytest.mark.parametrize("form", sorted(LIMIT_FORMS))
def test_botzones_documented_input_is_answered_in_both_process_modes(default_bot, form):
    """The wiki's line (tests/botzone_inputs.py), its limits in each form: a legal reply, at most
    one note on stderr. Kept running: the same line first, then a whole object mid-game, a bare
    move, and a whole object once more; one note at most for the whole process."""
    limits, noted = LIMIT_FORMS[form]
    result = subprocess.run([str(default_bot), *FAST, "--restart-per-turn"],
                            input=wiki_json_line([], limits) + "\n", capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert Board().is_legal(parse_reply(result.stdout, use_json=True))
    assert len(result.stderr.splitlines()) == noted
    assert result.stderr.count("bot: note: time_limit") == noted
    kept = KeptBot(default_bot, *FAST)
    board, rng = Board(), np.random.default_rng(7)
    try:
        for turn in range(4):
            history = [move.to_botzone() for move in board.move_stack]
            line = move_json(history[-1]) if turn == 2 else wiki_json_line(history, limits)
            reply = parse_reply(kept.ask(line + "\n"), use_json=True)
            assert board.is_legal(reply), (turn, reply)
            board.push(reply)
            legal = board.legal_moves()
            board.push(legal[int(rng.integers(len(legal)))])
    finally:
        assert kept.close() == 0
    assert len(kept.stderr.splitlines()) == noted
    assert kept.stderr.count("bot: note: time_limit") == noted


# time_limit values as JSON texts: strings of every shape, numbers, and what is neither
TIME_LIMIT_TEXTS = ['"0.05"', '" 0.05\\t"', '"5e-2"', '".05"', '"+0.05"', '"\\u0030.05"', '0.05', '5e-2',
                    '"0.05."', '"0x1p-5"', '"nan"', '"inf"', '"Infinity"', '"1e999"', '1e999', '""',
                    '"abc"', '"0.05s"', '"-0.05"', '-0.05', '0', '"0"', 'null', 'true', '[0.05]',
                    '{"s": 0.05}']


def test_the_bot_reads_a_time_limit_as_the_python_definition_does(default_bot):
    # botzone_limits.read_limit is the rule; bot.cpp's read_limit mirrors it. A kept bot with 0.2 s
    # a turn is sent the same later position, a whole JSON object each time, with each time_limit:
    # read as a limit (0.05 s), it leaves no time after the 0.1 s margin and the turn searches one
    # simulation; not read, the bot's own 0.2 s leaves 0.1 s, and the turn searches more.
    kept = KeptBot(default_bot, "--time", "0.2")
    try:
        first = parse_reply(kept.ask(wiki_json_line([]) + "\n"), use_json=True)
        history = [first.to_botzone(), Board.from_moves([first]).legal_moves()[0].to_botzone()]
        position = wiki_json_line(history, ())[:-1]  # without its closing brace
        read, noted = [], 0
        for text in TIME_LIMIT_TEXTS:
            value = botzone_limits.read_limit(json.loads(text))
            assert value in (None, 0.05), text
            simulations = turn_simulations(kept.ask(f'{position},"time_limit":{text}}}\n'))
            assert (simulations == 1) == (value is not None), (text, simulations)
            read.append(value is not None)
            noted += value is None and not botzone_limits.is_empty_limit(json.loads(text))
    finally:
        assert kept.close() == 0
    assert sum(read) == 8 and noted > 1
    assert len(kept.stderr.splitlines()) == 1, kept.stderr  # one note for the whole process
    assert "bot: note: time_limit" in kept.stderr, kept.stderr


def peak_rss_mib(binary: Path, *args: str) -> tuple[float, str]:
    """Peak resident memory (MiB) of one `--restart-per-turn` process on Black's first turn, and its
    JSON reply."""
    code = ("import resource, subprocess, sys; "
            "out = subprocess.run(sys.argv[1:], input=sys.stdin.read(), capture_output=True, text=True, check=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(out.stdout, end='')")
    result = subprocess.run([sys.executable, "-c", code, str(binary), "--restart-per-turn", *args],
                            input=json.dumps(FIRST_REQUEST_JSON) + "\n", capture_output=True, text=True, timeout=60,
                            check=True)
    peak_kib, reply = result.stdout.split("\n", 1)
    return int(peak_kib) / 1024, reply


def test_the_tree_uses_botzones_memory_with_a_margin(default_bot):
    # botzone_limits: the default tree (CPP_TREE_MIB) and everything else in the process stay under
    # CPP_PEAK_MEMORY_MIB (230 MB of Botzone's 256 MB) even if every page of the tree were written;
    # the rest is measured with a tree of 1 MiB. (How many simulations the first turn runs in its
    # 2 s, and whether the tree fills, are `--suite botzone`'s cpp_simulations_first and
    # cpp_tree_full_turns: figures of the machine.)
    source = (default_bot.parent / SOURCE_NAME).read_text()
    assert f"static const double TREE_MB_DEFAULT = {botzone_limits.CPP_TREE_MIB!r};" in source
    rest, _ = peak_rss_mib(default_bot, "--tree-mb", "1", "--simulations", "50")
    print(f"rest of the process {rest:.1f} MiB")
    assert rest - 1 + botzone_limits.CPP_TREE_MIB <= botzone_limits.CPP_PEAK_MEMORY_MIB, rest


def test_info_reports_the_capacity_the_tree_allocates(default_bot):
    def capacity(tree_mb: str) -> tuple[int, int]:
        result = subprocess.run([str(default_bot), "--info", "--tree-mb", tree_mb],
                                capture_output=True, text=True, timeout=30, check=False)
        assert result.returncode == 0, result.stderr
        edges, nodes = re.search(r"tree (-?\d+) edges and (-?\d+) nodes", result.stdout).groups()
        return int(edges), int(nodes)

    # The tree's own formula: a tree too small to allocate names the same counts in its refusal.
    small = subprocess.run([str(default_bot), "--tree-mb", "0.01", *FAST],
                           input=first_input([None], [], False), capture_output=True, text=True,
                           timeout=30, check=False)
    assert small.returncode == 2
    edges, nodes = capacity("0.01")
    assert f"--tree-mb 0.01 holds {edges} edges and {nodes} nodes" in small.stderr, small.stderr
    edges, nodes = capacity("200")
    assert edges > 2e7 and nodes == edges // 32
    # An int holds at most 2**31 - 1: the tree caps its edges at 2e9, and so does the report.
    assert capacity("1e9") == capacity("5e8") == (2_000_000_000, 2_000_000_000 // 32)


def test_a_full_tree_ends_the_search_with_a_legal_reply(default_bot):
    # 1 MiB holds about 130,000 edges: an opening search fills it long before 100,000 simulations.
    result = subprocess.run([str(default_bot), "--tree-mb", "1", "--simulations", "100000",
                             "--restart-per-turn"], input=json.dumps(FIRST_REQUEST_JSON) + "\n",
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    debug = json.loads(result.stdout)["debug"]
    assert "tree full" in debug and int(debug.split()[0]) < 100_000, debug
    assert Board().is_legal(parse_reply(result.stdout, use_json=True))


# ------------------------------------------------------------------------------------------------
# Bad input


BAD_INPUTS = {
    "not a turn number": ("x\n", "line 1: 'x' is not a turn number"),
    "truncated transcript": ("2\n-1 -1 -1 -1 -1 -1\n5 0 3 2 6 5\n", "input ended after 2 of the 3 move lines"),
    "empty input": ("", "input ended before the turn number"),
    "malformed move": ("1\n-1 -1 -1 -1 -1 x\n", "line 2: 'x' is not an integer"),
    "too few numbers": ("2\n-1 -1 -1 -1 -1 -1\n5 0 3 2 6\n0 5 4 5 3 4\n", "line 3: '5 0 3 2 6' is not a move"),
    "off the board": ("1\n9 0 3 2 6 5\n", "line 2: x0 = 9 is off the board"),
    "illegal move": ("2\n-1 -1 -1 -1 -1 -1\n5 0 5 7 6 5\n0 5 4 5 3 4\n", "move 1 of the game, '5 0 5 7 6 5'"),
    "-1 line later": ("2\n-1 -1 -1 -1 -1 -1\n-1 -1 -1 -1 -1 -1\n0 5 4 5 3 4\n", "only valid as Black's first request"),
    "bad JSON": ('{"requests": [\n', "bad JSON input"),
    "bad JSON escape": ('{"requests": [], "data": "\\u00zz"}\n', "bad JSON input: bad \\u escape"),
    "JSON count": ('{"requests": [], "responses": []}\n', "'requests' must be a non-empty list"),
    "JSON field": ('{"requests": [{"x0": 1}], "responses": []}\n', "requests[0]: the move object lacks y0"),
    "JSON float": ('{"requests": [{"x0": 0, "y0": 5, "x1": 4, "y1": 5, "x2": 3, "y2": 4.5}], "responses": []}\n',
                   "requests[0]: y2 is not an integer"),
    "JSON responses": ('{"requests": [{"x0": -1, "y0": -1, "x1": -1, "y1": -1, "x2": -1, "y2": -1}], '
                       '"responses": [{"x0": 5, "y0": 0, "x1": 3, "y1": 2, "x2": 6, "y2": 5}]}\n',
                       "1 requests and 1 responses"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_is_refused_with_a_message(default_bot, name):
    text, message = BAD_INPUTS[name]
    result = subprocess.run([str(default_bot), *FAST], input=text, capture_output=True, text=True, timeout=30,
                            check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("bot: ") and message in result.stderr, result.stderr


def test_a_bad_request_in_a_kept_process_ends_it_after_its_good_replies(default_bot):
    kept = KeptBot(default_bot, *FAST)
    reply = parse_reply(kept.ask(first_input([None], [], use_json=False)), use_json=False)
    board = Board()
    board.push(reply)
    kept.process.stdin.write("0 5 0 5 0 4\n")  # not a move: the amazon stays where it is
    kept.process.stdin.flush()
    assert kept.process.wait(timeout=30) == 2
    assert "move 2 of the game, '0 5 0 5 0 4'" in kept.process.stderr.read()
    assert kept.lines.get(timeout=30) is None  # nothing more on stdout


def test_bad_options_are_refused(default_bot):
    for args, message in ((["--time", "0"], "--time must be a positive number"),
                          (["--frobnicate", "1"], "unknown option '--frobnicate'"),
                          (["--perft", "9"], "--perft takes a depth 0..6")):
        result = subprocess.run([str(default_bot), *args], input="", capture_output=True, text=True, timeout=30,
                                check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_bot_with_embedded_weights_refuses_a_weights_file(default_bot, tmp_path):
    result = subprocess.run([str(default_bot), "--weights", str(tmp_path / "amazons.bin"), *FAST, "--restart-per-turn"],
                            input=first_input([None], [], use_json=False), capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert "--weights: this bot's weights are embedded" in result.stderr, result.stderr


def test_help_prints_the_options(default_bot):
    result = subprocess.run([str(default_bot), "--help"], input="", capture_output=True, text=True, timeout=30,
                            check=False)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.startswith("usage: bot") and "--tree-mb MB" in result.stdout and "--help" in result.stdout


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_the_bot_needs_no_clock_outside_the_c_library(default_bot):
    # clock_gettime lives in librt before glibc 2.17 (a link needs -lrt there); std::clock() is
    # the C library's everywhere.
    symbols = subprocess.run(["nm", "-D", "--undefined-only", str(default_bot)], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    assert "clock_gettime" not in symbols and " clock@" in symbols, symbols


# ------------------------------------------------------------------------------------------------
# The weights file and the exporter


@pytest.mark.slow
def test_weights_file_mode_and_its_errors(tmp_path):
    net = numpy_net.load_model(default_model_path())
    written = write_bot(net, tmp_path, weights_file="amazons.bin")
    assert [path.name for path in written] == [SOURCE_NAME, "amazons.bin"]
    source = (tmp_path / SOURCE_NAME).read_text()
    assert "static const char WEIGHTS_BASE64[]" not in source and "#define AMZ_WEIGHTS_EMBEDDED 0" in source
    binary = build(tmp_path, optimize="-O1")
    play = {"input": first_input([None], [], use_json=False), "capture_output": True, "text": True, "timeout": 30,
            "cwd": tmp_path, "check": False}
    result = subprocess.run([str(binary), *FAST, "--restart-per-turn"], **play)
    assert result.returncode == 2 and "weights file data/amazons.bin is missing" in result.stderr
    (tmp_path / "data").mkdir()
    stored = tmp_path / "data" / "amazons.bin"
    blob = weights_file_bytes(net)
    stored.write_bytes(blob)
    result = subprocess.run([str(binary), *FAST, "--restart-per-turn"], **play)
    assert result.returncode == 0 and Board().is_legal(Move.from_botzone(result.stdout.strip()))
    for damaged, message in ((blob[:-8], f"has {len(blob) - 8} bytes; this bot expects {len(blob)}"),
                             (blob[:100] + bytes([blob[100] ^ 1]) + blob[101:], "does not match its digest"),
                             (b"XXXXXXXX" + blob[8:], "not an amazons weights file")):
        stored.write_bytes(damaged)
        result = subprocess.run([str(binary), *FAST, "--restart-per-turn"], **play)
        assert result.returncode == 2 and result.stdout == "" and message in result.stderr, result.stderr
    other = random_model("tiny", "joint", seed=9)
    stored.write_bytes(weights_file_bytes(numpy_net.NumpyNet(*model_arrays(other))))
    result = subprocess.run([str(binary), *FAST, "--restart-per-turn"], **play)
    assert result.returncode == 2 and "this bot was exported for" in result.stderr
    os.remove(stored)
    result = subprocess.run([str(binary), "--weights", str(tmp_path / "amazons.bin"), *FAST, "--restart-per-turn"],
                            **play)
    assert result.returncode == 0, result.stderr


def test_the_exporter_refuses_what_it_cannot_write(tmp_path, capsys):
    for argv in (["default"], ["default", str(tmp_path / "x.npz")], ["default", "--weights-file", "w.bin"]):
        with pytest.raises(SystemExit):  # nothing to write; OUT for a numpy model; a file without --botzone
            main(argv)
    with pytest.raises(BotzoneExportError, match="plain file name"):
        write_bot(numpy_net.load_model(default_model_path()), tmp_path, weights_file="../escape.bin")
    assert main([str(tmp_path / "missing.npz"), "--botzone", str(tmp_path)]) == 2
    assert "missing.npz" in capsys.readouterr().err


def test_the_exporter_suggests_a_weights_file_for_a_large_source(tmp_path, capsys, monkeypatch):
    assert main(["default", "--botzone", str(tmp_path / "small")]) == 0
    assert "--weights-file" not in capsys.readouterr().out  # the shipped model's source is small
    monkeypatch.setattr(cpp_export, "LARGE_SOURCE_BYTES", 100_000)
    assert main(["default", "--botzone", str(tmp_path / "large")]) == 0
    out = capsys.readouterr().out
    assert "note: the source is" in out and "--weights-file NAME" in out, out
    assert main(["default", "--botzone", str(tmp_path / "file"), "--weights-file", "amazons.bin"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_a_checkpoint_exports_the_same_bot_as_its_numpy_model(tmp_path, capsys):
    checkpoint = default_model_path().with_suffix(".pt")
    assert main([str(checkpoint), "--botzone", str(tmp_path / "pt"), "--check-positions", "4"]) == 0
    assert main(["default", "--botzone", str(tmp_path / "npz")]) == 0
    assert "wrote" in capsys.readouterr().out
    # The shipped .npz was exported from the shipped .pt: the same weights, so the same model block
    # (only its comment line, which names the source, differs).
    assert _model_block(tmp_path / "pt" / SOURCE_NAME) == _model_block(tmp_path / "npz" / SOURCE_NAME)


def _model_block(path: Path) -> list[str]:
    """The generated model block's definitions (comment lines left out)."""
    text = path.read_text()
    start = text.index("// The model (written by the exporter)")
    block = text[start:text.index("// ====", start)]
    return [line for line in block.splitlines() if not line.startswith("//")]


# ----------------------------------------------------------------------------------------------
# Whole games through the arena's `botzone:` player (amazons.botzone.program), as Botzone runs it


@pytest.mark.parametrize(("interaction", "process_mode"),
                         [("simple", ()), ("json", ()), ("simple", ("--restart-per-turn",)),
                          ("json", ("--restart-per-turn",))],
                         ids=["simple-kept", "json-kept", "simple-restarted", "json-restarted"])
def test_arena_games_against_random_in_every_interaction(default_bot, interaction, process_mode):
    spec = f"botzone:{interaction}:{default_bot} {' '.join(process_mode)} --simulations 64"
    result = run_arena(spec, "random", games=2, processes=1, seed=5)
    assert not result.faults_a and not result.faults_b, result.summary()
    assert result.wins_a == 2, result.summary()  # 64 simulations with the shipped net beat random moves
    assert all(record.termination is None and len(record.moves) >= 8 for record in result.records)


@pytest.mark.slow
def test_arena_game_against_the_python_bot_in_both_interactions(default_bot):
    python_bot = f"{sys.executable} -m amazons.botzone --model default --time 0.3"
    for interaction in ("simple", "json"):
        cpp_bot = f"{default_bot} --time 0.25 --first-time 0.5"  # inside the arena's limits of 0.3 s and 0.6 s
        result = run_arena(f"botzone:{interaction},time=0.3:{cpp_bot}", f"botzone:{interaction},wall=6:{python_bot}",
                           games=2, processes=1, seed=9)
        assert not result.faults_a and not result.faults_b, result.summary()
        assert result.wins_a + result.wins_b == 2
