"""The soft policy head (KataGo's auxiliary soft policy target, `NetConfig.soft_policy_head`): the
flattened target against a hand computation, the loss against the head's own log-probabilities,
gradients that reach the trunk and not the main policy head, every reader of the weights' layout
(inference copies, the torch and native servers' in-place updates from the learner's flat weights,
exports), warm starts across the head, and a real run of the main job with it.

The reference losses here are computed from the head's logits with plain softmaxes over its
`[B, 64, 64]` tables, not through `amazons.neural.learner.policy_loss_terms`.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from test_netplay import flat_weights, trained_looking

from amazons import engine
from amazons.core.config import config_from_dict, config_to_dict
from amazons.export import export_model, random_positions, torch_outputs
from amazons.neural import numpy_net
from amazons.neural.checkpoint import (
    CheckpointError,
    init_weights_from,
    load_model_for_play,
    save_model,
)
from amazons.neural.learner import (
    Learner,
    OptimConfig,
    OptimConfigError,
    SampleBatch,
    label_tensors,
    soft_policy_targets,
)
from amazons.neural.model import (
    JointPolicy,
    NetConfig,
    NetConfigError,
    PolicyValueNet,
    inference_config_dict,
    net_config,
    prepare_for_inference,
)
from amazons.neural.native import native_available
from amazons.neural.served import (
    NativeReloadableEvaluator,
    ReloadableNetworkEvaluator,
    model_arrays,
)
from amazons.train.command import main

torch.set_num_threads(1)


def plain_twin(model: PolicyValueNet) -> PolicyValueNet:
    """A network without the soft policy head holding `model`'s other weights."""
    twin = PolicyValueNet(model.config.replace(soft_policy_head=False)).eval()
    twin.load_state_dict({key: value for key, value in model.state_dict().items()
                          if not key.startswith("soft_policy_head.")})
    return twin


@pytest.fixture(scope="module")
def batch() -> SampleBatch:
    """Six positions of seeded random games, each with a few labelled legal moves; the third
    has no policy target (a fast search's: policy weight 0, no labels)."""
    positions = random_positions(6, seed=5, max_plies=30)
    moves, offsets = engine.legal_moves(positions)
    rng = np.random.default_rng(3)
    label_moves, label_probs, label_offsets = [], [], [0]
    for index in range(6):
        count = 0 if index == 2 else 4
        chosen = rng.choice(np.arange(offsets[index], offsets[index + 1]), count, replace=False)
        probs = (rng.dirichlet(np.full(count, 0.3)).astype(np.float32) if count
                 else np.zeros(0, np.float32))
        label_moves.append(moves[chosen])
        label_probs.append(probs)
        label_offsets.append(label_offsets[-1] + count)
    weight = np.ones(6, np.float32)
    weight[2] = 0.0
    return SampleBatch(positions, np.concatenate(label_moves).astype(np.int32),
                       np.concatenate(label_probs), np.asarray(label_offsets, np.int64),
                       np.linspace(-1, 1, 6).astype(np.float32), policy_weight=weight)


# ------------------------------------------------------------------------------------------------
# The target and the loss


def test_the_soft_target_is_pi_to_the_one_over_t_renormalized_per_sample(batch):
    labels = label_tensors(batch)
    soft = soft_policy_targets(labels, 4.0).probs.numpy()
    for index in range(6):
        start, stop = batch.label_offsets[index], batch.label_offsets[index + 1]
        pi = batch.label_probs[start:stop].astype(np.float64)
        if stop > start:
            want = pi ** 0.25 / (pi ** 0.25).sum()
            np.testing.assert_allclose(soft[start:stop], want, rtol=1e-5)
            assert soft[start:stop].max() < pi.max() or pi.max() == pi.min()  # flatter
    np.testing.assert_allclose(soft_policy_targets(labels, 1.0).probs.numpy(), batch.label_probs,
                               rtol=1e-5)
    zero = labels._replace(probs=torch.zeros_like(labels.probs))
    assert torch.equal(soft_policy_targets(zero, 4.0).probs, zero.probs)


def reference_soft_loss(policy: JointPolicy, batch: SampleBatch, temperature: float) -> float:
    """-sum pi_soft log P_soft(move), per unit of policy weight, from the head's logits directly."""
    move = torch.log_softmax(policy.move_logits.double().reshape(len(batch), -1), -1)
    arrow = torch.log_softmax(policy.arrow_logits.double(), -1)
    total = 0.0
    for index in range(len(batch)):
        start, stop = batch.label_offsets[index], batch.label_offsets[index + 1]
        if stop == start or batch.policy_weight[index] == 0:
            continue
        pi = batch.label_probs[start:stop].astype(np.float64) ** (1.0 / temperature)
        pi /= pi.sum()
        for (src, dst, shot), p in zip(batch.label_moves[start:stop].tolist(), pi.tolist(),
                                       strict=True):
            total -= p * float(move[index, src * 64 + dst] + arrow[index, dst, shot])
    return total / float(batch.policy_weight.sum())


