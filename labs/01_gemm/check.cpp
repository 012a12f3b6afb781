// labs/01_gemm/check.cpp — lab 01's check: scripts/lab.sh check 01 (or build/lab_01).
// build/lab_01 --bench [S] [tile] measures the deliverable (your two GEMMs and pipetrain's, S^3).
//
// The reference is the spec, ops::gemm_naive (kernels/cpu/gemm.cpp), never your code. When your
// C differs, the check computes the usual mistaken versions of the chain (written below) and says
// which one yours matches.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "kernels/ops.hpp"
#include "labs/01_gemm/gemm.hpp"
#include "labs/check.hpp"

using namespace labcheck;

namespace {

// ---- one product, its inputs -------------------------------------------------------------------
struct Case {
    int M, N, K;
    bool transA = false, transB = false;
    float alpha = 1.0f, beta = 0.0f;
    bool bias = false;
    float c_old = 1000.0f;   // what C holds before the call (NaN: it must not be read)
};

std::string describe(const Case& c) {
    std::string s = std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) + " (M x N x K)";
    if (c.transA) s += ", transA";
    if (c.transB) s += ", transB";
    if (c.alpha != 1.0f || c.beta != 0.0f) s += ", alpha " + num(c.alpha) + ", beta " + num(c.beta);
    if (c.bias) s += ", with bias";
    if (std::isnan(c.c_old)) s += ", C holding NaN";
    return s;
}

// A and B are padded to (L, L), L = max(M, N, K) + 1, with more random numbers, so that a
// transposition read with the wrong stride reads numbers (which the check reproduces), not past
// the end of an array.
struct Inputs {
    std::vector<float> A, B, bias, C0;
};

Inputs make_inputs(const Case& c, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const size_t L = (size_t)std::max({c.M, c.N, c.K}) + 1;
    Inputs in{std::vector<float>(L * L), std::vector<float>(L * L), std::vector<float>((size_t)c.N), {}};
    for (float& x : in.A) x = dist(gen);
    for (float& x : in.B) x = dist(gen);
    for (float& x : in.bias) x = dist(gen);
    in.C0.assign((size_t)c.M * c.N, c.c_old);
    if (c.beta != 0.0f)
        for (float& x : in.C0) x = dist(gen);
    return in;
}

// ---- the chain, and the usual ways to get it wrong ---------------------------------------------
// The right way by default; each field is one known mistake.
struct Way {
    bool no_fma = false;            // acc += a * b: a rounded product, then a rounded sum
    bool double_acc = false;        // the chain in double, rounded to float once at the end
    bool from_c = false;            // the chain starts at C's old value instead of 0
    int k_block = 0;                // > 0: one partial chain per k-block of this size, added into C
    bool halves = false;            // two partial chains, k < K/2 and k >= K/2, added
    bool reversed = false;          // k = K-1 down to 0
    int a_index = 0, b_index = 0;   // 1: the transpose ignored; 2: transposed with the wrong stride
    bool flags_swapped = false;     // transA applied to B and transB to A
    bool beta_reads_c = false;      // beta * C added even when beta == 0
    bool bias_before_beta = false;  // alpha * acc + bias, then + beta * C
    bool alpha_in_chain = false;    // acc = fma(alpha * a, b, acc)
    std::string hint;
};

float a_at(const Way& w, const float* A, int m, int k, int M, int K, bool t) {
    if (!t || w.a_index == 1) return A[(size_t)m * K + k];
    return w.a_index == 2 ? A[(size_t)k * K + m] : A[(size_t)k * M + m];
}
float b_at(const Way& w, const float* B, int k, int n, int N, int K, bool t) {
    if (!t || w.b_index == 1) return B[(size_t)k * N + n];
    return w.b_index == 2 ? B[(size_t)n * N + k] : B[(size_t)n * K + k];
}

