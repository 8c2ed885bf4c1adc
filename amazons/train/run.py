"""`Run`, the main job's local backend: one training run in its run directory, this machine's
self-play actors and inference server, the learner, the replay window, the evaluation.

What a run does, iteration by iteration, and the command that starts it, are
`amazons.train.command`'s description (the command's help); the async pipeline's parts are
`amazons.train.pipeline`'s.

A run plays and trains on one board (`TrainConfig.board`): its inference server, actors, replay
window, learner batches and evaluation all take that board's size, and its model files and
checkpoints record the board (`BoardSpec.to_dict()` under `board` in their `extra`; a file
without it is botzone8's). `--resume` refuses a checkpoint of another board; `--init` may start a
run from a model of another size (its flat value head carried over to the pooled one the run's
size needs).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from amazons.boards import board_spec
from amazons.core.atomic import atomic_write
from amazons.core.config import config_from_dict
from amazons.matches.evaluation import Evaluation, fit_elo
from amazons.neural.checkpoint import (
    init_weights_from,
    load_checkpoint,
    resume_learner,
    save_checkpoint,
    save_model,
)
from amazons.neural.growth import grown_entries, lineage_entry
from amazons.neural.learner import (
    BatchPrefetcher,
    Learner,
    MetricSums,
    SampleBatch,
    augment_batch,
)
from amazons.neural.model import (
    TRAINING_ONLY_FIELDS,
    NetConfig,
    PolicyValueNet,
    count_parameters,
)
from amazons.neural.served import resolve_device, server_evaluator_factory
from amazons.players.records import GameRecord, write_records
from amazons.serving.server import InferenceServer
from amazons.train.config import TrainConfig, preset_config, training_steps
from amazons.train.pipeline import (
    BackgroundEvaluation,
    IterationLedger,
    StepBudget,
    WeightsPublisher,
)
from amazons.train.progress import AsyncClock, progress_bar
from amazons.train.replay import GameSamples, ReplayBuffer
from amazons.train.selfplay import FinishedGame, SelfPlayReport, SelfPlayWorkers
from amazons.train.signals import signals_deferred

# The run's state that the checkpoint carries in its `extra` and `state.json` copies
# (`Run.run_state`); a checkpoint without these keys was written before checkpoints carried it.
RUN_STATE_KEYS = ("iteration", "matches", "trained_games", "minutes", "lineage")


def carried_parameters(stored: NetConfig, model: PolicyValueNet) -> list[str]:
    """The parameters of `model` that a warm start from a `stored` network copies whole
    (`amazons.neural.growth.grown_entries`: no entry new or grown; a training-only head the stored
    network lacks is new), the ones `OptimConfig.freeze_carried_steps` holds fixed; none when
    nothing is new (then nothing would train)."""
    config = model.config
    same_heads = {name: getattr(config, name) for name in TRAINING_ONLY_FIELDS}
    entries = grown_entries(stored.replace(**same_heads), config)
    fresh = tuple(f"{name}." for name in TRAINING_ONLY_FIELDS
                  if getattr(config, name) and not getattr(stored, name))
    parameters = [name for name, _ in model.named_parameters()]
    carried = [name for name in parameters
               if not entries[name].any() and not (fresh and name.startswith(fresh))]
    return [] if len(carried) == len(parameters) else carried


class ResumeError(ValueError):
    """`--resume` cannot tell which state to continue from, or the checkpoint's board is not the
    run's; the message says what to do."""


class SelfPlaySource(Protocol):
    """The self-play side of a synchronous iteration, as `Run.run_iteration` drives it: the local
    backend's `SelfPlayWorkers`, the Ray backend's `NodePool`."""

    def play(self, num_games: int, on_games: Callable[[list[GameSamples], list[GameRecord]], None],
             iteration: int = 0,
             progress: Callable[[SelfPlayReport], None] | None = None) -> SelfPlayReport:
        """Deliver `num_games` finished games for `iteration` through `on_games`."""
        ...


