// kernels/cpu/crossentropy.cpp — softmax cross-entropy over the vocabulary, one row per token.
// The exps are float (exp32), their sum float64: with V ~ 40k logits a float sum loses digits that
// the "accumulation = big batch" property would notice.
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vecmath.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace ops {

namespace {

constexpr int32_t kIgnoreIndex = -100;

// A target outside [0, V) would read out of bounds; the caller's data is wrong, say so.
void check_targets(const int32_t* targets, int N, int V, const char* fn) {
    for (int n = 0; n < N; n++)
        if (targets[n] != kIgnoreIndex && (targets[n] < 0 || targets[n] >= V))
            throw std::runtime_error(std::string(fn) + ": target " + std::to_string(targets[n]) +
                                     " at row " + std::to_string(n) + " is outside [0, " +
                                     std::to_string(V) + ") and is not ignore_index -100");
}

// One row of logits x (V): e[i] = exp(x[i] - max) in float (exp32 and max32 vectorise), their sum
// in float64 in increasing i. Returns the sum, and the max in max_out (written once: while a loop
// kept the max there, each store to e[i] might have changed it, and no loop vectorised).
double row_exp(float* e, const float* x, int V, float& max_out) {
    const float maxv = max_out = max32(x, V);
    for (int i = 0; i < V; i++) e[i] = exp32(x[i] - maxv);
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += e[i];
    return sum;
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) {
    check_targets(targets, N, V, "crossentropy_forward");
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        std::vector<float> e(V);   // (V)
        for (int64_t n = n0; n < n1; n++) {
            if (targets[n] == kIgnoreIndex) {
                losses[n] = 0.0f;
                continue;
            }
            const float* x = logits + n * V;  // (V)
            float maxv;
            const double sum = row_exp(e.data(), x, V, maxv);
            losses[n] = (float)(maxv + std::log(sum) - x[targets[n]]);
        }
    });
}

// dlogits += scale * (softmax - onehot(target)), the softmax as e[i] * (1 / sum) in float.
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets,
                           float scale, int N, int V) {
    check_targets(targets, N, V, "crossentropy_backward");
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        std::vector<float> e(V);   // (V)
        for (int64_t n = n0; n < n1; n++) {
            if (targets[n] == kIgnoreIndex) continue;
            const float* x = logits + n * V;  // (V)
            float* dx = dlogits + n * V;
            float maxv;
            const float inv = (float)(1.0 / row_exp(e.data(), x, V, maxv));
            for (int i = 0; i < V; i++) dx[i] += scale * (e[i] * inv);
            dx[targets[n]] -= scale;
        }
    });
}

}  // namespace ops
