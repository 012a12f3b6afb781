// kernels/cuda/crossentropy.cu — fused softmax cross-entropy, one block per row: a single pass
// keeps a running (max, sum of exp) pair per thread ("online softmax", Milakov & Gimelshein
// 2018), pairs are merged in a fixed tree, and loss and dlogits come from that pair: no
// probability matrix. Float64 like the CPU, since V ~ 40k float terms would lose digits.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"

namespace ops {
namespace cuda {

namespace {

constexpr int kThreads = 256;
constexpr int32_t kIgnoreIndex = -100;

// A running log-sum-exp: the row max m and s = sum exp(x - m) over what was seen so far.
struct MaxSum {
    double m, s;
};

__device__ inline MaxSum merge(MaxSum a, MaxSum b) {
    const double m = fmax(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0};  // both empty
    const double sa = a.s == 0.0 ? 0.0 : a.s * exp(a.m - m);
    const double sb = b.s == 0.0 ? 0.0 : b.s * exp(b.m - m);
    return {m, sa + sb};
}

// Adds one logit: rescale the sum only when the max grows (one exp per element otherwise).
__device__ inline void push(MaxSum& a, double x) {
    if (x > a.m) {
        a.s = (a.s == 0.0 ? 0.0 : a.s * exp(a.m - x)) + 1.0;
        a.m = x;
    } else {
        a.s += x == -INFINITY ? 0.0 : exp(x - a.m);  // a NaN logit makes the sum NaN, as on the CPU
    }
}

// The (max, sum) pair of one row, known to every thread of the block.
__device__ MaxSum row_max_sum(const float* x, int V) {
    MaxSum acc = {-INFINITY, 0.0};
    for (int i = threadIdx.x; i < V; i += blockDim.x) push(acc, x[i]);
    for (int off = 16; off > 0; off >>= 1)
        acc = merge(acc, {__shfl_xor_sync(0xffffffffu, acc.m, off), __shfl_xor_sync(0xffffffffu, acc.s, off)});
    __shared__ MaxSum partial[kThreads / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    MaxSum total = partial[0];
    for (int w = 1; w < kThreads / 32; w++) total = merge(total, partial[w]);  // warp order
    return total;
}

__device__ inline bool bad_target(int32_t t, int V) { return t != kIgnoreIndex && (t < 0 || t >= V); }

__global__ void crossentropy_forward_kernel(float* losses, const float* logits, const int32_t* targets, int V) {
    const int n = blockIdx.x, t = targets[n];
    if (t == kIgnoreIndex || bad_target(t, V)) {
        if (threadIdx.x == 0) losses[n] = t == kIgnoreIndex ? 0.0f : NAN;
        return;  // the whole block leaves: the branch depends on n only
    }
    const float* x = logits + (size_t)n * V;  // (V)
    const MaxSum ms = row_max_sum(x, V);
    if (threadIdx.x == 0) losses[n] = (float)(ms.m + log(ms.s) - x[t]);
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const int32_t* targets,
                                             float scale, int V) {
    const int n = blockIdx.x, t = targets[n];
    if (t == kIgnoreIndex) return;
    float* dx = dlogits + (size_t)n * V;
    if (bad_target(t, V)) {
        for (int i = threadIdx.x; i < V; i += blockDim.x) dx[i] = NAN;
        return;
    }
    const float* x = logits + (size_t)n * V;
    const MaxSum ms = row_max_sum(x, V);
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        const double prob = exp(x[i] - ms.m) / ms.s;
        dx[i] += (float)(scale * (prob - (i == t ? 1.0 : 0.0)));
    }
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V,
                          cudaStream_t stream) {
    if (N <= 0) return;
    crossentropy_forward_kernel<<<N, kThreads, 0, stream>>>(losses, logits, targets, V);
    CUDA_CHECK_LAST();
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, float scale,
                           int N, int V, cudaStream_t stream) {
    if (N <= 0) return;
    crossentropy_backward_kernel<<<N, kThreads, 0, stream>>>(dlogits, logits, targets, scale, V);
    CUDA_CHECK_LAST();
}

}  // namespace cuda
}  // namespace ops
