// tests/test_kernels.cpp — the CPU kernels (kernels/cpu/*.cpp) against independent references:
// float64 loops for the forwards, central finite differences for every backward, known-answer
// vectors for Philox, and the determinism the pipeline's bitwise tests rely on (same bits
// with 1, 2 and 3 intra-op threads). Shapes are deliberately awkward (7, 11, 13, 26, 37, ...)
// so no loop ever lands on a block boundary by luck.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "kernels/ops.hpp"
#include "kernels/cpu/gemm_reuse.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vecmath.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using Vec = std::vector<float>;

Vec random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    Vec v(n);
    for (float& x : v) x = dist(gen);
    return v;
}

bool same_bits(const Vec& a, const Vec& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// max |a - ref| / max |ref|: one number that is ~1e-7 when right, ~1 when wrong, NaN on a NaN.
double rel_err(const Vec& a, const std::vector<double>& ref) {
    double err = 0.0, scale = 1e-30;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = std::fabs(a[i] - ref[i]);
        if (!(d <= err)) err = d;  // written so that a NaN sticks (std::max would drop it)
        scale = std::max(scale, std::fabs(ref[i]));
    }
    return err / scale;
}

// The scalar objective of every gradient check: L = sum(out * R), in float64.
double objective(const Vec& out, const Vec& R) {
    double s = 0.0;
    for (size_t i = 0; i < out.size(); i++) s += (double)out[i] * R[i];
    return s;
}

// Central differences of loss() with respect to every entry of x (restored afterwards).
// The step is the float-representable one, so (x+h) - (x-h) is exact in the denominator.
std::vector<double> numeric_grad(Vec& x, const std::function<double()>& loss, float h = 1e-2f) {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        const float saved = x[i];
        x[i] = saved + h;
        const double up = loss();
        const float hi = x[i];
        x[i] = saved - h;
        const double down = loss();
        const float lo = x[i];
        x[i] = saved;
        g[i] = (up - down) / ((double)hi - lo);
    }
    return g;
}

// fp32 forwards with h = 1e-2: rounding noise ~1e-5 and truncation ~1e-5 relative, while a
// wrong formula is off by O(1). 2e-3 separates the two by orders of magnitude.
constexpr double kGradTol = 2e-3;

void check_grad(const Vec& analytic, const std::vector<double>& numeric, const char* what) {
    INFO(what);
    REQUIRE(analytic.size() == numeric.size());
    CHECK(rel_err(analytic, numeric) < kGradTol);
}

// Runs fn under 1, 2 and 3 intra-op threads and requires the same bits from each.
void check_thread_invariant(const std::function<std::vector<Vec>()>& fn, const char* what) {
    INFO(what);
    ops::set_num_threads(1);
    const std::vector<Vec> ref = fn();
    for (int threads : {2, 3}) {
        ops::set_num_threads(threads);
        const std::vector<Vec> got = fn();
        REQUIRE(got.size() == ref.size());
        for (size_t i = 0; i < ref.size(); i++) {
            INFO("threads " << threads << ", output " << i);
            CHECK(same_bits(got[i], ref[i]));
        }
    }
    ops::set_num_threads(1);
}

Vec twice(const Vec& v) {
    Vec r(v);
    for (float& x : r) x *= 2.0f;  // exact: x + x == 2x in binary floating point
    return r;
}

}  // namespace

// ================================================================================= threads ====

TEST_CASE("parallel_for covers every index once, in contiguous static pieces") {
    for (int threads : {1, 2, 3, 5}) {
        ops::set_num_threads(threads);
        for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
            std::vector<std::atomic<int>> hits(n);
            for (auto& h : hits) h = 0;
            std::atomic<int> pieces{0};
            ops::parallel_for(n, 1, [&](int64_t b, int64_t e) {
                pieces++;
                for (int64_t i = b; i < e; i++) hits[i]++;
            });
            for (int64_t i = 0; i < n; i++) CHECK(hits[i] == 1);
            CHECK(pieces.load() == std::min<int64_t>(n, threads));
        }
    }
    ops::set_num_threads(1);
}

// Array's zeros and copies (src/device.hpp) go through these: every byte, and only those, on any
// thread count, lengths around the 256 KiB pieces and at odd offsets included.
TEST_CASE("zero_bytes and copy_bytes_apart write every byte of the range and nothing around it") {
    for (int threads : {1, 2, 3}) {
        ops::set_num_threads(threads);
        for (size_t bytes : {size_t(0), size_t(1), size_t(1000), size_t(1) << 18, (size_t(1) << 20) + 13, size_t(3) << 20}) {
            INFO("threads " << threads << ", " << bytes << " bytes");
            std::vector<unsigned char> buf(bytes + 16, 0xAB), src(bytes + 16);
            for (size_t i = 0; i < src.size(); i++) src[i] = (unsigned char)(i % 101);   // never 0xAB
            ops::zero_bytes(buf.data() + 5, bytes);
            CHECK(std::count(buf.begin() + 5, buf.begin() + 5 + long(bytes), 0) == long(bytes));
            CHECK(std::count(buf.begin(), buf.end(), 0xAB) == 16);
            ops::copy_bytes_apart(buf.data() + 5, src.data() + 3, bytes);
            CHECK(std::equal(buf.begin() + 5, buf.begin() + 5 + long(bytes), src.begin() + 3));
            CHECK(std::count(buf.begin(), buf.end(), 0xAB) == 16);
        }
    }
    ops::set_num_threads(1);
}

TEST_CASE("the thread count is per calling thread, and a nested parallel_for does not hang") {
    ops::set_num_threads(3);
    int other = 0;
    std::thread t([&] { other = ops::num_threads(); });
    t.join();
    CHECK(other == 1);
    CHECK(ops::num_threads() == 3);
    std::atomic<int> inner{0};
    ops::parallel_for(6, 1, [&](int64_t b, int64_t e) {
        ops::parallel_for(e - b, 1, [&](int64_t ib, int64_t ie) { inner += (int)(ie - ib); });
    });
    CHECK(inner == 6);
    // an exception in any piece reaches the caller, and the pool keeps working afterwards
    for (int64_t bad_piece_start : {0, 4}) {
        CHECK_THROWS_AS(ops::parallel_for(6, 1, [&](int64_t b, int64_t) {
            if (b == bad_piece_start) throw std::runtime_error("piece failed");
        }), std::runtime_error);
    }
    std::atomic<int> after{0};
    ops::parallel_for(6, 1, [&](int64_t b, int64_t e) { after += (int)(e - b); });
    CHECK(after == 6);
    ops::set_num_threads(0);
    CHECK(ops::num_threads() == 1);
}

// ==================================================================================== GEMM ====

namespace {
// C = alpha op(A) op(B) + beta C + bias, in float64.
std::vector<double> gemm_ref(const Vec& C0, const Vec& A, const Vec& B, const float* bias,
                             int M, int N, int K, bool ta, bool tb, float alpha, float beta) {
    std::vector<double> C(C0.begin(), C0.end());
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++)
                acc += (double)(ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[n * K + k] : B[k * N + n]);
            double c = alpha * acc + (beta != 0.0f ? beta * C[m * N + n] : 0.0);
            C[m * N + n] = c + (bias ? bias[n] : 0.0);
        }
    return C;
}
}  // namespace

TEST_CASE("gemm and gemm_naive match a float64 reference: transposes, alpha/beta/bias, odd sizes") {
    const int sizes[][3] = {{1, 1, 1}, {1, 17, 63}, {17, 1, 130}, {63, 130, 17},
                            {130, 63, 1}, {17, 17, 17}, {130, 130, 63}, {7, 300, 270}};
    uint32_t seed = 1;
    for (auto& s : sizes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int variant = 0; variant < 3; variant++) {
                    const int M = s[0], N = s[1], K = s[2];
                    const Vec A = random_vec((size_t)M * K, seed++), B = random_vec((size_t)K * N, seed++);
                    const Vec C0 = random_vec((size_t)M * N, seed++), bias = random_vec(N, seed++);
                    // variant 0: plain product; 1: alpha, beta, bias; 2: beta = 0 over NaN garbage
                    const float alpha = variant == 1 ? -0.75f : 1.0f, beta = variant == 1 ? 0.5f : 0.0f;
                    const float* b = variant == 1 ? bias.data() : nullptr;
                    Vec Cin = C0;
                    if (variant == 2) std::fill(Cin.begin(), Cin.end(), NAN);
                    const auto ref = gemm_ref(C0, A, B, b, M, N, K, ta, tb, alpha, beta);
                    Vec C1 = Cin, C2 = Cin;
                    ops::gemm(C1.data(), A.data(), B.data(), b, M, N, K, ta, tb, alpha, beta);
                    ops::gemm_naive(C2.data(), A.data(), B.data(), b, M, N, K, ta, tb, alpha, beta);
                    INFO("M=" << M << " N=" << N << " K=" << K << " transA=" << ta << " transB=" << tb
                              << " variant=" << variant);
                    // fp32 dot products of length K: relative error ~ K * 6e-8 at worst
                    CHECK(rel_err(C1, ref) < 2e-5);
                    CHECK(rel_err(C2, ref) < 2e-5);
                }
}

