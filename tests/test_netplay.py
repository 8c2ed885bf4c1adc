"""The production evaluator (`amazons.neural.served`): the prepared model matches the original.

The server, the arena's network players, the web board and evaluation run the model
`prepare_for_inference` makes (batch norms folded, channels_last, autocast at the resolved
precision; on CUDA over fixed batch buckets with CUDA graphs). Stated tolerances against
`PolicyValueNet` in eval mode, fp32, on real positions from the engine:

* fp32 on a CPU: priors and values within 1e-4 (absolute); measured up to 8e-6 (ResNet-40, joint).
* bf16 autocast on a CPU: priors within 0.02 and values within 0.05 (absolute); measured up to
  4e-3 and 1.2e-2 on the tiny and small nets.
* batch buckets (padding to fixed sizes; CUDA graphs off on a CPU): within 1e-5 of unpadded.
* new weights copied into the prepared model in place (`load_flat_weights`, `load_weights`):
  within 1e-6 of a model freshly prepared from them (the same folding arithmetic), with the same
  evaluator, model and parameter storage (on CUDA: no graph captured again).

Weights are perturbed away from initialization (batch-norm statistics and affine maps, the
attention gates, sharper heads) so that folding and the heads are exercised: at initialization
every residual block and attention block is the identity and the priors are nearly uniform.
"""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_learn import random_positions
from torch import nn

from amazons import engine
from amazons.core.backends import BACKENDS, choose_backend
from amazons.neural.checkpoint import CheckpointError, save_model
from amazons.neural.cuda_graphs import NetworkEvaluator, batch_buckets
from amazons.neural.model import (
    PRESETS,
    NetInputError,
    PolicyValueNet,
    flatten_weights,
    gather_legal_priors,
    load_prepared_weights,
    net_config,
    policy_log_tables,
    prepare_for_inference,
    resolve_precision,
    segment_ids,
    unflatten_weights,
    weights_elements,
)
from amazons.neural.native import native_available
from amazons.neural.served import (
    BackendError,
    NativeReloadableEvaluator,
    NetworkEvaluatorFactory,
    ReloadableNetworkEvaluator,
    load_network_evaluator,
    resolve_backend,
    server_evaluator_factory,
)
from amazons.serving.server import InferenceConfig

torch.set_num_threads(1)

FP32_TOLERANCE = 1e-4
BF16_PRIOR_TOLERANCE = 0.02
BF16_VALUE_TOLERANCE = 0.05


# Every policy head: (policy_head, other NetConfig fields).
VARIANTS = [pytest.param("joint", {}, id="joint"), pytest.param("factorized", {}, id="factorized"),
            pytest.param("joint", {"arrow_source": True}, id="joint-source")]


def trained_looking(preset: str, head: str, seed: int, **overrides) -> PolicyValueNet:
    """A net of `preset` with `head` (and other config fields) whose batch norms, gates and heads
    are away from their init."""
    torch.manual_seed(seed)
    model = PolicyValueNet(net_config(preset, policy_head=head, **overrides))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                count = module.num_features
                module.running_mean.copy_(torch.randn(count, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(count, generator=generator) * 0.5 + 0.75)
                module.weight.copy_(torch.rand(count, generator=generator) * 0.5 + 0.5)
                module.bias.copy_(torch.randn(count, generator=generator) * 0.1)
        for name, parameter in model.named_parameters():
            if name.endswith("gate"):
                parameter.fill_(0.5)
            elif name.startswith("policy_head") and parameter.dim() > 1:
                parameter.mul_(4.0)
            elif name.startswith("value_head") and parameter.dim() > 1:
                parameter.mul_(1.5)
    return model.eval()


@pytest.fixture(scope="module")
def leaves():
    """24 real positions (0..30 random plies from the start) and their legal moves."""
    positions = random_positions(np.random.default_rng(13), 24)
    return (positions, *engine.legal_moves(positions))


def reference(model: PolicyValueNet, leaves) -> tuple[np.ndarray, np.ndarray]:
    """The training model's priors and values: eval mode, fp32, no folding, NCHW."""
    return NetworkEvaluator(model, model.config.num_planes).evaluate(*leaves)


def assert_close(got, want, prior_tolerance: float, value_tolerance: float) -> None:
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=prior_tolerance)
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=value_tolerance)