void gemm_way(float* C, const Inputs& in, const Case& c, const Way& w) {
    const bool ta = w.flags_swapped ? c.transB : c.transA, tb = w.flags_swapped ? c.transA : c.transB;
    for (int m = 0; m < c.M; m++)
        for (int n = 0; n < c.N; n++) {
            float& out = C[(size_t)m * c.N + n];
            auto chain = [&](int k0, int k1, float acc) {
                for (int i = k0; i < k1; i++) {
                    const int k = w.reversed ? c.K - 1 - i : i;
                    float a = a_at(w, in.A.data(), m, k, c.M, c.K, ta), b = b_at(w, in.B.data(), k, n, c.N, c.K, tb);
                    if (w.alpha_in_chain) a *= c.alpha;
                    acc = w.no_fma ? acc + a * b : std::fma(a, b, acc);
                }
                return acc;
            };
            float acc = 0.0f;
            if (w.double_acc) {
                double d = 0.0;
                for (int k = 0; k < c.K; k++)
                    d += (double)a_at(w, in.A.data(), m, k, c.M, c.K, ta) * b_at(w, in.B.data(), k, n, c.N, c.K, tb);
                acc = (float)d;
            } else if (w.k_block > 0) {
                for (int k0 = 0; k0 < c.K; k0 += w.k_block) acc += chain(k0, std::min(k0 + w.k_block, c.K), 0.0f);
            } else if (w.halves) {
                acc = chain(0, c.K / 2, 0.0f) + chain(c.K / 2, c.K, 0.0f);
            } else {
                acc = chain(0, c.K, w.from_c ? out : 0.0f);
            }
            float r = w.alpha_in_chain ? acc : c.alpha * acc;
            if (w.bias_before_beta && c.bias) r += in.bias[(size_t)n];
            if (c.beta != 0.0f || w.beta_reads_c) r += c.beta * out;
            if (!w.bias_before_beta && c.bias) r += in.bias[(size_t)n];
            out = r;
        }
}

const char* kSplitK = "a blocked GEMM reorders m and n, never k: keep one accumulator per output across all k-blocks";

std::vector<Way> mistakes_of_the_chain() {
    std::vector<Way> ways(5);
    ways[0].no_fma = true;
    ways[0].hint = "yours matches acc += a * b, which rounds the product and then the sum: use std::fma, the chain "
                   "rounds once per step";
    ways[1].double_acc = true;
    ways[1].hint = "yours matches a chain summed in double and rounded once at the end: the chain is a float, "
                   "rounded at every step (std::fma on floats)";
    ways[2].from_c = true;
    ways[2].hint = "yours matches a chain that starts at C's old value: start every chain at 0 (what C held "
                   "before is no part of A B)";
    ways[3].halves = true;
    ways[3].hint = std::string("yours matches two partial sums, k < K/2 and k >= K/2, added: ") + kSplitK;
    ways[4].reversed = true;
    ways[4].hint = "yours matches the chain run backwards, k = K-1 down to 0: float addition is not associative, "
                   "so the chain's order, k = 0, 1, ..., K-1, is part of the result";
    return ways;
}

std::vector<Way> mistakes_of_the_transposes(const Case& c) {
    std::vector<Way> ways;
    auto add = [&](Way w, const std::string& hint) { w.hint = hint, ways.push_back(w); };
    Way w;
    if (c.transA) {
        w = {}, w.a_index = 1;
        add(w, "with transA your code reads A[m * K + k], the transpose ignored: A is stored (K, M), so op(A)[m][k] "
               "is A[k * M + m]");
        w = {}, w.a_index = 2;
        add(w, "with transA your code reads A[k * K + m]: A is stored (K, M), its rows are M long, so op(A)[m][k] is "
               "A[k * M + m]");
    }
    if (c.transB) {
        w = {}, w.b_index = 1;
        add(w, "with transB your code reads B[k * N + n], the transpose ignored: B is stored (N, K), so op(B)[k][n] "
               "is B[n * K + k]");
        w = {}, w.b_index = 2;
        add(w, "with transB your code reads B[n * N + k]: B is stored (N, K), its rows are K long, so op(B)[k][n] is "
               "B[n * K + k]");
    }
    if (c.transA != c.transB) {
        w = {}, w.flags_swapped = true;
        add(w, "yours matches transA applied to B and transB to A: transA says how A is stored, transB how B is");
    }
    return ways;
}

std::vector<Way> mistakes_of_the_finish() {
    std::vector<Way> ways(3);
    ways[0].beta_reads_c = true;
    ways[0].hint = "a NaN in C survived: with beta == 0 C must not be read at all (0 * NaN is NaN): add beta * C "
                   "only when beta != 0, and start the chain at 0, not at C";
    ways[1].bias_before_beta = true;
    ways[1].hint = "yours adds bias before beta * C: the chain's order is alpha * acc, then + beta * C, then "
                   "+ bias[n] (each a rounding, so the order changes the bits)";
    ways[2].alpha_in_chain = true;
    ways[2].hint = "yours multiplies by alpha inside the chain: run the chain on op(A) and op(B) as they are, then "
                   "scale the sum once, r = alpha * acc";
    return ways;
}