// Every micro-kernel this CPU runs (plain C++, AVX2 + FMA, AVX-512) against the naive loop, bit
// for bit: shapes that cut every register and cache tile (MR 6/14, NR 16/32, KC 256, blocks of
// 256 rows and 512 columns), every transpose, alpha/beta/bias, and beta = 0 over NaN garbage.
// Where C is one block of rows, each block packs its own strips of B; with more, B is packed once
// for all (38 x 1100 x 600: an MLM head's few rows, several blocks of columns and of K). Blocks of
// at most 128 columns read A in place (40 x 100 x 300: 7 strips of AVX2's 16, 4 of AVX-512's 32), and
// so does a transposed A at any width with AVX-512, up to 256 columns with AVX2 (301 x 40 x 600 is
// wider: packed with AVX2, in place with AVX-512).
TEST_CASE("every GEMM micro-kernel gives gemm_naive's bits on awkward shapes") {
    const int sizes[][3] = {{1, 1, 1}, {5, 15, 3}, {13, 33, 257}, {145, 17, 513}, {12, 32, 256},
                            {290, 530, 70}, {7, 1030, 31}, {301, 40, 600}, {38, 1100, 600}, {40, 100, 300},
                            {250, 250, 90},    // 250 x 250 on 2 threads: two blocks of 128 columns, A in place
                            {300, 200, 520}};  // a (K, M) A with M > 256 and 200 columns: packed, 3 slices of K
    const ops::GemmKernel before = ops::gemm_kernel();
    int ran = 0;
    for (ops::GemmKernel k : {ops::GemmKernel::plain, ops::GemmKernel::avx2, ops::GemmKernel::avx512}) {
        if (!ops::gemm_kernel_runs(k)) {
            MESSAGE("skipped: this CPU has no " << ops::gemm_kernel_name(k));
            continue;
        }
        ops::set_gemm_kernel(k);
        ran++;
        uint32_t seed = 100;
        for (auto& s : sizes)
            for (int t = 0; t < 4; t++)
                for (int variant = 0; variant < 5; variant++) {
                    const int M = s[0], N = s[1], K = s[2];
                    const bool ta = t & 1, tb = t & 2;
                    const Vec A = random_vec((size_t)M * K, seed++), B = random_vec((size_t)K * N, seed++);
                    const Vec bias = random_vec(N, seed++);
                    Vec C0 = random_vec((size_t)M * N, seed++);
                    // 0: the product; 1: alpha, beta, bias; 2: beta 0 over NaN garbage; 3 and 4: alpha 1 with a
                    // bias, beta 0 (a linear layer's forward) and 1 (adding, as gradients do): their ends are
                    // done in the tiles' registers (End), and at C's edges after the tile
                    const float alpha = variant == 1 ? -0.75f : 1.0f, beta = variant == 1 ? 0.5f : variant == 4 ? 1.0f : 0.0f;
                    const float* b = variant == 1 || variant >= 3 ? bias.data() : nullptr;
                    if (variant == 2) std::fill(C0.begin(), C0.end(), NAN);
                    Vec C1 = C0, C2 = C0;
                    for (int threads : {1, 2}) {
                        ops::set_num_threads(threads);
                        C1 = C0;
                        ops::gemm(C1.data(), A.data(), B.data(), b, M, N, K, ta, tb, alpha, beta);
                    }
                    ops::set_num_threads(1);
                    ops::gemm_naive(C2.data(), A.data(), B.data(), b, M, N, K, ta, tb, alpha, beta);
                    // a string: doctest prints a char* as its address
                    INFO(std::string(ops::gemm_kernel_name(k)) << " M=" << M << " N=" << N << " K=" << K
                                                               << " transA=" << ta << " transB=" << tb << " variant=" << variant);
                    CHECK(same_bits(C1, C2));
                    if (variant == 2) {   // beta 0 over garbage: the bits of beta 1 over zeros (src/model.cpp relies on it)
                        Vec C3((size_t)M * N, 0.0f);
                        ops::gemm(C3.data(), A.data(), B.data(), nullptr, M, N, K, ta, tb, 1.0f, 1.0f);
                        CHECK(same_bits(C1, C3));
                    }
                }
    }
    ops::set_gemm_kernel(before);
    CHECK(ran >= 1);
}

// A weight's packing is reused only inside a ConstantWeights scope and only for B inside its ranges:
// each product below must have gemm_naive's bits on B's values at the time of the call.
TEST_CASE("ConstantWeights reuses a weight's packing in its scope, repacks after, and reuses nothing else") {
    const int M = 37, N = 530, K = 70;   // W (N, K): x W^T is nt, dy W is nn with (K, N) = (530, 70)
    const ops::GemmKernel before = ops::gemm_kernel();
    Vec W = random_vec((size_t)N * K, 1), act = random_vec((size_t)N * K, 2);
    const Vec x = random_vec((size_t)M * K, 3), dy = random_vec((size_t)M * N, 4);
    auto check = [&](const float* B, const Vec& A, int n, int k, bool tb) {
        Vec C1((size_t)M * n), C2((size_t)M * n);
        ops::gemm(C1.data(), A.data(), B, nullptr, M, n, k, false, tb, 1.0f, 0.0f);
        ops::gemm_naive(C2.data(), A.data(), B, nullptr, M, n, k, false, tb, 1.0f, 0.0f);
        return same_bits(C1, C2);
    };
    for (ops::GemmKernel kn : {ops::GemmKernel::plain, ops::GemmKernel::avx2, ops::GemmKernel::avx512}) {
        if (!ops::gemm_kernel_runs(kn)) continue;
        ops::set_gemm_kernel(kn);
        INFO(ops::gemm_kernel_name(kn));
        for (int step = 0; step < 2; step++) {
            ops::ConstantWeights constant({{W.data(), W.size() * sizeof(float)}});
            CHECK_THROWS_AS(ops::ConstantWeights({{W.data(), 4}}), std::logic_error);   // one at a time
            for (int threads : {1, 2, 1}) {   // packed on the first call, reused by the others
                ops::set_num_threads(threads);
                CHECK(check(W.data(), x, N, K, true));     // x W^T
                CHECK(check(W.data(), dy, K, N, false));   // dy W
                CHECK(check(W.data() + K, x, N - 1, K, true));   // another B inside the range
                CHECK(check(W.data(), x, N, K, false));   // the same floats read as (K, N)
            }
            CHECK(ops::packed_weight_bytes() >= 4 * W.size() * sizeof(float) * 9 / 10);
            // An activation changes between calls at the same address: never reused.
            CHECK(check(act.data(), x, N, K, true));
            for (float& a : act) a = -a;
            CHECK(check(act.data(), x, N, K, true));
            ops::set_num_threads(1);
            // After the scope the optimizer changes the weight: the next step repacks it.
            for (float& w : W) w *= 0.5f;
        }
        {
            ops::ConstantWeights other({{act.data(), act.size() * sizeof(float)}});
            CHECK(ops::packed_weight_bytes() == 0);   // packings of weights no longer named: dropped
        }
        {
            ops::ConstantWeights once({{W.data(), W.size() * sizeof(float)}}, ops::Packings::freed);
            CHECK(check(W.data(), x, N, K, true));
            CHECK(ops::packed_weight_bytes() > 0);
        }
        CHECK(ops::packed_weight_bytes() == 0);   // a one-off scope frees what it packed
    }
    {   // the micro-kernel changes inside a scope (tests, tutorial 01): each packs its own layout
        ops::ConstantWeights constant({{W.data(), W.size() * sizeof(float)}});
        for (int round = 0; round < 2; round++)
            for (ops::GemmKernel kn : {ops::GemmKernel::plain, ops::GemmKernel::avx2, ops::GemmKernel::avx512})
                if (ops::gemm_kernel_runs(kn)) {
                    ops::set_gemm_kernel(kn);
                    INFO(ops::gemm_kernel_name(kn));
                    CHECK(check(W.data(), x, N, K, true));
                }
    }
    ops::set_gemm_kernel(before);
}

