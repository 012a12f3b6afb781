// kernels/cuda/gemm.cu — matrix multiply on the GPU, SGEMM_CUDA style: numbered versions, each
// a little longer than the last, all with the CPU semantics (C = alpha op(A) op(B) + beta C
// + bias, row-major, transA/transB, any M, N, K) and all checked against kernels/cpu/gemm.cpp.
// Every version sums each C[m][n] over k in increasing order, so they differ from the CPU only
// by the GPU's fused multiply-adds. bias_backward sits here too (column sums of dout).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"

#include <cuda_bf16.h>

#include <cstdint>

namespace ops {
namespace cuda {

namespace {

// Element (m, k) of op(A) and (k, n) of op(B), whatever the storage.
__device__ inline float load_a(const float* A, int m, int k, int M, int K, bool transA) {
    return transA ? A[(size_t)k * M + m] : A[(size_t)m * K + k];
}
__device__ inline float load_b(const float* B, int k, int n, int N, int K, bool transB) {
    return transB ? B[(size_t)n * K + k] : B[(size_t)k * N + n];
}

// The epilogue shared by every version. beta == 0 never reads C, so NaNs there vanish.
__device__ inline void store_c(float* C, float acc, const float* bias, int m, int n, int N,
                               float alpha, float beta) {
    float* c = C + (size_t)m * N + n;
    float r = alpha * acc;
    if (beta != 0.0f) r += beta * *c;
    if (bias) r += bias[n];
    *c = r;
}

// ---- v1: naive — one thread per C element; threadIdx.x runs along n so B and C reads coalesce.
__global__ void gemm_naive_kernel(float* C, const float* A, const float* B, const float* bias,
                                  int M, int N, int K, bool transA, bool transB, float alpha,
                                  float beta) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += load_a(A, m, k, M, K, transA) * load_b(B, k, n, N, K, transB);
    store_c(C, acc, bias, m, n, N, alpha, beta);
}

// ---- v2: shared-memory tiles — a 32x32 block stages 32x32 tiles of op(A) and op(B), so each
// global element is read once per tile instead of once per output: 32x less global traffic.
constexpr int T2 = 32;
__global__ void gemm_smem_tiles_kernel(float* C, const float* A, const float* B, const float* bias,
                                       int M, int N, int K, bool transA, bool transB, float alpha,
                                       float beta) {
    __shared__ float As[T2][T2 + 1];  // As[r][c] = op(A)[m0 + r][k0 + c]; +1 avoids bank conflicts
    __shared__ float Bs[T2][T2 + 1];  // Bs[r][c] = op(B)[k0 + r][n0 + c]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int m0 = blockIdx.y * T2, n0 = blockIdx.x * T2;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T2) {
        // Consecutive tx read consecutive addresses in every storage order; out-of-range is 0
        // (needed under tile quantization: M, N, K need not be multiples of 32).
        if (!transA) As[ty][tx] = (m0 + ty < M && k0 + tx < K) ? A[(size_t)(m0 + ty) * K + k0 + tx] : 0.0f;
        else         As[tx][ty] = (m0 + tx < M && k0 + ty < K) ? A[(size_t)(k0 + ty) * M + m0 + tx] : 0.0f;
        if (!transB) Bs[ty][tx] = (k0 + ty < K && n0 + tx < N) ? B[(size_t)(k0 + ty) * N + n0 + tx] : 0.0f;
        else         Bs[tx][ty] = (k0 + tx < K && n0 + ty < N) ? B[(size_t)(n0 + ty) * K + k0 + tx] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < T2; kk++) acc += As[ty][kk] * Bs[kk][tx];
        __syncthreads();
    }
    if (m0 + ty < M && n0 + tx < N) store_c(C, acc, bias, m0 + ty, n0 + tx, N, alpha, beta);
}

// ---- v3: register tiles — a 128x128 block tile, each of 256 threads computing an 8x8 patch
// from registers: 16 shared-memory loads feed 64 FMAs. Global loads are float4 when the
// leading dimension is a multiple of 4 and the pointer 16-byte aligned, scalar otherwise. The
// next k-tile waits in registers while this one is computed (two shared buffers alternate).
constexpr int BM3 = 128, BN3 = 128, BK3 = 8;

