"""Function-preserving growth (`amazons.neural.growth`) and warm starts that grow.

Small nets whose every weight and batch-norm statistic is moved away from its initialization are
grown by each kind of growth, by both methods, for both heads (the joint one with and without the
source term), with and without attention, and through spread attention: at step 0 the grown
net's value and every legal move's prior (and ownership map, and soft policy) equal the small
net's to float32 rounding (`rounding_bound`) on positions of seeded random games. Then the grown
weights train (a real `Learner.train_step` reaches every new slice), the refusals name their
field, a saved small model grows through `init_weights_from`, and the exports of grown nets
(numpy, native) match torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from floats import assert_close, rounding_tolerance
from test_learn import random_batch

from amazons import engine
from amazons.export import TOLERANCE, random_positions, torch_outputs
from amazons.models import default_checkpoint_path
from amazons.neural.checkpoint import (
    CheckpointError,
    init_weights_from,
    load_model_for_play,
    save_model,
)
from amazons.neural.growth import (
    GROWTH_METHODS,
    GrowthError,
    align_layers,
    check_growth,
    grow,
    grow_state_dict,
    grown_entries,
    layer_kinds,
    lineage_entry,
    pool_value_head,
    space_sizes,
    tensor_axes,
)
from amazons.neural.learner import Learner, OptimConfig
from amazons.neural.model import (
    NUM_SQUARES,
    NetConfig,
    NetInputError,
    PolicyValueNet,
    gather_legal_priors,
    net_config,
    policy_log_tables,
    segment_ids,
    value_pooling,
)
from amazons.train.command import resolve_config
from amazons.train.run import Run

torch.set_num_threads(1)

POSITIONS = 200

SMALL = NetConfig(blocks=2, channels=8, attention_blocks=1, attention_dim=4, head_dim=4,
                  value_channels=2, value_hidden=8, ownership_head=True, ownership_channels=3)
HEADS = [pytest.param({"policy_head": "joint"}, id="joint"),
         pytest.param({"policy_head": "joint", "arrow_source": True}, id="joint-source"),
         pytest.param({"policy_head": "factorized"}, id="factorized")]
ATTENTION = [pytest.param(0, id="no-attention"), pytest.param(1, id="attention")]
# kind of growth: (the small net's changes, the grown net's changes)
KINDS = {
    "blocks": ({}, {"blocks": 4}),
    "channels": ({}, {"channels": 13}),
    "attention_blocks": ({}, {"attention_blocks": 2}),
    "attention_dim": ({}, {"attention_dim": 7}),
    "head_dim": ({}, {"head_dim": 7}),
    "value": ({}, {"value_channels": 3, "value_hidden": 11}),
    "ownership_channels": ({}, {"ownership_channels": 5}),
    "heads": ({"ownership_head": False}, {"ownership_head": True, "soft_policy_head": True}),
    "all": ({"soft_policy_head": True},
            {"blocks": 4, "channels": 12, "attention_blocks": 2, "attention_dim": 6,
             "head_dim": 6, "value_channels": 3, "value_hidden": 10, "ownership_channels": 5,
             "soft_policy_head": True}),
}


def moved_from_init(config: NetConfig, seed: int) -> PolicyValueNet:
    """A net of `config` with every parameter and batch-norm statistic moved from its init:
    identity-initialized parts (zero batch-norm scales, closed gates) would hide a growth that
    breaks them. Weights keep their scale; the value head's last layer is scaled so that values
    spread over [-1, 1] on random positions."""
    torch.manual_seed(seed)
    model = PolicyValueNet(config)
    generator = torch.Generator().manual_seed(seed)

    def noise(tensor: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.randn(tensor.shape, generator=generator) * scale

    with torch.no_grad():
        statistics = set()
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                statistics.update(f"{name}.{key}" for key in ("weight", "bias"))
                module.weight.copy_(torch.rand(module.weight.shape, generator=generator) + 0.5)
                module.bias.copy_(noise(module.bias, 0.1))
                module.running_mean.copy_(noise(module.running_mean, 0.2))
                module.running_var.copy_(torch.rand(module.running_var.shape,
                                                    generator=generator) * 1.5 + 0.5)
        for name, parameter in model.named_parameters():
            if name.endswith(".gate"):
                parameter.copy_(torch.rand(1, generator=generator) * 0.5 + 0.3)
            elif name not in statistics:
                spread = float(parameter.std()) if parameter.numel() > 1 else 0.0
                parameter.add_(noise(parameter, 0.5 * spread + 0.05))
        for bias in (model.value_head.reduce.bn.bias, model.value_head.hidden.bias):
            bias.abs_().add_(0.1)  # live value units: values that differ between positions
        features = torch.from_numpy(engine.features(random_positions(64, seed=seed), 7))[
            :, :config.num_planes]
        head = model.eval().value_head
        trunk = model.trunk(torch.relu(model.stem(features)))
        reduced = torch.relu(head.reduce(trunk))
        summary = value_pooling(reduced) if config.value_head == "pooled" else reduced.flatten(1)
        hidden = torch.relu(head.hidden(summary))
        logits = head.out(hidden).squeeze(-1)
        head.out.weight.div_(logits.std())
        head.out.bias.sub_(logits.mean()).div_(logits.std())
    return model


def rounding_bound(config: NetConfig, batch_rows: int = 0, squares: int = NUM_SQUARES) -> float:
    """How far the grown net's outputs may stray from the small net's: float32 rounding alone.

    In real arithmetic the grown net computes the small net's function; in float32 each forward
    pass rounds every sum of products, and the grown net's sums run over other terms (net2net's
    split weights, silent growth's zero weights on new units). A sum of n products is off by at
    most n half-ulps of the magnitude of its terms, and activations stay of order 1 (batch norms,
    tanh at the outputs), so two passes differ by at most one ulp of 1 (`rounding_tolerance`) per
    term summed along the longest path, counted on `config`, the grown net (its sums are the
    longer): the stem and every residual convolution (9 x their input channels), every attention
    block (its projection's inputs, the query-key product, the softmax's and the weighted sum's
    `squares`, 64 on 8 x 8), then the longest head (the flat value head's MLP reads 64 entries a
    channel; the pooled one sums each channel's squares into its mean, then reads 3 entries a
    channel). The policy head's normalizers (over squares**2 entries, over the legal moves) and,
    in train mode (`batch_rows` > 0), each batch norm's statistics over `batch_rows` x `squares`
    values are tree reductions: log2 of their length in roundings.
    """
    tree = math.ceil(math.log2(squares * squares))
    trunk = 9 * config.num_planes + config.blocks * 2 * 9 * config.channels
    trunk += config.attention_blocks * (config.channels + config.attention_dim + 2 * squares)
    value = config.channels + config.value_hidden + (
        config.value_channels * NUM_SQUARES if config.value_head == "flat"
        else squares + 3 * config.value_channels)
    # joint: move query-key, update gate, arrow query-key (and the source term); factorized: less
    policy = 4 * config.channels + 4 * config.head_dim + 2 * tree
    ownership = config.channels + config.ownership_channels
    terms = trunk + max(value, policy, ownership)
    if batch_rows:
        batch_norms = 2 + 2 * config.blocks  # the stem, two a block, the value head's reduction
        terms += batch_norms * math.ceil(math.log2(batch_rows * squares))
    return rounding_tolerance(terms)


@pytest.fixture(scope="module")
def pool() -> dict[int, tuple[torch.Tensor, np.ndarray, np.ndarray]]:
    """`POSITIONS` positions of seeded random games (0 to 60 plies): features for 3 and 7 planes,
    legal moves and their CSR offsets."""
    positions = random_positions(POSITIONS, seed=11, max_plies=60)
    moves, offsets = engine.legal_moves(positions)
    return {planes: (torch.from_numpy(engine.features(positions, planes)), moves, offsets)
            for planes in (3, 7)}


@torch.no_grad()
def outputs(model: PolicyValueNet, pool, rows: slice) -> dict[str, np.ndarray]:
    """Legal-move priors, values, and with their heads ownership and soft-policy priors, of the
    positions `rows` of the pool (eval mode)."""
    features, moves, offsets = pool[model.config.num_planes]
    moves = torch.from_numpy(moves[offsets[rows.start]:offsets[rows.stop]])
    batch_index = torch.from_numpy(segment_ids(offsets[rows.start:rows.stop + 1]
                                               - offsets[rows.start]))
    output = model.eval()(features[rows])
    result = {"priors": gather_legal_priors(policy_log_tables(output.policy), moves, batch_index),
              "value": output.value}
    if output.ownership is not None:
        result["ownership"] = output.ownership
    if output.soft_policy is not None:
        result["soft_priors"] = gather_legal_priors(policy_log_tables(output.soft_policy), moves,
                                                    batch_index)
    return {name: value.numpy() for name, value in result.items()}


def assert_same_function(small: PolicyValueNet, grown: PolicyValueNet, pool,
                         rows: slice) -> None:
    """The grown net's outputs equal the small net's within `rounding_bound` of the grown net
    (of each prior, of the values' and ownership's range)."""
    want, got = outputs(small, pool, rows), outputs(grown, pool, rows)
    # The comparison can fail: values spread, priors far from uniform.
    counts = np.diff(pool[7][2][rows.start:rows.stop + 1])
    assert np.ptp(want["value"]) > 0.1
    assert want["priors"].max() * counts.max() > 3.0
    bound = rounding_bound(grown.config)
    for name in sorted(set(want) & set(got)):
        # A prior is the exp of a sum of log-probabilities: rounding moves it by a share of
        # itself. Values and ownership are tanh outputs in [-1, 1]: by the bound itself.
        relative = name.endswith("priors")
        assert_close(got[name], want[name], rtol=bound if relative else 0.0,
                     atol=0.0 if relative else bound, what=name)


# ------------------------------------------------------------------------------------------------
# The function is kept


@pytest.mark.parametrize("method", GROWTH_METHODS)
@pytest.mark.parametrize("attention", ATTENTION)
@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_growth_keeps_the_value_and_every_legal_prior(pool, kind, head, attention,
                                                                    method):
    small_changes, grown_changes = KINDS[kind]
    small_config = SMALL.replace(attention_blocks=attention, **head, **small_changes)
    if kind == "heads" and not small_config.arrow_source and head["policy_head"] == "joint":
        grown_changes = {**grown_changes, "arrow_source": True}
    config = small_config.replace(**grown_changes)
    seed = sum(map(ord, kind + str(head) + method)) + attention
    small = moved_from_init(small_config, seed)
    grown = grow(small, config, method, seed=seed)
    assert grown.config == config
    # a window of the pool per case, every position in some window; all of it for "all"
    start = seed % (POSITIONS - 40)
    rows = slice(0, POSITIONS) if kind == "all" else slice(start, start + 40)
    assert_same_function(small, grown, pool, rows)


@pytest.mark.parametrize("method", GROWTH_METHODS)
@pytest.mark.parametrize(("small_trunk", "grown_trunk"), [
    ((2, 1, "spread"), (3, 2, "spread")),  # RRA -> RARRA: the old attention moves to the end
    ((3, 2, "spread"), (6, 3, "spread")),
    ((2, 2, "spread"), (3, 3, "spread")),  # RARA -> RARARA
    ((2, 1, "end"), (4, 2, "spread")),
])
def test_spread_attention_grows_with_its_trunk_reordered_around_identities(pool, method,
                                                                           small_trunk,
                                                                           grown_trunk):
    blocks, attention, placement = small_trunk
    small_config = SMALL.replace(blocks=blocks, attention_blocks=attention,
                                 attention_placement=placement, arrow_source=True)
    blocks, attention, placement = grown_trunk
    config = small_config.replace(blocks=blocks, attention_blocks=attention,
                                  attention_placement=placement, channels=10)
    small = moved_from_init(small_config, blocks)
    grown = grow(small, config, method, seed=1)
    assert_same_function(small, grown, pool, slice(blocks * 20, blocks * 20 + 40))


@pytest.mark.parametrize("method", GROWTH_METHODS)
def test_training_mode_batch_statistics_match_too(pool, method):
    """In train mode the batch norms normalize by the batch's own statistics: the old channels'
    are unchanged, so the grown net still computes the small one's value."""
    small = moved_from_init(SMALL.replace(arrow_source=True), 5)
    config = SMALL.replace(arrow_source=True, **KINDS["all"][1])
    grown = grow(small, config, method, seed=2)
    features = pool[7][0][:64]
    with torch.no_grad():
        want = small.train()(features).value
        got = grown.train()(features).value
    assert want.std() > 0.05
    assert_close(got, want, atol=rounding_bound(config, batch_rows=features.shape[0]),
                 what="train-mode values")


