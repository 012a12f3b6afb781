// kernels/cuda/common.cuh — what every CUDA kernel file shares: error checks (check.cuh),
// ceil_div and fixed-order warp/block reductions (a fixed shuffle tree gives the same bits on
// every run).
#pragma once
#include "kernels/cuda/check.cuh"

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
