"""Matches between two players: `python -m amazons.arena A B --games N`.

Players are named by specs: `random`, `greedy`, `mcts-uniform`, `mcts-rollout`, `human`, and
whatever other modules add with `register_player` (a spec may carry an argument after a colon,
e.g. `mcts-net:PATH`). `make_player(spec, ...)` builds one. Network players (`mcts-net`,
`policy-net`) live in `amazons.netplay`, which imports torch: the arena imports it only when one
of those names is asked for, so this module itself stays torch-free.

A match plays games in pairs: both games of a pair start from the same seeded short random
opening, with colours swapped, so deterministic players do not replay one game and neither side
profits from a lucky opening. Games run in parallel worker processes (spawn or forkserver;
bounded; one process when that fails). The result gives wins, the win rate of A and the Elo
difference A - B with a 95% interval (Wilson score interval on the win rate, mapped to Elo),
and every game as an `amazons.records.GameRecord` (`--record FILE` writes them).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import multiprocessing
import os
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from amazons.board import BLACK, Board, Move
from amazons.mcts import Evaluator, RolloutEvaluator, SearchConfig, UniformEvaluator
from amazons.models import default_model_path
from amazons.npnet import ModelFileError, NumpyEvaluator
from amazons.players import GreedyPlayer, HumanPlayer, MCTSPlayer, Player, RandomPlayer
from amazons.records import GameRecord, write_records

__all__ = [
    "ArenaResult",
    "PlayerOptions",
    "PlayerSpecError",
    "elo_from_score",
    "elo_interval",
    "make_player",
    "model_search",
    "play_game",
    "player_names",
    "random_opening",
    "register_player",
    "run_arena",
]

Z_95 = 1.959963984540054  # two-sided 95% quantile of the standard normal


class PlayerSpecError(ValueError):
    """A player spec names no registered player, or its argument is wrong."""


@dataclass(frozen=True)
class PlayerOptions:
    """What every player factory receives besides the spec's argument."""

    seed: int = 0  # seeds the player's random choices
    simulations: int | None = None  # MCTS simulations per move (None: the player's default)
    time_budget: float | None = None  # MCTS seconds per move instead of a simulation count
    search: tuple[tuple[str, str], ...] = ()  # SearchConfig overrides (field, value text) for MCTS players

    def search_config(self, base: SearchConfig) -> SearchConfig:
        """`base` with the `search` overrides applied (values parsed by the field's type).

        Raises:
            PlayerSpecError: an unknown field or a value of the wrong type.
        """
        return apply_search_overrides(base, self.search)


def apply_search_overrides(base: SearchConfig, overrides: Sequence[tuple[str, str]]) -> SearchConfig:
    """`base` with `(field, value text)` overrides, e.g. `[("solver", "false")]`.

    Raises:
        PlayerSpecError: an unknown field, or a value that is not of the field's type or that
            `SearchConfig` refuses.
    """
    changes: dict[str, Any] = {}
    for name, text in overrides:
        if not hasattr(base, name) or name.startswith("_"):
            raise PlayerSpecError(f"SearchConfig has no field {name!r}")
        current = getattr(base, name)
        try:
            if isinstance(current, bool):
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(text)
                changes[name] = text.lower() in ("true", "1")
            else:
                changes[name] = type(current)(text)
        except ValueError:
            raise PlayerSpecError(f"search override {name}={text!r}: expected a {type(current).__name__}") from None
    try:
        return base.replace(**changes)
    except ValueError as error:
        raise PlayerSpecError(f"search overrides: {error}") from None


PlayerFactory = Callable[[str | None, PlayerOptions], Player]
_REGISTRY: dict[str, PlayerFactory] = {}

# Defaults of the built-in MCTS players. Uniform priors carry no information, so the search must
# not be kept from trying new moves (no first-play-urgency reduction), and without noise it would
# try unvisited moves in the engine's move order (the first amazon's moves first): root noise
# breaks that order. Playouts are noisy, so a larger exploration constant helps. With these,
# mcts-rollout at 200 simulations won 160 of 160 seeded games against random (4 seeds x 40).
DEFAULT_SIMULATIONS = 200
UNIFORM_CONFIG = SearchConfig(simulations=DEFAULT_SIMULATIONS, fpu_reduction=0.0)
ROLLOUT_CONFIG = SearchConfig(simulations=DEFAULT_SIMULATIONS, fpu_reduction=0.0, c_puct=2.0,
                              root_noise=True)
