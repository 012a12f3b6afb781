// labs/01_gemm/gemm.cpp — lab 01: the GEMM chain. Your file: replace each TODO(student) body.
// Check it with: scripts/lab.sh check 01
#include "labs/01_gemm/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "labs/todo.hpp"

namespace student {

// TODO(student) Tasks 1-3: for every output (m, n), run the chain acc = std::fma(a, b, acc) over
// k = 0, 1, ..., K-1 from acc = 0, then C[m][n] = alpha * acc (+ beta * C[m][n] when beta != 0)
// (+ bias[n] when bias is not null). Task 1 needs the chain, task 2 the transposes (which element
// of the stored A is op(A)[m][k]?), task 3 alpha, beta and bias.
void gemm_naive(float* C, const float* A, const float* B, const float* bias, int M, int N, int K, bool transA,
                bool transB, float alpha, float beta) {
    labcheck::not_implemented("gemm_naive");
}

// TODO(student) Task 4: visit C in tiles of tile x tile outputs (mind the edge tiles when tile does
// not divide M or N). Inside a tile, loop m, then k, then n: the n loop then advances tile
// independent chains at once, each still over k in increasing order. You may block k too, as long
// as each output keeps ONE chain across every k-block.
void gemm_blocked(float* C, const float* A, const float* B, int M, int N, int K, int tile) {
    labcheck::not_implemented("gemm_blocked");
}

}  // namespace student