def test_growth_is_seeded_and_the_two_methods_differ():
    small = moved_from_init(SMALL, 3)
    config = SMALL.replace(channels=12, head_dim=6)
    first, again = grow_state_dict(small, config, "net2net", 4), grow_state_dict(small, config,
                                                                                 "net2net", 4)
    other = grow_state_dict(small, config, "net2net", 5)
    silent = grow_state_dict(small, config, "silent", 4)
    assert all(torch.equal(first[key], again[key]) for key in first)
    assert not all(torch.equal(first[key], other[key]) for key in first)
    key = "trunk.0.conv1.conv.weight"  # old output channel 0, new input channels 8..11
    assert silent[key][:8, 8:].abs().max() == 0 and first[key][:8, 8:].abs().min() > 0
    before = torch.get_rng_state()
    grow_state_dict(small, config, "silent", 4)
    assert torch.equal(torch.get_rng_state(), before)  # the process's generator is left alone


# ------------------------------------------------------------------------------------------------
# The new weights train


@pytest.mark.parametrize("method", GROWTH_METHODS)
@pytest.mark.parametrize("head", [pytest.param({"policy_head": "joint"}, id="joint"),
                                  pytest.param({"policy_head": "factorized"}, id="factorized")])
def test_every_new_slice_receives_gradient_within_a_few_steps(method, head):
    small_config = SMALL.replace(**head)
    changes = dict(KINDS["all"][1])
    if head["policy_head"] == "joint":
        changes["arrow_source"] = True  # an added, all-zero source term must train too
    config = small_config.replace(**changes)
    model = grow(moved_from_init(small_config, 7), config, method, seed=7)
    learner = Learner(model, OptimConfig(lr=1e-2, warmup_steps=0), seed=0)
    rng = np.random.default_rng(3)
    batch = random_batch(rng, 16, max_plies=40)
    batch = dataclasses.replace(batch, ownership=rng.integers(-1, 2, (16, 64)).astype(np.int8),
                                ownership_mask=np.ones((16, 64), bool))
    masks = grown_entries(small_config, config)
    reached = {name: torch.zeros_like(parameter, dtype=torch.bool)
               for name, parameter in learner.model.named_parameters()}
    for _ in range(3):
        learner.train_step(batch)
        for name, parameter in learner.model.named_parameters():
            reached[name] |= parameter.grad != 0
    checked = 0
    for name, mask in masks.items():
        if name not in reached or not mask.any():
            continue  # a buffer, or an old tensor growth did not widen
        new = torch.from_numpy(np.broadcast_to(mask, reached[name].shape).copy())
        # Every new unit's slice is reached: at least half its entries (a unit dead on this batch
        # would leave its whole slice at zero).
        share = float(reached[name][new].float().mean())
        assert share > 0.5, f"{name}: {share:.0%} of the new entries got a gradient"
        checked += 1
    assert checked >= 30


