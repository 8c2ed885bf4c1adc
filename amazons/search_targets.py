"""What a finished search teaches: the policy targets read off a searched root.

* `improved_policy`: the Gumbel MuZero policy improvement (completed Q with v_mix) over every
  legal move, self-play's default policy target;
* `prune_forced_visits`: the root's visits less the forced playouts that fail the PUCT check
  (KataGo's policy target pruning), the visit target where forced playouts ran;
* `proof_policy`: the target of a proven root, its proof.

`amazons.train.selfplay` writes its training rows from these, and the search driver
(`amazons.mcts.BatchedSearch`) samples its temperature moves from the same arithmetic on a root's
plain arrays `(L,)` (`completed_q_policy`, `pruned_visits`): this module lies below the driver,
which imports it, and reads a search's result and settings through the small protocols below
(`amazons.mcts.SearchResult` and `SearchConfig` fit them). Numpy and the proof codes of
`amazons.mcts_numba` only; no torch.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from amazons.mcts_numba import PROOF_LOSS, PROOF_WIN

__all__ = ["PruningSettings", "SearchInputError", "SearchedRoot", "completed_q_policy",
           "improved_policy", "proof_policy", "prune_forced_visits", "pruned_visits"]


class SearchInputError(ValueError):
    """Wrong input to the search (a position, game index or move passed to
    `amazons.mcts.BatchedSearch`) or to a target read off it; the message says which."""


class SearchedRoot(Protocol):
    """What the targets read of a searched root (`amazons.mcts.SearchResult` has it all): arrays
    `(L,)` over its legal moves, and the root's evaluation and proof."""

    priors: np.ndarray  # (L,) float32, the evaluator's noise-free priors
    visits: np.ndarray  # (L,) int32, visit counts
    q_values: np.ndarray  # (L,) float32, mean values for the root's side to move
    move_proofs: np.ndarray  # (L,) int8, PROOF_* of each move
    move_proof_plies: np.ndarray  # (L,) int16, plies from the move to the end when proven
    raw_value: float  # the evaluator's value of the root position
    proven: int  # +1 proven win for the side to move, -1 proven loss, 0 unknown


class PruningSettings(Protocol):
    """The search settings the pruning of forced playouts reads (`amazons.mcts.SearchConfig`)."""

    forced_playouts_k: float
    c_puct: float
    c_puct_base: float


def improved_policy(result: SearchedRoot, c_visit: float = 50.0, c_scale: float = 0.1, *,
                    min_visits: int = 1, q_prior_visits: float = 0.0) -> np.ndarray:
    """The Gumbel MuZero policy improvement over every legal move (completed Q with v_mix).

    From "Policy improvement by planning with Gumbel" (Danihelka et al., ICLR 2022), as DeepMind's
    `mctx` implements it (`qtransform_completed_by_mix_value`):

    * a move is *known* if it was visited (its Q is its mean value) or proven (its Q is the exact
      +-1 the solver found);
    * v_mix = (v_raw + N * sum_known(p q) / sum_known(p)) / (1 + N), with v_raw the evaluator's
      value of the root, N the root's visits, p the noise-free priors;
    * completed Q = q for known moves, v_mix for the others;
    * completed Q is rescaled to [0, 1] by its min and max over the legal moves (epsilon 1e-8),
      and sigma = (c_visit + max visits) * c_scale * rescaled;
    * the target is softmax(log p + sigma) over every legal move.

    Unvisited moves keep their share of the prior, shifted as a group by v_mix, so the target does
    not collapse onto a few noisy single-visit values.

    Two switches, off by default (the paper's target), distrust the Q of moves with few visits
    further, for searches of a few dozen simulations where most visited moves have one or two:

    * `min_visits` k > 1: a move with fewer than k visits (and no proof) counts as unknown, so
      its completed Q is v_mix, as if it had not been visited (v_mix averages the known moves);
    * `q_prior_visits` m > 0: the Q of a known unproven move with n visits is shrunk toward v_mix
      as if v_mix had m visits of its own, q' = (n q + m v_mix) / (n + m).

    Args:
        result: a root's search result.
        c_visit, c_scale: the sigma transform's constants; larger values trust Q more.
        min_visits: visits a move needs for its Q to count (1: every visited move's does).
        q_prior_visits: pseudo-visits of v_mix in each known move's Q (0: none).

    Returns:
        `(L,) float32` probabilities over `result.moves`, summing to 1.
    """
    return completed_q_policy(result.priors, result.visits, result.q_values, result.move_proofs,
                              result.raw_value, c_visit, c_scale, min_visits, q_prior_visits)


