"""The N-to-1 shared-memory inference server.

Many actor processes (self-play, arena) run searches; one server process owns the network and
evaluates their leaves in large batches. The data never travels through a queue:

* every actor owns one shared-memory **slot** (`multiprocessing.shared_memory`), laid out as
  numpy arrays (positions, move offsets, moves in; priors, values out);
* an actor writes its leaves into its slot and sends a tiny message `(rows, moves)` on its pipe;
* the server queues requests in arrival order and fills batches of `inference_batch_size` rows
  from them, across actors, splitting a request that does not fit into the batch being filled
  (its remaining rows open the next batch); a batch runs when it is full, when
  `flush_deadline_ms` passed since the oldest request, or when every live actor is waiting (so
  it can never deadlock: one actor alone is served at once, and so are the last actors of a
  finishing run);
* it evaluates each batch with one call of an in-process Evaluator (the network, features and
  legal-move priors: `amazons.neural.cuda_graphs.NetworkEvaluator`), writes each actor's rows
  back into that actor's slot and, once all of a request's rows are done, answers with the
  weights version, a plain int.

New weights reach the server between batches in one of two ways: a model file
(`publish_weights(path, version)`: the sync pipeline's models, the Ray node's weights), or, without
any file, the learner's flat float32 weights in one more shared-memory segment
(`publish_shared_weights`: the async pipeline, `amazons.train.pipeline.WeightsPublisher`). The
segment starts with a header (the version, the number of floats); the learner writes it only once
the server has loaded everything published through it before (`shared_weights_ready`), and the
server copies it out before it acknowledges the version, so the two never touch it at once.

The client half, `InferenceClient`, implements the Evaluator protocol, so a search cannot tell it
from an in-process evaluator. It splits requests larger than its slot into several round trips.

One server serves one board size (`board_size`, 6..10, fixed when it is built): its slots hold
positions of that size, `(rows, 3 * W) uint64` (`amazons.engine.geometry(board_size)`), its
evaluator is built for it (an evaluator whose `board_size` differs fails the start), and its
clients carry it (`InferenceClient.board_size`), so a search of another size refuses them.

Failure handling: an actor that disappears without saying goodbye (killed, crashed) is reported by
the server as an error; the server then stops, every other client's next call raises
`InferenceError`, and the owner (`InferenceServer`, which created every segment) unlinks all
shared memory. A server that dies is seen by clients as a closed pipe, and by the owner's
`check()`.

Imports numpy, the package's engine constants, the `Evaluator` protocol (`amazons.evaluator`) and
the backend names (`amazons.core.backends`); the server process imports torch only through the
evaluator factory it is given.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import secrets
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from amazons import engine
from amazons.core.backends import backend_error
from amazons.core.processes import (
    apply_niceness,
    check_niceness,
    end_processes,
    factory_preload,
    process_context,
)
from amazons.engine import MAX_MOVES, MOVE_DTYPE, OFFSET_DTYPE, POSITION_DTYPE
from amazons.evaluator import Evaluator, check_positions

ClientMessage = tuple[int, int] | None  # (rows, moves) request, or None: this client is done


class InferenceError(RuntimeError):
    """The inference server or one of its clients failed; the message says which and why."""


@dataclass(frozen=True)
class InferenceConfig:
    """How the server batches. Every field is a plain value so the config pickles to children."""

    inference_batch_size: int = 256  # rows (leaf positions) per evaluator call, at most
    flush_deadline_ms: float = 1.0  # a partial batch waits at most this long for more requests
    slot_rows: int = 512  # rows one round trip can carry (bigger requests are split)
    # legal moves one round trip can carry (>= one position's most moves: MAX_MOVES on 8x8,
    # 4,900 on 10x10; the server checks its size's)
    slot_moves: int = 256 * 1024
    start_timeout_s: float = 300.0  # the server must build its evaluator within this time
    torch_threads: int = 1  # intra-op threads of the server's torch, if it uses torch
    # The server's network, from a checkpoint (amazons.core.backends): "torch" (the prepared
    # torch model), "native" (the compiled CPU evaluator, amazons.neural.native) or "auto" (native
    # on a CPU where it is built and runs the network at fp32, torch on a GPU or at another
    # precision).
    backend: str = "auto"
    native_threads: int = 1  # threads of the native evaluator per batch
    # added to the server process's niceness (os.nice) when it starts: > 0 lets a busier
    # process on the same cores (the learner) run first; 0 leaves it as its parent's
    nice: int = 0

    def __post_init__(self) -> None:
        why = backend_error(self.backend, ".pt")  # the server runs the run's checkpoints
        if why:
            raise ValueError(f"inference {why}")
        if self.native_threads < 1:
            raise ValueError(f"native_threads must be >= 1, got {self.native_threads}")
        if self.inference_batch_size < 1:
            raise ValueError(f"inference_batch_size must be >= 1, got {self.inference_batch_size}")
        if self.slot_rows < 1:
            raise ValueError(f"slot_rows must be >= 1, got {self.slot_rows}")
        if self.slot_moves < MAX_MOVES:
            raise ValueError(f"slot_moves must be >= MAX_MOVES ({MAX_MOVES}), "
                             f"got {self.slot_moves}")
        if self.flush_deadline_ms < 0:
            raise ValueError(f"flush_deadline_ms must be >= 0, got {self.flush_deadline_ms}")
        check_niceness(self.nice)


@dataclass(frozen=True)
class SlotLayout:
    """Byte layout of one client's shared-memory slot; each region is 64-byte aligned."""

    rows: int  # leaf positions one round trip carries
    moves: int  # legal moves one round trip carries
    # uint64 words of a position row: 3 * W (`amazons.engine.geometry(board_size).position_width`)
    position_width: int = 3
    board_size: int = 8  # the board side the slot's positions are of

    @classmethod
    def for_board(cls, rows: int, moves: int, board_size: int) -> SlotLayout:
        """The layout of `rows` positions and `moves` moves of a `board_size` board."""
        geometry = engine.geometry(board_size)
        return cls(rows, moves, geometry.position_width, geometry.size)

    def regions(self) -> dict[str, tuple[int, tuple[int, ...], type]]:
        """Name -> (byte offset, shape, dtype) of each array in the slot."""
        shapes = {
            # in: canonical leaf positions
            "positions": ((self.rows, self.position_width), POSITION_DTYPE),
            "offsets": ((self.rows + 1,), OFFSET_DTYPE),  # in: CSR offsets into moves
            "moves": ((self.moves, 3), MOVE_DTYPE),  # in: canonical legal moves
            "priors": ((self.moves,), np.float32),  # out: prior of each move
            "values": ((self.rows,), np.float32),  # out: value for the side to move
        }
        regions, offset = {}, 0
        for name, (shape, dtype) in shapes.items():
            regions[name] = (offset, shape, dtype)
            size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            offset += (size + 63) // 64 * 64
        return regions

    def nbytes(self) -> int:
        """Total bytes of the slot."""
        offset, shape, dtype = self.regions()["values"]
        return offset + int(np.prod(shape)) * np.dtype(dtype).itemsize

    def views(self, buffer: memoryview) -> dict[str, np.ndarray]:
        """Numpy views of the slot's arrays over `buffer` (no copies)."""
        return {
            name: np.ndarray(shape, dtype=dtype, buffer=buffer, offset=offset)
            for name, (offset, shape, dtype) in self.regions().items()
        }


