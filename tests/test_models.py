"""The model shipped in the package: present, small, loadable, documented, and playable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amazons.models import default_checkpoint_path, default_model_info, default_model_path

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_model_is_small_loadable_and_described():
    path = default_checkpoint_path()
    assert path.stat().st_size <= 10 * 1024 * 1024
    info = default_model_info()
    for key in ("command", "training_wall_clock_s", "hardware", "config", "iterations"):
        assert key in info, key
    from amazons.config import config_from_dict
    from amazons.neural.checkpoint import load_model_for_play
    from amazons.neural.model import NetConfig
    from amazons.neural.numpy_net import load_model

    model = load_model_for_play(path)
    assert model.config == config_from_dict(NetConfig, info["config"]["net"])
    exported = load_model(default_model_path())
    assert exported.config == info["config"]["net"]
    assert default_model_path().stat().st_size <= 10 * 1024 * 1024


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
