"""Adjudication in self-play: how many plies exact results save, on the path production runs.

Plays self-play games to their very end (adjudication off) with the shipped model in-process and
the cpu preset's search (48 simulations, root noise, sampling for the first 10 plies, solver on),
then replays each game and asks `Board.adjudicate` at every ply whether the game is already
decided. With adjudication on, self-play stops at the first decision, so:

* `solver.adjudicated_games_share`: games decided before their last ply;
* `solver.plies_saved_share`: plies after the first decision / all plies played;
* `solver.decided_at_ply_median`: the ply of the first decision (decided games);
* `solver.playout_disagreements`: decided games whose played-out winner differs from the
  adjudicated one (self-play is not perfect play: a side may misplay a won fill);
* `solver.adjudicate_positions_per_s`: `engine.adjudicate` over every position of these games
  in one batch call.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from amazons import engine
from amazons.board import Board, Move
from amazons.mcts import BatchedSearch
from amazons.models import default_checkpoint_path
from amazons.neural.served import load_network_evaluator
from amazons.train.config import preset_config
from amazons.train.selfplay import play_games


def run(quick: bool) -> dict[str, float]:
    torch.set_num_threads(1)
    config = preset_config("cpu").selfplay
    evaluator = load_network_evaluator(default_checkpoint_path(), "cpu", "fp32")
    games: list[list[Move]] = []
    search = BatchedSearch(evaluator, config.search, config.games_in_parallel, seed=0)
    play_games(search, 2, lambda samples, moves, verdict: None, config.policy_label,
               adjudicate=False)
    total_games = 16 if quick else 64
    play_games(BatchedSearch(evaluator, config.search, config.games_in_parallel, seed=1),
               total_games, lambda samples, moves, verdict: games.append(list(moves)),
               config.policy_label, adjudicate=False)
    total_plies, saved_plies, decided_at, disagreements = 0, 0, [], 0
    positions = []
    for moves in games:
        board = Board()
        first = None
        for ply, move in enumerate(moves):
            positions.append(board.canonical_position())
            verdict = board.adjudicate() if first is None else None
            if verdict is not None:
                first = (ply, verdict.winner)
            board.push(move)
        total_plies += len(moves)
        if first is not None:
            decided_at.append(first[0])
            saved_plies += len(moves) - first[0]
            disagreements += first[1] != board.winner()
    if not games or total_plies == 0:
        raise RuntimeError("self-play finished no game")
    batch = np.ascontiguousarray(np.stack(positions))
    engine.adjudicate(batch)
    started = time.perf_counter()
    repeats = 5
    for _ in range(repeats):
        engine.adjudicate(batch)
    per_s = repeats * batch.shape[0] / (time.perf_counter() - started)
    return {
        "solver.games": float(len(games)),
        "solver.adjudicated_games_share": len(decided_at) / len(games),
        "solver.plies_saved_share": saved_plies / total_plies,
        "solver.decided_at_ply_median": (float(np.median(decided_at)) if decided_at
                                         else float("nan")),
        "solver.playout_disagreements": float(disagreements),
        "solver.adjudicate_positions_per_s": per_s,
    }
