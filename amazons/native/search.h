// The bot's search (amazons/mcts_numba.py with the Python bot's settings): the CPU clock, the
// tree, the network cache, PUCT with the MCTS-solver and LCB. Its constants come from the Python
// definitions (amazons.players.factory.NET_SEARCH, amazons.players.botzone_limits) through "settings.h",
// which amazons.botzone.cpp_export writes (common.h says how the parts are joined). The program that
// includes this part defines evaluate_leaf, the network's value and move priors of a position
// (bot.cpp: the network part).

#ifndef AMZ_SEARCH_H
#define AMZ_SEARCH_H

#include "adjudicate.h"
#include "settings.h"

static float evaluate_leaf(const Pos& pos, const Move* moves, int count, float* priors);

// ================================================================================================
// The clock: the process's CPU time, which Botzone charges, by std::clock(): the standard
// library's, so it links anywhere (clock_gettime needs -lrt before glibc 2.17). glibc reads it
// from the kernel's process CPU clock in microseconds (measured: 1 us steps, about 0.6 us a call);
// a 64-bit clock_t never wraps in a game (a 32-bit one would after 72 minutes of CPU).

static double cpu_seconds() { return (double)std::clock() / CLOCKS_PER_SEC; }

// ================================================================================================
// The search tree (amazons/mcts_numba.py): struct of arrays, node 0 the root, each node's edges one
// contiguous block, nodes and edges allocated left to right. A node is made when its move is
// first visited (as lc0 and KataGo do): an edge is only its move, its proof and its prior, 6
// bytes, and its child, if any, is found from the node's list of children (n_child, n_sibling,
// n_parent_edge). An edge's statistics are its child's (visits, and the value negated); an edge
// without a child has no visit.

static const int8_t PROOF_WIN = 1, PROOF_LOSS = -1, PROOF_NONE = 0;
static const int NO_NODE = -1;
static const int NOT_EXPANDED = -1;

// C_PUCT, C_PUCT_BASE, FPU_REDUCTION, LCB_MIN_VISITS_FRACTION, LCB_STDEVS: the settings block.

static const size_t NODE_BYTES = 4 + 8 + 8 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 1 + 1 + 1 + 4 + 8;  // with the compaction scratch
static const size_t EDGE_BYTES = 4 + 2;
static const int MOVES_PER_NODE = 32;  // edges budgeted per node when the tree's memory is split

// An edge's word: the move's squares (6 bits each), its proof + 1 (2 bits), whether it has a child
// (1 bit) and its proof's plies (8 bits).
static const int EDGE_PROOF_SHIFT = 18, EDGE_CHILD_SHIFT = 20, EDGE_PLIES_SHIFT = 24;
static const uint32_t EDGE_MOVE_MASK = (1u << 18) - 1;

static inline uint32_t edge_word(const Move& move, int proof, int plies) {
    return (uint32_t)move.src | (uint32_t)move.dst << 6 | (uint32_t)move.arrow << 12 |
           (uint32_t)(proof + 1) << EDGE_PROOF_SHIFT | (uint32_t)plies << EDGE_PLIES_SHIFT;
}

// Priors as 16-bit floats: 5 exponent and 11 mantissa bits without a sign (a prior is >= 0), for
// values in [2^-30, 2), rounded to the nearest (relative error at most 2^-12); smaller ones are 0.
// The code is the float's bits less 96 in the exponent, shifted right by 12, so codes order as
// the priors do. PUCT sees the network's priors so rounded (lc0 stores them in 16 bits too).
static const float SMALLEST_PRIOR = 9.31322574615478515625e-10f;  // 2^-30

static inline uint16_t encode_prior(float prior) {
    if (!(prior >= SMALLEST_PRIOR)) return 0;  // NaN too
    uint32_t bits;
    std::memcpy(&bits, &prior, sizeof(bits));
    uint32_t rounded = (bits + (1u << 11)) >> 12;
    if (rounded > (127u << 11 | 0x7FFu)) rounded = 127u << 11 | 0x7FFu;
    return (uint16_t)(rounded - (96u << 11));
}

static inline float decode_prior(uint16_t code) {
    if (code == 0) return 0.0f;
    uint32_t bits = ((uint32_t)code << 12) + (96u << 23);
    float prior;
    std::memcpy(&prior, &bits, sizeof(prior));
    return prior;
}

template <typename T>
static T* allocate(size_t count) {
    // Not zeroed: the operating system backs a page only once the search writes it.
    T* data = static_cast<T*>(std::malloc(sizeof(T) * (count ? count : 1)));
    if (!data) throw BotError(format("cannot allocate %lu bytes for the search tree", (unsigned long)(sizeof(T) * count)));
    return data;
}

