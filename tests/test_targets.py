"""Self-play's training targets: the policy target at proven roots (the proof), one set of sigma
constants for a Gumbel run, and the playout cap recording only full searches.

End-to-end tests play through `amazons.train.selfplay.play_games` with the solver on, from the start
position to the game's end, with the deterministic `HashEvaluator` of tests/test_mcts.py (its
priors are not uniform, so a root whose priors the evaluator never gave is visible).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from amazons import engine
from amazons.board import Board
from amazons.mcts import BatchedSearch, SearchConfig, SearchResult, UniformEvaluator
from amazons.search_targets import improved_policy
from amazons.train.config import apply_overrides, preset_config
from amazons.train.replay import GameSamples, save_chunk
from amazons.train.selfplay import SelfPlayConfig, play_games

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
    assert SelfPlayConfig(search=SearchConfig(root="puct"),
                          target_c_scale=0.3).target_c_scale == 0.3
    cpu = preset_config("cpu")
    for preset in (cpu, preset_config("gpu")):
        selfplay = preset.selfplay
        assert ((selfplay.target_c_visit, selfplay.target_c_scale)
                == (selfplay.search.c_visit, selfplay.search.c_scale))
    switched = apply_overrides(cpu, ["selfplay.search.root=gumbel"]).selfplay
    assert ((switched.target_c_visit, switched.target_c_scale)
            == (switched.search.c_visit, switched.search.c_scale))
    paper = apply_overrides(cpu, ["selfplay.target_c_scale=0.1", "selfplay.search.root=gumbel",
                                  "selfplay.search.c_scale=0.1"]).selfplay
    assert paper.search.c_scale == paper.target_c_scale == 0.1
    with pytest.raises(ValueError, match="target_c_scale"):
        apply_overrides(cpu, ["selfplay.search.root=gumbel", "selfplay.search.c_scale=0.1"])
    # The label of a Gumbel root is the completed-Q policy its halving ranks moves by.
    search = BatchedSearch(HashEvaluator(),
                           switched.search.replace(simulations=16, leaves_per_game=4), seed=0)
    search.set_roots(random_position(3, 16))
    search.search()
    result = search.root_result(0)
    expected = improved_policy(result, switched.search.c_visit, switched.search.c_scale)
    np.testing.assert_array_equal(switched.policy_label(result), expected)


# ----------------------------------------------------------------------------------------------
# Proven roots


def uniform_over(mask: np.ndarray) -> np.ndarray:
    return np.where(mask, 1.0 / mask.sum(), 0.0)


def play_labelled_games(policy_target: str, count: int = 3) -> tuple[list, list[GameSamples]]:
    """`count` games to the rules' end (no adjudication of the game, so decided positions are
    played out and proven roots occur), one at a time with the solver and in-tree adjudication
    on; returns every labelled root as (search result, canonical position, label) and the games'
    samples."""
    config = SelfPlayConfig(search=SearchConfig(simulations=16, leaves_per_game=4, root_noise=True,
                                                temperature_moves=56, edge_capacity=1 << 15,
                                                node_capacity=256),
                            policy_target=policy_target)
    # Seed 4 plays a game whose amazons separate while the side to move loses with more moves
    # than 16 simulations prove (most games are decided before their amazons separate).
    search = BatchedSearch(HashEvaluator(), config.search, num_games=1, seed=4)
    roots: list = []

    def label(result):
        target = config.policy_label(result)
        roots.append((result, search.root_positions[0], target))
        return target

    games: list[GameSamples] = []
    play_games(search, count, lambda samples, moves, verdict: games.append(samples), label,
               adjudicate=False)
    return roots, games


@pytest.mark.parametrize("policy_target", ["completed_q", "visits"])
def test_proven_roots_are_labelled_with_their_proof(policy_target, tmp_path):
    """A proven win's target is uniform over its shortest proven wins, a proven loss's over its
    longest resistances (the moves the player plays); every other root's target rests on the
    evaluator's priors, also where the root was a decided leaf of the previous tree (such leaves
    skip the evaluator, and are evaluated when they become the root). The games' chunks save."""
    roots, games = play_labelled_games(policy_target)
    wins = losses = decided = 0
    for result, position, target in roots:
        plies = result.move_proof_plies.astype(np.int64)
        if result.proven > 0:
            wins += 1
            winning = result.move_proofs == 1
            np.testing.assert_allclose(target,
                                       uniform_over(winning & (plies == plies[winning].min())))
        elif result.proven < 0:
            losses += 1
            np.testing.assert_allclose(target, uniform_over(plies == plies.max()))
        else:
            offsets = np.array([0, result.moves.shape[0]], np.int64)
            priors, _ = HashEvaluator().evaluate(position[None], result.moves, offsets)
            np.testing.assert_array_equal(result.priors, priors)
            decided += int(engine.adjudicate(position[None])[0][0] != 0)
        assert target.sum() == pytest.approx(1.0, abs=1e-5)
    assert wins > 0 and losses > 0 and decided > 0
    for index, samples in enumerate(games):
        save_chunk(tmp_path / f"chunk-{index:08d}.npz", samples)


