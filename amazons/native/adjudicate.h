// Adjudication of separated positions (the engine's adjudicate_position). Once no 8-connected
// region of non-arrow squares holds amazons of both sides, each side fills its own regions alone,
// one square a move, and the side to move wins iff it can make more moves. Bounds per side: at
// most the empty squares its amazons reach; at least a fill it can play (greedy, then exhaustive
// once at most EXACT_FILL_MAX_SQUARES squares are left).

#ifndef AMZ_ADJUDICATE_H
#define AMZ_ADJUDICATE_H

#include "rules.h"

// The budgets are the engine's (amazons/_engine.pxd): amazons.botzone.cpp_export writes them from
// amazons.engine.EXACT_FILL_SQUARES, EXACT_FILL_NODES, FILL_TABLE_ENTRIES and EXACT_FILL_MOVES
// into "settings.h" (common.h says how the parts are joined).
#include "settings.h"

// EXACT_FILL_MAX_SQUARES: regions this small get the exhaustive fill search
// EXACT_FILL_NODE_BUDGET: nodes per exhaustive region search
// FILL_TABLE_SIZE:        transposition entries of one region search
// MAX_EXACT_FILL_MOVES:   moves in a region of EXACT_FILL_MAX_SQUARES

struct FillEntry {
    u64 amazons, empties;
    int32_t longest;  // -1: free slot
};

struct FillSearch {
    int64_t nodes_left;
    int64_t nodes_searched;  // nodes of every search so far: work the bot's clock counts (search.h)
    FillEntry table[FILL_TABLE_SIZE];
};

static FillSearch g_fill;

static inline u64 king_step(u64 board) {
    board |= ((board << 1) & ~FILE_A) | ((board >> 1) & ~FILE_H);
    return board | (board << 8) | (board >> 8);
}

static u64 flood_fill(u64 seeds, u64 passable) {
    u64 reach = seeds & passable, previous = 0;
    while (reach != previous) {
        previous = reach;
        reach = king_step(reach) & passable;
    }
    return reach;
}

static bool is_separated(const Pos& pos) {
    u64 passable = ~pos.arrows, reach = pos.mine & passable, previous = 0;
    while (reach != previous) {
        if (reach & pos.theirs) return false;
        previous = reach;
        reach = king_step(reach) & passable;
    }
    return true;
}

static inline u64 fill_reach(u64 amazons, u64 empties) { return flood_fill(amazons, amazons | empties) & empties; }

static inline u64 fill_child(u64 amazons, u64 empties, int src, int dst, int arrow) {
    return fill_reach(amazons ^ (ONE << src) ^ (ONE << dst), (empties | (ONE << src)) & ~((ONE << dst) | (ONE << arrow)));
}

// The moves of amazons alone on `empties`, generated lazily: arrow squares by fewest empty
// neighbours first, then the amazons in square order, then landing squares by most.
struct FillMoves {
    u64 amazons, empties, blocked, by_liberties[9], by_freedom[9], targets, sources, landings;
    int liberties, freedom, target, src;
};

static void start_fill_moves(FillMoves* moves, u64 amazons, u64 empties) {
    moves->amazons = amazons;
    moves->empties = empties;
    moves->blocked = ~empties;
    std::memset(moves->by_liberties, 0, sizeof(moves->by_liberties));
    for (u64 targets = empties | amazons; targets; targets &= targets - 1) {
        int target = ctz64(targets);
        moves->by_liberties[popcount64(NEIGHBOURS[target] & empties)] |= ONE << target;
    }
    moves->liberties = 0;
    moves->targets = moves->by_liberties[0];
    moves->sources = 0;
    moves->landings = 0;
    moves->freedom = 0;
    moves->target = 0;
    moves->src = 0;
}

