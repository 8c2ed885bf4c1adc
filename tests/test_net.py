"""The network, its log tables and legal-move priors (`amazons.neural.model`), and the in-process
evaluator (`amazons.neural.cuda_graphs`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from floats import assert_close, rounding_tolerance
from test_learn import full_log_probs, naive_log_probs, random_positions

from amazons import engine
from amazons.core.config import ConfigError, config_from_dict, config_to_dict
from amazons.evaluator import EvaluatorInputError
from amazons.mcts import BatchedSearch, SearchConfig
from amazons.neural.cuda_graphs import NetworkEvaluator
from amazons.neural.model import (
    PRESETS,
    FactorizedPolicy,
    GlobalSelfAttention,
    JointPolicy,
    JointPolicyHead,
    JointSourcePolicy,
    NetConfig,
    NetConfigError,
    NetInputError,
    PolicyValueNet,
    count_parameters,
    gather_legal_priors,
    mover_squares,
    net_config,
    policy_log_tables,
    prepare_for_inference,
    segment_ids,
)
from amazons.symmetry import (
    INVERSE_PERMUTATIONS,
    NUM_SYMMETRIES,
    SYMMETRIES,
    transform_square_labels,
)

torch.set_num_threads(1)

RESNET40_PARAMETERS = 23_927_370  # joint head, 7 planes; docs/network.md reports it
HEADS = ("joint", "factorized")
# Every policy head: (policy_head, other NetConfig fields).
VARIANTS = [pytest.param("joint", {}, id="joint"), pytest.param("factorized", {}, id="factorized"),
            pytest.param("joint", {"arrow_source": True}, id="joint-source")]


@pytest.fixture(scope="module")
def positions() -> np.ndarray:
    return random_positions(np.random.default_rng(1), 10)


def features_of(positions: np.ndarray, planes: int = 7) -> torch.Tensor:
    return torch.from_numpy(engine.features(positions, planes))


def tiny_model(head: str = "joint", seed: int = 0, **overrides) -> PolicyValueNet:
    torch.manual_seed(seed)
    model = PolicyValueNet(net_config("tiny", policy_head=head, **overrides)).eval()
    # Fresh batch norms and a zero attention gate hide bugs; give them non-trivial values.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 2.0)
            if isinstance(module, GlobalSelfAttention):
                module.gate.fill_(0.7)
    return model


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("head", HEADS)
def test_output_shapes_per_preset_and_head(preset, head):
    model = PolicyValueNet(net_config(preset, policy_head=head)).eval()
    with torch.no_grad():
        output = model(torch.rand(3, 7, 8, 8).round())
    if head == "joint":
        assert isinstance(output.policy, JointPolicy)
        assert [tuple(t.shape) for t in output.policy] == [(3, 64, 64), (3, 64, 64)]
    else:
        assert isinstance(output.policy, FactorizedPolicy)
        assert [tuple(t.shape) for t in output.policy] == [(3, 64), (3, 64), (3, 64)]
    assert output.value.shape == (3,)
    assert torch.all(output.value.abs() <= 1)


@pytest.mark.parametrize("size", [6, 8, 10])
@pytest.mark.parametrize(("head", "overrides"), VARIANTS)
def test_the_pooled_value_head_runs_on_every_board_size(size, head, overrides):
    model = tiny_model(head, value_head="pooled", ownership_head=True, **overrides)
    squares = size * size
    planes = torch.rand(3, 7, size, size).round()
    planes[:, 0] = 0.0  # four amazons of the side to move, which the source term reads
    planes[:, 0].reshape(3, squares)[:, [0, 3, squares // 2, squares - 1]] = 1.0
    with torch.no_grad():
        output = model(planes.contiguous(memory_format=torch.channels_last))
    shapes = {"joint": [(3, squares, squares)] * 2, "factorized": [(3, squares)] * 3}[head]
    if overrides:
        shapes += [(3, 4, squares), (3, 4)]
    assert [tuple(t.shape) for t in output.policy] == shapes
    assert output.value.shape == (3,) and output.ownership.shape == (3, squares)
    assert all(bool(torch.isfinite(t.float()).all())
               for t in (*output.policy, output.value, output.ownership))
    tables = policy_log_tables(output.policy)
    assert tables.log_move.shape == (3, squares * squares)
    # A distribution over the board's squares**3 moves, summed in float64: each float32 table
    # entry is a log-softmax, off by the roundings of its logsumexp (a tree over squares**2
    # entries) and a few more, times its own magnitude.
    joint = (tables.log_move.double().reshape(3, squares, squares)[:, :, :, None]
             + tables.log_arrow.double().reshape(3, 1, squares, squares)).exp()
    magnitude = float(tables.log_move.abs().max() + tables.log_arrow.abs().max())
    bound = rounding_tolerance(2 * (math.ceil(math.log2(squares ** 2)) + 4)) * magnitude
    assert_close(joint.sum(dim=(1, 2, 3)), np.ones(3), atol=bound, what="total probability")


def test_the_flat_value_head_refuses_other_sizes_by_name():
    flat = tiny_model("joint")
    with pytest.raises(NetInputError, match=r"features are 10x10: the flat value head "
                                            r"\(value_head='flat'\) is 8x8-only"):
        flat(torch.zeros(1, 7, 10, 10))
    with pytest.raises(NetInputError, match="features are 11x11: the network runs on boards of "
                                            "6, 7, 8, 9, 10"):
        tiny_model("joint", value_head="pooled")(torch.zeros(1, 7, 11, 11))
    with pytest.raises(NetInputError, match=r"\[B, 7, N, N\] with N in 6..10, got \[1, 7, 8, 9\]"):
        tiny_model("joint", value_head="pooled")(torch.zeros(1, 7, 8, 9))


def test_resnet40_parameter_count_is_the_documented_one():
    model = PolicyValueNet(net_config("resnet40"))
    assert (model.config.blocks, model.config.channels) == (20, 256)
    assert count_parameters(model) == RESNET40_PARAMETERS
    docs = Path(__file__).resolve().parents[1] / "docs" / "network.md"
    assert f"{RESNET40_PARAMETERS:,}" in docs.read_text()


def test_three_plane_network_and_input_checks(positions):
    model = tiny_model(num_planes=3)
    output = model(features_of(positions, 3))
    assert output.value.shape == (positions.shape[0],)
    with pytest.raises(NetInputError, match=r"\[B, 3, 8, 8\]"):
        model(features_of(positions, 7))


def test_config_validation_and_round_trip():
    config = net_config("small", policy_head="factorized")
    assert config_from_dict(NetConfig, config_to_dict(config)) == config
    with pytest.raises(NetConfigError, match="unknown preset"):
        net_config("huge")
    with pytest.raises(NetConfigError, match="policy_head"):
        net_config("tiny", policy_head="serial")
    with pytest.raises(NetConfigError, match=r"value_head must be one of \('flat', 'pooled'\)"):
        net_config("tiny", value_head="global")
    pooled = net_config("small", value_head="pooled")
    assert config_from_dict(NetConfig, config_to_dict(pooled)) == pooled
    before = {key: value for key, value in config_to_dict(config).items() if key != "value_head"}
    assert config_from_dict(NetConfig, before).value_head == "flat"  # stored before the field
    with pytest.raises(NetConfigError, match="num_planes"):
        net_config("tiny", num_planes=5)
    with pytest.raises(NetConfigError, match="blocks"):
        net_config("tiny", blocks=0)
    with pytest.raises(NetConfigError, match="depth"):
        net_config("tiny", depth=3)
    with pytest.raises(ConfigError, match=r"NetConfig: unknown fields \['dropout'\]"):
        config_from_dict(NetConfig, {**config_to_dict(config), "dropout": 0.1})
    with pytest.raises(NetConfigError, match="blocks"):
        config_from_dict(NetConfig, {**config_to_dict(config), "blocks": 0})


def test_attention_placement():
    def attention_slots(config: NetConfig) -> list[int]:
        model = PolicyValueNet(config)
        return [i for i, layer in enumerate(model.trunk) if isinstance(layer, GlobalSelfAttention)]

    assert attention_slots(net_config("small")) == [6]  # after the 6 residual blocks
    assert attention_slots(net_config("small", attention_blocks=2,
                                      attention_placement="spread")) == [3, 7]
    assert attention_slots(net_config("small", attention_blocks=0)) == []


@pytest.mark.parametrize(("head", "overrides"), VARIANTS)
def test_full_move_probabilities_sum_to_one(positions, head, overrides):
    with torch.no_grad():
        output = tiny_model(head, **overrides)(features_of(positions))
    tables = policy_log_tables(output.policy)
    assert all(table is None or table.dtype == torch.float32 for table in tables[:4])
    assert {table is None for table in tables[2:]} == {not overrides}
    if overrides:
        assert (tables.source_slot.dtype == torch.int64
                and (tables.source_slot >= 0).sum(1).tolist() == [4] * 10)
    batch = positions.shape[0]
    # P(s, d, a) = P(s, d) P(a | [s,] d) over all 64**3 triples, in float64.
    joint = full_log_probs(tables).exp()
    torch.testing.assert_close(joint.sum(dim=(1, 2, 3)), torch.ones(batch, dtype=torch.float64),
                               rtol=0, atol=1e-5)
    # Each (src, dst) row of arrows sums to 1, and is the softmax of the head's logits.
    torch.testing.assert_close(joint.sum(-1), tables.log_move.double().exp().reshape(batch, 64, 64),
                               rtol=0, atol=1e-6)
    if head == "joint":
        torch.testing.assert_close(full_log_probs(tables), naive_log_probs(output.policy),
                                   rtol=0, atol=2e-5)


@pytest.mark.parametrize(("head", "overrides"), VARIANTS)
def test_gathered_priors_match_a_naive_loop(positions, head, overrides):
    with torch.no_grad():
        output = tiny_model(head, **overrides)(features_of(positions))
    tables = policy_log_tables(output.policy)
    moves, offsets = engine.legal_moves(positions)
    priors = gather_legal_priors(tables, torch.from_numpy(moves),
                                 torch.from_numpy(segment_ids(offsets))).numpy()
    assert priors.dtype == np.float32 and priors.shape == (moves.shape[0],)
    p_full = full_log_probs(tables).exp().numpy()
    for row in range(positions.shape[0]):
        own = moves[offsets[row]:offsets[row + 1]]
        raw = np.array([p_full[row, s, d, a] for s, d, a in own.tolist()])
        np.testing.assert_allclose(priors[offsets[row]:offsets[row + 1]], raw / raw.sum(),
                                   rtol=2e-5)
        assert priors[offsets[row]:offsets[row + 1]].sum() == pytest.approx(1.0, abs=1e-5)
    assert np.all(priors > 0)


def test_the_arrow_source_switch():
    plain = PolicyValueNet(net_config("tiny"))
    source = PolicyValueNet(net_config("tiny", arrow_source=True))
    # head_dim x (channels + 1)
    assert count_parameters(source) - count_parameters(plain) == 16 * (32 + 1)
    with pytest.raises(NetConfigError, match="arrow_source needs policy_head 'joint'"):
        net_config("tiny", policy_head="factorized", arrow_source=True)
    with pytest.raises(NetConfigError, match="arrow_source must be true or false"):
        net_config("tiny", arrow_source=1)
    # A config stored before the field (checkpoints, exported files) is a network without the term,
    # whose weights are the ones such a network always had.
    stored = config_to_dict(net_config("tiny"))
    del stored["arrow_source"]
    assert config_from_dict(NetConfig, stored) == net_config("tiny")
    assert set(source.state_dict()) - set(plain.state_dict()) == {"policy_head.arrow_source.weight",
                                                                 "policy_head.arrow_source.bias"}
    with torch.no_grad():
        policy = source.eval()(torch.rand(3, 7, 8, 8).round()).policy
    assert isinstance(policy, JointSourcePolicy)
    assert [tuple(t.shape) for t in policy] == [(3, 64, 64), (3, 64, 64), (3, 4, 64), (3, 4)]


def arrow_distribution_gaps(priors: np.ndarray, moves: np.ndarray,
                            offsets: np.ndarray) -> list[float]:
    """For each pair of (src, dst) moves with one destination and two sources, the largest
    difference between the logs of their arrow distributions, both renormalized over the arrows
    legal after either."""
    gaps = []
    for row in range(offsets.shape[0] - 1):
        arrows: dict[tuple[int, int], dict[int, float]] = {}
        for (src, dst, arrow), prior in zip(moves[offsets[row]:offsets[row + 1]].tolist(),
                                            priors[offsets[row]:offsets[row + 1]].tolist(),
                                            strict=True):
            arrows.setdefault((src, dst), {})[arrow] = prior
        for (src, dst), first in arrows.items():
            for (other_src, other_dst), second in arrows.items():
                common = sorted(first.keys() & second.keys())
                if other_dst != dst or other_src <= src or len(common) < 2:
                    continue
                p = np.array([first[arrow] for arrow in common], np.float64)
                q = np.array([second[arrow] for arrow in common], np.float64)
                gaps.append(float(np.abs(np.log(p / p.sum()) - np.log(q / q.sum())).max()))
    return gaps


def test_the_arrow_distribution_depends_on_the_source(positions):
    """The search's priors of two moves to one destination from two sources: with the source term
    (a random-init net) their arrow distributions differ; without it they are one distribution."""
    moves, offsets = engine.legal_moves(positions)
    plain_priors, _ = NetworkEvaluator(tiny_model("joint"), 7).evaluate(positions, moves, offsets)
    source_priors, _ = (NetworkEvaluator(tiny_model("joint", arrow_source=True), 7)
                        .evaluate(positions, moves, offsets))
    plain = arrow_distribution_gaps(plain_priors, moves, offsets)
    source = arrow_distribution_gaps(source_priors, moves, offsets)
    assert len(plain) == len(source) >= 20
    assert max(plain) < 1e-5  # float32 rounding
    assert min(source) > 1e-3 and np.median(source) > 5e-3


@pytest.mark.parametrize("k", range(NUM_SYMMETRIES))
def test_the_joint_head_moves_with_the_board(k):
    """The joint head with the source term is 1x1 projections and bilinear maps over the squares,
    and its source rows are picked by square: turning its input and the amazons' squares by a
    symmetry turns the whole move distribution with them, so each move keeps its probability when
    board and move turn together (k = 2 is the half turn between White's real and canonical
    frames)."""
    torch.manual_seed(k)
    head = JointPolicyHead(32, 16, source=True).eval()
    x = torch.randn(3, 32, 8, 8)
    sources = torch.stack([torch.randperm(64)[:4] for _ in range(3)]).sort(dim=1).values
    turned = (torch.from_numpy(transform_square_labels(x.reshape(3, 32, 64).numpy(), k))
              .reshape(3, 32, 8, 8))
    turned_sources = torch.from_numpy(SYMMETRIES[k][sources.numpy()]).sort(dim=1).values
    with torch.no_grad():
        full = full_log_probs(policy_log_tables(head(x, sources)))
        turned_full = full_log_probs(policy_log_tables(head(turned, turned_sources)))
    back = torch.from_numpy(INVERSE_PERMUTATIONS[k])
    expected = full[:, back][:, :, back][:, :, :, back]  # expected[σs, σd, σa] = full[s, d, a]
    torch.testing.assert_close(turned_full, expected, rtol=0, atol=2e-5)


def test_mover_squares_are_the_side_to_moves_amazons(positions):
    for planes in (3, 7):
        features = features_of(positions, planes)
        expected = [np.flatnonzero(features[row, 0].numpy().reshape(-1))
                    for row in range(positions.shape[0])]
        np.testing.assert_array_equal(mover_squares(features).numpy(), np.stack(expected))
        assert all(len(squares) == 4 for squares in expected)


def test_gather_handles_extreme_logits():
    """Logits far apart underflow float32 probabilities; the segment softmax must not."""
    move_logits = torch.full((1, 64, 64), -1e4)
    move_logits[0, 0, 1] = 1e4
    policy = JointPolicy(move_logits, torch.zeros(1, 64, 64))
    moves = torch.tensor([[2, 3, 4], [5, 6, 7]])
    priors = gather_legal_priors(policy_log_tables(policy), moves,
                                 torch.zeros(2, dtype=torch.int64))
    torch.testing.assert_close(priors, torch.tensor([0.5, 0.5]))


@pytest.mark.parametrize("overrides", [{}, {"arrow_source": True}], ids=["joint", "joint-source"])
def test_prepare_for_inference_keeps_the_outputs(positions, overrides):
    model = tiny_model("joint", **overrides)
    prepared = prepare_for_inference(model)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in prepared.modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())  # original untouched
    features = features_of(positions)
    with torch.no_grad():
        expected = model(features)
        got = prepared(features.contiguous(memory_format=torch.channels_last))
    assert isinstance(got.policy, JointSourcePolicy) == bool(overrides)
    for want, have in zip([*expected.policy, expected.value], [*got.policy, got.value],
                          strict=True):
        torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("head", "overrides"), VARIANTS)
def test_network_evaluator_follows_the_protocol(positions, head, overrides):
    model = tiny_model(head, **overrides)
    evaluator = NetworkEvaluator(model, num_planes=7)
    moves, offsets = engine.legal_moves(positions)
    priors, values = evaluator.evaluate(positions, moves, offsets)
    assert priors.dtype == values.dtype == np.float32
    assert priors.shape == (moves.shape[0],) and values.shape == (positions.shape[0],)
    np.testing.assert_allclose(np.add.reduceat(priors, offsets[:-1]), 1.0, atol=1e-5)
    assert np.all(priors > 0) and np.all(np.abs(values) <= 1)
    with torch.no_grad():
        output = model(features_of(positions))
    np.testing.assert_allclose(values, output.value.numpy(), rtol=1e-5, atol=1e-6)
    expected = gather_legal_priors(policy_log_tables(output.policy), torch.from_numpy(moves),
                                   torch.from_numpy(segment_ids(offsets))).numpy()
    np.testing.assert_allclose(priors, expected, rtol=1e-5, atol=1e-8)
    # A frozen, folded, channels_last copy gives the same answers.
    fast_priors, fast_values = NetworkEvaluator(prepare_for_inference(model), 7).evaluate(
        positions, moves, offsets)
    np.testing.assert_allclose(fast_priors, priors, rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(fast_values, values, atol=1e-4)
    # bf16 compute: close, still normalized.
    bf16_priors, _ = (NetworkEvaluator(model, 7, dtype=torch.bfloat16)
                      .evaluate(positions, moves, offsets))
    np.testing.assert_allclose(np.add.reduceat(bf16_priors, offsets[:-1]), 1.0, atol=1e-4)


def test_network_evaluator_restores_training_mode_and_rejects_bad_input(positions):
    model = tiny_model()
    model.train()
    evaluator = NetworkEvaluator(model, 7)
    moves, offsets = engine.legal_moves(positions)
    evaluator.evaluate(positions, moves, offsets)
    assert model.training
    with pytest.raises(NetInputError, match="num_planes"):
        NetworkEvaluator(model, 3)
    with pytest.raises(EvaluatorInputError, match="moves must be"):
        evaluator.evaluate(positions, moves.astype(np.int64), offsets)
    with pytest.raises(EvaluatorInputError, match="move_offsets must be"):
        evaluator.evaluate(positions, moves, offsets[:-1])
    with pytest.raises(EvaluatorInputError, match="rise from 0"):
        evaluator.evaluate(positions, moves[:-1], offsets)
    with pytest.raises(EvaluatorInputError, match="positions must be a"):
        evaluator.evaluate(positions.astype(np.int64), moves, offsets)
    with pytest.raises(EvaluatorInputError, match="squares 0..63"):
        evaluator.evaluate(positions, np.where(moves == moves.max(), 64, moves).astype(np.int32),
                           offsets)
    priors, values = evaluator.evaluate(positions[:0], moves[:0], offsets[:1])
    assert priors.shape == values.shape == (0,)


def test_search_runs_end_to_end_with_the_network_evaluator():
    evaluator = NetworkEvaluator(tiny_model(), 7)
    config = SearchConfig(simulations=48, leaves_per_game=4, node_capacity=256,
                               edge_capacity=1 << 16)
    search = BatchedSearch(evaluator, config, num_games=2, seed=0)
    roots = random_positions(np.random.default_rng(4), 2, max_plies=6)
    search.set_roots(roots)
    for ply in range(3):
        stats = search.search()
        assert stats.simulations == 48 * 2
        chosen = search.select_moves(ply)
        for game in range(2):
            result = search.root_result(game)
            visited = result.visits > 0
            assert result.visits.sum() >= 48 and np.all(np.abs(result.q_values[visited]) <= 1)
            root = search.root_positions[game:game + 1]
            legal = {tuple(m) for m in engine.legal_moves(root)[0].tolist()}
            assert tuple(chosen[game].tolist()) in legal
            search.advance(game, chosen[game])