# ----------------------------------------------------------------------------------------------
# Playout cap randomization: only full searches are recorded


def play_capped(count: int, probability: float, seed: int = 1) -> tuple[list, dict[str, float]]:
    """`count` games where a move is a full search (12 simulations) with `probability`, else a
    fast one (4); solver off, so every search runs exactly its count. Returns each game's
    (samples, moves, winner) and the counters."""
    config = SearchConfig(simulations=12, leaves_per_game=4, root_noise=True, temperature_moves=56,
                          solver=False, edge_capacity=1 << 15, node_capacity=64)
    search = BatchedSearch(UniformEvaluator(), config, num_games=3, seed=seed)
    games: list = []

    def keep(samples, moves, verdict):
        winner = verdict.winner if verdict is not None else Board.from_moves(moves).winner()
        games.append((samples, list(moves), winner))

    stats = play_games(search, count, keep, full_search_prob=probability, fast_simulations=4,
                       rng=np.random.default_rng(seed))
    return games, stats


def recorded_plies(samples: GameSamples, moves: list, winner: int) -> list[int]:
    """The plies at which `samples` were recorded; checks that each sample is the position and
    move of its ply, in order, with z = +1 exactly where its side to move won."""
    board, plies = Board(), []
    for ply, move in enumerate(moves):
        row = len(plies)
        if row < samples.num_positions \
                and np.array_equal(samples.positions[row], board.canonical_position()) \
                and samples.played_moves[row].tolist() == list(move.as_tuple()):
            assert samples.z[row] == (1 if board.turn == winner else -1)
            plies.append(ply)
        board.push(move)
    assert len(plies) == samples.num_positions
    return plies


def test_playout_cap_records_only_full_searches():
    """As KataGo (section 3.1): a fast search's position is played, not recorded, so the replay
    window, the `sample_reuse` step budget (it counts recorded positions) and the learner see
    only full searches, a quarter of the plies at p = 0.25."""
    games, stats = play_capped(6, 0.25)
    samples = GameSamples.concatenate([game[0] for game in games])
    samples.validate()
    plies = sum(len(moves) for _, moves, _ in games)
    assert (samples.policy_weight == 1).all() and (np.diff(samples.label_offsets) > 0).all()
    assert samples.num_positions == stats["positions"] == stats["full_searches"]
    assert stats["plies"] == plies
    assert abs(stats["full_searches"] / plies - 0.25) < 4 * np.sqrt(0.25 * 0.75 / plies)
    # Full and fast searches ran their own counts in the same batches.
    assert stats["simulations"] == (12 * stats["full_searches"]
                                    + 4 * (plies - stats["full_searches"]))
    for game in games:
        recorded_plies(*game)
    everyone, stats = play_capped(2, 1.0)
    assert stats["positions"] == stats["plies"] == sum(len(moves) for _, moves, _ in everyone)


def test_a_capped_game_without_a_full_search_keeps_its_last_position_for_its_value():
    """A game without a full search would have no sample at all, which a replay chunk cannot
    hold: it keeps its last position, with its value target and no policy target."""
    games, stats = play_capped(3, 0.005, seed=2)
    fallbacks = 0
    for samples, moves, winner in games:
        samples.validate()
        if (samples.policy_weight == 0).any():
            fallbacks += 1
            assert recorded_plies(samples, moves, winner) == [len(moves) - 1]
            assert samples.label_offsets.tolist() == [0, 0]
        else:
            assert (samples.policy_weight == 1).all()
    assert fallbacks > 0 and stats["positions"] == stats["full_searches"] + fallbacks


