"""Samples, augmentation, losses and the training step (`amazons.neural.learner`).

The losses are checked against naive per-sample, per-label Python loops; augmentation against
the engine's legal moves of the augmented positions and against the inverse symmetry; the step
by over-fitting a tiny net on a fixed batch. `random_positions` and `random_batch` are shared with
`test_net.py` and `test_checkpoint.py`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from amazons import engine
from amazons.core.config import ConfigError, config_from_dict, config_to_dict
from amazons.neural.learner import (
    Learner,
    MetricSums,
    OptimConfig,
    OptimConfigError,
    SampleBatch,
    SampleError,
    augment_batch,
    label_tensors,
    learning_rate_factor,
    policy_loss_terms,
    policy_metrics,
    sample_batch,
    value_loss,
)
from amazons.neural.model import (
    JointPolicy,
    JointSourcePolicy,
    PolicyTables,
    PolicyValueNet,
    net_config,
    policy_log_tables,
)
from amazons.symmetry import INVERSE, NUM_SYMMETRIES, transform_moves, transform_positions

torch.set_num_threads(1)


POLICY_METRICS = ("policy_entropy", "target_entropy", "policy_kl")  # every metrics_every steps

# The policy heads the loss tests run: (policy_head, other NetConfig fields).
POLICY_VARIANTS = [pytest.param("joint", {}, id="joint"),
                   pytest.param("factorized", {}, id="factorized"),
                   pytest.param("joint", {"arrow_source": True}, id="joint-source")]


def naive_log_probs(policy: JointPolicy | JointSourcePolicy) -> torch.Tensor:
    """log P(src, dst, arrow) `[B, 64, 64, 64]` float64 straight from a joint head's logits: a
    softmax over the 4,096 pairs, then one over the 64 arrows of arrow_logits[dst] (+ the source
    logits of the amazon on src, with the source term)."""
    batch = policy.move_logits.shape[0]
    log_move = torch.log_softmax(policy.move_logits.double().reshape(batch, -1), -1).reshape(
        batch, 64, 64, 1)
    # [b, src, dst, arrow]
    arrow_logits = policy.arrow_logits.double().reshape(batch, 1, 64, 64).repeat(1, 64, 1, 1)
    if isinstance(policy, JointSourcePolicy):
        for row in range(batch):
            for slot, square in enumerate(policy.source_squares[row].tolist()):
                arrow_logits[row, square] += policy.source_logits[row, slot].double()
    return log_move + torch.log_softmax(arrow_logits, -1)


def full_log_probs(tables: PolicyTables) -> torch.Tensor:
    """log P(src, dst, arrow) `[B, 64, 64, 64]` float64 of every triple, built from the tables
    term by term (the source term's too, on the squares of its slots, when present)."""
    batch = tables.log_move.shape[0]
    log_p = (tables.log_move.double().reshape(batch, 64, 64, 1)
             + tables.log_arrow.double().reshape(batch, 1, 64, 64))
    if tables.source_arrow is not None:
        source = tables.source_arrow.double().reshape(batch, -1, 1, 64)  # [b, slot, ., arrow]
        norm = tables.source_norm.double().reshape(batch, -1, 64, 1)  # [b, slot, dst, .]
        for row in range(batch):
            for square, slot in enumerate(tables.source_slot[row].tolist()):
                if slot >= 0:
                    log_p[row, square] += source[row, slot] - norm[row, slot]
    return log_p


def random_positions(rng: np.random.Generator, count: int, max_plies: int = 30) -> np.ndarray:
    """`count` canonical positions after 0..max_plies random legal plies from the start, none
    terminal (a game that runs out of moves stops one ply earlier)."""
    positions = np.repeat(engine.start_position()[None], count, axis=0)
    plies = rng.integers(0, max_plies + 1, size=count)
    for ply in range(max_plies):
        live = np.flatnonzero(plies > ply)
        if live.size == 0:
            break
        current = np.ascontiguousarray(positions[live])
        moves, offsets = engine.legal_moves(current)
        counts = np.diff(offsets)
        picks = offsets[:-1] + rng.integers(0, np.maximum(counts, 1))
        children = engine.apply_moves(current[counts > 0],
                                      np.ascontiguousarray(moves[picks[counts > 0]]))
        keep = ~engine.is_terminal(children)
        positions[live[counts > 0][keep]] = children[keep]
    return positions


def random_batch(
    rng: np.random.Generator, count: int, max_labels: int = 6, max_plies: int = 30,
    skew: float = 1.0
) -> SampleBatch:
    """A batch of random positions whose labels are random weights on some of their legal moves.

    `skew` > 1 concentrates the weights (a lower-entropy target).
    """
    positions = random_positions(rng, count, max_plies)
    moves, offsets = engine.legal_moves(positions)
    label_moves, label_weights = [], []
    for index in range(count):
        own = moves[offsets[index]:offsets[index + 1]]
        picked = rng.choice(own.shape[0],
                            size=min(own.shape[0], int(rng.integers(1, max_labels + 1))),
                            replace=False)
        label_moves.append(own[picked])
        label_weights.append(rng.random(picked.shape[0]) ** skew + 1e-3)
    return SampleBatch.from_samples(positions, label_moves, label_weights,
                                    rng.choice([-1.0, 1.0], count))


@pytest.fixture(scope="module")
def batch() -> SampleBatch:
    return random_batch(np.random.default_rng(7), 12)


# ------------------------------------------------------------------------------------------------
# SampleBatch


def test_from_samples_normalizes_weights_and_builds_csr():
    positions = np.repeat(engine.start_position()[None], 2, axis=0)
    moves = engine.legal_moves(positions[:1])[0]
    built = SampleBatch.from_samples(positions, [moves[:3], moves[3:4]], [[1, 1, 2], [5]], [1, -1])
    np.testing.assert_array_equal(built.label_offsets, [0, 3, 4])
    np.testing.assert_allclose(built.label_probs, [0.25, 0.25, 0.5, 1.0])
    np.testing.assert_array_equal(built.label_moves, moves[:4])
    assert built.label_moves.dtype == np.int32 and built.z.dtype == np.float32 and len(built) == 2


def test_select_and_concatenate(batch):
    picked = batch.select([3, 0, 3])
    for row, source in enumerate([3, 0, 3]):
        own = slice(picked.label_offsets[row], picked.label_offsets[row + 1])
        theirs = slice(batch.label_offsets[source], batch.label_offsets[source + 1])
        np.testing.assert_array_equal(picked.label_moves[own], batch.label_moves[theirs])
        np.testing.assert_array_equal(picked.label_probs[own], batch.label_probs[theirs])
    joined = SampleBatch.concatenate([batch.select(range(5)), batch.select(range(5, batch.size))])
    for name in ("positions", "label_moves", "label_probs", "label_offsets", "z"):
        np.testing.assert_array_equal(getattr(joined, name), getattr(batch, name))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("label_probs", lambda b: b.label_probs * 2, "sum to"),
        ("label_probs",
         lambda b: np.where(np.arange(b.label_probs.size) == 0, np.nan, b.label_probs)
         .astype(np.float32), "finite"),
        ("label_moves",
         lambda b: np.where(b.label_moves == b.label_moves[0, 0], 64, b.label_moves)
         .astype(np.int32), "0..63"),
        ("label_moves", lambda b: b.label_moves.astype(np.int64), "label_moves must be"),
        ("z", lambda b: np.full_like(b.z, 2.0), "z must be"),
        ("positions", lambda b: b.positions[:-1], "positions need"),
        ("label_offsets", lambda b: np.concatenate([[0], b.label_offsets[:-1]]).astype(np.int64),
         "label_offsets"),
    ],
)
def test_malformed_batches_are_rejected(batch, field, value, message):
    fields = {name: getattr(batch, name) for name in
              ("positions", "label_moves", "label_probs", "label_offsets", "z")}
    fields[field] = value(batch)
    with pytest.raises(SampleError, match=message):
        SampleBatch(**fields)