// Rows [r0, r0+128) x k [k0, k0+8) of a matrix X (zeros outside), 4 consecutive floats per
// thread. X holds element (r, k) at X[r*K + k] when k_contig (A as stored, or B when
// transposed), else at X[k*R + r]. store() writes them to S[k][r].
struct Tile3 {
    float x[4];
    int r, k;   // where this thread's run starts: along k (k_contig) or along r
    __device__ Tile3(bool k_contig, int tid)
        : r(k_contig ? tid / 2 : (tid % 32) * 4), k(k_contig ? (tid % 2) * 4 : tid / 32) {}
    __device__ void load(const float* X, int R, int K, int r0, int k0, bool k_contig, bool vec) {
        const int gr = r0 + r, gk = k0 + k;
        const float* p = k_contig ? X + (size_t)gr * K + gk : X + (size_t)gk * R + gr;
        if (vec && gr < R && gk < K) {  // vec: the run's dimension is a multiple of 4
            const float4 v = *reinterpret_cast<const float4*>(p);
            x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        } else {
            for (int i = 0; i < 4; i++)
                x[i] = (k_contig ? gr < R && gk + i < K : gr + i < R && gk < K) ? p[i] : 0.0f;
        }
    }
    __device__ void store(float (*S)[BM3], bool k_contig) const {
        if (k_contig) S[k][r] = x[0], S[k + 1][r] = x[1], S[k + 2][r] = x[2], S[k + 3][r] = x[3];
        else *reinterpret_cast<float4*>(&S[k][r]) = make_float4(x[0], x[1], x[2], x[3]);
    }
};

// Thread (ty, tx) owns rows {ty*4 .. ty*4+3, 64+ty*4 .. 64+ty*4+3} and the same pattern of
// columns: neighbouring threads then read neighbouring float4s of shared memory, no conflicts.
__device__ inline int patch_index(int t, int i) { return i < 4 ? t * 4 + i : 64 + t * 4 + (i - 4); }

__global__ void __launch_bounds__(256)
gemm_register_tiles_kernel(float* C, const float* A, const float* B, const float* bias, int M,
                           int N, int K, bool transA, bool transB, float alpha, float beta,
                           bool vecA, bool vecB) {
    __shared__ __align__(16) float As[2][BK3][BM3];  // As[k][m]
    __shared__ __align__(16) float Bs[2][BK3][BN3];  // Bs[k][n]
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM3, n0 = blockIdx.x * BN3;
    float acc[8][8] = {};
    Tile3 ta(!transA, tid), tb(transB, tid);
    ta.load(A, M, K, m0, 0, !transA, vecA), tb.load(B, N, K, n0, 0, transB, vecB);
    ta.store(As[0], !transA), tb.store(Bs[0], transB);
    __syncthreads();
    for (int k0 = 0, buf = 0; k0 < K; k0 += BK3, buf ^= 1) {
        const bool next = k0 + BK3 < K;
        if (next) ta.load(A, M, K, m0, k0 + BK3, !transA, vecA), tb.load(B, N, K, n0, k0 + BK3, transB, vecB);
        #pragma unroll
        for (int kk = 0; kk < BK3; kk++) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][kk][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][kk][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
            #pragma unroll
            for (int i = 0; i < 8; i++)
                #pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] += a[i] * b[j];
        }
        // The other buffer was last read before the previous barrier: safe to fill now.
        if (next) ta.store(As[buf ^ 1], !transA), tb.store(Bs[buf ^ 1], transB);
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        const int m = m0 + patch_index(ty, i);
        if (m >= M) continue;
        #pragma unroll
        for (int j = 0; j < 8; j++) {
            const int n = n0 + patch_index(tx, j);
            if (n < N) store_c(C, acc[i][j], bias, m, n, N, alpha, beta);
        }
    }
}

// ---- v4: bf16 tensor cores — mma.sync m16n8k16 (bf16 x bf16 -> fp32). The fp32 inputs are
// rounded to bf16 while being staged in shared memory (no bf16 copies in global memory), so
// the result carries bf16 input rounding (~3 significant digits). 8 warps, each 64x32 of C.
// The next k-tile is loaded into registers (float4s where the layout allows) while the tensor
// cores work on this one, and two shared buffers alternate: global latency hides behind MMAs.
constexpr int BM4 = 128, BN4 = 128, BK4 = 32, PAD4 = 8;  // PAD4: conflict-free fragment reads
typedef __nv_bfloat16 TileBF16[BM4][BK4 + PAD4];         // S[r][k]: 128 rows, k contiguous

