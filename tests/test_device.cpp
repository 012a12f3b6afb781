// The device layer on the CPU: Array behaves like std::vector, --device asks for a GPU with a
// clear error where there is none, and --dtype bf16 rounds exactly like the tensor cores and
// trains close to fp32.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/ops.hpp"
#include "src/device.hpp"
#include "src/stage.hpp"
#include "tests/cli_util.hpp"
#include "tests/model_diff.hpp"

using namespace test;

namespace {

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

double final_loss(const std::string& out) { return std::atof(value_after(out, "final loss ").c_str()); }

}  // namespace

TEST_CASE("Array on the CPU: zeros, deep copies, moves, host copies") {
    pt::Buf a(5);
    CHECK(a.size() == 5);
    for (float x : a) CHECK(x == 0.0f);
    a[2] = 7.0f;
    pt::Buf b = a;   // deep
    b[2] = 1.0f;
    CHECK(a[2] == 7.0f);
    pt::Buf c = std::move(a);
    CHECK(c.size() == 5);
    CHECK(c[2] == 7.0f);
    CHECK(a.empty());
    std::vector<float> h = c.host();
    CHECK(h == std::vector<float>{0, 0, 7, 0, 0});
    c.assign(std::vector<float>{1, 2, 3});
    CHECK(c.size() == 3);
    CHECK(c[1] == 2.0f);
    c.zeros(2);
    CHECK(c.host() == std::vector<float>{0, 0});
    CHECK(c.device() == pt::Device{});
}

TEST_CASE("--device: cpu parses; a GPU that is not there is a one-line error") {
    CHECK_FALSE(pt::parse_device("cpu").cuda);
    CHECK_THROWS_WITH_AS(pt::parse_device("gpu"), doctest::Contains("--device: expected cpu, cuda or cuda:N"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(pt::parse_device("cuda:x"), doctest::Contains("--device"), std::runtime_error);
    if (pt::cuda_device_count() == 0) {
        CHECK_THROWS_WITH_AS(pt::parse_device("cuda"), doctest::Contains("--device cuda: "), std::runtime_error);
        Run r = run_cli("train --preset tiny --inputs " + fixture("ernie/ernie1-like/inputs.safetensors") +
                        " --out " + temp_dir("nogpu") + " --steps 1 --device cuda");
        CHECK(r.code != 0);
        CHECK(r.out.find("--device cuda: ") != std::string::npos);
    } else {
        int n = pt::cuda_device_count();
        CHECK(pt::parse_device("cuda:" + std::to_string(n - 1)).index == n - 1);
        CHECK_THROWS_WITH_AS(pt::parse_device("cuda:" + std::to_string(n)), doctest::Contains("GPU(s)"),
                             std::runtime_error);
    }
}

TEST_CASE("round_bf16 rounds to nearest, ties to even, like __float2bfloat16") {
    // bf16 keeps 7 mantissa bits: the spacing above 1 is 2^-7.
    CHECK(ops::round_bf16(1.0f) == 1.0f);
    CHECK(ops::round_bf16(1.0f + 0x1p-9f) == 1.0f);                   // below half: down
    CHECK(ops::round_bf16(1.0f + 0x1p-8f) == 1.0f);                   // tie, 1.0 is even: down
    CHECK(ops::round_bf16(1.0f + 0x1p-7f + 0x1p-8f) == 1.0f + 0x1p-6f);   // tie, odd below: up
    CHECK(ops::round_bf16(1.0f + 0x1p-8f + 0x1p-12f) == 1.0f + 0x1p-7f);  // above half: up
    CHECK(ops::round_bf16(-3.0f) == -3.0f);
    CHECK(std::isnan(ops::round_bf16(from_bits(0x7fc00001u))));
    CHECK(std::isinf(ops::round_bf16(INFINITY)));
}

TEST_CASE("to_bf16 / from_bf16: 16-bit storage of round_bf16, exactly") {
    std::vector<float> x = {1.0f, 1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f, -2.5e-3f, 3.0e38f, INFINITY, -0.0f,
                            from_bits(0x7f800001u) /* a NaN whose payload is in the low bits */};
    std::vector<uint16_t> b(x.size());
    std::vector<float> y(x.size());
    ops::to_bf16(b.data(), x.data(), int(x.size()));
    ops::from_bf16(y.data(), b.data(), int(x.size()));
    for (size_t i = 0; i + 1 < x.size(); i++) {   // every value but the NaN: bits as round_bf16's
        float r = ops::round_bf16(x[i]);
        uint32_t u;
        std::memcpy(&u, &r, 4);
        CHECK(b[i] == u >> 16);
        CHECK(std::memcmp(&y[i], &r, 4) == 0);
    }
    CHECK(b[0] == 0x3f80);   // 1.0
    CHECK(b[5] == 0x7f80);   // inf stays inf
    CHECK(std::isnan(y.back()));   // truncating would have made it inf
}

TEST_CASE("gemm_bf16 equals the fp32 GEMM of the rounded inputs, computed in double") {
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> dist(-1, 1);
    const int M = 13, N = 7, K = 37;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        std::vector<float> A(M * K), B(K * N), bias(N), C(M * N, NAN);
        for (float& x : A) x = dist(gen);
        for (float& x : B) x = dist(gen);
        for (float& x : bias) x = dist(gen);
        ops::gemm_bf16(C.data(), A.data(), B.data(), bias.data(), M, N, K, ta, tb, 1.0f, 0.0f);
        double worst = 0, plain = 0;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double ref = bias[n], unrounded = bias[n];
                for (int k = 0; k < K; k++) {
                    float a = ta ? A[k * M + m] : A[m * K + k], b = tb ? B[n * K + k] : B[k * N + n];
                    ref += double(ops::round_bf16(a)) * double(ops::round_bf16(b));
                    unrounded += double(a) * double(b);
                }
                worst = std::max(worst, std::fabs(C[m * N + n] - ref));
                plain = std::max(plain, std::fabs(C[m * N + n] - unrounded));
            }
        CHECK(worst < 1e-5);   // fp32 accumulation of exact products
        CHECK(plain > 1e-4);   // and the rounding really happened
    }
}

