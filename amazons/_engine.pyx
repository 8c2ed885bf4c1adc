# cython: language_level=3
"""The rules of the Game of the Amazons on bitboards, for one board size (6x6 to 10x10).

This module owns the rules: move generation, make/unmake, terminal tests, perft, random
playouts, feature planes, adjudication, territory and the classical evaluation terms. Nothing
else in the package re-implements them. It imports nothing from the package (it is the first
link of the chain).

One source, one module per board size: setup.py compiles this file as `amazons._engine` (8x8,
N = 8) and, from generated copies under their own names, `amazons._engine6`, `_engine7`,
`_engine9` and `_engine10`. The size is the C macro AMZ_N; `_engine_board.h` turns it into
compile-time constants (AMZ_SIZE, AMZ_SQUARES, AMZ_WORDS, the all-squares mask FULL) and the
bitboard word `bb_t` with its bit-scan helpers: a uint64 for N <= 8, an unsigned __int128 for
N = 9, 10. For N = 8 the kernels are the same 64-bit code as always, constants folded in.

Squares are `y * N + x` (x = column, y = row from the top, Botzone's convention), so bit `s` of a
bitboard is square `s`; bits at or above N * N are always zero (every complement is masked with
FULL before it can spread there). Two frames are used:

* the real frame (`State`), with Black's and White's amazons;
* the canonical frame (`CPos`, and `(B, 3 * WORDS) uint64` arrays at the Python level, each
  bitboard as WORDS words, low squares first): the side to move's view, (mine, theirs, arrows).
  White's view is the real board rotated 180 degrees (square `s` -> `N * N - 1 - s`). Applying a
  canonical move to a canonical position yields the child's canonical position, so callers
  working in this frame (the search, the network) never deal with colours.

Sliding moves use ray tables: for each of the 8 directions and each square, the bitboard of the
ray; the first blocker on a ray is found with one bit scan (forward for directions that increase
the square index, reverse for the others). Sets of sliders (feature planes) use Kogge-Stone
occluded fills instead, which move all sources at once.

Batch entry points take typed memoryviews of caller-owned numpy arrays and release the GIL; they
check shapes and capacities, while dtypes are checked by the memoryview conversion itself (and
once more, with friendlier messages, by `amazons.engine`). A `bb_t` never meets a Python object:
Python ints and numpy words go through `amz_join` / `amz_lo` / `amz_hi`.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

import operator

BLACK = 0
WHITE = 1
BOARD_SIZE = AMZ_SIZE
NUM_SQUARES = AMZ_SQUARES
WORDS = AMZ_WORDS  # uint64 words per bitboard in position arrays: positions are (B, 3 * WORDS)
AMAZONS_PER_SIDE = 4  # every named start's (Botzone's 8x8 one included); every move keeps the count
MAX_GAME_PLIES = AMZ_SQUARES - 8  # each move fills one of the squares empty at a 4-a-side start

cdef uint64_t MASK64 = 0xFFFFFFFFFFFFFFFF
# A module variable, as it always was, not the header's constant AMZ_ONE: with the constant, GCC
# inlines queen_moves into count_moves and vectorizes it, and 8x8 perft ran 20% slower.
cdef bb_t ONE = 1

# Directions 0..3 increase the square index (E +1, S +N, SE +N+1, SW +N-1), 4..7 decrease it
# (W -1, N -N, NW -N-1, NE -N+1). DIR_WRAP masks out squares that a shift would wrap onto.
cdef int DIR_DX[8]
cdef int DIR_DY[8]
cdef int DIR_SHIFT[8]
cdef bb_t FILE_FIRST                  # x == 0
cdef bb_t FILE_LAST                   # x == N - 1
cdef bb_t NOT_FILE_FIRST              # the board's squares with x > 0
cdef bb_t NOT_FILE_LAST               # the board's squares with x < N - 1
cdef bb_t DIR_WRAP[8]
cdef bb_t RAYS[8][AMZ_SQUARES]
cdef bb_t NEIGHBOURS[AMZ_SQUARES]
cdef uint64_t ZOBRIST[3][AMZ_SQUARES]  # [black amazon, white amazon, arrow][square]
cdef uint64_t ZOBRIST_WHITE_TO_MOVE


cdef uint64_t splitmix64(uint64_t *state) noexcept nogil:
    state[0] += <uint64_t>0x9E3779B97F4A7C15
    cdef uint64_t z = state[0]
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EB
    return z ^ (z >> 31)


cdef int _init_tables():
    """Fill the ray, neighbour, wrap and Zobrist tables; return the queen's widest reach."""
    global ZOBRIST_WHITE_TO_MOVE, FILE_FIRST, FILE_LAST, NOT_FILE_FIRST, NOT_FILE_LAST
    cdef int d, square, x, y, step, reach, widest = 0
    cdef uint64_t seed = 20261121
    dx = (1, 0, 1, -1, -1, 0, -1, 1)
    dy = (0, 1, 1, 1, 0, -1, -1, -1)
    FILE_FIRST = 0
    FILE_LAST = 0
    for y in range(AMZ_SIZE):
        FILE_FIRST |= ONE << (y * AMZ_SIZE)
        FILE_LAST |= ONE << (y * AMZ_SIZE + AMZ_SIZE - 1)
    NOT_FILE_FIRST = FULL & ~FILE_FIRST
    NOT_FILE_LAST = FULL & ~FILE_LAST
    for d in range(8):
        DIR_DX[d] = dx[d]
        DIR_DY[d] = dy[d]
        DIR_SHIFT[d] = abs(dy[d] * AMZ_SIZE + dx[d])
        DIR_WRAP[d] = NOT_FILE_FIRST if dx[d] == 1 else (NOT_FILE_LAST if dx[d] == -1 else FULL)
    for square in range(AMZ_SQUARES):
        NEIGHBOURS[square] = 0
        reach = 0
        for d in range(8):
            RAYS[d][square] = 0
            x = square % AMZ_SIZE + DIR_DX[d]
            y = square // AMZ_SIZE + DIR_DY[d]
            step = 0
            while 0 <= x < AMZ_SIZE and 0 <= y < AMZ_SIZE:
                RAYS[d][square] |= ONE << (y * AMZ_SIZE + x)
                if step == 0:
                    NEIGHBOURS[square] |= ONE << (y * AMZ_SIZE + x)
                step += 1
                reach += 1
                x += DIR_DX[d]
                y += DIR_DY[d]
        widest = max(widest, reach)
    for d in range(3):
        for square in range(AMZ_SQUARES):
            ZOBRIST[d][square] = splitmix64(&seed)
    ZOBRIST_WHITE_TO_MOVE = splitmix64(&seed)
    return widest


# The most squares a queen reaches on the empty board (6: 19, 7: 24, 8: 27, 9: 32, 10: 35).
QUEEN_REACH = _init_tables()
# The upper bound on legal moves in one position of AMAZONS_PER_SIDE amazons a side: each amazon
# reaches at most QUEEN_REACH squares, and so does its arrow (8x8: 2,916; 10x10: 4,900). The
# native core's rules.h keeps the 8x8 figures as literals; tests check they agree.
MAX_MOVES = AMAZONS_PER_SIDE * QUEEN_REACH * QUEEN_REACH


# ---------------------------------------------------------------------------------------------
# Bitboard kernels
# ---------------------------------------------------------------------------------------------