static bool next_fill_move(FillMoves* moves, int* src, int* dst, int* arrow) {
    for (;;) {
        if (moves->landings) {
            *src = moves->src;
            *dst = ctz64(moves->landings);
            *arrow = moves->target;
            moves->landings &= moves->landings - 1;
            return true;
        }
        if (moves->freedom > 0) {
            moves->freedom -= 1;
            moves->landings = moves->by_freedom[moves->freedom];
        } else if (moves->sources) {
            moves->src = ctz64(moves->sources);
            moves->sources &= moves->sources - 1;
            u64 landings = queen_moves(moves->src, moves->blocked);
            if (moves->target != moves->src) landings &= queen_moves(moves->target, moves->blocked & ~(ONE << moves->src));
            std::memset(moves->by_freedom, 0, sizeof(moves->by_freedom));
            for (; landings; landings &= landings - 1) {
                int landing = ctz64(landings);
                moves->by_freedom[popcount64(NEIGHBOURS[landing] & moves->empties)] |= ONE << landing;
            }
            moves->freedom = 9;
        } else if (moves->targets) {
            moves->target = ctz64(moves->targets);
            moves->targets &= moves->targets - 1;
            // Only the amazon standing on an arrow square can shoot there (back where it came from).
            moves->sources = ((moves->amazons >> moves->target) & 1) ? (ONE << moves->target) : moves->amazons;
        } else if (moves->liberties < 8) {
            moves->liberties += 1;
            moves->targets = moves->by_liberties[moves->liberties];
        } else {
            return false;
        }
    }
}

// The greedy fill's next move: the one keeping the most empty squares in reach (the first among
// equals; one that loses nothing but its own square is taken at once). False without a move.
static bool pick_fill_move(u64 amazons, u64 empties, int* best_src, int* best_dst, int* best_arrow) {
    FillMoves moves;
    int full = popcount64(empties) - 1, best_reach = -1, src, dst, arrow;
    start_fill_moves(&moves, amazons, empties);
    while (next_fill_move(&moves, &src, &dst, &arrow)) {
        int reach = popcount64(fill_child(amazons, empties, src, dst, arrow));
        if (reach > best_reach) {
            best_reach = reach;
            *best_src = src;
            *best_dst = dst;
            *best_arrow = arrow;
            if (reach == full) return true;
        }
    }
    return best_reach >= 0;
}

static int greedy_fill(u64* amazons, u64* empties, int stop_at) {
    int played = 0, src = 0, dst = 0, arrow = 0;
    *empties = fill_reach(*amazons, *empties);
    while (popcount64(*empties) > stop_at && pick_fill_move(*amazons, *empties, &src, &dst, &arrow)) {
        *empties = fill_child(*amazons, *empties, src, dst, arrow);
        *amazons ^= (ONE << src) | (ONE << dst);
        ++played;
    }
    return played;
}

static int longest_fill(FillSearch* search, u64 amazons, u64 empties);

static int fill_children(FillSearch* search, u64 amazons, u64 empties, int bound) {
    FillMoves generator;
    uint8_t moves[MAX_EXACT_FILL_MOVES][3];
    uint8_t reach[MAX_EXACT_FILL_MOVES];
    int count = 0, best = 0, src, dst, arrow;
    start_fill_moves(&generator, amazons, empties);
    while (next_fill_move(&generator, &src, &dst, &arrow)) {
        if (count == MAX_EXACT_FILL_MOVES) {
            search->nodes_left = 0;
            break;
        }
        moves[count][0] = (uint8_t)src;
        moves[count][1] = (uint8_t)dst;
        moves[count][2] = (uint8_t)arrow;
        reach[count] = (uint8_t)popcount64(fill_child(amazons, empties, src, dst, arrow));
        ++count;
    }
    for (int full_pass = 1; full_pass >= 0; --full_pass) {
        for (int index = 0; index < count; ++index) {
            if ((int)(reach[index] == bound - 1) != full_pass || 1 + reach[index] <= best) continue;
            u64 child = fill_child(amazons, empties, moves[index][0], moves[index][1], moves[index][2]);
            int value = 1 + longest_fill(search, amazons ^ (ONE << moves[index][0]) ^ (ONE << moves[index][1]), child);
            if (value > best) {
                best = value;
                if (best == bound) return best;
            }
        }
    }
    return best;
}

