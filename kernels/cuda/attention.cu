// kernels/cuda/attention.cu — multi-head scaled dot-product attention with padding and causal
// masks and dropout on the probabilities, the semantics of kernels/cpu/attention.cpp: a masked
// key gets exactly zero weight, a query that sees no key gets a zero output, and the dropout
// draw of probability (b, h, i, j) is philox::uniform(key, ((b*NH + h)*T + i)*T + j).
//
//  v1 (attention_forward / attention_backward): unfused and obvious. Scores into att, softmax in
//     place, then att @ v; the backward works from the stored att (tutorials and tests).
//  v2 (attention_forward_flash): flash-style forward. Keys and values stream through shared
//     memory in tiles of 32, each query keeps a running max and sum (online softmax), and the
//     (T, T) matrix never exists; it stores the log-sum-exp per query instead.
//  v2 (attention_backward_flash): flash-style backward. Recomputes the probabilities tile by tile
//     from q, k and that log-sum-exp; one kernel owns keys (dk, dv), another owns queries (dq),
//     so every sum runs in a fixed order without atomics. Its CPU specification, and v2's and
//     v3's, is attention_forward_flash / attention_backward_flash in kernels/cpu/.
//  v3 (attention_forward_flash_tc): the v2 forward with its two products on tensor cores
//     (mma.sync tf32, each fp32 operand split in two tf32s: fp32 accuracy). The model runs the
//     v3 forward and the v2 backward.
// Every grid puts the (b, h) pairs on blockIdx.y, so B * NH is at most 65535 (heads_grid).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"
#include "kernels/philox.hpp"

#include <cmath>
#include <string>
#include <type_traits>

namespace ops {
namespace cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxSmemFloats = 48 * 1024 / 4;  // the default dynamic shared memory limit

// A grid of x blocks per (b, h) pair, the pairs on y; CUDA allows at most 65535 blocks along y.
dim3 heads_grid(int x, int B, int NH, const char* fn) {
    const int64_t pairs = (int64_t)B * NH;
    if (pairs > 65535)
        throw std::runtime_error(std::string(fn) + " (CUDA): B * NH = " + std::to_string(pairs) +
                                 " (batch rows x heads) is above 65535, the grid's y limit; use a smaller batch");
    return dim3(x, (unsigned)pairs);
}

// The dropout factor of probability (bh, i, j): 1/(1-p) kept, 0 dropped, 1 without dropout.
__device__ inline float keep_factor(float p, float s, const DropoutKey& key, int bh, int i, int j, int T) {
    if (p == 0.0f) return 1.0f;
    return philox::uniform(key, ((uint64_t)bh * T + i) * T + j) >= p ? s : 0.0f;
}

__device__ inline bool visible(const int32_t* mask, bool causal, int b, int i, int j, int T) {
    return (!mask || mask[b * T + j] != 0) && (!causal || j <= i);
}

// ---- v1 forward: three kernels, each one block (or warp) per query row (bh, i) ----

// att[bh][i][j] = scale * q_i . k_j for visible keys, -inf for masked ones.
__global__ void scores_kernel(float* att, const float* q, const float* k, const int32_t* mask,
                              bool causal, int T, int NH, int HS, float scale) {
    extern __shared__ float qi[];  // (HS)
    const int i = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    for (int c = threadIdx.x; c < HS; c += blockDim.x) qi[c] = q[((size_t)b * T + i) * C + h * HS + c];
    __syncthreads();
    float* arow = att + ((size_t)bh * T + i) * T;  // (T)
    for (int j = threadIdx.x; j < T; j += blockDim.x) {
        float s = -INFINITY;
        if (visible(mask, causal, b, i, j, T)) {
            const float* kj = k + ((size_t)b * T + j) * C + h * HS;
            float dot = 0.0f;
            for (int c = 0; c < HS; c++) dot += qi[c] * kj[c];
            s = dot * scale;
        }
        arow[j] = s;
    }
}

// Softmax of each row in place, one warp per row; a row of -inf (no visible key) becomes zeros.
__global__ void softmax_kernel(float* att, int64_t rows, int T) {
    const int lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    float* a = att + row * T;
    float maxv = -INFINITY;
    for (int j = lane; j < T; j += 32) maxv = fmaxf(maxv, a[j]);
    maxv = warp_max(maxv);
    if (maxv == -INFINITY) {
        for (int j = lane; j < T; j += 32) a[j] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int j = lane; j < T; j += 32) {
        a[j] = a[j] == -INFINITY ? 0.0f : expf(a[j] - maxv);
        sum += a[j];
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += 32) a[j] *= inv;
}

// out_i = sum_j att_ij * keep_ij * v_j: the row's weights go to shared memory first, so each
// Philox draw happens once, then one thread per channel sums over j in order.
__global__ void pv_kernel(float* out, const float* att, const float* v, float p, float s,
                          DropoutKey key, int T, int NH, int HS) {
    extern __shared__ float w[];  // (T)
    const int i = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const float* arow = att + ((size_t)bh * T + i) * T;
    for (int j = threadIdx.x; j < T; j += blockDim.x)
        w[j] = arow[j] == 0.0f ? 0.0f : arow[j] * keep_factor(p, s, key, bh, i, j, T);
    __syncthreads();
    for (int c = threadIdx.x; c < HS; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < T; j++)
            if (w[j] != 0.0f) acc += w[j] * v[((size_t)b * T + j) * C + h * HS + c];
        out[((size_t)b * T + i) * C + h * HS + c] = acc;
    }
}