# ------------------------------------------------------------------------------------------------
# What cannot grow


@pytest.mark.parametrize(("changes", "field"), [
    ({"channels": 6}, "channels: 8 -> 6"),
    ({"blocks": 1}, "blocks: 2 -> 1"),
    ({"attention_blocks": 0}, "attention_blocks: 1 -> 0"),
    ({"head_dim": 3}, "head_dim: 4 -> 3"),
    ({"policy_head": "factorized"}, "policy_head: 'joint' -> 'factorized'"),
    ({"num_planes": 3}, "num_planes: 7 -> 3"),
    ({"ownership_head": False}, "ownership_head: True -> False"),
])
def test_a_shrink_or_another_head_or_planes_is_refused_by_name(changes, field):
    small = moved_from_init(SMALL, 0)
    with pytest.raises(GrowthError, match=field):
        grow(small, SMALL.replace(**{"blocks": 3, **changes}))


def test_removing_the_source_term_or_an_impossible_trunk_is_refused_by_name():
    small = moved_from_init(SMALL.replace(arrow_source=True), 0)
    with pytest.raises(GrowthError, match="arrow_source: True -> False"):
        grow(small, SMALL)
    # RRARRA -> RARRARA: the old second block must follow a new attention block or come after
    # the old attention block; either way a residual block would read an attention's output.
    spread = SMALL.replace(blocks=4, attention_blocks=2, attention_placement="spread")
    assert layer_kinds(spread) == "RRARRA"
    with pytest.raises(GrowthError, match="attention_placement: 'spread' -> 'spread'"):
        check_growth(spread, spread.replace(attention_blocks=3))
    with pytest.raises(GrowthError, match="attention_placement: 'spread' -> 'end'"):
        check_growth(SMALL.replace(attention_blocks=2, attention_placement="spread"),
                     SMALL.replace(blocks=3, attention_blocks=2))
    with pytest.raises(GrowthError, match="growth method must be one of"):
        grow(moved_from_init(SMALL, 0), SMALL, "copy")


