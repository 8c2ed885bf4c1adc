"""`amazons.core.queue_reader.QueueReader`: a queue's messages from its pipe's raw bytes, never
waiting for the rest of a message cut short (the arena and self-play read their workers' results
so), a message that does not unpickle raised in its turn without losing the others."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import operator
import os
import pickle
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from amazons.core.queue_reader import QueueMessageError, QueueReader

CONTEXT = mp.get_context("spawn")
RECEIVE_TIMEOUT_S = 0.5
RECEIVE_LATE_S = 3 * RECEIVE_TIMEOUT_S  # how late a wait may return on a loaded machine


def frame(message: object) -> bytes:
    """A message as `Queue.put` writes it: a big-endian length, then the pickle."""
    return raw_frame(pickle.dumps(message))


def raw_frame(data: bytes) -> bytes:
    """`data` as `Queue.put` frames a pickle of that many bytes."""
    return struct.pack("!i", len(data)) + data


def long_frame(message: object) -> bytes:
    """A message as `multiprocessing.connection` frames one over 2 GiB: a length of -1, then the
    length in 8 bytes (the reader takes the form for any size)."""
    data = pickle.dumps(message)
    return struct.pack("!i", -1) + struct.pack("!Q", len(data)) + data


def open_pipes() -> set[str]:
    """The pipes this process holds open, as `/proc/self/fd` names them (`pipe:[inode]`)."""
    names = set()
    for entry in os.scandir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the descriptor scandir itself held, closed since
            names.add(os.readlink(entry.path))
    return {name for name in names if name.startswith("pipe:")}


def pipe_name(fd: int) -> str:
    """The `/proc/self/fd` name of the pipe `fd` is an end of."""
    return f"pipe:[{os.fstat(fd).st_ino}]"


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
        assert reader.receive(RECEIVE_TIMEOUT_S) == []  # the rest is not there: no waiting for it
        seconds = time.monotonic() - started
        # the whole timeout for the rest, and no more: never the wait for a message's end
        assert RECEIVE_TIMEOUT_S <= seconds < RECEIVE_TIMEOUT_S + RECEIVE_LATE_S, seconds
        os.write(results._writer.fileno(), data[cut:])
        assert reader.receive(1.0) == [("second", 2)]


@pytest.mark.parametrize("framing", [frame, long_frame], ids=["header", "long header"])
def test_a_header_split_across_reads_is_completed_by_its_later_bytes(framing):
    data = framing(("split", 3))
    header = len(data) - len(pickle.dumps(("split", 3)))
    pieces = [data[:2], data[2:header - 1], data[header - 1:header + 4], data[header + 4:]]
    with open_queue() as results:
        reader = QueueReader(results)
        for piece in pieces[:-1]:
            os.write(results._writer.fileno(), piece)
            assert reader.receive(0.05) == []
        os.write(results._writer.fileno(), pieces[-1])
        assert reader.receive(1.0) == [("split", 3)]


def test_a_message_arriving_in_pieces_is_received_whole_by_one_call():
    """A writer process sends a big message's header in two parts and its body in two, pausing
    between them: one `receive` takes every piece as it comes, over several reads (the body is
    larger than one read takes), and returns the message once it is whole."""
    message = ("big", b"x" * 200_000)
    data = frame(message)
    pieces = [data[:1], data[1:4] + data[4:100_000], data[100_000:]]
    pause = 0.3
    with open_queue() as results:
        reader = QueueReader(results)
        writer = CONTEXT.Process(target=_write_in_pieces, args=(results, pieces, pause))
        writer.start()
        try:
            assert reader.receive(60.0) == [message]
        finally:
            writer.join(60)
        assert writer.exitcode == 0


def _write_in_pieces(channel, pieces: list[bytes], pause: float) -> None:
    for index, piece in enumerate(pieces):
        if index:
            time.sleep(pause)
        os.write(channel._writer.fileno(), piece)


class _Reduced:
    """Pickles as a call of `function(*args)`: what it raises, `pickle.loads` raises."""

    def __init__(self, function, *args) -> None:
        self.call = (function, args)

    def __reduce__(self):
        return self.call


# pickles that fail to load, each with what `pickle.loads` raises for it
UNREADABLE = {
    "garbage": (b"not a pickle", pickle.UnpicklingError),
    "empty": (b"", EOFError),
    "no such module": (b"cno_such_module_here\nThing\n.", ImportError),
    "no such name": (b"cbuiltins\nno_such_name_here\n.", AttributeError),
    "type error": (pickle.dumps(_Reduced(complex, "x", "y")), TypeError),
    "division": (pickle.dumps(_Reduced(operator.truediv, 1, 0)), ZeroDivisionError),
}


@pytest.mark.parametrize("name", list(UNREADABLE))
def test_a_message_that_does_not_unpickle_is_raised_in_its_turn_and_none_is_lost(name):
    payload, cause = UNREADABLE[name]
    with open_queue() as results:
        reader = QueueReader(results)
        os.write(results._writer.fileno(),
                 frame("before") + frame("just before") + raw_frame(payload) + frame("after"))
        assert reader.receive(1.0) == ["before", "just before"]
        with pytest.raises(QueueMessageError, match="does not unpickle here") as raised:
            reader.receive(1.0)
        assert isinstance(raised.value.__cause__, cause), repr(raised.value.__cause__)
        assert reader.receive(1.0) == ["after"]


def test_a_length_no_message_has_is_refused_after_the_messages_before_it():
    with open_queue() as results:
        os.write(results._writer.fileno(), frame("before") + struct.pack("!i", -5) + b"abc")
        reader = QueueReader(results)
        assert reader.receive(1.0) == ["before"]
        for _ in range(2):  # nothing after it can be read
            with pytest.raises(QueueMessageError, match="message length of -5 bytes"):
                reader.receive(1.0)


def test_close_closes_both_ends_of_the_pipe_here_and_refuses_reading_afterwards():
    with open_queue() as results:
        reader = QueueReader(results)
        ends = {pipe_name(results._reader.fileno()), pipe_name(results._writer.fileno())}
        assert ends <= open_pipes()
        reader.close()
        assert not ends & open_pipes()
        reader.close()  # again: nothing more
    with pytest.raises(RuntimeError, match="closed"):
        reader.receive(0.0)


def test_discard_drops_the_bytes_and_refuses_reading_afterwards():
    with open_queue() as results:
        reader = QueueReader(results)
        os.write(results._writer.fileno(), frame("kept") + struct.pack("!i", 1 << 20) + b"partial")
        reader.discard(1.0)
    with pytest.raises(RuntimeError, match="discarded"):
        reader.receive(0.0)
