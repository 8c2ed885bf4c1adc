"""The one backend chooser (`amazons.core.backends.choose_backend`): its table, its refusals,
and that it needs no torch.

The callers that run what it chooses (`amazons.neural.served.resolve_backend` for
checkpoints, `amazons.players.factory.numpy_model_evaluator` for exported models) are checked
against it in tests/test_nativenet.py and tests/test_player_factory.py.
"""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from amazons.core.backends import (
    BACKENDS,
    COMPUTED_PRECISIONS,
    MODEL_KINDS,
    BackendError,
    choose_backend,
)

NOT_BUILT = "the extension amazons._native is not built"  # a reason the native evaluator gives
DEVICES = ("cpu", "cuda", "cuda:1")

# (backend, model kind, device, precision, the native evaluator runs the network) -> the backend
# that runs, or the words of the refusal. Every row of choose_backend's table, each condition
# that decides one of its cells on both sides of it.
TABLE = [
    # auto: native on a CPU at fp32 where it runs the network, else torch (.pt) or numpy (.npz)
    ("auto", ".pt", "cpu", "fp32", True, "native"),
    ("auto", ".pt", "cpu", "fp32", False, "torch"),
    ("auto", ".pt", "cpu", "bf16", True, "torch"),
    ("auto", ".pt", "cpu", "fp16", True, "torch"),
    ("auto", ".pt", "cuda", "fp32", True, "torch"),
    ("auto", ".pt", "cuda:1", "bf16", True, "torch"),
    ("auto", ".npz", "cpu", "fp32", True, "native"),
    ("auto", ".npz", "cpu", "fp32", False, "numpy"),
    ("auto", ".npz", "cuda", "bf16", True, "native"),  # an exported model runs on the CPU at fp32
    # torch: checkpoints only, wherever and however asked
    ("torch", ".pt", "cpu", "fp32", True, "torch"),
    ("torch", ".pt", "cpu", "fp32", False, "torch"),
    ("torch", ".pt", "cuda", "bf16", True, "torch"),
    ("torch", ".pt", "cpu", "fp16", False, "torch"),
    ("torch", ".npz", "cpu", "fp32", True, "write backend 'native' or 'numpy'.*is 'numpy' now"),
    # native: both kinds, on the CPU at fp32 where it runs the network; refused by name otherwise
    ("native", ".pt", "cpu", "fp32", True, "native"),
    ("native", ".pt", "cpu", "fp32", False, "cannot run this network: .*write backend 'torch'"),
    ("native", ".pt", "cpu", "bf16", True, "computes fp32 only, not precision 'bf16'"),
    ("native", ".pt", "cpu", "fp16", False, "computes fp32 only, not precision 'fp16'"),
    ("native", ".pt", "cuda", "fp32", True, "runs on the CPU; the device is 'cuda'.*device 'cpu'"),
    ("native", ".pt", "cuda:1", "bf16", False, "runs on the CPU; the device is 'cuda:1'"),
    ("native", ".npz", "cpu", "fp32", True, "native"),
    ("native", ".npz", "cpu", "fp32", False, "cannot run this network: .*write backend 'numpy'"),
    ("native", ".npz", "cuda", "bf16", True, "native"),
    # numpy: exported models only
    ("numpy", ".npz", "cpu", "fp32", True, "numpy"),
    ("numpy", ".npz", "cpu", "fp32", False, "numpy"),
    ("numpy", ".pt", "cpu", "fp32", True, "'numpy' runs exported models .*write backend 'torch' "
     "or 'native'"),
]


def support(runs: bool) -> str:
    """What `native_support` says: "" where the native evaluator runs the network."""
    return "" if runs else f"{NOT_BUILT} (no module): run `make build`"


@pytest.mark.parametrize(("backend", "kind", "device", "precision", "runs", "expected"), TABLE)
def test_the_chooser_follows_its_table(backend, kind, device, precision, runs, expected):
    if expected in BACKENDS:
        assert choose_backend(backend, kind, support(runs), device, precision) == expected
    else:
        with pytest.raises(BackendError, match=expected):
            choose_backend(backend, kind, support(runs), device, precision)


def test_the_table_covers_every_backend_and_model_kind():
    assert {(row[0], row[1]) for row in TABLE} == set(itertools.product(BACKENDS, MODEL_KINDS))


@pytest.mark.parametrize(("backend", "kind"), list(itertools.product(BACKENDS, MODEL_KINDS)))
def test_every_choice_runs_the_model_file_or_is_refused_with_what_to_write(backend, kind):
    """Over every device, precision and native support: the answer is a backend that runs the
    file (never "auto"), and the native evaluator only on a CPU at fp32 where it runs the
    network; a refusal says what to write. "auto" is never refused."""
    for device, precision, runs in itertools.product(DEVICES, COMPUTED_PRECISIONS,
                                                      (True, False)):
        try:
            chosen = choose_backend(backend, kind, support(runs), device, precision)
        except BackendError as error:
            assert backend != "auto", error
            assert "write" in str(error) or "run `make build`" in str(error), error
            continue
        assert chosen != "auto" and kind in BACKENDS[chosen]
        if chosen == "native":
            assert runs and (kind == ".npz" or (device == "cpu" and precision == "fp32"))
        if backend != "auto":
            assert chosen == backend


def test_the_native_backends_refusal_keeps_the_reason():
    reason = support(False)
    for kind in MODEL_KINDS:
        with pytest.raises(BackendError) as refused:
            choose_backend("native", kind, reason)
        assert reason in str(refused.value)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(BackendError, match="one of auto, torch, native, numpy, got 'fast'"):
        choose_backend("fast", ".pt", "")
    with pytest.raises(BackendError, match=r"model_kind must be one of '\.pt', '\.npz', "
                                           r"got '\.onnx'"):
        choose_backend("auto", ".onnx", "")
    with pytest.raises(BackendError, match="device must be resolved first.*'auto'"):
        choose_backend("auto", ".pt", "", "auto", "fp32")
    with pytest.raises(BackendError, match="precision must be resolved first.*'auto'"):
        choose_backend("native", ".pt", "", "cpu", "auto")
    assert issubclass(BackendError, ValueError)


def test_the_chooser_loads_no_torch():
    """The inference server's config and the bot's builders read the backends without torch."""
    code = ("import sys\nfrom amazons.core.backends import choose_backend\n"
            "assert choose_backend('auto', '.pt', '', 'cpu', 'fp32') == 'native'\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\nprint('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
