// The compiled CPU evaluator's core (the extension amazons._native): the network part over a
// batch of positions and their legal moves in the engine's layout, on one or more threads.
// Not part of the Botzone export (Botzone runs one thread, and the bot evaluates one leaf at a
// time).
//
// The batch loop checks what the network part assumes of its input (network.h), once a
// position: InputError names the position and the move. One evaluator may be shared between
// threads: every call holds its mutex, so calls on one evaluator run one at a time.

#ifndef AMZ_EVALUATOR_H
#define AMZ_EVALUATOR_H

#include <exception>
#include <mutex>
#include <thread>

#include "network.h"

// Why the moves of position `index` (`count` int32 triples src, dst, arrow) cannot be evaluated:
// the first move with a square off the board or a source without the side to move's amazon.
static std::string batch_move_error(int64_t index, const Pos& pos, const int32_t* moves,
                                    int64_t count) {
    for (int64_t k = 0; k < count; ++k) {
        const int32_t* m = moves + 3 * k;
        const char* why = 0;
        if (m[0] < 0 || m[0] > 63 || m[1] < 0 || m[1] > 63 || m[2] < 0 || m[2] > 63)
            why = "a square off the board (squares 0..63)";
        else if (!((pos.mine >> m[0]) & 1))
            why = "no amazon of the side to move on its source square";
        if (why)
            return format("position %lld, move %lld (%d %d %d): %s", (long long)index,
                          (long long)k, (int)m[0], (int)m[1], (int)m[2], why);
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

    // values[i] and priors[offsets[i] .. offsets[i + 1]) of positions[3 i .. 3 i + 2] (mine,
    // theirs, arrows) and their legal moves (src, dst, arrow int32 triples), on `threads` threads.
    // Wrong input raises InputError naming the first wrong position (on several threads: the
    // first of the first thread's share that holds one).
    void evaluate(int64_t batch, const uint64_t* positions, const int32_t* moves, const int64_t* offsets,
                  float* priors, float* values, int threads) {
        std::lock_guard<std::mutex> hold(mutex_);
        if (!bound_) throw BotError("no weights loaded");
        if (threads < 1) threads = 1;
        if ((int64_t)threads > batch) threads = (int)(batch > 0 ? batch : 1);
        while ((int)workspaces_.size() < threads) {
            Workspace workspace;
            workspace.reserve(shape_);
            workspaces_.push_back(std::move(workspace));
        }
        if (threads == 1) {
            run(0, batch, positions, moves, offsets, priors, values, &workspaces_[0]);
            return;
        }
        std::vector<std::exception_ptr> errors(threads);
        std::vector<std::thread> pool;
        pool.reserve(threads);
        try {
            for (int t = 0; t < threads; ++t) {
                int64_t begin = batch * t / threads, end = batch * (t + 1) / threads;
                pool.push_back(std::thread(&BatchEvaluator::run_caught, this, begin, end, positions,
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

  private:
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

    void run(int64_t begin, int64_t end, const uint64_t* positions, const int32_t* moves, const int64_t* offsets,
             float* priors, float* values, Workspace* workspace) const {
        std::vector<Move> legal(MAX_MOVES);
        for (int64_t i = begin; i < end; ++i) {
            Pos pos;
            pos.mine = positions[3 * i];
            pos.theirs = positions[3 * i + 1];
            pos.arrows = positions[3 * i + 2];
            std::string why = position_error(pos);
            if (!why.empty())
                throw InputError(format("position %lld: %s", (long long)i, why.c_str()));
            const int64_t first = offsets[i], count = offsets[i + 1] - first;
            if (count < 0 || count > MAX_MOVES)
                throw InputError(format("position %lld has %lld moves (at most %d)", (long long)i,
                                        (long long)count, MAX_MOVES));
            // One test a position: every square on the board, every source one of the side to
            // move's amazons (batch_move_error names the move when not).
            uint32_t squares = 0;
            u64 sources = 0;
            for (int64_t k = 0; k < count; ++k) {
                const int32_t* m = moves + 3 * (first + k);
                squares |= (uint32_t)m[0] | (uint32_t)m[1] | (uint32_t)m[2];
                sources |= ONE << (m[0] & 63);
                legal[k].src = (uint8_t)m[0];
                legal[k].dst = (uint8_t)m[1];
                legal[k].arrow = (uint8_t)m[2];
            }
            if (squares > 63 || (sources & ~pos.mine))
                throw InputError(batch_move_error(i, pos, moves + 3 * first, count));
            values[i] = network_evaluate(network_, *workspace, pos, &legal[0], (int)count, priors + first);
        }
    }

    void run_caught(int64_t begin, int64_t end, const uint64_t* positions, const int32_t* moves,
                    const int64_t* offsets, float* priors, float* values, Workspace* workspace,
                    std::exception_ptr* error) const {
        try {
            run(begin, end, positions, moves, offsets, priors, values, workspace);
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
