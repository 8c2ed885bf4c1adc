"""The Ray backend: real Ray clusters (two simulated nodes), real node actors running the real
self-play pipeline, DistributedDataParallel over gloo, and what `ray.shutdown()` leaves behind.

All are marked slow: each starts Ray and several processes, and the two-node cluster takes its own
time to start (the suite's times: docs/experiments.md, the test suite's wall clock).

They run beside other tests (the suite's parallel part), so what they count is their own: the
processes under this one (Ray's are, the node actors included), the shared-memory segments of
those processes, and the janitors and scratch folders that only node actors start, which no other
file's tests do. Every test here that starts a Ray runtime is in this file, so one runs at a time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")  # the `ray` extra, which `make test` installs

import psutil  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from amazons.board import Board, Move  # noqa: E402
from amazons.core.config import config_to_dict  # noqa: E402
from amazons.distributed import node as node_module  # noqa: E402
from amazons.distributed.ddp import TrainingGroup  # noqa: E402
from amazons.distributed.pool import NodePool  # noqa: E402
from amazons.distributed.ray_backend import RayRun, connect  # noqa: E402
from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator  # noqa: E402
from amazons.neural.checkpoint import save_model  # noqa: E402
from amazons.neural.learner import Learner, OptimConfig, SampleBatch, augment_batch  # noqa: E402
from amazons.neural.model import NetOutput, PolicyValueNet, net_config  # noqa: E402
from amazons.players.records import read_records  # noqa: E402
from amazons.serving.server import SEGMENT_PREFIX  # noqa: E402
from amazons.train.command import main  # noqa: E402
from amazons.train.config import RayConfig, apply_overrides, preset_config  # noqa: E402
from amazons.train.replay import GameSamples, ReplayBuffer, load_chunk  # noqa: E402
from amazons.train.selfplay import play_games  # noqa: E402

MiB = 1024**2
# The log line of a preset's async pipeline.mode replaced by the sync one the Ray backend runs.
REPLACED = ("pipeline.mode: the preset's 'async' replaced by 'sync',"
            " the mode the RayRun backend runs")

# A tiny run: one actor per node with two games in lockstep, few simulations, a few steps.
TINY = [
    "pipeline.mode=sync",
    "selfplay.num_actors=1",
    "selfplay.games_in_parallel=2",
    "selfplay.search.simulations=8",
    "selfplay.start_jitter_s=0",
    "min_steps=2",
    "max_steps=2",
    "train_batch_size=32",
    "eval.every=0",
    "ray.games_per_request=2",
    "ray.max_games_in_flight=2",
]


def descendants() -> dict[int, str]:
    found = {}
    for process in psutil.Process().children(recursive=True):
        try:
            found[process.pid] = " ".join(process.cmdline()[:3])
        except psutil.Error:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def shm_segments() -> set[str]:
    """Segments of the project's servers (named `amazons_PID_...`) that this test's processes
    own: those of this process and its descendants, and those whose owner has exited (a leak, or
    a server on its way out). A live owner outside this process tree is another test's."""
    ours = {os.getpid(), *descendants()}
    found = set()
    for name in os.listdir("/dev/shm"):
        if name.startswith(SEGMENT_PREFIX):
            owner = int(name[len(SEGMENT_PREFIX):].split("_", 1)[0])
            if owner in ours or not alive(owner):
                found.add(name)
    return found


def wait_until(condition, seconds: float, step: float = 0.25) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


def test_the_ray_backend_is_the_ray_entry_point_and_refuses_the_async_pipeline(tmp_path):
    from amazons.train.backends import load_backend

    assert load_backend("ray") is RayRun
    config = apply_overrides(preset_config("cpu"), ["pipeline.mode=async"])
    with pytest.raises(ValueError, match="pipeline.mode='async'.*runs sync"):
        RayRun(config, tmp_path / "run", resume=False)
    assert not ray.is_initialized() and not (tmp_path / "run").exists()


