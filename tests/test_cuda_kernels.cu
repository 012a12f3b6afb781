// tests/test_cuda_kernels.cu — every CUDA kernel (kernels/cuda/) against its CPU specification
// (kernels/cpu/) on random inputs of awkward shapes (1, 17, 63, 130, 257: never a multiple of a
// tile), outputs filled with NaN before each call so an unwritten element fails, fp32 rel. L2
// error < 1e-5 (bf16 < 1e-2), dropout masks and the embedding gradient identical bit for bit,
// and two runs of every reduction giving the same bits. Without a GPU every case says
// "skipped: no CUDA device"; the Philox header test needs no GPU and always runs.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"
#include "kernels/ops.hpp"
#include "kernels/philox.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

using Vec = std::vector<float>;
using Ids = std::vector<int32_t>;

bool have_device() {
    static const bool yes = [] {
        int n = 0;
        return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    }();
    return yes;
}

#define REQUIRE_DEVICE()                          \
    if (!have_device()) {                         \
        MESSAGE("skipped: no CUDA device");       \
        return;                                   \
    }

// A device array with its host twin's size; NaN-poisoned by poison() (0xFF bytes are a NaN).
template <typename T>
struct DevBuf {
    T* p = nullptr;
    size_t n = 0;
    explicit DevBuf(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&p, sizeof(T) * (n ? n : 1))); }
    explicit DevBuf(const std::vector<T>& v) : DevBuf(v.size()) { upload(v); }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
    ~DevBuf() { cudaFree(p); }
    void upload(const std::vector<T>& v) {
        CUDA_CHECK(cudaMemcpy(p, v.data(), sizeof(T) * n, cudaMemcpyHostToDevice));
    }
    void poison() { CUDA_CHECK(cudaMemset(p, 0xFF, sizeof(T) * n)); }
    std::vector<T> get() const {
        CUDA_CHECK(cudaDeviceSynchronize());  // surfaces errors raised inside kernels
        std::vector<T> v(n);
        CUDA_CHECK(cudaMemcpy(v.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost));
        return v;
    }
};

Vec random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    Vec v(n);
    for (float& x : v) x = dist(gen);
    return v;
}

