// Kernels: the network's arithmetic, a portable version and an AVX2/FMA one chosen at start-up
// (choose_kernels). Shapes are run-time arguments: one build serves every network.
//
// matmul:   C[r][o] = bias[o] + sum_i A[r * lda + i] * B[i * ldb + o]   (bias may be null)
// conv3x3:  out[s][o] = relu(bias[o] + residual[s][o] + sum over the 3x3 neighbourhood n (dy, dx)
//           of s and channel i of x[n][i] * W[((dy * 3 + dx) * in + i) * out + o]), zero off the
//           board; x, residual and out are [64][channels], square-major; residual may be null and
//           may be out itself, x may not. The table's conv3x3 is the 8 x 8 board's (the bot's);
//           conv3x3_board<N> (at the end) runs the same convolution on N x N, [N * N][channels],
//           each size its own instantiation, so that 8 x 8 runs exactly the table's code
// softmax:      x = softmax(x) over n > 0 values, in place
// softmax_columns: each column of x ([rows][cols]) replaced by its softmax, in place
// log_sum_exp:  log(sum(exp(x))) over n > 0 values
// transpose:    out[col * rows + r] = a[r * lda + col]

#ifndef AMZ_KERNELS_H
#define AMZ_KERNELS_H

#include "common.h"


// A 3x3 convolution: npnet's weights, and where the AVX2 kernels run them by Winograd's
// algorithm (below), the same filters transformed once at start-up.
struct Conv {
    int in, out;
    const float *w, *bias;       // [9 * in][out] (rows dy, dx, in), [out]
    std::vector<float> winograd; // empty, or prepare_winograd's layout
};

// Winograd's tiles of 4 x 4 outputs on a board of N squares a side (below): SIDE a side.
template <int N>
struct WinogradTiles {
    static const int SIDE = (N + 3) / 4, COUNT = SIDE * SIDE;
};
static const int WINOGRAD_MAX_TILES = WinogradTiles<MAX_BOARD_SIZE>::COUNT;

// The scratch of one Winograd convolution, owned by the caller (one per thread): room for
// `width` input channels (a multiple of 8) and `out` output channels on every board size (the
// portable convolution keeps its sums in `products`, [squares][out]).
struct WinogradScratch {
    std::vector<float> staged;    // x with in8 channels, when in < in8: [squares][in8]
    std::vector<float> inputs;    // V = B^T d B: [36][tiles][in8]
    std::vector<float> products;  // M: [36][tiles][out]

    void reserve(int width, int out) {
        const size_t points = (size_t)36 * WINOGRAD_MAX_TILES;
        staged.assign((size_t)MAX_SQUARES * width, 0.0f);
        inputs.assign(points * width, 0.0f);
        products.assign((points > (size_t)MAX_SQUARES ? points : (size_t)MAX_SQUARES) * out, 0.0f);
    }
};

struct Kernels {
    const char* name;
    bool winograd;  // conv3x3 runs a Conv by Winograd's algorithm once prepare_winograd filled it
    void (*matmul)(const float* a, int lda, int rows, int inner, const float* b, int ldb, const float* bias,
                   float* c, int ldc, int cols);
    void (*conv3x3)(const Conv& conv, const float* x, const float* residual, float* out, WinogradScratch* scratch);
    void (*softmax)(float* x, int n);
    void (*softmax_columns)(float* x, int rows, int cols);
    float (*log_sum_exp)(const float* x, int n);
    void (*transpose)(const float* a, int lda, int rows, int cols, float* out);
};

