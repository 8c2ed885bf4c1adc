"""Building players: the one builder of a model-backed player, and the registry of player specs.

What this module owns:

* **Model specs**, what `--model` means in the bot, terminal play and the web board, and what
  follows the colon of `mcts-net:MODEL` / `policy-net:MODEL`:
  - `none`: random playouts (`amazons.mcts.RolloutEvaluator`), searched with `ROLLOUT_SEARCH`;
  - `default`: the exported model shipped in `amazons/models` for the board's size
    (`amazons.models.shipped_model_name`: `default.npz` on 8x8, `standard10.npz`, the 10x10
    model whose pooled value head plays every size, elsewhere);
  - `PATH.npz`: an exported model (`python -m amazons.export`), run by the compiled CPU
    evaluator (`amazons.neural.native`) where it is built, else in numpy
    (`amazons.neural.numpy_net`);
  - `PATH.pt`: a torch checkpoint, where torch is allowed (`allow_torch`: the arena, the web
    board, evaluation): the model `amazons.neural.model.prepare_for_inference` makes
    (`amazons.neural.served.load_network_evaluator`), on the native evaluator on a CPU, on
    torch on a GPU. Where it is not (the bot, terminal play) it is refused with the command that
    exports it.
  `backend` picks the network's backend, each name with one meaning (`amazons.core.backends`):
  "native" (either file), "torch" (`.pt` only), "numpy" (`.npz` only) or "auto"; a name that
  does not run the model's file is refused before anything loads, with the names that do, and
  the one chooser (`amazons.core.backends.choose_backend`) picks what runs.
  A network searches with `NET_SEARCH`.
* `model_evaluator` (a model spec -> its evaluator and default search) and `build_model_player`,
  the one function that builds a model-backed `MCTSPlayer` for the arena, the Botzone bot,
  terminal play, the web board and evaluation; callers differ only in its arguments.
* `served_evaluator_factory`: a network model as the picklable recipe an inference server builds
  its evaluator from (`amazons.serving.server.InferenceServer`).
* The search defaults of the built-in players (`UNIFORM_SEARCH`, `ROLLOUT_SEARCH`, `NET_SEARCH`).
* The player registry: specs `random`, `greedy`, `mcts-uniform`, `mcts-rollout[:N]`,
  `mcts-net:MODEL`, `policy-net:MODEL`, `openspiel-mcts[:N]`, `classical[:KEY=VALUE,...]`
  (`amazons.players.classical`), `botzone:[OPTIONS:]COMMAND` (any Botzone program,
  `amazons.players.program`) and `human`, plus whatever
  `register_player` adds; `make_player(spec, ...)` builds one (the arena, the Gymnasium env).

Board sizes: a player is built for one board (`make_player(..., board=...)`, a name in
`amazons.boards.BOARDS`, a start position string or a `BoardSpec`; Botzone's 8x8 by default), and
every evaluator it needs is built for that board's size when the player is built (`board_size`
of `model_evaluator`, `build_model_player` and `served_evaluator_factory`). Eagerly rather than
per size on the first move, because an evaluator is where a size can fail: a network with the flat
value head plays 8x8 only, and is refused here, by the model's name and the size, before a game
starts (in the arena, before a worker process plays a move), rather than in the middle of a
match; and because a network's evaluator is loaded once, for one size, as one evaluator serves
one size (docs: notes on sizes, `amazons.evaluator`). The players that need no evaluator of a
size (random, greedy, classical, mcts-uniform, botzone, human) play whatever board they are
given; an `MCTSPlayer` builds its search for the board's size on its first move.

Torch-free: imports numpy, `mcts`, `neural.numpy_net`, `neural.native`, `neural.backends`,
`players`, `models`, `botzone.program` and `openspiel_player` (which imports pyspiel only when its
player is built); `amazons.neural.served`, and with it torch, is imported only when a `.pt`
model is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amazons.boards import BoardSpec, NotationError, board_spec
from amazons.core.backends import BackendError, backend_error, choose_backend
from amazons.mcts import Evaluator, RolloutEvaluator, SearchConfig, UniformEvaluator
from amazons.models import default_model_path
from amazons.neural.native import BOARD_SIZES, FLAT_BOARD_SIZE, NativeEvaluator, native_support
from amazons.neural.numpy_net import (
    ModelFileError,
    NpNetInputError,
    NumpyEvaluator,
    NumpyNet,
    limit_blas_threads,
    load_model,
)
from amazons.players.classical import ClassicalConfig, ClassicalPlayer
from amazons.players.openspiel import OpenSpielMCTSPlayer
from amazons.players.player import (
    GreedyPlayer,
    HumanPlayer,
    MCTSPlayer,
    Player,
    PlayerError,
    PolicyPlayer,
    RandomPlayer,
)
from amazons.players.program import BotzonePlayer, parse_botzone_spec

__all__ = [
    "DEFAULT_SIMULATIONS",
    "NET_SEARCH",
    "NETWORK_PLAYERS",
    "ROLLOUT_SEARCH",
    "UNIFORM_SEARCH",
    "PlayerFactory",
    "PlayerOptions",
    "PlayerSpecError",
    "apply_search_overrides",
    "build_model_player",
    "check_model_size",
    "make_player",
    "model_evaluator",
    "player_factories",
    "player_names",
    "register_player",
    "served_evaluator_factory",
    "split_spec",
]

# Defaults of the built-in MCTS players. Uniform priors carry no information, so the search must
# not be kept from trying new moves (no first-play-urgency reduction), and without noise it would
# try unvisited moves in the engine's move order (the first amazon's moves first): root noise
# breaks that order. Playouts are noisy, so a larger exploration constant helps. With these,
# mcts-rollout at 200 simulations won 160 of 160 seeded games against random (4 seeds x 40).
DEFAULT_SIMULATIONS = 200
UNIFORM_SEARCH = SearchConfig(simulations=DEFAULT_SIMULATIONS, fpu_reduction=0.0)
ROLLOUT_SEARCH = SearchConfig(simulations=DEFAULT_SIMULATIONS, fpu_reduction=0.0, c_puct=2.0,
                              root_noise=True)
# A network's priors carry information: the search's defaults, no noise, and the move with the
# best lower confidence bound of Q among the well-visited ones (`lcb`, KataGo's rule), which beat
# the most visited move at 1 s a move (docs/search.md; the match in docs/experiments.md, "Play-time
# settings at the bots' clocks"). What the arena, the bot, terminal play and the web
# board play.
NET_SEARCH = SearchConfig(simulations=DEFAULT_SIMULATIONS, lcb=True)

NETWORK_PLAYERS = ("mcts-net", "policy-net")  # specs whose argument is a model (see the module doc)


class PlayerSpecError(ValueError):
    """A player spec names no registered player, or its argument is wrong."""


# ------------------------------------------------------------------------------------------------
# Model specs and the one builder


def _model_path(model: str, board_size: int) -> Path:
    path = default_model_path(board_size) if model == "default" else Path(model)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist "
                                "(use an exported .npz model, 'default' or 'none')")
    return path


def _check_backend(backend: str, path: Path) -> None:
    """Refuse a backend that does not run the model file `path` (any file but `.pt` is read as
    an exported model)."""
    why = backend_error(backend, ".pt" if path.suffix == ".pt" else ".npz")
    if why:
        raise PlayerSpecError(f"{path}: {why}")


def _check_board_size(board_size: int) -> int:
    if isinstance(board_size, bool) or board_size not in BOARD_SIZES:
        raise PlayerSpecError(f"board_size must be one of {', '.join(map(str, BOARD_SIZES))}, "
                              f"got {board_size!r}")
    return int(board_size)


def check_model_size(model: str, net_config: dict, board_size: int) -> None:
    """Refuse a network that cannot play `board_size` boards: the flat value head reads the 64
    squares of 8x8 (`amazons.neural.model`'s `value_head`).

    Raises:
        PlayerSpecError: naming the model and the size.
    """
    if board_size != FLAT_BOARD_SIZE and net_config.get("value_head", "flat") != "pooled":
        raise PlayerSpecError(
            f"model {model} cannot play {board_size}x{board_size} boards: its value head is "
            f"'flat', which plays 8x8 only (a network with value_head='pooled' plays 6x6 to "
            f"10x10)")


def numpy_model_evaluator(net: NumpyNet, backend: str = "auto",
                          board_size: int = FLAT_BOARD_SIZE) -> Evaluator:
    """An exported network's evaluator on `board_size` boards: the compiled CPU evaluator
    (`amazons.neural.native`) where `backend` is "auto" and it runs the network, or "native";
    numpy (`amazons.neural.numpy_net`) where it is "numpy" or the native evaluator cannot run
    (the one chooser decides: `amazons.core.backends.choose_backend`).

    Raises:
        PlayerSpecError: an unknown backend or "torch" (which runs checkpoints only), "native"
            where the native evaluator cannot run, or a flat value head off 8x8.
    """
    try:
        chosen = choose_backend(backend, ".npz",
                                native_support(net.config, net.trunk_layers, board_size))
    except BackendError as error:
        raise PlayerSpecError(str(error)) from None
    if chosen == "native":
        return NativeEvaluator(net, board_size=board_size)
    limit_blas_threads(1)
    try:
        return NumpyEvaluator(net, board_size)
    except NpNetInputError as error:
        raise PlayerSpecError(str(error)) from None


def model_evaluator(model: str, *, seed: int | None = None, allow_torch: bool = False,
                    device: str = "auto", precision: str = "auto", torch_threads: int | None = None,
                    backend: str = "auto",
                    board_size: int = FLAT_BOARD_SIZE) -> tuple[Evaluator, SearchConfig]:
    """The evaluator a model spec names on `board_size` boards, and the search settings it plays
    with by default.

    Args:
        model: `none`, `default`, an exported `.npz` model, or a `.pt` checkpoint (see the module
            doc).
        seed: seeds the playouts of `none`.
        allow_torch: accept `.pt` checkpoints (imports torch); otherwise they are refused.
        device, precision: where and how a `.pt` model runs (`"auto"`: CUDA when there is one;
            `amazons.neural.model.resolve_precision`).
        torch_threads: torch's intra-op threads (process-wide) once a `.pt` model is loaded;
            None leaves them.
        backend: "auto", "native", "torch" (`.pt` only) or "numpy" (`.npz` only): the network's
            backend (see the module doc).
        board_size: the board side N (6..10) the evaluator serves (its `board_size`).

    Numpy models run on one BLAS thread (`amazons.neural.numpy_net.limit_blas_threads`), native
    ones on one thread.

    Raises:
        FileNotFoundError: the model file (or the shipped default) does not exist.
        PlayerSpecError: a backend that does not run the model's file (the message names those
            that do), "native" where it cannot run an exported model, or a model that cannot
            play `board_size` boards (the flat value head off 8x8; the model and size named).
        amazons.neural.numpy_net.ModelFileError: not a usable model file, or a torch checkpoint
            where torch is not allowed (the message gives the export command).
        amazons.neural.checkpoint.CheckpointError: an unusable torch checkpoint.
        amazons.neural.served.BackendError: "native" where it cannot run a checkpoint.
    """
    board_size = _check_board_size(board_size)
    if model == "none":
        return RolloutEvaluator(seed=seed, board_size=board_size), ROLLOUT_SEARCH
    path = _model_path(model, board_size)
    _check_backend(backend, path)
    if path.suffix == ".pt":
        if not allow_torch:
            raise ModelFileError(
                f"{path} is a torch checkpoint; export it first (the bot and terminal play run "
                f"without torch): python -m amazons.export {path} {path.with_suffix('.npz')}")
        netplay = importlib.import_module("amazons.neural.served")
        try:
            evaluator = netplay.load_network_evaluator(path, device, precision,
                                                       torch_threads=torch_threads,
                                                       backend=backend, board_size=board_size)
        except ValueError as error:
            if board_size == FLAT_BOARD_SIZE:
                raise
            # the loaders name the size but not the file: a match or a bot may hold two models
            raise PlayerSpecError(f"model {model} on {board_size}x{board_size} boards: "
                                  f"{error}") from error
        return evaluator, NET_SEARCH
    net = load_model(path)
    check_model_size(model, net.config, board_size)
    return numpy_model_evaluator(net, backend, board_size), NET_SEARCH


def build_model_player(model: str, *, search: SearchConfig | None = None,
                       simulations: int | None = None, time_budget: float | None = None,
                       seed: int | None = None, tree_memory_mb: float | None = None,
                       allow_torch: bool = False, device: str = "auto", precision: str = "auto",
                       torch_threads: int | None = None, evaluator: Evaluator | None = None,
                       name: str | None = None, stop_when_full: bool = False,
                       backend: str = "auto", board_size: int = FLAT_BOARD_SIZE) -> MCTSPlayer:
    """The MCTS player a model spec names: what the arena (`mcts-net`), the Botzone bot, terminal
    play, the web board and evaluation all build their AI with.

    Args:
        model: the model spec (`none`, `default`, `.npz`, `.pt`; see the module doc).
        search: the search settings (default: the model's, `ROLLOUT_SEARCH` or `NET_SEARCH`).
        simulations: simulations per move (default: the search's `simulations`).
        time_budget: seconds per move instead of a simulation count.
        seed: seeds the search's noise and the playouts of `none`.
        tree_memory_mb: allocate the tree once at this many MiB (`SearchConfig.with_tree_memory`);
            None keeps the search's capacities.
        allow_torch, device, precision, torch_threads: see `model_evaluator`.
        evaluator: score leaves with this evaluator instead of loading the model (an
            `amazons.serving.server.InferenceClient` of a server that holds the model); the model
            spec still picks the default search and the name.
        name: the player's name (default `mcts-rollout` for `none`, else `mcts-net:MODEL`).
        stop_when_full: end a time-budgeted search once the tree is full (the bot).
        backend: the network's backend, "auto", "native", "torch" or "numpy" (see
            `model_evaluator`).
        board_size: the board side N (6..10) the player plays; its evaluator is built for it
            (a given `evaluator` must serve it).

    Raises:
        FileNotFoundError, amazons.neural.numpy_net.ModelFileError,
        amazons.neural.checkpoint.CheckpointError, PlayerSpecError: see `model_evaluator`.
        amazons.mcts.SearchConfigError: `tree_memory_mb` cannot hold a tree.
        amazons.players.player.PlayerError: simulations < 1 or time_budget <= 0.
    """
    if evaluator is None:
        evaluator, default_search = model_evaluator(model, seed=seed, allow_torch=allow_torch,
                                                    device=device, precision=precision,
                                                    torch_threads=torch_threads, backend=backend,
                                                    board_size=board_size)
    else:
        default_search = ROLLOUT_SEARCH if model == "none" else NET_SEARCH
    config = search if search is not None else default_search
    if tree_memory_mb is not None:
        config = config.with_tree_memory(tree_memory_mb)
    if name is None:
        name = "mcts-rollout" if model == "none" else f"mcts-net:{model}"
    return MCTSPlayer(evaluator, config, simulations=simulations, time_budget=time_budget,
                      seed=seed, name=name, stop_when_full=stop_when_full)


def served_evaluator_factory(model: str, device: str = "auto", precision: str = "auto",
                             max_batch: int = 256, backend: str = "auto",
                             board_size: int = FLAT_BOARD_SIZE) -> Callable[[], Evaluator]:
    """A network model as the picklable zero-argument recipe an inference server runs in its own
    process to build its evaluator (`amazons.serving.server.InferenceServer`).

    A `.pt` checkpoint gives `amazons.neural.served.NetworkEvaluatorFactory` (the prepared
    model on `device`, batches padded to power-of-two buckets up to `max_batch` where CUDA graphs
    run; `load_weights` for `publish_weights`; on a CPU the native evaluator: `backend`);
    `default` or a `.npz` file the native evaluator, or the numpy network
    (`numpy_model_evaluator`); either serves `board_size` boards.

    Raises:
        FileNotFoundError: no such model file.
        PlayerSpecError: `none` (random playouts are no network to serve), a backend that does
            not run the model's file, or an exported model that cannot play `board_size` boards.
    """
    if model == "none":
        raise PlayerSpecError("model 'none' (random playouts) is not a network to serve")
    path = _model_path(model, board_size)
    _check_backend(backend, path)
    if path.suffix == ".pt":
        netplay = importlib.import_module("amazons.neural.served")
        return netplay.NetworkEvaluatorFactory(str(path), device, precision, max_batch=max_batch,
                                               backend=backend, board_size=board_size)
    board_size = _check_board_size(board_size)
    if board_size != FLAT_BOARD_SIZE:
        check_model_size(model, load_model(path).config, board_size)
    return _NumpyEvaluatorFactory(str(path), backend, board_size)


@dataclass(frozen=True)
class _NumpyEvaluatorFactory:
    """Builds an exported model's evaluator in the server's process (`numpy_model_evaluator`)."""

    path: str
    backend: str = "auto"
    board_size: int = FLAT_BOARD_SIZE

    def __call__(self) -> Evaluator:
        return numpy_model_evaluator(load_model(self.path), self.backend, self.board_size)


# ------------------------------------------------------------------------------------------------
# The registry of player specs


@dataclass(frozen=True)
class PlayerOptions:
    """What every player factory receives besides the spec's argument."""

    seed: int = 0  # seeds the player's random choices
    simulations: int | None = None  # MCTS simulations per move (None: the player's default)
    time_budget: float | None = None  # MCTS seconds per move instead of a simulation count
    # SearchConfig overrides (field, value text) for MCTS players
    search: tuple[tuple[str, str], ...] = ()
    # an MCTS player's search before `search` (None: the player's default)
    base_search: SearchConfig | None = None
    # a network player's evaluator instead of loading its model (a served model)
    evaluator: Evaluator | None = None
    device: str = "auto"  # where a network player's torch model runs
    precision: str = "auto"  # how it computes (`amazons.neural.model.resolve_precision`)
    board_size: int = FLAT_BOARD_SIZE  # the board side the player's evaluator is built for

    def search_config(self, default: SearchConfig) -> SearchConfig:
        """`base_search` (or `default`) with the `search` overrides applied (values parsed by the
        field's type).

        Raises:
            PlayerSpecError: an unknown field or a value of the wrong type.
        """
        return apply_search_overrides(self.base_search or default, self.search)


def apply_search_overrides(base: SearchConfig,
                           overrides: Sequence[tuple[str, str]]) -> SearchConfig:
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
            raise PlayerSpecError(f"search override {name}={text!r}: "
                                  f"expected a {type(current).__name__}") from None
    try:
        return base.replace(**changes)
    except ValueError as error:
        raise PlayerSpecError(f"search overrides: {error}") from None


PlayerFactory = Callable[[str | None, PlayerOptions], Player]
_REGISTRY: dict[str, PlayerFactory] = {}


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
    """Registered player names."""
    return sorted(_REGISTRY)


def player_factories(names: Sequence[str]) -> dict[str, PlayerFactory]:
    """The factories registered under `names` (for worker processes, which register them again)."""
    return {name: _REGISTRY[name] for name in names}


def split_spec(spec: str) -> tuple[str, str | None]:
    """`NAME[:ARGUMENT]` -> (name, argument or None) for a registered name.

    Raises:
        PlayerSpecError: no player of that name is registered.
    """
    name, _, argument = spec.strip().partition(":")
    if name not in _REGISTRY:
        raise PlayerSpecError(f"unknown player {spec!r}; known: {', '.join(player_names())}")
    return name, (argument or None)


def make_player(spec: str, seed: int = 0, simulations: int | None = None,
                time_budget: float | None = None, search: Sequence[tuple[str, str]] = (), *,
                base_search: SearchConfig | None = None, evaluator: Evaluator | None = None,
                device: str = "auto", precision: str = "auto",
                board: BoardSpec | str | None = None) -> Player:
    """Build the player named by `spec` (`NAME` or `NAME:ARGUMENT`) for `board`.

    Args:
        spec: the player's name and argument.
        seed, simulations, time_budget, base_search, evaluator, device, precision: see
            `PlayerOptions`.
        search: `SearchConfig` overrides for MCTS players, e.g. `[("solver", "false")]`.
        board: the board the player plays (a name in `amazons.boards.BOARDS` such as
            "standard10", a start position string or a `BoardSpec`; None: Botzone's 8x8): the
            evaluator a player needs is built for its size (see the module doc).

    Raises:
        PlayerSpecError: for an unknown name, an argument the player does not take, a bad
            search override, a bad board, or a model that cannot play the board's size (the
            model and the size named).
        FileNotFoundError, ValueError: a network player's model cannot be loaded.
    """
    name, argument = split_spec(spec)
    try:
        board_size = board_spec(board).size
    except NotationError as error:
        raise PlayerSpecError(f"board: {error}") from None
    options = PlayerOptions(seed, simulations, time_budget, tuple(search), base_search, evaluator,
                            device, precision, board_size)
    return _REGISTRY[name](argument, options)


def _no_argument(name: str, argument: str | None) -> None:
    if argument is not None:
        raise PlayerSpecError(f"player {name!r} takes no argument, got {argument!r}")


def _count_argument(name: str, argument: str | None) -> int:
    if argument is None:
        return 1
    try:
        return int(argument)
    except ValueError:
        raise PlayerSpecError(f"{name}:N needs an integer N, got {argument!r}") from None


def _network_model(name: str, argument: str | None) -> str:
    if not argument or argument == "none":
        raise PlayerSpecError(f"{name} needs a model, "
                              f"e.g. {name}:runs/cpu/models/model-0010.pt or {name}:default")
    return argument


def _make_random(argument: str | None, options: PlayerOptions) -> Player:
    _no_argument("random", argument)
    return RandomPlayer(seed=options.seed)


def _make_greedy(argument: str | None, options: PlayerOptions) -> Player:
    _no_argument("greedy", argument)
    return GreedyPlayer(seed=options.seed)


def _make_mcts_uniform(argument: str | None, options: PlayerOptions) -> Player:
    _no_argument("mcts-uniform", argument)
    return MCTSPlayer(UniformEvaluator(), options.search_config(UNIFORM_SEARCH),
                      simulations=options.simulations, time_budget=options.time_budget,
                      seed=options.seed, name="mcts-uniform")


def _make_mcts_rollout(argument: str | None, options: PlayerOptions) -> Player:
    """`mcts-rollout` or `mcts-rollout:N` (N playouts averaged per leaf)."""
    rollouts = _count_argument("mcts-rollout", argument)
    return build_model_player("none", search=options.search_config(ROLLOUT_SEARCH),
                              simulations=options.simulations, time_budget=options.time_budget,
                              seed=options.seed,
                              evaluator=RolloutEvaluator(rollouts_per_leaf=rollouts,
                                                         seed=options.seed,
                                                         board_size=options.board_size),
                              board_size=options.board_size)


def _make_mcts_net(argument: str | None, options: PlayerOptions) -> Player:
    """`mcts-net:MODEL`: MCTS with a network's priors and values, one torch thread per process."""
    model = _network_model("mcts-net", argument)
    return build_model_player(model, search=options.search_config(NET_SEARCH),
                              simulations=options.simulations, time_budget=options.time_budget,
                              seed=options.seed, allow_torch=True, device=options.device,
                              precision=options.precision, torch_threads=1,
                              evaluator=options.evaluator, board_size=options.board_size)


def _make_policy_net(argument: str | None, options: PlayerOptions) -> Player:
    """`policy-net:MODEL`: the network's raw policy, no search."""
    model = _network_model("policy-net", argument)
    evaluator = options.evaluator
    if evaluator is None:
        evaluator, _ = model_evaluator(model, allow_torch=True, device=options.device,
                                       precision=options.precision, torch_threads=1,
                                       board_size=options.board_size)
    return PolicyPlayer(evaluator, name=f"policy-net:{model}")


def _make_openspiel_mcts(argument: str | None, options: PlayerOptions) -> Player:
    """`openspiel-mcts` or `openspiel-mcts:N` (N rollouts per leaf).

    Needs the open-spiel package.
    """
    rollouts = _count_argument("openspiel-mcts", argument)
    return OpenSpielMCTSPlayer(options.simulations, options.time_budget, rollouts, options.seed)


# seconds a move of `classical` where neither the spec nor the caller gives a budget
CLASSICAL_TIME_BUDGET = 1.0
_CLASSICAL_KEYS = {"depth": "max_depth", "width": "width", "root": "root_width"}


def _make_classical(argument: str | None, options: PlayerOptions) -> Player:
    """`classical` or `classical:KEY=VALUE,...`: the Amazong-style alpha-beta player.

    Keys: `depth` (plies at most), `width` (children searched deeper at inner nodes), `root` (root
    moves searched deeper), `time` (seconds a move; `none` searches to the depth whatever it
    takes). The caller's `time_budget` (the arena's `--time-budget`) applies where `time` is not
    given; `simulations` does not apply.
    """
    fields: dict[str, int] = {}
    time_budget: float | None = options.time_budget or CLASSICAL_TIME_BUDGET
    for item in (argument.split(",") if argument else []):
        key, _, text = item.partition("=")
        try:
            if key == "time":
                time_budget = None if text == "none" else float(text)
            elif key in _CLASSICAL_KEYS:
                fields[_CLASSICAL_KEYS[key]] = int(text)
            else:
                raise PlayerSpecError(f"classical: unknown option {key!r} "
                                      f"(known: {', '.join([*_CLASSICAL_KEYS, 'time'])})")
        except ValueError as error:
            if isinstance(error, PlayerSpecError):
                raise
            raise PlayerSpecError(f"classical: option {item!r} needs a number") from None
    try:
        return ClassicalPlayer(ClassicalConfig(**fields), time_budget=time_budget,
                               seed=options.seed, name=f"classical:{argument}" if argument
                               else "classical")
    except PlayerError as error:
        raise PlayerSpecError(str(error)) from None


def _make_botzone(argument: str | None, options: PlayerOptions) -> Player:
    """`botzone:[OPTIONS:]COMMAND`: a Botzone program run as Botzone runs it, named by its spec."""
    try:
        settings = parse_botzone_spec(argument)
    except PlayerError as error:
        raise PlayerSpecError(str(error)) from None
    return BotzonePlayer(settings, name=f"botzone:{argument}")


def _make_human(argument: str | None, options: PlayerOptions) -> Player:
    _no_argument("human", argument)
    return HumanPlayer()


register_player("random", _make_random)
register_player("greedy", _make_greedy)
register_player("mcts-uniform", _make_mcts_uniform)
register_player("mcts-rollout", _make_mcts_rollout)
register_player("mcts-net", _make_mcts_net)
register_player("policy-net", _make_policy_net)
register_player("openspiel-mcts", _make_openspiel_mcts)
register_player("classical", _make_classical)
register_player("botzone", _make_botzone)
register_player("human", _make_human)
