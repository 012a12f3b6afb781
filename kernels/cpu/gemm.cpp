// kernels/cpu/gemm.cpp — matrix multiply, the specification: the naive loop every GEMM must
// equal bit for bit, GEMM on bfloat16-rounded inputs, and the bias gradient. The fast kernel
// (cache blocking, register-tile micro-kernels) is the CPU speed track: gemm_blocked.cpp.
//
// The chain (kernels/ops.hpp): every C[m][n] is acc = fma(a_k, b_k, acc) for k = 0, 1, ..., K-1
// from acc = 0, one rounding per step, then alpha * acc (+ beta * C) (+ bias). Every version
// computes exactly that chain; blocking only changes the order in which *outputs* are visited,
// and a micro-kernel only how many outputs advance at once. So all of them give the naive loop's
// bits, on any number of threads.
#include "kernels/ops.hpp"
#include "kernels/bf16.hpp"
#include "kernels/cpu/gemm_chain.hpp"
#include "kernels/cpu/parallel.hpp"

#include <cmath>
#include <vector>

namespace ops {

using chain::finish;
using chain::op_a;
using chain::op_b;

void gemm_naive(float* C, const float* A, const float* B, const float* bias,
                int M, int N, int K, bool transA, bool transB, float alpha, float beta) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = std::fma(op_a(A, m, k, M, K, transA), op_b(B, k, n, N, K, transB), acc);
            float* c = C + (size_t)m * N + n;
            *c = finish(acc, *c, bias, n, alpha, beta);
        }
}

float round_bf16(float x) { return bf16::value(bf16::bits(x)); }

void to_bf16(uint16_t* out, const float* inp, int N) {
    for (int i = 0; i < N; i++) out[i] = bf16::bits(inp[i]);
}
void from_bf16(float* out, const uint16_t* inp, int N) {
    for (int i = 0; i < N; i++) out[i] = bf16::value(inp[i]);
}

void gemm_bf16(float* C, const float* A, const float* B, const float* bias,
               int M, int N, int K, bool transA, bool transB, float alpha, float beta) {
    std::vector<float> a(A, A + (size_t)M * K), b(B, B + (size_t)K * N);
    for (float& x : a) x = round_bf16(x);
    for (float& x : b) x = round_bf16(x);
    gemm(C, a.data(), b.data(), bias, M, N, K, transA, transB, alpha, beta);
}

void bias_backward(float* dbias, const float* dout, int N, int OC) {
    // Threads own columns (column_grain: big pieces); each sums its rows in increasing n, adds once.
    parallel_for(OC, column_grain(N), [&](int64_t o0, int64_t o1) {
        std::vector<float> sum(o1 - o0, 0.0f);  // (o1 - o0)
        for (int n = 0; n < N; n++) {
            const float* row = dout + (size_t)n * OC + o0;
            for (int64_t o = 0; o < o1 - o0; o++) sum[o] += row[o];
        }
        for (int64_t o = o0; o < o1; o++) dbias[o] += sum[o - o0];
    });
}

}  // namespace ops
