# cython: language_level=3
# distutils: language = c++
"""The native core's network as a compiled CPU evaluator (Cython over C++, the GIL released).

The C++ is the native core's (`amazons/native/`): the rules' feature planes (`rules.h` on 8x8,
`evaluator.h`'s board functions on the other sizes), the kernels (`kernels.h`, portable and
AVX2/FMA with Winograd convolutions) and the forward pass (`network.h`), the parts the Botzone
export joins into its source, run over a batch by `evaluator.h` on boards of 6x6 to 10x10.
This module is the thin typed layer; `amazons.neural.native` is its public face (checks, the
`Evaluator` protocol, loading models). A few rules entry points (perft, legal moves, feature
planes) let the tests hold the rules part to the engine.

Imports nothing from the package.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector

import numpy as np

# The C++ errors as Python exceptions: InputError (wrong input: a position, a move) as ValueError,
# any other as RuntimeError (MemoryError when memory ran out).
cdef extern from *:
    """
    #include "native/evaluator.h"

    static void amz_raise_native_error() {
        try {
            throw;
        } catch (const InputError& error) {
            PyErr_SetString(PyExc_ValueError, error.what());
        } catch (const std::bad_alloc&) {
            PyErr_NoMemory();
        } catch (const std::exception& error) {
            PyErr_SetString(PyExc_RuntimeError, error.what());
        } catch (...) {
            PyErr_SetString(PyExc_RuntimeError, "an unknown C++ exception");
        }
    }

    // The feature planes of the evaluator's board of `size` (rules.h's on 8x8, as it runs
    // them): [squares][num_planes].
    static void amz_board_features(int size, const uint64_t* row, int num_planes, float* planes) {
        switch (size) {
            case 6: board_features<6>(row, num_planes, planes); break;
            case 7: board_features<7>(row, num_planes, planes); break;
            case 9: board_features<9>(row, num_planes, planes); break;
            case 10: board_features<10>(row, num_planes, planes); break;
            default: {
                Pos pos = {row[0], row[1], row[2]};
                write_features(pos, num_planes, planes);
            }
        }
    }

    // Why the evaluator refuses the position `row` of a board of `size`, or "".
    static std::string amz_board_position_error(int size, const uint64_t* row) {
        switch (size) {
            case 6: return board_position_error<6>(row);
            case 7: return board_position_error<7>(row);
            case 9: return board_position_error<9>(row);
            case 10: return board_position_error<10>(row);
            default: {
                Pos pos = {row[0], row[1], row[2]};
                return position_error(pos);
            }
        }
    }
    """
    void amz_raise_native_error()
    void amz_board_features(int size, const uint64_t* row, int num_planes, float* planes)
    string amz_board_position_error(int size, const uint64_t* row)

cdef extern from "native/evaluator.h" nogil:
    cdef struct Pos:
        uint64_t mine, theirs, arrows

    cdef struct Move:
        uint8_t src, dst, arrow

    cdef cppclass NetShape:
        int num_planes, channels, key_dim, head_dim, value_channels, value_hidden
        cbool joint, arrow_source, pooled_value
        vector[int] trunk

    cdef cppclass BatchEvaluator:
        BatchEvaluator() except +amz_raise_native_error
        void set_kernels(cbool portable) except +amz_raise_native_error
        const char* kernels_name()
        void load(const NetShape& shape, const float* weights,
                  size_t count) except +amz_raise_native_error
        void evaluate(int64_t batch, const uint64_t* positions, const int32_t* moves,
                      const int64_t* offsets, float* priors, float* values,
                      int threads, int size) except +amz_raise_native_error

    void init_tables()
    size_t network_weight_floats(const NetShape& shape)
    string network_shape_error(const NetShape& shape)
    string position_error(const Pos& pos)
    int64_t perft(const Pos& pos, int depth)
    int legal_moves(const Pos& pos, Move* out)
    void write_features(const Pos& pos, int num_planes, float* planes)
    int MAX_MOVES
    int AMAZONS_PER_SIDE
    int TRUNK_RESIDUAL
    int TRUNK_ATTENTION
    int MIN_BOARD_SIZE
    int MAX_BOARD_SIZE

init_tables()

SHAPE_FIELDS = ("num_planes", "channels", "key_dim", "head_dim", "value_channels", "value_hidden",
                "joint", "arrow_source", "trunk")
# NetShape's fields a shape may leave out, with their value then: the flat value head
OPTIONAL_SHAPE_FIELDS = {"pooled_value": False}


def native_constants() -> dict:
    """The literals the C++ keeps for the extension, by name (tests hold them to Python's)."""
    return {"MAX_MOVES": MAX_MOVES, "AMAZONS_PER_SIDE": AMAZONS_PER_SIDE,
            "TRUNK_RESIDUAL": TRUNK_RESIDUAL, "TRUNK_ATTENTION": TRUNK_ATTENTION,
            "MIN_BOARD_SIZE": MIN_BOARD_SIZE, "MAX_BOARD_SIZE": MAX_BOARD_SIZE}


cdef NetShape _shape(dict fields) except *:
    if not set(SHAPE_FIELDS) <= set(fields) <= set(SHAPE_FIELDS) | set(OPTIONAL_SHAPE_FIELDS):
        raise ValueError(
            f"a network shape has the fields {', '.join(SHAPE_FIELDS)} (and optionally "
            f"{', '.join(OPTIONAL_SHAPE_FIELDS)}), got {sorted(fields)}")
    cdef NetShape shape
    shape.num_planes = fields["num_planes"]
    shape.channels = fields["channels"]
    shape.key_dim = fields["key_dim"]
    shape.head_dim = fields["head_dim"]
    shape.value_channels = fields["value_channels"]
    shape.value_hidden = fields["value_hidden"]
    shape.joint = fields["joint"]
    shape.arrow_source = fields["arrow_source"]
    shape.pooled_value = fields.get("pooled_value", OPTIONAL_SHAPE_FIELDS["pooled_value"])
    for kind in fields["trunk"]:
        shape.trunk.push_back(kind)
    return shape


def shape_error(dict shape) -> str:
    """Why the network of `shape` (`amazons.neural.numpy_net.native_shape`) cannot run here, or ""."""
    return network_shape_error(_shape(shape)).decode()


def weight_floats(dict shape) -> int:
    """The floats of the weights of a network of `shape`, in `NumpyNet.layout_arrays` order."""
    return network_weight_floats(_shape(shape))


cdef class NativeNetwork:
    """One network's weights and the evaluator over them (see `amazons.neural.native.NativeEvaluator`).

    Safe to share between threads: each call holds the network's mutex (the GIL released), so
    calls on one network run one at a time; two networks run in parallel.
    """

    cdef BatchEvaluator* core

    def __cinit__(self):
        self.core = new BatchEvaluator()

    def __dealloc__(self):
        del self.core

    def set_kernels(self, bint portable) -> None:
        with nogil:
            self.core.set_kernels(portable)

    @property
    def kernels(self) -> str:
        cdef const char* name
        with nogil:
            name = self.core.kernels_name()
        return name.decode()

    def load(self, dict shape, const float[::1] weights) -> None:
        """Take `weights` (copied) for a network of `shape` (`amazons.neural.numpy_net.native_shape`).

        Raises:
            RuntimeError: the shape cannot run, or the weights do not fit it (the network
                keeps what it had).
        """
        cdef NetShape native = _shape(shape)
        cdef size_t count = weights.shape[0]
        cdef const float* data = &weights[0] if count else NULL
        with nogil:
            self.core.load(native, data, count)

    def evaluate(self, const uint64_t[:, ::1] positions, const int32_t[:, ::1] moves,
                 const int64_t[::1] offsets, float[::1] priors, float[::1] values, int threads,
                 int size=8) -> None:
        """Priors and values of a batch of `size` x `size` positions (`(B, 3 * W)`, W = 1 up
        to 8x8, 2 on 9x9 and 10x10) into `priors` and `values` (`NativeEvaluator.evaluate`).

        Raises:
            ValueError: the arrays do not fit together, a size out of 6..10 or other than 8
                for a flat value head, or a position or a move the network cannot take (named
                by its index in the batch).
        """
        cdef int64_t batch = positions.shape[0], i
        cdef int words = 3 * _words(size)
        if batch and positions.shape[1] != words:
            raise ValueError(f"{size}x{size} positions must have {words} words a row, "
                             f"got {positions.shape[1]}")
        if offsets.shape[0] != batch + 1 or values.shape[0] != batch:
            raise ValueError(f"{batch} positions need {batch + 1} offsets and {batch} values, "
                             f"got {offsets.shape[0]} and {values.shape[0]}")
        if moves.shape[0] and moves.shape[1] != 3:
            raise ValueError(f"moves must be (M, 3), got {moves.shape[1]} columns")
        if offsets[0] != 0 or offsets[batch] != moves.shape[0] or priors.shape[0] != moves.shape[0]:
            raise ValueError(f"the offsets must rise from 0 to the {moves.shape[0]} moves, with "
                             f"as many priors; got {offsets[0]}..{offsets[batch]} and "
                             f"{priors.shape[0]} priors")
        for i in range(batch):
            if offsets[i + 1] < offsets[i]:
                raise ValueError(
                    f"the offsets fall at position {i}: {offsets[i]} then {offsets[i + 1]}")
        cdef const uint64_t* p = &positions[0, 0] if batch else NULL
        cdef const int32_t* m = &moves[0, 0] if moves.shape[0] else NULL
        cdef float* out_priors = &priors[0] if priors.shape[0] else NULL
        cdef float* out_values = &values[0] if batch else NULL
        with nogil:
            self.core.evaluate(batch, p, m, &offsets[0], out_priors, out_values, threads, size)


cdef int _words(int size) except -1:
    """Words a bitboard of a `size` x `size` board takes in a position's row."""
    if not MIN_BOARD_SIZE <= size <= MAX_BOARD_SIZE:
        raise ValueError(f"board size {size}: the native core serves sizes "
                         f"{MIN_BOARD_SIZE}..{MAX_BOARD_SIZE}")
    return 1 if size * size <= 64 else 2


def _refuse(uint64_t mine, uint64_t theirs, uint64_t arrows) -> None:
    cdef Pos pos
    pos.mine, pos.theirs, pos.arrows = mine, theirs, arrows
    why = position_error(pos).decode()
    if why:
        raise ValueError(
            f"the native rules cannot take the position ({mine}, {theirs}, {arrows}): {why}")


def perft_position(uint64_t mine, uint64_t theirs, uint64_t arrows, int depth) -> int:
    """perft(depth) of a canonical position, counted by the native rules.

    Raises:
        ValueError: a position the rules cannot take (overlapping bitboards, more than four
            amazons a side).
    """
    _refuse(mine, theirs, arrows)
    cdef Pos pos
    pos.mine, pos.theirs, pos.arrows = mine, theirs, arrows
    with nogil:
        count = perft(pos, depth)
    return count


def legal_move_array(uint64_t mine, uint64_t theirs, uint64_t arrows) -> np.ndarray:
    """The legal moves of a canonical position by the native rules: `(M, 3) int32`, engine order.

    Raises:
        ValueError: a position the rules cannot take (as `perft_position`).
    """
    _refuse(mine, theirs, arrows)
    cdef Pos pos
    pos.mine, pos.theirs, pos.arrows = mine, theirs, arrows
    cdef vector[Move] out
    out.resize(MAX_MOVES)
    cdef int count = legal_moves(pos, out.data())
    result = np.empty((count, 3), np.int32)
    cdef int32_t[:, ::1] view = result
    for i in range(count):
        view[i, 0] = out[i].src
        view[i, 1] = out[i].dst
        view[i, 2] = out[i].arrow
    return result


def feature_planes(uint64_t mine, uint64_t theirs, uint64_t arrows, int num_planes) -> np.ndarray:
    """The native feature planes of a canonical position: `(num_planes, 8, 8) float32`."""
    if num_planes not in (3, 7):
        raise ValueError(f"num_planes must be 3 or 7, got {num_planes}")
    cdef Pos pos
    pos.mine, pos.theirs, pos.arrows = mine, theirs, arrows
    planes = np.empty((64, num_planes), np.float32)
    cdef float[:, ::1] view = planes
    write_features(pos, num_planes, &view[0, 0])
    return np.ascontiguousarray(planes.T.reshape(num_planes, 8, 8))


def board_feature_planes(const uint64_t[::1] position, int num_planes, int size) -> np.ndarray:
    """The feature planes the evaluator computes for a canonical position of a `size` x `size`
    board (a row of `3 * W` words): `(num_planes, size, size) float32`.

    Raises:
        ValueError: a size out of range, a row of another width, a position the evaluator
            refuses (as `NativeEvaluator.evaluate`), or num_planes not 3 or 7.
    """
    if num_planes not in (3, 7):
        raise ValueError(f"num_planes must be 3 or 7, got {num_planes}")
    cdef int words = 3 * _words(size)
    if position.shape[0] != words:
        raise ValueError(f"a {size}x{size} position has {words} words, got {position.shape[0]}")
    why = amz_board_position_error(size, &position[0]).decode()
    if why:
        raise ValueError(f"the evaluator cannot take the position: {why}")
    planes = np.empty((size * size, num_planes), np.float32)
    cdef float[:, ::1] view = planes
    amz_board_features(size, &position[0], num_planes, &view[0, 0])
    return np.ascontiguousarray(planes.T.reshape(num_planes, size, size))
