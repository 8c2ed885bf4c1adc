"""Replay chunks, the replay window, game records, and self-play through the real server."""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import owned_shm_entries
from test_queue_reader import open_pipes, pipe_name

from amazons import engine
from amazons.board import Adjudication, Board, Move
from amazons.core import queue_reader
from amazons.mcts import BatchedSearch, SearchConfig, SearchResult, UniformEvaluator
from amazons.players.records import (
    GameRecord,
    RecordError,
    parse_records,
    read_records,
    write_records,
)
from amazons.serving.server import InferenceConfig, InferenceServer
from amazons.symmetry import INVERSE, transform_moves, transform_positions
from amazons.train.replay import GameSamples, ReplayBuffer, ReplayChunkError, load_chunk, save_chunk
from amazons.train.selfplay import SelfPlayConfig, SelfPlayError, SelfPlayWorkers, play_games

FAST_SEARCH = SearchConfig(simulations=8, leaves_per_game=4, root_noise=True, temperature_moves=56,
                           edge_capacity=1 << 15, node_capacity=64)


def play_uniform_games(count: int, seed: int = 0, adjudicate: bool = False
                       ) -> list[tuple[GameSamples, list[Move], Adjudication | None]]:
    games = []
    search = BatchedSearch(UniformEvaluator(), FAST_SEARCH, num_games=3, seed=seed)
    play_games(search, count,
               lambda samples, moves, verdict: games.append((samples, moves, verdict)),
               adjudicate=adjudicate)
    return games


@pytest.fixture(scope="module")
def finished_games():
    return play_uniform_games(4)


@pytest.fixture(scope="module")
def adjudicated_games():
    return play_uniform_games(12, seed=1, adjudicate=True)


def test_z_is_plus_one_exactly_where_the_side_to_move_went_on_to_win(finished_games,
                                                                      adjudicated_games):
    assert any(verdict is not None for _, _, verdict in adjudicated_games)
    for samples, moves, verdict in finished_games + adjudicated_games:
        board = Board.from_moves(moves)
        if verdict is None:
            assert board.is_game_over()
            winner = board.winner()
        else:  # stopped at the first decided position, with the adjudicated result
            assert not board.is_game_over() and board.adjudicate() == verdict
            assert Board.from_moves(moves[:-1]).adjudicate() is None
            winner = verdict.winner
        replay = Board()
        for index, move in enumerate(moves):
            expected = 1 if replay.turn == winner else -1
            assert samples.z[index] == expected
            np.testing.assert_array_equal(samples.positions[index], replay.canonical_position())
            replay.push(move)


def test_labels_are_legal_canonical_moves_of_their_positions(finished_games):
    samples = GameSamples.concatenate([game[0] for game in finished_games])
    samples.validate()
    for index in range(samples.num_positions):
        legal, _ = engine.legal_moves(samples.positions[index])
        label = samples.label_moves[samples.label_offsets[index] : samples.label_offsets[index + 1]]
        block = slice(samples.label_offsets[index], samples.label_offsets[index + 1])
        uniform = np.allclose(samples.label_policy[block], 1.0 / label.shape[0])
        # The completed-Q target covers every legal move, unvisited ones included; a proven
        # root's target is its proof: uniform over some of them (tests/test_targets.py).
        assert set(map(tuple, label.tolist())) <= set(map(tuple, legal.tolist()))
        assert label.shape[0] == legal.shape[0] or uniform
        proven_at_once = engine.winning_moves(samples.positions[index][None], legal,
                                              np.array([0, legal.shape[0]], np.int64)).any()
        assert samples.label_visits[block].sum() > 0 or proven_at_once
        assert samples.label_policy[block].sum() == pytest.approx(1.0, abs=1e-5)


def test_policy_target_follows_the_config():
    visits_config = SelfPlayConfig(policy_target="visits")
    improved_config = SelfPlayConfig()
    result = SearchResult(
        moves=np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3]], np.int32),
        visits=np.array([2, 1, 1], np.int32),
        q_values=np.array([-0.5, 0.5, 0.0], np.float32), priors=np.full(3, 1 / 3, np.float32),
        move_proofs=np.zeros(3, np.int8), move_proof_plies=np.zeros(3, np.int16), root_value=0.0,
        raw_value=0.0, proven=0, proof_plies=0, principal_variation=np.zeros((0, 3), np.int32),
        num_legal_moves=3)
    np.testing.assert_allclose(visits_config.policy_label(result), [0.5, 0.25, 0.25])
    improved = improved_config.policy_label(result)
    assert improved.argmax() == 1 and improved.argmin() == 0
    with pytest.raises(ValueError, match="policy_target"):
        SelfPlayConfig(policy_target="argmax")