// Cephes' expf: range reduction by powers of two and a degree-5 polynomial (about 2 ulp).
static inline float exp_scalar(float x) {
    if (x < -87.0f) x = -87.0f;
    if (x > 88.0f) x = 88.0f;
    float fx = std::floor(x * 1.44269504088896341f + 0.5f);
    float r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
    float r2 = r * r;
    float y = ((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r + 4.1665795894E-2f) * r +
               1.6666665459E-1f) * r + 5.0000001201E-1f;
    y = y * r2 + r + 1.0f;
    int32_t bits = ((int32_t)fx + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    return y * scale;
}

static void matmul_generic(const float* a, int lda, int rows, int inner, const float* b, int ldb, const float* bias,
                           float* c, int ldc, int cols) {
    for (int r = 0; r < rows; ++r) {
        float* out = c + (size_t)r * ldc;
        for (int o = 0; o < cols; ++o) out[o] = bias ? bias[o] : 0.0f;
        const float* row = a + (size_t)r * lda;
        for (int i = 0; i < inner; ++i) {
            float v = row[i];
            const float* weights = b + (size_t)i * ldb;
            for (int o = 0; o < cols; ++o) out[o] += v * weights[o];
        }
    }
}

template <int N>
static void conv3x3_direct(const float* x, int in, const float* w, const float* bias, float* out, int out_channels) {
    for (int s = 0; s < N * N; ++s) {
        float* acc = out + (size_t)s * out_channels;
        for (int o = 0; o < out_channels; ++o) acc[o] = bias[o];
        int y = (unsigned)s / N, xx = (unsigned)s % N;
        for (int dy = 0; dy < 3; ++dy) {
            int ny = y + dy - 1;
            if (ny < 0 || ny > N - 1) continue;
            for (int dx = 0; dx < 3; ++dx) {
                int nx = xx + dx - 1;
                if (nx < 0 || nx > N - 1) continue;
                const float* source = x + (size_t)(ny * N + nx) * in;
                const float* block = w + (size_t)(dy * 3 + dx) * in * out_channels;
                for (int i = 0; i < in; ++i) {
                    float v = source[i];
                    const float* weights = block + (size_t)i * out_channels;
                    for (int o = 0; o < out_channels; ++o) acc[o] += v * weights[o];
                }
            }
        }
    }
}

template <int N>
static void conv3x3_generic(const Conv& conv, const float* x, const float* residual, float* out,
                            WinogradScratch* scratch) {
    float* sums = &scratch->products[0];  // apart from out, which may be the residual
    conv3x3_direct<N>(x, conv.in, conv.w, conv.bias, sums, conv.out);
    for (int i = 0; i < N * N * conv.out; ++i) {
        float v = residual ? sums[i] + residual[i] : sums[i];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

// Winograd's F(4x4, 3x3) (Lavin and Gray, 2016) for the AVX2 kernels. The 8 x 8 board is 2 x 2
// tiles of 4 x 4 outputs (N x N: WinogradTiles<N>::SIDE a side, 3 x 3 on 9 x 9 and 10 x 10, the
// outputs past the board dropped); tile t = SIDE ty + tx reads the 6 x 6 window at rows
// 4 ty .. 4 ty + 5 and columns 4 tx .. 4 tx + 5 of the input zero-padded by one square on every
// side, and per output channel
//     Y = A^T [ sum over input channels i of (G g_i G^T) * (B^T d_i B) ] A
// with * elementwise over the window's 36 points: 36 products of [4 tiles][in] by [in][out]
// (147,456 multiply-adds at 32 channels in and out, against 589,824 for the direct sum), plus
// the transforms. G g G^T is computed once, in double precision; B^T and A^T hold small integers.
static const double WINOGRAD_G[6][3] = {{0.25, 0.0, 0.0},
                                        {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                        {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                        {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                        {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                        {0.0, 0.0, 1.0}};
static const int WINOGRAD_POINTS = 36;

static inline int padded_inputs(int in) { return (in + 7) & ~7; }

// The transformed filters in the order the element-wise product reads them: per point p
// (6 r + c of the window), the output channels in blocks of 16 (a last block of 8 when
// out % 16 == 8), per block the input channels (padded to a multiple of 8 with zero filters),
// per input channel the block's output channels:
//     winograd[p * in8 * out + o0 * in8 + i * width + k] = (G g G^T)[p] of filter (i, o0 + k)
// for the block of `width` channels starting at o0.
static void prepare_winograd(Conv* conv) {
    const int in = conv->in, in8 = padded_inputs(in), out = conv->out;
    conv->winograd.assign((size_t)WINOGRAD_POINTS * in8 * out, 0.0f);
    for (int i = 0; i < in; ++i)
        for (int o = 0; o < out; ++o) {
            double g[3][3], half[6][3];
            for (int k = 0; k < 9; ++k) g[k / 3][k % 3] = conv->w[((size_t)k * in + i) * out + o];
            for (int r = 0; r < 6; ++r)  // G g
                for (int b = 0; b < 3; ++b)
                    half[r][b] = WINOGRAD_G[r][0] * g[0][b] + WINOGRAD_G[r][1] * g[1][b] + WINOGRAD_G[r][2] * g[2][b];
            int o0 = o & ~15, width = out - o0 >= 16 ? 16 : 8;
            for (int r = 0; r < 6; ++r)  // (G g) G^T
                for (int c = 0; c < 6; ++c) {
                    double value = half[r][0] * WINOGRAD_G[c][0] + half[r][1] * WINOGRAD_G[c][1] +
                                   half[r][2] * WINOGRAD_G[c][2];
                    size_t at = (size_t)(r * 6 + c) * in8 * out + (size_t)o0 * in8 + (size_t)i * width + (o - o0);
                    conv->winograd[at] = (float)value;
                }
        }
}

static float max_generic(const float* x, int n) {
    float best = x[0];
    for (int i = 1; i < n; ++i) best = x[i] > best ? x[i] : best;
    return best;
}

static void softmax_generic(float* x, int n) {
    float peak = max_generic(x, n), total = 0.0f;
    for (int i = 0; i < n; ++i) {
        x[i] = exp_scalar(x[i] - peak);
        total += x[i];
    }
    float factor = 1.0f / total;
    for (int i = 0; i < n; ++i) x[i] *= factor;
}

// Column `col` of x ([rows][cols]) replaced by its softmax.
static void softmax_column(float* x, int rows, int cols, int col) {
    float peak = x[col], total = 0.0f;
    for (int r = 1; r < rows; ++r) peak = x[r * cols + col] > peak ? x[r * cols + col] : peak;
    for (int r = 0; r < rows; ++r) {
        x[r * cols + col] = exp_scalar(x[r * cols + col] - peak);
        total += x[r * cols + col];
    }
    float factor = 1.0f / total;
    for (int r = 0; r < rows; ++r) x[r * cols + col] *= factor;
}

static void softmax_columns_generic(float* x, int rows, int cols) {
    for (int col = 0; col < cols; ++col) softmax_column(x, rows, cols, col);
}

static float log_sum_exp_generic(const float* x, int n) {
    float peak = max_generic(x, n), total = 0.0f;
    for (int i = 0; i < n; ++i) total += exp_scalar(x[i] - peak);
    return peak + std::log(total);
}

static void transpose_generic(const float* a, int lda, int rows, int cols, float* out) {
    for (int r = 0; r < rows; ++r)
        for (int col = 0; col < cols; ++col) out[(size_t)col * rows + r] = a[(size_t)r * lda + col];
}

static const Kernels GENERIC_KERNELS = {"portable", false, matmul_generic, conv3x3_generic<8>, softmax_generic,
                                        softmax_columns_generic, log_sum_exp_generic, transpose_generic};

#if AMZ_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

static inline __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

// The matmul's blocks keep their outputs in eight registers while the inner dimension streams
// past, each weight row loaded once for all the block's rows and each input once for all its
// columns: 2 rows x 32 columns, 4 rows x 16, 8 rows x 8 (the last 8 masked where cols is not a
// multiple of 8); rows left at the bottom go one at a time. g++ would fold each weight load into
// every FMA that uses it as a memory operand, once per row; the empty asm statements keep the
// weights in registers instead.
static void matmul_columns32(const float* a, int lda, int rows, int inner, const float* b, int ldb,
                             const float* bias, float* c, int ldc) {
    const __m256 z = _mm256_setzero_ps();
    __m256 init0 = bias ? _mm256_loadu_ps(bias) : z, init1 = bias ? _mm256_loadu_ps(bias + 8) : z;
    __m256 init2 = bias ? _mm256_loadu_ps(bias + 16) : z, init3 = bias ? _mm256_loadu_ps(bias + 24) : z;
    int r = 0;
    for (; r + 2 <= rows; r += 2) {
        const float* row0 = a + (size_t)r * lda;
        const float* row1 = row0 + lda;
        __m256 a0 = init0, a1 = init1, a2 = init2, a3 = init3, b0 = init0, b1 = init1, b2 = init2, b3 = init3;
        for (int i = 0; i < inner; ++i) {
            const float* weights = b + (size_t)i * ldb;
            __m256 w0 = _mm256_loadu_ps(weights), w1 = _mm256_loadu_ps(weights + 8);
            __m256 w2 = _mm256_loadu_ps(weights + 16), w3 = _mm256_loadu_ps(weights + 24);
            __asm__("" : "+x"(w0), "+x"(w1), "+x"(w2), "+x"(w3));
            __m256 v0 = _mm256_set1_ps(row0[i]), v1 = _mm256_set1_ps(row1[i]);
            a0 = _mm256_fmadd_ps(v0, w0, a0);
            a1 = _mm256_fmadd_ps(v0, w1, a1);
            a2 = _mm256_fmadd_ps(v0, w2, a2);
            a3 = _mm256_fmadd_ps(v0, w3, a3);
            b0 = _mm256_fmadd_ps(v1, w0, b0);
            b1 = _mm256_fmadd_ps(v1, w1, b1);
            b2 = _mm256_fmadd_ps(v1, w2, b2);
            b3 = _mm256_fmadd_ps(v1, w3, b3);
        }
        float* out0 = c + (size_t)r * ldc;
        float* out1 = out0 + ldc;
        _mm256_storeu_ps(out0, a0);
        _mm256_storeu_ps(out0 + 8, a1);
        _mm256_storeu_ps(out0 + 16, a2);
        _mm256_storeu_ps(out0 + 24, a3);
        _mm256_storeu_ps(out1, b0);
        _mm256_storeu_ps(out1 + 8, b1);
        _mm256_storeu_ps(out1 + 16, b2);
        _mm256_storeu_ps(out1 + 24, b3);
    }
    for (; r < rows; ++r) {
        const float* row = a + (size_t)r * lda;
        __m256 a0 = init0, a1 = init1, a2 = init2, a3 = init3;
        for (int i = 0; i < inner; ++i) {
            const float* weights = b + (size_t)i * ldb;
            __m256 v = _mm256_set1_ps(row[i]);
            a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(weights), a0);
            a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(weights + 8), a1);
            a2 = _mm256_fmadd_ps(v, _mm256_loadu_ps(weights + 16), a2);
            a3 = _mm256_fmadd_ps(v, _mm256_loadu_ps(weights + 24), a3);
        }
        float* out = c + (size_t)r * ldc;
        _mm256_storeu_ps(out, a0);
        _mm256_storeu_ps(out + 8, a1);
        _mm256_storeu_ps(out + 16, a2);
        _mm256_storeu_ps(out + 24, a3);
    }
}

static void matmul_columns16(const float* a, int lda, int rows, int inner, const float* b, int ldb,
                             const float* bias, float* c, int ldc) {
    const __m256 z = _mm256_setzero_ps();
    __m256 init0 = bias ? _mm256_loadu_ps(bias) : z, init1 = bias ? _mm256_loadu_ps(bias + 8) : z;
    int r = 0;
    for (; r + 4 <= rows; r += 4) {
        const float* row0 = a + (size_t)r * lda;
        __m256 a0 = init0, a1 = init1, b0 = init0, b1 = init1, c0 = init0, c1 = init1, d0 = init0, d1 = init1;
        for (int i = 0; i < inner; ++i) {
            const float* weights = b + (size_t)i * ldb;
            __m256 w0 = _mm256_loadu_ps(weights), w1 = _mm256_loadu_ps(weights + 8);
            __asm__("" : "+x"(w0), "+x"(w1));
            __m256 v = _mm256_set1_ps(row0[i]);
            a0 = _mm256_fmadd_ps(v, w0, a0);
            a1 = _mm256_fmadd_ps(v, w1, a1);
            v = _mm256_set1_ps(row0[lda + i]);
            b0 = _mm256_fmadd_ps(v, w0, b0);
            b1 = _mm256_fmadd_ps(v, w1, b1);
            v = _mm256_set1_ps(row0[2 * lda + i]);
            c0 = _mm256_fmadd_ps(v, w0, c0);
            c1 = _mm256_fmadd_ps(v, w1, c1);
            v = _mm256_set1_ps(row0[3 * lda + i]);
            d0 = _mm256_fmadd_ps(v, w0, d0);
            d1 = _mm256_fmadd_ps(v, w1, d1);
        }
        float* out = c + (size_t)r * ldc;
        _mm256_storeu_ps(out, a0);
        _mm256_storeu_ps(out + 8, a1);
        _mm256_storeu_ps(out + ldc, b0);
        _mm256_storeu_ps(out + ldc + 8, b1);
        _mm256_storeu_ps(out + 2 * ldc, c0);
        _mm256_storeu_ps(out + 2 * ldc + 8, c1);
        _mm256_storeu_ps(out + 3 * ldc, d0);
        _mm256_storeu_ps(out + 3 * ldc + 8, d1);
    }
    for (; r < rows; ++r) {
        const float* row = a + (size_t)r * lda;
        __m256 a0 = init0, a1 = init1;
        for (int i = 0; i < inner; ++i) {
            __m256 v = _mm256_set1_ps(row[i]);
            a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(b + (size_t)i * ldb), a0);
            a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(b + (size_t)i * ldb + 8), a1);
        }
        _mm256_storeu_ps(c + (size_t)r * ldc, a0);
        _mm256_storeu_ps(c + (size_t)r * ldc + 8, a1);
    }
}

// Up to 8 columns (`width`): the lanes past it are neither read nor written.
static void matmul_columns8(const float* a, int lda, int rows, int inner, const float* b, int ldb,
                            const float* bias, float* c, int ldc, int width) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(width), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 init = bias ? _mm256_maskload_ps(bias, mask) : _mm256_setzero_ps();
    int r = 0;
    for (; r + 8 <= rows; r += 8) {
        const float* row = a + (size_t)r * lda;
        __m256 a0 = init, a1 = init, a2 = init, a3 = init, a4 = init, a5 = init, a6 = init, a7 = init;
        for (int i = 0; i < inner; ++i) {
            __m256 w = _mm256_maskload_ps(b + (size_t)i * ldb, mask);
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(row[i]), w, a0);
            a1 = _mm256_fmadd_ps(_mm256_set1_ps(row[lda + i]), w, a1);
            a2 = _mm256_fmadd_ps(_mm256_set1_ps(row[2 * lda + i]), w, a2);
            a3 = _mm256_fmadd_ps(_mm256_set1_ps(row[3 * lda + i]), w, a3);
            a4 = _mm256_fmadd_ps(_mm256_set1_ps(row[4 * lda + i]), w, a4);
            a5 = _mm256_fmadd_ps(_mm256_set1_ps(row[5 * lda + i]), w, a5);
            a6 = _mm256_fmadd_ps(_mm256_set1_ps(row[6 * lda + i]), w, a6);
            a7 = _mm256_fmadd_ps(_mm256_set1_ps(row[7 * lda + i]), w, a7);
        }
        float* out = c + (size_t)r * ldc;
        _mm256_maskstore_ps(out, mask, a0);
        _mm256_maskstore_ps(out + ldc, mask, a1);
        _mm256_maskstore_ps(out + 2 * ldc, mask, a2);
        _mm256_maskstore_ps(out + 3 * ldc, mask, a3);
        _mm256_maskstore_ps(out + 4 * ldc, mask, a4);
        _mm256_maskstore_ps(out + 5 * ldc, mask, a5);
        _mm256_maskstore_ps(out + 6 * ldc, mask, a6);
        _mm256_maskstore_ps(out + 7 * ldc, mask, a7);
    }
    for (; r < rows; ++r) {
        const float* row = a + (size_t)r * lda;
        __m256 a0 = init;
        for (int i = 0; i < inner; ++i)
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(row[i]), _mm256_maskload_ps(b + (size_t)i * ldb, mask), a0);
        _mm256_maskstore_ps(c + (size_t)r * ldc, mask, a0);
    }
}