struct Tree {
    int node_capacity, edge_capacity, nodes_used, edges_used;
    int32_t* n_visits;      // simulations through the node (its expansion included)
    double* n_value;        // sum of backed-up values, for the side to move at the node
    double* n_value_sq;     // sum of their squares (the variance of the lower confidence bound)
    float* n_mass;          // prior mass of the edges selected so far (first-play urgency)
    int32_t* n_first;       // first edge
    int32_t* n_count;       // number of edges; NOT_EXPANDED for a fresh root
    int32_t* n_parent;      // parent node, NO_NODE at the root
    int32_t* n_parent_edge; // edge from the parent
    int32_t* n_child;       // a child (the newest), NO_NODE if none: the children form a list
    int32_t* n_sibling;     // the next child of the same parent, NO_NODE at the end
    int32_t* n_open;        // the edge without a child with the highest prior (the first of equals), or -1
    int8_t* n_proof;        // PROOF_* for the side to move at the node
    uint8_t* n_plies;       // plies to the end under best play when proven
    uint8_t* n_terminal;    // the side to move has no move
    float* n_raw;           // the network's value at expansion (exact if proven)
    int32_t *scratch_index, *scratch_shift;
    uint32_t* e_word;       // [E] the canonical move in the owning node's frame, proof, child flag, plies
    uint16_t* e_prior;      // [E] the move's prior, encode_prior

    // The edges and nodes a tree of `megabytes` MiB holds (at most 2e9 edges, an int's range);
    // allocate_for allocates these, bot --info reports them.
    static void capacity(double megabytes, int* edges, int* nodes) {
        double count =
            megabytes * 1048576.0 / ((double)EDGE_BYTES + (double)NODE_BYTES / MOVES_PER_NODE);
        *edges = count > 2e9 ? 2000000000 : (int)count;
        *nodes = *edges / MOVES_PER_NODE;
    }

    void allocate_for(double megabytes) {
        capacity(megabytes, &edge_capacity, &node_capacity);
        if (edge_capacity < MAX_MOVES || node_capacity < 2)
            throw BotError(format("--tree-mb %g holds %d edges and %d nodes; a tree needs %d edges and 2 nodes",
                                  megabytes, edge_capacity, node_capacity, MAX_MOVES));
        n_visits = allocate<int32_t>(node_capacity);
        n_value = allocate<double>(node_capacity);
        n_value_sq = allocate<double>(node_capacity);
        n_mass = allocate<float>(node_capacity);
        n_first = allocate<int32_t>(node_capacity);
        n_count = allocate<int32_t>(node_capacity);
        n_parent = allocate<int32_t>(node_capacity);
        n_parent_edge = allocate<int32_t>(node_capacity);
        n_child = allocate<int32_t>(node_capacity);
        n_sibling = allocate<int32_t>(node_capacity);
        n_open = allocate<int32_t>(node_capacity);
        n_proof = allocate<int8_t>(node_capacity);
        n_plies = allocate<uint8_t>(node_capacity);
        n_terminal = allocate<uint8_t>(node_capacity);
        n_raw = allocate<float>(node_capacity);
        scratch_index = allocate<int32_t>(node_capacity);
        scratch_shift = allocate<int32_t>(node_capacity);
        e_word = allocate<uint32_t>(edge_capacity);
        e_prior = allocate<uint16_t>(edge_capacity);
        reset();
    }

    void init_node(int node, int parent, int parent_edge) {
        n_visits[node] = 0;
        n_value[node] = 0.0;
        n_value_sq[node] = 0.0;
        n_mass[node] = 0.0f;
        n_first[node] = edges_used;
        n_count[node] = NOT_EXPANDED;
        n_parent[node] = parent;
        n_parent_edge[node] = parent_edge;
        n_child[node] = NO_NODE;
        n_sibling[node] = NO_NODE;
        n_open[node] = -1;
        n_proof[node] = PROOF_NONE;
        n_plies[node] = 0;
        n_terminal[node] = 0;
        n_raw[node] = 0.0f;
    }

    void reset() {
        nodes_used = 1;
        edges_used = 0;
        init_node(0, NO_NODE, NO_NODE);
    }

