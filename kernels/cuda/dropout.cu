// kernels/cuda/dropout.cu — dropout with the counter-based Philox RNG of kernels/philox.hpp:
// element i draws philox::uniform(key, i), the same number as the CPU, so masks agree bit for
// bit and kept values are inp * s with the same float s (identical results, not just close).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"
#include "kernels/philox.hpp"

namespace ops {
namespace cuda {

namespace {

constexpr int kThreads = 256;

__global__ void dropout_forward_kernel(float* out, const float* inp, float p, float s, DropoutKey key, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = philox::uniform(key, (uint64_t)i) >= p ? inp[i] * s : 0.0f;
}

__global__ void dropout_backward_kernel(float* dinp, const float* dout, float p, float s, DropoutKey key, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    // __fmul_rn: never fused with the += into one FMA, so the bits equal the CPU's two roundings.
    if (i < N) dinp[i] += philox::uniform(key, (uint64_t)i) >= p ? __fmul_rn(dout[i], s) : 0.0f;
}

}  // namespace

void dropout_forward(float* out, const float* inp, float p, const DropoutKey& key, int N,
                     cudaStream_t stream) {
    if (N <= 0) return;
    if (p == 0.0f) {
        if (out != inp) CUDA_CHECK(cudaMemcpyAsync(out, inp, sizeof(float) * (size_t)N, cudaMemcpyDeviceToDevice, stream));
        return;
    }
    const float s = 1.0f / (1.0f - p);  // computed once in float, as on the CPU
    dropout_forward_kernel<<<ceil_div(N, kThreads), kThreads, 0, stream>>>(out, inp, p, s, key, N);
    CUDA_CHECK_LAST();
}

void dropout_backward(float* dinp, const float* dout, float p, const DropoutKey& key, int N,
                      cudaStream_t stream) {
    if (N <= 0) return;
    if (p == 0.0f) {
        accumulate(dinp, dout, N, stream);
        return;
    }
    const float s = 1.0f / (1.0f - p);
    dropout_backward_kernel<<<ceil_div(N, kThreads), kThreads, 0, stream>>>(dinp, dout, p, s, key, N);
    CUDA_CHECK_LAST();
}

}  // namespace cuda
}  // namespace ops
