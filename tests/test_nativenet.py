"""The compiled CPU evaluator (`amazons.neural.native`, the extension `amazons._native`).

The native core's network part is a twin of `npnet` and of the torch model, so it is held to both
on the same positions (200 from seeded random games): value and the prior of every legal move
within 1e-4, for the shipped model and random models of both heads (with and without the joint
head's arrow source term), both plane counts, attention in and after the trunk, and widths that
take the Winograd kernels' 16- and 8-channel blocks or the portable convolution; with the AVX2
kernels and the portable ones; on one thread and several; and after new weights were loaded in
place. Its rules part is held to the engine (perft, move lists, feature planes). The backend
choice (`inference.backend`) and the inference server on it are checked with real processes.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from test_netplay import flat_weights, trained_looking
from test_npnet import random_model

from amazons import engine
from amazons.evaluator import EvaluatorInputError
from amazons.export import TOLERANCE, random_positions, torch_outputs
from amazons.models import default_model_path
from amazons.neural import numpy_net as npnet
from amazons.neural.checkpoint import save_model
from amazons.neural.native import (
    NativeEvaluator,
    NativeUnavailableError,
    native_available,
    native_support,
)
from amazons.neural.served import (
    BackendError,
    NativeReloadableEvaluator,
    ReloadableNetworkEvaluator,
    load_network_evaluator,
    numpy_net,
    resolve_backend,
    server_evaluator_factory,
)
from amazons.players.factory import PlayerSpecError, model_evaluator
from amazons.serving.server import InferenceClient, InferenceConfig, InferenceServer

pytestmark = pytest.mark.skipif(not native_available(),
                                reason="the extension amazons._native is not built")

torch.set_num_threads(1)

KERNELS = ("auto", "portable")

# (head, NetConfig overrides): both heads, the arrow source term, 3 and 7 planes, attention spread
# through the trunk, a width of 24 (Winograd blocks of 16 + 8) and of 20 (the portable convolution).
MODELS = [
    pytest.param("joint", {}, id="joint"),
    pytest.param("factorized", {}, id="factorized"),
    pytest.param("joint", {"arrow_source": True}, id="joint-source"),
    pytest.param("joint", {"num_planes": 3, "attention_placement": "spread"},
                 id="joint-3planes-spread"),
    pytest.param("factorized", {"num_planes": 3, "channels": 20, "head_dim": 12},
                 id="factorized-3planes-c20"),
    pytest.param("joint", {"channels": 24, "head_dim": 8, "arrow_source": True},
                 id="joint-source-c24"),
]


@pytest.fixture(scope="module")
def batch() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """200 canonical positions of seeded random games (0 to 50 plies) and their legal moves."""
    positions = random_positions(200, seed=29, max_plies=50)
    moves, offsets = engine.legal_moves(positions)
    return positions, moves, offsets


def assert_close(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    assert got[0].dtype == np.float32 and got[1].dtype == np.float32
    assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
    assert np.abs(got[0] - want[0]).max() <= TOLERANCE, np.abs(got[0] - want[0]).max()
    assert np.abs(got[1] - want[1]).max() <= TOLERANCE, np.abs(got[1] - want[1]).max()


def assert_meaningful(priors: np.ndarray, values: np.ndarray, offsets: np.ndarray) -> None:
    """The comparison can fail: values spread out, priors far from uniform."""
    assert np.ptp(values) > 0.1 and priors.max() * np.diff(offsets).max() > 3.0


# ------------------------------------------------------------------------------------------------
# Outputs


@pytest.mark.parametrize("kernels", KERNELS)
def test_the_shipped_model_matches_npnet_and_torch(batch, kernels):
    net = npnet.load_model(default_model_path())
    want = npnet.NumpyEvaluator(net).evaluate(*batch)
    evaluator = NativeEvaluator(net, kernels=kernels)
    got = evaluator.evaluate(*batch)
    assert_close(got, want)
    assert_meaningful(*got, batch[2])
    torch_evaluator = load_network_evaluator(default_model_path().with_suffix(".pt"), "cpu", "fp32",
                                             backend="torch")
    assert isinstance(torch_evaluator, ReloadableNetworkEvaluator)
    assert_close(got, torch_evaluator.evaluate(*batch))


@pytest.mark.parametrize(("head", "overrides"), MODELS)
def test_random_models_match_npnet_and_torch_with_either_kernels(batch, head, overrides):
    model = random_model("tiny", head, seed=3, **overrides)  # seed 3: values spread for every model
    net = numpy_net(model)
    positions, moves, offsets = batch
    want_npnet = npnet.NumpyEvaluator(net).evaluate(*batch)
    want_torch = torch_outputs(model, positions)
    for kernels in KERNELS:
        got = NativeEvaluator(net, kernels=kernels).evaluate(*batch)
        assert_close(got, want_npnet)
        assert_close(got, want_torch)
    assert_meaningful(*want_npnet, offsets)


def test_threads_split_the_batch_without_changing_it(batch):
    net = npnet.load_model(default_model_path())
    one = NativeEvaluator(net).evaluate(*batch)
    for threads in (2, 3, 7):
        got = NativeEvaluator(net, threads=threads).evaluate(*batch)
        np.testing.assert_array_equal(got[0], one[0])
        np.testing.assert_array_equal(got[1], one[1])


@pytest.mark.parametrize("kernels", KERNELS)
def test_new_weights_load_in_place(batch, kernels):
    first, second = (trained_looking("tiny", "joint", seed=seed, arrow_source=True)
                     for seed in (12, 13))
    evaluator = NativeEvaluator(numpy_net(first), kernels=kernels)
    before = evaluator.evaluate(*batch)
    evaluator.load_net(numpy_net(second))
    got = evaluator.evaluate(*batch)
    assert_close(got, NativeEvaluator(numpy_net(second), kernels=kernels).evaluate(*batch))
    assert_close(got, npnet.NumpyEvaluator(numpy_net(second)).evaluate(*batch))
    assert np.abs(got[1] - before[1]).max() > 0.01  # the old weights are gone
    with pytest.raises(NativeUnavailableError, match="shape loaded first"):
        evaluator.load_net(numpy_net(trained_looking("tiny", "factorized", seed=1)))


def test_the_production_evaluator_takes_flat_weights_and_checkpoints_in_place(tmp_path, batch):
    """The server's weight updates: the learner's flat weights (shared memory) and checkpoint
    files, folded on the CPU and written into the native network's buffer."""
    first, second = (trained_looking("small", "joint", seed=7),
                     trained_looking("small", "joint", seed=8))
    evaluator = NativeReloadableEvaluator(first)
    before = evaluator.evaluate(*batch)
    evaluator.load_flat_weights(flat_weights(second))
    assert_close(evaluator.evaluate(*batch),
                 torch_outputs(trained_looking("small", "joint", seed=8), batch[0]))
    evaluator.load_weights(save_model(tmp_path / "first.pt",
                                      trained_looking("small", "joint", seed=7)))
    assert_close(evaluator.evaluate(*batch), before)


