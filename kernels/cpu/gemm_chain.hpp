// kernels/cpu/gemm_chain.hpp — the one chain every CPU GEMM computes (kernels/ops.hpp): element
// access of op(A) and op(B), and how the chain's sum becomes C. gemm.cpp (the specification,
// gemm_naive) and gemm_blocked.cpp (the speed track) both finish with it.
#pragma once
#include <cstddef>

namespace ops {
namespace chain {

// Element (m, k) of op(A) and (k, n) of op(B), whatever the storage.
inline float op_a(const float* A, int m, int k, int M, int K, bool transA) {
    return transA ? A[(size_t)k * M + m] : A[(size_t)m * K + k];
}
inline float op_b(const float* B, int k, int n, int N, int K, bool transB) {
    return transB ? B[(size_t)n * K + k] : B[(size_t)k * N + n];
}

inline float finish(float acc, float c_old, const float* bias, int n, float alpha, float beta) {
    float r = alpha * acc;
    if (beta != 0.0f) r += beta * c_old;  // beta == 0 never reads C, so NaNs there vanish
    if (bias) r += bias[n];
    return r;
}

}  // namespace chain
}  // namespace ops