cdef bb_t queen_moves(int square, bb_t occupied) noexcept nogil:
    """Empty squares a queen on `square` reaches; `occupied` blocks (the square itself is ignored).

    Branch-free: a sentinel bit (the last square, N * N - 1, for rays that grow the index, 0 for
    the others) stands in for "no blocker": it lies beyond every square of such a ray, and its own
    ray in that direction is empty. The ray beyond the first blocker is cut with that square's own
    ray, and the blocker itself is removed by the final mask.
    """
    cdef bb_t result = 0, ray
    cdef int d
    for d in range(4):
        ray = RAYS[d][square]
        result |= ray & ~RAYS[d][amz_ctz((ray & occupied) | (ONE << (AMZ_SQUARES - 1)))]
    for d in range(4, 8):
        ray = RAYS[d][square]
        result |= ray & ~RAYS[d][amz_msb((ray & occupied) | ONE)]
    return result & ~occupied


cdef inline bb_t shift_towards(bb_t board, int d, int steps) noexcept nogil:
    if d < 4:
        return board << (DIR_SHIFT[d] * steps)
    return board >> (DIR_SHIFT[d] * steps)


cdef bb_t attacks_from_set(bb_t sources, bb_t empty) noexcept nogil:
    """Union of the queen moves of every square in `sources` over the `empty` squares.

    `empty` may have bits off the board: DIR_WRAP holds only board squares.
    """
    cdef bb_t result = 0, generated, propagator
    cdef int d
    for d in range(8):
        propagator = empty & DIR_WRAP[d]
        generated = sources
        generated |= propagator & shift_towards(generated, d, 1)
        propagator &= shift_towards(propagator, d, 1)
        generated |= propagator & shift_towards(generated, d, 2)
        propagator &= shift_towards(propagator, d, 2)
        generated |= propagator & shift_towards(generated, d, 4)
        if AMZ_SIZE > 8:
            # Rays of 8 or 9 squares: one more doubling (a constant test, folded away for N <= 8).
            propagator &= shift_towards(propagator, d, 4)
            generated |= propagator & shift_towards(generated, d, 8)
        result |= shift_towards(generated, d, 1) & DIR_WRAP[d] & empty
    return result


cdef bb_t reverse_bits(bb_t board) noexcept nogil:
    """Square s -> N * N - 1 - s: the 180-degree rotation that turns White's view into Black's."""
    return amz_rotate180(board)


cdef bint has_move(bb_t movers, bb_t occupied) noexcept nogil:
    """Whether any amazon in `movers` has a legal move.

    An amazon that can step anywhere can step to an adjacent empty square and shoot back onto the
    square it left, so this only needs the neighbours, never the move list.
    """
    cdef int square
    while movers:
        square = amz_ctz(movers)
        movers &= movers - 1
        if NEIGHBOURS[square] & ~occupied:
            return True
    return False


cdef int64_t count_moves(CPos pos) noexcept nogil:
    """Number of legal moves of the side to move (bulk counting: no list is built)."""
    cdef bb_t occupied = pos.mine | pos.theirs | pos.arrows
    cdef bb_t movers = pos.mine, destinations, vacated
    cdef int src, dst
    cdef int64_t total = 0
    while movers:
        src = amz_ctz(movers)
        movers &= movers - 1
        vacated = occupied & ~(ONE << src)
        destinations = queen_moves(src, occupied)
        while destinations:
            dst = amz_ctz(destinations)
            destinations &= destinations - 1
            total += amz_popcount(queen_moves(dst, vacated))
    return total


cdef int64_t write_moves(CPos pos, int32_t[:, ::1] out, int64_t start, int64_t capacity) noexcept nogil:
    """Write the legal moves into `out[start:]` as (src, dst, arrow) rows.

    Returns:
        The number of legal moves. Rows at or past `capacity` are counted but not written.
    """
    cdef bb_t occupied = pos.mine | pos.theirs | pos.arrows
    cdef bb_t movers = pos.mine, destinations, arrows, vacated
    cdef int src, dst
    cdef int64_t row = start
    while movers:
        src = amz_ctz(movers)
        movers &= movers - 1
        vacated = occupied & ~(ONE << src)
        destinations = queen_moves(src, occupied)
        while destinations:
            dst = amz_ctz(destinations)
            destinations &= destinations - 1
            arrows = queen_moves(dst, vacated)
            if row + amz_popcount(arrows) <= capacity:
                while arrows:
                    out[row, 0] = src
                    out[row, 1] = dst
                    out[row, 2] = amz_ctz(arrows)
                    arrows &= arrows - 1
                    row += 1
            else:
                row += amz_popcount(arrows)
    return row - start


cdef CPos child_position(CPos pos, int src, int dst, int arrow) noexcept nogil:
    """The canonical position after the canonical move (src, dst, arrow), for the opponent."""
    cdef CPos child
    child.mine = reverse_bits(pos.theirs)
    child.theirs = reverse_bits((pos.mine & ~(ONE << src)) | (ONE << dst))
    child.arrows = reverse_bits(pos.arrows | (ONE << arrow))
    return child


cdef inline bint is_legal(CPos pos, int src, int dst, int arrow) noexcept nogil:
    cdef bb_t occupied = pos.mine | pos.theirs | pos.arrows
    if not (0 <= src < AMZ_SQUARES and 0 <= dst < AMZ_SQUARES and 0 <= arrow < AMZ_SQUARES):
        return False
    if not (pos.mine >> src) & 1:
        return False
    if not (queen_moves(src, occupied) >> dst) & 1:
        return False
    return (queen_moves(dst, occupied & ~(ONE << src)) >> arrow) & 1


cdef int64_t perft_count(CPos pos, int depth) noexcept nogil:
    """Number of move sequences of exactly `depth` plies (bulk counting at the last ply)."""
    if depth <= 0:
        return 1
    if depth == 1:
        return count_moves(pos)
    cdef bb_t occupied = pos.mine | pos.theirs | pos.arrows
    cdef bb_t movers = pos.mine, destinations, arrows, vacated
    cdef int src, dst, arrow
    cdef int64_t total = 0
    while movers:
        src = amz_ctz(movers)
        movers &= movers - 1
        vacated = occupied & ~(ONE << src)
        destinations = queen_moves(src, occupied)
        while destinations:
            dst = amz_ctz(destinations)
            destinations &= destinations - 1
            arrows = queen_moves(dst, vacated)
            while arrows:
                arrow = amz_ctz(arrows)
                arrows &= arrows - 1
                total += perft_count(child_position(pos, src, dst, arrow), depth - 1)
    return total


cdef inline bb_t shoot_potential(bb_t movers, bb_t occupied) noexcept nogil:
    """Squares an arrow reaches in some legal move of the amazons in `movers`."""
    cdef bb_t result = 0, vacated_empty
    cdef int src
    while movers:
        src = amz_ctz(movers)
        movers &= movers - 1
        vacated_empty = ~occupied | (ONE << src)
        result |= attacks_from_set(queen_moves(src, occupied), vacated_empty)
    return result


