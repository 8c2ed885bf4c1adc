"""Function-preserving growth: a trained network made bigger without changing what it computes.

A small net trained for a while is grown into a bigger one (more residual blocks, attention
blocks, wider layers) that computes exactly the same function at step 0 and trains on from there,
as KataGo's runs moved from 6 x 96 to 20 x 256 on the data the smaller nets had made.

What this module owns:

* `check_growth`: whether one `NetConfig` grows into another, and where each old trunk layer goes;
  `GrowthError` (a `ValueError` naming the field and both values) for a shrink, another head kind
  or feature planes, a removed `arrow_source` or `ownership_head`, or a trunk order that cannot
  keep the function.
* `tensor_axes` / `space_sizes`: the table of which space each axis of each state-dict tensor
  lives in, the one description both methods and `grown_entries` read.
* `grow_state_dict` / `grow`: the bigger network's weights, by one of `GROWTH_METHODS`;
  `grown_entries`, the entries of each tensor that growth created.
* `pool_value_head`: a network with the flat value head (8 x 8 only) carried over to the pooled
  one (every board size): every weight but the value MLP's first layer copied exactly, that layer
  initialized from the flat one (below). `check_growth` accepts `value_head` "flat" -> "pooled"
  (never back), and `grow_state_dict` converts first, then grows, so `--init OLD.pt
  net.value_head=pooled` (with or without other growth) goes through here.
* `net_shape` / `lineage_entry`: how a model file records the chain of nets it grew from.

Spaces. The residual stream's channels are one space across the whole trunk (the skip connections
tie the stem, every block and every head input together); each residual block's inner channels
(conv1's output, conv2's input) are a space of their own, as are each attention block's key
width, the joint head's move keys and arrow keys (`head_dim`, shared by queries and keys; the
source term's projection is an arrow query), the factorized head's hidden width, the value head's
channels (flattened into its MLP as `channel * 64 + square` by the flat head, pooled into three
numbers each by the pooled head: mean | scaled mean | max) and hidden units, and the ownership
head's channels. A tensor axis is a list of segments, each a space in one role:

* `PRODUCE`: the tensor computes these units (a layer's output rows, its bias, its batch norm);
* `QUERY`: output rows that are the query side of a bilinear map (`q . k`);
* `CONSUME`: the tensor reads these units (a layer's input columns), `repeat` entries per unit.

The fused projections have several segments: an attention block's `qkv` is query | key | value
(the value in the stream), `move_qk` and `arrow_qk` are query | key, and the update gate reads
stream | move keys. The old units of a space keep their indices; new units come after them, in
each segment.

The two methods (`GROWTH_METHODS`), after a fresh bigger net drawn with `seed`:

* `"net2net"` (Net2Net, Chen et al. 2016): each new unit copies a random old unit (its producing
  rows, bias and batch norm: weight, bias and running statistics); every weight a consumer puts
  on a unit is split among the unit and its copies with random positive fractions per weight
  entry that sum to 1, so the sum is unchanged while the copies' gradients differ (the symmetry
  breaks as it trains). For a bilinear map the keys are copied and the query side is split: each
  query row, weights and bias, takes its fraction of the old row, so `q . k` is unchanged.
* `"silent"`: the old weights are copied into the old units' places in the fresh net; every
  weight from a new input unit into an old output unit is zero, and new query rows (weights and
  bias) are zero, so `q . k` ignores new key dimensions. New units are live (random incoming
  weights, nonzero activations), only invisible; the zero weights get gradient because their
  inputs are nonzero, so they train. New stream channels are never made exactly zero before a
  ReLU: ReLU's gradient at zero is zero, and they would never train.

Both keep the function exactly (up to float32 rounding: the arithmetic runs in float64 and is
stored as float32). New residual blocks are the identity: their second batch norm's scale is 0
(as `ResidualBlock` initializes it), so a block computes relu(x + 0) = x, which is x only where
x >= 0: after the stem or a residual block (both end in a ReLU), not after an attention block
(`x + gate * attention` can be negative). New attention blocks start with their gate at 0, the
identity anywhere. The old trunk's layer order is matched as a subsequence of the new one so that
every new residual block follows the stem or an old residual block once the new identity layers
are skipped (`align_layers`); with `attention_placement="end"` the new residual blocks go after
the old ones, before the attention blocks.

Batch norm. The grown net matches the small one in eval mode (running statistics). In train mode
it matches too: batch statistics are per channel, an old channel's inputs are unchanged (silent:
new units feed it zero weights; net2net: split weights on identical copies) and a copy's
statistics are its original's; a new residual block's zero-scaled batch norm outputs its bias, 0,
whatever the batch. The running statistics then move with the batches, as in any training.

Added heads: an ownership head or a soft policy head the small net lacks starts fresh (neither
changes the policy or the value); an added `arrow_source` projection starts all zero, so the
source term is 0 and P(arrow | src, dst) = P(arrow | dst). A soft policy head the small net has
and the config lacks is left out (it is the learner's only).

Flat to pooled (`pool_value_head`). The flat head's first layer computes
h_j = sum_{c,s} W[j, c * 64 + s] r_c(s) + b_j over the value channels r_c at the 64 squares; the
pooled one reads per channel its mean m_c, its mean scaled by (N - 8) / 2 (0 on 8 x 8) and its
max. The carried layer puts on m_c the flat weights summed over the squares,
sum_s W[j, c * 64 + s], and 0 on the scaled mean and the max: it computes the flat layer exactly
when each channel is uniform over the board, and otherwise its projection onto such maps (no data
needed; measured on the shipped model in docs/network.md). The hidden bias and the output layer
are copied. The function changes (a network's value on 8 x 8 is close to the flat one's, not
equal); the trunk, the policy, the ownership head and the value head's 1x1 convolution and batch
norm are exactly the flat network's.

Imports torch, numpy and `amazons.neural.model`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from amazons.neural.model import (
    TRAINING_ONLY_FIELDS,
    NetConfig,
    PolicyValueNet,
    _attention_after,
    count_parameters,
)

__all__ = [
    "CONSUME",
    "GROWABLE_FIELDS",
    "GROWTH_METHODS",
    "PRODUCE",
    "QUERY",
    "GrowthError",
    "Segment",
    "align_layers",
    "check_growth",
    "grow",
    "grow_state_dict",
    "grown_entries",
    "layer_kinds",
    "lineage_entry",
    "net_shape",
    "pool_value_head",
    "space_sizes",
    "tensor_axes",
]

GROWTH_METHODS = ("net2net", "silent")
# the `NetConfig` fields growth may increase (never decrease)
GROWABLE_FIELDS = ("blocks", "channels", "attention_blocks", "attention_dim", "head_dim",
                   "value_channels", "value_hidden", "ownership_channels")
# heads growth may add (fresh, or for `arrow_source` all zero) but never remove
ADDABLE_FIELDS = ("arrow_source", "ownership_head")
# fields that must stay as they are
FIXED_FIELDS = ("num_planes", "policy_head")
# the one change of the value head's kind growth makes (`pool_value_head`), never undone
VALUE_HEAD_CHANGE = ("flat", "pooled")

PRODUCE = "produce"  # output units the tensor computes
QUERY = "query"  # output units on the query side of a bilinear map
CONSUME = "consume"  # input units the tensor reads

RESIDUAL = "R"  # a residual block in `layer_kinds`
ATTENTION = "A"  # an attention block


class GrowthError(ValueError):
    """One network cannot grow into another; the message names the field and both values."""


@dataclass(frozen=True)
class Segment:
    """A run of positions along a tensor axis: the units of one space, in one role."""

    space: str  # e.g. "stream", "trunk.3.inner", "policy_head.arrow_keys"
    role: str  # PRODUCE, QUERY or CONSUME
    # consecutive entries per unit (the flat value head's channels: 64 squares each)
    repeat: int = 1


# An axis: its segments in order, or None for an axis growth never changes (a kernel's 3 x 3, the
# feature planes, a single output).
Axis = tuple[Segment, ...] | None


# ------------------------------------------------------------------------------------------------
# The table


def _conv_bn(prefix: str, reads: Axis, space: str) -> dict[str, tuple[Axis, ...]]:
    """A `ConvBN` at `prefix`: a convolution from `reads` into `space`, then its batch norm."""
    out = (Segment(space, PRODUCE),)
    table: dict[str, tuple[Axis, ...]] = {f"{prefix}.conv.weight": (out, reads, None, None)}
    for name in ("weight", "bias", "running_mean", "running_var"):
        table[f"{prefix}.bn.{name}"] = (out,)
    table[f"{prefix}.bn.num_batches_tracked"] = ()
    return table


def _bilinear(prefix: str, space: str) -> dict[str, tuple[Axis, ...]]:
    """A 1x1 projection from the stream into query | key of one bilinear map."""
    out = (Segment(space, QUERY), Segment(space, PRODUCE))
    return {f"{prefix}.weight": (out, (Segment("stream", CONSUME),), None, None),
            f"{prefix}.bias": (out,)}


def _policy_axes(prefix: str, config: NetConfig) -> dict[str, tuple[Axis, ...]]:
    stream_in = (Segment("stream", CONSUME),)
    if config.policy_head == "factorized":
        table = _conv_bn(f"{prefix}.hidden", stream_in, f"{prefix}.hidden")
        table[f"{prefix}.maps.weight"] = (None, (Segment(f"{prefix}.hidden", CONSUME),), None, None)
        table[f"{prefix}.maps.bias"] = (None,)
        return table
    stream_out = (Segment("stream", PRODUCE),)
    table = _bilinear(f"{prefix}.move_qk", f"{prefix}.move_keys")
    table[f"{prefix}.update_gate.weight"] = (
        stream_out, (Segment("stream", CONSUME), Segment(f"{prefix}.move_keys", CONSUME)),
        None, None)
    table[f"{prefix}.update_gate.bias"] = (stream_out,)
    table.update(_bilinear(f"{prefix}.arrow_qk", f"{prefix}.arrow_keys"))
    if config.arrow_source:  # an arrow query from the source square's features
        queries = (Segment(f"{prefix}.arrow_keys", QUERY),)
        table[f"{prefix}.arrow_source.weight"] = (queries, stream_in)
        table[f"{prefix}.arrow_source.bias"] = (queries,)
    return table


def tensor_axes(config: NetConfig) -> dict[str, tuple[Axis, ...]]:
    """The space of each axis of each tensor in `PolicyValueNet(config).state_dict()`, in its
    order: one `Axis` per dimension (a 0-d tensor has none).

    Space names start with the module that owns them (`trunk.J.inner`, `trunk.J.attention_keys`,
    `policy_head.move_keys`, `value_head.hidden`, ...), except `"stream"`, the trunk's channels.
    """
    stream_in = (Segment("stream", CONSUME),)
    table = _conv_bn("stem", None, "stream")
    for index, kind in enumerate(layer_kinds(config)):
        prefix = f"trunk.{index}"
        if kind == RESIDUAL:
            table.update(_conv_bn(f"{prefix}.conv1", stream_in, f"{prefix}.inner"))
            table.update(_conv_bn(f"{prefix}.conv2", (Segment(f"{prefix}.inner", CONSUME),),
                                  "stream"))
        else:
            keys = f"{prefix}.attention_keys"
            qkv = (Segment(keys, QUERY), Segment(keys, PRODUCE), Segment("stream", PRODUCE))
            table[f"{prefix}.gate"] = (None,)
            table[f"{prefix}.qkv.weight"] = (qkv, stream_in, None, None)
            table[f"{prefix}.qkv.bias"] = (qkv,)
    table.update(_policy_axes("policy_head", config))
    if config.soft_policy_head:
        table.update(_policy_axes("soft_policy_head", config))
    table.update(_conv_bn("value_head.reduce", stream_in, "value_head.channels"))
    hidden = (Segment("value_head.hidden", PRODUCE),)
    channels = Segment("value_head.channels", CONSUME)
    # flat: channel-major squares; pooled: mean | scaled mean | max, each a channel per entry
    summary = ((Segment("value_head.channels", CONSUME, 64),) if config.value_head == "flat"
               else (channels, channels, channels))
    table["value_head.hidden.weight"] = (hidden, summary)
    table["value_head.hidden.bias"] = (hidden,)
    table["value_head.out.weight"] = (None, (Segment("value_head.hidden", CONSUME),))
    table["value_head.out.bias"] = (None,)
    if config.ownership_head:
        table.update(_conv_bn("ownership_head.hidden", stream_in, "ownership_head.channels"))
        table["ownership_head.out.weight"] = (
            None, (Segment("ownership_head.channels", CONSUME),), None, None)
        table["ownership_head.out.bias"] = (None,)
    return table


def space_sizes(config: NetConfig) -> dict[str, int]:
    """The units of every space `tensor_axes(config)` names."""
    sizes = {"stream": config.channels}
    for index, kind in enumerate(layer_kinds(config)):
        if kind == RESIDUAL:
            sizes[f"trunk.{index}.inner"] = config.channels
        else:
            sizes[f"trunk.{index}.attention_keys"] = config.attention_dim
    heads = ["policy_head"] + (["soft_policy_head"] if config.soft_policy_head else [])
    for head in heads:
        if config.policy_head == "factorized":
            sizes[f"{head}.hidden"] = config.head_dim
        else:
            sizes[f"{head}.move_keys"] = config.head_dim
            sizes[f"{head}.arrow_keys"] = config.head_dim
    sizes["value_head.channels"] = config.value_channels
    sizes["value_head.hidden"] = config.value_hidden
    if config.ownership_head:
        sizes["ownership_head.channels"] = config.ownership_channels
    return sizes


# ------------------------------------------------------------------------------------------------
# Which configs grow into which


def layer_kinds(config: NetConfig) -> str:
    """The trunk's layers in order, "R" a residual block and "A" an attention block (the order
    `PolicyValueNet` builds them in, e.g. "RRA" for 2 blocks and 1 attention block)."""
    spread = _attention_after(config)
    kinds = []
    for index in range(config.blocks):
        kinds.append(RESIDUAL)
        if index in spread:
            kinds.append(ATTENTION)
    if config.attention_placement == "end":
        kinds.extend(ATTENTION * config.attention_blocks)
    return "".join(kinds)


def align_layers(old: str, new: str) -> list[int] | None:
    """Where each old trunk layer goes in the new trunk, or None when no placement keeps the
    function.

    `old` must be a subsequence of `new` (same kinds, same order), and every new residual block
    must follow the stem or an old residual block once the new layers (identities) are skipped:
    the identity relu(x + 0) = x needs x >= 0, which an attention block's output is not. Among
    the placements that work, each old layer takes the earliest place it can (new residual blocks
    after the old ones, new attention blocks after the old ones, for the "end" placement).

    Args:
        old, new: `layer_kinds` strings.

    Returns:
        `placement[i]`, the new index of old layer i (increasing), or None.
    """
    # can[i][j]: old[i:] fits into new[j:] given old layer i - 1 (or the stem) precedes new[j]
    can = [[False] * (len(new) + 1) for _ in range(len(old) + 1)]
    can[len(old)][len(new)] = True
    for j in range(len(new) - 1, -1, -1):
        for i in range(len(old), -1, -1):
            after_residual = i == 0 or old[i - 1] == RESIDUAL
            skip = (new[j] == ATTENTION or after_residual) and can[i][j + 1]
            match = i < len(old) and old[i] == new[j] and can[i + 1][j + 1]
            can[i][j] = skip or match
    if not can[0][0]:
        return None
    placement, i = [], 0
    for j in range(len(new)):
        if i < len(old) and old[i] == new[j] and can[i + 1][j + 1]:
            placement.append(j)
            i += 1
    return placement


def check_growth(small: NetConfig, config: NetConfig) -> list[int]:
    """Check that `small` grows into `config`; returns `align_layers`' placement of the old trunk.

    `value_head` may go from "flat" to "pooled" (`pool_value_head`), never back.

    Raises:
        GrowthError: a field that may not change changed (`num_planes`, `policy_head`), a
            growable field shrank, `arrow_source` or `ownership_head` was removed, the value
            head went from pooled to flat, or the trunk's layers cannot be placed
            (`attention_placement`); the message names the field and both values.
    """
    if small.value_head != config.value_head \
            and (small.value_head, config.value_head) != VALUE_HEAD_CHANGE:
        raise GrowthError(f"value_head: {small.value_head!r} -> {config.value_head!r}: a "
                          f"pooled value head never becomes flat again (flat is 8x8-only)")
    for name in FIXED_FIELDS:
        if getattr(small, name) != getattr(config, name):
            raise GrowthError(f"{name}: {getattr(small, name)!r} -> {getattr(config, name)!r}: "
                              f"growth keeps the network's {name}")
    for name in ADDABLE_FIELDS:
        if getattr(small, name) and not getattr(config, name):
            raise GrowthError(f"{name}: True -> False: growth adds heads, it never removes one")
    for name in GROWABLE_FIELDS:
        unused = ((name == "ownership_channels" and not (small.ownership_head
                                                          and config.ownership_head))
                  or (name == "attention_dim" and small.attention_blocks == 0))
        if not unused and getattr(config, name) < getattr(small, name):
            raise GrowthError(f"{name}: {getattr(small, name)} -> {getattr(config, name)}: "
                              f"a shrink; growth only deepens or widens")
    known = {"attention_placement", "value_head", *FIXED_FIELDS, *GROWABLE_FIELDS,
             *ADDABLE_FIELDS, *TRAINING_ONLY_FIELDS}
    for field in dataclasses.fields(NetConfig):
        if field.name not in known and getattr(small, field.name) != getattr(config, field.name):
            raise GrowthError(f"{field.name}: {getattr(small, field.name)!r} -> "
                              f"{getattr(config, field.name)!r}: growth does not change it")
    placement = align_layers(layer_kinds(small), layer_kinds(config))
    if placement is None:
        raise GrowthError(
            f"attention_placement: {small.attention_placement!r} -> "
            f"{config.attention_placement!r} (trunk {layer_kinds(small)} -> "
            f"{layer_kinds(config)}, R a residual block, A an attention block): no placement "
            f"keeps the function; a new residual block would follow an attention block, whose "
            f"output can be negative")
    return placement


# ------------------------------------------------------------------------------------------------
# Growing


@dataclass
class _Plan:
    """What growing one small net into one config needs: names and sizes in the new net's terms."""

    rename: dict[str, str]  # the small net's trunk prefixes -> the new net's ("trunk.1." -> ...)
    old_sizes: dict[str, int]  # the small net's spaces, by their new names
    new_sizes: dict[str, int]
    axes: dict[str, tuple[Axis, ...]]  # the new net's table
    arrow_source_added: bool