class WeightsSink(Protocol):
    """Where a synchronous iteration publishes its new weights: the local backend's
    `InferenceServer`, the Ray backend's `NodePool`."""

    def publish_weights(self, path: str, version: int) -> None:
        """Serve the model file `path` from now on; later games carry `version`."""
        ...


class Run:
    """One training run in `run_dir`: learner, replay, server, actors, logs (the local backend).

    Raises:
        ValueError: `address` is given (the local backend joins no cluster), or
            `config.pipeline.mode` is one this backend does not run (`pipeline_modes`).
    """

    # the `pipeline.mode` values this backend runs (its own first)
    pipeline_modes: tuple[str, ...] = ("async", "sync")

    @classmethod
    def fit_config(cls, config: TrainConfig, overrides: list[str]) -> TrainConfig:
        """`config` with a `pipeline.mode` this backend does not run replaced by its own
        (`pipeline_modes[0]`) when the mode is the preset's, with a line in the log; a mode that
        an override names, or that differs from the preset's, stays, and `__init__` refuses it."""
        mode = config.pipeline.mode
        named = any(override.partition("=")[0] == "pipeline.mode" for override in overrides)
        if (mode in cls.pipeline_modes or named
                or mode != preset_config(config.preset).pipeline.mode):
            return config
        own = cls.pipeline_modes[0]
        print(f"pipeline.mode: the preset's {mode!r} replaced by {own!r}, "
              f"the mode the {cls.__name__} backend runs", flush=True)
        return dataclasses.replace(config, pipeline=dataclasses.replace(config.pipeline, mode=own))

    def __init__(self, config: TrainConfig, run_dir: Path, resume: bool,
                 address: str | None = None) -> None:
        if address is not None:
            raise ValueError(f"{type(self).__name__} joins no cluster: "
                             f"--address {address!r} needs another backend")
        if config.pipeline.mode not in self.pipeline_modes:
            raise ValueError(f"pipeline.mode={config.pipeline.mode!r}: "
                             f"the {type(self).__name__} backend runs "
                             f"{' or '.join(self.pipeline_modes)}")
        self.config = config
        self.board = config.board_spec
        self.run_dir = run_dir
        self.device = resolve_device(config.device)
        torch.set_num_threads(config.torch_threads)
        for folder in ("checkpoints", "models", "replay", "games", "tensorboard"):
            (run_dir / folder).mkdir(parents=True, exist_ok=True)
        self.checkpoint_path = run_dir / "checkpoints" / "latest.pt"
        self.iteration = 0
        self.world_size = 1  # data-parallel training ranks (the Ray backend may train on several)
        # The Elo ladder's matches: the evaluation thread adds an evaluation's matches at once,
        # and the checkpoint copies them, under this lock.
        self.matches: list[dict[str, Any]] = []
        self.matches_lock = threading.Lock()
        trained_games = None  # serial number of the first game no finished iteration holds
        # The model files' lineage: the init model's, then this run's entry, whose minutes are
        # this run's wall clock (the runs before a --resume's included, kept in state.json).
        self.started = time.perf_counter()
        self.minutes_before = 0.0
        if resume:
            self.learner, extra = resume_learner(self.checkpoint_path, config.net, config.optim,
                                                 self.device)
            self.check_resumed_board(extra)
            self.learner.freeze(extra.get("frozen_parameters", ()))
            state = self.resumed_state(extra)
            self.iteration = int(state["iteration"])
            self.matches = state["matches"]
            trained_games = state.get("trained_games")  # absent in runs from before it was kept
            self.minutes_before = float(state.get("minutes", 0.0))
            self.lineage = state.get("lineage") or [
                lineage_entry(self.learner.model, init_model=config.init_model)]
        else:
            torch.manual_seed(config.seed)
            model = PolicyValueNet(config.net)
            self.lineage = [lineage_entry(model)]
            if config.init_model:
                payload = load_checkpoint(config.init_model)  # read and verified once
                extra = init_weights_from(config.init_model, model, config.init_growth,
                                          config.seed, payload=payload)
                init_net = config_from_dict(NetConfig, payload["net_config"])
                self.lineage = [*extra.get("lineage", []),
                                lineage_entry(model, init_net, config.init_growth,
                                              config.init_model)]
            self.learner = Learner(model, config.optim, self.device, seed=config.seed)
            if config.init_model and config.optim.freeze_carried_steps:
                self.learner.freeze(carried_parameters(init_net, model))
        games_file = run_dir / "games" / "selfplay.txt"
        self.replay = ReplayBuffer(run_dir / "replay", config.replay_window_positions,
                                   seed=config.seed + self.iteration,
                                   chunk_games=config.replay_chunk_games,
                                   chunk_seconds=config.replay_chunk_seconds,
                                   on_written=lambda records: write_records(games_file, records,
                                                                            append=True),
                                   first_game=trained_games or 0, board=self.board)
        for path, reason in self.replay.skipped_chunks:
            print(f"warning: skipped replay chunk {path}: {reason}", file=sys.stderr)
        # The step budget's debt: games in the replay that no finished iteration trained on (a
        # stop mid-iteration, or the games finished after the last iteration); the next
        # iteration counts them as its first and owes their steps.
        self.trained_games = self.replay.next_game if trained_games is None else int(trained_games)
        self.debt = self.replay.games_since(self.trained_games)
        self.metrics_file = open(run_dir / "metrics.jsonl", "a")  # noqa: SIM115  (closed in close())
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"),
                                    purge_step=self.iteration + 1 if resume else None)

    def check_resumed_board(self, extra: dict[str, Any]) -> None:
        """Refuse to resume a checkpoint of another board than the config's (a checkpoint that
        records none is botzone8's).

        Raises:
            ResumeError: naming both boards.
        """
        stored = board_spec(extra.get("board"))
        if not stored.same_start(self.board):
            raise ResumeError(
                f"{self.checkpoint_path} was trained on the {stored.label()} board "
                f"({stored.size}x{stored.size}), the run's config names {self.board.label()} "
                f"({self.board.size}x{self.board.size}): a run keeps its board; start a new run "
                f"from its weights instead: python -m amazons.train --init "
                f"{self.checkpoint_path} board={self.board.label()} --run-dir NEW_DIR")

    @property
    def state_path(self) -> Path:
        """`state.json`: the copy of the checkpoint's run state that people and the web board
        read."""
        return self.run_dir / "state.json"

    def resumed_state(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The run state `--resume` continues from, given the checkpoint's `extra`.

        The checkpoint is written first, then `state.json`: a hard kill (SIGKILL, an out-of-memory
        kill, power loss) between the two renames leaves `state.json` an iteration behind, or
        missing after the first iteration. The checkpoint's own copy of the state (`run_state`)
        then wins, with a warning, and `state.json` is rewritten from it, so that the learner,
        the iteration and the games counted as trained on stay one state. A checkpoint from
        before checkpoints carried the state is taken with `state.json` when both name the same
        iteration.

        Raises:
            ResumeError: a checkpoint without the run state whose `state.json` is missing or
                names another iteration; the message says how to continue.
        """
        stored, found = None, "is missing"
        if self.state_path.exists():
            try:
                stored = json.loads(self.state_path.read_text())
                found = f"holds iteration {stored.get('iteration')}"
            except (ValueError, AttributeError):  # not JSON, or not an object
                stored, found = None, "is unreadable"
        if all(key in extra for key in RUN_STATE_KEYS):
            # as state.json holds it (lists where the checkpoint may hold tuples)
            state = json.loads(json.dumps({key: extra[key] for key in RUN_STATE_KEYS}))
            if stored != state:
                print(f"warning: {self.state_path} {found}, the checkpoint "
                      f"{self.checkpoint_path} iteration {state['iteration']} (the run was "
                      f"killed between writing the two): continuing from the checkpoint, "
                      f"state.json rewritten from it", file=sys.stderr, flush=True)
                self.write_state(state)
            return state
        iteration = extra.get("iteration")  # absent in checkpoints older than the model extra
        if stored is not None and iteration in (None, stored.get("iteration")):
            return stored
        model = self.model_path(int(iteration)) if iteration is not None else self.checkpoint_path
        raise ResumeError(
            f"{self.state_path} {found}, the checkpoint {self.checkpoint_path} iteration "
            f"{iteration}: the run was killed between writing the two, and this checkpoint, "
            "written before checkpoints carried the run's state, cannot say which games its "
            "iteration trained on. Continue in a new run from its weights: python -m "
            f"amazons.train --init {model} --run-dir NEW_DIR")

    def write_state(self, state: dict[str, Any]) -> None:
        """Write `state` to `state.json` atomically (a temporary file renamed over it)."""
        text = json.dumps(state) + "\n"
        atomic_write(self.state_path, lambda stream: stream.write(text.encode()))

    def model_path(self, iteration: int) -> Path:
        return self.run_dir / "models" / f"model-{iteration:04d}.pt"

    def model_extra(self, iteration: int) -> dict[str, Any]:
        """A model file's `extra`: its iteration, the board it was trained on
        (`BoardSpec.to_dict()`) and lineage (`amazons.neural.growth`), this run's entry with the
        minutes so far."""
        minutes = self.minutes_before + (time.perf_counter() - self.started) / 60
        return {"iteration": iteration, "board": self.board.to_dict(),
                "lineage": [*self.lineage[:-1], {**self.lineage[-1], "minutes": round(minutes, 3)}]}

    def run(self, progress: bool = True) -> None:
        config = self.config
        if not self.model_path(self.iteration).exists():
            save_model(self.model_path(self.iteration), self.learner.model,
                       self.model_extra(self.iteration))
        factory = server_evaluator_factory(self.model_path(self.iteration), config.device,
                                           config.inference_dtype, config.inference,
                                           board_size=self.board.size)
        print(f"run {self.run_dir}: preset {config.preset}, board {self.board.label()}, "
              f"net {count_parameters(self.learner.model):,} parameters, "
              f"device {self.device}, {config.pipeline.mode} pipeline, "
              f"iteration {self.iteration}/{config.iterations}, "
              f"replay {len(self.replay):,} positions"
              + (f", started from {config.init_model}" if config.init_model else ""), flush=True)
        with InferenceServer(factory, config.selfplay.num_actors, config.inference) as server:
            if config.pipeline.mode == "sync":
                server.publish_weights(str(self.model_path(self.iteration)), self.iteration)
            with SelfPlayWorkers(server, config.selfplay, board=self.board) as workers:
                if config.pipeline.mode == "async" and self.iteration < config.iterations:
                    self.run_async(server, workers, progress)
                while self.iteration < config.iterations:
                    self.run_iteration(server, workers, progress)

    def run_iteration(self, server: WeightsSink, workers: SelfPlaySource, progress: bool) -> None:
        """One iteration of the synchronous pipeline: self-play, then training, then evaluation
        (weights versions are iterations)."""
        config = self.config
        iteration = self.iteration + 1
        started = time.perf_counter()
        metrics: dict[str, float] = {"iteration": iteration}

        report = self.self_play(workers, iteration, progress)
        metrics.update({
            "selfplay/games": report.games,
            "selfplay/positions": report.positions,
            "selfplay/full_searches": report.full_searches,
            "selfplay/positions_per_s": report.positions_per_s,
            "selfplay/sims_per_s": report.simulations_per_s,
            "selfplay/evals_per_s": report.evals_per_s,
            "selfplay/seconds": report.seconds,
            "selfplay/mean_game_plies": report.plies / max(report.games, 1),
            "selfplay/adjudicated_share": report.adjudicated / max(report.games, 1),
        })
        debt = self.take_debt()
        metrics["train/debt_positions"] = debt.num_positions if debt is not None else 0
        metrics.update(self.train(report.positions + metrics["train/debt_positions"], progress))
        self.trained_games += report.games + (debt.num_games if debt is not None else 0)
        self.iteration = iteration
        with signals_deferred():  # the model file is written whole, as the checkpoint is
            save_model(self.model_path(iteration), self.learner.model, self.model_extra(iteration))
        if config.eval.every and iteration % config.eval.every == 0:
            metrics.update(self.evaluate(iteration))
        self.checkpoint()
        server.publish_weights(str(self.model_path(iteration)), iteration)
        metrics["iteration_seconds"] = time.perf_counter() - started
        self.log(iteration, metrics)

    def take_debt(self) -> GameSamples | None:
        """The games of the replay that no finished iteration has trained on, found at `--resume`
        (None when there are none); the next iteration takes them, once."""
        debt, self.debt = self.debt, None
        return debt

    def self_play(self, workers: SelfPlaySource, iteration: int, progress: bool) -> SelfPlayReport:
        config = self.config
        bar = progress_bar(config.games_per_iteration, f"iter {iteration} self-play", "game",
                            progress)
        def on_games(samples: list[GameSamples], records: list[GameRecord]) -> None:
            self.replay.add(GameSamples.concatenate(samples), records)

        def show(report: SelfPlayReport) -> None:
            if bar is not None:
                bar.n = report.games
                bar.set_postfix(pos_s=f"{report.positions_per_s:.0f}", refresh=True)

        report = workers.play(config.games_per_iteration, on_games, iteration=iteration,
                              progress=show)
        if bar is not None:
            bar.set_postfix(pos_s=f"{report.positions_per_s:.0f}",
                            sims_s=f"{report.simulations_per_s:.0f}",
                            evals_s=f"{report.evals_per_s:.0f}")
            bar.close()
        return report

    def train(self, new_positions: int, progress: bool) -> dict[str, float]:
        """The synchronous training phase: `training_steps` steps on the replay window."""
        config = self.config
        steps = training_steps(config, new_positions, self.world_size)
        bar = progress_bar(steps, f"iter {self.iteration + 1} training", "step", progress)
        sums = MetricSums()
        started = time.perf_counter()
        prefetcher = self.batch_prefetcher()
        try:
            for step in range(steps):
                step_metrics = self.train_step(prefetcher, more=step + 1 < steps)
                sums.add(step_metrics)
                if bar is not None:
                    bar.update(1)
                    if step % LOG_EVERY_STEPS == 0:  # reading the loss waits for the device
                        bar.set_postfix(loss=f"{float(step_metrics['loss']):.3f}", refresh=False)
        finally:
            if prefetcher is not None:
                prefetcher.close()
        if bar is not None:
            bar.close()
        seconds = time.perf_counter() - started
        return self.train_metrics(sums, steps, seconds)

    def draw_batch(self) -> SampleBatch:
        """A training batch drawn from the replay window, augmented with the learner's `rng`."""
        return augment_batch(SampleBatch(**self.replay.sample(self.config.train_batch_size),
                                         board_size=self.board.size),
                             self.learner.rng)

    def batch_prefetcher(self) -> BatchPrefetcher | None:
        """The thread that draws each next batch while a step runs (`prefetch_batches`), or
        None."""
        return (BatchPrefetcher(self.learner, self.draw_batch) if self.config.prefetch_batches
                else None)

    def train_step(self, prefetcher: BatchPrefetcher | None = None,
                   more: bool = True) -> dict[str, torch.Tensor | float]:
        """One learner step on a batch drawn from the replay window and augmented: `prefetcher`'s
        next batch when given (it starts drawing the one after when `more`), else drawn now."""
        batch = self.draw_batch() if prefetcher is None else prefetcher.next(more)
        return self.learner.train_step_tensors(batch)

    def train_metrics(self, sums: MetricSums, steps: int, seconds: float) -> dict[str, float]:
        """`train/*` metrics of `steps` steps that took `seconds` of the learner's time."""
        result = {f"train/{key}": value for key, value in sums.means().items()}
        samples = steps * self.config.train_batch_size * self.world_size
        result.update({"train/steps": steps, "train/samples_per_s": samples / max(seconds, 1e-9),
                       "train/replay_positions": len(self.replay),
                       "train/learner_step": self.learner.step})
        return result

    # --------------------------------------------------------------------------------------------
    # The asynchronous pipeline

    def run_async(self, server: InferenceServer, workers: SelfPlayWorkers, progress: bool) -> None:
        """Self-play, training and evaluation at once until `config.iterations` (see
        `amazons.train.pipeline`): the actors play endless tasks, this loop takes their games into
        the replay window, trains whenever the ratio allows, publishes weights every
        `pipeline.publish_every_steps` steps or `pipeline.publish_interval_s` seconds (through
        shared memory) and closes iterations; evaluation runs in a thread."""
        config = self.config
        budget = self.step_budget()
        publisher = WeightsPublisher(server, config.pipeline.publish_every_steps,
                                     config.pipeline.publish_interval_s)
        publisher.publish(self.learner.step, self.learner.model)
        evaluation = BackgroundEvaluation(self.evaluate)
        clock = AsyncClock(workers)
        bar = progress_bar(config.games_per_iteration, f"iter {self.iteration + 1}", "game",
                            progress)
        last_counters: dict[int, tuple[float, float]] = {}

        def take_late_games(late: list[FinishedGame]) -> None:
            self.take_games(late, budget, publisher, last_counters)

        workers.start(stream=self.iteration)
        prefetcher = self.batch_prefetcher()
        try:
            while self.iteration < config.iterations:
                evaluation.check()
                if budget.may_step():
                    finished = workers.collect(0.0)
                else:  # ahead of self-play: wait for games
                    waited = time.perf_counter()
                    finished = workers.collect(ASYNC_WAIT_S)
                    clock.learner_wait += time.perf_counter() - waited
                if finished:
                    self.take_games(finished, budget, publisher, last_counters)
                    if (self.iteration + 1 == config.iterations
                            and budget.current.games >= config.games_per_iteration):
                        # the last iteration has its games: play out the ones in progress
                        workers.wind_down()
                if budget.may_step():
                    stepped = time.perf_counter()
                    clock.sums.add(self.train_step(prefetcher))
                    clock.learner_seconds += time.perf_counter() - stepped
                    budget.current.steps += 1
                publisher.maybe_publish(self.learner.step, self.learner.model)
                if budget.should_pause(workers.paused):
                    workers.pause()
                else:
                    workers.resume()
                clock.show(bar, budget.current)
                if budget.iteration_done():
                    if bar is not None:
                        bar.close()
                    self.finish_async_iteration(budget.finish_iteration(), clock, evaluation,
                                                workers, publisher, take_late_games)
                    clock = AsyncClock(workers)
                    bar = (None if self.iteration >= config.iterations else
                           progress_bar(config.games_per_iteration, f"iter {self.iteration + 1}",
                                         "game", progress))
            workers.stop()
        finally:
            if prefetcher is not None:
                prefetcher.close()

    def step_budget(self) -> StepBudget:
        """The async pipeline's `StepBudget`, with the replay's debt (`take_debt`) counted first:
        the games a stopped run left in the replay belong to the next iterations, which owe
        their steps."""
        config = self.config
        budget = StepBudget(config.games_per_iteration, config.sample_reuse,
                            config.train_batch_size * self.world_size, config.min_steps,
                            config.max_steps, config.pipeline.slack_steps)
        debt = self.take_debt()
        if debt is not None:
            full = np.add.reduceat((debt.policy_weight > 0).astype(np.int64),
                                   debt.game_offsets[:-1])
            for positions, full_searches in zip(np.diff(debt.game_offsets).tolist(), full.tolist(),
                                                strict=True):
                budget.count_game(positions, full_searches)
        return budget

    def take_games(self, finished: list[FinishedGame], budget: StepBudget,
                   publisher: WeightsPublisher,
                   last_counters: dict[int, tuple[float, float]]) -> None:
        """Add finished games to the replay (its writer thread persists them and their records)
        and count them in the iterations they belong to."""
        self.replay.add(GameSamples.concatenate([game.samples for game in finished]),
                        [game.record for game in finished])
        for game in finished:
            ledger = budget.count_game(game.samples.num_positions,
                                       int((game.samples.policy_weight > 0).sum()))
            ledger.adjudicated += game.adjudicated
            ledger.plies += len(game.record.moves)
            ledger.played_games += 1
            simulations, leaves = last_counters.get(game.actor_id, (0.0, 0.0))
            ledger.simulations += game.simulations - simulations
            ledger.leaves_evaluated += game.leaves_evaluated - leaves
            last_counters[game.actor_id] = (game.simulations, game.leaves_evaluated)
            ledger.lag_versions += float(publisher.lag_versions(game.versions).sum())
            ledger.lag_steps += float((self.learner.step - game.versions).sum())

    def finish_async_iteration(self, ledger: IterationLedger, clock: AsyncClock,
                               evaluation: BackgroundEvaluation, workers: SelfPlayWorkers,
                               publisher: WeightsPublisher,
                               take_late_games: Callable[[list[FinishedGame]], None]) -> None:
        """Close an iteration of the async pipeline: model file, evaluation started beside,
        checkpoint, metrics line. The last iteration waits for its evaluation, and for the games
        the actors were playing when it had its games: they are played out and kept
        (`take_late_games`: replay, records), and a later `--resume` owes their steps."""
        config = self.config
        iteration = self.iteration + 1
        self.iteration = iteration
        self.trained_games += ledger.games
        seconds = time.perf_counter() - clock.started
        with signals_deferred():  # the model file is written whole, as the checkpoint is
            save_model(self.model_path(iteration), self.learner.model, self.model_extra(iteration))
        metrics: dict[str, float] = {"iteration": iteration}
        metrics.update({
            "selfplay/games": ledger.games,
            "selfplay/positions": ledger.positions,
            "selfplay/full_searches": ledger.full_searches,
            "selfplay/positions_per_s": ledger.positions / seconds,
            "selfplay/sims_per_s": ledger.simulations / seconds,
            "selfplay/evals_per_s": ledger.leaves_evaluated / seconds,
            "selfplay/seconds": seconds,
            "selfplay/mean_game_plies": ledger.plies / max(ledger.played_games, 1),
            "selfplay/adjudicated_share": ledger.adjudicated / max(ledger.games, 1),
        })
        metrics.update(self.train_metrics(clock.sums, ledger.steps, clock.learner_seconds))
        samples = ledger.steps * config.train_batch_size * self.world_size
        metrics.update({
            "pipeline/samples_per_position": samples / max(ledger.positions, 1),
            "pipeline/samples_per_s": samples / seconds,
            "pipeline/learner_wait_s": clock.learner_wait,
            "pipeline/actor_throttle_s": workers.paused_seconds - clock.paused_at_start,
            "pipeline/weights_lag_versions": ledger.lag_versions / max(ledger.positions, 1),
            "pipeline/weights_lag_steps": ledger.lag_steps / max(ledger.positions, 1),
            "pipeline/weights_version": publisher.versions[-1],
        })
        results = []  # evaluations finished by now, oldest first
        if config.eval.every and iteration % config.eval.every == 0:
            waited = time.perf_counter()
            results.append(evaluation.wait())  # one evaluation at a time
            metrics["pipeline/eval_wait_s"] = time.perf_counter() - waited
            evaluation.start(iteration)
        else:
            results.append(evaluation.poll())
        if iteration >= config.iterations:
            finishing = time.perf_counter()
            workers.finish(on_games=take_late_games)
            metrics["pipeline/finish_games_s"] = time.perf_counter() - finishing
            results.append(evaluation.wait())
        results = [result for result in results if result is not None]
        # a line holds one evaluation: the newest; older ones go to TensorBoard
        for older in results[:-1]:
            for key, value in older.metrics.items():
                self.writer.add_scalar(key, float(value), older.iteration)
        if results:
            metrics.update({**results[-1].metrics, "eval/iteration": results[-1].iteration,
                            "eval/seconds": results[-1].seconds})
        self.checkpoint()
        metrics["iteration_seconds"] = time.perf_counter() - clock.started
        self.log(iteration, metrics)

    def evaluate(self, iteration: int) -> dict[str, float]:
        """Arena matches of this iteration's model against the previous one and the baselines
        (`amazons.matches.evaluation.Evaluation`: the network players served by inference servers on
        the run's device), then the Elo ladder over every match so far, written to `elo.json`."""
        config = self.config.eval
        name = f"iter-{iteration:04d}"
        with Evaluation(config, self.config.device, self.config.inference_dtype,
                        self.board) as evaluation:
            outcomes = evaluation.run(self.model_path(iteration), self.model_path(iteration - 1),
                                      iteration, seed=self.config.seed * 7919 + iteration)
        results: dict[str, float] = {}
        new_matches = []
        for opponent, result in outcomes.items():
            opponent_name = f"iter-{iteration - 1:04d}" if opponent == "previous" else opponent
            new_matches.append({"a": name, "b": opponent_name, "wins_a": result.wins_a,
                                "games": result.games})
            results[f"eval/win_rate_vs_{opponent}"] = result.win_rate
            print(f"  eval {name} vs {opponent_name}: {result.wins_a}/{result.games} wins, "
                  f"Elo {result.elo:+.0f} [{result.elo_low:+.0f}, {result.elo_high:+.0f}]",
                  flush=True)
        results["eval/server_rows"] = sum(stats.get("rows", 0.0)
                                          for stats in evaluation.stats.values())
        with self.matches_lock:  # all of this evaluation's matches at once, beside the checkpoint
            self.matches.extend(new_matches)
            matches = list(self.matches)
        ratings = fit_elo(matches)
        ladder = json.dumps({"ratings": ratings, "matches": matches}, indent=2) + "\n"
        atomic_write(self.run_dir / "elo.json", lambda stream: stream.write(ladder.encode()))
        results["eval/elo"] = ratings[name]
        if "greedy" in ratings:
            results["eval/elo_greedy"] = ratings["greedy"]
        return results

    def run_state(self) -> dict[str, Any]:
        """What `--resume` continues from beside the learner (`RUN_STATE_KEYS`): the iteration,
        the Elo ladder's matches, `trained_games` (the serial number of the first replay game no
        finished iteration holds), and the lineage with this run's minutes so far
        (`model_extra`)."""
        extra = self.model_extra(self.iteration)
        with self.matches_lock:
            matches = list(self.matches)
        return {"iteration": self.iteration, "matches": matches,
                "trained_games": self.trained_games, "minutes": extra["lineage"][-1]["minutes"],
                "lineage": extra["lineage"]}

    def checkpoint(self) -> None:
        """The learner's checkpoint, carrying the run state (`run_state`) in its `extra`, then
        `state.json`, a copy of that state. The checkpoint is the commit point: whatever stops
        the run between the two renames, `--resume` continues from the checkpoint
        (`resumed_state`)."""
        state = self.run_state()
        with signals_deferred():  # the pair is written whole, then a stop that came is taken
            save_checkpoint(self.checkpoint_path, self.learner,
                            {**state, "board": self.board.to_dict(),
                             "frozen_parameters": list(self.learner.frozen)})
            self.write_state(state)

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        self.metrics_file.write(json.dumps({key: float(value) for key, value in metrics.items()})
                                + "\n")
        self.metrics_file.flush()
        # async: an earlier model's evaluation
        evaluated = int(metrics.get("eval/iteration", iteration))
        for key, value in metrics.items():
            if key != "iteration":
                self.writer.add_scalar(key, float(value),
                                       evaluated if key.startswith("eval/") else iteration)
        self.writer.flush()
        summary = ", ".join(f"{key.split('/')[-1]} {metrics[key]:.3g}" for key in
                            ("train/loss", "selfplay/positions_per_s", "eval/elo")
                            if key in metrics)
        print(f"iteration {iteration} done in {metrics['iteration_seconds']:.0f} s: {summary}",
              flush=True)

    def close(self) -> None:
        """Write the replay games still waiting (`ReplayBuffer.close`), close the logs."""
        try:
            self.replay.close()
        finally:
            self.metrics_file.close()
            self.writer.close()


LOG_EVERY_STEPS = 10  # the training progress bar reads the loss (waiting for the device) this often
ASYNC_WAIT_S = 0.05  # async: how long the learner waits for games at a time when it is ahead