// Registers holding one 128x32 tile of X, whose element (r, k) is at X[r*K + k] when k_contig,
// else at X[k*R + r]: 4 runs of 4 floats per thread, along k or along r (zeros outside R x K).
struct TileRegs {
    float x[4][4];
    __device__ void load(const float* X, int R, int K, int r0, int k0, bool k_contig, bool vec, int tid) {
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const int idx = tid + i * 256;   // which run: consecutive threads, consecutive addresses
            const int r = k_contig ? idx / 8 : (idx % 32) * 4, k = k_contig ? (idx % 8) * 4 : idx / 32;
            const int gr = r0 + r, gk = k0 + k;
            const float* p = k_contig ? X + (size_t)gr * K + gk : X + (size_t)gk * R + gr;
            if (vec && gr < R && gk < K) {   // vec: the run's dimension is a multiple of 4
                const float4 v = *reinterpret_cast<const float4*>(p);
                x[i][0] = v.x, x[i][1] = v.y, x[i][2] = v.z, x[i][3] = v.w;
            } else {
                #pragma unroll
                for (int j = 0; j < 4; j++) {
                    const bool in = k_contig ? gr < R && gk + j < K : gr + j < R && gk < K;
                    x[i][j] = in ? p[j] : 0.0f;
                }
            }
        }
    }
    __device__ void store(TileBF16& S, bool k_contig, int tid) const {
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const int idx = tid + i * 256;
            const int r = k_contig ? idx / 8 : (idx % 32) * 4, k = k_contig ? (idx % 8) * 4 : idx / 32;
            #pragma unroll
            for (int j = 0; j < 4; j++) S[k_contig ? r : r + j][k_contig ? k + j : k] = __float2bfloat16(x[i][j]);
        }
    }
};

__device__ inline void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two consecutive bf16 (k, k+1) of a shared row as one 32-bit fragment register.
__device__ inline uint32_t pair(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Two blocks per SM (<= 128 registers): twice the loads in flight of one.
__global__ void __launch_bounds__(256, 2)
gemm_bf16_mma_kernel(float* C, const float* A, const float* B, const float* bias, int M, int N,
                     int K, bool transA, bool transB, float alpha, float beta, bool vecA, bool vecB) {
    __shared__ __align__(16) TileBF16 As[2], Bs[2];  // As[m][k]; Bs[n][k]: the "col" operand
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;  // the PTX fragment layout's groupID, threadID_in_group
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
    const int m0 = blockIdx.y * BM4, n0 = blockIdx.x * BN4;
    float acc[4][4][4] = {};  // [m16 tile][n8 tile][fragment]
    TileRegs ra, rb;
    ra.load(A, M, K, m0, 0, !transA, vecA, tid), rb.load(B, N, K, n0, 0, transB, vecB, tid);
    ra.store(As[0], !transA, tid), rb.store(Bs[0], transB, tid);
    __syncthreads();
    for (int k0 = 0, buf = 0; k0 < K; k0 += BK4, buf ^= 1) {
        const bool next = k0 + BK4 < K;
        if (next) ra.load(A, M, K, m0, k0 + BK4, !transA, vecA, tid), rb.load(B, N, K, n0, k0 + BK4, transB, vecB, tid);
        #pragma unroll
        for (int kk = 0; kk < BK4; kk += 16) {
            uint32_t a[4][4], b[4][2];
            #pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                const int r = wm + mi * 16 + g;
                a[mi][0] = pair(&As[buf][r][kk + 2 * t]);
                a[mi][1] = pair(&As[buf][r + 8][kk + 2 * t]);
                a[mi][2] = pair(&As[buf][r][kk + 2 * t + 8]);
                a[mi][3] = pair(&As[buf][r + 8][kk + 2 * t + 8]);
            }
            #pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int c = wn + ni * 8 + g;
                b[ni][0] = pair(&Bs[buf][c][kk + 2 * t]);
                b[ni][1] = pair(&Bs[buf][c][kk + 2 * t + 8]);
            }
            #pragma unroll
            for (int mi = 0; mi < 4; mi++)
                #pragma unroll
                for (int ni = 0; ni < 4; ni++) mma_bf16_16816(acc[mi][ni], a[mi], b[ni]);
        }
        // The other buffer was last read before the previous barrier: safe to fill now.
        if (next) ra.store(As[buf ^ 1], !transA, tid), rb.store(Bs[buf ^ 1], transB, tid);
        __syncthreads();
    }
    // Accumulator fragment: d0, d1 at (g, 2t), (g, 2t+1); d2, d3 eight rows below.
    #pragma unroll
    for (int mi = 0; mi < 4; mi++)
        #pragma unroll
        for (int ni = 0; ni < 4; ni++)
            #pragma unroll
            for (int f = 0; f < 4; f++) {
                const int m = m0 + wm + mi * 16 + g + (f / 2) * 8;
                const int n = n0 + wn + ni * 8 + 2 * t + f % 2;
                if (m < M && n < N) store_c(C, acc[mi][ni][f], bias, m, n, N, alpha, beta);
            }
}