// ||a - ref|| / ||ref|| in float64; NaN anywhere gives NaN, which fails every `< tol` check.
double rel_l2(const Vec& a, const Vec& ref) {
    REQUIRE(a.size() == ref.size());
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

bool same_bits(const Vec& a, const Vec& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr double kTolF32 = 1e-5, kTolBF16 = 1e-2;

}  // namespace

TEST_CASE("philox header: host copy equals ops::philox_uniform (no GPU needed)") {
    for (uint64_t seed : {0ull, 42ull, 0x123456789abcdefull})
        for (uint32_t site : {0u, 3u, 255u}) {
            ops::DropoutKey key;
            key.seed = seed, key.step = 7, key.microbatch = 3, key.layer = 11, key.site = site;
            for (uint64_t i : {0ull, 1ull, 2ull, 1000003ull, (1ull << 32) - 1, 1ull << 32, (1ull << 40) + 5}) {
                CHECK(ops::philox::uniform(key, i) == ops::philox_uniform(key, i));
            }
        }
}

TEST_CASE("gemm: every version vs the CPU, awkward shapes, all transposes, poisoned C") {
    REQUIRE_DEVICE();
    using Fn = void (*)(float*, const float*, const float*, const float*, int, int, int, bool, bool,
                        float, float, cudaStream_t);
    struct Version { const char* name; Fn fn; double tol; };
    const Version versions[] = {{"v1_naive", ops::cuda::gemm_v1_naive, kTolF32},
                                {"v2_smem_tiles", ops::cuda::gemm_v2_smem_tiles, kTolF32},
                                {"v3_register_tiles", ops::cuda::gemm_v3_register_tiles, kTolF32},
                                {"v4_bf16_mma", ops::cuda::gemm_v4_bf16_mma, kTolBF16},
                                {"gemm", ops::cuda::gemm, kTolF32}};
    struct Shape { int M, N, K; };
    // Multiples of 4 too, so v3's float4 path runs alongside the scalar one.
    const Shape shapes[] = {{1, 1, 1}, {17, 63, 130}, {130, 257, 17}, {63, 1, 257},
                            {257, 130, 63}, {128, 96, 64}, {260, 132, 36}};
    uint32_t seed = 1;
    for (const Shape& s : shapes)
        for (int tr = 0; tr < 4; tr++)
            for (int with_beta = 0; with_beta < 2; with_beta++) {
                const bool transA = tr & 1, transB = tr & 2;
                const float alpha = 0.75f, beta = with_beta ? 0.5f : 0.0f;
                const Vec A = random_vec((size_t)s.M * s.K, seed++), B = random_vec((size_t)s.K * s.N, seed++);
                const Vec bias = random_vec(s.N, seed++), C0 = random_vec((size_t)s.M * s.N, seed++);
                Vec ref = C0, ref16 = C0;   // ref16: the exact meaning of v4 (bf16 inputs, fp32 sums)
                ops::gemm_naive(ref.data(), A.data(), B.data(), with_beta ? bias.data() : nullptr,
                                s.M, s.N, s.K, transA, transB, alpha, beta);
                ops::gemm_bf16(ref16.data(), A.data(), B.data(), with_beta ? bias.data() : nullptr,
                               s.M, s.N, s.K, transA, transB, alpha, beta);
                DevBuf<float> dA(A), dB(B), dbias(bias), dC(C0);
                for (const Version& v : versions) {
                    CAPTURE(v.name);
                    CAPTURE(s.M); CAPTURE(s.N); CAPTURE(s.K); CAPTURE(transA); CAPTURE(transB); CAPTURE(beta);
                    if (beta == 0.0f) dC.poison(); else dC.upload(C0);
                    v.fn(dC.p, dA.p, dB.p, with_beta ? dbias.p : nullptr, s.M, s.N, s.K, transA, transB,
                         alpha, beta, 0);
                    const Vec got = dC.get();
                    CHECK(rel_l2(got, ref) < v.tol);
                    if (v.fn == ops::cuda::gemm_v4_bf16_mma) CHECK(rel_l2(got, ref16) < kTolF32);
                }
            }
}

TEST_CASE("gemm: same bits on two runs; bias_backward vs the CPU") {
    REQUIRE_DEVICE();
    const int M = 257, N = 130, K = 63;
    DevBuf<float> dA(random_vec(M * K, 1)), dB(random_vec(K * N, 2)), dC(M * N);
    for (auto fn : {ops::cuda::gemm_v3_register_tiles, ops::cuda::gemm_v4_bf16_mma}) {
        fn(dC.p, dA.p, dB.p, nullptr, M, N, K, false, true, 1.0f, 0.0f, 0);
        const Vec first = dC.get();
        dC.poison();
        fn(dC.p, dA.p, dB.p, nullptr, M, N, K, false, true, 1.0f, 0.0f, 0);
        CHECK(same_bits(first, dC.get()));
    }
    for (int OC : {1, 130, 257}) {
        CAPTURE(OC);
        const Vec dout = random_vec((size_t)M * OC, 3), db0 = random_vec(OC, 4);
        Vec ref = db0;
        ops::bias_backward(ref.data(), dout.data(), M, OC);
        DevBuf<float> ddout(dout), ddb(db0);
        ops::cuda::bias_backward(ddb.p, ddout.p, M, OC);
        CHECK(rel_l2(ddb.get(), ref) < kTolF32);
    }
}

TEST_CASE("layernorm forward and backward vs the CPU (null gradients skip their half)") {
    REQUIRE_DEVICE();
    for (int C : {1, 26, 130, 769}) {
        const int N = 37;
        CAPTURE(C);
        const Vec x = random_vec((size_t)N * C, 1, -2.0f, 3.0f), w = random_vec(C, 2), b = random_vec(C, 3);
        Vec out(N * C), mean(N), rstd(N);
        ops::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
        DevBuf<float> dx(x), dw(w), db(b), dout_(N * C), dmean(N), drstd(N);
        dout_.poison(), dmean.poison(), drstd.poison();
        ops::cuda::layernorm_forward(dout_.p, dmean.p, drstd.p, dx.p, dw.p, db.p, N, C, 1e-5f);
        CHECK(rel_l2(dout_.get(), out) < kTolF32);
        CHECK(rel_l2(dmean.get(), mean) < kTolF32);
        CHECK(rel_l2(drstd.get(), rstd) < kTolF32);

        const Vec dy = random_vec((size_t)N * C, 4), g0 = random_vec((size_t)N * C, 5), gw0 = random_vec(C, 6),
                  gb0 = random_vec(C, 7);
        for (int which = 0; which < 3; which++) {  // all, dinp only, dweight + dbias only
            CAPTURE(which);
            Vec gx = g0, gw = gw0, gb = gb0;
            const bool want_x = which != 2, want_p = which != 1;
            ops::layernorm_backward(want_x ? gx.data() : nullptr, want_p ? gw.data() : nullptr,
                                    want_p ? gb.data() : nullptr, dy.data(), x.data(), w.data(),
                                    mean.data(), rstd.data(), N, C);
            DevBuf<float> ddy(dy), dgx(g0), dgw(gw0), dgb(gb0), dm(mean), dr(rstd);
            ops::cuda::layernorm_backward(want_x ? dgx.p : nullptr, want_p ? dgw.p : nullptr,
                                          want_p ? dgb.p : nullptr, ddy.p, dx.p, dw.p, dm.p, dr.p, N, C);
            CHECK(rel_l2(dgx.get(), gx) < kTolF32);
            CHECK(rel_l2(dgw.get(), gw) < kTolF32);
            CHECK(rel_l2(dgb.get(), gb) < kTolF32);
        }
    }
}

TEST_CASE("activations and elementwise helpers vs the CPU") {
    REQUIRE_DEVICE();
    for (int N : {1, 17, 100003}) {
        CAPTURE(N);
        const Vec x = random_vec(N, 1, -4.0f, 4.0f), y = random_vec(N, 2), g0 = random_vec(N, 3);
        DevBuf<float> dx(x), dy(y), dout(N);
        using Fwd = void (*)(float*, const float*, int);
        using Bwd = void (*)(float*, const float*, const float*, int);
        using FwdC = void (*)(float*, const float*, int, cudaStream_t);
        using BwdC = void (*)(float*, const float*, const float*, int, cudaStream_t);
        struct Act { const char* name; Fwd f; FwdC fc; Bwd b; BwdC bc; };
        const Act acts[] = {{"gelu", ops::gelu_forward, ops::cuda::gelu_forward, ops::gelu_backward, ops::cuda::gelu_backward},
                            {"relu", ops::relu_forward, ops::cuda::relu_forward, ops::relu_backward, ops::cuda::relu_backward},
                            {"tanh", ops::tanh_forward, ops::cuda::tanh_forward, ops::tanh_backward, ops::cuda::tanh_backward}};
        for (const Act& a : acts) {
            CAPTURE(a.name);
            Vec out(N);
            a.f(out.data(), x.data(), N);
            dout.poison();
            a.fc(dout.p, dx.p, N, 0);
            CHECK(rel_l2(dout.get(), out) < kTolF32);
            Vec g = g0;
            a.b(g.data(), x.data(), y.data(), N);  // tanh's second argument is its output: any values do
            DevBuf<float> dg(g0);
            a.bc(dg.p, dx.p, dy.p, N, 0);
            CHECK(rel_l2(dg.get(), g) < kTolF32);
        }
        Vec sum(N), acc = g0, scaled = x;
        ops::add_forward(sum.data(), x.data(), y.data(), N);
        ops::accumulate(acc.data(), x.data(), N);
        ops::scale(scaled.data(), 0.3f, N);
        dout.poison();
        ops::cuda::add_forward(dout.p, dx.p, dy.p, N);
        CHECK(same_bits(dout.get(), sum));
        DevBuf<float> dacc(g0);
        ops::cuda::accumulate(dacc.p, dx.p, N);
        CHECK(same_bits(dacc.get(), acc));
        ops::cuda::scale(dx.p, 0.3f, N);
        CHECK(same_bits(dx.get(), scaled));
    }
}

TEST_CASE("to_bf16 / from_bf16: the CPU's 16 bits exactly (ties, NaN, inf, denormals)") {
    REQUIRE_DEVICE();
    const int N = 1037;
    Vec x = random_vec(N, 41, -3.0f, 3.0f);
    const uint32_t specials[] = {0x3f808000u /* tie, even below */, 0x3f818000u /* tie, odd below */, 0x7f800000u,
                                 0xff800000u, 0x7f800001u /* NaN, low payload */, 0x00000001u /* denormal */,
                                 0x80000000u, 0x7f7fffffu /* rounds up to inf */};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) std::memcpy(&x[i], &specials[i], 4);
    std::vector<uint16_t> want(N);
    Vec back_want(N);
    ops::to_bf16(want.data(), x.data(), N);
    ops::from_bf16(back_want.data(), want.data(), N);
    DevBuf<float> dx(x), dback(N);
    DevBuf<uint16_t> db(N);
    ops::cuda::to_bf16(db.p, dx.p, N);
    ops::cuda::from_bf16(dback.p, db.p, N);
    CHECK(db.get() == want);
    CHECK(same_bits(dback.get(), back_want));
}

