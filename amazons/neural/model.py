"""The policy-value network, and the one place where its logits become priors over legal moves.

What this module owns:

* `NetConfig` (frozen, every field commented) and the presets `resnet40` (the design's model:
  20 residual blocks x 256 channels), `medium`, `small` and `tiny`.
* `PolicyValueNet`: feature planes `(B, 3 | 7, N, N)` from `amazons.engine.features` -> stem
  convolution -> residual trunk -> global self-attention over the N*N squares -> a policy head and
  a value head, and optionally an ownership head. It returns **logits only** (and the value,
  already squashed to [-1, 1], for the side to move). Every layer but the flat value head is
  independent of the board size N: convolutions, attention and the bilinear policy maps work on
  any number of squares. The value head (`NetConfig.value_head`) is either
  - `flat` (default, every network trained so far): its MLP reads the `value_channels x 64`
    map flattened, so it runs on 8 x 8 boards only;
  - `pooled` (KataGo's global pooling, lightvector/KataGo docs/KataGoMethods.md): each of its
    channels pooled over the board into its mean, its mean times (N - 8) / 2 and its maximum,
    then the MLP: no weight depends on N, so one network runs on every size in `BOARD_SIZES`.
  Two policy heads:
  - `joint` (default): move logits `[B, N*N, N*N]` = source queries x destination keys, i.e. the
    joint P(src, dst); then a latent simulation: the destination keys are written into the
    features through an update gate, `x_next = x + relu(conv1x1(concat(x, keys)))`, and the
    arrow logits `[B, N*N, N*N]` = P(arrow | dst) come from `x_next`'s arrow queries (at the
    shooter's square, the destination) x arrow keys (at the target square). One forward pass,
    the causal chain src -> dst -> arrow kept (seeds 001 and 003). With `NetConfig.arrow_source`
    the arrow query also adds a projection of the source square's features, so the arrow
    distribution is P(arrow | src, dst): the shooter knows which square it left. The term is
    computed for the four squares a move can leave, those of the side to move's amazons
    (feature plane 0).
  - `factorized`: three independent N*N-way heatmaps P(src), P(dst), P(arrow), the design's first
    version, kept for comparison.
  The ownership head (`NetConfig.ownership_head`, an auxiliary training target after KataGo)
  predicts, for each square, who owns it at the end of the game: `[B, N*N]` in [-1, 1], +1 the side
  to move, -1 the opponent (`amazons.train.replay` documents the target). The soft policy head
  (`NetConfig.soft_policy_head`, KataGo's auxiliary soft policy target) is a second policy head of
  the same kind, trained on the policy target flattened by a temperature
  (`amazons.neural.learner.soft_policy_targets`); it is for training only: `prepare_for_inference`
  drops it, so the servers, the exports and the C++ bot never see it (`TRAINING_ONLY_PREFIXES`).
* `policy_log_tables` / `gather_legal_priors`: the ONLY place where logits are normalized and
  restricted to legal moves. Every head reduces to the same `PolicyTables`, log P(src, dst)
  `(B, (N*N)**2)` and log P(arrow | dst) `(B, (N*N)**2)` (4,096 on 8 x 8), plus the source term's
  tables with
  `arrow_source`; the prior of a legal move is P(src, dst) * P(arrow | [src,] dst), renormalized
  over the position's legal moves.
* `prepare_for_inference`: an eval-mode copy with batch norms folded into the convolutions, in the
  chosen dtype and memory format (what production evaluates: `amazons.neural.served`);
  `load_prepared_weights` copies new weights, folded where they live (`folded_state_dict`), into
  such a copy in place, so CUDA graphs captured on it stay valid.
* `flatten_weights` / `unflatten_weights`: a model's floating state as one flat float32 buffer
  (state-dict order), the form weights are published in through shared memory.
* `resolve_precision`: what `"auto"` precision means on a device, for training and inference.
* `check_board_input`: the one check of feature planes' shape and of the board size a network
  runs on (`NetInputError` naming the size: the flat value head is 8 x 8 only).

The search's `Evaluator` on this model, over batch buckets and CUDA graphs, is
`amazons.neural.cuda_graphs.NetworkEvaluator`.

Squares are `y * N + x` everywhere (the flattening order of an `N x N` plane; `y * 8 + x` on the
8 x 8 board every evaluator and the learner use today), moves are canonical `(src, dst, arrow)`
int triples (docs/ARCHITECTURE.md; board sizes: docs/network.md). Imports torch, numpy,
`amazons.engine`, `amazons.boards` (the board sizes) and `amazons.core.backends` (the precision
names).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from amazons import engine
from amazons._engine import AMAZONS_PER_SIDE  # the squares a move can leave: the source term's rows
from amazons.boards import SIZES as BOARD_SIZES  # the boards a pooled value head runs on
from amazons.core.backends import COMPUTED_PRECISIONS
from amazons.neural.numpy_net import FLAT_BOARD_SIZE, board_size_problem

__all__ = [
    "AMAZONS_PER_SIDE",
    "ATTENTION_PLACEMENTS",
    "BOARD_SIZES",
    "FLAT_BOARD_SIZE",
    "NUM_SQUARES",
    "POLICY_HEADS",
    "PRECISIONS",
    "PRECISION_DTYPES",
    "PRESETS",
    "TRAINING_ONLY_FIELDS",
    "TRAINING_ONLY_PREFIXES",
    "VALUE_HEADS",
    "FactorizedPolicy",
    "JointPolicy",
    "JointSourcePolicy",
    "NetConfig",
    "NetConfigError",
    "NetInputError",
    "NetOutput",
    "OwnershipHead",
    "PolicyTables",
    "PolicyValueNet",
    "PooledValueHead",
    "ValueHead",
    "count_parameters",
    "arrow_log_probs",
    "check_board_input",
    "flatten_weights",
    "folded_state_dict",
    "inference_config_dict",
    "gather_legal_priors",
    "load_prepared_weights",
    "move_log_probs",
    "mover_squares",
    "net_config",
    "policy_log_tables",
    "prepare_for_inference",
    "resolve_precision",
    "segment_ids",
    "unflatten_weights",
    "value_pooling",
    "weights_elements",
]

# The 8 x 8 board's squares: the batch contract of the evaluators and the learner, which run 8 x 8
# only; the network itself reads N from its input.
NUM_SQUARES = 64
# "flat": the value MLP reads the flattened value_channels x 64 map (8 x 8 only); "pooled": it
# reads each channel's mean, size-scaled mean and max over the board (any size)
VALUE_HEADS = ("flat", "pooled")
# `NetConfig` flags of the heads only the learner trains, each also the head's attribute name on
# `PolicyValueNet`: an inference copy (`prepare_for_inference`), its folded weights and every
# export leave the heads out, and an exported network's config the flags.
TRAINING_ONLY_FIELDS = ("soft_policy_head",)
# their state-dict prefixes
TRAINING_ONLY_PREFIXES = tuple(f"{name}." for name in TRAINING_ONLY_FIELDS)
POLICY_HEADS = ("joint", "factorized")
ATTENTION_PLACEMENTS = ("end", "spread")
# how training and inference compute (see `resolve_precision`): "auto" or a computed precision
PRECISIONS = ("auto", *COMPUTED_PRECISIONS)
PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class NetConfigError(ValueError):
    """A `NetConfig` field is invalid, or a preset name is unknown; the message names it."""


class NetInputError(ValueError):
    """An array passed to the network or an evaluator has the wrong shape, dtype or contents."""


@dataclass(frozen=True)
class NetConfig:
    """Shape of a `PolicyValueNet`; frozen, plain values only, so it pickles and serializes."""

    # input feature planes from `engine.features`: 3 (mine, theirs, arrows) or 7
    num_planes: int = 7
    blocks: int = 20  # residual blocks in the trunk, each conv3x3-BN-ReLU-conv3x3-BN + skip, ReLU
    channels: int = 256  # channels of the stem and of every residual block
    attention_blocks: int = 1  # global self-attention blocks over the N*N squares (0 = none)
    # "end": all after the trunk; "spread": evenly among the blocks
    attention_placement: str = "end"
    attention_dim: int = 32  # query/key width of each attention block (values keep all channels)
    # "joint" (P(src, dst) and P(arrow | dst)) or "factorized" (3 maps of N*N)
    policy_head: str = "joint"
    # joint head only: the arrow query adds a projection of the source square's features, so the
    # arrow distribution is P(arrow | src, dst) (head_dim x (channels + 1) more weights)
    arrow_source: bool = False
    # query/key width of the joint head's bilinear maps; hidden width (factorized)
    head_dim: int = 64
    value_channels: int = 4  # channels of the value head's 1x1 convolution before its MLP
    value_hidden: int = 256  # hidden units of the value head's MLP
    # how the value MLP reads those channels (`VALUE_HEADS`): "flat" flattens the 8 x 8 map
    # (value_channels * 64 inputs; 8 x 8 boards only; every network before the field), "pooled"
    # pools each channel over the board into mean, mean * (N - 8) / 2 and max
    # (3 * value_channels inputs; any size in `BOARD_SIZES`)
    value_head: str = "flat"
    # add the ownership head: each square's final owner, [B, N*N] in [-1, 1]
    ownership_head: bool = False
    ownership_channels: int = 16  # channels of the ownership head's 1x1 convolution
    # add the soft policy head: a second policy head of `policy_head`'s kind (and `arrow_source`),
    # trained on the flattened policy target (KataGo's auxiliary soft policy target); the
    # learner's only, left out of inference copies and exports (`TRAINING_ONLY_PREFIXES`)
    soft_policy_head: bool = False

    def __post_init__(self) -> None:
        positive = ("blocks", "channels", "attention_dim", "head_dim", "value_channels",
                    "value_hidden", "ownership_channels")
        for name in positive + ("attention_blocks",):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise NetConfigError(f"{name} must be an int, got {value!r}")
            if value < (1 if name in positive else 0):
                raise NetConfigError(f"{name} must be >= {1 if name in positive else 0}, "
                                     f"got {value}")
        for name in ("ownership_head", "arrow_source", "soft_policy_head"):
            if not isinstance(getattr(self, name), bool):
                raise NetConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.num_planes not in engine.FEATURE_PLANES:
            raise NetConfigError(f"num_planes must be 3 or 7, got {self.num_planes!r}")
        if self.policy_head not in POLICY_HEADS:
            raise NetConfigError(f"policy_head must be one of {POLICY_HEADS}, "
                                 f"got {self.policy_head!r}")
        if self.value_head not in VALUE_HEADS:
            raise NetConfigError(f"value_head must be one of {VALUE_HEADS}, "
                                 f"got {self.value_head!r}")
        if self.arrow_source and self.policy_head != "joint":
            raise NetConfigError(f"arrow_source needs policy_head 'joint', "
                                 f"got {self.policy_head!r}")
        if self.attention_placement not in ATTENTION_PLACEMENTS:
            raise NetConfigError(
                f"attention_placement must be one of {ATTENTION_PLACEMENTS}, "
                f"got {self.attention_placement!r}"
            )
        if self.attention_placement == "spread" and self.attention_blocks > self.blocks:
            raise NetConfigError(
                f"attention_blocks ({self.attention_blocks}) cannot be spread over "
                f"{self.blocks} blocks"
            )

    def replace(self, **changes: Any) -> NetConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, NetConfig] = {
    "resnet40": NetConfig(),
    "medium": NetConfig(blocks=10, channels=128, attention_dim=16, head_dim=32, value_hidden=128),
    "small": NetConfig(blocks=6, channels=64, attention_dim=16, head_dim=32, value_hidden=64),
    "tiny": NetConfig(blocks=2, channels=32, attention_dim=8, head_dim=16, value_channels=2,
                      value_hidden=32),
}


def net_config(preset: str = "resnet40", **overrides: Any) -> NetConfig:
    """The config of a preset, with some fields overridden, e.g. `net_config("tiny", num_planes=3)`.

    Raises:
        NetConfigError: unknown preset or field, or an invalid value.
    """
    if preset not in PRESETS:
        raise NetConfigError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    try:
        return PRESETS[preset].replace(**overrides)
    except TypeError as error:  # an unknown field name
        raise NetConfigError(f"preset {preset!r}: {error}") from None


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """The precision `precision` names on `device`: "auto" -> "bf16" on a GPU that supports it,
    "fp16" on other GPUs, "fp32" on a CPU; "bf16", "fp16" and "fp32" as they are.

    The one resolver of the learner (`OptimConfig.precision`) and of inference (the server's and
    the network players' `precision`). On a CPU "auto" keeps fp32, exact to the training model:
    CPUs without native bf16 (most x86 before AVX-512 BF16 / AMX) run bf16 many times slower,
    and where bf16 is native it is faster but looser (docs/BENCHMARKS.md); ask for "bf16"
    explicitly where it pays. `PRECISION_DTYPES` maps the result to the torch dtype.

    Raises:
        NetConfigError: `precision` is not one of `PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise NetConfigError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    if torch.device(device).type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


# ------------------------------------------------------------------------------------------------
# Outputs


class JointPolicy(NamedTuple):
    """Logits of the `joint` head (S = N*N squares of an N x N board, 64 on 8 x 8)."""

    move_logits: torch.Tensor  # [B, S, S] float, [b, src, dst]: unnormalized log P(src, dst)
    # [B, S, S] float, [b, dst, arrow]: unnormalized log P(arrow | dst)
    arrow_logits: torch.Tensor


class JointSourcePolicy(NamedTuple):
    """Logits of the `joint` head with the arrow source term (`NetConfig.arrow_source`).

    log P(arrow | src, dst) = log softmax over the arrows of arrow_logits[dst] + source_logits[i],
    i the slot of the side to move's amazon on src. S = N*N squares.
    """

    move_logits: torch.Tensor  # [B, S, S] float, [b, src, dst]: unnormalized log P(src, dst)
    arrow_logits: torch.Tensor  # [B, S, S] float, [b, dst, arrow]: the destination's arrow logits
    # [B, 4, S] float, [b, slot, arrow]: added when the slot's amazon moves
    source_logits: torch.Tensor
    # [B, 4] int64, the square of each slot (the side to move's amazons), increasing
    source_squares: torch.Tensor


class FactorizedPolicy(NamedTuple):
    """Logits of the `factorized` head: three independent distributions over the N*N squares."""

    src_logits: torch.Tensor  # [B, N*N] float
    dst_logits: torch.Tensor  # [B, N*N] float
    arrow_logits: torch.Tensor  # [B, N*N] float


class NetOutput(NamedTuple):
    """What `PolicyValueNet.forward` returns."""

    policy: JointPolicy | JointSourcePolicy | FactorizedPolicy  # logits only
    value: torch.Tensor  # [B] float in [-1, 1], for the side to move
    # [B, N*N] float in [-1, 1], +1 = the side to move's; None without the head
    ownership: torch.Tensor | None = None
    # the soft policy head's logits (same kind as `policy`); None without the head or when skipped
    soft_policy: JointPolicy | JointSourcePolicy | FactorizedPolicy | None = None


# ------------------------------------------------------------------------------------------------
# Layers


class ConvBN(nn.Module):
    """A bias-free convolution followed by batch norm ("same" padding, stride 1).

    `fold()` merges the (eval-mode) batch norm into the convolution for inference.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2,
                              bias=False)
        self.bn: nn.Module = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))

    @torch.no_grad()
    def fold(self) -> None:
        """Fold the batch norm's running statistics and affine map into the convolution."""
        bn = self.bn
        if not isinstance(bn, nn.BatchNorm2d):
            return
        conv = self.conv
        weight, bias = _fold_conv_bn(conv.weight, bn)
        folded = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size,
                           padding=conv.padding, bias=True).to(conv.weight.device)
        folded.weight.copy_(weight)
        folded.bias.copy_(bias)
        self.conv = folded
        self.bn = nn.Identity()


def _fold_conv_bn(weight: torch.Tensor, bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight `[out, in, k, k]` and bias `[out]` of a bias-free convolution followed by the
    eval-mode batch norm `bn`, as one convolution: the one place this arithmetic lives."""
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    return weight * scale.reshape(-1, 1, 1, 1), bn.bias - bn.running_mean * scale


class ResidualBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus the input, then ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = ConvBN(channels, channels, 3)
        self.conv2 = ConvBN(channels, channels, 3)
        # Each block starts as the identity: deep towers train from the first step.
        nn.init.zeros_(self.conv2.bn.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.conv2(F.relu(self.conv1(x))))


def _squares(maps: torch.Tensor) -> torch.Tensor:
    """`[B, C, N, N]` -> `[B, N*N, C]` (square-major; free for channels_last tensors)."""
    return maps.flatten(2).transpose(1, 2)


def _projection(channels: int, widths: tuple[int, ...], scaled: int) -> nn.Conv2d:
    """One 1x1 convolution giving several projections stacked along channels (split them with
    `widths`); the first `scaled` output channels (the queries) start with weights and bias times
    1 / sqrt(scaled), the attention scale, folded in once (it is linear) instead of multiplying the
    `[B, N*N, N*N]` scores at every call."""
    projection = nn.Conv2d(channels, sum(widths), 1)
    with torch.no_grad():
        projection.weight[:scaled].mul_(1.0 / math.sqrt(scaled))
        projection.bias[:scaled].mul_(1.0 / math.sqrt(scaled))
    return projection


class GlobalSelfAttention(nn.Module):
    """Every square attends to all N*N: softmax(q k^T / sqrt(d)) v, added through a learnable gate.

    Queries, keys (width `key_dim`) and values (all channels) come from one 1x1 convolution. The
    gate starts at 0, so the block starts as the identity and the trunk's features pass unchanged
    until the attention has learned something worth adding.
    """

    def __init__(self, channels: int, key_dim: int) -> None:
        super().__init__()
        self.widths = (key_dim, key_dim, channels)
        self.qkv = _projection(channels, self.widths, key_dim)
        self.gate = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        query, key, value = self.qkv(x).split(self.widths, dim=1)
        energy = torch.bmm(_squares(query), key.flatten(2))  # [B, N*N queries, N*N keys]
        attended = torch.bmm(torch.softmax(energy, dim=-1), _squares(value))  # [B, N*N, C]
        attended = attended.transpose(1, 2).reshape(batch, channels, height, width)
        return x + self.gate * attended


class JointPolicyHead(nn.Module):
    """P(src, dst) from source queries x destination keys, then P(arrow | dst) after a latent move.

    Latent simulation (seed 001's "update gate"): the destination keys, a map of "where an amazon
    could land", are concatenated to the features and written in by a 1x1 convolution,
    `x_next = x + relu(update_gate(concat(x, keys)))`; the arrow is then chosen from `x_next`:
    arrow queries at the shooter's square (the destination) x arrow keys at the target square.
    Queries and keys of each bilinear map come from one 1x1 convolution, the 1 / sqrt(head_dim)
    scale folded into the queries' initial weights.

    With `source=True` (`NetConfig.arrow_source`) the query of a move's arrow is the
    destination's arrow query plus `u[src] = arrow_source(x_next[src])`, a linear projection of
    the source square's latent features: `(q[dst] + u[src]) . k[arrow]` splits into the
    destination's arrow logits and a source term `u[src] . k[arrow]` over the same keys. Only the
    side to move's four amazons can leave their squares, so the term is computed for those four
    (`sources`, `[B, 4]`): a `[4, N*N]` map per position (`JointSourcePolicy.source_logits`). The
    latent board stays one per position: a board per (src, dst) pair would run the update gate up
    to (N*N)**2 times (4,096 on 8 x 8).
    """

    def __init__(self, channels: int, head_dim: int, source: bool = False) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.move_qk = _projection(channels, (head_dim, head_dim), head_dim)
        self.update_gate = nn.Conv2d(channels + head_dim, channels, 1)
        self.arrow_qk = _projection(channels, (head_dim, head_dim), head_dim)
        self.arrow_source: nn.Linear | None = None
        if source:
            self.arrow_source = nn.Linear(channels, head_dim)
            with torch.no_grad():  # a query, scaled as `_projection` scales the others
                self.arrow_source.weight.mul_(1.0 / math.sqrt(head_dim))
                self.arrow_source.bias.mul_(1.0 / math.sqrt(head_dim))

    def forward(self, x: torch.Tensor,
                sources: torch.Tensor | None = None) -> JointPolicy | JointSourcePolicy:
        """The logits; `sources` `[B, 4] int64`, the side to move's amazon squares, goes with the
        source term (`mover_squares`).

        Raises:
            NetInputError: a head with the source term and no `sources`.
        """
        src_queries, dst_keys = self.move_qk(x).split(self.head_dim, dim=1)
        move_logits = torch.bmm(_squares(src_queries), dst_keys.flatten(2))
        x_next = x + F.relu(self.update_gate(torch.cat([x, dst_keys], dim=1)))
        arrow_queries, arrow_keys = self.arrow_qk(x_next).split(self.head_dim, dim=1)
        arrow_keys = arrow_keys.flatten(2)
        arrow_logits = torch.bmm(_squares(arrow_queries), arrow_keys)
        if self.arrow_source is None:
            return JointPolicy(move_logits, arrow_logits)
        if sources is None:
            raise NetInputError("the joint head's source term needs the side to move's amazon "
                                "squares")
        features = _squares(x_next)
        at_sources = torch.gather(features, 1,
                                  sources[:, :, None].expand(-1, -1, features.shape[2]))
        source_logits = torch.bmm(self.arrow_source(at_sources), arrow_keys)  # [B, 4, N*N]
        return JointSourcePolicy(move_logits, arrow_logits, source_logits, sources)


def mover_squares(features: torch.Tensor) -> torch.Tensor:
    """The side to move's amazon squares, `[B, 4] int64` increasing, from feature planes
    `[B, P, N, N]` (plane 0 of either set marks them; an empty padding board gives 4
    squares too)."""
    marks = features[:, 0].reshape(features.shape[0], -1)
    return marks.topk(AMAZONS_PER_SIDE, dim=1).indices.sort(dim=1).values


class FactorizedPolicyHead(nn.Module):
    """Three independent per-square heatmaps: src, dst, arrow logits (the design's
    first version)."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.hidden = ConvBN(channels, hidden, 1)
        self.maps = nn.Conv2d(hidden, 3, 1)

    def forward(self, x: torch.Tensor) -> FactorizedPolicy:
        maps = self.maps(F.relu(self.hidden(x))).flatten(2)
        return FactorizedPolicy(maps[:, 0], maps[:, 1], maps[:, 2])


class ValueHead(nn.Module):
    """The flat value head (`value_head="flat"`): 1x1 conv-BN-ReLU, the `[value_channels, 8, 8]`
    map flattened channel-major (`channel * 64 + square`), then an MLP to one scalar, tanh: the
    value for the side to move. Its first layer has a weight per square, so it runs on 8 x 8
    boards only."""

    def __init__(self, channels: int, value_channels: int, hidden: int) -> None:
        super().__init__()
        self.reduce = ConvBN(channels, value_channels, 1)
        self.hidden = nn.Linear(value_channels * NUM_SQUARES, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        reduced = F.relu(self.reduce(x)).flatten(1)
        return torch.tanh(self.out(F.relu(self.hidden(reduced)))).squeeze(-1)


def value_pooling(reduced: torch.Tensor) -> torch.Tensor:
    """The pooled value head's board summary of its channels `[B, C, N, N]` (after the ReLU):
    `[B, 3C]`, per channel its mean over the N*N squares, that mean times (N - 8) / 2, and its
    maximum (KataGo's global pooling, centred on 8 x 8 and scaled so that sizes 6..10 give -1..1;
    0 on 8 x 8), in that order (`[mean_0..mean_C-1, scaled_0.., max_0..]`)."""
    size = reduced.shape[-1]
    mean = reduced.mean(dim=(2, 3))
    return torch.cat([mean, mean * ((size - FLAT_BOARD_SIZE) / 2.0), reduced.amax(dim=(2, 3))],
                     dim=1)


class PooledValueHead(nn.Module):
    """The pooled value head (`value_head="pooled"`): 1x1 conv-BN-ReLU to `value_channels`, each
    channel pooled over the board (`value_pooling`: mean, mean * (N - 8) / 2, max), then an MLP
    to one scalar, tanh. No weight depends on the board size. Its modules carry the flat head's
    names (`reduce`, `hidden`, `out`): only `hidden.weight`'s shape differs,
    `[value_hidden, 3 * value_channels]`."""

    def __init__(self, channels: int, value_channels: int, hidden: int) -> None:
        super().__init__()
        self.reduce = ConvBN(channels, value_channels, 1)
        self.hidden = nn.Linear(3 * value_channels, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = value_pooling(F.relu(self.reduce(x)))
        return torch.tanh(self.out(F.relu(self.hidden(pooled)))).squeeze(-1)


class OwnershipHead(nn.Module):
    """1x1 conv-BN-ReLU, 1x1 conv to one plane, tanh: each square's predicted owner at the end of
    the game, `[B, N*N]` in [-1, 1] (+1 the side to move, -1 the opponent, 0 neutral)."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.hidden = ConvBN(channels, hidden, 1)
        self.out = nn.Conv2d(hidden, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.out(F.relu(self.hidden(x)))).flatten(1)


def _attention_after(config: NetConfig) -> set[int]:
    """Indices of the residual blocks followed by an attention block when they are spread."""
    count = config.attention_blocks
    if config.attention_placement == "end" or count == 0:
        return set()
    return {round((i + 1) * config.blocks / count) - 1 for i in range(count)}


class PolicyValueNet(nn.Module):
    """Feature planes in, policy logits and a value out.

    Args:
        config: the network's shape (see `NetConfig`, `PRESETS`).

    Input: `[B, num_planes, N, N]` float (channels_last or not), N = 8 with the flat value head,
    any N in `BOARD_SIZES` with the pooled one (one size per batch). Output: `NetOutput`.
    """

    def __init__(self, config: NetConfig) -> None:
        super().__init__()
        if not isinstance(config, NetConfig):
            raise NetConfigError(f"config must be a NetConfig, got {type(config).__name__}")
        self.config = config
        channels = config.channels
        self.stem = ConvBN(config.num_planes, channels, 3)
        layers: list[nn.Module] = []
        spread = _attention_after(config)
        for index in range(config.blocks):
            layers.append(ResidualBlock(channels))
            if index in spread:
                layers.append(GlobalSelfAttention(channels, config.attention_dim))
        if config.attention_placement == "end":
            layers.extend(GlobalSelfAttention(channels, config.attention_dim)
                          for _ in range(config.attention_blocks))
        self.trunk = nn.Sequential(*layers)
        self.policy_head: nn.Module = _policy_head(config)
        if config.soft_policy_head:
            self.soft_policy_head = _policy_head(config)
        value_head = PooledValueHead if config.value_head == "pooled" else ValueHead
        self.value_head = value_head(channels, config.value_channels, config.value_hidden)
        if config.ownership_head:
            self.ownership_head = OwnershipHead(channels, config.ownership_channels)

    def forward(self, features: torch.Tensor, with_ownership: bool = True,
                with_soft_policy: bool = True) -> NetOutput:
        """Logits and value of a batch of feature planes `[B, num_planes, N, N]`.

        `with_ownership=False` skips the ownership head (the search's evaluations do not use it);
        `NetOutput.ownership` is None then, and always without the head. `with_soft_policy=False`
        skips the soft policy head the same way (`NetOutput.soft_policy`).

        Raises:
            NetInputError: if the input is not `[B, num_planes, N, N]` with N in `BOARD_SIZES`,
                or N is not 8 and the value head is flat (8 x 8 only).
        """
        check_board_input(features, self.config)
        x = self.trunk(F.relu(self.stem(features)))
        ownership = (self.ownership_head(x) if with_ownership and self.config.ownership_head
                     else None)
        sources = mover_squares(features) if self.config.arrow_source else None
        policy = self.policy_head(x, sources) if sources is not None else self.policy_head(x)
        soft_policy = None
        if with_soft_policy and self.config.soft_policy_head:
            soft_policy = (self.soft_policy_head(x, sources) if sources is not None
                           else self.soft_policy_head(x))
        return NetOutput(policy, self.value_head(x), ownership, soft_policy)


def check_board_input(features: torch.Tensor, config: NetConfig) -> int:
    """The board size N of feature planes `[B, num_planes, N, N]` that a network of `config`
    runs on.

    Raises:
        NetInputError: not `[B, num_planes, N, N]` with N in `BOARD_SIZES`, or N other than 8
            for the flat value head (the message names the size).
    """
    planes = config.num_planes
    if (features.dim() != 4 or features.shape[1] != planes
            or features.shape[2] != features.shape[3]):
        shape = (f"[B, {planes}, 8, 8]" if config.value_head == "flat"
                 else f"[B, {planes}, N, N] with N in 6..10")
        raise NetInputError(f"features must have shape {shape}, got {list(features.shape)}")
    size = int(features.shape[2])
    problem = board_size_problem(size, config.value_head)
    if problem:
        raise NetInputError(problem)
    return size


def _policy_head(config: NetConfig) -> nn.Module:
    """A policy head of `config`'s kind (`policy_head`, `arrow_source`), freshly initialized."""
    if config.policy_head == "joint":
        return JointPolicyHead(config.channels, config.head_dim, config.arrow_source)
    return FactorizedPolicyHead(config.channels, config.head_dim)


def inference_config_dict(config: NetConfig) -> dict[str, Any]:
    """`config`'s fields as a dict without the training-only ones (`TRAINING_ONLY_FIELDS`): the
    config of the network an inference copy or an export holds.

    A flat `value_head` is left out too: a flat network's export then holds the config it held
    before the field existed (readers and files of that time see nothing new), and a config
    without the field describes the flat head."""
    fields = dataclasses.asdict(config)
    for name in TRAINING_ONLY_FIELDS:
        del fields[name]
    if fields["value_head"] == "flat":
        del fields["value_head"]
    return fields


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)


def prepare_for_inference(
    model: PolicyValueNet, dtype: torch.dtype = torch.float32, channels_last: bool = True
) -> PolicyValueNet:
    """An eval-mode copy for inference: batch norms folded, weights in `dtype`, no gradients.

    The copy's state dict differs from the original's (folded convolutions, no batch norms, no
    training-only heads: its config has `soft_policy_head` off): it is for evaluating only, never
    for training or saving. The original is not touched.
    """
    prepared = copy.deepcopy(model).eval()
    for name in TRAINING_ONLY_FIELDS:
        if getattr(prepared.config, name):
            delattr(prepared, name)
            prepared.config = prepared.config.replace(**{name: False})
    for module in prepared.modules():
        if isinstance(module, ConvBN):
            module.fold()
    prepared = prepared.to(dtype=dtype)
    if channels_last:
        prepared = prepared.to(memory_format=torch.channels_last)
    prepared.requires_grad_(False)
    return prepared


@torch.no_grad()
def folded_state_dict(model: PolicyValueNet) -> dict[str, torch.Tensor]:
    """The state dict a `prepare_for_inference` copy of `model` has (batch norms folded), computed
    where `model` lives without copying the model: on a CPU, the fold costs the device nothing.

    Entries outside the folded convolutions are `model`'s own tensors (not copies); the
    training-only heads' entries (`TRAINING_ONLY_PREFIXES`) are left out, as the copy has none.
    """
    state = {key: tensor for key, tensor in model.state_dict().items()
             if not key.startswith(TRAINING_ONLY_PREFIXES)}
    folded: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if isinstance(module, ConvBN) and isinstance(module.bn, nn.BatchNorm2d) \
                and not f"{name}.".startswith(TRAINING_ONLY_PREFIXES):
            prefix = f"{name}." if name else ""
            for key in [key for key in state if key.startswith(f"{prefix}bn.")]:
                del state[key]
            folded[f"{prefix}conv.weight"], folded[f"{prefix}conv.bias"] = _fold_conv_bn(
                module.conv.weight, module.bn)
    state.update(folded)
    return state


@torch.no_grad()
def load_prepared_weights(prepared: PolicyValueNet, model: PolicyValueNet) -> None:
    """Copy `model`'s weights, batch norms folded (`folded_state_dict`, where `model` lives), into
    `prepared` (a `prepare_for_inference` copy of a model of the same config) in place.

    Every parameter of `prepared` keeps its storage, so CUDA graphs captured on it stay valid
    and replay with the new weights; its dtype and memory format stay too.

    Raises:
        NetInputError: the two models' weights differ in names or shapes; the message names one.
    """
    source = folded_state_dict(model)
    target = prepared.state_dict()
    if source.keys() != target.keys():
        unmatched = sorted(source.keys() ^ target.keys())
        raise NetInputError(f"the weights do not fit the prepared model: {unmatched[0]!r} is in "
                            f"one only ({len(unmatched)} names differ)")
    for key, tensor in target.items():
        if tensor.shape != source[key].shape:
            raise NetInputError(f"the weights do not fit the prepared model: {key!r} has shape "
                                f"{list(source[key].shape)}, the prepared model's "
                                f"{list(tensor.shape)}")
        tensor.copy_(source[key])


def _float_entries(model: nn.Module) -> list[torch.Tensor]:
    """The floating-point entries of `model.state_dict()` in its order (batch-norm step counters,
    integers, are left out: inference never reads them)."""
    return [tensor for tensor in model.state_dict().values() if tensor.is_floating_point()]


def weights_elements(model: nn.Module) -> int:
    """Length of `model`'s flat weights (`flatten_weights`): elements of its floating state."""
    return sum(tensor.numel() for tensor in _float_entries(model))


@torch.no_grad()
def flatten_weights(model: nn.Module, out: torch.Tensor) -> None:
    """Write `model`'s floating state (parameters and batch-norm statistics, state-dict order)
    into `out`, `[weights_elements(model)] float32` on any device (a shared-memory view on the
    host, for `amazons.serving.server.InferenceServer.publish_shared_weights`).

    Raises:
        NetInputError: `out` is not a flat float32 tensor of that length.
    """
    elements = weights_elements(model)
    if out.dtype != torch.float32 or out.shape != (elements,):
        raise NetInputError(f"out must be a ({elements},) float32 tensor, got {list(out.shape)} "
                            f"{out.dtype}")
    offset = 0
    for tensor in _float_entries(model):
        out[offset:offset + tensor.numel()].copy_(tensor.reshape(-1))
        offset += tensor.numel()


@torch.no_grad()
def unflatten_weights(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy flat weights (`flatten_weights` of a model of the same config) into `model` in place.

    Raises:
        NetInputError: `flat` is not `[weights_elements(model)]` floating point.
    """
    elements = weights_elements(model)
    if not flat.is_floating_point() or flat.shape != (elements,):
        raise NetInputError(f"flat weights of this network are ({elements},) floats, got "
                            f"{list(flat.shape)} {flat.dtype}")
    offset = 0
    for tensor in _float_entries(model):
        tensor.copy_(flat[offset:offset + tensor.numel()].view_as(tensor))
        offset += tensor.numel()


# ------------------------------------------------------------------------------------------------
# From logits to priors: the one place where softmax and legal-move masking happen.


class PolicyTables(NamedTuple):
    """Log tables of a policy head's output (`policy_log_tables`), float32 unless said; S = N*N
    squares of the board the network ran on (64 on 8 x 8, so the tables are `[B, 4096]`).

    The log-probability of a full move (src, dst, arrow) is
    `log_move[src * S + dst] + log_arrow[dst * S + arrow]`, and with the source term
    (`NetConfig.arrow_source`), when `source_slot[src] = i >= 0`, also
    `+ source_arrow[i * S + arrow] - source_norm[i * S + dst]`: the weights exp(source_arrow)
    of the amazon that moved reweight the destination's arrow distribution, and source_norm
    renormalizes each (src, dst) row over the S arrows. A source without an amazon of the side
    to move (never a legal move's) keeps P(arrow | dst). `move_log_probs` gathers it.
    """

    log_move: torch.Tensor  # [B, S * S], [b, src * S + dst]: log P(src, dst)
    # [B, S * S], [b, dst * S + arrow]: log P(arrow | dst), the destination's arrow distribution
    log_arrow: torch.Tensor
    # The source term's tables (None without it), per slot i of the side to move's amazons:
    source_arrow: torch.Tensor | None = None  # [B, 4 * S], [b, i * S + arrow]: the term's logits
    # [B, 4 * S], [b, i * S + dst]: log sum_a P(a | dst) exp(source_arrow[i, a])
    source_norm: torch.Tensor | None = None
    # [B, S] int64, [b, square]: its amazon's slot, -1 where none stands
    source_slot: torch.Tensor | None = None

    @property
    def num_squares(self) -> int:
        """S, the squares of the board the tables are for (64 on 8 x 8)."""
        return math.isqrt(self.log_move.shape[1])


def policy_log_tables(policy: JointPolicy | JointSourcePolicy | FactorizedPolicy) -> PolicyTables:
    """Log-probability tables of a policy head's output, in float32 (Q = N*N squares, 64 on
    8 x 8, read from the logits' shapes).

    * `log_move[b, src * Q + dst]` = log P(src, dst): a log-softmax over all Q**2 pairs (4,096 on
      8 x 8; legal or not). For the factorized head, log P(src) + log P(dst).
    * `log_arrow[b, dst * Q + arrow]` = log P(arrow | dst): a log-softmax over the Q arrows of
      each destination row. For the factorized head the same log P(arrow) in every row.
    * With the joint head's source term, for each of the side to move's amazons (slot i):
      `source_arrow[b, i * Q + arrow]` = the term's logits S, `source_norm[b, i * Q + dst]` =
      log sum_a P(a | dst) exp(S[i, a]), and `source_slot[b, square]` = the slot of the amazon on
      that square (-1 for none), so that log P(arrow | src, dst) = log_arrow + source_arrow -
      source_norm (`arrow_log_probs`). The norm is one `[4, Q] x [Q, Q]` product per
      position, exp(S - max S) times P(a | dst), in float32 whatever the autocast (a sum of
      exponentials needs its range).

    The probability of a full move is then P(src, dst) * P(arrow | [src,] dst); over all Q**3
    triples it sums to 1. Training uses these tables directly (the targets sit on legal moves);
    the search uses `gather_legal_priors`, which renormalizes them over the legal moves.

    Args:
        policy: `JointPolicy` (logits `[B, Q, Q]` twice), `JointSourcePolicy` (and the source
            term's) or `FactorizedPolicy` (`[B, Q]` x 3).

    Returns:
        `PolicyTables`.
    """
    if isinstance(policy, JointPolicy | JointSourcePolicy):
        batch = policy.move_logits.shape[0]
        log_move = F.log_softmax(policy.move_logits.float().reshape(batch, -1), dim=-1)
        log_arrow = F.log_softmax(policy.arrow_logits.float(), dim=-1)
        if isinstance(policy, JointPolicy):
            return PolicyTables(log_move, log_arrow.reshape(batch, -1))
        source = policy.source_logits.float()  # [B, 4, N*N]
        with torch.autocast(source.device.type, enabled=False):
            peak = source.amax(dim=-1, keepdim=True)  # [B, 4, 1]
            # In place where autograd allows it: on a CPU fresh buffers cost more than
            # the arithmetic.
            weights = torch.bmm((source - peak).exp_(),
                                log_arrow.exp().transpose(1, 2))  # [B, 4, dst]
            # Each sum is at least exp(-(its source row's logit range)): below float32's range only
            # past a range of ~87, where the clamp keeps the norm finite.
            norm = torch.log(weights.clamp_min_(torch.finfo(torch.float32).tiny)).add_(peak)
        squares = policy.source_squares
        slots = torch.full((batch, policy.move_logits.shape[1]), -1, dtype=torch.int64,
                           device=squares.device)
        slots.scatter_(1, squares,
                       torch.arange(AMAZONS_PER_SIDE, device=squares.device).expand_as(squares))
        return PolicyTables(log_move, log_arrow.reshape(batch, -1), source.reshape(batch, -1),
                            norm.reshape(batch, -1), slots)
    if isinstance(policy, FactorizedPolicy):
        batch = policy.src_logits.shape[0]
        log_src = F.log_softmax(policy.src_logits.float(), dim=-1)
        log_dst = F.log_softmax(policy.dst_logits.float(), dim=-1)
        log_arrow = F.log_softmax(policy.arrow_logits.float(), dim=-1)
        log_move = (log_src[:, :, None] + log_dst[:, None, :]).reshape(batch, -1)
        squares = policy.src_logits.shape[1]
        return PolicyTables(log_move,
                            log_arrow[:, None, :].expand(batch, squares, squares)
                            .reshape(batch, -1))
    raise NetInputError(
        f"policy must be a JointPolicy, JointSourcePolicy or FactorizedPolicy, "
        f"got {type(policy).__name__}")


def segment_ids(offsets: np.ndarray) -> np.ndarray:
    """Owner of each row of a CSR layout: `(offsets[-1],) int64`, row j -> the i with
    `offsets[i] <= j < offsets[i + 1]`.

    Args:
        offsets: `(B + 1,)` integer offsets, starting at 0, non-decreasing.
    """
    return np.repeat(np.arange(offsets.shape[0] - 1, dtype=np.int64), np.diff(offsets))


def _gather(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`table.reshape(-1)[index]`: one flat gather (`index` already holds the row offsets)."""
    return table.reshape(-1)[index]


def arrow_log_probs(tables: PolicyTables, moves: torch.Tensor,
                    batch_index: torch.Tensor) -> torch.Tensor:
    """log P(arrow | dst), or log P(arrow | src, dst) with the source term, of full moves.

    Args:
        tables: from `policy_log_tables`.
        moves: `[M, 3]` integer (src, dst, arrow) squares, on the tables' device.
        batch_index: `[M] int64`, the table row (position) of each move.

    Returns:
        `[M] float32`, each a log-probability over the N*N arrows of its move's (src and) dst.
    """
    moves = moves.long()
    squares = tables.num_squares
    src, dst, arrow = moves[:, 0], moves[:, 1], moves[:, 2]
    log_p = _gather(tables.log_arrow, batch_index * (squares * squares) + dst * squares + arrow)
    if tables.source_arrow is None:
        return log_p
    slot = _gather(tables.source_slot, batch_index * squares + src)
    row = (batch_index * AMAZONS_PER_SIDE + slot.clamp_min(0)) * squares
    term = _gather(tables.source_arrow, row + arrow) - _gather(tables.source_norm, row + dst)
    return log_p + torch.where(slot >= 0, term, 0.0)


def move_log_probs(tables: PolicyTables, moves: torch.Tensor,
                   batch_index: torch.Tensor) -> torch.Tensor:
    """log P(src, dst) + log P(arrow | [src,] dst) of full moves, one table row per move.

    Args:
        tables: from `policy_log_tables`.
        moves: `[M, 3]` integer (src, dst, arrow) squares, on the tables' device.
        batch_index: `[M] int64`, the table row (position) of each move.

    Returns:
        `[M] float32` log-probabilities under the full (unmasked) distribution over (N*N)**3
        moves.
    """
    moves = moves.long()
    squares = tables.num_squares
    pair = batch_index * (squares * squares) + moves[:, 0] * squares + moves[:, 1]
    return _gather(tables.log_move, pair) + arrow_log_probs(tables, moves, batch_index)


def gather_legal_priors(tables: PolicyTables, moves: torch.Tensor,
                        batch_index: torch.Tensor) -> torch.Tensor:
    """Priors of the legal moves: P(src, dst) * P(arrow | [src,] dst), renormalized per position.

    This is the one place where the network's distribution is restricted to legal moves: one
    vectorized gather per table (`move_log_probs`: flat indices `src * N*N + dst` and
    `dst * N*N + arrow` in the move's own row, and the source term's by the slot of its src) and
    a segment softmax over each position's moves. Positions without moves simply own no rows.

    Args:
        tables: from `policy_log_tables`.
        moves: `[M, 3]` integer legal moves (canonical), on the tables' device.
        batch_index: `[M] int64` position of each move (`segment_ids(move_offsets)`).

    Returns:
        `[M] float32` priors; each position's priors sum to 1.
    """
    log_prior = move_log_probs(tables, moves, batch_index)
    positions = tables.log_move.shape[0]
    peak = torch.full((positions,), -math.inf, dtype=log_prior.dtype, device=log_prior.device)
    peak = peak.scatter_reduce(0, batch_index, log_prior, reduce="amax", include_self=True)
    weights = torch.exp(log_prior - peak[batch_index])
    totals = torch.zeros(positions, dtype=weights.dtype, device=weights.device)
    totals = totals.index_add(0, batch_index, weights)
    return weights / totals[batch_index]
