// kernels/ops.hpp — the ops. Every op is a free function on raw pointers, llm.c style:
// outputs first, then inputs, then dimensions. This header is the contract shared by the
// CPU versions (kernels/cpu/*.cpp, the specification) and the CUDA versions (kernels/cuda/).
// The op list itself is kernels/ops.inc, one OP(...) line per op with its shapes; this header
// declares the CPU versions from it, plus the CPU-only helpers below.
//
// Conventions
//  * Row-major fp32. Dimension letters: B batch, T tokens, C channels, NH heads, HS head size,
//    V vocab, N "rows" (usually B*T), OC output channels.
//  * Every *_backward ADDS into its gradient outputs (+=), never overwrites: residual branches
//    and gradient accumulation over micro-batches need no extra buffers. Callers zero first.
//  * A null gradient pointer means "not needed": the zero-bubble schedule computes input
//    gradients (BI) and weight gradients (BW) at different times, so every backward can do
//    either half alone.
//  * Deterministic: identical bits on every run and for every intra-op thread count. Work is
//    split statically over independent outputs and every reduction runs in a fixed order.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ops {

// ---- intra-op threading ------------------------------------------------------------------
// The count is per calling thread (thread_local): a single-stage run may use --threads T, while
// pipeline stages, threads themselves, keep 1 and count waiting stages too (cpu/threads.cpp).
void set_num_threads(int n);
int num_threads();

// ---- dropout keys (counter-based RNG) ---------------------------------------------------------
// Philox-4x32-10. The random number for element i is a pure function of
// (seed, step, microbatch, layer, site, i), so a recomputed forward, another pipeline split or
// another device draws exactly the same mask. `site` tells apart the dropouts inside one layer.
struct DropoutKey {
    uint64_t seed = 0;
    uint32_t step = 0, microbatch = 0, layer = 0, site = 0;
};
// Uniform float in [0, 1) for element i (24 random bits).
float philox_uniform(const DropoutKey& key, uint64_t i);
// u[j] = philox_uniform(key, i0 + j) for j < n, the same bits several times faster.
void philox_uniforms(float* u, const DropoutKey& key, uint64_t i0, int n);

// ---- the op list: OP(ret, name, (params), (args)) declares `ret name params;` -------------------
#define OP(ret, name, params, args) ret name params;
#include "kernels/ops.inc"
#undef OP

// ---- CPU-only helpers -----------------------------------------------------------------------
// The GEMM chain. On the CPU every output of gemm (and gemm_naive) is one chain over increasing k:
//   acc = 0;  for k = 0 .. K-1:  acc = fma(op(A)[m][k], op(B)[k][n], acc)   (one rounding a step)
//   C[m][n] = alpha * acc (+ beta * C[m][n]) (+ bias[n])                   (separate roundings)
// Every version computes exactly this, so they all give the same bits, on any thread count.
// Reference triple loop, kept for tests and the GEMM tutorial (same semantics as gemm).
void gemm_naive(float* C, const float* A, const float* B, const float* bias,
                int M, int N, int K, bool transA, bool transB, float alpha, float beta);
// gemm's register-tile micro-kernel, in order of sophistication (kernels/cpu/gemm_blocked.cpp). The
// default is the best this CPU runs, found at run time; PIPETRAIN_GEMM=plain|avx2|avx512 or
// set_gemm_kernel (for tests and tutorial 01) choose another, for the whole process.
enum class GemmKernel { plain, avx2, avx512 };
bool gemm_kernel_runs(GemmKernel k);   // does this CPU (and this build) have it?
const char* gemm_kernel_name(GemmKernel k);
GemmKernel gemm_kernel();
void set_gemm_kernel(GemmKernel k);    // throws when !gemm_kernel_runs(k)
float round_bf16(float x);   // to the nearest bfloat16 (kernels/bf16.hpp), as a float

}  // namespace ops

// Pastes a parenthesised list without its parentheses: PT_UNPAREN (a, b) is a, b. The
// generated CUDA declarations and dispatch functions append the stream to the table's lists.
#define PT_UNPAREN(...) __VA_ARGS__