@pytest.mark.parametrize("field, value", [("start_jitter_s", -0.1), ("target_c_scale", -1.0),
                                          ("num_actors", 0), ("nice", -1), ("nice", 20)])
def test_self_play_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        SelfPlayConfig(**{field: value})


def test_chunks_round_trip_and_corrupt_chunks_are_named(tmp_path, finished_games):
    samples = GameSamples.concatenate([game[0] for game in finished_games])
    path = tmp_path / "chunk-00000000.npz"
    save_chunk(path, samples)
    loaded = load_chunk(path)
    for key in ("positions", "label_moves", "label_offsets", "z", "played_moves", "game_offsets"):
        np.testing.assert_array_equal(getattr(loaded, key), getattr(samples, key))
        assert getattr(loaded, key).dtype == getattr(samples, key).dtype
    # Labels stored compactly: float16 probabilities, no visit counts.
    assert loaded.label_visits is None and loaded.label_policy.dtype == np.float32
    np.testing.assert_array_equal(loaded.label_policy,
                                  samples.label_policy.astype(np.float16).astype(np.float32))
    with np.load(path) as archive:
        assert (archive["label_moves"].dtype == np.uint8
                and archive["label_policy"].dtype == np.float16)
    truncated = tmp_path / "chunk-00000001.npz"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ReplayChunkError, match="chunk-00000001.npz"):
        load_chunk(truncated)
    bad = GameSamples.concatenate([game[0] for game in finished_games])
    bad.z[0] = 0
    with pytest.raises(ReplayChunkError, match="z holds"):
        save_chunk(tmp_path / "chunk-00000002.npz", bad)
    unnormalized = GameSamples.concatenate([game[0] for game in finished_games])
    unnormalized.label_policy[0] += 0.5
    with pytest.raises(ReplayChunkError, match="label_policy does not sum to 1"):
        save_chunk(tmp_path / "chunk-00000003.npz", unnormalized)


def test_buffer_persists_skips_corrupt_chunks_and_keeps_a_window(tmp_path, finished_games):
    with ReplayBuffer(tmp_path, window_positions=10_000) as buffer:
        for samples, _, _ in finished_games:
            buffer.add(samples)
            buffer.flush()  # one chunk a game
    (tmp_path / "chunk-00000002.npz").write_bytes(b"not a zip file")
    with ReplayBuffer(tmp_path, window_positions=10_000) as resumed:
        assert len(resumed) == len(buffer) - finished_games[2][0].num_positions
        assert [path for path, _ in resumed.skipped_chunks] == [
            str(tmp_path / "chunk-00000002.npz")]
        assert "unreadable" in resumed.skipped_chunks[0][1]
        resumed.add(finished_games[0][0])
    assert (tmp_path / "chunk-00000004.npz").exists()  # numbering continues after the newest
    with ReplayBuffer(tmp_path, window_positions=finished_games[0][0].num_positions) as small:
        assert len(small) < len(resumed)


def test_sampling_with_augmentation_keeps_labels_on_legal_moves(tmp_path, finished_games):
    from amazons.neural.learner import SampleBatch, augment_batch

    buffer = ReplayBuffer(None, window_positions=10_000, seed=3)
    for samples, _, _ in finished_games:
        buffer.add_to_window(samples)
    raw = SampleBatch(**buffer.sample(64))
    symmetries = np.random.default_rng(0).integers(0, 8, size=64)
    batch = augment_batch(raw, symmetries=symmetries)
    sums = np.add.reduceat(batch.label_probs, batch.label_offsets[:-1])
    np.testing.assert_allclose(sums, 1.0, rtol=1e-5)
    counts = np.diff(batch.label_offsets)
    inverse = INVERSE[symmetries]
    np.testing.assert_array_equal(transform_positions(batch.positions, inverse), raw.positions)
    np.testing.assert_array_equal(transform_moves(batch.label_moves, np.repeat(inverse, counts)),
                                  raw.label_moves)
    for row in range(64):
        legal, _ = engine.legal_moves(batch.positions[row])
        label = batch.label_moves[batch.label_offsets[row] : batch.label_offsets[row + 1]]
        assert {tuple(m) for m in label.tolist()} <= {tuple(m) for m in legal.tolist()}


def test_records_round_trip_and_reject_illegal_moves(tmp_path, finished_games):
    records = [GameRecord.from_game(moves, "a", "b", event="test")
               for _, moves, _ in finished_games]
    path = tmp_path / "games.txt"
    write_records(path, records[:2])
    write_records(path, records[2:], append=True)
    loaded = read_records(path)
    assert [record.moves for record in loaded] == [record.moves for record in records]
    assert [record.headers for record in loaded] == [record.headers for record in records]
    assert all(record.winner == Board.from_moves(record.moves).winner() for record in loaded)
    text = records[0].to_text().splitlines()
    text[7] = "9 9 9 9 9 9"
    with pytest.raises(RecordError, match=":8: '9 9 9 9 9 9'"):
        parse_records("\n".join(text))