cdef inline void write_plane(float[:, :, ::1] planes, int channel, bb_t board) noexcept nogil:
    cdef int square
    for square in range(AMZ_SQUARES):
        planes[channel, square // AMZ_SIZE, square % AMZ_SIZE] = <float>((board >> square) & 1)


cdef void write_features(CPos pos, float[:, :, ::1] planes, int num_planes) noexcept nogil:
    """Write the 3- or 7-plane encoding of one canonical position into `planes` [C, N, N]."""
    cdef bb_t occupied = pos.mine | pos.theirs | pos.arrows
    write_plane(planes, 0, pos.mine)
    write_plane(planes, 1, pos.theirs)
    if num_planes == 3:
        write_plane(planes, 2, pos.arrows)
        return
    write_plane(planes, 2, occupied)
    write_plane(planes, 3, attacks_from_set(pos.mine, ~occupied))
    write_plane(planes, 4, attacks_from_set(pos.theirs, ~occupied))
    write_plane(planes, 5, shoot_potential(pos.mine, occupied))
    write_plane(planes, 6, shoot_potential(pos.theirs, occupied))


cdef inline uint64_t next_random(uint64_t *state) noexcept nogil:
    # xorshift64*: fast, and plenty for choosing uniformly among at most MAX_MOVES moves.
    state[0] ^= state[0] >> 12
    state[0] ^= state[0] << 25
    state[0] ^= state[0] >> 27
    return state[0] * <uint64_t>0x2545F4914F6CDD1D


cdef float random_playout(CPos pos, uint64_t *rng) noexcept nogil:
    """Play uniformly random legal moves to the end; +1 if the side to move at `pos` wins."""
    cdef bb_t occupied, movers, destinations, arrows, vacated
    cdef int src, dst, arrow, plies = 0
    cdef int64_t total, pick
    while True:
        total = count_moves(pos)
        if total == 0:
            # The side to move now has lost; it is the starting side iff an even number of plies passed.
            return -1.0 if plies % 2 == 0 else 1.0
        pick = <int64_t>(next_random(rng) % <uint64_t>total)
        occupied = pos.mine | pos.theirs | pos.arrows
        movers = pos.mine
        src = dst = arrow = -1
        while movers and arrow < 0:
            src = amz_ctz(movers)
            movers &= movers - 1
            vacated = occupied & ~(ONE << src)
            destinations = queen_moves(src, occupied)
            while destinations:
                dst = amz_ctz(destinations)
                destinations &= destinations - 1
                arrows = queen_moves(dst, vacated)
                if pick < amz_popcount(arrows):
                    while pick > 0:
                        arrows &= arrows - 1
                        pick -= 1
                    arrow = amz_ctz(arrows)
                    break
                pick -= amz_popcount(arrows)
        pos = child_position(pos, src, dst, arrow)
        plies += 1


cdef inline bb_t load_board(const uint64_t *words, int board) noexcept nogil:
    # Bitboard `board` of a position row is its WORDS words, low squares first (a constant test).
    if AMZ_WORDS == 1:
        return words[board]
    return amz_join(words[2 * board], words[2 * board + 1])


cdef inline CPos load_words(const uint64_t *words) noexcept nogil:
    cdef CPos pos
    pos.mine = load_board(words, 0)
    pos.theirs = load_board(words, 1)
    pos.arrows = load_board(words, 2)
    return pos


cdef inline CPos load(const uint64_t[:, ::1] positions, Py_ssize_t row) noexcept nogil:
    return load_words(&positions[row, 0])


cdef inline void store_board(uint64_t *words, int board, bb_t value) noexcept nogil:
    if AMZ_WORDS == 1:
        words[board] = amz_lo(value)
    else:
        words[2 * board] = amz_lo(value)
        words[2 * board + 1] = amz_hi(value)


cdef inline void store_words(uint64_t *words, CPos pos) noexcept nogil:
    store_board(words, 0, pos.mine)
    store_board(words, 1, pos.theirs)
    store_board(words, 2, pos.arrows)


cdef inline void store(uint64_t[:, ::1] positions, Py_ssize_t row, CPos pos) noexcept nogil:
    store_words(&positions[row, 0], pos)


cdef inline bint overlapping(CPos pos) noexcept nogil:
    return (pos.mine & pos.theirs) != 0 or (pos.mine & pos.arrows) != 0 or (pos.theirs & pos.arrows) != 0


cdef inline int _check_rows(str name, Py_ssize_t rows, Py_ssize_t expected) except -1:
    if rows != expected:
        raise ValueError(f"{name} has {rows} rows; expected {expected}")
    return 0


cdef enum:
    POSITION_WIDTH = 3 * AMZ_WORDS    # uint64 columns of a position row: mine, theirs, arrows


cdef inline int _check_width(str name, Py_ssize_t columns) except -1:
    # A C call, not a Python one: a batch call of a few hundred positions takes microseconds,
    # and every Python-level check is a measurable share of it.
    if columns != POSITION_WIDTH:
        raise ValueError(f"{name} has {columns} columns; expected {POSITION_WIDTH} (3 bitboards "
                         f"of {AMZ_WORDS} uint64 words on {AMZ_SIZE}x{AMZ_SIZE})")
    return 0


# ---------------------------------------------------------------------------------------------
# Batch entry points (canonical frame)
# ---------------------------------------------------------------------------------------------

def legal_moves_batch(const uint64_t[:, ::1] positions, int32_t[:, ::1] out_moves,
                      int64_t[::1] out_offsets):
    """Legal moves of every position, concatenated into `out_moves` (CSR layout).

    Args:
        positions: [B, 3 * WORDS] uint64, canonical positions.
        out_moves: [capacity, 3] int32, receives (src, dst, arrow) rows.
        out_offsets: [B + 1] int64, receives the CSR offsets; moves of position i are rows
            out_offsets[i]:out_offsets[i + 1].

    Returns:
        The total number of legal moves. When it exceeds `out_moves`' capacity, the offsets are
        still exact but the rows past the capacity were not written (the caller must check).
    """
    _check_width("positions", positions.shape[1])
    if out_moves.shape[1] != 3:
        raise ValueError("out_moves must have 3 columns")
    _check_rows("out_offsets", out_offsets.shape[0], positions.shape[0] + 1)
    cdef Py_ssize_t row, count = positions.shape[0]
    cdef int64_t total = 0, capacity = out_moves.shape[0]
    with nogil:
        out_offsets[0] = 0
        for row in range(count):
            total += write_moves(load(positions, row), out_moves, total, capacity)
            out_offsets[row + 1] = total
    return total


def count_moves_batch(const uint64_t[:, ::1] positions, int32_t[::1] out_counts):
    """Count the legal moves of every position into `out_counts` [B] int32, without listing them."""
    _check_width("positions", positions.shape[1])
    _check_rows("out_counts", out_counts.shape[0], positions.shape[0])
    cdef Py_ssize_t row
    with nogil:
        for row in range(positions.shape[0]):
            out_counts[row] = <int32_t>count_moves(load(positions, row))


def terminal_batch(const uint64_t[:, ::1] positions, uint8_t[::1] out_terminal):
    """Write 1 into `out_terminal` [B] uint8 where the side to move has no legal move, else 0."""
    _check_width("positions", positions.shape[1])
    _check_rows("out_terminal", out_terminal.shape[0], positions.shape[0])
    cdef Py_ssize_t row
    cdef CPos pos
    with nogil:
        for row in range(positions.shape[0]):
            pos = load(positions, row)
            out_terminal[row] = not has_move(pos.mine, pos.mine | pos.theirs | pos.arrows)


def winning_moves_batch(const uint64_t[:, ::1] positions, const int32_t[:, ::1] moves,
                        const int64_t[::1] offsets, uint8_t[::1] out_wins):
    """Mark the moves after which the opponent has no legal move (the mover has won).

    An amazon can move iff one of its neighbours is empty, and a move empties only its source and
    fills only its destination and arrow. So a position whose opponent has more than two empty
    squares around its amazons has no winning move, and otherwise a move wins iff no square
    around the opponent's amazons is empty after it: a few bit operations per move.

    Args:
        positions: [B, 3 * WORDS] uint64, canonical positions.
        moves: [M, 3] int32, their legal moves (as `legal_moves_batch` lists them).
        offsets: [B + 1] int64, position i owns rows offsets[i]:offsets[i + 1].
        out_wins: [M] uint8, receives 1 for a winning move, else 0.

    Returns:
        The number of winning moves.
    """
    _check_width("positions", positions.shape[1])
    if moves.shape[1] != 3:
        raise ValueError("moves must have 3 columns")
    _check_rows("offsets", offsets.shape[0], positions.shape[0] + 1)
    _check_rows("out_wins", out_wins.shape[0], moves.shape[0])
    if offsets[0] != 0 or offsets[positions.shape[0]] > moves.shape[0]:
        raise ValueError("offsets must run from 0 to at most the number of moves")
    cdef Py_ssize_t row, i
    cdef int64_t wins = 0
    cdef bb_t around, empty, after, theirs
    cdef CPos pos
    with nogil:
        for row in range(positions.shape[0]):
            pos = load(positions, row)
            empty = ~(pos.mine | pos.theirs | pos.arrows)
            around = 0
            theirs = pos.theirs
            while theirs:
                around |= NEIGHBOURS[amz_ctz(theirs)]
                theirs &= theirs - 1
            for i in range(offsets[row], offsets[row + 1]):
                out_wins[i] = 0
            if amz_popcount(around & empty) > 2:
                continue
            for i in range(offsets[row], offsets[row + 1]):
                after = (empty | (ONE << moves[i, 0])) & ~(ONE << moves[i, 1]) & ~(ONE << moves[i, 2])
                if (around & after) == 0:
                    out_wins[i] = 1
                    wins += 1
    return wins


def apply_moves_batch(const uint64_t[:, ::1] positions, const int32_t[:, ::1] moves,
                      uint64_t[:, ::1] out_positions, bint check_legal=True):
    """Children of `positions` [B, 3 * WORDS] after `moves` [B, 3] (canonical), into `out_positions`.

    Returns:
        -1 if every move was legal (or `check_legal` is False), else the first illegal row.
    """
    _check_width("positions", positions.shape[1])
    _check_width("out_positions", out_positions.shape[1])
    if moves.shape[1] != 3:
        raise ValueError("moves must have 3 columns")
    _check_rows("moves", moves.shape[0], positions.shape[0])
    _check_rows("out_positions", out_positions.shape[0], positions.shape[0])
    cdef Py_ssize_t row
    cdef Py_ssize_t bad = -1
    cdef CPos pos
    with nogil:
        for row in range(positions.shape[0]):
            pos = load(positions, row)
            if check_legal and not is_legal(pos, moves[row, 0], moves[row, 1], moves[row, 2]):
                bad = row
                break
            store(out_positions, row, child_position(pos, moves[row, 0], moves[row, 1], moves[row, 2]))
    return bad


def play_paths_batch(const uint64_t[:, ::1] root_positions, const int32_t[::1] path_roots,
                     const int32_t[:, :, ::1] path_moves, const int32_t[::1] path_lengths,
                     uint64_t[:, ::1] out_positions):
    """Play each path of canonical moves from its root; write the final positions.

    Args:
        root_positions: [G, 3 * WORDS] uint64, canonical root positions.
        path_roots: [B] int32, index of each path's root in `root_positions`.
        path_moves: [B, L, 3] int32; path i is path_moves[i, :path_lengths[i]], each move in the
            canonical frame of the position it is played from.
        path_lengths: [B] int32, 0 <= length <= L.
        out_positions: [B, 3 * WORDS] uint64, receives the canonical positions at the ends of the paths.

    Returns:
        -1 if every path is legal, else the index of the first path with an illegal move.
    """
    cdef Py_ssize_t count = path_roots.shape[0], path, step
    _check_width("root_positions", root_positions.shape[1])
    _check_width("out_positions", out_positions.shape[1])
    if path_moves.shape[2] != 3:
        raise ValueError("path_moves must have 3 entries per move")
    _check_rows("path_moves", path_moves.shape[0], count)
    _check_rows("path_lengths", path_lengths.shape[0], count)
    _check_rows("out_positions", out_positions.shape[0], count)
    cdef Py_ssize_t num_roots = root_positions.shape[0], max_length = path_moves.shape[1]
    cdef Py_ssize_t bad = -1
    cdef CPos pos
    cdef int src, dst, arrow
    with nogil:
        for path in range(count):
            if path_roots[path] < 0 or path_roots[path] >= num_roots or path_lengths[path] < 0 \
                    or path_lengths[path] > max_length:
                bad = path
                break
            pos = load(root_positions, path_roots[path])
            for step in range(path_lengths[path]):
                src = path_moves[path, step, 0]
                dst = path_moves[path, step, 1]
                arrow = path_moves[path, step, 2]
                if not is_legal(pos, src, dst, arrow):
                    bad = path
                    break
                pos = child_position(pos, src, dst, arrow)
            if bad >= 0:
                break
            store(out_positions, path, pos)
    return bad


def features_batch(const uint64_t[:, ::1] positions, float[:, :, :, ::1] out_planes):
    """Write feature planes [B, C, N, N] float32 (C = 3 or 7) of canonical positions."""
    _check_width("positions", positions.shape[1])
    _check_rows("out_planes", out_planes.shape[0], positions.shape[0])
    cdef int num_planes = out_planes.shape[1]
    if num_planes != 3 and num_planes != 7:
        raise ValueError(f"out_planes has {num_planes} channels; expected 3 or 7")
    if out_planes.shape[2] != AMZ_SIZE or out_planes.shape[3] != AMZ_SIZE:
        raise ValueError(f"out_planes must be [B, C, {AMZ_SIZE}, {AMZ_SIZE}]")
    cdef Py_ssize_t row
    with nogil:
        for row in range(positions.shape[0]):
            write_features(load(positions, row), out_planes[row], num_planes)


def rollouts_batch(const uint64_t[:, ::1] positions, uint64_t seed, float[::1] out_values):
    """Uniformly random playouts from each position; +1/-1 for its side to move into `out_values`."""
    _check_width("positions", positions.shape[1])
    _check_rows("out_values", out_values.shape[0], positions.shape[0])
    cdef Py_ssize_t row
    cdef uint64_t rng, mix
    with nogil:
        for row in range(positions.shape[0]):
            mix = seed * <uint64_t>0x100000001B3 + <uint64_t>row
            rng = splitmix64(&mix) | 1
            out_values[row] = random_playout(load(positions, row), &rng)


def perft_position(const uint64_t[::1] position, int depth):
    """perft(depth) of one canonical position [3 * WORDS] uint64."""
    if position.shape[0] != POSITION_WIDTH:
        raise ValueError(f"position has {position.shape[0]} entries; expected {POSITION_WIDTH}")
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    cdef CPos pos = load_words(&position[0])
    if overlapping(pos):
        raise ValueError("position has overlapping bitboards")
    cdef int64_t total
    with nogil:
        total = perft_count(pos, depth)
    return total


# ---------------------------------------------------------------------------------------------
# A game in the real frame, with make/unmake and a Zobrist hash
# ---------------------------------------------------------------------------------------------

HISTORY_PLIES = AMZ_HISTORY_PLIES  # moves a State can undo (N * N: more than any game from any start)


cdef bb_t _square_set(squares) except *:
    cdef bb_t board = 0
    cdef int square
    for square in squares:
        board |= ONE << square
    return board


cdef bb_t board_from_int(value, str name) except *:
    """A Python int of N * N bits as a bitboard, through its two uint64 words.

    Raises:
        TypeError: if `value` is not an integer.
        ValueError: if it is negative or has a bit at or above N * N (naming `name`).
    """
    value = operator.index(value)
    if value < 0 or value >> AMZ_SQUARES:
        raise ValueError(f"{name} = {value:#x} is not a set of the {AMZ_SQUARES} squares of "
                         f"{AMZ_SIZE}x{AMZ_SIZE}")
    return amz_join(<uint64_t>(value & MASK64), <uint64_t>(value >> 64))


cdef object board_to_int(bb_t board):
    """A bitboard as a Python int, built from its uint64 words."""
    if AMZ_WORDS == 1:
        return amz_lo(board)
    return (<object>amz_hi(board) << 64) | amz_lo(board)


cdef class State:
    """A game position in the real frame with its history, for `amazons.Board`.

    On 8x8 the start is Botzone's: Black at (0,2) (2,0) (5,0) (7,2), White at (0,5) (2,7) (5,7)
    (7,5), Black to move. On the other sizes a new State is the empty board, Black to move: the
    caller sets the start (`set_position`; the named starts are data in `amazons.boards`).
    Bitboards cross the Python boundary as Python ints of N * N bits (square s = bit s).
    """

    def __cinit__(self):
        if AMZ_SIZE == 8:
            self.amazons[0] = _square_set([2 * 8 + 0, 0 * 8 + 2, 0 * 8 + 5, 2 * 8 + 7])
            self.amazons[1] = _square_set([5 * 8 + 0, 7 * 8 + 2, 7 * 8 + 5, 5 * 8 + 7])
        else:
            self.amazons[0] = 0
            self.amazons[1] = 0
        self.arrows = 0
        self.side = 0
        self.plies = 0
        self.undo_depth = 0
        self._rehash()

    cdef void _rehash(self):
        cdef bb_t h = 0
        cdef int kind, square
        cdef bb_t boards[3]
        boards[0] = self.amazons[0]
        boards[1] = self.amazons[1]
        boards[2] = self.arrows
        for kind in range(3):
            for square in range(AMZ_SQUARES):
                if (boards[kind] >> square) & 1:
                    h ^= ZOBRIST[kind][square]
        if self.side == 1:
            h ^= ZOBRIST_WHITE_TO_MOVE
        self.zobrist = h

    def set_position(self, black, white, arrows, int turn, int ply):
        """Replace the position (the history is cleared).

        Args:
            black, white, arrows: Python ints (or numpy integers) of N * N bits, real frame.
            turn: 0 (Black) or 1 (White) to move.
            ply: plies played before this position.

        Raises:
            ValueError: on a bitboard with bits outside the board (named), overlapping
                bitboards, a bad turn or a negative ply; the position is then unchanged.
        """
        cdef bb_t black_board = board_from_int(black, "black")
        cdef bb_t white_board = board_from_int(white, "white")
        cdef bb_t arrow_board = board_from_int(arrows, "arrows")
        if (black_board & white_board) or (black_board & arrow_board) or (white_board & arrow_board):
            raise ValueError("amazons and arrows overlap")
        if turn != 0 and turn != 1:
            raise ValueError(f"turn must be 0 (black) or 1 (white), got {turn}")
        if ply < 0:
            raise ValueError(f"ply must be >= 0, got {ply}")
        self.amazons[0] = black_board
        self.amazons[1] = white_board
        self.arrows = arrow_board
        self.side = turn
        self.plies = ply
        self.undo_depth = 0
        self._rehash()

    def copy(self):
        """An independent copy, history included."""
        cdef State other = State.__new__(State)
        other.amazons[0] = self.amazons[0]
        other.amazons[1] = self.amazons[1]
        other.arrows = self.arrows
        other.side = self.side
        other.plies = self.plies
        other.zobrist = self.zobrist
        other.undo_depth = self.undo_depth
        memcpy(other.history, self.history, sizeof(self.history))
        return other

    cdef CPos canonical(self) noexcept nogil:
        cdef CPos pos
        if self.side == 0:
            pos.mine = self.amazons[0]
            pos.theirs = self.amazons[1]
            pos.arrows = self.arrows
        else:
            pos.mine = reverse_bits(self.amazons[1])
            pos.theirs = reverse_bits(self.amazons[0])
            pos.arrows = reverse_bits(self.arrows)
        return pos

    cdef int push_unchecked(self, int src, int dst, int arrow) noexcept nogil:
        cdef int side = self.side
        if self.undo_depth >= AMZ_HISTORY_PLIES:
            return PUSH_GAME_TOO_LONG
        self.amazons[side] ^= (ONE << src) | (ONE << dst)
        self.arrows |= ONE << arrow
        self.zobrist ^= ZOBRIST[side][src] ^ ZOBRIST[side][dst] ^ ZOBRIST[2][arrow] ^ ZOBRIST_WHITE_TO_MOVE
        self.history[self.undo_depth][0] = src
        self.history[self.undo_depth][1] = dst
        self.history[self.undo_depth][2] = arrow
        self.undo_depth += 1
        self.side ^= 1
        self.plies += 1
        return PUSH_OK

    def push(self, int src, int dst, int arrow):
        """Play a real-frame move if it is legal.

        Returns:
            PUSH_OK (0) when played; otherwise a PUSH_* code saying which square was wrong, and
            the position is unchanged.
        """
        cdef bb_t occupied = self.amazons[0] | self.amazons[1] | self.arrows
        if not (0 <= src < AMZ_SQUARES and 0 <= dst < AMZ_SQUARES and 0 <= arrow < AMZ_SQUARES):
            return PUSH_BAD_SQUARE
        if not (self.amazons[self.side] >> src) & 1:
            return PUSH_NOT_YOUR_AMAZON
        if not (queen_moves(src, occupied) >> dst) & 1:
            return PUSH_DESTINATION_UNREACHABLE
        if not (queen_moves(dst, occupied & ~(ONE << src)) >> arrow) & 1:
            return PUSH_ARROW_UNREACHABLE
        return self.push_unchecked(src, dst, arrow)

    def pop(self):
        """Undo the last move and return it as (src, dst, arrow). Raises IndexError if none."""
        if self.undo_depth == 0:
            raise IndexError("no move to undo")
        self.undo_depth -= 1
        cdef int src = self.history[self.undo_depth][0]
        cdef int dst = self.history[self.undo_depth][1]
        cdef int arrow = self.history[self.undo_depth][2]
        self.side ^= 1
        self.plies -= 1
        cdef int side = self.side
        self.amazons[side] ^= (ONE << src) | (ONE << dst)
        self.arrows &= ~(ONE << arrow)
        self.zobrist ^= ZOBRIST[side][src] ^ ZOBRIST[side][dst] ^ ZOBRIST[2][arrow] ^ ZOBRIST_WHITE_TO_MOVE
        return src, dst, arrow

    def legal_moves_into(self, int32_t[:, ::1] out):
        """Write the real-frame legal moves into `out` [capacity, 3] int32; return their number.

        Raises:
            ValueError: if `out` has fewer rows than there are legal moves.
        """
        if out.shape[1] != 3:
            raise ValueError("out must have 3 columns")
        cdef CPos pos
        pos.mine = self.amazons[self.side]
        pos.theirs = self.amazons[self.side ^ 1]
        pos.arrows = self.arrows
        cdef int64_t count
        with nogil:
            count = write_moves(pos, out, 0, out.shape[0])
        if count > out.shape[0]:
            raise ValueError(f"out holds {out.shape[0]} rows but there are {count} legal moves")
        return count

    def count_legal_moves(self):
        """Number of legal moves for the side to move."""
        cdef CPos pos = self.canonical()
        return count_moves(pos)

    def is_terminal(self):
        """Whether the side to move has no legal move (and so has lost)."""
        return not has_move(self.amazons[self.side], self.amazons[0] | self.amazons[1] | self.arrows)

    def canonical_into(self, uint64_t[::1] out):
        """Write the canonical position (mine, theirs, arrows) into `out` [3 * WORDS] uint64."""
        if out.shape[0] != POSITION_WIDTH:
            raise ValueError(f"out has {out.shape[0]} entries; expected {POSITION_WIDTH}")
        store_words(&out[0], self.canonical())

    def history_moves(self):
        """The moves pop() can undo, oldest first, as (src, dst, arrow) tuples."""
        return [(self.history[i][0], self.history[i][1], self.history[i][2])
                for i in range(self.undo_depth)]

    @property
    def black(self):
        """Black's amazons, real frame, as a Python int of N * N bits."""
        return board_to_int(self.amazons[0])

    @property
    def white(self):
        """White's amazons, real frame, as a Python int of N * N bits."""
        return board_to_int(self.amazons[1])

    @property
    def arrow_board(self):
        """The arrows, real frame, as a Python int of N * N bits."""
        return board_to_int(self.arrows)

    @property
    def turn(self):
        return self.side

    @property
    def ply(self):
        return self.plies

    @property
    def zobrist_hash(self):
        return self.zobrist

    @property
    def history_length(self):
        return self.undo_depth


# ---------------------------------------------------------------------------------------------
# Adjudication of separated positions, and queen-distance territory (canonical frame)
# ---------------------------------------------------------------------------------------------
#
# Once no 8-connected region of non-arrow squares holds amazons of both colours, the two sides
# can never touch again: a queen move or an arrow travels through squares that are king steps
# apart, so it never leaves its region, and the region only shrinks. The game is then a race: each
# side plays alone in its own regions, every move fills exactly one empty square there (the
# amazon frees one square, lands on one, and the arrow fills one), and the side to move wins iff
# it can make more moves than the opponent. Bounds per side: at most the empty squares its
# amazons can reach; at least a fill it can actually play (greedy, or exact for small regions).

from libc.stdint cimport int8_t, int16_t
from libc.string cimport memset

EXACT_FILL_SQUARES = EXACT_FILL_MAX_SQUARES
EXACT_FILL_NODES = EXACT_FILL_NODE_BUDGET
FILL_TABLE_ENTRIES = FILL_TABLE_SIZE
EXACT_FILL_MOVES = MAX_EXACT_FILL_MOVES


cdef struct FillEntry:
    bb_t amazons
    bb_t empties
    int32_t longest                   # -1: free slot


cdef struct FillSearch:
    int64_t nodes_left                # node budget; <= 0 once spent (the result is then a lower bound)
    FillEntry table[FILL_TABLE_SIZE]  # exact longest fills, keyed by (amazons, empties)


cdef inline bb_t king_step(bb_t board) noexcept nogil:
    """`board` grown by one king step in every direction, without wrapping across the files.

    The sideways step keeps board squares only: a bit pushed past the last square would come back
    onto the first file with the vertical step (below 8x8's full word). The result may still have
    bits off the board (at or above N * N): callers mask it with a set of board squares.
    """
    board |= ((board << 1) & NOT_FILE_FIRST) | ((board >> 1) & NOT_FILE_LAST)
    return board | (board << AMZ_SIZE) | (board >> AMZ_SIZE)


cdef bb_t flood_fill(bb_t seeds, bb_t passable) noexcept nogil:
    """Squares of `passable` 8-connected to `seeds` within `passable` (seeds outside it are dropped).

    `passable` must hold board squares only (a complement masked with FULL).
    """
    cdef bb_t reach = seeds & passable, previous = 0
    while reach != previous:
        previous = reach
        reach = king_step(reach) & passable
    return reach


cdef bint is_separated(CPos pos) noexcept nogil:
    """Whether no region of non-arrow squares holds amazons of both sides.

    One flood fill from the side to move's amazons over the non-arrow squares (amazon squares
    included: an amazon that moves frees its square), stopped as soon as it touches an opponent's
    amazon, so the usual mid-game answer (not separated) costs a few king steps.
    """
    cdef bb_t passable = ~pos.arrows & FULL, reach = pos.mine & passable, previous = 0
    while reach != previous:
        if reach & pos.theirs:
            return False
        previous = reach
        reach = king_step(reach) & passable
    return True


cdef inline bb_t fill_reach(bb_t amazons, bb_t empties) noexcept nogil:
    """Empty squares 8-connected to `amazons` through empty and amazon squares: all they can ever fill."""
    return flood_fill(amazons, amazons | empties) & empties


cdef inline bb_t fill_child(bb_t amazons, bb_t empties, int src, int dst, int arrow) noexcept nogil:
    """Empty squares still within reach after the move (src, dst, arrow) of a lone side."""
    return fill_reach(amazons ^ (ONE << src) ^ (ONE << dst),
                      (empties | (ONE << src)) & ~((ONE << dst) | (ONE << arrow)))


cdef struct FillMoves:
    # The moves of amazons alone on `empties`, generated lazily in a promising order (see
    # `start_fill_moves`); the fields below `blocked` are the generator's loop state.
    bb_t amazons
    bb_t empties
    bb_t blocked
    bb_t by_liberties[9]          # arrow squares by their number of empty neighbours
    bb_t by_freedom[9]            # the current (arrow, amazon)'s landing squares, same measure
    bb_t targets
    bb_t sources
    bb_t landings
    int liberties
    int freedom
    int target
    int src


cdef void start_fill_moves(FillMoves *moves, bb_t amazons, bb_t empties) noexcept nogil:
    """Set `moves` to generate every move of `amazons` alone on `empties`, each once.

    Order: arrow squares by fewest empty neighbours first (dead ends before open squares; an
    amazon's own square counts, for the step-and-shoot-back move), then the amazons in square
    order, then landing squares by most empty neighbours first.
    """
    cdef bb_t targets = empties | amazons
    cdef int target
    moves.amazons = amazons
    moves.empties = empties
    moves.blocked = ~empties
    memset(moves.by_liberties, 0, sizeof(moves.by_liberties))
    while targets:
        target = amz_ctz(targets)
        targets &= targets - 1
        moves.by_liberties[amz_popcount(NEIGHBOURS[target] & empties)] |= ONE << target
    moves.liberties = 0
    moves.targets = moves.by_liberties[0]
    moves.sources = 0
    moves.landings = 0
    moves.freedom = 0


cdef bint next_fill_move(FillMoves *moves, int *src, int *dst, int *arrow) noexcept nogil:
    """The next move of `moves` into (src, dst, arrow); False when there is none left."""
    cdef bb_t landings
    cdef int landing
    while True:
        if moves.landings:
            src[0] = moves.src
            dst[0] = amz_ctz(moves.landings)
            arrow[0] = moves.target
            moves.landings &= moves.landings - 1
            return True
        if moves.freedom > 0:
            moves.freedom -= 1
            moves.landings = moves.by_freedom[moves.freedom]
        elif moves.sources:
            moves.src = amz_ctz(moves.sources)
            moves.sources &= moves.sources - 1
            landings = queen_moves(moves.src, moves.blocked)
            if moves.target != moves.src:
                landings &= queen_moves(moves.target, moves.blocked & ~(ONE << moves.src))
            memset(moves.by_freedom, 0, sizeof(moves.by_freedom))
            while landings:
                landing = amz_ctz(landings)
                landings &= landings - 1
                moves.by_freedom[amz_popcount(NEIGHBOURS[landing] & moves.empties)] |= ONE << landing
            moves.freedom = 9
        elif moves.targets:
            moves.target = amz_ctz(moves.targets)
            moves.targets &= moves.targets - 1
            # Only the amazon standing on an arrow square can shoot there (back where it came from).
            moves.sources = (ONE << moves.target) if (moves.amazons >> moves.target) & 1 else moves.amazons
        elif moves.liberties < 8:
            moves.liberties += 1
            moves.targets = moves.by_liberties[moves.liberties]
        else:
            return False


cdef bint pick_fill_move(bb_t amazons, bb_t empties, int *best_src, int *best_dst,
                         int *best_arrow) noexcept nogil:
    """Choose the greedy fill's next move for amazons alone on `empties`.

    The move that keeps the most empty squares in reach, the first in `start_fill_moves`' order
    among equals; the first move that loses no square besides the one it fills is taken at once
    (usually among the first few, so the rest are never generated).

    Returns:
        False when the amazons have no move.
    """
    cdef FillMoves moves
    cdef int full = amz_popcount(empties) - 1, best_reach = -1, reach, src, dst, arrow
    start_fill_moves(&moves, amazons, empties)
    while next_fill_move(&moves, &src, &dst, &arrow):
        reach = amz_popcount(fill_child(amazons, empties, src, dst, arrow))
        if reach > best_reach:
            best_reach = reach
            best_src[0] = src
            best_dst[0] = dst
            best_arrow[0] = arrow
            if reach == full:
                return True
    return best_reach >= 0


cdef int greedy_fill(bb_t *amazons, bb_t *empties, int stop_at) noexcept nogil:
    """Play a greedy fill for amazons alone on `empties` until at most `stop_at` squares stay in reach.

    `empties` are the only squares they may enter or shoot at; every other square is an obstacle.
    `amazons` and `empties` are updated to the position reached (empties: those still in reach).

    Returns:
        The number of moves played: a fill they really can play.
    """
    cdef int played = 0, src = 0, dst = 0, arrow = 0
    empties[0] = fill_reach(amazons[0], empties[0])
    while amz_popcount(empties[0]) > stop_at and pick_fill_move(amazons[0], empties[0], &src, &dst, &arrow):
        empties[0] = fill_child(amazons[0], empties[0], src, dst, arrow)
        amazons[0] ^= (ONE << src) | (ONE << dst)
        played += 1
    return played


cdef int fill_children(FillSearch *search, bb_t amazons, bb_t empties, int bound) noexcept nogil:
    """1 + the longest fill after the best move (0 without a move); see `longest_fill`.

    Moves that lose no square besides the one they fill go first, in `start_fill_moves`' order;
    then the others, skipping those whose reach cannot beat the best so far. Stops at `bound`.
    """
    cdef FillMoves generator
    cdef uint8_t moves[MAX_EXACT_FILL_MOVES][3]
    cdef uint8_t reach[MAX_EXACT_FILL_MOVES]
    cdef int count = 0, index, best = 0, value, full_pass, src, dst, arrow
    cdef bb_t child
    start_fill_moves(&generator, amazons, empties)
    while next_fill_move(&generator, &src, &dst, &arrow):
        if count == MAX_EXACT_FILL_MOVES:
            # Cannot happen within EXACT_FILL_MAX_SQUARES; if it did, the result is a lower bound.
            search.nodes_left = 0
            break
        moves[count][0] = <uint8_t>src
        moves[count][1] = <uint8_t>dst
        moves[count][2] = <uint8_t>arrow
        reach[count] = <uint8_t>amz_popcount(fill_child(amazons, empties, src, dst, arrow))
        count += 1
    for full_pass in range(1, -1, -1):
        for index in range(count):
            if (reach[index] == bound - 1) != full_pass or 1 + reach[index] <= best:
                continue
            child = fill_child(amazons, empties, moves[index][0], moves[index][1], moves[index][2])
            value = 1 + longest_fill(search, amazons ^ (ONE << moves[index][0]) ^ (ONE << moves[index][1]), child)
            if value > best:
                best = value
                if best == bound:
                    return best
    return best


cdef int longest_fill(FillSearch *search, bb_t amazons, bb_t empties) noexcept nogil:
    """The longest move sequence the amazons can play alone on `empties`, by depth-first search.

    Exact while `search.nodes_left` stays positive; once the budget is spent, the longest sequence
    found so far (still a real, playable one). Regions that no longer touch are solved apart and
    summed, exact results are kept in `search.table`, and a node stops as soon as it reaches its
    upper bound (the empty squares in reach).
    """
    cdef bb_t rest, component, key
    cdef int bound, best, total
    cdef FillEntry *entry
    empties = fill_reach(amazons, empties)
    bound = amz_popcount(empties)
    if bound <= 1:
        # A lone reachable empty square touches some amazon, which steps there and shoots back.
        return bound
    component = flood_fill(amazons & (~amazons + 1), amazons | empties)
    if (component & amazons) != amazons:
        total = 0
        rest = amazons
        while rest:
            component = flood_fill(rest & (~rest + 1), amazons | empties)
            total += longest_fill(search, amazons & component, empties & component)
            rest &= ~component
        return total
    key = amazons * <uint64_t>0x9E3779B97F4A7C15 + empties
    key = (key ^ (key >> 31)) * <uint64_t>0xBF58476D1CE4E5B9
    entry = &search.table[(key ^ (key >> 29)) & (FILL_TABLE_SIZE - 1)]
    if entry.longest >= 0 and entry.amazons == amazons and entry.empties == empties:
        return entry.longest
    if search.nodes_left <= 0:
        return 0
    search.nodes_left -= 1
    best = fill_children(search, amazons, empties, bound)
    if search.nodes_left > 0:
        entry.amazons = amazons
        entry.empties = empties
        entry.longest = best
    return best


cdef void side_fill_bounds(bb_t amazons, bb_t others, bb_t arrows, int *lower,
                           int *upper, FillSearch *search) noexcept nogil:
    """Bounds on the moves `amazons` can make alone in their regions (separated position).

    Per region: upper = the empty squares in reach; lower = a fill the amazons can play. The fill
    is greedy until at most EXACT_FILL_MAX_SQUARES squares remain in reach; when the greedy fill
    of the rest falls short of the upper bound, the rest gets the exhaustive search instead (a
    region that small from the start then gets its exact length as both bounds). Regions are
    independent, so the bounds add up.
    """
    cdef bb_t rest = amazons, component, tail_amazons, tail_empties, end_amazons, end_empties
    cdef int bound, prefix, fill, exact
    lower[0] = 0
    upper[0] = 0
    while rest:
        component = flood_fill(rest & (~rest + 1), ~arrows & FULL)
        rest &= ~component
        tail_amazons = amazons & component
        tail_empties = fill_reach(tail_amazons, component & ~(amazons | others))
        bound = amz_popcount(tail_empties)
        prefix = greedy_fill(&tail_amazons, &tail_empties, EXACT_FILL_MAX_SQUARES)
        end_amazons = tail_amazons
        end_empties = tail_empties
        fill = prefix + greedy_fill(&end_amazons, &end_empties, 0)
        if fill < bound:
            memset(search.table, 0xFF, sizeof(search.table))
            search.nodes_left = EXACT_FILL_NODE_BUDGET
            exact = longest_fill(search, tail_amazons, tail_empties)
            if prefix == 0 and search.nodes_left > 0:
                bound = exact
            if prefix + exact > fill:
                fill = prefix + exact
        lower[0] += fill
        upper[0] += bound


cdef int adjudicate_position(CPos pos, int16_t *bounds) noexcept nogil:
    """Decide a canonical position when its amazons are separated and the move bounds settle it.

    Writes `bounds[0:4]` = (my lower, my upper, their lower, their upper) move counts, or four -1
    when the position is not separated.

    Returns:
        +1 when the side to move wins (its lower bound beats the opponent's upper bound), -1 when
        it loses (its upper bound is at most the opponent's lower bound: it moves first, so equal
        counts lose), 0 when undecided.
    """
    cdef FillSearch search
    cdef int my_lower, my_upper, their_lower, their_upper
    if not is_separated(pos):
        bounds[0] = bounds[1] = bounds[2] = bounds[3] = -1
        return 0
    side_fill_bounds(pos.mine, pos.theirs, pos.arrows, &my_lower, &my_upper, &search)
    side_fill_bounds(pos.theirs, pos.mine, pos.arrows, &their_lower, &their_upper, &search)
    bounds[0] = <int16_t>my_lower
    bounds[1] = <int16_t>my_upper
    bounds[2] = <int16_t>their_lower
    bounds[3] = <int16_t>their_upper
    if my_lower > their_upper:
        return 1
    if my_upper <= their_lower:
        return -1
    return 0


cdef void write_territory(CPos pos, int8_t *out) noexcept nogil:
    """Queen-distance ownership of the N * N squares into `out[0:N * N]`.

    Breadth-first over queen moves through empty squares, both sides a level at a time: +1 where
    the side to move's nearest amazon is strictly closer, -1 where the opponent's is, 0 where
    they tie, where neither reaches, and on amazons and arrows.
    """
    cdef bb_t empty = ~(pos.mine | pos.theirs | pos.arrows) & FULL
    cdef bb_t my_front = pos.mine, their_front = pos.theirs, my_seen = 0, their_seen = 0
    cdef bb_t my_new, their_new, mine_owned = 0, theirs_owned = 0
    cdef int square
    while my_front or their_front:
        my_new = attacks_from_set(my_front, empty) & ~my_seen
        their_new = attacks_from_set(their_front, empty) & ~their_seen
        mine_owned |= my_new & ~(their_seen | their_new)
        theirs_owned |= their_new & ~(my_seen | my_new)
        my_seen |= my_new
        their_seen |= their_new
        my_front = my_new
        their_front = their_new
    for square in range(AMZ_SQUARES):
        out[square] = <int8_t>(<int>((mine_owned >> square) & 1) - <int>((theirs_owned >> square) & 1))


def adjudicate_batch(const uint64_t[:, ::1] positions, int8_t[::1] out_result,
                     int16_t[:, ::1] out_bounds):
    """Adjudicate every canonical position: results into `out_result` [B] int8, bounds into
    `out_bounds` [B, 4] int16 (see `adjudicate_position`)."""
    _check_width("positions", positions.shape[1])
    if out_bounds.shape[1] != 4:
        raise ValueError("out_bounds must have 4 columns")
    _check_rows("out_result", out_result.shape[0], positions.shape[0])
    _check_rows("out_bounds", out_bounds.shape[0], positions.shape[0])
    cdef Py_ssize_t row
    with nogil:
        for row in range(positions.shape[0]):
            out_result[row] = <int8_t>adjudicate_position(load(positions, row), &out_bounds[row, 0])


def territory_batch(const uint64_t[:, ::1] positions, int8_t[:, ::1] out):
    """Queen-distance ownership [B, N * N] int8 of canonical positions (see `write_territory`)."""
    _check_width("positions", positions.shape[1])
    if out.shape[1] != AMZ_SQUARES:
        raise ValueError(f"out must have {AMZ_SQUARES} columns")
    _check_rows("out", out.shape[0], positions.shape[0])
    cdef Py_ssize_t row
    with nogil:
        for row in range(positions.shape[0]):
            write_territory(load(positions, row), &out[row, 0])


# ---------------------------------------------------------------------------------------------
# Classical evaluation terms (canonical frame)
# ---------------------------------------------------------------------------------------------
#
# The terms of an Amazong-style evaluation (Lieberum 2005), counted here because the engine is
# the one place positions are walked; `amazons.engine.classical_terms` documents them and
# `amazons.players.classical` weighs them. Distances are breadth-first levels through empty
# squares (amazons and arrows block), both sides a level at a time, as in `write_territory`.

cdef enum:
    NUM_SQUARES_C = AMZ_SQUARES       # squares of the board (the C twin of NUM_SQUARES)
    EVAL_TERMS_C = 6                  # terms write_classical_terms writes
    UNREACHED = 255                   # distance of a square no amazon of the side reaches

EVAL_TERMS = EVAL_TERMS_C  # columns of classical_terms_batch's output (named in amazons.engine)


cdef void step_distances(bb_t amazons, bb_t empty, bint king_steps,
                         uint8_t *distance) noexcept nogil:
    """Distance of every square from `amazons` into `distance[0:N * N]` (UNREACHED if none): in queen
    moves through `empty`, or in king steps onto it with `king_steps`."""
    cdef bb_t front = amazons, seen = 0, fresh
    cdef int level = 0, square
    memset(distance, UNREACHED, NUM_SQUARES_C)
    while front:
        level += 1
        if king_steps:
            fresh = king_step(front) & empty & ~seen
        else:
            fresh = attacks_from_set(front, empty) & ~seen
        seen |= fresh
        front = fresh
        while fresh:
            square = amz_ctz(fresh)
            fresh &= fresh - 1
            distance[square] = <uint8_t>level


cdef inline int amazon_reach(bb_t amazons, bb_t occupied) noexcept nogil:
    """Sum over `amazons` of the empty squares each reaches with one queen move."""
    cdef int total = 0, square
    while amazons:
        square = amz_ctz(amazons)
        amazons &= amazons - 1
        total += amz_popcount(queen_moves(square, occupied))
    return total


cdef void write_classical_terms(CPos pos, double *out) noexcept nogil:
    """The six evaluation terms of `pos` from the side to move's view into `out[0:6]`.

    out[0] queen balance: empty squares the side to move is strictly queen-closer to, minus the
    opponent's; out[1] queen ties: empty squares both reach at the same finite queen distance;
    out[2], out[3] the same with king distances; out[4] mobility: the one-move queen reach of
    each of my amazons summed, minus the opponent's; out[5] contest w = sum over empty squares
    both reach of 2^-|D_mine - D_theirs| (queen distances), large while the sides are interwoven,
    0 once they are separated.
    """
    cdef bb_t occupied = pos.mine | pos.theirs | pos.arrows
    cdef bb_t empty = ~occupied & FULL
    cdef uint8_t mine_q[NUM_SQUARES_C]
    cdef uint8_t theirs_q[NUM_SQUARES_C]
    cdef uint8_t mine_k[NUM_SQUARES_C]
    cdef uint8_t theirs_k[NUM_SQUARES_C]
    cdef int square, balance_q = 0, ties_q = 0, balance_k = 0, ties_k = 0, gap
    cdef double contest = 0.0
    step_distances(pos.mine, empty, False, mine_q)
    step_distances(pos.theirs, empty, False, theirs_q)
    step_distances(pos.mine, empty, True, mine_k)
    step_distances(pos.theirs, empty, True, theirs_k)
    for square in range(NUM_SQUARES_C):
        if mine_q[square] < theirs_q[square]:
            balance_q += 1
        elif theirs_q[square] < mine_q[square]:
            balance_q -= 1
        elif mine_q[square] != UNREACHED:
            ties_q += 1
        if mine_k[square] < theirs_k[square]:
            balance_k += 1
        elif theirs_k[square] < mine_k[square]:
            balance_k -= 1
        elif mine_k[square] != UNREACHED:
            ties_k += 1
        if mine_q[square] != UNREACHED and theirs_q[square] != UNREACHED:
            gap = <int>mine_q[square] - <int>theirs_q[square]
            if gap < 0:
                gap = -gap
            contest += 1.0 / <double>((<uint64_t>1) << gap)
    out[0] = balance_q
    out[1] = ties_q
    out[2] = balance_k
    out[3] = ties_k
    out[4] = amazon_reach(pos.mine, occupied) - amazon_reach(pos.theirs, occupied)
    out[5] = contest


def classical_terms_batch(const uint64_t[:, ::1] positions, double[:, ::1] out):
    """Evaluation terms [B, EVAL_TERMS] float64 of canonical positions (see
    `write_classical_terms`)."""
    _check_width("positions", positions.shape[1])
    if out.shape[1] != EVAL_TERMS:
        raise ValueError(f"out must have {EVAL_TERMS} columns")
    _check_rows("out", out.shape[0], positions.shape[0])
    cdef Py_ssize_t row
    with nogil:
        for row in range(positions.shape[0]):
            write_classical_terms(load(positions, row), &out[row, 0])
