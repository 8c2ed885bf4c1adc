// The rules on bitboards (amazons/_engine.pyx): positions, move generation in the engine's order,
// perft, the feature planes, and the adjudication of separated positions. init_tables() fills
// the ray tables once before anything else runs.

#ifndef AMZ_RULES_H
#define AMZ_RULES_H

#include "common.h"

typedef uint64_t u64;

struct Pos {
    u64 mine, theirs, arrows;  // canonical: the side to move's amazons, the opponent's, the arrows
};

struct Move {
    uint8_t src, dst, arrow;  // canonical squares unless said otherwise
};

static const u64 ONE = 1;
static const u64 FULL = ~(u64)0;
static const u64 FILE_A = 0x0101010101010101ULL;
static const u64 FILE_H = 0x8080808080808080ULL;
// The rules' sizes: amazons._engine's AMAZONS_PER_SIDE and MAX_MOVES (tests check they agree).
// Move generation writes at most MAX_MOVES moves only for positions position_error accepts.
static const int AMAZONS_PER_SIDE = 4;
static const int MAX_MOVES = AMAZONS_PER_SIDE * 27 * 27;  // a queen reaches <= 27 squares: 2,916

// Directions 0..3 increase the square index (E, S, SE, SW), 4..7 decrease it (W, N, NW, NE).
static const int DIR_DX[8] = {1, 0, 1, -1, -1, 0, -1, 1};
static const int DIR_DY[8] = {0, 1, 1, 1, 0, -1, -1, -1};
static int DIR_SHIFT[8];
static u64 DIR_WRAP[8];
static u64 RAYS[8][64];
static u64 NEIGHBOURS[64];

static inline int ctz64(u64 b) { return __builtin_ctzll(b); }
static inline int msb64(u64 b) { return 63 - __builtin_clzll(b); }
static inline int popcount64(u64 b) { return __builtin_popcountll(b); }

// Why the rules cannot take `pos`, or "" when they can: move generation assumes bitboards that do
// not overlap and at most AMAZONS_PER_SIDE amazons a side. Whoever takes a position from outside
// checks it once (the batch evaluator, the extension's rules entry points, the bot's positions
// files); the positions the rules make from an accepted one need no check.
static std::string position_error(const Pos& pos) {
    if ((pos.mine & pos.theirs) | (pos.mine & pos.arrows) | (pos.theirs & pos.arrows))
        return "its bitboards overlap (a square holds two pieces)";
    const int mine = popcount64(pos.mine), theirs = popcount64(pos.theirs);
    if (mine > AMAZONS_PER_SIDE)
        return format("the side to move has %d amazons (at most %d)", mine, AMAZONS_PER_SIDE);
    if (theirs > AMAZONS_PER_SIDE)
        return format("the opponent has %d amazons (at most %d)", theirs, AMAZONS_PER_SIDE);
    return "";
}

static void init_tables() {
    for (int d = 0; d < 8; ++d) {
        DIR_SHIFT[d] = std::abs(DIR_DY[d] * 8 + DIR_DX[d]);
        DIR_WRAP[d] = DIR_DX[d] == 1 ? ~FILE_A : (DIR_DX[d] == -1 ? ~FILE_H : FULL);
    }
    for (int square = 0; square < 64; ++square) {
        NEIGHBOURS[square] = 0;
        for (int d = 0; d < 8; ++d) {
            RAYS[d][square] = 0;
            int x = square % 8 + DIR_DX[d], y = square / 8 + DIR_DY[d], step = 0;
            while (0 <= x && x < 8 && 0 <= y && y < 8) {
                RAYS[d][square] |= ONE << (y * 8 + x);
                if (step == 0) NEIGHBOURS[square] |= ONE << (y * 8 + x);
                ++step;
                x += DIR_DX[d];
                y += DIR_DY[d];
            }
        }
    }
}

