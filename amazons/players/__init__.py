"""The players layer: everything that picks a move in a game, and the games' records.

`player` (the `Player` protocol; random, greedy, search, policy and human players), `classical`
(the Amazong-style alpha-beta player, no network), `factory`
(the one builder of model-backed players and the player registry, `make_player`), `openspiel`
(OpenSpiel's C++ MCTS as a player), `program`, `watchdog` and `keep_running` (any Botzone program
as a player, the watchdog that ends it, driving one in keep-running mode), `botzone_limits`
(Botzone's limits, one definition for the Python bot, the C++ export and the program player) and
`records` (the one game record format).

`player`'s public names are re-exported on first use (`from amazons.players import MCTSPlayer`):
importing the package imports nothing, so reading records never loads the search.
"""

from __future__ import annotations

import importlib
from typing import Any

_PLAYER_NAMES = frozenset({
    "BasePlayer", "FAULT_REASONS", "GreedyPlayer", "HumanPlayer", "MCTSPlayer", "Player",
    "PlayerError", "PlayerFault", "PolicyPlayer", "RandomPlayer", "SearchReport",
    "describe_territory", "predicted_territory"})


def __getattr__(name: str) -> Any:
    if name in _PLAYER_NAMES:
        return getattr(importlib.import_module("amazons.players.player"), name)
    raise AttributeError(f"module 'amazons.players' has no attribute {name!r}")
