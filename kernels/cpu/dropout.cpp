// kernels/cpu/dropout.cpp — dropout with a counter-based RNG (Philox-4x32-10, Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//
// There is no RNG state: the random number of element i is Philox(counter, key), a pure
// function of (seed, step, microbatch, layer, site, i). A recomputed forward, another pipeline
// split, another thread count or the CUDA kernel all draw the same mask.
//
// Exact packing (the CUDA port copies it):
//   key     = { seed & 0xffffffff, seed >> 32 }
//   counter = { i & 0xffffffff,
//               (i >> 32) ^ (layer << 8 | site),   // site < 256; i < 2^32 in practice
//               microbatch,
//               step }
//   u       = (word0 of Philox-4x32-10(counter, key) >> 8) * 2^-24     (in [0, 1))
// Only word 0 is used: one Philox call per element keeps the mapping obvious.
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/philox.hpp"

#include <algorithm>
#include <cstring>

namespace ops {

namespace {

constexpr int64_t kGrain = 1 << 13;

// Philox-4x32-10 itself lives in kernels/philox.hpp, shared with the CUDA kernels.
using philox::word0;

inline float to_uniform(uint32_t word) { return (float)(word >> 8) * (1.0f / 16777216.0f); }

constexpr int kBlock = 256;

}  // namespace

// The key words are copied to locals so the compiler sees a plain integer loop and vectorises
// it. A run that crosses a multiple of 2^32 is split: the high word of i changes there.
void philox_uniforms(float* u, const DropoutKey& key, uint64_t i0, int n) {
    const uint64_t room = (uint64_t(1) << 32) - (uint32_t)i0;   // counters left before lo wraps
    if ((uint64_t)n > room) {
        philox_uniforms(u, key, i0, int(room));
        philox_uniforms(u + room, key, i0 + room, n - int(room));
        return;
    }
    const uint32_t c1 = (uint32_t)(i0 >> 32) ^ (key.layer << 8 | key.site);
    const uint32_t c2 = key.microbatch, c3 = key.step;
    const uint32_t k0 = (uint32_t)key.seed, k1 = (uint32_t)(key.seed >> 32);
    const uint32_t lo = (uint32_t)i0;
    for (int j = 0; j < n; j++) u[j] = to_uniform(word0(lo + (uint32_t)j, c1, c2, c3, k0, k1));
}

float philox_uniform(const DropoutKey& key, uint64_t i) {
    const uint32_t word = word0((uint32_t)i, (uint32_t)(i >> 32) ^ (key.layer << 8 | key.site),
                                       key.microbatch, key.step,
                                       (uint32_t)key.seed, (uint32_t)(key.seed >> 32));
    return to_uniform(word);
}

void dropout_forward(float* out, const float* inp, float p, const DropoutKey& key, int N) {
    if (p == 0.0f) {
        if (out != inp) std::memcpy(out, inp, sizeof(float) * (size_t)N);
        return;
    }
    const float s = 1.0f / (1.0f - p);  // kept values are multiplied by s (as PyTorch does)
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        float u[kBlock];
        for (int64_t b = i0; b < i1; b += kBlock) {
            const int n = (int)std::min<int64_t>(kBlock, i1 - b);
            philox_uniforms(u, key, b, n);
            for (int j = 0; j < n; j++) out[b + j] = u[j] >= p ? inp[b + j] * s : 0.0f;
        }
    });
}

void dropout_backward(float* dinp, const float* dout, float p, const DropoutKey& key, int N) {
    if (p == 0.0f) {
        accumulate(dinp, dout, N);
        return;
    }
    const float s = 1.0f / (1.0f - p);
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        float u[kBlock];
        for (int64_t b = i0; b < i1; b += kBlock) {
            const int n = (int)std::min<int64_t>(kBlock, i1 - b);
            philox_uniforms(u, key, b, n);
            for (int j = 0; j < n; j++) dinp[b + j] += u[j] >= p ? dout[b + j] * s : 0.0f;
        }
    });
}

}  // namespace ops