// The chain is fused. Step 0 gives acc = -1; step 1 adds a * a with a = 1 + 2^-12, whose exact
// value 1 + 2^-11 + 2^-24 needs 25 bits: a separate multiply rounds it to 1 + 2^-11 (a tie, to
// even) and leaves 2^-11, where the fma adds the exact product and keeps 2^-11 + 2^-24.
TEST_CASE("gemm rounds each step of the chain once (fma)") {
    const float a = 1.0f + std::ldexp(1.0f, -12);
    const Vec A = {-1.0f, a}, B = {1.0f, a};   // (1, 2) @ (2, 1)
    Vec C(1), Cn(1);
    ops::gemm(C.data(), A.data(), B.data(), nullptr, 1, 1, 2, false, false, 1.0f, 0.0f);
    ops::gemm_naive(Cn.data(), A.data(), B.data(), nullptr, 1, 1, 2, false, false, 1.0f, 0.0f);
    CHECK(C[0] == std::ldexp(1.0f, -11) + std::ldexp(1.0f, -24));
    CHECK(Cn[0] == C[0]);
}

// Distance in units in the last place between two floats (0 for equal, huge for NaN vs number).
long long ulp_distance(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : 1LL << 40;
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4), std::memcpy(&ib, &b, 4);
    const int64_t la = ia < 0 ? int64_t(INT32_MIN) - ia : ia, lb = ib < 0 ? int64_t(INT32_MIN) - ib : ib;
    return (long long)(la > lb ? la - lb : lb - la);
}

// The GELU's erf and exp (kernels/cpu/vecmath.hpp) against std::erf and std::exp over the whole
// float range: every 61st bit pattern of all 2^32 (a prime stride, so every exponent and a spread
// of mantissas, both signs, inf and NaN), plus the specials. Prints the worst error and where.
TEST_CASE("erf32 and exp32 stay within 2 and 1 ulp of std::erf and std::exp over every float") {
    long long erf_worst = 0, exp_worst = 0;
    float erf_at = 0, exp_at = 0, sub_at = 0;
    double sub_worst = 0;   // exp results below FLT_MIN (subnormal): absolute error
    auto check = [&](float x) {
        const long long e = ulp_distance(ops::erf32(x), std::erf(x));
        if (e > erf_worst) erf_worst = e, erf_at = x;
        const float want = std::exp(x), got = ops::exp32(x);
        if (std::fabs(want) >= FLT_MIN || !std::isfinite(want)) {
            const long long d = ulp_distance(got, want);
            if (d > exp_worst) exp_worst = d, exp_at = x;
        } else if (std::fabs(double(got) - want) > sub_worst) {
            sub_worst = std::fabs(double(got) - want), sub_at = x;
        }
    };
    for (uint64_t u = 0; u < (1ULL << 32); u += 61) {
        float x;
        const uint32_t bits = uint32_t(u);
        std::memcpy(&x, &bits, 4);
        check(x);
    }
    for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 3.95f, -3.95f, 88.7f, 88.73f, -87.33f, -104.0f, INFINITY, -INFINITY, NAN})
        check(x);
    MESSAGE("erf32: worst " << erf_worst << " ulp at x = " << erf_at << "; exp32: worst " << exp_worst
                            << " ulp at x = " << exp_at << ", subnormal results within " << sub_worst << " (at "
                            << sub_at << ")");
    CHECK(erf_worst <= 2);
    CHECK(exp_worst <= 1);
    CHECK(sub_worst <= 2 * 1.4013e-45);   // two subnormal steps
    CHECK(std::isnan(ops::erf32(NAN)));
    CHECK(std::isnan(ops::exp32(NAN)));
    CHECK(ops::erf32(-0.0f) == 0.0f);
    CHECK(std::signbit(ops::erf32(-0.0f)));
}

TEST_CASE("max32 is the largest value at every length and position, passes NaNs over, -inf for none") {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-50.0f, 50.0f);
    for (int n : {1, 2, 15, 16, 17, 31, 32, 33, 47, 128, 4000})
        for (int at : {0, n / 2, n - 1, n / 16 * 16, n / 16 * 16 - 1}) {   // the top in a lane, and in the tail
            if (at < 0 || at >= n) continue;
            std::vector<float> x(n);
            for (float& v : x) v = u(rng);
            x[at] = 60.0f;
            CHECK(ops::max32(x.data(), n) == *std::max_element(x.begin(), x.end()));
            x[at] = -60.0f;   // and the largest of the rest
            CHECK(ops::max32(x.data(), n) == *std::max_element(x.begin(), x.end()));
        }
    std::vector<float> nan_first(20, -3.0f);
    nan_first[0] = NAN, nan_first[19] = 2.0f, nan_first[5] = NAN;
    CHECK(ops::max32(nan_first.data(), 20) == 2.0f);
    CHECK(ops::max32(nan_first.data(), 0) == -INFINITY);
    std::vector<float> masked(17, -INFINITY);
    CHECK(ops::max32(masked.data(), 17) == -INFINITY);
}

TEST_CASE("gemm gives the same bits with 1, 2 and 3 threads") {
    const int M = 200, N = 530, K = 70;  // several row and column tiles
    const Vec A = random_vec((size_t)M * K, 11), B = random_vec((size_t)K * N, 12);
    const Vec bias = random_vec(N, 13), C0 = random_vec((size_t)M * N, 14);
    check_thread_invariant([&] {
        std::vector<Vec> outs;
        for (int t = 0; t < 4; t++) {
            Vec C = C0;
            ops::gemm(C.data(), A.data(), B.data(), bias.data(), M, N, K, t & 1, t & 2, 1.5f, 0.25f);
            outs.push_back(C);
        }
        return outs;
    }, "gemm");
}

// How many pieces a column sum over `rows` rows is cut into (for 3 threads at most 3 run).
static int64_t column_pieces(int64_t rows, int64_t cols) { return (cols + ops::column_grain(rows) - 1) / ops::column_grain(rows); }

TEST_CASE("bias_backward sums rows, accumulates, and is thread-invariant") {
    const int N = 37, OC = 203;
    const Vec dout = random_vec((size_t)N * OC, 21);
    std::vector<double> ref(OC, 0.0);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) ref[o] += dout[n * OC + o];
    Vec db(OC, 0.0f);
    ops::bias_backward(db.data(), dout.data(), N, OC);
    CHECK(rel_err(db, ref) < 1e-5);
    const Vec once = db;
    ops::bias_backward(db.data(), dout.data(), N, OC);
    CHECK(same_bits(db, twice(once)));
    // and with enough rows that column_grain cuts the columns into pieces for 2 and 3 threads
    for (auto [rows, cols] : {std::pair{N, OC}, std::pair{16411, 400}}) {
        CHECK((rows == N || column_pieces(rows, cols) >= 3));
        const Vec dy = random_vec((size_t)rows * cols, 22);
        check_thread_invariant([&] {
            Vec d(cols, 0.0f);
            ops::bias_backward(d.data(), dy.data(), rows, cols);
            return std::vector<Vec>{d};
        }, "bias_backward");
    }
}

// =============================================================================== layernorm ====

