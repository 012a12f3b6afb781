// kernels/cpu/vecmath.hpp — exp and erf for float, written so that a loop calling them vectorises:
// no branches (both sides of a select are computed), no calls, fma for every Horner step; and row
// sums that run several rows' add chains at once (chain_sums, by_groups).
// std::exp and std::erf are calls the compiler cannot vectorise, and they were ~12% of a CPU step.
// The polynomials are least-squares fits in float64, reweighted toward minimax, with the
// coefficients rounded to float (scripts/fit_vecmath.py prints them again). Their errors against
// std::exp and std::erf, over every float, are measured in tests/test_kernels.cpp.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ops {

inline float bits_to_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// The polynomial with these coefficients, highest degree first, at x by Horner's rule:
// p = c_n, then p = fma(p, x, c_i) for i = n-1 .. 0 (one rounding a step).
template <typename... C>
inline float horner(float x, float highest, C... rest) {
    float p = highest;
    ((p = std::fma(p, x, rest)), ...);
    return p;
}

// exp(x) = 2^k e^r, k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts, the
// first with 9 zero low bits, so k ln2_hi is exact), e^r by a degree-6 polynomial, then 2^k as two
// exact factors 2^k1 2^k2 (k in [-150, 128] has no single normal float). Overflow gives +inf and
// results below FLT_MIN come out subnormal, as std::exp's; NaN stays NaN.
inline float exp32(float x) {
    // Clamped (NaN passes through, to the last line); ternaries vectorise, std::fmin may not.
    const float xc = x < -104.0f ? -104.0f : (x > 88.7229f ? 88.7229f : (x != x ? 0.0f : x));
    // k = round(xc / ln 2): adding and subtracting 1.5 * 2^23 rounds to an integer (to nearest),
    // which vectorises where std::nearbyint may not.
    const float k = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = std::fma(k, -0.693145752f, xc);
    r = std::fma(k, -1.42860677e-6f, r);
    const float p = horner(r, 1.383683644e-03f, 8.374815807e-03f, 4.166822508e-02f, 1.666641980e-01f,
                           4.999999106e-01f, 1.0f, 1.0f);
    const int32_t k1 = int32_t(k) >> 1, k2 = int32_t(k) - k1;
    const float e = p * bits_to_float(uint32_t(k1 + 127) << 23) * bits_to_float(uint32_t(k2 + 127) << 23);
    return x != x ? x : e;
}

// erf(x): |x| < 1: x (2/sqrt(pi) + x^2 P(x^2)), P of degree 6 in x^2; 1 <= |x| < 3.95:
// 1 - Q(|x| - 2.475), Q a degree-14 fit of erfc; beyond 3.95 erf rounds to 1 in float. The sign is
// x's. NaN stays NaN.
inline float erf32(float x) {
    const float a = std::fabs(x), s = a * a;
    // erf(a) = a (2/sqrt(pi) + s P(s)), 2/sqrt(pi) in two parts
    const float p = horner(s, -9.684233191e-06f, 1.127302821e-04f, -8.485250291e-04f, 5.221131258e-03f,
                           -2.686547674e-02f, 1.128378361e-01f, -3.761263788e-01f);
    const float small = std::fma(a, 1.128379226e+00f, a * std::fma(p, s, -5.863538277e-08f));
    const float q = horner(a - 2.475f, -1.016013925e-06f, -2.699697177e-07f, 1.675024942e-05f, -2.193182627e-05f,
                           -7.819193706e-05f, 2.887647715e-04f, -3.181550710e-04f, -5.005619023e-04f,
                           2.888075542e-03f, -6.536941510e-03f, 9.413667955e-03f, -9.252819233e-03f,
                           6.105264183e-03f, -2.466699341e-03f, 4.649467592e-04f);
    const float large = a >= 3.95f ? 1.0f : 1.0f - q;
    return std::copysign(a < 1.0f ? small : large, x);
}

// The largest of x[0..n): -inf for none, and NaNs passed over (as `x > m ? x : m` passes them).
// Kept in 16 lanes, then taken across them: a max is the same in any order, and one chain of
// compares does not vectorise. The lanes' loop is kept a loop: GCC 12 unrolled it first and then
// emitted 16 scalar vmaxss a step; left a loop, the vectoriser makes it one vmaxps (x > lane ? x : lane
// is maxps's own rule, NaN in x giving lane).
inline float max32(const float* x, int n) {
    float lane[16], m = -INFINITY;
    std::fill(lane, lane + 16, -INFINITY);
    for (int i = 0; i + 16 <= n; i += 16)
#pragma GCC unroll 1
        for (int l = 0; l < 16; l++) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
    for (int i = n / 16 * 16; i < n; i++) m = x[i] > m ? x[i] : m;
    for (float v : lane) m = v > m ? v : m;
    return m;
}

// Sums of R rows at once, each row's terms added in increasing c from 0: the same bits as one row
// at a time, with R add chains in flight instead of one. A sum's adds wait on each other (about 4
// cycles each), so a layer norm's row sums ran at a quarter of an add a cycle. term(r, c) is row
// r's term at c, of the sums' type (float64 or float).
template <int R, typename Sum, typename Term>
inline void chain_sums(Sum (&sum)[R], int C, Term term) {
    for (int r = 0; r < R; r++) sum[r] = Sum(0);
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) sum[r] += term(r, c);
}

// Calls rows(R, n) for n0 <= n < n1: G rows at a time (R a std::integral_constant of G, so a
// caller's arrays and loops have a constant size), then the rest one by one (R of 1).
template <int G, typename Rows>
inline void by_groups(int64_t n0, int64_t n1, Rows rows) {
    int64_t n = n0;
    for (; n + G <= n1; n += G) rows(std::integral_constant<int, G>(), n);
    for (; n < n1; n++) rows(std::integral_constant<int, 1>(), n);
}

}  // namespace ops
