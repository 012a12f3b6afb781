// kernels/cpu/attention.cpp — multi-head scaled dot-product attention, one (batch, head) pair
// at a time. Threads own whole (b, h) pairs: each pair owns its own channel slice of
// out/dq/dk/dv and its own (T, T) block of att (or T entries of lse), so every sum runs in a
// fixed order on any thread count.
//   attention_forward / attention_backward: store the probabilities att (B, NH, T, T); the
//   backward walks query by query (the plainest statement of the gradients).
//   attention_forward_flash / attention_backward_flash: store only lse (B, NH, T) and recompute
//   the probabilities in the backward; the specification of the CUDA flash kernels (which tile
//   the same products) and what the model uses. Both forwards, and the flash backward, write
//   each head's products as (T, T) and (T, HS) matrices and multiply them with ops::gemm.
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vecmath.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ops {

namespace {

inline float dot(const float* a, const float* b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

inline void axpy(float* y, float a, const float* x, int n) {  // y += a * x
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

// Dropout on the probabilities of query i: z[j] = 1/(1-p) (kept) or 0 (dropped), all 1 without
// dropout. Element (b, h, i, j) has the index of its place in att (B, NH, T, T), as in
// dropout_forward; a whole row is drawn at once (philox_uniforms is vectorised).
void keep_row(float* z, float p, float s, const DropoutKey& key, int64_t bh, int i, int T) {
    if (p == 0.0f) {
        std::fill(z, z + T, 1.0f);
        return;
    }
    philox_uniforms(z, key, ((uint64_t)bh * T + i) * T, T);
    for (int j = 0; j < T; j++) z[j] = z[j] >= p ? s : 0.0f;
}

// keys: the batch row's attention mask (T), never null (a row of ones where there is no mask), so
// a loop over j loads it as a vector; `!mask || mask[b * T + j]` there was a gather of 16 loads.
inline bool visible(const int32_t* keys, bool causal, int i, int j) { return keys[j] != 0 && (!causal || j <= i); }

// Rows t = 0..T-1 of one head (HS channels, C apart in x) into a dense (T, HS) matrix, and back
// (adding: the backward's outputs accumulate).
void gather_head(float* xh, const float* x, int T, int HS, int C) {
    for (int t = 0; t < T; t++) std::copy(x + (size_t)t * C, x + (size_t)t * C + HS, xh + (size_t)t * HS);
}
void add_head(float* x, const float* xh, int T, int HS, int C) {
    for (int t = 0; t < T; t++) axpy(x + (size_t)t * C, 1.0f, xh + (size_t)t * HS, HS);
}

// Rows i0 .. i0 + R of the scores S (R, T) into probabilities in place: exactly 0 at masked keys, else
// exp(score * scale - max) / sum, the R sums at once (chain_sums); lse[r] = max + log(sum), or -inf.
template <int R>
void softmax_rows(float* lse, float* s, const int32_t* keys, bool causal, int i0, int T, float scale) {
    float sum[R];
    for (int r = 0; r < R; r++) {
        float* row = s + (size_t)r * T;   // (T)
        for (int j = 0; j < T; j++) row[j] = visible(keys, causal, i0 + r, j) ? row[j] * scale : -INFINITY;
        const float maxv = lse[r] = max32(row, T);   // -inf: every key masked, no attention
        for (int j = 0; j < T; j++) row[j] = row[j] == -INFINITY ? 0.0f : exp32(row[j] - maxv);   // vectorises
    }
    chain_sums(sum, T, [&](int r, int j) { return s[(size_t)r * T + j]; });
    for (int r = 0; r < R; r++) {
        if (lse[r] == -INFINITY) continue;   // its row is all zeros already
        for (int j = 0; j < T; j++) s[(size_t)r * T + j] *= 1.0f / sum[r];
        lse[r] += std::log(sum[r]);
    }
}

// Both forwards, one (b, h) pair at a time as matrices: S = Q K^T (ops::gemm: each score is the
// fma chain over the head's channels), softmax by rows, W = P * dropout factor, O = W V. The
// probabilities P go to att (v1) or to a scratch matrix (flash, which keeps lse instead).
void forward(float* out, float* att, float* lse,
             const float* q, const float* k, const float* v, const int32_t* mask,
             bool causal, float p, const DropoutKey& key,
             int B, int T, int NH, int HS) {
    const int C = NH * HS;
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const std::vector<int32_t> all(T, 1);   // (T): every key visible
    parallel_for((int64_t)B * NH, 1, [&](int64_t bh0, int64_t bh1) {
        std::vector<float> qh((size_t)T * HS), kh((size_t)T * HS), vh((size_t)T * HS), oh((size_t)T * HS);
        std::vector<float> S((size_t)T * T), W((size_t)T * T), z(T), l(T);   // (T, T), (T, T), (T), (T): l is v1's lse (not kept)
        for (int64_t bh = bh0; bh < bh1; bh++) {
            const int b = (int)(bh / NH), h = (int)(bh % NH);
            const size_t base = (size_t)b * T * C + h * HS;  // row t of this head at base + t * C
            gather_head(qh.data(), q + base, T, HS, C);
            gather_head(kh.data(), k + base, T, HS, C);
            gather_head(vh.data(), v + base, T, HS, C);
            float* P = att ? att + (size_t)bh * T * T : S.data();
            gemm(P, qh.data(), kh.data(), nullptr, T, T, HS, false, true, 1.0f, 0.0f);
            float* L = lse ? lse + bh * T : l.data();   // (T)
            const int32_t* keys = mask ? mask + (size_t)b * T : all.data();   // (T)
            by_groups<8>(0, T, [&](auto R, int i0) { softmax_rows<R()>(L + i0, P + (size_t)i0 * T, keys, causal, i0, T, scale); });
            for (int i = 0; i < T && p > 0.0f; i++) {   // W = P where nothing is dropped
                const float* row = P + (size_t)i * T;
                keep_row(z.data(), p, s, key, bh, i, T);
                for (int j = 0; j < T; j++) W[(size_t)i * T + j] = row[j] * z[j];
            }
            gemm(oh.data(), p > 0.0f ? W.data() : P, vh.data(), nullptr, T, HS, T, false, false, 1.0f, 0.0f);
            for (int t = 0; t < T; t++) std::copy(&oh[(size_t)t * HS], &oh[(size_t)t * HS] + HS, out + base + (size_t)t * C);
        }
    });
}

}  // namespace

void attention_forward(float* out, float* att, const float* q, const float* k, const float* v, const int32_t* mask,
                       bool causal, float p, const DropoutKey& key, int B, int T, int NH, int HS) {
    forward(out, att, nullptr, q, k, v, mask, causal, p, key, B, T, NH, HS);
}

void attention_backward(float* dq, float* dk, float* dv,
                        const float* dout, const float* att,
                        const float* q, const float* k, const float* v,
                        float p, const DropoutKey& key,
                        int B, int T, int NH, int HS) {
    const int C = NH * HS;
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    parallel_for((int64_t)B * NH, 1, [&](int64_t bh0, int64_t bh1) {
        std::vector<float> datt(T), z(T), dqi(HS);               // (T), (T), (HS)
        std::vector<float> dkb((size_t)T * HS), dvb((size_t)T * HS);  // (T, HS) each
        for (int64_t bh = bh0; bh < bh1; bh++) {
            const int b = (int)(bh / NH), h = (int)(bh % NH);
            const size_t base = (size_t)b * T * C + h * HS;  // row t of this head at base + t * C
            std::fill(dkb.begin(), dkb.end(), 0.0f);
            std::fill(dvb.begin(), dvb.end(), 0.0f);
            for (int i = 0; i < T; i++) {
                const float* doi = dout + base + (size_t)i * C;      // (HS)
                const float* arow = att + ((size_t)bh * T + i) * T;  // (T)
                // out_i = sum_j a_ij m_ij v_j with m the dropout factor: datt_ij = m_ij (do_i . v_j).
                float datt_dot_att = 0.0f;
                keep_row(z.data(), p, s, key, bh, i, T);
                for (int j = 0; j < T; j++) {
                    datt[j] = 0.0f;
                    if (arow[j] == 0.0f) continue;  // masked or underflowed: no gradient either way
                    const float m = z[j];
                    const float w = arow[j] * m;  // the same product as the forward
                    if (w == 0.0f) continue;
                    datt[j] = dot(doi, v + base + (size_t)j * C, HS) * m;
                    datt_dot_att += arow[j] * datt[j];
                    if (dv) axpy(&dvb[(size_t)j * HS], w, doi, HS);
                }
                // Softmax backward, then the scores: score_ij = scale * q_i . k_j.
                if (!dq && !dk) continue;
                std::fill(dqi.begin(), dqi.end(), 0.0f);
                const float* qi = q + base + (size_t)i * C;
                for (int j = 0; j < T; j++) {
                    if (arow[j] == 0.0f) continue;
                    const float dscore = arow[j] * (datt[j] - datt_dot_att) * scale;
                    if (dq) axpy(dqi.data(), dscore, k + base + (size_t)j * C, HS);
                    if (dk) axpy(&dkb[(size_t)j * HS], dscore, qi, HS);
                }
                if (dq) axpy(dq + base + (size_t)i * C, 1.0f, dqi.data(), HS);
            }
            for (int t = 0; t < T; t++) {
                if (dk) axpy(dk + base + (size_t)t * C, 1.0f, &dkb[(size_t)t * HS], HS);
                if (dv) axpy(dv + base + (size_t)t * C, 1.0f, &dvb[(size_t)t * HS], HS);
            }
        }
    });
}

void attention_forward_flash(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* mask,
                             bool causal, float p, const DropoutKey& key, int B, int T, int NH, int HS) {
    forward(out, nullptr, lse, q, k, v, mask, causal, p, key, B, T, NH, HS);
}

// One (b, h) pair at a time as matrices, recomputing the probabilities from lse:
//   S = Q K^T, P_ij = exp(S_ij * scale - lse_i) (0 where masked), W = P * dropout factor,
//   dW = dO V^T, dV = W^T dO, dS = P * (dW * factor - D_i) * scale with D_i = do_i . out_i,
//   dQ = dS K, dK = dS^T Q.
// Every product is ops::gemm (each entry one fma chain in increasing order); dq, dk and dv get
// their head's (T, HS) result added once.
void attention_backward_flash(float* dq, float* dk, float* dv,
                              const float* dout, const float* out, const float* lse,
                              const float* q, const float* k, const float* v, const int32_t* mask,
                              bool causal, float p, const DropoutKey& key,
                              int B, int T, int NH, int HS) {
    if (!dq && !dk && !dv) return;
    const int C = NH * HS;
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const std::vector<int32_t> all(T, 1);   // (T): every key visible
    parallel_for((int64_t)B * NH, 1, [&](int64_t bh0, int64_t bh1) {
        const size_t th = (size_t)T * HS, tt = (size_t)T * T;
        std::vector<float> qh(th), kh(th), vh(th), doh(th), grad(th);   // (T, HS) each
        std::vector<float> P(tt), W(tt), dS(tt), z(T);                 // (T, T) each, (T)
        for (int64_t bh = bh0; bh < bh1; bh++) {
            const int b = (int)(bh / NH), h = (int)(bh % NH);
            const size_t base = (size_t)b * T * C + h * HS;  // row t of this head at base + t * C
            gather_head(qh.data(), q + base, T, HS, C);
            gather_head(kh.data(), k + base, T, HS, C);
            gather_head(vh.data(), v + base, T, HS, C);
            gather_head(doh.data(), dout + base, T, HS, C);
            gemm(P.data(), qh.data(), kh.data(), nullptr, T, T, HS, false, true, 1.0f, 0.0f);    // S
            gemm(dS.data(), doh.data(), vh.data(), nullptr, T, T, HS, false, true, 1.0f, 0.0f);  // dO V^T
            const int32_t* keys = mask ? mask + (size_t)b * T : all.data();   // (T)
            for (int i = 0; i < T; i++) {
                const float lse_i = lse[bh * T + i];   // -inf: the query sees no key, so its row is 0
                // D_i = sum_j P_ij dP_ij = do_i . out_i, since out already carries the dropped weights.
                const float D_i = dot(dout + base + (size_t)i * C, out + base + (size_t)i * C, HS);
                keep_row(z.data(), p, s, key, bh, i, T);
                float *Pi = &P[(size_t)i * T], *Wi = &W[(size_t)i * T], *dSi = &dS[(size_t)i * T];
                for (int j = 0; j < T; j++) {
                    const bool on = visible(keys, causal, i, j) && lse_i != -INFINITY;
                    Pi[j] = on ? exp32(Pi[j] * scale - lse_i) : 0.0f;
                    Wi[j] = Pi[j] * z[j];
                    dSi[j] = Pi[j] * (z[j] * dSi[j] - D_i) * scale;
                }
            }
            if (dv) {
                gemm(grad.data(), W.data(), doh.data(), nullptr, T, HS, T, true, false, 1.0f, 0.0f);
                add_head(dv + base, grad.data(), T, HS, C);
            }
            if (dq) {
                gemm(grad.data(), dS.data(), kh.data(), nullptr, T, HS, T, false, false, 1.0f, 0.0f);
                add_head(dq + base, grad.data(), T, HS, C);
            }
            if (dk) {
                gemm(grad.data(), dS.data(), qh.data(), nullptr, T, HS, T, true, false, 1.0f, 0.0f);
                add_head(dk + base, grad.data(), T, HS, C);
            }
        }
    });
}

}  // namespace ops