TEST_CASE("layernorm forward matches float64; backward matches finite differences") {
    const int N = 7, C = 13;
    const float eps = 1e-5f;
    Vec inp = random_vec(N * C, 31, -2.0f, 2.0f), weight = random_vec(C, 32, 0.5f, 1.5f);
    Vec bias = random_vec(C, 33);
    const Vec R = random_vec(N * C, 34);
    Vec out(N * C), mean(N), rstd(N);
    ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), N, C, eps);
    std::vector<double> ref(N * C);
    for (int n = 0; n < N; n++) {
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += inp[n * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (inp[n * C + c] - m) * (inp[n * C + c] - m);
        const double s = 1.0 / std::sqrt(v / C + eps);
        for (int c = 0; c < C; c++) ref[n * C + c] = (inp[n * C + c] - m) * s * weight[c] + bias[c];
        CHECK(std::fabs(mean[n] - m) < 1e-6);
        CHECK(std::fabs(rstd[n] - s) < 1e-5 * s);
    }
    CHECK(rel_err(out, ref) < 1e-6);
    {   // A row whose variance is near eps (about 1.3e-5 against 1e-5): eps inside or outside the
        // square root then differs by a third, where a unit-variance row shows only 4e-6.
        Vec small(C), o(C), mu(1), rs(1);
        for (int c = 0; c < C; c++) small[c] = 3e-3f * inp[c];
        ops::layernorm_forward(o.data(), mu.data(), rs.data(), small.data(), weight.data(), bias.data(), 1, C, eps);
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += small[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (small[c] - m) * (small[c] - m);
        const double s = 1.0 / std::sqrt(v / C + eps);
        std::vector<double> want(C);
        for (int c = 0; c < C; c++) want[c] = (small[c] - m) * s * weight[c] + bias[c];
        CHECK(std::fabs(rs[0] - s) < 1e-5 * s);
        CHECK(rel_err(o, want) < 1e-6);
    }

    auto loss = [&] {
        Vec o(N * C), mu(N), rs(N);
        ops::layernorm_forward(o.data(), mu.data(), rs.data(), inp.data(), weight.data(), bias.data(),
                               N, C, eps);
        return objective(o, R);
    };
    Vec dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    ops::layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), weight.data(),
                            mean.data(), rstd.data(), N, C);
    check_grad(dinp, numeric_grad(inp, loss), "layernorm dinp");
    check_grad(dw, numeric_grad(weight, loss), "layernorm dweight");
    check_grad(db, numeric_grad(bias, loss), "layernorm dbias");

    SUBCASE("backward accumulates, and the two halves equal the full call") {
        Vec di2 = dinp, dw2 = dw, db2 = db;
        ops::layernorm_backward(di2.data(), dw2.data(), db2.data(), R.data(), inp.data(),
                                weight.data(), mean.data(), rstd.data(), N, C);
        CHECK(same_bits(di2, twice(dinp)));
        CHECK(same_bits(dw2, twice(dw)));
        CHECK(same_bits(db2, twice(db)));
        Vec di3(N * C, 0.0f), dw3(C, 0.0f), db3(C, 0.0f);
        ops::layernorm_backward(di3.data(), nullptr, nullptr, R.data(), inp.data(), weight.data(),
                                mean.data(), rstd.data(), N, C);
        ops::layernorm_backward(nullptr, dw3.data(), db3.data(), R.data(), inp.data(), weight.data(),
                                mean.data(), rstd.data(), N, C);
        CHECK(same_bits(di3, dinp));
        CHECK(same_bits(dw3, dw));
        CHECK(same_bits(db3, db));
    }
}

TEST_CASE("layernorm is thread-invariant") {
    // the second shape has enough rows that column_grain cuts the weight gradients' columns
    for (auto [N, C] : {std::pair{61, 203}, std::pair{16411, 400}}) {
        CHECK((N == 61 || column_pieces(N, C) >= 3));
        const Vec inp = random_vec((size_t)N * C, 41, -3.0f, 3.0f), w = random_vec(C, 42), b = random_vec(C, 43);
        const Vec dout = random_vec((size_t)N * C, 44);
        check_thread_invariant([&] {
            Vec out((size_t)N * C), mean(N), rstd(N), dinp((size_t)N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
            ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(),
                                   N, C, 1e-12f);
            ops::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                                    mean.data(), rstd.data(), N, C);
            return std::vector<Vec>{out, mean, rstd, dinp, dw, db};
        }, "layernorm");
    }
}

// ============================================================================= activations ====