TEST_CASE("embedding forward and backward: the backward has the CPU's bits exactly") {
    REQUIRE_DEVICE();
    const int N = 257, C = 130, V = 17;  // few ids, many repeats
    Ids ids(N);
    std::mt19937 gen(5);
    for (auto& id : ids) id = (int32_t)(gen() % V);
    const Vec table = random_vec((size_t)V * C, 1), out0 = random_vec((size_t)N * C, 2),
              dout = random_vec((size_t)N * C, 3), dt0 = random_vec((size_t)V * C, 4);
    Vec out = out0, dt = dt0;
    ops::embedding_forward(out.data(), ids.data(), table.data(), N, C);
    ops::embedding_backward(dt.data(), dout.data(), ids.data(), N, C);
    DevBuf<int32_t> dids(ids);
    DevBuf<float> dtable(table), dout_(out0), ddout(dout), ddt(dt0);
    ops::cuda::embedding_forward(dout_.p, dids.p, dtable.p, N, C);
    CHECK(same_bits(dout_.get(), out));
    ops::cuda::embedding_backward(ddt.p, ddout.p, dids.p, N, C);
    CHECK(same_bits(ddt.get(), dt));
}

TEST_CASE("dropout: the GPU draws the CPU's mask, bit for bit") {
    REQUIRE_DEVICE();
    const int N = 100003;
    const Vec x = random_vec(N, 1), g0 = random_vec(N, 2);
    ops::DropoutKey key;
    key.seed = 1234, key.step = 3, key.microbatch = 2, key.layer = 5, key.site = 1;
    for (float p : {0.0f, 0.1f, 0.5f}) {
        CAPTURE(p);
        Vec out(N), g = g0;
        ops::dropout_forward(out.data(), x.data(), p, key, N);
        ops::dropout_backward(g.data(), x.data(), p, key, N);
        DevBuf<float> dx(x), dout(N), dg(g0);
        dout.poison();
        ops::cuda::dropout_forward(dout.p, dx.p, p, key, N);
        CHECK(same_bits(dout.get(), out));
        ops::cuda::dropout_backward(dg.p, dx.p, p, key, N);
        CHECK(same_bits(dg.get(), g));
        ops::cuda::dropout_forward(dx.p, dx.p, p, key, N);  // in place
        CHECK(same_bits(dx.get(), out));
        // pointers off 16-byte alignment take the kernels' scalar path
        Vec out1(N - 1), g1(g0.begin() + 1, g0.end());
        ops::dropout_forward(out1.data(), x.data() + 1, p, key, N - 1);
        ops::dropout_backward(g1.data(), x.data() + 1, p, key, N - 1);
        DevBuf<float> dx1(x), dout1(N), dg1(g0);
        dout1.poison();
        ops::cuda::dropout_forward(dout1.p + 1, dx1.p + 1, p, key, N - 1);
        ops::cuda::dropout_backward(dg1.p + 1, dx1.p + 1, p, key, N - 1);
        const Vec got = dout1.get(), got_g = dg1.get();
        CHECK(same_bits(Vec(got.begin() + 1, got.end()), out1));
        CHECK(same_bits(Vec(got_g.begin() + 1, got_g.end()), g1));
    }
}

