// The compiled CPU evaluator's core (the extension amazons._native): the network part over a
// batch of positions and their legal moves in the engine's layout, on one or more threads, on
// a board of any size the evaluator serves (N x N, N = MIN_BOARD_SIZE..MAX_BOARD_SIZE; one
// size a batch, the size a template parameter of the batch loop, so 8 x 8 runs rules.h and
// network_evaluate as the bot does). Not part of the Botzone export (Botzone runs one thread,
// the bot evaluates one leaf at a time, and it plays 8 x 8 on rules.h's bitboards).
//
// The batch loop checks what the network part assumes of its input (network.h), once a
// position: InputError names the position and the move. One evaluator may be shared between
// threads: every call holds its mutex, so calls on one evaluator run one at a time.
//
// Boards of other sizes than 8 x 8 (Board<N> and the board_* functions below): a position is
// the board-size contract's row of 3 * W words (docs/network.md, "Board sizes"), [MINE words,
// THEIRS words, ARROWS words], W = 1 up to 8 x 8 and 2 on 9 x 9 and 10 x 10 (the low word holds
// squares 0..63); square y * N + x is bit s % 64 of word s / 64. Inside, a bitboard of
// N * N <= 64 squares is a u64 and a larger one an unsigned __int128 (g++'s), so that the
// feature planes come from the same shifts as rules.h's (Kogge-Stone fills along the 8
// directions).

#ifndef AMZ_EVALUATOR_H
#define AMZ_EVALUATOR_H

#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>

#include "network.h"

template <int N>
struct Board {
    typedef typename std::conditional<(N * N <= 64), u64, unsigned __int128>::type Bits;
    static const int SQUARES = N * N;
    static const int WORDS = N * N <= 64 ? 1 : 2;  // words per bitboard in a position's row

    static Bits bit(int square) { return (Bits)1 << square; }

    // The board's squares.
    static Bits all() {
        return SQUARES == 8 * (int)sizeof(Bits) ? ~(Bits)0 : ((Bits)1 << (SQUARES % (8 * sizeof(Bits)))) - 1;
    }

    // Bitboard k (0 mine, 1 theirs, 2 arrows) of a row.
    static Bits read(const u64* row, int k) {
        Bits bits = row[k * WORDS];
        if (WORDS == 2) {
            Bits high = row[k * WORDS + WORDS - 1];
            bits |= (high << 32) << 32;  // two steps: a u64 Bits never gets here
        }
        return bits;
    }
};

// The number of squares in `bits`.
static inline int count_squares(u64 bits) { return popcount64(bits); }
static inline int count_squares(unsigned __int128 bits) {
    return popcount64((u64)bits) + popcount64((u64)(bits >> 64));
}

// The lowest square of a nonempty `bits`.
static inline int lowest_square(u64 bits) { return ctz64(bits); }
static inline int lowest_square(unsigned __int128 bits) {
    const u64 low = (u64)bits;
    return low ? ctz64(low) : 64 + ctz64((u64)(bits >> 64));
}

// The squares of the board's column x.
template <int N>
static typename Board<N>::Bits board_column(int x) {
    typename Board<N>::Bits bits = 0;
    for (int y = 0; y < N; ++y) bits |= Board<N>::bit(y * N + x);
    return bits;
}

// The empty squares (of `empty`) a queen reaches from any square of `sources` (rules.h's
// attacks_from_set on N x N): per direction, a fill of doubling steps through the empty squares,
// then one more step. A ray has at most N - 1 squares; the steps 1, 2, 4 (, 8) reach that far.
template <int N>
static typename Board<N>::Bits board_attacks(typename Board<N>::Bits sources, typename Board<N>::Bits empty) {
    typedef typename Board<N>::Bits Bits;
    const Bits all = Board<N>::all();
    const Bits not_first = all & ~board_column<N>(0), not_last = all & ~board_column<N>(N - 1);
    Bits result = 0;
    for (int d = 0; d < 8; ++d) {
        const int shift = DIR_DY[d] * N + DIR_DX[d];  // > 0 for directions 0..3
        const Bits wrap = DIR_DX[d] == 1 ? not_first : (DIR_DX[d] == -1 ? not_last : all);
        Bits propagator = empty & wrap, generated = sources;
        for (int step = 1; step < N; step *= 2) {
            const int by = shift * step;
            generated |= propagator & (by > 0 ? generated << by : generated >> -by);
            propagator &= by > 0 ? propagator << by : propagator >> -by;
        }
        result |= (shift > 0 ? generated << shift : generated >> -shift) & wrap & empty;
    }
    return result;
}