# What the forkserver of a process that starts a server imports for it (with what the evaluator
# factory names in its `preload`): the server's own loop.
SERVER_PRELOAD = ("amazons.serving.server",)
WEIGHTS_HEADER_BYTES = 64  # the weights segment's header: int64 version, int64 floats, padding
WEIGHTS_HEADER_DTYPE = np.int64


def _weights_views(buffer: memoryview, elements: int) -> tuple[np.ndarray, np.ndarray]:
    """`(header (2,) int64 [version, floats], weights (elements,) float32)` over a
    weights segment."""
    header = np.ndarray((2,), dtype=WEIGHTS_HEADER_DTYPE, buffer=buffer)
    return header, np.ndarray((elements,), dtype=np.float32, buffer=buffer,
                              offset=WEIGHTS_HEADER_BYTES)


@dataclass(frozen=True)
class ClientHandle:
    """What an actor process needs to connect: picklable, passed as a process argument."""

    client_id: int
    slot_name: str
    layout: SlotLayout
    connection: Connection


class InferenceClient:
    """Evaluator that forwards leaves to the server through shared memory.

    Attributes:
        board_size: the board side of the server it talks to; a search of another size refuses
            this client (`amazons.mcts.BatchedSearch`), and `evaluate` refuses positions of
            another width.
        weights_version: the weights version that produced the last results (-1 before any).
        round_trips: requests sent so far; `round_trip_seconds`: total time spent waiting.
    """

    def __init__(self, handle: ClientHandle) -> None:
        self.client_id = handle.client_id
        self.board_size = handle.layout.board_size
        self._layout = handle.layout
        self._connection = handle.connection
        self._memory = SharedMemory(name=handle.slot_name)
        self._slot = handle.layout.views(self._memory.buf)
        self.weights_version = -1
        self.round_trips = 0
        self.round_trip_seconds = 0.0
        self._closed = False

    def evaluate(
        self, positions: np.ndarray, moves: np.ndarray, move_offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate leaves through the server (the Evaluator protocol).

        Args:
            positions: `(B, 3 * W) uint64` canonical positions of the server's board size.
            moves: `(M, 3) int32` canonical legal moves, concatenated.
            move_offsets: `(B + 1,) int64`, leaf i owns `moves[move_offsets[i]:move_offsets[i+1]]`.

        Returns:
            `(priors (M,) float32, values (B,) float32)`, owned by the caller.

        Raises:
            InferenceError: if the server has stopped or reported an error.
            amazons.evaluator.EvaluatorInputError: positions that are not `(B, 3 * W) uint64` of
                the server's board size (the size named).
        """
        if self._closed:
            raise InferenceError(f"client {self.client_id} is closed")
        check_positions(positions, self.board_size)
        count = positions.shape[0]
        priors = np.empty(moves.shape[0], dtype=np.float32)
        values = np.empty(count, dtype=np.float32)
        start = 0
        while start < count:
            stop = self._chunk_end(move_offsets, start, count)
            first, last = int(move_offsets[start]), int(move_offsets[stop])
            rows, num_moves = stop - start, last - first
            self._slot["positions"][:rows] = positions[start:stop]
            self._slot["offsets"][: rows + 1] = move_offsets[start : stop + 1] - first
            self._slot["moves"][:num_moves] = moves[first:last]
            self._round_trip(rows, num_moves)
            priors[first:last] = self._slot["priors"][:num_moves]
            values[start:stop] = self._slot["values"][:rows]
            start = stop
        return priors, values

    def _chunk_end(self, move_offsets: np.ndarray, start: int, count: int) -> int:
        stop = min(count, start + self._layout.rows)
        limit = move_offsets[start] + self._layout.moves
        if move_offsets[stop] > limit:
            stop = int(np.searchsorted(move_offsets, limit, side="right")) - 1
        return max(stop, start + 1)

    def _round_trip(self, rows: int, num_moves: int) -> None:
        started = time.perf_counter()
        try:
            self._connection.send((rows, num_moves))
            reply = self._connection.recv()
        except (EOFError, OSError, BrokenPipeError) as error:
            raise InferenceError(
                f"client {self.client_id}: the inference server has stopped ({error!r})"
            ) from None
        if isinstance(reply, str):
            raise InferenceError(f"client {self.client_id}: inference server error: {reply}")
        self.weights_version = int(reply)
        self.round_trips += 1
        self.round_trip_seconds += time.perf_counter() - started

    def close(self) -> None:
        """Tell the server this client is done and detach from the slot."""
        if self._closed:
            return
        self._closed = True
        try:
            self._connection.send(None)
        except (OSError, BrokenPipeError):
            pass
        self._slot = {}
        self._memory.close()
        self._connection.close()

    def __enter__(self) -> InferenceClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class InferenceServer:
    """Owner of the server process, the slots and the pipes (lives in the parent process).

    Example:
        >>> server = InferenceServer(make_evaluator, num_clients=4)  # doctest: +SKIP
        >>> server.start()
        >>> actors = [server.start_actor(i, actor_main, (seed,)) for i in range(4)]
        >>> ...  # each actor: InferenceClient(handle).evaluate(...)
        >>> stats = server.stop()

    Args:
        evaluator_factory: picklable zero-argument callable run in the server process; returns an
            Evaluator, optionally with `load_weights(path)` for `publish_weights`,
            `load_flat_weights(flat)` for `publish_shared_weights`, and `close()`, which the
            server calls when it stops. Its `preload`, where it has one, names modules the server
            process imports anyway (torch, for a network), for the forkserver to import once.
        num_clients: number of actor slots.
        config: batching parameters.
        context: multiprocessing context (default: `amazons.core.processes.process_context`, a
            forkserver that preloads the package's modules, or spawn where there is none).
        board_size: the board side (6..10) this server serves; default: the factory's
            `board_size`, else 8. The slots hold positions of this size, the evaluator the
            factory builds must be for it, and its clients carry it.

    Raises:
        ValueError: num_clients < 1, `board_size` and the factory's disagree (both named), a size
            the engine has no rules for, or `config.slot_moves` below one position's moves of
            that size.
    """

    def __init__(
        self,
        evaluator_factory: Callable[[], Evaluator],
        num_clients: int,
        config: InferenceConfig | None = None,
        context: mp.context.BaseContext | None = None,
        board_size: int | None = None,
    ) -> None:
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        factory_size = getattr(evaluator_factory, "board_size", None)
        if board_size is None:
            board_size = 8 if factory_size is None else factory_size
        elif factory_size is not None and factory_size != board_size:
            raise ValueError(f"the server was asked for board_size {board_size} but its evaluator "
                             f"factory builds evaluators for board_size {factory_size}")
        geometry = engine.geometry(board_size)
        self.config = config or InferenceConfig()
        if self.config.slot_moves < geometry.max_moves:
            raise ValueError(f"slot_moves must be >= {geometry.max_moves} (one "
                             f"{geometry.size}x{geometry.size} position's moves), "
                             f"got {self.config.slot_moves}")
        self.board_size = geometry.size
        self.num_clients = num_clients
        self._factory = evaluator_factory
        self._context = context or process_context(
            (*SERVER_PRELOAD, *factory_preload(evaluator_factory)))
        self._layout = SlotLayout.for_board(self.config.slot_rows, self.config.slot_moves,
                                            self.board_size)
        self._memories: list[SharedMemory] = []
        self._client_ends: list[Connection] = []
        self._control: Connection | None = None
        self._process: mp.process.BaseProcess | None = None
        self._error: str | None = None
        self.stats: dict[str, float] = {}
        self.loaded_version: int | None = None  # the latest published version the server has loaded
        self._weights_memory: SharedMemory | None = None  # created by the first shared publish
        self._shared_version: int | None = None  # the last version published through it
        self._shared_elements = 0  # its floats

    @property
    def slot_names(self) -> list[str]:
        """Names of the shared-memory segments this server owns."""
        return [memory.name for memory in self._memories]

    def start(self) -> None:
        """Create the slots, start the server process and wait until its evaluator is ready.

        Raises:
            InferenceError: if the server fails to start (its traceback is included).
        """
        server_ends = []
        try:
            for _ in range(self.num_clients):
                self._memories.append(_create_segment(self._layout.nbytes()))
                client_end, server_end = self._context.Pipe(duplex=True)
                self._client_ends.append(client_end)
                server_ends.append(server_end)
            self._control, server_control = self._context.Pipe(duplex=True)
            self._process = self._context.Process(
                target=_serve,
                args=(self._factory, self.config, self._layout, self.slot_names, server_ends,
                      server_control),
                name="amazons-inference",
                daemon=True,
            )
            self._process.start()
            for end in server_ends:
                end.close()
            server_control.close()
            if not self._control.poll(self.config.start_timeout_s):
                raise InferenceError(
                    f"inference server did not start within {self.config.start_timeout_s} s"
                )
            message = self._receive_control()
            if message[0] != "ready":
                raise InferenceError(f"inference server failed to start: {message[1]}")
        except BaseException:
            self.stop()
            raise

    def handle(self, client_id: int) -> ClientHandle:
        """The connection details of client `client_id`, for a client in this process.

        Actor processes are started with `start_actor`, which hands the pipe over properly.
        """
        if not 0 <= client_id < self.num_clients:
            raise ValueError(f"client_id must be in 0..{self.num_clients - 1}, got {client_id}")
        if self._client_ends[client_id].closed:
            raise ValueError(f"client {client_id} was already handed to an actor process")
        return ClientHandle(client_id, self._memories[client_id].name, self._layout,
                            self._client_ends[client_id])

    def start_actor(
        self,
        client_id: int,
        target: Callable[..., object],
        args: tuple = (),
        name: str | None = None,
    ) -> mp.process.BaseProcess:
        """Start `target(handle, *args)` in a new process as client `client_id`.

        The parent's copy of the client's pipe end is closed once the child holds its own, so the
        server sees the pipe close if the actor dies; use this (not `handle`) for actor processes.
        """
        process = self._context.Process(
            target=target,
            args=(self.handle(client_id), *args),
            name=name or f"amazons-actor-{client_id}",
        )
        process.start()
        self._client_ends[client_id].close()
        return process

    def publish_weights(self, path: str, version: int) -> None:
        """Ask the server to load new weights from `path`; later results carry `version`.

        The server loads them between batches, never between two parts of one request, and
        acknowledges each load: `loaded_version` (updated by `check`) then says which file it
        no longer needs (every one published before that version).
        """
        self.check()
        self._control.send(("weights", str(path), int(version)))

    def shared_weights_ready(self) -> bool:
        """Whether `publish_shared_weights` may write now: the server has loaded (or moved past)
        the last version published through shared memory.

        Raises:
            InferenceError: the server has failed.
        """
        self.check()
        return self._shared_version is None or (self.loaded_version is not None
                                                and self.loaded_version >= self._shared_version)

    def publish_shared_weights(self, elements: int, fill: Callable[[np.ndarray], None],
                               version: int) -> None:
        """Publish weights without a file: `fill(weights)` writes them into `weights`, an
        `(elements,) float32` view of this server's weights segment (created on the first call,
        named like the slots and unlinked by `stop`), and the server copies them into its
        evaluator (`load_flat_weights`) between batches, as `publish_weights` loads a file.

        Raises:
            InferenceError: the server has failed, or has not loaded the previous shared
                publish yet (ask `shared_weights_ready` first).
            ValueError: `elements` differs from the first shared publish's.
        """
        if not self.shared_weights_ready():
            raise InferenceError(f"weights version {self._shared_version} is still being loaded by "
                                 f"the server; version {version} cannot overwrite it")
        if self._weights_memory is None:
            self._weights_memory = _create_segment(WEIGHTS_HEADER_BYTES + 4 * elements)
            self._shared_elements = elements
        if elements != self._shared_elements:
            raise ValueError(f"shared weights of {elements} floats after {self._shared_elements}: "
                             "the network changed")
        header, weights = _weights_views(self._weights_memory.buf, elements)
        try:
            fill(weights)
            header[:] = (version, elements)
        finally:
            del header, weights  # no view may outlive the segment (SharedMemory.close refuses then)
        self._control.send(("shared_weights", self._weights_memory.name, int(version),
                            int(elements)))
        self._shared_version = int(version)

    def check(self) -> None:
        """Raise InferenceError if the server reported an error or died; take in its other
        messages (weights loaded, statistics)."""
        while self._control is not None and self._error is None and self._control.poll(0):
            self._take_control_message(self._receive_control())
        if self._error is not None:
            raise InferenceError(self._error)
        if self._process is not None and not self._process.is_alive():
            raise InferenceError(f"inference server exited with code {self._process.exitcode}")

    def _take_control_message(self, message: tuple) -> None:
        if message[0] == "error":
            self._error = message[1]
        elif message[0] == "stats":
            self.stats = message[1]
        elif message[0] == "loaded":
            self.loaded_version = int(message[1])

    def _receive_control(self) -> tuple:
        try:
            return self._control.recv()
        except (EOFError, OSError):
            code = self._process.exitcode if self._process is not None else None
            return ("error", f"inference server exited (code {code}) without a message")

    def stop(self, timeout: float = 10.0) -> dict[str, float]:
        """Stop the server, close the pipes and unlink every slot; return the server's stats.

        Returns within `timeout` seconds, plus the moment the kernel takes to end a killed
        process: the server has `timeout` seconds from the stop request to send its statistics
        and exit, and one still alive then (stuck in native code, stopped by a debugger) is
        sent SIGTERM and at once SIGKILL (it has no SIGTERM handler, so a grace would only
        wait longer) and reaped. Safe after a start that failed at any point (a process that
        never started is not waited for), and again after a stop.

        A KeyboardInterrupt (a second Ctrl-C) during the wait still ends the process, closes the
        pipes and unlinks every segment before it propagates.
        """
        deadline = time.monotonic() + timeout
        started = self._process is not None and self._process.pid is not None
        try:
            if self._control is not None and started:
                self._request_stop(deadline)
            if started:
                self._process.join(max(0.0, deadline - time.monotonic()))
        finally:
            try:
                if started:
                    end_processes([self._process], 0.0)
            finally:
                self._release()
        return self.stats

    def _request_stop(self, deadline: float) -> None:
        """Send the stop request and take in the server's messages until its statistics or its
        error arrive, or the `time.monotonic()` deadline passes."""
        try:
            self._control.send(("stop",))
            while self._control.poll(max(0.0, deadline - time.monotonic())):
                message = self._receive_control()
                if message[0] == "error" and self._error is not None:
                    break  # the error is known already; keep the first one
                self._take_control_message(message)
                if message[0] in ("stats", "error"):
                    break
        except (OSError, EOFError):  # the server is gone already
            pass

    def _release(self) -> None:
        """Close the pipes, then unlink and close every segment this server owns."""
        for connection in [*self._client_ends, self._control]:
            if connection is not None:
                connection.close()
        self._client_ends, self._control = [], None
        owned = self._memories + ([self._weights_memory] if self._weights_memory is not None
                                  else [])
        self._memories, self._weights_memory, self._shared_version = [], None, None
        for memory in owned:  # every unlink first: a close that fails cannot keep a name alive
            with contextlib.suppress(FileNotFoundError):
                memory.unlink()
        for memory in owned:
            memory.close()

    @property
    def pid(self) -> int | None:
        """The server process's id; None before it started."""
        return None if self._process is None else self._process.pid

    @property
    def error(self) -> str | None:
        """The error the server reported, if any."""
        return self._error

    def __enter__(self) -> InferenceServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


SEGMENT_PREFIX = "amazons_"


def segment_prefix(pid: int | None = None) -> str:
    """The name prefix of the shared-memory segments a process's servers own: `amazons_PID_`.

    Segments are named after the process that created (and must unlink) them, so a leak can be
    told apart from another program's segments, e.g. in `/dev/shm` on Linux.
    """
    return f"{SEGMENT_PREFIX}{os.getpid() if pid is None else pid}_"


def _create_segment(size: int) -> SharedMemory:
    """A new segment named `amazons_PID_RANDOM` (retried on the rare name collision)."""
    while True:
        try:
            return SharedMemory(name=segment_prefix() + secrets.token_hex(6), create=True,
                                size=size)
        except FileExistsError:
            continue


def _serve(
    factory: Callable[[], Evaluator],
    config: InferenceConfig,
    layout: SlotLayout,
    slot_names: list[str],
    connections: list[Connection],
    control: Connection,
) -> None:
    """Server process entry point: build the evaluator, then batch requests until stopped."""
    memories: list[SharedMemory] = []
    loop = evaluator = None
    try:
        apply_niceness(config.nice)
        evaluator = factory()
        evaluator_size = getattr(evaluator, "board_size", layout.board_size)
        if evaluator_size != layout.board_size:
            raise InferenceError(
                f"the server serves board_size {layout.board_size} but its evaluator "
                f"{type(evaluator).__name__} has board_size {evaluator_size}")
        _limit_torch_threads(config.torch_threads)
        memories = [SharedMemory(name=name) for name in slot_names]
        loop = _BatchLoop(evaluator, config, [layout.views(memory.buf) for memory in memories],
                          connections, control)
        control.send(("ready",))
        loop.run()
        control.send(("stats", loop.statistics()))
    except BaseException as error:  # report anything, including KeyboardInterrupt, then exit
        detail = "".join(traceback.format_exception(error))
        try:
            control.send(("error", detail))
        except (OSError, BrokenPipeError, pickle.PicklingError):
            pass
    finally:
        if evaluator is not None and callable(getattr(evaluator, "close", None)):
            evaluator.close()  # an evaluator that holds something to release or save
        for connection in connections:
            connection.close()
        for memory in memories + ([loop.weights_memory]
                                  if loop is not None and loop.weights_memory else []):
            memory.close()


def _limit_torch_threads(threads: int) -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


@dataclass
class _Request:
    """One client's outstanding request: `rows` leaves in its slot, `served` of them evaluated."""

    client: int
    rows: int
    moves: int
    arrived: float  # perf_counter() when the request came in (the deadline counts from the oldest)
    served: int = 0


def _disconnected(index: int) -> InferenceError:
    """The server's error for an actor whose pipe broke (killed or crashed mid-request)."""
    return InferenceError(f"actor {index} disconnected without finishing (killed or crashed); "
                          "stopping")


class _BatchLoop:
    """The server's event loop over client pipes and the control pipe.

    Requests wait in arrival order. A batch takes rows from the front of that queue, across
    clients, up to `inference_batch_size`; a request that does not fit in the batch being filled
    is split at a row boundary and the rest of it goes into the next batch. A client is answered
    once all its rows are evaluated. Batches run when a full one is pending, when every live
    client is waiting (nobody can add rows: run what there is), or when the oldest request has
    waited `flush_deadline_ms`; so a client is never left waiting for rows that cannot come.
    """

    def __init__(
        self,
        evaluator: Evaluator,
        config: InferenceConfig,
        slots: list[dict[str, np.ndarray]],
        connections: list[Connection],
        control: Connection,
    ) -> None:
        self.evaluator = evaluator
        self.config = config
        self.slots = slots
        self.connections = connections
        self.control = control
        self.live = set(range(len(connections)))
        self.queue: deque[_Request] = deque()
        self.pending_rows = 0
        # ("file", path, version) or ("shared", name, version, floats)
        self.pending_weights: tuple | None = None
        # the owner's weights segment, once attached
        self.weights_memory: SharedMemory | None = None
        self.version = 0
        self.weights_loads = 0
        self.weights_load_seconds = 0.0  # time the batches waited for weights loads
        self.batches = 0
        self.rows = 0
        self.largest_batch = 0
        self.requests = 0
        self.split_requests = 0
        self.batch_requests = 0  # sum over batches of the requests each batch served rows of
        self.evaluate_seconds = 0.0
        self.started = time.perf_counter()
        self.stopping = False

    def run(self) -> None:
        deadline = self.config.flush_deadline_ms / 1000.0
        by_connection = {connection: index for index, connection in enumerate(self.connections)}
        while True:
            if self.stopping:
                self._evaluate_pending(everything=True)
                return
            timeout = None
            if self.queue:
                timeout = max(0.0, self.queue[0].arrived + deadline - time.perf_counter())
            watched = [self.connections[index] for index in self.live] + [self.control]
            for connection in wait(watched, timeout):
                if connection is self.control:
                    self._on_control()
                else:
                    self._on_client(by_connection[connection])
            everyone_waiting = bool(self.queue) and len(self.queue) >= len(self.live)
            expired = bool(self.queue) and time.perf_counter() >= self.queue[0].arrived + deadline
            self._evaluate_pending(everything=everyone_waiting or expired)
            self._load_pending_weights()

    def _on_control(self) -> None:
        try:
            message = self.control.recv()
        except EOFError:
            message = ("stop",)  # the owner is gone: stop serving
        if message[0] == "stop":
            self.stopping = True
            self.live.clear()
        elif message[0] in ("weights", "shared_weights"):
            method = "load_weights" if message[0] == "weights" else "load_flat_weights"
            if getattr(self.evaluator, method, None) is None:
                raise InferenceError(f"{type(self.evaluator).__name__} cannot load weights "
                                     f"({method})")
            self.pending_weights = ("file" if message[0] == "weights" else "shared", *message[1:])
            self._load_pending_weights()

    def _load_pending_weights(self) -> None:
        """Load published weights, but never between two parts of one request: every row of a
        reply comes from the weights version the reply names. A later publish replaces one not
        loaded yet (the acknowledgement of the later version releases both)."""
        if self.pending_weights is None or (self.queue and self.queue[0].served):
            return
        kind, source, version, *elements = self.pending_weights
        self.pending_weights = None
        started = time.perf_counter()
        if kind == "file":
            self.evaluator.load_weights(source)
        else:
            if self.weights_memory is None:
                self.weights_memory = SharedMemory(name=source)
            header, weights = _weights_views(self.weights_memory.buf, elements[0])
            if tuple(header) != (version, elements[0]):
                raise InferenceError(f"the weights segment holds version {header[0]} "
                                     f"({header[1]} floats), version {version} "
                                     f"({elements[0]} floats) was announced")
            self.evaluator.load_flat_weights(weights)
            del header, weights  # no view may outlive the segment
        self.weights_load_seconds += time.perf_counter() - started
        self.weights_loads += 1
        self.version = version
        self.control.send(("loaded", version))

    def _on_client(self, index: int) -> None:
        try:
            message: ClientMessage = self.connections[index].recv()
        except (EOFError, OSError):
            raise _disconnected(index) from None
        if message is None:
            self.live.discard(index)
            return
        rows, moves = message
        self.queue.append(_Request(index, rows, moves, time.perf_counter()))
        self.pending_rows += rows
        self.requests += 1

    def _evaluate_pending(self, everything: bool) -> None:
        """Run full batches while the queue holds one; with `everything`, the rest too."""
        batch_size = self.config.inference_batch_size
        while self.pending_rows >= batch_size or (everything and self.pending_rows):
            self._evaluate_batch(min(batch_size, self.pending_rows))

    def _evaluate_batch(self, size: int) -> None:
        """Evaluate the next `size` queued rows as one batch and answer the requests
        it completes."""
        parts: list[tuple[_Request, int, int]] = []  # (request, first row, rows) in batch order
        taken = 0
        for request in self.queue:
            if taken == size:
                break
            rows = min(request.rows - request.served, size - taken)
            parts.append((request, request.served, rows))
            taken += rows
        positions, moves, offsets = [], [], [np.zeros(1, dtype=OFFSET_DTYPE)]
        base = 0
        for request, first, rows in parts:
            slot = self.slots[request.client]
            first_move, last_move = int(slot["offsets"][first]), int(slot["offsets"][first + rows])
            positions.append(slot["positions"][first : first + rows])
            moves.append(slot["moves"][first_move:last_move])
            offsets.append(slot["offsets"][first + 1 : first + rows + 1] - first_move + base)
            base += last_move - first_move
        started = time.perf_counter()
        priors, values = self.evaluator.evaluate(np.concatenate(positions), np.concatenate(moves),
                                                 np.concatenate(offsets))
        self.evaluate_seconds += time.perf_counter() - started
        row, move = 0, 0
        for request, first, rows in parts:
            slot = self.slots[request.client]
            first_move, last_move = int(slot["offsets"][first]), int(slot["offsets"][first + rows])
            count = last_move - first_move
            slot["priors"][first_move:last_move] = priors[move : move + count]
            slot["values"][first : first + rows] = values[row : row + rows]
            row, move = row + rows, move + count
            self.split_requests += first == 0 and rows < request.rows
            request.served += rows
        while self.queue and self.queue[0].served == self.queue[0].rows:
            client = self.queue.popleft().client
            try:
                self.connections[client].send(self.version)
            except OSError:  # a broken pipe: the actor died after its request, before this reply
                raise _disconnected(client) from None
        self.pending_rows -= row
        self.batches += 1
        self.rows += row
        self.largest_batch = max(self.largest_batch, row)
        self.batch_requests += len(parts)

    def statistics(self) -> dict[str, float]:
        """Batches, rows, mean batch fill (rows per batch / batch size), the largest batch, how
        many requests a batch served on average and how many requests were split across
        batches, time in the evaluator; weights loads and the time they held the batches; CUDA
        graphs the evaluator captured (0 without graphs)."""
        batches = max(1, self.batches)
        return {
            "batches": float(self.batches),
            "rows": float(self.rows),
            "mean_batch_rows": self.rows / batches,
            "mean_batch_fill": self.rows / batches / self.config.inference_batch_size,
            "max_batch_rows": float(self.largest_batch),
            "requests": float(self.requests),
            "mean_requests_per_batch": self.batch_requests / batches,
            "split_requests": float(self.split_requests),
            "evaluate_seconds": self.evaluate_seconds,
            "weights_loads": float(self.weights_loads),
            "weights_load_seconds": self.weights_load_seconds,
            "graph_captures": float(getattr(self.evaluator, "graph_captures", 0)),
            "wall_seconds": time.perf_counter() - self.started,
            "pid": float(os.getpid()),
        }
