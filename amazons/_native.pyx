# cython: language_level=3
# distutils: language = c++
"""The native core's network as a compiled CPU evaluator (Cython over C++, the GIL released).

The C++ is the native core's (`amazons/native/`): the rules' feature planes (`rules.h`), the
kernels (`kernels.h`, portable and AVX2/FMA with Winograd convolutions) and the forward pass
(`network.h`), the same parts the Botzone export joins into its source, run over a batch by
`evaluator.h`. This module is the thin typed layer; `amazons.nativenet` is its public face
(checks, the `Evaluator` protocol, loading models). A few rules entry points (perft, legal
moves, feature planes) let the tests hold the rules part to the engine.

Imports nothing from the package.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector

import numpy as np

cdef extern from "native/evaluator.h" nogil:
    cdef struct Pos:
        uint64_t mine, theirs, arrows

    cdef struct Move:
        uint8_t src, dst, arrow

    cdef cppclass NetShape:
        int num_planes, channels, key_dim, head_dim, value_channels, value_hidden
        cbool joint, arrow_source
        vector[int] trunk

    cdef cppclass BatchEvaluator:
        BatchEvaluator() except +
        void set_kernels(cbool portable) except +
        const char* kernels_name()
        void load(const NetShape& shape, const float* weights, size_t count) except +
        void evaluate(int64_t batch, const uint64_t* positions, const int32_t* moves, const int64_t* offsets,
                      float* priors, float* values, int threads) except +

    void init_tables()
    size_t network_weight_floats(const NetShape& shape)
    string network_shape_error(const NetShape& shape)
    int64_t perft(const Pos& pos, int depth)
    int legal_moves(const Pos& pos, Move* out)
    void write_features(const Pos& pos, int num_planes, float* planes)
    int MAX_MOVES

init_tables()

TRUNK_KINDS = {"residual": 0, "attention": 1}


cdef NetShape _shape(dict config, list trunk) except *:
    cdef NetShape shape
    shape.num_planes = int(config["num_planes"])
    shape.channels = int(config["channels"])
    shape.key_dim = int(config["attention_dim"])
    shape.head_dim = int(config["head_dim"])
    shape.value_channels = int(config["value_channels"])
    shape.value_hidden = int(config["value_hidden"])
    shape.joint = config["policy_head"] == "joint"
    shape.arrow_source = bool(config.get("arrow_source", False))
    for kind in trunk:
        shape.trunk.push_back(TRUNK_KINDS.get(kind, -1))
    return shape


def shape_error(dict config, list trunk) -> str:
    """Why the network of `config` (a `NetConfig` dict) and `trunk` cannot run here, or ""."""
    if config.get("policy_head") not in ("joint", "factorized"):
        return f"policy_head {config.get('policy_head')!r} is neither 'joint' nor 'factorized'"
    return network_shape_error(_shape(config, trunk)).decode()


def weight_floats(dict config, list trunk) -> int:
    """The floats of the network's weights in `NumpyNet.layout_arrays` order."""
    return network_weight_floats(_shape(config, trunk))


cdef class NativeNetwork:
    """One network's weights and the evaluator over them (see `amazons.nativenet.NativeEvaluator`)."""

    cdef BatchEvaluator* core

    def __cinit__(self):
        self.core = new BatchEvaluator()

    def __dealloc__(self):
        del self.core

    def set_kernels(self, bint portable) -> None:
        self.core.set_kernels(portable)

    @property
    def kernels(self) -> str:
        return self.core.kernels_name().decode()

    def load(self, dict config, list trunk, const float[::1] weights) -> None:
        cdef NetShape shape = _shape(config, trunk)
        cdef size_t count = weights.shape[0]
        cdef const float* data = &weights[0] if count else NULL
        with nogil:
            self.core.load(shape, data, count)

    def evaluate(self, const uint64_t[:, ::1] positions, const int32_t[:, ::1] moves,
                 const int64_t[::1] offsets, float[::1] priors, float[::1] values, int threads) -> None:
        cdef int64_t batch = positions.shape[0]
        cdef const uint64_t* p = &positions[0, 0] if batch else NULL
        cdef const int32_t* m = &moves[0, 0] if moves.shape[0] else NULL
        cdef float* out_priors = &priors[0] if priors.shape[0] else NULL
        cdef float* out_values = &values[0] if batch else NULL
        with nogil:
            self.core.evaluate(batch, p, m, &offsets[0], out_priors, out_values, threads)


def perft_position(uint64_t mine, uint64_t theirs, uint64_t arrows, int depth) -> int:
    """perft(depth) of a canonical position, counted by the native rules."""
    cdef Pos pos
    pos.mine, pos.theirs, pos.arrows = mine, theirs, arrows
    with nogil:
        count = perft(pos, depth)
    return count


def legal_move_array(uint64_t mine, uint64_t theirs, uint64_t arrows) -> np.ndarray:
    """The legal moves of a canonical position by the native rules: `(M, 3) int32`, engine order."""
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