// ---- v1 backward ----

// One row of dS, the gradient of the scores: with datt_ij = keep_ij (do_i . v_j),
// dS_ij = att_ij (datt_ij - sum_j att_ij datt_ij) * scale. Masked entries (att 0) get 0.
__global__ void dscores_kernel(float* dS, const float* dout, const float* att, const float* v,
                               float p, float s, DropoutKey key, int T, int NH, int HS, float scale) {
    extern __shared__ float doi[];  // (HS)
    const int i = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    for (int c = threadIdx.x; c < HS; c += blockDim.x) doi[c] = dout[((size_t)b * T + i) * C + h * HS + c];
    __syncthreads();
    const float* arow = att + ((size_t)bh * T + i) * T;
    float* drow = dS + ((size_t)bh * T + i) * T;
    float part = 0.0f;
    for (int j = threadIdx.x; j < T; j += blockDim.x) {
        float datt = 0.0f;
        const float a = arow[j];
        const float m = a == 0.0f ? 0.0f : keep_factor(p, s, key, bh, i, j, T);
        if (a * m != 0.0f) {
            const float* vj = v + ((size_t)b * T + j) * C + h * HS;
            float dot = 0.0f;
            for (int c = 0; c < HS; c++) dot += doi[c] * vj[c];
            datt = dot * m;
        }
        drow[j] = datt;
        part += a * datt;
    }
    const float datt_dot_att = block_sum(part);
    for (int j = threadIdx.x; j < T; j += blockDim.x)  // each thread rereads only its own j
        drow[j] = arow[j] == 0.0f ? 0.0f : arow[j] * (drow[j] - datt_dot_att) * scale;
}

// dq_i += sum_j dS_ij k_j, one block per query row, j in increasing order.
__global__ void dq_kernel(float* dq, const float* dS, const float* k, int T, int NH, int HS) {
    const int i = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const float* drow = dS + ((size_t)bh * T + i) * T;
    for (int c = threadIdx.x; c < HS; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < T; j++)
            if (drow[j] != 0.0f) acc += drow[j] * k[((size_t)b * T + j) * C + h * HS + c];
        dq[((size_t)b * T + i) * C + h * HS + c] += acc;
    }
}

// dk_j += sum_i dS_ij q_i and dv_j += sum_i att_ij keep_ij do_i, one block per key row j,
// i in increasing order (the CPU's order). Either output may be null.
__global__ void dkdv_kernel(float* dk, float* dv, const float* dS, const float* att, const float* q,
                            const float* dout, float p, float s, DropoutKey key, int T, int NH, int HS) {
    extern __shared__ float col[];  // ds (T), then w (T)
    float* ds = col;
    float* w = col + T;
    const int j = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    for (int i = threadIdx.x; i < T; i += blockDim.x) {
        const float a = att[((size_t)bh * T + i) * T + j];
        ds[i] = dk ? dS[((size_t)bh * T + i) * T + j] : 0.0f;
        w[i] = a == 0.0f ? 0.0f : a * keep_factor(p, s, key, bh, i, j, T);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < HS; c += blockDim.x) {
        float dka = 0.0f, dva = 0.0f;
        for (int i = 0; i < T; i++) {
            const size_t off = ((size_t)b * T + i) * C + h * HS + c;
            if (ds[i] != 0.0f) dka += ds[i] * q[off];
            if (w[i] != 0.0f) dva += w[i] * dout[off];
        }
        const size_t off = ((size_t)b * T + j) * C + h * HS + c;
        if (dk) dk[off] += dka;
        if (dv) dv[off] += dva;
    }
}

// ---- v2: flash-style ----
// Tiles of 32 keys (or queries) stand in shared memory, one per lane. A warp works for 4 rows at
// once (4 queries, or 4 keys in dk/dv), so every element it reads from shared memory serves 4
// sums. HSP is HS rounded up to 32, 64 or 128 (zero-padded channels); lane l owns output
// channels l, l+32, ... Per query (or key), the operations and their order do not depend on
// how many rows a warp holds.
constexpr int kFlashKeys = 32, kRows = 4;  // tile length; rows per warp
// Rows that lanes read one each (lane l: row l) are padded by 4 floats: a quarter-warp's 16-byte
// loads then fall in 8 distinct groups of 4 banks, and every row stays 16-byte aligned.
constexpr int kPad = 4;

// Warps per block: 4 (the kernels' __launch_bounds__), or 2 for the backward at HSP 128, where 4
// would need more than the 48 KiB of static shared memory a block may have.
__host__ __device__ constexpr int flash_warps(int HSP, bool backward) { return backward && HSP == 128 ? 2 : 4; }

// acc[a] = rows[a] . y for the warp's kRows rows (row stride HSP, read by the whole warp) and this
// lane's row y, both 16-byte aligned in shared memory. Each sum runs in order d = 0, 1, ..., so a
// score formed in the backward has the forward's bits; y is read once for the kRows rows.
template <int HSP>
__device__ inline void dot_rows(float (&acc)[kRows], const float* rows, const float* y) {
    #pragma unroll
    for (int a = 0; a < kRows; a++) acc[a] = 0.0f;
    for (int d = 0; d < HSP; d += 4) {
        const float4 yv = *reinterpret_cast<const float4*>(y + d);
        #pragma unroll
        for (int a = 0; a < kRows; a++) {
            const float4 x = *reinterpret_cast<const float4*>(rows + a * HSP + d);
            acc[a] += x.x * yv.x;
            acc[a] += x.y * yv.y;
            acc[a] += x.z * yv.z;
            acc[a] += x.w * yv.w;
        }
    }
}

