"""Policy surprise weighting (KataGo): each position's surprise, a game's sampling weights, their
way through chunks and the replay window, and the window's draws in proportion to them."""

from __future__ import annotations

import numpy as np
import pytest

from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator
from amazons.train.replay import GameSamples, ReplayBuffer, ReplayChunkError, load_chunk, save_chunk
from amazons.train.selfplay import SelfPlayConfig, play_games, policy_surprise, surprise_weights

FAST_SEARCH = SearchConfig(simulations=16, leaves_per_game=4, root_noise=True, temperature_moves=56,
                           edge_capacity=1 << 15, node_capacity=64)


def play(count: int, share: float, seed: int = 0) -> list[GameSamples]:
    """`count` real self-play games (uniform priors, a real search) with surprise share `share`."""
    games: list[GameSamples] = []
    search = BatchedSearch(UniformEvaluator(), FAST_SEARCH, num_games=2, seed=seed)
    stats = play_games(search, count, lambda samples, moves, verdict: games.append(samples),
                       policy_surprise_weight=share)
    assert stats["policy_surprise"] > 0
    return games


@pytest.fixture(scope="module")
def weighted_games() -> list[GameSamples]:
    return play(3, 0.5)


def test_policy_surprise_is_the_kl_divergence_from_the_prior_to_the_target():
    prior = np.array([0.5, 0.25, 0.25, 0.0], np.float32)
    target = np.array([0.25, 0.25, 0.5, 0.0], np.float32)
    expected = 0.25 * np.log(0.25 / 0.5) + 0.5 * np.log(0.5 / 0.25)
    assert policy_surprise(target, prior) == pytest.approx(expected)
    assert policy_surprise(prior, prior) == pytest.approx(0.0, abs=1e-12)
    # A move the network gave nothing: a bounded surprise, not infinity.
    assert policy_surprise(np.array([0.0, 1.0]),
                           np.array([1.0, 0.0])) == pytest.approx(-np.log(1e-8))


def test_a_games_weights_split_its_total_between_uniform_and_surprise():
    surprise = np.array([0.0, 1.0, 3.0, 0.7, 0.0])
    counted = np.array([True, True, True, False, True])  # position 3 is a value-only sample
    weights = surprise_weights(surprise, counted, 0.5)
    np.testing.assert_allclose(weights,
                               [0.5, 0.5 + 0.5 * 4 * 1 / 4, 0.5 + 0.5 * 4 * 3 / 4, 1.0, 0.5])
    assert weights[counted].sum() == pytest.approx(counted.sum())
    assert weights.dtype == np.float32
    np.testing.assert_array_equal(surprise_weights(surprise, counted, 0.0), np.ones(5))
    np.testing.assert_array_equal(surprise_weights(np.zeros(5), counted, 0.5), np.ones(5))
    only = surprise_weights(surprise, counted, 1.0)
    assert only[0] == 0 and only[2] == pytest.approx(3 * only[1])


def test_self_play_weights_the_positions_its_search_found_surprising(weighted_games):
    for samples in weighted_games:
        counted = samples.policy_weight > 0
        assert samples.sample_weight.dtype == np.float32
        assert samples.sample_weight[counted].sum() == pytest.approx(counted.sum(), rel=1e-5)
        assert np.ptp(samples.sample_weight[counted]) > 0.1  # uniform priors: the targets differ
        assert (samples.sample_weight >= 0.5 - 1e-6).all()  # the uniform half
    for samples in play(2, 0.0):
        np.testing.assert_array_equal(samples.sample_weight, 1.0)


def test_the_setting_is_checked():
    with pytest.raises(ValueError, match="policy_surprise_weight"):
        SelfPlayConfig(policy_surprise_weight=1.5)
    with pytest.raises(ValueError, match="policy_surprise_weight"):
        SelfPlayConfig(policy_surprise_weight=-0.1)