def _plan(small: NetConfig, config: NetConfig) -> _Plan:
    """The plan of growing `small`, its value head already of `config`'s kind, into `config`."""
    placement = check_growth(small, config)
    rename = {f"trunk.{old}.": f"trunk.{new}." for old, new in enumerate(placement)}
    old_sizes = {_renamed(name, rename): size for name, size in space_sizes(small).items()}
    return _Plan(rename, old_sizes, space_sizes(config), tensor_axes(config),
                 config.arrow_source and not small.arrow_source)


def _renamed(name: str, rename: dict[str, str]) -> str:
    if name.startswith("trunk."):
        prefix = ".".join(name.split(".", 2)[:2]) + "."
        return rename[prefix] + name[len(prefix):]
    return name


def _unit_sources(plan: _Plan, method: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """For each grown space, the old unit behind each new unit: itself for old units, a random
    old unit for net2net's copies, -1 for silent's new units."""
    sources = {}
    for space, new_size in plan.new_sizes.items():
        if space not in plan.old_sizes:
            continue
        old_size = plan.old_sizes[space]
        if method == "net2net":
            copies = rng.integers(0, old_size, new_size - old_size)
        else:
            copies = np.full(new_size - old_size, -1)
        sources[space] = np.concatenate([np.arange(old_size), copies]).astype(np.int64)
    return sources


class _AxisLayout:
    """The positions along one grown axis: their source position in the old tensor (-1: none),
    whether their unit is new, and which query space each lies in (None elsewhere)."""

    def __init__(self, segments: tuple[Segment, ...], plan: _Plan,
                 sources: dict[str, np.ndarray]) -> None:
        source, new, query = [], [], []
        old_offset = 0
        for segment in segments:
            old_size, new_size = plan.old_sizes[segment.space], plan.new_sizes[segment.space]
            units = sources[segment.space]
            within = np.arange(segment.repeat)
            positions = old_offset + units[:, None] * segment.repeat + within
            source.append(np.where(units[:, None] >= 0, positions, -1).reshape(-1))
            new.append(np.repeat(np.arange(new_size) >= old_size, segment.repeat))
            query.extend([segment.space if segment.role == QUERY else None]
                         * (new_size * segment.repeat))
            old_offset += old_size * segment.repeat
        self.source = np.concatenate(source)
        self.new = np.concatenate(new)
        self.query = query
        self.old_length = old_offset
        self.consumes = segments[0].role == CONSUME
        if any((segment.role == CONSUME) != self.consumes for segment in segments):
            raise GrowthError(f"an axis mixes inputs and outputs: {segments}")


def _split_fractions(rng: np.random.Generator, shape: tuple[int, ...], groups: np.ndarray,
                     group_count: int, axis: int) -> np.ndarray:
    """Random positive fractions of `shape` that sum to 1 over each group of positions along
    `axis` (`groups[position]`), independently for every index of the other axes."""
    draws = np.moveaxis(rng.uniform(0.5, 1.5, shape), axis, 0)
    totals = np.zeros((group_count,) + draws.shape[1:])
    np.add.at(totals, groups, draws)
    return np.moveaxis(draws / totals[groups], 0, axis)


def _grow_tensor(key: str, old: np.ndarray, fresh: np.ndarray, axes: tuple[Axis, ...],
                 plan: _Plan, sources: dict[str, np.ndarray], method: str,
                 rng: np.random.Generator, query_fractions: dict[tuple[str, str], np.ndarray]
                 ) -> np.ndarray:
    """One tensor of the grown net, float64: `old` (the small net's) grown along its axes."""
    layouts = [None if axis is None else _AxisLayout(axis, plan, sources) for axis in axes]
    for dimension, layout in enumerate(layouts):
        expected = fresh.shape[dimension] if layout is None else layout.source.shape[0]
        old_expected = fresh.shape[dimension] if layout is None else layout.old_length
        if old.shape[dimension] != old_expected or fresh.shape[dimension] != expected:
            raise GrowthError(f"{key}: the growth table does not fit the tensor (old shape "
                              f"{list(old.shape)}, new {list(fresh.shape)})")
    module = key.rsplit(".", 1)[0]
    if method == "net2net":
        grown = old
        for dimension, layout in enumerate(layouts):
            if layout is not None:
                grown = np.take(grown, layout.source, axis=dimension)
        for dimension, layout in enumerate(layouts):
            if layout is not None and layout.consumes:
                grown = grown * _split_fractions(rng, grown.shape, layout.source,
                                                 layout.old_length, dimension)
        if layouts and layouts[0] is not None:
            rows = np.ones(grown.shape[0])
            for space in {space for space in layouts[0].query if space is not None}:
                where = np.array([space == name for name in layouts[0].query])
                cache = (module, space)
                if cache not in query_fractions:
                    groups = layouts[0].source[where]
                    query_fractions[cache] = _split_fractions(rng, (int(where.sum()),), groups,
                                                              layouts[0].old_length, 0)
                rows[where] = query_fractions[cache]
            grown = grown * rows.reshape((-1,) + (1,) * (grown.ndim - 1))
        return grown
    grown = fresh.copy()
    kept = [np.arange(size) if layout is None else np.flatnonzero(layout.source >= 0)
            for size, layout in zip(fresh.shape, layouts, strict=True)]
    grown[np.ix_(*kept)] = old
    if grown.ndim == 0:
        return grown
    old_out = (np.ones(grown.shape[0], bool) if layouts[0] is None else ~layouts[0].new)
    for dimension, layout in enumerate(layouts[1:], start=1):
        if layout is not None and layout.consumes:
            shape = [1] * grown.ndim
            shape[dimension] = -1
            mask = old_out.reshape([-1] + [1] * (grown.ndim - 1)) & layout.new.reshape(shape)
            grown = np.where(mask, 0.0, grown)
    if layouts[0] is not None:
        silent_queries = np.array([space is not None for space in layouts[0].query]) \
            & layouts[0].new
        grown[silent_queries] = 0.0
    return grown


def grow_state_dict(small: PolicyValueNet, config: NetConfig, method: str = "silent",
                    seed: int = 0) -> dict[str, torch.Tensor]:
    """The state dict of a `PolicyValueNet(config)` that computes what `small` computes.

    Computed in float64 on the CPU, stored in float32 (integer counters as they are). The fresh
    parts (new layers, new units of `"silent"`, added heads) come from a fresh net drawn with
    `seed` (the process-wide torch generator is left as it was); net2net's copies and fractions
    come from a generator seeded with `seed` too. A flat value head that `config` makes pooled is
    converted first (`pool_value_head`): the result then computes what the converted `small`
    computes (the same policy and ownership, a value close to `small`'s on 8 x 8).

    Args:
        small: the trained network.
        config: the bigger network's shape (`check_growth`).
        method: one of `GROWTH_METHODS` (the module docstring describes both).
        seed: the fresh weights' and the random choices' seed.

    Raises:
        GrowthError: `method` is unknown, or `small` does not grow into `config`
            (`check_growth`).
    """
    if method not in GROWTH_METHODS:
        raise GrowthError(f"growth method must be one of {GROWTH_METHODS}, got {method!r}")
    check_growth(small.config, config)
    if small.config.value_head != config.value_head:
        small = pool_value_head(small)
    plan = _plan(small.config, config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = PolicyValueNet(config).state_dict()
    rng = np.random.default_rng(seed)
    sources = _unit_sources(plan, method, rng)
    old_state = {_renamed(key, plan.rename): tensor.detach().cpu()
                 for key, tensor in small.state_dict().items()
                 if not any(key.startswith(f"{name}.") and not getattr(config, name)
                            for name in TRAINING_ONLY_FIELDS)}
    old_modules = {key.split(".", 1)[0] for key in old_state}
    query_fractions: dict[tuple[str, str], np.ndarray] = {}
    grown: dict[str, torch.Tensor] = {}
    for key, tensor in fresh.items():
        old = old_state.pop(key, None)
        if old is None:
            # an added source term on a grown head starts at 0; a fresh head stays fresh
            added_source = (plan.arrow_source_added and ".arrow_source." in key
                            and key.split(".", 1)[0] in old_modules)
            grown[key] = torch.zeros_like(tensor) if added_source else tensor.clone()
        elif not tensor.is_floating_point():
            grown[key] = old.clone()
        else:
            value = _grow_tensor(key, old.double().numpy(), tensor.double().numpy(),
                                 plan.axes[key], plan, sources, method, rng, query_fractions)
            grown[key] = torch.from_numpy(value).to(tensor.dtype)
    if old_state:
        raise GrowthError(f"the small net's {sorted(old_state)[0]!r} has no place in the grown "
                          f"net")
    return grown


def grow(small: PolicyValueNet, config: NetConfig, method: str = "silent",
         seed: int = 0) -> PolicyValueNet:
    """A new `PolicyValueNet(config)` computing what `small` computes (`grow_state_dict`), on
    the CPU, in `small`'s training mode.

    Raises:
        GrowthError: see `grow_state_dict`.
    """
    state = grow_state_dict(small, config, method, seed)
    with torch.random.fork_rng(devices=[]):
        model = PolicyValueNet(config)
    model.load_state_dict(state)
    return model.train(small.training)


def grown_entries(small: NetConfig, config: NetConfig) -> dict[str, np.ndarray]:
    """For each tensor of `PolicyValueNet(config)`, the entries growth created: `bool`,
    broadcastable to the tensor's shape, True where an axis index is a new unit, all True where
    the tensor's layer or head is new (what training must reach: `tests/test_growth.py` checks
    their gradients). An added source term counts as new. A value head made pooled
    (`pool_value_head`) counts its first layer's mean and max columns as new; its scaled-mean
    columns are not, as no 8 x 8 batch reaches them (their input is 0 there).

    Raises:
        GrowthError: `small` does not grow into `config`.
    """
    check_growth(small, config)
    pooled = small.value_head != config.value_head
    small = small.replace(value_head=config.value_head)
    plan = _plan(small, config)
    sources = _unit_sources(plan, "silent", np.random.default_rng(0))
    old_keys = {_renamed(key, plan.rename) for key in tensor_axes(small)}
    masks = {}
    for key, axes in plan.axes.items():
        if key not in old_keys:
            masks[key] = np.ones([1] * len(axes), bool)
            continue
        layouts = [None if axis is None else _AxisLayout(axis, plan, sources) for axis in axes]
        mask = np.zeros([1] * len(axes), bool)
        for dimension, layout in enumerate(layouts):
            if layout is not None:
                shape = [1] * len(axes)
                shape[dimension] = -1
                mask = mask | layout.new.reshape(shape)
        masks[key] = mask
    if pooled:
        channels = config.value_channels
        masks["value_head.hidden.weight"] = np.concatenate(
            [np.ones(channels, bool), np.zeros(channels, bool), np.ones(channels, bool)])[None]
    return masks


@torch.no_grad()
def pool_value_head(flat: PolicyValueNet) -> PolicyValueNet:
    """`flat` (a network with the flat value head) with the pooled value head, on the CPU, in
    `flat`'s training mode: a network that runs on every board size.

    Every weight and batch-norm statistic but the value MLP's first layer is `flat`'s, copied
    exactly (so the policy, the ownership map and the value head's 1x1 convolution are the
    same); that layer's weights on each channel's mean are the flat weights on the channel summed
    over the 64 squares, those on the scaled mean and the max 0, its bias `flat`'s (the module
    docstring says why). Computed in float64, stored in float32.

    Raises:
        GrowthError: `flat`'s value head is not flat.
    """
    if flat.config.value_head != "flat":
        raise GrowthError(f"value_head: {flat.config.value_head!r}: pool_value_head carries a "
                          f"flat value head over to the pooled one")
    config = flat.config.replace(value_head="pooled")
    state = {key: tensor.detach().cpu().clone() for key, tensor in flat.state_dict().items()}
    weight = state["value_head.hidden.weight"].double()  # [hidden, channels * 64]
    hidden, channels = weight.shape[0], config.value_channels
    pooled = torch.zeros(hidden, 3 * channels, dtype=torch.float64)
    pooled[:, :channels] = weight.reshape(hidden, channels, -1).sum(dim=2)
    state["value_head.hidden.weight"] = pooled.float()
    with torch.random.fork_rng(devices=[]):
        model = PolicyValueNet(config)
    model.load_state_dict(state)
    return model.train(flat.training)


# ------------------------------------------------------------------------------------------------
# Lineage


def net_shape(config: NetConfig) -> str:
    """The net's blocks x channels, e.g. "4x48", and "4x48-pooled" with the pooled value head."""
    return f"{config.blocks}x{config.channels}" + ("-pooled" if config.value_head == "pooled"
                                                   else "")


def lineage_entry(model: PolicyValueNet, init_config: NetConfig | None = None,
                  growth: str | None = None, init_model: str | None = None,
                  minutes: float = 0.0) -> dict[str, Any]:
    """One run's line in a model file's `extra["lineage"]` (the init model's lineage, then this):

        {"net": "4x48", "parameters": 123456, "grown_from": "2x32" | None,
         "growth": "net2net" | "silent" | None, "init_model": path | None, "minutes": 12.5}

    `grown_from` and `growth` are set when the run started from a model whose network
    (`init_config`) differs from `model`'s by more than the training-only heads, i.e. it grew;
    `minutes` is the run's wall clock so far.
    """
    grown = init_config is not None and any(
        getattr(init_config, field.name) != getattr(model.config, field.name)
        for field in dataclasses.fields(NetConfig) if field.name not in TRAINING_ONLY_FIELDS)
    return {"net": net_shape(model.config), "parameters": count_parameters(model),
            "grown_from": net_shape(init_config) if grown else None,
            "growth": growth if grown else None,
            "init_model": init_model or None, "minutes": round(float(minutes), 3)}
