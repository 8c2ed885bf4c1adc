"""The main job: config handling, the Elo ladder, and real end-to-end runs on CPU."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from amazons.core.config import ConfigError, config_from_dict, config_to_dict
from amazons.matches.arena import ArenaResult
from amazons.matches.evaluation import EvalConfig, fit_elo
from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator
from amazons.neural.checkpoint import (
    CheckpointError,
    init_weights_from,
    load_model_for_play,
    resume_learner,
    save_checkpoint,
    save_model,
)
from amazons.neural.learner import (
    Learner,
    OptimConfig,
    SampleBatch,
    augment_batch,
    learning_rate_factor,
    sample_batch,
)
from amazons.neural.model import PolicyValueNet, net_config
from amazons.players.records import GameRecord
from amazons.serving.server import segment_prefix
from amazons.train import config as train_config
from amazons.train import run as train_module
from amazons.train import signals as train_signals
from amazons.train.backends import backend_names, load_backend
from amazons.train.command import main, resolve_config
from amazons.train.config import TrainConfig, apply_overrides, preset_config
from amazons.train.pipeline import EvaluationError, steps_for_positions
from amazons.train.replay import GameSamples
from amazons.train.run import Run
from amazons.train.selfplay import play_games

# Small enough for CI: a couple of games per iteration, few simulations, tiny evaluation.
SMOKE = [
    "games_per_iteration=4",
    "selfplay.num_actors=2",
    "selfplay.games_in_parallel=2",
    "selfplay.search.simulations=8",
    "selfplay.start_jitter_s=0",
    "min_steps=3",
    "max_steps=3",
    "train_batch_size=32",
    "eval.games=2",
    "eval.simulations=4",
    "eval.processes=1",
    "eval.opponents=previous,random",
]


def test_config_round_trips_through_json_and_overrides_follow_types():
    config = apply_overrides(preset_config("cpu"), [
        "net.blocks=3", "selfplay.search.simulations=12", "optim.lr=0.01",
        "selfplay.search.root_noise=false", "eval.opponents=random,greedy"])
    assert config.net.blocks == 3 and config.selfplay.search.simulations == 12
    assert config.optim.lr == 0.01 and config.selfplay.search.root_noise is False
    assert config.eval.opponents == ("random", "greedy")
    restored = config_from_dict(TrainConfig, json.loads(json.dumps(config_to_dict(config))))
    assert restored == config
    assert preset_config("gpu").net.blocks == 20 and preset_config("gpu").net.channels == 256


def test_the_cpu_preset_trains_in_bf16_where_the_cpu_computes_it(tmp_path, monkeypatch):
    """bf16 autocast in the learner won at equal wall clock on a CPU with AVX-512 BF16
    (docs/experiments.md); elsewhere the preset keeps "auto" (fp32 on a CPU)."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n")
    assert train_config.cpu_has_native_bf16(str(cpuinfo))
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    assert not train_config.cpu_has_native_bf16(str(cpuinfo))
    assert not train_config.cpu_has_native_bf16(str(tmp_path / "missing"))
    for native, precision in ((True, "bf16"), (False, "auto")):
        monkeypatch.setattr(train_config, "cpu_has_native_bf16", lambda native=native: native)
        assert preset_config("cpu").optim.precision == precision
    assert preset_config("gpu").optim.precision == "auto"


def test_an_older_config_json_loads_with_defaults_and_unknown_fields_are_named():
    # The config of the model shipped before the solver, Gumbel, playout-cap and Ray fields and
    # the evaluation's search settings (tests/data): they take their defaults.
    stored = json.loads((Path(__file__).parent / "data" / "config_before_ray.json").read_text())
    assert "ray" not in stored and "search" not in stored["eval"]
    config = config_from_dict(TrainConfig, stored)
    assert config.selfplay.search.simulations == stored["selfplay"]["search"]["simulations"]
    assert (config.eval.simulations == stored["eval"]["simulations"]
            and config.eval.search == EvalConfig().search)
    assert config.optim.betas == (0.9, 0.999)
    with pytest.raises(ConfigError,
                       match=r"TrainConfig\.selfplay\.search: unknown fields \['simulation'\]"):
        config_from_dict(TrainConfig, {"selfplay": {"search": {"simulation": 3}}})