TEST_CASE("cross-entropy forward and backward vs the CPU, ignore_index rows untouched") {
    REQUIRE_DEVICE();
    for (int V : {1, 63, 5003}) {
        const int N = 17;
        CAPTURE(V);
        const Vec logits = random_vec((size_t)N * V, 1, -5.0f, 5.0f), g0 = random_vec((size_t)N * V, 2);
        Ids targets(N);
        for (int n = 0; n < N; n++) targets[n] = n % 4 == 1 ? -100 : (int32_t)((n * 7919) % V);
        Vec losses(N), g = g0;
        ops::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V);
        ops::crossentropy_backward(g.data(), logits.data(), targets.data(), 0.37f, N, V);
        DevBuf<float> dl(logits), dloss(N), dg(g0);
        DevBuf<int32_t> dt(targets);
        dloss.poison();
        ops::cuda::crossentropy_forward(dloss.p, dl.p, dt.p, N, V);
        const Vec got = dloss.get();
        CHECK(rel_l2(got, losses) < kTolF32);
        ops::cuda::crossentropy_backward(dg.p, dl.p, dt.p, 0.37f, N, V);
        const Vec gg = dg.get();
        CHECK(rel_l2(gg, g) < kTolF32);
        for (int n = 1; n < N; n += 4) {  // ignored rows: loss 0, gradient rows not touched
            CHECK(got[n] == 0.0f);
            CHECK(std::memcmp(&gg[(size_t)n * V], &g0[(size_t)n * V], sizeof(float) * V) == 0);
        }
    }
}