@pytest.mark.parametrize(("head", "overrides"), VARIANTS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_prepared_evaluator_matches_the_training_model_in_fp32(preset, head, overrides, leaves):
    # The source projection's weights take their share of the random stream, so the value head
    # draws other weights: seed 4 gives it values that spread (the check below).
    model = trained_looking(preset, head, seed=4 if overrides else 1, **overrides)
    want = reference(model, leaves)
    # not a flat, silent network
    assert want[0].max() > 3 * want[0].min() and np.ptp(want[1]) > 0.02
    evaluator = ReloadableNetworkEvaluator(model, "cpu", "fp32")
    # folded
    assert not any(isinstance(module, nn.BatchNorm2d) for module in evaluator.model.modules())
    assert evaluator.model.stem.conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert evaluator.batch_buckets == () and not evaluator.cuda_graphs  # CPU: no padding, no graphs
    assert_close(evaluator.evaluate(*leaves), want, FP32_TOLERANCE, FP32_TOLERANCE)


@pytest.mark.parametrize(("head", "overrides"), VARIANTS)
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_bf16_autocast_stays_within_its_stated_tolerance(preset, head, overrides, leaves):
    model = trained_looking(preset, head, seed=2, **overrides)
    evaluator = ReloadableNetworkEvaluator(model, "cpu", "bf16")
    assert evaluator.dtype == torch.bfloat16 and evaluator.precision == "bf16"
    got = evaluator.evaluate(*leaves)
    assert_close(got, reference(model, leaves), BF16_PRIOR_TOLERANCE, BF16_VALUE_TOLERANCE)
    offsets = leaves[2]
    np.testing.assert_allclose(np.add.reduceat(got[0], offsets[:-1]), 1.0, atol=1e-5)


@pytest.mark.parametrize("arrow_source", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 8, 11, 24])
def test_batch_buckets_pad_to_fixed_sizes_without_changing_outputs(rows, arrow_source, leaves):
    """The CUDA-graph path's padding and chunking, run on a CPU with graphs off."""
    model = trained_looking("small", "joint", seed=3, arrow_source=arrow_source)
    positions = np.ascontiguousarray(leaves[0][:rows])
    moves, offsets = engine.legal_moves(positions)
    plain = ReloadableNetworkEvaluator(model, "cpu", "fp32")
    bucketed = NetworkEvaluator(prepare_for_inference(model), 7, "cpu",
                                batch_buckets=batch_buckets(8))
    assert bucketed.batch_buckets == (1, 2, 4, 8)
    sizes = [size for _, _, size in bucketed._chunks(rows)]
    assert all(size in bucketed.batch_buckets for size in sizes) and sum(sizes) >= rows
    assert_close(bucketed.evaluate(positions, moves, offsets),
                 plain.evaluate(positions, moves, offsets), 1e-5, 1e-5)


def test_bucket_sizes_and_graph_flags_are_checked():
    assert batch_buckets(1) == (1,) and batch_buckets(256)[-1] == 256 \
        and batch_buckets(300)[-1] == 512
    model = PolicyValueNet(net_config("tiny"))
    with pytest.raises(NetInputError, match="cuda_graphs needs a CUDA device"):
        NetworkEvaluator(model, 7, "cpu", batch_buckets=(1, 2), cuda_graphs=True)
    with pytest.raises(NetInputError, match="increasing"):
        NetworkEvaluator(model, 7, batch_buckets=(4, 2))


