"""The torch-free network (`amazons.neural.numpy_net`) against the torch model; its file format.

Every preset and both policy heads (the joint one with and without the arrow source term) are
exported from torch models whose batch norms have non-trivial statistics and whose attention gates
are open, then run in numpy: legal-move priors and values must match the torch model's within
`amazons.export.TOLERANCE` (1e-4) on random positions from the start to the middle game. Networks
with the pooled value head run on boards of 6, 8 and 10 squares a side too: their log tables,
values and ownership maps match torch's within float32 rounding along the forward pass's longest
sum (`test_growth.rounding_bound`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from floats import assert_close, assert_same_weights, weights_mismatch
from test_growth import moved_from_init, rounding_bound

from amazons import engine
from amazons.evaluator import EvaluatorInputError
from amazons.export import (
    TOLERANCE,
    ExportError,
    export_checkpoint,
    export_model,
    main,
    model_arrays,
    random_positions,
    torch_outputs,
)
from amazons.mcts import BatchedSearch, SearchConfig
from amazons.models import default_checkpoint_path, default_model_path
from amazons.neural import numpy_net
from amazons.neural.model import (
    GlobalSelfAttention,
    PolicyTables,
    PolicyValueNet,
    gather_legal_priors,
    net_config,
    policy_log_tables,
)

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
HEADS = ("joint", "factorized")


def random_model(preset: str, head: str, seed: int = 0, **overrides) -> PolicyValueNet:
    """A randomly initialized model with batch-norm statistics and gates far from their defaults."""
    torch.manual_seed(seed)
    model = PolicyValueNet(net_config(preset, policy_head=head, **overrides))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.3, 0.3)
                module.running_mean.uniform_(-0.3, 0.3)
                module.running_var.uniform_(0.5, 2.0)
            if isinstance(module, GlobalSelfAttention):
                module.gate.fill_(0.7)
        model.value_head.out.weight.mul_(30.0)  # values spread over [-1, 1], not all near 0
    return model.eval()


@pytest.fixture(scope="module")
def positions() -> np.ndarray:
    return random_positions(24, seed=5, max_plies=40)


def assert_matches_torch(model: PolicyValueNet, path: Path, positions: np.ndarray) -> None:
    expected_priors, expected_values = torch_outputs(model, positions)
    moves, offsets = engine.legal_moves(positions)
    priors, values = numpy_net.NumpyEvaluator.from_file(path).evaluate(positions, moves, offsets)
    assert priors.dtype == np.float32 and values.dtype == np.float32
    assert np.abs(priors - expected_priors).max() <= TOLERANCE
    assert np.abs(values - expected_values).max() <= TOLERANCE
    # The comparison means something: priors far from uniform, values spread out.
    counts = np.diff(offsets)
    assert (expected_priors.max() * counts.max()) > 3.0
    assert np.ptp(expected_values) > 10 * TOLERANCE


@pytest.mark.parametrize(("head", "overrides"),
                         [("joint", {}), ("factorized", {}), ("joint", {"arrow_source": True})],
                         ids=["joint", "factorized", "joint-source"])
@pytest.mark.parametrize("preset", ["tiny", "small", "medium"])
def test_numpy_forward_matches_torch(preset, head, overrides, positions, tmp_path):
    model = random_model(preset, head, **overrides)
    path, differences = export_model(model, tmp_path / f"{preset}.npz", check_positions=0)
    assert differences == {"priors": 0.0, "values": 0.0}
    assert_matches_torch(model, path, positions)


@pytest.mark.slow
@pytest.mark.parametrize("head", HEADS)
def test_numpy_forward_matches_torch_resnet40(head, positions, tmp_path):
    model = random_model("resnet40", head)
    path, _ = export_model(model, tmp_path / "resnet40.npz", check_positions=0)
    assert_matches_torch(model, path, positions[:8])


@pytest.mark.parametrize("overrides", [
    {"num_planes": 3},
    {"attention_blocks": 2, "attention_placement": "spread"},
    {"attention_blocks": 0},
    {"arrow_source": True, "ownership_head": True, "num_planes": 3}])
def test_numpy_forward_other_shapes(overrides, positions, tmp_path):
    model = random_model("tiny", "joint", seed=3, **overrides)
    path, _ = export_model(model, tmp_path / "model.npz", check_positions=0)
    net = numpy_net.load_model(path)
    assert net.trunk_layers.count("attention") == model.config.attention_blocks
    assert_matches_torch(model, path, positions)


def board_planes(size: int, count: int, seed: int, planes: int = 7) -> np.ndarray:
    """`(count, planes, size, size) float32` feature planes of made-up boards: 4 amazons of the
    side to move (plane 0) and 4 of the opponent (plane 1) on distinct squares, arrows (plane 2)
    on about a quarter of the rest, the other planes random 0 / 1 (no engine for other sizes
    needed: the network reads planes)."""
    rng = np.random.default_rng(seed)
    squares = size * size
    out = np.zeros((count, planes, squares), np.float32)
    for row in range(count):
        order = rng.permutation(squares)
        out[row, 0, order[:4]] = 1.0
        out[row, 1, order[4:8]] = 1.0
        out[row, 2, order[8:][rng.random(squares - 8) < 0.25]] = 1.0
    out[:, 3:] = rng.random((count, planes - 3, squares)) < 0.5
    return out.reshape(count, planes, size, size)


@pytest.mark.parametrize("size", [6, 8, 10])
@pytest.mark.parametrize(("head", "overrides"),
                         [("joint", {}), ("factorized", {}), ("joint", {"arrow_source": True})],
                         ids=["joint", "factorized", "joint-source"])
def test_pooled_numpy_forward_matches_torch_on_every_size(size, head, overrides, positions,
                                                          tmp_path):
    config = net_config("tiny", policy_head=head, value_head="pooled", ownership_head=True,
                        **overrides)
    model = moved_from_init(config, seed=size + len(overrides)).eval()
    path, _ = export_model(model, tmp_path / "pooled.npz", check_positions=0)
    net = numpy_net.load_model(path)
    if size == 8:  # the search's path on real positions, as every other network
        assert_matches_torch(model, path, positions)
    features = board_planes(size, 24, seed=size)
    with torch.no_grad():
        output = model(torch.from_numpy(features))
    want = policy_log_tables(output.policy)
    tables, values = net.forward(features)
    # The network's longest sum on this board, in ulps of the order-1 activations; a table entry
    # is a log-probability or a logit, off by that much times its own size at most.
    bound = rounding_bound(config, squares=size * size)
    for name in ("log_move", "log_arrow", "source_arrow", "source_norm"):
        if getattr(want, name) is None:
            assert getattr(tables, name) is None, name
            continue
        assert getattr(tables, name).shape == (24, 4 * size * size if name.startswith("source")
                                               else size ** 4), name
        assert_close(getattr(tables, name), getattr(want, name).numpy(), rtol=bound, atol=bound,
                     what=name)
    if want.source_slot is not None:
        assert np.array_equal(tables.source_slot, want.source_slot.numpy())
    assert_close(values, output.value.numpy(), atol=bound, what="values")
    assert_close(net.ownership(features), output.ownership.numpy(), atol=bound, what="ownership")
    # The comparison means something: values spread out, no move distribution uniform (in each,
    # some pair e times likelier than another).
    assert np.ptp(values) > 100 * bound
    assert np.ptp(tables.log_move, axis=1).min() > 1.0


def test_the_check_catches_a_wrong_weight(tmp_path):
    model = random_model("tiny", "joint")
    config, trunk, arrays = model_arrays(model)
    arrays["value_head.out.bias"] = arrays["value_head.out.bias"] + 0.5
    path = numpy_net.write_model(tmp_path / "wrong.npz", config, trunk, arrays)
    positions = random_positions(8, seed=1)
    _, expected_values = torch_outputs(model, positions)
    moves, offsets = engine.legal_moves(positions)
    _, values = numpy_net.NumpyEvaluator.from_file(path).evaluate(positions, moves, offsets)
    assert np.abs(values - expected_values).max() > 0.01


def test_export_refuses_a_model_it_cannot_reproduce(tmp_path, monkeypatch):
    model = random_model("tiny", "joint")
    real_arrays = model_arrays

    def skewed(model):
        config, trunk, arrays = real_arrays(model)
        arrays["stem.conv.bias"] = arrays["stem.conv.bias"] + 1.0
        return config, trunk, arrays

    monkeypatch.setattr("amazons.export.model_arrays", skewed)
    with pytest.raises(ExportError, match="differs from the torch model"):
        export_model(model, tmp_path / "skewed.npz", check_positions=8)
    assert not (tmp_path / "skewed.npz").exists()


@pytest.mark.parametrize("source", [False, True])
def test_legal_priors_is_gather_legal_priors(positions, source):
    rng = np.random.default_rng(2)
    batch = positions.shape[0] + 1  # one more table row: position 2 below owns no move

    def table(scale: float) -> torch.Tensor:
        return torch.from_numpy(rng.normal(size=(batch, 4096)).astype(np.float32) * scale)

    log_move = torch.log_softmax(table(3.0), -1)
    log_arrow = torch.log_softmax(table(1.0).reshape(batch, 64, 64), -1).reshape(batch, 4096)
    tables = PolicyTables(log_move, log_arrow)
    if source:  # slots on the amazons' squares in even rows; in odd rows on random squares, which
        # most moves do not leave (they keep P(arrow | dst))
        rows = np.concatenate([positions[:2], positions[2:3], positions[2:]])  # the rows' positions
        amazons = engine.features(rows, 3)[:, 0].reshape(batch, 64)
        slots = torch.full((batch, 64), -1, dtype=torch.int64)
        for row in range(batch):
            squares = (np.flatnonzero(amazons[row]) if row % 2 == 0
                       else rng.choice(64, 4, replace=False))
            slots[row, torch.from_numpy(squares)] = torch.arange(4)
        tables = PolicyTables(log_move, log_arrow, table(2.0)[:, :256], table(1.0)[:, :256], slots)
    moves, offsets = engine.legal_moves(positions)
    offsets = np.concatenate([offsets[:3], offsets[2:3], offsets[3:]])  # position 2 owns no move
    expected = gather_legal_priors(tables, torch.from_numpy(moves),
                                   torch.from_numpy(np.repeat(np.arange(batch), np.diff(offsets))))
    priors = numpy_net.legal_priors(
        numpy_net.PolicyTables(*(None if t is None else t.numpy() for t in tables)), moves, offsets)
    assert np.abs(priors - expected.numpy()).max() < 1e-6
    assert np.allclose(np.add.reduceat(priors, offsets[:-1][np.diff(offsets) > 0]), 1.0, atol=1e-5)
    if source:  # the term counted
        plain = numpy_net.legal_priors(numpy_net.PolicyTables(log_move.numpy(), log_arrow.numpy()),
                                       moves, offsets)
        assert np.abs(priors - plain).max() > 1e-2


def test_the_evaluator_drives_a_search(tmp_path):
    path, _ = export_model(random_model("tiny", "joint"), tmp_path / "tiny.npz", check_positions=0)
    search = BatchedSearch(numpy_net.NumpyEvaluator.from_file(path),
                           SearchConfig(simulations=32, leaves_per_game=4), num_games=2)
    search.set_roots(random_positions(2, seed=9))
    stats = search.search()
    assert stats.simulations == 64 and stats.batches >= 8
    assert search.root_result(0).visits.sum() == 32


def test_the_evaluator_scores_a_10x10_search_as_the_native_one(tmp_path):
    from amazons.board import Board
    from amazons.neural.native import NativeEvaluator

    path, _ = export_model(random_model("tiny", "joint", value_head="pooled",
                                        ownership_head=True),
                           tmp_path / "pooled.npz", check_positions=0)
    net = numpy_net.load_model(path)
    evaluator = numpy_net.NumpyEvaluator(net, board_size=10)
    board = Board(start="standard10")
    search = BatchedSearch(evaluator, SearchConfig(simulations=24, leaves_per_game=4))
    assert search.size == 10
    search.set_roots(board.canonical_position())
    search.search()
    assert search.root_result(0).visits.sum() == 24
    positions = search.root_positions
    moves, offsets = engine.legal_moves(positions, size=10)
    priors, values = evaluator.evaluate(positions, moves, offsets)
    native_priors, native_values = NativeEvaluator(net, board_size=10).evaluate(
        positions, moves, offsets)
    # the same float32 network computed two ways: a few ulps through its depth, far below 1e-4
    assert_close(priors, native_priors, rtol=1e-4, atol=1e-7, what="10x10 priors")
    assert_close(values, native_values, rtol=0, atol=1e-5, what="10x10 values")
    assert evaluator.ownership(positions).shape == (1, 100)
    flat_path, _ = export_model(random_model("tiny", "joint"), tmp_path / "flat.npz",
                                check_positions=0)
    with pytest.raises(numpy_net.NpNetInputError, match="plays 8x8 only, not 10x10"):
        numpy_net.NumpyEvaluator(numpy_net.load_model(flat_path), board_size=10)
    with pytest.raises(EvaluatorInputError, match="positions"):
        evaluator.evaluate(random_positions(1, seed=1), *engine.legal_moves(random_positions(1,
                                                                                  seed=1)))


def test_evaluator_rejects_bad_input(tmp_path):
    path, _ = export_model(random_model("tiny", "joint"), tmp_path / "tiny.npz", check_positions=0)
    evaluator = numpy_net.NumpyEvaluator.from_file(path)
    positions = random_positions(2, seed=4)
    moves, offsets = engine.legal_moves(positions)
    with pytest.raises(EvaluatorInputError, match="positions must be a"):
        evaluator.evaluate(positions.astype(np.int64), moves, offsets)
    with pytest.raises(EvaluatorInputError, match="moves must be an"):
        evaluator.evaluate(positions, moves.astype(np.int64), offsets)
    with pytest.raises(EvaluatorInputError, match="move_offsets must rise"):
        evaluator.evaluate(positions, moves, offsets[::-1].copy())
    with pytest.raises(numpy_net.NpNetInputError, match="features must be"):
        evaluator.net.forward(np.zeros((1, 3, 8, 8), np.float32))


# ------------------------------------------------------------------------------------------------
# The file


def header_of(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return json.loads(data["header"].tobytes())


def rewrite(path: Path, target: Path, header: dict | None = None, drop: str | None = None,
            change: str | None = None) -> Path:
    """A copy of an exported file with its header replaced, an array dropped or changed."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    if header is not None:
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    if drop is not None:
        del arrays[drop]
    if change is not None:
        arrays[change] = arrays[change] * 2.0
    np.savez(target, **arrays)
    return target