static void matmul_avx2(const float* a, int lda, int rows, int inner, const float* b, int ldb, const float* bias,
                        float* c, int ldc, int cols) {
    int o = 0;
    for (; o + 32 <= cols; o += 32) matmul_columns32(a, lda, rows, inner, b + o, ldb, bias ? bias + o : 0, c + o, ldc);
    for (; o + 16 <= cols; o += 16) matmul_columns16(a, lda, rows, inner, b + o, ldb, bias ? bias + o : 0, c + o, ldc);
    for (; o < cols; o += 8)
        matmul_columns8(a, lda, rows, inner, b + o, ldb, bias ? bias + o : 0, c + o, ldc, cols - o < 8 ? cols - o : 8);
}

// The 6-point transforms along one axis of a window, 8 channels a register: (r0 .. r5) = B^T d
// for inputs, (r0 .. r3) = A^T m for outputs. Written out, not looped, so that g++ -O2 keeps
// every value in a register.
static inline void winograd_input6(__m256 d0, __m256 d1, __m256 d2, __m256 d3, __m256 d4, __m256 d5, __m256& r0,
                                   __m256& r1, __m256& r2, __m256& r3, __m256& r4, __m256& r5) {
    const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f);
    __m256 d4_d2 = _mm256_sub_ps(d4, d2), d3_d1 = _mm256_sub_ps(d3, d1);
    r0 = _mm256_fmadd_ps(four, d0, _mm256_fnmadd_ps(five, d2, d4));                // 4  0 -5  0  1  0
    r1 = _mm256_fnmadd_ps(four, _mm256_add_ps(d1, d2), _mm256_add_ps(d3, d4));    // 0 -4 -4  1  1  0
    r2 = _mm256_fmadd_ps(four, _mm256_sub_ps(d1, d2), _mm256_sub_ps(d4, d3));     // 0  4 -4 -1  1  0
    r3 = _mm256_fmadd_ps(two, d3_d1, d4_d2);                                       // 0 -2 -1  2  1  0
    r4 = _mm256_fnmadd_ps(two, d3_d1, d4_d2);                                      // 0  2 -1 -2  1  0
    r5 = _mm256_fmadd_ps(four, d1, _mm256_fnmadd_ps(five, d3, d5));                // 0  4  0 -5  0  1
}

