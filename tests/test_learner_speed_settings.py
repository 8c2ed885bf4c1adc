"""The learner's speed settings compute what the plain step computes (`amazons.neural.learner`).

Dense policy targets against the gathered log-probabilities (loss and gradient), the policy
metrics every `metrics_every` steps, the fused AdamW (a non-finite step still skipped), a whole
step with every setting against one with none, the batch prefetch thread (the same batches in
the same order, in the learner and in the main job's training phase), and the replay window
sampled on one thread while another adds games.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch
from test_learn import POLICY_METRICS, random_batch

from amazons import engine
from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator
from amazons.neural.learner import (
    BatchPrefetcher,
    Learner,
    MetricSums,
    OptimConfig,
    OptimConfigError,
    SampleBatch,
    SampleError,
    _TableCrossEntropy,
    label_tensors,
    policy_loss_terms,
    policy_metrics,
    sample_batch,
)
from amazons.neural.model import PolicyValueNet, net_config
from amazons.train.config import apply_overrides, preset_config
from amazons.train.replay import GameSamples, ReplayBuffer
from amazons.train.run import Run
from amazons.train.selfplay import play_games

torch.set_num_threads(1)

# every setting of the step off: the plain path
PLAIN = {"metrics_every": 1, "dense_policy_targets": False, "fused_adamw": False}


@pytest.fixture(scope="module")
def weighted_batch() -> SampleBatch:
    """12 random positions with soft labels; two of them without a policy target."""
    batch = random_batch(np.random.default_rng(3), 12, max_labels=40)
    weight = np.ones(12, np.float32)
    weight[[2, 7]] = 0.0
    weight[5] = 0.5
    return SampleBatch(batch.positions, batch.label_moves, batch.label_probs, batch.label_offsets,
                       batch.z, weight)


@pytest.fixture(scope="module")
def uniform_games() -> list[GameSamples]:
    """Four short uniform-search games."""
    games: list[GameSamples] = []
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=4, node_capacity=64,
                                                            edge_capacity=1 << 15), num_games=2)
    play_games(search, 4, lambda samples, moves, adjudication: games.append(samples))
    return games


def tiny_learner(seed: int = 0, **overrides: object) -> Learner:
    torch.manual_seed(seed)
    return Learner(PolicyValueNet(net_config("tiny")), OptimConfig(**overrides), seed=seed)


# ------------------------------------------------------------------------------------------------
# Dense policy targets


def test_dense_targets_give_the_gathered_loss_and_its_gradient(weighted_batch):
    torch.manual_seed(0)
    model = PolicyValueNet(net_config("tiny"))
    output = model(torch.from_numpy(engine.features(weighted_batch.positions, 7)))
    logits = [output.policy.move_logits, output.policy.arrow_logits]
    gathered = policy_loss_terms(output.policy, label_tensors(weighted_batch))
    labels = label_tensors(weighted_batch, target_tables=True)
    assert labels.move_targets.shape == labels.arrow_targets.shape == (12, 4096)
    # each table holds every label's pi * weight once: the policy weight of each sample in total
    np.testing.assert_allclose(labels.move_targets.sum(-1).numpy(), weighted_batch.policy_weight,
                               rtol=1e-5)
    np.testing.assert_allclose(labels.arrow_targets.sum(-1).numpy(),
                               weighted_batch.policy_weight, rtol=1e-5)
    dense = policy_loss_terms(output.policy, labels)
    assert set(dense) == set(gathered) == {"policy_move", "policy_arrow"}
    for name in gathered:
        assert float(dense[name].detach()) == pytest.approx(float(gathered[name].detach()),
                                                            rel=1e-6)
    want = torch.autograd.grad(sum(gathered.values()), logits, retain_graph=True)
    have = torch.autograd.grad(sum(dense.values()), logits)
    for have_grad, want_grad in zip(have, want, strict=True):
        torch.testing.assert_close(have_grad, want_grad, rtol=1e-5, atol=1e-8)


def test_the_table_cross_entropy_has_the_gradient_of_its_value():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 7, dtype=torch.float64, generator=generator, requires_grad=True)
    targets = torch.rand(5, 7, dtype=torch.float64, generator=generator)
    targets[1] = 0.0  # a row without a target
    assert torch.autograd.gradcheck(lambda x: _TableCrossEntropy.apply(x, targets), (logits,))
    want = -(targets * torch.log_softmax(logits, -1)).sum()
    assert float(_TableCrossEntropy.apply(logits, targets).detach()) == pytest.approx(
        float(want.detach()))


def test_the_soft_policy_head_is_scored_against_its_own_dense_targets(weighted_batch):
    losses = []
    for dense in (False, True):
        torch.manual_seed(0)
        model = PolicyValueNet(net_config("tiny", soft_policy_head=True))
        learner = Learner(model, OptimConfig(dense_policy_targets=dense, soft_policy_weight=3.0))
        assert learner.target_tables == dense
        features, labels = learner.prepare(weighted_batch)
        assert (labels.move_targets is not None) == dense
        with torch.no_grad():
            losses.append(learner._losses(model.train()(features), labels)[1])
    for name in ("policy_loss", "soft_policy_loss", "loss"):
        assert float(losses[1][name]) == pytest.approx(float(losses[0][name]), rel=1e-6), name


@pytest.mark.parametrize("overrides", [{"arrow_source": True}, {"policy_head": "factorized"}])
def test_heads_without_dense_targets_keep_the_gathered_loss(overrides):
    learner = Learner(PolicyValueNet(net_config("tiny", **overrides)), OptimConfig())
    assert not learner.target_tables
    assert learner.prepare(random_batch(np.random.default_rng(1), 3)).labels.move_targets is None


# ------------------------------------------------------------------------------------------------
# Policy metrics every K steps


def test_the_kl_from_the_loss_equals_the_gathered_one(weighted_batch):
    torch.manual_seed(2)
    model = PolicyValueNet(net_config("tiny"))
    with torch.no_grad():
        output = model(torch.from_numpy(engine.features(weighted_batch.positions, 7)))
    labels = label_tensors(weighted_batch)
    cross_entropy = sum(policy_loss_terms(output.policy, labels).values())
    gathered = policy_metrics(output.policy, labels)
    given = policy_metrics(output.policy, labels, cross_entropy=cross_entropy)
    for name in POLICY_METRICS:
        assert float(given[name]) == pytest.approx(float(gathered[name]), rel=1e-5, abs=1e-6)


def test_policy_metrics_come_every_k_steps_with_the_values_of_the_plain_step(weighted_batch):
    every = tiny_learner(metrics_every=3)
    plain = tiny_learner(**PLAIN)
    sums = MetricSums()
    reported = []
    for step in range(7):
        metrics, plain_metrics = every.train_step(weighted_batch), plain.train_step(weighted_batch)
        sums.add(metrics)
        reported.append(all(name in metrics for name in POLICY_METRICS))
        assert not any(name in metrics for name in POLICY_METRICS) or reported[-1]
        assert {"loss", "policy_loss", "value_mse", "grad_norm"} <= set(metrics)
        if step == 0:
            for name in POLICY_METRICS:
                assert metrics[name] == pytest.approx(plain_metrics[name], rel=1e-4, abs=1e-5)
    assert reported == [True, False, False, True, False, False, True]
    assert sums.steps == 7 and set(POLICY_METRICS) <= set(sums.means())
    with pytest.raises(OptimConfigError, match="metrics_every"):
        OptimConfig(metrics_every=0)


# ------------------------------------------------------------------------------------------------
# The whole step, and the optimizer


def test_a_step_with_every_setting_follows_the_plain_step(weighted_batch):
    """Five steps with the defaults (dense targets, fused AdamW, metrics every 16) and five with
    every setting off, from the same weights: the same losses and weights, to float rounding."""
    fast, plain = tiny_learner(), tiny_learner(**PLAIN)
    assert fast.optimizer.param_groups[0]["fused"] and fast.target_tables
    assert not plain.optimizer.param_groups[0]["fused"] and not plain.target_tables
    batches = [random_batch(np.random.default_rng(seed), 16, max_labels=30) for seed in range(5)]
    for batch in batches:
        have, want = fast.train_step(batch), plain.train_step(batch)
        for name in ("loss", "policy_move", "policy_arrow", "value_mse", "grad_norm"):
            assert have[name] == pytest.approx(want[name], rel=1e-4), name
    for have, want in zip(fast.model.parameters(), plain.model.parameters(), strict=True):
        torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
def test_a_non_finite_gradient_skips_the_step_on_the_cpu(weighted_batch, fused):
    learner = tiny_learner(fused_adamw=fused, warmup_steps=0)
    assert bool(learner.optimizer.param_groups[0]["fused"]) == fused
    learner.train_step(weighted_batch)
    first = next(learner.model.parameters())
    before = [parameter.detach().clone() for parameter in learner.model.parameters()]
    moments = {key: value.clone() for key, value in learner.optimizer.state[first].items()}
    poison = first.register_hook(lambda grad: grad * float("nan"))
    metrics = learner.train_step(weighted_batch)
    poison.remove()
    assert metrics["skipped"] == 1.0 and math.isnan(metrics["grad_norm"])
    assert all(torch.equal(parameter, old)
               for parameter, old in zip(learner.model.parameters(), before, strict=True))
    assert all(torch.equal(learner.optimizer.state[first][key], value)
               for key, value in moments.items())
    assert learner.train_step(weighted_batch)["skipped"] == 0.0


# ------------------------------------------------------------------------------------------------
# The batch prefetch


def test_the_prefetcher_gives_the_batches_in_the_order_a_draw_before_each_step_gives():
    pool = random_batch(np.random.default_rng(4), 40, max_labels=8)
    prefetched, in_turn = tiny_learner(seed=5), tiny_learner(seed=5)
    threads = []

    def draw() -> SampleBatch:
        threads.append(threading.get_ident())
        return sample_batch(pool, 8, prefetched.rng)

    with BatchPrefetcher(prefetched, draw) as prefetcher:
        for step in range(6):
            batch = prefetcher.next(more=step < 5)
            want = in_turn.prepare(sample_batch(pool, 8, in_turn.rng))
            assert torch.equal(batch.features, want.features)
            for have_labels, want_labels in zip(batch.labels, want.labels, strict=True):
                assert torch.equal(have_labels, want_labels)
            assert prefetched.train_step(batch)["loss"] == in_turn.train_step(want)["loss"]
    # the last batch started nothing: both generators stand at the same place
    assert prefetched.rng.bit_generator.state == in_turn.rng.bit_generator.state
    assert len(threads) == 6 and threads[0] == threading.get_ident()
    assert all(thread != threading.get_ident() for thread in threads[1:])


def test_the_prefetcher_raises_what_the_draw_raised():
    learner = tiny_learner()
    empty = SampleBatch.from_samples(np.zeros((0, 3), np.uint64), [], [], [])
    with BatchPrefetcher(learner, lambda: empty) as prefetcher:
        with pytest.raises(SampleError, match="at least one sample"):
            prefetcher.next()


def test_the_training_phase_trains_the_same_with_and_without_the_prefetch(tmp_path,
                                                                          uniform_games):
    """`Run.train` (the sync pipeline's training phase) on the same replay window: the same
    steps on the same batches, bit for bit, and the learner's generator at the same place."""
    runs = []
    for prefetch in (True, False):
        config = apply_overrides(preset_config("cpu"), [
            "train_batch_size=32", "min_steps=4", "max_steps=4", "optim.metrics_every=2",
            f"prefetch_batches={prefetch}"])
        run = Run(config, tmp_path / f"prefetch-{prefetch}", resume=False)
        try:
            run.replay.add(GameSamples.concatenate(uniform_games))
            runs.append((run.train(100, progress=False), run.learner))
        finally:
            run.close()
    (metrics, learner), (plain_metrics, plain_learner) = runs
    assert metrics["train/steps"] == 4 and metrics["train/loss"] == plain_metrics["train/loss"]
    assert metrics["train/policy_kl"] == plain_metrics["train/policy_kl"]
    for have, want in zip(learner.model.parameters(), plain_learner.model.parameters(),
                          strict=True):
        assert torch.equal(have, want)
    assert learner.rng.bit_generator.state == plain_learner.rng.bit_generator.state


def test_the_replay_window_is_sampled_safely_while_another_thread_adds_games(uniform_games):
    window = ReplayBuffer(None, window_positions=300, seed=0)
    for samples in uniform_games:
        window.add_to_window(samples)
    stop = threading.Event()

    def add() -> None:
        index = 0
        while not stop.wait(0.0002):  # each add evicts a game, now and then compacts the arrays
            window.add_to_window(uniform_games[index % len(uniform_games)])
            index += 1

    adder = threading.Thread(target=add)
    adder.start()
    try:
        for _ in range(3000):
            SampleBatch(**window.sample(32))  # validated: labels that sum to 1, offsets in range
    finally:
        stop.set()
        adder.join()


def test_the_new_optim_fields_are_checked():
    for field, value in (("metrics_every", 1.5), ("dense_policy_targets", 1),
                         ("fused_adamw", "yes"), ("compile_step", None)):
        with pytest.raises(OptimConfigError, match=field):
            OptimConfig(**{field: value})
    with pytest.raises(OptimConfigError, match="exclusive"):
        OptimConfig(compile=True, compile_step=True)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch internals, while compiling
def test_the_compiled_step_matches_the_eager_one(weighted_batch):
    """`compile_step` compiles the forward and the losses (the dense targets' autograd function
    included) together; inductor compiles C++ on a CPU: a minute or more on 2 cores."""
    losses = []
    for compile_step in (False, True):
        learner = tiny_learner(compile_step=compile_step)
        losses.append([learner.train_step(weighted_batch)["loss"] for _ in range(2)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)
