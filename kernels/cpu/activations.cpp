// kernels/cpu/activations.cpp — GELU (exact erf, through erf32 and exp32 of vecmath.hpp, which
// vectorise), ReLU, tanh and elementwise helpers.
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vecmath.hpp"

#include <cmath>

namespace ops {

namespace {
// Elementwise loops are cheap: only split them when each thread gets a decent slice.
constexpr int64_t kGrain = 1 << 14;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
}  // namespace

void gelu_forward(float* out, const float* inp, int N) {
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) {
            const float x = inp[i];
            out[i] = 0.5f * x * (1.0f + erf32(x * kInvSqrt2));
        }
    });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int N) {
    // d/dx [x Phi(x)] = Phi(x) + x phi(x)
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) {
            const float x = inp[i];
            const float cdf = 0.5f * (1.0f + erf32(x * kInvSqrt2));
            const float pdf = kInvSqrt2Pi * exp32(-0.5f * x * x);
            dinp[i] += (cdf + x * pdf) * dout[i];
        }
    });
}

void relu_forward(float* out, const float* inp, int N) {
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
    });
}

void relu_backward(float* dinp, const float* inp, const float* dout, int N) {
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
    });
}

void tanh_forward(float* out, const float* inp, int N) {
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) out[i] = std::tanh(inp[i]);
    });
}

void tanh_backward(float* dinp, const float* out, const float* dout, int N) {
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) dinp[i] += (1.0f - out[i] * out[i]) * dout[i];
    });
}

void add_forward(float* out, const float* a, const float* b, int N) {
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) out[i] = a[i] + b[i];
    });
}

void accumulate(float* out, const float* inp, int N) {
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) out[i] += inp[i];
    });
}

void scale(float* x, float s, int N) {
    parallel_for(N, kGrain, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; i++) x[i] *= s;
    });
}

}  // namespace ops
