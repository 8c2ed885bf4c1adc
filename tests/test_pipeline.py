"""The async pipeline's parts (`amazons.pipeline`): the step budget that holds the ratio of
training to self-play, weights publishing, and evaluation in a thread. The loop that drives them
runs end to end in `test_train.py`."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from amazons.pipeline import (
    BackgroundEvaluation,
    EvaluationError,
    PipelineConfig,
    StepBudget,
    WeightsPublisher,
    steps_for_positions,
)
from amazons.train_config import TrainConfig, training_steps


def budget(**changes) -> StepBudget:
    settings = {"games_per_iteration": 4, "sample_reuse": 8.0, "samples_per_step": 32, "min_steps": 3,
                "max_steps": 50, "slack_steps": 10}
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
        assert training_steps(config, positions) == steps_for_positions(positions, 12.0, 256, 20, 2000)
        assert training_steps(config, positions, 2) == steps_for_positions(positions, 12.0, 512, 20, 2000)


@pytest.mark.parametrize(("changes", "field"), [({"mode": "both"}, "mode"), ({"publish_every_steps": 0}, "publish"),
                                                ({"slack_steps": 0}, "slack")])
def test_pipeline_settings_are_checked(changes, field):
    with pytest.raises(ValueError, match=field):
        PipelineConfig(**changes)


class FakeServer:
    """The two things a publisher asks of the inference server."""

    def __init__(self) -> None:
        self.published: list[tuple[str, int]] = []
        self.loaded_version: int | None = None

    def publish_weights(self, path: str, version: int) -> None:
        assert Path(path).exists()
        self.published.append((path, version))


def test_weights_files_live_until_the_server_has_loaded_a_later_version(tmp_path):
    import torch

    from amazons.net import PolicyValueNet, net_config

    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "weights-0000000003.pt").write_bytes(b"left by an earlier session")
    server = FakeServer()
    publisher = WeightsPublisher(folder, server)
    assert list(folder.iterdir()) == []
    torch.manual_seed(0)
    model = PolicyValueNet(net_config("tiny"))
    initial = tmp_path / "model-0000.pt"
    initial.write_bytes(b"a model file of the run: never deleted")
    publisher.publish(0, path=initial)
    for version in (10, 20, 30):
        publisher.publish(version, model=model)
    assert [version for _, version in server.published] == [0, 10, 20, 30]
    assert len(list(folder.iterdir())) == 3
    server.loaded_version = 20
    publisher.prune()
    assert sorted(path.name for path in folder.iterdir()) == ["weights-0000000020.pt", "weights-0000000030.pt"]
    assert initial.exists()
    with pytest.raises(ValueError, match="after version 30"):
        publisher.publish(30, model=model)
    np.testing.assert_array_equal(publisher.lag_versions(np.array([0, 5, 10, 30])), [3, 3, 2, 0])


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
