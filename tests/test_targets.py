"""Self-play's training targets: the policy target at proven roots (the proof), one set of sigma
constants for a Gumbel run, and the playout cap recording only full searches.

End-to-end tests play through `amazons.selfplay.play_games` with the solver on, from the start
position to the game's end, with the deterministic `HashEvaluator` of tests/test_mcts.py (its
priors are not uniform, so a root whose priors the evaluator never gave is visible).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from amazons.mcts import BatchedSearch, SearchConfig, improved_policy
from amazons.selfplay import SelfPlayConfig
from amazons.train import apply_overrides, preset_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_mcts import HashEvaluator, random_position  # noqa: E402

# ----------------------------------------------------------------------------------------------
# One source of truth for sigma's constants


def test_a_gumbel_run_trains_toward_the_sigma_it_searches_with():
    gumbel = SearchConfig(root="gumbel")
    for field, value in (("target_c_scale", 0.3), ("target_c_visit", 20.0)):
        with pytest.raises(ValueError, match=field):
            SelfPlayConfig(search=gumbel, **{field: value})
    # PUCT does not use sigma: the target's constants are the run's only ones.
    assert SelfPlayConfig(search=SearchConfig(root="puct"), target_c_scale=0.3).target_c_scale == 0.3
    cpu = preset_config("cpu")
    for preset in (cpu, preset_config("gpu")):
        selfplay = preset.selfplay
        assert (selfplay.target_c_visit, selfplay.target_c_scale) == (selfplay.search.c_visit, selfplay.search.c_scale)
    switched = apply_overrides(cpu, ["selfplay.search.root=gumbel"]).selfplay
    assert (switched.target_c_visit, switched.target_c_scale) == (switched.search.c_visit, switched.search.c_scale)
    paper = apply_overrides(cpu, ["selfplay.target_c_scale=0.1", "selfplay.search.root=gumbel",
                                  "selfplay.search.c_scale=0.1"]).selfplay
    assert paper.search.c_scale == paper.target_c_scale == 0.1
    with pytest.raises(ValueError, match="target_c_scale"):
        apply_overrides(cpu, ["selfplay.search.root=gumbel", "selfplay.search.c_scale=0.1"])
    # The label of a Gumbel root is the completed-Q policy its halving ranks moves by.
    search = BatchedSearch(HashEvaluator(), switched.search.replace(simulations=16, leaves_per_game=4), seed=0)
    search.set_roots(random_position(3, 16))
    search.search()
    result = search.root_result(0)
    expected = improved_policy(result, switched.search.c_visit, switched.search.c_scale)
    np.testing.assert_array_equal(switched.policy_label(result), expected)