TEST_CASE("adamw_update and sum_squares vs the CPU; sum_squares has fixed bits") {
    REQUIRE_DEVICE();
    const int64_t N = 100003;
    const Vec p0 = random_vec(N, 1), m0 = random_vec(N, 2, -0.1f, 0.1f), v0 = random_vec(N, 3, 0.0f, 0.1f),
              g = random_vec(N, 4);
    for (int t : {1, 7}) {
        CAPTURE(t);
        Vec p = p0, m = m0, v = v0;
        ops::adamw_update(p.data(), m.data(), v.data(), g.data(), N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, t);
        DevBuf<float> dp(p0), dm(m0), dv(v0), dg(g);
        ops::cuda::adamw_update(dp.p, dm.p, dv.p, dg.p, N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, t);
        CHECK(rel_l2(dp.get(), p) < kTolF32);
        CHECK(rel_l2(dm.get(), m) < kTolF32);
        CHECK(rel_l2(dv.get(), v) < kTolF32);
    }
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(3 * 16384 + 17), N}) {
        CAPTURE(n);
        DevBuf<float> dg(g);
        const double ref = ops::sum_squares(g.data(), n);
        const double a = ops::cuda::sum_squares(dg.p, n), b = ops::cuda::sum_squares(dg.p, n);
        CHECK(std::fabs(a - ref) <= 1e-12 * std::fabs(ref));
        CHECK(std::memcmp(&a, &b, sizeof a) == 0);
    }
}

namespace {

struct AttnCase { int B, T, NH, HS; bool causal, padded; float p; };

// Random q, k, v and a padding mask whose last batch row is all padding (queries that see no
// key) and whose other rows end in a few padding tokens.
struct AttnInputs {
    Vec q, k, v;
    Ids mask;
    AttnInputs(const AttnCase& c, uint32_t seed) {
        const size_t n = (size_t)c.B * c.T * c.NH * c.HS;
        q = random_vec(n, seed, -2.0f, 2.0f), k = random_vec(n, seed + 1, -2.0f, 2.0f), v = random_vec(n, seed + 2);
        mask.assign((size_t)c.B * c.T, 1);
        for (int b = 0; b < c.B; b++)
            for (int t = 0; t < c.T; t++)
                if (b == c.B - 1 || t >= c.T - (b + 1) * c.T / 5) mask[(size_t)b * c.T + t] = 0;
    }
};

ops::DropoutKey attn_key() {
    ops::DropoutKey key;
    key.seed = 99, key.step = 1, key.microbatch = 4, key.layer = 2, key.site = 0;
    return key;
}

}  // namespace

