// kernels/ops.hpp — the op list. Every op is a free function on raw pointers, llm.c style:
// outputs first, then inputs, then dimensions. This header is the contract shared by the
// CPU versions (kernels/cpu/*.cpp, the specification) and the CUDA versions (kernels/cuda/).
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
// The count is per calling thread (thread_local): a single-stage run may use --threads T,
// while pipeline stages, which are threads themselves, keep the default of 1.
void set_num_threads(int n);
int num_threads();

// ---- GEMM ---------------------------------------------------------------------------------
// C = alpha * op(A) @ op(B) + beta * C (+ bias[n] on every row when bias != nullptr).
// C is (M, N). op(A) is (M, K): A is stored (M, K), or (K, M) when transA.
// op(B) is (K, N): B is stored (K, N), or (N, K) when transB.
// beta == 0 ignores the old contents of C (NaN-safe).
void gemm(float* C, const float* A, const float* B, const float* bias,
          int M, int N, int K, bool transA, bool transB, float alpha, float beta);

// Reference triple loop, kept for tests and the GEMM tutorial (same semantics as gemm).
void gemm_naive(float* C, const float* A, const float* B, const float* bias,
                int M, int N, int K, bool transA, bool transB, float alpha, float beta);

// The same product with A and B first rounded to bfloat16 (round to nearest even), products
// and sums in fp32: the exact meaning of the CUDA tensor-core GEMM (gemm_v4_bf16_mma), up to
// the order of the sums. Used by --dtype bf16.
void gemm_bf16(float* C, const float* A, const float* B, const float* bias,
               int M, int N, int K, bool transA, bool transB, float alpha, float beta);
float round_bf16(float x);   // to the nearest bfloat16 (kernels/bf16.hpp), as a float
// bfloat16 storage: out = the 16 bits of round_bf16(inp); from_bf16 widens them back exactly.
void to_bf16(uint16_t* out, const float* inp, int N);
void from_bf16(float* out, const uint16_t* inp, int N);

// dbias[OC] += sum over rows of dout (N, OC).
void bias_backward(float* dbias, const float* dout, int N, int OC);

// ---- layernorm ----------------------------------------------------------------------------
// out = (inp - mean) * rstd * weight + bias over the last dimension; biased variance.
void layernorm_forward(float* out, float* mean, float* rstd,
                       const float* inp, const float* weight, const float* bias,
                       int N, int C, float eps);
// Any of dinp, dweight, dbias may be null.
void layernorm_backward(float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C);

// ---- activations ----------------------------------------------------------------------------
void gelu_forward(float* out, const float* inp, int N);          // exact: 0.5 x (1 + erf(x/√2))
void gelu_backward(float* dinp, const float* inp, const float* dout, int N);
void relu_forward(float* out, const float* inp, int N);
void relu_backward(float* dinp, const float* inp, const float* dout, int N);
void tanh_forward(float* out, const float* inp, int N);
void tanh_backward(float* dinp, const float* out, const float* dout, int N);  // uses the output

// ---- elementwise helpers --------------------------------------------------------------------
void add_forward(float* out, const float* a, const float* b, int N);   // out = a + b
void accumulate(float* out, const float* inp, int N);                 // out += inp
void scale(float* x, float s, int N);                                  // x *= s

// ---- dropout (counter-based RNG) -------------------------------------------------------------
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
// out = keep ? inp * s : 0 with s = 1 / (1 - p) computed once in float (as PyTorch does; the
// CUDA port must multiply too), keep = philox_uniform(key, i) >= p. p == 0 copies.
// In-place (out == inp) is allowed.
void dropout_forward(float* out, const float* inp, float p, const DropoutKey& key, int N);
void dropout_backward(float* dinp, const float* dout, float p, const DropoutKey& key, int N);

// ---- attention ----------------------------------------------------------------------------
// q, k, v, out: (B, T, C) with C = NH * HS, head h owning channels [h*HS, (h+1)*HS).
// att: (B, NH, T, T) softmax probabilities, stored before dropout (the backward needs them).
// mask: (B, T) with 1 = real token, 0 = padding (null = no padding). A masked key gets exactly
// zero weight (what Hugging Face's additive -1e4 mask gives in fp32). causal: key j > query i
// is masked too. Scores are scaled by 1/sqrt(HS). A query whose keys are all masked gets zero
// probabilities and a zero output. dq, dk, dv may be null.
// Dropout p on the probabilities uses `key` (site as given by the caller).
void attention_forward(float* out, float* att,
                       const float* q, const float* k, const float* v, const int32_t* mask,
                       bool causal, float p, const DropoutKey& key,
                       int B, int T, int NH, int HS);
void attention_backward(float* dq, float* dk, float* dv,
                        const float* dout, const float* att,
                        const float* q, const float* k, const float* v,
                        float p, const DropoutKey& key,
                        int B, int T, int NH, int HS);
// Flash-style (what the model uses): the same out, but instead of att it keeps only
// lse (B, NH, T), the log-sum-exp of each query's visible scaled scores (-inf when the query
// sees no key), and the backward recomputes the probabilities P_ij = exp(score_ij - lse_i).
// With z_ij the dropout factor and D_i = dout_i . out_i:
// dv_j += sum_i P_ij z_ij dout_i, dS_ij = P_ij (z_ij dout_i . v_j - D_i) / sqrt(HS),
// dq_i += sum_j dS_ij k_j, dk_j += sum_i dS_ij q_i. Adds into dq, dk, dv (any may be null).
void attention_forward_flash(float* out, float* lse,
                             const float* q, const float* k, const float* v, const int32_t* mask,
                             bool causal, float p, const DropoutKey& key,
                             int B, int T, int NH, int HS);
void attention_backward_flash(float* dq, float* dk, float* dv,
                              const float* dout, const float* out, const float* lse,
                              const float* q, const float* k, const float* v, const int32_t* mask,
                              bool causal, float p, const DropoutKey& key,
                              int B, int T, int NH, int HS);

// ---- softmax cross-entropy ------------------------------------------------------------------
// logits (N, V), targets (N) with ignore_index (-100) skipped.
// losses[n] = -log softmax(logits[n])[targets[n]], 0 for ignored rows. Computed in float64
// internally (log-sum-exp) and stored as float.
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V);
// dlogits[n] += scale * (softmax(logits[n]) - onehot(targets[n])); ignored rows untouched.
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets,
                           float scale, int N, int V);

// ---- embedding ----------------------------------------------------------------------------
// out[n] += table[ids[n]] for n < N (rows of width C). Adds, so word + position + type
// embeddings are three calls into one zeroed buffer. ids are checked by the caller.
void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C);
// dtable[id] += (sum of dout[n] over the n with ids[n] == id, added in increasing n): each
// touched row gets one addition of its micro-batch sum, so the bits do not depend on threads.
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C);

// ---- optimizer ----------------------------------------------------------------------------
// AdamW with decoupled weight decay and bias correction; t is the 1-based step.
void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t);
// Sum of squares in float64, summed in a fixed order (chunks of a fixed size, then the chunk
// partials in order) so the bits do not depend on the thread count.
double sum_squares(const float* x, int64_t N);

}  // namespace ops
