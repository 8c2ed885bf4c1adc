"""The C++ bot as a native twin, checked against the Python originals it mirrors.

The rules: its perft counts, legal-move lists and adjudication of separated positions against the
engine. The network: its value and priors against `npnet` on 200 positions from seeded random
games (for the shipped model and for random models of both policy heads, the arrow source term,
both feature sets, attention in and after the trunk, a channel count that takes the portable
kernels and one that splits the Winograd kernels' output channels into blocks of 16 and 8). The
search: the move it plays (LCB), its settings written from `NET_SEARCH`, the proofs of separated
positions, and the network cache, which changes no reply. Helpers and the compiled bot:
`tests/cpp_bot.py`, `default_bot` in `tests/conftest.py`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cpp_bot import (
    FIRST_REQUEST_JSON,
    NEEDS_GXX,
    KeptBot,
    build,
    game_endings,
    most_visited,
    move_object,
    parse_reply,
    root_search,
)
from test_npnet import random_model

from amazons import engine
from amazons.board import Board, Move
from amazons.botzone.cpp_export import SOURCE_NAME, write_bot
from amazons.export import TOLERANCE, model_arrays, random_positions
from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator
from amazons.mcts_numba import _t_quantile
from amazons.models import default_model_path
from amazons.neural import numpy_net

pytestmark = NEEDS_GXX


@pytest.fixture(scope="session")
def positions() -> np.ndarray:
    """200 canonical positions from seeded random games (0 to 50 plies, none terminal)."""
    return random_positions(200, seed=21, max_plies=50)


def selftest(binary: Path, positions: np.ndarray, tmp_path: Path,
             *extra: str) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """`(value, moves (K, 3) int32, priors (K,) float64)` per position, from `--selftest`."""
    listing = tmp_path / "positions.txt"
    np.savetxt(listing, positions, fmt="%d")
    result = subprocess.run([str(binary), "--selftest", str(listing), *extra], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    rows = []
    for line in result.stdout.splitlines():
        tokens = line.split()
        count = int(tokens[1])
        table = np.array(tokens[2:], dtype=np.float64).reshape(count, 4)
        rows.append((float(tokens[0]), table[:, :3].astype(np.int32), table[:, 3]))
    assert len(rows) == positions.shape[0]
    return rows


def assert_matches_npnet(binary: Path, net: numpy_net.NumpyNet, positions: np.ndarray,
                         tmp_path: Path, *extra: str) -> None:
    """The bot's legal moves are the engine's (same order); its value and priors npnet's."""
    moves, offsets = engine.legal_moves(positions)
    priors, values = numpy_net.NumpyEvaluator(net).evaluate(positions, moves, offsets)
    worst_value = worst_prior = 0.0
    rows = selftest(binary, positions, tmp_path, *extra)
    for index, (value, bot_moves, bot_priors) in enumerate(rows):
        block = slice(offsets[index], offsets[index + 1])
        np.testing.assert_array_equal(bot_moves, moves[block])
        worst_value = max(worst_value, abs(value - values[index]))
        worst_prior = max(worst_prior, float(np.abs(bot_priors - priors[block]).max()))
    assert worst_value <= TOLERANCE and worst_prior <= TOLERANCE, (worst_value, worst_prior)
    # The comparison means something: values spread out, priors far from uniform.
    assert np.ptp(values) > 0.1 and priors.max() * np.diff(offsets).max() > 3.0


# ------------------------------------------------------------------------------------------------
# Rules, network


def test_perft_from_the_start(default_bot):
    for depth, expected in ((1, 1232), (2, 1_331_198)):
        result = subprocess.run([str(default_bot), "--perft", str(depth)], capture_output=True,
                                text=True, timeout=60, check=True)
        assert int(result.stdout) == expected
        assert engine.perft_position(engine.start_position(), depth) == expected


def test_the_shipped_model_matches_npnet_with_either_kernels(default_bot, positions, tmp_path):
    net = numpy_net.load_model(default_model_path())
    assert_matches_npnet(default_bot, net, positions, tmp_path)
    assert_matches_npnet(default_bot, net, positions, tmp_path, "--portable")


def test_adjudication_matches_the_engine(default_bot, tmp_path):
    positions = game_endings(120, 25, seed=8)
    listing = tmp_path / "positions.txt"
    np.savetxt(listing, positions, fmt="%d")
    output = subprocess.run([str(default_bot), "--adjudicate", str(listing)], capture_output=True,
                            text=True, timeout=120, check=True).stdout
    table = np.array([line.split() for line in output.splitlines()], dtype=np.int64)
    result, bounds = engine.adjudicate(positions)
    np.testing.assert_array_equal(table[:, 0], result)
    np.testing.assert_array_equal(table[:, 1:], bounds)
    assert (result > 0).sum() > 20 and (result < 0).sum() > 20 and (bounds[:, 0] < 0).sum() > 1000