// acc[a][r] += sum over the tile's rows t, in order, of wt[a][t] * rows[t][lane + 32 r]: the
// weights (kRows x 32, in shared memory) are read 4 at a time, each row element feeds kRows sums.
template <int R, int LD>
__device__ inline void add_weighted_rows(float (&acc)[kRows][R], const float (*wt)[kFlashKeys],
                                         const float (*rows)[LD], int lane) {
    for (int t = 0; t < kFlashKeys; t += 4) {
        float4 w[kRows];
        #pragma unroll
        for (int a = 0; a < kRows; a++) w[a] = *reinterpret_cast<const float4*>(&wt[a][t]);
        #pragma unroll
        for (int r = 0; r < R; r++) {
            const float x0 = rows[t][lane + 32 * r], x1 = rows[t + 1][lane + 32 * r];
            const float x2 = rows[t + 2][lane + 32 * r], x3 = rows[t + 3][lane + 32 * r];
            #pragma unroll
            for (int a = 0; a < kRows; a++) {
                acc[a][r] += w[a].x * x0;
                acc[a][r] += w[a].y * x1;
                acc[a][r] += w[a].z * x2;
                acc[a][r] += w[a].w * x3;
            }
        }
    }
}

// Dropout factors z[a] = keep_factor(bh, iw + a, j0 + lane) for the warp's 4 queries (forward,
// dq; iw and j0 multiples of 4). With T % 4 == 0 the 4 keys of a lane quad share one Philox block
// per query: quad lane a draws query iw + a's block and the quad passes the words around, one
// Philox call per lane instead of four. Warp-uniform: every lane takes part.
__device__ inline void keep_factors_queries(float (&z)[kRows], float p, float s, const DropoutKey& key, int bh,
                                            int iw, int j0, int lane, int T) {
    if (p == 0.0f || T % 4 != 0) {
        for (int a = 0; a < kRows; a++) z[a] = keep_factor(p, s, key, bh, iw + a, j0 + lane, T);
        return;
    }
    const int quad = lane & ~3, w = lane & 3;
    uint32_t c[4];
    philox::words(c, key, (((uint64_t)bh * T + iw + w) * T + j0 + quad) >> 2);
    #pragma unroll
    for (int a = 0; a < kRows; a++) {  // this lane's word of quad lane a's block
        const uint32_t x0 = __shfl_sync(0xffffffffu, c[0], quad + a), x1 = __shfl_sync(0xffffffffu, c[1], quad + a);
        const uint32_t x2 = __shfl_sync(0xffffffffu, c[2], quad + a), x3 = __shfl_sync(0xffffffffu, c[3], quad + a);
        z[a] = philox::to_uniform(w & 2 ? (w & 1 ? x3 : x2) : (w & 1 ? x1 : x0)) >= p ? s : 0.0f;
    }
}

// Dropout factors z[a] = keep_factor(bh, i, jw + a) for query i and the warp's 4 keys (dk/dv; jw a
// multiple of 4): with T % 4 == 0 they are the 4 words of one Philox block.
__device__ inline void keep_factors_keys(float (&z)[kRows], float p, float s, const DropoutKey& key, int bh, int i,
                                         int jw, int T) {
    if (p == 0.0f || T % 4 != 0) {
        for (int a = 0; a < kRows; a++) z[a] = keep_factor(p, s, key, bh, i, jw + a, T);
        return;
    }
    float u[4];
    philox::uniforms4(u, key, (((uint64_t)bh * T + i) * T + jw) >> 2);
    for (int a = 0; a < kRows; a++) z[a] = u[a] >= p ? s : 0.0f;
}

// Rows r0 .. r0+N-1 (token index, zero past T and past HS) of head h of x into the N shared rows
// of dst (row length LD >= HSP). The whole block takes part.
template <int HSP, int N, int LD>
__device__ inline void load_rows(float (&dst)[N][LD], const float* x, int b, int h, int r0, int T, int C, int HS) {
    for (int idx = threadIdx.x; idx < N * HSP; idx += blockDim.x) {
        const int r = idx / HSP, d = idx % HSP, t = r0 + r;
        dst[r][d] = t < T && d < HS ? x[((size_t)b * T + t) * C + h * HS + d] : 0.0f;
    }
}

// dst rows first .. first+3 (those below T) of head h += acc, lane l adding channels l, l+32, ...
// A null dst (an unwanted gradient) is skipped.
template <int R>
__device__ inline void add_to_rows(float* dst, const float (&acc)[kRows][R], int first, int b, int h, int T, int C,
                                   int HS, int lane) {
    if (!dst) return;
    #pragma unroll
    for (int a = 0; a < kRows; a++) {
        if (first + a >= T) continue;
        for (int r = 0; r < R; r++)
            if (lane + 32 * r < HS) dst[((size_t)b * T + first + a) * C + h * HS + lane + 32 * r] += acc[a][r];
    }
}