// Why the evaluator cannot take the N x N position `row`, or "" when it can: pieces off the
// board (bits past square N * N - 1), a square with two pieces, more than AMAZONS_PER_SIDE
// amazons a side.
template <int N>
static std::string board_position_error(const u64* row) {
    typedef typename Board<N>::Bits Bits;
    const Bits mine = Board<N>::read(row, 0), theirs = Board<N>::read(row, 1), arrows = Board<N>::read(row, 2);
    if ((mine | theirs | arrows) & ~Board<N>::all())
        return format("a piece stands off the %dx%d board (squares 0..%d)", N, N, N * N - 1);
    if ((mine & theirs) | (mine & arrows) | (theirs & arrows)) return "its bitboards overlap (a square holds two pieces)";
    const int own = count_squares(mine), other = count_squares(theirs);
    if (own > AMAZONS_PER_SIDE) return format("the side to move has %d amazons (at most %d)", own, AMAZONS_PER_SIDE);
    if (other > AMAZONS_PER_SIDE) return format("the opponent has %d amazons (at most %d)", other, AMAZONS_PER_SIDE);
    return "";
}

// Every square a queen of `movers` reaches and then shoots to (rules.h's shoot_potential).
template <int N>
static typename Board<N>::Bits board_shoot_potential(typename Board<N>::Bits movers, typename Board<N>::Bits empty) {
    typename Board<N>::Bits result = 0;
    while (movers) {
        const typename Board<N>::Bits from = Board<N>::bit(lowest_square(movers));
        movers &= movers - 1;
        result |= board_attacks<N>(board_attacks<N>(from, empty), empty | from);
    }
    return result;
}

// The feature planes of amazons.engine.features(size=N) (num_planes 3 or 7) of a position
// board_position_error accepts, square-major: planes[square * num_planes + c].
template <int N>
static void board_features(const u64* row, int num_planes, float* planes) {
    typedef typename Board<N>::Bits Bits;
    const Bits mine = Board<N>::read(row, 0), theirs = Board<N>::read(row, 1), arrows = Board<N>::read(row, 2);
    const Bits occupied = mine | theirs | arrows, empty = Board<N>::all() & ~occupied;
    Bits boards[7];
    boards[0] = mine;
    boards[1] = theirs;
    if (num_planes == 3) {
        boards[2] = arrows;
    } else {
        boards[2] = occupied;
        boards[3] = board_attacks<N>(mine, empty);
        boards[4] = board_attacks<N>(theirs, empty);
        boards[5] = board_shoot_potential<N>(mine, empty);
        boards[6] = board_shoot_potential<N>(theirs, empty);
    }
    for (int square = 0; square < N * N; ++square)
        for (int c = 0; c < num_planes; ++c) planes[square * num_planes + c] = (float)(int)((boards[c] >> square) & 1);
}

// Why the moves of position `index` (`count` int32 triples src, dst, arrow) on N x N cannot be
// evaluated: the first move with a square off the board or a source without the side to move's
// amazon (`mine`).
template <int N>
static std::string batch_move_error(int64_t index, const SquareSet<N>& mine, const int32_t* moves,
                                    int64_t count) {
    const int last = N * N - 1;
    for (int64_t k = 0; k < count; ++k) {
        const int32_t* m = moves + 3 * k;
        std::string why;
        if (m[0] < 0 || m[0] > last || m[1] < 0 || m[1] > last || m[2] < 0 || m[2] > last)
            why = format("a square off the board (squares 0..%d)", last);
        else if (!mine.has(m[0]))
            why = "no amazon of the side to move on its source square";
        if (!why.empty())
            return format("position %lld, move %lld (%d %d %d): %s", (long long)index,
                          (long long)k, (int)m[0], (int)m[1], (int)m[2], why.c_str());
    }
    return "";
}

class BatchEvaluator {
  public:
    // init_tables() must have run once (the extension calls it when it is imported).
    BatchEvaluator() : kernels_(&GENERIC_KERNELS), bound_(false) {}