@pytest.mark.slow
@pytest.mark.parametrize(("head", "overrides"), [
    ("joint", {"attention_placement": "spread"}),  # residual, attention, residual
    ("factorized", {"num_planes": 3, "channels": 20, "head_dim": 12}),  # 20: not a multiple of 8
    ("joint", {"num_planes": 3, "channels": 24, "head_dim": 8}),  # 24 = 16 + 8; 3 planes padded
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


@pytest.mark.slow
def test_a_pooled_value_head_exports_and_matches_npnet(positions, tmp_path):
    """The Botzone export follows the pooled value head (the one every board size runs): a random
    flat net carried over to it (`pool_value_head`, so its values spread as the flat net's do)."""
    from amazons.neural.growth import pool_value_head

    model = pool_value_head(random_model("tiny", "joint", seed=3))
    config, trunk, arrays = model_arrays(model)
    assert config["value_head"] == "pooled"
    net = numpy_net.NumpyNet(config, trunk, arrays)
    write_bot(net, tmp_path)
    assert "shape.pooled_value = true;" in (tmp_path / SOURCE_NAME).read_text()
    binary = build(tmp_path, optimize="-O1")
    assert_matches_npnet(binary, net, positions[:80], tmp_path)
    assert_matches_npnet(binary, net, positions[:80], tmp_path, "--portable")


# ------------------------------------------------------------------------------------------------
# The search


def test_the_network_cache_changes_no_reply(default_bot):
    # A few hundred simulations a turn reach some positions twice (transpositions); taking the
    # network's outputs from the node that has one must leave every reply, root visit count and
    # value as the network makes them, through tree reuse and compaction.
    rng = np.random.default_rng(6)
    board = Board()
    bots = [KeptBot(default_bot, "--simulations", "400"),
            KeptBot(default_bot, "--simulations", "400", "--no-cache")]
    request = json.dumps(FIRST_REQUEST_JSON) + "\n"
    cached = 0
    while True:
        cached_reply, uncached_reply = (json.loads(bot.ask(request)) for bot in bots)
        assert cached_reply["response"] == uncached_reply["response"]
        # "N simulations (M this turn), value V, S s cpu, H cached[, ...]": all but the CPU time
        with_cache, without = (reply["debug"].split(", ")
                               for reply in (cached_reply, uncached_reply))
        assert with_cache[:2] == without[:2] and with_cache[4:] == without[4:], (with_cache,
                                                                                  without)
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


def test_the_bots_search_settings_follow_their_python_definitions(default_bot, tmp_path,
                                                                   monkeypatch):
    # The exporter writes the search's constants from NET_SEARCH (settings_block), read when the
    # bot is written: change them on the Python side and the bot's search follows, with nothing
    # typed twice in the C++.
    from amazons.players import factory as player_factory

    changed = player_factory.NET_SEARCH.replace(c_puct=0.05, c_puct_base=0.0, lcb=False)
    monkeypatch.setattr(player_factory, "NET_SEARCH", changed)
    write_bot(numpy_net.load_model(default_model_path()), tmp_path)
    source = (tmp_path / SOURCE_NAME).read_text()
    assert "static const double C_PUCT = 0.05;" in source
    assert "static const double C_PUCT_BASE = 0.0;" in source
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
    """Seeded random games stopped at their first separated position (a side to move with
    moves)."""
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
        root = np.repeat(board.canonical_position()[None], len(result.moves), 0)
        children = engine.apply_moves(root, result.moves.astype(np.int32))
        decided = engine.adjudicate(children)[0] != 0
        python = {Move(*real.tolist()): (int(proof), int(plies), bool(exact))
                  for real, proof, plies, exact in zip(board.canonical_to_real(result.moves),
                                                       result.move_proofs,
                                                       result.move_proof_plies, decided,
                                                       strict=True)}
        _, stats, _ = root_search(default_bot, board.move_stack, simulations=600)
        for move, _, _, _, proof, plies in stats:
            python_proof, python_plies, exact = python[move]
            if proof == 0 or python_proof == 0 or not exact:
                continue  # compared where both trees hold the child the adjudication decides
            assert (proof, plies) == (python_proof, python_plies), (board.ply, move)
            compared[proof] += 1
    assert compared[1] >= 5 and compared[-1] >= 20, compared