def test_selfplay_through_the_server_persists_every_game(tmp_path):
    config = SelfPlayConfig(num_actors=2, games_in_parallel=2, search=FAST_SEARCH,
                            start_jitter_s=0.1)
    buffer = ReplayBuffer(tmp_path / "replay", window_positions=100_000)
    records: list[GameRecord] = []

    def on_games(samples, games):
        buffer.add(GameSamples.concatenate(samples))
        records.extend(games)

    with InferenceServer(UniformEvaluator, num_clients=2,
                         config=InferenceConfig(inference_batch_size=16)) as server:
        with SelfPlayWorkers(server, config) as workers, buffer:
            report = workers.play(5, on_games, iteration=0)
            # the same actors serve a second iteration
            second = workers.play(3, on_games, iteration=1)
    assert report.games == 5 and second.games == 3 and buffer.total_games == 8
    assert report.positions + second.positions == len(buffer) and report.simulations > 0
    parsed = [parse_records(record.to_text())[0] for record in records]
    for record in parsed:
        board = Board.from_moves(record.moves)
        if board.is_game_over():
            assert record.winner == board.winner() and "Termination" not in record.headers
        else:  # ended by adjudication, with the adjudicated winner in its Result
            adjudication = board.adjudicate()
            assert record.winner == adjudication.winner
            assert record.headers["Termination"] == adjudication.describe()
    assert len(ReplayBuffer(tmp_path / "replay", window_positions=100_000)) == len(buffer)


def test_actors_and_their_server_run_at_the_niceness_their_configs_add(tmp_path):
    """The learner's process keeps its niceness; the actors and the server add theirs to it
    (the cpu preset's 10), and still play."""
    config = SelfPlayConfig(num_actors=2, games_in_parallel=2, search=FAST_SEARCH,
                            start_jitter_s=0.1, nice=3)
    own = os.nice(0)
    positions = []
    with InferenceServer(UniformEvaluator, num_clients=2,
                         config=InferenceConfig(inference_batch_size=16, nice=2)) as server:
        with SelfPlayWorkers(server, config) as workers:
            report = workers.play(2, lambda samples, games: positions.extend(samples))
            actors = [os.getpriority(os.PRIO_PROCESS, actor.pid) for actor in workers._actors]
            served_at = os.getpriority(os.PRIO_PROCESS, server.pid)
    assert actors == [min(own + 3, 19)] * 2 and served_at == min(own + 2, 19)
    assert os.nice(0) == own
    assert report.games == 2 and sum(sample.num_positions for sample in positions) > 0


def test_a_killed_selfplay_actor_stops_the_run_with_a_clear_error(tmp_path):
    import os
    import signal
    import threading

    config = SelfPlayConfig(num_actors=2, games_in_parallel=2,
                            search=FAST_SEARCH.replace(simulations=64))
    with InferenceServer(UniformEvaluator, num_clients=2) as server:
        workers = SelfPlayWorkers(server, config)
        victim = workers._actors[1].pid
        threading.Timer(2.0, os.kill, (victim, signal.SIGKILL)).start()
        with pytest.raises(SelfPlayError, match="actor 1"):
            workers.play(200, lambda samples, texts: None)
        assert not any(process.is_alive() for process in workers._actors)
        names = server.slot_names
    assert not any(os.path.exists(f"/dev/shm/{name}") for name in names)


def test_adjudicated_records_carry_the_winner_and_refuse_a_contradiction():
    games = play_uniform_games(12, seed=1, adjudicate=True)
    _, moves, verdict = next(game for game in games if game[2] is not None)
    record = GameRecord.from_game(moves, "a", "b", winner=verdict.winner,
                                  Termination=verdict.describe())
    assert parse_records(record.to_text())[0].winner == verdict.winner
    finished = next(game for game in games if game[2] is None)[1]
    loser = 1 - Board.from_moves(finished).winner()
    with pytest.raises(RecordError, match="contradicts the moves"):
        GameRecord.from_game(finished, "a", "b", winner=loser)


# ----------------------------------------------------------------------------------------------
# Playout cap randomization


