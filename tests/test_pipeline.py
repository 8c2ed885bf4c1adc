"""The async pipeline's parts (`amazons.train.pipeline`): the step budget that holds the ratio of
training to self-play, weights publishing (through shared memory to a real inference server
running the production evaluator), and evaluation in a thread. The loop that drives them
runs end to end in `test_train.py`."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from inference_actors import random_leaves

from amazons import engine
from amazons.neural.checkpoint import save_model
from amazons.neural.model import PolicyValueNet, net_config
from amazons.neural.served import ReloadableNetworkEvaluator, server_evaluator_factory
from amazons.serving.server import InferenceClient, InferenceConfig, InferenceServer
from amazons.train.config import TrainConfig, training_steps
from amazons.train.pipeline import (
    BackgroundEvaluation,
    EvaluationError,
    PipelineConfig,
    StepBudget,
    WeightsPublisher,
    steps_for_positions,
)


def budget(**changes) -> StepBudget:
    settings = {"games_per_iteration": 4, "sample_reuse": 8.0, "samples_per_step": 32,
                "min_steps": 3, "max_steps": 50, "slack_steps": 10}
    settings.update(changes)
    return StepBudget(**settings)


def finish_game(steps: StepBudget, positions: int) -> None:
    ledger = steps.ledger_for_game()
    ledger.games += 1
    ledger.positions += positions


def test_the_learner_trains_as_positions_arrive_and_the_iteration_closes_on_the_sync_count():
    steps = budget()
    assert not steps.may_step()  # nothing played yet: the learner waits
    finish_game(steps, 10)  # 10 positions x 8 samples / 32 per step: 2.5 steps owed
    taken = 0
    while steps.may_step():
        steps.current.steps += 1
        taken += 1
    assert taken == 3 and not steps.iteration_done()
    for _ in range(3):
        finish_game(steps, 2)
    # All 4 games in: exactly the synchronous mode's steps for 16 positions (min_steps 3 -> 4 owed).
    assert steps.target(steps.current) == steps_for_positions(16, 8.0, 32, 3, 50) == 4
    steps.current.steps += 1
    assert steps.iteration_done()
    done = steps.finish_iteration()
    assert (done.games, done.positions, done.steps) == (4, 16, 4)
    assert steps.current.games == 0 and not steps.may_step()


def test_min_steps_apply_once_the_games_are_in_and_max_steps_always():
    steps = budget(min_steps=5, max_steps=6)
    finish_game(steps, 1)
    assert steps.target(steps.current) == 1  # at the ratio while games are missing
    finish_game(steps, 1000)
    assert steps.target(steps.current) == 6  # max_steps
    few = budget(min_steps=5)
    for _ in range(4):
        finish_game(few, 1)
    assert few.target(few.current) == 5  # min_steps once complete


def test_games_past_an_iteration_count_for_the_next_and_actors_pause_when_the_learner_lags():
    steps = budget(slack_steps=10)
    for _ in range(4):
        finish_game(steps, 8)  # 8 steps owed by iteration 1
    assert not steps.should_pause(paused=False)
    finish_game(steps, 12)  # a fifth game: iteration 2, 3 more steps owed
    assert len(steps.ledgers) == 2 and steps.ledgers[1].games == 1
    assert steps.owed() == 11 and steps.should_pause(paused=False)
    for _ in range(5):
        steps.current.steps += 1
    assert steps.owed() == 6 and steps.should_pause(paused=True)  # held until half the slack
    steps.current.steps += 1
    assert not steps.should_pause(paused=True)
    steps.current.steps += 2
    assert steps.iteration_done()
    steps.finish_iteration()
    assert steps.current.games == 1 and steps.may_step()


def test_training_steps_of_the_sync_mode_use_the_same_rule():
    config = TrainConfig(sample_reuse=12.0, train_batch_size=256, min_steps=20, max_steps=2000)
    for positions in (0, 100, 3000, 100_000):
        assert training_steps(config, positions) == \
            steps_for_positions(positions, 12.0, 256, 20, 2000)
        assert training_steps(config, positions, 2) == \
            steps_for_positions(positions, 12.0, 512, 20, 2000)


@pytest.mark.parametrize(("changes", "field"), [
    ({"mode": "both"}, "mode"), ({"publish_every_steps": 0}, "publish"),
    ({"publish_interval_s": -1.0}, "publish_interval_s"), ({"slack_steps": 0}, "slack")])
def test_pipeline_settings_are_checked(changes, field):
    with pytest.raises(ValueError, match=field):
        PipelineConfig(**changes)


@pytest.fixture(scope="module")
def served_tiny_net(tmp_path_factory):
    """An inference server running the production evaluator (`server_evaluator_factory`) of a
    tiny net on the CPU, a client of it in this process, and 16 leaves with their moves."""
    torch.manual_seed(0)
    path = save_model(tmp_path_factory.mktemp("served") / "model.pt",
                      PolicyValueNet(net_config("tiny")))
    inference = InferenceConfig(inference_batch_size=16)
    with InferenceServer(server_evaluator_factory(path, "cpu", "fp32", inference), 1,
                         inference) as server:
        client = InferenceClient(server.handle(0))
        positions = random_leaves(np.random.default_rng(5), 16)
        yield server, client, (positions, *engine.legal_moves(positions))
        client.close()


def wait_loaded(server: InferenceServer, version: int) -> None:
    deadline = time.monotonic() + 60
    while server.loaded_version != version and time.monotonic() < deadline:
        server.check()
        time.sleep(0.01)
    assert server.loaded_version == version


def test_a_publish_reaches_the_server_without_a_file_and_equals_a_freshly_prepared_model(
        served_tiny_net):
    server, client, leaves = served_tiny_net
    publisher = WeightsPublisher(server, every_steps=10, interval_s=0.0)
    for version, seed in ((0, 1), (10, 2)):  # the run's first publish, then a learner step's
        torch.manual_seed(seed)
        learner_model = PolicyValueNet(net_config("tiny"))
        with torch.no_grad():  # batch norms away from the identity, so the fold matters
            for module in learner_model.modules():
                if isinstance(module, torch.nn.BatchNorm2d):
                    module.running_mean.normal_(0, 0.2)
                    module.running_var.uniform_(0.5, 1.5)
                    module.weight.uniform_(0.5, 1.5)
        publisher.publish(version, learner_model)
        wait_loaded(server, version)
        priors, values = client.evaluate(*leaves)
        assert client.weights_version == version
        fresh = ReloadableNetworkEvaluator(learner_model, "cpu", "fp32")  # prepared from scratch
        want_priors, want_values = fresh.evaluate(*leaves)
        np.testing.assert_allclose(priors, want_priors, rtol=0, atol=1e-6)
        np.testing.assert_allclose(values, want_values, rtol=0, atol=1e-6)
    assert publisher.versions == [0, 10]
    with pytest.raises(ValueError, match="after version 10"):
        publisher.publish(10, learner_model)


def test_publishing_falls_due_by_steps_or_by_wall_clock(served_tiny_net):
    server, _, _ = served_tiny_net
    torch.manual_seed(0)
    model = PolicyValueNet(net_config("tiny"))
    by_steps = WeightsPublisher(server, every_steps=10, interval_s=0.0)
    assert by_steps.due(0)  # nothing published yet
    last = max(server.loaded_version or 0, 0) + 100
    by_steps.publish(last, model)
    assert not by_steps.due(last + 9) and by_steps.due(last + 10)
    wait_loaded(server, last)
    by_clock = WeightsPublisher(server, every_steps=1000, interval_s=0.2)
    by_clock.publish(last + 1, model)
    assert not by_clock.due(last + 2)
    time.sleep(0.25)
    # the interval passed; a step is needed too
    assert by_clock.due(last + 2) and not by_clock.due(last + 1)
    wait_loaded(server, last + 1)
    assert by_clock.maybe_publish(last + 2, model) and by_clock.versions[-1] == last + 2
    assert not by_clock.maybe_publish(last + 3, model)  # the interval restarted with that publish
    wait_loaded(server, last + 2)
    np.testing.assert_array_equal(by_clock.lag_versions(np.array([0, last + 1, last + 2])),
                                  [2, 1, 0])


def test_an_evaluation_runs_beside_and_its_failure_is_raised():
    release = threading.Event()

    def evaluate(iteration: int) -> dict[str, float]:
        release.wait(10)
        if iteration == 3:
            raise FileNotFoundError("model-0003.pt")
        return {"eval/elo": 100.0 * iteration}

    evaluation = BackgroundEvaluation(evaluate)
    assert evaluation.poll() is None and evaluation.wait() is None
    evaluation.start(2)
    assert evaluation.running and evaluation.poll() is None  # still playing its games
    with pytest.raises(RuntimeError, match="iteration 2 is still running"):
        evaluation.start(4)
    release.set()
    result = evaluation.wait()
    assert (result.iteration, result.metrics) == (2, {"eval/elo": 200.0}) and result.seconds >= 0
    assert not evaluation.running
    evaluation.start(3)
    with pytest.raises(EvaluationError, match="evaluation of iteration 3 failed") as caught:
        evaluation.wait()
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    evaluation.start(5)  # a failed evaluation does not block the next
    assert evaluation.wait().metrics == {"eval/elo": 500.0}
