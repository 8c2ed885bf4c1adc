"""The model shipped in the package: present, small, loadable, documented, and playable; the
candidate model kept outside the package, where a run can still start from it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from amazons.models import default_checkpoint_path, default_model_info, default_model_path

ROOT = Path(__file__).resolve().parents[1]
# The candidates a later run continues with --init (models/candidates/, each with its record).
CANDIDATES = [ROOT / "models" / "candidates" / name
              for name in ("issue30b-0411.pt", "issue38-s96-0058.pt")]


@pytest.mark.parametrize("size", [8, 10])
def test_the_shipped_model_is_small_loadable_and_described(size):
    path = default_checkpoint_path(size)
    assert path.stat().st_size <= 10 * 1024 * 1024
    info = default_model_info(size)
    for key in ("command", "training_wall_clock_s", "hardware", "config", "iterations"):
        assert key in info, key
    from amazons.boards import board_spec
    from amazons.core.config import config_from_dict
    from amazons.neural.checkpoint import load_checkpoint, load_model_for_play
    from amazons.neural.model import TRAINING_ONLY_FIELDS, NetConfig
    from amazons.neural.numpy_net import load_model

    model = load_model_for_play(path)
    assert model.config == config_from_dict(NetConfig, info["config"]["net"])
    exported = load_model(default_model_path(size))
    # the export leaves out the training-only heads (an older record has no such field)
    assert exported.config == {key: value for key, value in info["config"]["net"].items()
                               if key not in TRAINING_ONLY_FIELDS}
    assert default_model_path(size).stat().st_size <= 10 * 1024 * 1024
    # the model and its record name the board it was trained on (the 8x8 record predates it)
    assert board_spec(info["config"].get("board", "botzone8")).size == size
    assert board_spec(load_checkpoint(path)["extra"].get("board", "botzone8")).size == size


@pytest.mark.slow
def test_the_bot_plays_the_first_move_with_the_default_model():
    result = subprocess.run(
        [sys.executable, "-m", "amazons.botzone", "--model", "default", "--time", "1",
         "--restart-per-turn"],
        input="1\n-1 -1 -1 -1 -1 -1\n", capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    from amazons.board import Board, Move

    move = Move.from_botzone(result.stdout.strip())
    assert move.as_tuple() in {legal.as_tuple() for legal in Board().legal_moves()}
    assert json.loads((ROOT / "amazons" / "models" / "default.json").read_text())["size_bytes"] > 0


@pytest.mark.slow
def test_the_bot_plays_10x10_with_the_shipped_10x10_model():
    result = subprocess.run(
        [sys.executable, "-m", "amazons.botzone", "--board", "standard10", "--model", "default",
         "--simulations", "16", "--restart-per-turn"],
        input="1\n-1 -1 -1 -1 -1 -1\n", capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    from amazons.board import Board, Move

    board = Board(start="standard10")
    assert board.is_legal(Move.from_botzone(result.stdout.strip(), size=10))


def test_the_package_holds_no_model_but_the_shipped_one():
    model_files = sorted(path.relative_to(ROOT).as_posix() for pattern in ("*.pt", "*.npz")
                         for path in (ROOT / "amazons").rglob(pattern))
    assert model_files == ["amazons/models/default.npz", "amazons/models/default.pt",
                           "amazons/models/standard10.npz", "amazons/models/standard10.pt"]


@pytest.mark.parametrize(("overrides", "shipped"), [([], "default.pt"),
                                                     (["board=standard10"], "standard10.pt")])
def test_init_default_starts_from_the_shipped_model_of_the_run_s_board(tmp_path, overrides,
                                                                       shipped):
    from amazons.train.command import resolve_config

    args = argparse.Namespace(init="default", resume=False, preset="cpu",
                              run_dir=tmp_path / "run", iterations=None, overrides=overrides)
    assert Path(resolve_config(args).init_model) == ROOT / "amazons" / "models" / shipped


@pytest.mark.parametrize("candidate", CANDIDATES, ids=lambda path: path.stem)
def test_the_candidate_model_starts_a_run_from_outside_the_package(tmp_path, monkeypatch,
                                                                   candidate):
    import torch

    from amazons.core.config import config_from_dict
    from amazons.neural.checkpoint import init_weights_from, load_model_for_play
    from amazons.neural.model import NetConfig, PolicyValueNet
    from amazons.train.command import resolve_config

    torch.set_num_threads(1)
    monkeypatch.chdir(ROOT)  # the documented command, run from the repository's root
    record = json.loads(candidate.with_suffix(".json").read_text())
    args = argparse.Namespace(init=str(candidate.relative_to(ROOT)), resume=False, preset="cpu",
                              run_dir=tmp_path / "run", iterations=None, overrides=[])
    config = resolve_config(args)
    assert Path(config.init_model) == candidate
    model = PolicyValueNet(config_from_dict(NetConfig, record["config"]["net"]))
    init_weights_from(config.init_model, model)
    stored = load_model_for_play(candidate)
    assert model.config == stored.config
    for name, weights in stored.state_dict().items():
        assert torch.equal(model.state_dict()[name], weights), name