def value_only_samples(count: int, share: float, seed: int = 1) -> GameSamples:
    """`count` games whose positions lose their policy target with probability `share` (weight
    0, empty label), as chunks of runs from before playout-cap positions stopped being recorded
    hold them (and a capped game without a full search keeps one, tests/test_targets.py)."""
    search = BatchedSearch(UniformEvaluator(), FAST_SEARCH.replace(solver=False), num_games=3,
                           seed=seed)
    games: list[GameSamples] = []
    play_games(search, count, lambda samples, moves, verdict: games.append(samples))
    samples = GameSamples.concatenate(games)
    stripped = np.random.default_rng(seed).random(samples.num_positions) < share
    entries = np.repeat(stripped, np.diff(samples.label_offsets))
    counts = np.where(stripped, 0, np.diff(samples.label_offsets))
    samples.label_moves, samples.label_visits, samples.label_policy = (
        samples.label_moves[~entries], samples.label_visits[~entries],
        samples.label_policy[~entries])
    samples.label_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    samples.policy_weight = np.where(stripped, 0.0, 1.0).astype(np.float32)
    samples.validate()
    return samples


def test_fast_positions_reach_the_learner_without_labels(tmp_path):
    from amazons.neural.learner import SampleBatch, augment_batch

    samples = value_only_samples(3, 0.5)
    buffer = ReplayBuffer(None, window_positions=10_000, seed=2)
    buffer.add_to_window(samples)
    drawn = buffer.sample(128)
    batch = augment_batch(SampleBatch(**drawn), symmetries=np.arange(128) % 8)
    fast = batch.policy_weight == 0
    assert fast.any() and (~fast).any()
    labels = np.diff(batch.label_offsets)
    assert (labels[fast] == 0).all() and (labels[~fast] > 0).all()
    sums = np.bincount(np.repeat(np.arange(128), labels), weights=batch.label_probs, minlength=128)
    np.testing.assert_allclose(sums[~fast], 1.0, rtol=1e-5)


def test_chunks_of_format_version_1_still_load(tmp_path, finished_games):
    samples = GameSamples.concatenate([game[0] for game in finished_games])
    old = tmp_path / "chunk-00000000.npz"
    np.savez_compressed(old, **{key: getattr(samples, key) for key in (
        "positions", "label_moves", "label_visits", "label_policy", "label_offsets", "z",
        "played_moves", "game_offsets")})
    loaded = load_chunk(old)
    assert loaded.policy_weight.dtype == np.float32 and (loaded.policy_weight == 1).all()
    np.testing.assert_array_equal(loaded.label_moves, samples.label_moves)
    with ReplayBuffer(tmp_path, window_positions=10_000) as buffer:
        assert len(buffer) == samples.num_positions
    capped = value_only_samples(2, 0.5)
    path = tmp_path / "chunk-00000001.npz"
    save_chunk(path, capped)
    np.testing.assert_array_equal(load_chunk(path).policy_weight, capped.policy_weight)
    future = tmp_path / "chunk-00000002.npz"
    arrays = dict(np.load(path))
    arrays["format_version"] = np.array(99)
    np.savez_compressed(future, **arrays)
    with pytest.raises(ReplayChunkError, match="format_version 99"):
        load_chunk(future)
    unlabelled = GameSamples.concatenate([capped])
    unlabelled.policy_weight[np.flatnonzero(np.diff(unlabelled.label_offsets) == 0)[0]] = 1.0
    with pytest.raises(ReplayChunkError, match="empty label"):
        save_chunk(tmp_path / "chunk-00000003.npz", unlabelled)


@pytest.mark.parametrize("changes, field", [
    ({"full_search_prob": 0.0}, "full_search_prob"),
    ({"full_search_prob": 1.5}, "full_search_prob"),
    ({"full_search_prob": 0.5, "fast_simulations": 0}, "fast_simulations"),
    ({"full_search_prob": 0.5, "fast_simulations": 9}, "fast_simulations")])
def test_playout_cap_settings_are_checked(changes, field):
    with pytest.raises(ValueError, match=field):
        SelfPlayConfig(search=FAST_SEARCH, **changes)


def test_selfplay_workers_apply_the_playout_cap(tmp_path):
    config = SelfPlayConfig(num_actors=1, games_in_parallel=2,
                            search=FAST_SEARCH.replace(simulations=12), start_jitter_s=0.0,
                            full_search_prob=0.5, fast_simulations=4)
    collected: list[GameSamples] = []
    with InferenceServer(UniformEvaluator, num_clients=1,
                         config=InferenceConfig(inference_batch_size=16)) as server:
        with SelfPlayWorkers(server, config) as workers:
            report = workers.play(2, lambda samples, records: collected.extend(samples),
                                  iteration=0)
            # The names a Ray node hands its janitor: this session's semaphores of the
            # result queue.
            assert (len(workers.semaphore_names) == 3
                    and set(workers.semaphore_names) <= owned_shm_entries())
    samples = GameSamples.concatenate(collected)
    # Only full searches are recorded (tests/test_targets.py): a share of the plies.
    assert report.full_searches == int((samples.policy_weight == 1).sum()) == samples.num_positions
    assert report.positions == samples.num_positions and 0 < report.positions < report.plies


