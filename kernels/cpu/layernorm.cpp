// kernels/cpu/layernorm.cpp — layer normalisation over the last dimension (llm.c's formulas).
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vecmath.hpp"

#include <cmath>
#include <vector>

namespace ops {

void layernorm_forward(float* out, float* mean, float* rstd,
                       const float* inp, const float* weight, const float* bias,
                       int N, int C, float eps) {
    // Rows 8 at a time (by_groups), so that their float64 sums run as 8 add chains at once (chain_sums),
    // each in the order of its row alone. Two passes, so no cancellation in the variance.
    parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
        by_groups<8>(n0, n1, [&](auto R, int64_t n) {
            auto x = [&](int r, int c) { return inp[(n + r) * C + c]; };   // rows n .. n + R of inp (N, C)
            double sum[R()], var[R()];
            chain_sums(sum, C, [&](int r, int c) { return (double)x(r, c); });
            for (int r = 0; r < R; r++) mean[n + r] = (float)(sum[r] / C);
            chain_sums(var, C, [&](int r, int c) { const float d = x(r, c) - mean[n + r]; return (double)d * d; });
            for (int r = 0; r < R; r++) {
                const float m = mean[n + r], s = rstd[n + r] = (float)(1.0 / std::sqrt(var[r] / C + eps));
                for (int c = 0; c < C; c++) out[(n + r) * C + c] = (x(r, c) - m) * s * weight[c] + bias[c];
            }
        });
    });
}

void layernorm_backward(float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C) {
    if (dinp)   // rows are independent: 8 at a time, as in the forward
        parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
            by_groups<8>(n0, n1, [&](auto R, int64_t n) {
                // dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
                auto norm = [&](int r, int c) { return (inp[(n + r) * C + c] - mean[n + r]) * rstd[n + r]; };
                auto dnorm = [&](int r, int c) { return weight[c] * dout[(n + r) * C + c]; };
                double dnorm_sum[R()], dnorm_norm_sum[R()];
                chain_sums(dnorm_sum, C, [&](int r, int c) { return (double)dnorm(r, c); });
                chain_sums(dnorm_norm_sum, C, [&](int r, int c) { return (double)dnorm(r, c) * norm(r, c); });
                for (int r = 0; r < R; r++) {
                    const float dnorm_mean = (float)(dnorm_sum[r] / C), dnorm_norm_mean = (float)(dnorm_norm_sum[r] / C);
                    for (int c = 0; c < C; c++)
                        dinp[(n + r) * C + c] += (dnorm(r, c) - dnorm_mean - norm(r, c) * dnorm_norm_mean) * rstd[n + r];
                }
            });
        });
    if (!dweight && !dbias) return;
    // The parameter gradients reduce over rows: threads own columns (column_grain), sum rows in order.
    parallel_for(C, column_grain(N), [&](int64_t c0, int64_t c1) {
        std::vector<float> dw(c1 - c0, 0.0f), db(c1 - c0, 0.0f);  // (c1 - c0)
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* dy = dout + (size_t)n * C;
            for (int64_t c = c0; c < c1; c++) {
                dw[c - c0] += (x[c] - mean[n]) * rstd[n] * dy[c];
                db[c - c0] += dy[c];
            }
        }
        for (int64_t c = c0; c < c1; c++) {
            if (dweight) dweight[c] += dw[c - c0];
            if (dbias) dbias[c] += db[c - c0];
        }
    });
}

}  // namespace ops