def test_sample_weights_round_trip_through_chunks_and_old_chunks_load_with_weight_one(
        tmp_path, weighted_games):
    samples = GameSamples.concatenate(weighted_games)
    path = tmp_path / "chunk-00000000.npz"
    save_chunk(path, samples)
    np.testing.assert_array_equal(load_chunk(path).sample_weight, samples.sample_weight)
    arrays = dict(np.load(path))
    del arrays["sample_weight"]
    arrays["format_version"] = np.array(4)
    old = tmp_path / "chunk-00000001.npz"
    np.savez_compressed(old, **arrays)
    assert (load_chunk(old).sample_weight == 1).all()
    arrays["format_version"] = np.array(5)  # a version 5 chunk must have them
    missing = tmp_path / "chunk-00000002.npz"
    np.savez_compressed(missing, **arrays)
    with pytest.raises(ReplayChunkError,
                       match=r"chunk-00000002\.npz: missing arrays \['sample_weight'\]"):
        load_chunk(missing)


@pytest.mark.parametrize("bad, message", [(-1.0, "negative or non-finite"),
                                          (np.nan, "negative or non-finite")])
def test_a_bad_sample_weight_is_refused_by_name(tmp_path, weighted_games, bad, message):
    samples = GameSamples.concatenate(weighted_games)
    samples.sample_weight = samples.sample_weight.copy()
    samples.sample_weight[1] = bad
    with pytest.raises(ReplayChunkError,
                       match=f"chunk-00000000.npz: sample_weight holds {message}"):
        save_chunk(tmp_path / "chunk-00000000.npz", samples)


def with_weights(samples: GameSamples, weights: np.ndarray) -> GameSamples:
    copy = GameSamples.concatenate([samples])
    copy.sample_weight = weights.astype(np.float32)
    return copy


def test_the_window_draws_in_proportion_to_the_weights_and_forgets_evicted_ones(weighted_games):
    first, second = weighted_games[0], weighted_games[1]
    a, b = 5, 9  # mid-game positions, which the other game never reaches
    assert not (second.positions[:, None, :] == first.positions[None, [a, b], :]).all(axis=2).any()
    weights = np.zeros(first.num_positions)
    weights[[a, b]] = [1.0, 3.0]  # only positions a and b can be drawn, b three times as often
    buffer = ReplayBuffer(None, window_positions=second.num_positions, seed=7)
    buffer.add_to_window(with_weights(first, weights))
    drawn = buffer.sample(4000)["positions"]
    is_a = (drawn == first.positions[a]).all(axis=1)
    is_b = (drawn == first.positions[b]).all(axis=1)
    assert (is_a | is_b).all()
    assert is_b.mean() == pytest.approx(0.75, abs=0.03)
    # The next game evicts the first: its rows are never drawn again, whatever their weights were.
    buffer.add_to_window(with_weights(second, np.ones(second.num_positions)))
    assert len(buffer) == second.num_positions
    drawn = buffer.sample(2000)["positions"]
    assert not (drawn[:, None, :] == first.positions[None, [a, b], :]).all(axis=2).any()
    counts = np.unique(drawn, axis=0, return_counts=True)[1]
    # every row of weight 1 is drawn
    assert counts.shape[0] == np.unique(second.positions, axis=0).shape[0]
    np.testing.assert_array_equal(buffer.window[0].sample_weight, 1.0)


def test_a_window_of_weight_one_draws_exactly_as_before(weighted_games):
    """Unweighted windows keep the uniform draws (the same generator calls), so runs without the
    weighting reproduce their batches."""
    plain = [with_weights(samples, np.ones(samples.num_positions)) for samples in weighted_games]
    buffer = ReplayBuffer(None, window_positions=10_000, seed=3)
    for samples in plain:
        buffer.add_to_window(samples)
    state = buffer.rng.bit_generator.state
    drawn = buffer.sample(64)["positions"]
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    rows = rng.integers(0, len(buffer), size=64)
    np.testing.assert_array_equal(drawn, GameSamples.concatenate(plain).positions[rows])
