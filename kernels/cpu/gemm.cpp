// kernels/cpu/gemm.cpp — matrix multiply: the naive reference, a cache-blocked kernel, and
// the bias gradient.
//
// Both GEMMs compute every C[m][n] as one chain acc = ((0 + a0*b0) + a1*b1) + ... in
// increasing k, then alpha * acc (+ beta * C) (+ bias). The blocked kernel only changes which
// order the *outputs* are visited in, so it gives the same bits as the naive loop, on any
// number of threads.
#include "kernels/ops.hpp"
#include "kernels/bf16.hpp"
#include "kernels/cpu/parallel.hpp"

#include <algorithm>
#include <vector>

namespace ops {

namespace {

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

// Register tile MR x NR = 6 x 32 floats of C (12 AVX-512 registers): of the plain-C++ shapes
// we measured with GCC 12, the one it vectorises best (6 x 16 came out 15x slower).
// Cache tile MC x NC of C, and K in slices of KC so the packed panels stay in L2.
constexpr int MR = 6, NR = 32;
constexpr int MC = 96, NC = 256, KC = 256;

// Copies op(A)[i0:i0+mc, p0:p0+kc] into strips of MR rows, k-major inside a strip
// (Ap[strip][k][r]), zero-padding the last strip. The micro-kernel then reads A contiguously.
void pack_a(float* Ap, const float* A, int i0, int mc, int p0, int kc, int M, int K, bool transA) {
    for (int s = 0; s < mc; s += MR)
        for (int k = 0; k < kc; k++)
            for (int r = 0; r < MR; r++)
                *Ap++ = s + r < mc ? op_a(A, i0 + s + r, p0 + k, M, K, transA) : 0.0f;
}

// Copies op(B)[p0:p0+kc, j0:j0+nc] into strips of NR columns (Bp[strip][k][c]), zero-padded.
void pack_b(float* Bp, const float* B, int p0, int kc, int j0, int nc, int N, int K, bool transB) {
    for (int s = 0; s < nc; s += NR)
        for (int k = 0; k < kc; k++)
            for (int c = 0; c < NR; c++)
                *Bp++ = s + c < nc ? op_b(B, p0 + k, j0 + s + c, N, K, transB) : 0.0f;
}

// acc[MR][NR] (row stride ldacc) += Ap strip @ Bp strip over kc. Fixed trip counts let the
// compiler keep the tile in vector registers and vectorise the j loop.
void micro_kernel(float* acc, int ldacc, const float* Ap, const float* Bp, int kc) {
    float c[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) c[i][j] = acc[i * ldacc + j];
    for (int k = 0; k < kc; k++) {
        const float* a = Ap + k * MR;
        const float* b = Bp + k * NR;
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) c[i][j] += a[i] * b[j];
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i * ldacc + j] = c[i][j];
}

}  // namespace

void gemm_naive(float* C, const float* A, const float* B, const float* bias,
                int M, int N, int K, bool transA, bool transB, float alpha, float beta) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += op_a(A, m, k, M, K, transA) * op_b(B, k, n, N, K, transB);
            float* c = C + (size_t)m * N + n;
            *c = finish(acc, *c, bias, n, alpha, beta);
        }
}

void gemm(float* C, const float* A, const float* B, const float* bias,
          int M, int N, int K, bool transA, bool transB, float alpha, float beta) {
    const int tiles_m = (M + MC - 1) / MC, tiles_n = (N + NC - 1) / NC;
    // Threads own whole MC x NC tiles of C: no two threads ever touch the same output.
    parallel_for((int64_t)tiles_m * tiles_n, 1, [&](int64_t t0, int64_t t1) {
        std::vector<float> Ap((size_t)MC * KC), Bp((size_t)KC * NC), acc((size_t)MC * NC);
        for (int64_t t = t0; t < t1; t++) {
            const int i0 = (int)(t / tiles_n) * MC, j0 = (int)(t % tiles_n) * NC;
            const int mc = std::min(MC, M - i0), nc = std::min(NC, N - j0);
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int p0 = 0; p0 < K; p0 += KC) {
                const int kc = std::min(KC, K - p0);
                pack_a(Ap.data(), A, i0, mc, p0, kc, M, K, transA);
                pack_b(Bp.data(), B, p0, kc, j0, nc, N, K, transB);
                for (int js = 0; js < nc; js += NR)
                    for (int is = 0; is < mc; is += MR)
                        micro_kernel(&acc[(size_t)is * NC + js], NC, &Ap[(size_t)is * kc],
                                     &Bp[(size_t)js * kc], kc);
            }
            for (int i = 0; i < mc; i++) {
                float* c = C + (size_t)(i0 + i) * N + j0;
                for (int j = 0; j < nc; j++)
                    c[j] = finish(acc[(size_t)i * NC + j], c[j], bias, j0 + j, alpha, beta);
            }
        }
    });
}

float round_bf16(float x) { return bf16::value(bf16::bits(x)); }

void to_bf16(uint16_t* out, const float* inp, int N) {
    for (int i = 0; i < N; i++) out[i] = bf16::bits(inp[i]);
}
void from_bf16(float* out, const uint16_t* inp, int N) {
    for (int i = 0; i < N; i++) out[i] = bf16::value(inp[i]);
}

void gemm_bf16(float* C, const float* A, const float* B, const float* bias,
               int M, int N, int K, bool transA, bool transB, float alpha, float beta) {
    std::vector<float> a(A, A + (size_t)M * K), b(B, B + (size_t)K * N);
    for (float& x : a) x = round_bf16(x);
    for (float& x : b) x = round_bf16(x);
    gemm(C, a.data(), b.data(), bias, M, N, K, transA, transB, alpha, beta);
}

void bias_backward(float* dbias, const float* dout, int N, int OC) {
    // Threads own columns; each column sums its rows in increasing n, then adds once.
    parallel_for(OC, 64, [&](int64_t o0, int64_t o1) {
        std::vector<float> sum(o1 - o0, 0.0f);  // (o1 - o0)
        for (int n = 0; n < N; n++) {
            const float* row = dout + (size_t)n * OC + o0;
            for (int64_t o = 0; o < o1 - o0; o++) sum[o] += row[o];
        }
        for (int64_t o = o0; o < o1; o++) dbias[o] += sum[o - o0];
    });
}

}  // namespace ops
