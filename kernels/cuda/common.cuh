// kernels/cuda/common.cuh — what every CUDA kernel file shares: error checks, ceil_div and
// fixed-order warp/block reductions (a fixed shuffle tree gives the same bits on every run).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>

// Every CUDA runtime call goes through CUDA_CHECK: file:line and the error string, then throw.
#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        const cudaError_t err_ = (call);                                                     \
        if (err_ != cudaSuccess) {                                                           \
            const std::string msg_ = std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                     ": CUDA error: " + cudaGetErrorString(err_) + " (" #call ")"; \
            std::fprintf(stderr, "%s\n", msg_.c_str());                                      \
            throw std::runtime_error(msg_);                                                  \
        }                                                                                    \
    } while (0)

// After each kernel launch: catches bad launch configurations (the kernel itself runs later).
#define CUDA_CHECK_LAST() CUDA_CHECK(cudaGetLastError())

namespace ops {
namespace cuda {

template <typename T>
__host__ __device__ inline T ceil_div(T a, T b) { return (a + b - 1) / b; }

template <typename T>
__device__ inline T warp_sum(T x) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;  // every lane holds the total
}

__device__ inline float warp_max(float x) {
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// total. Warps reduce by shuffles, then warp 0 adds the warp partials in warp order.
template <typename T>
__device__ inline T block_sum(T x) {
    __shared__ T partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    x = warp_sum(x);
    __syncthreads();  // partial may still be read by a previous call
    if (lane == 0) partial[warp] = x;
    __syncthreads();
    T total = lane < warps ? partial[lane] : T(0);
    return warp_sum(total);
}

}  // namespace cuda
}  // namespace ops
