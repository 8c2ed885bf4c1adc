"""The policy-value network without torch: an exported model file and its forward pass in numpy.

What this module owns:

* The exported model format (`FORMAT`, `VERSION`): one `.npz` file (numpy's zip of `.npy`
  arrays) read with `allow_pickle=False`, so loading can never run code. It holds
  - `header`: a `uint8` array of UTF-8 JSON: `{"format": "amazons-npnet", "version": 2 | 3,
    "net_config": {...}, "trunk": ["residual", ..., "attention"], "sha256": "...",
    "source": {...}}`; `net_config` is the network's `NetConfig` as
    `amazons.core.config.config_to_dict` writes it, `trunk` names the
    trunk's layers in order, `sha256` digests every array (name, dtype, shape, bytes) and
    `source` says where the weights came from (checkpoint file, its digest, step, torch version);
  - every weight as a `float32` array named like the inference-prepared torch model's state dict
    (`amazons.neural.model.prepare_for_inference`: batch norms folded into the convolutions), in
    torch's layouts: convolutions `(out, in, k, k)` with a bias `(out,)`, linear layers `(out, in)`.
  Version 2 added the ownership head's arrays (present when `net_config["ownership_head"]`);
  version 1 files, whose configs predate the field, load as networks without it. Version 3 added
  the joint head's arrow source term (`policy_head.arrow_source`, present when
  `net_config["arrow_source"]`); a network without the term is still written as version 2, which
  readers older than the term load, and a config without the field describes one without it.
  Version 4 added the pooled value head (`net_config["value_head"] == "pooled"`:
  `value_head.hidden.weight` is `(value_hidden, 3 * value_channels)`); it is written for such
  networks only, and a config without the field describes the flat head.
  `write_model` writes it atomically (`amazons.core.atomic`); `load_model` checks the header, the
  names, shapes and dtypes against the config, and the digest, and raises `ModelFileError` naming
  the file and what is wrong.
* `NumpyNet`: the forward pass of `amazons.neural.model.PolicyValueNet` in float32 numpy, every
  preset, both policy heads (with the arrow source term), both value heads and the global
  self-attention blocks: feature planes `(B, P, N, N)` in (N = 8 with the flat value head, 6..10
  with the pooled one), the log-probability tables of `amazons.neural.model.policy_log_tables`
  (`PolicyTables`) and the value out; the ownership head's map on request (`NumpyNet.ownership`),
  never in the search's `forward`. Inside, a board is `(B, N*N, C)`, square-major (square
  `y * N + x`), so 1x1 convolutions are one matrix product and 3x3 convolutions one product over
  gathered 3x3 neighbourhoods. Those matrices, in order
  (`NumpyNet.layout_arrays`), and the network's shape (`native_shape`) are what the native core
  reads: the Botzone C++ export (`amazons.botzone.cpp_export`) writes both into its source, the
  extension (`amazons.neural.native`) loads them.
* `legal_priors`: `amazons.neural.model.gather_legal_priors` in numpy
  (P(src, dst) * P(arrow | [src,] dst), renormalized over each position's legal moves).
* `NumpyEvaluator`: the search's `Evaluator` protocol (`amazons.mcts`) on a `NumpyNet`.

The exported file is written by `amazons.export` from a torch checkpoint; the Botzone bot and
terminal play load it. Imports numpy, the rules (`amazons.engine`, `amazons._engine`), the board
sizes (`amazons.boards`), `amazons.evaluator` (the batch contract) and `amazons.core.atomic`;
never torch.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from amazons import engine
from amazons._engine import AMAZONS_PER_SIDE
from amazons.boards import SIZES as BOARD_SIZES  # the boards a pooled value head runs on
from amazons.core.atomic import atomic_write
from amazons.evaluator import EvaluatorInputError, check_batch, check_positions, describe_array

__all__ = [
    "FORMAT",
    "VERSION",
    "ModelFileError",
    "NpNetInputError",
    "NumpyEvaluator",
    "NumpyNet",
    "PolicyTables",
    "array_digest",
    "expected_shapes",
    "legal_priors",
    "limit_blas_threads",
    "load_model",
    "native_shape",
    "write_model",
]

FORMAT = "amazons-npnet"
# 4: the pooled value head; 3: the arrow source term's arrays; each written only for networks
# that need it
VERSION = 4
# version 1 has no ownership head, 1 and 2 no arrow source term, 1 to 3 the flat value head only
READABLE_VERSIONS = (1, 2, 3, 4)
HEADER_KEY = "header"
NUM_SQUARES = 64  # the 8 x 8 board's, the flat value head's
TRUNK_LAYERS = ("residual", "attention")
POLICY_HEADS = ("joint", "factorized")
VALUE_HEADS = ("flat", "pooled")  # `amazons.neural.model.VALUE_HEADS`
FLAT_BOARD_SIZE = 8  # the one board size the flat value head runs on (its MLP reads 64 squares)
_CONFIG_INTS = ("num_planes", "channels", "attention_dim", "head_dim", "value_channels",
                "value_hidden")


class ModelFileError(ValueError):
    """An exported model file cannot be written or read; the message names the file and the
    reason."""


def board_size_problem(size: int, value_head: str) -> str:
    """Why a network with `value_head` cannot run on `size x size` feature planes, or "": the one
    rule of the board sizes a network runs on, for the torch model (`check_board_input`) and npnet
    alike."""
    if size not in BOARD_SIZES:
        return (f"features are {size}x{size}: the network runs on boards of "
                f"{', '.join(map(str, BOARD_SIZES))} squares a side")
    if size != FLAT_BOARD_SIZE and value_head == "flat":
        return (f"features are {size}x{size}: the flat value head (value_head='flat') is 8x8-only; "
                "a network with value_head='pooled' runs on 6x6 to 10x10")
    return ""


class NpNetInputError(EvaluatorInputError):
    """An array passed to the numpy network or its evaluator has the wrong shape, dtype or contents
    (a batch that breaks the `Evaluator` contract raises `EvaluatorInputError` itself)."""


# ------------------------------------------------------------------------------------------------
# The file format


def expected_shapes(net_config: dict[str, Any], trunk: list[str]) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every array an exported model of this config and trunk must hold.

    Args:
        net_config: the `NetConfig` fields, as a dict (`num_planes`, `channels`, `attention_dim`,
            `policy_head`, `head_dim`, `value_channels`, `value_hidden` are used, and
            `ownership_channels` when `ownership_head` is true; a missing `ownership_head` or
            `arrow_source` is false, a missing `value_head` is "flat").
        trunk: the trunk's layers in order, each `"residual"` or `"attention"`.

    Raises:
        ModelFileError: a field is missing or invalid, or a trunk layer is unknown.
    """
    for name in _CONFIG_INTS:
        value = net_config.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelFileError(f"net_config field {name!r} must be a positive int, got {value!r}")
    if net_config["num_planes"] not in engine.FEATURE_PLANES:
        raise ModelFileError(f"net_config num_planes must be 3 or 7, "
                             f"got {net_config['num_planes']!r}")
    head = net_config.get("policy_head")
    if head not in POLICY_HEADS:
        raise ModelFileError(f"net_config policy_head must be one of {POLICY_HEADS}, got {head!r}")
    channels, planes = net_config["channels"], net_config["num_planes"]
    key_dim, head_dim = net_config["attention_dim"], net_config["head_dim"]
    value_channels, value_hidden = net_config["value_channels"], net_config["value_hidden"]
    shapes: dict[str, tuple[int, ...]] = {
        "stem.conv.weight": (channels, planes, 3, 3), "stem.conv.bias": (channels,)}
    for index, kind in enumerate(trunk):
        prefix = f"trunk.{index}"
        if kind == "residual":
            for conv in ("conv1", "conv2"):
                shapes[f"{prefix}.{conv}.conv.weight"] = (channels, channels, 3, 3)
                shapes[f"{prefix}.{conv}.conv.bias"] = (channels,)
        elif kind == "attention":
            width = 2 * key_dim + channels
            shapes[f"{prefix}.qkv.weight"] = (width, channels, 1, 1)
            shapes[f"{prefix}.qkv.bias"] = (width,)
            shapes[f"{prefix}.gate"] = (1,)
        else:
            raise ModelFileError(f"trunk layer {index} is {kind!r}; expected one of {TRUNK_LAYERS}")
    if head == "joint":
        for name in ("move_qk", "arrow_qk"):
            shapes[f"policy_head.{name}.weight"] = (2 * head_dim, channels, 1, 1)
            shapes[f"policy_head.{name}.bias"] = (2 * head_dim,)
        shapes["policy_head.update_gate.weight"] = (channels, channels + head_dim, 1, 1)
        shapes["policy_head.update_gate.bias"] = (channels,)
        if _config_flag(net_config, "arrow_source"):
            shapes["policy_head.arrow_source.weight"] = (head_dim, channels)
            shapes["policy_head.arrow_source.bias"] = (head_dim,)
    elif _config_flag(net_config, "arrow_source"):
        raise ModelFileError(f"net_config arrow_source needs policy_head 'joint', got {head!r}")
    else:
        shapes["policy_head.hidden.conv.weight"] = (head_dim, channels, 1, 1)
        shapes["policy_head.hidden.conv.bias"] = (head_dim,)
        shapes["policy_head.maps.weight"] = (3, head_dim, 1, 1)
        shapes["policy_head.maps.bias"] = (3,)
    shapes["value_head.reduce.conv.weight"] = (value_channels, channels, 1, 1)
    shapes["value_head.reduce.conv.bias"] = (value_channels,)
    # the flat head reads each channel's 64 squares, the pooled one 3 numbers a channel
    pooled = _config_value_head(net_config) == "pooled"
    shapes["value_head.hidden.weight"] = (value_hidden,
                                          value_channels * (3 if pooled else NUM_SQUARES))
    shapes["value_head.hidden.bias"] = (value_hidden,)
    shapes["value_head.out.weight"] = (1, value_hidden)
    shapes["value_head.out.bias"] = (1,)
    if _config_flag(net_config, "ownership_head"):
        hidden = net_config.get("ownership_channels")
        if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
            raise ModelFileError(f"net_config field 'ownership_channels' must be a positive int, "
                                 f"got {hidden!r}")
        shapes["ownership_head.hidden.conv.weight"] = (hidden, channels, 1, 1)
        shapes["ownership_head.hidden.conv.bias"] = (hidden,)
        shapes["ownership_head.out.weight"] = (1, hidden, 1, 1)
        shapes["ownership_head.out.bias"] = (1,)
    return shapes


