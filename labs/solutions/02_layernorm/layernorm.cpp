// labs/solutions/02_layernorm/layernorm.cpp — lab 02's answer (what a student should end with).
#include "labs/02_layernorm/layernorm.hpp"

#include <cstddef>
#include <vector>

namespace student {

namespace {

// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), row by row: norm moves with
// inp directly, through the mean (the second term) and through rstd (the third).
void input_grad(float* dinp, const float* dout, const float* inp, const float* weight, const float* mean,
                const float* rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;    // (C)
        const float* dy = dout + (size_t)n * C;  // (C)
        double dnorm_sum = 0.0, dnorm_norm_sum = 0.0;   // in double: a row may be thousands long
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - mean[n]) * rstd[n], dnorm = weight[c] * dy[c];
            dnorm_sum += dnorm;
            dnorm_norm_sum += (double)dnorm * norm;
        }
        const float dnorm_mean = (float)(dnorm_sum / C), dnorm_norm_mean = (float)(dnorm_norm_sum / C);
        float* dx = dinp + (size_t)n * C;   // (C)
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - mean[n]) * rstd[n], dnorm = weight[c] * dy[c];
            dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd[n];
        }
    }
}

// dweight += sum over rows of norm * dout, dbias += sum over rows of dout: a float sum per column,
// rows in order, added once.
void weight_grads(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                  const float* rstd, int N, int C) {
    std::vector<float> dw((size_t)C, 0.0f), db((size_t)C, 0.0f);   // (C)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const size_t i = (size_t)n * C + c;
            dw[(size_t)c] += (inp[i] - mean[n]) * rstd[n] * dout[i];
            db[(size_t)c] += dout[i];
        }
    for (int c = 0; c < C; c++) {
        if (dweight) dweight[c] += dw[(size_t)c];
        if (dbias) dbias[c] += db[(size_t)c];
    }
}

}  // namespace

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    if (dinp) input_grad(dinp, dout, inp, weight, mean, rstd, N, C);
    if (dweight || dbias) weight_grads(dweight, dbias, dout, inp, mean, rstd, N, C);
}

}  // namespace student