# ----------------------------------------------------------------------------------------------
# Switches of the completed-Q target for few visits (off by default)


def root_result(visits: list[int], q: list[float], proofs: list[int] | None = None) -> SearchResult:
    count = len(visits)
    return SearchResult(
        moves=np.array([[0, 1, square] for square in range(2, 2 + count)], np.int32),
        visits=np.array(visits, np.int32), q_values=np.array(q, np.float32),
        priors=np.full(count, 1 / count, np.float32),
        move_proofs=np.array(proofs or [0] * count, np.int8),
        move_proof_plies=np.zeros(count, np.int16),
        root_value=0.0, raw_value=0.0, proven=0, proof_plies=0,
        principal_variation=np.zeros((0, 3), np.int32),
        num_legal_moves=count)


def softmax_target(priors: np.ndarray, completed: np.ndarray, most_visits: int) -> np.ndarray:
    """softmax(log p + (50 + most visits) * 0.1 * completed Q rescaled to [0, 1])."""
    rescaled = (completed - completed.min()) / (completed.max() - completed.min())
    logits = np.log(priors) + (50 + most_visits) * 0.1 * rescaled
    return np.exp(logits) / np.exp(logits).sum()


def test_completed_q_switches_distrust_the_q_of_moves_with_few_visits():
    """A move with one lucky visit (Q = +1) tops the paper's target; with `target_min_visits` 2 it
    counts as unvisited, with `target_q_prior_visits` its Q is shrunk toward v_mix more than a
    well-visited move's. Both against a hand computation; the defaults are the paper's target."""
    result = root_result([1, 4, 4, 0], [1.0, 0.2, 0.0, np.nan])
    priors = np.full(4, 0.25)
    paper = SelfPlayConfig().policy_label(result)
    np.testing.assert_array_equal(paper, improved_policy(result))
    assert paper.argmax() == 0
    # min_visits 2: known moves 1 and 2, v_mix = (0 + 9 * (0.2 + 0.0) / 2) / 10 = 0.09.
    floor = SelfPlayConfig(target_min_visits=2).policy_label(result)
    np.testing.assert_allclose(floor, softmax_target(priors, np.array([0.09, 0.2, 0.0, 0.09]), 4),
                               rtol=1e-5)
    assert floor.argmax() == 1
    # q_prior_visits 2: v_mix = (0 + 9 * (1 + 0.2 + 0) / 3) / 10 = 0.36,
    # q' = (n q + 2 v_mix) / (n + 2).
    shrunk = SelfPlayConfig(target_q_prior_visits=2.0).policy_label(result)
    expected = np.array([(1.0 + 0.72) / 3, (0.8 + 0.72) / 6, 0.72 / 6, 0.36])
    np.testing.assert_allclose(shrunk, softmax_target(priors, expected, 4), rtol=1e-5)
    assert shrunk[0] < paper[0] and shrunk[1] > paper[1]
    # A proven move stays known with its exact value, whatever its visits.
    proven = root_result([1, 4, 4, 0], [1.0, 0.2, 0.0, np.nan], proofs=[1, 0, 0, 0])
    both = SelfPlayConfig(target_min_visits=2, target_q_prior_visits=2.0).policy_label(proven)
    assert both.argmax() == 0


def test_completed_q_switches_are_checked_and_reach_the_config():
    for field, value in (("target_min_visits", 0), ("target_q_prior_visits", -1.0)):
        with pytest.raises(ValueError, match=field):
            SelfPlayConfig(**{field: value})
        with pytest.raises(ValueError, match=field):
            SelfPlayConfig(search=SearchConfig(root="gumbel"), **{field: 2})
    config = apply_overrides(preset_config("cpu"), ["selfplay.target_min_visits=2",
                                                    "selfplay.target_q_prior_visits=4"]).selfplay
    assert (config.target_min_visits, config.target_q_prior_visits) == (2, 4.0)