def native_shape(net_config: dict[str, Any], trunk: list[str]) -> dict[str, Any]:
    """The network's shape as the native core's `NetShape` holds it (`amazons/native/network.h`):
    the one mapping of a config to it, which the extension (`amazons.neural.native`) loads and the
    Botzone export (`amazons.botzone.cpp_export`) writes into its source.

    Args:
        net_config: the `NetConfig` fields, as a dict (as `expected_shapes` reads them).
        trunk: the trunk's layers in order; a layer's code is its kind's position in
            `TRUNK_LAYERS` (network.h's TRUNK_RESIDUAL, TRUNK_ATTENTION).

    Returns:
        `NetShape`'s fields by name: `num_planes`, `channels`, `key_dim` (`attention_dim`),
        `head_dim`, `value_channels`, `value_hidden` (ints), `joint`, `arrow_source`,
        `pooled_value` (bools: the pooled value head, which the native core runs on every board
        size, the flat one on 8x8 only) and `trunk` (a list of codes). Whether the native core
        can run it is its own check (`amazons.neural.native.native_support`).

    Raises:
        NpNetInputError: an unknown policy head or trunk layer, or a missing field.
    """
    pooled = _config_value_head(net_config) == "pooled"
    head = net_config.get("policy_head")
    if head not in POLICY_HEADS:
        raise NpNetInputError(
            f"policy_head {head!r} is none of {', '.join(map(repr, POLICY_HEADS))}")
    for index, kind in enumerate(trunk):
        if kind not in TRUNK_LAYERS:
            raise NpNetInputError(
                f"trunk layer {index} is of kind {kind!r}, none of {', '.join(TRUNK_LAYERS)}")
    missing = [name for name in _CONFIG_INTS if name not in net_config]
    if missing:
        raise NpNetInputError(f"net_config lacks {', '.join(missing)}")
    return {
        "num_planes": int(net_config["num_planes"]),
        "channels": int(net_config["channels"]),
        "key_dim": int(net_config["attention_dim"]),
        "head_dim": int(net_config["head_dim"]),
        "value_channels": int(net_config["value_channels"]),
        "value_hidden": int(net_config["value_hidden"]),
        "joint": head == "joint",
        "arrow_source": _config_flag(net_config, "arrow_source"),
        "pooled_value": pooled,
        "trunk": [TRUNK_LAYERS.index(kind) for kind in trunk],
    }


