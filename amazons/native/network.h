// The network's forward pass (amazons/neural/numpy_net.py's NumpyNet.forward), one position at a time, and
// the legal-move priors of npnet.legal_priors. The shape is a run-time value (NetShape), so one
// build runs every network npnet runs: both policy heads, the joint head's arrow source term,
// 3 or 7 feature planes, any mix of residual and attention layers, the flat or the pooled value
// head. The board size N is a template parameter of the forward pass (network_forward<N>), one
// instantiation a size, so 8 x 8 (the bot's, network_evaluate) runs code compiled for 64 squares;
// one bound Network serves every size (no weight depends on N but the flat value head's, which
// runs on 8 x 8 only: its callers check).
//
// The weights are npnet's `layout_arrays`, float32, in that order, owned by the caller:
// bind_network points a Network into them (and makes the Winograd filters of the AVX2 kernels).
// A Network is read-only while it evaluates; each thread evaluates with its own Workspace.
//
// What network_evaluate assumes of its input, checked by its callers once a position (the batch
// evaluator, evaluator.h, for the extension's callers; the bot evaluates positions its rules made
// from accepted ones): a position position_error accepts, and moves on the board that start on
// the side to move's amazons (the arrow source term's slots). Other illegal moves get priors
// without harm.

#ifndef AMZ_NETWORK_H
#define AMZ_NETWORK_H

#include "kernels.h"
#include "rules.h"

// The trunk's layer kinds (NetShape.trunk): each code is the kind's position in
// amazons.neural.numpy_net.TRUNK_LAYERS, which maps a network's trunk to them (tests check they agree).
static const int TRUNK_RESIDUAL = 0, TRUNK_ATTENTION = 1;

// A network's shape. amazons.neural.numpy_net.native_shape maps a network's config to these fields, by
// name: the extension loads its output and the export writes it as bot.cpp's model_shape().
struct NetShape {
    int num_planes;      // 3 or 7 feature planes (amazons.engine.features)
    int channels;        // the trunk's width
    int key_dim;         // attention's query and key width
    int head_dim;        // the policy head's query and key width
    int value_channels;  // the value head's 1x1 reduction
    int value_hidden;    // the value head's hidden layer
    bool joint;          // the joint move head (else the factorized three-map head)
    bool arrow_source;   // the joint head's arrow source term
    // the pooled value head: the MLP reads each reduced channel's mean, mean * (N - 8) / 2 and
    // max over the board (3 * value_channels inputs, any N); else the flat one reads the 8 x 8
    // map (value_channels * 64 inputs, N = 8 only)
    bool pooled_value;
    std::vector<int> trunk;  // per trunk layer: TRUNK_RESIDUAL or TRUNK_ATTENTION

    NetShape()
        : num_planes(0), channels(0), key_dim(0), head_dim(0), value_channels(0), value_hidden(0), joint(false),
          arrow_source(false), pooled_value(false) {}
};

// The value MLP's inputs: 3 pooled statistics a channel, or the flat 8 x 8 map.
static inline size_t value_inputs(const NetShape& s) {
    return (size_t)s.value_channels * (s.pooled_value ? 3 : 64);
}

// The floats of a network's weights in npnet's layout_arrays.
static size_t network_weight_floats(const NetShape& s) {
    const size_t c = s.channels, h = s.head_dim, d = s.key_dim;
    size_t total = 9 * (size_t)s.num_planes * c + c;
    for (size_t l = 0; l < s.trunk.size(); ++l)
        total += s.trunk[l] == TRUNK_RESIDUAL ? 2 * (9 * c * c + c)
                                              : c * (2 * d + c) + (2 * d + c) + 1;
    if (s.joint)
        total += 2 * (c * 2 * h + 2 * h) + (c + h) * c + c + (s.arrow_source ? c * h + h : 0);
    else
        total += c * h + h + h * 3 + 3;
    total += c * s.value_channels + s.value_channels + value_inputs(s) * s.value_hidden + s.value_hidden +
             s.value_hidden + 1;
    return total;
}

