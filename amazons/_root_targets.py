"""The arithmetic of the policies read off a searched root, on plain arrays `(L,)` of its moves:
the completed-Q policy and the pruning of forced playouts.

`amazons.search_targets` holds the public functions and their full explanation
(`improved_policy`, `prune_forced_visits`); this module holds their arithmetic, below both
users: the search driver (`amazons.mcts.BatchedSearch` samples temperature moves from these
policies and reports `SearchResult.pruned_visits`) and the targets module, which imports the
driver for `SearchResult` and `SearchConfig`. Numpy and the proof codes of `amazons.mcts_numba`
only.
"""

from __future__ import annotations

import math

import numpy as np

from amazons.mcts_numba import PROOF_LOSS


def completed_q_policy(priors: np.ndarray, visits: np.ndarray, q_values: np.ndarray,
                       move_proofs: np.ndarray, raw_value: float, c_visit: float, c_scale: float,
                       min_visits: int = 1, q_prior_visits: float = 0.0) -> np.ndarray:
    """`amazons.search_targets.improved_policy` on a root's arrays `(L,)`: the noise-free
    priors, the visits, the mean values (NaN where neither visited nor proven), the PROOF_* of
    each move; `(L,) float32` probabilities."""
    priors = np.maximum(priors.astype(np.float64), np.finfo(np.float32).tiny)
    known = (visits >= max(min_visits, 1)) | (move_proofs != 0)
    q = np.where(move_proofs != 0, move_proofs.astype(np.float64),
                 np.nan_to_num(q_values.astype(np.float64)))
    visits = visits.astype(np.float64)
    total_visits = float(visits.sum())
    if known.any():
        weighted_q = float((priors[known] * q[known]).sum() / priors[known].sum())
        mixed_value = (raw_value + total_visits * weighted_q) / (total_visits + 1.0)
    else:
        mixed_value = float(raw_value)
    if q_prior_visits > 0:
        shrunk = (visits * q + q_prior_visits * mixed_value) / (visits + q_prior_visits)
        q = np.where(move_proofs != 0, q, shrunk)
    completed = np.where(known, q, mixed_value)
    low, high = float(completed.min()), float(completed.max())
    rescaled = (completed - low) / max(high - low, 1e-8)
    sigma = (c_visit + float(visits.max(initial=0.0))) * c_scale * rescaled
    logits = np.log(priors) + sigma
    weights = np.exp(logits - logits.max())
    return (weights / weights.sum()).astype(np.float32)


def pruned_visits(visits: np.ndarray, q_values: np.ndarray, search_priors: np.ndarray,
                  move_proofs: np.ndarray, parent_visits: int, forced_playouts_k: float,
                  c_puct: float, c_puct_base: float) -> np.ndarray:
    """`amazons.search_targets.prune_forced_visits` on a root's arrays `(L,)`, of one length
    (not checked here), with the search's constants; `(L,) int32` pruned visit counts."""
    visits = np.asarray(visits).astype(np.int64)
    q = np.asarray(q_values).astype(np.float64)
    priors = np.asarray(search_priors).astype(np.float64)
    pruned = visits.copy()
    candidates = np.flatnonzero((np.asarray(move_proofs) != PROOF_LOSS) & (visits > 0))
    if candidates.shape[0] == 0 or forced_playouts_k <= 0:
        return pruned.astype(np.int32)
    best = int(candidates[np.argmax(visits[candidates])])
    c = c_puct
    if c_puct_base > 0:
        c += math.log((1.0 + parent_visits + c_puct_base) / c_puct_base)
    scale = c * math.sqrt(max(parent_visits, 0))
    best_score = q[best] + scale * priors[best] / (1.0 + visits[best])
    caps = np.floor(np.sqrt(forced_playouts_k * priors * float(visits.sum()))).astype(np.int64)
    for move in np.flatnonzero(visits > 0).tolist():
        if move == best:
            continue
        count, lowest = int(visits[move]), max(int(visits[move] - caps[move]), 0)
        while count > lowest and q[move] + scale * priors[move] / count < best_score:
            count -= 1
        if count == 1 and visits[move] > 1:
            count = 0
        pruned[move] = count
    return pruned.astype(np.int32)
