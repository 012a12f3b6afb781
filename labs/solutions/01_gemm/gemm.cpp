// labs/solutions/01_gemm/gemm.cpp — lab 01's answer (what a student should end with).
#include "labs/01_gemm/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace student {

namespace {

// Element (m, k) of op(A) and (k, n) of op(B), whatever the storage.
float a_at(const float* A, int m, int k, int M, int K, bool transA) {
    return transA ? A[(size_t)k * M + m] : A[(size_t)m * K + k];
}
float b_at(const float* B, int k, int n, int N, int K, bool transB) {
    return transB ? B[(size_t)n * K + k] : B[(size_t)k * N + n];
}

// Advances the chains of one row of C, columns [n0, n1), over k in [k0, k1), in increasing k.
// The n loop is innermost: its chains are independent, so the CPU runs them side by side (in
// vector registers), while each one still sees its k in order.
void advance_row(float* c, const float* a, const float* B, int N, int n0, int n1, int k0, int k1) {
    for (int k = k0; k < k1; k++) {
        const float* b = B + (size_t)k * N;   // (N) row k of B
        for (int n = n0; n < n1; n++) c[n] = std::fma(a[k], b[n], c[n]);
    }
}

}  // namespace

void gemm_naive(float* C, const float* A, const float* B, const float* bias, int M, int N, int K, bool transA,
                bool transB, float alpha, float beta) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                const float a = a_at(A, m, k, M, K, transA), b = b_at(B, k, n, N, K, transB);
                acc = std::fma(a, b, acc);   // one rounding per step, as in the chain
            }
            float& c = C[(size_t)m * N + n];
            float r = alpha * acc;
            if (beta != 0.0f) r += beta * c;   // beta == 0 never reads C: a NaN there must vanish
            if (bias) r += bias[n];
            c = r;
        }
}

void gemm_blocked(float* C, const float* A, const float* B, int M, int N, int K, int tile) {
    for (int m0 = 0; m0 < M; m0 += tile)
        for (int n0 = 0; n0 < N; n0 += tile) {
            const int m1 = std::min(m0 + tile, M), n1 = std::min(n0 + tile, N);
            for (int m = m0; m < m1; m++) std::fill(C + (size_t)m * N + n0, C + (size_t)m * N + n1, 0.0f);
            // k in blocks too, in increasing order: C holds each output's one chain from a k-block
            // to the next, so the tile's rows of B stay in cache while every chain goes on.
            for (int k0 = 0; k0 < K; k0 += tile)
                for (int m = m0; m < m1; m++)
                    advance_row(C + (size_t)m * N, A + (size_t)m * K, B, N, n0, n1, k0, std::min(k0 + tile, K));
        }
}

}  // namespace student