@pytest.fixture(scope="module", autouse=True)
def signal_handlers_kept():
    """This pytest process's SIGTERM and SIGINT handlers, as they were before the file's tests.
    `ray.init` makes the driver exit with status 15 on SIGTERM and keeps that handler after
    `ray.shutdown()`; the processes that later tests fork from this one would inherit it."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.fixture(scope="module")
def ray_tmpdir():
    """A short RAY_TMPDIR (Ray's Unix socket paths must stay under ~107 characters), and Ray's
    memory monitor off: it kills workers when the whole machine runs short of memory, whoever
    uses it, which on a shared test machine is not these tests."""
    settings = {"RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp"),
                "RAY_memory_monitor_refresh_ms": "0"}
    previous = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    yield settings["RAY_TMPDIR"]
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(settings["RAY_TMPDIR"], ignore_errors=True)


@pytest.fixture(scope="module")
def two_nodes(ray_tmpdir):
    """A head without CPUs (no node actor goes there) and two simulated nodes of 2 CPUs each."""
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": 100 * MiB, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=2, object_store_memory=100 * MiB)
    yield cluster
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()


def stored_games(run_dir: Path) -> list[GameSamples]:
    """Every game of every replay chunk, one `GameSamples` per game."""
    games = []
    for path in sorted((run_dir / "replay").glob("chunk-*.npz")):
        chunk = load_chunk(path)
        for start, stop in zip(chunk.game_offsets[:-1], chunk.game_offsets[1:], strict=True):
            games.append(GameSamples(chunk.positions[start:stop], chunk.label_moves[:0], None,
                                     chunk.label_policy[:0], np.zeros(1, np.int64),
                                     chunk.z[start:stop], chunk.played_moves[start:stop]))
    return games


def check_games_replay_with_right_z(run_dir: Path) -> list:
    """The stored games replay legally from the start, their positions are the canonical ones
    along the way, and z is +1 exactly where the side to move is the recorded winner."""
    # replays every move, raises if illegal
    records = read_records(run_dir / "games" / "selfplay.txt")
    winners = {tuple(move.as_tuple() for move in record.moves): record.winner
               for record in records}
    games = stored_games(run_dir)
    assert len(games) == len(records)
    for game in games:
        board = Board()
        turns = []
        for position, move in zip(game.positions, game.played_moves, strict=True):
            np.testing.assert_array_equal(position, board.canonical_position())
            turns.append(board.turn)
            board.push(Move(*move.tolist()))
        winner = winners[tuple(tuple(move) for move in game.played_moves.tolist())]
        assert winner is not None
        np.testing.assert_array_equal(game.z, np.where(np.array(turns) == winner, 1, -1))
    return records


@pytest.mark.slow
def test_two_nodes_run_an_iteration_end_to_end(two_nodes, tmp_path):
    run_dir = tmp_path / "run"
    before = shm_segments()
    assert main(["--backend", "ray", "--address", two_nodes.address, "--preset", "cpu",
                 "--run-dir", str(run_dir), "--iterations", "1", "--no-progress",
                 "games_per_iteration=6", "ray.train_world_size=2", *TINY]) == 0
    assert not ray.is_initialized()  # the run disconnected; the cluster lives on
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in metrics] == [1]
    assert np.isfinite(metrics[0]["train/loss"]) and metrics[0]["train/world_size"] == 2
    assert metrics[0]["ray/nodes_active"] == 2 and metrics[0]["ray/node_failures"] == 0
    assert metrics[0]["ray/bytes_per_game"] > 0 and metrics[0]["ray/weights_bytes"] > 0
    assert (run_dir / "checkpoints" / "latest.pt").exists()
    assert sorted(path.name for path in (run_dir / "models").iterdir()) == \
        ["model-0000.pt", "model-0001.pt"]
    assert json.loads((run_dir / "config.json").read_text())["ray"]["train_world_size"] == 2
    records = check_games_replay_with_right_z(run_dir)
    assert len(records) == 6
    # both simulated nodes played
    assert {record.headers["Node"] for record in records} == {"0", "1"}
    assert wait_until(lambda: shm_segments() <= before, 20), shm_segments() - before


@pytest.mark.slow
def test_killing_a_node_actor_mid_iteration_loses_only_its_games(two_nodes, tmp_path, capfd):
    # 48 simulations a move: games long enough that a node still has some in flight once the
    # first ones arrive (at 8, on the native evaluator, the iteration was over by then).
    config = apply_overrides(preset_config("cpu"),
                             [*TINY, "games_per_iteration=8", "iterations=1",
                              "ray.max_weights_lag=0", "selfplay.search.simulations=48"])
    run_dir = tmp_path / "run"
    before = shm_segments()
    run = RayRun(config, run_dir, resume=False, address=two_nodes.address)
    failures: list[BaseException] = []

    def target() -> None:
        try:
            run.run(progress=False)
        except BaseException as error:  # reported by the assertion below
            failures.append(error)

    thread = threading.Thread(target=target)
    try:
        thread.start()
        assert wait_until(lambda: run.replay.total_games >= 2, 120), "no games arrived"
        victim = next(node for node in run.nodes.node_status()
                      if node["state"] == "active" and node["in_flight"])
        os.kill(victim["pid"], signal.SIGKILL)
        thread.join(240)
        assert not thread.is_alive() and not failures, failures
    finally:
        thread.join(60)
        run.close()
    (metrics,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics["iteration"] == 1 and np.isfinite(metrics["train/loss"]) \
        and metrics["selfplay/games"] == 8
    assert metrics["ray/node_failures"] == 1 and metrics["ray/lost_games"] == victim["in_flight"]
    assert (run_dir / "checkpoints" / "latest.pt").exists()
    out, err = capfd.readouterr()
    assert f"node actor {victim['index']} (pid {victim['pid']} on" in err and "died" in err
    assert "iteration 1 done" in out and "loss" in out
    assert len(check_games_replay_with_right_z(run_dir)) == 8
    assert wait_until(lambda: shm_segments() <= before, 20), "shared memory left behind"


def restarted_pid(handle, seconds: float) -> int:
    """The pid of the actor behind `handle` once Ray restarted it (asked directly, not the pool)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return int(ray.get(handle.ready.remote(), timeout=seconds)["pid"])
        except ray.exceptions.ActorUnavailableError:
            assert time.monotonic() < deadline, "Ray did not restart the actor"
            time.sleep(0.25)


@pytest.mark.slow
def test_a_node_actor_that_ray_replaces_plays_again(two_nodes, tmp_path, capfd):
    config = apply_overrides(preset_config("cpu"), [*TINY, "ray.max_weights_lag=0"])
    model = tmp_path / "model.pt"
    torch.manual_seed(0)
    save_model(model, PolicyValueNet(config.net))
    ray.init(address=two_nodes.address, log_to_driver=False)
    pool = NodePool(config, last_iteration=100)
    try:
        pool.publish_weights(str(model), 0)
        records: dict[int, list] = {}

        def play(iteration: int) -> None:
            pool.play(4, lambda samples, texts: records.setdefault(iteration, []).extend(texts),
                      iteration=iteration)

        play(1)
        (victim,) = [node for node in pool.node_status() if node["index"] == 0]
        os.kill(victim["pid"], signal.SIGKILL)
        play(2)  # node 0's request fails; node 1 plays all four games
        assert {record.headers["Node"] for record in records[2]} == {"1"}
        metrics = pool.take_metrics()
        assert metrics["ray/node_failures"] == 1
        replacements = metrics["ray/node_replacements"]
        replacement = restarted_pid(pool.nodes[0].handle, 60)
        assert replacement != victim["pid"]
        # The pool probes the restarted actor while it schedules: the answer may come only after
        # the next iterations' games were handed out (a tiny net plays an iteration in a fraction of
        # a second, and an unanswered probe is sent again after PROBE_RETRY_S), so allow 30 s.
        deadline = time.monotonic() + 30.0
        for iteration in range(3, 100):
            play(iteration)
            replacements += pool.take_metrics()["ray/node_replacements"]
            if "0" in {record.headers["Node"] for record in records[iteration]}:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the replaced node actor played no game in 30 s "
                            f"({iteration - 2} iterations)")
        else:
            pytest.fail("the replaced node actor played no game in 97 iterations")
        assert replacements == 1
        assert pool.node_status()[0]["pid"] == replacement
        assert f"node actor 0 replaced (pid {replacement}" in capfd.readouterr().err
    finally:
        pool.close()
        ray.shutdown()