# ------------------------------------------------------------------------------------------------
# Augmentation


def test_augmentation_then_inverse_restores_the_batch_exactly(batch):
    symmetries = np.arange(batch.size) % NUM_SYMMETRIES
    augmented = augment_batch(batch, symmetries=symmetries)
    assert not np.array_equal(augmented.positions, batch.positions)
    restored = augment_batch(augmented, symmetries=INVERSE[symmetries])
    for name in ("positions", "label_moves", "label_probs", "label_offsets", "z"):
        np.testing.assert_array_equal(getattr(restored, name), getattr(batch, name))


def test_augmented_labels_are_legal_moves_of_the_augmented_positions(batch):
    for symmetry in range(NUM_SYMMETRIES):
        augmented = augment_batch(batch, symmetries=np.full(batch.size, symmetry))
        moves, offsets = engine.legal_moves(augmented.positions)
        for row in range(batch.size):
            legal = {tuple(move) for move in moves[offsets[row]:offsets[row + 1]].tolist()}
            labels = augmented.label_moves[augmented.label_offsets[row]:
                                           augmented.label_offsets[row + 1]]
            assert {tuple(move) for move in labels.tolist()} <= legal


def test_random_augmentation_draws_every_symmetry_and_keeps_labels_legal():
    rng = np.random.default_rng(3)
    pool = random_batch(rng, 64)
    augmented = augment_batch(pool, rng)
    seen = set()
    for row in range(pool.size):
        own = slice(pool.label_offsets[row], pool.label_offsets[row + 1])
        matches = {k for k in range(NUM_SYMMETRIES)
                   if np.array_equal(transform_positions(pool.positions[row:row + 1], k),
                                     augmented.positions[row:row + 1])
                   and np.array_equal(transform_moves(pool.label_moves[own], k),
                                      augmented.label_moves[own])}
        assert matches, f"sample {row} is no symmetry of its source"
        seen |= matches
    assert seen == set(range(NUM_SYMMETRIES))
    drawn = sample_batch(pool, 32, rng)
    moves, offsets = engine.legal_moves(drawn.positions)
    for row in range(drawn.size):
        legal = {tuple(move) for move in moves[offsets[row]:offsets[row + 1]].tolist()}
        labels = drawn.label_moves[drawn.label_offsets[row]:drawn.label_offsets[row + 1]]
        assert {tuple(move) for move in labels.tolist()} <= legal
    with pytest.raises(SampleError, match="rng or symmetries"):
        augment_batch(pool)