@contextlib.contextmanager
def quick_actors(games_in_parallel: int) -> Iterator[SelfPlayWorkers]:
    """Two actors searching 2 simulations a move, started at once, on a uniform evaluator's
    server (batches of 16), which stops after the block; the caller closes the actors."""
    config = SelfPlayConfig(num_actors=2, games_in_parallel=games_in_parallel,
                            search=FAST_SEARCH.replace(simulations=2), start_jitter_s=0.0)
    with InferenceServer(UniformEvaluator, num_clients=2,
                         config=InferenceConfig(inference_batch_size=16)) as server:
        yield SelfPlayWorkers(server, config)


def test_close_does_not_wait_on_actors_holding_games_nobody_collected():
    """Ctrl-C or SIGTERM in the main job closes endless actors whose finished games were never
    collected; their result queue's pipe is full, so an actor can only exit once they are read.
    Before `close` read them, each actor waited out the join timeout: 12 actors on a GPU took
    over 6 minutes."""
    with quick_actors(games_in_parallel=4) as workers:
        try:
            workers.start(stream=0)
            workers.collect(60.0)  # the actors are playing
            time.sleep(3.0)  # tens of games queue up unread, more than the pipe holds
            assert all(process.is_alive() for process in workers._actors)
            started = time.monotonic()
            workers.close(timeout=20.0)
            seconds = time.monotonic() - started
        finally:
            workers.terminate()
        assert not any(process.is_alive() for process in workers._actors)
        assert all(process.exitcode == 0 for process in workers._actors), [
            p.exitcode for p in workers._actors]
        assert seconds < 10.0, f"close took {seconds:.1f} s"


def test_an_interrupt_inside_close_still_ends_every_actor(monkeypatch):
    """A second Ctrl-C while `close` waits must not leave actors alive: multiprocessing joins a
    process's children when it exits, and an actor stuck flushing its results would hold the
    main job's exit for ever (seen when a stopped run was interrupted again)."""
    with quick_actors(games_in_parallel=4) as workers:
        workers.start(stream=0)
        workers.collect(60.0)
        time.sleep(2.0)  # games queue up unread

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        # the Ctrl-C reaches close while it waits
        monkeypatch.setattr(queue_reader, "wait", interrupted)
        with pytest.raises(KeyboardInterrupt):
            workers.close(timeout=20.0)
        assert not any(process.is_alive() for process in workers._actors)


def test_close_returns_when_an_actor_died_halfway_through_writing_a_result():
    """An actor killed while its queue's feeder thread writes a result (SIGTERM to the whole
    process group) leaves part of a message in the pipe; this process holds the pipe's write end
    too, so a read of it never ends. `close` must still return (it hung an ablation's arm), and
    the stopped actors, which cannot act on SIGTERM, are killed and reaped, not left behind."""
    with quick_actors(games_in_parallel=2) as workers:
        try:
            workers.start(stream=0)
            workers.collect(60.0)
            # What a writer killed mid-message leaves: a length header promising bytes that never
            # come, the actors alive but silent, as they are in their last instant (the write lock
            # taken first, so that no actor is stopped in the middle of a write of its own).
            # An actor's feeder holds the write lock while it waits for room in a full pipe: keep
            # reading until the lock is free, or the test would wait on the actor waiting on it.
            while not workers._results._wlock.acquire(timeout=0.05):
                workers.collect(0.0)
            try:
                for process in workers._actors:
                    os.kill(process.pid, signal.SIGSTOP)
                os.write(workers._results._writer.fileno(),
                         struct.pack("!i", 1 << 20) + b"partial")
            finally:
                workers._results._wlock.release()
            closer = threading.Thread(target=workers.close, kwargs={"timeout": 1.0},
                                      daemon=True)
            started = time.monotonic()
            closer.start()
            closer.join(40.0)
            assert not closer.is_alive(), "close hung on the partial message"
            assert time.monotonic() - started < 30.0
            assert [process.exitcode for process in workers._actors] == [-signal.SIGKILL] * 2
        finally:
            for process in workers._actors:
                process.kill()
                process.join(10)


def test_close_closes_the_result_queue_and_the_task_pipes():
    """`close` leaves no end of the actors' result queue or task pipes open in this process
    (the queue's stayed open for as long as the workers object lived)."""
    with quick_actors(games_in_parallel=2) as workers:
        try:
            owned = {pipe_name(workers._results._reader.fileno()),
                     *(pipe_name(tasks.fileno()) for tasks in workers._tasks)}
            report = workers.play(2, lambda samples, games: None)
            assert owned <= open_pipes()
        finally:
            workers.close(timeout=20.0)
        left = owned & open_pipes()
        workers.close(timeout=20.0)  # again: nothing more
    assert report.games == 2
    assert not left, f"pipes left open after close: {sorted(left)}"