    Move edge_move(int e) const {
        Move move;
        move.src = (uint8_t)(e_word[e] & 63);
        move.dst = (uint8_t)(e_word[e] >> 6 & 63);
        move.arrow = (uint8_t)(e_word[e] >> 12 & 63);
        return move;
    }
    bool same_move(int e, const Move& move) const {
        return (e_word[e] & EDGE_MOVE_MASK) == (edge_word(move, 0, 0) & EDGE_MOVE_MASK);
    }
    int edge_proof(int e) const { return (int)(e_word[e] >> EDGE_PROOF_SHIFT & 3) - 1; }
    int edge_plies(int e) const { return (int)(e_word[e] >> EDGE_PLIES_SHIFT); }
    bool edge_has_child(int e) const { return (e_word[e] >> EDGE_CHILD_SHIFT & 1) != 0; }
    float edge_prior(int e) const { return decode_prior(e_prior[e]); }

    void set_edge_proof(int e, int proof, int plies) {
        e_word[e] = (e_word[e] & (EDGE_MOVE_MASK | 1u << EDGE_CHILD_SHIFT)) | (uint32_t)(proof + 1) << EDGE_PROOF_SHIFT |
                    (uint32_t)plies << EDGE_PLIES_SHIFT;
    }
    void set_edge_child(int e) { e_word[e] |= 1u << EDGE_CHILD_SHIFT; }

    // The child of each of `node`'s edges, NO_NODE where it has none: [n_count[node]].
    std::vector<int32_t> children_by_edge(int node) const {
        std::vector<int32_t> child(n_count[node] > 0 ? n_count[node] : 0, NO_NODE);
        for (int c = n_child[node]; c != NO_NODE; c = n_sibling[c]) child[n_parent_edge[c] - n_first[node]] = c;
        return child;
    }
};

// ================================================================================================
// The network cache: where a position the network evaluated in the tree comes up again (another
// move order reaching it, a transposition), its node already holds the network's outputs for
// it: the value at expansion (n_raw) and the priors of the same moves in the same order (its
// edges). A direct-mapped table from the position to that node lets expand_leaf copy them
// instead of calling the network; the search and its results are unchanged. Entries follow the
// nodes through compaction and are dropped with them.

static const int CACHE_BITS = 18;  // 2^18 entries of 32 bytes: 8 MiB

struct CacheEntry {
    Pos pos;
    int32_t node;  // NO_NODE: empty
};

class NetworkCache {
  public:
    NetworkCache() : clears(0), stored(0), entries((size_t)1 << CACHE_BITS) {
        for (size_t i = 0; i < entries.size(); ++i) entries[i].node = NO_NODE;
    }

    int clears;  // times entries were thrown away (a debug statistic: --root-stats)

    // Empty the table: a pass over its 8 MiB, skipped when nothing was stored since the last (a
    // restarted process replays the game's moves with an empty tree, one clear per move).
    void clear() {
        if (stored == 0) return;
        for (size_t i = 0; i < entries.size(); ++i) entries[i].node = NO_NODE;
        stored = 0;
        ++clears;
    }

    // The node the network evaluated at `pos`, or NO_NODE.
    int find(const Pos& pos) const {
        const CacheEntry& entry = entries[slot(pos)];
        if (entry.node != NO_NODE && entry.pos.mine == pos.mine && entry.pos.theirs == pos.theirs &&
            entry.pos.arrows == pos.arrows)
            return entry.node;
        return NO_NODE;
    }

    void remember(const Pos& pos, int node) {
        CacheEntry& entry = entries[slot(pos)];
        entry.pos = pos;
        entry.node = node;
        ++stored;
    }

    // After compaction: node n is now renumbered[n], or gone where that is negative.
    void renumber(const int32_t* renumbered) {
        for (size_t i = 0; i < entries.size(); ++i)
            if (entries[i].node != NO_NODE) entries[i].node = renumbered[entries[i].node] >= 0 ? renumbered[entries[i].node] : NO_NODE;
    }

  private:
    long stored;  // entries written since the table was last emptied
    std::vector<CacheEntry> entries;

    static size_t slot(const Pos& pos) {
        u64 key = pos.mine * 0x9E3779B97F4A7C15ULL ^ pos.theirs * 0xC2B2AE3D27D4EB4FULL ^ pos.arrows * 0x165667B19E3779F9ULL;
        key ^= key >> 29;
        return (size_t)((key * 0xBF58476D1CE4E5B9ULL) >> (64 - CACHE_BITS));
    }
};

// ================================================================================================
// The search

struct SearchResult {
    int simulations;      // this search's simulations
    bool tree_full;       // the search stopped because the tree was full
    int cache_hits;       // its new leaves evaluated from the network cache instead of the network
    double longest_gap;   // the most CPU seconds between two reads of the clock (0 without a deadline)
    double slowest;       // the most CPU seconds of one simulation (measured only with `profile`)
    int64_t fill_nodes;   // nodes of the adjudication's exhaustive region fill this search ran
    int64_t unread_fill;  // the most fill nodes run since the last clock read when a simulation
                          // began (a read comes first from FILL_NODES_PER_READ on; 0 without a
                          // deadline)
};

