"""The network as production runs it: the prepared model, in process or in the inference server.

* `ReloadableNetworkEvaluator`: the Evaluator that the inference server, the arena's network
  players, the web board and evaluation run. It evaluates the model that
  `amazons.neural.model.prepare_for_inference` makes from a checkpoint's weights (batch norms
  folded into the convolutions, channels_last), under autocast at the resolved precision (bf16
  on a GPU that has it, fp32 on a CPU: `amazons.neural.model.resolve_precision`), and on CUDA
  over fixed batch buckets with one captured CUDA graph each
  (`amazons.neural.cuda_graphs.NetworkEvaluator`). It keeps the checkpoint's own (unfolded)
  model on the CPU beside the prepared one: new weights (`load_weights(path)` from a file,
  `load_flat_weights(flat)` from the learner's shared memory) go into that CPU model, their
  batch norms are folded there, and the result is copied into the prepared model's own tensors
  in place, so the evaluator, its model and its captured CUDA graphs are kept.
* `NativeReloadableEvaluator`: the same model on the compiled CPU evaluator
  (`amazons.neural.native.NativeEvaluator`, the native core's forward pass): the checkpoint's model
  kept on the CPU as the source, its batch norms folded there (`prepare_for_inference`), the
  folded arrays loaded into the native network's buffer in place on every weight update.
  `resolve_backend` chooses between the two (`InferenceConfig.backend`: "auto" takes the native
  one on a CPU where the extension is built and runs the network at fp32, torch on a GPU or at an
  explicit bf16 or fp16): it resolves the device and the precision and asks the one chooser,
  `amazons.core.backends.choose_backend`.
* `load_network_evaluator`: a checkpoint as that evaluator, in this process.
* `NetworkEvaluatorFactory`: the picklable recipe the inference server runs in its own process to
  build the same evaluator; `server_evaluator_factory` is the one builder of it from a run's
  settings (device, precision, `InferenceConfig`: the backend, and the largest batch bucket is
  the server's `inference_batch_size`), called by the main job, the Ray node and the benchmarks.

Board sizes: each evaluator here serves one board size (`board_size`, 8 unless built with
another), computes its features with it, and the factory carries it to the server
(`InferenceServer` takes its size from the factory). A network with the flat value head runs
8 x 8 only: an evaluator of another size refuses it when it is built (torch:
`amazons.neural.model.check_board_input`; native: `amazons.neural.native.native_support`).

The bot and terminal play never come here: they run exported numpy models
(`amazons.neural.numpy_net`), whose batch norms were folded at export. Players are built by
`amazons.players.factory`, which imports this module when a `.pt` model is asked for.

Imports torch (through `amazons.neural.model` and `amazons.neural.checkpoint`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from amazons.core.backends import BackendError, choose_backend
from amazons.neural import native
from amazons.neural.checkpoint import CheckpointError, load_checkpoint, load_model_for_play
from amazons.neural.cuda_graphs import NetworkEvaluator, batch_buckets
from amazons.neural.model import (
    PRECISION_DTYPES,
    GlobalSelfAttention,
    PolicyValueNet,
    ResidualBlock,
    inference_config_dict,
    load_prepared_weights,
    prepare_for_inference,
    resolve_precision,
    unflatten_weights,
)
from amazons.neural.numpy_net import NumpyNet
from amazons.serving.server import InferenceConfig

# What a network's inference server imports anyway: torch and the network evaluators, this
# module (`NetworkEvaluatorFactory.preload`).
NETWORK_PRELOAD = ("amazons.neural.served",)

__all__ = [
    "BackendError",
    "NativeReloadableEvaluator",
    "NetworkEvaluatorFactory",
    "ReloadableNetworkEvaluator",
    "load_network_evaluator",
    "model_arrays",
    "numpy_net",
    "resolve_backend",
    "resolve_device",
    "server_evaluator_factory",
]

# the largest batch bucket unless told otherwise
DEFAULT_MAX_BATCH = InferenceConfig().inference_batch_size


def resolve_device(device: str) -> str:
    """"auto" -> "cuda" when a GPU is available, else "cpu"; anything else is returned as is."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class _SourceWeights:
    """New weights for an evaluator that keeps the checkpoint's unfolded model on the CPU as
    `source` and derives what it runs from it in `_refresh` (both production evaluators)."""

    source: PolicyValueNet

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load a learner or model checkpoint's weights (same architecture) in place (`_refresh`).

        Raises:
            amazons.neural.checkpoint.CheckpointError: unreadable file or weights that do not fit.
        """
        payload = load_checkpoint(path)
        try:
            self.source.load_state_dict(payload["model"])
        except RuntimeError as error:
            raise CheckpointError(f"{path}: the weights do not fit the network: {error}") from None
        self._refresh()

    def load_flat_weights(self, flat: np.ndarray) -> None:
        """Take the learner's weights as `amazons.neural.model.flatten_weights` laid them out (e.g.
        a view of the shared memory `InferenceServer.publish_shared_weights` wrote) in place
        (`_refresh`); `flat` is copied before this returns and may be overwritten afterwards.

        Raises:
            amazons.neural.model.NetInputError: `flat` does not have this network's length.
        """
        unflatten_weights(self.source, torch.from_numpy(flat))
        self._refresh()

    def _refresh(self) -> None:
        raise NotImplementedError


class ReloadableNetworkEvaluator(_SourceWeights, NetworkEvaluator):
    """The production evaluator: the prepared copy of `model`, given new weights in place.

    Args:
        model: the network as checkpoints hold it (batch norms unfolded); kept on the CPU as the
            source of the prepared copy, which runs on `device`.
        device: "auto", "cpu", "cuda", "cuda:1", ...
        precision: "auto", "fp32", "bf16" or "fp16" (`amazons.neural.model.resolve_precision`); the
            prepared model keeps fp32 weights and runs under autocast to this precision.
        max_batch: the largest batch bucket (CUDA graphs only; larger batches run in chunks).
        cuda_graphs: capture a CUDA graph per batch bucket; None: on CUDA devices only.
        board_size: the board side N (6..10) of every batch it evaluates.

    Raises:
        amazons.neural.model.NetInputError, amazons.neural.model.NetConfigError: a bad precision,
            `cuda_graphs` off CUDA, or a board size the engine has no rules for.
    """

    def __init__(self, model: PolicyValueNet, device: str = "auto", precision: str = "auto",
                 max_batch: int = DEFAULT_MAX_BATCH, cuda_graphs: bool | None = None,
                 board_size: int = 8) -> None:
        resolved = torch.device(resolve_device(device))
        graphs = resolved.type == "cuda" if cuda_graphs is None else cuda_graphs
        self.source = model.cpu().eval()
        self.precision = resolve_precision(precision, resolved)
        super().__init__(prepare_for_inference(self.source), model.config.num_planes, resolved,
                         PRECISION_DTYPES[self.precision],
                         batch_buckets(max_batch) if graphs else (), graphs, board_size)

    def _refresh(self) -> None:
        """Fold the CPU model's batch norms on the CPU and copy the result into the prepared
        model's tensors on the device (its storage, so its captured CUDA graphs, kept)."""
        load_prepared_weights(self.model, self.source)


