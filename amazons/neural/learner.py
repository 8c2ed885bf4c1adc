"""Training the policy-value network: sample batches, augmentation, losses, the training step.

What this module owns:

* `SampleBatch`: training samples of one board size N (6..10, `board_size`) in a flat CSR form,
  exactly as the search produced them: canonical positions `(B, 3 * W) uint64` (W words per
  bitboard: 1 up to 8x8, 2 on 9x9 and 10x10), the sparse visit distribution over full moves
  (`label_moves (N, 3) int32`, `label_probs (N,) float32`, `label_offsets (B + 1,) int64`),
  the outcome `z (B,) float32` for the side to move, the policy weight `(B,) float32` (0 for
  a playout cap's fast search: no policy target, an empty label) and the ownership target
  `(B, N*N) int8` with its mask `(B, N*N) bool` (each square's owner at the end of the game, +1 the
  side to move's; a mask of all False means no target). The engine is never asked to
  decode a label: labels are squares, and squares are what the network's tables are indexed by.
* `augment_batch`: one random symmetry of the 8 per sample, applied to positions and sparse labels
  in one vectorized call each (`amazons.symmetry`, square permutations of the batch's board
  size); `sample_batch` draws a
  batch from a pool and augments it on the fly.
* The losses. Labels are always the soft visit distribution pi, never its argmax.
  - joint head: -sum pi(s, d, a) [log P(s, d) + log P(a | d)], reported as two terms: the
    cross-entropy of the (src, dst) marginal and the one of the (dst, arrow) marginal under the
    conditional (P(a | s, d) with the source term, `NetConfig.arrow_source`);
  - factorized head: the three marginal cross-entropies (src, dst, arrow);
  each weighted by the sample's policy weight and averaged over the samples' total policy weight;
  the joint head (without the source term) is scored against dense `[B, N*N * N*N]` target
  tables (`[B, 4096]` on 8x8)
  (`with_target_tables`, `OptimConfig.dense_policy_targets`), its log-softmax's gradient written
  in one pass (`_TableCrossEntropy`), the other heads by gathering the labels' log-probabilities;
  - value: mean squared error against z, over every sample;
  - ownership (networks with the ownership head): squared error over the squares the mask keeps,
    summed per sample and divided by N*N (64 on 8x8), averaged over the samples that have a
    target;
  - soft policy (networks with the soft policy head, KataGo's auxiliary soft policy target): the
    policy terms of the second head against pi^(1 / T) renormalized over each sample's labelled
    moves (`soft_policy_targets`, T = `OptimConfig.soft_policy_temperature`), weighted by
    `OptimConfig.soft_policy_weight`; the search never reads the head.
* `OptimConfig` (frozen) and `Learner`: AdamW (torch's fused kernel), warmup + cosine or
  constant learning rate, gradient clipping, mixed precision (bf16 autocast, or fp16 with a
  GradScaler, or fp32), channels_last, optional `torch.compile` (of the forward, or of the forward
  and the losses), and a metrics dict per step (the policy metrics that need the whole move
  distribution every `OptimConfig.metrics_every` steps; `MetricSums` averages each metric over
  the steps that reported it).
* `BatchPrefetcher`: the next batch drawn, augmented and prepared (`Learner.prepare`) on a
  second thread while a step runs, in the order drawing before each step would give.

Checkpoints of a `Learner` live in `amazons.neural.checkpoint`. Imports torch, numpy,
`amazons.engine`, `amazons.symmetry` and `amazons.neural.model`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from amazons import engine
from amazons.neural.model import (
    PRECISION_DTYPES,
    PRECISIONS,
    FactorizedPolicy,
    JointPolicy,
    JointSourcePolicy,
    NetOutput,
    PolicyTables,
    PolicyValueNet,
    arrow_log_probs,
    move_log_probs,
    policy_log_tables,
    resolve_precision,
    segment_ids,
)
from amazons.symmetry import (
    NUM_SYMMETRIES,
    transform_moves,
    transform_positions,
    transform_square_labels,
)

__all__ = [
    "FUSED_ADAMW_DEVICES",
    "SCHEDULES",
    "BatchPrefetcher",
    "LabelTensors",
    "Learner",
    "MetricSums",
    "OptimConfig",
    "OptimConfigError",
    "PreparedBatch",
    "SampleBatch",
    "SampleError",
    "augment_batch",
    "label_tensors",
    "learning_rate_factor",
    "ownership_loss",
    "policy_loss_terms",
    "policy_metrics",
    "sample_batch",
    "soft_policy_targets",
    "value_loss",
    "with_target_tables",
]

SCHEDULES = ("constant", "cosine")
FUSED_ADAMW_DEVICES = ("cpu", "cuda")  # where the learner's AdamW runs torch's fused kernel
LABEL_SUM_TOLERANCE = 1e-3  # how far a sample's label probabilities may sum from 1


class SampleError(ValueError):
    """A training batch is malformed; the message names the array and the problem."""


class OptimConfigError(ValueError):
    """An `OptimConfig` field is invalid; the message names it."""


# ------------------------------------------------------------------------------------------------
# Samples


@dataclass(frozen=True, eq=False)
class SampleBatch:
    """Training samples of one board size, labels in CSR form. Validated on construction.

    Sample i is `positions[i]`, its labels `label_moves[j]` / `label_probs[j]` for
    `label_offsets[i] <= j < label_offsets[i + 1]`, its outcome `z[i]` and its policy weight
    `policy_weight[i]` (default 1 for every sample). S = N*N squares of the `board_size` board.
    """

    # (B, 3 * W) uint64, canonical [MINE, THEIRS, ARROWS] bitboards, W words each
    positions: np.ndarray
    label_moves: np.ndarray  # (N, 3) int32, canonical (src, dst, arrow) moves the search visited
    # (N,) float32, visit shares; >= 0, summing to 1 over each non-empty label
    label_probs: np.ndarray
    label_offsets: np.ndarray  # (B + 1,) int64, CSR offsets of each sample's labels
    z: np.ndarray  # (B,) float32, the game's outcome for the side to move, in [-1, 1]
    # (B,) float32 in [0, 1]; 0 = no policy target (empty label)
    policy_weight: np.ndarray | None = None
    # (B, S) int8 in {-1, 0, 1}: each square's owner at the end of the game, canonical frame, +1
    # the side to move's; default 0
    ownership: np.ndarray | None = None
    # (B, S) bool: the squares the ownership loss counts (not arrows at the end);
    # all False = no target
    ownership_mask: np.ndarray | None = None
    board_size: int = 8  # N of the N x N board every sample is a position of

    def __post_init__(self) -> None:
        if self.policy_weight is None and isinstance(self.positions, np.ndarray):
            object.__setattr__(self, "policy_weight", np.ones(self.positions.shape[0], np.float32))
        if isinstance(self.positions, np.ndarray):
            count = self.positions.shape[0]
            squares = engine.geometry(self.board_size).num_squares
            if self.ownership is None:
                object.__setattr__(self, "ownership", np.zeros((count, squares), np.int8))
            if self.ownership_mask is None:
                object.__setattr__(self, "ownership_mask", np.zeros((count, squares), np.bool_))
        _validate_batch(self)

    @property
    def size(self) -> int:
        """B, the number of samples."""
        return int(self.positions.shape[0])

    def __len__(self) -> int:
        return self.size

    @classmethod
    def from_samples(
        cls,
        positions: np.ndarray,
        label_moves: Sequence[np.ndarray],
        label_weights: Sequence[np.ndarray],
        z: np.ndarray | Sequence[float],
        board_size: int = 8,
    ) -> SampleBatch:
        """Build a batch from per-sample arrays; label weights (e.g. raw visit counts) are
        normalized to probabilities.

        Args:
            positions: `(B, 3 * W) uint64` canonical positions of the `board_size` board.
            label_moves: B arrays `(K_i, 3)` of integer moves.
            label_weights: B arrays `(K_i,)` of non-negative weights, each with a positive sum.
            z: B outcomes in [-1, 1] for the side to move.
            board_size: N of the N x N board.

        Raises:
            SampleError: lengths disagree or a sample's weights are unusable.
        """
        count = len(label_moves)
        if len(label_weights) != count:
            raise SampleError(f"label_moves has {count} samples but label_weights has "
                              f"{len(label_weights)}")
        moves = [np.asarray(m, dtype=np.int64).reshape(-1, 3) for m in label_moves]
        weights = [np.asarray(w, dtype=np.float64).reshape(-1) for w in label_weights]
        probs = []
        for index, (move_block, weight_block) in enumerate(zip(moves, weights, strict=True)):
            total = weight_block.sum()
            if (weight_block.shape[0] != move_block.shape[0] or not total > 0
                    or np.any(weight_block < 0)):
                raise SampleError(
                    f"sample {index}: {move_block.shape[0]} moves with {weight_block.shape[0]} "
                    f"weights summing to {total}; weights must be >= 0, one per move, with a "
                    f"positive sum")
            probs.append(weight_block / total)
        offsets = np.zeros(count + 1, np.int64)
        np.cumsum([m.shape[0] for m in moves], out=offsets[1:])
        return cls(
            positions=np.ascontiguousarray(positions, dtype=np.uint64).reshape(
                -1, engine.geometry(board_size).position_width),
            label_moves=np.ascontiguousarray(np.concatenate(moves) if count else np.zeros((0, 3)),
                                             dtype=np.int32),
            label_probs=(np.concatenate(probs).astype(np.float32) if count
                         else np.zeros(0, np.float32)),
            label_offsets=offsets,
            z=np.ascontiguousarray(z, dtype=np.float32).reshape(-1),
            board_size=board_size,
        )

    def select(self, indices: np.ndarray | Sequence[int]) -> SampleBatch:
        """The samples at `indices` (repeats allowed), in that order; one vectorized gather."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= self.size):
            raise SampleError(f"indices must be in 0..{self.size - 1}, "
                              f"got {indices.min()}..{indices.max()}")
        starts = self.label_offsets[indices]
        counts = self.label_offsets[indices + 1] - starts
        offsets = np.zeros(indices.shape[0] + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        rows = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1])
        return SampleBatch(self.positions[indices], self.label_moves[rows], self.label_probs[rows],
                           offsets, self.z[indices], self.policy_weight[indices],
                           ownership=self.ownership[indices],
                           ownership_mask=self.ownership_mask[indices], board_size=self.board_size)

    @classmethod
    def concatenate(cls, batches: Sequence[SampleBatch]) -> SampleBatch:
        """One batch holding all samples of `batches`, in order (all of one board size)."""
        if not batches:
            raise SampleError("concatenate needs at least one batch")
        sizes = sorted({batch.board_size for batch in batches})
        if len(sizes) > 1:
            raise SampleError(f"concatenate needs batches of one board size, got sizes {sizes}")
        offsets = [np.zeros(1, np.int64)]
        base = 0
        for batch in batches:
            offsets.append(batch.label_offsets[1:] + base)
            base += int(batch.label_offsets[-1])
        return cls(
            np.concatenate([b.positions for b in batches]),
            np.concatenate([b.label_moves for b in batches]),
            np.concatenate([b.label_probs for b in batches]),
            np.concatenate(offsets),
            np.concatenate([b.z for b in batches]),
            np.concatenate([b.policy_weight for b in batches]),
            ownership=np.concatenate([b.ownership for b in batches]),
            ownership_mask=np.concatenate([b.ownership_mask for b in batches]),
            board_size=sizes[0],
        )


