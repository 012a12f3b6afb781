// kernels/cpu/dropout.cpp — dropout with a counter-based RNG (Philox-4x32-10, Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//
// There is no RNG state: the random number of element i is a word of Philox(counter, key), a
// pure function of (seed, step, microbatch, layer, site, i). A recomputed forward, another
// pipeline split, another thread count or the CUDA kernel all draw the same mask.
//
// Exact packing (the CUDA port copies it). One Philox call gives four words, so element i
// takes word i % 4 of block b = i / 4:
//   key     = { seed & 0xffffffff, seed >> 32 }
//   counter = { b & 0xffffffff,
//               (b >> 32) ^ (layer << 8 | site),   // site < 256; b < 2^32 in practice
//               microbatch,
//               step }
//   u       = (word (i % 4) of Philox-4x32-10(counter, key) >> 8) * 2^-24     (in [0, 1))
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/philox.hpp"

#include <algorithm>
#include <cstring>

namespace ops {

namespace {

constexpr int64_t kGrain = 1 << 13;

constexpr int kBlock = 256;

}  // namespace

// Whole Philox blocks go through a plain integer loop over locals, which the compiler
// vectorises; a partial block at either end is drawn alone. A run of blocks that crosses a
// multiple of 2^32 is split: the high word of the block index changes there.
void philox_uniforms(float* u, const DropoutKey& key, uint64_t i0, int n) {
    while (n > 0 && (i0 & 3)) {
        *u++ = philox::uniform(key, i0++);
        n--;
    }
    const uint64_t b0 = i0 >> 2;
    const uint64_t room = (uint64_t(1) << 32) - (uint32_t)b0;   // blocks left before lo wraps
    const int64_t blocks = std::min<int64_t>(n / 4, (int64_t)room);
    const uint32_t c1 = (uint32_t)(b0 >> 32) ^ (key.layer << 8 | key.site);
    const uint32_t c2 = key.microbatch, c3 = key.step;
    const uint32_t k0 = (uint32_t)key.seed, k1 = (uint32_t)(key.seed >> 32);
    const uint32_t lo = (uint32_t)b0;
    for (int64_t j = 0; j < blocks; j++) {
        uint32_t c[4] = {lo + (uint32_t)j, c1, c2, c3};
        philox::block(c, k0, k1);
        for (int w = 0; w < 4; w++) u[4 * j + w] = philox::to_uniform(c[w]);
    }
    if (4 * blocks == n) return;
    if (blocks == (int64_t)room) {
        philox_uniforms(u + 4 * blocks, key, i0 + 4 * blocks, n - 4 * (int)blocks);
        return;
    }
    for (int j = 4 * (int)blocks; j < n; j++) u[j] = philox::uniform(key, i0 + j);
}

float philox_uniform(const DropoutKey& key, uint64_t i) { return philox::uniform(key, i); }

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