// When the clock is read (a system call, about 0.6 us): after the first simulation, then after
// CLOCK_EVERY more (a simulation with the network takes about 35 us), or sooner: after one whose
// adjudication searched FILL_NODES_PER_READ or more nodes of the exhaustive region fill (about
// 0.8 us a node; up to EXACT_FILL_NODE_BUDGET per region, 4 ms when a search spends it all), and
// after every simulation while the last reads found them slower than SLOW_SIMULATION_SECONDS on
// average. So the work between two reads is bounded by time: a few cheap simulations and at most
// one adjudication (never interrupted: its result must not depend on the clock).
static const int CLOCK_EVERY = 8;
static const int64_t FILL_NODES_PER_READ = 256;
static const double SLOW_SIMULATION_SECONDS = 5e-4;

class Search {
  public:
    Tree tree;
    Pos root;
    std::vector<Move> moves;
    std::vector<float> priors;
    std::vector<uint8_t> wins;
    NetworkCache cache;
    bool use_cache;  // false: the network evaluates every new leaf
    bool use_lcb;       // play the best lower confidence bound (SearchConfig.lcb), else the most visits
    bool profile;       // time every simulation (SearchResult.slowest: --root-stats), clock reads aside
    double lcb_stdevs;  // SearchConfig.lcb_stdevs
    int cache_hits;  // leaves evaluated from the cache so far
    int top;         // the node of `root`: 0, or a node below it after moves not compacted yet

    Search()
        : moves(MAX_MOVES), priors(MAX_MOVES), wins(MAX_MOVES), use_cache(true), use_lcb(LCB_DEFAULT), profile(false),
          lcb_stdevs(LCB_STDEVS), cache_hits(0), top(0) {
        root = start_position();
    }

    void set_root(const Pos& pos) {
        root = pos;
        top = 0;
        tree.reset();
        cache.clear();
    }

    // Play canonical `move` at the root: its subtree (if expanded) becomes the tree, else a fresh
    // root. The tree is compacted only when the next search starts: after the bot's own move
    // (played once its search's time is up) and the opponent's reply, it is compacted once, to
    // the subtree two plies down, inside the next turn's time.
    void advance(const Move& move) {
        int child = NO_NODE;
        for (int c = tree.n_count[top] > 0 ? tree.n_child[top] : NO_NODE; c != NO_NODE; c = tree.n_sibling[c])
            if (tree.same_move(tree.n_parent_edge[c], move)) {
                child = c;
                break;
            }
        root = child_position(root, move.src, move.dst, move.arrow);
        if (child > 0) {
            top = child;
        } else {
            top = 0;
            tree.reset();
            cache.clear();
        }
    }

    // Run simulations until `simulations` (> 0) are done or the CPU clock reaches `deadline` (> 0),
    // the root is proven, or the tree is full. At least one simulation runs; the clock is read as
    // CLOCK_EVERY's comment says.
    SearchResult run(int simulations, double deadline) {
        SearchResult result = {0, false, 0, 0.0, 0.0, 0, 0};
        int hits_before = cache_hits;
        double last_read = deadline > 0 ? cpu_seconds() : 0.0;
        int64_t fill_at_read = g_fill.nodes_searched, fill_at_start = g_fill.nodes_searched;
        int since_read = 0, interval = CLOCK_EVERY;
        if (top != 0) {
            compact(top);
            top = 0;
        }
        if (tree.n_count[0] == NOT_EXPANDED) expand_root();
        refresh_root_proof();
        while (tree.n_proof[0] == PROOF_NONE) {
            if (simulations > 0 && result.simulations >= simulations) break;
            if (deadline > 0 && since_read > 0 &&
                (result.simulations == 1 || since_read >= interval ||
                 g_fill.nodes_searched - fill_at_read >= FILL_NODES_PER_READ)) {
                double now = cpu_seconds();
                if (now - last_read > result.longest_gap) result.longest_gap = now - last_read;
                interval = now - last_read > SLOW_SIMULATION_SECONDS * since_read ? 1 : CLOCK_EVERY;
                last_read = now;
                fill_at_read = g_fill.nodes_searched;
                since_read = 0;
                if (now >= deadline) break;
            }
            if (deadline > 0 && g_fill.nodes_searched - fill_at_read > result.unread_fill)
                result.unread_fill = g_fill.nodes_searched - fill_at_read;
            double started = profile ? cpu_seconds() : 0.0;
            bool expanded = simulate();
            if (profile) {
                double took = cpu_seconds() - started;
                if (took > result.slowest) result.slowest = took;
            }
            ++result.simulations;
            ++since_read;
            if (!expanded) {
                result.tree_full = true;
                break;
            }
        }
        result.cache_hits = cache_hits - hits_before;
        result.fill_nodes = g_fill.nodes_searched - fill_at_start;
        return result;
    }

