"""The package's layering: no command module loaded where it is not used, no import cycle.

The package root imports the game and the search only, so `python -m amazons.X` runs the command
module once (Python warns "'amazons.X' found in sys.modules after import of package 'amazons'" when
the root imported it first), and self-play actors and the inference server never load the arena, the
player registry or torch beyond what they use.
"""

from __future__ import annotations

import ast
import json
import multiprocessing as mp
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from inference_actors import ModulesReportingFactory, modules_actor

from amazons.neural.checkpoint import save_model
from amazons.neural.model import PolicyValueNet, net_config
from amazons.neural.served import NetworkEvaluatorFactory
from amazons.serving.server import InferenceServer

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ["amazons.arena", "amazons.play", "amazons.botzone", "amazons.train", "amazons.web",
            "amazons.export"]
NOT_IN_WORKERS = {"amazons.arena", "amazons.matches.arena", "amazons.players.factory",
                  "amazons.matches.evaluation", "amazons.train.run", "amazons.train.command",
                  "amazons.play", "amazons.botzone.bot", "amazons.web"}


def run_python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.mark.parametrize("module", COMMANDS)
def test_every_command_runs_once_without_a_runtime_warning(module):
    result = run_python("-W", "error::RuntimeWarning", "-m", module, "--help")
    assert result.returncode == 0, result.stderr
    assert "RuntimeWarning" not in result.stderr and "usage:" in result.stdout


def test_the_root_imports_nothing_above_the_search():
    # The players, the arena and the player registry are imported by their own paths: the root
    # re-exports the game and the search only, and names nothing above them even lazily.
    code = ("import sys, amazons\n"
            "from amazons import BatchedSearch\n"
            "print(sorted(m for m in sys.modules if m.startswith('amazons')))\n"
            "for name in ('run_arena', 'make_player', 'MCTSPlayer'):\n"
            "    try:\n"
            "        getattr(amazons, name)\n"
            "    except AttributeError as error:\n"
            "        print(error)\n")
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    loaded, *missing = result.stdout.splitlines()
    assert set(ast.literal_eval(loaded)) <= {
        "amazons", "amazons._engine", "amazons.board", "amazons.boards", "amazons.engine",
        "amazons.evaluator", "amazons.symmetry", "amazons.mcts", "amazons.mcts_numba",
        "amazons.search_targets"}, loaded
    assert missing == [f"module 'amazons' has no attribute {name!r}"
                       for name in ("run_arena", "make_player", "MCTSPlayer")]


def test_arena_and_netplay_do_not_import_each_other():
    code = ("import sys, amazons.matches.arena, amazons.matches.evaluation\n"
            "assert 'amazons.neural.served' not in sys.modules"
            " and 'torch' not in sys.modules, 'arena'\n")
    assert run_python("-c", code).returncode == 0
    code = ("import sys, amazons.neural.served\n"
            "assert 'amazons.matches.arena' not in sys.modules, 'netplay'\n")
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr


def test_actor_and_server_processes_load_neither_the_arena_nor_the_player_registry(tmp_path):
    torch.manual_seed(0)
    model = save_model(tmp_path / "tiny.pt", PolicyValueNet(net_config("tiny")))
    report = tmp_path / "server-modules.json"
    factory = ModulesReportingFactory(NetworkEvaluatorFactory(str(model), "cpu"), str(report))
    results = mp.get_context("spawn").Queue()
    with InferenceServer(factory, num_clients=1) as server:
        actor = server.start_actor(0, modules_actor, (results,))
        actor_modules = set(results.get(timeout=120))
        actor.join(30)
    server_modules = set(json.loads(report.read_text()))
    assert ("amazons.train.selfplay" in actor_modules
            and "amazons.neural.served" in server_modules)
    assert not actor_modules & NOT_IN_WORKERS, actor_modules & NOT_IN_WORKERS
    assert not server_modules & NOT_IN_WORKERS, server_modules & NOT_IN_WORKERS


def test_the_protocol_the_server_and_the_learner_load_no_numba():
    code = ("import sys, amazons, amazons.evaluator, amazons.serving.server,"
            " amazons.neural.learner, amazons.neural.served\n"
            "assert isinstance(amazons.Evaluator, type)\n"
            "print(sorted(m for m in ('numba', 'llvmlite', 'amazons.mcts') if m in sys.modules))\n"
            "from amazons import BatchedSearch\n"
            "print(BatchedSearch.__module__, 'numba' in sys.modules)\n")
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "amazons.mcts True"]


def test_the_main_job_never_imports_a_backend_beside_the_local_one():
    code = ("import sys, amazons.train, amazons.train.config\n"
            "print(sorted(m for m in sys.modules"
            " if m.startswith('amazons.distributed') or m == 'ray'))\n")
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