// The forward: a block holds 4 warps x 4 queries of one (b, h). Lane l scores key j0 + l against
// its warp's queries, the warp updates each query's running max m and sum l and rescales its
// output, then adds the tile's p_j z_j v_j.
template <int HSP>
__global__ void __launch_bounds__(32 * 4)
flash_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                     const int32_t* mask, bool causal, float p, float s, DropoutKey key,
                     int T, int NH, int HS, float scale) {
    constexpr int R = HSP / 32, W = flash_warps(HSP, false);
    __shared__ __align__(16) float qs[W * kRows][HSP];
    __shared__ __align__(16) float ks[kFlashKeys][HSP + kPad];
    __shared__ float vs[kFlashKeys][HSP];
    __shared__ __align__(16) float ws[W][kRows][kFlashKeys];  // each warp's weights p_j z_j
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const int i0 = blockIdx.x * W * kRows, iw = i0 + warp * kRows;  // the block's, the warp's first query
    load_rows<HSP>(qs, q, b, h, i0, T, C, HS);
    float o[kRows][R] = {}, m[kRows], l[kRows] = {};
    #pragma unroll
    for (int a = 0; a < kRows; a++) m[a] = -INFINITY;
    const int kend = causal ? min(T, i0 + W * kRows) : T;  // later keys are masked for the whole block
    for (int j0 = 0; j0 < kend; j0 += kFlashKeys) {
        __syncthreads();  // everyone is done with the previous tile (and qs is written)
        load_rows<HSP>(ks, k, b, h, j0, T, C, HS);
        load_rows<HSP>(vs, v, b, h, j0, T, C, HS);
        __syncthreads();
        const int j = j0 + lane;
        float score[kRows], z[kRows];
        dot_rows<HSP>(score, qs[warp * kRows], ks[lane]);
        keep_factors_queries(z, p, s, key, bh, iw, j0, lane, T);
        #pragma unroll
        for (int a = 0; a < kRows; a++) {
            const int i = iw + a;
            const bool vis = i < T && j < T && visible(mask, causal, b, i, j, T);
            const float sc = vis ? score[a] * scale : -INFINITY;
            const float tile_max = warp_max(sc);
            float wj = 0.0f;
            if (tile_max != -INFINITY) {  // else query i sees no key of this tile: o, m, l stay
                const float m_new = fmaxf(m[a], tile_max);
                const float corr = expf(m[a] - m_new);  // 0 on the first visible tile, where m = -inf
                const float pj = vis ? expf(sc - m_new) : 0.0f;
                l[a] = l[a] * corr + warp_sum(pj);
                wj = vis ? pj * z[a] : 0.0f;
                for (int r = 0; r < R; r++) o[a][r] *= corr;
                m[a] = m_new;
            }
            ws[warp][a][lane] = wj;
        }
        __syncwarp();  // the warp's weights are written
        add_weighted_rows<R>(o, ws[warp], vs, lane);
    }
    #pragma unroll
    for (int a = 0; a < kRows; a++) {
        const int i = iw + a;
        if (i >= T) continue;
        const float inv = l[a] > 0.0f ? 1.0f / l[a] : 0.0f;  // l == 0: no visible key, zero output
        for (int r = 0; r < R; r++)
            if (lane + 32 * r < HS) out[((size_t)b * T + i) * C + h * HS + lane + 32 * r] = o[a][r] * inv;
        if (lane == 0) lse[(size_t)bh * T + i] = l[a] > 0.0f ? m[a] + logf(l[a]) : -INFINITY;
    }
}

// ---- v3: the flash forward on tensor cores ----
// v2's algorithm with its two products, S = Q K^T and O += P V, on mma.sync m16n8k8 tf32. A tf32
// keeps 10 of fp32's 23 mantissa bits, so every operand x is split into big = tf32(x) and
// small = x - big, and x y is taken as small*big + big*small + big*big ("3xTF32", CUTLASS's
// OpMultiplyAddFastF32, which PyTorch's fp32 SDPA uses too): fp32 accuracy at tensor-core speed.
// A warp owns 16 queries, a block of 4 warps shares tiles of 32 keys.
constexpr int kTcWarps = 4, kTcQueries = 16 * kTcWarps;