    // The edge to play: with `use_lcb` (mcts_numba.lcb_edge) at an unproven root, among the moves
    // not proven lost with at least max(2, LCB_MIN_VISITS_FRACTION x the most visits), the one with
    // the highest mean - t(lcb_stdevs, N) * sqrt(variance / N) of the values backed up through it
    // (ties to more visits, then the first); else, and when none qualifies, `most_visited_edge`.
    int best_edge() const {
        const Tree& t = tree;
        std::vector<int32_t> children = t.children_by_edge(0);
        int most = most_visited_edge(children);
        if (!use_lcb || most < 0 || t.n_proof[0] != PROOF_NONE) return most;
        double threshold = LCB_MIN_VISITS_FRACTION * root_visits(children, most);
        if (threshold < 2.0) threshold = 2.0;
        int first = t.n_first[0], last = first + t.n_count[0];
        int chosen = most;
        double chosen_bound = -HUGE_VAL;
        for (int e = first; e < last; ++e) {
            int visits = root_visits(children, e);
            if (t.edge_proof(e) == PROOF_LOSS || visits < threshold) continue;
            int child = children[e - first];
            double n = visits;
            double mean = -t.n_value[child] / n;
            double variance = t.n_value_sq[child] / n - mean * mean;
            if (variance < 0.0) variance = 0.0;
            // Student-t counterpart of lcb_stdevs for n samples (mcts_numba._t_quantile)
            double quantile = std::sqrt(n * std::expm1(lcb_stdevs * lcb_stdevs * (n - 1.5) / ((n - 1.0) * (n - 1.0))));
            double bound = mean - quantile * std::sqrt(variance / n);
            if (bound > chosen_bound || (bound == chosen_bound && visits > root_visits(children, chosen))) {
                chosen = e;
                chosen_bound = bound;
            }
        }
        return chosen;
    }

    // mcts_numba.best_edge, then open_edge: a proven win (the shortest), else the most visited move
    // not proven lost, else the open move with the highest prior; at a proven loss the longest
    // resistance. -1 only at a root without moves. `children`: Tree::children_by_edge(0).
    int most_visited_edge(const std::vector<int32_t>& children) const {
        const Tree& t = tree;
        int first = t.n_first[0], last = first + (t.n_count[0] > 0 ? t.n_count[0] : 0);
        int chosen = -1;
        if (t.n_proof[0] == PROOF_WIN) {
            for (int e = first; e < last; ++e)
                if (t.edge_proof(e) == PROOF_WIN &&
                    (chosen < 0 || t.edge_plies(e) < t.edge_plies(chosen) ||
                     (t.edge_plies(e) == t.edge_plies(chosen) && root_visits(children, e) > root_visits(children, chosen))))
                    chosen = e;
            return chosen;
        }
        if (t.n_proof[0] == PROOF_LOSS) {
            for (int e = first; e < last; ++e)
                if (chosen < 0 || t.edge_plies(e) > t.edge_plies(chosen) ||
                    (t.edge_plies(e) == t.edge_plies(chosen) && root_visits(children, e) > root_visits(children, chosen)))
                    chosen = e;
            return chosen;
        }
        int best_visits = 0;
        for (int e = first; e < last; ++e)
            if (t.edge_proof(e) != PROOF_LOSS && root_visits(children, e) > best_visits) {
                best_visits = root_visits(children, e);
                chosen = e;
            }
        if (chosen < 0)
            for (int e = first; e < last; ++e)
                if (t.edge_proof(e) != PROOF_LOSS && (chosen < 0 || t.e_prior[e] > t.e_prior[chosen])) chosen = e;
        if (chosen < 0) chosen = first < last ? first : -1;
        return chosen;
    }

    // The visits of root edge `e`; `children`: Tree::children_by_edge(0).
    int root_visits(const std::vector<int32_t>& children, int e) const {
        int child = children[e - tree.n_first[0]];
        return child >= 0 ? tree.n_visits[child] : 0;
    }

    double root_value() const { return tree.n_visits[0] > 0 ? tree.n_value[0] / tree.n_visits[0] : 0.0; }