def _config_flag(net_config: dict[str, Any], name: str) -> bool:
    """A boolean field of a stored net config, false where the config predates the field
    (`ownership_head`, `arrow_source`).

    Raises:
        ModelFileError: the field is there but not a bool.
    """
    flag = net_config.get(name, False)
    if not isinstance(flag, bool):
        raise ModelFileError(f"net_config field {name!r} must be true or false, got {flag!r}")
    return flag


def _config_value_head(net_config: dict[str, Any]) -> str:
    """A stored net config's value head kind, "flat" where the config predates the field.

    Raises:
        ModelFileError: the field is there but not one of `VALUE_HEADS`.
    """
    kind = net_config.get("value_head", "flat")
    if kind not in VALUE_HEADS:
        raise ModelFileError(f"net_config field 'value_head' must be one of {VALUE_HEADS}, "
                             f"got {kind!r}")
    return kind


def array_digest(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the arrays in name order: each name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name};{array.dtype.str};{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _check_arrays(where: str, arrays: dict[str, np.ndarray],
                  shapes: dict[str, tuple[int, ...]]) -> None:
    missing = sorted(set(shapes) - set(arrays))
    unknown = sorted(set(arrays) - set(shapes))
    if missing or unknown:
        raise ModelFileError(f"{where}: arrays do not fit the config: missing {missing}, "
                             f"unknown {unknown}")
    for name, shape in shapes.items():
        array = arrays[name]
        if array.dtype != np.float32 or array.shape != shape:
            raise ModelFileError(
                f"{where}: array {name!r} is {array.dtype} {array.shape}; expected float32 {shape}")
        if not np.all(np.isfinite(array)):
            raise ModelFileError(f"{where}: array {name!r} holds NaN or infinite values")


def write_model(
    path: str | os.PathLike,
    net_config: dict[str, Any],
    trunk: list[str],
    arrays: dict[str, np.ndarray],
    source: dict[str, Any] | None = None,
) -> Path:
    """Write an exported model file atomically (a reader sees the old file or the whole new one).

    Args:
        path: the target, conventionally `*.npz`.
        net_config: the network's `NetConfig`, as a dict (`amazons.core.config.config_to_dict`).
        trunk: its trunk layers in order (`"residual"` / `"attention"`).
        arrays: every weight `expected_shapes` names, float32, batch norms already folded.
        source: plain JSON values describing where the weights came from.

    Raises:
        ModelFileError: the arrays do not fit the config, or the file cannot be written.
    """
    path = Path(path)
    arrays = {name: np.ascontiguousarray(array, dtype=np.float32) for name, array in arrays.items()}
    _check_arrays(str(path), arrays, expected_shapes(net_config, list(trunk)))
    # the oldest version that holds the file
    version = (4 if _config_value_head(net_config) == "pooled"
               else 3 if _config_flag(net_config, "arrow_source") else 2)
    header = {"format": FORMAT, "version": version, "net_config": dict(net_config),
              "trunk": list(trunk), "sha256": array_digest(arrays), "source": dict(source or {})}
    try:
        encoded = np.frombuffer(json.dumps(header, sort_keys=True).encode(), dtype=np.uint8)
    except (TypeError, ValueError) as error:
        raise ModelFileError(f"{path}: the header must hold plain JSON values: {error}") from None
    try:
        return atomic_write(path,
                            lambda stream: np.savez(stream, **{HEADER_KEY: encoded}, **arrays))
    except OSError as error:
        raise ModelFileError(f"{path}: cannot write the model file: {error}") from error


def _read_header(path: Path, data: Any) -> dict[str, Any]:
    if HEADER_KEY not in data.files:
        raise ModelFileError(f"{path}: not an exported amazons model (no '{HEADER_KEY}' array)")
    try:
        header = json.loads(data[HEADER_KEY].tobytes().decode())
    except (ValueError, UnicodeDecodeError) as error:
        raise ModelFileError(f"{path}: the header is not JSON: {error}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ModelFileError(f"{path}: not an exported amazons model (format is not {FORMAT!r})")
    if header.get("version") not in READABLE_VERSIONS:
        raise ModelFileError(
            f"{path}: exported model format version {header.get('version')!r}; this code reads "
            f"{', '.join(map(str, READABLE_VERSIONS))}")
    if not isinstance(header.get("net_config"), dict) or not isinstance(header.get("trunk"), list):
        raise ModelFileError(f"{path}: the header lacks 'net_config' or 'trunk'")
    return header


def load_model(path: str | os.PathLike) -> NumpyNet:
    """Read and verify an exported model file (never unpickles anything).

    Raises:
        FileNotFoundError: no file at `path`.
        ModelFileError: not a model file of this format and version, truncated or corrupt, arrays
            that do not fit its config, or content that does not match its digest.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as data:
            header = _read_header(path, data)
            arrays = {name: data[name] for name in data.files if name != HEADER_KEY}
    except ModelFileError:
        raise
    except Exception as error:  # zip, npy-header and EOF errors of a truncated or foreign file
        raise ModelFileError(
            f"{path}: not a readable model file (truncated or corrupt?): "
            f"{type(error).__name__}: {error}") from None
    try:
        shapes = expected_shapes(header["net_config"], header["trunk"])
    except ModelFileError as error:
        raise ModelFileError(f"{path}: {error}") from None
    _check_arrays(str(path), arrays, shapes)
    if array_digest(arrays) != header.get("sha256"):
        raise ModelFileError(
            f"{path}: the arrays do not match the header's SHA-256 digest (modified or corrupted)")
    return NumpyNet(header["net_config"], header["trunk"], arrays, header.get("source", {}))


# ------------------------------------------------------------------------------------------------
# The forward pass


def _pointwise(weight: np.ndarray) -> np.ndarray:
    """A 1x1 convolution's `(out, in, 1, 1)` weight as a `(in, out)` matrix."""
    return np.ascontiguousarray(weight[:, :, 0, 0].T)


def _neighbourhood(weight: np.ndarray) -> np.ndarray:
    """A 3x3 convolution's `(out, in, 3, 3)` weight as a `(9 * in, out)` matrix, rows ordered
    (dy, dx, in) like the columns `_gather_3x3` builds."""
    out_channels = weight.shape[0]
    return np.ascontiguousarray(weight.transpose(2, 3, 1, 0).reshape(-1, out_channels))


def _gather_3x3(x: np.ndarray) -> np.ndarray:
    """`(B, N*N, C)` -> `(B * N*N, 9 * C)`: each square's 3x3 neighbourhood (zeros off the
    board)."""
    batch, squares, channels = x.shape
    size = math.isqrt(squares)
    padded = np.zeros((batch, size + 2, size + 2, channels), np.float32)
    padded[:, 1:size + 1, 1:size + 1] = x.reshape(batch, size, size, channels)
    columns = np.empty((batch, size, size, 9, channels), np.float32)
    for dy in range(3):
        for dx in range(3):
            columns[:, :, :, dy * 3 + dx] = padded[:, dy:dy + size, dx:dx + size]
    return columns.reshape(batch * squares, 9 * channels)


def _softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in place."""
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def _log_softmax(x: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis (a new array)."""
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


class PolicyTables(NamedTuple):
    """The twin of `amazons.neural.model.PolicyTables`: log tables, float32 unless said; S = N*N
    squares of the board the network ran on (64 on 8 x 8).

    A full move's log-probability is `log_move[src * S + dst] + log_arrow[dst * S + arrow]`,
    and with the arrow source term, when `source_slot[src] = i >= 0`, also
    `+ source_arrow[i * S + arrow] - source_norm[i * S + dst]` (i: the slot of the side to
    move's amazon on src, one of 4).
    """

    log_move: np.ndarray  # (B, S * S), [b, src * S + dst]: log P(src, dst)
    log_arrow: np.ndarray  # (B, S * S), [b, dst * S + arrow]: log P(arrow | dst)
    # The source term's tables (None without it), per slot i of the side to move's amazons:
    source_arrow: np.ndarray | None = None  # (B, 4 * S), [b, i * S + arrow]: the term's logits
    # (B, 4 * S), [b, i * S + dst]: log sum_a P(a | dst) exp(source_arrow[i, a])
    source_norm: np.ndarray | None = None
    # (B, S) int64, [b, square]: its amazon's slot, -1 where none stands
    source_slot: np.ndarray | None = None

    @property
    def num_squares(self) -> int:
        """S, the squares of the board the tables are for (64 on 8 x 8)."""
        return math.isqrt(self.log_move.shape[1])


class NumpyNet:
    """The forward pass of `amazons.neural.model.PolicyValueNet` (eval mode, batch norms folded),
    in numpy.

    Build it with `load_model`; the weights are converted once into matrix layouts.

    Args:
        net_config: the network's `NetConfig` fields, as a dict.
        trunk: its trunk layers in order (`"residual"` / `"attention"`).
        arrays: the exported weights (see the module docstring), checked by the caller.
        source: where the weights came from (kept for display).
    """

    def __init__(self, net_config: dict[str, Any], trunk: list[str], arrays: dict[str, np.ndarray],
                 source: dict[str, Any] | None = None) -> None:
        self.config = dict(net_config)
        self.trunk_layers = list(trunk)
        self.source = dict(source or {})
        self.num_planes = int(net_config["num_planes"])
        self.policy_head = net_config["policy_head"]
        self.value_head = _config_value_head(net_config)
        self.has_ownership = _config_flag(net_config, "ownership_head")
        self.has_arrow_source = _config_flag(net_config, "arrow_source")
        self._channels = int(net_config["channels"])
        self._key_dim = int(net_config["attention_dim"])
        self._head_dim = int(net_config["head_dim"])

        def bias(name: str) -> np.ndarray:
            return np.asarray(arrays[name], np.float32).copy()

        self._stem = (_neighbourhood(arrays["stem.conv.weight"]), bias("stem.conv.bias"))
        self._trunk: list[tuple[str, tuple[np.ndarray, ...]]] = []
        for index, kind in enumerate(trunk):
            prefix = f"trunk.{index}"
            if kind == "residual":
                self._trunk.append((kind, (
                    _neighbourhood(arrays[f"{prefix}.conv1.conv.weight"]),
                    bias(f"{prefix}.conv1.conv.bias"),
                    _neighbourhood(arrays[f"{prefix}.conv2.conv.weight"]),
                    bias(f"{prefix}.conv2.conv.bias"))))
            else:
                self._trunk.append((kind, (
                    _pointwise(arrays[f"{prefix}.qkv.weight"]), bias(f"{prefix}.qkv.bias"),
                    bias(f"{prefix}.gate"))))
        if self.policy_head == "joint":
            self._policy = tuple(
                part for name in ("move_qk", "update_gate", "arrow_qk")
                for part in (_pointwise(arrays[f"policy_head.{name}.weight"]),
                             bias(f"policy_head.{name}.bias")))
            if self.has_arrow_source:
                self._policy += (np.ascontiguousarray(arrays["policy_head.arrow_source.weight"].T),
                                 bias("policy_head.arrow_source.bias"))
        else:
            self._policy = (_pointwise(arrays["policy_head.hidden.conv.weight"]),
                            bias("policy_head.hidden.conv.bias"),
                            _pointwise(arrays["policy_head.maps.weight"]),
                            bias("policy_head.maps.bias"))
        self._value = (_pointwise(arrays["value_head.reduce.conv.weight"]),
                       bias("value_head.reduce.conv.bias"),
                       np.ascontiguousarray(arrays["value_head.hidden.weight"].T),
                       bias("value_head.hidden.bias"),
                       np.ascontiguousarray(arrays["value_head.out.weight"].T),
                       bias("value_head.out.bias"))
        self._ownership: tuple[np.ndarray, ...] = ()
        if self.has_ownership:
            self._ownership = (_pointwise(arrays["ownership_head.hidden.conv.weight"]),
                               bias("ownership_head.hidden.conv.bias"),
                               _pointwise(arrays["ownership_head.out.weight"]),
                               bias("ownership_head.out.bias"))

    def num_parameters(self) -> int:
        """Number of weights (after batch-norm folding)."""
        parts = [*self._stem, *self._policy, *self._value, *self._ownership]
        parts += [array for _, layer in self._trunk for array in layer]
        return int(sum(array.size for array in parts))

    def layout_arrays(self) -> list[tuple[str, np.ndarray]]:
        """The forward pass's float32 arrays in the order and matrix layouts it uses them.

        3x3 convolutions are `(9 * in, out)` (rows ordered dy, dx, in), 1x1 convolutions and
        linear layers `(in, out)`, biases `(out,)`: the stem; each trunk layer (residual: two
        convolutions; attention: qkv weight, bias, gate `(1,)`); the policy head (joint: move
        query/key, update gate, arrow query/key, and the arrow source projection when the
        network has it; factorized: hidden, maps); the value head (reduce, hidden
        `(value_channels * 64, value_hidden)`, out; the pooled head's hidden is
        `(3 * value_channels, value_hidden)`, `native_shape`'s `pooled_value`). The ownership head
        is left out. This is what the native core reads: the Botzone C++ export
        (`amazons.botzone.cpp_export`) writes them into its source and `amazons.neural.native`
        loads them (with `native_shape`).
        """
        named = [("stem.weight", self._stem[0]), ("stem.bias", self._stem[1])]
        for index, (kind, layer) in enumerate(self._trunk):
            parts = ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias") \
                if kind == "residual" else ("qkv.weight", "qkv.bias", "gate")
            named += [(f"trunk.{index}.{part}", array)
                      for part, array in zip(parts, layer, strict=True)]
        if self.policy_head == "joint":
            parts = ("move_qk.weight", "move_qk.bias", "update_gate.weight", "update_gate.bias",
                     "arrow_qk.weight", "arrow_qk.bias")
            if self.has_arrow_source:
                parts += ("arrow_source.weight", "arrow_source.bias")
        else:
            parts = ("hidden.weight", "hidden.bias", "maps.weight", "maps.bias")
        named += [(f"policy_head.{part}", array)
                  for part, array in zip(parts, self._policy, strict=True)]
        parts = ("reduce.weight", "reduce.bias", "hidden.weight", "hidden.bias", "out.weight",
                 "out.bias")
        named += [(f"value_head.{part}", array)
                  for part, array in zip(parts, self._value, strict=True)]
        return [(name, np.ascontiguousarray(array, dtype=np.float32)) for name, array in named]

    def forward(self, features: np.ndarray) -> tuple[PolicyTables, np.ndarray]:
        """Policy tables and values of feature planes.

        Args:
            features: `(B, num_planes, N, N) float32` from `amazons.engine.features`: N = 8 with
                the flat value head, any N in 6..10 with the pooled one.

        Returns:
            `(tables, values)`: `PolicyTables` (`log_move` = log P(src, dst) at `src * S + dst`,
            `log_arrow` = log P(arrow | dst) at `dst * S + arrow`, each `(B, S * S) float32`,
            S = N*N, and the source term's tables when the network has it); `values (B,)
            float32` in [-1, 1] for the side to move (the tables of
            `amazons.neural.model.policy_log_tables` and the value of `PolicyValueNet`).

        Raises:
            NpNetInputError: `features` is not a `(B, num_planes, N, N)` float32 array of a size
                the network runs on.
        """
        x = self._trunk_output(features)
        tables = (self._joint_policy(x, features) if self.policy_head == "joint"
                  else self._factorized_policy(x))
        return tables, self._value_head(x)

    def ownership(self, features: np.ndarray) -> np.ndarray:
        """The ownership head's map of feature planes (the trunk, then the head only).

        Args:
            features: `(B, num_planes, N, N) float32` from `amazons.engine.features` (N as in
                `forward`).

        Returns:
            `(B, N*N) float32` in [-1, 1], canonical frame: +1 where the side to move is expected
            to own the square at the end of the game, -1 the opponent.

        Raises:
            NpNetInputError: the network has no ownership head, or `features` is malformed.
        """
        if not self.has_ownership:
            raise NpNetInputError("the network has no ownership head")
        hidden_w, hidden_b, out_w, out_b = self._ownership
        hidden = _relu(self._trunk_output(features) @ hidden_w + hidden_b)  # (B, N*N, hidden)
        return np.tanh(hidden @ out_w + out_b)[:, :, 0]

    def _trunk_output(self, features: np.ndarray) -> np.ndarray:
        """The stem and the trunk: `(B, N*N, channels)`, square-major."""
        if not isinstance(features, np.ndarray) or features.dtype != np.float32 \
                or features.ndim != 4 or features.shape[1] != self.num_planes \
                or features.shape[2] != features.shape[3]:
            shape = (f"(B, {self.num_planes}, 8, 8)" if self.value_head == "flat"
                     else f"(B, {self.num_planes}, N, N), N in 6..10,")
            raise NpNetInputError(f"features must be a {shape} float32 array, "
                                  f"got {describe_array(features)}")
        size = features.shape[2]
        problem = board_size_problem(size, self.value_head)
        if problem:
            raise NpNetInputError(problem)
        batch = features.shape[0]
        x = features.reshape(batch, self.num_planes, size * size).transpose(0, 2, 1)
        x = _relu(self._conv3x3(x, *self._stem))
        for kind, layer in self._trunk:
            x = self._residual(x, *layer) if kind == "residual" else self._attention(x, *layer)
        return x

    @staticmethod
    def _conv3x3(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
        out = _gather_3x3(x) @ weight
        out += bias
        return out.reshape(x.shape[0], x.shape[1], weight.shape[1])

    def _residual(self, x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray,
                  b2: np.ndarray) -> np.ndarray:
        hidden = _relu(self._conv3x3(x, w1, b1))
        out = self._conv3x3(hidden, w2, b2)
        out += x
        return _relu(out)

    def _attention(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                   gate: np.ndarray) -> np.ndarray:
        d = self._key_dim
        # (B, N*N, 2d + C); the 1 / sqrt(d) scale is in the query weights
        qkv = x @ weight + bias
        energy = qkv[:, :, :d] @ qkv[:, :, d:2 * d].transpose(0, 2, 1)  # (B, queries, keys)
        attended = _softmax(energy) @ qkv[:, :, 2 * d:]  # (B, N*N, C)
        return x + gate[0] * attended

    def _joint_policy(self, x: np.ndarray, features: np.ndarray) -> PolicyTables:
        move_w, move_b, gate_w, gate_b, arrow_w, arrow_b, *source = self._policy
        (batch, squares, _), h = x.shape, self._head_dim
        move_qk = x @ move_w + move_b
        dst_keys = move_qk[:, :, h:]
        move_logits = move_qk[:, :, :h] @ dst_keys.transpose(0, 2, 1)  # [b, src, dst]
        update = np.concatenate([x, dst_keys], axis=2) @ gate_w + gate_b
        x_next = x + _relu(update)
        arrow_qk = x_next @ arrow_w + arrow_b
        arrow_keys = arrow_qk[:, :, h:].transpose(0, 2, 1)
        arrow_logits = arrow_qk[:, :, :h] @ arrow_keys  # [b, dst, arrow]
        log_move = _log_softmax(move_logits.reshape(batch, squares * squares))
        log_arrow = _log_softmax(arrow_logits)
        flat = (batch, squares * squares)
        if not source:
            return PolicyTables(log_move, log_arrow.reshape(flat))
        source_w, source_b = source
        # The side to move's amazon squares (feature plane 0), increasing:
        # `amazons.neural.model.mover_squares`.
        movers = np.sort(np.argsort(-features[:, 0].reshape(batch, squares), axis=1,
                                    kind="stable")[:, :AMAZONS_PER_SIDE], axis=1)
        at_sources = np.take_along_axis(x_next, movers[:, :, None], axis=1)  # [b, slot, C]
        source_logits = (at_sources @ source_w + source_b) @ arrow_keys  # [b, slot, arrow]
        # log sum_a P(a | dst) exp(S[slot, a]) as one product, as
        # `amazons.neural.model.policy_log_tables`
        peak = source_logits.max(axis=-1, keepdims=True)
        shifted = source_logits - peak
        norm = np.exp(shifted, out=shifted) @ np.exp(log_arrow).transpose(0, 2, 1)  # [b, slot, dst]
        np.maximum(norm, np.finfo(np.float32).tiny, out=norm)
        np.log(norm, out=norm)
        norm += peak
        slots = np.full((batch, squares), -1, np.int64)
        np.put_along_axis(slots, movers, np.arange(AMAZONS_PER_SIDE), axis=1)
        return PolicyTables(log_move, log_arrow.reshape(flat), source_logits.reshape(batch, -1),
                            norm.reshape(batch, -1), slots)

    def _factorized_policy(self, x: np.ndarray) -> PolicyTables:
        hidden_w, hidden_b, maps_w, maps_b = self._policy
        batch, squares, _ = x.shape
        maps = _relu(x @ hidden_w + hidden_b) @ maps_w + maps_b  # (B, N*N, 3)
        log_src, log_dst, log_arrow = (_log_softmax(np.ascontiguousarray(maps[:, :, k]))
                                       for k in range(3))
        log_move = (log_src[:, :, None] + log_dst[:, None, :]).reshape(batch, -1)
        log_arrow = np.broadcast_to(log_arrow[:, None, :], (batch, squares, squares))
        return PolicyTables(log_move, np.ascontiguousarray(log_arrow).reshape(batch, -1))

    def _value_head(self, x: np.ndarray) -> np.ndarray:
        reduce_w, reduce_b, hidden_w, hidden_b, out_w, out_b = self._value
        batch, squares, _ = x.shape
        reduced = _relu(x @ reduce_w + reduce_b)  # (B, N*N, value_channels)
        if self.value_head == "pooled":
            # `amazons.neural.model.value_pooling`: mean, mean * (N - 8) / 2, max per channel
            mean = reduced.mean(axis=1)
            scale = np.float32((math.isqrt(squares) - FLAT_BOARD_SIZE) / 2.0)
            summary = np.concatenate([mean, mean * scale, reduced.max(axis=1)], axis=1)
        else:
            # channel-major, as torch flattens
            summary = reduced.transpose(0, 2, 1).reshape(batch, -1)
        hidden = _relu(summary @ hidden_w + hidden_b)
        return np.tanh(hidden @ out_w + out_b)[:, 0]


# ------------------------------------------------------------------------------------------------
# From tables to legal-move priors, and the Evaluator


def legal_priors(tables: PolicyTables, moves: np.ndarray, move_offsets: np.ndarray) -> np.ndarray:
    """Priors of the legal moves: P(src, dst) * P(arrow | [src,] dst), renormalized per position.

    The numpy twin of `amazons.neural.model.gather_legal_priors`: one gather from each table and a
    softmax over each position's segment of moves.

    Args:
        tables: `NumpyNet.forward`'s.
        moves: `(M, 3) int32` legal moves (canonical), grouped by position.
        move_offsets: `(B + 1,) int64`; position i owns
            `moves[move_offsets[i]:move_offsets[i + 1]]`.

    Returns:
        `(M,) float32` priors; each position's priors sum to 1.
    """
    counts = np.diff(move_offsets)
    batch_index = np.repeat(np.arange(counts.shape[0]), counts)
    if moves.shape[0] == 0:
        return np.zeros(0, np.float32)
    squares = tables.num_squares
    src = moves[:, 0].astype(np.intp)
    dst = moves[:, 1].astype(np.intp)
    arrow = moves[:, 2].astype(np.intp)
    log_prior = (tables.log_move[batch_index, src * squares + dst]
                 + tables.log_arrow[batch_index, dst * squares + arrow])
    if tables.source_arrow is not None:
        slot = tables.source_slot[batch_index, src]
        row = np.maximum(slot, 0) * squares
        term = (tables.source_arrow[batch_index, row + arrow]
                - tables.source_norm[batch_index, row + dst])
        log_prior += np.where(slot >= 0, term, np.float32(0.0))
    owners = counts > 0
    starts = move_offsets[:-1][owners]
    peak = np.repeat(np.maximum.reduceat(log_prior, starts), counts[owners])
    weights = np.exp(log_prior - peak)
    totals = np.repeat(np.add.reduceat(weights, starts), counts[owners])
    return (weights / totals).astype(np.float32, copy=False)


class NumpyEvaluator:
    """The search's Evaluator protocol on a `NumpyNet`: features, forward pass, legal priors.

    Args:
        net: the network (`load_model(path)`).
        board_size: the size of the boards it scores (one size per evaluator, as the search
            takes it: `board_size`); a flat value head plays 8x8 only.

    Raises:
        NpNetInputError: a size off 6..10, or a flat value head off 8x8.
    """

    def __init__(self, net: NumpyNet, board_size: int = 8) -> None:
        if board_size not in BOARD_SIZES:
            raise NpNetInputError(f"board_size must be one of {BOARD_SIZES}, got {board_size!r}")
        if board_size != FLAT_BOARD_SIZE and net.value_head != "pooled":
            raise NpNetInputError(f"this network's value head is {net.value_head!r}, which "
                                  f"plays 8x8 only, not {board_size}x{board_size}: carry it over "
                                  "to value_head='pooled' (amazons.neural.growth)")
        self.net = net
        self.board_size = board_size

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> NumpyEvaluator:
        """An evaluator on an exported model file (see `load_model` for what it raises)."""
        return cls(load_model(path))

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """`amazons.evaluator.Evaluator.evaluate`: priors over each position's legal moves,
        `(M,) float32`, and a value for its side to move, `(B,) float32`.

        Raises:
            EvaluatorInputError: a batch that breaks the contract (`amazons.evaluator.check_batch`).
        """
        check_batch(positions, moves, move_offsets, self.board_size)
        if positions.shape[0] == 0:
            return np.zeros(0, np.float32), np.zeros(0, np.float32)
        planes = engine.features(np.ascontiguousarray(positions), self.net.num_planes,
                                 size=self.board_size)
        tables, values = self.net.forward(planes)
        return legal_priors(tables, moves, move_offsets), values.astype(np.float32)

    @property
    def has_ownership(self) -> bool:
        """Whether the network has the ownership head (`ownership` answers)."""
        return self.net.has_ownership

    def ownership(self, positions: np.ndarray) -> np.ndarray:
        """The ownership head's prediction, `(B, N*N) float32` in [-1, 1], for `(B, 3 * W) uint64`
        canonical positions of the evaluator's board size, in their canonical frame (+1 the side
        to move's square).

        Raises:
            NpNetInputError: no ownership head.
            EvaluatorInputError: `positions` is not `(B, 3) uint64`.
        """
        check_positions(positions, self.board_size)
        planes = engine.features(np.ascontiguousarray(positions), self.net.num_planes,
                                 size=self.board_size)
        return self.net.ownership(planes).astype(np.float32)



# Names of OpenBLAS's thread-count setter in the builds numpy ships (plain, and scipy-openblas's
# prefixed 64-bit-integer builds).
_OPENBLAS_SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads64_",
                     "scipy_openblas_set_num_threads_64_", "openblas_set_num_threads64_")


def limit_blas_threads(threads: int = 1) -> int:
    """Set the thread count of the OpenBLAS libraries loaded in this process (Linux).

    numpy's matrix products run on OpenBLAS, which starts one thread per core. The network's
    products are small (a board has 64 squares), and waking the other threads costs more than
    they save, the more so on a busy machine or on Botzone's single core: the Botzone bot and
    terminal play call this once with 1. Other BLAS builds (MKL, Accelerate) are left alone.

    Returns:
        How many libraries were set (0 where none is found or `/proc/self/maps` is missing).
    """
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            paths = {line.split()[-1] for line in handle
                     if "openblas" in line.rsplit("/", 1)[-1].lower() and "/" in line}
    except OSError:
        return 0
    count = 0
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _OPENBLAS_SETTERS:
            setter = getattr(library, name, None)
            if setter is not None:
                setter(ctypes.c_int(int(threads)))
                count += 1
                break
    return count