bool same(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

// The hint of the first mistaken version that gives yours exactly, or "".
std::string matching_mistake(const std::vector<float>& yours, const Inputs& in, const Case& c,
                             const std::vector<Way>& ways) {
    for (const Way& w : ways) {
        std::vector<float> C = in.C0;
        gemm_way(C.data(), in, c, w);
        bool all = true;
        for (size_t i = 0; i < C.size() && all; i++) all = same(yours[i], C[i]);
        if (all) return w.hint;
    }
    return "";
}

std::vector<float> expected_of(const Inputs& in, const Case& c) {
    std::vector<float> C = in.C0;
    ops::gemm_naive(C.data(), in.A.data(), in.B.data(), c.bias ? in.bias.data() : nullptr, c.M, c.N, c.K, c.transA,
                    c.transB, c.alpha, c.beta);
    return C;
}

// Tasks 1-3: your gemm_naive on each case; the first that differs fails with the mistake it matches.
void check_naive(const std::vector<Case>& cases, const std::string& otherwise) {
    unsigned seed = 1;
    for (const Case& c : cases) {
        Inputs in = make_inputs(c, seed++);
        std::vector<float> yours = in.C0;
        student::gemm_naive(yours.data(), in.A.data(), in.B.data(), c.bias ? in.bias.data() : nullptr, c.M, c.N, c.K,
                            c.transA, c.transB, c.alpha, c.beta);
        std::vector<float> expected = expected_of(in, c);
        std::string differs = first_difference(yours.data(), expected.data(), yours.size(), (size_t)c.N, "C");
        if (differs.empty()) continue;
        // The finish first: with C holding NaN, reading it explains everything else.
        std::vector<Way> ways = mistakes_of_the_finish(), chain = mistakes_of_the_chain(),
                         more = mistakes_of_the_transposes(c);
        ways.insert(ways.end(), chain.begin(), chain.end());
        ways.insert(ways.end(), more.begin(), more.end());
        std::string hint = matching_mistake(yours, in, c, ways);
        fail(describe(c) + ": " + differs, hint.empty() ? otherwise : hint);
    }
}

void task_chain() {
    check_naive({{7, 13, 29}, {1, 1, 1}, {33, 17, 5}, {3, 5, 130}, {16, 16, 16}},
                "each output is ONE chain: acc = 0, then acc = std::fma(op(A)[m][k], op(B)[k][n], acc) for k = 0, "
                "1, ..., K-1 in this order, then C[m][n] = alpha * acc");
}

void task_transposes() {
    std::vector<Case> cases;
    for (auto [M, N, K] : {std::array<int, 3>{7, 13, 29}, {33, 17, 5}, {1, 9, 4}})
        for (int t = 1; t < 4; t++) {
            Case c{M, N, K};
            c.transA = t & 1, c.transB = t & 2;
            cases.push_back(c);
        }
    check_naive(cases, "op(A)[m][k] is A[k * M + m] with transA (A stored (K, M)), else A[m * K + k]; op(B)[k][n] "
                       "is B[n * K + k] with transB (B stored (N, K)), else B[k * N + n]");
}

void task_finish() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<Case> cases;
    auto add = [&](int M, int N, int K, float alpha, float beta, bool bias, float c_old, bool ta = false) {
        Case c{M, N, K, ta, false, alpha, beta, bias, c_old};
        cases.push_back(c);
    };
    add(7, 13, 29, 0.7f, 0.0f, false, nan);
    add(7, 13, 29, 1.0f, 0.0f, true, nan);
    add(33, 17, 5, -1.3f, 0.5f, false, 0.0f);
    add(33, 17, 5, 0.7f, 0.5f, true, 0.0f, true);
    add(1, 1, 1, 2.0f, 1.0f, true, 0.0f);
    check_naive(cases, "after the chain: r = alpha * acc; if (beta != 0) r += beta * C[m][n]; if (bias) r += "
                       "bias[n]; C[m][n] = r, in this order (each line rounds)");
}

// Task 4: your gemm_blocked for several tiles, against ops::gemm_naive.
void task_blocked() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    unsigned seed = 100;
    for (auto [M, N, K] : {std::array<int, 3>{7, 13, 29}, {37, 29, 71}, {1, 1, 1}, {65, 67, 130}}) {
        Case c{M, N, K};
        c.c_old = nan;   // C is output only: every element must be written, none read
        Inputs in = make_inputs(c, seed++);
        std::vector<float> expected = expected_of(in, c);
        for (int tile : {8, 3, 64, 1}) {   // 1 last: there a split k is just acc += a * b
            std::vector<float> yours = in.C0;
            student::gemm_blocked(yours.data(), in.A.data(), in.B.data(), M, N, K, tile);
            std::string differs = first_difference(yours.data(), expected.data(), yours.size(), (size_t)N, "C");
            if (differs.empty()) continue;
            const std::string at = describe(c) + ", tile " + std::to_string(tile) + ": ";
            Way split;
            split.k_block = tile;
            split.hint = std::string("yours matches one partial sum per k-block of ") + std::to_string(tile) +
                         ", added into C: " + kSplitK;
            std::vector<Way> ways = mistakes_of_the_chain();
            ways.insert(ways.begin() + 1, split);   // after acc += a * b
            std::string hint = matching_mistake(yours, in, c, ways);
            size_t unwritten = 0;
            for (float x : yours) unwritten += std::isnan(x);
            if (hint.empty() && unwritten > 0)   // all of them: the chain started at C, a mistake of the chain
                hint = std::to_string(unwritten) + " outputs still hold the NaN C held before the call: your tiles "
                       "miss some outputs (the last tile of a row or column is smaller when tile does not divide M or "
                       "N: stop at std::min(m0 + tile, M))";
            if (hint.empty())
                hint = std::string("each output must be ONE chain over k = 0, 1, ..., K-1, in order: ") + kSplitK;
            fail(at + differs, hint);
        }
    }
}