# ------------------------------------------------------------------------------------------------
# Losses against naive loops


@pytest.mark.parametrize(("head", "overrides"), POLICY_VARIANTS)
def test_losses_equal_a_naive_loop(batch, head, overrides):
    torch.manual_seed(0)
    model = PolicyValueNet(net_config("tiny", policy_head=head, **overrides)).eval()
    features = torch.from_numpy(engine.features(batch.positions, 7))
    with torch.no_grad():
        output = model(features)
    labels = label_tensors(batch)
    terms = policy_loss_terms(output.policy, labels)
    metrics = policy_metrics(output.policy, labels)

    naive = {name: 0.0 for name in terms}
    naive_kl = 0.0
    naive_target_entropy = 0.0
    for row in range(batch.size):
        if head == "joint":
            log_move = torch.log_softmax(output.policy.move_logits[row].reshape(-1).double(), 0)
            arrow_logits = output.policy.arrow_logits[row].double()  # [dst, arrow]
            source = isinstance(output.policy, JointSourcePolicy)
        else:
            log_src, log_dst, log_arrow = (torch.log_softmax(logits[row].double(), 0)
                                           for logits in output.policy)
        for j in range(batch.label_offsets[row], batch.label_offsets[row + 1]):
            src, dst, arrow = (int(square) for square in batch.label_moves[j])
            pi = float(batch.label_probs[j])
            if head == "joint":
                logits = arrow_logits[dst]
                if source:  # labels leave an amazon's square: one of the 4 slots
                    slot = output.policy.source_squares[row].tolist().index(src)
                    logits = logits + output.policy.source_logits[row, slot].double()
                parts = {"policy_move": float(log_move[src * 64 + dst]),
                         "policy_arrow": float(torch.log_softmax(logits, 0)[arrow])}
            else:
                parts = {"policy_src": float(log_src[src]), "policy_dst": float(log_dst[dst]),
                         "policy_arrow": float(log_arrow[arrow])}
            for name, log_p in parts.items():
                naive[name] -= pi * log_p / batch.size
            naive_kl += pi * (math.log(pi) - sum(parts.values())) / batch.size
            naive_target_entropy -= pi * math.log(pi) / batch.size
    assert set(terms) == ({"policy_move", "policy_arrow"} if head == "joint"
                          else {"policy_src", "policy_dst", "policy_arrow"})
    for name, value in terms.items():
        assert float(value) == pytest.approx(naive[name], rel=1e-5)
    assert float(metrics["policy_kl"]) == pytest.approx(naive_kl, rel=1e-5)
    assert float(metrics["target_entropy"]) == pytest.approx(naive_target_entropy, rel=1e-5)
    naive_value = float(np.mean((output.value.numpy().astype(np.float64) - batch.z) ** 2))
    assert float(value_loss(output.value, labels.z)) == pytest.approx(naive_value, rel=1e-6)


