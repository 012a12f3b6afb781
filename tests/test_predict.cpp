// `pipetrain schedule --predict` (a step of a shape past this machine, from a link model and the
// model's FLOPs) against the arithmetic done by hand here, and `pipetrain bench-link`. How close
// the prediction comes to runs measured here is a benchmark (scripts/bench_predict.sh), not a test.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>

#include "src/cli/train.hpp"
#include "tests/cli_util.hpp"

using namespace test;

namespace {

// The preset tiny (hidden C 64, intermediate I 256, vocab V 4000, 4 blocks) at T 16: FLOPs a token of
// the forward, as the predictor's doc says: embedding 10C, a block 2(4C² + 2CI) + 4TC, the MLM head
// 2(C² + 0.15CV) (15% of the rows reach the vocabulary).
constexpr double C = 64, I = 256, V = 4000, T = 16;
constexpr double kTinyFlops = 10 * C + 4 * (2 * (4 * C * C + 2 * C * I) + 4 * T * C) + 2 * (C * C + 0.15 * C * V);

const std::string kTiny = "schedule --predict --preset tiny --seq 16 --flops 1e9 ";

// The number after `key` in the predictor's output (ms, or bytes with a K/M/G suffix as printed).
double after(const std::string& out, const std::string& key) {
    size_t at = out.rfind(key);
    REQUIRE_MESSAGE(at != std::string::npos, out);
    return std::atof(out.c_str() + at + key.size());
}

}  // namespace

TEST_CASE("one device: the step is F + BI + BW of every layer, the FLOPs at --flops") {
    Run r = run_cli(kTiny + "--stages 1 --micro-batches 1 --batch 1 --schedule gpipe");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    double want_ms = 3 * kTinyFlops * 1 * T / 1e9 * 1e3;   // 1 row of 16 tokens
    CHECK(after(r.out, "\nstep ") == doctest::Approx(want_ms).epsilon(0.01));
    CHECK(r.out.find("bubble 0.0%") != std::string::npos);
    // Twice the rows, twice the time; four micro-batches of them, four times.
    Run two = run_cli(kTiny + "--stages 1 --micro-batches 4 --batch 8 --schedule gpipe");
    REQUIRE_MESSAGE(two.code == 0, two.out);
    CHECK(after(two.out, "\nstep ") == doctest::Approx(8 * want_ms).epsilon(0.01));
}

// D replicas of one stage: the ring all-reduce of the gradients (4 bytes a parameter: a quarter of
// the printed weights + gradients + moments), on the link within a node unless the replicas span nodes.
TEST_CASE("replicas: the ring sum of the gradients, within a node or across, overlapped or not") {
    const std::string flags = kTiny + "--stages 1 --dp 4 --micro-batches 1 --batch 4 --schedule gpipe --dp-overlap 0 ";
    Run one = run_cli(kTiny + "--stages 1 --micro-batches 1 --batch 1 --schedule gpipe");
    Run in = run_cli(flags + "--links 1,1,1000,0.001");
    Run out = run_cli(flags + "--links 1,1,1000,0.001 --ranks-per-node 1");
    REQUIRE_MESSAGE(in.code == 0, in.out);
    REQUIRE_MESSAGE(out.code == 0, out.out);
    double compute = after(one.out, "\nstep ");
    auto ring_ms = [](double grad_bytes, double latency_s, double bandwidth) {
        return 1e3 * (2.0 * 3 / 4 * grad_bytes / bandwidth + 2.0 * 3 * latency_s);
    };
    double sum_in = after(in.out, "\nstep ") - compute, sum_out = after(out.out, "\nstep ") - compute;
    // The gradients' bytes, counted here: every parameter of the tiny preset, the head's tied copy
    // of the word embedding included (it is summed over the replicas too). They were derived from
    // the within-node sum by the formula under test, so a wrong ring factor passed.
    double grad_bytes = 0;
    const pt::ForwardModel tiny = pt::forward_model(pt::ModelConfig::preset("tiny"));
    for (const pt::Layer* l : tiny.layers) grad_bytes += 4.0 * double(l->params.size());
    CHECK(sum_in == doctest::Approx(ring_ms(grad_bytes, 1e-6, 1e9)).epsilon(0.02));
    CHECK(sum_out == doctest::Approx(ring_ms(grad_bytes, 1e-3, 1e6)).epsilon(0.02));
    // Latency alone (a link of 1 PB/s): 2(D - 1) hops of 2 ms each.
    Run hops = run_cli(flags + "--links 2000,1e6,2000,1e6");
    CHECK(after(hops.out, "\nstep ") - compute == doctest::Approx(ring_ms(0, 2e-3, 1e15)).epsilon(0.01));
    // Overlapped, part of the sum hides behind the backward: never slower, here faster.
    Run hidden = run_cli(kTiny + "--stages 1 --dp 4 --micro-batches 1 --batch 4 --schedule gpipe --links 1,1,1,1");
    Run shown = run_cli(kTiny + "--stages 1 --dp 4 --micro-batches 1 --batch 4 --schedule gpipe --links 1,1,1,1 --dp-overlap 0");
    CHECK(after(hidden.out, "\nstep ") < after(shown.out, "\nstep "));
}