@pytest.fixture
def exported(tmp_path) -> Path:
    path, _ = export_model(random_model("tiny", "factorized"), tmp_path / "tiny.npz",
                           check_positions=0, source={"note": "test"})
    return path


def test_the_file_holds_a_versioned_header_and_plain_arrays(exported):
    header = header_of(exported)
    # without the arrow source term
    assert (header["format"], header["version"]) == (numpy_net.FORMAT, 2)
    assert (header["net_config"]["policy_head"] == "factorized"
            and header["source"] == {"note": "test"})
    assert header["trunk"] == ["residual", "residual", "attention"]
    with zipfile.ZipFile(exported) as archive:
        names = {name.removesuffix(".npy") for name in archive.namelist()}
    assert names == {"header"} | set(numpy_net.expected_shapes(header["net_config"],
                                                               header["trunk"]))
    assert not [path for path in exported.parent.iterdir() if path.name.endswith(".tmp")]


@pytest.mark.parametrize("edit, message", [
    (lambda h: {**h, "version": 99}, "format version 99"),
    (lambda h: {**h, "format": "other"}, "not an exported amazons model"),
    (lambda h: {**h, "trunk": ["residual", "mystery"]}, "trunk layer 1 is 'mystery'"),
    (lambda h: {**h, "net_config": {**h["net_config"], "channels": 0}}, "channels"),
])
def test_load_names_what_is_wrong_in_the_header(exported, tmp_path, edit, message):
    target = rewrite(exported, tmp_path / "bad.npz", header=edit(header_of(exported)))
    with pytest.raises(numpy_net.ModelFileError, match=message):
        numpy_net.load_model(target)