def _validate_batch(batch: SampleBatch) -> None:
    expected = (
        ("positions", np.uint64, 2), ("label_moves", np.int32, 2), ("label_probs", np.float32, 1),
        ("label_offsets", np.int64, 1), ("z", np.float32, 1), ("policy_weight", np.float32, 1),
        ("ownership", np.int8, 2), ("ownership_mask", np.bool_, 2),
    )
    for name, dtype, ndim in expected:
        array = getattr(batch, name)
        if not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim != ndim:
            got = (f"{array.dtype} with shape {array.shape}" if isinstance(array, np.ndarray)
                   else type(array).__name__)
            raise SampleError(f"{name} must be a {ndim}-d {np.dtype(dtype).name} array, got {got}")
    try:
        geometry = engine.geometry(batch.board_size)
    except ValueError as error:
        raise SampleError(f"board_size: {error}") from None
    squares, width, size = geometry.num_squares, geometry.position_width, geometry.size
    count = batch.positions.shape[0]
    labels = batch.label_moves.shape[0]
    if batch.positions.shape[1] != width or batch.label_moves.shape[1] != 3:
        raise SampleError(
            f"positions need {width} columns on a {size}x{size} board and label_moves 3, got "
            f"{batch.positions.shape} and {batch.label_moves.shape}")
    if batch.label_probs.shape != (labels,):
        raise SampleError(f"label_probs has shape {batch.label_probs.shape}, expected ({labels},)")
    if batch.label_offsets.shape != (count + 1,) or batch.z.shape != (count,) or (
            batch.policy_weight.shape != (count,)):
        raise SampleError(
            f"{count} positions need label_offsets ({count + 1},), z and policy_weight ({count},), "
            f"got {batch.label_offsets.shape}, {batch.z.shape} and {batch.policy_weight.shape}")
    if not np.all((batch.policy_weight >= 0) & (batch.policy_weight <= 1)):  # also rejects NaN
        raise SampleError("policy_weight must be in [0, 1]")
    offsets = batch.label_offsets
    counts = np.diff(offsets)
    missing = (counts < 1) & (batch.policy_weight > 0)
    if offsets[0] != 0 or offsets[-1] != labels or np.any(counts < 0) or np.any(missing):
        raise SampleError(
            f"label_offsets must rise from 0 to {labels} (every sample with a policy weight needs "
            f"a label), got {offsets[0]}..{offsets[-1]} with {int(np.sum(missing))} empty samples")
    if labels and (batch.label_moves.min() < 0 or batch.label_moves.max() >= squares):
        raise SampleError(f"label_moves must hold squares 0..{squares - 1} "
                          f"on a {size}x{size} board")
    if not np.all(batch.label_probs >= 0):  # also rejects NaN
        raise SampleError("label_probs must be finite and >= 0")
    if count:
        sums = np.bincount(segment_ids(offsets), weights=batch.label_probs, minlength=count)
        bad = np.flatnonzero((np.abs(sums - 1.0) > LABEL_SUM_TOLERANCE) & (counts > 0))
        if bad.size:
            raise SampleError(f"labels of sample {bad[0]} sum to {sums[bad[0]]:.6f}, not 1")
    if not np.all(np.abs(batch.z) <= 1.0):
        raise SampleError("z must be finite and in [-1, 1]")
    if (batch.ownership.shape != (count, squares)
            or batch.ownership_mask.shape != (count, squares)):
        raise SampleError(f"{count} positions need ownership and ownership_mask "
                          f"({count}, {squares}), got {batch.ownership.shape} and "
                          f"{batch.ownership_mask.shape}")
    if batch.ownership.size and np.abs(batch.ownership).max() > 1:
        raise SampleError("ownership must hold -1, 0 and +1 only")