def test_load_weights_prepares_the_new_weights(tmp_path, leaves):
    first, second = (trained_looking("tiny", "joint", seed=4),
                     trained_looking("tiny", "joint", seed=5))
    # what the learner publishes: unfolded weights
    path = save_model(tmp_path / "second.pt", second)
    evaluator = load_network_evaluator(save_model(tmp_path / "first.pt", first), "cpu", "fp32")
    assert_close(evaluator.evaluate(*leaves), reference(first, leaves), FP32_TOLERANCE,
                 FP32_TOLERANCE)
    evaluator.load_weights(path)
    got = evaluator.evaluate(*leaves)
    assert_close(got, reference(second, leaves), FP32_TOLERANCE, FP32_TOLERANCE)
    assert np.abs(got[1] - reference(first, leaves)[1]).max() > 0.01  # the old weights are gone
    other = save_model(tmp_path / "small.pt", PolicyValueNet(net_config("small")))
    with pytest.raises(CheckpointError, match="do not fit"):
        evaluator.load_weights(other)


@pytest.mark.parametrize(("backend", "kind"), [
    ("torch", ReloadableNetworkEvaluator),
    ("auto", NativeReloadableEvaluator if native_available() else ReloadableNetworkEvaluator)])
def test_the_server_factory_builds_the_prepared_evaluator(tmp_path, leaves, backend, kind):
    """The torch backend, and on a CPU "auto" takes the compiled evaluator where it is built
    (tests/test_nativenet.py), the torch one where it is not (the extension hidden: below)."""
    model = trained_looking("tiny", "factorized", seed=6)
    factory = NetworkEvaluatorFactory(str(save_model(tmp_path / "m.pt", model)), "cpu", "auto",
                                      backend=backend)
    evaluator = factory()
    assert isinstance(evaluator, kind) and evaluator.precision == "fp32"
    assert_close(evaluator.evaluate(*leaves), reference(model, leaves), FP32_TOLERANCE,
                 FP32_TOLERANCE)


# Where the extension is not built, the builders fall back to torch (a checkpoint) and numpy (an
# exported model), as amazons.neural.native promises: checked in a process that cannot import it.
WITHOUT_THE_EXTENSION = """
import sys
sys.modules["amazons._native"] = None  # `from amazons import _native` raises ImportError
import torch
torch.set_num_threads(1)
from amazons.neural.native import native_available
from amazons.neural.served import (BackendError, ReloadableNetworkEvaluator,
                                       load_network_evaluator)
from amazons.neural.numpy_net import NumpyEvaluator
from amazons.players.factory import PlayerSpecError, model_evaluator
assert not native_available()
evaluator = load_network_evaluator(sys.argv[1], "cpu")
assert type(evaluator) is ReloadableNetworkEvaluator and evaluator.precision == "fp32", evaluator
evaluator = model_evaluator(sys.argv[1], allow_torch=True, device="cpu")[0]
assert type(evaluator) is ReloadableNetworkEvaluator, evaluator
assert type(model_evaluator("default")[0]) is NumpyEvaluator
for build in (lambda: load_network_evaluator(sys.argv[1], "cpu", backend="native"),
              lambda: model_evaluator("default", backend="native")):
    try:
        build()
    except (BackendError, PlayerSpecError) as error:
        assert "amazons._native is not built" in str(error), error
    else:
        raise AssertionError("the native backend was not refused")
print("fell back")
"""


