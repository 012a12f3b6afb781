// kernels/cuda/ops_cuda.cuh — the CUDA versions of the ops (the list: kernels/ops.inc).
//
// Same names, same argument order (outputs, inputs, dimensions) and the same semantics as the
// CPU functions, which are the specification; every pointer is a DEVICE pointer and every call
// takes a trailing stream. Backwards add into their gradients, null gradients are skipped, and
// every reduction runs in a fixed order (no atomics), so two runs give the same bits.
// Results match the CPU within rounding (fp32: rel. L2 error < 1e-5), not bit for bit; the
// dropout masks are bitwise identical (kernels/philox.hpp).
// Host code only (no device code here), so plain C++ files compiled by g++ may include it.
#pragma once
#include "kernels/ops.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace ops {
namespace cuda {

// ---- every op of kernels/ops.inc: ops::cuda::name(parameters, cudaStream_t stream = 0) -------
// Notes on the CUDA versions (each file opens with more):
//  * gemm (gemm.cu) calls the best fp32 version below, gemm_bf16 gemm_v4_bf16_mma.
//  * attention_forward / attention_backward (attention.cu) are v1, unfused: scores into att, a
//    masked softmax in place, then att @ v. attention_forward_flash is v2: tiles of keys, online
//    softmax, no (T, T) matrix in memory. The flash backward recomputes the probabilities tile
//    by tile from q, k and lse; D_i = dout_i . out_i first, then dk, dv (a block per 16 keys,
//    8 at HS > 64) and dq (likewise queries). The flash versions take HS <= 128 (more throws);
//    B * NH <= 65535 for every version (grid y).
//  * crossentropy (crossentropy.cu): the CPU throws on a target outside [0, V); a kernel
//    cannot, so such a row gets a NaN loss and NaN gradients (callers validate targets on the
//    host, as the data loader does).
//  * embedding: ids are device int32 and checked by the caller, as on the CPU.
//  * sum_squares waits for the stream and returns the value (sum_squares_async does not).
#define OP(ret, name, params, args) ret name(PT_UNPAREN params, cudaStream_t stream = 0);
#include "kernels/ops.inc"
#undef OP

// ---- GEMM versions (gemm.cu), the same arguments as gemm ----------------------------------
// Numbered versions for the tutorial and the benchmark; `gemm` calls the best fp32 one.
void gemm_v1_naive(float* C, const float* A, const float* B, const float* bias,
                   int M, int N, int K, bool transA, bool transB, float alpha, float beta,
                   cudaStream_t stream = 0);
void gemm_v2_smem_tiles(float* C, const float* A, const float* B, const float* bias,
                        int M, int N, int K, bool transA, bool transB, float alpha, float beta,
                        cudaStream_t stream = 0);
void gemm_v3_register_tiles(float* C, const float* A, const float* B, const float* bias,
                            int M, int N, int K, bool transA, bool transB, float alpha, float beta,
                            cudaStream_t stream = 0);
// fp32 in and out; a pre-pass rounds A and B to bf16 (a stream-ordered scratch copy) and the
// tensor cores multiply bf16 x bf16 -> fp32. Error ~1e-3 relative: not for the bitwise CPU parity.
void gemm_v4_bf16_mma(float* C, const float* A, const float* B, const float* bias,
                      int M, int N, int K, bool transA, bool transB, float alpha, float beta,
                      cudaStream_t stream = 0);

// ---- attention v3 (attention.cu) --------------------------------------------------------------
// The v2 flash forward on tensor cores: S = Q K^T and P V as mma.sync tf32 in 3xTF32 (each fp32
// operand split into two tf32s: fp32 accuracy). Same arguments and results as v2; the model's forward.
void attention_forward_flash_tc(float* out, float* lse,
                                const float* q, const float* k, const float* v, const int32_t* mask,
                                bool causal, float p, const DropoutKey& key,
                                int B, int T, int NH, int HS, cudaStream_t stream = 0);

// ---- optimizer (adamw.cu) ----
// Writes the float64 sum of squares to *out (a device pointer) without synchronising: the
// global gradient norm sums these per-tensor partials in model order.
void sum_squares_async(double* out, const float* x, int64_t N, cudaStream_t stream = 0);

}  // namespace cuda
}  // namespace ops
