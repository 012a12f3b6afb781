// tutorials/02_layernorm.cpp — layernorm forward and backward on a tiny example, with the
// gradient checked against finite differences (the way every backward in tests/ is checked).
#include "kernels/ops.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

void print_rows(const char* name, const std::vector<float>& x, int N, int C) {
    std::printf("  %s\n", name);
    for (int n = 0; n < N; n++) {
        std::printf("    ");
        for (int c = 0; c < C; c++) std::printf("%8.4f ", x[n * C + c]);
        std::printf("\n");
    }
}

}  // namespace

int main() {
    const int N = 2, C = 5;
    const float eps = 1e-5f;
    std::vector<float> inp = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f,  // (N, C)
                              -1.0f, 0.5f, 0.0f, 8.0f, 2.5f};
    std::vector<float> weight = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, bias(C, 0.0f);  // (C)
    std::vector<float> out(N * C), mean(N), rstd(N);

    std::printf("Step 1: forward with weight = 1, bias = 0\n");
    ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), N, C, eps);
    print_rows("inp (N, C)", inp, N, C);
    print_rows("out (N, C)", out, N, C);
    for (int n = 0; n < N; n++) {
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += out[n * C + c] / C;
        for (int c = 0; c < C; c++) v += (out[n * C + c] - m) * (out[n * C + c] - m) / C;
        std::printf("  row %d: mean %.4f rstd %.4f -> out has mean %.1e, variance %.6f\n",
                    n, mean[n], rstd[n], m, v);
    }
    std::printf("  Look at: every row of out has mean 0 and variance 1, whatever its scale;\n"
                "  mean and rstd are saved because the backward needs them.\n\n");

    std::printf("Step 2: backward of L = sum(out * R) for a fixed R\n");
    weight = {0.5f, 1.0f, 1.5f, 2.0f, 2.5f};
    bias = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
    const std::vector<float> R = {0.3f, -1.0f, 0.7f, 0.2f, -0.4f, 1.1f, 0.0f, -0.6f, 0.9f, 0.25f};
    ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), N, C, eps);
    std::vector<float> dinp(N * C, 0.0f), dweight(C, 0.0f), dbias(C, 0.0f);  // callers zero grads
    ops::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), R.data(), inp.data(),
                            weight.data(), mean.data(), rstd.data(), N, C);
    print_rows("dinp (N, C)", dinp, N, C);
    print_rows("dweight (C)", dweight, 1, C);
    std::printf("  Look at: each row of dinp sums to ~0. Shifting a whole row does not change\n"
                "  its normalised output, so the loss cannot depend on that direction.\n\n");

    std::printf("Step 3: gradient check, central differences (L(x+h) - L(x-h)) / 2h, h = 1e-2\n");
    auto loss = [&] {
        std::vector<float> o(N * C), m(N), r(N);
        ops::layernorm_forward(o.data(), m.data(), r.data(), inp.data(), weight.data(), bias.data(),
                               N, C, eps);
        double L = 0.0;
        for (int i = 0; i < N * C; i++) L += (double)o[i] * R[i];
        return L;
    };
    auto numeric = [&](std::vector<float>& x, int i) {
        const float saved = x[i], h = 1e-2f;
        x[i] = saved + h;
        const double up = loss();
        x[i] = saved - h;
        const double down = loss();
        x[i] = saved;
        return (up - down) / (2.0 * h);
    };
    std::printf("  %-12s %12s %12s\n", "entry", "analytic", "numeric");
    for (int i : {0, 3, 7})
        std::printf("  dinp[%d]      %12.6f %12.6f\n", i, dinp[i], numeric(inp, i));
    for (int c : {1, 4})
        std::printf("  dweight[%d]   %12.6f %12.6f\n", c, dweight[c], numeric(weight, c));
    std::printf("  Look at: agreement to ~4-5 digits, the most fp32 finite differences give.\n\n");

    std::printf("Question: layernorm_backward takes null for dinp in the zero-bubble schedule's\n"
                "weight-gradient pass. Which of the three gradients need the rows' mean and rstd?\n");
    std::printf("answer: docs/answers.md, section \"02 layernorm\"\n");
    return 0;
}
