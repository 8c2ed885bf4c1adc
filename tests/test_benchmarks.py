"""The benchmark runner and the `gpu` suite: without CUDA the suite refuses with a clear message,
its parts run the same code on a CPU with a tiny net, few simulations and a short main job, and
its evaluators are built as the main job builds its server's. `net_option_cost` measures both
networks it compares."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from amazons.neural.model import net_config, resolve_precision
from amazons.neural.served import resolve_device, server_evaluator_factory
from amazons.train import run as train
from amazons.train.config import preset_config

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import net_option_cost  # noqa: E402
import run as runner  # noqa: E402
import suite_gpu  # noqa: E402
import suite_selfplay  # noqa: E402
import suite_train  # noqa: E402

torch.set_num_threads(1)


def test_all_runs_every_suite_but_gpu_which_is_named_explicitly():
    assert "gpu" not in runner.parse_suites("all")
    assert runner.parse_suites("gpu") == ["gpu"]
    assert runner.parse_suites("nn,gpu") == ["nn", "gpu"]
    with pytest.raises(SystemExit, match="unknown suite"):
        runner.parse_suites("tpu")


def test_the_train_suite_reports_the_async_balance_after_the_first_iteration():
    lines = [{"iteration_seconds": 50.0, "pipeline/actor_throttle_s": 0.0,
              "pipeline/learner_wait_s": 30.0},  # the first: waits for its first games
             {"iteration_seconds": 40.0, "pipeline/actor_throttle_s": 10.0,
              "pipeline/learner_wait_s": 0.0},
             {"iteration_seconds": 60.0, "pipeline/actor_throttle_s": 20.0,
              "pipeline/learner_wait_s": 3.0}]
    shares = suite_train._balance("async.native", "async", lines[1:])
    assert shares == pytest.approx({"train.async.native.actor_throttle_share": 0.3,
                                    "train.async.native.learner_wait_share": 0.03})
    assert suite_train._balance("sync.native", "sync", lines[1:]) == {}


@pytest.mark.slow
def test_net_option_cost_compares_the_two_networks(capsys):
    assert net_option_cost.main(["--preset", "tiny", "--rounds", "1", "net.arrow_source=true"]) == 0
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:]
            for line in capsys.readouterr().out.splitlines()}
    assert rows["weights"] == ["48,694", "49,222", "+528 |"]
    assert all(float(rows[name][0]) > 0 and float(rows[name][1]) > 0 for name in
               ("evaluate b1 (ms)", "evaluate b256 (ms)", "npnet b1 (ms)", "train step b256 (ms)"))
    with pytest.raises(SystemExit):
        net_option_cost.main(["optim.lr=0.1"])  # not a network field


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the suite would run")
def test_suite_gpu_without_cuda_exits_non_zero_and_says_why():
    result = subprocess.run([sys.executable, str(BENCHMARKS / "run.py"), "--suite", "gpu"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "suite gpu needs a CUDA device" in result.stderr
    assert "torch.cuda.is_available() is False" in result.stderr
    assert "== suite gpu" not in result.stdout  # nothing was measured


@pytest.mark.slow
def test_suite_gpu_parts_measure_the_production_paths_on_a_cpu():
    device = torch.device("cpu")
    inference = suite_gpu.inference(device, preset="tiny", precision="fp32", batches=(8, 24),
                                    window_s=0.05)
    for batch in (8, 24):
        assert inference[f"gpu.inference.b{batch}.forward_positions_per_s"] > 0
        assert inference[f"gpu.inference.b{batch}.evaluate_positions_per_s"] > 0
    assert inference["gpu.flops_per_position"] > 0
    assert not any(key.endswith("flop_fraction") for key in inference)  # no known peak on a CPU

    selfplay = suite_gpu.selfplay(device, preset="tiny", actors=3, games_in_parallel=2,
                                  simulations=8, batch=16, games=6, standalone_s=0.3)
    assert selfplay["gpu.selfplay.games"] == 6 and selfplay["gpu.selfplay.actors"] == 3
    assert 0 < selfplay["gpu.selfplay.mean_batch_fill"] <= 1
    assert (selfplay["gpu.selfplay.sims_per_s"] > 0
            and selfplay["gpu.selfplay.evals_ratio_to_standalone"] > 0)
    assert selfplay["gpu.selfplay.mean_game_plies"] > 0

    published = suite_gpu.weights(device, preset="small", precision="fp32", batch=16, repeats=2)
    assert published["gpu.weights.publish_s"] > 0 and published["gpu.weights.load_s"] > 0
    assert published["gpu.weights.bytes"] > 4 * 300_000  # the small net's floats

    learner = suite_gpu.learner(device, preset="cpu", window=3000, steps=3, batch_size=32)
    assert learner["gpu.learner.samples_per_s"] > 0 and learner["gpu.learner.batch"] == 32

    run = suite_gpu.preset_run("cpu", seconds=300.0, iterations=2, overrides=(
        "games_per_iteration=4", "selfplay.games_in_parallel=2", "selfplay.search.simulations=8",
        "selfplay.start_jitter_s=0", "min_steps=2", "max_steps=4", "eval.every=0"))
    # the run ends after its two iterations (SIGTERM only at the 300 s bound); both read back
    assert run["gpu.preset.iterations"] == 2
    assert 0 < run["gpu.preset.first_iteration_s"] <= run["gpu.preset.run_s"]
    assert run["gpu.preset.positions_per_s"] > 0 and run["gpu.preset.samples_per_s"] > 0
    assert 0 <= run["gpu.preset.learner_wait_share"] <= 1


class Captured(Exception):
    """Raised by a stand-in InferenceServer once it has the factory it was given."""


def test_the_main_job_and_the_benchmarks_build_the_same_server_evaluator(tmp_path, monkeypatch):
    """Each builds its server's evaluator factory through `server_evaluator_factory`: for the gpu
    preset all have the preset's batch as their largest bucket, one precision and one device (the
    Ray node's: `test_distributed.py`)."""
    config = dataclasses.replace(preset_config("gpu"), net=net_config("tiny"), device="cpu")
    factories = {}

    def capturing(name: str):
        def server(factory, *args, **kwargs):
            # suite_selfplay records leaves around it
            factories[name] = getattr(factory, "factory", factory)
            raise Captured
        return server

    monkeypatch.setattr(train, "InferenceServer", capturing("main job"))
    with pytest.raises(Captured):
        train.Run(config, tmp_path / "run", resume=False).run(progress=False)
    monkeypatch.setattr(suite_selfplay, "InferenceServer", capturing("suite selfplay"))
    with pytest.raises(Captured):
        # the gpu preset's actors, lanes and batch
        suite_gpu.selfplay(torch.device("cpu"), preset="tiny")
    built = []

    def spy(*args):
        built.append(server_evaluator_factory(*args))
        return built[-1]

    monkeypatch.setattr(suite_gpu, "server_evaluator_factory", spy)
    suite_gpu.inference(torch.device("cpu"), preset="tiny", precision="auto", batches=(256, 1024),
                        window_s=0.01)
    factories["suite gpu inference"] = built[0]

    assert set(factories) == {"main job", "suite selfplay", "suite gpu inference"}
    for name, factory in factories.items():
        assert factory.max_batch == config.inference.inference_batch_size == 1024, name
        assert resolve_device(factory.device) == "cpu", name
        assert (resolve_precision(factory.dtype, "cpu")
                == resolve_precision(config.inference_dtype, "cpu")), name
        assert factory.cuda_graphs is None, name  # graphs exactly on CUDA, everywhere
