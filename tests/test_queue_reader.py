"""`amazons._queue_reader.QueueReader`: a queue's messages from its pipe's raw bytes, never
waiting for the rest of a message cut short (the arena and self-play read their workers' results
so)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from amazons._queue_reader import QueueReader

CONTEXT = mp.get_context("spawn")


def frame(message: object) -> bytes:
    """A message as `Queue.put` writes it: a big-endian length, then the pickle."""
    data = pickle.dumps(message)
    return struct.pack("!i", len(data)) + data


@contextlib.contextmanager
def open_queue() -> Iterator[Any]:
    """A queue, closed after the test (a local, not a fixture: the session's check of /dev/shm
    runs while the last test's fixture values are still held, and a live queue holds its
    semaphores)."""
    channel = CONTEXT.Queue()
    try:
        yield channel
    finally:
        channel.close()


def test_messages_put_by_another_process_arrive_whole_and_in_order():
    messages = [(index, "x" * (1000 * index), None) for index in range(5)]
    with open_queue() as results:
        writer = CONTEXT.Process(target=_put_all, args=(results, messages))
        writer.start()
        reader, received = QueueReader(results), []
        deadline = time.monotonic() + 60
        while len(received) < len(messages) and time.monotonic() < deadline:
            received += reader.receive(0.5)
        writer.join(60)
    assert received == messages


def _put_all(channel, messages) -> None:
    for message in messages:
        channel.put(message)


def test_a_message_cut_short_is_kept_without_waiting_and_completed_by_its_rest():
    data = frame(("first", 1)) + frame(("second", 2))
    cut = len(frame(("first", 1))) + 7  # the first message, the second's header and 3 bytes
    with open_queue() as results:
        reader = QueueReader(results)
        os.write(results._writer.fileno(), data[:cut])
        assert reader.receive(1.0) == [("first", 1)]
        started = time.monotonic()
        assert reader.receive(0.2) == []  # the rest is not there: no waiting for it
        assert time.monotonic() - started < 30
        os.write(results._writer.fileno(), data[cut:])
        assert reader.receive(1.0) == [("second", 2)]


def test_a_length_no_message_has_is_refused():
    with open_queue() as results:
        os.write(results._writer.fileno(), struct.pack("!i", -5) + b"abc")
        with pytest.raises(ValueError, match="message length of -5 bytes"):
            QueueReader(results).receive(1.0)


def test_discard_drops_the_bytes_and_refuses_reading_afterwards():
    with open_queue() as results:
        reader = QueueReader(results)
        os.write(results._writer.fileno(), frame("kept") + struct.pack("!i", 1 << 20) + b"partial")
        reader.discard(1.0)
    with pytest.raises(RuntimeError, match="discarded"):
        reader.receive(0.0)
