/* The board geometry of one build of the rules engine (`_engine.pyx`).
 *
 * setup.py compiles the same Cython source once per board size with -DAMZ_N=<size>; everything
 * that depends on the size is here, as compile-time constants and inline helpers over the
 * bitboard word type `amz_bb`:
 *   - N <= 8: one uint64_t (bit s = square s, the bits at or above N*N always zero);
 *   - N = 9, 10: one unsigned __int128 (GCC, Clang), squares 0..63 in the low 64 bits.
 * For N = 8 the helpers are exactly the 64-bit builtins the engine always used.
 */
#ifndef AMAZONS_ENGINE_BOARD_H
#define AMAZONS_ENGINE_BOARD_H

#include <stdint.h>

#ifndef AMZ_N
#error "AMZ_N (the board size) must be defined: setup.py passes -DAMZ_N=<size>"
#endif
#if AMZ_N < 6 || AMZ_N > 10
#error "AMZ_N must be between 6 and 10"
#endif

enum {
    AMZ_SIZE = AMZ_N,                       /* squares per row and per column */
    AMZ_SQUARES = AMZ_N * AMZ_N,            /* square s = y * AMZ_N + x */
    AMZ_WORDS = AMZ_N <= 8 ? 1 : 2,         /* uint64 words per bitboard in a position array */
    /* Moves State can undo: each push fills one empty square for good, so a game from any start
     * position holds fewer pushes than squares. */
    AMZ_HISTORY_PLIES = AMZ_N * AMZ_N
};

#if AMZ_N <= 8
typedef uint64_t amz_bb;
#define AMZ_WORD_BITS 64
static inline int amz_ctz(amz_bb b) { return __builtin_ctzll(b); }
static inline int amz_msb(amz_bb b) { return 63 - __builtin_clzll(b); }
static inline int amz_popcount(amz_bb b) { return __builtin_popcountll(b); }
static inline uint64_t amz_lo(amz_bb b) { return b; }
static inline uint64_t amz_hi(amz_bb b) { (void)b; return 0; }
static inline amz_bb amz_join(uint64_t lo, uint64_t hi) { (void)hi; return lo; }
#else
typedef unsigned __int128 amz_bb;
#define AMZ_WORD_BITS 128
static inline uint64_t amz_lo(amz_bb b) { return (uint64_t)b; }
static inline uint64_t amz_hi(amz_bb b) { return (uint64_t)(b >> 64); }
static inline amz_bb amz_join(uint64_t lo, uint64_t hi) { return ((amz_bb)hi << 64) | lo; }
static inline int amz_ctz(amz_bb b) {
    uint64_t lo = amz_lo(b);
    return lo ? __builtin_ctzll(lo) : 64 + __builtin_ctzll(amz_hi(b));
}
static inline int amz_msb(amz_bb b) {
    uint64_t hi = amz_hi(b);
    return hi ? 127 - __builtin_clzll(hi) : 63 - __builtin_clzll(amz_lo(b));
}
static inline int amz_popcount(amz_bb b) {
    return __builtin_popcountll(amz_lo(b)) + __builtin_popcountll(amz_hi(b));
}
#endif

#define AMZ_ONE ((amz_bb)1)
/* Every square of the board; the bits at or above AMZ_SQUARES are never set in a bitboard, so
 * a complement (~occupied) is masked with it before it can spread there. */
#if AMZ_N * AMZ_N == AMZ_WORD_BITS
#define AMZ_FULL (~(amz_bb)0)
#else
#define AMZ_FULL ((AMZ_ONE << AMZ_SQUARES) - 1)
#endif

static inline uint64_t amz_reverse64(uint64_t b) {
    b = ((b >> 1) & UINT64_C(0x5555555555555555)) | ((b & UINT64_C(0x5555555555555555)) << 1);
    b = ((b >> 2) & UINT64_C(0x3333333333333333)) | ((b & UINT64_C(0x3333333333333333)) << 2);
    b = ((b >> 4) & UINT64_C(0x0F0F0F0F0F0F0F0F)) | ((b & UINT64_C(0x0F0F0F0F0F0F0F0F)) << 4);
    return __builtin_bswap64(b);
}

/* Square s -> AMZ_SQUARES - 1 - s: the 180-degree rotation between White's view and Black's.
 * Reversing the whole word maps s to WORD_BITS - 1 - s; the shift brings the board back down. */
static inline amz_bb amz_rotate180(amz_bb b) {
#if AMZ_N <= 8
    return amz_reverse64(b) >> (64 - AMZ_SQUARES);
#else
    return amz_join(amz_reverse64(amz_hi(b)), amz_reverse64(amz_lo(b))) >> (128 - AMZ_SQUARES);
#endif
}

#endif