# A network's priors carry information: the search's defaults, no noise (evaluation and play).
NET_CONFIG = SearchConfig(simulations=DEFAULT_SIMULATIONS)


def model_search(model: str, seed: int | None = None) -> tuple[Evaluator, SearchConfig]:
    """The evaluator and search settings a `--model` option names (the bot and terminal play).

    `"none"`: random playouts with the `mcts-rollout` settings (`ROLLOUT_CONFIG`). `"default"`
    (the exported model shipped in `amazons/models`) or the path of an exported `.npz` model
    (`python -m amazons.export CKPT OUT.npz`): the network in numpy (`amazons.npnet`) with
    `NET_CONFIG`. Neither imports torch; a torch checkpoint is refused with the command that
    exports it.

    Raises:
        FileNotFoundError: the model file (or the shipped default) does not exist.
        amazons.npnet.ModelFileError: the file is a torch checkpoint or not a usable model file.
    """
    if model == "none":
        return RolloutEvaluator(seed=seed), ROLLOUT_CONFIG
    path = default_model_path() if model == "default" else Path(model)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist (use an exported .npz model, 'default' or 'none')")
    if path.suffix == ".pt":
        raise ModelFileError(
            f"{path} is a torch checkpoint; export it first (the bot and terminal play run without "
            f"torch): python -m amazons.export {path} {path.with_suffix('.npz')}")
    return NumpyEvaluator.from_file(path), NET_CONFIG


def register_player(name: str, factory: PlayerFactory, *, replace: bool = False) -> None:
    """Make `make_player(name)` / `make_player(name:ARG)` call `factory(ARG or None, options)`.

    Factories should be module-level functions so that worker processes can receive them.

    Raises:
        PlayerSpecError: if `name` is already registered (and not `replace`) or is malformed.
    """
    if not name or ":" in name or name != name.strip():
        raise PlayerSpecError(f"bad player name {name!r}")
    if name in _REGISTRY and not replace:
        raise PlayerSpecError(f"player {name!r} is already registered")
    _REGISTRY[name] = factory


def player_names() -> list[str]:
    """Registered player names, with the ones registered on first use (`_PLUGIN_MODULES`)."""
    return sorted(set(_REGISTRY) | set(_PLUGIN_MODULES))


# Players whose factories live in modules with heavy imports (torch, pyspiel): imported only when
# such a player is asked for, so the arena itself never imports them.
_PLUGIN_MODULES = {
    "mcts-net": ("amazons.netplay", "register_network_players"),
    "policy-net": ("amazons.netplay", "register_network_players"),
    "openspiel-mcts": ("amazons.openspiel_player", "register_openspiel_players"),
}


def _split_spec(spec: str) -> tuple[str, str | None]:
    name, _, argument = spec.strip().partition(":")
    if name not in _REGISTRY and name in _PLUGIN_MODULES:
        module, register = _PLUGIN_MODULES[name]
        getattr(importlib.import_module(module), register)()
    if name not in _REGISTRY:
        raise PlayerSpecError(f"unknown player {spec!r}; known: {', '.join(player_names())}")
    return name, (argument or None)


def make_player(spec: str, seed: int = 0, simulations: int | None = None,
                time_budget: float | None = None, search: Sequence[tuple[str, str]] = ()) -> Player:
    """Build the player named by `spec` (`NAME` or `NAME:ARGUMENT`).

    Args:
        spec: the player's name and argument.
        seed, simulations, time_budget: see `PlayerOptions`.
        search: `SearchConfig` overrides for MCTS players, e.g. `[("solver", "false")]`.

    Raises:
        PlayerSpecError: for an unknown name, an argument the player does not take, or a bad
            search override.
    """
    name, argument = _split_spec(spec)
    return _REGISTRY[name](argument, PlayerOptions(seed, simulations, time_budget, tuple(search)))


def _no_argument(name: str, argument: str | None) -> None:
    if argument is not None:
        raise PlayerSpecError(f"player {name!r} takes no argument, got {argument!r}")


def _make_random(argument: str | None, options: PlayerOptions) -> Player:
    _no_argument("random", argument)
    return RandomPlayer(seed=options.seed)


