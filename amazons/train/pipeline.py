"""The asynchronous pipeline's parts: the ratio between training and self-play, weights
publishing, and evaluation beside them (the loop that drives them is `amazons.train.Run`).

In the async mode (`PipelineConfig.mode`, as KataGo and lc0 run) the actors play without
pause, each lane starting a new game as soon as its game ends; the learner trains at the same
time in the main process, and evaluation runs in a thread of its own. What keeps them together:

* `StepBudget`: the learner may take a step only while it has drawn fewer than `sample_reuse`
  samples per position played (it waits otherwise); when it owes more than `slack_steps`
  steps the actors are paused until it owes half as many. Iterations stay the unit of
  checkpoints and logs: iteration t is its `games_per_iteration` games (games finishing later
  count for t + 1) and the steps they are owed, the same number as the synchronous mode's.
* `WeightsPublisher`: every `publish_every_steps` steps, or every `publish_interval_s` seconds
  when the learner has stepped since, the learner's weights go to the inference server through
  shared memory, no file on the way (`InferenceServer.publish_shared_weights`), versioned by
  the learner's step; the server copies them into its prepared model in place (batch norms
  folded on its CPU) between batches. A publish falls due while the server is still loading
  the previous one waits for the next turn of the loop, so the learner never blocks on it.
* `BackgroundEvaluation`: an iteration's evaluation runs in a thread while self-play and
  training go on; its results join the metrics when it ends, its failure is raised in the main
  loop as an `EvaluationError`.

Imports torch (through `amazons.neural.model`), numpy, the inference server's type.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from amazons.neural.model import flatten_weights, weights_elements
from amazons.serving.server import InferenceServer

PIPELINE_MODES = ("async", "sync")


@dataclass(frozen=True)
class PipelineConfig:
    """How self-play, training and evaluation share the machine."""

    mode: str = "async"  # "async": all three at once; "sync": self-play, then training,
    #                      then evaluation
    publish_every_steps: int = 10  # async: new weights to the inference server every this many
    #                                learner steps
    publish_interval_s: float = 30.0  # async: also when this many seconds passed and the learner
    #                                   stepped (0: off)
    slack_steps: int = 40  # async: actors pause when the learner owes more steps than this
    #                        (resume at half)

    def __post_init__(self) -> None:
        if self.mode not in PIPELINE_MODES:
            raise ValueError(f"pipeline.mode must be one of {PIPELINE_MODES}, got {self.mode!r}")
        if self.publish_every_steps < 1:
            raise ValueError(f"pipeline.publish_every_steps must be >= 1, "
                             f"got {self.publish_every_steps}")
        if not self.publish_interval_s >= 0:
            raise ValueError(f"pipeline.publish_interval_s must be >= 0, "
                             f"got {self.publish_interval_s}")
        if self.slack_steps < 1:
            raise ValueError(f"pipeline.slack_steps must be >= 1, got {self.slack_steps}")


def steps_for_positions(positions: int, sample_reuse: float, samples_per_step: int, min_steps: int,
                        max_steps: int) -> int:
    """Optimizer steps owed for `positions` new positions: `ceil(positions * sample_reuse /
    samples_per_step)`, bounded by `min_steps` and `max_steps`."""
    steps = math.ceil(positions * sample_reuse / samples_per_step)
    return min(max(steps, min_steps), max_steps)


@dataclass
class IterationLedger:
    """What one iteration of the async pipeline has gathered and trained so far."""

    games: int = 0
    positions: int = 0
    full_searches: int = 0  # positions searched in full (with a policy target)
    plies: int = 0  # moves played in the games this process saw finish (fast searches included)
    played_games: int = 0  # those games (not the ones a resumed run found in its replay)
    adjudicated: int = 0
    simulations: float = 0.0
    leaves_evaluated: float = 0.0
    steps: int = 0  # learner steps taken for this iteration
    lag_versions: float = 0.0  # summed over positions: weights versions published since its search
    lag_steps: float = 0.0  # summed over positions: learner steps since the weights of its search


class StepBudget:
    """Holds the learner at `sample_reuse` samples per position played, iteration by iteration.

    Args:
        games_per_iteration: games that make an iteration.
        sample_reuse: samples drawn for training per position played.
        samples_per_step: samples per optimizer step (batch size x data-parallel ranks).
        min_steps, max_steps: bounds of an iteration's steps (`steps_for_positions`).
        slack_steps: how many steps the learner may owe before the actors are paused.
    """

    def __init__(self, games_per_iteration: int, sample_reuse: float, samples_per_step: int,
                 min_steps: int, max_steps: int, slack_steps: int) -> None:
        self.games_per_iteration = games_per_iteration
        self.sample_reuse = sample_reuse
        self.samples_per_step = samples_per_step
        self.min_steps = min_steps
        self.max_steps = max_steps
        self.slack_steps = slack_steps
        self.ledgers: deque[IterationLedger] = deque([IterationLedger()])

    @property
    def current(self) -> IterationLedger:
        """The iteration being trained (the oldest one not finished)."""
        return self.ledgers[0]

    def ledger_for_game(self) -> IterationLedger:
        """The iteration a finished game belongs to: the oldest one still short of games."""
        for ledger in self.ledgers:
            if ledger.games < self.games_per_iteration:
                return ledger
        self.ledgers.append(IterationLedger())
        return self.ledgers[-1]

    def count_game(self, positions: int, full_searches: int) -> IterationLedger:
        """Count a finished game of `positions` positions (`full_searches` of them with a policy
        target) in the iteration it belongs to (`ledger_for_game`); returns that iteration's
        ledger."""
        ledger = self.ledger_for_game()
        ledger.games += 1
        ledger.positions += positions
        ledger.full_searches += full_searches
        return ledger

    def target(self, ledger: IterationLedger) -> int:
        """Steps `ledger` is owed so far: for its positions at the ratio, up to `max_steps`; once
        its games are all in, exactly the synchronous mode's count (at least `min_steps`)."""
        if ledger.games >= self.games_per_iteration:
            return steps_for_positions(ledger.positions, self.sample_reuse, self.samples_per_step,
                                       self.min_steps, self.max_steps)
        return min(math.ceil(ledger.positions * self.sample_reuse / self.samples_per_step),
                   self.max_steps)

    def may_step(self) -> bool:
        """Whether the learner may take a step now (else it is ahead of self-play and waits)."""
        return self.current.steps < self.target(self.current)

    def owed(self) -> int:
        """Steps owed over every iteration gathered so far."""
        return sum(self.target(ledger) - ledger.steps for ledger in self.ledgers)

    def iteration_done(self) -> bool:
        """Whether the current iteration has all its games and all its steps."""
        current = self.current
        return current.games >= self.games_per_iteration and current.steps >= self.target(current)

    def finish_iteration(self) -> IterationLedger:
        """Close the current iteration; the next (perhaps with games already) becomes current."""
        done = self.ledgers.popleft()
        if not self.ledgers:
            self.ledgers.append(IterationLedger())
        return done

    def should_pause(self, paused: bool) -> bool:
        """Whether the actors should be held: the learner owes more than `slack_steps` (or, once
        they are held, more than half of it)."""
        return self.owed() > (self.slack_steps // 2 if paused else self.slack_steps)


class WeightsPublisher:
    """Hands the learner's weights to the inference server through shared memory, by steps and
    by wall clock.

    A publish writes the model's flat float32 weights (`amazons.neural.model.flatten_weights`: one
    copy from the learner's device into the server's weights segment) and sends the version;
    nothing touches the disk (checkpoints keep their own schedule, for `--resume`). The versions
    published so far measure how stale a game's weights were (`lag_versions`).

    Args:
        server: the started inference server.
        every_steps: publish when this many learner steps passed since the last publish.
        interval_s: publish when this many seconds passed since the last publish and the
            learner has stepped since (0: by steps only).
    """

    def __init__(self, server: InferenceServer, every_steps: int, interval_s: float) -> None:
        if every_steps < 1 or not interval_s >= 0:
            raise ValueError(f"need every_steps >= 1 and interval_s >= 0, "
                             f"got {every_steps} and {interval_s}")
        self.server = server
        self.every_steps = every_steps
        self.interval_s = interval_s
        self.versions: list[int] = []
        self._published_at = time.monotonic()

    def publish(self, version: int, model: nn.Module) -> None:
        """Publish `model`'s weights as `version` now.

        Raises:
            ValueError: a version not above the last one.
            amazons.serving.server.InferenceError: the server has failed, or still loads the last
                publish (`InferenceServer.shared_weights_ready`).
        """
        if self.versions and version <= self.versions[-1]:
            raise ValueError(f"weights version {version} after version {self.versions[-1]}")
        self.server.publish_shared_weights(
            weights_elements(model),
            lambda weights: flatten_weights(model, torch.from_numpy(weights)), version)
        self.versions.append(version)
        self._published_at = time.monotonic()

    def due(self, step: int) -> bool:
        """Whether learner step `step` should be published: nothing was published yet, or it is
        past the last version and `every_steps` steps or `interval_s` seconds have passed since
        the last publish."""
        if not self.versions:
            return True
        last = self.versions[-1]
        if step <= last:
            return False
        return (step - last >= self.every_steps
                or (self.interval_s > 0
                    and time.monotonic() - self._published_at >= self.interval_s))

    def maybe_publish(self, step: int, model: nn.Module) -> bool:
        """Publish `model` as version `step` if it is due and the server has loaded the last
        publish (else a later call does); return whether it published.

        Raises:
            amazons.serving.server.InferenceError: the server has failed.
        """
        if not self.due(step) or not self.server.shared_weights_ready():
            return False
        self.publish(step, model)
        return True

    def lag_versions(self, versions: np.ndarray) -> np.ndarray:
        """For each weights version in `versions`, how many versions were published after it."""
        published = np.asarray(self.versions, dtype=np.int64)
        return published.shape[0] - np.searchsorted(published, versions, side="right")


class EvaluationError(RuntimeError):
    """An evaluation running beside self-play failed; the message names the iteration, and the
    original exception is its cause."""


@dataclass(frozen=True)
class EvaluationResult:
    """A finished evaluation."""

    iteration: int  # whose model was evaluated
    metrics: dict[str, float]  # what `evaluate` returned
    seconds: float  # how long it took


class BackgroundEvaluation:
    """Runs `evaluate(iteration)` in a thread, one evaluation at a time.

    Args:
        evaluate: returns the evaluation's metrics for an iteration's model.
    """

    def __init__(self, evaluate: Callable[[int], dict[str, float]]) -> None:
        self._evaluate = evaluate
        self._thread: threading.Thread | None = None
        self._iteration = 0
        self._result: dict[str, float] | None = None
        self._error: BaseException | None = None
        self._seconds = 0.0

    @property
    def running(self) -> bool:
        """Whether an evaluation has started and its results have not been taken."""
        return self._thread is not None

    def start(self, iteration: int) -> None:
        """Start evaluating `iteration`'s model.

        Raises:
            RuntimeError: an evaluation is running (take it first with `wait`).
        """
        if self._thread is not None:
            raise RuntimeError(f"the evaluation of iteration {self._iteration} is still running")
        self._iteration, self._result, self._error = iteration, None, None
        # A daemon: a run stopped by a signal exits without waiting for its evaluation (whose
        # worker processes are daemons too).
        self._thread = threading.Thread(target=self._work, name=f"evaluate-{iteration}",
                                        daemon=True)
        self._thread.start()

    def _work(self) -> None:
        started = time.perf_counter()
        try:
            self._result = self._evaluate(self._iteration)
        except BaseException as error:  # handed to the main loop, which raises it
            self._error = error
        self._seconds = time.perf_counter() - started

    def check(self) -> None:
        """Raise the failure of a finished evaluation, if it failed.

        Raises:
            EvaluationError: naming the iteration, from the evaluation's exception.
        """
        if self._thread is not None and not self._thread.is_alive() and self._error is not None:
            error, self._error, self._thread = self._error, None, None
            raise EvaluationError(f"evaluation of iteration {self._iteration} failed: "
                                  f"{error!r}") from error

    def poll(self) -> EvaluationResult | None:
        """The evaluation that has finished since the last call, or None.

        Raises:
            EvaluationError: if it failed.
        """
        if self._thread is None or self._thread.is_alive():
            return None
        return self._take()

    def wait(self) -> EvaluationResult | None:
        """Wait for the running evaluation, if any, and return it.

        Raises:
            EvaluationError: if it failed.
        """
        if self._thread is None:
            return None
        self._thread.join()
        return self._take()

    def _take(self) -> EvaluationResult:
        self.check()
        self._thread = None
        return EvaluationResult(self._iteration, dict(self._result or {}), self._seconds)