@pytest.mark.parametrize(("head", "overrides"), POLICY_VARIANTS)
def test_policy_entropy_is_the_entropy_of_the_full_move_distribution(head, overrides):
    torch.manual_seed(1)
    model = PolicyValueNet(net_config("tiny", policy_head=head, **overrides)).eval()
    one = random_batch(np.random.default_rng(5), 2)
    with torch.no_grad():
        output = model(torch.from_numpy(engine.features(one.positions, 7)))
    metrics = policy_metrics(output.policy, label_tensors(one))
    joint = (naive_log_probs(output.policy) if head == "joint"
             else full_log_probs(policy_log_tables(output.policy)))
    entropy = -(joint.exp() * joint).sum(dim=(1, 2, 3)).mean()
    assert float(metrics["policy_entropy"]) == pytest.approx(float(entropy), rel=1e-5)
    assert float(metrics["policy_kl"]) > 0


def without_policy(batch: SampleBatch, fast: np.ndarray) -> SampleBatch:
    """`batch` with the samples at `fast` turned into fast searches: policy weight 0, no labels."""
    counts = np.diff(batch.label_offsets)
    keep = np.repeat(~np.isin(np.arange(batch.size), fast), counts)
    offsets = np.zeros(batch.size + 1, np.int64)
    np.cumsum(np.where(np.isin(np.arange(batch.size), fast), 0, counts), out=offsets[1:])
    weight = np.ones(batch.size, np.float32)
    weight[fast] = 0.0
    return SampleBatch(batch.positions, batch.label_moves[keep], batch.label_probs[keep], offsets,
                       batch.z, weight)


@pytest.mark.parametrize("head", ["joint", "factorized"])
def test_samples_without_a_policy_weight_add_nothing_to_the_policy_terms(batch, head):
    """The policy terms of a batch with fast-search samples (policy weight 0, no labels) equal
    those of its full samples alone; the value loss still covers every sample."""
    torch.manual_seed(2)
    model = PolicyValueNet(net_config("tiny", policy_head=head)).eval()
    fast = np.array([1, 4, 5, 9])
    mixed = without_policy(batch, fast)
    full = np.setdiff1d(np.arange(batch.size), fast)
    alone = batch.select(full)
    with torch.no_grad():
        output = model(torch.from_numpy(engine.features(mixed.positions, 7)))
        alone_output = model(torch.from_numpy(engine.features(alone.positions, 7)))
    terms = policy_loss_terms(output.policy, label_tensors(mixed))
    alone_terms = policy_loss_terms(alone_output.policy, label_tensors(alone))
    for name, value in terms.items():
        assert float(value) == pytest.approx(float(alone_terms[name]), rel=1e-5)
    metrics, alone_metrics = policy_metrics(output.policy, label_tensors(mixed)), policy_metrics(
        alone_output.policy, label_tensors(alone))
    for name in ("target_entropy", "policy_kl"):
        assert float(metrics[name]) == pytest.approx(float(alone_metrics[name]), rel=1e-4)
    naive_value = float(np.mean((output.value.numpy().astype(np.float64) - batch.z) ** 2))
    assert float(value_loss(output.value, label_tensors(mixed).z)) == pytest.approx(
        naive_value, rel=1e-6)