__device__ inline void mma_tf32_1688(float* d, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// x = big + small, big rounded to tf32 (to nearest, ties away, as cvt.rna.tf32.f32).
template <int N>
__device__ inline void split_tf32(uint32_t (&big)[N], uint32_t (&small)[N], const float (&x)[N]) {
    #pragma unroll
    for (int i = 0; i < N; i++) {
        const float b = __uint_as_float((__float_as_uint(x[i]) + 0x1000u) & 0xffffe000u);
        big[i] = __float_as_uint(b), small[i] = __float_as_uint(x[i] - b);
    }
}

// d += a b (16x8 += 16x8 . 8x8) in 3xTF32, the small products first.
__device__ inline void mma_3xtf32(float* d, const float (&a)[4], const float (&b)[2]) {
    uint32_t ab[4], as[4], bb[2], bs[2];
    split_tf32(ab, as, a), split_tf32(bb, bs, b);
    mma_tf32_1688(d, as, bb);
    mma_tf32_1688(d, ab, bs);
    mma_tf32_1688(d, ab, bb);
}

// Dropout factors of keys j, j + 1 (j even) of query i. With T even their draws are the words
// (0, 1) or (2, 3) of one Philox block, so one call serves both.
__device__ inline void keep_factors_pair(float (&z)[2], float p, float s, const DropoutKey& key, int bh, int i, int j,
                                         int T) {
    if (p == 0.0f || T % 2 != 0) {
        z[0] = keep_factor(p, s, key, bh, i, j, T), z[1] = keep_factor(p, s, key, bh, i, j + 1, T);
        return;
    }
    const uint64_t e = ((uint64_t)bh * T + i) * T + j;  // even
    uint32_t c[4];
    philox::words(c, key, e >> 2);
    z[0] = philox::to_uniform(e & 2 ? c[2] : c[0]) >= p ? s : 0.0f;
    z[1] = philox::to_uniform(e & 2 ? c[3] : c[1]) >= p ? s : 0.0f;
}

// Lane 4g + t of a warp holds, for its 16 queries, accumulator fragments: S[n][f] is query
// row g + 8 (f / 2), key 8n + 2t + f % 2 of the tile; O[c][f] the same row, channel 8c + 2t + f % 2.
// P V needs P as A fragments (rows g, g + 8; k columns t, t + 4): rather than move P between
// lanes, k index t stands for key 8n + 2t and t + 4 for key 8n + 2t + 1, and V's B fragment
// is read in the same order, so P's fragment is S's own registers.
template <int HSP>
__global__ void __launch_bounds__(32 * kTcWarps)
flash_forward_tc_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                        const int32_t* mask, bool causal, float p, float s, DropoutKey key,
                        int T, int NH, int HS, float scale) {
    constexpr int D8 = HSP / 8, N8 = kFlashKeys / 8;  // channel and key groups of 8
    __shared__ __align__(16) float ks[kFlashKeys][HSP + kPad];  // +4: the fragment reads hit 32 banks
    __shared__ __align__(16) float vs[kFlashKeys][HSP + kPad];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const int i0 = blockIdx.x * kTcQueries, iw = i0 + warp * 16;
    // This warp's queries as A fragments, read once: qf[d] = rows g, g + 8, channels 8d + t, + 4.
    float qf[D8][4];
    #pragma unroll
    for (int d = 0; d < D8; d++)
        #pragma unroll
        for (int f = 0; f < 4; f++) {
            const int i = iw + g + 8 * (f % 2), c = 8 * d + t + 4 * (f / 2);
            qf[d][f] = i < T && c < HS ? q[((size_t)b * T + i) * C + h * HS + c] : 0.0f;
        }
    float o[D8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // [row g, row g + 8]
    const int kend = causal ? min(T, i0 + kTcQueries) : T;  // later keys are masked for the whole block
    for (int j0 = 0; j0 < kend; j0 += kFlashKeys) {
        __syncthreads();  // everyone is done with the previous tile
        load_rows<HSP>(ks, k, b, h, j0, T, C, HS);
        load_rows<HSP>(vs, v, b, h, j0, T, C, HS);
        __syncthreads();
        float S[N8][4] = {};
        #pragma unroll
        for (int d = 0; d < D8; d++)
            #pragma unroll
            for (int n = 0; n < N8; n++) {  // B = K^T: rows are channels, columns keys
                const float kb[2] = {ks[8 * n + g][8 * d + t], ks[8 * n + g][8 * d + t + 4]};
                mma_3xtf32(S[n], qf[d], kb);
            }
        // Online softmax per row, as v2; the 4 lanes of a quad hold one row's 32 keys.
        float tile_max[2] = {-INFINITY, -INFINITY};
        #pragma unroll
        for (int n = 0; n < N8; n++)
            #pragma unroll
            for (int f = 0; f < 4; f++) {
                const int i = iw + g + 8 * (f / 2), j = j0 + 8 * n + 2 * t + f % 2;
                const bool vis = i < T && j < T && visible(mask, causal, b, i, j, T);
                S[n][f] = vis ? S[n][f] * scale : -INFINITY;
                tile_max[f / 2] = fmaxf(tile_max[f / 2], S[n][f]);
            }
        float corr[2], m_new[2], sum[2] = {0.0f, 0.0f};
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
            // A row that sees no key of this tile keeps m, l and o (corr 1, weights 0).
            m_new[r] = tile_max[r] == -INFINITY ? m[r] : fmaxf(m[r], tile_max[r]);
            corr[r] = tile_max[r] == -INFINITY ? 1.0f : expf(m[r] - m_new[r]);  // 0 on the first visible tile
        }
        #pragma unroll
        for (int n = 0; n < N8; n++)
            #pragma unroll
            for (int r = 0; r < 2; r++) {
                float z[2];
                keep_factors_pair(z, p, s, key, bh, iw + g + 8 * r, j0 + 8 * n + 2 * t, T);
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    float& x = S[n][2 * r + e];
                    const float pj = x == -INFINITY ? 0.0f : expf(x - m_new[r]);
                    sum[r] += pj;
                    x = pj * z[e];  // S becomes P z
                }
            }
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
            sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
            l[r] = l[r] * corr[r] + sum[r];
            m[r] = m_new[r];
        }
        #pragma unroll
        for (int c = 0; c < D8; c++) o[c][0] *= corr[0], o[c][1] *= corr[0], o[c][2] *= corr[1], o[c][3] *= corr[1];
        #pragma unroll
        for (int n = 0; n < N8; n++) {
            const float pa[4] = {S[n][0], S[n][2], S[n][1], S[n][3]};  // k = t: key 2t; k = t + 4: key 2t + 1
            #pragma unroll
            for (int c = 0; c < D8; c++) {
                const float vb[2] = {vs[8 * n + 2 * t][8 * c + g], vs[8 * n + 2 * t + 1][8 * c + g]};
                mma_3xtf32(o[c], pa, vb);
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = iw + g + 8 * r;
        if (i >= T) continue;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;  // l == 0: no visible key, zero output
        #pragma unroll
        for (int c = 0; c < D8; c++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int ch = 8 * c + 2 * t + e;
                if (ch < HS) out[((size_t)b * T + i) * C + h * HS + ch] = o[c][2 * r + e] * inv;
            }
        if (t == 0) lse[(size_t)bh * T + i] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
    }
}