TEST_CASE("activations: forwards match float64, backwards match finite differences") {
    const int N = 37;
    Vec x = random_vec(N, 51, -3.0f, 3.0f);
    for (float& v : x)  // relu's kink at 0 would spoil the central difference
        if (std::fabs(v) < 0.05f) v = 0.5f;
    const Vec R = random_vec(N, 52);
    Vec out(N);

    ops::gelu_forward(out.data(), x.data(), N);
    std::vector<double> ref(N);
    for (int i = 0; i < N; i++) ref[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
    CHECK(rel_err(out, ref) < 1e-6);
    ops::relu_forward(out.data(), x.data(), N);
    for (int i = 0; i < N; i++) ref[i] = x[i] > 0 ? x[i] : 0.0;
    CHECK(rel_err(out, ref) == 0.0);
    ops::tanh_forward(out.data(), x.data(), N);
    for (int i = 0; i < N; i++) ref[i] = std::tanh((double)x[i]);
    CHECK(rel_err(out, ref) < 1e-6);

    auto loss_of = [&](void (*fwd)(float*, const float*, int)) {
        return [&, fwd] {
            Vec o(N);
            fwd(o.data(), x.data(), N);
            return objective(o, R);
        };
    };
    Vec dx(N, 0.0f);
    ops::gelu_backward(dx.data(), x.data(), R.data(), N);
    check_grad(dx, numeric_grad(x, loss_of(ops::gelu_forward)), "gelu");
    std::fill(dx.begin(), dx.end(), 0.0f);
    ops::relu_backward(dx.data(), x.data(), R.data(), N);
    check_grad(dx, numeric_grad(x, loss_of(ops::relu_forward)), "relu");
    std::fill(dx.begin(), dx.end(), 0.0f);
    ops::tanh_forward(out.data(), x.data(), N);
    ops::tanh_backward(dx.data(), out.data(), R.data(), N);
    check_grad(dx, numeric_grad(x, loss_of(ops::tanh_forward)), "tanh");

    SUBCASE("backwards accumulate") {
        Vec d1(N, 0.0f), d2(N, 0.0f);
        ops::gelu_backward(d1.data(), x.data(), R.data(), N);
        ops::gelu_backward(d2.data(), x.data(), R.data(), N);
        ops::gelu_backward(d2.data(), x.data(), R.data(), N);
        CHECK(same_bits(d2, twice(d1)));
    }
}

TEST_CASE("elementwise helpers") {
    const int N = 37;
    const Vec a = random_vec(N, 61), b = random_vec(N, 62);
    Vec out(N), acc = a, x = a;
    ops::add_forward(out.data(), a.data(), b.data(), N);
    ops::accumulate(acc.data(), b.data(), N);
    ops::scale(x.data(), -1.5f, N);
    for (int i = 0; i < N; i++) {
        CHECK(out[i] == a[i] + b[i]);
        CHECK(acc[i] == a[i] + b[i]);
        CHECK(x[i] == a[i] * -1.5f);
    }
}

TEST_CASE("activations and elementwise helpers are thread-invariant") {
    const int N = 70001;  // > 3 pieces of the elementwise grain
    const Vec x = random_vec(N, 71, -4.0f, 4.0f), d = random_vec(N, 72);
    check_thread_invariant([&] {
        std::vector<Vec> r;
        Vec o(N), g(N, 0.0f);
        ops::gelu_forward(o.data(), x.data(), N);
        ops::gelu_backward(g.data(), x.data(), d.data(), N);
        r.push_back(o);
        ops::tanh_forward(o.data(), x.data(), N);
        ops::tanh_backward(g.data(), o.data(), d.data(), N);
        r.push_back(o);
        ops::relu_forward(o.data(), x.data(), N);
        ops::relu_backward(g.data(), x.data(), d.data(), N);
        r.push_back(o);
        ops::add_forward(o.data(), x.data(), d.data(), N);
        ops::accumulate(o.data(), d.data(), N);
        ops::scale(o.data(), 0.3f, N);
        r.push_back(o);
        r.push_back(g);
        return r;
    }, "activations");
}

// ================================================================================= dropout ====

TEST_CASE("philox_uniforms draws philox_uniform's numbers, also across a 2^32 boundary of the block index") {
    ops::DropoutKey key;
    key.seed = 0x123456789abcull, key.step = 3, key.microbatch = 1, key.layer = 2, key.site = 1;
    for (uint64_t i0 : {uint64_t(0), uint64_t(12345), (uint64_t(1) << 34) - 7, (uint64_t(7) << 34) - 301})
        for (int n : {301, 2, 7}) {
            CAPTURE(i0);
            CAPTURE(n);
            std::vector<float> u(n);
            ops::philox_uniforms(u.data(), key, i0, n);
            bool same = true;
            for (int j = 0; j < n; j++) same &= u[j] == ops::philox_uniform(key, i0 + j);
            CHECK(same);
        }
}

TEST_CASE("philox_uniform reproduces the Random123 Philox-4x32-10 known-answer vectors") {
    // Random123 tests/kat_vectors: counter, key -> the four output words. Element i takes word
    // i % 4 of block b = i / 4, with counter = (b lo, b hi ^ (layer << 8 | site), microbatch,
    // step) and key = (seed lo, seed hi); the uniform keeps the top 24 bits of the word.
    auto top24 = [](uint32_t w) { return (float)(w >> 8) / 16777216.0f; };
    auto check_block = [&](const ops::DropoutKey& key, uint64_t b, std::array<uint32_t, 4> words) {
        for (int w = 0; w < 4; w++) {
            CAPTURE(w);
            CHECK(ops::philox_uniform(key, 4 * b + w) == top24(words[w]));
        }
    };
    check_block(ops::DropoutKey{}, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
    ops::DropoutKey ones;   // counter word 1 = (b >> 32) ^ (layer << 8 | site) = 0xffffffff
    ones.seed = ~0ull;
    ones.step = ones.microbatch = 0xffffffffu;
    ones.layer = 0xc00000u;
    check_block(ones, 0x3fffffffffffffffull, {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
    ops::DropoutKey pi;
    pi.seed = 0x299f31d0a4093822ull;
    pi.microbatch = 0x13198a2eu;
    pi.step = 0x03707344u;
    pi.layer = 0x800000u;   // 0x05a308d3 ^ 0x80000000 = 0x85a308d3
    const std::array<uint32_t, 4> pi_words = {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u};
    check_block(pi, 0x05a308d3243f6a88ull, pi_words);
    // the layer/site word is XORed into the high half of the block index
    ops::DropoutKey pi2 = pi;
    pi2.layer = 0x85a308u;
    pi2.site = 0xd3u;
    check_block(pi2, 0x243f6a88ull, pi_words);
}

namespace {
std::vector<bool> dropout_mask(const ops::DropoutKey& key, float p, int N) {
    Vec ones(N, 1.0f), out(N);
    ops::dropout_forward(out.data(), ones.data(), p, key, N);
    std::vector<bool> keep(N);
    for (int i = 0; i < N; i++) keep[i] = out[i] != 0.0f;
    return keep;
}
}  // namespace

TEST_CASE("dropout: same key same mask, any other key field a different mask") {
    const int N = 1000;
    const float p = 0.3f;
    ops::DropoutKey key;
    key.seed = 1234;
    key.step = 5;
    key.microbatch = 2;
    key.layer = 3;
    key.site = 1;
    const auto base = dropout_mask(key, p, N);
    CHECK(dropout_mask(key, p, N) == base);
    std::vector<ops::DropoutKey> others(6, key);
    others[0].seed = 1235;
    others[1].seed = key.seed | (1ull << 40);  // the high word of the seed matters too
    others[2].step = 6;
    others[3].microbatch = 3;
    others[4].layer = 4;
    others[5].site = 2;
    for (size_t o = 0; o < others.size(); o++) {
        const auto m = dropout_mask(others[o], p, N);
        int differ = 0;
        for (int i = 0; i < N; i++) differ += m[i] != base[i];
        INFO("changed key field #" << o);
        CHECK(differ > N / 5);  // independent masks differ in 2 p (1 - p) = 42% of places
    }
}

TEST_CASE("dropout: keep rate, scale, in-place, p = 0, and the backward uses the same mask") {
    const int N = 200003;
    const float p = 0.1f;
    ops::DropoutKey key;
    key.seed = 42;
    const Vec x = random_vec(N, 81, 0.5f, 1.5f);  // never zero, so a zero output means dropped
    Vec out(N);
    ops::dropout_forward(out.data(), x.data(), p, key, N);
    int kept = 0;
    bool scaled = true;
    double u_sum = 0.0;
    for (int i = 0; i < N; i++) {
        const float u = ops::philox_uniform(key, i);
        u_sum += u;
        CHECK_UNARY(u >= 0.0f);
        CHECK_UNARY(u < 1.0f);
        if (out[i] != 0.0f) {
            kept++;
            scaled &= out[i] == x[i] * (1.0f / (1.0f - p)) && u >= p;
        } else {
            scaled &= u < p;
        }
    }
    CHECK(scaled);
    // binomial standard deviation sqrt(p (1-p) / N) = 6.7e-4: a 7-sigma window
    CHECK(std::fabs(kept / (double)N - (1.0 - p)) < 5e-3);
    CHECK(std::fabs(u_sum / N - 0.5) < 5e-3);

    Vec inplace = x;
    ops::dropout_forward(inplace.data(), inplace.data(), p, key, N);
    CHECK(same_bits(inplace, out));

    Vec copy(N);
    ops::dropout_forward(copy.data(), x.data(), 0.0f, key, N);
    CHECK(same_bits(copy, x));

    // backward(ones) is the mask times 1/(1-p): it must equal forward(ones)
    Vec ones(N, 1.0f), fwd_ones(N), dinp(N, 0.0f);
    ops::dropout_forward(fwd_ones.data(), ones.data(), p, key, N);
    ops::dropout_backward(dinp.data(), ones.data(), p, key, N);
    CHECK(same_bits(dinp, fwd_ones));
    ops::dropout_backward(dinp.data(), ones.data(), p, key, N);
    CHECK(same_bits(dinp, twice(fwd_ones)));

    check_thread_invariant([&] {
        Vec o(N), g(N, 0.0f);
        ops::dropout_forward(o.data(), x.data(), p, key, N);
        ops::dropout_backward(g.data(), x.data(), p, key, N);
        return std::vector<Vec>{o, g};
    }, "dropout");
}

// =============================================================================== attention ====

namespace {

struct AttnCase {
    int B, T, NH, HS;
    bool use_mask, causal;
    float p;
};

// Straightforward float64 attention: scores, masked softmax, dropout by the same Philox draw.
void attention_ref(std::vector<double>& out, std::vector<double>& att, const Vec& q, const Vec& k,
                   const Vec& v, const std::vector<int32_t>& mask, const AttnCase& c,
                   const ops::DropoutKey& key) {
    const int C = c.NH * c.HS, T = c.T;
    out.assign((size_t)c.B * T * C, 0.0);
    att.assign((size_t)c.B * c.NH * T * T, 0.0);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.NH; h++)
            for (int i = 0; i < T; i++) {
                std::vector<double> s(T, -INFINITY);
                double mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    if (c.use_mask && mask[b * T + j] == 0) continue;
                    if (c.causal && j > i) continue;
                    double d = 0.0;
                    for (int e = 0; e < c.HS; e++)
                        d += (double)q[(b * T + i) * C + h * c.HS + e] * k[(b * T + j) * C + h * c.HS + e];
                    s[j] = d / std::sqrt((double)c.HS);
                    mx = std::max(mx, s[j]);
                }
                if (mx == -INFINITY) continue;  // no visible key: zero probabilities, zero output
                double sum = 0.0;
                for (int j = 0; j < T; j++) sum += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx);
                for (int j = 0; j < T; j++) {
                    const size_t idx = (((size_t)b * c.NH + h) * T + i) * T + j;
                    const double a = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx) / sum;
                    att[idx] = a;
                    const double m = c.p == 0.0f ? 1.0
                                     : ops::philox_uniform(key, idx) >= c.p ? 1.0 / (1.0 - c.p) : 0.0;
                    for (int e = 0; e < c.HS; e++)
                        out[(b * T + i) * C + h * c.HS + e] += a * m * v[(b * T + j) * C + h * c.HS + e];
                }
            }
}

std::vector<int32_t> padding_mask(int B, int T) {
    std::vector<int32_t> mask(B * T, 1);
    for (int b = 0; b < B; b++)  // batch row b has T - 3b real tokens, then padding
        for (int t = std::max(1, T - 3 * b); t < T; t++) mask[b * T + t] = 0;
    return mask;
}

}  // namespace