def test_an_actor_message_that_does_not_unpickle_stops_the_run_with_a_self_play_error():
    config = SelfPlayConfig(num_actors=1, games_in_parallel=2, search=FAST_SEARCH)
    with InferenceServer(UniformEvaluator, num_clients=1) as server:
        workers = SelfPlayWorkers(server, config)
        try:
            os.write(workers._results._writer.fileno(), struct.pack("!i", 12) + b"not a pickle")
            with pytest.raises(SelfPlayError, match="message cannot be read.*does not unpickle"):
                workers.collect(10.0)
            assert not any(process.is_alive() for process in workers._actors)
        finally:
            workers.close(timeout=10.0)


def reference_sample(chunks: list[GameSamples], rng: np.random.Generator,
                     batch_size: int) -> dict[str, np.ndarray]:
    """`ReplayBuffer.sample` as it was before the window lived in flat arrays: one Python step
    per sample over the window's chunks. The obviously-correct reference for the gather."""
    sizes = np.array([chunk.num_positions for chunk in chunks])
    ends = np.cumsum(sizes)
    picks = rng.integers(0, ends[-1], size=batch_size)
    chunk_of = np.searchsorted(ends, picks, side="right")
    within = picks - (ends - sizes)[chunk_of]
    positions = np.empty((batch_size, 3), dtype=np.uint64)
    z = np.empty(batch_size, dtype=np.float32)
    policy_weight = np.empty(batch_size, dtype=np.float32)
    ownership = np.empty((batch_size, 64), dtype=np.int8)
    ownership_mask = np.empty((batch_size, 64), dtype=np.bool_)
    label_parts, policy_parts, counts = [], [], np.empty(batch_size, dtype=np.int64)
    for row, (chunk_index, index) in enumerate(zip(chunk_of.tolist(), within.tolist(),
                                                   strict=True)):
        chunk = chunks[chunk_index]
        start, stop = chunk.label_offsets[index], chunk.label_offsets[index + 1]
        positions[row] = chunk.positions[index]
        (ownership[row],), (ownership_mask[row],) = chunk.ownership_targets(np.array([index]))
        z[row] = chunk.z[index]
        policy_weight[row] = chunk.policy_weight[index]
        label_parts.append(chunk.label_moves[start:stop])
        policy_parts.append(chunk.label_policy[start:stop])
        counts[row] = stop - start
    policy = np.concatenate(policy_parts).astype(np.float64)
    label_offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts)])
    totals = np.bincount(np.repeat(np.arange(batch_size), counts), weights=policy,
                         minlength=batch_size)
    return {
        "positions": positions,
        "label_moves": np.concatenate(label_parts),
        "label_probs": (policy / np.repeat(totals, counts)).astype(np.float32),
        "label_offsets": label_offsets,
        "z": z,
        "policy_weight": policy_weight,
        "ownership": ownership,
        "ownership_mask": ownership_mask,
    }


def test_vectorized_sampling_draws_exactly_the_per_sample_batches(tmp_path, finished_games):
    from amazons.neural.learner import SampleBatch, augment_batch

    capped = value_only_samples(4, 0.5, seed=3)  # value-only samples: empty labels in the window
    parts = [samples for samples, _, _ in finished_games] + [capped]
    old_format = tmp_path / "old"  # a version 1 chunk (no policy_weight) loads into the window too
    old_format.mkdir()
    np.savez_compressed(old_format / "chunk-00000000.npz", **{
        key: getattr(parts[0], key) for key in (
            "positions", "label_moves", "label_visits", "label_policy", "label_offsets", "z",
            "played_moves", "game_offsets")})
    # A window small enough that adding chunks evicts old ones and moves the flat arrays around.
    window = 2 * max(part.num_positions for part in parts)
    buffer = ReplayBuffer(old_format, window_positions=window, seed=5)
    buffer.close()  # only its window is used
    learner_rng, reference_rng = np.random.default_rng(9), np.random.default_rng(9)
    for round_index in range(40):
        buffer.add_to_window(parts[round_index % len(parts)])
        chunks = list(buffer.window)
        assert sum(chunk.num_positions for chunk in chunks) == len(buffer)
        drawing = np.random.default_rng()
        drawing.bit_generator.state = buffer.rng.bit_generator.state
        expected = reference_sample(chunks, drawing, 96)
        drawn = buffer.sample(96)
        assert drawn.keys() == expected.keys()
        for key, value in expected.items():
            assert drawn[key].dtype == value.dtype, key
            np.testing.assert_array_equal(drawn[key], value, err_msg=key)
        batch = augment_batch(SampleBatch(**drawn), learner_rng)
        reference = augment_batch(SampleBatch(**expected), reference_rng)
        for key in ("positions", "label_moves", "label_probs", "label_offsets", "z",
                    "policy_weight", "ownership", "ownership_mask"):
            np.testing.assert_array_equal(getattr(batch, key), getattr(reference, key), err_msg=key)
    assert buffer.total_games > len(buffer.window)  # old chunks were evicted on the way
    # The window's chunks come back whole (the Ray backend copies them to its training ranks),
    # with float16 probabilities and no visit counts.
    held = buffer.window
    for index, chunk in enumerate(held):
        added = parts[(40 - len(held) + index) % len(parts)]
        chunk.validate()
        assert chunk.label_visits is None
        np.testing.assert_array_equal(chunk.label_policy,
                                      added.label_policy.astype(np.float16).astype(np.float32))
        for key in ("positions", "label_moves", "label_offsets", "z", "played_moves",
                    "game_offsets", "policy_weight", "ownership", "ownership_mask",
                    "ownership_sign"):
            np.testing.assert_array_equal(getattr(chunk, key), getattr(added, key), err_msg=key)
            assert getattr(chunk, key).dtype == getattr(added, key).dtype, key


