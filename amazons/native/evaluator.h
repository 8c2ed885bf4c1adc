// The compiled CPU evaluator's core (the extension amazons._native): the network part over a
// batch of positions and their legal moves in the engine's layout, on one or more threads.
// Not part of the Botzone export (Botzone runs one thread, and the bot evaluates one leaf at a
// time).

#ifndef AMZ_EVALUATOR_H
#define AMZ_EVALUATOR_H

#include <thread>

#include "network.h"

class BatchEvaluator {
  public:
    // init_tables() must have run once (the extension calls it when it is imported).
    BatchEvaluator() : kernels_(&GENERIC_KERNELS), bound_(false) {}

    // Chooses the kernels: the AVX2/FMA ones where the CPU has them, unless `portable`.
    void set_kernels(bool portable) {
        kernels_ = portable ? &GENERIC_KERNELS : choose_kernels();
        if (bound_) bind();
    }

    const char* kernels_name() const { return kernels_->name; }

    // Takes a shape and its weights (copied); a second call with the same shape writes the new
    // weights into the same buffer and re-makes the Winograd filters in place.
    void load(const NetShape& shape, const float* weights, size_t count) {
        std::string why = network_shape_error(shape);
        if (!why.empty()) throw BotError("the network's shape cannot be run: " + why);
        if (count != network_weight_floats(shape))
            throw BotError(format("the weights hold %lu floats; the network's shape needs %lu", (unsigned long)count,
                                  (unsigned long)network_weight_floats(shape)));
        shape_ = shape;
        weights_.resize(count);
        if (count) std::memcpy(&weights_[0], weights, count * sizeof(float));
        bind();
    }

    // values[i] and priors[offsets[i] .. offsets[i + 1]) of positions[3 i .. 3 i + 2] (mine,
    // theirs, arrows) and their legal moves (src, dst, arrow int32 triples), on `threads` threads.
    void evaluate(int64_t batch, const uint64_t* positions, const int32_t* moves, const int64_t* offsets,
                  float* priors, float* values, int threads) {
        if (!bound_) throw BotError("no weights loaded");
        if (threads < 1) threads = 1;
        if ((int64_t)threads > batch) threads = (int)(batch > 0 ? batch : 1);
        while ((int)workspaces_.size() < threads) {
            workspaces_.push_back(Workspace());
            workspaces_.back().reserve(shape_);
        }
        if (threads == 1) {
            run(0, batch, positions, moves, offsets, priors, values, &workspaces_[0]);
            return;
        }
        std::vector<std::thread> pool;
        std::vector<std::string> errors(threads);
        for (int t = 0; t < threads; ++t) {
            int64_t begin = batch * t / threads, end = batch * (t + 1) / threads;
            pool.push_back(std::thread(&BatchEvaluator::run_caught, this, begin, end, positions, moves, offsets, priors,
                                       values, &workspaces_[t], &errors[t]));
        }
        for (int t = 0; t < threads; ++t) pool[t].join();
        for (int t = 0; t < threads; ++t)
            if (!errors[t].empty()) throw BotError(errors[t]);
    }

  private:
    void bind() {
        bind_network(&network_, shape_, weights_.empty() ? 0 : &weights_[0], weights_.size(), kernels_);
        for (size_t t = 0; t < workspaces_.size(); ++t) workspaces_[t].reserve(shape_);
        bound_ = true;
    }

    void run(int64_t begin, int64_t end, const uint64_t* positions, const int32_t* moves, const int64_t* offsets,
             float* priors, float* values, Workspace* workspace) const {
        std::vector<Move> legal(MAX_MOVES);
        for (int64_t i = begin; i < end; ++i) {
            Pos pos;
            pos.mine = positions[3 * i];
            pos.theirs = positions[3 * i + 1];
            pos.arrows = positions[3 * i + 2];
            const int64_t first = offsets[i], count = offsets[i + 1] - first;
            if (count < 0 || count > MAX_MOVES)
                throw BotError(format("position %lld has %lld moves (at most %d)", (long long)i, (long long)count,
                                      MAX_MOVES));
            for (int64_t k = 0; k < count; ++k) {
                const int32_t* m = moves + 3 * (first + k);
                legal[k].src = (uint8_t)m[0];
                legal[k].dst = (uint8_t)m[1];
                legal[k].arrow = (uint8_t)m[2];
            }
            values[i] = network_evaluate(network_, *workspace, pos, &legal[0], (int)count, priors + first);
        }
    }

    void run_caught(int64_t begin, int64_t end, const uint64_t* positions, const int32_t* moves,
                    const int64_t* offsets, float* priors, float* values, Workspace* workspace,
                    std::string* error) const {
        try {
            run(begin, end, positions, moves, offsets, priors, values, workspace);
        } catch (const std::exception& caught) {
            *error = caught.what();
        }
    }

    const Kernels* kernels_;
    NetShape shape_;
    std::vector<float> weights_;
    Network network_;
    std::vector<Workspace> workspaces_;
    bool bound_;
};

#endif  // AMZ_EVALUATOR_H