def test_load_refuses_changed_missing_or_foreign_content(exported, tmp_path):
    with pytest.raises(numpy_net.ModelFileError, match="SHA-256"):
        numpy_net.load_model(rewrite(exported, tmp_path / "a.npz", change="value_head.out.weight"))
    with pytest.raises(numpy_net.ModelFileError, match="missing \\['stem.conv.bias'\\]"):
        numpy_net.load_model(rewrite(exported, tmp_path / "b.npz", drop="stem.conv.bias"))
    truncated = tmp_path / "c.npz"
    truncated.write_bytes(exported.read_bytes()[:5000])
    with pytest.raises(numpy_net.ModelFileError, match="not a readable model file"):
        numpy_net.load_model(truncated)
    pickled = tmp_path / "d.npz"
    np.savez(pickled, header=np.array([{"format": numpy_net.FORMAT}], dtype=object))
    with pytest.raises(numpy_net.ModelFileError, match="allow_pickle=False"):
        numpy_net.load_model(pickled)  # an object array would need pickle: refused
    with pytest.raises(FileNotFoundError):
        numpy_net.load_model(tmp_path / "none.npz")


def test_the_arrow_source_term_is_version_3_and_checked(tmp_path):
    path, _ = export_model(random_model("tiny", "joint", arrow_source=True),
                           tmp_path / "source.npz", check_positions=0)
    header = header_of(path)
    assert header["version"] == 3 and header["net_config"]["arrow_source"] is True
    net = numpy_net.load_model(path)
    assert net.has_arrow_source and net.num_parameters() == sum(
        int(np.prod(shape))
        for shape in numpy_net.expected_shapes(header["net_config"], header["trunk"]).values())
    assert [name for name, _ in net.layout_arrays() if "arrow_source" in name] == [
        "policy_head.arrow_source.weight", "policy_head.arrow_source.bias"]
    with pytest.raises(numpy_net.ModelFileError,
                       match="missing \\['policy_head.arrow_source.bias'\\]"):
        numpy_net.load_model(rewrite(path, tmp_path / "a.npz",
                                     drop="policy_head.arrow_source.bias"))
    without = {**header, "net_config": {**header["net_config"], "arrow_source": False}}
    with pytest.raises(numpy_net.ModelFileError,
                       match="unknown \\['policy_head.arrow_source.bias'"):
        numpy_net.load_model(rewrite(path, tmp_path / "b.npz", header=without))
    for value, message in ((1, "'arrow_source' must be true or false"),
                           (None, "must be true or false")):
        changed = {**header, "net_config": {**header["net_config"], "arrow_source": value}}
        with pytest.raises(numpy_net.ModelFileError, match=message):
            numpy_net.load_model(rewrite(path, tmp_path / "c.npz", header=changed))
    factorized = {**header["net_config"], "policy_head": "factorized"}
    with pytest.raises(numpy_net.ModelFileError, match="arrow_source needs policy_head 'joint'"):
        numpy_net.expected_shapes(factorized, header["trunk"])


