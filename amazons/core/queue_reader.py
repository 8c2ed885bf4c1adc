"""Reading the queue that worker processes put results on, never waiting on a message cut short.

`Queue.get(timeout=...)` waits `timeout` for a message's first bytes only, then reads the rest
however long it takes. A worker killed while writing a message (SIGKILL, the OOM killer, a signal
to its process group) leaves the rest never to come, and the reading process holds the pipe's
write end too (the queue was made there), so no end of file comes either: `get` waits for ever.
`QueueReader` takes the bytes that are there instead, keeps a message until all of it has
arrived, and never waits longer than it is told. The arena's workers (`amazons.matches.arena`) and
the self-play actors (`amazons.train.selfplay`) hand their results over such queues.

A message that cannot be read (its pickle fails to load here, whatever `pickle.loads` raises, or
the pipe holds a length no message has) is one `QueueMessageError`, raised in its turn: the
messages before it are delivered first, and those after it by the calls after.

Imports nothing from the package.
"""

from __future__ import annotations

import collections
import os
import struct
import time
from collections.abc import Sequence
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

__all__ = ["QueueMessageError", "QueueReader"]

CHUNK_BYTES = 1 << 16  # bytes taken from the pipe per read, at most (a pipe's default buffer)
DRAIN_READS = 256  # reads of bytes already there that one `receive` makes at most (16 MiB)
HEADER = struct.Struct("!i")  # a message's length, as `multiprocessing.connection` writes it
LONG_HEADER = struct.Struct("!Q")  # the length of a message over 2 GiB, after a header of -1


class QueueMessageError(ValueError):
    """A message on a queue's pipe cannot be read: its pickle does not load here (the error it
    raised is the cause), or the pipe holds a length no message has (it was not written by a
    queue, and nothing after it can be read)."""


class QueueReader:
    """The messages of `queue`, read from its pipe's raw bytes by the one process that reads it.

    Only for a queue that no other process reads (its read lock is not taken), e.g. results that
    worker processes put. Once a queue is read here it must not be read with `get` again: part of
    a message may sit in this reader's buffer.

    Args:
        queue: a `multiprocessing.Queue` (any context) made in this process or passed to it.
    """

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self._connection = queue._reader
        self._buffer = bytearray()
        self._whole: collections.deque[bytes] = collections.deque()  # arrived, not yet unpickled
        self._broken: str | None = None  # why the bytes after the whole messages cannot be read
        self._open = True  # False: every writer is gone or the pipe failed; nothing more will come
        self._discarding = False

    def receive(self, timeout: float) -> list[Any]:
        """The messages whole by now, in order, waiting up to `timeout` seconds for the first one
        (as `Queue.get` waits, but never past the timeout on a message cut short): takes the bytes
        there as they come, and unpickles every message whole by then; an incomplete one stays
        buffered for the next call.

        A message that cannot be read is raised in its turn: this call returns the messages
        before it, the next one raises for it, and the calls after return the messages after it.

        Raises:
            RuntimeError: called after `discard` or `close`.
            QueueMessageError: the next message does not unpickle here (any error `pickle.loads`
                raises, e.g. UnpicklingError, EOFError, AttributeError, ImportError, TypeError,
                is its cause), or the pipe holds a length no message has.
        """
        if self._discarding:
            raise RuntimeError("the queue's messages were discarded or it was closed: it cannot "
                               "be read again")
        deadline = time.monotonic() + timeout
        self._drain()
        while (not self._whole and self._broken is None and self._open
               and (left := deadline - time.monotonic()) > 0):
            self._read(left, ())
            self._drain()
        return self._unpickle()

    def _unpickle(self) -> list[Any]:
        """Unpickle the whole messages up to the first that fails; raise for that one if it comes
        first."""
        messages = []
        while self._whole:
            try:
                message = ForkingPickler.loads(self._whole[0])
            except Exception as error:  # loads runs the pickle's own code: anything can come out
                if messages:
                    break  # the messages before it first; the next call raises for it
                size = len(self._whole.popleft())
                raise QueueMessageError(f"a message of {size} bytes on the queue does not "
                                        f"unpickle here: {error!r}") from error
            self._whole.popleft()
            messages.append(message)
        if not messages and self._broken is not None:
            raise QueueMessageError(self._broken)
        return messages

    def _drain(self) -> None:
        """Read what is in the pipe already, as `get` does message by message (writers blocked on
        a full pipe, holding the queue's write lock, go on at once), and take the whole messages."""
        for _ in range(DRAIN_READS):
            if not self._open or self._broken is not None or not wait([self._connection], 0.0):
                break
            self._read(0.0, ())
        self._take_messages()

    def discard(self, timeout: float, sentinels: Sequence[Any] = ()) -> None:
        """Wait up to `timeout` seconds for bytes or for one of `sentinels` (e.g. the workers'
        `Process.sentinel`) to be ready, and drop the bytes that arrived, buffered ones included.

        A worker cannot exit while its queue's feeder thread still holds messages the pipe has no
        room for: closing workers whose results nobody reads discards them meanwhile. After this,
        `receive` is refused.
        """
        self._discarding = True
        self._whole.clear()
        self._buffer.clear()
        self._read(timeout, sentinels)
        self._buffer.clear()

    def close(self) -> None:
        """Close the queue and both ends of its pipe in this process; `receive` is refused after.

        `Queue.close` closes the pipe's ends only through the queue's feeder thread, which a
        process that reads the queue and never puts on it does not have: alone, it would leave
        them open until the queue is garbage. Where this process did put on the queue, its
        feeder thread closes them once it has written what the pipe has room for; what it has
        not is dropped (nobody reads the pipe any more), and nothing waits for it.
        """
        self._discarding = True
        self._whole.clear()
        self._buffer.clear()
        self._open = False
        feeder = self._queue._thread
        if feeder is not None:
            self._queue.cancel_join_thread()
        self._queue.close()
        if feeder is None:
            self._queue._reader.close()
            self._queue._writer.close()

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

    def _take_messages(self) -> None:
        """Move every whole message from the front of the buffer to the ones to unpickle; stop at
        a length no message has."""
        while self._broken is None and len(self._buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buffer)
            start = HEADER.size
            if size == -1:
                if len(self._buffer) < HEADER.size + LONG_HEADER.size:
                    break
                (size,) = LONG_HEADER.unpack_from(self._buffer, HEADER.size)
                start += LONG_HEADER.size
            elif size < 0:
                self._broken = f"the queue's pipe holds a message length of {size} bytes"
                break
            if len(self._buffer) < start + size:
                break
            self._whole.append(bytes(self._buffer[start:start + size]))
            del self._buffer[:start + size]
