"""`amazons.players.factory`: one builder for every model-backed player, and the spec registry."""

from __future__ import annotations

import pytest

from amazons.board import Board
from amazons.core.backends import BackendError, choose_backend
from amazons.matches.evaluation import EvalConfig
from amazons.mcts import RolloutEvaluator, UniformEvaluator
from amazons.models import default_checkpoint_path, default_model_path
from amazons.neural.native import NativeEvaluator, native_available, native_support
from amazons.neural.numpy_net import ModelFileError, NumpyEvaluator, load_model
from amazons.players.factory import (
    NET_SEARCH,
    ROLLOUT_SEARCH,
    PlayerSpecError,
    build_model_player,
    make_player,
    numpy_model_evaluator,
    served_evaluator_factory,
)
from amazons.players.player import PolicyPlayer


def test_each_model_spec_gives_its_evaluator_and_search():
    rollout = build_model_player("none", simulations=8, seed=0)
    assert (isinstance(rollout.search.evaluator, RolloutEvaluator)
            and rollout.config == ROLLOUT_SEARCH)
    assert rollout.name == "mcts-rollout"
    for model in ("default", str(default_model_path())):
        player = build_model_player(model, simulations=8, seed=0)
        # The compiled evaluator where it is built; numpy (the reference) where asked or not built.
        expected = NativeEvaluator if native_available() else NumpyEvaluator
        assert isinstance(player.search.evaluator, expected) and player.config == NET_SEARCH
        assert Board().is_legal(player.choose_move(Board()))
        numpy_player = build_model_player(model, simulations=8, seed=0, backend="numpy")
        assert isinstance(numpy_player.search.evaluator, NumpyEvaluator)
    with pytest.raises(ModelFileError, match="python -m amazons.export"):
        build_model_player(str(default_checkpoint_path()))  # the bot and terminal play: no torch
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_model_player("/no/such/model.npz")


def test_network_players_play_the_lower_confidence_bound_and_the_ladder_the_most_visits():
    # The arena's mcts-net, the Botzone bot, terminal play and the web board build their network
    # players from NET_SEARCH (LCB won at 1 s a move); the training's evaluation keeps the visits.
    assert NET_SEARCH.lcb and NET_SEARCH.root == "puct" and not NET_SEARCH.root_noise
    assert make_player("mcts-net:default", simulations=8).config.lcb
    assert build_model_player("default", simulations=8).config.lcb
    assert not make_player("mcts-net:default", simulations=8, search=[("lcb", "false")]).config.lcb
    assert EvalConfig().search == NET_SEARCH.replace(lcb=False)


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_a_checkpoint_runs_prepared_where_torch_is_allowed(backend):
    from amazons.neural.served import NativeReloadableEvaluator, ReloadableNetworkEvaluator

    player = build_model_player(str(default_checkpoint_path()), simulations=8, seed=0,
                                allow_torch=True, device="cpu", torch_threads=1, backend=backend)
    expected = (NativeReloadableEvaluator if backend == "auto" and native_available()
                else ReloadableNetworkEvaluator)
    assert isinstance(player.search.evaluator, expected)
    assert (player.search.evaluator.precision == "fp32"
            and Board().is_legal(player.choose_move(Board())))


def test_a_backend_that_cannot_run_the_model_file_is_refused_with_the_names_to_write():
    """"torch" runs torch checkpoints only (it ran an exported model in numpy before: "numpy"
    does now), "numpy" exported models only; refused before anything loads, also for a server."""
    checkpoint = str(default_checkpoint_path())
    for build in (lambda: build_model_player("default", backend="torch"),
                  lambda: served_evaluator_factory("default", backend="torch")):
        with pytest.raises(PlayerSpecError, match="backend 'native' or 'numpy'.*is 'numpy' now"):
            build()
    refused = "'numpy' runs exported models .*write backend 'torch' or 'native'"
    for build in (lambda: build_model_player(checkpoint, allow_torch=True, backend="numpy"),
                  lambda: served_evaluator_factory(checkpoint, backend="numpy")):
        with pytest.raises(PlayerSpecError, match=refused):
            build()
    with pytest.raises(PlayerSpecError, match="one of auto, torch, native, numpy, got 'fast'"):
        build_model_player("default", backend="fast")
    assert isinstance(served_evaluator_factory("default", backend="numpy")(), NumpyEvaluator)


@pytest.mark.parametrize("backend", ["auto", "native", "numpy", "torch", "fast"])
def test_an_exported_model_runs_on_what_the_one_chooser_picks(backend):
    """`numpy_model_evaluator` builds the evaluator the chooser names for an exported model, or
    refuses with its words as a PlayerSpecError."""
    net = load_model(default_model_path())
    try:
        chosen = choose_backend(backend, ".npz", native_support(net.config, net.trunk_layers))
    except BackendError as error:
        with pytest.raises(PlayerSpecError) as refused:
            numpy_model_evaluator(net, backend)
        assert str(refused.value) == str(error)
    else:
        expected = {"native": NativeEvaluator, "numpy": NumpyEvaluator}[chosen]
        assert type(numpy_model_evaluator(net, backend)) is expected


def test_the_builders_arguments_reach_the_player():
    evaluator = UniformEvaluator()
    player = build_model_player("default", evaluator=evaluator,
                                search=NET_SEARCH.replace(c_puct=3.0), time_budget=0.5,
                                tree_memory_mb=8, name="bot", stop_when_full=True)
    assert player.search.evaluator is evaluator and player.config.c_puct == 3.0
    assert player.time_budget == 0.5 and player.name == "bot" and player.stop_when_full
    assert player.config.edge_capacity == player.config.edge_capacity_max  # allocated once at 8 MiB


def test_network_specs_use_a_given_evaluator_and_need_a_model():
    evaluator = UniformEvaluator()
    player = make_player("mcts-net:some/model.pt", simulations=8, evaluator=evaluator,
                         base_search=NET_SEARCH.replace(leaves_per_game=2),
                         search=[("c_puct", "2.5")])
    assert player.search.evaluator is evaluator and player.name == "mcts-net:some/model.pt"
    assert (player.config.leaves_per_game, player.config.c_puct) == (2, 2.5)
    assert isinstance(make_player("policy-net:x.pt", evaluator=evaluator), PolicyPlayer)
    for spec in ("mcts-net", "mcts-net:none", "policy-net"):
        with pytest.raises(PlayerSpecError, match="needs a model"):
            make_player(spec)
    with pytest.raises(PlayerSpecError, match="not a network"):
        served_evaluator_factory("none")
    assert served_evaluator_factory("default")().evaluate  # the numpy network, built in a server