def test_the_pooled_value_head_is_version_4_and_checked(tmp_path):
    path, differences = export_model(random_model("tiny", "joint", value_head="pooled"),
                                     tmp_path / "pooled.npz", check_positions=8)
    assert max(differences.values()) <= TOLERANCE
    header = header_of(path)
    assert header["version"] == numpy_net.VERSION == 4
    assert header["net_config"]["value_head"] == "pooled"
    assert arrays_of(path)["value_head.hidden.weight"].shape == (32, 3 * 2)  # tiny: 32 x 2 x 3
    net = numpy_net.load_model(path)
    assert net.value_head == "pooled"
    # the native core (and so the Botzone C++ export) runs it: its NetShape says so
    assert numpy_net.native_shape(net.config, net.trunk_layers)["pooled_value"] is True
    # a flat network's file is the one written before the field: version 2, no value_head
    flat, _ = export_model(random_model("tiny", "joint"), tmp_path / "flat.npz",
                           check_positions=0)
    assert header_of(flat)["version"] == 2 and "value_head" not in header_of(flat)["net_config"]
    with pytest.raises(numpy_net.NpNetInputError, match="10x10: the flat value head.*8x8-only"):
        numpy_net.load_model(flat).forward(np.zeros((1, 7, 10, 10), np.float32))
    with pytest.raises(numpy_net.NpNetInputError, match="12x12: the network runs on boards of"):
        net.forward(np.zeros((1, 7, 12, 12), np.float32))
    as_flat = {**header, "net_config": {**header["net_config"], "value_head": "flat"}}
    with pytest.raises(numpy_net.ModelFileError,
                       match=r"'value_head.hidden.weight' is float32 \(32, 6\); expected "
                             r"float32 \(32, 128\)"):
        numpy_net.load_model(rewrite(path, tmp_path / "a.npz", header=as_flat))
    unknown = {**header, "net_config": {**header["net_config"], "value_head": "square"}}
    with pytest.raises(numpy_net.ModelFileError, match="'value_head' must be one of"):
        numpy_net.load_model(rewrite(path, tmp_path / "b.npz", header=unknown))


