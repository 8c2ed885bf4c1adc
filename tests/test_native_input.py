"""The native core (`amazons/native/`) refuses wrong input by name and shares its facts with Python.

Wrong input that is well typed (a batch of the right dtypes and shapes, a positions file of
three integers a line) can still break what the native core assumes: at most four amazons a
side, bitboards that do not overlap, moves that start on the side to move's amazons. The
extension (`amazons._native`, under `amazons.neural.native`) raises `ValueError` naming the position
and the move; the exported bot's positions-file reader exits with status 2 and a message. A
thread that cannot start is reported, not fatal, and one network object may be shared between
threads.

The facts both sides use have one definition: the C++ literals the extension keeps are checked
against their Python definitions, the network's shape reaches both the extension and the bot from
one mapping (`amazons.neural.numpy_net.native_shape`), every header compiles alone with the
generated settings header, and the plies a decided adjudication implies are computed the same way by
the search (`amazons.engine.adjudicated_plies`) and the C++ part (`adjudicate.h`) on positions from
random games. The C++ is built with g++; without it those tests are skipped.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from cpp_bot import game_endings
from test_npnet import random_model

from amazons import boards, engine
from amazons.botzone.cpp_export import (
    NATIVE_DIR,
    PARTS,
    SOURCE_NAME,
    compile_command,
    settings_header,
    write_bot,
)
from amazons.evaluator import EvaluatorInputError, check_batch
from amazons.export import model_arrays, random_positions
from amazons.neural import numpy_net
from amazons.neural.native import NativeEvaluator, native_available

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
NEEDS_NATIVE = pytest.mark.skipif(not native_available(),
                                  reason="the extension amazons._native is not built")
NEEDS_GXX = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

START = tuple(int(v) for v in engine.start_position())  # mine, theirs, arrows; Black to move
FIFTH = 1 << 27  # an empty square of the start position
FIVE_OF_MINE = (START[0] | FIFTH, START[1], START[2])
FIVE_OF_THEIRS = (START[0], START[1] | FIFTH, START[2])
LOWEST_OF_MINE = START[0] & -START[0]
OVERLAPPING = (START[0], START[1] | LOWEST_OF_MINE, START[2])  # two amazons on one square
UNHOLDABLE = [
    pytest.param(FIVE_OF_MINE, "the side to move has 5 amazons", id="five-of-mine"),
    pytest.param(FIVE_OF_THEIRS, "the opponent has 5 amazons", id="five-of-theirs"),
    pytest.param(OVERLAPPING, "its bitboards overlap", id="overlapping"),
]


def run(command: list[str], **options) -> subprocess.CompletedProcess:
    """`command`'s completed process, its output as text (a failure is the caller's to judge)."""
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False,
                          **options)


@pytest.fixture(scope="module")
def source_net() -> numpy_net.NumpyNet:
    """A tiny joint-head network with the arrow source term and attention in its trunk."""
    model = random_model("tiny", "joint", seed=3, arrow_source=True, attention_placement="spread")
    return numpy_net.NumpyNet(*model_arrays(model))


@pytest.fixture(scope="module")
def batch() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """24 canonical positions of seeded random games and their legal moves."""
    positions = random_positions(24, seed=17, max_plies=30)
    moves, offsets = engine.legal_moves(positions)
    return positions, moves, offsets


# ------------------------------------------------------------------------------------------------
# The evaluator


@NEEDS_NATIVE
@pytest.mark.parametrize("threads", [1, 3])
def test_a_move_not_from_the_movers_amazon_is_refused_by_position_and_move(source_net, batch,
                                                                            threads):
    positions, moves, offsets = batch
    evaluator = NativeEvaluator(source_net, threads=threads)
    bad = moves.copy()
    row = int(offsets[13]) + 5
    occupied = int(np.bitwise_or.reduce(positions[13]))
    empty = next(square for square in range(64) if not (occupied >> square) & 1)
    bad[row, 0] = empty
    with pytest.raises(ValueError, match=rf"position 13, move 5 \({empty} {bad[row, 1]} "
                                         rf"{bad[row, 2]}\): no amazon of the side to move"):
        evaluator.evaluate(positions, bad, offsets)
    # The refusal left the network usable: the batch, corrected, evaluates as on a fresh one.
    got = evaluator.evaluate(*batch)
    np.testing.assert_array_equal(got[1], NativeEvaluator(source_net).evaluate(*batch)[1])


@NEEDS_NATIVE
@pytest.mark.parametrize(("position", "reason"), UNHOLDABLE)
def test_positions_the_network_cannot_hold_are_refused_by_index(source_net, batch, position,
                                                                reason):
    positions, moves, offsets = batch
    bad_positions = positions.copy()
    bad_positions[7] = position
    with pytest.raises(ValueError, match=rf"position 7: {reason}"):
        NativeEvaluator(source_net).evaluate(bad_positions, moves, offsets)


@NEEDS_NATIVE
def test_squares_off_the_board_are_refused_where_the_extension_is_called_directly(source_net,
                                                                                   batch):
    positions, moves, offsets = batch
    core = NativeEvaluator(source_net)._core
    priors = np.empty(moves.shape[0], np.float32)
    values = np.empty(positions.shape[0], np.float32)
    for column, square in ((1, 64), (2, -1)):
        bad = moves.copy()
        bad[int(offsets[3]), column] = square
        with pytest.raises(ValueError, match=r"position 3, move 0 .*squares 0\.\.63"):
            core.evaluate(positions, bad, offsets, priors, values, 1)
    with pytest.raises(ValueError, match="offsets fall at position 1"):
        core.evaluate(positions, moves, np.r_[0, moves.shape[0], offsets[2:]], priors, values, 1)


def stacks_of_8_mib() -> None:
    """Threads get stacks of 8 MiB in the process about to start (glibc sizes them by
    RLIMIT_STACK when the process starts, with a larger default where it is unlimited)."""
    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
    limit = 8 << 20 if hard == resource.RLIM_INFINITY else min(8 << 20, hard)
    resource.setrlimit(resource.RLIMIT_STACK, (limit, hard))


@NEEDS_NATIVE
def test_a_thread_that_cannot_start_is_an_error_not_an_abort():
    # The address space capped just above what the process holds: the first of two threads
    # gets its stack, the second cannot (no thread ran before in the process, so glibc has no
    # cached stack to hand out).
    script = textwrap.dedent("""
        import resource
        from amazons import engine
        from amazons.neural import numpy_net
        from amazons.export import random_positions
        from amazons.models import default_model_path
        from amazons.neural.native import NativeEvaluator

        evaluator = NativeEvaluator(numpy_net.load_model(default_model_path()), threads=2)
        positions = random_positions(64, seed=3)
        moves, offsets = engine.legal_moves(positions)
        evaluator.evaluate(positions[:1], moves[:offsets[1]], offsets[:2])  # on one thread
        stack = resource.getrlimit(resource.RLIMIT_STACK)[0]  # a thread's stack
        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * resource.getpagesize()
        cap = size + stack + (4 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))
        try:
            evaluator.evaluate(positions, moves, offsets)
        except RuntimeError as error:
            print("refused:", error)
        else:
            print("both threads ran")
    """)
    result = run([sys.executable, "-c", script], cwd=REPO, preexec_fn=stacks_of_8_mib)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.startswith("refused: cannot start thread 2 of 2"), result.stdout


@NEEDS_NATIVE
def test_one_native_network_is_safe_to_share_between_threads(batch):
    # Three threads evaluate on one network with different thread counts (its per-thread
    # buffers grow) while a fourth loads the two networks' weights in turn: every evaluation
    # is one network's outputs, never a mixture.
    models = [random_model("tiny", "joint", seed=seed, arrow_source=True) for seed in (5, 6)]
    nets = [numpy_net.NumpyNet(*model_arrays(model)) for model in models]
    want = [NativeEvaluator(net).evaluate(*batch) for net in nets]
    shared = NativeEvaluator(nets[0])
    positions, moves, offsets = batch
    failures: list[str] = []
    done = threading.Event()

    def evaluate(threads: int) -> None:
        priors = np.empty(moves.shape[0], np.float32)
        values = np.empty(positions.shape[0], np.float32)
        try:
            for _ in range(40):
                shared._core.evaluate(positions, moves, offsets, priors, values, threads)
                if not any(np.array_equal(priors, p) and np.array_equal(values, v)
                           for p, v in want):
                    failures.append(f"{threads} threads: outputs of neither network")
        except Exception as error:  # noqa: BLE001  (reported by the test)
            failures.append(f"{threads} threads: {error!r}")

    def load() -> None:
        count = 0
        while not done.is_set():
            shared.load_net(nets[count % 2])
            count += 1

    loader = threading.Thread(target=load)
    workers = [threading.Thread(target=evaluate, args=(threads,)) for threads in (1, 3, 5)]
    loader.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    done.set()
    loader.join(60)
    assert not failures, failures[:5]


@NEEDS_NATIVE
def test_both_evaluators_refuse_a_bad_batch_by_the_one_contract(source_net, batch):
    positions, moves, offsets = batch
    cases = [
        ((positions.astype(np.int64), moves, offsets), "positions must be"),
        ((positions, moves, offsets[::-1].copy()), "move_offsets must rise"),
        ((positions, moves + 64, offsets), "squares 0..63"),
    ]
    for arguments, message in cases:
        for evaluate in (check_batch, numpy_net.NumpyEvaluator(source_net).evaluate,
                         NativeEvaluator(source_net).evaluate):
            with pytest.raises(EvaluatorInputError, match=message):
                evaluate(*arguments)


# ------------------------------------------------------------------------------------------------
# The rules


@NEEDS_NATIVE
@pytest.mark.parametrize(("position", "reason"), UNHOLDABLE)
def test_the_native_rules_refuse_positions_they_cannot_hold(position, reason):
    from amazons import _native

    with pytest.raises(ValueError, match=reason):
        _native.legal_move_array(*position)
    with pytest.raises(ValueError, match=reason):
        _native.perft_position(*position, 1)
    assert _native.legal_move_array(*START).shape == (1232, 3)


# ------------------------------------------------------------------------------------------------
# The exported bot


@pytest.fixture(scope="module")
def bot(tmp_path_factory, source_net) -> Path:
    """The C++ bot of `source_net`, exported and built as Botzone builds it (at -O1), warnings
    as errors."""
    directory = tmp_path_factory.mktemp("native-input-bot")
    write_bot(source_net, directory)
    binary = directory / "bot"
    result = run([*compile_command(directory / SOURCE_NAME, binary, optimize="-O1"), "-Werror"])
    assert result.returncode == 0 and not result.stderr, result.stderr
    return binary


@NEEDS_GXX
def test_the_bots_network_matches_npnet(bot, source_net, batch, tmp_path):
    # The network's shape reaches the bot from the one mapping (numpy_net.native_shape).
    positions, moves, offsets = batch
    listing = tmp_path / "positions.txt"
    np.savetxt(listing, positions, fmt="%d")
    result = run([str(bot), "--selftest", str(listing)])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == positions.shape[0]
    priors, values = numpy_net.NumpyEvaluator(source_net).evaluate(*batch)
    for index, line in enumerate(lines):
        tokens = line.split()
        table = np.array(tokens[2:], dtype=np.float64).reshape(int(tokens[1]), 4)
        block = slice(offsets[index], offsets[index + 1])
        np.testing.assert_array_equal(table[:, :3], moves[block])
        np.testing.assert_allclose(table[:, 3], priors[block], atol=1e-4)
        assert abs(float(tokens[0]) - values[index]) <= 1e-4


@NEEDS_GXX
@pytest.mark.parametrize(("position", "reason"), UNHOLDABLE)
def test_the_bot_refuses_positions_files_its_rules_cannot_hold(bot, tmp_path, position, reason):
    listing = tmp_path / "positions.txt"
    listing.write_text("\n".join(" ".join(map(str, triple)) for triple in (START, position)) + "\n")
    for option in ("--selftest", "--forward-speed", "--adjudicate"):
        result = run([str(bot), option, str(listing)])
        assert (result.returncode, result.stdout) == (2, ""), (option, result.stdout[:200])
        assert f"position 2: {reason}" in result.stderr, (option, result.stderr)


# ------------------------------------------------------------------------------------------------
# One definition of each fact


@NEEDS_NATIVE
def test_the_constants_the_extension_keeps_equal_their_python_definitions():
    from amazons import _engine, _native

    assert _native.native_constants() == {
        "MAX_MOVES": engine.MAX_MOVES,
        "AMAZONS_PER_SIDE": _engine.AMAZONS_PER_SIDE,
        **{f"TRUNK_{kind.upper()}": code for code, kind in enumerate(numpy_net.TRUNK_LAYERS)},
        "MIN_BOARD_SIZE": min(boards.SIZES), "MAX_BOARD_SIZE": max(boards.SIZES),
    }
    assert boards.SIZES == tuple(range(min(boards.SIZES), max(boards.SIZES) + 1))


@NEEDS_NATIVE
def test_the_network_shape_is_mapped_once(source_net):
    from amazons import _native

    shape = numpy_net.native_shape(source_net.config, source_net.trunk_layers)
    assert shape["trunk"] == [numpy_net.TRUNK_LAYERS.index(kind)
                              for kind in source_net.trunk_layers]
    assert _native.shape_error(shape) == ""
    floats = sum(array.size for _, array in source_net.layout_arrays())
    assert _native.weight_floats(shape) == floats
    with pytest.raises(ValueError, match="trunk layer 1 is of kind 'dense'"):
        numpy_net.native_shape(source_net.config, ["residual", "dense"])
    with pytest.raises(ValueError, match="policy_head 'wide'"):
        numpy_net.native_shape({**source_net.config, "policy_head": "wide"},
                               source_net.trunk_layers)


@NEEDS_GXX
def test_every_native_header_compiles_alone(tmp_path):
    (tmp_path / "settings.h").write_text(settings_header())
    headers = [str(NATIVE_DIR / name) for name in (*PARTS, "evaluator.h") if name.endswith(".h")]
    result = run(["g++", "-std=c++11", "-fsyntax-only", "-Wall", "-Wextra", "-Wno-unused-function",
                  "-Wno-unused-variable", "-Wno-unused-const-variable", f"-I{tmp_path}", *headers])
    assert result.returncode == 0 and not result.stderr, result.stderr


ADJUDICATED_PLIES_DRIVER = """
#include "adjudicate.h"