TEST_CASE("attention v1: forward and backward vs the CPU (masks, causal, dropout, null grads)") {
    REQUIRE_DEVICE();
    const AttnCase cases[] = {{1, 1, 1, 26, false, false, 0.0f}, {2, 17, 3, 26, false, true, 0.0f},
                              {2, 63, 2, 32, true, true, 0.2f}, {3, 130, 2, 64, false, true, 0.1f},
                              {1, 63, 1, 128, true, false, 0.0f}};
    const ops::DropoutKey key = attn_key();
    uint32_t seed = 10;
    for (const AttnCase& c : cases) {
        CAPTURE(c.T); CAPTURE(c.HS); CAPTURE(c.causal); CAPTURE(c.padded); CAPTURE(c.p);
        const AttnInputs in(c, seed += 3);
        const int32_t* mask = c.padded ? in.mask.data() : nullptr;
        const size_t n = in.q.size(), natt = (size_t)c.B * c.NH * c.T * c.T;
        Vec out(n), att(natt);
        ops::attention_forward(out.data(), att.data(), in.q.data(), in.k.data(), in.v.data(), mask,
                               c.causal, c.p, key, c.B, c.T, c.NH, c.HS);
        DevBuf<float> dq(in.q), dk(in.k), dv(in.v), dout(n), datt(natt);
        DevBuf<int32_t> dmask(in.mask);
        dout.poison(), datt.poison();
        ops::cuda::attention_forward(dout.p, datt.p, dq.p, dk.p, dv.p, c.padded ? dmask.p : nullptr,
                                     c.causal, c.p, key, c.B, c.T, c.NH, c.HS);
        CHECK(rel_l2(dout.get(), out) < kTolF32);
        CHECK(rel_l2(datt.get(), att) < kTolF32);

        const Vec dy = random_vec(n, seed + 100), g0 = random_vec(n, seed + 101);
        for (int which = 0; which < 3; which++) {  // all, dq only, dk + dv only
            CAPTURE(which);
            const bool want_q = which != 2, want_kv = which != 1;
            Vec gq = g0, gk = g0, gv = g0;
            ops::attention_backward(want_q ? gq.data() : nullptr, want_kv ? gk.data() : nullptr,
                                    want_kv ? gv.data() : nullptr, dy.data(), att.data(), in.q.data(),
                                    in.k.data(), in.v.data(), c.p, key, c.B, c.T, c.NH, c.HS);
            DevBuf<float> ddy(dy), dgq(g0), dgk(g0), dgv(g0), dA(att);
            ops::cuda::attention_backward(want_q ? dgq.p : nullptr, want_kv ? dgk.p : nullptr,
                                          want_kv ? dgv.p : nullptr, ddy.p, dA.p, dq.p, dk.p, dv.p,
                                          c.p, key, c.B, c.T, c.NH, c.HS);
            CHECK(rel_l2(dgq.get(), gq) < kTolF32);
            CHECK(rel_l2(dgk.get(), gk) < kTolF32);
            CHECK(rel_l2(dgv.get(), gv) < kTolF32);
        }
    }
}

