"""A replay window of real self-play samples, the one every learner and replay benchmark draws
from (`suite_train`, `profile_learner`, `suite_gpu`): short uniform-search games, added over and
over until the window holds its positions."""

from __future__ import annotations

from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator
from amazons.train.replay import GameSamples, ReplayBuffer
from amazons.train.selfplay import play_games

__all__ = ["uniform_window"]


def uniform_window(window: int = 200_000) -> ReplayBuffer:
    """A replay window of `window` positions.

    Six short uniform-search games, added over and over.
    """
    games: list[GameSamples] = []
    search = BatchedSearch(UniformEvaluator(),
                           SearchConfig(simulations=8, leaves_per_game=4, root_noise=True,
                                        temperature_moves=56, node_capacity=64,
                                        edge_capacity=1 << 15), num_games=3, seed=0)
    play_games(search, 6, lambda samples, moves, adjudication: games.append(samples))
    buffer = ReplayBuffer(None, window_positions=window, seed=0)
    while len(buffer) < window:
        for samples in games:
            buffer.add_to_window(samples)
    return buffer
