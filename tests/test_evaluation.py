"""Evaluation through the inference servers (`amazons.matches.evaluation`,
`amazons.matches.arena.ArenaWorkers`): real servers, real worker processes, real shared memory, tiny
networks."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch

from amazons import arena
from amazons.core.config import config_from_dict, config_to_dict
from amazons.matches.arena import ArenaError, ArenaWorkers, network_servers, run_arena
from amazons.matches.evaluation import EvalConfig, Evaluation
from amazons.neural.checkpoint import save_model
from amazons.neural.model import PolicyValueNet, net_config
from amazons.players.factory import ROLLOUT_SEARCH
from amazons.serving.server import segment_prefix
from amazons.train.config import apply_overrides, preset_config
from amazons.train.run import Run

torch.set_num_threads(1)


def shm_segments() -> set[str]:
    """Segments this process's servers own (`amazons_PID_...`)."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(segment_prefix())}


def tiny_model(path, seed: int):
    torch.manual_seed(seed)
    return save_model(path, PolicyValueNet(net_config("tiny")))


def test_eval_config_holds_the_search_settings_and_reaches_config_json():
    config = apply_overrides(preset_config("cpu"), ["eval.search.c_puct=2.5",
                                                    "eval.rollout_search.simulations=50"])
    assert config.eval.search.c_puct == 2.5 and config.eval.search.root_noise is False
    assert config.eval.rollout_search == ROLLOUT_SEARCH.replace(simulations=50)
    written = json.loads(json.dumps(config_to_dict(config)))
    assert written["eval"]["search"]["c_puct"] == 2.5
    assert config_from_dict(type(config), written) == config
    with pytest.raises(ValueError, match="eval.games"):
        EvalConfig(games=0)


def test_run_evaluate_plays_through_the_servers_and_keeps_the_elo_ladder(tmp_path):
    before = shm_segments()
    config = apply_overrides(preset_config("cpu"), [
        "eval.games=2", "eval.simulations=8", "eval.processes=2", "eval.opponents=previous,random",
        "eval.search.leaves_per_game=4", "device=cpu"])
    run = Run(config, tmp_path / "run", resume=False)
    try:
        tiny_model(run.model_path(0), seed=1)
        save_model(run.model_path(1), run.learner.model)
        metrics = run.evaluate(1)
    finally:
        run.close()
    assert set(metrics) >= {"eval/win_rate_vs_previous", "eval/win_rate_vs_random", "eval/elo",
                            "eval/server_rows"}
    assert metrics["eval/server_rows"] > 0  # the network players' leaves went through the servers
    assert [(match["a"], match["b"], match["games"]) for match in run.matches] == [
        ("iter-0001", "iter-0000", 2), ("iter-0001", "random", 2)]
    ladder = json.loads((tmp_path / "run" / "elo.json").read_text())
    assert (ladder["ratings"]["random"] == 0
            and ladder["ratings"]["iter-0001"] == metrics["eval/elo"])
    assert shm_segments() <= before


def test_an_evaluation_is_reused_across_iterations_with_published_weights(tmp_path):
    before = shm_segments()
    paths = [tiny_model(tmp_path / f"model-{index}.pt", seed=index) for index in range(3)]
    config = EvalConfig(games=2, simulations=8, processes=2, opponents=("previous", "mcts-rollout"),
                        search=EvalConfig().search.replace(leaves_per_game=4))
    with Evaluation(config, device="cpu") as evaluation:
        first = evaluation.run(paths[1], paths[0], version=1, seed=1)
        workers = evaluation.workers
        pids, slots = workers.pids, workers.slot_names
        # two servers, a slot per worker
        assert set(slots) <= shm_segments() and len(slots) == 2 * config.processes
        second = evaluation.run(paths[2], paths[1], version=2, seed=2)
        assert evaluation.workers is workers and workers.pids == pids  # started once
    for results in (first, second):
        assert sorted(results) == ["mcts-rollout", "previous"]
        assert all(result.games == 2 and len(result.records) == 2 for result in results.values())
    assert second["previous"].player_b == f"mcts-net:{paths[1]}"
    assert evaluation.stats["new"]["rows"] > 0 and evaluation.stats["previous"]["rows"] > 0
    assert not any(os.path.exists(f"/dev/shm/{name}") for name in slots)
    assert shm_segments() <= before


def test_a_dead_arena_worker_is_named_and_nothing_is_left_behind(tmp_path):
    before = shm_segments()
    spec = f"mcts-net:{tiny_model(tmp_path / 'tiny.pt', seed=0)}"
    workers = ArenaWorkers(2, network_servers([spec], device="cpu"))
    workers.start()
    try:
        slots, pids = workers.slot_names, workers.pids
        os.kill(pids[0], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(ArenaError,
                           match=rf"arena worker 0 \(pid {pids[0]}\) exited with code -9"):
            run_arena(spec, "random", 4, simulations=8, workers=workers, served={spec: spec})
        assert time.monotonic() - started < 60
        with pytest.raises(ArenaError, match="failed before"):
            run_arena(spec, "random", 2, simulations=8, workers=workers, served={spec: spec})
    finally:
        workers.close()
    assert not any(os.path.exists(f"/dev/shm/{name}") for name in slots)
    assert shm_segments() <= before
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_arena_command_serves_network_players_with_several_processes(tmp_path, capsys):
    model = tiny_model(tmp_path / "tiny.pt", seed=0)
    result = tmp_path / "result.json"
    assert arena.main([f"mcts-net:{model}", "random", "--games", "2", "--processes", "2",
                       "--simulations", "8", "--device", "cpu", "--json", str(result)]) == 0
    assert json.loads(result.read_text())["games"] == 2
    assert arena.main([f"policy-net:{model}", "random", "--games", "2", "--processes", "2",
                       "--no-server"]) == 0
    assert "won" in capsys.readouterr().out
