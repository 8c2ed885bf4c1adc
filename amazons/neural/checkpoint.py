"""Checkpoints: atomic saves, loads that can never run code, clear errors.

A checkpoint is one `torch.save` file holding a dict of tensors and plain values only:

    {"format": "amazons-checkpoint", "version": 1,
     "sha256": hex digest of the payload's content,
     "payload": {
        "kind": "learner" | "model",
        "net_config": config_to_dict(net_config),
        "optim_config": config_to_dict(optim_config) | None,   # learner checkpoints
        "precision": "bf16" | "fp16" | "fp32" | None,    # what "auto" resolved to when saved
        "model": state dict,
        "optimizer", "scheduler", "scaler": state dicts | None,
        "step": int,
        "rng": {"python", "numpy", "torch", "cuda", "learner"} | None,
        "extra": dict of plain values (the caller's: run id, games played, ...),
        "torch_version": str}}

* Saving writes a temporary file in the target's folder, fsyncs it and renames it over the target
  (`os.replace`, atomic on POSIX): a crash mid-save leaves the previous checkpoint intact.
* Loading uses `torch.load(weights_only=True)`: the unpickler accepts tensors and plain containers
  only, so a checkpoint cannot execute code. The SHA-256 digest, recomputed over every tensor's
  bytes and every plain value, catches a truncated, corrupted or edited file (torch's zip reader
  does not check its CRCs). The digest is an integrity check, not a signature.
* Every problem raises `CheckpointError` (a `ValueError`) naming the file and what is wrong:
  not a checkpoint, truncated, refused by the safe unpickler, digest mismatch, or a config / shape
  mismatch with the learner it should restore.
* `load_model_for_play` builds the network from the stored config and weights only; it reads
  learner and model-only (`save_model`) checkpoints alike.
* Stored configs are read with `amazons.core.config.config_from_dict`: a field a newer version added
  takes its default, so older checkpoints still load (a net config stored before `value_head`
  describes the flat value head, the one its weights are for; the field's value, "flat" or
  "pooled", is stored and read back like every other).

Imports torch, numpy, `amazons.core.config`, `amazons.neural.model`, `amazons.neural.growth` and
`amazons.neural.learner`.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from amazons.core.atomic import atomic_write
from amazons.core.config import config_from_dict, config_to_dict
from amazons.neural.growth import GROWTH_METHODS, GrowthError, check_growth, grow_state_dict
from amazons.neural.learner import Learner, OptimConfig
from amazons.neural.model import (
    TRAINING_ONLY_FIELDS,
    TRAINING_ONLY_PREFIXES,
    NetConfig,
    PolicyValueNet,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "CheckpointError",
    "content_digest",
    "learner_from_checkpoint",
    "load_checkpoint",
    "load_model_for_play",
    "restore_learner",
    "save_checkpoint",
    "save_model",
]

FORMAT = "amazons-checkpoint"
VERSION = 1
KINDS = ("learner", "model")


class CheckpointError(ValueError):
    """A checkpoint cannot be written, read or applied.

    The message names the file and the reason.
    """


# ------------------------------------------------------------------------------------------------
# Content digest


def _feed(digest: Any, value: Any, where: str) -> None:
    """Hash a nested structure of tensors and plain values, with type tags and lengths."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(value, dict):
        digest.update(f"D{len(value)};".encode())
        for key, item in value.items():
            _feed(digest, key, where)
            _feed(digest, item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        digest.update(f"{'L' if isinstance(value, list) else 'U'}{len(value)};".encode())
        for index, item in enumerate(value):
            _feed(digest, item, f"{where}[{index}]")
    elif type(value) is str:
        encoded = value.encode()
        digest.update(f"S{len(encoded)};".encode() + encoded)
    elif value is None or type(value) in (bool, int):  # exact types: numpy scalars do not load
        digest.update(f"{type(value).__name__[0]}{value!r};".encode())
    elif type(value) is float:
        digest.update(f"F{value.hex()};".encode())
    else:
        raise CheckpointError(f"{where}: cannot store a {type(value).__name__} in a checkpoint")


def content_digest(payload: dict[str, Any]) -> str:
    """SHA-256 over the payload's tensors (dtype, shape, bytes) and plain values."""
    digest = hashlib.sha256()
    _feed(digest, payload, "payload")
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------------
# Saving


def _write(path: str | os.PathLike, payload: dict[str, Any]) -> Path:
    """Stamp the torch version, digest the payload and write it atomically.

    Raises:
        CheckpointError: the payload holds something other than plain values, or the write failed.
    """
    payload = {**payload, "torch_version": str(torch.__version__)}
    document = {"format": FORMAT, "version": VERSION, "sha256": content_digest(payload),
                "payload": payload}
    try:
        return atomic_write(path, lambda stream: torch.save(document, stream))
    except OSError as error:
        raise CheckpointError(f"{path}: cannot write the checkpoint: {error}") from error


def _rng_states(learner: Learner) -> dict[str, Any]:
    # The legacy global generator is saved on purpose: code we do not own may draw from it.
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state(legacy=True)  # noqa: NPY002
    # The learner's generator under its lock: the batch prefetcher's thread (`BatchPrefetcher`)
    # may be drawing from it, and a draw holds the lock with the GIL released.
    with learner.rng.bit_generator.lock:
        learner_state = learner.rng.bit_generator.state
    return {
        "python": random.getstate(),
        "numpy": (name, keys.tolist(), int(position), int(has_gauss), float(cached_gaussian)),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "learner": learner_state,
    }


def save_checkpoint(path: str | os.PathLike, learner: Learner,
                    extra: dict[str, Any] | None = None) -> Path:
    """Write everything a restart needs, atomically.

    Stores the model, optimizer, scheduler, grad scaler, step, the RNG states (python, numpy
    global, torch CPU and CUDA, the learner's generator), the net and optim configs and `extra`
    (plain values only).

    Raises:
        CheckpointError: `extra` holds something other than plain values, or the write failed.
    """
    state = learner.state_dict()
    return _write(path, {
        "kind": "learner",
        "net_config": config_to_dict(learner.model.config),
        "optim_config": config_to_dict(learner.config),
        "precision": learner.precision,
        "model": state["model"],
        "optimizer": state["optimizer"],
        "scheduler": state["scheduler"],
        "scaler": state["scaler"],
        "step": state["step"],
        "rng": _rng_states(learner),
        "extra": dict(extra or {}),
    })


def save_model(path: str | os.PathLike, model: PolicyValueNet,
               extra: dict[str, Any] | None = None) -> Path:
    """Write a model-only checkpoint (config + weights), atomically.

    `load_model_for_play` reads it.
    """
    return _write(path, {
        "kind": "model",
        "net_config": config_to_dict(model.config),
        "optim_config": None,
        "precision": None,
        "model": model.state_dict(),
        "optimizer": None,
        "scheduler": None,
        "scaler": None,
        "step": 0,
        "rng": None,
        "extra": dict(extra or {}),
    })


# ------------------------------------------------------------------------------------------------
# Loading


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read and verify a checkpoint; returns its payload (tensors on the CPU).

    Raises:
        CheckpointError: the file is missing, unreadable, truncated, not a checkpoint of this
            format and version, holds objects the safe unpickler refuses, or fails its digest.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        document = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{path}: refused: it holds objects other than tensors and plain values "
            f"(torch.load weights_only=True): {error}") from None
    except Exception as error:  # zip / stream / EOF errors of a truncated or corrupt file
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt): "
            f"{type(error).__name__}: {error}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an amazons checkpoint (no '{FORMAT}' header)")
    if document.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {document.get('version')!r}; "
            f"this code reads {VERSION}")
    payload = document.get("payload")
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: the checkpoint has no payload")
    try:
        actual = content_digest(payload)
    except CheckpointError as error:
        raise CheckpointError(f"{path}: {error}") from None
    if actual != document.get("sha256"):
        raise CheckpointError(
            f"{path}: content does not match its SHA-256 digest "
            f"(stored {document.get('sha256')!r}, computed {actual!r}): "
            "the file was modified or corrupted")
    if payload.get("kind") not in KINDS:
        raise CheckpointError(f"{path}: unknown checkpoint kind {payload.get('kind')!r}")
    return payload