TEST_CASE("a pipeline: stages split the layers, transfers cost latency + bytes / bandwidth, ZeRO-1 shrinks the state") {
    Run fast = run_cli(kTiny + "--stages 2 --micro-batches 4 --batch 4 --links 1,1000,1,1000");
    Run slow = run_cli(kTiny + "--stages 2 --micro-batches 4 --batch 4 --links 1,1000,1,1000 --ranks-per-node 1");
    Run slower = run_cli(kTiny + "--stages 2 --micro-batches 4 --batch 4 --links 1,1000,1000,0.001 --ranks-per-node 1");
    REQUIRE_MESSAGE(fast.code == 0, fast.out);
    CHECK(fast.out.find("2 stages × 1 replica, 1f1b") != std::string::npos);
    CHECK(after(slow.out, "\nstep ") == doctest::Approx(after(fast.out, "\nstep ")).epsilon(0.01));   // the same link
    // An activation of one row: 16 × 64 × 4 bytes at 1 MB/s after 1 ms: each of the ~2M transfers on the way.
    CHECK(after(slower.out, "\nstep ") > after(fast.out, "\nstep ") + 2 * (1 + 16 * 64 * 4 / 1e6 * 1e3));
    Run zero = run_cli(kTiny + "--stages 1 --dp 4 --micro-batches 1 --batch 4 --zero 1");
    Run plain = run_cli(kTiny + "--stages 1 --dp 4 --micro-batches 1 --batch 4 --zero 0");
    CHECK(after(zero.out, "up to ") < after(plain.out, "up to "));
    // Past this machine, in seconds: 64 stages, 64 replicas, 512 micro-batches.
    Run big = run_cli("schedule --predict --preset small --blocks 126 --seq 64 --stages 64 --dp 64 --micro-batches 512"
                      " --batch 32768 --ranks-per-node 8 --flops 1e14");
    CHECK_MESSAGE(big.code == 0, big.out);
    CHECK(big.out.find("64 stages × 64 replicas") != std::string::npos);
    // A real width: ERNIE-base with 126 blocks (~900M parameters). The stashes are measured on one
    // layer of each kind, so the prediction fits in 3 GB of address space; building every layer
    // (as the predictor once did: 37 s and 6.9 GB at 64 blocks) runs out of memory here.
    if (sanitized()) return;   // no address-space limit means anything under them
    Run base = run_command("ulimit -v 3000000; " + std::string(PT_CLI) +
                           " schedule --predict --preset ernie-3.0-base-zh --blocks 126 --stages 64 --dp 64"
                           " --micro-batches 512 --ranks-per-node 8");
    CHECK_MESSAGE(base.code == 0, base.out);
    CHECK(base.out.find("64 stages × 64 replicas") != std::string::npos);
}