static int longest_fill(FillSearch* search, u64 amazons, u64 empties) {
    empties = fill_reach(amazons, empties);
    int bound = popcount64(empties);
    if (bound <= 1) return bound;
    u64 component = flood_fill(amazons & (~amazons + 1), amazons | empties);
    if ((component & amazons) != amazons) {
        int total = 0;
        for (u64 rest = amazons; rest; rest &= ~component) {
            component = flood_fill(rest & (~rest + 1), amazons | empties);
            total += longest_fill(search, amazons & component, empties & component);
        }
        return total;
    }
    u64 key = amazons * 0x9E3779B97F4A7C15ULL + empties;
    key = (key ^ (key >> 31)) * 0xBF58476D1CE4E5B9ULL;
    FillEntry* entry = &search->table[(key ^ (key >> 29)) & (FILL_TABLE_SIZE - 1)];
    if (entry->longest >= 0 && entry->amazons == amazons && entry->empties == empties) return entry->longest;
    if (search->nodes_left <= 0) return 0;
    search->nodes_left -= 1;
    search->nodes_searched += 1;
    int best = fill_children(search, amazons, empties, bound);
    if (search->nodes_left > 0) {
        entry->amazons = amazons;
        entry->empties = empties;
        entry->longest = best;
    }
    return best;
}

static void side_fill_bounds(u64 amazons, u64 others, u64 arrows, int* lower, int* upper, FillSearch* search) {
    *lower = 0;
    *upper = 0;
    u64 rest = amazons;
    while (rest) {
        u64 component = flood_fill(rest & (~rest + 1), ~arrows);
        rest &= ~component;
        u64 tail_amazons = amazons & component;
        u64 tail_empties = fill_reach(tail_amazons, component & ~(amazons | others));
        int bound = popcount64(tail_empties);
        int prefix = greedy_fill(&tail_amazons, &tail_empties, EXACT_FILL_MAX_SQUARES);
        u64 end_amazons = tail_amazons, end_empties = tail_empties;
        int fill = prefix + greedy_fill(&end_amazons, &end_empties, 0);
        if (fill < bound) {
            std::memset(search->table, 0xFF, sizeof(search->table));
            search->nodes_left = EXACT_FILL_NODE_BUDGET;
            int exact = longest_fill(search, tail_amazons, tail_empties);
            if (prefix == 0 && search->nodes_left > 0) bound = exact;
            if (prefix + exact > fill) fill = prefix + exact;
        }
        *lower += fill;
        *upper += bound;
    }
}

// +1 when the side to move has won (its lower bound beats the opponent's upper bound), -1 when it
// has lost (its upper bound is at most the opponent's lower: it moves first), 0 when undecided or
// not separated. bounds = my lower, my upper, their lower, their upper (four -1: not separated).
static int adjudicate(const Pos& pos, int* bounds) {
    if (!is_separated(pos)) {
        bounds[0] = bounds[1] = bounds[2] = bounds[3] = -1;
        return 0;
    }
    side_fill_bounds(pos.mine, pos.theirs, pos.arrows, &bounds[0], &bounds[1], &g_fill);
    side_fill_bounds(pos.theirs, pos.mine, pos.arrows, &bounds[2], &bounds[3], &g_fill);
    if (bounds[0] > bounds[3]) return 1;
    if (bounds[1] <= bounds[2]) return -1;
    return 0;
}

// The plies to the game's end that a decided adjudication (result +1 or -1, its bounds) implies,
// in the search tree's convention: amazons.mcts.adjudicated_plies, which
// tests/test_native_input.py holds this to on positions.
static int adjudicated_plies(int result, const int* bounds) {
    return result > 0 ? 2 * bounds[3] + 1 : 2 * bounds[1];
}

#endif  // AMZ_ADJUDICATE_H
