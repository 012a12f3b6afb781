// kernels/cuda/gemm.cu — matrix multiply on the GPU, SGEMM_CUDA style: numbered versions, each
// a little longer than the last, all with the CPU semantics (C = alpha op(A) op(B) + beta C
// + bias, row-major, transA/transB, any M, N, K) and all checked against kernels/cpu/gemm.cpp.
// Every version sums each C[m][n] over k in increasing order, so they differ from the CPU only
// by the GPU's fused multiply-adds. bias_backward sits here too (column sums of dout).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"

#include <cuda_bf16.h>

#include <algorithm>
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

// ---- v4: bf16 tensor cores — mma.sync m16n8k16 (bf16 x bf16 -> fp32 accumulate), fed the way
// fast Ampere GEMMs feed it. A pre-pass rounds op(A) and op(B) to bf16 into k-contiguous copies,
// zero-padded to whole tiles: the transposes and the edges are dealt with there, once, and the
// main loop has no edge cases. cp.async streams 16-byte chunks of later k-tiles into a 3-stage
// shared-memory ring while the tensor cores work on an older stage, and one ldmatrix loads four
// 8x8 fragments. 4 warps, each computing 64x64 of the 128x128 block tile.
constexpr int BM4 = 128, BN4 = 128, BK4 = 32, STAGES4 = 3;

// out[r][k] = bf16(X(r, k)) for r < gridDim.y * 32, k < Kp, zero outside R x K, where X(r, k) is
// X[r*K + k] when k_contig, else X[k*R + r]. A 32x32 tile passes through shared memory so that
// reads and writes both coalesce, whichever the layout. Block (32, 8).
__global__ void to_bf16_padded_kernel(__nv_bfloat16* out, const float* X, int R, int K, int Kp, bool k_contig) {
    __shared__ float tile[32][33];  // tile[r][k]; +1: the transposed accesses avoid bank conflicts
    const int tx = threadIdx.x, r0 = blockIdx.y * 32, k0 = blockIdx.x * 32;
    for (int i = threadIdx.y; i < 32; i += 8) {
        if (k_contig) tile[i][tx] = r0 + i < R && k0 + tx < K ? X[(size_t)(r0 + i) * K + k0 + tx] : 0.0f;
        else          tile[tx][i] = r0 + tx < R && k0 + i < K ? X[(size_t)(k0 + i) * R + r0 + tx] : 0.0f;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) out[(size_t)(r0 + i) * Kp + k0 + tx] = __float2bfloat16(tile[i][tx]);
}

// A stage holds 128 rows x 4 chunks of 8 bf16 (16 bytes). Chunk c of row r is stored at chunk
// c ^ ((r / 2) % 4): the 8 rows that one ldmatrix phase reads at the same k then fall in 8
// different 16-byte bank groups (unswizzled, rows r and r + 2 would collide: 4-way conflicts).
__device__ inline int swizzle(int r, int c) { return r * BK4 + ((c ^ (r >> 1)) & 3) * 8; }

