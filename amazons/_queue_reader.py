"""Reading the queue that worker processes put results on, never waiting on a message cut short.

`Queue.get(timeout=...)` waits `timeout` for a message's first bytes only, then reads the rest
however long it takes. A worker killed while writing a message (SIGKILL, the OOM killer, a signal
to its process group) leaves the rest never to come, and the reading process holds the pipe's
write end too (the queue was made there), so no end of file comes either: `get` waits for ever.
`QueueReader` takes the bytes that are there instead, keeps a message until all of it has
arrived, and never waits longer than it is told. The arena's workers (`amazons.arena`) and the
self-play actors (`amazons.train.selfplay`) hand their results over such queues.

Imports nothing from the package.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Sequence
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

__all__ = ["QueueReader"]

CHUNK_BYTES = 1 << 16  # bytes taken from the pipe per read, at most (a pipe's default buffer)
DRAIN_READS = 256  # reads of bytes already there that one `receive` makes at most (16 MiB)
HEADER = struct.Struct("!i")  # a message's length, as `multiprocessing.connection` writes it
LONG_HEADER = struct.Struct("!Q")  # the length of a message over 2 GiB, after a header of -1


class QueueReader:
    """The messages of `queue`, read from its pipe's raw bytes by the one process that reads it.

    Only for a queue that no other process reads (its read lock is not taken), e.g. results that
    worker processes put. Once a queue is read here it must not be read with `get` again: part of
    a message may sit in this reader's buffer.

    Args:
        queue: a `multiprocessing.Queue` (any context) made in this process or passed to it.
    """

    def __init__(self, queue: Any) -> None:
        self._connection = queue._reader
        self._buffer = bytearray()
        self._open = True  # False: every writer is gone or the pipe failed; nothing more will come
        self._discarding = False

    def receive(self, timeout: float) -> list[Any]:
        """The messages whole by now, in order, waiting up to `timeout` seconds for the first one
        (as `Queue.get` waits, but never past the timeout on a message cut short): takes the bytes
        there as they come, and unpickles every message whole by then; an incomplete one stays
        buffered for the next call.

        Raises:
            RuntimeError: called after `discard`.
            ValueError: the pipe holds a length no message has (it was not written by a queue).
            pickle.UnpicklingError, AttributeError, ImportError: a message does not unpickle here.
        """
        if self._discarding:
            raise RuntimeError("the queue's messages were discarded: it cannot be read again")
        deadline = time.monotonic() + timeout
        self._read(timeout, ())
        messages = self._drain()
        while not messages and self._open and (left := deadline - time.monotonic()) > 0:
            self._read(left, ())
            messages = self._drain()
        return [ForkingPickler.loads(message) for message in messages]

    def _drain(self) -> list[bytes]:
        """Read what is in the pipe already, as `get` does message by message (writers blocked on
        a full pipe, holding the queue's write lock, go on at once), and take the whole messages."""
        for _ in range(DRAIN_READS):
            if not self._open or not wait([self._connection], 0.0):
                break
            self._read(0.0, ())
        return self._messages()

    def discard(self, timeout: float, sentinels: Sequence[Any] = ()) -> None:
        """Wait up to `timeout` seconds for bytes or for one of `sentinels` (e.g. the workers'
        `Process.sentinel`) to be ready, and drop the bytes that arrived, buffered ones included.

        A worker cannot exit while its queue's feeder thread still holds messages the pipe has no
        room for: closing workers whose results nobody reads discards them meanwhile. After this,
        `receive` is refused.
        """
        self._discarding = True
        self._buffer.clear()
        self._read(timeout, sentinels)
        self._buffer.clear()

    def _read(self, timeout: float, sentinels: Sequence[Any]) -> None:
        """Append to the buffer what one read of the pipe gives, once it or a sentinel is ready."""
        waited = [*sentinels, self._connection] if self._open else list(sentinels)
        if self._connection not in wait(waited, max(0.0, timeout)):  # wait([]) sleeps the timeout
            return
        try:
            chunk = os.read(self._connection.fileno(), CHUNK_BYTES)
        except OSError:
            chunk = b""
        if chunk:
            self._buffer += chunk
        else:
            self._open = False

    def _messages(self) -> list[bytes]:
        """Take every whole message out of the front of the buffer."""
        messages = []
        while len(self._buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buffer)
            start = HEADER.size
            if size == -1:
                if len(self._buffer) < HEADER.size + LONG_HEADER.size:
                    break
                (size,) = LONG_HEADER.unpack_from(self._buffer, HEADER.size)
                start += LONG_HEADER.size
            elif size < 0:
                raise ValueError(f"the queue's pipe holds a message length of {size} bytes")
            if len(self._buffer) < start + size:
                break
            messages.append(bytes(self._buffer[start:start + size]))
            del self._buffer[:start + size]
        return messages
