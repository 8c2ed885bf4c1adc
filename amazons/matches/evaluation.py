"""Evaluation of each new model in training: arena matches whose network players are served.

`Evaluation` plays the new model against the previous one and the baseline players on
`amazons.matches.arena.ArenaWorkers`: two inference servers, `"new"` and `"previous"`, each holding
one model (the prepared network of `amazons.neural.served`, on the GPU when there is one, batching
the leaves of every arena worker) and one slot per worker. Nothing loads a model in the arena's
worker processes. It can be started once and reused: every `run` publishes the two models' weights
to the servers (`InferenceServer.publish_weights`) before the matches, so a training loop may keep
one `Evaluation` for the whole run (and run it beside self-play on a thread of its own), or open
one per evaluation (`amazons.train.Run.evaluate`).

Every match is played on the run's board (`board`: botzone8 unless given; the arena's `board`),
and the two servers serve that board's size; on a board other than 8x8 the models need the pooled
value head, and the baselines that play any board (`random`, `greedy`, `classical`, the
`mcts-rollout` and `mcts-uniform` searches) are the opponents to name.

`fit_elo` turns the matches of a whole run into one Elo ladder (Bradley-Terry, `random` at 0).

`EvalConfig` holds every setting of it, written with the run's `config.json`: how often, how many
games, the simulations per move, the opponents, the worker processes, and the search settings of
the network players and of an `mcts-rollout` opponent.

Imports the arena, the player factory and the inference server's owner; torch only through the
evaluator factory, in the servers' processes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amazons.boards import BoardSpec, board_spec
from amazons.matches.arena import ArenaResult, ArenaWorkers, run_arena
from amazons.mcts import Evaluator, SearchConfig
from amazons.players.factory import NET_SEARCH, ROLLOUT_SEARCH, served_evaluator_factory, split_spec
from amazons.serving.server import InferenceConfig

__all__ = ["EvalConfig", "Evaluation", "fit_elo"]

PREVIOUS = "previous"  # the opponent name of the previous iteration's model


@dataclass(frozen=True)
class EvalConfig:
    """How each iteration's model is measured."""

    every: int = 1  # evaluate every this many iterations (0 = never)
    games: int = 10  # games against each opponent (colours alternate)
    # MCTS simulations per move of every MCTS player (overrides the searches' own `simulations`)
    simulations: int = 64
    # "previous" = last iteration's model; else player specs
    opponents: tuple[str, ...] = ("previous", "random", "greedy")
    processes: int = 2  # arena worker processes (each holds a slot on both model servers)
    # The network players' search (new and previous model): play's, but the most visited move: at
    # the ladder's 64 simulations LCB measured no gain (docs/experiments.md, the play-time
    # settings at the bots' clocks), and the ladder's figures stay comparable with earlier runs'.
    search: SearchConfig = field(default_factory=lambda: NET_SEARCH.replace(lcb=False))
    # an `mcts-rollout` opponent's search
    rollout_search: SearchConfig = field(default_factory=lambda: ROLLOUT_SEARCH)

    def __post_init__(self) -> None:
        for name in ("every", "games", "simulations", "processes"):
            value = getattr(self, name)
            if value < (0 if name == "every" else 1):
                raise ValueError(f"eval.{name} must be >= {0 if name == 'every' else 1}, "
                                 f"got {value!r}")