def _net_config(path: Path, payload: dict[str, Any]) -> NetConfig:
    try:
        return config_from_dict(NetConfig, payload["net_config"])
    except (ValueError, TypeError, KeyError) as error:
        raise CheckpointError(f"{path}: bad net config: {error}") from None


def _optim_config(path: Path, payload: dict[str, Any]) -> OptimConfig:
    try:
        return config_from_dict(OptimConfig, payload["optim_config"])
    except (ValueError, TypeError, KeyError) as error:
        raise CheckpointError(f"{path}: bad optim config: {error}") from None


def _load_weights(path: Path, model: PolicyValueNet, weights: dict[str, Any]) -> None:
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        raise CheckpointError(f"{path}: the weights do not fit the network: {error}") from None


def load_model_for_play(path: str | os.PathLike,
                        device: str | torch.device = "cpu") -> PolicyValueNet:
    """The network of a learner or model checkpoint, on `device`, in eval mode.

    Raises:
        CheckpointError: see `load_checkpoint`; also a bad config or weights that do not fit it.
    """
    path = Path(path)
    payload = load_checkpoint(path)
    model = PolicyValueNet(_net_config(path, payload))
    _load_weights(path, model, payload["model"])
    return model.to(device).eval()


def _config_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    names = sorted(set(stored) | set(current))
    return [f"{name}: checkpoint {stored.get(name, '<missing>')!r}, "
            f"learner {current.get(name, '<missing>')!r}"
            for name in names if stored.get(name, "<missing>") != current.get(name, "<missing>")]