TEST_CASE("attention v2 and v3 (flash forward, CUDA cores and tensor cores) vs the CPU flash forward: out and log-sum-exp") {
    REQUIRE_DEVICE();
    const AttnCase cases[] = {{1, 1, 1, 26, false, false, 0.0f}, {2, 17, 3, 26, true, true, 0.0f},
                              {2, 63, 2, 32, false, true, 0.2f}, {2, 130, 2, 64, true, true, 0.1f},
                              {1, 257, 2, 128, false, false, 0.0f}, {3, 63, 1, 100, true, true, 0.0f},
                              // T % 4 == 0: the kernels' dropout draws one Philox block per 4 keys
                              {2, 64, 3, 64, true, true, 0.1f},     {1, 128, 2, 100, false, false, 0.2f}};
    const ops::DropoutKey key = attn_key();
    uint32_t seed = 50;
    for (const AttnCase& c : cases) {
        CAPTURE(c.T); CAPTURE(c.HS); CAPTURE(c.causal); CAPTURE(c.padded); CAPTURE(c.p);
        const AttnInputs in(c, seed += 3);
        const int32_t* mask = c.padded ? in.mask.data() : nullptr;
        const size_t n = in.q.size(), rows = (size_t)c.B * c.NH * c.T;
        Vec out(n), lse(rows);
        ops::attention_forward_flash(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), mask,
                                     c.causal, c.p, key, c.B, c.T, c.NH, c.HS);
        DevBuf<float> dq(in.q), dk(in.k), dv(in.v), dout(n), dlse(rows);
        DevBuf<int32_t> dmask(in.mask);
        for (auto forward : {ops::cuda::attention_forward_flash, ops::cuda::attention_forward_flash_tc}) {
            CAPTURE(forward == ops::cuda::attention_forward_flash_tc);
            dout.poison(), dlse.poison();
            forward(dout.p, dlse.p, dq.p, dk.p, dv.p, c.padded ? dmask.p : nullptr, c.causal, c.p, key, c.B, c.T,
                    c.NH, c.HS, 0);
            const Vec got = dout.get(), glse = dlse.get();
            CHECK(rel_l2(got, out) < kTolF32);
            Vec lse_fin, glse_fin;  // -inf (no visible key) must match exactly; the rest closely
            bool inf_match = true;
            for (size_t r = 0; r < rows; r++) {
                if (std::isinf(lse[r])) inf_match &= std::isinf(glse[r]) && glse[r] < 0;
                else lse_fin.push_back(lse[r]), glse_fin.push_back(glse[r]);
            }
            CHECK(inf_match);
            CHECK(rel_l2(glse_fin, lse_fin) < kTolF32);
            dout.poison();  // determinism: the same bits again
            forward(dout.p, dlse.p, dq.p, dk.p, dv.p, c.padded ? dmask.p : nullptr, c.causal, c.p, key, c.B, c.T,
                    c.NH, c.HS, 0);
            CHECK(same_bits(dout.get(), got));
        }
    }
}

TEST_CASE("attention v2 (flash backward) vs the CPU flash backward: masks, causal, dropout, +=, null grads, bits") {
    REQUIRE_DEVICE();
    const AttnCase cases[] = {{1, 1, 1, 26, false, false, 0.0f},  {2, 1, 2, 128, true, true, 0.1f},
                              {2, 37, 3, 26, true, true, 0.1f},   {2, 37, 2, 32, false, true, 0.0f},
                              {2, 37, 1, 64, true, false, 0.0f},  {2, 37, 2, 128, false, false, 0.1f},
                              {2, 130, 2, 32, true, false, 0.1f}, {3, 130, 2, 64, false, true, 0.1f},
                              {2, 130, 2, 128, true, true, 0.0f}, {2, 130, 1, 26, false, false, 0.0f},
                              {2, 64, 2, 64, true, true, 0.1f},   {1, 96, 2, 128, false, true, 0.2f},
                              {2, 36, 1, 32, true, false, 0.3f}};
    const ops::DropoutKey key = attn_key();
    uint32_t seed = 80;
    for (const AttnCase& c : cases) {
        CAPTURE(c.T); CAPTURE(c.HS); CAPTURE(c.causal); CAPTURE(c.padded); CAPTURE(c.p);
        const AttnInputs in(c, seed += 3);
        const int32_t* mask = c.padded ? in.mask.data() : nullptr;
        const size_t n = in.q.size();
        DevBuf<float> dq(in.q), dk(in.k), dv(in.v), dout(n), dlse((size_t)c.B * c.NH * c.T);
        DevBuf<int32_t> dmask(in.mask);
        int32_t* gmask = c.padded ? dmask.p : nullptr;
        ops::cuda::attention_forward_flash(dout.p, dlse.p, dq.p, dk.p, dv.p, gmask, c.causal, c.p, key,
                                           c.B, c.T, c.NH, c.HS);
        const Vec out = dout.get(), lse = dlse.get();  // both backwards start from the GPU's forward
        // Starting gradients about the size of what the backward adds: overwriting instead of
        // adding fails, and they barely dilute the error of the added part. (At T = 1 the added
        // dq, dk are zero up to rounding, which must stay far below 1e-5 of these.)
        const Vec dy = random_vec(n, seed + 100), g0 = random_vec(n, seed + 101, -0.1f, 0.1f);
        DevBuf<float> ddy(dy);
        for (int which = 0; which < 3; which++) {  // all, dq only, dk + dv only
            CAPTURE(which);
            const bool want_q = which != 2, want_kv = which != 1;
            Vec gq = g0, gk = g0, gv = g0;
            ops::attention_backward_flash(want_q ? gq.data() : nullptr, want_kv ? gk.data() : nullptr,
                                          want_kv ? gv.data() : nullptr, dy.data(), out.data(), lse.data(),
                                          in.q.data(), in.k.data(), in.v.data(), mask, c.causal, c.p, key,
                                          c.B, c.T, c.NH, c.HS);
            DevBuf<float> dgq(g0), dgk(g0), dgv(g0);
            auto run = [&] {
                ops::cuda::attention_backward_flash(want_q ? dgq.p : nullptr, want_kv ? dgk.p : nullptr,
                                                    want_kv ? dgv.p : nullptr, ddy.p, dout.p, dlse.p, dq.p, dk.p,
                                                    dv.p, gmask, c.causal, c.p, key, c.B, c.T, c.NH, c.HS);
            };
            run();
            const Vec rq = dgq.get(), rk = dgk.get(), rv = dgv.get();
            CHECK(rel_l2(rq, gq) < kTolF32);
            CHECK(rel_l2(rk, gk) < kTolF32);
            CHECK(rel_l2(rv, gv) < kTolF32);
            dgq.upload(g0), dgk.upload(g0), dgv.upload(g0);  // determinism: the same bits again
            run();
            CHECK(same_bits(dgq.get(), rq));
            CHECK(same_bits(dgk.get(), rk));
            CHECK(same_bits(dgv.get(), rv));
        }
    }
}