def test_the_layer_alignment_keeps_new_residual_blocks_after_residual_blocks():
    assert align_layers("RRA", "RRRRAA") == [0, 1, 4]  # end: new blocks after the old ones
    assert align_layers("RRA", "RARRA") == [0, 2, 4]  # the old A moves past the new R
    assert align_layers("RARA", "RRRRAA") is None
    assert align_layers("", "RRA") == []
    # every alignment it returns is a valid one, on every pair of small trunks
    for old in ("R", "RA", "RRA", "RARA", "RRARA"):
        for new in ("RRA", "RARA", "RRRA", "RARRA", "RRARRA", "RARARA", "RRRRAA"):
            placement = align_layers(old, new)
            if placement is None:
                continue
            assert [new[j] for j in placement] == list(old)
            for j, kind in enumerate(new):
                if kind == "R" and j not in placement:
                    before = [i for i, place in enumerate(placement) if place < j]
                    assert not before or old[before[-1]] == "R"


def test_the_table_describes_every_tensor_of_the_net():
    for config in (SMALL, SMALL.replace(arrow_source=True, soft_policy_head=True),
                   SMALL.replace(policy_head="factorized", attention_blocks=2,
                                 attention_placement="spread", soft_policy_head=True),
                   SMALL.replace(value_head="pooled")):
        state = PolicyValueNet(config).state_dict()
        table, sizes = tensor_axes(config), space_sizes(config)
        assert list(table) == list(state)
        for key, axes in table.items():
            assert len(axes) == state[key].dim(), key
            for axis, length in zip(axes, state[key].shape, strict=True):
                if axis is not None:
                    assert sum(sizes[segment.space] * segment.repeat for segment in axis) \
                        == length, key


