"""The learning test: a short run of the shipped `cpu` preset improves the network, not just the
search.

The run is the preset as `python -m amazons.train --preset cpu` runs it, through
`amazons.train.main`: real actor processes, the shared-memory inference server, the replay buffer
and the learner, with the preset's search, samples a position, server batches and niceness. Only
what does not change what the network learns is set: the number of iterations, the run directory,
no progress bars, and no evaluation during the run (its matches share the cores, and this test
plays its own). Two claims are checked, each over 40 arena games with colours alternating:

* the raw policy (the highest prior, no search) of the trained model beats `RandomPlayer` in at
  least 90% of games, while the untrained model's raw policy does not: search cannot help here.
  These games start from the initial position (no random opening plies), so every move of the
  network's side is its own;
* the trained model with search beats the untrained model with the same search in at least 65%.

The tests are `serial`: they run after the suite's parallel part, alone. The preset runs its
actors and server at niceness 10 so that its learner takes a core first; beside another pytest
worker, whose processes run at niceness 0, self-play would get what that worker leaves, and the
run would take as long as the neighbour's load makes it. Alone, it runs as a user's run does.
"""

from __future__ import annotations

import pytest

from amazons.matches.arena import run_arena
from amazons.train.command import main

pytestmark = [pytest.mark.slow, pytest.mark.serial]

# 4 iterations of the preset's 64 games. The scores of each iteration's raw policy against random
# and this test's running time are in docs/BENCHMARKS.md ("The learning test"): the preset's run
# passed the bar (36 of 40) from iteration 2 or 3 on, with room at 4.
ITERATIONS = 4
RAW_POLICY_BAR = 0.9
GAMES = 40


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("learning") / "run"
    assert main(["--preset", "cpu", "--run-dir", str(run_dir), "--iterations", str(ITERATIONS),
                 "--no-progress", "eval.every=0"]) == 0
    return run_dir / "models" / "model-0000.pt", run_dir / "models" / f"model-{ITERATIONS:04d}.pt"


def test_training_makes_the_raw_policy_beat_random_play(trained_run):
    untrained, trained = trained_run
    before = run_arena(f"policy-net:{untrained}", "random", games=GAMES, processes=2, seed=1,
                       opening_plies=0)
    after = run_arena(f"policy-net:{trained}", "random", games=GAMES, processes=2, seed=1,
                      opening_plies=0)
    assert before.win_rate < RAW_POLICY_BAR, before.summary()
    assert after.win_rate >= RAW_POLICY_BAR, after.summary()


def test_training_makes_search_with_the_network_stronger(trained_run):
    untrained, trained = trained_run
    result = run_arena(f"mcts-net:{trained}", f"mcts-net:{untrained}", games=GAMES, simulations=48,
                       processes=2, seed=2)
    assert result.win_rate >= 0.65, result.summary()
