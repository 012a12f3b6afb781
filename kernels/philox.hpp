// kernels/philox.hpp — Philox-4x32-10, header-only, callable from host and device code.
//
// Used by kernels/cpu/dropout.cpp (which documents the exact counter/key packing) and by the
// CUDA kernels, so a mask drawn on the GPU is the CPU's mask bit for bit.
// tests/test_cuda_kernels.cu checks philox::uniform against ops::philox_uniform on the host.
#pragma once
#include "kernels/ops.hpp"

#include <cstdint>

#if defined(__CUDACC__)
#define PT_HOST_DEVICE __host__ __device__
#else
#define PT_HOST_DEVICE
#endif

namespace ops {
namespace philox {

// Word 0 of Philox-4x32-10(counter = {c0, c1, c2, c3}, key = {k0, k1}).
PT_HOST_DEVICE inline uint32_t word0(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                     uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        const uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
    }
    return c0;
}

// Uniform in [0, 1) from the top 24 bits, exactly as ops::philox_uniform.
PT_HOST_DEVICE inline float uniform(const DropoutKey& key, uint64_t i) {
    const uint32_t w = word0((uint32_t)i, (uint32_t)(i >> 32) ^ (key.layer << 8 | key.site),
                             key.microbatch, key.step, (uint32_t)key.seed, (uint32_t)(key.seed >> 32));
    return (float)(w >> 8) * (1.0f / 16777216.0f);
}

}  // namespace philox
}  // namespace ops