def _make_greedy(argument: str | None, options: PlayerOptions) -> Player:
    _no_argument("greedy", argument)
    return GreedyPlayer(seed=options.seed)


def _make_mcts_uniform(argument: str | None, options: PlayerOptions) -> Player:
    _no_argument("mcts-uniform", argument)
    return MCTSPlayer(UniformEvaluator(), options.search_config(UNIFORM_CONFIG), simulations=options.simulations,
                      time_budget=options.time_budget, seed=options.seed, name="mcts-uniform")


def _make_mcts_rollout(argument: str | None, options: PlayerOptions) -> Player:
    """`mcts-rollout` or `mcts-rollout:N` (N playouts averaged per leaf)."""
    rollouts = 1
    if argument is not None:
        try:
            rollouts = int(argument)
        except ValueError:
            raise PlayerSpecError(f"mcts-rollout:N needs an integer N, got {argument!r}") from None
    return MCTSPlayer(RolloutEvaluator(rollouts_per_leaf=rollouts, seed=options.seed),
                      options.search_config(ROLLOUT_CONFIG), simulations=options.simulations,
                      time_budget=options.time_budget, seed=options.seed, name="mcts-rollout")


def _make_human(argument: str | None, options: PlayerOptions) -> Player:
    _no_argument("human", argument)
    return HumanPlayer()


register_player("random", _make_random)
register_player("greedy", _make_greedy)
register_player("mcts-uniform", _make_mcts_uniform)
register_player("mcts-rollout", _make_mcts_rollout)
register_player("human", _make_human)


# ----------------------------------------------------------------------------------------------
# Games


def random_opening(plies: int, seed: int) -> list[Move]:
    """`plies` uniformly random legal moves from the start (fewer if the game would end)."""
    rng = np.random.default_rng(seed)
    board = Board()
    opening = []
    for _ in range(plies):
        moves = board.legal_move_array()
        if moves.shape[0] == 0:
            break
        move = Move(*moves[int(rng.integers(moves.shape[0]))].tolist())
        # Stop before a move that leaves the opponent without a reply: the game would be over.
        board.push(move)
        if board.is_game_over():
            board.pop()
            break
        opening.append(move)
    return opening


def play_game(black: Player, white: Player, opening: Sequence[Move] = ()) -> tuple[int, list[Move]]:
    """Play one game from the start after `opening`; returns (winner, all moves).

    Both players are reset first and observe every move (opening included), so players that keep
    state across turns follow the game.

    Raises:
        IllegalMoveError: if a player returns an illegal move (names the move).
    """
    players = (black, white)
    for player in players:
        player.reset()
    board = Board()
    played: list[Move] = []
    for index in range(len(opening) + 64):
        if board.is_game_over():
            return board.winner(), played
        move = opening[index] if index < len(opening) else players[board.turn].choose_move(board.copy())
        for player in players:
            player.observe(board, move)
        board.push(move)
        played.append(move)
    raise RuntimeError("a game lasted more than 64 plies")  # impossible on 8x8: at most 56


@dataclass(frozen=True)
class _GameTask:
    index: int
    spec_a: str
    spec_b: str
    a_is_black: bool
    opening: tuple[Move, ...]
    seed: int
    simulations: int | None
    time_budget: float | None
    search_a: tuple[tuple[str, str], ...] = ()
    search_b: tuple[tuple[str, str], ...] = ()


def _play_task(task: _GameTask) -> GameRecord:
    """One game of the match as a record: Round is the game number (from 1), Opening the plies
    of the random opening (part of the moves)."""
    player_a = make_player(task.spec_a, task.seed * 2, task.simulations, task.time_budget, task.search_a)
    player_b = make_player(task.spec_b, task.seed * 2 + 1, task.simulations, task.time_budget, task.search_b)
    black, white = (player_a, player_b) if task.a_is_black else (player_b, player_a)
    _, moves = play_game(black, white, task.opening)
    return GameRecord.from_game(
        moves,
        black=task.spec_a if task.a_is_black else task.spec_b,
        white=task.spec_b if task.a_is_black else task.spec_a,
        event="arena",
        Round=str(task.index + 1),
        Opening=str(len(task.opening)),
    )


def _init_worker(factories: dict[str, PlayerFactory]) -> None:
    for name, factory in factories.items():
        register_player(name, factory, replace=True)


