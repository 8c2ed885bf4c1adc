"""The network's backends: each name, what it runs and on which model files, defined once.

A backend names what computes a network's priors and values, wherever one is chosen: the
inference server's (`amazons.inference.InferenceConfig.backend`, `inference.backend=` on the main
job's command line), `amazons.neural.production.resolve_backend`, and the `backend` of the builders in
`amazons.player_factory`. Each name has one meaning whatever the model: "torch" is the prepared
torch model and runs torch checkpoints (`.pt`) only; "numpy" is the numpy network and runs
exported models (`.npz`) only; "native" (the compiled CPU evaluator) runs both; "auto" picks.

Imports nothing from the package: the Botzone bot's builders read it without loading the
inference server's modules.
"""

from __future__ import annotations

__all__ = ["BACKENDS", "MODEL_KINDS", "backend_error"]

# name -> the model files it runs: torch checkpoints (".pt") and exported models (".npz").
BACKENDS: dict[str, tuple[str, ...]] = {
    # native on a CPU where it is built and runs the network at fp32; else torch (.pt), numpy (.npz)
    "auto": (".pt", ".npz"),
    "torch": (".pt",),  # the prepared torch model (`amazons.neural.production.ReloadableNetworkEvaluator`)
    "native": (".pt", ".npz"),  # the compiled CPU evaluator (`amazons.neural.native`), fp32
    "numpy": (".npz",),  # the numpy network (`amazons.neural.numpy_net`), which needs no compiler
}
MODEL_KINDS = {".pt": "torch checkpoints (.pt)", ".npz": "exported models (.npz)"}


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
