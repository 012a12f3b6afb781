// kernels/cpu/layernorm.cpp — layer normalisation over the last dimension (llm.c's formulas).
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"

#include <cmath>
#include <vector>

namespace ops {

void layernorm_forward(float* out, float* mean, float* rstd,
                       const float* inp, const float* weight, const float* bias,
                       int N, int C, float eps) {
    parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; n++) {
            const float* x = inp + n * C;  // (C)
            // Row statistics in float64: two passes, so no cancellation in the variance.
            double sum = 0.0;
            for (int c = 0; c < C; c++) sum += x[c];
            const float m = (float)(sum / C);
            double var = 0.0;
            for (int c = 0; c < C; c++) var += (double)(x[c] - m) * (x[c] - m);
            const float s = (float)(1.0 / std::sqrt(var / C + eps));
            float* o = out + n * C;
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
            mean[n] = m;
            rstd[n] = s;
        }
    });
}

void layernorm_backward(float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C) {
    if (dinp) {
        // Rows are independent: dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)).
        parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
            for (int64_t n = n0; n < n1; n++) {
                const float* x = inp + n * C;
                const float* dy = dout + n * C;
                double dnorm_sum = 0.0, dnorm_norm_sum = 0.0;
                for (int c = 0; c < C; c++) {
                    const float norm = (x[c] - mean[n]) * rstd[n];
                    const float dnorm = weight[c] * dy[c];
                    dnorm_sum += dnorm;
                    dnorm_norm_sum += (double)dnorm * norm;
                }
                const float dnorm_mean = (float)(dnorm_sum / C);
                const float dnorm_norm_mean = (float)(dnorm_norm_sum / C);
                float* dx = dinp + n * C;
                for (int c = 0; c < C; c++) {
                    const float norm = (x[c] - mean[n]) * rstd[n];
                    const float dnorm = weight[c] * dy[c];
                    dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd[n];
                }
            }
        });
    }
    if (!dweight && !dbias) return;
    // The parameter gradients reduce over rows: threads own columns and sum rows in order.
    parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
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