TEST_CASE("--dtype bf16: any pipeline split gives the one-stage bits, and messages are 16-bit") {
    std::string base = "train --preset tiny --data " + fixture("text/sample_zh.txt") +
                       " --steps 2 --batch 8 --micro-batches 4 --seq 16 --seed 5 --dropout 0.1 --dtype bf16";
    std::string one = temp_dir("bf16-one");
    Run r1 = run_cli(base + " --out " + one);
    REQUIRE_MESSAGE(r1.code == 0, r1.out);
    for (std::string layout : {"--stages 2 --schedule 1f1b", "--stages 3 --schedule zb-h1 --recompute full",
                               "--stages 2 --schedule interleaved --chunks 2"}) {
        CAPTURE(layout);
        std::string dir = temp_dir("bf16-pp");
        Run r = run_cli(base + " --out " + dir + " " + layout);
        REQUIRE_MESSAGE(r.code == 0, r.out);
        CHECK(model_difference(dir + "/model.safetensors", one + "/model.safetensors") == "");
    }
    // The stage asks the executor for half the bytes of fp32.
    pt::ModelConfig cfg = pt::ModelConfig::preset("tiny");
    pt::RunOptions opt;
    opt.bf16 = true;
    pt::TransformerStage stage(cfg, {{1, 2}}, pt::Recompute::none, opt);
    pt::Batch b;
    b.B = 2, b.T = 8;
    b.input_ids.assign(16, 5), b.token_type_ids.assign(16, 0), b.attention_mask.assign(16, 1), b.targets.assign(16, -100);
    stage.begin_step(&b, 1, 0, 0, 1.0f);
    CHECK(stage.input_buffer(pp::Op::F, 0, 0).bytes == size_t(8) * cfg.hidden_size * 2);
}