# ------------------------------------------------------------------------------------------------
# Warm starts and lineage


@pytest.mark.parametrize("method", GROWTH_METHODS)
def test_init_weights_from_grows_a_saved_small_model(tmp_path, pool, method):
    small = moved_from_init(SMALL, 9)
    path = save_model(tmp_path / "small.pt", small, {"iteration": 3, "lineage": []})
    torch.manual_seed(1)
    model = PolicyValueNet(SMALL.replace(blocks=3, channels=12, soft_policy_head=True))
    fresh_head = {key: value.clone() for key, value in model.state_dict().items()
                  if key.startswith("soft_policy_head.")}
    assert init_weights_from(path, model, method, seed=4) == {"iteration": 3, "lineage": []}
    assert_same_function(small, model, pool, slice(0, 40))
    state = model.state_dict()  # a training-only head the checkpoint lacks keeps its own init
    assert all(torch.equal(state[key], value) for key, value in fresh_head.items())


def test_init_weights_from_refuses_what_does_not_grow_naming_both(tmp_path):
    path = save_model(tmp_path / "small.pt", moved_from_init(SMALL, 9))
    with pytest.raises(CheckpointError, match=r"net.channels: checkpoint 8, run 6.*"
                                              r"channels: 8 -> 6: a shrink"):
        init_weights_from(path, PolicyValueNet(SMALL.replace(channels=6)))
    with pytest.raises(GrowthError, match="growth method"):
        init_weights_from(path, PolicyValueNet(SMALL.replace(blocks=3)), "wider")