  private:
    // Expand the root with the network (not counted as a simulation).
    void expand_root() {
        int count = legal_moves(root, &moves[0]);
        float value = -1.0f;
        int8_t proof = PROOF_NONE;
        int plies = 0;
        if (count == 0) {
            proof = PROOF_LOSS;
        } else {
            value = evaluate_leaf(root, &moves[0], count, &priors[0]);
            if (winning_moves(root, &moves[0], count, &wins[0]) > 0) {
                proof = PROOF_WIN;
                plies = 1;
                value = 1.0f;
            }
        }
        if (count > tree.edge_capacity) throw BotError("the tree cannot hold the root's moves: raise --tree-mb");
        write_node(0, count, count == 0, value, proof, plies);
        backup(0, value);
    }

    void write_node(int node, int count, bool terminal, float value, int8_t proof, int plies) {
        Tree& t = tree;
        int first = t.edges_used;
        t.n_first[node] = first;
        t.n_count[node] = count;
        t.n_terminal[node] = terminal ? 1 : 0;
        t.n_raw[node] = value;
        t.n_proof[node] = proof;
        t.n_plies[node] = (uint8_t)plies;
        int open = -1;
        for (int i = 0; i < count; ++i) {
            bool win = proof == PROOF_WIN && plies == 1 && wins[i];
            t.e_word[first + i] = edge_word(moves[i], win ? PROOF_WIN : PROOF_NONE, win ? 1 : 0);
            t.e_prior[first + i] = encode_prior(priors[i]);
            if (i == 0 || t.e_prior[first + i] > t.e_prior[open]) open = first + i;  // no edge has a child yet
        }
        t.edges_used = first + count;
        t.n_open[node] = open;
    }

    // Add one simulation worth `value` (for the side to move at `node`) from `node` up to the root.
    void backup(int node, double value) {
        while (node != NO_NODE) {
            tree.n_visits[node] += 1;
            tree.n_value[node] += value;
            tree.n_value_sq[node] += value * value;
            value = -value;
            node = tree.n_parent[node];
        }
    }

    // The PUCT score of edge `e` with child `child` (NO_NODE if none): Q + c * P * sqrt(N_parent) /
    // (1 + N) with N the child's visits; an edge without a visit scores the first-play urgency
    // fpu + c * P * sqrt(N_parent).
    double edge_score(int e, int child, double scale, double fpu) const {
        const Tree& t = tree;
        if (child >= 0 && t.n_visits[child] > 0) {
            double visits = t.n_visits[child];
            return -t.n_value[child] / visits + scale * t.edge_prior(e) / (1.0 + visits);
        }
        return fpu + scale * t.edge_prior(e);
    }

    // The edge without a child and not proven lost with the highest prior (the first of equals),
    // or -1.
    int open_edge(int node) const {
        const Tree& t = tree;
        int open = -1;
        for (int e = t.n_first[node]; e < t.n_first[node] + t.n_count[node]; ++e)
            if (!t.edge_has_child(e) && t.edge_proof(e) != PROOF_LOSS && (open < 0 || t.e_prior[e] > t.e_prior[open]))
                open = e;
        return open;
    }

    // PUCT choice at an expanded, non-terminal, unproven node (mcts_numba._select_edge without
    // virtual loss): the best score, the first best on ties; proven-lost edges are never chosen.
    // Edges without a child score by their prior alone, so the open edge is the only one of them
    // that can win: the node's children and its open edge decide. Only where the open edge would
    // win with a term scale * P under 1e-6 (so small that rounding may tie it with lower priors
    // of earlier edges) do all the edges get scored, in order. `*child`: the chosen edge's child,
    // NO_NODE if it has none.
    int select_edge(int node, int* child) const {
        const Tree& t = tree;
        double parent_visits = t.n_visits[node];
        double c = C_PUCT;
        if (C_PUCT_BASE > 0.0) c = C_PUCT + std::log((1.0 + parent_visits + C_PUCT_BASE) / C_PUCT_BASE);
        double scale = c * std::sqrt(parent_visits);
        double parent_q = t.n_value[node] / t.n_visits[node];
        double fpu = parent_q - FPU_REDUCTION * std::sqrt((double)t.n_mass[node]);
        int best = -1, best_child = NO_NODE;
        double best_score = -HUGE_VAL;
        for (int c = t.n_child[node]; c != NO_NODE; c = t.n_sibling[c]) {
            int e = t.n_parent_edge[c];
            if (t.edge_proof(e) == PROOF_LOSS) continue;
            double score = edge_score(e, c, scale, fpu);
            if (score > best_score || (score == best_score && e < best)) {
                best_score = score;
                best = e;
                best_child = c;
            }
        }
        int open = t.n_open[node];
        if (open >= 0) {
            double score = edge_score(open, NO_NODE, scale, fpu);
            if (score > best_score || (score == best_score && open < best)) {
                if (scale * t.edge_prior(open) < 1e-6) return scan_edges(node, scale, fpu, child);
                best = open;
                best_child = NO_NODE;
            }
        }
        if (best < 0) {  // every edge proven lost: any will do
            best = t.n_first[node];
            best_child = t.children_by_edge(node)[0];
        }
        *child = best_child;
        return best;
    }

