"""Network-backed evaluators and players.

* `NetworkEvaluatorFactory`: the picklable recipe the inference server runs in its own process to
  build its evaluator from a model file, with `load_weights(path)` for weights the learner
  publishes later.
* `cpu_network_evaluator`: a checkpoint as an in-process CPU evaluator, for the arena's network
  players (the bot and terminal play run exported models in numpy: `amazons.arena.model_search`).
* Arena players `mcts-net:PATH` (MCTS with the network's priors and values) and `policy-net:PATH`
  (the raw policy: the legal move with the highest prior, no search), registered with
  `amazons.arena` by `register_network_players()`; the arena calls it itself when it meets one
  of these names, so torch is imported only when a network player is asked for.

Imports torch (through `amazons.net` and `amazons.checkpoint`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from amazons import engine
from amazons.arena import NET_CONFIG, PlayerOptions, PlayerSpecError, register_player
from amazons.board import Board, Move
from amazons.checkpoint import load_checkpoint, load_model_for_play
from amazons.net import NetworkEvaluator
from amazons.players import BasePlayer, MCTSPlayer, Player

NET_SEARCH = NET_CONFIG  # evaluation and play: no noise, argmax after the search
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(device: str) -> str:
    """"auto" -> "cuda" when a GPU is available, else "cpu"; anything else is returned as is."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_inference_dtype(dtype: str, device: str) -> torch.dtype:
    """"auto" -> bf16 on a GPU that supports it (fp16 on older ones), fp32 on the CPU."""
    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"inference dtype must be one of {sorted(DTYPES)} or 'auto', got {dtype!r}")
    return DTYPES[dtype]


class ReloadableNetworkEvaluator(NetworkEvaluator):
    """A `NetworkEvaluator` whose weights can be replaced from a checkpoint file."""

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load the model weights of a learner or model checkpoint (same architecture).

        Raises:
            amazons.checkpoint.CheckpointError: unreadable file or weights that do not fit.
        """
        payload = load_checkpoint(path)
        self.model.load_state_dict(payload["model"])
        self.model.eval()


@dataclass(frozen=True)
class NetworkEvaluatorFactory:
    """Builds the server's evaluator in the server process (picklable: paths and names only).

    Attributes:
        model_path: a learner or model checkpoint.
        device: "auto", "cpu", "cuda", "cuda:1", ...
        dtype: "auto", "fp32", "bf16" or "fp16".
    """

    model_path: str
    device: str = "auto"
    dtype: str = "auto"

    def __call__(self) -> ReloadableNetworkEvaluator:
        device = resolve_device(self.device)
        model = load_model_for_play(self.model_path, device)
        return ReloadableNetworkEvaluator(
            model, model.config.num_planes, device, resolve_inference_dtype(self.dtype, device)
        )


def cpu_network_evaluator(path: str | os.PathLike) -> NetworkEvaluator:
    """The network of a learner or model checkpoint as an fp32 evaluator on the CPU, in this process.

    Raises:
        amazons.checkpoint.CheckpointError: the file is missing or not a usable checkpoint.
    """
    model = load_model_for_play(path, "cpu")
    return NetworkEvaluator(model, model.config.num_planes, "cpu", torch.float32)


def _evaluator_for(path: str | None, name: str) -> NetworkEvaluator:
    if not path:
        raise PlayerSpecError(f"{name} needs a model path, e.g. {name}:runs/cpu/models/latest.pt")
    torch.set_num_threads(1)
    return cpu_network_evaluator(path)


class PolicyPlayer(BasePlayer):
    """Plays the legal move the network's policy ranks highest (no search)."""

    def __init__(self, evaluator: NetworkEvaluator, name: str = "policy-net") -> None:
        self.name = name
        self.evaluator = evaluator

    def choose_move(self, board: Board) -> Move:
        position = board.canonical_position()[None]
        moves, offsets = engine.legal_moves(position)
        if moves.shape[0] == 0:
            raise PlayerSpecError("no legal move: the game is over")
        priors, _ = self.evaluator.evaluate(position, moves, offsets)
        best = board.canonical_to_real(moves[int(np.argmax(priors))])
        return Move(*best.tolist())


def _make_mcts_net(argument: str | None, options: PlayerOptions) -> Player:
    evaluator = _evaluator_for(argument, "mcts-net")
    return MCTSPlayer(evaluator, options.search_config(NET_SEARCH), simulations=options.simulations,
                      time_budget=options.time_budget, seed=options.seed, name=f"mcts-net:{argument}")


def _make_policy_net(argument: str | None, options: PlayerOptions) -> Player:
    return PolicyPlayer(_evaluator_for(argument, "policy-net"), name=f"policy-net:{argument}")


def register_network_players() -> None:
    """Register `mcts-net:PATH` and `policy-net:PATH` with the arena (idempotent)."""
    register_player("mcts-net", _make_mcts_net, replace=True)
    register_player("policy-net", _make_policy_net, replace=True)