# ----------------------------------------------------------------------------------------------
# Statistics


def elo_from_score(score: float) -> float:
    """Elo difference whose expected score is `score` in [0, 1] (+-inf at the ends)."""
    if score <= 0.0:
        return -math.inf
    if score >= 1.0:
        return math.inf
    return -400.0 * math.log10(1.0 / score - 1.0)


def elo_interval(wins: float, games: int, z: float = Z_95) -> tuple[float, float, float]:
    """Elo difference and its confidence interval from `wins` (draws count 1/2) out of `games`.

    Uses the Wilson score interval for the score, mapped through `elo_from_score`; it stays
    finite on one side even when one player won every game.

    Returns:
        (elo, low, high); elo is +-inf when one side won everything.

    Raises:
        ValueError: if games < 1 or wins is outside 0..games.
    """
    if games < 1 or not 0 <= wins <= games:
        raise ValueError(f"need 0 <= wins <= games and games >= 1, got wins={wins} games={games}")
    score = wins / games
    denominator = 1.0 + z * z / games
    centre = (score + z * z / (2 * games)) / denominator
    half = z * math.sqrt(score * (1.0 - score) / games + z * z / (4 * games * games)) / denominator
    # At wins == 0 (games) the exact bound is 0 (1); rounding must not turn it into a finite Elo.
    low = -math.inf if wins == 0 else elo_from_score(centre - half)
    high = math.inf if wins == games else elo_from_score(centre + half)
    return elo_from_score(score), low, high


@dataclass(frozen=True)
class ArenaResult:
    """Outcome of a match of A against B."""

    player_a: str
    player_b: str
    games: int
    wins_a: int
    wins_b: int
    wins_a_as_black: int
    wins_a_as_white: int
    win_rate: float  # of A
    elo: float  # Elo of A minus Elo of B
    elo_low: float  # 95% interval
    elo_high: float
    seconds: float
    records: list[GameRecord] = field(default_factory=list)  # game i; A has Black in even games

    def summary(self) -> str:
        """Two lines for the terminal."""
        return (
            f"{self.player_a} vs {self.player_b}: {self.games} games, {self.player_a} won "
            f"{self.wins_a} ({self.wins_a_as_black} as black, {self.wins_a_as_white} as white), "
            f"{self.player_b} won {self.wins_b}  [{self.seconds:.1f} s]\n"
            f"win rate of {self.player_a}: {self.win_rate:.3f}; Elo difference "
            f"{self.elo:+.0f} (95% interval {self.elo_low:+.0f} .. {self.elo_high:+.0f})"
        )

    def to_json(self) -> dict[str, Any]:
        """The result as JSON-ready values; each game as its headers and Botzone moves."""
        fields = {key: value for key, value in asdict(self).items() if key != "records"}
        fields["records"] = [
            {"headers": dict(record.headers), "moves": [move.to_botzone() for move in record.moves]}
            for record in self.records
        ]
        return fields


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def run_arena(spec_a: str, spec_b: str, games: int, simulations: int | None = None,
              processes: int | None = None, seed: int = 0, opening_plies: int = 4,
              time_budget: float | None = None, search_a: Sequence[tuple[str, str]] = (),
              search_b: Sequence[tuple[str, str]] = ()) -> ArenaResult:
    """Play `games` games of A against B, colours alternating (A has Black in even games).

    Args:
        spec_a, spec_b: player specs (see `make_player`).
        games: number of games (pairs share an opening).
        simulations: MCTS simulations per move for MCTS players (None: their default).
        processes: worker processes (default: CPU count, at most `games`); 1 runs in-process.
        seed: seeds openings and players; the same seed replays the same match.
        opening_plies: random plies before the players take over.
        time_budget: seconds per move for MCTS players instead of simulations.
        search_a, search_b: `SearchConfig` overrides for A's and B's MCTS search, e.g.
            `[("solver", "false"), ("adjudicate", "false")]`.

    Raises:
        PlayerSpecError: for an unknown player or a bad search override (checked before any
            game starts).
        ValueError: for games < 1 or opening_plies < 0.
    """
    if games < 1:
        raise ValueError(f"games must be >= 1, got {games}")
    if opening_plies < 0:
        raise ValueError(f"opening_plies must be >= 0, got {opening_plies}")
    names = {_split_spec(spec_a)[0], _split_spec(spec_b)[0]}
    search_a, search_b = tuple(search_a), tuple(search_b)
    for overrides in (search_a, search_b):
        apply_search_overrides(SearchConfig(), overrides)
    if "human" in names:
        processes = 1
    tasks = []
    for index in range(games):
        pair = index // 2
        opening = tuple(random_opening(opening_plies, seed * 1_000_003 + pair))
        tasks.append(_GameTask(index, spec_a, spec_b, index % 2 == 0, opening,
                               seed * 1_000_003 + index, simulations, time_budget, search_a, search_b))
    processes = min(games, processes or os.cpu_count() or 1)
    started = time.perf_counter()
    records = _run_tasks(tasks, processes, {name: _REGISTRY[name] for name in names})
    seconds = time.perf_counter() - started
    a_wins = [(record.winner == BLACK) == (index % 2 == 0) for index, record in enumerate(records)]
    wins_a = sum(a_wins)
    as_black = sum(a_wins[0::2])
    elo, low, high = elo_interval(wins_a, games)
    return ArenaResult(spec_a, spec_b, games, wins_a, games - wins_a, as_black, wins_a - as_black,
                       wins_a / games, elo, low, high, seconds, records)