def test_write_refuses_arrays_that_do_not_fit(tmp_path):
    config, trunk, arrays = model_arrays(random_model("tiny", "joint"))
    arrays["stem.conv.weight"] = arrays["stem.conv.weight"][:, :3]
    with pytest.raises(numpy_net.ModelFileError, match="'stem.conv.weight'"):
        numpy_net.write_model(tmp_path / "x.npz", config, trunk, arrays)
    assert not list(tmp_path.iterdir())


def test_the_command_exports_a_checkpoint(tmp_path, capsys):
    from amazons.neural.checkpoint import save_model

    checkpoint = save_model(tmp_path / "tiny.pt", random_model("tiny", "joint"))
    assert main([str(checkpoint), str(tmp_path / "tiny.npz"), "--check-positions", "8"]) == 0
    assert "largest difference from torch over 8 positions" in capsys.readouterr().out
    assert header_of(tmp_path / "tiny.npz")["source"]["checkpoint"] == "tiny.pt"
    (tmp_path / "broken.pt").write_bytes(b"nothing")
    assert main([str(tmp_path / "broken.pt"), str(tmp_path / "x.npz")]) == 2
    assert "broken.pt" in capsys.readouterr().err


def test_the_command_pools_a_flat_checkpoint_for_every_size(tmp_path, capsys):
    """`--pooled` writes the shipped 8x8 network with the pooled value head: the same policy on
    8x8 (every policy weight is copied), and a network that also scores 10x10."""
    assert main([str(default_checkpoint_path()), str(tmp_path / "pooled.npz"), "--pooled",
                 "--check-positions", "8"]) == 0
    assert "largest difference from torch" in capsys.readouterr().out
    pooled = numpy_net.load_model(tmp_path / "pooled.npz")
    assert pooled.value_head == "pooled"
    assert "pooled from flat" in header_of(tmp_path / "pooled.npz")["source"]["value_head"]
    flat = numpy_net.load_model(default_model_path())
    positions = random_positions(8, seed=3)
    moves, offsets = engine.legal_moves(positions)
    flat_priors, _ = numpy_net.NumpyEvaluator(flat).evaluate(positions, moves, offsets)
    pooled_priors, _ = numpy_net.NumpyEvaluator(pooled).evaluate(positions, moves, offsets)
    # the shipped export and this one fold the same weights: their priors differ by roundings
    assert_close(pooled_priors, flat_priors, rtol=1e-4, atol=1e-7, what="8x8 priors")
    from amazons.board import Board

    start = Board(start="standard10").canonical_position()
    moves10, offsets10 = engine.legal_moves(start, size=10)
    priors, values = numpy_net.NumpyEvaluator(pooled, board_size=10).evaluate(
        start.reshape(1, -1), moves10, offsets10)
    assert priors.shape == (2176,) and abs(float(priors.sum()) - 1) < 1e-4
    assert -1 <= float(values[0]) <= 1
    with pytest.raises(SystemExit):  # argparse's usage error: --pooled writes from a .pt
        main([str(default_model_path()), "--pooled", "--botzone", str(tmp_path / "bot")])
    assert "--pooled goes with a .pt checkpoint and OUT" in capsys.readouterr().err


