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

// c = Philox-4x32-10(counter = c, key = {k0, k1}): four random words per call.
PT_HOST_DEVICE inline void block(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
        const uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[1] = (uint32_t)p1;
        c[3] = (uint32_t)p0;
        c[0] = n0;
        c[2] = n2;
    }
}

PT_HOST_DEVICE inline float to_uniform(uint32_t word) { return (float)(word >> 8) * (1.0f / 16777216.0f); }

// The four words of Philox block b under `key`: element i uses word i % 4 of block i / 4.
PT_HOST_DEVICE inline void words(uint32_t c[4], const DropoutKey& key, uint64_t b) {
    c[0] = (uint32_t)b;
    c[1] = (uint32_t)(b >> 32) ^ (key.layer << 8 | key.site);
    c[2] = key.microbatch;
    c[3] = key.step;
    block(c, (uint32_t)key.seed, (uint32_t)(key.seed >> 32));
}

// u[w] = uniform of element 4 * b + w, w < 4.
PT_HOST_DEVICE inline void uniforms4(float u[4], const DropoutKey& key, uint64_t b) {
    uint32_t c[4];
    words(c, key, b);
    for (int w = 0; w < 4; w++) u[w] = to_uniform(c[w]);
}

// Uniform in [0, 1) of element i, exactly as ops::philox_uniform. The word is selected, not
// indexed with c[i & 3]: a run-time index would put c in (slow) local memory on a GPU.
PT_HOST_DEVICE inline float uniform(const DropoutKey& key, uint64_t i) {
    uint32_t c[4];
    words(c, key, i >> 2);
    return to_uniform(i & 2 ? (i & 1 ? c[3] : c[2]) : (i & 1 ? c[1] : c[0]));
}

}  // namespace philox
}  // namespace ops