    // Chooses the kernels: the AVX2/FMA ones where the CPU has them, unless `portable`.
    void set_kernels(bool portable) {
        std::lock_guard<std::mutex> hold(mutex_);
        const Kernels* kernels = portable ? &GENERIC_KERNELS : choose_kernels();
        if (bound_)
            bind(shape_, &weights_, kernels);
        else
            kernels_ = kernels;
    }

    const char* kernels_name() const {
        std::lock_guard<std::mutex> hold(mutex_);
        return kernels_->name;
    }

    // Takes a shape and its weights (copied). A refused shape or weight count (bind_network's
    // BotError) leaves the evaluator as it was.
    void load(const NetShape& shape, const float* weights, size_t count) {
        std::lock_guard<std::mutex> hold(mutex_);
        std::vector<float> copy(weights, weights + count);
        bind(shape, &copy, kernels_);
    }

    // values[i] and priors[offsets[i] .. offsets[i + 1]) of the positions of a `size` x `size`
    // board (row i: 3 * W words, mine, theirs, arrows; Board<N>) and their legal moves (src, dst,
    // arrow int32 triples), on `threads` threads. Wrong input raises InputError: a size out of
    // range, a size other than 8 for the flat value head, or the first wrong position (on
    // several threads: the first of the first thread's share that holds one).
    void evaluate(int64_t batch, const uint64_t* positions, const int32_t* moves, const int64_t* offsets,
                  float* priors, float* values, int threads, int size) {
        std::lock_guard<std::mutex> hold(mutex_);
        if (!bound_) throw BotError("no weights loaded");
        if (size < MIN_BOARD_SIZE || size > MAX_BOARD_SIZE)
            throw InputError(format("board size %d: the evaluator serves sizes %d..%d", size, MIN_BOARD_SIZE,
                                    MAX_BOARD_SIZE));
        if (size != 8 && !shape_.pooled_value)
            throw InputError(format("board size %d: the flat value head runs on 8x8 only "
                                    "(a network with the pooled value head runs on every size)", size));
        switch (size) {
            case 6: run_batch<6>(batch, positions, moves, offsets, priors, values, threads); break;
            case 7: run_batch<7>(batch, positions, moves, offsets, priors, values, threads); break;
            case 8: run_batch<8>(batch, positions, moves, offsets, priors, values, threads); break;
            case 9: run_batch<9>(batch, positions, moves, offsets, priors, values, threads); break;
            default: run_batch<10>(batch, positions, moves, offsets, priors, values, threads); break;
        }
    }

  private:
    // evaluate's batch on N x N, on `threads` threads (the mutex held).
    template <int N>
    void run_batch(int64_t batch, const uint64_t* positions, const int32_t* moves, const int64_t* offsets,
                   float* priors, float* values, int threads) {
        if (threads < 1) threads = 1;
        if ((int64_t)threads > batch) threads = (int)(batch > 0 ? batch : 1);
        while ((int)workspaces_.size() < threads) {
            Workspace workspace;
            workspace.reserve(shape_);
            workspaces_.push_back(std::move(workspace));
        }
        if (threads == 1) {
            run<N>(0, batch, positions, moves, offsets, priors, values, &workspaces_[0]);
            return;
        }
        std::vector<std::exception_ptr> errors(threads);
        std::vector<std::thread> pool;
        pool.reserve(threads);
        try {
            for (int t = 0; t < threads; ++t) {
                int64_t begin = batch * t / threads, end = batch * (t + 1) / threads;
                pool.push_back(std::thread(&BatchEvaluator::run_caught<N>, this, begin, end, positions,
                                           moves, offsets, priors, values, &workspaces_[t],
                                           &errors[t]));
            }
        } catch (const std::exception& error) {
            // No thread for a share (no memory for its stack, a process limit): the started
            // threads finish theirs before the error is raised (a joinable std::thread must not
            // be destroyed).
            const int started = (int)pool.size();
            for (int t = 0; t < started; ++t) pool[t].join();
            throw BotError(
                format("cannot start thread %d of %d: %s", started + 1, threads, error.what()));
        }
        for (int t = 0; t < threads; ++t) pool[t].join();
        for (int t = 0; t < threads; ++t)
            if (errors[t]) std::rethrow_exception(errors[t]);
    }