def _refuse_another_net(path: Path, stored: NetConfig, net: NetConfig, refusal: str,
                        wanted: str, reason: str = "") -> None:
    """Raise `CheckpointError` ("{path}: {refusal}: net.FIELD: checkpoint A, {wanted} B; ...",
    then `reason`) when the checkpoint's network `stored` differs from `net`."""
    differences = _config_differences(config_to_dict(stored), config_to_dict(net))
    if differences:
        raise CheckpointError(f"{path}: {refusal}: " + "; ".join(
            f"net.{difference}".replace(", learner ", f", {wanted} ")
            for difference in differences) + reason)


def _restore(path: Path, payload: dict[str, Any], learner: Learner,
             same_optim: bool = True) -> dict[str, Any]:
    if payload["kind"] != "learner":
        raise CheckpointError(f"{path}: a {payload['kind']} checkpoint cannot restore a learner")
    checks = [("net config", config_to_dict(_net_config(path, payload)),
               config_to_dict(learner.model.config))]
    if same_optim:
        checks.append(("optim config", config_to_dict(_optim_config(path, payload)),
                       config_to_dict(learner.config)))
    for name, stored, current in checks:
        differences = _config_differences(stored, current)
        if differences:
            raise CheckpointError(f"{path}: {name} mismatch: " + "; ".join(differences))
    _load_weights(path, learner.model, payload["model"])
    try:
        learner.load_state_dict({
            "model": payload["model"], "optimizer": payload["optimizer"],
            "scheduler": payload["scheduler"], "scaler": payload["scaler"] or {},
            "step": payload["step"], "rng": payload["rng"]["learner"]})
    except (ValueError, KeyError, RuntimeError, TypeError) as error:
        raise CheckpointError(f"{path}: cannot restore the training state: {error}") from None
    rng = payload["rng"]
    random.setstate(rng["python"])
    name, keys, position, has_gauss, cached_gaussian = rng["numpy"]
    np.random.set_state(  # noqa: NPY002  (the legacy global generator, see _rng_states)
        (name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return payload["extra"]


def restore_learner(path: str | os.PathLike, learner: Learner) -> dict[str, Any]:
    """Put a learner built with the same configs back in the checkpoint's exact state.

    Restores the model, optimizer, scheduler, scaler, step, the learner's generator and the
    process-wide python / numpy / torch RNGs. Returns the checkpoint's `extra` dict.

    Raises:
        CheckpointError: see `load_checkpoint`; also a net or optim config that differs from the
            learner's (every differing field is named) or state that does not fit.
    """
    path = Path(path)
    return _restore(path, load_checkpoint(path), learner)


def resume_learner(
    path: str | os.PathLike, net: NetConfig, optim: OptimConfig, device: str | torch.device = "cpu"
) -> tuple[Learner, dict[str, Any]]:
    """The learner of a learner checkpoint, continued with a run's current optimizer settings,
    and the checkpoint's `extra` dict (the file is read and verified once).

    The network must be the checkpoint's: a resumed run cannot change its shape or head. The
    optimizer and schedule settings may change (a resumed run with `optim.lr=...`): the model,
    optimizer moments, step and RNG states are restored, then `optim`'s hyperparameters replace
    the stored ones (`Learner.apply_optim_config`).

    Raises:
        CheckpointError: see `load_checkpoint`; also a `net` that differs from the checkpoint's
            (every differing field is named, as `net.FIELD`) or state that does not fit.
    """
    path = Path(path)
    payload = load_checkpoint(path)
    if payload["kind"] != "learner":
        raise CheckpointError(f"{path}: a {payload['kind']} checkpoint cannot restore a learner")
    _refuse_another_net(path, _net_config(path, payload), net,
                        "a resumed run cannot change its network's shape or head", "requested")
    learner = Learner(PolicyValueNet(net), optim, device=device)
    extra = _restore(path, payload, learner, same_optim=False)
    learner.apply_optim_config()
    return learner, extra


def init_weights_from(path: str | os.PathLike, model: PolicyValueNet, growth: str = "silent",
                      seed: int = 0, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """Copy the weights of a learner or model checkpoint into `model` (a warm start: the caller's
    optimizer, schedule and step stay fresh). Returns the checkpoint's `extra` dict.

    `payload` is the checkpoint as `load_checkpoint(path)` returned it, for a caller that read it
    already (it also needs the stored network's config): the file is then not read again.

    A stored network that `model`'s config grows (more blocks, channels, attention, wider heads,
    an added ownership head or source term: `amazons.neural.growth.check_growth`) is grown into
    `model` by `growth` ("net2net" or "silent", `amazons.neural.growth.GROWTH_METHODS`, its random
    choices and fresh weights drawn with `seed`): `model` then computes what the stored network
    computes. A stored flat value head that `model`'s config asks pooled is carried over first
    (`amazons.neural.growth.pool_value_head`): the policy and every other weight exactly, the
    value close to the stored one's on 8 x 8.

    The training-only heads (`amazons.neural.model.TRAINING_ONLY_FIELDS`, the soft policy head) may
    differ: a head `model` has and the checkpoint lacks keeps its fresh initialization, and one
    the checkpoint has and `model` lacks is left out; every other weight is copied (or grown).

    Raises:
        CheckpointError: see `load_checkpoint`; also a stored network that differs from `model`'s
            config in any other field and does not grow into it (every differing field is named,
            as `net.FIELD`, then why it cannot grow).
        GrowthError: `growth` is not one of `GROWTH_METHODS`.
    """
    if growth not in GROWTH_METHODS:
        raise GrowthError(f"growth method must be one of {GROWTH_METHODS}, got {growth!r}")
    path = Path(path)
    if payload is None:
        payload = load_checkpoint(path)
    stored = _net_config(path, payload)
    same_heads = {name: getattr(model.config, name) for name in TRAINING_ONLY_FIELDS}
    if stored.replace(**same_heads) != model.config:
        try:
            check_growth(stored, model.config)
        except GrowthError as error:
            _refuse_another_net(path, stored.replace(**same_heads), model.config,
                                "its network is not the run's, so its weights cannot start it",
                                "run", f"; nor does it grow into the run's: {error}")
        small = PolicyValueNet(stored)
        _load_weights(path, small, payload["model"])
        grown = grow_state_dict(small, model.config, growth, seed)
        for name in TRAINING_ONLY_FIELDS:  # a head the checkpoint lacks keeps the model's init
            if getattr(model.config, name) and not getattr(stored, name):
                grown.update({key: value for key, value in model.state_dict().items()
                              if key.startswith(f"{name}.")})
        _load_weights(path, model, grown)
        return payload["extra"]
    if stored == model.config:
        _load_weights(path, model, payload["model"])
        return payload["extra"]
    shared = {key: value for key, value in payload["model"].items()
              if not key.startswith(TRAINING_ONLY_PREFIXES)}
    try:
        missing, unexpected = model.load_state_dict(shared, strict=False)
    except RuntimeError as error:
        raise CheckpointError(f"{path}: the weights do not fit the network: {error}") from None
    missing = [key for key in missing if not key.startswith(TRAINING_ONLY_PREFIXES)]
    if missing or unexpected:
        raise CheckpointError(f"{path}: the weights do not fit the network: "
                              f"missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    return payload["extra"]


def learner_from_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> Learner:
    """A learner built from the checkpoint's own configs and restored to its state (the usual
    way to resume a run)."""
    path = Path(path)
    payload = load_checkpoint(path)
    if payload["kind"] != "learner":
        raise CheckpointError(f"{path}: a {payload['kind']} checkpoint cannot restore a learner")
    learner = Learner(PolicyValueNet(_net_config(path, payload)), _optim_config(path, payload),
                      device=device)
    _restore(path, payload, learner)
    return learner