// After the sums: ranks 0 and P-1 swap their copies of the tied word embedding's gradient (V × C
// floats over their link, once); the norm and AdamW are timed here with --measured, not modelled without.
TEST_CASE("after the sums: the tied copies' swap over the first and last ranks' link") {
    const std::string two = kTiny + "--stages 2 --micro-batches 4 --batch 4 --ranks-per-node 1 ";
    Run fast = run_cli(two + "--links 1,1000,1,1000"), slow = run_cli(two + "--links 1,1000,3000,0.01");
    REQUIRE_MESSAGE(fast.code == 0, fast.out);
    REQUIRE_MESSAGE(slow.code == 0, slow.out);
    const double swap_ms = 3 + V * C * 4 / 0.01e9 * 1e3;   // 3 ms of latency, 102.4 ms of bytes
    CHECK(after(slow.out, "tied copies' sum ") == doctest::Approx(swap_ms).epsilon(0.01));
    CHECK(after(slow.out, "\nstep ") == doctest::Approx(after(slow.out, "(pipeline ") + swap_ms).epsilon(0.01));
    CHECK(slow.out.find("the norm and AdamW not modelled") != std::string::npos);
    CHECK(slow.out.find("the gradient tree not modelled") != std::string::npos);
    Run one = run_cli(kTiny + "--stages 1 --micro-batches 1 --batch 1 --links 1,1000,3000,0.01");
    CHECK(after(one.out, "tied copies' sum ") == 0);   // one rank holds both copies
}

// --measured: the memory-bound passes over a rank's parameters at the rates timed here. The
// gradients are zeroed before the step; the micro-batches' gradient tree (src/model.cpp) zeroes
// every even leaf after the first (an odd leaf is computed into its left neighbour, leaf 0 into the
// gradients) and merges partial sums as a binary counter carries, inside the BWs: M = 5 zeroes
// leaves 2 and 4 and adds at leaves 3 and 4 (the last: what is left), M = 8 zeroes 2, 4, 6 and adds
// once at leaf 3 and twice at 7; one micro-batch has no tree. After the sums come the norm, the
// clip's scaling and AdamW.
TEST_CASE("--measured: the gradients zeroed, the gradient tree inside the BWs, then the norm, the clip and AdamW") {
    auto line = [](const std::string& out, const std::string& start) {   // the output's line that starts so
        size_t at = out.find("\n" + start);
        REQUIRE_MESSAGE(at != std::string::npos, out);
        return out.substr(at + 1, out.find('\n', at + 1) - at - 1);
    };
    for (auto [M, zeroed, added] : {std::array<int, 3>{1, 0, 0}, {5, 2, 2}, {8, 3, 3}}) {
        CAPTURE(M);
        Run r = run_cli("schedule --predict --preset tiny --seq 16 --stages 1 --batch " + std::to_string(M) +
                        " --micro-batches " + std::to_string(M) + " --measured");
        REQUIRE_MESSAGE(r.code == 0, r.out);
        double zero = 0, add = 0, norm = 0, scale = 0, adamw = 0, params = 0, f = 0, bi = 0, bw = 0;   // ns a parameter; ms
        REQUIRE(std::sscanf(line(r.out, "passes timed here").c_str(),
                            "passes timed here, ns a parameter: zeroing %lf, adding %lf, sum of squares %lf, scaling %lf,"
                            " AdamW %lf (the largest rank: %lf parameters)", &zero, &add, &norm, &scale, &adamw, &params) == 6);
        REQUIRE(std::sscanf(line(r.out, "   0 ").c_str(), "%*d %*d %lf / %lf / %lf", &f, &bi, &bw) == 3);
        CHECK((zero > 0 && add > 0 && norm > 0 && scale > 0 && adamw > 0 && params > 0));
        const std::string step = "\n" + line(r.out, "step ");
        const double tree_ms = params * (zeroed * zero + added * add) * 1e-6;
        CHECK(after(step, "zeroing ") == doctest::Approx(params * zero * 1e-6).epsilon(0.002));
        CHECK(after(step, "gradient tree's ") == doctest::Approx(tree_ms).epsilon(0.002));
        // One stage, GPipe: the pipeline is M times the layers' F + BI + BW, and the tree.
        CHECK(after(step, "(pipeline ") == doctest::Approx(M * (f + bi + bw) + tree_ms).epsilon(0.002));
        CHECK(after(step, "the norm ") == doctest::Approx(params * norm * 1e-6).epsilon(0.002));
        CHECK(after(step, "scaling ") == doctest::Approx(params * scale * 1e-6).epsilon(0.002));
        CHECK(after(step, "AdamW ") == doctest::Approx(params * adamw * 1e-6).epsilon(0.002));
        CHECK(after(step, "\nstep ") == doctest::Approx(after(step, "zeroing ") + after(step, "(pipeline ") +
                                                        after(step, "the norm ") + after(step, "scaling ") +
                                                        after(step, "AdamW ")).epsilon(0.002));
    }
}