class PerRankBatchNorm(torch.nn.Module):
    """The model run on each rank's slice of the batch separately, outputs concatenated: one
    process doing what DDP's ranks do together (batch norm sees one rank's batch at a time)."""

    def __init__(self, model: torch.nn.Module, ranks: int) -> None:
        super().__init__()
        self.model = model
        self.ranks = ranks

    def forward(self, features: torch.Tensor) -> NetOutput:
        outputs = [self.model(part) for part in features.chunk(self.ranks)]
        policy = type(outputs[0].policy)(*(torch.cat(parts)
                                           for parts in zip(*(out.policy for out in outputs),
                                                            strict=True)))
        return NetOutput(policy, torch.cat([out.value for out in outputs]))


def fresh_learner(optim: OptimConfig) -> Learner:
    torch.manual_seed(0)
    return Learner(PolicyValueNet(net_config("tiny")), optim, "cpu", seed=0)


def parameters(state_or_model) -> dict[str, torch.Tensor]:
    if isinstance(state_or_model, torch.nn.Module):
        return {name: value.detach().clone() for name, value in state_or_model.named_parameters()}
    names = {name for name, _ in PolicyValueNet(net_config("tiny")).named_parameters()}
    return {name: value for name, value in state_or_model.items() if name in names}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[name].float() - b[name].float()).abs().max()) for name in a)