def _run_tasks(tasks: list[_GameTask], processes: int,
               factories: dict[str, PlayerFactory]) -> list[GameRecord]:
    if processes > 1:
        try:
            pickle.dumps(factories)
            with _context().Pool(processes, initializer=_init_worker,
                                 initargs=(factories,)) as pool:
                return pool.map(_play_task, tasks, chunksize=1)  # in task order
        except (OSError, pickle.PicklingError, AttributeError, TypeError) as error:
            print(f"arena: parallel games unavailable ({error}); using one process", file=sys.stderr)
    return [_play_task(task) for task in tasks]


def main(argv: list[str] | None = None) -> int:
    """Command line: `python -m amazons.arena A B --games N [--simulations N] ...`."""
    parser = argparse.ArgumentParser(
        prog="python -m amazons.arena",
        description="Play a match between two players and report wins, win rate and Elo.")
    parser.add_argument("player_a", help=f"player spec, one of: {', '.join(player_names())}")
    parser.add_argument("player_b", help="player spec")
    parser.add_argument("--games", type=int, default=20, help="games to play (default 20)")
    parser.add_argument("--simulations", type=int, default=None,
                        help=f"MCTS simulations per move (default {DEFAULT_SIMULATIONS})")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="MCTS seconds per move instead of --simulations")
    parser.add_argument("--processes", type=int, default=None, help="worker processes (default: CPUs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of openings and players")
    parser.add_argument("--opening-plies", type=int, default=4, help="random opening plies (default 4)")
    parser.add_argument("--search-a", action="append", default=[], metavar="FIELD=VALUE",
                        help="a SearchConfig override for A's search, e.g. solver=false (repeatable)")
    parser.add_argument("--search-b", action="append", default=[], metavar="FIELD=VALUE",
                        help="a SearchConfig override for B's search (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="also write the result as JSON here")
    parser.add_argument("--record", type=Path, default=None,
                        help="also write every game to this file (game record format, docs/play.md)")
    args = parser.parse_args(argv)
    try:
        overrides = []
        for texts in (args.search_a, args.search_b):
            pairs = [text.partition("=") for text in texts]
            bad = [text for text, (_, equals, _) in zip(texts, pairs, strict=True) if not equals]
            if bad:
                raise ValueError(f"bad search override {bad[0]!r}: expected FIELD=VALUE, e.g. solver=false")
            overrides.append(tuple((name.strip(), value.strip()) for name, _, value in pairs))
        result = run_arena(args.player_a, args.player_b, args.games, args.simulations,
                           args.processes, args.seed, args.opening_plies, args.time_budget,
                           overrides[0], overrides[1])
    except ValueError as error:
        parser.error(str(error))
    print(result.summary())
    try:
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result.to_json(), indent=2) + "\n")
        if args.record is not None:
            write_records(args.record, result.records)
            print(f"{len(result.records)} games written to {args.record}")
    except OSError as error:
        print(f"arena: cannot write the results: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: plugins register players with
    # `amazons.arena`, whose registry must be the one consulted.
    from amazons.arena import main as arena_main

    raise SystemExit(arena_main())