@pytest.mark.parametrize(
    ("override", "message"),
    [("net.depth=3", "no field 'depth'"), ("net.blocks=three", "expected a int"),
     ("iterations", "KEY=VALUE"), ("selfplay=3", "is a group")],
)
def test_bad_overrides_name_the_problem(override, message):
    with pytest.raises(ValueError, match=message):
        apply_overrides(preset_config("cpu"), [override])


def test_overrides_are_validated_once_after_all_are_applied():
    base = preset_config("cpu")  # min_steps 20, max_steps 2000
    for order in (["max_steps=2", "min_steps=1"], ["min_steps=1", "max_steps=2"]):
        config = apply_overrides(base, order)
        assert (config.min_steps, config.max_steps) == (1, 2)
    with pytest.raises(ValueError, match="min_steps <= max_steps"):
        apply_overrides(base, ["max_steps=5"])
    with pytest.raises(ValueError, match="simulations"):
        apply_overrides(base, ["selfplay.search.simulations=0"])


def _saved_learner(tmp_path, net_config, optim_config):
    learner = Learner(PolicyValueNet(net_config), optim_config, seed=0)
    rng = np.random.default_rng(0)
    batch = SampleBatch.concatenate([play_uniform_samples(seed) for seed in range(2)])
    for _ in range(3):
        learner.train_step(sample_batch(batch, 16, rng))
    path = tmp_path / "latest.pt"
    save_checkpoint(path, learner)
    return learner, path


def play_uniform_samples(seed: int) -> SampleBatch:
    """One short uniform-search game as training samples."""
    games = []
    search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=8, leaves_per_game=4),
                           seed=seed)
    play_games(search, 1, lambda samples, moves, adjudication: games.append(samples))
    samples = games[0]
    return SampleBatch(samples.positions, samples.label_moves, samples.label_policy,
                       samples.label_offsets, samples.z.astype(np.float32))


def test_resume_applies_optimizer_and_schedule_overrides(tmp_path):
    net = net_config("tiny")
    old = OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant", weight_decay=1e-4)
    learner, path = _saved_learner(tmp_path, net, old)
    new = dataclasses.replace(old, lr=5e-4, weight_decay=3e-4, schedule="cosine", total_steps=10,
                              min_lr_ratio=0.5)
    resumed, _ = resume_learner(path, net, new)
    assert resumed.step == learner.step == 3 and resumed.config == new
    for have, want in zip(resumed.model.state_dict().values(), learner.model.state_dict().values(),
                          strict=True):
        assert torch.equal(have, want)
    decay, no_decay = resumed.optimizer.param_groups
    assert decay["weight_decay"] == 3e-4 and no_decay["weight_decay"] == 0.0
    assert decay["lr"] == pytest.approx(5e-4 * learning_rate_factor(3, new))
    resumed.train_step(sample_batch(play_uniform_samples(5), 8, np.random.default_rng(1)))
    assert decay["lr"] == pytest.approx(5e-4 * learning_rate_factor(4, new))
    # The optimizer's moments came back: the first step after resuming is not a fresh AdamW step.
    assert resumed.optimizer.state_dict()["state"][0]["step"] == 4


def test_resume_refuses_a_new_network_shape_naming_the_field(tmp_path):
    net = net_config("tiny")
    _, path = _saved_learner(tmp_path, net, OptimConfig())
    with pytest.raises(CheckpointError, match="net.blocks"):
        resume_learner(path, dataclasses.replace(net, blocks=net.blocks + 1), OptimConfig())
    with pytest.raises(CheckpointError, match="net.policy_head"):
        resume_learner(path, dataclasses.replace(net, policy_head="factorized"), OptimConfig())
    with pytest.raises(CheckpointError, match="net.arrow_source"):
        resume_learner(path, dataclasses.replace(net, arrow_source=True), OptimConfig())