@pytest.mark.slow
def test_ddp_over_gloo_keeps_ranks_identical_and_matches_one_process(two_nodes):
    torch.set_num_threads(1)
    games: list[GameSamples] = []
    search = BatchedSearch(UniformEvaluator(),
                           SearchConfig(simulations=8, node_capacity=64, edge_capacity=1 << 15),
                           num_games=4, seed=1)
    play_games(search, 4, lambda samples, moves, verdict: games.append(samples))
    samples = GameSamples.concatenate(games)
    pool = SampleBatch(samples.positions, samples.label_moves, samples.label_policy,
                       samples.label_offsets, samples.z.astype(np.float32))
    rng = np.random.default_rng(0)
    batches = [[augment_batch(pool.select(rng.integers(0, pool.size, 32)), rng) for _ in range(2)]
               for _ in range(4)]
    optim = OptimConfig(lr=2e-3, schedule="constant", warmup_steps=0)
    config = dataclasses.replace(preset_config("cpu"), optim=optim, train_batch_size=32,
                                 ray=RayConfig(train_world_size=2, train_timeout_s=120))
    ray.init(address=two_nodes.address, log_to_driver=False)
    learner = fresh_learner(optim)
    group = TrainingGroup(config, learner)
    try:
        rank1 = group.ranks[0]
        for ours, theirs in batches:
            step = rank1.step.remote(theirs)
            learner.train_step(ours)
            ray.get(step)
        remote = parameters(ray.get(rank1.state_dict.remote())["model"])
        assert max_difference(parameters(learner.model), remote) == 0.0

        reference = fresh_learner(optim)
        reference.wrap_model(lambda model: PerRankBatchNorm(model, 2))
        alone = fresh_learner(optim)
        for ours, theirs in batches:
            reference.train_step(SampleBatch.concatenate([ours, theirs]))
            alone.train_step(ours)
        distance = max_difference(parameters(learner.model), parameters(reference.model))
        assert distance < 1e-5
        assert max_difference(parameters(learner.model),
                              parameters(alone.model)) > 100 * max(distance, 1e-6)

        # The run's path: each rank samples its own stream from its own copy of the window.
        group.add_games(ray.put(samples))
        window = ReplayBuffer(None, 10_000, seed=5)
        window.add_to_window(samples)
        started = group.start_training(3)
        local = [learner.train_step(augment_batch(SampleBatch(**window.sample(32)),
                                                  learner.rng))["loss"]
                 for _ in range(3)]
        (theirs,) = group.finish_training(started)
        assert theirs["loss"] != pytest.approx(float(np.mean(local)), abs=1e-9)
        remote = parameters(ray.get(rank1.state_dict.remote())["model"])
        assert max_difference(parameters(learner.model), remote) == 0.0
    finally:
        group.close()
        ray.shutdown()


