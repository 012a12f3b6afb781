// tutorials/03_attention.cpp — one small causal self-attention with a padded token: look at the
// probability matrix, then check the backward against finite differences, then the flash-style
// version that the model calls, which keeps one number per query instead of the matrix.
#include "kernels/ops.hpp"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
    const int B = 1, T = 6, NH = 2, HS = 4, C = NH * HS;
    std::mt19937 gen(0);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> q(B * T * C), k(B * T * C), v(B * T * C), R(B * T * C);  // (B, T, C) each
    for (auto* x : {&q, &k, &v, &R})
        for (float& e : *x) e = dist(gen);
    const std::vector<int32_t> mask = {1, 1, 1, 1, 0, 0};  // (B, T): the last two tokens are padding
    const ops::DropoutKey no_dropout;

    std::printf("Step 1: forward, causal, tokens 4 and 5 are padding\n");
    std::vector<float> out(B * T * C), att(B * NH * T * T);  // (B, T, C), (B, NH, T, T)
    ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), mask.data(),
                           /*causal=*/true, 0.0f, no_dropout, B, T, NH, HS);
    std::printf("  att of head 0: row = query i, column = key j\n        ");
    for (int j = 0; j < T; j++) std::printf("   key %d", j);
    std::printf("\n");
    for (int i = 0; i < T; i++) {
        std::printf("  query %d", i);
        double row = 0.0;
        for (int j = 0; j < T; j++) {
            std::printf(" %7.4f", att[i * T + j]);
            row += att[i * T + j];
        }
        std::printf("   (sum %.4f)\n", row);
    }
    std::printf("  Look at: the upper triangle is 0 (a query never sees later keys) and so are\n"
                "  the columns of keys 4 and 5 (padding). Rows 4 and 5 are queries *at* padding:\n"
                "  they are still computed and see the real keys 0..3 (a model's loss skips them).\n\n");

    std::printf("Step 2: gradient check of L = sum(out * R), central differences, h = 1e-2\n");
    auto loss = [&] {
        std::vector<float> o(B * T * C), a(B * NH * T * T);
        ops::attention_forward(o.data(), a.data(), q.data(), k.data(), v.data(), mask.data(), true,
                               0.0f, no_dropout, B, T, NH, HS);
        double L = 0.0;
        for (int i = 0; i < B * T * C; i++) L += (double)o[i] * R[i];
        return L;
    };
    std::vector<float> dq(B * T * C, 0.0f), dk(B * T * C, 0.0f), dv(B * T * C, 0.0f);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), R.data(), att.data(), q.data(),
                            k.data(), v.data(), 0.0f, no_dropout, B, T, NH, HS);
    const char* names[] = {"dq", "dk", "dv"};
    std::vector<float>* inputs[] = {&q, &k, &v};
    const std::vector<float>* grads[] = {&dq, &dk, &dv};
    for (int t = 0; t < 3; t++) {
        std::vector<float>& x = *inputs[t];
        double max_err = 0.0, max_grad = 0.0;
        for (size_t i = 0; i < x.size(); i++) {
            const float saved = x[i], h = 1e-2f;
            x[i] = saved + h;
            const double up = loss();
            x[i] = saved - h;
            const double down = loss();
            x[i] = saved;
            const double numeric = (up - down) / (2.0 * h);
            max_err = std::fmax(max_err, std::fabs(numeric - (*grads[t])[i]));
            max_grad = std::fmax(max_grad, std::fabs(numeric));
        }
        std::printf("  %s: max |analytic - numeric| = %.2e (largest gradient %.3f)\n", names[t],
                    max_err, max_grad);
    }
    double dk_pad = 0.0;
    for (int t = 4; t < T; t++)
        for (int c = 0; c < C; c++) dk_pad += std::fabs(dk[t * C + c]) + std::fabs(dv[t * C + c]);
    std::printf("  sum |dk| + |dv| over the padding keys = %g\n", dk_pad);
    std::printf("  Look at: errors ~1e-5, and exactly zero gradient reaches the padding keys:\n"
                "  a masked key has probability 0, so nothing flows back into it.\n\n");

    std::printf("Question: the backward recomputes nothing of the softmax; it reads att. What\n"
                "would you have to store, or recompute, if att (B, NH, T, T) did not fit in memory?\n\n");

    std::printf("Step 3: the answer, flash-style: keep one number per query, lse = log sum_j exp(score_ij)\n");
    std::vector<float> out2(B * T * C), lse(B * NH * T);  // (B, T, C), (B, NH, T)
    ops::attention_forward_flash(out2.data(), lse.data(), q.data(), k.data(), v.data(), mask.data(), true,
                                 0.0f, no_dropout, B, T, NH, HS);
    std::vector<float> dq2(B * T * C, 0.0f), dk2(B * T * C, 0.0f), dv2(B * T * C, 0.0f);
    ops::attention_backward_flash(dq2.data(), dk2.data(), dv2.data(), R.data(), out2.data(), lse.data(), q.data(),
                                  k.data(), v.data(), mask.data(), true, 0.0f, no_dropout, B, T, NH, HS);
    double out_diff = 0.0, grad_diff = 0.0;
    for (int i = 0; i < B * T * C; i++) {
        out_diff = std::fmax(out_diff, std::fabs(out2[i] - out[i]));
        for (int t = 0; t < 3; t++)
            grad_diff = std::fmax(grad_diff, std::fabs((t == 0 ? dq2 : t == 1 ? dk2 : dv2)[i] - (*grads[t])[i]));
    }
    std::printf("  stored for the backward: att %zu floats, lse %zu floats\n", att.size(), lse.size());
    std::printf("  max |out_flash - out| = %g, max gradient difference = %.1e\n", out_diff, grad_diff);
    std::printf("  Look at: the same output (the same operations), gradients equal up to rounding. The\n"
                "  backward rebuilds each probability as exp(score_ij - lse_i): T times less memory,\n"
                "  paid for with one more dot product per (query, key) pair. The model does this.\n");
    std::printf("answer: docs/answers.md, section \"03 attention\"\n");
    return 0;
}