TEST_CASE("attention: a head size above 128 throws a clear error from every flash version") {
    REQUIRE_DEVICE();
    const int B = 1, T = 3, NH = 1, HS = 129;
    DevBuf<float> x((size_t)B * T * NH * HS), lse((size_t)B * NH * T);
    for (auto forward : {ops::cuda::attention_forward_flash, ops::cuda::attention_forward_flash_tc})
        CHECK_THROWS_WITH(forward(x.p, lse.p, x.p, x.p, x.p, nullptr, false, 0.0f, attn_key(), B, T, NH, HS, 0),
                          doctest::Contains("attention head size 129 (hidden_size / num_attention_heads) is above 128"));
    CHECK_THROWS_WITH(ops::cuda::attention_backward_flash(x.p, x.p, x.p, x.p, x.p, lse.p, x.p, x.p, x.p, nullptr,
                                                          false, 0.0f, attn_key(), B, T, NH, HS),
                      doctest::Contains("attention head size 129 (hidden_size / num_attention_heads) is above 128"));
}

TEST_CASE("attention: B * NH above the grid's 65535 throws a clear error") {
    REQUIRE_DEVICE();
    const int B = 65536, T = 1, NH = 1, HS = 1;
    DevBuf<float> x((size_t)B * T * NH * HS), lse((size_t)B * NH * T);
    CHECK_THROWS_WITH(ops::cuda::attention_forward_flash(x.p, lse.p, x.p, x.p, x.p, nullptr, false, 0.0f,
                                                         attn_key(), B, T, NH, HS),
                      doctest::Contains("65535"));
    CHECK_THROWS_WITH(ops::cuda::attention_backward_flash(x.p, x.p, x.p, x.p, x.p, lse.p, x.p, x.p, x.p, nullptr,
                                                          false, 0.0f, attn_key(), B, T, NH, HS),
                      doctest::Contains("65535"));
    CHECK_THROWS_WITH(ops::cuda::attention_forward(x.p, x.p, x.p, x.p, x.p, nullptr, false, 0.0f, attn_key(),
                                                   B, T, NH, HS),
                      doctest::Contains("65535"));
}

// Without a device, ctest reports the test as skipped (exit code 77), after the host-side checks.
int main(int argc, char** argv) {
    doctest::Context context(argc, argv);
    int rc = context.run();
    if (rc == 0 && !have_device()) {
        std::printf("skipped: no CUDA device (only the host-side Philox check ran)\n");
        return 77;
    }
    return rc;
}