def janitors() -> list[int]:
    """Running `amazons/distributed/_janitor.py` processes, machine-wide (they leave the process
    tree at once): only node actors start them, and only this file's tests start node actors."""
    script = str(Path(node_module.__file__).with_name("_janitor.py"))
    found = []
    for process in psutil.process_iter():
        try:
            if script in process.cmdline() and alive(process.pid):
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_ray_shutdown_leaves_no_process_or_shared_memory(ray_tmpdir, tmp_path):
    if ray.is_initialized():
        ray.shutdown()
    shm_before, processes_before = shm_segments(), set(descendants())
    folders_before = set(Path(tempfile.gettempdir()).glob("amazons-node*"))
    config = apply_overrides(preset_config("cpu"), TINY)
    model = tmp_path / "model.pt"
    torch.manual_seed(0)
    save_model(model, PolicyValueNet(config.net))
    assert connect(None, dataclasses.replace(config.ray, num_cpus=2, object_store_mb=100))
    pool = NodePool(config, last_iteration=1)
    pool.publish_weights(str(model), 0)
    report = pool.play(2, lambda samples, records: None, iteration=1)
    assert report.games == 2
    started = {pid: command for pid, command in descendants().items()
               if pid not in processes_before}
    node_pid = pool.node_status()[0]["pid"]
    pipeline = [child.pid for child in psutil.Process(node_pid).children(recursive=True)]
    assert len(pipeline) >= 2  # the inference server and the self-play actor, at least
    assert node_pid in started and set(pipeline) <= set(started)
    assert shm_segments() - shm_before  # the node's slots exist while it runs
    # and its scratch folder
    assert set(Path(tempfile.gettempdir()).glob("amazons-node*")) - folders_before
    assert len(janitors()) == 1
    with open(f"/proc/{node_pid}/maps") as maps:  # the named semaphores the node holds open
        semaphores = {line.split("/dev/shm/")[1].strip() for line in maps
                      if "/dev/shm/sem." in line}
    assert semaphores  # its actors' result queue
    ray.shutdown()  # without closing the pool: everything must still go
    assert wait_until(lambda: not any(alive(pid) for pid in started), 30), \
        {pid: command for pid, command in started.items() if alive(pid)}
    assert wait_until(lambda: shm_segments() <= shm_before, 30), shm_segments() - shm_before
    assert wait_until(lambda: not any(os.path.exists(f"/dev/shm/{name}") for name in semaphores),
                      30), semaphores
    assert wait_until(lambda: not janitors(), 30)
    assert set(Path(tempfile.gettempdir()).glob("amazons-node*")) <= folders_before


def test_the_node_builds_its_server_evaluator_as_the_main_job_does(tmp_path):
    """The node's factory is `server_evaluator_factory` (the main job's one builder, checked
    against the benchmarks in test_benchmarks.py) on the node's device."""
    from amazons.neural.served import server_evaluator_factory

    for node_gpus, device in ((0.0, "cpu"), (1.0, "cuda")):
        config = dataclasses.replace(preset_config("gpu"), ray=RayConfig(node_gpus=node_gpus))
        factory = node_module.node_evaluator_factory(config, tmp_path / "weights.pt")
        assert factory == server_evaluator_factory(tmp_path / "weights.pt", device,
                                                   config.inference_dtype, config.inference)
        assert factory.max_batch == config.inference.inference_batch_size == 1024


# A small run: the tiny run without its pipeline mode (the command line's preset
# chooses it: the test checks that its async becomes sync), 2 games an iteration, a small Ray.
SMALL = [override for override in TINY if not override.startswith("pipeline.mode=")] + [
    "games_per_iteration=2",
    "ray.num_cpus=2",
    "ray.object_store_mb=100",
]


@pytest.mark.slow
def test_the_command_line_runs_the_cpu_preset_on_a_ray_runtime_it_starts(ray_tmpdir, tmp_path,
                                                                         capsys):
    """`python -m amazons.train --backend ray --preset cpu` without `--address`: the run starts
    a Ray runtime on this machine, plays and trains an iteration of the preset as written (its
    async mode replaced by sync, and the overrides that make it small), and shuts Ray down."""
    run_dir = tmp_path / "run"
    try:
        assert main(["--backend", "ray", "--preset", "cpu", "--run-dir", str(run_dir),
                     "--iterations", "1", "--no-progress", *SMALL]) == 0
        assert not ray.is_initialized()  # the run started Ray, so it shut it down
    finally:
        if ray.is_initialized():
            ray.shutdown()
    out = capsys.readouterr().out
    assert REPLACED in out.splitlines()
    assert "backend ray (sync pipeline), preset cpu" in out
    written = apply_overrides(preset_config("cpu"), SMALL)
    expected = dataclasses.replace(written, iterations=1,  # --iterations
                                   pipeline=dataclasses.replace(written.pipeline, mode="sync"))
    stored = json.loads((run_dir / "config.json").read_text())
    assert stored == json.loads(json.dumps(config_to_dict(expected)))
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in metrics] == [1]
    assert math.isfinite(metrics[0]["train/loss"]) and metrics[0]["ray/nodes_active"] >= 1
    assert len(read_records(run_dir / "games" / "selfplay.txt")) == 2  # replayed move by move
    models = sorted(path.name for path in (run_dir / "models").iterdir())
    assert models == ["model-0000.pt", "model-0001.pt"]