// ---- v2: flash-style backward ----
// With P_ij = exp(scale q_i . k_j - lse_i) and z_ij the dropout factor, out_i = sum_j P_ij z_ij v_j,
// so dv_j = sum_i P_ij z_ij do_i, dP_ij = z_ij (do_i . v_j) and the score gradient is
// dS_ij = P_ij (dP_ij - D_i) scale with D_i = sum_j P_ij dP_ij = do_i . out_i (dropout included,
// since out already carries the dropped weights). Then dq_i = sum_j dS_ij k_j, dk_j = sum_i dS_ij q_i.

// D[bh][i] = dout_i . out_i, one warp per query row (the layout of lse).
__global__ void flash_rowdot_kernel(float* D, const float* dout, const float* out, int64_t rows,
                                    int T, int NH, int HS) {
    const int lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    const int bh = (int)(row / T), i = (int)(row % T), b = bh / NH, h = bh % NH;
    const size_t off = ((size_t)b * T + i) * NH * HS + h * HS;
    float acc = 0.0f;
    for (int c = lane; c < HS; c += 32) acc += dout[off + c] * out[off + c];
    acc = warp_sum(acc);
    if (lane == 0) D[row] = acc;
}

// A pair (i, j): w = P_ij z_ij and ds = dS_ij from its score q_i . k_j and do_i . v_j, both formed
// by dot_rows, and its dropout factor z; zero where key j is not visible to query i.
__device__ inline void flash_pair(float& w, float& ds, bool vis, float qk, float dov, float z, float lse_i,
                                  float D_i, float scale) {
    w = ds = 0.0f;
    if (!vis) return;
    const float P = expf(qk * scale - lse_i);
    w = P * z;
    ds = P * (z * dov - D_i) * scale;
}

// dk and dv: a block holds W warps x 4 keys of one (b, h); tiles of 32 queries (one per lane) and
// their output gradients stand in shared memory, and each warp adds the tile's w_i do_i and
// ds_i q_i to its keys' sums, queries in increasing order.
template <int HSP>
__global__ void __launch_bounds__(32 * 4)
flash_dkdv_kernel(float* dk, float* dv, const float* dout, const float* lse, const float* D,
                  const float* q, const float* k, const float* v, const int32_t* mask, bool causal,
                  float p, float s, DropoutKey key, int T, int NH, int HS, float scale) {
    constexpr int R = HSP / 32, W = flash_warps(HSP, true);
    __shared__ __align__(16) float kw[W * kRows][HSP], vw[W * kRows][HSP];  // the block's keys and values
    __shared__ __align__(16) float qs[kFlashKeys][HSP + kPad], dos[kFlashKeys][HSP + kPad];
    __shared__ __align__(16) float ws[W][kRows][kFlashKeys], dss[W][kRows][kFlashKeys];
    __shared__ float lse_s[kFlashKeys], D_s[kFlashKeys];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const int j0 = blockIdx.x * W * kRows, jw = j0 + warp * kRows;  // the block's, the warp's first key
    load_rows<HSP>(kw, k, b, h, j0, T, C, HS);
    load_rows<HSP>(vw, v, b, h, j0, T, C, HS);
    float dka[kRows][R] = {}, dva[kRows][R] = {};
    for (int i0 = causal ? j0 : 0; i0 < T; i0 += kFlashKeys) {  // causal: queries < j0 see none
        __syncthreads();  // everyone is done with the previous tile (and kw, vw are written)
        load_rows<HSP>(qs, q, b, h, i0, T, C, HS);
        load_rows<HSP>(dos, dout, b, h, i0, T, C, HS);
        if (threadIdx.x < kFlashKeys) {
            const int i = i0 + threadIdx.x;
            lse_s[threadIdx.x] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
            D_s[threadIdx.x] = i < T ? D[(size_t)bh * T + i] : 0.0f;
        }
        __syncthreads();
        const int i = i0 + lane;
        float qk[kRows], dov[kRows], z[kRows];
        dot_rows<HSP>(qk, kw[warp * kRows], qs[lane]);
        dot_rows<HSP>(dov, vw[warp * kRows], dos[lane]);
        keep_factors_keys(z, p, s, key, bh, i, jw, T);
        #pragma unroll
        for (int a = 0; a < kRows; a++) {
            const int j = jw + a;
            const bool vis = j < T && i < T && visible(mask, causal, b, i, j, T);
            flash_pair(ws[warp][a][lane], dss[warp][a][lane], vis, qk[a], dov[a], z[a], lse_s[lane], D_s[lane], scale);
        }
        __syncwarp();  // the warp's weights are written
        add_weighted_rows<R>(dva, ws[warp], dos, lane);
        add_weighted_rows<R>(dka, dss[warp], qs, lane);
    }
    add_to_rows(dk, dka, jw, b, h, T, C, HS, lane);
    add_to_rows(dv, dva, jw, b, h, T, C, HS, lane);
}

