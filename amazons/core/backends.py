"""The network's backends: each name, what it runs and on which model files, and the one choice
among them.

A backend names what computes a network's priors and values, wherever one is chosen: the
inference server's (`amazons.serving.server.InferenceConfig.backend`, `inference.backend=` on the
main job's command line), `amazons.neural.served.resolve_backend` (torch checkpoints), and
the `backend` of the builders in `amazons.players.factory` (`numpy_model_evaluator` for exported
models). Each name has one meaning whatever the model: "torch" is the prepared torch model and
runs torch checkpoints (`.pt`) only; "numpy" is the numpy network and runs exported models
(`.npz`) only; "native" (the compiled CPU evaluator) runs both; "auto" picks. `choose_backend`
is the one place where a requested name becomes the backend that runs; its callers only work out
what it needs (the device and precision resolved, and whether the native evaluator runs the
network: `amazons.neural.native.native_support`).

Imports nothing from the package, and never torch: the inference server's config and the Botzone
bot's builders read it without loading torch or the network's modules.
"""

from __future__ import annotations

__all__ = ["BACKENDS", "MODEL_KINDS", "BackendError", "backend_error", "choose_backend"]

# name -> the model files it runs: torch checkpoints (".pt") and exported models (".npz").
BACKENDS: dict[str, tuple[str, ...]] = {
    # native on a CPU where it is built and runs the network at fp32; else torch (.pt), numpy (.npz)
    "auto": (".pt", ".npz"),
    # the prepared torch model (`amazons.neural.served.ReloadableNetworkEvaluator`)
    "torch": (".pt",),
    "native": (".pt", ".npz"),  # the compiled CPU evaluator (`amazons.neural.native`), fp32
    "numpy": (".npz",),  # the numpy network (`amazons.neural.numpy_net`), which needs no compiler
}
MODEL_KINDS = {".pt": "torch checkpoints (.pt)", ".npz": "exported models (.npz)"}
# The precisions a model computes at, "auto" resolved (`amazons.neural.model.resolve_precision`).
COMPUTED_PRECISIONS = ("fp32", "bf16", "fp16")


class BackendError(ValueError):
    """A backend that cannot run here: the message names it, why, and what to write instead."""


def backend_error(backend: str, model_suffix: str) -> str:
    """Why `backend` cannot run a model file ending in `model_suffix` (".pt" or ".npz"), naming
    what to write instead, or "" when it can.

    Before the "numpy" backend existed, "torch" ran an exported model in numpy: that spelling is
    refused with the name to write now.
    """
    if backend not in BACKENDS:
        return f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}"
    if model_suffix in BACKENDS[backend]:
        return ""
    instead = [name for name, suffixes in BACKENDS.items()
               if model_suffix in suffixes and name != "auto"]
    runs = " and ".join(MODEL_KINDS[suffix] for suffix in BACKENDS[backend])
    hint = "; 'torch' ran exported models in numpy before: that is 'numpy' now" \
        if (backend, model_suffix) == ("torch", ".npz") else ""
    return (f"backend {backend!r} runs {runs}, not {MODEL_KINDS[model_suffix]}: write backend "
            f"{' or '.join(map(repr, instead))}, or 'auto'{hint}")


def choose_backend(backend: str, model_kind: str, native_support: str, device: str = "cpu",
                   precision: str = "fp32") -> str:
    """The backend that runs a model file of `model_kind` when `backend` is asked for.

    | asked    | `.pt` (a torch checkpoint)                     | `.npz` (an exported model)       |
    |----------|------------------------------------------------|----------------------------------|
    | `auto`   | `native` on a CPU at fp32 where it runs the    | `native` where it runs the       |
    |          | network, else `torch`                          | network, else `numpy`            |
    | `torch`  | `torch`                                        | refused: `native` or `numpy`     |
    | `native` | `native`; refused on a GPU, at bf16 or fp16,   | `native`; refused where it       |
    |          | or where it cannot run the network             | cannot run the network           |
    | `numpy`  | refused: `torch` or `native`                   | `numpy`                          |

    The native evaluator computes fp32 on the CPU only, so "auto" never drops a precision asked
    for: bf16 or fp16 runs torch, on a CPU too. An exported model runs on the CPU at fp32
    whatever is asked (the numpy and native networks compute nothing else): `device` and
    `precision` do not enter its choice.

    Args:
        backend: the name asked for: "auto", "torch", "native" or "numpy" (`BACKENDS`).
        model_kind: ".pt" or ".npz" (`MODEL_KINDS`).
        native_support: why the native evaluator cannot run the network here, "" where it can
            (`amazons.neural.native.native_support`).
        device: where a `.pt` model runs, resolved: "cpu", "cuda", "cuda:1", ... (not "auto":
            `amazons.neural.served.resolve_device`).
        precision: what a `.pt` model computes at, resolved: "fp32", "bf16" or "fp16" (not
            "auto": `amazons.neural.model.resolve_precision`).

    Returns:
        "torch" or "native" for a `.pt` model; "native" or "numpy" for an `.npz` one.

    Raises:
        BackendError: an unknown backend, one that does not run `model_kind`, or "native" where
            it cannot run (each message names what to write instead); an unknown `model_kind`, or
            a `.pt` model's `device` or `precision` not resolved.
    """
    if model_kind not in MODEL_KINDS:
        raise BackendError(f"model_kind must be one of {', '.join(map(repr, MODEL_KINDS))}, "
                           f"got {model_kind!r}")
    why = backend_error(backend, model_kind)
    if why:
        raise BackendError(why)
    if model_kind == ".npz":
        if backend == "numpy":
            return "numpy"
        if not native_support:
            return "native"
        if backend == "native":
            raise BackendError(f"backend 'native' cannot run this network: {native_support}; "
                               f"write backend 'numpy' or 'auto' to run it in numpy")
        return "numpy"
    if backend == "torch":
        return "torch"
    if not isinstance(device, str) or device in ("", "auto"):
        raise BackendError(f"device must be resolved first (cpu, cuda, cuda:1, ...), "
                           f"got {device!r}")
    if precision not in COMPUTED_PRECISIONS:
        raise BackendError(f"precision must be resolved first to one of "
                           f"{', '.join(COMPUTED_PRECISIONS)}, got {precision!r}")
    on_cpu = device.partition(":")[0] == "cpu"
    if backend == "native":
        if not on_cpu:
            raise BackendError(f"backend 'native' runs on the CPU; the device is {device!r}: "
                               f"write backend 'torch' (or 'auto'), or device 'cpu'")
        if precision != "fp32":
            raise BackendError(f"backend 'native' computes fp32 only, not precision "
                               f"{precision!r}: write backend 'torch' (or 'auto'), or precision "
                               f"'fp32'")
        if native_support:
            raise BackendError(f"backend 'native' cannot run this network: {native_support}; "
                               f"write backend 'torch' or 'auto' to run it on torch")
        return "native"
    return "native" if on_cpu and precision == "fp32" and not native_support else "torch"
