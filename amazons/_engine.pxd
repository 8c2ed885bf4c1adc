# Declarations of the rules engine. `_engine.pyx` explains each piece; other Cython modules may
# cimport these to call the nogil kernels directly. The board size comes from `_engine_board.h`
# (AMZ_N, set by setup.py per module: `_engine` is 8x8, `_engine6` ... `_engine10` the others).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

cdef extern from "_engine_board.h":
    enum:
        AMZ_SIZE                      # squares per row and per column (N)
        AMZ_SQUARES                   # N * N
        AMZ_WORDS                     # uint64 words per bitboard in position arrays (1 or 2)
        AMZ_HISTORY_PLIES             # moves State can undo (N * N: a push fills a square for good)
    # The bitboard word: uint64_t for N <= 8, unsigned __int128 for N = 9, 10. Declared to Cython
    # as a 64-bit integer only so that it does C arithmetic on it; it never meets a Python object
    # (amz_lo / amz_hi / amz_join convert through uint64 words).
    ctypedef unsigned long long bb_t "amz_bb"
    bb_t FULL "AMZ_FULL"              # every square; complements are masked with it
    int amz_ctz(bb_t b) nogil
    int amz_msb(bb_t b) nogil
    int amz_popcount(bb_t b) nogil
    uint64_t amz_lo(bb_t b) nogil
    uint64_t amz_hi(bb_t b) nogil
    bb_t amz_join(uint64_t lo, uint64_t hi) nogil
    bb_t amz_rotate180(bb_t b) nogil

# Outcome of State.push: 0 = played, otherwise which part of the move was wrong.
cpdef enum PushStatus:
    PUSH_OK = 0
    PUSH_BAD_SQUARE = 1
    PUSH_NOT_YOUR_AMAZON = 2
    PUSH_DESTINATION_UNREACHABLE = 3
    PUSH_ARROW_UNREACHABLE = 4
    PUSH_GAME_TOO_LONG = 5

# Canonical position: bitboards from the side to move's view (White's rotated 180 degrees).
cdef struct CPos:
    bb_t mine
    bb_t theirs
    bb_t arrows

cdef bb_t queen_moves(int square, bb_t occupied) noexcept nogil
cdef bb_t attacks_from_set(bb_t sources, bb_t empty) noexcept nogil
cdef bb_t reverse_bits(bb_t board) noexcept nogil
cdef int64_t count_moves(CPos pos) noexcept nogil
cdef bint has_move(bb_t movers, bb_t occupied) noexcept nogil
cdef int64_t write_moves(CPos pos, int32_t[:, ::1] out, int64_t start, int64_t capacity) noexcept nogil
cdef CPos child_position(CPos pos, int src, int dst, int arrow) noexcept nogil
cdef int64_t perft_count(CPos pos, int depth) noexcept nogil
cdef void write_features(CPos pos, float[:, :, ::1] planes, int num_planes) noexcept nogil


cdef class State:
    cdef bb_t amazons[2]              # [BLACK, WHITE] amazon bitboards, real (Botzone) frame
    cdef bb_t arrows                  # arrow bitboard, real frame
    cdef int side                     # side to move: 0 = BLACK, 1 = WHITE
    cdef int plies                    # plies played since the start of the game
    cdef uint64_t zobrist             # Zobrist hash of (amazons, arrows, turn)
    cdef int undo_depth               # moves pop() can undo
    cdef int32_t history[AMZ_HISTORY_PLIES][3]

    cdef void _rehash(self)
    cdef CPos canonical(self) noexcept nogil
    cdef int push_unchecked(self, int src, int dst, int arrow) noexcept nogil


# Adjudication of separated positions and queen-distance territory (canonical frame).
from libc.stdint cimport int8_t, int16_t

cdef enum:
    EXACT_FILL_MAX_SQUARES = 12       # regions this small (empty squares) get the exhaustive fill search
    EXACT_FILL_NODE_BUDGET = 5000     # nodes per exhaustive region search; past it, the best fill found
    FILL_TABLE_SIZE = 1024            # transposition entries of one region search (a power of two)
    MAX_EXACT_FILL_MOVES = 640        # moves in a region of EXACT_FILL_MAX_SQUARES: 4 x 12 x 13 < 640

cdef bint is_separated(CPos pos) noexcept nogil
cdef int adjudicate_position(CPos pos, int16_t *bounds) noexcept nogil
cdef void write_territory(CPos pos, int8_t *out) noexcept nogil