// dq: a block holds W warps x 4 queries of one (b, h); tiles of 32 keys (one per lane), each warp
// adding the tile's ds_j k_j to its queries' sums, keys in increasing order.
template <int HSP>
__global__ void __launch_bounds__(32 * 4)
flash_dq_kernel(float* dq, const float* dout, const float* lse, const float* D, const float* q,
                const float* k, const float* v, const int32_t* mask, bool causal, float p, float s,
                DropoutKey key, int T, int NH, int HS, float scale) {
    constexpr int R = HSP / 32, W = flash_warps(HSP, true);
    __shared__ __align__(16) float qw[W * kRows][HSP], dow[W * kRows][HSP];  // the block's q_i and do_i
    __shared__ __align__(16) float ks[kFlashKeys][HSP + kPad], vs[kFlashKeys][HSP + kPad];
    __shared__ __align__(16) float dss[W][kRows][kFlashKeys];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const int i0 = blockIdx.x * W * kRows, iw = i0 + warp * kRows;  // the block's, the warp's first query
    load_rows<HSP>(qw, q, b, h, i0, T, C, HS);
    load_rows<HSP>(dow, dout, b, h, i0, T, C, HS);
    float lse_i[kRows], D_i[kRows];
    #pragma unroll
    for (int a = 0; a < kRows; a++) {
        const int i = iw + a;
        lse_i[a] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
        D_i[a] = i < T ? D[(size_t)bh * T + i] : 0.0f;
    }
    float dqa[kRows][R] = {};
    const int kend = causal ? min(T, i0 + W * kRows) : T;  // later keys are masked for the whole block
    for (int j0 = 0; j0 < kend; j0 += kFlashKeys) {
        __syncthreads();  // everyone is done with the previous tile (and qw, dow are written)
        load_rows<HSP>(ks, k, b, h, j0, T, C, HS);
        load_rows<HSP>(vs, v, b, h, j0, T, C, HS);
        __syncthreads();
        const int j = j0 + lane;
        float qk[kRows], dov[kRows], z[kRows];
        dot_rows<HSP>(qk, qw[warp * kRows], ks[lane]);
        dot_rows<HSP>(dov, dow[warp * kRows], vs[lane]);
        keep_factors_queries(z, p, s, key, bh, iw, j0, lane, T);
        #pragma unroll
        for (int a = 0; a < kRows; a++) {
            const int i = iw + a;
            const bool vis = i < T && j < T && visible(mask, causal, b, i, j, T);
            float w;
            flash_pair(w, dss[warp][a][lane], vis, qk[a], dov[a], z[a], lse_i[a], D_i[a], scale);
        }
        __syncwarp();  // the warp's weights are written
        add_weighted_rows<R>(dqa, dss[warp], ks, lane);
    }
    add_to_rows(dq, dqa, iw, b, h, T, C, HS, lane);
}

template <int HSP>
void flash_backward_launch(float* dq, float* dk, float* dv, const float* dout, const float* lse, const float* D,
                           const float* q, const float* k, const float* v, const int32_t* mask, bool causal,
                           float p, float s, const DropoutKey& key, int B, int T, int NH, int HS, float scale,
                           cudaStream_t stream) {
    constexpr int W = flash_warps(HSP, true);
    const dim3 grid = heads_grid(ceil_div(T, W * kRows), B, NH, "attention_backward_flash");
    if (dk || dv) {
        flash_dkdv_kernel<HSP><<<grid, 32 * W, 0, stream>>>(dk, dv, dout, lse, D, q, k, v, mask, causal, p, s,
                                                            key, T, NH, HS, scale);
        CUDA_CHECK_LAST();
    }
    if (dq) {
        flash_dq_kernel<HSP><<<grid, 32 * W, 0, stream>>>(dq, dout, lse, D, q, k, v, mask, causal, p, s, key,
                                                          T, NH, HS, scale);
        CUDA_CHECK_LAST();
    }
}

// Calls launch(std::integral_constant<int, HSP>()) for the padded head size the flash kernels
// are instantiated for (32, 64 or 128 channels) that holds HS. The one check of HS for every
// caller (the model's dev:: ops too): its message is what the CLI prints.
template <class Launch>
void with_padded_head(int HS, Launch&& launch) {
    if (HS > 128)
        throw std::runtime_error("--device cuda: attention head size " + std::to_string(HS) +
                                 " (hidden_size / num_attention_heads) is above 128, the most the CUDA "
                                 "attention kernels support; use --device cpu");
    if (HS <= 32) launch(std::integral_constant<int, 32>());
    else if (HS <= 64) launch(std::integral_constant<int, 64>());
    else launch(std::integral_constant<int, 128>());
}

// Dynamic shared memory for n floats, rounded up to whole float4s. ptxas (CUDA 13, sm_90) merges
// a loop's guarded remainder loads (qi[c], qi[c + 1], qi[c + 2]) into one 12-byte load, which reads
// past an array of HS = 26 floats: harmless on the H200, but compute-sanitizer's memcheck reports
// it (and aborts the kernel). The padding keeps every such load inside the allocation.
size_t smem_floats(int n) { return sizeof(float) * (((size_t)n + 3) & ~(size_t)3); }