def test_bad_input_is_refused(batch):
    evaluator = NativeEvaluator(npnet.load_model(default_model_path()))
    positions, moves, offsets = batch
    with pytest.raises(EvaluatorInputError, match="positions must be"):
        evaluator.evaluate(positions.astype(np.int64), moves, offsets)
    with pytest.raises(EvaluatorInputError, match="move_offsets must rise"):
        evaluator.evaluate(positions, moves, offsets[::-1].copy())
    with pytest.raises(EvaluatorInputError, match="squares 0..63"):
        evaluator.evaluate(positions, moves + 64, offsets)
    with pytest.raises(ValueError, match="threads"):
        NativeEvaluator(npnet.load_model(default_model_path()), threads=0)
    empty = evaluator.evaluate(positions[:0], moves[:0], offsets[:1])
    assert empty[0].shape == (0,) and empty[1].shape == (0,)


# ------------------------------------------------------------------------------------------------
# The rules part against the engine


def test_the_rules_part_matches_the_engine(batch):
    from amazons import _native

    start = engine.start_position()
    for depth, expected in ((1, 1232), (2, 1_331_198)):
        assert _native.perft_position(*(int(v) for v in start), depth) == expected
    positions, moves, offsets = batch
    planes = {count: engine.features(positions, count) for count in (3, 7)}
    for index in range(positions.shape[0]):
        mine, theirs, arrows = (int(v) for v in positions[index])
        np.testing.assert_array_equal(_native.legal_move_array(mine, theirs, arrows),
                                      moves[offsets[index]:offsets[index + 1]])
        for count in (3, 7):
            np.testing.assert_array_equal(_native.feature_planes(mine, theirs, arrows, count),
                                          planes[count][index])


