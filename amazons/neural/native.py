"""The compiled CPU evaluator: the native core's forward pass as the search's `Evaluator`.

`NativeEvaluator` runs a network with the C++ of `amazons/native/` (the forward pass the Botzone
bot runs, with its AVX2/FMA Winograd kernels where the CPU has them), compiled by `setup.py` as
the extension `amazons._native`: a batch of canonical positions and their legal moves in, each
move's prior and each position's value out, the GIL released while it computes. It runs every
network `amazons.neural.numpy_net` runs (both policy heads, the arrow source term, 3 or 7
planes), from the same folded float32 arrays (`NumpyNet.layout_arrays`), and agrees with npnet
and torch within 1e-4 (tests/test_nativenet.py). `load_net` takes new weights of the same shape
(the inference server's weight updates); a load the native core refuses leaves the old weights
in use.

Board sizes: an evaluator serves one size, `NativeEvaluator(net, board_size=N)` for N in 6..10
(8 by default; the attribute `board_size`, as `amazons.evaluator.Evaluator` names it), its
positions in the board-size contract's layout: `(B, 3 * W) uint64` canonical rows, W = 1 up to
8x8 and 2 on 9x9 and 10x10 (the low word holds squares 0..63), moves' squares below N * N. The
C++ forward pass is compiled once a size, so 8x8 runs the code it ran before sizes came. A
network with the flat value head (`value_head="flat"`, every network trained before the pooled
head) runs on 8x8 only: another size raises `NativeUnavailableError`.

Input: `evaluate` checks the batch's contract on its board size (`amazons.evaluator.check_batch`)
and the native core refuses, by position and move, what it cannot hold (overlapping bitboards,
more than four amazons a side, a piece off the board, a move whose source is not the side to
move's amazon): `ValueError`.

Threads: one by default, as the inference server's torch runs; `threads=N` splits a batch over N
threads (docs/network.md says what more buys). One evaluator may be shared between threads: its
native network runs one call at a time (a mutex held across evaluate and load_net).

`amazons.neural.numpy_net` stays the reference that needs no compiler: where the extension is not
built, `native_available()` is False and the builders (`amazons.players.factory`,
`amazons.neural.served`) fall back to npnet or torch. Imports numpy, `amazons.evaluator`,
`amazons.neural.numpy_net` and the extension; never torch.
"""

from __future__ import annotations

import os

import numpy as np

from amazons.boards import SIZES
from amazons.evaluator import check_batch
from amazons.neural.numpy_net import (
    FLAT_BOARD_SIZE,
    NpNetInputError,
    NumpyNet,
    load_model,
    native_shape,
)

try:
    from amazons import _native
except ImportError as error:  # the extension is not built (a checkout without `make build`)
    _native = None
    _IMPORT_ERROR = str(error)
else:
    _IMPORT_ERROR = ""

__all__ = ["BOARD_SIZES", "NativeEvaluator", "NativeUnavailableError", "native_available",
           "native_net_shape", "native_support"]

KERNELS = ("auto", "avx2", "portable")
BOARD_SIZES = SIZES  # every size of the contract: the C++ is compiled for each (common.h)


class NativeUnavailableError(RuntimeError):
    """The native evaluator cannot run here: the extension is not built, or it cannot run the
    network (the message says which)."""


def native_available() -> bool:
    """Whether the extension `amazons._native` is built and importable."""
    return _native is not None


def native_net_shape(net_config: dict, trunk: list[str]) -> dict:
    """The network's `NetShape` fields, `amazons.neural.numpy_net.native_shape` (with the value
    head's kind, `pooled_value`).

    Raises:
        NpNetInputError: as `native_shape`.
    """
    return native_shape(net_config, trunk)


def native_support(net_config: dict, trunk: list[str], size: int = FLAT_BOARD_SIZE) -> str:
    """Why the native evaluator cannot run this network on `size` x `size` here, or "" when it
    can.

    Args:
        net_config: the network's `NetConfig` fields (`NumpyNet.config`).
        trunk: its trunk layers (`"residual"` / `"attention"`).
        size: the board size, one of `BOARD_SIZES`.
    """
    if _native is None:
        return f"the extension amazons._native is not built ({_IMPORT_ERROR}): run `make build`"
    if size not in BOARD_SIZES:
        return (f"board size {size!r}: the native core serves sizes "
                f"{', '.join(map(str, BOARD_SIZES))}")
    try:
        shape = native_net_shape(net_config, list(trunk))
    except ValueError as error:
        return str(error)
    if size != FLAT_BOARD_SIZE and not shape["pooled_value"]:
        return (f"board size {size}: the flat value head (value_head='flat') runs on 8x8 only; "
                f"a network with value_head='pooled' runs on every size")
    return _native.shape_error(shape)