def augment_batch(
    batch: SampleBatch,
    rng: np.random.Generator | None = None,
    symmetries: np.ndarray | None = None,
) -> SampleBatch:
    """Apply one of the 8 board symmetries to each sample: positions and labels together.

    Args:
        batch: the samples.
        rng: draws a symmetry per sample (uniformly, 0 = identity included) when `symmetries` is
            not given.
        symmetries: `(B,)` integer symmetry index per sample (see `amazons.symmetry.SYMMETRIES`).

    Returns:
        A new batch; probabilities, outcomes and policy weights are unchanged, label order is kept;
        the ownership maps and masks move with their positions.
    """
    if symmetries is None:
        if rng is None:
            raise SampleError("augment_batch needs rng or symmetries")
        symmetries = rng.integers(0, NUM_SYMMETRIES, size=batch.size)
    symmetries = np.asarray(symmetries, dtype=np.int64)
    if symmetries.shape != (batch.size,):
        raise SampleError(f"symmetries must have shape ({batch.size},), got {symmetries.shape}")
    per_label = np.repeat(symmetries, np.diff(batch.label_offsets))
    size = batch.board_size
    return SampleBatch(
        transform_positions(batch.positions, symmetries, size=size),
        np.ascontiguousarray(transform_moves(batch.label_moves, per_label, size=size)),
        batch.label_probs,
        batch.label_offsets,
        batch.z,
        batch.policy_weight,
        ownership=transform_square_labels(batch.ownership, symmetries),
        ownership_mask=transform_square_labels(batch.ownership_mask, symmetries),
        board_size=size,
    )


def sample_batch(
    pool: SampleBatch, batch_size: int, rng: np.random.Generator, augment: bool = True
) -> SampleBatch:
    """Draw `batch_size` samples uniformly from `pool` (without replacement when it is large
    enough) and, by default, give each a random symmetry."""
    if batch_size < 1:
        raise SampleError(f"batch_size must be >= 1, got {batch_size}")
    indices = rng.choice(pool.size, size=batch_size, replace=pool.size < batch_size)
    batch = pool.select(indices)
    return augment_batch(batch, rng) if augment else batch


# ------------------------------------------------------------------------------------------------
# Losses


class LabelTensors(NamedTuple):
    """A batch's labels as tensors on the training device."""

    moves: torch.Tensor  # [N, 3] int64 (src, dst, arrow)
    probs: torch.Tensor  # [N] float32, pi of each labelled move
    sample_index: torch.Tensor  # [N] int64, the sample each label belongs to
    z: torch.Tensor  # [B] float32 outcome for the side to move
    label_weight: torch.Tensor  # [N] float32, the policy weight of each label's sample
    # [] float32, the batch's total policy weight (the policy terms' denominator)
    policy_samples: torch.Tensor
    # [B, S] float32 in {-1, 0, 1}, each square's final owner, +1 the side to move's (S = N*N
    # squares of the batch's board, 64 on 8x8)
    ownership: torch.Tensor
    ownership_mask: torch.Tensor  # [B, S] float32, 1 where the square counts in the ownership loss
    # [] float32, samples with an ownership target (the loss's denominator)
    ownership_samples: torch.Tensor
    # The joint head's dense policy targets (`with_target_tables`; None unless asked for): each
    # label's pi * policy weight added up at its entry of the two tables the loss reads,
    # [B, S * S] float32 [b, src * S + dst] and [B, S * S] float32 [b, dst * S + arrow]
    move_targets: torch.Tensor | None = None
    arrow_targets: torch.Tensor | None = None


def label_tensors(batch: SampleBatch, device: str | torch.device = "cpu",
                  target_tables: bool = False) -> LabelTensors:
    """Move a batch's labels to `device` (no engine call: labels are squares already).

    On a GPU the arrays go through pinned host memory with non-blocking copies, so the host
    does not wait for the device; elsewhere the tensors share the arrays' memory.
    `target_tables=True` also builds the joint head's dense targets (`with_target_tables`).
    """
    device = torch.device(device)
    owners = segment_ids(batch.label_offsets)
    if device.type == "cuda":
        arrays = (batch.label_moves, batch.label_probs, owners, batch.z,
                  batch.policy_weight[owners],
                  np.asarray(batch.policy_weight.sum(), dtype=np.float32), batch.ownership,
                  batch.ownership_mask,
                  np.asarray(batch.ownership_mask.any(axis=1).sum(), dtype=np.float32))
        moves, probs, index, z, weight, total, ownership, mask, counted = (
            _to_device(array, device) for array in arrays)
        labels = LabelTensors(moves.long(), probs, index, z, weight, total, ownership.float(),
                              mask.float(), counted)
    else:
        labels = LabelTensors(
            torch.from_numpy(batch.label_moves).to(device).long(),
            torch.from_numpy(batch.label_probs).to(device),
            torch.from_numpy(owners).to(device),
            torch.from_numpy(batch.z).to(device),
            torch.from_numpy(batch.policy_weight[owners]).to(device),
            torch.tensor(float(batch.policy_weight.sum()), dtype=torch.float32, device=device),
            torch.from_numpy(batch.ownership).to(device).float(),
            torch.from_numpy(batch.ownership_mask).to(device).float(),
            torch.tensor(float(batch.ownership_mask.any(axis=1).sum()), dtype=torch.float32,
                         device=device),
        )
    return with_target_tables(labels) if target_tables else labels