def model_arrays(model: PolicyValueNet) -> tuple[dict[str, Any], list[str], dict[str, np.ndarray]]:
    """What an exported file holds: `(net_config dict, trunk layer kinds, float32 arrays)`.

    The arrays are the state dict of `prepare_for_inference(model)` (batch norms folded, the
    training-only heads left out), on the CPU, in torch's layouts, and the config is that
    network's (`amazons.neural.model.inference_config_dict`); `model` itself is not changed.

    Raises:
        BackendError: a trunk layer of a kind the numpy and native networks do not run.
    """
    prepared = prepare_for_inference(model, torch.float32, channels_last=False).cpu()
    trunk = _trunk_kinds(prepared)
    arrays = {name: tensor.detach().float().contiguous().numpy().copy()
              for name, tensor in prepared.state_dict().items()}
    return inference_config_dict(model.config), trunk, arrays


def numpy_net(model: PolicyValueNet, source: dict[str, Any] | None = None) -> NumpyNet:
    """`model` with its batch norms folded, as `amazons.neural.numpy_net.NumpyNet` (what the native
    and numpy evaluators and the Botzone export run)."""
    return NumpyNet(*model_arrays(model), source)


def resolve_backend(backend: str, device: str, model: PolicyValueNet,
                    precision: str = "auto", board_size: int = 8) -> str:
    """The backend that runs `model` on `device` at `precision` on `board_size` boards: "torch"
    or "native".

    Resolves `device` and `precision` ("auto": `resolve_device`,
    `amazons.neural.model.resolve_precision`), asks whether the native evaluator runs the
    network, and returns what the one chooser picks for a checkpoint
    (`amazons.core.backends.choose_backend`): "auto" takes the native evaluator on a CPU where
    the extension is built and runs the network (every network npnet runs) at fp32, torch on a
    GPU, at an explicit "bf16" or "fp16" (never dropped for fp32), or where the native evaluator
    cannot run (a flat value head off 8 x 8 among those). "native" is refused on a GPU, at another
    precision than fp32, or where it cannot run; "numpy" (exported models only) is refused with
    the names to write.

    Raises:
        BackendError: an unknown backend, one that does not run checkpoints, or "native" where
            it cannot run (the reason named, and what to write instead).
        amazons.neural.model.NetConfigError: an unknown precision.
    """
    resolved = torch.device(resolve_device(device))
    computes = resolve_precision(precision, resolved)
    try:
        return choose_backend(backend, ".pt", _native_support(model, board_size), str(resolved),
                              computes)
    except BackendError as error:
        raise BackendError(f"inference {error}") from None