// Empty squares a queen on `square` reaches; `occupied` blocks (the square itself is ignored).
static inline u64 queen_moves(int square, u64 occupied) {
    u64 result = 0;
    for (int d = 0; d < 4; ++d) {
        u64 ray = RAYS[d][square];
        result |= ray & ~RAYS[d][ctz64((ray & occupied) | (ONE << 63))];
    }
    for (int d = 4; d < 8; ++d) {
        u64 ray = RAYS[d][square];
        result |= ray & ~RAYS[d][msb64((ray & occupied) | ONE)];
    }
    return result & ~occupied;
}

static inline u64 shift_towards(u64 board, int d, int steps) {
    return d < 4 ? board << (DIR_SHIFT[d] * steps) : board >> (DIR_SHIFT[d] * steps);
}

// Union of the queen moves of every square in `sources` over the `empty` squares.
static u64 attacks_from_set(u64 sources, u64 empty) {
    u64 result = 0;
    for (int d = 0; d < 8; ++d) {
        u64 propagator = empty & DIR_WRAP[d];
        u64 generated = sources;
        generated |= propagator & shift_towards(generated, d, 1);
        propagator &= shift_towards(propagator, d, 1);
        generated |= propagator & shift_towards(generated, d, 2);
        propagator &= shift_towards(propagator, d, 2);
        generated |= propagator & shift_towards(generated, d, 4);
        result |= shift_towards(generated, d, 1) & DIR_WRAP[d] & empty;
    }
    return result;
}

// Square s -> 63 - s: the 180-degree rotation between Black's and White's views.
static inline u64 reverse_bits(u64 b) {
    b = ((b >> 1) & 0x5555555555555555ULL) | ((b & 0x5555555555555555ULL) << 1);
    b = ((b >> 2) & 0x3333333333333333ULL) | ((b & 0x3333333333333333ULL) << 2);
    b = ((b >> 4) & 0x0F0F0F0F0F0F0F0FULL) | ((b & 0x0F0F0F0F0F0F0F0FULL) << 4);
    return __builtin_bswap64(b);
}

// Whether the side to move has a legal move: an amazon with an empty neighbour can step there and
// shoot back onto the square it left.
static bool has_move(const Pos& pos) {
    u64 occupied = pos.mine | pos.theirs | pos.arrows;
    for (u64 movers = pos.mine; movers; movers &= movers - 1)
        if (NEIGHBOURS[ctz64(movers)] & ~occupied) return true;
    return false;
}

// The legal moves of the side to move into `out` (room for MAX_MOVES), in the engine's order;
// `pos` is one position_error accepts.
static int legal_moves(const Pos& pos, Move* out) {
    u64 occupied = pos.mine | pos.theirs | pos.arrows;
    int count = 0;
    for (u64 movers = pos.mine; movers; movers &= movers - 1) {
        int src = ctz64(movers);
        u64 vacated = occupied & ~(ONE << src);
        for (u64 destinations = queen_moves(src, occupied); destinations; destinations &= destinations - 1) {
            int dst = ctz64(destinations);
            for (u64 arrows = queen_moves(dst, vacated); arrows; arrows &= arrows - 1) {
                out[count].src = (uint8_t)src;
                out[count].dst = (uint8_t)dst;
                out[count].arrow = (uint8_t)ctz64(arrows);
                ++count;
            }
        }
    }
    return count;
}

static int64_t count_moves(const Pos& pos) {
    u64 occupied = pos.mine | pos.theirs | pos.arrows;
    int64_t total = 0;
    for (u64 movers = pos.mine; movers; movers &= movers - 1) {
        int src = ctz64(movers);
        u64 vacated = occupied & ~(ONE << src);
        for (u64 destinations = queen_moves(src, occupied); destinations; destinations &= destinations - 1)
            total += popcount64(queen_moves(ctz64(destinations), vacated));
    }
    return total;
}

