// kernels/cpu/attention.cpp — multi-head scaled dot-product attention, one (batch, head) pair
// at a time. Threads own whole (b, h) pairs: each pair owns its own channel slice of
// out/dq/dk/dv and its own (T, T) block of att (or T entries of lse), so the sums over queries
// into dk and dv run in a fixed order on any thread count.
//   attention_forward / attention_backward: store the probabilities att (B, NH, T, T).
//   attention_forward_flash / attention_backward_flash: store only lse (B, NH, T) and recompute
//   the probabilities in the backward; the specification of the CUDA flash kernels (which tile
//   the same loops) and what the model uses.
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"

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

// xt (HS, T) = the head's rows x_j (T rows of HS channels, C apart), transposed.
void transpose_head(float* xt, const float* x, int T, int HS, int C) {
    for (int j = 0; j < T; j++)
        for (int d = 0; d < HS; d++) xt[(size_t)d * T + j] = x[(size_t)j * C + d];
}

// out[j] = a . x_j for j < T, with xt (HS, T) from transpose_head: HS axpys over j, which the
// compiler vectorises, where T separate dot products would each be a chain of dependent adds.
// Each out[j] still sums d = 0, 1, ... HS-1 in order from 0: dot()'s bits.
void dots(float* out, const float* a, const float* xt, int T, int HS) {
    std::fill(out, out + T, 0.0f);
    for (int d = 0; d < HS; d++) axpy(out, a[d], xt + (size_t)d * T, T);
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

inline bool visible(const int32_t* mask, bool causal, int b, int i, int j, int T) {
    return (!mask || mask[b * T + j] != 0) && (!causal || j <= i);
}

// Both forwards: the probabilities of one query go to its row of att (v1) or to a scratch row
// (flash, which keeps lse_i = max + log(sum) instead). The same operations, so the same out.
void forward(float* out, float* att, float* lse,
             const float* q, const float* k, const float* v, const int32_t* mask,
             bool causal, float p, const DropoutKey& key,
             int B, int T, int NH, int HS) {
    const int C = NH * HS;
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    parallel_for((int64_t)B * NH, 1, [&](int64_t bh0, int64_t bh1) {
        std::vector<float> scratch(att ? 0 : T), z(T), kt((size_t)HS * T);  // (T), (T), (HS, T)
        for (int64_t bh = bh0; bh < bh1; bh++) {
            const int b = (int)(bh / NH), h = (int)(bh % NH);
            const size_t base = (size_t)b * T * C + h * HS;  // row t of this head at base + t * C
            transpose_head(kt.data(), k + base, T, HS, C);
            for (int i = 0; i < T; i++) {
                const float* qi = q + base + (size_t)i * C;  // (HS)
                float* oi = out + base + (size_t)i * C;      // (HS)
                float* arow = att ? att + ((size_t)bh * T + i) * T : scratch.data();  // (T)
                // Scores of the visible keys; masked keys get exactly zero probability.
                dots(arow, qi, kt.data(), T, HS);
                float maxv = -INFINITY;
                for (int j = 0; j < T; j++) {
                    arow[j] = visible(mask, causal, b, i, j, T) ? arow[j] * scale : -INFINITY;
                    if (arow[j] > maxv) maxv = arow[j];
                }
                for (int c = 0; c < HS; c++) oi[c] = 0.0f;
                if (maxv == -INFINITY) {  // every key masked (an all-padding row): no attention
                    for (int j = 0; j < T; j++) arow[j] = 0.0f;
                    if (lse) lse[bh * T + i] = -INFINITY;
                    continue;
                }
                float sum = 0.0f;
                for (int j = 0; j < T; j++) {
                    arow[j] = arow[j] == -INFINITY ? 0.0f : std::exp(arow[j] - maxv);
                    sum += arow[j];
                }
                if (lse) lse[bh * T + i] = maxv + std::log(sum);
                const float inv = 1.0f / sum;
                for (int j = 0; j < T; j++) arow[j] *= inv;
                keep_row(z.data(), p, s, key, bh, i, T);
                for (int j = 0; j < T; j++) {
                    if (arow[j] == 0.0f) continue;
                    const float w = arow[j] * z[j];
                    if (w != 0.0f) axpy(oi, w, v + base + (size_t)j * C, HS);
                }
            }
        }
    });
}

}  // namespace