def prune_forced_visits(visits: np.ndarray, q_values: np.ndarray, search_priors: np.ndarray,
                        move_proofs: np.ndarray, parent_visits: int,
                        config: PruningSettings) -> np.ndarray:
    """KataGo's policy target pruning: root visit counts less the forced playouts PUCT would not
    have given (Wu 2019, "Accelerating Self-Play Learning in Go", section 3.2).

    Let c* be the most visited root move not proven lost (the first on ties). Every other visited
    move c gives up visits one at a time, at most floor(n_forced(c)) of them in all, as long as
    its PUCT score with the reduced count n - 1 stays below c*'s:

        n_forced(c) = sqrt(k * P(c) * sum of the root visits)
        Q(c) + U * P(c) / n  <  Q(c*) + U * P(c*) / (1 + N(c*))
        U = (c_puct + log((1 + N_parent + c_puct_base) / c_puct_base)) * sqrt(N_parent)

    with k = `config.forced_playouts_k`, P the priors the search selected with (noise included),
    Q a move's mean value over all its visits, N_parent the root's visits as the search counted
    them. A move reduced to a single visit loses that one too (the paper prunes it outright).
    c* is never pruned, nor is a move whose score with one visit less would reach c*'s; with
    k = 0 nothing is.

    Args:
        visits: `(L,)` int visit counts of the root moves.
        q_values: `(L,)` float mean values for the root's side to move (read where visited).
        search_priors: `(L,)` float priors the selection used (with the root's noise).
        move_proofs: `(L,)` int PROOF_* of each move (proven losses are never c*).
        parent_visits: the root's visit count (its expansion included), as PUCT used it.
        config: the search's configuration (`forced_playouts_k`, `c_puct`, `c_puct_base`).

    Returns:
        `(L,) int32` pruned visit counts, each at most the move's visits.

    Raises:
        SearchInputError: the arrays are not four 1-d arrays of one length.
    """
    arrays = [np.asarray(array) for array in (visits, q_values, search_priors, move_proofs)]
    if any(array.ndim != 1 or array.shape != arrays[0].shape for array in arrays):
        raise SearchInputError("visits, q_values, search_priors and move_proofs must be 1-d arrays "
                               f"of one length, got shapes {[array.shape for array in arrays]}")
    return pruned_visits(*arrays, parent_visits, config.forced_playouts_k, config.c_puct,
                         config.c_puct_base)


def proof_policy(result: SearchedRoot) -> np.ndarray:
    """The policy target of a proven root: its proof, over `result.moves`.

    A proven win's target is uniform over its winning moves with the fewest plies to the end
    (the shortest wins share the mass); a proven loss's is uniform over the moves with the most
    plies to the end (the longest resistance, the moves `BatchedSearch.select_moves` plays).
    Visits and priors play no part: a root proven at expansion has no visits, and one reached by
    tree reuse may have uniform priors.

    Args:
        result: the search result of a proven root (`result.proven` is +1 or -1).

    Returns:
        `(L,) float32` probabilities over `result.moves`, summing to 1.

    Raises:
        SearchInputError: the root is not proven.
    """
    if result.proven == 0:
        raise SearchInputError("proof_policy needs a proven root; this one has proven == 0")
    plies = result.move_proof_plies.astype(np.int64)
    if result.proven > 0:
        winning = result.move_proofs == PROOF_WIN
        chosen = winning & (plies == plies[winning].min())
    else:
        chosen = plies == plies.max()
    return (chosen / chosen.sum()).astype(np.float32)


def completed_q_policy(priors: np.ndarray, visits: np.ndarray, q_values: np.ndarray,
                       move_proofs: np.ndarray, raw_value: float, c_visit: float, c_scale: float,
                       min_visits: int = 1, q_prior_visits: float = 0.0) -> np.ndarray:
    """`improved_policy` on a root's arrays `(L,)`: the noise-free
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
    """`prune_forced_visits` on a root's arrays `(L,)`, of one length
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