static inline void winograd_output6(__m256 m0, __m256 m1, __m256 m2, __m256 m3, __m256 m4, __m256 m5, __m256& r0,
                                    __m256& r1, __m256& r2, __m256& r3) {
    __m256 s12 = _mm256_add_ps(m1, m2), d12 = _mm256_sub_ps(m1, m2);
    __m256 s34 = _mm256_add_ps(m3, m4), d34 = _mm256_sub_ps(m3, m4);
    r0 = _mm256_add_ps(_mm256_add_ps(m0, s12), s34);                               // 1  1  1  1  1  0
    r1 = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), d34, d12);                          // 0  1 -1  2 -2  0
    r2 = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), s34, s12);                          // 0  1  1  4  4  0
    r3 = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), d34, d12), m5);       // 0  1 -1  8 -8  1
}

// V[p][t][i] = (B^T d B)[p] of tile t = SIDE TY + TX, 8 input channels at a time, read from x
// ([N * N][in8]). The window's rows are board rows 4 TY - 1 .. 4 TY + 4 and its columns likewise:
// those off the board are zero, the rows known at compile time (on 8 x 8 one row and one column
// of every window).
template <int N, int TY, int TX>
static void winograd_input_tile(const float* x, int in8, float* inputs) {
    const int TILES = WinogradTiles<N>::COUNT, TILE = TY * WinogradTiles<N>::SIDE + TX;
    const __m256 zero = _mm256_setzero_ps();
    const size_t down = (size_t)N * in8;                    // one board row
    const size_t next = (size_t)TILES * in8;                // one point of V
    const int top = 4 * TY - 1;                             // the window's first row on the board
    const int first = top < 0 ? 0 : top;                    // its first row on the board
#define AMZ_ROW(k) (top + (k) >= 0 && top + (k) < N ? _mm256_loadu_ps(p + (top + (k) - first) * down) : zero)
    for (int i0 = 0; i0 < in8; i0 += 8) {
        __m256 half[6][6];  // (B^T d)[r][c]
        for (int c = 0; c < 6; ++c) {
            const int col = 4 * TX - 1 + c;
            if (col < 0 || col > N - 1) {
                half[0][c] = half[1][c] = half[2][c] = half[3][c] = half[4][c] = half[5][c] = zero;
                continue;
            }
            const float* p = x + (size_t)(first * N + col) * in8 + i0;  // the column on row `first`
            winograd_input6(AMZ_ROW(0), AMZ_ROW(1), AMZ_ROW(2), AMZ_ROW(3), AMZ_ROW(4), AMZ_ROW(5), half[0][c],
                            half[1][c], half[2][c], half[3][c], half[4][c], half[5][c]);
        }
        for (int r = 0; r < 6; ++r) {
            __m256 v0, v1, v2, v3, v4, v5;
            winograd_input6(half[r][0], half[r][1], half[r][2], half[r][3], half[r][4], half[r][5], v0, v1, v2, v3,
                            v4, v5);
            float* v = inputs + ((size_t)(r * 6) * TILES + TILE) * in8 + i0;  // point 6 r
            _mm256_storeu_ps(v, v0);
            _mm256_storeu_ps(v + next, v1);
            _mm256_storeu_ps(v + 2 * next, v2);
            _mm256_storeu_ps(v + 3 * next, v3);
            _mm256_storeu_ps(v + 4 * next, v4);
            _mm256_storeu_ps(v + 5 * next, v5);
        }
    }
#undef AMZ_ROW
}

