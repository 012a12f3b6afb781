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

// out = keep ? inp * s : 0 (forward), or out += that (backward, kAdd). __fmul_rn: the product
// is never fused with the += into one FMA, so the bits equal the CPU's two roundings.
// Thread t draws Philox block t once and applies its four words to elements 4t .. 4t+3:
// a quarter of the integer work of one call per element, which would bound this kernel
// below copy bandwidth. With 16-byte aligned pointers the four elements move as one float4.
template <bool kAdd>
__global__ void dropout_kernel(float* out, const float* inp, float p, float s, DropoutKey key, int N, bool aligned) {
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (4 * t >= N) return;
    float u[4];
    philox::uniforms4(u, key, (uint64_t)t);
    auto apply = [&](float& o, float x, float uw) {
        const float y = uw >= p ? __fmul_rn(x, s) : 0.0f;
        o = kAdd ? o + y : y;
    };
    if (aligned && 4 * t + 3 < N) {
        const float4 x = reinterpret_cast<const float4*>(inp)[t];
        float4 o = kAdd ? reinterpret_cast<float4*>(out)[t] : x;
        apply(o.x, x.x, u[0]);
        apply(o.y, x.y, u[1]);
        apply(o.z, x.z, u[2]);
        apply(o.w, x.w, u[3]);
        reinterpret_cast<float4*>(out)[t] = o;
        return;
    }
    for (int64_t i = 4 * t; i < 4 * t + 4 && i < N; i++) apply(out[i], inp[i], u[i - 4 * t]);
}

bool aligned16(const void* a, const void* b) { return ((uintptr_t)a | (uintptr_t)b) % 16 == 0; }

}  // namespace

void dropout_forward(float* out, const float* inp, float p, const DropoutKey& key, int N,
                     cudaStream_t stream) {
    if (N <= 0) return;
    if (p == 0.0f) {
        if (out != inp) CUDA_CHECK(cudaMemcpyAsync(out, inp, sizeof(float) * (size_t)N, cudaMemcpyDeviceToDevice, stream));
        return;
    }
    const float s = 1.0f / (1.0f - p);  // computed once in float, as on the CPU
    const int blocks = ceil_div(ceil_div(N, 4), kThreads);  // a thread per 4 elements
    dropout_kernel<false><<<blocks, kThreads, 0, stream>>>(out, inp, p, s, key, N, aligned16(out, inp));
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
    const int blocks = ceil_div(ceil_div(N, 4), kThreads);
    dropout_kernel<true><<<blocks, kThreads, 0, stream>>>(dinp, dout, p, s, key, N, aligned16(dinp, dout));
    CUDA_CHECK_LAST();
}

}  // namespace cuda
}  // namespace ops
