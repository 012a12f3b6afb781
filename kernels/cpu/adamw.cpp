// kernels/cpu/adamw.cpp — the AdamW update (Loshchilov & Hutter) and the float64 sum of squares
// used for the global gradient norm.
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vecmath.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ops {

// AdamW on n elements of four distinct arrays (__restrict lets the compiler vectorise the loop, which
// was scalar: 5% of a step; each lane does the scalar operations in their order: the same bits).
// Decoupled weight decay: applied to the parameter, not mixed into the gradient.
static void adamw_range(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g,
                        int64_t n, float lr, float b1, float b2, float eps, float wd, float bc1, float bc2) {
    for (int64_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= lr * ((m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps) + wd * p[i]);
    }
}

void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    // Bias corrections in float64 once per call: beta^t for large t is fine there.
    const float bc1 = (float)(1.0 - std::pow((double)beta1, t)), bc2 = (float)(1.0 - std::pow((double)beta2, t));
    parallel_for(N, 1 << 14, [&](int64_t i0, int64_t i1) {
        adamw_range(params + i0, m + i0, v + i0, grads + i0, i1 - i0, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
    });
}

double sum_squares(const float* x, int64_t N) {
    // Fixed chunks, not one piece per thread: the partials and their order depend on N only. Whole
    // chunks are summed 8 at a time (8 add chains at once, each in its chunk's order: vecmath.hpp).
    constexpr int64_t kChunk = 1 << 14;
    const int64_t chunks = (N + kChunk - 1) / kChunk;
    std::vector<double> partial(chunks);
    parallel_for(chunks, 4, [&](int64_t c0, int64_t c1) {
        by_groups<8>(c0, std::min(c1, N / kChunk), [&](auto R, int64_t c) {
            double s[R()];
            chain_sums(s, int(kChunk), [&](int r, int i) { const double v = x[(c + r) * kChunk + i]; return v * v; });
            std::copy(s, s + R(), &partial[c]);
        });
        for (int64_t c = std::max(c0, N / kChunk); c < c1; c++)   // the short last chunk; partial[c] starts at 0.0
            for (int64_t i = c * kChunk; i < N; i++) partial[c] += (double)x[i] * x[i];
    });
    double total = 0.0;
    for (double s : partial) total += s;
    return total;
}

}  // namespace ops