def with_target_tables(labels: LabelTensors) -> LabelTensors:
    """`labels` with the joint head's dense policy targets: c = pi * policy weight of each label
    added at `[b, src * S + dst]` of `move_targets` and at `[b, dst * S + arrow]` of
    `arrow_targets` (both `[B, S * S]` float32, S = N*N squares of the batch's board read from the
    ownership target's width; two labels of one sample may share an entry).

    With them the joint head's loss is -sum(targets * log_softmax(logits)) per table
    (`policy_loss_terms`), the same sum as over the labels, without gathering the labels' entries
    from full log-probability tables nor scattering their gradients back.
    """
    batch_size, squares = labels.ownership.shape
    table = squares * squares
    weighted = labels.probs * labels.label_weight
    rows = labels.sample_index * table
    src, dst, arrow = labels.moves[:, 0], labels.moves[:, 1], labels.moves[:, 2]
    tables = []
    for column in (rows + src * squares + dst, rows + dst * squares + arrow):
        targets = torch.zeros(batch_size * table, dtype=torch.float32, device=weighted.device)
        tables.append(targets.index_add_(0, column, weighted).view(batch_size, table))
    return labels._replace(move_targets=tables[0], arrow_targets=tables[1])


class PreparedBatch(NamedTuple):
    """A batch as the training step consumes it (`Learner.prepare`)."""

    features: torch.Tensor  # [B, planes, N, N] float32 on the learner's device, its memory format
    labels: LabelTensors


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """`array` on a CUDA `device` through a pinned staging copy, without waiting for the copy.

    The staging memory comes from torch's caching host allocator, which does not hand it out
    again before the copy that reads it has finished.
    """
    # np.ascontiguousarray makes a 0-d array 1-d; the reshape keeps a scalar a scalar.
    staged = torch.from_numpy(np.ascontiguousarray(array).reshape(np.shape(array)))
    return staged.pin_memory().to(device, non_blocking=True)


def _label_log_probs(table: torch.Tensor, sample_index: torch.Tensor,
                     index: torch.Tensor) -> torch.Tensor:
    """`table[sample_index, index]` for a `[B, K]` table, as one flat gather."""
    return table.reshape(-1)[sample_index * table.shape[1] + index]


class _TableCrossEntropy(torch.autograd.Function):
    """-sum(targets * log_softmax(logits, -1)) of `[R, K]` float32 logits and targets, a scalar.

    The gradient, (softmax(logits) * targets.sum(-1) - targets) times the incoming one, is the
    log-softmax's own backward kernel applied to the targets, then scaled: autograd's way (a
    gather of the labelled entries from the log-softmax table, then a zero-filled table the
    gather's gradient is scattered into, read back by that kernel) pays for the gather, the
    fill and the scatter on every step; the targets' table is built beside the batch, off the
    step (`with_target_tables`, `BatchPrefetcher`).
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with torch.autocast(logits.device.type, enabled=False):
            log_p = torch.log_softmax(logits, dim=-1)
            ctx.save_for_backward(log_p, targets)
            return -torch.dot(targets.reshape(-1), log_p.reshape(-1))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        log_p, targets = ctx.saved_tensors
        # targets - softmax * targets.sum(-1), in one pass over the tables
        gradient = torch.ops.aten._log_softmax_backward_data(targets, log_p, -1, log_p.dtype)
        return gradient.mul_(-grad), None


def policy_loss_terms(policy: JointPolicy | JointSourcePolicy | FactorizedPolicy,
                      labels: LabelTensors) -> dict[str, torch.Tensor]:
    """The policy cross-entropy terms, each averaged over the batch's policy weight (float32
    scalars; over the batch size when every weight is 1; 0 when no sample has a policy target).

    joint: `policy_move` = -sum pi log P(src, dst), `policy_arrow` = -sum pi log P(arrow | dst)
    (P(arrow | src, dst) with `NetConfig.arrow_source`); their sum is the cross-entropy of pi
    against the full move distribution.
    factorized: `policy_src`, `policy_dst`, `policy_arrow`, the three marginal cross-entropies
    (-sum pi log P(src) equals the cross-entropy of pi's src marginal, and so on).

    A joint head without the source term, given labels with their dense targets
    (`with_target_tables`), is scored against the tables (`_TableCrossEntropy`: the same sums,
    less memory traffic); otherwise the labelled entries are gathered from `policy_log_tables`.
    """
    weight = labels.policy_samples.clamp_min(1e-12)
    if isinstance(policy, JointPolicy) and labels.move_targets is not None:
        batch_size, squares = policy.move_logits.shape[:2]
        move = _TableCrossEntropy.apply(policy.move_logits.float().reshape(batch_size, -1),
                                        labels.move_targets)
        arrow = _TableCrossEntropy.apply(
            policy.arrow_logits.float().reshape(batch_size * squares, squares),
            labels.arrow_targets.reshape(batch_size * squares, squares))
        return {"policy_move": move / weight, "policy_arrow": arrow / weight}
    src, dst, arrow = labels.moves[:, 0], labels.moves[:, 1], labels.moves[:, 2]
    rows = labels.sample_index
    if isinstance(policy, JointPolicy | JointSourcePolicy):
        tables = policy_log_tables(policy)
        log_p = {
            "policy_move": _label_log_probs(tables.log_move, rows,
                                            src * tables.num_squares + dst),
            "policy_arrow": arrow_log_probs(tables, labels.moves, rows),
        }
    elif isinstance(policy, FactorizedPolicy):
        log_p = {
            f"policy_{name}": _label_log_probs(torch.log_softmax(logits.float(), dim=-1), rows,
                                               squares)
            for name, logits, squares in (("src", policy.src_logits, src),
                                          ("dst", policy.dst_logits, dst),
                                          ("arrow", policy.arrow_logits, arrow))
        }
    else:
        raise SampleError(f"unknown policy output {type(policy).__name__}")
    weighted = labels.probs * labels.label_weight
    return {name: -(weighted * values).sum() / weight for name, values in log_p.items()}


def soft_policy_targets(labels: LabelTensors, temperature: float) -> LabelTensors:
    """`labels` with each sample's pi replaced by pi^(1 / temperature), renormalized over the
    sample's labelled moves (KataGo's soft policy target). A label of probability 0 stays 0, and a
    sample whose labels are all 0 keeps zeros; with completed-Q targets every legal move is a
    label with a probability above 0, so the flattening reaches every legal move. Dense targets
    (`with_target_tables`), where `labels` has them, are built again from the new pi."""
    flattened = labels.probs.float().pow(1.0 / temperature)
    totals = torch.zeros(labels.z.shape[0], dtype=flattened.dtype, device=flattened.device)
    totals.index_add_(0, labels.sample_index, flattened)
    soft = labels._replace(probs=flattened / totals.clamp_min(1e-30)[labels.sample_index],
                           move_targets=None, arrow_targets=None)
    return with_target_tables(soft) if labels.move_targets is not None else soft


def value_loss(value: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Mean squared error between the predicted values `[B]` and the outcomes `[B]`."""
    return torch.mean((value.float() - z) ** 2)


