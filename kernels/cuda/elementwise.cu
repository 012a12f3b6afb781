// kernels/cuda/elementwise.cu — activations, elementwise helpers and the embedding lookup:
// one thread per element, the formulas of kernels/cpu/activations.cpp and embedding.cpp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"
#include "kernels/bf16.hpp"

namespace ops {
namespace cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

__global__ void gelu_forward_kernel(float* out, const float* inp, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * kInvSqrt2));
}
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float x = inp[i];
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));  // d/dx [x Phi(x)] = Phi(x) + x phi(x)
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    dinp[i] += (cdf + x * pdf) * dout[i];
}
__global__ void relu_forward_kernel(float* out, const float* inp, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}
__global__ void relu_backward_kernel(float* dinp, const float* inp, const float* dout, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}
__global__ void tanh_forward_kernel(float* out, const float* inp, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = tanhf(inp[i]);
}
__global__ void tanh_backward_kernel(float* dinp, const float* out, const float* dout, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) dinp[i] += (1.0f - out[i] * out[i]) * dout[i];
}
__global__ void add_kernel(float* out, const float* a, const float* b, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = a[i] + b[i];
}
__global__ void accumulate_kernel(float* out, const float* inp, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] += inp[i];
}
__global__ void scale_kernel(float* x, float s, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) x[i] *= s;
}

__global__ void to_bf16_kernel(uint16_t* out, const float* inp, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = bf16::bits(inp[i]);
}
__global__ void from_bf16_kernel(float* out, const uint16_t* inp, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = bf16::value(inp[i]);
}

// out[n][c] += table[ids[n]][c], one thread per (n, c).
__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const float* table, int N, int C) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)N * C) return;
    const int n = (int)(i / C), c = (int)(i % C);
    out[i] += table[(size_t)ids[n] * C + c];
}

// One block per row n. Only the block of the FIRST row with a given id works: it sums dout over
// all rows with that id in increasing n, then adds the sum to the table row once. That is the
// CPU's order exactly (same bits), and every table row is written by one block only.
// The rows are found blockDim at a time; the matching ones are compacted, in order, into shared
// memory with warp ballots, so an id costs O(N) id reads plus O(its rows * C) adds, not O(N * C).
__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* ids, int N, int C) {
    extern __shared__ float sums[];                               // (C)
    __shared__ int rows[kThreads], warp_end[kThreads / 32];       // matches of a chunk; prefix counts
    const int n = blockIdx.x, id = ids[n], lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int seen_before = 0;
    for (int m = threadIdx.x; m < n; m += blockDim.x) seen_before |= ids[m] == id;
    if (__syncthreads_or(seen_before)) return;
    for (int c = threadIdx.x; c < C; c += blockDim.x) sums[c] = 0.0f;
    for (int m0 = n; m0 < N; m0 += blockDim.x) {
        const bool match = m0 + (int)threadIdx.x < N && ids[m0 + threadIdx.x] == id;
        const unsigned ballot = __ballot_sync(0xffffffffu, match);
        if (lane == 0) warp_end[warp] = __popc(ballot);
        __syncthreads();
        if (threadIdx.x == 0)
            for (int w = 1; w < (int)blockDim.x / 32; w++) warp_end[w] += warp_end[w - 1];
        __syncthreads();
        const int before = warp > 0 ? warp_end[warp - 1] : 0, count = warp_end[blockDim.x / 32 - 1];
        if (match) rows[before + __popc(ballot & ((1u << lane) - 1))] = m0 + threadIdx.x;
        __syncthreads();
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            for (int i = 0; i < count; i++) sums[c] += dout[(size_t)rows[i] * C + c];
        __syncthreads();   // the next chunk rewrites rows and warp_end
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) dtable[(size_t)id * C + c] += sums[c];
}

int blocks(int N) { return ceil_div(N, kThreads); }

}  // namespace

void gelu_forward(float* out, const float* inp, int N, cudaStream_t stream) {
    if (N <= 0) return;
    gelu_forward_kernel<<<blocks(N), kThreads, 0, stream>>>(out, inp, N);
    CUDA_CHECK_LAST();
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int N, cudaStream_t stream) {
    if (N <= 0) return;
    gelu_backward_kernel<<<blocks(N), kThreads, 0, stream>>>(dinp, inp, dout, N);
    CUDA_CHECK_LAST();
}
void relu_forward(float* out, const float* inp, int N, cudaStream_t stream) {
    if (N <= 0) return;
    relu_forward_kernel<<<blocks(N), kThreads, 0, stream>>>(out, inp, N);
    CUDA_CHECK_LAST();
}
void relu_backward(float* dinp, const float* inp, const float* dout, int N, cudaStream_t stream) {
    if (N <= 0) return;
    relu_backward_kernel<<<blocks(N), kThreads, 0, stream>>>(dinp, inp, dout, N);
    CUDA_CHECK_LAST();
}
void tanh_forward(float* out, const float* inp, int N, cudaStream_t stream) {
    if (N <= 0) return;
    tanh_forward_kernel<<<blocks(N), kThreads, 0, stream>>>(out, inp, N);
    CUDA_CHECK_LAST();
}
void tanh_backward(float* dinp, const float* out, const float* dout, int N, cudaStream_t stream) {
    if (N <= 0) return;
    tanh_backward_kernel<<<blocks(N), kThreads, 0, stream>>>(dinp, out, dout, N);
    CUDA_CHECK_LAST();
}
void add_forward(float* out, const float* a, const float* b, int N, cudaStream_t stream) {
    if (N <= 0) return;
    add_kernel<<<blocks(N), kThreads, 0, stream>>>(out, a, b, N);
    CUDA_CHECK_LAST();
}
void accumulate(float* out, const float* inp, int N, cudaStream_t stream) {
    if (N <= 0) return;
    accumulate_kernel<<<blocks(N), kThreads, 0, stream>>>(out, inp, N);
    CUDA_CHECK_LAST();
}
void scale(float* x, float s, int N, cudaStream_t stream) {
    if (N <= 0) return;
    scale_kernel<<<blocks(N), kThreads, 0, stream>>>(x, s, N);
    CUDA_CHECK_LAST();
}

void to_bf16(uint16_t* out, const float* inp, int N, cudaStream_t stream) {
    if (N <= 0) return;
    to_bf16_kernel<<<blocks(N), kThreads, 0, stream>>>(out, inp, N);
    CUDA_CHECK_LAST();
}
void from_bf16(float* out, const uint16_t* inp, int N, cudaStream_t stream) {
    if (N <= 0) return;
    from_bf16_kernel<<<blocks(N), kThreads, 0, stream>>>(out, inp, N);
    CUDA_CHECK_LAST();
}

void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C,
                       cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    embedding_forward_kernel<<<(unsigned)ceil_div<int64_t>((int64_t)N * C, kThreads), kThreads, 0, stream>>>(
        out, ids, table, N, C);
    CUDA_CHECK_LAST();
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C,
                        cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    if (C > 12288)   // the row's sums live in shared memory: 48 KiB without opting in to more
        throw std::runtime_error("embedding_backward: width " + std::to_string(C) + " is above 12288");
    embedding_backward_kernel<<<N, kThreads, C * sizeof(float), stream>>>(dtable, dout, ids, N, C);
    CUDA_CHECK_LAST();
}

}  // namespace cuda
}  // namespace ops