// dbias[c] += sum over rows of dout[:, c]. Block (32, 8): 32 columns, 8 row groups; each
// thread sums rows ty, ty+8, ... in order, then the 8 partials are added in ty order.
__global__ void column_sum_kernel(float* dbias, const float* dout, int N, int OC) {
    __shared__ float partial[8][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < OC)
        for (int n = threadIdx.y; n < N; n += 8) s += dout[(size_t)n * OC + c];
    partial[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        float total = 0.0f;
        #pragma unroll
        for (int i = 0; i < 8; i++) total += partial[i][threadIdx.x];
        dbias[c] += total;
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void gemm_v1_naive(float* C, const float* A, const float* B, const float* bias, int M, int N,
                   int K, bool transA, bool transB, float alpha, float beta, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    const dim3 block(32, 8), grid(ceil_div(N, 32), ceil_div(M, 8));
    gemm_naive_kernel<<<grid, block, 0, stream>>>(C, A, B, bias, M, N, K, transA, transB, alpha, beta);
    CUDA_CHECK_LAST();
}

void gemm_v2_smem_tiles(float* C, const float* A, const float* B, const float* bias, int M, int N,
                        int K, bool transA, bool transB, float alpha, float beta,
                        cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    const dim3 block(T2, T2), grid(ceil_div(N, T2), ceil_div(M, T2));
    gemm_smem_tiles_kernel<<<grid, block, 0, stream>>>(C, A, B, bias, M, N, K, transA, transB, alpha, beta);
    CUDA_CHECK_LAST();
}

void gemm_v3_register_tiles(float* C, const float* A, const float* B, const float* bias, int M,
                            int N, int K, bool transA, bool transB, float alpha, float beta,
                            cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    // float4 loads need the contiguous dimension to be a multiple of 4 and a 16-byte base.
    const bool vecA = aligned16(A) && (transA ? M : K) % 4 == 0;
    const bool vecB = aligned16(B) && (transB ? K : N) % 4 == 0;
    const dim3 grid(ceil_div(N, BN3), ceil_div(M, BM3));
    gemm_register_tiles_kernel<<<grid, 256, 0, stream>>>(C, A, B, bias, M, N, K, transA, transB,
                                                         alpha, beta, vecA, vecB);
    CUDA_CHECK_LAST();
}

void gemm_v4_bf16_mma(float* C, const float* A, const float* B, const float* bias, int M, int N,
                      int K, bool transA, bool transB, float alpha, float beta,
                      cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    const bool vecA = aligned16(A) && (transA ? M : K) % 4 == 0;
    const bool vecB = aligned16(B) && (transB ? K : N) % 4 == 0;
    const dim3 grid(ceil_div(N, BN4), ceil_div(M, BM4));
    gemm_bf16_mma_kernel<<<grid, 256, 0, stream>>>(C, A, B, bias, M, N, K, transA, transB, alpha, beta,
                                                   vecA, vecB);
    CUDA_CHECK_LAST();
}

void gemm(float* C, const float* A, const float* B, const float* bias, int M, int N, int K,
          bool transA, bool transB, float alpha, float beta, cudaStream_t stream) {
    gemm_v3_register_tiles(C, A, B, bias, M, N, K, transA, transB, alpha, beta, stream);
}

void bias_backward(float* dbias, const float* dout, int N, int OC, cudaStream_t stream) {
    if (OC <= 0) return;
    column_sum_kernel<<<ceil_div(OC, 32), dim3(32, 8), 0, stream>>>(dbias, dout, N, OC);
    CUDA_CHECK_LAST();
}

}  // namespace cuda
}  // namespace ops
