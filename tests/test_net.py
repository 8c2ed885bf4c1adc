"""The network, its log tables, legal-move priors and the in-process evaluator (`amazons.net`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_learn import random_positions

from amazons import engine
from amazons.config import ConfigError, config_from_dict, config_to_dict
from amazons.mcts import BatchedSearch, SearchConfig
from amazons.net import (
    PRESETS,
    FactorizedPolicy,
    GlobalSelfAttention,
    JointPolicy,
    NetConfig,
    NetConfigError,
    NetInputError,
    NetworkEvaluator,
    PolicyValueNet,
    count_parameters,
    gather_legal_priors,
    net_config,
    policy_log_tables,
    prepare_for_inference,
    segment_ids,
)

torch.set_num_threads(1)

RESNET40_PARAMETERS = 23_927_370  # joint head, 7 planes; docs/network.md reports it
HEADS = ("joint", "factorized")


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
    assert attention_slots(net_config("small", attention_blocks=2, attention_placement="spread")) == [3, 7]
    assert attention_slots(net_config("small", attention_blocks=0)) == []


@pytest.mark.parametrize("head", HEADS)
def test_full_move_probabilities_sum_to_one(positions, head):
    with torch.no_grad():
        output = tiny_model(head)(features_of(positions))
    log_move, log_arrow = policy_log_tables(output.policy)
    assert log_move.dtype == log_arrow.dtype == torch.float32
    batch = positions.shape[0]
    # P(s, d, a) = P(s, d) P(a | d) over all 64**3 triples, in float64.
    joint = (log_move.double().reshape(batch, 64, 64, 1) + log_arrow.double().reshape(batch, 1, 64, 64)).exp()
    torch.testing.assert_close(joint.sum(dim=(1, 2, 3)), torch.ones(batch, dtype=torch.float64),
                               rtol=0, atol=1e-5)
    rows = log_arrow.exp().reshape(batch, 64, 64).sum(-1)
    torch.testing.assert_close(rows, torch.ones(batch, 64), rtol=0, atol=1e-5)


@pytest.mark.parametrize("head", HEADS)
def test_gathered_priors_match_a_naive_loop(positions, head):
    with torch.no_grad():
        output = tiny_model(head)(features_of(positions))
    log_move, log_arrow = policy_log_tables(output.policy)
    moves, offsets = engine.legal_moves(positions)
    priors = gather_legal_priors(log_move, log_arrow, torch.from_numpy(moves),
                                 torch.from_numpy(segment_ids(offsets))).numpy()
    assert priors.dtype == np.float32 and priors.shape == (moves.shape[0],)
    p_move, p_arrow = log_move.double().exp().numpy(), log_arrow.double().exp().numpy()
    for row in range(positions.shape[0]):
        own = moves[offsets[row]:offsets[row + 1]]
        raw = np.array([p_move[row, s * 64 + d] * p_arrow[row, d * 64 + a] for s, d, a in own.tolist()])
        np.testing.assert_allclose(priors[offsets[row]:offsets[row + 1]], raw / raw.sum(), rtol=2e-5)
        assert priors[offsets[row]:offsets[row + 1]].sum() == pytest.approx(1.0, abs=1e-5)
    assert np.all(priors > 0)


def test_gather_handles_extreme_logits():
    """Logits far apart underflow float32 probabilities; the segment softmax must not."""
    move_logits = torch.full((1, 64, 64), -1e4)
    move_logits[0, 0, 1] = 1e4
    policy = JointPolicy(move_logits, torch.zeros(1, 64, 64))
    moves = torch.tensor([[2, 3, 4], [5, 6, 7]])
    priors = gather_legal_priors(*policy_log_tables(policy), moves, torch.zeros(2, dtype=torch.int64))
    torch.testing.assert_close(priors, torch.tensor([0.5, 0.5]))


def test_prepare_for_inference_keeps_the_outputs(positions):
    model = tiny_model("joint")
    prepared = prepare_for_inference(model)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in prepared.modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())  # original untouched
    features = features_of(positions)
    with torch.no_grad():
        expected = model(features)
        got = prepared(features.contiguous(memory_format=torch.channels_last))
    for want, have in zip(list(expected.policy) + [expected.value], list(got.policy) + [got.value], strict=True):
        torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("head", HEADS)
def test_network_evaluator_follows_the_protocol(positions, head):
    model = tiny_model(head)
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
    expected = gather_legal_priors(*policy_log_tables(output.policy), torch.from_numpy(moves),
                                   torch.from_numpy(segment_ids(offsets))).numpy()
    np.testing.assert_allclose(priors, expected, rtol=1e-5, atol=1e-8)
    # A frozen, folded, channels_last copy gives the same answers.
    fast_priors, fast_values = NetworkEvaluator(prepare_for_inference(model), 7).evaluate(
        positions, moves, offsets)
    np.testing.assert_allclose(fast_priors, priors, rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(fast_values, values, atol=1e-4)
    # bf16 compute: close, still normalized.
    bf16_priors, _ = NetworkEvaluator(model, 7, dtype=torch.bfloat16).evaluate(positions, moves, offsets)
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
    with pytest.raises(NetInputError, match="moves must be"):
        evaluator.evaluate(positions, moves.astype(np.int64), offsets)
    with pytest.raises(NetInputError, match="move_offsets must be"):
        evaluator.evaluate(positions, moves, offsets[:-1])
    with pytest.raises(NetInputError, match="rise from 0"):
        evaluator.evaluate(positions, moves[:-1], offsets)
    with pytest.raises(ValueError, match="positions"):
        evaluator.evaluate(positions.astype(np.int64), moves, offsets)
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