// Every tile's V: 2 x 2 tiles on boards up to 8 x 8, 3 x 3 on 9 x 9 and 10 x 10.
template <int N>
static void winograd_input_tiles(const float* x, int in8, float* inputs) {
    winograd_input_tile<N, 0, 0>(x, in8, inputs);
    winograd_input_tile<N, 0, 1>(x, in8, inputs);
    winograd_input_tile<N, 1, 0>(x, in8, inputs);
    winograd_input_tile<N, 1, 1>(x, in8, inputs);
    if (WinogradTiles<N>::SIDE == 3) {
        winograd_input_tile<N, 0, 2>(x, in8, inputs);
        winograd_input_tile<N, 1, 2>(x, in8, inputs);
        winograd_input_tile<N, 2, 0>(x, in8, inputs);
        winograd_input_tile<N, 2, 1>(x, in8, inputs);
        winograd_input_tile<N, 2, 2>(x, in8, inputs);
    }
}

// The products of one point for a group of G tiles (v: [G][in8], m: [G][out]), the 9 tiles of
// 9 x 9 and 10 x 10 in groups of 3: per block of 16 output channels the group's sums stay in
// 2 G registers while the input channels stream past, as winograd_products' groups of 4.
template <int IN8, int G>
static inline void winograd_tile_group(const float* v, int in8, const float* u, float* m, int out) {
    if (IN8 > 0) in8 = IN8;
    int o0 = 0;
    for (; o0 + 16 <= out; o0 += 16) {
        const float* block = u + (size_t)o0 * in8;
        __m256 low[G], high[G];
#pragma GCC unroll 4
        for (int t = 0; t < G; ++t) low[t] = high[t] = _mm256_setzero_ps();
        for (int i = 0; i < in8; ++i) {
            __m256 w0 = _mm256_loadu_ps(block + (size_t)i * 16), w1 = _mm256_loadu_ps(block + (size_t)i * 16 + 8);
            __asm__("" : "+x"(w0), "+x"(w1));  // in registers, as in winograd_products
#pragma GCC unroll 4
            for (int t = 0; t < G; ++t) {
                const __m256 x = _mm256_set1_ps(v[t * in8 + i]);
                low[t] = _mm256_fmadd_ps(x, w0, low[t]);
                high[t] = _mm256_fmadd_ps(x, w1, high[t]);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < G; ++t) {
            _mm256_storeu_ps(m + t * out + o0, low[t]);
            _mm256_storeu_ps(m + t * out + o0 + 8, high[t]);
        }
    }
    if (o0 < out) {  // a last block of 8
        const float* block = u + (size_t)o0 * in8;
        __m256 sums[G];
#pragma GCC unroll 4
        for (int t = 0; t < G; ++t) sums[t] = _mm256_setzero_ps();
        for (int i = 0; i < in8; ++i) {
            const __m256 w0 = _mm256_loadu_ps(block + (size_t)i * 8);
#pragma GCC unroll 4
            for (int t = 0; t < G; ++t) sums[t] = _mm256_fmadd_ps(_mm256_set1_ps(v[t * in8 + i]), w0, sums[t]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < G; ++t) _mm256_storeu_ps(m + t * out + o0, sums[t]);
    }
}

// M[p][t][o] = sum_i V[p][t][i] * U[p][i][o] for the 36 points: per block of 16 output channels
// the sums of 4 tiles stay in 8 registers while the input channels stream past (two weight loads
// and four broadcasts a channel for eight FMAs); 9 tiles (9 x 9, 10 x 10) go in groups of 3
// (winograd_tile_group). IN8 > 0 fixes the padded input channels at compile time (the trunk's
// convolutions), so the compiler unrolls the channel loop.
template <int IN8, int TILES>
static void winograd_products(const float* inputs, int in8, const float* filters, float* products, int out) {
    static_assert(TILES % 4 == 0 || TILES % 3 == 0, "tiles go in groups of 4 or 3");
    if (IN8 > 0) in8 = IN8;
    for (int p = 0; p < WINOGRAD_POINTS; ++p) {
        const float* u = filters + (size_t)p * in8 * out;
        if (TILES % 4 != 0) {
            for (int t0 = 0; t0 < TILES; t0 += 3)
                winograd_tile_group<IN8, 3>(inputs + ((size_t)p * TILES + t0) * in8, in8, u,
                                            products + ((size_t)p * TILES + t0) * out, out);
            continue;
        }
        const float* v = inputs + (size_t)p * TILES * in8;
        float* m = products + (size_t)p * TILES * out;
        for (int t0 = 0; t0 < TILES; t0 += 4, v += 4 * in8, m += 4 * out) {
            int o0 = 0;
            for (; o0 + 16 <= out; o0 += 16) {
                const float* block = u + (size_t)o0 * in8;
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
                for (int i = 0; i < in8; ++i) {
                    __m256 w0 = _mm256_loadu_ps(block + (size_t)i * 16), w1 = _mm256_loadu_ps(block + (size_t)i * 16 + 8);
                    // Keep the weights in registers: g++ would otherwise load each one four times, once
                    // per tile, as an FMA memory operand.
                    __asm__("" : "+x"(w0), "+x"(w1));
                    __m256 x = _mm256_set1_ps(v[i]);
                    a0 = _mm256_fmadd_ps(x, w0, a0);
                    a1 = _mm256_fmadd_ps(x, w1, a1);
                    x = _mm256_set1_ps(v[in8 + i]);
                    b0 = _mm256_fmadd_ps(x, w0, b0);
                    b1 = _mm256_fmadd_ps(x, w1, b1);
                    x = _mm256_set1_ps(v[2 * in8 + i]);
                    c0 = _mm256_fmadd_ps(x, w0, c0);
                    c1 = _mm256_fmadd_ps(x, w1, c1);
                    x = _mm256_set1_ps(v[3 * in8 + i]);
                    d0 = _mm256_fmadd_ps(x, w0, d0);
                    d1 = _mm256_fmadd_ps(x, w1, d1);
                }
                _mm256_storeu_ps(m + o0, a0);
                _mm256_storeu_ps(m + o0 + 8, a1);
                _mm256_storeu_ps(m + out + o0, b0);
                _mm256_storeu_ps(m + out + o0 + 8, b1);
                _mm256_storeu_ps(m + 2 * out + o0, c0);
                _mm256_storeu_ps(m + 2 * out + o0 + 8, c1);
                _mm256_storeu_ps(m + 3 * out + o0, d0);
                _mm256_storeu_ps(m + 3 * out + o0 + 8, d1);
            }
            if (o0 < out) {  // a last block of 8
                const float* block = u + (size_t)o0 * in8;
                __m256 a0 = _mm256_setzero_ps(), b0 = a0, c0 = a0, d0 = a0;
                for (int i = 0; i < in8; ++i) {
                    __m256 w0 = _mm256_loadu_ps(block + (size_t)i * 8);
                    a0 = _mm256_fmadd_ps(_mm256_set1_ps(v[i]), w0, a0);
                    b0 = _mm256_fmadd_ps(_mm256_set1_ps(v[in8 + i]), w0, b0);
                    c0 = _mm256_fmadd_ps(_mm256_set1_ps(v[2 * in8 + i]), w0, c0);
                    d0 = _mm256_fmadd_ps(_mm256_set1_ps(v[3 * in8 + i]), w0, d0);
                }
                _mm256_storeu_ps(m + o0, a0);
                _mm256_storeu_ps(m + out + o0, b0);
                _mm256_storeu_ps(m + 2 * out + o0, c0);
                _mm256_storeu_ps(m + 3 * out + o0, d0);
            }
        }
    }
}

// A convolution with 8k output channels on N x N by F(4x4, 3x3) (prepare_winograd): transform
// the inputs, multiply per point, transform back and add the bias (and the residual), then relu.
template <int N>
static void conv3x3_winograd(const Conv& conv, const float* x, const float* residual, float* out,
                             WinogradScratch* scratch) {
    const int SIDE = WinogradTiles<N>::SIDE, TILES = WinogradTiles<N>::COUNT;
    const int in = conv.in, in8 = padded_inputs(in), oc = conv.out;
    float* staged = &scratch->staged[0];
    float* inputs = &scratch->inputs[0];
    float* products = &scratch->products[0];
    if (in != in8) {  // the stem: zero channels up to a multiple of 8
        for (int s = 0; s < N * N; ++s)
            for (int i = 0; i < in8; ++i) staged[s * in8 + i] = i < in ? x[s * in + i] : 0.0f;
        x = staged;
    }
    winograd_input_tiles<N>(x, in8, inputs);
    // The trunk's widths get a product with the channel count fixed at compile time.
    const float* filters = &conv.winograd[0];
    switch (in8) {
        case 16: winograd_products<16, TILES>(inputs, in8, filters, products, oc); break;
        case 32: winograd_products<32, TILES>(inputs, in8, filters, products, oc); break;
        case 64: winograd_products<64, TILES>(inputs, in8, filters, products, oc); break;
        case 128: winograd_products<128, TILES>(inputs, in8, filters, products, oc); break;
        case 256: winograd_products<256, TILES>(inputs, in8, filters, products, oc); break;
        default: winograd_products<0, TILES>(inputs, in8, filters, products, oc); break;
    }
    const __m256 zero = _mm256_setzero_ps();
    const size_t next = (size_t)TILES * oc;  // one point of M
    for (int t = 0; t < TILES; ++t) {
        const int top = t / SIDE * 4, left = t % SIDE * 4;  // the tile's top-left square's row and column
        const int first = top * N + left;                   // and the square
        for (int o0 = 0; o0 < oc; o0 += 8) {
            __m256 half[4][6];  // (A^T m)[r][c]
            for (int c = 0; c < 6; ++c) {
                const float* m = products + ((size_t)c * TILES + t) * oc + o0;  // point c, then 6 r + c
                winograd_output6(_mm256_loadu_ps(m), _mm256_loadu_ps(m + 6 * next), _mm256_loadu_ps(m + 12 * next),
                                 _mm256_loadu_ps(m + 18 * next), _mm256_loadu_ps(m + 24 * next),
                                 _mm256_loadu_ps(m + 30 * next), half[0][c], half[1][c], half[2][c], half[3][c]);
            }
            const __m256 bias = _mm256_loadu_ps(conv.bias + o0);
            for (int r = 0; r < 4; ++r) {
                if (N % 4 != 0 && top + r > N - 1) break;  // past the board's last row
                __m256 y[4];
                winograd_output6(half[r][0], half[r][1], half[r][2], half[r][3], half[r][4], half[r][5], y[0], y[1],
                                 y[2], y[3]);
                for (int c = 0; c < 4; ++c) {
                    if (N % 4 != 0 && left + c > N - 1) break;
                    size_t at = (size_t)(first + r * N + c) * oc + o0;
                    __m256 value = _mm256_add_ps(y[c], bias);
                    if (residual) value = _mm256_add_ps(value, _mm256_loadu_ps(residual + at));
                    _mm256_storeu_ps(out + at, _mm256_max_ps(value, zero));
                }
            }
        }
    }
}

static void conv3x3_avx2(const Conv& conv, const float* x, const float* residual, float* out,
                         WinogradScratch* scratch) {
    if (conv.winograd.empty())
        conv3x3_generic<8>(conv, x, residual, out, scratch);
    else
        conv3x3_winograd<8>(conv, x, residual, out, scratch);
}

static inline float sum256(__m256 v) {
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_add_ss(half, _mm_shuffle_ps(half, half, 1)));
}

static inline float max_avx2(const float* x, int n) {
    int i = 0;
    float best = x[0];
    if (n >= 8) {
        __m256 top = _mm256_loadu_ps(x);
        for (i = 8; i + 8 <= n; i += 8) top = _mm256_max_ps(top, _mm256_loadu_ps(x + i));
        __m128 half = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
        half = _mm_max_ps(half, _mm_movehl_ps(half, half));
        best = _mm_cvtss_f32(_mm_max_ss(half, _mm_shuffle_ps(half, half, 1)));
    }
    for (; i < n; ++i) best = x[i] > best ? x[i] : best;
    return best;
}

static void softmax_avx2(float* x, int n) {
    const float peak = max_avx2(x, n);
    const __m256 shift = _mm256_set1_ps(peak);
    __m256 sums = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), shift));
        _mm256_storeu_ps(x + i, e);
        sums = _mm256_add_ps(sums, e);
    }
    float total = sum256(sums);
    for (int k = i; k < n; ++k) {
        x[k] = exp_scalar(x[k] - peak);
        total += x[k];
    }
    const float factor = 1.0f / total;
    const __m256 f = _mm256_set1_ps(factor);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), f));
    for (; i < n; ++i) x[i] *= factor;
}