def test_without_the_extension_the_builders_fall_back_to_torch_and_numpy(tmp_path):
    path = save_model(tmp_path / "m.pt", trained_looking("tiny", "joint", seed=9))
    result = subprocess.run([sys.executable, "-c", WITHOUT_THE_EXTENSION, str(path)],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "fell back", result.stderr


def test_an_explicit_bf16_or_fp16_runs_on_torch_and_the_native_backend_refuses_it(tmp_path):
    """The native evaluator computes fp32 only: "auto" with bf16 or fp16 asked for takes torch at
    that precision, never drops it silently; "native" with it is refused by name."""
    path = save_model(tmp_path / "m.pt", trained_looking("tiny", "joint", seed=10))
    for precision in ("bf16", "fp16"):
        evaluator = load_network_evaluator(path, "cpu", precision, backend="auto")
        assert type(evaluator) is ReloadableNetworkEvaluator and evaluator.precision == precision
        refused = f"'native' computes fp32.*{precision}.*write backend 'torch'"
        with pytest.raises(BackendError, match=refused):
            load_network_evaluator(path, "cpu", precision, backend="native")
    for precision in ("auto", "fp32"):
        evaluator = load_network_evaluator(path, "cpu", precision, backend="auto")
        kind = NativeReloadableEvaluator if native_available() else ReloadableNetworkEvaluator
        assert type(evaluator) is kind and evaluator.precision == "fp32"


def test_a_checkpoint_refuses_the_numpy_backend_and_names_what_to_write():
    model = trained_looking("tiny", "joint", seed=11)
    refused = "'numpy' runs exported models .*write backend 'torch' or 'native'"
    with pytest.raises(BackendError, match=refused):
        resolve_backend("numpy", "cpu", model)
    with pytest.raises(BackendError, match="one of auto, torch, native, numpy"):
        resolve_backend("fast", "cpu", model)


def test_resolve_backend_answers_what_the_one_chooser_answers():
    """For a network the native evaluator runs (where the extension is built) and one it cannot
    (a trunk layer it does not know), on a CPU and on CUDA, at every precision: the backend the
    chooser picks for a checkpoint once the device and precision are resolved, or its refusal
    with "inference" before it."""
    runs = trained_looking("tiny", "joint", seed=12)
    cannot = trained_looking("tiny", "joint", seed=12)
    cannot.trunk[0] = nn.Identity()
    for model, reason in ((runs, "" if native_available() else "not built"), (cannot, "unknown")):
        for backend, device, precision in itertools.product(
                BACKENDS, ("cpu", "cuda"), ("auto", "fp32", "bf16", "fp16")):
            try:
                expected = choose_backend(backend, ".pt", reason, device,
                                          resolve_precision(precision, device))
            except BackendError as error:
                with pytest.raises(BackendError, match="^inference ") as refused:
                    resolve_backend(backend, device, model, precision)
                assert str(refused.value).split(":")[0] == f"inference {error}".split(":")[0]
            else:
                assert resolve_backend(backend, device, model, precision) == expected


def flat_weights(model: PolicyValueNet) -> np.ndarray:
    """`model`'s weights as the learner publishes them (`flatten_weights`)."""
    flat = np.empty(weights_elements(model), np.float32)
    flatten_weights(model, torch.from_numpy(flat))
    return flat


def storage(evaluator: NetworkEvaluator) -> list[int]:
    return [tensor.data_ptr() for tensor in evaluator.model.state_dict().values()]


def test_new_weights_go_into_the_same_prepared_model_in_place(tmp_path, leaves):
    first, second = (trained_looking("small", "joint", seed=7),
                     trained_looking("small", "joint", seed=8))
    evaluator = ReloadableNetworkEvaluator(first, "cpu", "fp32")
    prepared, pointers = evaluator.model, storage(evaluator)
    before = evaluator.evaluate(*leaves)
    evaluator.load_flat_weights(flat_weights(second))
    fresh = ReloadableNetworkEvaluator(trained_looking("small", "joint", seed=8), "cpu", "fp32")
    assert_close(evaluator.evaluate(*leaves), fresh.evaluate(*leaves), 1e-6, 1e-6)
    # the old weights are gone
    assert np.abs(evaluator.evaluate(*leaves)[1] - before[1]).max() > 0.01
    # same tensors, new values
    assert evaluator.model is prepared and storage(evaluator) == pointers
    assert evaluator.model.stem.conv.weight.is_contiguous(memory_format=torch.channels_last)
    # The CPU model is `first` itself, now holding the second weights: rebuild the first.
    evaluator.load_weights(save_model(tmp_path / "first.pt",
                                      trained_looking("small", "joint", seed=7)))
    assert_close(evaluator.evaluate(*leaves), before, 1e-6, 1e-6)
    assert evaluator.model is prepared and storage(evaluator) == pointers \
        and evaluator.graph_captures == 0


def test_flat_weights_and_prepared_weights_refuse_another_network():
    small, tiny = PolicyValueNet(net_config("small")), PolicyValueNet(net_config("tiny"))
    with pytest.raises(NetInputError, match=f"\\({weights_elements(small)},\\) floats"):
        unflatten_weights(small, torch.from_numpy(flat_weights(tiny)))
    with pytest.raises(NetInputError, match="out must be"):
        flatten_weights(small, torch.zeros(3))
    with pytest.raises(NetInputError, match="do not fit the prepared model"):
        load_prepared_weights(prepare_for_inference(small), tiny)
    evaluator = ReloadableNetworkEvaluator(small, "cpu", "fp32")
    with pytest.raises(NetInputError, match="floats"):
        evaluator.load_flat_weights(flat_weights(tiny))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("arrow_source", [False, True])
def test_new_weights_replay_through_the_captured_cuda_graphs(leaves, arrow_source):
    first, second = (trained_looking("small", "joint", seed=seed, arrow_source=arrow_source)
                     for seed in (9, 10))
    evaluator = ReloadableNetworkEvaluator(first, "cuda", "fp32", max_batch=32)
    assert evaluator.cuda_graphs
    evaluator.evaluate(*leaves)
    captures = evaluator.graph_captures
    assert captures >= 1
    evaluator.load_flat_weights(flat_weights(second))
    got = evaluator.evaluate(*leaves)
    assert evaluator.graph_captures == captures  # the graphs were replayed, not captured again
    fresh = ReloadableNetworkEvaluator(second, "cuda", "fp32", max_batch=32)
    assert_close(got, fresh.evaluate(*leaves), 1e-5, 1e-5)


@pytest.mark.parametrize("arrow_source", [False, True])
def test_evaluate_stages_its_transfers_without_changing_outputs(leaves, arrow_source):
    """Moves and offsets in one reused staging buffer, segment ids built on the device, priors and
    values back in one buffer: the outputs equal the plain computation (host-built segment ids,
    separate tensors) exactly, and the staging buffers are reused, grown only when too short."""
    model = trained_looking("tiny", "joint", seed=11, arrow_source=arrow_source)
    evaluator = ReloadableNetworkEvaluator(model, "cpu", "fp32")
    prepared = evaluator.model
    for rows in (24, 3, 11):
        positions = np.ascontiguousarray(leaves[0][:rows])
        moves, offsets = engine.legal_moves(positions)
        with torch.inference_mode():
            output = prepared(torch.from_numpy(engine.features(positions, 7)).contiguous(
                memory_format=torch.channels_last), with_ownership=False)
            want = gather_legal_priors(policy_log_tables(output.policy), torch.from_numpy(moves),
                                       torch.from_numpy(segment_ids(offsets)))
        priors, values = evaluator.evaluate(positions, moves, offsets)
        np.testing.assert_array_equal(priors, want.numpy())
        np.testing.assert_array_equal(values, output.value.float().numpy())
        if rows == 24:
            staging = evaluator._move_staging
            assert staging.shape[0] >= 3 * moves.shape[0] + rows + 1
    assert evaluator._move_staging is staging  # smaller batches reuse the buffer


def test_the_server_factory_takes_its_largest_bucket_from_the_inference_config(tmp_path):
    factory = server_evaluator_factory(tmp_path / "m.pt", "cuda", "bf16",
                                       InferenceConfig(inference_batch_size=1024))
    assert factory == NetworkEvaluatorFactory(str(tmp_path / "m.pt"), "cuda", "bf16",
                                              max_batch=1024, backend="auto")
    # a full batch is one forward pass, never chunks
    assert batch_buckets(factory.max_batch)[-1] == 1024