class NativeEvaluator:
    """The search's `Evaluator` on the native forward pass; safe to share between threads (the
    native network runs one call at a time).

    Args:
        net: the network (`amazons.neural.numpy_net.load_model`, or a `NumpyNet` from a checkpoint).
        threads: threads per batch (>= 1).
        kernels: "auto" (AVX2/FMA where the CPU has it), "avx2" (the same choice, refused
            without) or "portable".
        board_size: the board side N of every batch, one of `BOARD_SIZES` (8: Botzone's).

    Raises:
        NativeUnavailableError: the extension is not built or cannot run `net` on `size`
            (a flat value head on a size other than 8).
        ValueError: threads < 1, an unknown `kernels` or a board_size out of `BOARD_SIZES`.
    """

    def __init__(self, net: NumpyNet, threads: int = 1, kernels: str = "auto",
                 board_size: int = FLAT_BOARD_SIZE) -> None:
        if kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {', '.join(KERNELS)}, got {kernels!r}")
        if int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads!r}")
        if isinstance(board_size, bool) or board_size not in BOARD_SIZES:
            raise ValueError(f"board_size must be one of {', '.join(map(str, BOARD_SIZES))}, "
                             f"got {board_size!r}")
        # the attribute of an evaluator tied to one size (`amazons.evaluator.Evaluator`)
        self.board_size = int(board_size)
        why = native_support(net.config, net.trunk_layers, self.board_size)
        if why:
            raise NativeUnavailableError(f"the native evaluator cannot run this network: {why}")
        self.threads = int(threads)
        self._core = _native.NativeNetwork()
        self._core.set_kernels(kernels == "portable")
        if kernels == "avx2" and self._core.kernels == "portable":
            raise NativeUnavailableError("kernels='avx2': this CPU has no AVX2 and FMA")
        self.net = net
        self.load_net(net)

    @classmethod
    def from_file(cls, path: str | os.PathLike, threads: int = 1, kernels: str = "auto",
                  board_size: int = FLAT_BOARD_SIZE) -> NativeEvaluator:
        """An evaluator on an exported `.npz` model (see `amazons.neural.numpy_net.load_model` for
        what it raises)."""
        return cls(load_model(path), threads, kernels, board_size)

    @property
    def kernels(self) -> str:
        """The kernels in use: "avx2+fma" or "portable"."""
        return self._core.kernels

    def load_net(self, net: NumpyNet) -> None:
        """Take `net`'s weights (copied; the Winograd filters made for them).

        Raises:
            NativeUnavailableError: `net` has another shape than the network loaded first.
        """
        if hasattr(self, "_shape") and (net.config, net.trunk_layers) != self._shape:
            raise NativeUnavailableError("load_net takes a network of the shape loaded first; "
                                         "build a new evaluator")
        weights = np.concatenate([array.reshape(-1)
                                  for _, array in net.layout_arrays()]).astype(np.float32)
        self._core.load(native_net_shape(net.config, net.trunk_layers), weights)
        self._shape = (dict(net.config), list(net.trunk_layers))
        self.net = net

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """`amazons.evaluator.Evaluator.evaluate`: priors over each position's legal moves,
        `(M,) float32`, and a value for its side to move, `(B,) float32`, on the evaluator's
        board size (positions `(B, 3 * W) uint64`, see the module's docstring).

        Raises:
            amazons.evaluator.EvaluatorInputError: a batch that breaks the contract on the
                evaluator's board size (`amazons.evaluator.check_batch`).
            ValueError: a position or move the native core cannot hold, named by its index:
                overlapping bitboards, more than four amazons a side, a piece off the board,
                a move whose source is not one of the side to move's amazons.
        """
        check_batch(positions, moves, move_offsets, self.board_size)
        priors = np.empty(moves.shape[0], np.float32)
        values = np.empty(positions.shape[0], np.float32)
        if positions.shape[0]:
            self._core.evaluate(np.ascontiguousarray(positions), np.ascontiguousarray(moves),
                                np.ascontiguousarray(move_offsets), priors, values, self.threads,
                                self.board_size)
        return priors, values

    @property
    def has_ownership(self) -> bool:
        """Whether the network has the ownership head (`ownership` answers, through npnet)."""
        return self.net.has_ownership

    def ownership(self, positions: np.ndarray) -> np.ndarray:
        """The ownership head's map (`amazons.neural.numpy_net.NumpyEvaluator.ownership`; the
        native core runs the search's outputs only).

        Raises:
            NpNetInputError: no ownership head.
            amazons.evaluator.EvaluatorInputError: `positions` is not `(B, 3 * W) uint64` of
                the evaluator's board size.
        """
        from amazons.neural.numpy_net import NumpyEvaluator

        if not self.net.has_ownership:
            raise NpNetInputError("this network has no ownership head")
        return NumpyEvaluator(self.net, self.board_size).ownership(positions)