// Why `s` cannot be run, or "" when it can.
static std::string network_shape_error(const NetShape& s) {
    if (s.num_planes != 3 && s.num_planes != 7) return format("num_planes must be 3 or 7, got %d", s.num_planes);
    if (s.channels < 1 || s.key_dim < 1 || s.head_dim < 1 || s.value_channels < 1 || s.value_hidden < 1)
        return "every width must be >= 1";
    if (s.arrow_source && !s.joint) return "the arrow source term needs the joint head";
    for (size_t l = 0; l < s.trunk.size(); ++l)
        if (s.trunk[l] != TRUNK_RESIDUAL && s.trunk[l] != TRUNK_ATTENTION)
            return format("trunk layer %d is of kind %d", (int)l, s.trunk[l]);
    return "";
}

struct TrunkLayer {
    int kind;                           // TRUNK_RESIDUAL or TRUNK_ATTENTION
    Conv conv1, conv2;                  // residual
    const float *qkv_w, *qkv_b, *gate;  // attention
};

struct Network {
    NetShape shape;
    const Kernels* kernels;
    Conv stem;
    std::vector<TrunkLayer> trunk;
    // joint: move w, b, update gate w, b, arrow w, b (, source w, b); factorized: hidden w, b, maps w, b
    const float* policy[8];
    const float *reduce_w, *reduce_b, *hidden_w, *hidden_b, *out_w, *out_b;
    std::vector<float> reduce_t;  // reduce_w transposed: [value_channels][channels]

    Network() : kernels(0), reduce_w(0), reduce_b(0), hidden_w(0), hidden_b(0), out_w(0), out_b(0) {
        for (int i = 0; i < 8; ++i) policy[i] = 0;
    }
};

// A convolution from `in` channels to `out` whose weights and bias start at *p (then past them).
static void bind_conv(Conv* conv, int in, int out, const float** p, const Kernels* kernels) {
    conv->in = in;
    conv->out = out;
    conv->w = *p;
    conv->bias = *p + (size_t)9 * in * out;
    *p = conv->bias + out;
    conv->winograd.clear();
    if (kernels->winograd && out % 8 == 0) prepare_winograd(conv);
}

// Points `net` into `weights` (`count` floats, kept by the caller) for `shape`, run by `kernels`,
// and makes the Winograd filters. The one check of a shape and its weight count in the native
// core: BotError when the shape cannot run or the count does not fit it.
static void bind_network(Network* net, const NetShape& shape, const float* weights, size_t count,
                         const Kernels* kernels) {
    std::string why = network_shape_error(shape);
    if (!why.empty()) throw BotError("the network's shape cannot be run: " + why);
    if (count != network_weight_floats(shape))
        throw BotError(format("the weights hold %lu floats; the network's shape needs %lu", (unsigned long)count,
                              (unsigned long)network_weight_floats(shape)));
    net->shape = shape;
    net->kernels = kernels;
    const float* p = weights;
    const int c = shape.channels, h = shape.head_dim, d = shape.key_dim, vc = shape.value_channels;
#define AMZ_TAKE(count) (p += (count), p - (count))
    bind_conv(&net->stem, shape.num_planes, c, &p, kernels);
    net->trunk.resize(shape.trunk.size());
    for (size_t l = 0; l < shape.trunk.size(); ++l) {
        TrunkLayer& layer = net->trunk[l];
        layer.kind = shape.trunk[l];
        layer.qkv_w = layer.qkv_b = layer.gate = 0;
        if (layer.kind == TRUNK_RESIDUAL) {
            bind_conv(&layer.conv1, c, c, &p, kernels);
            bind_conv(&layer.conv2, c, c, &p, kernels);
        } else {
            layer.qkv_w = AMZ_TAKE(c * (2 * d + c));
            layer.qkv_b = AMZ_TAKE(2 * d + c);
            layer.gate = AMZ_TAKE(1);
        }
    }
    for (int i = 0; i < 8; ++i) net->policy[i] = 0;
    if (shape.joint) {
        net->policy[0] = AMZ_TAKE(c * 2 * h);
        net->policy[1] = AMZ_TAKE(2 * h);
        net->policy[2] = AMZ_TAKE((c + h) * c);
        net->policy[3] = AMZ_TAKE(c);
        net->policy[4] = AMZ_TAKE(c * 2 * h);
        net->policy[5] = AMZ_TAKE(2 * h);
        if (shape.arrow_source) {
            net->policy[6] = AMZ_TAKE(c * h);
            net->policy[7] = AMZ_TAKE(h);
        }
    } else {
        net->policy[0] = AMZ_TAKE(c * h);
        net->policy[1] = AMZ_TAKE(h);
        net->policy[2] = AMZ_TAKE(h * 3);
        net->policy[3] = AMZ_TAKE(3);
    }
    net->reduce_w = AMZ_TAKE(c * vc);
    net->reduce_b = AMZ_TAKE(vc);
    net->reduce_t.resize((size_t)vc * c);
    for (int i = 0; i < c; ++i)
        for (int v = 0; v < vc; ++v) net->reduce_t[(size_t)v * c + i] = net->reduce_w[(size_t)i * vc + v];
    net->hidden_w = AMZ_TAKE(value_inputs(shape) * shape.value_hidden);
    net->hidden_b = AMZ_TAKE(shape.value_hidden);
    net->out_w = AMZ_TAKE(shape.value_hidden);
    net->out_b = AMZ_TAKE(1);
#undef AMZ_TAKE
}

