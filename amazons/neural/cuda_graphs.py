"""The network as the search's `Evaluator` in this process, over batch buckets and CUDA graphs.

What this module owns:

* `NetworkEvaluator`: the search's Evaluator protocol (`amazons.evaluator`) on a
  `amazons.neural.model.PolicyValueNet`: feature planes in reused (pinned, on a GPU) host
  buffers, the forward pass under autocast, the logits turned into priors over the legal moves by
  `amazons.neural.model.gather_legal_priors` (the one place that does it), optionally over fixed
  batch buckets with one captured CUDA graph per bucket.
* `batch_buckets`: the bucket sizes (powers of two up to the largest batch).

The model, its precision and its folded weights are `amazons.neural.model`'s; what production
builds on this evaluator (the prepared, reloadable model of the inference server and the network
players) is `amazons.neural.served`'s. A batch that breaks the protocol's contract is refused
by `amazons.evaluator.check_batch`, as every evaluator refuses it.

One evaluator serves one board size (`board_size`, fixed when it is built): its feature planes
are `[B, P, N, N]` (`amazons.engine.features(..., size=board_size)`), its batches
`(B, 3 * W) uint64` positions of that size; the network reads N from its input (a network with
the flat value head runs 8 x 8 only: the evaluator refuses to be built for another size).

Imports torch, numpy, `amazons.engine`, `amazons.evaluator` and `amazons.neural.model`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from amazons import engine
from amazons.evaluator import check_batch, check_positions
from amazons.neural.model import (
    NetInputError,
    PolicyTables,
    PolicyValueNet,
    check_board_input,
    gather_legal_priors,
    policy_log_tables,
)

__all__ = ["NetworkEvaluator", "batch_buckets"]


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """Powers of two from 1 up to the first one >= `max_batch`: the fixed batch sizes a
    `NetworkEvaluator` with buckets pads its batches to (`(1, 2, 4, ..., 256)` for 256).

    Raises:
        amazons.neural.model.NetInputError: max_batch < 1.
    """
    if max_batch < 1:
        raise NetInputError(f"max_batch must be >= 1, got {max_batch}")
    return tuple(1 << power for power in range((max_batch - 1).bit_length() + 1))


class NetworkEvaluator:
    """The search's Evaluator protocol on a `PolicyValueNet`, in this process.

    `evaluate` computes the feature planes of its board size with `amazons.engine.features`, runs
    the network (eval mode, no autograd, autocast to `dtype` unless float32) and turns its logits
    into priors over the legal moves with `amazons.neural.model.gather_legal_priors`. The model is
    used as given (not copied): weights changed by a learner are seen by the next call. Production
    passes the model `amazons.neural.model.prepare_for_inference` makes
    (`amazons.neural.served.load_network_evaluator`).

    Fixed batch sizes: with `batch_buckets`, a batch of B positions runs padded (with empty
    boards, whose outputs are dropped) to the smallest bucket >= B, and batches above the largest
    bucket run in chunks of it. Eval-mode rows are independent, so padding changes no output; it
    gives the network a few shapes only, which `cuda_graphs` captures, one CUDA graph per bucket
    on its first use (forward and log-probability tables; the priors of the legal moves are
    gathered after the replay). On a CPU buckets only add padded rows: production leaves them off
    there, and the tests run them with graphs off. New weights copied into the model's own
    tensors (`amazons.neural.model.load_prepared_weights`) are replayed by the captured graphs:
    `graph_captures` counts captures.

    Host<->device traffic per call, on a GPU: two uploads from reused pinned host buffers
    (`non_blocking`): the feature planes, and the moves with the offsets in one int32 buffer;
    the segment ids (the position of each move) are built on the device; priors and values come
    back in one float32 buffer, one copy into pinned memory and one stream synchronization.

    Args:
        model: the network.
        num_planes: feature planes to compute; must equal `model.config.num_planes`.
        device: where the network runs.
        dtype: compute dtype: `torch.float32`, `torch.bfloat16` or `torch.float16`.
        batch_buckets: increasing batch sizes to pad to (`batch_buckets(max_batch)`); empty: each
            batch runs at its own size.
        cuda_graphs: replay a captured CUDA graph per bucket (CUDA only, needs `batch_buckets`).
            A capture that fails is reported on stderr once and the evaluator runs eagerly.
        board_size: the board side N (6..10) of every batch; features are `[B, P, N, N]`.

    Attributes:
        board_size: that side (the search and the inference server check it).

    Raises:
        amazons.neural.model.NetInputError: `num_planes` does not match the model, an
            unsupported `dtype`, buckets that do not increase, `cuda_graphs` without buckets or
            off CUDA, a board size the engine has no rules for, or one the network does not run
            (the flat value head off 8 x 8: `amazons.neural.model.check_board_input`).
    """

    def __init__(
        self,
        model: PolicyValueNet,
        num_planes: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        batch_buckets: Sequence[int] = (),
        cuda_graphs: bool = False,
        board_size: int = 8,
    ) -> None:
        if num_planes != model.config.num_planes:
            raise NetInputError(
                f"num_planes={num_planes} but the model takes {model.config.num_planes} planes")
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise NetInputError(f"dtype must be float32, bfloat16 or float16, got {dtype}")
        buckets = tuple(int(size) for size in batch_buckets)
        if any(size < 1 for size in buckets) or list(buckets) != sorted(set(buckets)):
            raise NetInputError(f"batch_buckets must be increasing positive sizes, got {buckets}")
        self.device = torch.device(device)
        if cuda_graphs and (self.device.type != "cuda" or not buckets):
            raise NetInputError(f"cuda_graphs needs a CUDA device and batch_buckets, got "
                                f"{self.device} and {buckets}")
        try:
            self.board_size = engine.geometry(board_size).size
        except ValueError as error:
            raise NetInputError(f"board_size: {error}") from None
        # The network's own rule on the input it will get, before any batch: an empty board.
        check_board_input(torch.zeros(1, num_planes, board_size, board_size), model.config)
        self.num_planes = num_planes
        self.dtype = dtype
        self.batch_buckets = buckets
        self.cuda_graphs = cuda_graphs
        # CUDA graphs captured so far (one per bucket unless weights change shape)
        self.graph_captures = 0
        self._pinned = self.device.type == "cuda"  # host staging buffers are page-locked for a GPU
        self._features = torch.empty(0)
        self._move_staging = torch.empty(0, dtype=torch.int32)
        self._result_staging = torch.empty(0, dtype=torch.float32)
        self._graphs: dict[int, tuple[torch.Tensor, Any, tuple[torch.Tensor, ...]]] = {}
        self.model = model.to(self.device)

    def _feature_buffer(self, rows: int) -> torch.Tensor:
        """A reusable `[rows, planes, N, N] float32` host buffer (pinned when feeding a GPU)."""
        if self._features.shape[0] < rows:
            capacity = max(rows, 2 * self._features.shape[0])
            size = self.board_size
            self._features = torch.empty((capacity, self.num_planes, size, size),
                                         dtype=torch.float32, pin_memory=self._pinned)
        return self._features[:rows]

    def _staging(self, name: str, length: int) -> torch.Tensor:
        """The first `length` elements of the reusable flat host buffer `name` (pinned when
        feeding a GPU), grown to at least twice its size when too short."""
        buffer = getattr(self, name)
        if buffer.shape[0] < length:
            buffer = torch.empty(max(length, 2 * buffer.shape[0]), dtype=buffer.dtype,
                                 pin_memory=self._pinned)
            setattr(self, name, buffer)
        return buffer[:length]

    def _chunks(self, rows: int) -> list[tuple[int, int, int]]:
        """`(first row, rows, padded size)` of each forward pass over `rows` positions."""
        if not self.batch_buckets:
            return [(0, rows, rows)]
        largest = self.batch_buckets[-1]
        chunks = []
        for first in range(0, rows, largest):
            count = min(largest, rows - first)
            padded = next(size for size in self.batch_buckets if size >= count)
            chunks.append((first, count, padded))
        return chunks

    def _tables(self, features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`(values [B] float32, *tables)` of a device batch: the values, then the present
        `PolicyTables` fields in order (the ownership head, if any, is skipped: the search does
        not use it)."""
        output = self.model(features, with_ownership=False)
        tables = policy_log_tables(output.policy)
        return (output.value.float(), *(table for table in tables if table is not None))

    def _graphed_tables(self, features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`_tables` of a bucket-sized batch through that bucket's CUDA graph (captured now if
        new)."""
        size = features.shape[0]
        if size not in self._graphs:
            self.graph_captures += 1
            static_input = features.clone()
            stream = torch.cuda.Stream(device=self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(3):  # warm-up outside the capture: cuDNN's choices, allocations
                    self._tables(static_input)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_outputs = self._tables(static_input)
            self._graphs[size] = (static_input, graph, static_outputs)
        static_input, graph, static_outputs = self._graphs[size]
        static_input.copy_(features)
        graph.replay()
        return tuple(output.clone() for output in static_outputs)  # the next replay overwrites them

    def _forward(self, features: torch.Tensor,
                 chunks: list[tuple[int, int, int]]) -> list[torch.Tensor]:
        """`_tables` of the real rows of padded device `features`, chunk by chunk (`_chunks`)."""
        parts = []
        for first, count, size in chunks:
            chunk = features[first:first + size]
            tables = None
            if self.cuda_graphs:
                try:
                    tables = self._graphed_tables(chunk)
                except RuntimeError as error:  # a capture the device or a kernel refuses: eager
                    print(f"NetworkEvaluator: CUDA graph capture failed ({error}); running "
                          f"without graphs", file=sys.stderr)
                    self.cuda_graphs = False
                    self._graphs = {}
            if tables is None:
                tables = self._tables(chunk)
            parts.append([table[:count] for table in tables])
        if len(parts) == 1:
            return parts[0]
        return [torch.cat([part[index] for part in parts]) for index in range(len(parts[0]))]

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """`amazons.evaluator.Evaluator.evaluate`: priors over each position's legal moves,
        `(M,) float32`, and a value for its side to move, `(B,) float32`.

        Raises:
            amazons.evaluator.EvaluatorInputError: a batch that breaks the contract
                (`amazons.evaluator.check_batch`).
        """
        check_batch(positions, moves, move_offsets, self.board_size)
        rows = positions.shape[0]
        if rows == 0:
            return np.zeros(0, np.float32), np.zeros(0, np.float32)
        chunks = self._chunks(rows)
        host = self._feature_buffer(chunks[-1][0] + chunks[-1][2])
        engine.features(positions, self.num_planes, out=host[:rows].numpy(), size=self.board_size)
        host[rows:].zero_()  # padding rows: empty boards
        count = moves.shape[0]
        # Moves and offsets travel up together in one int32 buffer (offsets <= M fit int32).
        staged = self._staging("_move_staging", 3 * count + rows + 1)
        staged_array = staged.numpy()
        staged_array[:3 * count] = moves.reshape(-1)
        staged_array[3 * count:] = move_offsets
        model = self.model
        was_training = model.training
        model.eval()
        try:
            # Autocast's cache of cast weights cannot live inside a captured graph.
            with torch.inference_mode(), torch.autocast(self.device.type, dtype=self.dtype,
                                                        enabled=self.dtype != torch.float32,
                                                        cache_enabled=not self.cuda_graphs):
                values, *tables = self._forward(self._upload(host), chunks)
                staged = staged.to(self.device, non_blocking=self._pinned)
                offsets = staged[3 * count:].long()
                # Segment ids built on the device; `output_size` spares a sync on the total.
                batch_index = torch.repeat_interleave(torch.arange(rows, device=self.device),
                                                      offsets[1:] - offsets[:-1], output_size=count)
                priors = gather_legal_priors(PolicyTables(*tables),
                                             staged[:3 * count].view(count, 3), batch_index)
                packed = torch.cat([priors, values])  # [M + B] float32: one copy back
        finally:
            model.train(was_training)
        if not self._pinned:
            packed_array = packed.numpy()  # a CPU device: the result tensor is already on the host
            return packed_array[:count], packed_array[count:]
        result = self._staging("_result_staging", count + rows)
        result.copy_(packed, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        result_array = result.numpy()
        # The staging buffer is reused: the caller gets copies.
        return result_array[:count].copy(), result_array[count:].copy()

    def _upload(self, host: torch.Tensor) -> torch.Tensor:
        """Feature planes from the host buffer on the device, in the stem's dtype and memory
        format."""
        stem_weight = self.model.stem.conv.weight
        features = host.to(self.device, non_blocking=True).to(dtype=stem_weight.dtype)
        if stem_weight.is_contiguous(memory_format=torch.channels_last):
            features = features.contiguous(memory_format=torch.channels_last)
        return features

    @property
    def has_ownership(self) -> bool:
        """Whether the model has the ownership head (`ownership` answers)."""
        return bool(self.model.config.ownership_head)

    def ownership(self, positions: np.ndarray) -> np.ndarray:
        """The ownership head's prediction for each position: `(B, N*N) float32` in [-1, 1], in
        the position's canonical frame, +1 where the side to move is expected to own the square at
        the end of the game, -1 the opponent. The search never asks for it (`evaluate` skips the
        head); one eager forward pass, without buckets or graphs.

        Args:
            positions: `(B, 3 * W) uint64` canonical positions of the evaluator's board size.

        Raises:
            amazons.neural.model.NetInputError: the model has no ownership head.
            amazons.evaluator.EvaluatorInputError: `positions` is not `(B, 3 * W) uint64` of the
                board size.
        """
        if not self.has_ownership:
            raise NetInputError(
                "the model has no ownership head (NetConfig.ownership_head is false)")
        check_positions(positions, self.board_size)
        rows = positions.shape[0]
        if rows == 0:
            return np.zeros((0, self.board_size ** 2), np.float32)
        host = self._feature_buffer(rows)
        engine.features(positions, self.num_planes, out=host.numpy(), size=self.board_size)
        model = self.model
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), torch.autocast(self.device.type, dtype=self.dtype,
                                                        enabled=self.dtype != torch.float32):
                ownership = model(self._upload(host)).ownership.float()
        finally:
            model.train(was_training)
        return ownership.cpu().numpy()