void check_smem(int floats, const char* fn, int T) {
    if (floats > kMaxSmemFloats)
        throw std::runtime_error(std::string(fn) + " (CUDA v1): sequence length T = " + std::to_string(T) +
                                 " needs more than 48 KiB of shared memory per block");
}

}  // namespace

void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       const int32_t* mask, bool causal, float p, const DropoutKey& key,
                       int B, int T, int NH, int HS, cudaStream_t stream) {
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
    check_smem(T, "attention_forward", T);
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const dim3 grid = heads_grid(T, B, NH, "attention_forward");  // one block per query row (i, bh)
    scores_kernel<<<grid, kThreads, smem_floats(HS), stream>>>(att, q, k, mask, causal, T, NH, HS, scale);
    CUDA_CHECK_LAST();
    const int64_t rows = (int64_t)B * NH * T;
    softmax_kernel<<<(unsigned)ceil_div<int64_t>(rows, 8), 256, 0, stream>>>(att, rows, T);
    CUDA_CHECK_LAST();
    pv_kernel<<<grid, kThreads, smem_floats(T), stream>>>(out, att, v, p, s, key, T, NH, HS);
    CUDA_CHECK_LAST();
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                        const float* q, const float* k, const float* v, float p,
                        const DropoutKey& key, int B, int T, int NH, int HS, cudaStream_t stream) {
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0 || (!dq && !dk && !dv)) return;
    check_smem(2 * T, "attention_backward", T);
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const dim3 grid = heads_grid(T, B, NH, "attention_backward");
    float* dS = nullptr;  // (B, NH, T, T) scratch: the gradient of the scores
    if (dq || dk) {
        CUDA_CHECK(cudaMallocAsync(&dS, sizeof(float) * (size_t)B * NH * T * T, stream));
        dscores_kernel<<<grid, kThreads, smem_floats(HS), stream>>>(dS, dout, att, v, p, s, key, T, NH, HS, scale);
        CUDA_CHECK_LAST();
    }
    if (dq) {
        dq_kernel<<<grid, kThreads, 0, stream>>>(dq, dS, k, T, NH, HS);
        CUDA_CHECK_LAST();
    }
    if (dk || dv) {
        dkdv_kernel<<<grid, kThreads, smem_floats(2 * T), stream>>>(dk, dv, dS, att, q, dout, p, s, key, T, NH, HS);
        CUDA_CHECK_LAST();
    }
    if (dS) CUDA_CHECK(cudaFreeAsync(dS, stream));
}

void attention_forward_flash(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int32_t* mask, bool causal, float p, const DropoutKey& key,
                             int B, int T, int NH, int HS, cudaStream_t stream) {
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const dim3 grid = heads_grid(ceil_div(T, flash_warps(128, false) * kRows), B, NH, "attention_forward_flash");
    const dim3 block(32 * flash_warps(128, false));  // the same for every HSP
    with_padded_head(HS, [&](auto hsp) {
        constexpr int HSP = decltype(hsp)::value;
        flash_forward_kernel<HSP><<<grid, block, 0, stream>>>(out, lse, q, k, v, mask, causal, p, s, key, T, NH, HS, scale);
        CUDA_CHECK_LAST();
    });
}

void attention_forward_flash_tc(float* out, float* lse, const float* q, const float* k, const float* v,
                                const int32_t* mask, bool causal, float p, const DropoutKey& key,
                                int B, int T, int NH, int HS, cudaStream_t stream) {
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const dim3 grid = heads_grid(ceil_div(T, kTcQueries), B, NH, "attention_forward_flash_tc");
    with_padded_head(HS, [&](auto hsp) {
        constexpr int HSP = decltype(hsp)::value;
        flash_forward_tc_kernel<HSP><<<grid, 32 * kTcWarps, 0, stream>>>(out, lse, q, k, v, mask, causal, p, s, key,
                                                                        T, NH, HS, scale);
        CUDA_CHECK_LAST();
    });
}

void attention_backward_flash(float* dq, float* dk, float* dv, const float* dout, const float* out,
                              const float* lse, const float* q, const float* k, const float* v,
                              const int32_t* mask, bool causal, float p, const DropoutKey& key,
                              int B, int T, int NH, int HS, cudaStream_t stream) {
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0 || (!dq && !dk && !dv)) return;
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    with_padded_head(HS, [&](auto hsp) {
        const int64_t rows = (int64_t)B * NH * T;
        float* D = nullptr;  // (B, NH, T) scratch: dout_i . out_i
        CUDA_CHECK(cudaMallocAsync(&D, sizeof(float) * rows, stream));
        flash_rowdot_kernel<<<(unsigned)ceil_div<int64_t>(rows, 8), 256, 0, stream>>>(D, dout, out, rows, T, NH, HS);
        CUDA_CHECK_LAST();
        flash_backward_launch<decltype(hsp)::value>(dq, dk, dv, dout, lse, D, q, k, v, mask, causal, p, s, key, B, T,
                                                    NH, HS, scale, stream);
        CUDA_CHECK(cudaFreeAsync(D, stream));
    });
}

}  // namespace cuda
}  // namespace ops