def test_resume_command_refuses_a_network_change_before_touching_the_run(tmp_path, capsys):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "latest.pt").write_bytes(b"not read before the config check")
    text = json.dumps(config_to_dict(preset_config("cpu")), indent=2) + "\n"
    (run_dir / "config.json").write_text(text)
    with pytest.raises(SystemExit, match="net.blocks: 2 -> 3"):
        main(["--run-dir", str(run_dir), "--resume", "net.blocks=3", "optim.lr=0.01"])
    assert (run_dir / "config.json").read_text() == text


def test_init_starts_a_new_run_from_a_models_weights_with_a_fresh_optimizer(tmp_path):
    net = net_config("tiny")
    learner, checkpoint = _saved_learner(tmp_path, net, OptimConfig())
    model_file = save_model(tmp_path / "model.pt", learner.model)
    for source in (checkpoint, model_file):  # a learner checkpoint or a model file
        args = argparse.Namespace(run_dir=tmp_path / f"run-{source.stem}", resume=False,
                                  preset="cpu", overrides=[], iterations=1, init=str(source))
        config = resolve_config(args)
        assert config.init_model == str(source.resolve())
        run = Run(config, args.run_dir, resume=False)
        try:
            assert run.learner.step == 0 and not run.learner.optimizer.state_dict()["state"]
            for have, want in zip(run.learner.model.state_dict().values(),
                                  learner.model.state_dict().values(), strict=True):
                assert torch.equal(have.cpu(), want)
        finally:
            run.close()