    // select_edge by scoring every edge in order.
    int scan_edges(int node, double scale, double fpu, int* child) const {
        const Tree& t = tree;
        std::vector<int32_t> children = t.children_by_edge(node);
        int first = t.n_first[node], last = first + t.n_count[node];
        int best = first;
        double best_score = -HUGE_VAL;
        for (int e = first; e < last; ++e) {
            if (t.edge_proof(e) == PROOF_LOSS) continue;
            double score = edge_score(e, children[e - first], scale, fpu);
            if (score > best_score) {
                best_score = score;
                best = e;
            }
        }
        *child = children[best - first];
        return best;
    }

    // One simulation: descend by PUCT, then back up a terminal's or proven node's exact value, or
    // expand the new leaf. Returns false when the leaf did not fit in the tree.
    bool simulate() {
        Tree& t = tree;
        int node = 0;
        Pos pos = root;
        for (;;) {
            if (t.n_terminal[node] || (node != 0 && t.n_proof[node] != PROOF_NONE)) {
                backup(node, t.n_terminal[node] ? -1.0 : (double)t.n_proof[node]);
                return true;
            }
            int child;
            int e = select_edge(node, &child);
            Move m = t.edge_move(e);
            pos = child_position(pos, m.src, m.dst, m.arrow);
            if (child < 0) {
                t.n_mass[node] += t.edge_prior(e);
                return expand_leaf(node, e, pos);
            }
            node = child;
        }
    }

    bool expand_leaf(int parent, int edge, const Pos& pos) {
        Tree& t = tree;
        int count = legal_moves(pos, &moves[0]);
        float value;
        int8_t proof = PROOF_NONE;
        int plies = 0;
        bool by_network = false;
        if (count == 0) {
            value = -1.0f;
            proof = PROOF_LOSS;
        } else if (winning_moves(pos, &moves[0], count, &wins[0]) > 0) {
            value = 1.0f;
            proof = PROOF_WIN;
            plies = 1;
            for (int i = 0; i < count; ++i) priors[i] = 1.0f / count;
        } else {
            int bounds[4];
            int result = adjudicate(pos, bounds);
            if (result != 0) {
                value = (float)result;
                proof = (int8_t)result;
                plies = adjudicated_plies(result, bounds);
                for (int i = 0; i < count; ++i) priors[i] = 1.0f / count;
            } else {
                int same = use_cache ? cache.find(pos) : NO_NODE;
                if (same != NO_NODE) {
                    value = t.n_raw[same];
                    for (int i = 0; i < count; ++i) priors[i] = t.edge_prior(t.n_first[same] + i);  // encoded again exactly
                    ++cache_hits;
                } else {
                    value = evaluate_leaf(pos, &moves[0], count, &priors[0]);
                    by_network = true;
                }
            }
        }
        if (t.nodes_used >= t.node_capacity || (int64_t)t.edges_used + count > t.edge_capacity) {
            backup(parent, -value);
            return false;
        }
        int node = t.nodes_used++;
        t.init_node(node, parent, edge);
        t.set_edge_child(edge);
        t.n_sibling[node] = t.n_child[parent];
        t.n_child[parent] = node;
        if (t.n_open[parent] == edge) t.n_open[parent] = open_edge(parent);
        if (by_network && use_cache) cache.remember(pos, node);
        write_node(node, count, count == 0, value, proof, plies);
        backup(node, value);
        if (proof != PROOF_NONE) propagate_proof(node);
        return true;
    }

