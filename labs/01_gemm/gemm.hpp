// labs/01_gemm/gemm.hpp — lab 01's contract: what your gemm.cpp defines.
// Read kernels/ops.hpp's comment "The GEMM chain" first, then labs/01_gemm/README.md.
//
// Row-major fp32. op(A) is (M, K) and op(B) is (K, N): A is stored (M, K), or (K, M) when transA;
// B is stored (K, N), or (N, K) when transB. C is (M, N).
#pragma once

namespace student {

// Tasks 1-3. C = alpha * op(A) op(B) (+ beta * C) (+ bias), with exactly the arithmetic of
// ops::gemm_naive, so that every output has its bits. For each output (m, n):
//   acc = 0;  for k = 0, 1, ..., K-1:  acc = fma(op(A)[m][k], op(B)[k][n], acc)   (std::fma: one rounding)
//   r = alpha * acc;  if beta != 0: r += beta * C[m][n];  if bias: r += bias[n];   C[m][n] = r
// beta == 0 never reads C (it may hold NaN); bias (N) may be null.
void gemm_naive(float* C, const float* A, const float* B, const float* bias, int M, int N, int K, bool transA,
                bool transB, float alpha, float beta);

// Task 4. C = A B (no transposes, alpha 1, beta 0, no bias: whatever C held is overwritten), computed
// tile x tile outputs at a time: the outputs of one tile are finished (or advanced, if you block k
// too) before the next tile starts. tile >= 1 need not divide M, N or K. Every output must still be
// the one chain above, k = 0, 1, ..., K-1 in order, so C has gemm_naive's bits.
void gemm_blocked(float* C, const float* A, const float* B, int M, int N, int K, int tile);

}  // namespace student