def test_endless_actors_play_on_pause_resume_and_stop(tmp_path):
    from inference_actors import VersionedUniformEvaluator

    config = SelfPlayConfig(num_actors=2, games_in_parallel=3, search=FAST_SEARCH,
                            start_jitter_s=0.0)
    collected: list = []

    def collect_until(workers, count: int) -> None:
        deadline = time.monotonic() + 120
        while len(collected) < count:
            assert time.monotonic() < deadline, f"only {len(collected)} games"
            collected.extend(workers.collect(0.5))

    with InferenceServer(VersionedUniformEvaluator, num_clients=2,
                         config=InferenceConfig(inference_batch_size=24)) as server:
        with SelfPlayWorkers(server, config) as workers:
            workers.start(stream=1)
            collect_until(workers, 4)
            server.publish_weights(str(tmp_path / "weights-7.pt"), 7)
            # More games than the lanes hold: lanes refilled as their games ended.
            collect_until(workers, 2 * 3 * 2 + 2)
            workers.pause()
            time.sleep(1.0)
            workers.collect(0.5)  # games finished in the round each actor was playing
            assert workers.collect(1.0) == []  # then nothing: the actors hold still
            assert workers.paused and workers.paused_seconds >= 1.5
            workers.resume()
            held = len(collected)
            collect_until(workers, held + 2)
            late: list = []
            workers.stop(on_games=late.extend)
            assert not workers.paused
            # The actors take a per-iteration task after the endless one.
            report = workers.play(2, lambda samples, records: None, iteration=3)
            # Finishing plays out every game in progress: each of the 2 x 3 lanes hands one in.
            workers.start(stream=4)
            workers.pause()
            played_out: list = []
            workers.finish(on_games=played_out.extend)
            assert not workers.paused
    assert report.games == 2
    assert len(played_out) >= 2 * 3
    for game in played_out:
        game.samples.validate()
        board = Board.from_moves(game.record.moves)
        assert board.is_game_over() or board.adjudicate() is not None
    for game in collected + late:
        game.samples.validate()
        assert game.versions.shape == (game.samples.num_positions,)
        assert (np.diff(game.versions) >= 0).all()
        assert game.record.headers["Weights"] == str(game.versions[-1])
    assert {game.actor_id for game in collected} == {0, 1}
    assert collected[-1].versions[-1] == 7 and collected[0].versions[0] == 0
    assert collected[-1].simulations > 0 and collected[-1].leaves_evaluated > 0


# ----------------------------------------------------------------------------------------------
# The writer thread and the compact window