// The canonical position after the canonical move, from the opponent's view.
static inline Pos child_position(const Pos& pos, int src, int dst, int arrow) {
    Pos child;
    child.mine = reverse_bits(pos.theirs);
    child.theirs = reverse_bits((pos.mine & ~(ONE << src)) | (ONE << dst));
    child.arrows = reverse_bits(pos.arrows | (ONE << arrow));
    return child;
}

static int64_t perft(const Pos& pos, int depth) {
    if (depth <= 0) return 1;
    if (depth == 1) return count_moves(pos);
    std::vector<Move> moves(MAX_MOVES);
    int count = legal_moves(pos, &moves[0]);
    int64_t total = 0;
    for (int i = 0; i < count; ++i)
        total += perft(child_position(pos, moves[i].src, moves[i].dst, moves[i].arrow), depth - 1);
    return total;
}

// Marks the moves after which the opponent has no legal move; returns how many (the engine's
// winning_moves_batch: only squares around the opponent's amazons matter).
static int winning_moves(const Pos& pos, const Move* moves, int count, uint8_t* wins) {
    u64 empty = ~(pos.mine | pos.theirs | pos.arrows);
    u64 around = 0;
    for (u64 theirs = pos.theirs; theirs; theirs &= theirs - 1) around |= NEIGHBOURS[ctz64(theirs)];
    std::memset(wins, 0, (size_t)count);
    if (popcount64(around & empty) > 2) return 0;
    int total = 0;
    for (int i = 0; i < count; ++i) {
        u64 after = (empty | (ONE << moves[i].src)) & ~(ONE << moves[i].dst) & ~(ONE << moves[i].arrow);
        if ((around & after) == 0) {
            wins[i] = 1;
            ++total;
        }
    }
    return total;
}

static bool is_legal(const Pos& pos, int src, int dst, int arrow, std::string* why) {
    u64 occupied = pos.mine | pos.theirs | pos.arrows;
    if (!((pos.mine >> src) & 1)) {
        *why = "no amazon of the side to move on its source square";
        return false;
    }
    if (!((queen_moves(src, occupied) >> dst) & 1)) {
        *why = "the amazon cannot reach its destination";
        return false;
    }
    if (!((queen_moves(dst, occupied & ~(ONE << src)) >> arrow) & 1)) {
        *why = "the arrow cannot reach its square";
        return false;
    }
    return true;
}

// The Botzone start, Black to move (Black's view is the real board).
static Pos start_position() {
    Pos pos;
    pos.mine = (ONE << 2) | (ONE << 5) | (ONE << 16) | (ONE << 23);
    pos.theirs = (ONE << 40) | (ONE << 47) | (ONE << 58) | (ONE << 61);
    pos.arrows = 0;
    return pos;
}

static inline u64 shoot_potential(u64 movers, u64 occupied) {
    u64 result = 0;
    for (; movers; movers &= movers - 1) {
        int src = ctz64(movers);
        result |= attacks_from_set(queen_moves(src, occupied), ~occupied | (ONE << src));
    }
    return result;
}

// The feature planes of amazons.engine.features (num_planes 3 or 7), square-major:
// planes[square * num_planes + c].
static void write_features(const Pos& pos, int num_planes, float* planes) {
    u64 occupied = pos.mine | pos.theirs | pos.arrows;
    u64 boards[7];
    boards[0] = pos.mine;
    boards[1] = pos.theirs;
    if (num_planes == 3) {
        boards[2] = pos.arrows;
    } else {
        boards[2] = occupied;
        boards[3] = attacks_from_set(pos.mine, ~occupied);
        boards[4] = attacks_from_set(pos.theirs, ~occupied);
        boards[5] = shoot_potential(pos.mine, occupied);
        boards[6] = shoot_potential(pos.theirs, occupied);
    }
    for (int square = 0; square < 64; ++square)
        for (int c = 0; c < num_planes; ++c) planes[square * num_planes + c] = (float)((boards[c] >> square) & 1);
}

#endif  // AMZ_RULES_H