TEST_CASE("--dtype bf16 trains within 1e-2 of fp32 (CPU emulation of the tensor-core path)") {
    std::string base = "train --preset tiny --data " + fixture("text/sample_zh.txt") +
                       " --steps 3 --batch 8 --micro-batches 2 --seq 16 --seed 3 --dropout 0.1 --stages 2";
    Run f = run_cli(base + " --out " + temp_dir("fp32"));
    Run b = run_cli(base + " --out " + temp_dir("bf16") + " --dtype bf16");
    REQUIRE_MESSAGE(f.code == 0, f.out);
    REQUIRE_MESSAGE(b.code == 0, b.out);
    double lf = final_loss(f.out), lb = final_loss(b.out);
    CHECK(lf > 1.0);
    CHECK(std::fabs(lb - lf) / lf < 1e-2);
    CHECK(lb != lf);   // the bf16 path is really taken
    Run bad = run_cli(base + " --out " + temp_dir("bad") + " --dtype fp16");
    CHECK(bad.code != 0);
    CHECK(bad.out.find("--dtype: expected fp32 or bf16") != std::string::npos);
}

TEST_CASE("--dtype bf16 keeps the stashed activations in 16 bits: about half the memory, same gradients to bf16 precision") {
    pt::ModelConfig cfg = pt::ModelConfig::preset("tiny");
    std::vector<int> all(pt::num_model_layers(cfg));
    for (int i = 0; i < int(all.size()); i++) all[i] = i;
    pt::Batch b;
    b.B = 4, b.T = 16;
    std::mt19937 rng(7);
    for (int i = 0; i < b.B * b.T; i++) {
        b.input_ids.push_back(int32_t(rng() % cfg.vocab_size));
        b.targets.push_back(i % 3 == 0 ? int32_t(rng() % cfg.vocab_size) : -100);
    }
    b.token_type_ids.assign(b.input_ids.size(), 0), b.attention_mask.assign(b.input_ids.size(), 1);
    auto run = [&](bool bf16, size_t* peak, size_t* whole) {
        pt::RunOptions opt;
        opt.bf16 = bf16;
        pt::TransformerStage stage(cfg, {all}, pt::Recompute::none, opt);
        for (pt::Layer* l : stage.layers()) l->init(11, 0.02f);
        stage.begin_step(&b, b.B, 0, 0, 1.0f);
        stage.forward(0, 0);
        *peak = stage.peak_stash_bytes();
        stage.backward(0, 0);
        *whole = stage.peak_stash_bytes();
        std::vector<float> g;
        for (pt::Layer* l : stage.layers())
            for (float x : l->grads.host()) g.push_back(x);
        return g;
    };
    size_t peak32 = 0, peak16 = 0, whole32 = 0, whole16 = 0;
    std::vector<float> g32 = run(false, &peak32, &whole32), g16 = run(true, &peak16, &whole16);
    MESSAGE("peak stash after the forward: fp32 " << peak32 << " B, bf16 " << peak16 << " B; over the step: "
            << whole32 << " B, " << whole16 << " B");
    CHECK(peak16 < 0.55 * double(peak32));
    // Over the whole step too: the backward unpacks one layer's stash at a time, not all of them
    // (1.0 before); the gradients BW needs stay fp32, hence not 0.5.
    CHECK(whole16 < 0.8 * double(whole32));
    // A buffer unpacked into the wrong place would give unrelated gradients, not bf16-close ones.
    REQUIRE(g32.size() == g16.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < g32.size(); i++) num += double(g16[i] - g32[i]) * (g16[i] - g32[i]), den += double(g32[i]) * g32[i];
    CHECK(den > 0);
    CHECK(std::sqrt(num / den) < 3e-2);
}