def test_a_step_on_fast_samples_only_trains_the_value():
    torch.manual_seed(3)
    every = random_batch(np.random.default_rng(8), 6)
    fast = without_policy(every, np.arange(6))
    learner = Learner(PolicyValueNet(net_config("tiny")),
                      OptimConfig(lr=1e-3, warmup_steps=0, precision="fp32"))
    metrics = learner.train_step(fast)
    assert metrics["policy_loss"] == 0.0 and metrics["value_mse"] > 0
    for param in learner.model.policy_head.parameters():
        assert param.grad is None or float(param.grad.abs().max()) == 0.0
    value_grads = [param.grad for param in learner.model.value_head.parameters()]
    assert any(grad is not None and float(grad.abs().max()) > 0 for grad in value_grads)


def test_policy_weights_travel_with_their_samples(batch):
    mixed = without_policy(batch, np.array([0, 3]))
    picked = mixed.select([3, 2, 0])
    np.testing.assert_array_equal(picked.policy_weight, [0, 1, 0])
    assert np.diff(picked.label_offsets).tolist()[0] == 0
    joined = SampleBatch.concatenate([mixed.select(range(4)), mixed.select(range(4, batch.size))])
    np.testing.assert_array_equal(joined.policy_weight, mixed.policy_weight)
    augmented = augment_batch(mixed, symmetries=np.arange(batch.size) % NUM_SYMMETRIES)
    np.testing.assert_array_equal(augmented.policy_weight, mixed.policy_weight)
    with pytest.raises(SampleError, match="label_offsets"):
        SampleBatch(mixed.positions, mixed.label_moves, mixed.label_probs, mixed.label_offsets,
                    mixed.z, np.ones(batch.size, np.float32))
    with pytest.raises(SampleError, match="policy_weight"):
        SampleBatch(batch.positions, batch.label_moves, batch.label_probs, batch.label_offsets,
                    batch.z, np.full(batch.size, 2.0, np.float32))


# ------------------------------------------------------------------------------------------------
# Optimization


def test_optim_config_validation_and_round_trip():
    config = OptimConfig(lr=1e-3, schedule="constant")
    assert config_from_dict(OptimConfig, config_to_dict(config)) == config
    for bad in ({"lr": 0.0}, {"schedule": "linear"}, {"precision": "int8"}, {"betas": (0.9, 1.0)},
                {"warmup_steps": -1}, {"grad_clip_norm": math.nan}):
        with pytest.raises(OptimConfigError, match=next(iter(bad)).split("_")[0]):
            OptimConfig(**bad)
    with pytest.raises(ConfigError, match="OptimConfig: unknown fields .*momentum"):
        config_from_dict(OptimConfig, {**config_to_dict(config), "momentum": 0.9})


