// kernels/cuda/ops_cuda.cuh — the CUDA versions of the ops in kernels/ops.hpp.
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

// ---- GEMM (gemm.cu): C = alpha * op(A) @ op(B) + beta * C (+ bias), row-major, any M, N, K ----
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
void gemm(float* C, const float* A, const float* B, const float* bias,
          int M, int N, int K, bool transA, bool transB, float alpha, float beta,
          cudaStream_t stream = 0);
void bias_backward(float* dbias, const float* dout, int N, int OC, cudaStream_t stream = 0);

// ---- layernorm (layernorm.cu) ----
void layernorm_forward(float* out, float* mean, float* rstd,
                       const float* inp, const float* weight, const float* bias,
                       int N, int C, float eps, cudaStream_t stream = 0);
void layernorm_backward(float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream = 0);

// ---- activations and elementwise helpers (elementwise.cu) ----
void gelu_forward(float* out, const float* inp, int N, cudaStream_t stream = 0);
void gelu_backward(float* dinp, const float* inp, const float* dout, int N, cudaStream_t stream = 0);
void relu_forward(float* out, const float* inp, int N, cudaStream_t stream = 0);
void relu_backward(float* dinp, const float* inp, const float* dout, int N, cudaStream_t stream = 0);
void tanh_forward(float* out, const float* inp, int N, cudaStream_t stream = 0);
void tanh_backward(float* dinp, const float* out, const float* dout, int N, cudaStream_t stream = 0);
void add_forward(float* out, const float* a, const float* b, int N, cudaStream_t stream = 0);
void accumulate(float* out, const float* inp, int N, cudaStream_t stream = 0);
void scale(float* x, float s, int N, cudaStream_t stream = 0);
// bfloat16 storage, the same bits as the CPU (kernels/bf16.hpp).
void to_bf16(uint16_t* out, const float* inp, int N, cudaStream_t stream = 0);
void from_bf16(float* out, const uint16_t* inp, int N, cudaStream_t stream = 0);
// ids are device int32 and checked by the caller, as on the CPU.
void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C,
                       cudaStream_t stream = 0);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C,
                        cudaStream_t stream = 0);

// ---- dropout (dropout.cu) ----
void dropout_forward(float* out, const float* inp, float p, const DropoutKey& key, int N,
                     cudaStream_t stream = 0);
void dropout_backward(float* dinp, const float* dout, float p, const DropoutKey& key, int N,
                      cudaStream_t stream = 0);

// ---- attention (attention.cu) ----
// v1, unfused: scores into att, masked softmax in place, then att @ v. Stores att (B, NH, T, T)
// like the CPU, so attention_backward can use it. B * NH <= 65535 for every version (grid y).
void attention_forward(float* out, float* att,
                       const float* q, const float* k, const float* v, const int32_t* mask,
                       bool causal, float p, const DropoutKey& key,
                       int B, int T, int NH, int HS, cudaStream_t stream = 0);
void attention_backward(float* dq, float* dk, float* dv,
                        const float* dout, const float* att,
                        const float* q, const float* k, const float* v,
                        float p, const DropoutKey& key,
                        int B, int T, int NH, int HS, cudaStream_t stream = 0);
// v2, flash-style forward: tiles of keys, online softmax, no (T, T) matrix in memory. Writes
// out and lse (B, NH, T), the log-sum-exp of each query's visible scores (-inf when it sees
// no key), which is all the flash backward needs. HS <= 128. The CPU ops::attention_forward_flash
// / attention_backward_flash are its specification.
void attention_forward_flash(float* out, float* lse,
                             const float* q, const float* k, const float* v, const int32_t* mask,
                             bool causal, float p, const DropoutKey& key,
                             int B, int T, int NH, int HS, cudaStream_t stream = 0);
// v3, the v2 forward on tensor cores: S = Q K^T and P V as mma.sync tf32 in 3xTF32 (each fp32
// operand split into two tf32s: fp32 accuracy). Same arguments and results as v2; the model's forward.
void attention_forward_flash_tc(float* out, float* lse,
                                const float* q, const float* k, const float* v, const int32_t* mask,
                                bool causal, float p, const DropoutKey& key,
                                int B, int T, int NH, int HS, cudaStream_t stream = 0);
// v2 backward: recomputes the probabilities tile by tile from q, k and lse (no (T, T) matrix);
// D_i = dout_i . out_i first, then dk, dv (a block per 16 keys, 8 at HS > 64) and dq (likewise queries).
// Takes the flash forward's out and lse; adds into dq, dk, dv (any may be null). HS <= 128.
void attention_backward_flash(float* dq, float* dk, float* dv,
                              const float* dout, const float* out, const float* lse,
                              const float* q, const float* k, const float* v, const int32_t* mask,
                              bool causal, float p, const DropoutKey& key,
                              int B, int T, int NH, int HS, cudaStream_t stream = 0);

// ---- softmax cross-entropy (crossentropy.cu) ----
// The CPU throws on a target outside [0, V); a kernel cannot, so such a row gets a NaN loss and
// NaN gradients (callers validate targets on the host, as the data loader does).
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V,
                          cudaStream_t stream = 0);
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets,
                           float scale, int N, int V, cudaStream_t stream = 0);

// ---- optimizer (adamw.cu) ----
void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                  cudaStream_t stream = 0);
// Writes the float64 sum of squares to *out (a device pointer) without synchronising: the
// global gradient norm sums these per-tensor partials in model order.
void sum_squares_async(double* out, const float* x, int64_t N, cudaStream_t stream = 0);
// The CPU signature: waits for the stream and returns the value.
double sum_squares(const float* x, int64_t N, cudaStream_t stream = 0);

}  // namespace cuda
}  // namespace ops