__device__ inline void cp_async16(void* smem, const void* gmem) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Lanes 8j .. 8j+7 give the addresses of the 8 rows (16 bytes each) of matrix j; register j of
// lane 4g + t receives row g, bf16 columns 2t and 2t + 1 of matrix j: a fragment of mma.sync.
__device__ inline void ldmatrix_x4(uint32_t* r, const void* smem) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ inline void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// C (M, N) = alpha Ab Bb^T + beta C + bias, where Ab (Mp, Kp) and Bb (Np, Kp) come from the
// pre-pass. 3 stages x 16 KiB of shared memory; two blocks per SM.
__global__ void __launch_bounds__(128, 2)
gemm_bf16_mma_kernel(float* C, const __nv_bfloat16* Ab, const __nv_bfloat16* Bb, const float* bias,
                     int M, int N, int Kp, float alpha, float beta) {
    __shared__ __align__(128) __nv_bfloat16 As[STAGES4][BM4 * BK4], Bs[STAGES4][BN4 * BK4];  // [r][k], swizzled
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = (warp / 2) * 64, wn = (warp % 2) * 64;  // this warp's 64x64 of the block tile
    const int m0 = blockIdx.y * BM4, n0 = blockIdx.x * BN4;
    const __nv_bfloat16 *a_src = Ab + (size_t)m0 * Kp, *b_src = Bb + (size_t)n0 * Kp;
    // k-tile kt into stage s: 512 chunks of A and 512 of B, 4 + 4 per thread, consecutive
    // threads taking consecutive chunks of a row.
    auto load_tile = [&](int s, int kt) {
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const int idx = tid + i * 128, r = idx / 4, c = idx % 4;
            const size_t off = (size_t)r * Kp + kt * BK4 + c * 8;
            cp_async16(&As[s][swizzle(r, c)], a_src + off);
            cp_async16(&Bs[s][swizzle(r, c)], b_src + off);
        }
    };
    float acc[4][8][4] = {};  // [m16 tile][n8 tile][fragment]
    const int KT = Kp / BK4;
    // Warmup: the first STAGES4 - 1 tiles in flight, one commit group each (empty past the end,
    // so that "wait until STAGES4 - 2 groups remain" below always means "tile kt has landed").
    #pragma unroll
    for (int s = 0; s < STAGES4 - 1; s++) {
        if (s < KT) load_tile(s, s);
        cp_async_commit();
    }
    // Steady: wait for tile kt, refill the stage tile kt - 1 used with tile kt + STAGES4 - 1,
    // multiply tile kt.
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<STAGES4 - 2>();  // this thread's chunks of tile kt have landed ...
        __syncthreads();               // ... and everyone's; and nobody still reads tile kt - 1
        if (kt + STAGES4 - 1 < KT) load_tile((kt + STAGES4 - 1) % STAGES4, kt + STAGES4 - 1);
        cp_async_commit();
        const __nv_bfloat16 *as = As[kt % STAGES4], *bs = Bs[kt % STAGES4];
        #pragma unroll
        for (int kc = 0; kc < BK4 / 8; kc += 2) {  // one k16 step = chunks kc, kc + 1
            uint32_t a[4][4], b[4][4];
            // A's matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15), in the order a0 a1 a2 a3 of the
            // fragment: lane l addresses row l % 16 at chunk kc + l / 16.
            #pragma unroll
            for (int mi = 0; mi < 4; mi++) ldmatrix_x4(a[mi], &as[swizzle(wm + mi * 16 + lane % 16, kc + lane / 16)]);
            // B's rows are n, its chunks k (the "col" operand): matrices (n 0-7, k 0-7), (n 0-7,
            // k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) are b0 b1 of two n8 tiles.
            #pragma unroll
            for (int nj = 0; nj < 4; nj++)
                ldmatrix_x4(b[nj], &bs[swizzle(wn + nj * 16 + lane / 16 * 8 + lane % 8, kc + lane / 8 % 2)]);
            #pragma unroll
            for (int mi = 0; mi < 4; mi++)
                #pragma unroll
                for (int ni = 0; ni < 8; ni++) mma_bf16_16816(acc[mi][ni], a[mi], &b[ni / 2][ni % 2 * 2]);
        }
    }
    cp_async_wait<0>();  // Cooldown: only empty groups are left; no thread exits with copies in flight
    // Accumulator fragment: d0, d1 at (g, 2t), (g, 2t + 1); d2, d3 eight rows below.
    const int g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int mi = 0; mi < 4; mi++)
        #pragma unroll
        for (int ni = 0; ni < 8; ni++)
            #pragma unroll
            for (int f = 0; f < 4; f++) {
                const int m = m0 + wm + mi * 16 + g + f / 2 * 8, n = n0 + wn + ni * 8 + 2 * t + f % 2;
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
    const int Mp = ceil_div(M, BM4) * BM4, Np = ceil_div(N, BN4) * BN4, Kp = ceil_div(std::max(K, 0), BK4) * BK4;
    __nv_bfloat16* ws = nullptr;  // (Mp, Kp) then (Np, Kp); stream-ordered, so reused from the pool
    if (Kp > 0) {
        CUDA_CHECK(cudaMallocAsync(&ws, sizeof(__nv_bfloat16) * (size_t)(Mp + Np) * Kp, stream));
        to_bf16_padded_kernel<<<dim3(Kp / 32, Mp / 32), dim3(32, 8), 0, stream>>>(ws, A, M, K, Kp, !transA);
        CUDA_CHECK_LAST();
        to_bf16_padded_kernel<<<dim3(Kp / 32, Np / 32), dim3(32, 8), 0, stream>>>(ws + (size_t)Mp * Kp, B, N, K, Kp,
                                                                                  transB);
        CUDA_CHECK_LAST();
    }
    gemm_bf16_mma_kernel<<<dim3(Np / BN4, Mp / BM4), 128, 0, stream>>>(C, ws, ws + (size_t)Mp * Kp, bias, M, N, Kp,
                                                                       alpha, beta);
    CUDA_CHECK_LAST();
    if (ws) CUDA_CHECK(cudaFreeAsync(ws, stream));
}

void gemm(float* C, const float* A, const float* B, const float* bias, int M, int N, int K,
          bool transA, bool transB, float alpha, float beta, cudaStream_t stream) {
    gemm_v3_register_tiles(C, A, B, bias, M, N, K, transA, transB, alpha, beta, stream);
}

// The bf16 op (--dtype bf16) is the tensor-core version.
void gemm_bf16(float* C, const float* A, const float* B, const float* bias, int M, int N, int K,
               bool transA, bool transB, float alpha, float beta, cudaStream_t stream) {
    gemm_v4_bf16_mma(C, A, B, bias, M, N, K, transA, transB, alpha, beta, stream);
}

void bias_backward(float* dbias, const float* dout, int N, int OC, cudaStream_t stream) {
    if (OC <= 0) return;
    column_sum_kernel<<<ceil_div(OC, 32), dim3(32, 8), 0, stream>>>(dbias, dout, N, OC);
    CUDA_CHECK_LAST();
}

}  // namespace cuda
}  // namespace ops