// --measured ranks are this machine's CPU cores, each computing: a replica sum's adds and copies take
// the core it would hide on (dp 2 on 2 cores, overlapped against not: 0.99-1.01x, docs/parallel-bench.md),
// so with --measured no sum hides, --dp-overlap 1 or not; with --flops (devices that sum beside their
// compute) it does (the replicas case above).
TEST_CASE("--measured: a replica sum does not hide behind the backward of CPU ranks") {
    Run r = run_cli("schedule --predict --preset tiny --seq 16 --stages 1 --dp 2 --batch 4 --micro-batches 2 --measured"
                    " --links 1,0.01,1,0.01");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(r.out.find("--dp-overlap 1 (CPU cores, each computing: no sum hides)") != std::string::npos);
    double sum = 0, hidden = -1;
    size_t at = r.out.find("\n   0 ");
    REQUIRE(at != std::string::npos);
    REQUIRE(std::sscanf(r.out.c_str() + at, "\n %*d %*d %*f / %*f / %*f %*f %lf (%lf)", &sum, &hidden) == 2);
    CHECK(sum > 1);   // ms: the gradients over 0.01 GB/s
    CHECK(hidden == 0);
    const double passes = after(r.out, "zeroing ") + after(r.out, "the norm ") + after(r.out, "scaling ") + after(r.out, "AdamW ");
    CHECK(after(r.out, "\nstep ") == doctest::Approx(after(r.out, "(pipeline ") + sum + passes).epsilon(5e-4));
}

// --measured ranks are this machine's cores, computing at once and sharing its caches and memory:
// the layers and the passes are timed on as many threads at once as the run has ranks (at most the
// cores, and 8), and the output says how many ran at the same time (counted as they ran: a copy
// that finished before the next began counts once).
TEST_CASE("--measured: the layers and the passes timed on as many cores at once as the run has ranks") {
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    for (auto [P, D] : {std::array<int, 2>{1, 1}, {1, 2}, {2, 2}}) {
        CAPTURE(P);
        CAPTURE(D);
        const std::string M = std::to_string(2 * P);
        Run r = run_cli("schedule --predict --preset tiny --seq 16 --stages " + std::to_string(P) + " --dp " +
                        std::to_string(D) + " --micro-batches " + M + " --batch " + std::to_string(2 * P * D) + " --measured");
        REQUIRE_MESSAGE(r.code == 0, r.out);
        const int want = std::min({P * D, cores, 8});
        const std::string said = want == 1 ? "(timed on 1 core)" : "(timed on " + std::to_string(want) + " cores at once,";
        CHECK_MESSAGE(r.out.find("compute as measured here " + said) != std::string::npos, r.out);
    }
}

// Replicas wait for each other every step, and a pipeline for its slowest stage: the layers are the
// slowest copy's (the mean of the copies, before, predicted dp 2 on 2 cores 0.78-0.92 of its
// measured step on the family-26 EPYC). One replica's rank holds every layer, so its F + BI + BW is
// the slowest copy's whole micro-batch.
TEST_CASE("--measured: the layers as the slowest of the copies timed at once") {
    if (std::thread::hardware_concurrency() < 2) {
        MESSAGE("skipped: one core, so one copy");
        return;
    }
    Run r = run_cli("schedule --predict --preset tiny --seq 16 --stages 1 --dp 2 --batch 4 --micro-batches 2 --measured");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    const double slowest = after(r.out, "F + BI + BW of a micro-batch "), other = after(r.out, " ms; the other ");
    CHECK(slowest >= other);
    const size_t row = r.out.find("\n   0 ");   // rank 0: "   0       L    F / BI / BW ..."
    REQUIRE_MESSAGE(row != std::string::npos, r.out);
    double layers = 0, f = 0, bi = 0, bw = 0;
    REQUIRE(std::sscanf(r.out.c_str() + row + 5, " %lf %lf / %lf / %lf", &layers, &f, &bi, &bw) == 4);
    CHECK(f + bi + bw == doctest::Approx(slowest).epsilon(2e-3));   // each printed to 4 digits
}