TEST_CASE("attention forward matches a float64 reference; backward matches finite differences") {
    const AttnCase cases[] = {
        {2, 11, 2, 26, false, false, 0.0f}, {2, 11, 2, 26, true, false, 0.0f},
        {3, 11, 2, 26, false, true, 0.0f},  {3, 11, 2, 26, true, true, 0.0f},
        {2, 11, 2, 26, true, true, 0.25f},  {1, 7, 3, 5, false, false, 0.5f},
    };
    for (const AttnCase& c : cases) {
        INFO("B=" << c.B << " T=" << c.T << " NH=" << c.NH << " HS=" << c.HS << " mask=" << c.use_mask
                  << " causal=" << c.causal << " p=" << c.p);
        const int C = c.NH * c.HS, n = c.B * c.T * C;
        ops::DropoutKey key;
        key.seed = 7;
        key.layer = 2;
        key.site = 1;
        Vec q = random_vec(n, 91, -1.5f, 1.5f), k = random_vec(n, 92, -1.5f, 1.5f), v = random_vec(n, 93);
        const Vec R = random_vec(n, 94);
        const auto mask = padding_mask(c.B, c.T);
        const int32_t* m = c.use_mask ? mask.data() : nullptr;

        Vec out(n), att((size_t)c.B * c.NH * c.T * c.T);
        ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), m, c.causal, c.p,
                               key, c.B, c.T, c.NH, c.HS);
        std::vector<double> out_ref, att_ref;
        attention_ref(out_ref, att_ref, q, k, v, mask, c, key);
        CHECK(rel_err(att, att_ref) < 1e-5);
        CHECK(rel_err(out, out_ref) < 1e-5);
        bool masked_exactly_zero = true;  // a masked key gets exactly 0, not just a small number
        for (size_t i = 0; i < att.size(); i++) masked_exactly_zero &= att_ref[i] != 0.0 || att[i] == 0.0f;
        CHECK(masked_exactly_zero);

        // The dropout mask is a fixed function of the key, so finite differences see it fixed.
        auto loss = [&] {
            Vec o(n), a(att.size());
            ops::attention_forward(o.data(), a.data(), q.data(), k.data(), v.data(), m, c.causal, c.p,
                                   key, c.B, c.T, c.NH, c.HS);
            return objective(o, R);
        };
        Vec dq(n, 0.0f), dk(n, 0.0f), dv(n, 0.0f);
        ops::attention_backward(dq.data(), dk.data(), dv.data(), R.data(), att.data(), q.data(),
                                k.data(), v.data(), c.p, key, c.B, c.T, c.NH, c.HS);
        check_grad(dq, numeric_grad(q, loss), "attention dq");
        check_grad(dk, numeric_grad(k, loss), "attention dk");
        check_grad(dv, numeric_grad(v, loss), "attention dv");

        // accumulation and the null-pointer halves
        Vec dq2 = dq, dk2 = dk, dv2 = dv;
        ops::attention_backward(dq2.data(), dk2.data(), dv2.data(), R.data(), att.data(), q.data(),
                                k.data(), v.data(), c.p, key, c.B, c.T, c.NH, c.HS);
        CHECK(same_bits(dq2, twice(dq)));
        CHECK(same_bits(dk2, twice(dk)));
        CHECK(same_bits(dv2, twice(dv)));
        Vec dq3(n, 0.0f), dk3(n, 0.0f), dv3(n, 0.0f);
        ops::attention_backward(dq3.data(), nullptr, nullptr, R.data(), att.data(), q.data(), k.data(),
                                v.data(), c.p, key, c.B, c.T, c.NH, c.HS);
        ops::attention_backward(nullptr, dk3.data(), dv3.data(), R.data(), att.data(), q.data(),
                                k.data(), v.data(), c.p, key, c.B, c.T, c.NH, c.HS);
        CHECK(same_bits(dq3, dq));
        CHECK(same_bits(dk3, dk));
        CHECK(same_bits(dv3, dv));
    }
}

TEST_CASE("attention: a query whose keys are all padding gets zero output, no NaN") {
    const int B = 1, T = 5, NH = 1, HS = 3, n = B * T * NH * HS;
    const Vec q = random_vec(n, 101), k = random_vec(n, 102), v = random_vec(n, 103);
    const std::vector<int32_t> mask(T, 0);
    Vec out(n, 9.0f), att(T * T, 9.0f), dq(n, 0.0f), dk(n, 0.0f), dv(n, 0.0f);
    ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), mask.data(), true,
                           0.0f, ops::DropoutKey{}, B, T, NH, HS);
    for (float x : out) CHECK(x == 0.0f);
    for (float x : att) CHECK(x == 0.0f);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), out.data(), att.data(), q.data(),
                            k.data(), v.data(), 0.0f, ops::DropoutKey{}, B, T, NH, HS);
    for (int i = 0; i < n; i++) CHECK((dq[i] == 0.0f && dk[i] == 0.0f && dv[i] == 0.0f));
}

TEST_CASE("attention is thread-invariant") {
    const int B = 2, T = 19, NH = 3, HS = 26, n = B * T * NH * HS;
    const Vec q = random_vec(n, 111), k = random_vec(n, 112), v = random_vec(n, 113);
    const Vec dout = random_vec(n, 114);
    const auto mask = padding_mask(B, T);
    ops::DropoutKey key;
    key.seed = 3;
    check_thread_invariant([&] {
        Vec out(n), att((size_t)B * NH * T * T), dq(n, 0.0f), dk(n, 0.0f), dv(n, 0.0f);
        ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), mask.data(), true,
                               0.1f, key, B, T, NH, HS);
        ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(),
                                k.data(), v.data(), 0.1f, key, B, T, NH, HS);
        return std::vector<Vec>{out, att, dq, dk, dv};
    }, "attention");
}

namespace {

// float64 log-sum-exp of each query's visible scaled scores, straight from q and k: (B, NH, T),
// -inf for a query that sees no key.
std::vector<double> lse_ref(const Vec& q, const Vec& k, const std::vector<int32_t>& mask, const AttnCase& c) {
    const int C = c.NH * c.HS, T = c.T;
    std::vector<double> lse((size_t)c.B * c.NH * T);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.NH; h++)
            for (int i = 0; i < T; i++) {
                std::vector<double> s;
                for (int j = 0; j < T; j++) {
                    if ((c.use_mask && mask[b * T + j] == 0) || (c.causal && j > i)) continue;
                    double d = 0.0;
                    for (int e = 0; e < c.HS; e++)
                        d += (double)q[(b * T + i) * C + h * c.HS + e] * k[(b * T + j) * C + h * c.HS + e];
                    s.push_back(d / std::sqrt((double)c.HS));
                }
                double mx = -INFINITY, sum = 0.0;
                for (double x : s) mx = std::max(mx, x);
                for (double x : s) sum += std::exp(x - mx);
                lse[((size_t)b * c.NH + h) * T + i] = s.empty() ? -INFINITY : mx + std::log(sum);
            }
    return lse;
}