def arrays_of(path: Path) -> dict[str, np.ndarray]:
    """The weights of an exported file, by name."""
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files if name != "header"}


def test_the_shipped_export_is_the_shipped_checkpoint(tmp_path):
    # The same model (tests/floats.py): the shipped .npz records the shipped .pt's digest, and an
    # export of the .pt made here has its structure exactly and its weights to float32 rounding.
    # Not the digest of its arrays: the batch norms are folded on this CPU's kernels.
    checkpoint = default_checkpoint_path()
    shipped = header_of(default_model_path())
    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert shipped["source"]["checkpoint_sha256"] == digest
    path, differences = export_checkpoint(checkpoint, tmp_path / "default.npz")
    header = header_of(path)
    assert header["source"]["checkpoint_sha256"] == digest
    assert (header["net_config"], header["trunk"]) == (shipped["net_config"], shipped["trunk"])
    assert_same_weights(arrays_of(path), arrays_of(default_model_path()),
                        "an export of default.pt against default.npz")
    assert max(differences.values()) <= TOLERANCE


def test_the_same_model_allows_rounding_and_nothing_more():
    # What the comparison above accepts: the shipped weights, each moved by up to 4 ulps (another
    # CPU's fold), are the same model, though their digest differs; one weight of typical size
    # changed by 1e-2 of itself, or an array missing, is not, and the failure names it.
    shipped = arrays_of(default_model_path())
    rng = np.random.default_rng(0)
    nudged = {name: (array.view(np.int32) + rng.integers(-4, 5, array.shape).astype(np.int32))
              .view(np.float32) for name, array in shipped.items()}
    assert numpy_net.array_digest(nudged) != numpy_net.array_digest(shipped)
    assert weights_mismatch(nudged, shipped) == ""
    for name in shipped:
        weight = nudged[name].copy()
        typical = int(np.argsort(np.abs(weight), axis=None)[weight.size // 2])
        weight.flat[typical] *= 1.01
        message = weights_mismatch({**nudged, name: weight}, shipped)
        assert message.startswith("weights: 1 of ") and f"\n{name}: 1 of " in message, message
    missing = {key: value for key, value in nudged.items() if key != "stem.conv.bias"}
    assert "missing ['stem.conv.bias']" in weights_mismatch(missing, shipped)


def test_the_bot_and_terminal_play_never_import_torch():
    code = (
        "import io, sys\n"
        "import amazons.botzone.bot\n"
        "assert 'torch' not in sys.modules, 'import amazons.botzone.bot'\n"
        "from amazons.botzone.bot import main\n"
        "out = io.StringIO()\n"
        "code = main(['--model', 'default', '--simulations', '16', '--restart-per-turn'],\n"
        "            io.StringIO('1\\n-1 -1 -1 -1 -1 -1\\n'), out, sys.stderr)\n"
        "assert code == 0 and len(out.getvalue().split()) == 6, out.getvalue()\n"
        "import amazons.play\n"
        "from amazons.players.factory import build_model_player\n"
        "build_model_player('default', simulations=8)\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)\n"
        "print('torch-free')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch-free"