static inline void relu(float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// One thread's scratch of the forward pass, sized for a shape by reserve(), on every board size
// (S = N * N squares, at most MAX_SQUARES).
struct Workspace {
    std::vector<float> features, x, hidden, qkv, queries_t, energy, values_t, attended_t, x_t, head, head_keys;
    std::vector<float> gathered, queries, move_logits, arrow_logits, scratch, flat, value_hidden;
    std::vector<float> source_queries, source_logits;  // the source term: [slot][head_dim], [slot][S]
    float log_src[MAX_SQUARES], log_dst[MAX_SQUARES], log_arrow[MAX_SQUARES], arrow_norm[MAX_SQUARES];
    uint8_t source_row[MAX_SQUARES], destination_row[MAX_SQUARES];  // a square's row in the gathered tables
    WinogradScratch winograd;

    void reserve(const NetShape& s) {
        const size_t c = s.channels, h = s.head_dim, d = s.key_dim, n = MAX_SQUARES;
        features.assign(n * (size_t)s.num_planes, 0.0f);
        x.assign(n * c, 0.0f);
        hidden.assign(n * (c + h), 0.0f);
        qkv.assign(n * (2 * d + c), 0.0f);
        queries_t.assign(d * n, 0.0f);
        energy.assign(n * n, 0.0f);
        values_t.assign(c * n, 0.0f);
        attended_t.assign(c * n, 0.0f);
        x_t.assign(c * n, 0.0f);
        head.assign(n * (c + h), 0.0f);
        head_keys.assign(h * n, 0.0f);
        gathered.assign(n * c, 0.0f);
        queries.assign(n * h, 0.0f);
        move_logits.assign(n * n, 0.0f);
        arrow_logits.assign(n * n, 0.0f);
        scratch.assign(n * (h + 3), 0.0f);
        flat.assign((size_t)s.value_channels * (n + 3), 0.0f);  // the map, then the pooled head's inputs
        value_hidden.assign(s.value_hidden, 0.0f);
        source_queries.assign(AMAZONS_PER_SIDE * h, 0.0f);
        source_logits.assign(AMAZONS_PER_SIDE * n, 0.0f);
        const int widest = s.num_planes > s.channels ? s.num_planes : s.channels;
        winograd.reserve((widest + 7) & ~7, s.channels);
    }
};

// A set of squares of an N x N board: the contract's bitboard words (square s is bit s % 64 of
// word s / 64), one word up to 8 x 8.
template <int N>
struct SquareSet {
    static const int WORDS = N * N <= 64 ? 1 : 2;
    u64 word[WORDS];

    void clear() {
        for (int w = 0; w < WORDS; ++w) word[w] = 0;
    }
    void add(int square) { word[WORDS == 1 ? 0 : square >> 6] |= ONE << (square & 63); }
    bool has(int square) const { return (word[WORDS == 1 ? 0 : square >> 6] >> (square & 63)) & 1; }
};

// Copies the rows of x ([S][width]) of the squares in `squares` to out, by increasing square;
// row_of[square] = its row there. Returns the number of rows.
template <int N>
static int gather_rows(const float* x, int width, const SquareSet<N>& squares, float* out, uint8_t* row_of) {
    int rows = 0;
    for (int w = 0; w < SquareSet<N>::WORDS; ++w)
        for (u64 bits = squares.word[w]; bits; bits &= bits - 1, ++rows) {
            int square = 64 * w + ctz64(bits);
            std::memcpy(out + (size_t)rows * width, x + (size_t)square * width, sizeof(float) * width);
            row_of[square] = (uint8_t)rows;
        }
    return rows;
}

// The trunk's output into a.x ([S][channels]) from the feature planes in a.features.
template <int N>
static void trunk_forward(const Network& net, Workspace& a) {
    const Kernels* K = net.kernels;
    const int S = N * N, c = net.shape.channels, d = net.shape.key_dim, width = 2 * d + c;
    conv3x3_board<N>(K, net.stem, &a.features[0], 0, &a.x[0], &a.winograd);
    for (size_t l = 0; l < net.trunk.size(); ++l) {
        const TrunkLayer& layer = net.trunk[l];
        if (layer.kind == TRUNK_RESIDUAL) {
            conv3x3_board<N>(K, layer.conv1, &a.x[0], 0, &a.hidden[0], &a.winograd);
            conv3x3_board<N>(K, layer.conv2, &a.hidden[0], &a.x[0], &a.x[0], &a.winograd);
        } else {
            K->matmul(&a.x[0], c, S, c, layer.qkv_w, width, layer.qkv_b, &a.qkv[0], width, width);
            // energy[key][query]: each query's softmax over the keys runs down a column; then
            // attended^T [c][query] = values^T [c][key] x energy.
            K->transpose(&a.qkv[0], width, S, d, &a.queries_t[0]);
            K->matmul(&a.qkv[d], width, S, d, &a.queries_t[0], S, 0, &a.energy[0], S, S);
            K->softmax_columns(&a.energy[0], S, S);
            K->transpose(&a.qkv[2 * d], width, S, c, &a.values_t[0]);
            K->matmul(&a.values_t[0], S, c, S, &a.energy[0], S, 0, &a.attended_t[0], S, S);
            K->transpose(&a.attended_t[0], S, c, S, &a.hidden[0]);
            const float gate = layer.gate[0];
            for (int i = 0; i < S * c; ++i) a.x[i] += gate * a.hidden[i];
        }
    }
}

template <int N>
static float value_forward(const Network& net, Workspace& a) {
    const Kernels* K = net.kernels;
    const int S = N * N, c = net.shape.channels, vc = net.shape.value_channels, vh = net.shape.value_hidden;
    // The reduction channel-major, as torch flattens it: flat[v][s] = relu(b[v] + (W^T x^T)[v][s]),
    // a row of S squares per channel.
    K->transpose(&a.x[0], c, S, c, &a.x_t[0]);
    K->matmul(&net.reduce_t[0], c, vc, c, &a.x_t[0], S, 0, &a.flat[0], S, S);
    for (int v = 0; v < vc; ++v)
        for (int s = 0; s < S; ++s) {
            float sum = a.flat[v * S + s] + net.reduce_b[v];
            a.flat[v * S + s] = sum > 0.0f ? sum : 0.0f;
        }
    const float* inputs = &a.flat[0];
    if (net.shape.pooled_value) {
        // npnet's value pooling: [means | means * (N - 8) / 2 | maxima], the mean summed in
        // double (S terms) and rounded once.
        float* pooled = &a.flat[(size_t)vc * S];
        for (int v = 0; v < vc; ++v) {
            const float* row = &a.flat[(size_t)v * S];
            double total = 0.0;
            float peak = row[0];
            for (int s = 0; s < S; ++s) {
                total += row[s];
                peak = row[s] > peak ? row[s] : peak;
            }
            const float mean = (float)(total / S);
            pooled[v] = mean;
            pooled[vc + v] = mean * (float)((N - 8) / 2.0);
            pooled[2 * vc + v] = peak;
        }
        inputs = pooled;
    }
    const int width = (int)value_inputs(net.shape);
    K->matmul(inputs, width, 1, width, net.hidden_w, vh, net.hidden_b, &a.value_hidden[0], vh, vh);
    relu(&a.value_hidden[0], vh);
    float out = net.out_b[0];
    for (int i = 0; i < vh; ++i) out += a.value_hidden[i] * net.out_w[i];
    return std::tanh(out);
}

// The arrow source term's part of each move's log prior (npnet's PolicyTables.source_arrow and
// source_norm): for the amazon on src (slot i of the side to move's at most AMAZONS_PER_SIDE, by
// increasing square; every move's src holds one, see the top of this part),
// S[i][arrow] - log sum_a P(a | dst) exp(S[i][a]), where S = (x_next[src] Ws + bs) . arrow keys.
// a.hidden holds x_next, a.head_keys the arrow keys [h][arrow], a.arrow_logits and a.arrow_norm
// log P(arrow | dst) by destination row.
template <int N>
static void add_source_term(const Network& net, Workspace& a, const SquareSet<N>& movers, const Move* moves,
                            int count, float* priors) {
    const Kernels* K = net.kernels;
    const int S = N * N, c = net.shape.channels, h = net.shape.head_dim;
    uint8_t slot_of[N * N];
    const int slots = gather_rows<N>(&a.hidden[0], c, movers, &a.gathered[0], slot_of);
    K->matmul(&a.gathered[0], c, slots, c, net.policy[6], h, net.policy[7], &a.source_queries[0], h, h);
    K->matmul(&a.source_queries[0], h, slots, h, &a.head_keys[0], S, 0, &a.source_logits[0], S, S);
    // norm[i][dst] for the (slot, destination) pairs the moves use, computed once each.
    float norm[AMAZONS_PER_SIDE * N * N];
    SquareSet<N> done[AMAZONS_PER_SIDE];
    for (int i = 0; i < AMAZONS_PER_SIDE; ++i) done[i].clear();
    for (int k = 0; k < count; ++k) {
        const Move& m = moves[k];
        const int i = slot_of[m.src], d = a.destination_row[m.dst];
        const float* source = &a.source_logits[(size_t)i * S];
        if (!done[i].has(m.dst)) {
            float peak = source[0];
            for (int s = 1; s < S; ++s) peak = source[s] > peak ? source[s] : peak;
            const float* log_arrow = &a.arrow_logits[(size_t)d * S];
            double total = 0.0;
            for (int s = 0; s < S; ++s)
                total += std::exp((double)(log_arrow[s] - a.arrow_norm[d]) + (double)(source[s] - peak));
            const double tiny = 1.17549435e-38;  // float32's smallest normal, npnet's floor
            norm[i * S + m.dst] = (float)std::log(total > tiny ? total : tiny) + peak;
            done[i].add(m.dst);
        }
        priors[k] += source[m.arrow] - norm[i * S + m.dst];
    }
}

// The priors of `moves` (npnet.legal_priors: P(src, dst) * P(arrow | [src,] dst), renormalized over
// the legal moves) and the value for the side to move, on an N x N board whose feature planes
// are in a.features ([S][num_planes]); `movers` holds the side to move's amazons (the arrow
// source term's slots). The flat value head runs on N = 8 only (the callers check). The
// log-softmax over all (src, dst) pairs adds one constant to every move and cancels in the
// renormalization, so it is left out.
template <int N>
static float network_forward(const Network& net, Workspace& a, const SquareSet<N>& movers, const Move* moves,
                             int count, float* priors) {
    const Kernels* K = net.kernels;
    const int S = N * N, c = net.shape.channels, h = net.shape.head_dim;
    trunk_forward<N>(net, a);
    if (net.shape.joint) {
        // Keys and the update gate need every square; queries and logits only the rows of the
        // squares the legal moves start from (move logits) or land on (arrow logits).
        const int joint = c + h;  // a.head: [x | move keys] per square
        SquareSet<N> sources, destinations;
        sources.clear();
        destinations.clear();
        for (int i = 0; i < count; ++i) {
            sources.add(moves[i].src);
            destinations.add(moves[i].dst);
        }
        K->matmul(&a.x[0], c, S, c, net.policy[0] + h, 2 * h, net.policy[1] + h, &a.head[c], joint, h);
        for (int s = 0; s < S; ++s) std::memcpy(&a.head[(size_t)s * joint], &a.x[(size_t)s * c], sizeof(float) * c);
        K->transpose(&a.head[c], joint, S, h, &a.head_keys[0]);  // [h][dst]
        int rows = gather_rows<N>(&a.x[0], c, sources, &a.gathered[0], a.source_row);
        K->matmul(&a.gathered[0], c, rows, c, net.policy[0], 2 * h, net.policy[1], &a.queries[0], h, h);
        K->matmul(&a.queries[0], h, rows, h, &a.head_keys[0], S, 0, &a.move_logits[0], S, S);  // [source row][dst]
        K->matmul(&a.head[0], joint, S, joint, net.policy[2], c, net.policy[3], &a.hidden[0], c, c);
        for (int i = 0; i < S * c; ++i) a.hidden[i] = a.x[i] + (a.hidden[i] > 0.0f ? a.hidden[i] : 0.0f);
        K->matmul(&a.hidden[0], c, S, c, net.policy[4] + h, 2 * h, net.policy[5] + h, &a.scratch[0], h, h);
        K->transpose(&a.scratch[0], h, S, h, &a.head_keys[0]);  // [h][arrow]
        rows = gather_rows<N>(&a.hidden[0], c, destinations, &a.gathered[0], a.destination_row);
        K->matmul(&a.gathered[0], c, rows, c, net.policy[4], 2 * h, net.policy[5], &a.queries[0], h, h);
        K->matmul(&a.queries[0], h, rows, h, &a.head_keys[0], S, 0, &a.arrow_logits[0], S, S);  // [destination row][arrow]
        for (int r = 0; r < rows; ++r) a.arrow_norm[r] = K->log_sum_exp(&a.arrow_logits[(size_t)r * S], S);
        for (int i = 0; i < count; ++i) {
            const Move& m = moves[i];
            int d = a.destination_row[m.dst];
            priors[i] = a.move_logits[a.source_row[m.src] * S + m.dst] + a.arrow_logits[d * S + m.arrow] -
                        a.arrow_norm[d];
        }
        if (net.shape.arrow_source && count > 0) add_source_term<N>(net, a, movers, moves, count, priors);
    } else {
        K->matmul(&a.x[0], c, S, c, net.policy[0], h, net.policy[1], &a.hidden[0], h, h);
        relu(&a.hidden[0], (size_t)S * h);
        K->matmul(&a.hidden[0], h, S, h, net.policy[2], 3, net.policy[3], &a.scratch[0], 3, 3);
        float* maps[3] = {a.log_src, a.log_dst, a.log_arrow};
        float row[N * N];
        for (int k = 0; k < 3; ++k) {
            for (int s = 0; s < S; ++s) row[s] = a.scratch[s * 3 + k];
            float norm = K->log_sum_exp(row, S);
            for (int s = 0; s < S; ++s) maps[k][s] = a.scratch[s * 3 + k] - norm;
        }
        for (int i = 0; i < count; ++i) {
            const Move& m = moves[i];
            priors[i] = a.log_src[m.src] + a.log_dst[m.dst] + a.log_arrow[m.arrow];
        }
    }
    if (count > 0) K->softmax(priors, count);
    return value_forward<N>(net, a);
}

// network_forward on the 8 x 8 board of `pos` (the bot's, and the evaluator's 8 x 8 batches).
static float network_evaluate(const Network& net, Workspace& a, const Pos& pos, const Move* moves, int count,
                              float* priors) {
    write_features(pos, net.shape.num_planes, &a.features[0]);
    SquareSet<8> movers;
    movers.word[0] = pos.mine;
    return network_forward<8>(net, a, movers, moves, count, priors);
}

#endif  // AMZ_NETWORK_H