def test_the_learner_adds_the_weighted_soft_term_from_the_second_head(batch):
    torch.manual_seed(0)
    model = PolicyValueNet(net_config("tiny", soft_policy_head=True))
    config = OptimConfig(precision="fp32", channels_last=False, soft_policy_weight=8.0,
                         soft_policy_temperature=4.0)
    learner = Learner(model, config)
    features = learner.features(batch.positions)
    with torch.no_grad():
        output = model.train()(features)
        terms = learner._losses(output, label_tensors(batch))[1]
    assert isinstance(output.soft_policy, JointPolicy)
    want = reference_soft_loss(output.soft_policy, batch, 4.0)
    assert float(terms["soft_policy_loss"]) == pytest.approx(want, rel=1e-4)
    assert float(terms["loss"]) == pytest.approx(
        float(terms["policy_loss"]) + float(terms["value_mse"]) + 8.0 * want, rel=1e-4)
    # the soft head is not the policy head: the sharp target's loss through it is another number
    assert reference_soft_loss(output.policy, batch, 4.0) != pytest.approx(want, rel=1e-3)
    metrics = learner.train_step(batch)
    assert math.isfinite(metrics["soft_policy_loss"]) and metrics["soft_policy_loss"] > 0


def test_the_soft_term_trains_its_head_and_the_trunk_and_leaves_the_policy_head_alone(batch):
    torch.manual_seed(1)
    model = PolicyValueNet(net_config("tiny", soft_policy_head=True))
    config = OptimConfig(precision="fp32", channels_last=False, policy_weight=0.0, value_weight=0.0)
    learner = Learner(model, config)
    output = model.train()(learner.features(batch.positions))
    loss, _ = learner._losses(output, label_tensors(batch))
    loss.backward()
    grads = {name: parameter.grad for name, parameter in model.named_parameters()}
    assert all(grads[name] is None or not grads[name].any() for name in grads
               if name.startswith(("policy_head.", "value_head.")))
    assert any(grads[name] is not None and grads[name].abs().max() > 0 for name in grads
               if name.startswith("soft_policy_head."))
    assert grads["stem.conv.weight"].abs().max() > 0


def test_the_settings_are_checked_and_old_configs_load():
    with pytest.raises(NetConfigError, match="soft_policy_head"):
        net_config("tiny", soft_policy_head="yes")
    with pytest.raises(OptimConfigError, match="soft_policy_temperature"):
        OptimConfig(soft_policy_temperature=0.0)
    with pytest.raises(OptimConfigError, match="soft_policy_weight"):
        OptimConfig(soft_policy_weight=-1.0)
    stored = config_to_dict(net_config("tiny"))
    del stored["soft_policy_head"]
    # configs written before the field
    assert config_from_dict(NetConfig, stored) == net_config("tiny")
    assert "soft_policy_head" not in inference_config_dict(net_config("tiny",
                                                                      soft_policy_head=True))


# ------------------------------------------------------------------------------------------------
# Readers of the weights: inference copies, the servers' in-place updates, exports


@pytest.mark.parametrize("head, overrides", [("joint", {}), ("joint", {"arrow_source": True}),
                                             ("factorized", {})])
