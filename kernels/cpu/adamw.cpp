// kernels/cpu/adamw.cpp — the AdamW update (Loshchilov & Hutter) and the float64 sum of squares
// used for the global gradient norm.
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ops {

void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    // Bias corrections in float64 once per call: beta^t for large t is fine there.
    const float bc1 = (float)(1.0 - std::pow((double)beta1, t));
    const float bc2 = (float)(1.0 - std::pow((double)beta2, t));
    parallel_for(N, 1 << 14, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) {
            const float g = grads[i];
            m[i] = beta1 * m[i] + (1.0f - beta1) * g;
            v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
            const float m_hat = m[i] / bc1;
            const float v_hat = v[i] / bc2;
            // Decoupled weight decay: applied to the parameter, not mixed into the gradient.
            params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * params[i]);
        }
    });
}

double sum_squares(const float* x, int64_t N) {
    // Fixed chunks, not one piece per thread: the partials and their order depend on N only.
    constexpr int64_t kChunk = 1 << 14;
    const int64_t chunks = (N + kChunk - 1) / kChunk;
    std::vector<double> partial(chunks);
    parallel_for(chunks, 4, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; c++) {
            double s = 0.0;
            for (int64_t i = c * kChunk; i < std::min(N, (c + 1) * kChunk); i++) s += (double)x[i] * x[i];
            partial[c] = s;
        }
    });
    double total = 0.0;
    for (double s : partial) total += s;
    return total;
}

}  // namespace ops