def test_learning_rate_schedule():
    config = OptimConfig(warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
    assert learning_rate_factor(0, config) == pytest.approx(0.1)
    assert learning_rate_factor(9, config) == pytest.approx(1.0)
    assert learning_rate_factor(10, config) == pytest.approx(1.0)
    assert learning_rate_factor(60, config) == pytest.approx(0.55)
    assert learning_rate_factor(110, config) == pytest.approx(0.1)
    assert learning_rate_factor(10_000, config) == pytest.approx(0.1)
    assert learning_rate_factor(50, config.replace(schedule="constant")) == 1.0


def test_train_step_metrics_schedule_and_clipping(batch):
    torch.manual_seed(0)
    config = OptimConfig(lr=1e-3, warmup_steps=4, total_steps=8, grad_clip_norm=1e-3)
    learner = Learner(PolicyValueNet(net_config("tiny")), config, seed=0)
    before = [p.detach().clone() for p in learner.model.parameters()]
    metrics = learner.train_step(batch)
    expected = {"loss", "policy_loss", "policy_move", "policy_arrow", "value_mse", "policy_entropy",
                "target_entropy", "policy_kl", "grad_norm", "lr", "skipped"}
    assert set(metrics) == expected
    assert all(math.isfinite(value) for value in metrics.values())
    assert metrics["lr"] == pytest.approx(1e-3 / 4)
    assert metrics["policy_loss"] == pytest.approx(
        metrics["policy_move"] + metrics["policy_arrow"], rel=1e-6)
    assert metrics["loss"] == pytest.approx(metrics["policy_loss"] + metrics["value_mse"], rel=1e-6)
    assert metrics["policy_kl"] == pytest.approx(
        metrics["policy_loss"] - metrics["target_entropy"], rel=1e-4)
    assert metrics["grad_norm"] > 1e-3  # reported before clipping
    assert learner.step == 1
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(2e-3 / 4)
    # AdamW's first step moves each weight by about lr, whatever the clipped gradient's size.
    moved = max(float((p.detach() - b).abs().max())
                for p, b in zip(learner.model.parameters(), before, strict=True))
    assert 0 < moved <= 1e-3 / 4 * 1.01 + 1e-9
    assert not learner.optimizer.param_groups[1]["weight_decay"]  # biases and norms: no decay


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_steps_run_on_cpu(batch, precision):
    torch.manual_seed(0)
    learner = Learner(PolicyValueNet(net_config("tiny")), OptimConfig(precision=precision), seed=0)
    assert learner.precision == precision
    for _ in range(6):  # fp16 starts with a loss scale that overflows, skips, and backs off
        before = [p.detach().clone() for p in learner.model.parameters()]
        metrics = learner.train_step(batch)
        unchanged = all(torch.equal(p, b)
                        for p, b in zip(learner.model.parameters(), before, strict=True))
        assert unchanged == bool(metrics["skipped"])
        if not metrics["skipped"]:
            break
    assert all(math.isfinite(value) for value in metrics.values()), metrics
    assert ("loss_scale" in metrics) == (precision == "fp16")
    assert learner.step >= 1


def test_lazy_step_metrics_and_their_sums_equal_the_float_ones(batch):
    """Steps 0 and 2 of 3 report the policy metrics (`metrics_every=2`): each mean is over the
    steps that reported the metric."""
    learners = []
    for _ in range(2):
        torch.manual_seed(0)
        learners.append(Learner(PolicyValueNet(net_config("tiny")),
                                OptimConfig(warmup_steps=3, metrics_every=2), seed=0))
    floats, sums = [], MetricSums()
    for _ in range(3):
        floats.append(learners[0].train_step(batch))
        sums.add(learners[1].train_step_tensors(batch))
    assert [set(POLICY_METRICS) <= set(step) for step in floats] == [True, False, True]
    means = sums.means()
    assert set(means) == set(floats[0])
    for name in means:  # the same per-step numbers, summed in float64 as Python sums floats
        reported = [step[name] for step in floats if name in step]
        assert means[name] == sum(reported) / len(reported), name
    for have, want in zip(learners[1].model.parameters(), learners[0].model.parameters(),
                          strict=True):
        assert torch.equal(have, want)
    assert MetricSums().means() == {}


# Every device there is, each precision on a GPU; bf16 and fp16 on the CPU are
# test_mixed_precision_steps_run_on_cpu's.
DEVICE_PRECISIONS = [("cpu", "fp32")] + ([("cuda", precision)
                                          for precision in ("fp32", "bf16", "fp16")]
                                         if torch.cuda.is_available() else [])


@pytest.mark.parametrize(("device", "precision"), DEVICE_PRECISIONS)
def test_step_metrics_are_scalars_on_every_device(batch, device, precision):
    """`MetricSums` stacks the metrics of many steps: each must be a 0-d tensor wherever it was
    computed (a batch's label totals staged through pinned memory on a GPU, fp16's loss scale)."""
    labels = label_tensors(batch, device)
    assert labels.policy_samples.shape == () and labels.ownership_samples.shape == ()
    assert labels.z.shape == (batch.size,) and labels.moves.shape == (batch.label_moves.shape[0], 3)
    torch.manual_seed(0)
    learner = Learner(PolicyValueNet(net_config("tiny")), OptimConfig(precision=precision),
                      device=device, seed=0)
    sums = MetricSums()
    for _ in range(2):
        metrics = learner.train_step_tensors(batch)
        assert all(value.shape == () for value in metrics.values()
                   if isinstance(value, torch.Tensor)), {
            name: tuple(value.shape) for name, value in metrics.items()
            if isinstance(value, torch.Tensor)}
        sums.add(metrics)
    assert all(math.isfinite(value) for value in sums.means().values())


class DeviceSkipLearner(Learner):
    """The GPU's way of skipping a non-finite step (fused AdamW with `found_inf`), on the CPU."""

    def _skips_on_device(self) -> bool:
        return True


def test_a_non_finite_gradient_is_skipped_on_the_device(batch):
    torch.manual_seed(0)
    learner = DeviceSkipLearner(PolicyValueNet(net_config("tiny")), OptimConfig(warmup_steps=0),
                                seed=0)
    assert learner.optimizer.param_groups[0]["fused"]
    learner.train_step(batch)
    before = [p.detach().clone() for p in learner.model.parameters()]
    moments = {key: value.clone()
               for key, value in learner.optimizer.state[next(learner.model.parameters())].items()}
    poison = next(learner.model.parameters()).register_hook(lambda grad: grad * float("nan"))
    metrics = learner.train_step(batch)
    poison.remove()
    assert metrics["skipped"] == 1.0 and math.isnan(metrics["grad_norm"])
    assert all(torch.equal(p, b) for p, b in zip(learner.model.parameters(), before, strict=True))
    state = learner.optimizer.state[next(learner.model.parameters())]
    assert all(torch.equal(state[key], value) for key, value in moments.items())  # step count too
    assert learner.train_step(batch)["skipped"] == 0.0
    assert not all(torch.equal(p, b)
                   for p, b in zip(learner.model.parameters(), before, strict=True))


def test_learner_state_loads_across_optimizer_kernels(batch):
    """The learner runs the fused AdamW on a CPU too; a state saved with the plain kernel (the
    CPU's before, in older checkpoints) loads into it, and the other way round."""
    torch.manual_seed(0)
    fused = Learner(PolicyValueNet(net_config("tiny")), OptimConfig(warmup_steps=0), seed=0)
    assert fused.optimizer.param_groups[0]["fused"]
    fused.train_step(batch)
    plain = Learner(PolicyValueNet(net_config("tiny")),
                    OptimConfig(warmup_steps=0, fused_adamw=False), seed=1)
    plain.load_state_dict(fused.state_dict())
    assert not plain.optimizer.param_groups[0]["fused"] and plain.step == 1
    plain.train_step(batch)
    back = Learner(PolicyValueNet(net_config("tiny")), OptimConfig(warmup_steps=0), seed=2)
    back.load_state_dict(plain.state_dict())
    assert back.optimizer.param_groups[0]["fused"] and back.step == 2
    assert back.train_step(batch)["skipped"] == 0.0


def test_auto_precision_is_fp32_on_cpu():
    assert Learner(PolicyValueNet(net_config("tiny")), OptimConfig()).precision == "fp32"


def test_validation_metrics_do_not_train(batch):
    learner = Learner(PolicyValueNet(net_config("tiny", policy_head="factorized")), seed=0)
    before = [p.detach().clone() for p in learner.model.parameters()]
    metrics = learner.validation_metrics(batch)
    assert {"policy_src", "policy_dst", "policy_arrow", "value_mse", "policy_kl"} <= set(metrics)
    assert all(torch.equal(p, b) for p, b in zip(learner.model.parameters(), before, strict=True))
    assert learner.step == 0


@pytest.mark.parametrize(("head", "overrides"), POLICY_VARIANTS)
def test_tiny_net_overfits_a_fixed_batch(head, overrides):
    """64 fixed samples, low-entropy soft targets: the total loss falls by at least 80%."""
    torch.manual_seed(0)
    fixed = random_batch(np.random.default_rng(11), 64, max_labels=3, skew=4.0)
    config = OptimConfig(lr=3e-3, warmup_steps=0, schedule="constant", weight_decay=0.0)
    learner = Learner(PolicyValueNet(net_config("tiny", policy_head=head, **overrides)), config,
                      seed=0)
    first = learner.train_step(fixed)["loss"]
    for _ in range(100):
        last = learner.train_step(fixed)
    assert last["loss"] <= 0.2 * first, (first, last)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch internals, while compiling
def test_compiled_training_step_matches_eager(batch):
    """`OptimConfig(compile=True)` wraps the forward in torch.compile (inductor compiles C++ on a
    CPU: a minute or more on 2 cores); the step must agree with the eager one."""
    losses = []
    for compile_model in (False, True):
        torch.manual_seed(0)
        learner = Learner(PolicyValueNet(net_config("tiny")), OptimConfig(compile=compile_model),
                          seed=0)
        losses.append([learner.train_step(batch)["loss"] for _ in range(2)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)