// ---- the deliverable: build/lab_01 --bench [S] [tile] ------------------------------------------
using Clock = std::chrono::steady_clock;

// Best of a few runs (at least 3, and at least 0.3 s in all), in seconds.
template <class Gemm>
double best_time(Gemm gemm) {
    double best = 1e30, total = 0.0;
    for (int r = 0; r < 3 || total < 0.3; r++) {
        auto t0 = Clock::now();
        gemm();
        double s = std::chrono::duration<double>(Clock::now() - t0).count();
        best = std::min(best, s), total += s;
    }
    return best;
}

int bench(int S, int tile) {
    Case c{S, S, S};
    Inputs in = make_inputs(c, 7);
    const float *A = in.A.data(), *B = in.B.data();
    std::vector<float> C((size_t)S * S), expected = expected_of(in, c);
    const double flops = 2.0 * S * S * S;
    std::printf("C = A B, %d x %d x %d on one thread: 2 * S^3 = %.0f floating-point operations (one fma = 2)\n\n",
                S, S, S, flops);
    std::printf("| version | ms | GFLOP/s | same bits as ops::gemm_naive |\n| --- | --- | --- | --- |\n");
    auto row = [&](const std::string& name, const std::function<void()>& gemm) {
        std::fill(C.begin(), C.end(), 0.0f);
        try {
            double s = best_time(gemm);
            bool bits = std::memcmp(C.data(), expected.data(), C.size() * sizeof(float)) == 0;
            std::printf("| %s | %.1f | %.2f | %s |\n", name.c_str(), s * 1e3, flops / s / 1e9, bits ? "yes" : "NO");
        } catch (const std::exception& e) {
            std::printf("| %s | %s | | |\n", name.c_str(), printable(e.what()).c_str());
        }
    };
    row("your gemm_naive", [&] { student::gemm_naive(C.data(), A, B, nullptr, S, S, S, false, false, 1.0f, 0.0f); });
    row("your gemm_blocked, tile " + std::to_string(tile),
        [&] { student::gemm_blocked(C.data(), A, B, S, S, S, tile); });
    row("ops::gemm_naive (the spec)",
        [&] { ops::gemm_naive(C.data(), A, B, nullptr, S, S, S, false, false, 1.0f, 0.0f); });
    row(std::string("ops::gemm (") + ops::gemm_kernel_name(ops::gemm_kernel()) + " micro-kernel)",
        [&] { ops::gemm(C.data(), A, B, nullptr, S, S, S, false, false, 1.0f, 0.0f); });
    std::printf("\nGFLOP/s = 2 * S^3 / time / 1e9. The same flops and the same bits in every row: only the order in "
                "which outputs advance differs.\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::string(argv[1]) == "--bench") {
        const int S = argc >= 3 ? std::atoi(argv[2]) : 512, tile = argc >= 4 ? std::atoi(argv[3]) : 64;
        return bench(std::max(1, S), std::max(1, tile));
    }
    Lab lab{"01", "the GEMM chain", "labs/01_gemm/gemm.cpp", 1, {}};
    lab.tasks.push_back({"the chain: gemm_naive has ops::gemm_naive's bits (7x13x29, 1x1x1, 33x17x5, 3x5x130, "
                         "16x16x16; no transposes, alpha 1, beta 0)",
                         "ops::gemm_naive, the spec (kernels/cpu/gemm.cpp)", task_chain, "a loop that never ends?",
                         10});
    lab.tasks.push_back({"transposes: transA, transB and both, on awkward shapes", "ops::gemm_naive", task_transposes,
                         "a loop that never ends?", 10});
    lab.tasks.push_back({"alpha, beta and bias: beta 0 never reads C (a NaN there vanishes), beta 0.5 does, bias last",
                         "ops::gemm_naive", task_finish, "a loop that never ends?", 10});
    lab.tasks.push_back({"gemm_blocked(tile) for tiles 1, 3, 8, 64 has ops::gemm_naive's bits (37x29x71, 65x67x130, "
                         "...)",
                         "ops::gemm_naive (tile-free: one chain per output, k in order)", task_blocked,
                         "a tile loop that never advances (m0 += tile, n0 += tile, k0 += tile)?", 10});
    return run(lab, argc, argv);
}