    // Binds a network of `shape` over `*weights` for `kernels` and only then makes it the
    // evaluator's (its weights moved into weights_: the buffer, and the network's pointers into
    // it, stay where they are). bind_network checks the shape and the count.
    void bind(const NetShape& shape, std::vector<float>* weights, const Kernels* kernels) {
        Network network;
        const float* data = weights->empty() ? 0 : &(*weights)[0];
        bind_network(&network, shape, data, weights->size(), kernels);
        if (weights != &weights_) weights_.swap(*weights);
        network_ = std::move(network);
        shape_ = shape;
        kernels_ = kernels;
        bound_ = true;
        try {
            for (size_t t = 0; t < workspaces_.size(); ++t) workspaces_[t].reserve(shape_);
        } catch (...) {
            // Half-sized scratch must not outlive the failure: evaluate makes it again.
            workspaces_.clear();
            throw;
        }
    }

    // Positions begin .. end - 1 of the batch on N x N: each checked, its feature planes written
    // (rules.h's on 8 x 8, board_features' on the other sizes), then the network's forward pass.
    template <int N>
    void run(int64_t begin, int64_t end, const uint64_t* positions, const int32_t* moves, const int64_t* offsets,
             float* priors, float* values, Workspace* workspace) const {
        const int words = 3 * Board<N>::WORDS, last = N * N - 1;
        std::vector<Move> legal(MAX_MOVES);
        for (int64_t i = begin; i < end; ++i) {
            const u64* row = positions + words * i;
            Pos pos;
            SquareSet<N> mine;
            std::string why;
            if (N == 8) {
                pos.mine = row[0];
                pos.theirs = row[1];
                pos.arrows = row[2];
                why = position_error(pos);
            } else {
                why = board_position_error<N>(row);
            }
            if (!why.empty())
                throw InputError(format("position %lld: %s", (long long)i, why.c_str()));
            for (int w = 0; w < SquareSet<N>::WORDS; ++w) mine.word[w] = row[w];
            const int64_t first = offsets[i], count = offsets[i + 1] - first;
            if (count < 0 || count > MAX_MOVES)
                throw InputError(format("position %lld has %lld moves (at most %d)", (long long)i,
                                        (long long)count, MAX_MOVES));
            // One test a position: every square on the board, every source one of the side to
            // move's amazons (batch_move_error names the move when not).
            uint32_t squares = 0, largest = 0;  // 8 x 8: their bits; else their maximum
            SquareSet<N> sources;
            sources.clear();
            for (int64_t k = 0; k < count; ++k) {
                const int32_t* m = moves + 3 * (first + k);
                if (N == 8) {
                    squares |= (uint32_t)m[0] | (uint32_t)m[1] | (uint32_t)m[2];
                } else {
                    for (int j = 0; j < 3; ++j) largest = (uint32_t)m[j] > largest ? (uint32_t)m[j] : largest;
                }
                sources.add(m[0] & (64 * SquareSet<N>::WORDS - 1));  // a square off the board is refused below
                legal[k].src = (uint8_t)m[0];
                legal[k].dst = (uint8_t)m[1];
                legal[k].arrow = (uint8_t)m[2];
            }
            bool foreign = false;
            for (int w = 0; w < SquareSet<N>::WORDS; ++w) foreign |= (sources.word[w] & ~mine.word[w]) != 0;
            if ((N == 8 ? squares > 63 : largest > (uint32_t)last) || foreign)
                throw InputError(batch_move_error<N>(i, mine, moves + 3 * first, count));
            if (N == 8) {
                values[i] = network_evaluate(network_, *workspace, pos, &legal[0], (int)count, priors + first);
            } else {
                board_features<N>(row, network_.shape.num_planes, &workspace->features[0]);
                values[i] = network_forward<N>(network_, *workspace, mine, &legal[0], (int)count, priors + first);
            }
        }
    }

    template <int N>
    void run_caught(int64_t begin, int64_t end, const uint64_t* positions, const int32_t* moves,
                    const int64_t* offsets, float* priors, float* values, Workspace* workspace,
                    std::exception_ptr* error) const {
        try {
            run<N>(begin, end, positions, moves, offsets, priors, values, workspace);
        } catch (...) {
            *error = std::current_exception();
        }
    }

    mutable std::mutex mutex_;  // held by every public call
    const Kernels* kernels_;
    NetShape shape_;
    std::vector<float> weights_;
    Network network_;
    std::vector<Workspace> workspaces_;
    bool bound_;
};

#endif  // AMZ_EVALUATOR_H
