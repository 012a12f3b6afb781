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

// R rows of logits x (R, V) at once: e (R, V) = exp(x - the row's max) in float, sum[r] row r's float64 sum in
// increasing i, R add chains in flight (one chain of 8000 dependent adds was most of the loss's time).
template <int R>
void rows_exp(double (&sum)[R], float (&maxv)[R], float* e, const float* x, int V) {
    for (int r = 0; r < R; r++) {
        const float m = maxv[r] = max32(x + (size_t)r * V, V);   // a local: maxv[r] might alias e to the compiler
        for (int i = 0; i < V; i++) e[(size_t)r * V + i] = exp32(x[(size_t)r * V + i] - m);
    }
    chain_sums(sum, V, [&](int r, int i) { return (double)e[(size_t)r * V + i]; });
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) {
    check_targets(targets, N, V, "crossentropy_forward");
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        std::vector<float> e((size_t)8 * V);   // (8, V)
        by_groups<8>(n0, n1, [&](auto R, int64_t n) {
            double sum[R()]; float maxv[R()];   // (R), (R)
            rows_exp(sum, maxv, e.data(), logits + n * V, V);   // ignored rows too (their sums unused)
            for (int r = 0; r < R(); r++) {
                const int32_t t = targets[n + r];   // an ignored row's loss is 0
                losses[n + r] = t == kIgnoreIndex ? 0.0f : (float)(maxv[r] + std::log(sum[r]) - logits[(n + r) * V + t]);
            }
        });
    });
}

// dlogits += scale * (softmax - onehot(target)), the softmax as e[i] * (1 / sum) in float.
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets,
                           float scale, int N, int V) {
    check_targets(targets, N, V, "crossentropy_backward");
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        std::vector<float> e((size_t)8 * V);   // (8, V)
        by_groups<8>(n0, n1, [&](auto R, int64_t n) {
            double sum[R()]; float maxv[R()];
            rows_exp(sum, maxv, e.data(), logits + n * V, V);
            for (int r = 0; r < R(); r++) {
                if (targets[n + r] == kIgnoreIndex) continue;
                float* dx = dlogits + (n + r) * V;   // (V)
                const float inv = (float)(1.0 / sum[r]), *er = e.data() + (size_t)r * V;
                for (int i = 0; i < V; i++) dx[i] += scale * (er[i] * inv);
                dx[targets[n + r]] -= scale;
            }
        });
    });
}

}  // namespace ops
