"""The ablation driver (`benchmarks/ablation.py`): arms parsed and checked, equal wall-clock
shares kept across stops, and a real two-arm ablation with its match, end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import ablation  # noqa: E402

TINY = ("games_per_iteration=2 selfplay.num_actors=1 selfplay.games_in_parallel=2 "
        "selfplay.search.simulations=8 selfplay.start_jitter_s=0 min_steps=1 max_steps=2 "
        "train_batch_size=32 eval.every=0")


def test_arms_parse_and_bad_ones_are_named():
    assert ablation.Arm.parse("base") == ablation.Arm("base", ())
    assert ablation.Arm.parse("cap=selfplay.full_search_prob=0.25 seed=3") == ablation.Arm(
        "cap", ("selfplay.full_search_prob=0.25", "seed=3"))
    for text, message in (("=x=1", "NAME a plain word"), ("../up", "NAME a plain word"),
                          ("cap=selfplay.full_search_prob",
                           "'selfplay.full_search_prob' is not KEY=VALUE")):
        with pytest.raises(ValueError, match=message):
            ablation.Arm.parse(text)


def test_the_command_refuses_a_runs_dir_in_the_repository_and_duplicate_arms(tmp_path, capsys):
    with pytest.raises(SystemExit):
        ablation.main(["--runs-dir", str(BENCHMARKS / "runs"), "--arm", "base", "--minutes", "1"])
    assert "outside the repository" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ablation.main(["--runs-dir", str(tmp_path), "--arm", "a", "--arm", "a=seed=1",
                       "--minutes", "1"])
    assert "arm names must differ" in capsys.readouterr().err


def test_an_arm_with_changed_overrides_is_refused_and_a_trained_arm_is_not_trained_again(tmp_path):
    state = {"arms": {"cap": {"overrides": ["seed=1"], "trained_s": 60.0}}}
    path = tmp_path / ablation.STATE_FILE
    ablation._save_state(path, state)
    with pytest.raises(SystemExit, match="was trained with"):
        ablation.train_arm(ablation.Arm("cap", ("seed=2",)), tmp_path, "cpu", 60.0, state, path)
    # owes nothing
    ablation.train_arm(ablation.Arm("cap", ("seed=1",)), tmp_path, "cpu", 60.0, state, path)
    assert not (tmp_path / "cap").exists()


@pytest.mark.slow
def test_two_arms_train_for_equal_shares_and_play_their_match(tmp_path, capsys):
    runs = tmp_path / "runs"
    argv = ["--runs-dir", str(runs), "--minutes", "0.25", "--arm", f"base={TINY}",
            "--arm", f"seeded={TINY} seed=7", "--games", "2", "--simulations", "8",
            "--processes", "1"]
    assert ablation.main(argv) == 0
    state = json.loads((runs / ablation.STATE_FILE).read_text())
    for name in ("base", "seeded"):
        # SIGTERM at its share (15 s), then the shutdown: the bound says the run stopped, on a
        # machine of any speed, not how fast it stopped
        assert 15.0 <= state["arms"][name]["trained_s"] < 180.0
        assert (runs / name / "models" / "model-0000.pt").exists() \
            and (runs / name / "config.json").exists()
    match = json.loads((runs / "matches" / "seeded-vs-base.json").read_text())
    assert match["games"] == 2 and match["wins_a"] + match["wins_b"] == 2
    table = capsys.readouterr().out
    assert "| seeded |" in table and f"{match['wins_a']}/2" in table
    assert ablation.main(argv) == 0  # everything is done: nothing is trained or played again
    assert json.loads((runs / ablation.STATE_FILE).read_text()) == state