def test_inference_copies_and_exports_leave_the_head_out(head, overrides):
    model = trained_looking("tiny", head, seed=4, soft_policy_head=True, **overrides)
    assert model(torch.zeros(1, 7, 8, 8)).soft_policy is not None
    assert model(torch.zeros(1, 7, 8, 8), with_soft_policy=False).soft_policy is None
    prepared = prepare_for_inference(model)
    assert not hasattr(prepared, "soft_policy_head") and not prepared.config.soft_policy_head
    # the original is kept
    assert model.config.soft_policy_head and hasattr(model, "soft_policy_head")
    twin = plain_twin(model)
    config, trunk, arrays = model_arrays(model)
    want_config, want_trunk, want_arrays = model_arrays(twin)
    assert config == want_config and trunk == want_trunk and arrays.keys() == want_arrays.keys()
    assert all(np.array_equal(arrays[name], want_arrays[name]) for name in arrays)
    positions = random_positions(20, seed=8, max_plies=40)
    for got, want in zip(torch_outputs(model, positions), torch_outputs(twin, positions),
                         strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_servers_evaluators_take_the_learners_flat_weights_with_the_head():
    """What the main job publishes through shared memory is the whole learner model's state,
    soft head included; both production evaluators take it and run the policy head only."""
    positions = random_positions(30, seed=9, max_plies=40)
    moves, offsets = engine.legal_moves(positions)
    first = trained_looking("tiny", "joint", seed=5, soft_policy_head=True)
    second = trained_looking("tiny", "joint", seed=6, soft_policy_head=True)
    want = torch_outputs(plain_twin(second), positions)
    evaluators = [ReloadableNetworkEvaluator(first, "cpu", "fp32")]
    if native_available():
        evaluators.append(NativeReloadableEvaluator(first))
    for evaluator in evaluators:
        before = evaluator.evaluate(positions, moves, offsets)
        evaluator.load_flat_weights(flat_weights(second))
        got = evaluator.evaluate(positions, moves, offsets)
        assert np.abs(got[1] - before[1]).max() > 0.01  # new weights were loaded
        np.testing.assert_allclose(got[0], want[0], atol=1e-4)
        np.testing.assert_allclose(got[1], want[1], atol=1e-4)


def test_an_exported_file_holds_the_inference_network_only(tmp_path):
    model = trained_looking("tiny", "joint", seed=7, soft_policy_head=True)
    checkpoint = save_model(tmp_path / "model.pt", model)
    assert load_model_for_play(checkpoint).config.soft_policy_head  # the checkpoint keeps the head
    path, differences = export_model(model, tmp_path / "model.npz")
    assert max(differences.values()) < 1e-4  # the export checks itself against the torch model
    net = numpy_net.load_model(path)
    assert "soft_policy_head" not in net.config
    positions = random_positions(10, seed=2, max_plies=30)
    moves, offsets = engine.legal_moves(positions)
    got = numpy_net.NumpyEvaluator(net).evaluate(positions, moves, offsets)
    for have, want in zip(got, torch_outputs(model, positions), strict=True):
        np.testing.assert_allclose(have, want, atol=1e-4)


# ------------------------------------------------------------------------------------------------
# Warm starts across the head


def test_a_warm_start_copies_every_shared_weight_across_the_head(tmp_path):
    plain = trained_looking("tiny", "joint", seed=9)
    with_head = trained_looking("tiny", "joint", seed=10, soft_policy_head=True)
    torch.manual_seed(11)
    target = PolicyValueNet(net_config("tiny", soft_policy_head=True))
    fresh_head = {key: value.clone() for key, value in target.state_dict().items()
                  if key.startswith("soft_policy_head.")}
    init_weights_from(save_model(tmp_path / "plain.pt", plain), target)
    state = target.state_dict()
    assert all(torch.equal(state[key], value) for key, value in plain.state_dict().items())
    assert all(torch.equal(state[key], value) for key, value in fresh_head.items())  # starts fresh
    target_plain = PolicyValueNet(net_config("tiny"))
    init_weights_from(save_model(tmp_path / "head.pt", with_head), target_plain)
    assert all(torch.equal(value, with_head.state_dict()[key])
               for key, value in target_plain.state_dict().items())
    with pytest.raises(CheckpointError, match="net.blocks"):
        init_weights_from(tmp_path / "plain.pt",
                          PolicyValueNet(net_config("tiny", blocks=1, soft_policy_head=True)))


# ------------------------------------------------------------------------------------------------
# The main job with the head


@pytest.mark.slow
def test_the_main_job_trains_the_head_from_a_plain_model_and_ships_a_plain_export(tmp_path):
    """Two iterations of the cpu preset (its native server on the learner's flat weights) warm
    started from a model without the head; the run's model keeps the head, its export does not."""
    start = save_model(tmp_path / "start.pt", trained_looking("tiny", "joint", seed=12))
    run_dir = tmp_path / "run"
    overrides = ["games_per_iteration=8", "selfplay.num_actors=2", "selfplay.games_in_parallel=4",
                 "selfplay.search.simulations=8", "selfplay.start_jitter_s=0", "min_steps=12",
                 "max_steps=12", "train_batch_size=64", "optim.warmup_steps=0", "eval.every=0",
                 "net.soft_policy_head=true"]
    assert main(["--preset", "cpu", "--run-dir", str(run_dir), "--iterations", "2", "--no-progress",
                 "--init", str(start), *overrides]) == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [row["train/soft_policy_loss"] for row in rows]
    assert len(losses) == 2 and all(math.isfinite(loss) and loss > 0 for loss in losses)
    model = load_model_for_play(run_dir / "models" / "model-0002.pt")
    assert model.config.soft_policy_head
    net = numpy_net.load_model(export_model(model, tmp_path / "run.npz")[0])
    assert "soft_policy_head" not in net.config