class Evaluation:
    """The arena matches of one model against the previous one and the baselines, network players
    served by two inference servers; reusable across iterations.

    Example:
        >>> with Evaluation(EvalConfig(games=2, simulations=16)) as evaluation:  # doctest: +SKIP
        ...     results = evaluation.run("models/model-0002.pt", "models/model-0001.pt",
        ...                              version=2, seed=2)
        >>> results["random"].win_rate

    Args:
        config: the evaluation's settings.
        device: where the servers run the networks ("auto": a GPU when there is one).
        precision: how they compute ("auto": bf16 on a GPU that has it, fp32 on a CPU).
        board: the board every match is played on (a `BoardSpec`, a name or a start position
            string; botzone8 when None).
        inference: the servers' batching (default: batches up to `processes` x
            `search.leaves_per_game` rows, flushed after 1 ms).
        evaluator_factory: model path -> the servers' picklable evaluator factory (default
            `amazons.players.factory.served_evaluator_factory` with `device`, `precision` and
            the board's size).

    Attributes:
        stats: each server's statistics (`amazons.serving.server`: batches, rows, ...),
            after `close`.
    """

    def __init__(self, config: EvalConfig, device: str = "auto", precision: str = "auto",
                 board: BoardSpec | str | None = None, inference: InferenceConfig | None = None,
                 evaluator_factory: Callable[[str], Callable[[], Evaluator]] | None = None) -> None:
        self.config = config
        self.board = board_spec(board)
        self.device = device
        self.precision = precision
        rows = config.processes * config.search.leaves_per_game
        self.inference = inference or InferenceConfig(inference_batch_size=rows,
                                                      flush_deadline_ms=1.0)
        self._factory = evaluator_factory or (lambda path: served_evaluator_factory(
            path, device, precision, max_batch=self.inference.inference_batch_size,
            backend=self.inference.backend, board_size=self.board.size))
        self._workers: ArenaWorkers | None = None
        self.stats: dict[str, dict[str, float]] = {}

    @property
    def workers(self) -> ArenaWorkers | None:
        """The arena workers and their servers once started (the first `run`), else None."""
        return self._workers

    def run(self, model_path: str | os.PathLike, previous_path: str | os.PathLike, version: int,
            seed: int) -> dict[str, ArenaResult]:
        """Play the new model against every opponent of `config.opponents`.

        Args:
            model_path: the new model's checkpoint (served by server "new").
            previous_path: the previous model's checkpoint (server "previous"; the opponent
                "previous").
            version: the new model's weights version (the previous one is `version - 1`).
            seed: seeds openings and players of every match.

        Returns:
            Opponent (as named in `config.opponents`) -> the match's result, A being the new model.

        Raises:
            amazons.matches.arena.ArenaError: an arena worker died or a server failed
                (nothing is left running or in shared memory once the `Evaluation` is closed).
            amazons.players.factory.PlayerSpecError: an unknown opponent.
        """
        config = self.config
        if self._workers is None:
            self._workers = ArenaWorkers(config.processes, {
                "new": self._factory(str(model_path)), PREVIOUS: self._factory(str(previous_path))},
                self.inference)
            self._workers.start()
        self._workers.publish_weights("new", model_path, version)
        self._workers.publish_weights(PREVIOUS, previous_path, version - 1)
        spec, previous_spec = f"mcts-net:{model_path}", f"mcts-net:{previous_path}"
        results = {}
        for opponent in config.opponents:
            opponent_spec = previous_spec if opponent == PREVIOUS else opponent
            opponent_search = None
            if opponent == PREVIOUS:
                opponent_search = config.search
            elif split_spec(opponent)[0] == "mcts-rollout":
                opponent_search = config.rollout_search
            results[opponent] = run_arena(
                spec, opponent_spec, config.games, simulations=config.simulations, seed=seed,
                base_search_a=config.search, base_search_b=opponent_search, workers=self._workers,
                served={spec: "new", previous_spec: PREVIOUS}, board=self.board)
        return results

    def close(self) -> dict[str, dict[str, float]]:
        """Stop the workers and the servers (every shared-memory segment unlinked); returns and
        keeps each server's statistics."""
        if self._workers is not None:
            self.stats = self._workers.close()
            self._workers = None
        return self.stats

    def __enter__(self) -> Evaluation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def fit_elo(matches: list[dict[str, Any]], anchor: str = "random",
            prior_games: float = 1.0) -> dict[str, float]:
    """Ratings from match results (Bradley-Terry on the Elo scale), `anchor` fixed at 0.

    Args:
        matches: dicts with `a`, `b`, `wins_a`, `games`.
        anchor: the player pinned at 0.
        prior_games: each player also scores half of this many games against the anchor, which
            keeps ratings finite after a clean sweep.
    """
    players = sorted({match["a"] for match in matches} | {match["b"] for match in matches}
                     | {anchor})
    index = {name: i for i, name in enumerate(players)}
    rows = [(index[m["a"]], index[m["b"]], float(m["wins_a"]), float(m["games"]))
            for m in matches]
    rows += [(index[name], index[anchor], prior_games / 2, prior_games)
             for name in players if name != anchor]
    ratings = np.zeros(len(players))
    scale = math.log(10) / 400
    for _ in range(2000):
        gradient = np.zeros_like(ratings)
        curvature = np.full_like(ratings, 1e-9)
        for a, b, wins, games in rows:
            expected = 1 / (1 + math.exp(-scale * (ratings[a] - ratings[b])))
            gradient[a] += wins - games * expected
            gradient[b] -= wins - games * expected
            weight = games * expected * (1 - expected) * scale
            curvature[a] += weight
            curvature[b] += weight
        step = gradient / curvature
        step[index[anchor]] = 0.0
        ratings += np.clip(step, -200, 200)
        if np.abs(step).max() < 1e-6:
            break
    return {name: float(ratings[index[name]]) for name in players}