// 8 columns a register: maxima, sums and scaling run down the rows with no horizontal step.
static void softmax_columns_avx2(float* x, int rows, int cols) {
    const int whole = cols & ~7;
    for (int col = 0; col < whole; col += 8) {
        __m256 peak = _mm256_loadu_ps(x + col);
        for (int r = 1; r < rows; ++r) peak = _mm256_max_ps(peak, _mm256_loadu_ps(x + (size_t)r * cols + col));
        __m256 total = _mm256_setzero_ps();
        for (int r = 0; r < rows; ++r) {
            float* at = x + (size_t)r * cols + col;
            __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(at), peak));
            _mm256_storeu_ps(at, e);
            total = _mm256_add_ps(total, e);
        }
        __m256 factor = _mm256_div_ps(_mm256_set1_ps(1.0f), total);
        for (int r = 0; r < rows; ++r) {
            float* at = x + (size_t)r * cols + col;
            _mm256_storeu_ps(at, _mm256_mul_ps(_mm256_loadu_ps(at), factor));
        }
    }
    for (int col = whole; col < cols; ++col) softmax_column(x, rows, cols, col);
}

static float log_sum_exp_avx2(const float* x, int n) {
    const float peak = max_avx2(x, n);
    const __m256 shift = _mm256_set1_ps(peak);
    __m256 sums = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) sums = _mm256_add_ps(sums, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), shift)));
    float total = sum256(sums);
    for (; i < n; ++i) total += exp_scalar(x[i] - peak);
    return peak + std::log(total);
}

