// src/cli/bench_gemm.cpp — `pipetrain bench-gemm`: GFLOP/s of ops::gemm on given shapes, for each
// micro-kernel this CPU runs. scripts/bench_cpu.sh puts the numbers next to OpenBLAS's.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "kernels/ops.hpp"
#include "src/cli/args.hpp"
#include "src/formats/io.hpp"
#include "src/cli/commands.hpp"

namespace pt {

namespace {
struct Shape {
    int M, N, K;
    bool ta, tb;
};

// "MxNxK:nt" (n = stored as op() reads it, t = transposed, for A then B), comma-separated. Each
// size a plain decimal in [1, 2^31), each matrix at most 2^28 floats (1 GiB): sscanf's %d took
// 4294967297 as 1, and a size past memory ended in an allocation failure after the table's head.
std::vector<Shape> parse_shapes(const std::string& list) {
    std::vector<Shape> shapes;
    for (const std::string& s : split(list, ',')) {
        auto bad = [&](const std::string& why) {
            return std::runtime_error("--shapes: expected MxNxK:nn|nt|tn|tt items, comma-separated, got \"" + s + "\"" + why);
        };
        const std::vector<std::string> parts = split(s, ':');
        const std::vector<std::string> dims = split(parts[0], 'x');
        if (parts.size() != 2 || dims.size() != 3 || parts[1].size() != 2) throw bad("");
        int size[3];
        for (int i = 0; i < 3; i++) {
            const char* end = dims[i].data() + dims[i].size();
            auto [ptr, ec] = std::from_chars(dims[i].data(), end, size[i]);
            if (dims[i].empty() || ptr != end || ec != std::errc() || size[i] < 1) throw bad(" (sizes from 1 to 2147483647)");
        }
        Shape sh{};
        sh.M = size[0], sh.N = size[1], sh.K = size[2];
        const char a = parts[1][0], b = parts[1][1];
        if ((a != 'n' && a != 't') || (b != 'n' && b != 't')) throw bad("");
        for (double floats : {double(sh.M) * sh.K, double(sh.K) * sh.N, double(sh.M) * sh.N})
            if (floats > double(1 << 28)) throw bad(" (each matrix at most 2^28 floats, 1 GiB)");
        sh.ta = a == 't', sh.tb = b == 't';
        shapes.push_back(sh);
    }
    return shapes;
}

// Repeats the product until `seconds` have passed; GFLOP/s = 2 M N K per product.
double measure(const Shape& s, double seconds) {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> A((size_t)s.M * s.K), B((size_t)s.K * s.N), C((size_t)s.M * s.N, 0.0f);
    for (float& x : A) x = dist(gen);
    for (float& x : B) x = dist(gen);
    auto run = [&] { ops::gemm(C.data(), A.data(), B.data(), nullptr, s.M, s.N, s.K, s.ta, s.tb, 1.0f, 0.0f); };
    run();   // warm-up: packing buffers, worker threads
    int reps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0.0;
    do {
        run();
        reps++;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < seconds);
    return 2.0 * s.M * s.N * s.K * reps / elapsed / 1e9;
}

// One thread's FMA throughput at a kernel's vector width (--peak): the most any GEMM on this core
// can reach, the roofline's flat top. As many independent chains of fmas as the kernel's tile keeps
// (28 of 16 floats, 12 of 8): no chain waits on its last fma, and nothing is loaded. The plain
// kernel has no peak of its own (its width is whatever the compiler chose).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// Runs `chains` of fmas (each a vector of `lanes` floats) for `seconds`, in rounds of 100,000.
template <class Round>
double chains_gflops(double seconds, int chains, int lanes, Round round) {
    long rounds = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0.0;
    do {
        round();
        rounds++;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < seconds);
    return 2.0 * lanes * chains * 1e5 * double(rounds) / elapsed / 1e9;
}
volatile float g_sink;   // the chains' results are used: the loops cannot be dropped

// noinline: inlined into the command, GCC kept the chains in memory (the probe said 75, not 213).
__attribute__((target("avx512f"), noinline)) void avx512_round() {
    __m512 t[28];
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
    for (__m512& x : t) x = b;
    for (int r = 0; r < 100000; r++)
#pragma GCC unroll 28
        for (int i = 0; i < 28; i++) t[i] = _mm512_fmadd_ps(a, t[i], b);
    float f[16];
    for (__m512& x : t) _mm512_storeu_ps(f, x), g_sink = g_sink + f[0];
}
__attribute__((target("avx2,fma"), noinline)) void avx2_round() {
    __m256 t[12];
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-4f);
    for (__m256& x : t) x = b;
    for (int r = 0; r < 100000; r++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) t[i] = _mm256_fmadd_ps(a, t[i], b);
    float f[8];
    for (__m256& x : t) _mm256_storeu_ps(f, x), g_sink = g_sink + f[0];
}
#endif

// GFLOP/s, or a negative number for a kernel without a peak of its own (plain).
double fma_peak(ops::GemmKernel k, double seconds) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (k == ops::GemmKernel::avx512) return chains_gflops(seconds, 28, 16, avx512_round);
    if (k == ops::GemmKernel::avx2) return chains_gflops(seconds, 12, 8, avx2_round);
#endif
    return -1.0;
}
}  // namespace

int bench_gemm_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--shapes", "--threads", "--seconds", "--kernel"}, {"--peak"});
    const bool peak = a.has("--peak");
    std::vector<Shape> shapes = parse_shapes(a.str("--shapes", "1024x1024x1024:nn"));
    ops::set_num_threads(int(a.integer("--threads", 1, 1, 256)));
    double seconds = a.real("--seconds", 0.5, 0.01, 60);
    std::string which = a.str("--kernel", "best");
    std::vector<ops::GemmKernel> kernels;
    for (ops::GemmKernel k : {ops::GemmKernel::plain, ops::GemmKernel::avx2, ops::GemmKernel::avx512})
        if (ops::gemm_kernel_runs(k) && (which == "all" || which == ops::gemm_kernel_name(k) ||
                                         (which == "best" && k == ops::gemm_kernel())))
            kernels.push_back(k);
    if (kernels.empty())
        throw std::runtime_error("--kernel: expected best, all, plain, avx2 or avx512 (one this CPU runs), got \"" + which + "\"");
    std::printf("kernel M N K transA transB GFLOP/s\n");
    for (ops::GemmKernel k : kernels) {
        ops::set_gemm_kernel(k);
        for (const Shape& s : shapes)
            std::printf("%s %d %d %d %d %d %.1f\n", ops::gemm_kernel_name(k), s.M, s.N, s.K, s.ta, s.tb, measure(s, seconds));
    }
    for (ops::GemmKernel k : kernels) {   // after the table: scripts read its rows by their numbers
        if (!peak) break;
        const double p = fma_peak(k, seconds);
        if (p > 0) std::printf("peak %s %.1f GFLOP/s (one thread's fmas, nothing loaded)\n", ops::gemm_kernel_name(k), p);
        else std::printf("peak %s - (no vector width of its own)\n", ops::gemm_kernel_name(k));
    }
    return 0;
}

}  // namespace pt