std::vector<double> as_double(const Vec& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace

TEST_CASE("flash attention: v1's output and gradients, lse of a float64 reference, finite differences") {
    // The last batch row is all padding when masked and B = 3: queries that see no key.
    const AttnCase cases[] = {
        {2, 11, 2, 26, false, false, 0.0f}, {2, 11, 2, 26, true, false, 0.0f},
        {3, 11, 2, 26, false, true, 0.0f},  {3, 13, 2, 26, true, true, 0.0f},
        {3, 11, 2, 26, true, false, 0.25f}, {1, 7, 3, 5, false, false, 0.5f},
        {2, 13, 2, 32, true, true, 0.1f},   {1, 9, 1, 64, true, false, 0.0f},
    };
    for (const AttnCase& c : cases) {
        INFO("B=" << c.B << " T=" << c.T << " NH=" << c.NH << " HS=" << c.HS << " mask=" << c.use_mask
                  << " causal=" << c.causal << " p=" << c.p);
        const int C = c.NH * c.HS, n = c.B * c.T * C, rows = c.B * c.NH * c.T;
        ops::DropoutKey key;
        key.seed = 5;
        key.step = 3;
        key.layer = 1;
        Vec q = random_vec(n, 121, -1.5f, 1.5f), k = random_vec(n, 122, -1.5f, 1.5f), v = random_vec(n, 123);
        const Vec R = random_vec(n, 124);
        auto mask = padding_mask(c.B, c.T);
        if (c.B == 3) std::fill(mask.begin() + 2 * c.T, mask.end(), 0);
        const int32_t* m = c.use_mask ? mask.data() : nullptr;

        Vec out(n, 9.0f), lse(rows, 9.0f), out1(n), att((size_t)rows * c.T);
        ops::attention_forward_flash(out.data(), lse.data(), q.data(), k.data(), v.data(), m, c.causal, c.p,
                                     key, c.B, c.T, c.NH, c.HS);
        ops::attention_forward(out1.data(), att.data(), q.data(), k.data(), v.data(), m, c.causal, c.p, key,
                               c.B, c.T, c.NH, c.HS);
        CHECK(rel_err(out, as_double(out1)) < 1e-6);
        std::vector<double> out_ref, att_ref;
        attention_ref(out_ref, att_ref, q, k, v, mask, c, key);
        CHECK(rel_err(out, out_ref) < 1e-5);
        const std::vector<double> lref = lse_ref(q, k, mask, c);
        Vec lse_fin;  // -inf exactly where the reference has no visible key; the rest close
        std::vector<double> lref_fin;
        int no_key = 0;
        for (int r = 0; r < rows; r++) {
            if (std::isinf(lref[r])) {
                no_key++;
                CHECK(lse[r] == -INFINITY);
            } else {
                lse_fin.push_back(lse[r]), lref_fin.push_back(lref[r]);
            }
        }
        CHECK(no_key == (c.use_mask && c.B == 3 ? c.NH * c.T : 0));
        CHECK(rel_err(lse_fin, lref_fin) < 1e-6);

        // v1's gradients, from its stored att; the flash backward recomputes them from lse.
        Vec dq(n, 0.0f), dk(n, 0.0f), dv(n, 0.0f), dq1(n, 0.0f), dk1(n, 0.0f), dv1(n, 0.0f);
        ops::attention_backward_flash(dq.data(), dk.data(), dv.data(), R.data(), out.data(), lse.data(), q.data(),
                                      k.data(), v.data(), m, c.causal, c.p, key, c.B, c.T, c.NH, c.HS);
        ops::attention_backward(dq1.data(), dk1.data(), dv1.data(), R.data(), att.data(), q.data(), k.data(),
                                v.data(), c.p, key, c.B, c.T, c.NH, c.HS);
        CHECK(rel_err(dq, as_double(dq1)) < 1e-5);
        CHECK(rel_err(dk, as_double(dk1)) < 1e-5);
        CHECK(rel_err(dv, as_double(dv1)) < 1e-5);
        auto loss = [&] {
            Vec o(n), l(rows);
            ops::attention_forward_flash(o.data(), l.data(), q.data(), k.data(), v.data(), m, c.causal, c.p,
                                         key, c.B, c.T, c.NH, c.HS);
            return objective(o, R);
        };
        check_grad(dq, numeric_grad(q, loss), "flash attention dq");
        check_grad(dk, numeric_grad(k, loss), "flash attention dk");
        check_grad(dv, numeric_grad(v, loss), "flash attention dv");

        // accumulation and the null-pointer halves
        Vec dq2 = dq, dk2 = dk, dv2 = dv;
        ops::attention_backward_flash(dq2.data(), dk2.data(), dv2.data(), R.data(), out.data(), lse.data(),
                                      q.data(), k.data(), v.data(), m, c.causal, c.p, key, c.B, c.T, c.NH, c.HS);
        CHECK(same_bits(dq2, twice(dq)));
        CHECK(same_bits(dk2, twice(dk)));
        CHECK(same_bits(dv2, twice(dv)));
        Vec dq3(n, 0.0f), dk3(n, 0.0f), dv3(n, 0.0f), dv4(n, 0.0f);
        ops::attention_backward_flash(dq3.data(), nullptr, nullptr, R.data(), out.data(), lse.data(), q.data(),
                                      k.data(), v.data(), m, c.causal, c.p, key, c.B, c.T, c.NH, c.HS);
        ops::attention_backward_flash(nullptr, dk3.data(), dv3.data(), R.data(), out.data(), lse.data(), q.data(),
                                      k.data(), v.data(), m, c.causal, c.p, key, c.B, c.T, c.NH, c.HS);
        ops::attention_backward_flash(nullptr, nullptr, dv4.data(), R.data(), out.data(), lse.data(), q.data(),
                                      k.data(), v.data(), m, c.causal, c.p, key, c.B, c.T, c.NH, c.HS);
        CHECK(same_bits(dq3, dq));
        CHECK(same_bits(dk3, dk));
        CHECK(same_bits(dv3, dv));
        CHECK(same_bits(dv4, dv));
    }
}

TEST_CASE("flash attention: a query whose keys are all padding gets zero output, lse -inf, no NaN") {
    const int B = 1, T = 5, NH = 1, HS = 3, n = B * T * NH * HS;
    const Vec q = random_vec(n, 131), k = random_vec(n, 132), v = random_vec(n, 133);
    const std::vector<int32_t> mask(T, 0);
    Vec out(n, 9.0f), lse(T, 9.0f), dq(n, 0.0f), dk(n, 0.0f), dv(n, 0.0f);
    ops::attention_forward_flash(out.data(), lse.data(), q.data(), k.data(), v.data(), mask.data(), true, 0.1f,
                                 ops::DropoutKey{}, B, T, NH, HS);
    for (float x : out) CHECK(x == 0.0f);
    for (float x : lse) CHECK(x == -INFINITY);
    ops::attention_backward_flash(dq.data(), dk.data(), dv.data(), q.data(), out.data(), lse.data(), q.data(),
                                  k.data(), v.data(), mask.data(), true, 0.1f, ops::DropoutKey{}, B, T, NH, HS);
    for (int i = 0; i < n; i++) CHECK((dq[i] == 0.0f && dk[i] == 0.0f && dv[i] == 0.0f));
}

TEST_CASE("flash attention is thread-invariant") {
    const int B = 2, T = 19, NH = 3, HS = 26, n = B * T * NH * HS;
    const Vec q = random_vec(n, 141), k = random_vec(n, 142), v = random_vec(n, 143);
    const Vec dout = random_vec(n, 144);
    const auto mask = padding_mask(B, T);
    ops::DropoutKey key;
    key.seed = 3;
    check_thread_invariant([&] {
        Vec out(n), lse((size_t)B * NH * T), dq(n, 0.0f), dk(n, 0.0f), dv(n, 0.0f);
        ops::attention_forward_flash(out.data(), lse.data(), q.data(), k.data(), v.data(), mask.data(), true,
                                     0.1f, key, B, T, NH, HS);
        ops::attention_backward_flash(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(),
                                      q.data(), k.data(), v.data(), mask.data(), true, 0.1f, key, B, T, NH, HS);
        return std::vector<Vec>{out, lse, dq, dk, dv};
    }, "flash attention");
}

// =========================================================================== cross-entropy ====

TEST_CASE("crossentropy matches float64; ignored rows give 0 loss and untouched gradients") {
    const int N = 7, V = 37;
    const Vec logits = random_vec(N * V, 121, -4.0f, 4.0f);
    const std::vector<int32_t> targets = {3, -100, 36, 0, 17, -100, 5};
    const float scale = 0.125f;
    Vec losses(N, 9.0f);
    ops::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    Vec dlogits = random_vec(N * V, 122);  // garbage that must stay where rows are ignored
    const Vec before = dlogits;
    ops::crossentropy_backward(dlogits.data(), logits.data(), targets.data(), scale, N, V);
    for (int n = 0; n < N; n++) {
        INFO("row " << n);
        if (targets[n] == -100) {
            CHECK(losses[n] == 0.0f);
            CHECK(std::memcmp(&dlogits[n * V], &before[n * V], V * sizeof(float)) == 0);
            continue;
        }
        double mx = -INFINITY, sum = 0.0;
        for (int i = 0; i < V; i++) mx = std::max(mx, (double)logits[n * V + i]);
        for (int i = 0; i < V; i++) sum += std::exp(logits[n * V + i] - mx);
        const double lse = mx + std::log(sum);
        CHECK(std::fabs(losses[n] - (lse - logits[n * V + targets[n]])) < 1e-6);
        for (int i = 0; i < V; i++) {
            const double d = scale * (std::exp(logits[n * V + i] - lse) - (i == targets[n]));
            CHECK(std::fabs(dlogits[n * V + i] - (before[n * V + i] + d)) < 1e-6);
        }
    }
}

TEST_CASE("crossentropy backward matches finite differences of the scaled summed loss") {
    const int N = 5, V = 13;
    Vec logits = random_vec(N * V, 131, -2.0f, 2.0f);
    const std::vector<int32_t> targets = {12, 0, -100, 7, 3};
    const float scale = 0.5f;
    auto loss = [&] {
        Vec l(N);
        ops::crossentropy_forward(l.data(), logits.data(), targets.data(), N, V);
        return scale * objective(l, Vec(N, 1.0f));
    };
    Vec d(N * V, 0.0f);
    ops::crossentropy_backward(d.data(), logits.data(), targets.data(), scale, N, V);
    check_grad(d, numeric_grad(logits, loss), "crossentropy dlogits");
    Vec d2 = d;
    ops::crossentropy_backward(d2.data(), logits.data(), targets.data(), scale, N, V);
    CHECK(same_bits(d2, twice(d)));
}

TEST_CASE("crossentropy rejects an out-of-range target and is thread-invariant") {
    const int N = 29, V = 1001;
    const Vec logits = random_vec(N * V, 141, -5.0f, 5.0f);
    std::vector<int32_t> targets(N);
    for (int n = 0; n < N; n++) targets[n] = n % 4 == 1 ? -100 : (n * 97) % V;
    Vec l(N), d(N * V, 0.0f);
    std::vector<int32_t> bad = targets;
    bad[3] = V;
    CHECK_THROWS_AS(ops::crossentropy_forward(l.data(), logits.data(), bad.data(), N, V), std::runtime_error);
    bad[3] = -1;
    CHECK_THROWS_AS(ops::crossentropy_backward(d.data(), logits.data(), bad.data(), 1.0f, N, V),
                    std::runtime_error);
    check_thread_invariant([&] {
        Vec loss(N), grad(N * V, 0.0f);
        ops::crossentropy_forward(loss.data(), logits.data(), targets.data(), N, V);
        ops::crossentropy_backward(grad.data(), logits.data(), targets.data(), 0.01f, N, V);
        return std::vector<Vec>{loss, grad};
    }, "crossentropy");
}

// =============================================================================== embedding ====

TEST_CASE("embedding forward adds rows; backward scatter-adds repeated ids") {
    const int N = 11, C = 13, V = 6;
    const std::vector<int32_t> ids = {2, 5, 2, 0, 2, 5, 1, 3, 3, 2, 0};  // id 4 never used
    const Vec table = random_vec(V * C, 151), dout = random_vec(N * C, 152);
    Vec out = random_vec(N * C, 153);
    const Vec out0 = out;
    ops::embedding_forward(out.data(), ids.data(), table.data(), N, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) CHECK(out[n * C + c] == out0[n * C + c] + table[ids[n] * C + c]);

    std::vector<double> ref(V * C, 0.0);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) ref[ids[n] * C + c] += dout[n * C + c];
    Vec dtable(V * C, 0.0f);
    ops::embedding_backward(dtable.data(), dout.data(), ids.data(), N, C);
    CHECK(rel_err(dtable, ref) < 1e-6);
    for (int c = 0; c < C; c++) CHECK(dtable[4 * C + c] == 0.0f);
    const Vec once = dtable;
    ops::embedding_backward(dtable.data(), dout.data(), ids.data(), N, C);
    CHECK(same_bits(dtable, twice(once)));
}