// 8 x 8 blocks by unpacks and shuffles; rows and columns past the last whole block one by one.
static void transpose_avx2(const float* a, int lda, int rows, int cols, float* out) {
    const int whole_rows = rows & ~7, whole_cols = cols & ~7;
    for (int r = 0; r < whole_rows; r += 8)
        for (int col = 0; col < whole_cols; col += 8) {
            const float* in = a + (size_t)r * lda + col;
            __m256 r0 = _mm256_loadu_ps(in), r1 = _mm256_loadu_ps(in + lda);
            __m256 r2 = _mm256_loadu_ps(in + 2 * lda), r3 = _mm256_loadu_ps(in + 3 * lda);
            __m256 r4 = _mm256_loadu_ps(in + 4 * lda), r5 = _mm256_loadu_ps(in + 5 * lda);
            __m256 r6 = _mm256_loadu_ps(in + 6 * lda), r7 = _mm256_loadu_ps(in + 7 * lda);
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float* o = out + (size_t)col * rows + r;
            _mm256_storeu_ps(o, _mm256_permute2f128_ps(s0, s4, 0x20));
            _mm256_storeu_ps(o + rows, _mm256_permute2f128_ps(s1, s5, 0x20));
            _mm256_storeu_ps(o + 2 * rows, _mm256_permute2f128_ps(s2, s6, 0x20));
            _mm256_storeu_ps(o + 3 * rows, _mm256_permute2f128_ps(s3, s7, 0x20));
            _mm256_storeu_ps(o + 4 * rows, _mm256_permute2f128_ps(s0, s4, 0x31));
            _mm256_storeu_ps(o + 5 * rows, _mm256_permute2f128_ps(s1, s5, 0x31));
            _mm256_storeu_ps(o + 6 * rows, _mm256_permute2f128_ps(s2, s6, 0x31));
            _mm256_storeu_ps(o + 7 * rows, _mm256_permute2f128_ps(s3, s7, 0x31));
        }
    for (int r = 0; r < rows; ++r)
        for (int col = r < whole_rows ? whole_cols : 0; col < cols; ++col)
            out[(size_t)col * rows + r] = a[(size_t)r * lda + col];
}

static const Kernels AVX2_KERNELS = {"avx2+fma", true, matmul_avx2, conv3x3_avx2, softmax_avx2, softmax_columns_avx2,
                                     log_sum_exp_avx2, transpose_avx2};
#pragma GCC pop_options
#endif

// The 3x3 convolution of `kernels` on a board of N squares a side (x, residual and out
// [N * N][channels]): on 8 x 8 the table's own function, on other sizes the same algorithm
// instantiated for N (the Winograd filters do not depend on the board).
template <int N>
static void conv3x3_board(const Kernels* kernels, const Conv& conv, const float* x, const float* residual,
                          float* out, WinogradScratch* scratch) {
    if (N == 8) {
        kernels->conv3x3(conv, x, residual, out, scratch);
        return;
    }
#if AMZ_X86
    if (!conv.winograd.empty()) {  // filled only for kernels that run Winograd (bind_conv)
        conv3x3_winograd<N>(conv, x, residual, out, scratch);
        return;
    }
#endif
    conv3x3_generic<N>(conv, x, residual, out, scratch);
}

static const Kernels* choose_kernels() {
#if AMZ_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &AVX2_KERNELS;
#endif
    return &GENERIC_KERNELS;
}

#endif  // AMZ_KERNELS_H