TEST_CASE("V-shaped chunks: the split balances the ranks, not only the chunks") {
    // `small` (6 blocks, vocabulary 8,000) over 2 ranks of 2 chunks. Balancing the 4 chunks alone
    // gave rank 1 four blocks and rank 0 two, the embedding and the head (17.45 against 10.64 ms a
    // micro-batch's F, a step of 424 ms); the ranks' sums balanced, 5 layers against 3.
    Run r = run_cli("schedule --predict --preset small --stages 2 --schedule zbv --micro-batches 8 --batch 16 --seq 128");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    double f0 = after(r.out, "\n   0       5 "), f1 = after(r.out, "\n   1       3 ");
    CHECK_MESSAGE(std::max(f0, f1) < 1.2 * std::min(f0, f1), r.out);
    CHECK_MESSAGE(after(r.out, "\nstep ") < 400, r.out);
}

TEST_CASE("--predict's flags: one line each for what is wrong") {
    auto error = [](const std::string& args) {
        Run r = run_cli(args);
        CHECK(r.code != 0);
        return r.out;
    };
    CHECK(error(kTiny + "--links 1,2,3").find("--links: expected W_US,W_GBPS,A_US,A_GBPS") != std::string::npos);
    CHECK(error(kTiny + "--links 1,0,3,4").find("bandwidths above 0") != std::string::npos);
    CHECK(error(kTiny + "--links ' 1,2,3,4'").find("--links: expected W_US,W_GBPS,A_US,A_GBPS") != std::string::npos);   // was taken
    CHECK(error("schedule --costs 0x10,1,1,0").find("--costs") != std::string::npos);   // was read as 16
    CHECK(error(kTiny + "--measured").find("--flops: not with --measured") != std::string::npos);
    CHECK(error("schedule --preset tiny").find("--preset: only with --predict") != std::string::npos);
    CHECK(error(kTiny + "--dp 3 --micro-batches 2 --batch 8").find("--batch: 8 rows do not split into --dp 3 × --micro-batches 2") !=
          std::string::npos);
    CHECK(error(kTiny + "--costs 1,1,1,0").find("--costs: not with --predict") != std::string::npos);
    // Accepted and ignored before: any --dtype (fp32 was used), --overlap, --model beside --preset (the
    // model was used), --blocks with a model; --schedule auto said 'expected ... or auto, got "auto"'.
    CHECK(error(kTiny + "--dtype fp16").find("--dtype: expected fp32 or bf16, got \"fp16\"") != std::string::npos);
    CHECK(error(kTiny + "--overlap").find("--overlap: not with --predict") != std::string::npos);
    CHECK(error("schedule --stages 4 --micro-batches 8 --compare --overlap").find("drop --overlap") != std::string::npos);
    CHECK(error(kTiny + "--model " + fixture("ernie/nano-like/hf")).find("--model / --preset: give one of them") != std::string::npos);
    CHECK(error("schedule --predict --model " + fixture("ernie/nano-like/hf") + " --blocks 8").find("--blocks: only with --preset") !=
          std::string::npos);
    CHECK(error(kTiny + "--schedule auto").find("--schedule auto: not with --predict") != std::string::npos);
}

TEST_CASE("bench-link: two threads' latency and bandwidth, and the --links value they make") {
    Run r = run_cli("bench-link --comm thread --bytes 1048576 --reps 5");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    double latency = 0, bandwidth = 0;
    size_t at = r.out.find("--links value for this link: ");
    REQUIRE(at != std::string::npos);
    REQUIRE(std::sscanf(r.out.c_str() + at, "--links value for this link: %lf,%lf", &latency, &bandwidth) == 2);
    CHECK(latency > 0);
    CHECK(bandwidth > 0);
    Run bad = run_cli("bench-link --comm carrier-pigeon");
    CHECK(bad.code != 0);
    CHECK(bad.out.find("--comm: expected thread or mpi") != std::string::npos);
}