def test_a_lineage_entry_names_the_net_it_grew_from():
    model = PolicyValueNet(SMALL.replace(blocks=4, channels=12))
    entry = lineage_entry(model, SMALL, "net2net", "/models/small.pt", minutes=12.34567)
    assert entry == {"net": "4x12", "parameters": sum(p.numel() for p in model.parameters()),
                     "grown_from": "2x8", "growth": "net2net", "init_model": "/models/small.pt",
                     "minutes": 12.346}
    same = lineage_entry(model, model.config.replace(soft_policy_head=True), "net2net", "x.pt")
    assert same["grown_from"] is None and same["growth"] is None
    assert lineage_entry(model)["init_model"] is None


# ------------------------------------------------------------------------------------------------
# Exports of grown nets


@pytest.mark.parametrize(("changes", "name"), [
    ({"blocks": 4, "attention_blocks": 2}, "deeper"),
    ({"channels": 48, "attention_dim": 12, "head_dim": 24, "value_channels": 3}, "wider"),
])
def test_exports_of_a_grown_net_match_torch(changes, name):
    from amazons.neural import numpy_net as npnet
    from amazons.neural.native import NativeEvaluator, native_available
    from amazons.neural.served import numpy_net

    small_config = NetConfig(blocks=2, channels=32, attention_dim=8, head_dim=16,
                             value_channels=2, value_hidden=32, ownership_head=True)
    small = moved_from_init(small_config, 13)
    grown = grow(small, small_config.replace(**changes), "net2net", seed=13)
    positions = random_positions(48, seed=17, max_plies=50)
    moves, offsets = engine.legal_moves(positions)
    want = torch_outputs(grown, positions)
    assert_close(want[0], torch_outputs(small, positions)[0], rtol=rounding_bound(grown.config),
                 what="priors")
    net = numpy_net(grown)
    got = {"numpy": npnet.NumpyEvaluator(net).evaluate(positions, moves, offsets)}
    if native_available():
        got["native"] = NativeEvaluator(net).evaluate(positions, moves, offsets)
    for evaluator, (priors, values) in got.items():
        assert np.abs(priors - want[0]).max() <= TOLERANCE, (name, evaluator)
        assert np.abs(values - want[1]).max() <= TOLERANCE, (name, evaluator)