def _native_support(model: PolicyValueNet, board_size: int = 8) -> str:
    """Why the native evaluator cannot run `model` on `board_size` boards here, "" where it can
    (`amazons.neural.native.native_support`, or the trunk layer it does not know)."""
    try:
        return native.native_support(inference_config_dict(model.config), _trunk_kinds(model),
                                     board_size)
    except BackendError as error:
        return str(error)


def _trunk_kinds(model: PolicyValueNet) -> list[str]:
    """`model`'s trunk layers as npnet names them ("residual", "attention").

    Raises:
        BackendError: a trunk layer of a kind the numpy and native networks do not run.
    """
    kinds = []
    for layer in model.trunk:
        if isinstance(layer, ResidualBlock):
            kinds.append("residual")
        elif isinstance(layer, GlobalSelfAttention):
            kinds.append("attention")
        else:
            raise BackendError(f"cannot export a trunk layer of type {type(layer).__name__}")
    return kinds


class NativeReloadableEvaluator(_SourceWeights):
    """The production evaluator on the compiled CPU evaluator (`amazons.neural.native`).

    Args:
        model: the network as checkpoints hold it (batch norms unfolded); kept on the CPU as the
            source of the folded arrays.
        threads: the native evaluator's threads per batch.
        board_size: the board side N (6..10) of every batch it evaluates.

    Raises:
        amazons.neural.native.NativeUnavailableError: the extension is not built or cannot run it
            (a flat value head off 8 x 8 among those).
    """

    backend = "native"
    precision = "fp32"

    def __init__(self, model: PolicyValueNet, threads: int = 1, board_size: int = 8) -> None:
        self.source = model.cpu().eval()
        self.native = native.NativeEvaluator(numpy_net(self.source), threads,
                                             board_size=board_size)

    @property
    def board_size(self) -> int:
        """The board side of every batch (the native evaluator's)."""
        return self.native.board_size

    @property
    def has_ownership(self) -> bool:
        """Whether the network has the ownership head."""
        return self.native.has_ownership

    def ownership(self, positions: np.ndarray) -> np.ndarray:
        """The ownership head's map (`amazons.neural.native.NativeEvaluator.ownership`)."""
        return self.native.ownership(positions)

    def evaluate(self, positions: np.ndarray, moves: np.ndarray,
                 move_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The search's `Evaluator` call (`amazons.neural.native.NativeEvaluator.evaluate`)."""
        return self.native.evaluate(positions, moves, move_offsets)

    def _refresh(self) -> None:
        """Fold the source model's batch norms on the CPU and write the arrays into the native
        network's buffer (its Winograd filters re-made)."""
        self.native.load_net(numpy_net(self.source))


def load_network_evaluator(path: str | os.PathLike, device: str = "auto", precision: str = "auto",
                           max_batch: int = DEFAULT_MAX_BATCH, cuda_graphs: bool | None = None,
                           torch_threads: int | None = None, backend: str = "auto",
                           native_threads: int = 1, board_size: int = 8
                           ) -> ReloadableNetworkEvaluator | NativeReloadableEvaluator:
    """The network of a learner or model checkpoint as the production evaluator, in this process.

    Args:
        path: the checkpoint.
        device, precision, max_batch, cuda_graphs: see `ReloadableNetworkEvaluator`.
        torch_threads: set torch's intra-op threads (process-wide) first; None leaves them.
        backend: "auto", "torch" or "native" (`resolve_backend`: "auto" keeps an explicit bf16
            or fp16 `precision` on torch).
        native_threads: the native evaluator's threads per batch.
        board_size: the board side N (6..10) it evaluates.

    Raises:
        amazons.neural.checkpoint.CheckpointError: the file is missing or not a usable checkpoint.
        BackendError: an unknown backend or "numpy", or "native" where it cannot run (a flat
            value head off 8 x 8 among those) or at another precision than fp32.
        amazons.neural.model.NetInputError: torch, with a network that does not run on
            `board_size` (the flat value head off 8 x 8).
    """
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    model = load_model_for_play(path, "cpu")
    if resolve_backend(backend, device, model, precision, board_size) == "native":
        return NativeReloadableEvaluator(model, native_threads, board_size)
    return ReloadableNetworkEvaluator(model, device, precision, max_batch, cuda_graphs,
                                      board_size)


@dataclass(frozen=True)
class NetworkEvaluatorFactory:
    """Builds the server's evaluator in the server process (picklable: paths and names only).

    Attributes:
        model_path: a learner or model checkpoint.
        device: "auto", "cpu", "cuda", "cuda:1", ...
        dtype: the precision: "auto", "fp32", "bf16" or "fp16"
            (`amazons.neural.model.resolve_precision`).
        max_batch: the largest batch bucket of the CUDA graphs (the server's inference batch).
        cuda_graphs: capture a CUDA graph per batch bucket; None: on CUDA devices only.
        backend: "auto", "torch" or "native" (`resolve_backend`).
        native_threads: the native evaluator's threads per batch.
        board_size: the board side N (6..10) the evaluator serves; the `InferenceServer` that
            runs this factory serves the same size.
    """

    # The modules its server process imports (torch among them), for the forkserver to import
    # once (`amazons.core.processes.process_context`); not a field.
    preload: ClassVar[tuple[str, ...]] = NETWORK_PRELOAD

    model_path: str
    device: str = "auto"
    dtype: str = "auto"
    max_batch: int = DEFAULT_MAX_BATCH
    cuda_graphs: bool | None = None
    backend: str = "auto"
    native_threads: int = 1
    board_size: int = 8

    def __call__(self) -> ReloadableNetworkEvaluator | NativeReloadableEvaluator:
        return load_network_evaluator(self.model_path, self.device, self.dtype, self.max_batch,
                                      self.cuda_graphs, backend=self.backend,
                                      native_threads=self.native_threads,
                                      board_size=self.board_size)


def server_evaluator_factory(model_path: str | os.PathLike, device: str, precision: str,
                             inference: InferenceConfig,
                             board_size: int = 8) -> NetworkEvaluatorFactory:
    """The production evaluator's factory for an inference server that runs with `inference`:
    its largest batch bucket is `inference.inference_batch_size`, so a full batch of the server
    runs as one forward pass (one CUDA graph replay on a GPU), never in chunks.

    The one builder of the server's factory: `amazons.train.Run`, the Ray node actor
    (`amazons.distributed.node`) and the benchmarks (`suite_selfplay`, `suite_gpu`) call it.

    Args:
        model_path: the checkpoint the server starts from.
        device: "auto", "cpu", "cuda", "cuda:1", ...
        precision: "auto", "fp32", "bf16" or "fp16" (`amazons.neural.model.resolve_precision`).
        inference: the server's batching settings.
        board_size: the board side N (6..10) the server serves (`InferenceServer` reads it from
            the factory).
    """
    return NetworkEvaluatorFactory(str(model_path), device, precision,
                                   max_batch=inference.inference_batch_size,
                                   backend=inference.backend,
                                   native_threads=inference.native_threads,
                                   board_size=board_size)