def test_init_reads_its_model_once_and_resume_its_checkpoint_once(tmp_path, monkeypatch):
    """A new run from `--init` reads and verifies the model file once (it took its weights and
    its network's config in two reads), and a resumed run its checkpoint once."""
    learner, checkpoint = _saved_learner(tmp_path, net_config("tiny"), OptimConfig())
    reads: list[Path] = []
    real_load = torch.load

    def counting_load(source, *args, **kwargs):  # the real loader, counted
        reads.append(Path(source).resolve())
        return real_load(source, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    args = argparse.Namespace(run_dir=tmp_path / "run", resume=False, preset="cpu", overrides=[],
                              iterations=1, init=str(checkpoint))
    config = resolve_config(args)
    run = Run(config, args.run_dir, resume=False)
    try:
        run.checkpoint()
    finally:
        run.close()
    assert reads.count(checkpoint.resolve()) == 1, reads
    resumed = Run(config, args.run_dir, resume=True)
    resumed.close()
    assert reads.count(run.checkpoint_path.resolve()) == 1, reads


def test_init_refuses_another_network_a_missing_file_and_resume(tmp_path, capsys):
    net = net_config("tiny")
    learner, _ = _saved_learner(tmp_path, net, OptimConfig())
    model_file = save_model(tmp_path / "model.pt", learner.model)
    with pytest.raises(CheckpointError, match=r"net.blocks: checkpoint 2, run 1"):  # a shrink
        init_weights_from(model_file, PolicyValueNet(dataclasses.replace(net, blocks=1)))
    with pytest.raises(SystemExit, match="no such model file"):
        main(["--run-dir", str(tmp_path / "a"), "--init", str(tmp_path / "missing.pt")])
    with pytest.raises(SystemExit, match="--init starts a new run"):
        resolve_config(argparse.Namespace(run_dir=tmp_path / "b", resume=True, preset=None,
                                          overrides=[], iterations=None, init=str(model_file)))
    assert not (tmp_path / "a").exists()


def test_backends_are_found_by_name_and_refuse_what_they_do_not_run(tmp_path, capsys):
    assert load_backend("local") is Run and "local" in backend_names()
    with pytest.raises(ValueError, match="no backend named 'nowhere'.*local"):
        load_backend("nowhere")
    with pytest.raises(ValueError, match="joins no cluster.*'auto'"):
        Run(preset_config("cpu"), tmp_path / "refused", resume=False, address="auto")
    with pytest.raises(SystemExit):
        main(["--run-dir", str(tmp_path / "run"), "--address", "auto", "--iterations", "1"])
    assert "joins no cluster" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists() and not (tmp_path / "run" / "config.json").exists()


def test_training_batches_show_each_position_in_many_orientations(tmp_path):
    # The run seeds the replay buffer and the learner with the same integer; their generators must
    # still be independent, or each position would always get the symmetry its buffer index implies.
    run = Run(preset_config("cpu"), tmp_path / "run", resume=False)
    try:
        games: list[GameSamples] = []
        search = BatchedSearch(UniformEvaluator(), SearchConfig(simulations=4, node_capacity=64,
                                                                edge_capacity=1 << 15), num_games=2)
        play_games(search, 2, lambda samples, moves, adjudication: games.append(samples))
        run.replay.add(GameSamples.concatenate(games))
        orientations: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
        for _ in range(60):  # the draws of `Run.train`
            drawn = SampleBatch(**run.replay.sample(64))
            turned = augment_batch(drawn, run.learner.rng)
            for original, shown in zip(drawn.positions.tolist(), turned.positions.tolist(),
                                       strict=True):
                orientations.setdefault(tuple(original), set()).add(tuple(shown))
    finally:
        run.close()
    assert np.mean([len(shown) for shown in orientations.values()]) > 4


def test_elo_ladder_recovers_known_differences():
    matches = [{"a": "x", "b": "random", "wins_a": 750, "games": 1000},
               {"a": "y", "b": "x", "wins_a": 500, "games": 1000}]
    ratings = fit_elo(matches)
    assert ratings["random"] == 0
    assert abs(ratings["x"] - 191) < 5  # 75% score is +191 Elo
    assert abs(ratings["y"] - ratings["x"]) < 5
    sweep = fit_elo([{"a": "z", "b": "random", "wins_a": 10, "games": 10}])
    assert 200 < sweep["z"] < 1000  # finite after a clean sweep


def shm_segments(pid: int | None = None) -> set[str]:
    """The shared-memory segments that process `pid`'s servers created and still hold (default:
    this process's); named after their owner, so other programs' segments do not count."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(segment_prefix(pid))}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_two_iterations_end_to_end_then_resume(tmp_path, mode):
    run_dir = tmp_path / "run"
    before = shm_segments()
    assert main(["--preset", "cpu", "--run-dir", str(run_dir), "--iterations", "2",
                 "--no-progress", *SMOKE, f"pipeline.mode={mode}"]) == 0
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]
    first = json.loads(lines[0])
    assert first["selfplay/games"] == 4 and first["train/steps"] == 3
    if mode == "async":
        assert first["pipeline/samples_per_position"] == pytest.approx(
            3 * 32 / first["selfplay/positions"])
        for key in ("pipeline/learner_wait_s", "pipeline/actor_throttle_s",
                    "pipeline/weights_lag_versions", "pipeline/weights_lag_steps"):
            assert key in first
        # The evaluation of iteration 2 ran beside the last iteration's work and joined its line.
        assert json.loads(lines[1])["eval/iteration"] == 2
    assert (run_dir / "checkpoints" / "latest.pt").exists()
    assert sorted(path.name for path in (run_dir / "models").iterdir()) == [
        "model-0000.pt", "model-0001.pt", "model-0002.pt"]
    chunks = sorted((run_dir / "replay").glob("chunk-*.npz"))
    assert chunks and any((run_dir / "tensorboard").iterdir())
    assert json.loads((run_dir / "elo.json").read_text())["ratings"]["random"] == 0
    records = (run_dir / "games" / "selfplay.txt").read_text().count("[Event ")
    # async: games that ended after the last iteration's 4 are kept too (replay and records)
    assert records == 8 if mode == "sync" else records >= 8
    state = json.loads((run_dir / "state.json").read_text())
    assert state["trained_games"] == 8  # the games of the two iterations; later ones are the debt
    in_replay = sum(int(np.load(path)["game_offsets"].shape[0] - 1) for path in chunks)
    assert in_replay == records  # async: the games in progress at the end were played out and kept
    # Resumed with a new learning rate and schedule: the learner trains with them.
    assert main(["--run-dir", str(run_dir), "--iterations", "3", "--resume", "--no-progress",
                 "optim.lr=0.0007", "optim.warmup_steps=0", "optim.schedule=constant"]) == 0
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]
    assert json.loads(lines[-1])["train/lr"] == pytest.approx(0.0007)
    assert json.loads((run_dir / "config.json").read_text())["optim"]["lr"] == 0.0007
    assert len(list((run_dir / "replay").glob("chunk-*.npz"))) > len(chunks)
    assert json.loads(lines[-1])["train/learner_step"] == 9
    assert shm_segments() == before


@pytest.mark.slow
def test_one_iteration_with_the_arrow_source_term(tmp_path):
    """`net.arrow_source=true` through the main command (the async pipeline, as an ablation arm
    runs it): self-play on its priors with weights published to the actors, training on its loss,
    evaluation, checkpoints with the term's weights."""
    run_dir = tmp_path / "run"
    assert main(["--preset", "cpu", "--run-dir", str(run_dir), "--iterations", "1",
                 "--no-progress", *SMOKE, "net.arrow_source=true"]) == 0
    assert json.loads((run_dir / "config.json").read_text())["net"]["arrow_source"] is True
    first = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert first["selfplay/games"] == 4 and first["train/steps"] == 3
    assert all(np.isfinite(first[f"train/{name}"])
               for name in ("policy_move", "policy_arrow", "policy_entropy"))
    model = load_model_for_play(run_dir / "models" / "model-0001.pt")
    assert model.config.arrow_source and "policy_head.arrow_source.weight" in model.state_dict()


def test_a_stop_during_a_checkpoint_is_taken_once_the_checkpoint_is_whole(tmp_path):
    """SIGTERM (through the main job's handler) and Ctrl-C arriving while the checkpoint is written
    wait for it: the file is complete, then the stop's KeyboardInterrupt comes."""
    learner = Learner(PolicyValueNet(net_config("tiny")), OptimConfig())
    stopped: list[int] = []
    previous = train_signals.stop_on_sigterm(stopped)
    # Python's own Ctrl-C handler, as in the main job (an xdist worker starts with SIGINT ignored)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            path = tmp_path / f"checkpoint-{signum}.pt"
            with pytest.raises(KeyboardInterrupt):
                with train_signals.signals_deferred():
                    os.kill(os.getpid(), signum)
                    time.sleep(0.05)  # an undeferred handler would have run by now
                    save_checkpoint(path, learner, {"iteration": 1})
                pytest.fail("the stop did not come after the block")
            resume_learner(path, net_config("tiny"), OptimConfig())  # whole: its digest holds
        assert stopped == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _default_sigint() -> None:
    """Give the child Python's Ctrl-C handling even when pytest runs as a background job (whose
    shell starts it with SIGINT ignored, a disposition every child would inherit)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "whole_group", "mode"),
                         [(signal.SIGINT, True, "async"), (signal.SIGTERM, False, "async"),
                          (signal.SIGTERM, False, "sync")],
                         ids=["ctrl-c", "sigterm", "sigterm-sync"])
def test_a_signal_stops_every_process_and_resume_continues(tmp_path, signum, whole_group, mode):
    # Ctrl-C in a terminal signals the whole process group; `kill PID` only the main process,
    # whose actors and server must then be stopped by the main job itself. In the async mode an
    # evaluation (every iteration here) is running beside self-play when the signal comes.
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "amazons.train", "--preset", "cpu", "--run-dir", str(run_dir),
               "--iterations", "50", "--no-progress", *SMOKE, f"pipeline.mode={mode}",
               "eval.every=1", "eval.processes=2"]
    process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 240
    while not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text():
        assert time.monotonic() < deadline and process.poll() is None, "no iteration finished"
        time.sleep(0.5)
    if whole_group:
        os.killpg(process.pid, signum)
    else:
        os.kill(process.pid, signum)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, output
    assert "--resume" in output
    assert "Traceback" not in output, output  # no process, actor or arena worker, prints one
    # Helper processes (resource tracker, forkserver) notice their parent is gone within moments.
    for _ in range(40):
        leftovers = subprocess.run(["ps", "-o", "pid,args", "--no-headers", "-g", str(process.pid)],
                                   capture_output=True, text=True).stdout.strip()
        if not leftovers:
            break
        time.sleep(0.25)
    assert leftovers == "", f"orphan processes: {leftovers}"
    assert shm_segments(process.pid) == set()
    if signum == signal.SIGTERM and mode == "async":
        # Resumed once, after `kill PID` in the async mode (how a scheduler or
        # `benchmarks/ablation.py` stops a run): SIGTERM and Ctrl-C take the same way out (a
        # KeyboardInterrupt), and the async stop is the one that leaves games in flight, whose
        # steps the resumed run owes; the sync mode's resume is tested after a normal end
        # (test_two_iterations_end_to_end_then_resume). The resumed iteration runs without its
        # evaluation: the stop and the resume are under test here.
        finished = len((run_dir / "metrics.jsonl").read_text().splitlines())
        assert main(["--run-dir", str(run_dir), "--iterations", str(finished + 1), "--resume",
                     "--no-progress", "eval.every=0"]) == 0
        assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == finished + 1


@pytest.mark.slow
def test_a_failing_evaluation_beside_self_play_stops_the_run_with_its_error(tmp_path, monkeypatch):
    def broken(self, iteration):
        raise FileNotFoundError(f"no model for iteration {iteration}")

    monkeypatch.setattr(Run, "evaluate", broken)
    before = shm_segments()
    with pytest.raises(EvaluationError, match="evaluation of iteration 1 failed") as caught:
        main(["--preset", "cpu", "--run-dir", str(tmp_path / "run"), "--iterations", "3",
              "--no-progress", *SMOKE, "eval.every=1"])
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    assert shm_segments() <= before


def uniform_games(count: int, seed: int = 0) -> list[tuple[GameSamples, GameRecord]]:
    """`count` short uniform-search games with their records."""
    games: list[tuple[GameSamples, GameRecord]] = []
    search = BatchedSearch(UniformEvaluator(),
                           SearchConfig(simulations=4, node_capacity=64, edge_capacity=1 << 15),
                           num_games=2, seed=seed)
    play_games(search, count, lambda samples, moves, adjudication: games.append(
        (samples, GameRecord.from_game(
            moves, "a", "b", winner=None if adjudication is None else adjudication.winner))))
    return games


def write_legacy_checkpoint(run_dir: Path, config: TrainConfig) -> None:
    """Rewrite the checkpoint of the run of `config` as runs wrote it before checkpoints carried
    the run state: the same learner, `extra` only the iteration and the lineage."""
    path = run_dir / "checkpoints" / "latest.pt"
    learner, extra = resume_learner(path, config.net, config.optim)
    save_checkpoint(path, learner, {"iteration": extra["iteration"], "lineage": extra["lineage"]})


def test_games_a_stopped_run_left_in_the_replay_are_owed_steps_after_resume(tmp_path):
    config = apply_overrides(preset_config("cpu"), [*SMOKE, "replay_chunk_games=100",
                                                    "replay_chunk_seconds=600"])
    run_dir = tmp_path / "run"
    (first, first_record), (second, second_record), (third, third_record) = uniform_games(3)
    run = Run(config, run_dir, resume=False)
    try:
        run.replay.add(first, [first_record])
        run.iteration, run.trained_games = 1, 1  # iteration 1 held the first game
        run.checkpoint()
        run.replay.add(second, [second_record])  # games of iteration 2, then a stop
        run.replay.add(third, [third_record])
    finally:
        run.close()  # what a stop by a signal runs: the waiting batch is written
    assert (run_dir / "games" / "selfplay.txt").read_text().count("[Event ") == 3
    resumed = Run(config, run_dir, resume=True)
    try:
        assert resumed.trained_games == 1 and resumed.replay.next_game == 3
        budget = resumed.step_budget()
        debt = second.num_positions + third.num_positions
        assert budget.current.games == 2 and budget.current.positions == debt
        assert budget.owed() == steps_for_positions(debt, config.sample_reuse,
                                                    config.train_batch_size, 0, config.max_steps)
        assert resumed.take_debt() is None  # counted once
    finally:
        resumed.close()
    # A run from before `trained_games` was kept (and before checkpoints carried the run state)
    # resumes without a debt.
    state = json.loads((run_dir / "state.json").read_text())
    del state["trained_games"]
    (run_dir / "state.json").write_text(json.dumps(state))
    write_legacy_checkpoint(run_dir, config)
    legacy = Run(config, run_dir, resume=True)
    try:
        assert legacy.take_debt() is None and legacy.trained_games == 3
    finally:
        legacy.close()


def test_an_evaluation_hands_over_all_its_matches_at_once_beside_the_checkpoint(tmp_path,
                                                                                monkeypatch):
    blocked, release = threading.Event(), threading.Event()

    def result(wins: int, hold: bool) -> ArenaResult:
        class Held(ArenaResult):  # the evaluation thread is held while it reads this result
            @property
            def games(self) -> int:
                if hold:
                    blocked.set()
                    release.wait(30)
                return 2

            @games.setter
            def games(self, value: int) -> None:
                pass

        return Held("new", "old", 2, wins, 2 - wins, wins, 0, wins / 2, 0.0, -1.0, 1.0, 0.1)

    class Matches:  # the arena's part of an evaluation: results at once
        stats: dict = {}

        def __init__(self, *args: object) -> None:
            pass

        def __enter__(self) -> Matches:
            return self

        def __exit__(self, *exc_info: object) -> None:
            pass

        def run(self, *args: object, **kwargs: object) -> dict[str, ArenaResult]:
            return {"previous": result(1, False), "random": result(2, True)}

    monkeypatch.setattr(train_module, "Evaluation", Matches)
    run = Run(apply_overrides(preset_config("cpu"), SMOKE), tmp_path / "run", resume=False)
    try:
        thread = threading.Thread(target=run.evaluate, args=(1,))
        thread.start()
        assert blocked.wait(30)
        run.checkpoint()  # while the evaluation is between its two matches
        assert json.loads((tmp_path / "run" / "state.json").read_text())["matches"] == []
        release.set()
        thread.join(30)
        run.checkpoint()
    finally:
        release.set()
        run.close()
    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert [(match["b"], match["wins_a"]) for match in state["matches"]] == [
        ("iter-0000", 1), ("random", 2)]
    ladder = json.loads((tmp_path / "run" / "elo.json").read_text())
    assert ladder["matches"] == state["matches"] and ladder["ratings"]["random"] == 0
    assert not list((tmp_path / "run").glob(".*.tmp"))  # written through a temporary file, renamed


# ------------------------------------------------------------------------------------------------
# Resume after a hard kill: each state a kill can leave on disk, from a real run's files


@pytest.fixture(scope="module")
def stopped_runs(tmp_path_factory) -> tuple[Path, Path]:
    """A real run's directory after iteration 1, and the same run resumed through iteration 2
    (the preset's async pipeline, smoke-sized)."""
    root = tmp_path_factory.mktemp("stopped")
    finished = root / "finished"
    assert main(["--preset", "cpu", "--run-dir", str(finished), "--iterations", "1",
                 "--no-progress", *SMOKE, "eval.every=0"]) == 0
    first = shutil.copytree(finished, root / "first")
    assert main(["--run-dir", str(finished), "--iterations", "2", "--resume",
                 "--no-progress"]) == 0
    return first, finished


def _state(run_dir: Path) -> dict:
    return json.loads((run_dir / "state.json").read_text())


def _config(run_dir: Path) -> TrainConfig:
    return config_from_dict(TrainConfig, json.loads((run_dir / "config.json").read_text()))


def _resumed(run_dir: Path) -> Run:
    return Run(_config(run_dir), run_dir, resume=True)


@pytest.mark.slow
def test_a_kill_between_the_checkpoint_and_state_json_resumes_from_the_checkpoint(
        stopped_runs, tmp_path, capsys):
    """Checkpoint of iteration 2, `state.json` of iteration 1 (killed between the two renames):
    the run continues from the checkpoint and never trains iteration 2 again."""
    first, finished = stopped_runs
    run_dir = shutil.copytree(finished, tmp_path / "run")
    shutil.copy(first / "state.json", run_dir / "state.json")
    capsys.readouterr()
    assert main(["--run-dir", str(run_dir), "--iterations", "3", "--resume",
                 "--no-progress"]) == 0
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [1, 2, 3]
    assert lines[-1]["train/learner_step"] == 3 * 3  # three iterations of 3 steps, none twice
    assert _state(run_dir)["iteration"] == 3
    err = capsys.readouterr().err
    assert "state.json holds iteration 1, the checkpoint" in err and "iteration 2" in err, err


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["before-state-json", "before-first-state-json",
                                  "after-model-file", "state-json-ahead"])
def test_resume_reconciles_the_state_a_kill_left(stopped_runs, tmp_path, capsys, kill):
    """Each point a hard kill can stop an iteration's writes (model file, checkpoint,
    `state.json`, in that order; replay chunks at any time) leaves a state that `--resume`
    continues from as one: the checkpoint's iteration and games, `state.json` rewritten to match.
    `state-json-ahead` cannot come from a kill (the checkpoint is written first); a copied file
    can leave it."""
    first, finished = stopped_runs
    checkpoint_of, state_of = {"before-state-json": (finished, first),
                               "before-first-state-json": (first, None),
                               "after-model-file": (first, first),
                               "state-json-ahead": (first, finished)}[kill]
    run_dir = shutil.copytree(checkpoint_of, tmp_path / "run")
    (run_dir / "state.json").unlink()
    if state_of is not None:
        shutil.copy(state_of / "state.json", run_dir / "state.json")
    if kill == "after-model-file":  # iteration 2's model file, not its checkpoint
        shutil.copy(finished / "models" / "model-0002.pt", run_dir / "models")
    expected = _state(checkpoint_of)
    capsys.readouterr()
    resumed = _resumed(run_dir)
    try:
        assert (resumed.iteration, resumed.trained_games) == (expected["iteration"],
                                                             expected["trained_games"])
        assert resumed.learner.step == 3 * expected["iteration"]
        # the games no finished iteration trained on are owed once; none that one did
        debt = resumed.take_debt()
        owed = 0 if debt is None else debt.num_games
        assert owed == resumed.replay.next_game - expected["trained_games"]
    finally:
        resumed.close()
    assert _state(run_dir) == expected
    warned = "killed between writing the two" in capsys.readouterr().err
    assert warned == (kill != "after-model-file")


@pytest.mark.slow
def test_resume_refuses_an_older_checkpoint_ahead_of_state_json_saying_what_to_do(
        stopped_runs, tmp_path, capsys):
    """A checkpoint from before checkpoints carried the run state cannot say which games its
    iteration trained on: resume refuses, naming the model file to start a new run from."""
    first, finished = stopped_runs
    run_dir = shutil.copytree(finished, tmp_path / "run")
    write_legacy_checkpoint(run_dir, _config(run_dir))
    shutil.copy(first / "state.json", run_dir / "state.json")
    with pytest.raises(SystemExit) as stopped:
        main(["--run-dir", str(run_dir), "--iterations", "2", "--resume", "--no-progress"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "state.json holds iteration 1, the checkpoint" in err, err
    assert f"--init {run_dir / 'models' / 'model-0002.pt'} --run-dir NEW_DIR" in err, err
    assert [json.loads(line)["iteration"] for line in
            (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2]
