"""The main job: `python -m amazons.train [--preset cpu|gpu] [--run-dir DIR] [--iterations N] [--resume] [--backend local|ray [--address ADDR]] [KEY=VALUE ...]`.

An iteration is `games_per_iteration` self-play games and the training steps they are owed,
`ceil(new_positions * sample_reuse / train_batch_size)` (bounded), on uniformly sampled,
symmetry-augmented batches from the replay window; then a model file for play, the checkpoint
(model, optimizer, scheduler, RNGs, step), `state.json` and a metrics line; every `eval.every`
iterations an evaluation (arena matches of the new model against the previous one and the
baseline players, the network players served by inference servers on the run's device
(`amazons.evaluation`), fitted into an Elo ladder with RandomPlayer at 0).

`pipeline.mode` says how the parts share the machine (`amazons.pipeline`):
* `async` (the presets'): persistent actor processes play without pause through the
  shared-memory inference server (a lane whose game ends starts the next at once), the learner
  trains in this process at the same time, holding `sample_reuse` samples per position played,
  and publishes its weights every `pipeline.publish_every_steps` steps; the evaluation runs in a
  thread beside them (`Run.run_async`);
* `sync`: self-play, training and evaluation one after the other, the weights published once
  per iteration (`Run.run_iteration`).

Everything a run needs is in its run directory: `config.json` (the resolved config),
`checkpoints/latest.pt`, `models/model-NNNN.pt`, `replay/chunk-*.npz`, `games/*.txt`,
`metrics.jsonl`, `elo.json` and TensorBoard logs under `tensorboard/`. Ctrl-C stops every
process and unlinks the shared memory; `--resume` continues from the last finished iteration
with all persisted games.

Config overrides use dotted paths into `TrainConfig`, e.g. `selfplay.search.simulations=64` or
`net.blocks=4`.

`--backend ray` runs the same iterations with self-play on every node of a Ray cluster and,
optionally, data-parallel training (`amazons.distributed`, docs/distributed.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import signal
import sys
import threading
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from amazons._atomic import atomic_write
from amazons.checkpoint import resume_learner, save_checkpoint, save_model
from amazons.config import config_from_dict, config_to_dict
from amazons.distributed.config import RayConfig
from amazons.evaluation import EvalConfig, Evaluation
from amazons.inference import InferenceConfig, InferenceServer
from amazons.learn import Learner, MetricSums, OptimConfig, SampleBatch, augment_batch
from amazons.mcts import SearchConfig
from amazons.net import NetConfig, PolicyValueNet, count_parameters, net_config
from amazons.netplay import NetworkEvaluatorFactory, resolve_device
from amazons.pipeline import (
    BackgroundEvaluation,
    IterationLedger,
    PipelineConfig,
    StepBudget,
    WeightsPublisher,
    steps_for_positions,
)
from amazons.records import GameRecord, write_records
from amazons.replay import GameSamples, ReplayBuffer
from amazons.selfplay import FinishedGame, SelfPlayConfig, SelfPlayReport, SelfPlayWorkers


@dataclass(frozen=True)
class TrainConfig:
    """The whole resolved configuration of a run (written to `run_dir/config.json`)."""

    preset: str = "cpu"  # the preset this config started from
    iterations: int = 30  # iterations to run (a resumed run continues up to this number)
    seed: int = 0  # seeds self-play, sampling and the initial weights
    device: str = "auto"  # learner and inference device: "auto", "cpu", "cuda"
    inference_dtype: str = "auto"  # inference server dtype: "auto" (bf16 on GPU, fp32 on CPU), "fp32", ...
    torch_threads: int = 1  # intra-op threads of the learner process
    games_per_iteration: int = 64  # self-play games per iteration
    train_batch_size: int = 256  # samples per optimizer step
    sample_reuse: float = 8.0  # samples drawn for training per new position
    min_steps: int = 20  # training steps per iteration, at least
    max_steps: int = 2000  # training steps per iteration, at most
    replay_window_positions: int = 200_000  # the newest positions kept for sampling
    replay_chunk_games: int = 1  # the replay writer thread writes a chunk once this many games wait...
    replay_chunk_seconds: float = 0.0  # ...or once the oldest has waited this many seconds (a crash loses those)
    net: NetConfig = field(default_factory=lambda: net_config("tiny"))
    optim: OptimConfig = field(default_factory=OptimConfig)
    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)  # async or sync phases, ratio, publishing
    ray: RayConfig = field(default_factory=RayConfig)  # the Ray backend's settings (`--backend ray`)

    def __post_init__(self) -> None:
        for name in ("iterations", "games_per_iteration", "train_batch_size", "replay_window_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_steps <= self.max_steps:
            raise ValueError(f"need 0 <= min_steps <= max_steps, got {self.min_steps}, {self.max_steps}")
        if self.sample_reuse <= 0:
            raise ValueError(f"sample_reuse must be > 0, got {self.sample_reuse}")
        if self.replay_chunk_games < 1 or self.replay_chunk_seconds < 0:
            raise ValueError(f"need replay_chunk_games >= 1 and replay_chunk_seconds >= 0, got "
                             f"{self.replay_chunk_games} and {self.replay_chunk_seconds}")


def preset_config(name: str) -> TrainConfig:
    """The `cpu` or `gpu` preset.

    `cpu`: a small net and modest searches, so that a 2-core machine improves visibly within an
    hour. `gpu`: the design's ResNet-40 (20 x 256, joint head, attention), training batch 512 and
    inference batches up to 1024 rows merged from several actors. Both run the async pipeline.
    """
    if name == "cpu":
        return TrainConfig(
            preset="cpu",
            net=net_config("tiny"),
            optim=OptimConfig(lr=2e-3, weight_decay=1e-4, schedule="constant", warmup_steps=50),
            selfplay=SelfPlayConfig(
                num_actors=2,
                games_in_parallel=16,
                search=SearchConfig(simulations=48, leaves_per_game=4, root_noise=True, fpu_reduction=0.0,
                                    temperature_moves=10, node_capacity=1024, edge_capacity=1 << 17),
                # A sharper completed-Q target than the paper's 0.1: with 48 PUCT simulations most
                # legal moves go unvisited and keep their prior share (docs/BENCHMARKS.md).
                target_c_scale=0.3,
            ),
            inference=InferenceConfig(inference_batch_size=128, flush_deadline_ms=2.0),
            games_per_iteration=64,
            train_batch_size=256,
            replay_chunk_games=32,
            replay_chunk_seconds=30.0,
            # 16, not 12: at 12 the learner leaves part of the second core idle beside the
            # inference server, which bounds self-play (docs/BENCHMARKS.md, --suite train).
            sample_reuse=16.0,
            eval=EvalConfig(every=2, games=10, simulations=48, processes=2),
            pipeline=PipelineConfig(mode="async", publish_every_steps=10, slack_steps=100),
        )
    if name == "gpu":
        return TrainConfig(
            preset="gpu",
            iterations=200,
            net=net_config("resnet40"),
            optim=OptimConfig(lr=2e-4, weight_decay=1e-4, warmup_steps=500, total_steps=200_000),
            selfplay=SelfPlayConfig(
                num_actors=12,
                games_in_parallel=64,
                search=SearchConfig(simulations=400, leaves_per_game=4, root_noise=True,
                                    temperature_moves=12),
            ),
            # Each actor sends up to 64 x 4 = 256 rows: a batch merges four actors' requests.
            inference=InferenceConfig(inference_batch_size=1024, flush_deadline_ms=2.0),
            games_per_iteration=768,
            train_batch_size=512,
            sample_reuse=4.0,
            max_steps=4000,
            replay_window_positions=1_000_000,
            replay_chunk_games=256,
            replay_chunk_seconds=30.0,
            eval=EvalConfig(every=2, games=20, simulations=200, processes=8),
            pipeline=PipelineConfig(mode="async", publish_every_steps=50, slack_steps=200),
        )
    raise ValueError(f"unknown preset {name!r}; choose 'cpu' or 'gpu'")


# ------------------------------------------------------------------------------------------------
# Config overrides (dicts <-> configs: `amazons.config`)


def _parse_value(text: str, current: Any, path: str) -> Any:
    try:
        if isinstance(current, bool):
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, tuple):
            items = [item.strip() for item in text.split(",") if item.strip()]
            return tuple(type(current[0])(item) if current else item for item in items)
        return text
    except ValueError:
        raise ValueError(f"override {path}={text!r}: expected a {type(current).__name__}") from None


def apply_overrides(config: TrainConfig, overrides: list[str]) -> TrainConfig:
    """Apply `a.b.c=value` overrides (types follow the current values), then validate once.

    Every override is parsed against the current config first, and the new config is built and
    checked only after all of them are in, so checks that tie fields together (e.g.
    `min_steps <= max_steps`) see the final values whatever the order of the overrides.

    Raises:
        ValueError: naming a malformed override, an unknown field, or a resulting value that the
            config refuses.
    """
    data = config_to_dict(config)
    for override in overrides:
        path, equals, text = override.partition("=")
        if not equals or not path:
            raise ValueError(f"bad override {override!r}: expected KEY=VALUE, e.g. selfplay.num_actors=2")
        _set_path(config, data, path.split("."), text, path)
    return config_from_dict(type(config), data)


def _set_path(node: Any, data: dict[str, Any], keys: list[str], text: str, path: str) -> None:
    """Parse `text` against the field `keys` of the dataclass `node` and store it into `data`."""
    names = {item.name for item in dataclasses.fields(node)}
    if keys[0] not in names:
        raise ValueError(f"override {path}: {type(node).__name__} has no field {keys[0]!r}; fields: {sorted(names)}")
    current = getattr(node, keys[0])
    if len(keys) == 1:
        if dataclasses.is_dataclass(current):
            raise ValueError(f"override {path}: {keys[0]} is a group; name one of its fields")
        data[keys[0]] = config_to_dict(_parse_value(text, current, path))
    else:
        if not dataclasses.is_dataclass(current):
            raise ValueError(f"override {path}: {keys[0]} is not a group")
        _set_path(current, data[keys[0]], keys[1:], text, path)


# ------------------------------------------------------------------------------------------------
# Elo ladder


def fit_elo(matches: list[dict[str, Any]], anchor: str = "random", prior_games: float = 1.0) -> dict[str, float]:
    """Ratings from match results (Bradley-Terry on the Elo scale), `anchor` fixed at 0.

    Args:
        matches: dicts with `a`, `b`, `wins_a`, `games`.
        anchor: the player pinned at 0.
        prior_games: each player also scores half of this many games against the anchor, which
            keeps ratings finite after a clean sweep.
    """
    players = sorted({match["a"] for match in matches} | {match["b"] for match in matches} | {anchor})
    index = {name: i for i, name in enumerate(players)}
    rows = [(index[m["a"]], index[m["b"]], float(m["wins_a"]), float(m["games"])) for m in matches]
    rows += [(index[name], index[anchor], prior_games / 2, prior_games) for name in players if name != anchor]
    ratings = np.zeros(len(players))
    scale = math.log(10) / 400
    for _ in range(2000):
        gradient = np.zeros_like(ratings)
        curvature = np.full_like(ratings, 1e-9)
        for a, b, wins, games in rows:
            expected = 1 / (1 + math.exp(-scale * (ratings[a] - ratings[b])))
            gradient[a] += wins - games * expected
            gradient[b] -= wins - games * expected
            weight = games * expected * (1 - expected) * scale
            curvature[a] += weight
            curvature[b] += weight
        step = gradient / curvature
        step[index[anchor]] = 0.0
        ratings += np.clip(step, -200, 200)
        if np.abs(step).max() < 1e-6:
            break
    return {name: float(ratings[index[name]]) for name in players}


# ------------------------------------------------------------------------------------------------
# The run


def training_steps(config: TrainConfig, new_positions: int, world_size: int = 1) -> int:
    """Optimizer steps for an iteration that produced `new_positions` positions.

    Each step draws `train_batch_size` samples on each of `world_size` data-parallel ranks, so the
    samples drawn per new position stay `sample_reuse` and the steps shrink as ranks are added;
    the result is bounded by `min_steps` and `max_steps`.
    """
    return steps_for_positions(new_positions, config.sample_reuse, config.train_batch_size * world_size,
                               config.min_steps, config.max_steps)


class Run:
    """One training run in `run_dir`: learner, replay, server, actors, logs."""

    def __init__(self, config: TrainConfig, run_dir: Path, resume: bool) -> None:
        self.config = config
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
        if resume:
            self.learner = resume_learner(self.checkpoint_path, config.net, config.optim, self.device)
            state = json.loads((run_dir / "state.json").read_text())
            self.iteration = int(state["iteration"])
            self.matches = state["matches"]
            trained_games = state.get("trained_games")  # absent in runs from before it was kept
        else:
            torch.manual_seed(config.seed)
            model = PolicyValueNet(config.net)
            self.learner = Learner(model, config.optim, self.device, seed=config.seed)
        games_file = run_dir / "games" / "selfplay.txt"
        self.replay = ReplayBuffer(run_dir / "replay", config.replay_window_positions, seed=config.seed + self.iteration,
                                   chunk_games=config.replay_chunk_games, chunk_seconds=config.replay_chunk_seconds,
                                   on_written=lambda records: write_records(games_file, records, append=True),
                                   first_game=trained_games or 0)
        for path, reason in self.replay.skipped_chunks:
            print(f"warning: skipped replay chunk {path}: {reason}", file=sys.stderr)
        # The step budget's debt: games in the replay that no finished iteration trained on (a
        # stop mid-iteration, or the games finished after the last iteration); the next
        # iteration counts them as its first and owes their steps.
        self.trained_games = self.replay.next_game if trained_games is None else int(trained_games)
        self.debt = self.replay.games_since(self.trained_games)
        self.metrics_file = open(run_dir / "metrics.jsonl", "a")  # noqa: SIM115  (closed in close())
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=self.iteration + 1 if resume else None)

    def model_path(self, iteration: int) -> Path:
        return self.run_dir / "models" / f"model-{iteration:04d}.pt"

    def run(self, progress: bool = True) -> None:
        config = self.config
        if not self.model_path(self.iteration).exists():
            save_model(self.model_path(self.iteration), self.learner.model, {"iteration": self.iteration})
        factory = NetworkEvaluatorFactory(str(self.model_path(self.iteration)), config.device, config.inference_dtype)
        print(f"run {self.run_dir}: preset {config.preset}, net {count_parameters(self.learner.model):,} parameters, "
              f"device {self.device}, {config.pipeline.mode} pipeline, iteration {self.iteration}/{config.iterations}, "
              f"replay {len(self.replay):,} positions", flush=True)
        with InferenceServer(factory, config.selfplay.num_actors, config.inference) as server:
            if config.pipeline.mode == "sync":
                server.publish_weights(str(self.model_path(self.iteration)), self.iteration)
            with SelfPlayWorkers(server, config.selfplay) as workers:
                if config.pipeline.mode == "async" and self.iteration < config.iterations:
                    self.run_async(server, workers, progress)
                while self.iteration < config.iterations:
                    self.run_iteration(server, workers, progress)

    def run_iteration(self, server: InferenceServer, workers: SelfPlayWorkers, progress: bool) -> None:
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
            "selfplay/mean_game_plies": report.positions / max(report.games, 1),
            "selfplay/adjudicated_share": report.adjudicated / max(report.games, 1),
        })
        debt = self.take_debt()
        metrics["train/debt_positions"] = debt.num_positions if debt is not None else 0
        metrics.update(self.train(report.positions + metrics["train/debt_positions"], progress))
        self.trained_games += report.games + (debt.num_games if debt is not None else 0)
        self.iteration = iteration
        save_model(self.model_path(iteration), self.learner.model, {"iteration": iteration})
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

    def self_play(self, workers: SelfPlayWorkers, iteration: int, progress: bool) -> SelfPlayReport:
        config = self.config
        bar = _progress_bar(config.games_per_iteration, f"iter {iteration} self-play", "game", progress)
        def on_games(samples: list[GameSamples], records: list[GameRecord]) -> None:
            self.replay.add(GameSamples.concatenate(samples), records)

        def show(report: SelfPlayReport) -> None:
            if bar is not None:
                bar.n = report.games
                bar.set_postfix(pos_s=f"{report.positions_per_s:.0f}", refresh=True)

        report = workers.play(config.games_per_iteration, on_games, iteration=iteration, progress=show)
        if bar is not None:
            bar.set_postfix(pos_s=f"{report.positions_per_s:.0f}", sims_s=f"{report.simulations_per_s:.0f}",
                            evals_s=f"{report.evals_per_s:.0f}")
            bar.close()
        return report

    def train(self, new_positions: int, progress: bool) -> dict[str, float]:
        """The synchronous training phase: `training_steps` steps on the replay window."""
        config = self.config
        steps = training_steps(config, new_positions, self.world_size)
        bar = _progress_bar(steps, f"iter {self.iteration + 1} training", "step", progress)
        sums = MetricSums()
        started = time.perf_counter()
        for step in range(steps):
            step_metrics = self.train_step()
            sums.add(step_metrics)
            if bar is not None:
                bar.update(1)
                if step % LOG_EVERY_STEPS == 0:  # reading the loss waits for the device
                    bar.set_postfix(loss=f"{float(step_metrics['loss']):.3f}", refresh=False)
        if bar is not None:
            bar.close()
        seconds = time.perf_counter() - started
        return self.train_metrics(sums, steps, seconds)

    def train_step(self) -> dict[str, torch.Tensor | float]:
        """One learner step on a batch drawn from the replay window and augmented."""
        batch = augment_batch(SampleBatch(**self.replay.sample(self.config.train_batch_size)), self.learner.rng)
        return self.learner.train_step_tensors(batch)

    def train_metrics(self, sums: MetricSums, steps: int, seconds: float) -> dict[str, float]:
        """`train/*` metrics of `steps` steps that took `seconds` of the learner's time."""
        result = {f"train/{key}": value for key, value in sums.means().items()}
        samples = steps * self.config.train_batch_size * self.world_size
        result.update({"train/steps": steps, "train/samples_per_s": samples / max(seconds, 1e-9),
                       "train/replay_positions": len(self.replay), "train/learner_step": self.learner.step})
        return result

    # --------------------------------------------------------------------------------------------
    # The asynchronous pipeline

    def run_async(self, server: InferenceServer, workers: SelfPlayWorkers, progress: bool) -> None:
        """Self-play, training and evaluation at once until `config.iterations` (see
        `amazons.pipeline`): the actors play endless tasks, this loop takes their games into the
        replay window, trains whenever the ratio allows, publishes weights every
        `pipeline.publish_every_steps` steps and closes iterations; evaluation runs in a thread."""
        config = self.config
        budget = self.step_budget()
        publisher = WeightsPublisher(self.run_dir / "weights", server)
        publisher.publish(self.learner.step, path=self.model_path(self.iteration))
        evaluation = BackgroundEvaluation(self.evaluate)
        clock = _AsyncClock(workers)
        bar = _progress_bar(config.games_per_iteration, f"iter {self.iteration + 1}", "game", progress)
        last_counters: dict[int, tuple[float, float]] = {}

        def take_late_games(late: list[FinishedGame]) -> None:
            self.take_games(late, budget, publisher, last_counters)

        workers.start(stream=self.iteration)
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
                if self.iteration + 1 == config.iterations and budget.current.games >= config.games_per_iteration:
                    workers.wind_down()  # the last iteration has its games: play out the ones in progress
            if budget.may_step():
                stepped = time.perf_counter()
                clock.sums.add(self.train_step())
                clock.learner_seconds += time.perf_counter() - stepped
                budget.current.steps += 1
                if self.learner.step % config.pipeline.publish_every_steps == 0:
                    publisher.publish(self.learner.step, model=self.learner.model)
            if budget.should_pause(workers.paused):
                workers.pause()
            else:
                workers.resume()
            clock.show(bar, budget.current)
            if budget.iteration_done():
                if bar is not None:
                    bar.close()
                self.finish_async_iteration(budget.finish_iteration(), clock, evaluation, workers, publisher,
                                            take_late_games)
                clock = _AsyncClock(workers)
                bar = (None if self.iteration >= config.iterations else
                       _progress_bar(config.games_per_iteration, f"iter {self.iteration + 1}", "game", progress))
        workers.stop()

    def step_budget(self) -> StepBudget:
        """The async pipeline's `StepBudget`, with the replay's debt (`take_debt`) counted first:
        the games a stopped run left in the replay belong to the next iterations, which owe
        their steps."""
        config = self.config
        budget = StepBudget(config.games_per_iteration, config.sample_reuse,
                            config.train_batch_size * self.world_size, config.min_steps, config.max_steps,
                            config.pipeline.slack_steps)
        debt = self.take_debt()
        if debt is not None:
            full = np.add.reduceat((debt.policy_weight > 0).astype(np.int64), debt.game_offsets[:-1])
            for positions, full_searches in zip(np.diff(debt.game_offsets).tolist(), full.tolist(), strict=True):
                budget.count_game(positions, full_searches)
        return budget

    def take_games(self, finished: list[FinishedGame], budget: StepBudget, publisher: WeightsPublisher,
                   last_counters: dict[int, tuple[float, float]]) -> None:
        """Add finished games to the replay (its writer thread persists them and their records)
        and count them in the iterations they belong to."""
        self.replay.add(GameSamples.concatenate([game.samples for game in finished]),
                        [game.record for game in finished])
        for game in finished:
            ledger = budget.count_game(game.samples.num_positions, int((game.samples.policy_weight > 0).sum()))
            ledger.adjudicated += game.adjudicated
            simulations, leaves = last_counters.get(game.actor_id, (0.0, 0.0))
            ledger.simulations += game.simulations - simulations
            ledger.leaves_evaluated += game.leaves_evaluated - leaves
            last_counters[game.actor_id] = (game.simulations, game.leaves_evaluated)
            ledger.lag_versions += float(publisher.lag_versions(game.versions).sum())
            ledger.lag_steps += float((self.learner.step - game.versions).sum())

    def finish_async_iteration(self, ledger: IterationLedger, clock: _AsyncClock,
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
        save_model(self.model_path(iteration), self.learner.model, {"iteration": iteration})
        metrics: dict[str, float] = {"iteration": iteration}
        metrics.update({
            "selfplay/games": ledger.games,
            "selfplay/positions": ledger.positions,
            "selfplay/full_searches": ledger.full_searches,
            "selfplay/positions_per_s": ledger.positions / seconds,
            "selfplay/sims_per_s": ledger.simulations / seconds,
            "selfplay/evals_per_s": ledger.leaves_evaluated / seconds,
            "selfplay/seconds": seconds,
            "selfplay/mean_game_plies": ledger.positions / max(ledger.games, 1),
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
        for older in results[:-1]:  # a line holds one evaluation: the newest; older ones go to TensorBoard
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
        (`amazons.evaluation.Evaluation`: the network players served by inference servers on the
        run's device), then the Elo ladder over every match so far, written to `elo.json`."""
        config = self.config.eval
        name = f"iter-{iteration:04d}"
        with Evaluation(config, self.config.device, self.config.inference_dtype) as evaluation:
            outcomes = evaluation.run(self.model_path(iteration), self.model_path(iteration - 1), iteration,
                                      seed=self.config.seed * 7919 + iteration)
        results: dict[str, float] = {}
        new_matches = []
        for opponent, result in outcomes.items():
            opponent_name = f"iter-{iteration - 1:04d}" if opponent == "previous" else opponent
            new_matches.append({"a": name, "b": opponent_name, "wins_a": result.wins_a, "games": result.games})
            results[f"eval/win_rate_vs_{opponent}"] = result.win_rate
            print(f"  eval {name} vs {opponent_name}: {result.wins_a}/{result.games} wins, Elo {result.elo:+.0f} "
                  f"[{result.elo_low:+.0f}, {result.elo_high:+.0f}]", flush=True)
        results["eval/server_rows"] = sum(stats.get("rows", 0.0) for stats in evaluation.stats.values())
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

    def checkpoint(self) -> None:
        """The learner's checkpoint and `state.json`: the iteration, the Elo ladder's matches and
        `trained_games` (the serial number of the first replay game no finished iteration holds)."""
        save_checkpoint(self.checkpoint_path, self.learner, {"iteration": self.iteration})
        with self.matches_lock:
            matches = list(self.matches)
        state = json.dumps({"iteration": self.iteration, "matches": matches,
                            "trained_games": self.trained_games}) + "\n"
        atomic_write(self.run_dir / "state.json", lambda stream: stream.write(state.encode()))

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        self.metrics_file.write(json.dumps({key: float(value) for key, value in metrics.items()}) + "\n")
        self.metrics_file.flush()
        evaluated = int(metrics.get("eval/iteration", iteration))  # async: an earlier model's evaluation
        for key, value in metrics.items():
            if key != "iteration":
                self.writer.add_scalar(key, float(value), evaluated if key.startswith("eval/") else iteration)
        self.writer.flush()
        summary = ", ".join(f"{key.split('/')[-1]} {metrics[key]:.3g}" for key in
                            ("train/loss", "selfplay/positions_per_s", "eval/elo") if key in metrics)
        print(f"iteration {iteration} done in {metrics['iteration_seconds']:.0f} s: {summary}", flush=True)

    def close(self) -> None:
        """Write the replay games still waiting (`ReplayBuffer.close`), close the logs."""
        try:
            self.replay.close()
        finally:
            self.metrics_file.close()
            self.writer.close()


LOG_EVERY_STEPS = 10  # the training progress bar reads the loss (waiting for the device) this often
ASYNC_WAIT_S = 0.05  # async: how long the learner waits for games at a time when it is ahead


class _AsyncClock:
    """Timers and metric sums of one iteration of the async pipeline."""

    def __init__(self, workers: SelfPlayWorkers) -> None:
        self.started = time.perf_counter()
        self.sums = MetricSums()
        self.learner_seconds = 0.0
        self.learner_wait = 0.0
        self.paused_at_start = workers.paused_seconds
        self._shown = 0.0

    def show(self, bar: Any, ledger: IterationLedger) -> None:
        """Refresh the progress bar, at most once a second (the loss read waits for the device)."""
        now = time.perf_counter()
        if bar is None or now - self._shown < 1.0:
            return
        self._shown = now
        bar.n = min(ledger.games, bar.total)
        loss = self.sums.means().get("loss", float("nan"))
        bar.set_postfix(steps=ledger.steps, loss=f"{loss:.3f}",
                        pos_s=f"{ledger.positions / (now - self.started):.0f}", refresh=True)


def _progress_bar(total: int, description: str, unit: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit=unit, leave=False, dynamic_ncols=True)


def resolve_config(args: argparse.Namespace) -> TrainConfig:
    """The run's config: from `run_dir/config.json` when resuming, else from the preset; then
    `--iterations` and the KEY=VALUE overrides.

    A resumed run takes every override (optimizer, schedule, self-play, search, evaluation,
    replay) except a change of the network, which it refuses naming the field.
    """
    config_path = args.run_dir / "config.json"
    if args.resume:
        if not (args.run_dir / "checkpoints" / "latest.pt").exists() or not config_path.exists():
            raise SystemExit(f"--resume: {args.run_dir} holds no finished iteration to resume from")
        config = config_from_dict(TrainConfig, json.loads(config_path.read_text()))
    else:
        if (args.run_dir / "checkpoints" / "latest.pt").exists():
            raise SystemExit(f"{args.run_dir} already holds a run: pass --resume, or another --run-dir")
        preset = args.preset or ("gpu" if torch.cuda.is_available() else "cpu")
        config = preset_config(preset)
    stored = config
    config = apply_overrides(config, args.overrides)
    if args.resume and config.net != stored.net:
        changed = [f"net.{name}: {getattr(stored.net, name)!r} -> {getattr(config.net, name)!r}"
                   for name in (item.name for item in dataclasses.fields(config.net))
                   if getattr(stored.net, name) != getattr(config.net, name)]
        raise SystemExit(f"--resume cannot change the network's shape or head ({'; '.join(changed)}): "
                         "start a new run in another --run-dir")
    if args.iterations is not None:
        config = dataclasses.replace(config, iterations=args.iterations)
    return config


def _stop_on_sigterm(stopped_by: list[int]) -> typing.Any:
    """Make SIGTERM (`kill PID`, a scheduler's stop) shut the run down like Ctrl-C: actors, server
    and shared memory cleaned up, finished iterations kept for `--resume`. Further SIGTERMs are
    ignored while that happens. Returns the previous handler (None off the main thread, where
    handlers cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: object) -> None:
        if stopped_by:  # a signal that arrived before the first call could ignore it
            return
        stopped_by.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point (exit status 0, or 130 / 143 after SIGINT / SIGTERM)."""
    parser = argparse.ArgumentParser(prog="python -m amazons.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=("cpu", "gpu"), default=None,
                        help="default: gpu when CUDA is available, else cpu")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: runs/<preset>")
    parser.add_argument("--iterations", type=int, default=None, help="iterations to reach (overrides the config)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --run-dir")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (logs only)")
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="local: this machine's processes; ray: self-play on every node of a Ray "
                             "cluster, DDP training (pip install 'amazons[ray]'; docs/distributed.md)")
    parser.add_argument("--address", default=None,
                        help="--backend ray: the cluster to join ('auto': the one `ray start` began on "
                             "this machine, or HOST:PORT); default: start Ray on this machine")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. net.blocks=4")
    args = parser.parse_args(argv)
    if args.run_dir is None:
        args.run_dir = Path("runs") / (args.preset or ("gpu" if torch.cuda.is_available() else "cpu"))
    if args.address is not None and args.backend != "ray":
        parser.error("--address needs --backend ray")
    try:
        config = resolve_config(args)
    except ValueError as error:
        parser.error(str(error))
    args.run_dir.mkdir(parents=True, exist_ok=True)
    (args.run_dir / "config.json").write_text(json.dumps(config_to_dict(config), indent=2) + "\n")
    if args.backend == "ray":
        from amazons.distributed.ray_backend import RayRun

        run: Run = RayRun(config, args.run_dir, args.resume, address=args.address)
    else:
        run = Run(config, args.run_dir, args.resume)
    stopped_by: list[int] = []
    previous_handler = _stop_on_sigterm(stopped_by)
    try:
        run.run(progress=not args.no_progress)
    except KeyboardInterrupt:
        signum = stopped_by[0] if stopped_by else signal.SIGINT
        print(f"\n{signal.Signals(signum).name}: stopped after iteration {run.iteration}; continue with: "
              f"python -m amazons.train --run-dir {args.run_dir} --resume"
              + (" --backend ray" if args.backend == "ray" else ""), file=sys.stderr)
        return 128 + signum
    finally:
        run.close()
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
    print(f"finished {run.iteration} iterations in {args.run_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