void attention_forward(float* out, float* att,
                       const float* q, const float* k, const float* v, const int32_t* mask,
                       bool causal, float p, const DropoutKey& key,
                       int B, int T, int NH, int HS) {
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

void attention_forward_flash(float* out, float* lse,
                             const float* q, const float* k, const float* v, const int32_t* mask,
                             bool causal, float p, const DropoutKey& key,
                             int B, int T, int NH, int HS) {
    forward(out, nullptr, lse, q, k, v, mask, causal, p, key, B, T, NH, HS);
}

// Query by query: every visible pair (i, j) recomputes its score as the forward did, then
// P_ij = exp(score - lse_i), and adds its share of dq_i, dk_j and dv_j. dk and dv collect in a
// (T, HS) scratch per (b, h), summed over i in increasing order, then added once. A query's
// rows of scores and dP are computed first, vectorised over keys (dots).
void attention_backward_flash(float* dq, float* dk, float* dv,
                              const float* dout, const float* out, const float* lse,
                              const float* q, const float* k, const float* v, const int32_t* mask,
                              bool causal, float p, const DropoutKey& key,
                              int B, int T, int NH, int HS) {
    if (!dq && !dk && !dv) return;
    const int C = NH * HS;
    const float scale = 1.0f / std::sqrt((float)HS);
    const float s = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    parallel_for((int64_t)B * NH, 1, [&](int64_t bh0, int64_t bh1) {
        std::vector<float> dqi(HS), P(T), Z(T), dP(T);                // (HS), then (T) each
        std::vector<float> dkb((size_t)T * HS), dvb((size_t)T * HS);  // (T, HS) each
        std::vector<float> kt((size_t)HS * T), vt((size_t)HS * T);    // (HS, T) each
        for (int64_t bh = bh0; bh < bh1; bh++) {
            const int b = (int)(bh / NH), h = (int)(bh % NH);
            const size_t base = (size_t)b * T * C + h * HS;  // row t of this head at base + t * C
            std::fill(dkb.begin(), dkb.end(), 0.0f);
            std::fill(dvb.begin(), dvb.end(), 0.0f);
            transpose_head(kt.data(), k + base, T, HS, C);
            transpose_head(vt.data(), v + base, T, HS, C);
            for (int i = 0; i < T; i++) {
                const float* qi = q + base + (size_t)i * C;    // (HS)
                const float* doi = dout + base + (size_t)i * C;
                const float lse_i = lse[bh * T + i];  // -inf: the query sees no key, so no pair below
                // D_i = sum_j P_ij dP_ij = do_i . out_i, since out already carries the dropped weights.
                const float D_i = dot(doi, out + base + (size_t)i * C, HS);
                std::fill(dqi.begin(), dqi.end(), 0.0f);
                keep_row(Z.data(), p, s, key, bh, i, T);
                dots(P.data(), qi, kt.data(), T, HS);
                dots(dP.data(), doi, vt.data(), T, HS);
                for (int j = 0; j < T; j++) {
                    if (!visible(mask, causal, b, i, j, T)) continue;
                    P[j] = std::exp(P[j] * scale - lse_i);
                    dP[j] = Z[j] * dP[j];
                    const float ds = P[j] * (dP[j] - D_i) * scale;
                    if (dv) axpy(&dvb[(size_t)j * HS], P[j] * Z[j], doi, HS);
                    if (dq) axpy(dqi.data(), ds, k + base + (size_t)j * C, HS);
                    if (dk) axpy(&dkb[(size_t)j * HS], ds, qi, HS);
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

}  // namespace ops
