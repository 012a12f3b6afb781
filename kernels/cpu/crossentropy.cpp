// kernels/cpu/crossentropy.cpp — softmax cross-entropy over the vocabulary, one row per token.
// The log-sum-exp runs in float64: with V ~ 40k logits a float sum loses digits that the
// "accumulation = big batch" property would notice.
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

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

// Returns max and sum of exp(x - max) over one row of logits.
void row_logsumexp_parts(const float* x, int V, double& maxv, double& sum) {
    maxv = x[0];
    for (int i = 1; i < V; i++) maxv = x[i] > maxv ? x[i] : maxv;
    sum = 0.0;
    for (int i = 0; i < V; i++) sum += std::exp(x[i] - maxv);
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) {
    check_targets(targets, N, V, "crossentropy_forward");
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; n++) {
            if (targets[n] == kIgnoreIndex) {
                losses[n] = 0.0f;
                continue;
            }
            const float* x = logits + n * V;  // (V)
            double maxv, sum;
            row_logsumexp_parts(x, V, maxv, sum);
            losses[n] = (float)(maxv + std::log(sum) - x[targets[n]]);
        }
    });
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets,
                           float scale, int N, int V) {
    check_targets(targets, N, V, "crossentropy_backward");
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; n++) {
            if (targets[n] == kIgnoreIndex) continue;
            const float* x = logits + n * V;  // (V)
            float* dx = dlogits + n * V;
            double maxv, sum;
            row_logsumexp_parts(x, V, maxv, sum);
            for (int i = 0; i < V; i++) {
                const double prob = std::exp(x[i] - maxv) / sum;
                dx[i] += (float)(scale * (prob - (i == targets[n] ? 1.0 : 0.0)));
            }
        }
    });
}

}  // namespace ops
