"""The N-to-1 shared-memory inference server, with real processes and real shared memory."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from functools import partial

import numpy as np
import psutil
import pytest
from inference_actors import (
    SlowFlatWeightsEchoEvaluator,
    VersionedEchoEvaluator,
    echo_actor,
    echo_outputs,
    looping_actor,
    make_echo_evaluator,
    random_leaves,
    uneven_actor,
)

from amazons import engine
from amazons.serving.server import InferenceClient, InferenceConfig, InferenceError, InferenceServer

SPAWN = mp.get_context("spawn")


def test_the_servers_backend_runs_checkpoints_and_a_wrong_name_is_refused_with_what_to_write():
    for backend in ("auto", "torch", "native"):
        assert InferenceConfig(backend=backend).backend == backend
    with pytest.raises(ValueError, match="'numpy' runs exported models .*'torch' or 'native'"):
        InferenceConfig(backend="numpy")  # the server runs the run's checkpoints
    with pytest.raises(ValueError, match="one of auto, torch, native, numpy, got 'fast'"):
        InferenceConfig(backend="fast")


@pytest.mark.parametrize("nice", [-1, 20])
def test_a_niceness_outside_0_to_19_is_refused(nice):
    with pytest.raises(ValueError, match=f"nice must be in 0..19, got {nice}"):
        InferenceConfig(nice=nice)


def shm_exists(name: str) -> bool:
    return os.path.exists(f"/dev/shm/{name.lstrip('/')}")


def run_actors(server: InferenceServer, requests: list[int], timeout: float = 120.0) -> list[tuple]:
    results = SPAWN.Queue()
    actors = [server.start_actor(i, echo_actor, (count, 1000 + i, results))
              for i, count in enumerate(requests)]
    reports = [results.get(timeout=timeout) for _ in actors]
    for actor in actors:
        actor.join(timeout)
    return sorted(reports)


def test_every_actor_gets_exactly_its_own_rows():
    config = InferenceConfig(inference_batch_size=64, flush_deadline_ms=2.0, slot_rows=16,
                             slot_moves=20000)
    with InferenceServer(make_echo_evaluator, num_clients=4, config=config) as server:
        reports = run_actors(server, [12, 12, 12, 12])
        stats = server.stop()
    assert [report[1] for report in reports] == [0, 0, 0, 0], reports
    assert all(report[2] > 0 for report in reports)
    # Several actors' rows shared batches: the server batched across clients.
    assert stats["batches"] < sum(report[2] for report in reports)


def test_one_actor_with_a_large_batch_does_not_wait_for_the_deadline():
    config = InferenceConfig(inference_batch_size=256, flush_deadline_ms=60_000)
    with InferenceServer(make_echo_evaluator, num_clients=1, config=config) as server:
        client = InferenceClient(server.handle(0))
        positions = random_leaves(np.random.default_rng(0), 3)
        moves, offsets = engine.legal_moves(positions)
        started = time.perf_counter()
        priors, values = client.evaluate(positions, moves, offsets)
        elapsed = time.perf_counter() - started
        client.close()
    expected_priors, expected_values = echo_outputs(positions, moves, offsets)
    np.testing.assert_array_equal(priors, expected_priors)
    np.testing.assert_array_equal(values, expected_values)
    assert elapsed < 30, "served only after the 60 s deadline: the 'everyone waiting' flush failed"


def test_actors_that_finish_unevenly_do_not_deadlock():
    config = InferenceConfig(inference_batch_size=256, flush_deadline_ms=60_000, slot_rows=64)
    with InferenceServer(make_echo_evaluator, num_clients=3, config=config) as server:
        reports = run_actors(server, [1, 4, 9], timeout=60)
    assert [report[1] for report in reports] == [0, 0, 0]


@pytest.mark.parametrize("deadline_ms", [3.0, 60_000.0], ids=["deadline", "no-deadline"])
def test_many_uneven_actors_share_batches_and_get_their_own_rows(deadline_ms):
    # Ten actors: some sleep between requests, request sizes run from 1 row to more than a whole
    # batch, and they finish at different times. Batches merge actors, split requests that do
    # not fit, never exceed the batch size, and (even with a deadline that never expires, where
    # only full batches and "everyone is waiting" can flush) nobody waits forever.
    config = InferenceConfig(inference_batch_size=48, flush_deadline_ms=deadline_ms, slot_rows=128,
                             slot_moves=128 * engine.MAX_MOVES)
    plans = [(6 + 2 * index, 100 if index % 3 == 0 else 12, 0.05 if index % 2 else 0.0)
             for index in range(10)]
    results = SPAWN.Queue()
    with InferenceServer(make_echo_evaluator, num_clients=len(plans), config=config) as server:
        actors = [server.start_actor(index, uneven_actor,
                                     (requests, 500 + index, max_rows, pause_s, results))
                  for index, (requests, max_rows, pause_s) in enumerate(plans)]
        reports = sorted(results.get(timeout=120) for _ in actors)
        for actor in actors:
            actor.join(30)
        stats = server.stop()
    assert ([report[:2] for report in reports]
            == [(index, 0) for index in range(len(plans))]), reports
    assert stats["rows"] == sum(report[2] for report in reports)
    assert stats["max_batch_rows"] <= config.inference_batch_size
    assert stats["split_requests"] > 0
    # Merged across actors: always without a deadline (only full batches and "everyone waiting"
    # flush); with one, at least some batches (how many depends on the machine's timing).
    assert stats["mean_requests_per_batch"] > (1.5 if deadline_ms > 1000 else 1.0)


def test_published_weights_are_acknowledged_and_never_split_a_reply(tmp_path):
    config = InferenceConfig(inference_batch_size=8, flush_deadline_ms=1.0, slot_rows=64)
    results = SPAWN.Queue()
    with InferenceServer(VersionedEchoEvaluator, num_clients=3, config=config) as server:
        actors = [server.start_actor(index, uneven_actor, (40, 700 + index, 30, 0.01, results))
                  for index in range(3)]
        reports, version, deadline = [], 0, time.monotonic() + 120
        while len(reports) < len(actors) and time.monotonic() < deadline:
            version += 1  # new weights every 20 ms while the actors run
            server.publish_weights(str(tmp_path / f"weights-{version}.pt"), version)
            try:
                reports.append(results.get(timeout=0.02))
            except queue.Empty:
                pass
        for actor in actors:
            actor.join(30)
        while server.loaded_version != version and time.monotonic() < deadline:
            server.check()
            time.sleep(0.01)
        assert server.loaded_version == version
        stats = server.stop()
    reports.sort()
    # Every value matched the echo plus the version its reply named: no reply mixed two weights,
    # although requests were split across batches while new weights kept arriving.
    assert [report[1] for report in reports] == [0, 0, 0]
    assert stats["split_requests"] > 0
    assert len(set().union(*(report[3] for report in reports))) > 1


def test_shared_weights_reach_the_evaluator_and_are_never_overwritten_while_it_loads():
    def fill(value: float):
        return lambda weights: weights.__setitem__(slice(None), value)

    with InferenceServer(SlowFlatWeightsEchoEvaluator, num_clients=1) as server:
        client = InferenceClient(server.handle(0))
        positions = random_leaves(np.random.default_rng(4), 5)
        moves, offsets = engine.legal_moves(positions)
        assert server.shared_weights_ready()  # nothing published yet
        server.publish_shared_weights(4, fill(7.0), version=7)
        assert not server.shared_weights_ready()  # the server takes 0.5 s to load it
        with pytest.raises(InferenceError, match="version 7 is still being loaded"):
            server.publish_shared_weights(4, fill(8.0), version=8)
        deadline = time.monotonic() + 60
        while not server.shared_weights_ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.loaded_version == 7
        priors, values = client.evaluate(positions, moves, offsets)
        assert client.weights_version == 7
        np.testing.assert_array_equal(values,
                                      echo_outputs(positions, moves, offsets)[1] + np.float32(7.0))
        with pytest.raises(ValueError, match="5 floats after 4"):
            server.publish_shared_weights(5, fill(9.0), version=9)
        segment = server._weights_memory.name
        assert shm_exists(segment)
        client.close()
        stats = server.stop()
    assert not shm_exists(segment)  # the owner unlinked the weights segment with the slots
    assert stats["weights_loads"] == 1 and stats["weights_load_seconds"] >= 0.5


def test_requests_larger_than_the_slot_are_split():
    config = InferenceConfig(inference_batch_size=8, slot_rows=5, slot_moves=engine.MAX_MOVES)
    with InferenceServer(make_echo_evaluator, num_clients=1, config=config) as server:
        client = InferenceClient(server.handle(0))
        positions = random_leaves(np.random.default_rng(3), 23)
        moves, offsets = engine.legal_moves(positions)
        priors, values = client.evaluate(positions, moves, offsets)
        slot_trips = -(-moves.shape[0] // engine.MAX_MOVES)  # ceil: moves per trip are bounded
        assert client.round_trips >= max(5, slot_trips)  # and so are rows (5 per trip)
        client.close()
    expected_priors, expected_values = echo_outputs(positions, moves, offsets)
    np.testing.assert_array_equal(priors, expected_priors)
    np.testing.assert_array_equal(values, expected_values)


def test_a_killed_actor_stops_everything_and_leaves_no_shared_memory():
    server = InferenceServer(make_echo_evaluator, num_clients=3)
    server.start()
    names = server.slot_names
    results = SPAWN.Queue()
    actors = [server.start_actor(i, looping_actor, (results,)) for i in range(3)]
    time.sleep(1.0)
    os.kill(actors[0].pid, signal.SIGKILL)
    reports = [results.get(timeout=30) for _ in range(2)]
    assert sorted(report[0] for report in reports) == [1, 2]
    assert all(report[1] == "error" and "server" in report[2] for report in reports)
    with pytest.raises(InferenceError, match="actor 0 disconnected"):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            server.check()
            time.sleep(0.05)
    server.stop()
    for actor in actors:
        actor.join(10)
        assert not actor.is_alive()
    assert not any(shm_exists(name) for name in names)


STOP_TIMEOUT_S = 2.0
STOP_SLACK_S = 2.0  # the kill and the reaping of a stopped process, on a loaded machine


def test_stop_ends_a_server_that_does_not_answer_within_its_timeout_and_unlinks_its_slots():
    """`stop(timeout)` gives the server the whole timeout, and no more: before, it waited it
    three times over (for the statistics, for the exit, then from SIGTERM to SIGKILL)."""
    server = InferenceServer(make_echo_evaluator, num_clients=1)
    server.start()
    names = server.slot_names
    process = psutil.Process(server.pid)  # its pid and start time: a reused pid is not it
    os.kill(server.pid, signal.SIGSTOP)  # neither answers the stop request nor acts on SIGTERM
    started = time.monotonic()
    server.stop(timeout=STOP_TIMEOUT_S)
    seconds = time.monotonic() - started
    assert STOP_TIMEOUT_S <= seconds < STOP_TIMEOUT_S + STOP_SLACK_S, f"stop took {seconds:.2f} s"
    assert not process.is_running()  # killed and reaped
    assert not any(shm_exists(name) for name in names)


def test_an_interrupt_while_stop_waits_still_ends_the_server_and_unlinks_its_slots():
    """A second Ctrl-C reaching `stop` while it waits for a server that does not answer."""
    server = InferenceServer(make_echo_evaluator, num_clients=2)
    server.start()
    names = server.slot_names
    process = psutil.Process(server.pid)
    os.kill(server.pid, signal.SIGSTOP)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    try:
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            server.stop(timeout=30.0)
        left = [name for name in names if shm_exists(name)]
        running = process.is_running()
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, previous)
        server.stop(timeout=1.0)  # what a stop that left them behind left
    assert left == [], f"segments left after the interrupt: {left}"
    assert not running, "the stopped server outlived the interrupted stop"


def test_server_start_failure_is_reported_and_cleaned_up():
    server = InferenceServer(partial(_raise_missing, "/nonexistent/model.pt"), num_clients=2)
    with pytest.raises(InferenceError, match="no such checkpoint"):
        server.start()
    assert server.slot_names == []


def test_a_server_process_that_cannot_be_launched_raises_the_launch_error_and_leaves_nothing():
    unpicklable = lambda: None  # noqa: E731  (spawn must pickle the factory: the launch fails)
    server = InferenceServer(unpicklable, num_clients=2)
    started = time.monotonic()
    with pytest.raises(Exception, match="pickle") as raised:
        server.start()
    assert not isinstance(raised.value, AssertionError)  # the launch's own error, not stop()'s
    assert time.monotonic() - started < 5  # no wait for a server that never started
    assert server.slot_names == []
    server.stop()  # stopping again is harmless


def _raise_missing(path: str):
    raise FileNotFoundError(f"no such checkpoint: {path}")