def test_the_writer_batches_games_into_chunks_and_resume_reads_old_and_new_chunks(
        tmp_path, finished_games):
    games = [samples for samples, _, _ in finished_games]
    # a one-game chunk as older runs wrote them
    save_chunk(tmp_path / "chunk-00000000.npz", games[0])
    written: list[list] = []
    with ReplayBuffer(tmp_path, window_positions=10_000, chunk_games=3, chunk_seconds=60.0,
                      on_written=written.append) as buffer:
        assert buffer.next_game == 1
        for index in range(7):
            buffer.add(games[index % len(games)], records=[f"game {index}"])
        deadline = time.monotonic() + 10
        while len(written) < 2:  # two chunks of three; the seventh game waits for more
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)
        assert len(written) == 2 and buffer._writer.pending_games == 1
    # close wrote the seventh alone; the records came with their chunks
    assert written == [["game 0", "game 1", "game 2"], ["game 3", "game 4", "game 5"], ["game 6"]]
    chunks = sorted(tmp_path.glob("chunk-*.npz"))
    assert [load_chunk(path).num_games for path in chunks] == [1, 3, 3, 1]
    assert [int(np.load(path)["first_game"]) for path in chunks[1:]] == [1, 4, 7]
    with ReplayBuffer(tmp_path, window_positions=10_000) as resumed:
        assert resumed.next_game == 8 and resumed.total_games == 8
        assert len(resumed) == len(buffer) == sum(load_chunk(path).num_positions for path in chunks)
        since = resumed.games_since(5)
        # serials 5 to 7
        expected = GameSamples.concatenate([games[index % len(games)] for index in (4, 5, 6)])
        for key in ("positions", "label_moves", "label_offsets", "z", "game_offsets",
                    "ownership_sign"):
            np.testing.assert_array_equal(getattr(since, key), getattr(expected, key), err_msg=key)
        # the old chunk: no serial
        assert resumed.games_since(8) is None and resumed.games_since(0).num_games == 7
    chunks[-1].write_bytes(b"truncated")  # an unreadable chunk is skipped, as the window skips it
    with ReplayBuffer(tmp_path, window_positions=10_000) as damaged:
        assert damaged.games_since(5).num_games == 2 and len(damaged.skipped_chunks) == 1


def test_the_writer_writes_an_old_batch_after_chunk_seconds(tmp_path, finished_games):
    with ReplayBuffer(tmp_path, window_positions=10_000, chunk_games=100,
                      chunk_seconds=0.3) as buffer:
        buffer.add(finished_games[0][0])
        assert not list(tmp_path.glob("chunk-*.npz"))
        deadline = time.monotonic() + 10
        while not list(tmp_path.glob("chunk-*.npz")):
            assert time.monotonic() < deadline, "the batch was not written after chunk_seconds"
            time.sleep(0.05)


def test_a_writer_failure_is_raised_in_the_callers_thread_naming_the_chunk(tmp_path,
                                                                            finished_games):
    from amazons.train.replay import ReplayWriteError

    broken = GameSamples.concatenate([finished_games[0][0]])
    broken.z[0] = 0
    buffer = ReplayBuffer(tmp_path, window_positions=10_000, chunk_games=1)
    buffer.add(broken)
    with pytest.raises(ReplayWriteError, match=r"chunk-00000000\.npz.*z holds") as caught:
        buffer.flush()
    assert isinstance(caught.value.__cause__, ReplayChunkError)
    with pytest.raises(ReplayWriteError, match="chunk-00000000.npz"):
        buffer.add(finished_games[1][0])
    with pytest.raises(ReplayWriteError):
        buffer.close()
    assert not list(tmp_path.glob("*"))  # nothing half-written


def test_the_window_stores_labels_compactly_and_measures_its_bytes(finished_games):
    games = [samples for samples, _, _ in finished_games]
    buffer = ReplayBuffer(None, window_positions=10_000, seed=4)
    for samples in games:
        buffer.add_to_window(samples)
    positions = sum(samples.num_positions for samples in games)
    entries = sum(samples.label_moves.shape[0] for samples in games)
    # A label entry: 3 uint8 squares and a float16 probability. A position: its (3,) uint64 words,
    # z (int8), policy weight (float32), the move played (3 x uint8), label start (int64) and
    # count (int32), ownership sign (int8), game row (int64), sample weight (float16) and the
    # running total of the weights (float64). A game: 64 int8 owners, 64 mask bytes.
    expected = (positions * (24 + 1 + 4 + 3 + 8 + 4 + 1 + 8 + 2 + 8) + entries * (3 + 2)
                + len(games) * 128) / positions
    assert buffer.bytes_per_position == pytest.approx(expected)
    assert buffer.nbytes >= buffer.bytes_per_position * positions
    # The learner's samples: those of the full-precision games (the per-sample reference on the
    # same draws), the probabilities within float16 rounding.
    drawing = np.random.default_rng()
    drawing.bit_generator.state = buffer.rng.bit_generator.state
    expected = reference_sample(games, drawing, 256)
    drawn = buffer.sample(256)
    assert drawn["label_moves"].dtype == np.int32 and drawn["label_probs"].dtype == np.float32
    for key, value in expected.items():
        assert drawn[key].dtype == value.dtype, key
        if key == "label_probs":
            np.testing.assert_allclose(drawn[key], value, rtol=2 ** -10, atol=1e-7)
            assert not np.array_equal(drawn[key], value)  # the window did round them
        else:
            np.testing.assert_array_equal(drawn[key], value, err_msg=key)