    // mcts_numba._propagate_proof: the edge into a proven node gets the opposite result one ply
    // longer; its parent is a proven win if that edge wins (the shortest win counts), a proven
    // loss if all its edges are proven losses (the longest counts); otherwise the climb stops.
    void propagate_proof(int node) {
        Tree& t = tree;
        while (node != 0 && t.n_proof[node] != PROOF_NONE) {
            int parent = t.n_parent[node], e = t.n_parent_edge[node];
            t.set_edge_proof(e, -t.n_proof[node], t.n_plies[node] + 1);
            if (t.edge_proof(e) == PROOF_WIN) {
                int plies = t.edge_plies(e);
                if (t.n_proof[parent] == PROOF_WIN && t.n_plies[parent] <= plies) return;
                t.n_proof[parent] = PROOF_WIN;
                t.n_plies[parent] = (uint8_t)plies;
            } else {
                int first = t.n_first[parent], longest = 0;
                for (int other = first; other < first + t.n_count[parent]; ++other) {
                    if (t.edge_proof(other) != PROOF_LOSS) return;
                    if (t.edge_plies(other) > longest) longest = t.edge_plies(other);
                }
                t.n_proof[parent] = PROOF_LOSS;
                t.n_plies[parent] = (uint8_t)longest;
            }
            node = parent;
        }
    }

    // mcts_numba.refresh_root_proof: the root's proof from its edges alone.
    void refresh_root_proof() {
        Tree& t = tree;
        int count = t.n_count[0];
        int8_t proof = PROOF_NONE;
        int plies = 0;
        if (count > 0) {
            int first = t.n_first[0], shortest_win = 1 << 30, longest_loss = 0, losses = 0;
            for (int e = first; e < first + count; ++e) {
                if (t.edge_proof(e) == PROOF_WIN) {
                    if (t.edge_plies(e) < shortest_win) shortest_win = t.edge_plies(e);
                } else if (t.edge_proof(e) == PROOF_LOSS) {
                    ++losses;
                    if (t.edge_plies(e) > longest_loss) longest_loss = t.edge_plies(e);
                }
            }
            if (shortest_win < (1 << 30)) {
                proof = PROOF_WIN;
                plies = shortest_win;
            } else if (losses == count) {
                proof = PROOF_LOSS;
                plies = longest_loss;
            }
        }
        t.n_proof[0] = proof;
        t.n_plies[0] = (uint8_t)plies;
    }

    // mcts_numba.compact_subtree: make `new_root` the root, sliding its subtree's nodes and edge
    // blocks to the left in place (indices only decrease) and renumbering the links.
    void compact(int new_root) {
        Tree& t = tree;
        int used = t.nodes_used;
        for (int n = 0; n < used; ++n) t.scratch_index[n] = -1;
        t.scratch_index[new_root] = 0;
        int kept = 1;
        for (int n = new_root + 1; n < used; ++n) {
            int parent = t.n_parent[n];
            if (parent >= 0 && t.scratch_index[parent] >= 0) t.scratch_index[n] = kept++;
        }
        int next_edge = 0;
        for (int n = new_root; n < used; ++n) {
            int m = t.scratch_index[n];
            if (m < 0) continue;
            int first = t.n_first[n], count = t.n_count[n];
            t.scratch_shift[n] = first - next_edge;
            for (int i = 0; i < count; ++i) {
                t.e_word[next_edge + i] = t.e_word[first + i];
                t.e_prior[next_edge + i] = t.e_prior[first + i];
            }
            t.n_visits[m] = t.n_visits[n];
            t.n_value[m] = t.n_value[n];
            t.n_value_sq[m] = t.n_value_sq[n];
            t.n_mass[m] = t.n_mass[n];
            t.n_first[m] = next_edge;
            t.n_count[m] = count;
            t.n_terminal[m] = t.n_terminal[n];
            t.n_raw[m] = t.n_raw[n];
            t.n_proof[m] = t.n_proof[n];
            t.n_plies[m] = t.n_plies[n];
            t.n_child[m] = t.n_child[n] != NO_NODE ? t.scratch_index[t.n_child[n]] : NO_NODE;
            t.n_open[m] = t.n_open[n] >= 0 ? t.n_open[n] - t.scratch_shift[n] : -1;
            if (m == 0) {
                t.n_parent[m] = NO_NODE;
                t.n_parent_edge[m] = NO_NODE;
                t.n_sibling[m] = NO_NODE;
            } else {
                int parent = t.n_parent[n];
                t.n_parent[m] = t.scratch_index[parent];
                t.n_parent_edge[m] = t.n_parent_edge[n] - t.scratch_shift[parent];
                t.n_sibling[m] = t.n_sibling[n] != NO_NODE ? t.scratch_index[t.n_sibling[n]] : NO_NODE;
            }
            if (count > 0) next_edge += count;
        }
        t.nodes_used = kept;
        t.edges_used = next_edge;
        cache.renumber(t.scratch_index);
    }
};

#endif  // AMZ_SEARCH_H