# ------------------------------------------------------------------------------------------------
# The backend choice and the server


def test_the_backend_resolves_to_native_on_a_cpu_and_refuses_it_on_a_gpu():
    model = trained_looking("tiny", "joint", seed=1)
    assert resolve_backend("auto", "cpu", model) == "native"
    assert resolve_backend("torch", "cpu", model) == "torch"
    assert resolve_backend("native", "cpu", model) == "native"
    assert resolve_backend("auto", "cuda", model) == "torch"
    with pytest.raises(BackendError, match="runs on the CPU"):
        resolve_backend("native", "cuda", model)
    with pytest.raises(BackendError, match="one of"):
        resolve_backend("fast", "cpu", model)
    with pytest.raises(ValueError, match="backend"):
        InferenceConfig(backend="fast")
    assert native_support({"num_planes": 5, "channels": 8, "attention_dim": 4, "head_dim": 4,
                           "value_channels": 1, "value_hidden": 4, "policy_head": "joint"},
                          ["residual"]) != ""


def test_the_model_builders_pick_the_native_evaluator_on_a_cpu(tmp_path):
    path = save_model(tmp_path / "m.pt", trained_looking("tiny", "joint", seed=2))
    assert isinstance(load_network_evaluator(path, "cpu"), NativeReloadableEvaluator)
    assert isinstance(model_evaluator(str(path), allow_torch=True, device="cpu")[0],
                      NativeReloadableEvaluator)
    assert isinstance(model_evaluator("default")[0], NativeEvaluator)
    assert isinstance(model_evaluator("default", backend="numpy")[0], npnet.NumpyEvaluator)
    with pytest.raises(PlayerSpecError, match="backend"):
        model_evaluator("default", backend="fast")


def test_the_inference_server_runs_the_native_backend_and_takes_published_weights(tmp_path, batch):
    first, second = (trained_looking("tiny", "joint", seed=3),
                     trained_looking("tiny", "joint", seed=4))
    path = save_model(tmp_path / "first.pt", first)
    config = InferenceConfig(inference_batch_size=64, backend="native")
    positions, moves, offsets = batch
    rows = 40
    with InferenceServer(server_evaluator_factory(path, "cpu", "auto", config), num_clients=1,
                         config=config) as server:
        client = InferenceClient(server.handle(0))
        block = slice(0, int(offsets[rows]))
        got = client.evaluate(positions[:rows], moves[block], offsets[:rows + 1])
        assert_close(got, torch_outputs(first, positions[:rows]))
        flat = flat_weights(second)
        server.publish_shared_weights(flat.shape[0],
                                      lambda out: out.__setitem__(slice(None), flat), version=1)
        deadline = time.monotonic() + 60
        while not server.shared_weights_ready() and time.monotonic() < deadline:
            server.check()
            time.sleep(0.01)
        assert server.loaded_version == 1
        got = client.evaluate(positions[:rows], moves[block], offsets[:rows + 1])
        assert client.weights_version == 1
        assert_close(got, torch_outputs(second, positions[:rows]))
        client.close()
        server.stop()