// Per canonical position on stdin ("mine theirs arrows"): the adjudication and its plies.
int main() {
    init_tables();
    unsigned long long mine, theirs, arrows;
    while (std::scanf("%llu %llu %llu", &mine, &theirs, &arrows) == 3) {
        Pos pos = {mine, theirs, arrows};
        int bounds[4];
        int result = adjudicate(pos, bounds);
        std::printf("%d %d\\n", result, result != 0 ? adjudicated_plies(result, bounds) : 0);
    }
    return 0;
}
"""


@NEEDS_GXX
def test_the_plies_of_a_decided_adjudication_agree_with_the_search(tmp_path):
    (tmp_path / "settings.h").write_text(settings_header())
    (tmp_path / "driver.cpp").write_text(ADJUDICATED_PLIES_DRIVER)
    binary = tmp_path / "driver"
    built = run(["g++", "-std=c++11", "-O1", f"-I{tmp_path}", f"-I{NATIVE_DIR}", "-o", str(binary),
                 str(tmp_path / "driver.cpp")])
    assert built.returncode == 0, built.stderr
    positions = game_endings(60, 20, seed=4)
    text = "".join(f"{a} {b} {c}\n" for a, b, c in positions.tolist())
    output = run([str(binary)], input=text)
    assert output.returncode == 0, output.stderr
    table = np.array([line.split() for line in output.stdout.splitlines()], dtype=np.int64)
    result, bounds = engine.adjudicate(positions)
    np.testing.assert_array_equal(table[:, 0], result)
    decided = result != 0
    want = engine.adjudicated_plies(result[decided], bounds[decided])
    np.testing.assert_array_equal(table[decided, 1], want)
    assert (result > 0).sum() > 10 and (result < 0).sum() > 10
