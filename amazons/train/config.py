"""The main job's configuration: `TrainConfig`, its presets, and `KEY=VALUE` overrides.

`TrainConfig` is one frozen dataclass tree (network, optimizer, self-play and search, inference
server, evaluation, pipeline, Ray backend): `python -m amazons.train` resolves it from a preset or a
run directory's `config.json`, applies the command line's overrides, writes it to the run
directory and passes it explicitly to every process entry point. `training_steps` turns a number
of new positions into the optimizer steps they are owed.

`board` names the board the run plays and trains on (`amazons.boards`: `botzone8`, `standard10`,
... or a start position string). A network with the flat value head runs on 8x8 only, so a run on
another size needs `net.value_head=pooled`; `apply_overrides` sets it when `board=` names such a
board and no override names `net.value_head` (a preset's flat head is its 8x8 choice, not a
request), and `TrainConfig` refuses a flat head on any other size, naming the fix.

Imports the config dataclasses of the modules it groups (`amazons.neural.model`,
`amazons.neural.learner`, `amazons.mcts`, `amazons.train.selfplay`, `amazons.serving.server`,
`amazons.matches.evaluation`, `amazons.train.pipeline`), the growth methods
(`amazons.neural.growth`) and `amazons.core.config`; never a backend:
`RayConfig`, the Ray backend's group, lives here as plain values so that `amazons.distributed`
depends on this module and not the other way round.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from amazons.boards import BoardSpec, NotationError, board_spec
from amazons.core.config import config_from_dict, config_to_dict
from amazons.matches.evaluation import EvalConfig
from amazons.mcts import SearchConfig
from amazons.neural.growth import GROWTH_METHODS
from amazons.neural.learner import OptimConfig
from amazons.neural.model import FLAT_BOARD_SIZE, NetConfig, net_config
from amazons.serving.server import InferenceConfig
from amazons.train.pipeline import PipelineConfig, steps_for_positions
from amazons.train.selfplay import SelfPlayConfig

__all__ = ["RayConfig", "TrainConfig", "apply_overrides", "cpu_has_native_bf16", "preset_config",
           "training_steps"]


@dataclass(frozen=True)
class RayConfig:
    """The `ray` group: placement, back-pressure, weights staleness and fault limits of the Ray
    backend (`--backend ray`, `amazons.distributed`). Overridden like any field
    (`ray.max_weights_lag=0`); the local backend ignores it."""

    node_cpus: float = 1.0  # logical CPUs each self-play node actor asks Ray for
    # GPUs each node actor asks for (its inference server uses them); > 0: one actor per that many
    # GPUs of a node
    node_gpus: float = 0.0
    # self-play node actors to start, at most (0 = one per node that fits one, or per GPU share)
    max_nodes: int = 0
    # games one request asks a node for (0 = 2 x selfplay.num_actors x selfplay.games_in_parallel)
    games_per_request: int = 0
    # games requested from one node and not yet returned, at most (0 = 2 x games_per_request)
    max_games_in_flight: int = 0
    # a node never plays with weights more than this many versions older than the latest
    # (0 = self-play and training alternate, as in the local backend)
    max_weights_lag: int = 1
    # times Ray replaces a node actor that died (a new process on a live node)
    node_max_restarts: int = 3
    node_max_failures: int = 3  # consecutive failed requests after which a node actor is given up
    # with no node actor able to play, wait this long for one before stopping the run
    node_timeout_s: float = 600.0
    # DDP ranks: the learner (the driver process) is rank 0, the others are Ray actors
    train_world_size: int = 1
    # logical CPUs each remote training rank asks for (plus one GPU when the learner trains on CUDA)
    rank_cpus: float = 1.0
    # a DDP rendezvous or collective waits this long for the other ranks
    train_timeout_s: float = 600.0
    # only when the backend starts Ray itself (no --address): logical CPUs (0 = os.cpu_count())
    num_cpus: int = 0
    # only when the backend starts Ray itself: object store size in MiB (0 = Ray's default)
    object_store_mb: int = 0
    log_to_driver: bool = False  # show the Ray actors' own output in the driver's console

    def __post_init__(self) -> None:
        for name in ("node_cpus", "node_gpus", "rank_cpus"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"ray.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("max_nodes", "games_per_request", "max_games_in_flight", "max_weights_lag",
                     "node_max_restarts", "num_cpus", "object_store_mb"):
            if getattr(self, name) < 0:
                raise ValueError(f"ray.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("node_max_failures", "train_world_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ray.{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("node_timeout_s", "train_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ray.{name} must be > 0, got {getattr(self, name)!r}")
        if (self.games_per_request and self.max_games_in_flight
                and self.max_games_in_flight < self.games_per_request):
            raise ValueError(f"ray.max_games_in_flight ({self.max_games_in_flight}) must be >= "
                             f"ray.games_per_request ({self.games_per_request})")


@dataclass(frozen=True)
class TrainConfig:
    """The whole resolved configuration of a run (written to `run_dir/config.json`)."""

    preset: str = "cpu"  # the preset this config started from
    iterations: int = 30  # iterations to run (a resumed run continues up to this number)
    seed: int = 0  # seeds self-play, sampling and the initial weights
    # the board every game starts from: a name in `amazons.boards.BOARDS` (botzone8: Botzone's
    # 8x8, Black first; standard10: the 10x10 game, White first; ...) or a start position string;
    # off 8x8 the network needs net.value_head=pooled
    board: str = "botzone8"
    # a warm start: a model or learner checkpoint whose weights the run starts from ("" = random)
    init_model: str = ""
    # how init_model's network grows when `net` is bigger: "silent" (new units fresh, unseen by
    # the old ones) or "net2net" (new units split copies of old ones); `amazons.neural.growth`.
    # silent trained better from the shipped model into 4 x 48 (docs/network.md, growth)
    init_growth: str = "silent"
    device: str = "auto"  # learner and inference device: "auto", "cpu", "cuda"
    # inference server dtype: "auto" (bf16 on GPU, fp32 on CPU), "fp32", ...
    inference_dtype: str = "auto"
    torch_threads: int = 1  # intra-op threads of the learner process
    games_per_iteration: int = 64  # self-play games per iteration
    train_batch_size: int = 256  # samples per optimizer step
    # draw, augment and prepare each next training batch on a second thread while the learner's
    # step runs (`amazons.neural.learner.BatchPrefetcher`; the same batches in the same order)
    prefetch_batches: bool = True
    sample_reuse: float = 8.0  # samples drawn for training per new position
    min_steps: int = 20  # training steps per iteration, at least
    max_steps: int = 2000  # training steps per iteration, at most
    replay_window_positions: int = 200_000  # the newest positions kept for sampling
    # the replay writer thread writes a chunk once this many games wait...
    replay_chunk_games: int = 1
    # ...or once the oldest has waited this many seconds (a crash loses those)
    replay_chunk_seconds: float = 0.0
    net: NetConfig = field(default_factory=lambda: net_config("tiny"))
    optim: OptimConfig = field(default_factory=OptimConfig)
    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # async or sync phases, ratio, publishing
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    # the Ray backend's settings (`--backend ray`)
    ray: RayConfig = field(default_factory=RayConfig)

    def __post_init__(self) -> None:
        try:
            spec = board_spec(self.board)
        except NotationError as error:
            raise ValueError(f"board: {error}") from None
        if spec.size != FLAT_BOARD_SIZE and self.net.value_head == "flat":
            raise ValueError(f"board {spec.label()!r} is {spec.size}x{spec.size}: the flat value "
                             f"head runs on 8x8 only; use net.value_head=pooled")
        if self.init_growth not in GROWTH_METHODS:
            raise ValueError(f"init_growth must be one of {GROWTH_METHODS}, "
                             f"got {self.init_growth!r}")
        for name in ("iterations", "games_per_iteration", "train_batch_size",
                     "replay_window_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_steps <= self.max_steps:
            raise ValueError(f"need 0 <= min_steps <= max_steps, got {self.min_steps}, "
                             f"{self.max_steps}")
        if self.sample_reuse <= 0:
            raise ValueError(f"sample_reuse must be > 0, got {self.sample_reuse}")
        if self.replay_chunk_games < 1 or self.replay_chunk_seconds < 0:
            raise ValueError(f"need replay_chunk_games >= 1 and replay_chunk_seconds >= 0, got "
                             f"{self.replay_chunk_games} and {self.replay_chunk_seconds}")

    @property
    def board_spec(self) -> BoardSpec:
        """The `BoardSpec` that `board` names."""
        return board_spec(self.board)


# The niceness of the cpu preset's actors and inference server (`SelfPlayConfig.nice`,
# `InferenceConfig.nice`), the learner at 0: the learner's one thread takes a core whenever it can
# step, self-play the rest (docs/training.md, "The learner first (niceness)").
CPU_SELFPLAY_NICE = 10


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this machine's CPU computes bf16 natively (AVX-512 BF16 or AMX BF16), read from
    `cpuinfo` (Linux); False where it cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle
                          if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def preset_config(name: str) -> TrainConfig:
    """The `cpu` or `gpu` preset.

    `cpu`: a small net and modest searches, so that a 2-core machine improves visibly within an
    hour; its learner trains under bf16 autocast where the CPU computes bf16 natively
    (`cpu_has_native_bf16`), "auto" elsewhere (fp32 on a CPU: emulated bf16 is several times
    slower). `gpu`: the design's ResNet-40 (20 x 256, joint head, attention), training batch 512 and
    inference batches up to 1024 rows merged from several actors. Both run the async pipeline.
    """
    if name == "cpu":
        return TrainConfig(
            preset="cpu",
            net=net_config("tiny"),
            # bf16 autocast in the learner where the CPU has it: faster steps, and stronger than
            # fp32 at equal wall clock (docs/experiments.md, issue 30's ablations).
            optim=OptimConfig(lr=2e-3, weight_decay=1e-4, schedule="constant", warmup_steps=50,
                              precision="bf16" if cpu_has_native_bf16() else "auto"),
            selfplay=SelfPlayConfig(
                num_actors=2,
                games_in_parallel=16,
                # 96, not 48: at 48 the actors sat paused for the learner half the time; twice
                # the search fills that time for 12% fewer positions and won 52 of 80 at equal
                # wall clock (docs/training.md, "The balance between self-play and the learner").
                search=SearchConfig(simulations=96, leaves_per_game=4, root_noise=True,
                                    fpu_reduction=0.0, temperature_moves=10, node_capacity=1024,
                                    edge_capacity=1 << 17, c_scale=0.3),
                # A sharper completed-Q target than the paper's 0.1: with 96 PUCT simulations most
                # legal moves go unvisited and keep their prior share (docs/experiments.md). The
                # search's c_scale matches it, so that root=gumbel searches with the same sigma.
                target_c_scale=0.3,
                nice=CPU_SELFPLAY_NICE,
            ),
            # Batches of 64 rows, one actor's request: the server evaluates one actor's leaves
            # while the other searches, instead of waiting for both.
            inference=InferenceConfig(inference_batch_size=64, flush_deadline_ms=2.0,
                                      nice=CPU_SELFPLAY_NICE),
            games_per_iteration=64,
            train_batch_size=256,
            replay_chunk_games=32,
            replay_chunk_seconds=30.0,
            # 20: with its core to itself the learner steps about a fifth faster than self-play
            # at 16 samples a position could feed it (docs/experiments.md, "The learner first").
            sample_reuse=20.0,
            eval=EvalConfig(every=2, games=10, simulations=48, processes=2),
            pipeline=PipelineConfig(mode="async", publish_every_steps=10, slack_steps=100),
        )
    if name == "gpu":
        return TrainConfig(
            preset="gpu",
            iterations=200,
            net=net_config("resnet40"),
            optim=OptimConfig(lr=2e-4, weight_decay=1e-4, warmup_steps=500, total_steps=200_000),
            selfplay=SelfPlayConfig(
                num_actors=12,
                games_in_parallel=64,
                search=SearchConfig(simulations=400, leaves_per_game=4, root_noise=True,
                                    temperature_moves=12),
            ),
            # Each actor sends up to 64 x 4 = 256 rows: a batch merges four actors' requests.
            inference=InferenceConfig(inference_batch_size=1024, flush_deadline_ms=2.0),
            games_per_iteration=768,
            train_batch_size=512,
            sample_reuse=4.0,
            max_steps=4000,
            replay_window_positions=1_000_000,
            replay_chunk_games=256,
            replay_chunk_seconds=30.0,
            eval=EvalConfig(every=2, games=20, simulations=200, processes=8),
            pipeline=PipelineConfig(mode="async", publish_every_steps=50, slack_steps=200),
        )
    raise ValueError(f"unknown preset {name!r}; choose 'cpu' or 'gpu'")


# ------------------------------------------------------------------------------------------------
# Config overrides (dicts <-> configs: `amazons.core.config`)


def _parse_value(text: str, current: Any, path: str) -> Any:
    try:
        if isinstance(current, bool):
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, tuple):
            items = [item.strip() for item in text.split(",") if item.strip()]
            return tuple(type(current[0])(item) if current else item for item in items)
        return text
    except ValueError:
        raise ValueError(f"override {path}={text!r}: expected a {type(current).__name__}") from None


def apply_overrides(config: TrainConfig, overrides: list[str]) -> TrainConfig:
    """Apply `a.b.c=value` overrides (types follow the current values), then validate once.

    Every override is parsed against the current config first, and the new config is built and
    checked only after all of them are in, so checks that tie fields together (e.g.
    `min_steps <= max_steps`) see the final values whatever the order of the overrides.

    A `board=` override naming a board that is not 8x8 makes a flat value head pooled unless an
    override names `net.value_head` (the flat head runs on 8x8 only; an explicit
    `net.value_head=flat` there is refused).

    Raises:
        ValueError: naming a malformed override, an unknown field, or a resulting value that the
            config refuses.
    """
    data = config_to_dict(config)
    for override in overrides:
        path, equals, text = override.partition("=")
        if not equals or not path:
            raise ValueError(f"bad override {override!r}: expected KEY=VALUE, "
                             "e.g. selfplay.num_actors=2")
        _set_path(config, data, path.split("."), text, path)
    paths = {override.partition("=")[0] for override in overrides}
    if "board" in paths and "net.value_head" not in paths and data["net"]["value_head"] == "flat":
        try:
            size = board_spec(data["board"]).size
        except NotationError as error:
            raise ValueError(f"override board: {error}") from None
        if size != FLAT_BOARD_SIZE:
            data["net"]["value_head"] = "pooled"
    return config_from_dict(type(config), data)


def _set_path(node: Any, data: dict[str, Any], keys: list[str], text: str, path: str) -> None:
    """Parse `text` against the field `keys` of the dataclass `node` and store it into `data`."""
    names = {item.name for item in dataclasses.fields(node)}
    if keys[0] not in names:
        raise ValueError(f"override {path}: {type(node).__name__} has no field {keys[0]!r}; "
                         f"fields: {sorted(names)}")
    current = getattr(node, keys[0])
    if len(keys) == 1:
        if dataclasses.is_dataclass(current):
            raise ValueError(f"override {path}: {keys[0]} is a group; name one of its fields")
        data[keys[0]] = config_to_dict(_parse_value(text, current, path))
    else:
        if not dataclasses.is_dataclass(current):
            raise ValueError(f"override {path}: {keys[0]} is not a group")
        _set_path(current, data[keys[0]], keys[1:], text, path)


def training_steps(config: TrainConfig, new_positions: int, world_size: int = 1) -> int:
    """Optimizer steps for an iteration that produced `new_positions` positions.

    Each step draws `train_batch_size` samples on each of `world_size` data-parallel ranks, so the
    samples drawn per new position stay `sample_reuse` and the steps shrink as ranks are added;
    the result is bounded by `min_steps` and `max_steps`.
    """
    return steps_for_positions(new_positions, config.sample_reuse,
                               config.train_batch_size * world_size, config.min_steps,
                               config.max_steps)
