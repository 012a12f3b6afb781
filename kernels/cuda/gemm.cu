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
// leading dimension is a multiple of 4 and the pointer 16-byte aligned, scalar otherwise.
constexpr int BM3 = 128, BN3 = 128, BK3 = 8;

// Stages rows [r0, r0+128) x k [k0, k0+8) of a matrix X into S[k][r] (zero outside). X holds
// element (r, k) at X[r*K + k] when k_contig (A as stored, or B when transposed), else at
// X[k*R + r]. Each of the 256 threads loads 4 consecutive floats.
__device__ inline void load_tile(float (*S)[BM3], const float* X, int R, int K, int r0, int k0,
                                 bool k_contig, bool vec, int tid) {
    if (k_contig) {
        const int r = tid / 2, kq = (tid % 2) * 4;
        const int gr = r0 + r, gk = k0 + kq;
        if (vec && gr < R && gk < K) {  // vec implies K % 4 == 0, so gk + 3 < K
            const float4 x = *reinterpret_cast<const float4*>(X + (size_t)gr * K + gk);
            S[kq][r] = x.x, S[kq + 1][r] = x.y, S[kq + 2][r] = x.z, S[kq + 3][r] = x.w;
        } else {
            for (int i = 0; i < 4; i++)
                S[kq + i][r] = (gr < R && gk + i < K) ? X[(size_t)gr * K + gk + i] : 0.0f;
        }
    } else {
        const int k = tid / 32, rq = (tid % 32) * 4;
        const int gk = k0 + k, gr = r0 + rq;
        if (vec && gk < K && gr < R) {  // vec implies R % 4 == 0, so gr + 3 < R
            *reinterpret_cast<float4*>(&S[k][rq]) = *reinterpret_cast<const float4*>(X + (size_t)gk * R + gr);
        } else {
            for (int i = 0; i < 4; i++)
                S[k][rq + i] = (gk < K && gr + i < R) ? X[(size_t)gk * R + gr + i] : 0.0f;
        }
    }
}

// Thread (ty, tx) owns rows {ty*4 .. ty*4+3, 64+ty*4 .. 64+ty*4+3} and the same pattern of
// columns: neighbouring threads then read neighbouring float4s of shared memory, no conflicts.
__device__ inline int patch_index(int t, int i) { return i < 4 ? t * 4 + i : 64 + t * 4 + (i - 4); }

__global__ void __launch_bounds__(256)
gemm_register_tiles_kernel(float* C, const float* A, const float* B, const float* bias, int M,
                           int N, int K, bool transA, bool transB, float alpha, float beta,
                           bool vecA, bool vecB) {
    __shared__ __align__(16) float As[BK3][BM3];  // As[k][m]
    __shared__ __align__(16) float Bs[BK3][BN3];  // Bs[k][n]
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM3, n0 = blockIdx.x * BN3;
    float acc[8][8] = {};
    for (int k0 = 0; k0 < K; k0 += BK3) {
        load_tile(As, A, M, K, m0, k0, !transA, vecA, tid);
        load_tile(Bs, B, N, K, n0, k0, transB, vecB, tid);
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < BK3; kk++) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[kk][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[kk][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[kk][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
            #pragma unroll
            for (int i = 0; i < 8; i++)
                #pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] += a[i] * b[j];
        }
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
constexpr int BM4 = 128, BN4 = 128, BK4 = 32, PAD4 = 8;  // PAD4: conflict-free fragment reads

__device__ inline void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two consecutive bf16 (k, k+1) of a shared row as one 32-bit fragment register.
__device__ inline uint32_t pair(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__global__ void __launch_bounds__(256)
gemm_bf16_mma_kernel(float* C, const float* A, const float* B, const float* bias, int M, int N,
                     int K, bool transA, bool transB, float alpha, float beta) {
    __shared__ __align__(16) __nv_bfloat16 As[BM4][BK4 + PAD4];  // As[m][k]
    __shared__ __align__(16) __nv_bfloat16 Bs[BN4][BK4 + PAD4];  // Bs[n][k]: "col" operand
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;  // the PTX fragment layout's groupID, threadID_in_group
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
    const int m0 = blockIdx.y * BM4, n0 = blockIdx.x * BN4;
    float acc[4][4][4] = {};  // [m16 tile][n8 tile][fragment]
    for (int k0 = 0; k0 < K; k0 += BK4) {
        // Consecutive threads read consecutive global addresses for either storage order.
        for (int idx = tid; idx < BM4 * BK4; idx += 256) {
            const int r = transA ? idx % BM4 : idx / BK4, k = transA ? idx / BM4 : idx % BK4;
            const float x = (m0 + r < M && k0 + k < K) ? load_a(A, m0 + r, k0 + k, M, K, transA) : 0.0f;
            As[r][k] = __float2bfloat16(x);
        }
        for (int idx = tid; idx < BN4 * BK4; idx += 256) {
            const int r = transB ? idx / BK4 : idx % BN4, k = transB ? idx % BK4 : idx / BN4;
            const float x = (n0 + r < N && k0 + k < K) ? load_b(B, k0 + k, n0 + r, N, K, transB) : 0.0f;
            Bs[r][k] = __float2bfloat16(x);
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < BK4; kk += 16) {
            uint32_t a[4][4], b[4][2];
            #pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                const int r = wm + mi * 16 + g;
                a[mi][0] = pair(&As[r][kk + 2 * t]);
                a[mi][1] = pair(&As[r + 8][kk + 2 * t]);
                a[mi][2] = pair(&As[r][kk + 2 * t + 8]);
                a[mi][3] = pair(&As[r + 8][kk + 2 * t + 8]);
            }
            #pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int c = wn + ni * 8 + g;
                b[ni][0] = pair(&Bs[c][kk + 2 * t]);
                b[ni][1] = pair(&Bs[c][kk + 2 * t + 8]);
            }
            #pragma unroll
            for (int mi = 0; mi < 4; mi++)
                #pragma unroll
                for (int ni = 0; ni < 4; ni++) mma_bf16_16816(acc[mi][ni], a[mi], b[ni]);
        }
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
    const dim3 grid(ceil_div(N, BN4), ceil_div(M, BM4));
    gemm_bf16_mma_kernel<<<grid, 256, 0, stream>>>(C, A, B, bias, M, N, K, transA, transB, alpha, beta);
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