TEST_CASE("embedding backward sums in the documented order, on any thread count") {
    const int N = 300, C = 37, V = 97;
    std::vector<int32_t> ids(N);
    for (int n = 0; n < N; n++) ids[n] = (n * n + 3 * n) % V;
    const Vec table = random_vec(V * C, 161), dout = random_vec(N * C, 162);
    // The documented order, in float: each id's rows summed in increasing n, then added once.
    Vec expected(V * C, 0.0f);
    for (int id = 0; id < V; id++)
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++)
                if (ids[n] == id) s += dout[n * C + c];
            expected[id * C + c] += s;
        }
    Vec dtable(V * C, 0.0f);
    ops::embedding_backward(dtable.data(), dout.data(), ids.data(), N, C);
    CHECK(same_bits(dtable, expected));
    check_thread_invariant([&] {
        Vec out(N * C, 0.0f), dtable(V * C, 0.0f);
        ops::embedding_forward(out.data(), ids.data(), table.data(), N, C);
        ops::embedding_backward(dtable.data(), dout.data(), ids.data(), N, C);
        return std::vector<Vec>{out, dtable};
    }, "embedding");
}

// =============================================================================== optimizer ====

TEST_CASE("adamw: one step matches the scalar formula in float64") {
    const int N = 37;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    const int t = 3;
    Vec p = random_vec(N, 171), m = random_vec(N, 172, -0.1f, 0.1f), v = random_vec(N, 173, 0.0f, 0.01f);
    const Vec g = random_vec(N, 174), p0 = p, m0 = m, v0 = v;
    ops::adamw_update(p.data(), m.data(), v.data(), g.data(), N, lr, b1, b2, eps, wd, t);
    for (int i = 0; i < N; i++) {
        const double mi = (double)b1 * m0[i] + (1.0 - b1) * g[i];
        const double vi = (double)b2 * v0[i] + (1.0 - b2) * g[i] * g[i];
        const double mhat = mi / (1.0 - std::pow((double)b1, t));
        const double vhat = vi / (1.0 - std::pow((double)b2, t));
        const double step = lr * (mhat / (std::sqrt(vhat) + eps) + wd * p0[i]);
        INFO("element " << i);
        CHECK(std::fabs(m[i] - mi) < 1e-6);
        CHECK(std::fabs(v[i] - vi) < 1e-7);
        // the update itself (~lr) to 1e-4 relative; p's own rounding is 6e-8 |p|
        CHECK(std::fabs((p[i] - p0[i]) - (-step)) < 1e-4 * lr + 1e-7 * std::fabs(p0[i]));
    }
}

// The kernel's loop is vectorised (kernels/cpu/adamw.cpp); every lane must still do the float
// operations of this plain loop in its order, so the bits are the plain loop's, at any length.
TEST_CASE("adamw: the vectorised update has the bits of the plain float loop") {
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.05f;
    const int t = 7;
    const float bc1 = (float)(1.0 - std::pow((double)b1, t)), bc2 = (float)(1.0 - std::pow((double)b2, t));
    for (int N : {1, 7, 16, 37, 100003}) {
        Vec p = random_vec(N, 175), m = random_vec(N, 176, -0.1f, 0.1f), v = random_vec(N, 177, 0.0f, 0.01f);
        const Vec g = random_vec(N, 178);
        Vec rp = p, rm = m, rv = v;
        for (int i = 0; i < N; i++) {
            rm[i] = b1 * rm[i] + (1.0f - b1) * g[i];
            rv[i] = b2 * rv[i] + (1.0f - b2) * g[i] * g[i];
            rp[i] -= lr * ((rm[i] / bc1) / (std::sqrt(rv[i] / bc2) + eps) + wd * rp[i]);
        }
        ops::adamw_update(p.data(), m.data(), v.data(), g.data(), N, lr, b1, b2, eps, wd, t);
        INFO("N = " << N);
        CHECK(std::memcmp(p.data(), rp.data(), N * sizeof(float)) == 0);
        CHECK(std::memcmp(m.data(), rm.data(), N * sizeof(float)) == 0);
        CHECK(std::memcmp(v.data(), rv.data(), N * sizeof(float)) == 0);
    }
}

TEST_CASE("sum_squares matches a float64 loop and is thread-invariant") {
    const int64_t N = 250007;  // > 3 * 4 chunks, and not a multiple of the chunk size
    const Vec x = random_vec(N, 181, -2.0f, 2.0f);
    double ref = 0.0;
    for (float e : x) ref += (double)e * e;
    const double got = ops::sum_squares(x.data(), N);
    CHECK(std::fabs(got - ref) < 1e-12 * ref);
    CHECK(ops::sum_squares(x.data(), 0) == 0.0);
    check_thread_invariant([&] {
        const double s = ops::sum_squares(x.data(), N);
        Vec bits(2);
        std::memcpy(bits.data(), &s, sizeof(double));
        Vec p = x, m(N, 0.0f), v(N, 0.0f);
        ops::adamw_update(p.data(), m.data(), v.data(), x.data(), N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
        return std::vector<Vec>{bits, p, m, v};
    }, "sum_squares and adamw");
}

// Layer norm and sum_squares add their float64 sums for 8 rows (or chunks) at once, each in its own
// order (vecmath.hpp's chain_sums): every output must have the bits of its row (or chunk) computed
// alone, whichever group it fell in.
TEST_CASE("row-grouped sums give the bits of each row computed alone") {
    const int N = 21, C = 203;   // groups of 8, then 5 rows alone
    const Vec inp = random_vec(N * C, 191, -3.0f, 3.0f), w = random_vec(C, 192), b = random_vec(C, 193);
    const Vec dout = random_vec(N * C, 194);
    Vec out(N * C), mean(N), rstd(N), dinp(N * C, 0.5f);
    ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C, 1e-5f);
    ops::layernorm_backward(dinp.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);
    for (int n = 0; n < N; n++) {
        INFO("row " << n);
        Vec o(C), m(1), r(1), di(C, 0.5f);
        ops::layernorm_forward(o.data(), m.data(), r.data(), &inp[n * C], w.data(), b.data(), 1, C, 1e-5f);
        ops::layernorm_backward(di.data(), nullptr, nullptr, &dout[n * C], &inp[n * C], w.data(), m.data(), r.data(), 1, C);
        CHECK(same_bits(o, Vec(&out[n * C], &out[(n + 1) * C])));
        CHECK(same_bits(m, Vec{mean[n]}));
        CHECK(same_bits(r, Vec{rstd[n]}));
        CHECK(same_bits(di, Vec(&dinp[n * C], &dinp[(n + 1) * C])));
    }
    // sum_squares: the chunks' sums (2^14 elements, the last one short) added in order from 0.0.
    const int64_t chunk = 1 << 14, M = 19 * chunk + 1234;   // 2 groups of 8 chunks, then 4 alone
    const Vec x = random_vec(M, 196, -2.0f, 2.0f);
    double total = 0.0;
    for (int64_t c = 0; c < M; c += chunk) total += ops::sum_squares(&x[c], std::min(chunk, M - c));
    const double got = ops::sum_squares(x.data(), M);
    CHECK(std::memcmp(&got, &total, sizeof got) == 0);
}