def test_a_run_started_from_a_small_model_grows_it_and_writes_its_lineage(tmp_path, pool):
    small_config = net_config("tiny")
    small = moved_from_init(small_config, 21)
    path = save_model(tmp_path / "small.pt", small,
                      {"lineage": [{"net": "2x32", "parameters": 1, "grown_from": None,
                                    "growth": None, "init_model": None, "minutes": 5.0}]})
    args = argparse.Namespace(run_dir=tmp_path / "run", resume=False, preset="cpu",
                              overrides=["net.blocks=3", "init_growth=silent"], iterations=1,
                              init=str(path))
    config = resolve_config(args)
    run = Run(config, args.run_dir, resume=False)
    try:
        assert_same_function(small, run.learner.model.cpu(), pool, slice(100, 140))
        run.checkpoint()
    finally:
        run.close()
    lineage = json.loads((args.run_dir / "state.json").read_text())["lineage"]
    assert lineage[0]["minutes"] == 5.0 and lineage[1]["init_model"] == str(path.resolve())
    assert lineage[1]["net"] == "3x32" and lineage[1]["grown_from"] == "2x32"
    assert lineage[1]["growth"] == "silent" and lineage[1]["parameters"] > small_config.channels
    resumed = Run(config, args.run_dir, resume=True)
    try:
        assert resumed.minutes_before == lineage[1]["minutes"]
        extra = resumed.model_extra(1)
        assert extra["lineage"][:1] == lineage[:1]
        assert extra["lineage"][1]["minutes"] >= lineage[1]["minutes"]
    finally:
        resumed.close()


# ------------------------------------------------------------------------------------------------
# Flat value head to pooled


@torch.no_grad()
def value_hidden_inputs(model: PolicyValueNet, reduced: torch.Tensor) -> torch.Tensor:
    """The value MLP's first layer on value channels `reduced` `[B, C, 8, 8]` (after the ReLU),
    read as `model`'s head reads them (flattened, or pooled)."""
    head = model.value_head
    summary = (value_pooling(reduced) if model.config.value_head == "pooled"
               else reduced.flatten(1))
    return head.hidden(summary)


@pytest.mark.parametrize("head", HEADS)
def test_pooling_the_value_head_carries_every_other_weight_exactly(pool, head):
    small = moved_from_init(SMALL.replace(**head), 17)
    pooled = pool_value_head(small)
    assert pooled.config == small.config.replace(value_head="pooled")
    flat_state, state = small.state_dict(), pooled.state_dict()
    assert list(state) == list(flat_state)
    for key, tensor in state.items():  # copied, so equal to the bit
        if key != "value_head.hidden.weight":
            assert torch.equal(tensor, flat_state[key]), key
    assert state["value_head.hidden.weight"].shape == (SMALL.value_hidden,
                                                       3 * SMALL.value_channels)
    # The same weights computed the same way: priors and ownership within float32 rounding.
    want, got = outputs(small, pool, slice(0, 60)), outputs(pooled, pool, slice(0, 60))
    bound = rounding_bound(pooled.config)
    assert_close(got["priors"], want["priors"], rtol=bound, what="priors")
    assert_close(got["ownership"], want["ownership"], atol=bound, what="ownership")
    # The value MLP's first layer is the flat one's exactly where each channel is uniform over
    # the board (its weights on a channel's mean are the flat ones summed over the squares) ...
    levels = torch.rand(16, SMALL.value_channels, 1, 1, generator=torch.Generator().manual_seed(3))
    uniform = levels.expand(-1, -1, 8, 8)
    # a sum over the 64 squares, each side: 64 + 64 roundings of the order-1 terms
    assert_close(value_hidden_inputs(pooled, uniform), value_hidden_inputs(small, uniform),
                 rtol=rounding_tolerance(128), atol=rounding_tolerance(128), what="hidden")
    # ... and the pooled net runs on other sizes, the flat one does not.
    planes = torch.rand(2, 7, 10, 10).round()
    assert pooled.eval()(planes).value.shape == (2,)
    with pytest.raises(NetInputError, match="10x10: the flat value head"):
        small.eval()(planes)