def ownership_loss(ownership: torch.Tensor, labels: LabelTensors) -> torch.Tensor:
    """The ownership term: squared error of the predicted owners `[B, S]` against the targets,
    over the squares each sample's mask keeps, summed per sample and divided by the board's S =
    N*N squares (KataGo's 1 / b^2 per square; 64 on 8x8), averaged over the samples that have a
    target (0 when none has)."""
    squared = labels.ownership_mask * (ownership.float() - labels.ownership) ** 2
    return squared.sum() / (labels.ownership.shape[1] * labels.ownership_samples.clamp_min(1.0))


def _source_arrow_entropy(tables: PolicyTables, squares: torch.Tensor) -> torch.Tensor:
    """sum over (src, dst) of P(src, dst) H(arrow | src, dst), `[B]` float32, for tables with the
    source term (`squares` `[B, 4]`: the source term's slots, `JointSourcePolicy.source_squares`).

    A source without an amazon keeps H(arrow | dst). For the slots, with L = log P(a | dst), S the
    source logits, N the norm and m = max_a S[slot, a],
    H = N - exp(m - N) sum_a exp(S - m) P(a | dst) (L + S): two `[4, Q] x [Q, Q]` products
    per position (Q = N*N squares, 64 on 8x8) instead of a `[Q, Q, Q]` table.
    """
    batch_size, count = tables.log_move.shape[0], tables.num_squares
    log_arrow = tables.log_arrow.reshape(batch_size, count, count)  # [b, dst, arrow]
    source = tables.source_arrow.reshape(batch_size, -1, count)  # [b, slot, arrow]
    norm = tables.source_norm.reshape(batch_size, -1, count)  # [b, slot, dst]
    with torch.autocast(source.device.type, enabled=False):
        p_arrow = log_arrow.exp()
        plain = -(p_arrow * log_arrow).sum(-1)  # [b, dst]: H(arrow | dst)
        peak = source.amax(dim=-1, keepdim=True)
        weights = (source - peak).exp_()
        expected = (torch.bmm(weights, (p_arrow * log_arrow).transpose(1, 2))
                    + torch.bmm(weights * source, p_arrow.transpose(1, 2)))
        with_source = norm - torch.exp(peak - norm) * expected  # [b, slot, dst]
    p_move = tables.log_move.exp().reshape(batch_size, count, count)
    p_moved = torch.gather(p_move, 1,
                           squares[:, :, None].expand(-1, -1, count))  # [b, slot, dst]
    return ((p_move.sum(dim=1) * plain).sum(-1)
            + (p_moved * (with_source - plain[:, None, :])).sum(dim=(1, 2)))