def test_the_shipped_model_pooled_keeps_its_policy_and_nearly_its_value():
    small = load_model_for_play(default_checkpoint_path())
    assert small.config.value_head == "flat"  # stored before the field: flat
    pooled = pool_value_head(small).eval()
    positions = random_positions(300, seed=2, max_plies=56)
    (flat_priors, flat_values), (priors, values) = (torch_outputs(net, positions)
                                                    for net in (small, pooled))
    assert_close(priors, flat_priors, rtol=rounding_bound(pooled.config), what="priors")
    # Not the same function: measured mean |difference| 0.048 and correlation 0.989 over 500
    # such positions (docs/network.md); here with a margin, against values spread over [-1, 1].
    assert np.std(flat_values) > 0.5
    assert np.abs(values - flat_values).mean() < 0.1
    assert np.corrcoef(values, flat_values)[0, 1] > 0.95


@pytest.mark.parametrize("method", GROWTH_METHODS)
def test_growth_pools_the_value_head_first_then_grows(pool, method):
    small = moved_from_init(SMALL.replace(arrow_source=True), 19)
    config = SMALL.replace(arrow_source=True, value_head="pooled", blocks=3, channels=10,
                           value_channels=3, value_hidden=11)
    grown = grow(small, config, method, seed=19)
    assert grown.config == config
    assert_same_function(pool_value_head(small), grown, pool, slice(80, 120))
    with pytest.raises(GrowthError, match="value_head: 'pooled' -> 'flat': a pooled value head "
                                          "never becomes flat again"):
        grow(grown, config.replace(value_head="flat", blocks=4))
    with pytest.raises(GrowthError, match="pool_value_head carries a flat value head"):
        pool_value_head(grown)


def test_the_pooled_heads_new_columns_receive_gradient():
    config = SMALL.replace(value_head="pooled")
    model = grow(moved_from_init(SMALL, 23), config, seed=23)
    learner = Learner(model, OptimConfig(lr=1e-2, warmup_steps=0), seed=0)
    batch = random_batch(np.random.default_rng(5), 16, max_plies=40)
    reached = torch.zeros_like(model.value_head.hidden.weight, dtype=torch.bool)
    for _ in range(3):
        learner.train_step(batch)
        reached |= learner.model.value_head.hidden.weight.grad != 0
    mask = torch.from_numpy(np.broadcast_to(grown_entries(SMALL, config)[
        "value_head.hidden.weight"], reached.shape).copy())
    channels = SMALL.value_channels
    assert mask[:, channels:2 * channels].sum() == 0  # the scaled mean: 0 on 8 x 8, not counted
    # Every hidden unit the batch reaches (a ReLU unit dead on it gets no gradient anywhere)
    # trains all its new columns, the max's (initialized to 0) included.
    live = reached.any(dim=1)
    assert live.sum() >= SMALL.value_hidden // 2
    assert bool(reached[live][mask[live]].all())


def test_a_run_started_from_a_flat_model_with_a_pooled_config_carries_it(tmp_path, pool):
    small = moved_from_init(net_config("tiny"), 29)
    path = save_model(tmp_path / "flat.pt", small, {"lineage": []})
    args = argparse.Namespace(run_dir=tmp_path / "run", resume=False, preset="cpu",
                              overrides=["net.value_head=pooled"], iterations=1, init=str(path))
    config = resolve_config(args)
    assert config.net == small.config.replace(value_head="pooled")
    run = Run(config, args.run_dir, resume=False)
    try:
        assert_same_function(pool_value_head(small), run.learner.model.cpu(), pool,
                             slice(40, 80))
        run.checkpoint()
    finally:
        run.close()
    lineage = json.loads((args.run_dir / "state.json").read_text())["lineage"]
    assert (lineage[-1]["net"], lineage[-1]["grown_from"]) == ("2x32-pooled", "2x32")
    restored = load_model_for_play(args.run_dir / "checkpoints" / "latest.pt")
    assert restored.config.value_head == "pooled"  # the checkpoint's config says so