@torch.no_grad()
def policy_metrics(policy: JointPolicy | JointSourcePolicy | FactorizedPolicy,
                   labels: LabelTensors,
                   cross_entropy: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Monitoring figures over the full move distribution P(s, d) P(a | [s,] d), batch means.

    * `policy_entropy`: the model's entropy, H(src, dst) + sum_d P(d) H(arrow | d), or
      H(src, dst) + sum_{s, d} P(s, d) H(arrow | s, d) with the source term;
    * `target_entropy`: the entropy of the labels pi;
    * `policy_kl`: KL(pi || model) = cross-entropy - target entropy (>= 0; 0 iff the model puts
      exactly pi on the labelled moves).

    The label terms average over the samples' policy weight, as the loss does. `cross_entropy`,
    when given, is that of the same policy and labels, the sum of the `policy_loss_terms` (the
    training step has it already); otherwise it is gathered from the tables.
    """
    batch_size = labels.z.shape[0]
    weight = labels.policy_samples.clamp_min(1e-12)
    tables = policy_log_tables(policy)
    log_move, log_arrow = tables.log_move, tables.log_arrow
    p_move = log_move.exp()
    if tables.source_arrow is None:
        count = tables.num_squares
        p_dst = p_move.reshape(batch_size, count, count).sum(dim=1)
        arrow_entropy = -((log_arrow.exp() * log_arrow)
                          .reshape(batch_size, count, count).sum(-1))
        mean_arrow_entropy = (p_dst * arrow_entropy).sum(-1)
    else:
        mean_arrow_entropy = _source_arrow_entropy(tables, policy.source_squares)
    model_entropy = -(p_move * log_move).sum(-1) + mean_arrow_entropy
    if cross_entropy is None:
        log_q = move_log_probs(tables, labels.moves, labels.sample_index)
        cross_entropy = -(labels.probs * labels.label_weight * log_q).sum() / weight
    target_entropy = -(labels.label_weight
                       * torch.special.xlogy(labels.probs, labels.probs)).sum() / weight
    return {
        "policy_entropy": model_entropy.mean(),
        "target_entropy": target_entropy,
        "policy_kl": cross_entropy - target_entropy,
    }


# ------------------------------------------------------------------------------------------------
# Optimization


@dataclass(frozen=True)
class OptimConfig:
    """How a `Learner` trains; frozen, plain values only (it is stored in checkpoints)."""

    lr: float = 2e-4  # peak learning rate of AdamW
    weight_decay: float = 1e-4  # AdamW's decoupled weight decay, on conv and linear weights only
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW's moment decay rates
    eps: float = 1e-8  # AdamW's denominator epsilon
    # "constant" or "cosine": after warmup, cosine from lr to min_lr_ratio * lr
    schedule: str = "cosine"
    warmup_steps: int = 500  # steps of linear warmup from lr / warmup_steps to lr (0 = none)
    total_steps: int = 200_000  # the cosine schedule reaches its floor here and stays there
    min_lr_ratio: float = 0.05  # floor of the cosine schedule, as a fraction of lr
    grad_clip_norm: float = 1.0  # clip the global gradient L2 norm to this (0 = no clipping)
    precision: str = "auto"  # "bf16" autocast, "fp16" autocast + GradScaler, "fp32", or "auto"
    channels_last: bool = True  # run convolutions in NHWC memory format (faster on GPU and CPU)
    compile: bool = False  # wrap the model's forward in torch.compile
    policy_weight: float = 1.0  # weight of the policy cross-entropy terms in the loss
    value_weight: float = 1.0  # weight of the value MSE in the loss
    # weight of the ownership term (networks with the ownership head; the term already divides by
    # the 64 squares, so 1.5 is KataGo's 1.5 / b^2 per square)
    ownership_weight: float = 1.5
    # weight of the soft policy head's terms (networks with the head). KataGo trains it at 8; here,
    # with the gradient clipped to norm 1, 8 made the soft term most of the clipped step and lost
    # at equal learner steps where 1 was level (docs/training.md, docs/experiments.md)
    soft_policy_weight: float = 1.0
    soft_policy_temperature: float = 4.0  # T of the soft policy target pi^(1 / T); > 0
    # steps between two computations of the policy metrics that need the whole move
    # distribution (policy_entropy, target_entropy, policy_kl): steps 0, K, 2K, ... report them,
    # the others leave them out (1 = every step)
    metrics_every: int = 16
    # the joint head (without the source term) scored against dense [B, 4096] target tables
    # (`with_target_tables`), its log-softmax's gradient in one pass; false: the labels' entries
    # gathered from full log-probability tables. The same loss, to float rounding
    dense_policy_targets: bool = True
    # torch's fused AdamW kernel (CPU and GPU) instead of its loop over the parameters; the
    # same update, to float rounding (a GPU skips a non-finite step on the device with it only)
    fused_adamw: bool = True
    # torch.compile of the forward pass and the losses together (the backward compiled with
    # them); `compile` compiles the forward alone
    compile_step: bool = False
    # a warm start's first steps train only what it did not carry over unchanged: the parameters
    # `Learner.freeze` names (a run's: every tensor `--init` copied whole) get no gradient, no
    # update and no weight decay, and their batch norms keep their statistics, for this many
    # learner steps (0 = none); e.g. a flat value head made pooled trains its new first layer
    # before the trunk moves
    freeze_carried_steps: int = 0

    def __post_init__(self) -> None:
        for name in ("lr", "weight_decay", "eps", "grad_clip_norm", "policy_weight", "value_weight",
                     "min_lr_ratio", "ownership_weight", "soft_policy_weight",
                     "soft_policy_temperature"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value < 0):
                raise OptimConfigError(f"{name} must be a finite number >= 0, got {value!r}")
        if not self.lr > 0 or not self.eps > 0:
            raise OptimConfigError(f"lr and eps must be > 0, got {self.lr!r} and {self.eps!r}")
        if not self.soft_policy_temperature > 0:
            raise OptimConfigError(f"soft_policy_temperature must be > 0, "
                                   f"got {self.soft_policy_temperature!r}")
        if self.min_lr_ratio > 1:
            raise OptimConfigError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        if len(self.betas) != 2 or not all(0 <= beta < 1 for beta in self.betas):
            raise OptimConfigError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        for name in ("warmup_steps", "total_steps", "metrics_every", "freeze_carried_steps"):
            value = getattr(self, name)
            least = 1 if name == "metrics_every" else 0
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise OptimConfigError(f"{name} must be an int >= {least}, got {value!r}")
        for name in ("dense_policy_targets", "fused_adamw", "compile_step"):
            if not isinstance(getattr(self, name), bool):
                raise OptimConfigError(f"{name} must be true or false, got "
                                       f"{getattr(self, name)!r}")
        if self.compile and self.compile_step:
            raise OptimConfigError("compile and compile_step are exclusive: compile_step already "
                                   "compiles the forward pass")
        if self.schedule not in SCHEDULES:
            raise OptimConfigError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.precision not in PRECISIONS:
            raise OptimConfigError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")

    def replace(self, **changes: Any) -> OptimConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def learning_rate_factor(step: int, config: OptimConfig) -> float:
    """Multiplier of `config.lr` at optimizer step `step` (0-based)."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    span = max(config.total_steps - config.warmup_steps, 1)
    progress = min((step - config.warmup_steps) / span, 1.0)
    return (config.min_lr_ratio
            + (1.0 - config.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


class Learner:
    """One network's training state and its step.

    Args:
        model: the network to train (moved to `device`; trained in place).
        config: optimization settings.
        device: where to train.
        seed: seeds `rng`, the learner's own numpy generator, for sampling and augmentation (its
            state is saved with the checkpoint, so a restarted run draws the same batches).

    Attributes:
        step: optimizer steps taken.
        precision: the resolved precision ("bf16", "fp16" or "fp32").
        rng: `np.random.Generator` for `sample_batch` / `augment_batch`.
    """

    def __init__(
        self,
        model: PolicyValueNet,
        config: OptimConfig | None = None,
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        self.config = config if config is not None else OptimConfig()
        self.device = torch.device(device)
        self.precision = resolve_precision(self.config.precision, self.device)
        self.model = model.to(self.device)
        if self.config.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        decay = [p for p in self.model.parameters() if p.ndim >= 2]
        no_decay = [p for p in self.model.parameters() if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.config.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=self.config.lr, betas=self.config.betas, eps=self.config.eps,
            fused=True if self._fused_adamw() else None)
        config_for_schedule = self.config
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: learning_rate_factor(step, config_for_schedule))
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.step = 0
        self.rng = np.random.default_rng(seed)
        self._forward = torch.compile(self.model) if self.config.compile else self.model
        self._forward_and_losses = (torch.compile(self._uncompiled_forward_and_losses)
                                    if self.config.compile_step
                                    else self._uncompiled_forward_and_losses)
        # the joint head without the source term is scored against dense target tables
        self.target_tables = (self.config.dense_policy_targets
                              and model.config.policy_head == "joint"
                              and not model.config.arrow_source)
        self.frozen: tuple[str, ...] = ()  # `freeze`'s parameter names
        self._frozen_parameters: list[nn.Parameter] = []
        self._frozen_norms: list[nn.Module] = []

    def freeze(self, names: Collection[str]) -> None:
        """Hold the parameters `names` fixed while `step` < `OptimConfig.freeze_carried_steps`:
        their gradients are dropped (set to None) before clipping, so AdamW (fused or not)
        neither updates nor decays them and the clipped norm is the trained parameters' alone,
        and a batch norm whose parameters are all frozen stays in eval mode (its running
        statistics kept). Replaces an earlier call's names.

        Raises:
            ValueError: a name that is not a parameter of the model.
        """
        parameters = dict(self.model.named_parameters())
        unknown = sorted(set(names) - set(parameters))
        if unknown:
            raise ValueError(f"freeze: no parameters {unknown[:5]} in the model")
        self.frozen = tuple(sorted(names))
        self._frozen_parameters = [parameters[name] for name in self.frozen]
        self._frozen_norms = [
            module for prefix, module in self.model.named_modules()
            if isinstance(module, nn.modules.batchnorm._BatchNorm)
            and all(f"{prefix}.{name}" in names
                    for name, _ in module.named_parameters(recurse=False))]

    @property
    def freezing(self) -> bool:
        """Whether the next step holds the `freeze`d parameters fixed."""
        return bool(self.frozen) and self.step < self.config.freeze_carried_steps

    @property
    def num_planes(self) -> int:
        return self.model.config.num_planes

    def _fused_adamw(self) -> bool:
        """Whether the optimizer runs torch's fused AdamW kernel (`OptimConfig.fused_adamw`,
        on the devices that have it)."""
        return self.config.fused_adamw and self.device.type in FUSED_ADAMW_DEVICES

    def _skips_on_device(self) -> bool:
        """Whether a step with a non-finite gradient is skipped by the optimizer itself, on the
        device (fused AdamW with `found_inf`), rather than by a host-side test. On a GPU the
        host test would wait for the whole step to finish before queuing the next one; on the
        CPU there is nothing to wait for."""
        return self.device.type == "cuda" and self._fused_adamw()

    def wrap_model(self, wrapper: Callable[[PolicyValueNet], nn.Module]) -> None:
        """Run `train_step`'s forward pass through `wrapper(self.model)` from now on.

        The wrapper must return the model's `NetOutput` for the same features and train the
        model's own parameters, e.g. `torch.nn.parallel.DistributedDataParallel`, which averages
        the gradients across ranks during the backward pass. `self.model`, its state and the
        checkpoints stay those of the bare network; `torch.compile` (config `compile`) wraps the
        wrapper.
        """
        module = wrapper(self.model)
        self._forward = torch.compile(module) if self.config.compile else module
        if self.config.compile_step:  # compiled again around the new forward
            self._forward_and_losses = torch.compile(self._uncompiled_forward_and_losses)

    def _autocast(self) -> torch.autocast:
        dtype = PRECISION_DTYPES[self.precision]
        return torch.autocast(self.device.type, dtype=dtype, enabled=self.precision != "fp32")

    def features(self, positions: np.ndarray, board_size: int = 8) -> torch.Tensor:
        """Feature planes `[B, planes, N, N]` of `(B, 3 * W) uint64` positions of the
        `board_size` board, on the device, in the model's memory format."""
        rows = positions.shape[0]
        if self.device.type == "cuda":
            # A fresh pinned buffer per call (from torch's caching host allocator): the previous
            # step's non-blocking copy may still be reading the last one.
            host = torch.empty((rows, self.num_planes, board_size, board_size),
                               dtype=torch.float32, pin_memory=True)
            engine.features(positions, self.num_planes, out=host.numpy(), size=board_size)
            features = host.to(self.device, non_blocking=True)
            if self.config.channels_last:
                features = features.contiguous(memory_format=torch.channels_last)
            return features
        # A fresh array per call: a prefetch thread prepares the next batch while a step reads
        # this one (`BatchPrefetcher`).
        features = torch.from_numpy(engine.features(positions, self.num_planes, size=board_size))
        if self.config.channels_last:
            features = features.contiguous(memory_format=torch.channels_last)
        return features.to(self.device)

    def prepare(self, batch: SampleBatch) -> PreparedBatch:
        """`batch` as `train_step_tensors` consumes it: its feature planes (`features`) and its
        labels as tensors (`label_tensors`, with the dense targets the step scores against).
        Shares nothing with a step in progress, so a second thread may call it while one runs
        (`BatchPrefetcher`).

        Raises:
            SampleError: `batch` is empty.
        """
        if batch.size == 0:
            raise SampleError("train_step needs at least one sample")
        return PreparedBatch(self.features(batch.positions, batch.board_size),
                             label_tensors(batch, self.device, self.target_tables))

    def _uncompiled_forward_and_losses(
            self, features: torch.Tensor, labels: LabelTensors
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], NetOutput]:
        """The forward pass in the step's precision and the losses (`_losses`), with the
        network's output (`compile_step` compiles this whole function)."""
        with self._autocast():
            output = self._forward(features)
        loss, terms = self._losses(output, labels)
        return loss, terms, output

    def _losses(self, output: NetOutput,
                labels: LabelTensors) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        terms = policy_loss_terms(output.policy, labels)
        policy_loss = sum(terms.values())
        terms["value_mse"] = value_loss(output.value, labels.z)
        total = (self.config.policy_weight * policy_loss
                 + self.config.value_weight * terms["value_mse"])
        if output.ownership is not None:
            terms["ownership_loss"] = ownership_loss(output.ownership, labels)
            total = total + self.config.ownership_weight * terms["ownership_loss"]
        if output.soft_policy is not None:
            soft_labels = soft_policy_targets(labels, self.config.soft_policy_temperature)
            terms["soft_policy_loss"] = sum(policy_loss_terms(output.soft_policy,
                                                              soft_labels).values())
            total = total + self.config.soft_policy_weight * terms["soft_policy_loss"]
        terms["policy_loss"] = policy_loss
        terms["loss"] = total
        return total, terms

    def train_step(self, batch: SampleBatch | PreparedBatch) -> dict[str, float]:
        """One optimizer step on `batch` (augment it before, e.g. with `sample_batch`; or
        prepared, `prepare`).

        Returns:
            Metrics as floats: `loss` (weighted total), `policy_loss` and its terms (`policy_move`,
            `policy_arrow` for the joint head; `policy_src`, `policy_dst`, `policy_arrow` for the
            factorized one), `value_mse`, `grad_norm` (before clipping), `lr` (used for this
            step), `skipped` (1 when a non-finite gradient made the step a no-op),
            `ownership_loss` with the ownership head, `soft_policy_loss` (its policy terms against
            the soft target, summed) with the soft policy head, and `loss_scale` with fp16; and
            on every `OptimConfig.metrics_every`-th step (the first included) `policy_entropy`,
            `target_entropy` and `policy_kl` (`policy_metrics`). Reading them waits for the step;
            a training loop that should not wait uses `train_step_tensors` and `MetricSums`.
        """
        metrics = self.train_step_tensors(batch)
        names = [name for name, value in metrics.items() if isinstance(value, torch.Tensor)]
        values = torch.stack([metrics[name] for name in names]).tolist()
        floats = dict(zip(names, values, strict=True))
        floats.update({name: value for name, value in metrics.items()
                       if not isinstance(value, torch.Tensor)})
        return floats

    def train_step_tensors(self,
                           batch: SampleBatch | PreparedBatch) -> dict[str, torch.Tensor | float]:
        """`train_step` without waiting for the device: the same metrics, as 0-d float32
        tensors on the learner's device (`lr` is a float), read only when the caller reads them.

        On a GPU nothing in the step makes the host wait (the inputs go through pinned memory,
        a non-finite gradient is skipped on the device), so the next batch is assembled while
        this step runs.
        """
        features, labels = batch if isinstance(batch, PreparedBatch) else self.prepare(batch)
        with_metrics = self.step % self.config.metrics_every == 0
        freezing = self.freezing
        self.model.train()
        if freezing:
            for module in self._frozen_norms:
                module.eval()
        loss, terms, output = self._forward_and_losses(features, labels)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if freezing:  # before clipping: a None gradient is no update, no decay, no norm share
            for parameter in self._frozen_parameters:
                parameter.grad = None
        self.scaler.unscale_(self.optimizer)
        max_norm = self.config.grad_clip_norm if self.config.grad_clip_norm > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        finite = torch.isfinite(grad_norm)
        if self.scaler.is_enabled():
            self.scaler.step(self.optimizer)  # skips the update itself on inf/NaN gradients
            self.scaler.update()
        elif self._skips_on_device():
            self.optimizer.found_inf = (~finite).float()  # what GradScaler hands a fused optimizer
            self.optimizer.step()
            del self.optimizer.found_inf
        elif bool(finite):
            self.optimizer.step()
        with warnings.catch_warnings():
            # A skipped first step makes torch warn that the schedule ran ahead of the optimizer;
            # the schedule counts steps taken, skipped or not, so that is intended.
            warnings.filterwarnings("ignore",
                                    message=re.escape("Detected call of `lr_scheduler.step()`"))
            self.scheduler.step()
        self.step += 1
        if with_metrics:
            terms.update(policy_metrics(output.policy, labels,
                                        cross_entropy=terms["policy_loss"].detach().float()))
        metrics: dict[str, torch.Tensor | float] = {name: value.detach().float()
                                                    for name, value in terms.items()}
        metrics.update(grad_norm=grad_norm.detach().float(), lr=lr, skipped=(~finite).float())
        if self.scaler.is_enabled():
            # get_scale() would wait; the async scale is a [1] tensor
            metrics["loss_scale"] = self.scaler._get_scale_async().detach().float().reshape(())
        return metrics

    @torch.no_grad()
    def validation_metrics(self, batch: SampleBatch) -> dict[str, float]:
        """The loss terms and policy metrics of `batch` in eval mode, without training."""
        features, labels = self.prepare(batch)
        self.model.eval()
        with self._autocast():
            output = self.model(features)
        _, terms = self._losses(output, labels)
        terms.update(policy_metrics(output.policy, labels, cross_entropy=terms["policy_loss"]))
        return {name: float(value) for name, value in terms.items()}

    def state_dict(self) -> dict[str, Any]:
        """Everything a restart needs besides the configs and the process-wide RNGs (and the
        `freeze`d names, which a data-parallel rank built from it holds fixed too)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step,
            "rng": self.rng.bit_generator.state,
            "frozen": list(self.frozen),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of `state_dict` (strict about the model's parameter names and shapes)."""
        self.model.load_state_dict(state["model"])
        # Keep this learner's optimizer kernel (fused on a GPU) whatever the saving one used; a
        # fused optimizer then gets its step counts on the device, as it needs them.
        kernel = {key: self.optimizer.param_groups[0].get(key) for key in ("fused", "foreach")}
        optimizer = state["optimizer"]
        self.optimizer.load_state_dict({**optimizer, "param_groups": [
            {**group, **kernel} for group in optimizer["param_groups"]]})
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler.is_enabled() and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.step = int(state["step"])
        self.rng.bit_generator.state = state["rng"]
        if "frozen" in state:
            self.freeze(state["frozen"])

    def apply_optim_config(self) -> None:
        """Put `self.config`'s hyperparameters into the optimizer and the schedule.

        Restoring an optimizer also restores the hyperparameters it was saved with; a run resumed
        with other settings calls this afterwards, so the learning rate, weight decay, betas, eps
        and schedule are the config's from the restored step on.
        """
        config = self.config
        decay, no_decay = self.optimizer.param_groups
        decay["weight_decay"], no_decay["weight_decay"] = config.weight_decay, 0.0
        for group in self.optimizer.param_groups:
            group["betas"], group["eps"], group["initial_lr"] = config.betas, config.eps, config.lr
        self.scheduler.base_lrs = [config.lr] * len(self.optimizer.param_groups)
        factor = learning_rate_factor(self.scheduler.last_epoch, config)
        for group in self.optimizer.param_groups:
            group["lr"] = config.lr * factor


class MetricSums:
    """Per-step metrics summed where they were computed, without waiting for the device.

    `add` takes what `Learner.train_step_tensors` returns (0-d tensors, and floats); `means`
    reads every sum with one transfer. Sums are kept in float64, as Python would sum the floats.
    A metric that some steps leave out (the policy metrics between two
    `OptimConfig.metrics_every` steps) is averaged over the steps that reported it.
    """

    def __init__(self) -> None:
        self._tensors: dict[str, torch.Tensor] = {}
        self._floats: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self.steps = 0

    def add(self, metrics: dict[str, torch.Tensor | float]) -> None:
        """Add one step's metrics."""
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor):
                value = value.detach().double()
                self._tensors[name] = (self._tensors[name] + value if name in self._tensors
                                       else value)
            else:
                self._floats[name] = self._floats.get(name, 0.0) + float(value)
            self._counts[name] = self._counts.get(name, 0) + 1
        self.steps += 1

    def means(self) -> dict[str, float]:
        """The mean of each metric over the steps that reported it (empty before the first)."""
        names = list(self._tensors)
        values = torch.stack([self._tensors[name] for name in names]).tolist() if names else []
        means = {name: value / self._counts[name]
                 for name, value in zip(names, values, strict=True)}
        means.update({name: value / self._counts[name] for name, value in self._floats.items()})
        return means


class BatchPrefetcher:
    """Draws and prepares each next training batch on a second thread while a step runs.

    `draw` runs on the prefetcher's one thread, one call at a time and in the order the batches
    are taken (the first on the caller's thread), so a draw from a generator (the learner's
    `rng`) gives the batches, in the same order, that calling `draw` before each step would give.
    What a draw reads may change between the two ways: a batch drawn ahead is drawn from the
    replay window as it was when the previous step started. `draw` must be safe to call beside
    the caller's own work (`amazons.train.replay.ReplayBuffer.sample` is).

    Args:
        learner: prepares each batch (`Learner.prepare`) on the thread too.
        draw: returns the next batch (augmented).
    """

    def __init__(self, learner: Learner, draw: Callable[[], SampleBatch]) -> None:
        self._prepare = learner.prepare
        self._draw = draw
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-prefetch")
        self._pending: Future[PreparedBatch] | None = None

    def _next_batch(self) -> PreparedBatch:
        return self._prepare(self._draw())

    def next(self, more: bool = True) -> PreparedBatch:
        """The next batch; with `more`, the thread starts drawing the one after it (pass False
        for the last batch a phase takes, so that nothing is drawn that no step trains on).

        Raises:
            whatever `draw` or `Learner.prepare` raised for this batch.
        """
        pending, self._pending = self._pending, None
        batch = pending.result() if pending is not None else self._next_batch()
        if more:
            self._pending = self._executor.submit(self._next_batch)
        return batch

    def close(self) -> None:
        """Stop the thread, after the draw in progress (its batch is dropped)."""
        self._pending = None
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> BatchPrefetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
