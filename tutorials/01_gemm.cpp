// tutorials/01_gemm.cpp — why a blocked GEMM is many times faster than the triple loop.
//
// Step 1 checks that the blocked kernel computes the same thing as the textbook loop.
// Step 2 times them: same arithmetic, very different speed, because the blocked kernel
// (kernels/cpu/gemm_blocked.cpp) packs tiles of A and B into contiguous buffers that stay in cache
// and keeps a tile of C in vector registers while it walks over K. Its micro-kernel comes in
// three versions, each adding one thing: plain C++ (the compiler vectorises it), AVX2 + FMA
// intrinsics (a 6 x 16 tile in 12 ymm registers), AVX-512 (14 x 32 in 28 zmm registers).
// Step 4 (with a GPU) puts the four CUDA versions of kernels/cuda/gemm.cu next to them.
#include "kernels/ops.hpp"
#include "src/device.hpp"
#ifdef PIPETRAIN_CUDA
#include "kernels/cuda/ops_cuda.cuh"
#endif

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

namespace {

std::vector<float> random_matrix(size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen);
    return v;
}

// GFLOP/s of one (M, N, K) product: repeats until 0.2 s have passed, 2*M*N*K flops each.
template <class Gemm>
double gflops(Gemm gemm, int S) {
    const auto A = random_matrix((size_t)S * S, 1), B = random_matrix((size_t)S * S, 2);
    std::vector<float> C((size_t)S * S);
    int reps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double seconds = 0.0;
    do {
        gemm(C.data(), A.data(), B.data(), nullptr, S, S, S, false, false, 1.0f, 0.0f);
        reps++;
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (seconds < 0.2);
    return 2.0 * S * S * S * reps / seconds / 1e9;
}

// Step 4: the CUDA versions against the CPU kernel (the specification) and against each other.
void gpu_versions() {
    std::printf("Step 4: the CUDA versions (kernels/cuda/gemm.cu)\n");
#ifdef PIPETRAIN_CUDA
    if (pt::cuda_device_count() == 0) {
        std::printf("  skipped: no CUDA device on this machine.\n\n");
        return;
    }
    pt::set_device(pt::parse_device("cuda"));
    using Gemm = void (*)(float*, const float*, const float*, const float*, int, int, int, bool, bool, float, float,
                          cudaStream_t);
    const struct { const char* name; Gemm fn; } versions[] = {
        {"v1 naive (one thread per output)", ops::cuda::gemm_v1_naive},
        {"v2 shared-memory tiles", ops::cuda::gemm_v2_smem_tiles},
        {"v3 register tiles", ops::cuda::gemm_v3_register_tiles},
        {"v4 bf16 tensor cores (mma.sync)", ops::cuda::gemm_v4_bf16_mma}};
    const int M = 130, N = 63, K = 257;   // awkward: no multiple of any tile
    const auto A = random_matrix((size_t)M * K, 5), B = random_matrix((size_t)K * N, 6);
    std::vector<float> ref((size_t)M * N);
    ops::gemm(ref.data(), A.data(), B.data(), nullptr, M, N, K, false, false, 1.0f, 0.0f);
    pt::Buf dA, dB, dC((size_t)M * N);
    dA.assign(A), dB.assign(B);
    const int S = 2048;
    pt::Buf sA, sB, sC((size_t)S * S);
    sA.assign(random_matrix((size_t)S * S, 7)), sB.assign(random_matrix((size_t)S * S, 8));
    std::printf("  %-34s %16s %12s\n", "version", "max |gpu - cpu|", "TFLOP/s");
    for (const auto& v : versions) {
        v.fn(dC.data(), dA.data(), dB.data(), nullptr, M, N, K, false, false, 1.0f, 0.0f, 0);
        std::vector<float> C = dC.host();
        double err = 0.0;
        for (size_t i = 0; i < C.size(); i++) err = std::fmax(err, std::fabs(C[i] - ref[i]));
        v.fn(sC.data(), sA.data(), sB.data(), nullptr, S, S, S, false, false, 1.0f, 0.0f, 0);   // warm-up
        pt::synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        const int reps = 10;
        for (int r = 0; r < reps; r++) v.fn(sC.data(), sA.data(), sB.data(), nullptr, S, S, S, false, false, 1.0f, 0.0f, 0);
        pt::synchronize();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
        std::printf("  %-34s %16.2e %12.2f\n", v.name, err, 2.0 * S * S * S / s / 1e12);
    }
    std::printf("  Look at: v1-v3 differ from the CPU only by the order of the additions (~1e-6); v4\n"
                "  rounds A and B to bf16 first (~1e-2), and pays for it with the tensor cores' speed.\n"
                "  scripts/bench.sh compares each version with cuBLAS.\n\n");
#else
    std::printf("  skipped: this build has no CUDA (nvcc was not found when it was configured).\n\n");
#endif
}

}  // namespace

int main() {
    std::printf("Step 1: the blocked gemm against the naive triple loop (awkward sizes)\n");
    const int shapes[][3] = {{1, 17, 63}, {63, 130, 17}, {130, 63, 130}};
    for (auto& s : shapes) {
        const int M = s[0], N = s[1], K = s[2];
        for (int t = 0; t < 4; t++) {
            const bool ta = t & 1, tb = t & 2;
            const auto A = random_matrix((size_t)M * K, 3), B = random_matrix((size_t)K * N, 4);
            std::vector<float> C1((size_t)M * N), C2((size_t)M * N);  // (M, N)
            ops::gemm(C1.data(), A.data(), B.data(), nullptr, M, N, K, ta, tb, 1.0f, 0.0f);
            ops::gemm_naive(C2.data(), A.data(), B.data(), nullptr, M, N, K, ta, tb, 1.0f, 0.0f);
            double err = 0.0;
            for (size_t i = 0; i < C1.size(); i++) err = std::fmax(err, std::fabs(C1[i] - C2[i]));
            std::printf("  M=%3d N=%3d K=%3d transA=%d transB=%d  max |blocked - naive| = %g\n",
                        M, N, K, ta, tb, err);
        }
    }
    std::printf("  Look at: the error is exactly 0. Both kernels run each output's chain of K fmas\n"
                "  in the same order; blocking only changes the order in which outputs are visited.\n\n");

    std::printf("Step 2: speed, one thread, square S x S x S products, GFLOP/s\n");
    const ops::GemmKernel best = ops::gemm_kernel();
    std::vector<ops::GemmKernel> kernels;
    std::printf("  %6s %8s", "S", "naive");
    for (ops::GemmKernel k : {ops::GemmKernel::plain, ops::GemmKernel::avx2, ops::GemmKernel::avx512}) {
        if (!ops::gemm_kernel_runs(k)) continue;
        kernels.push_back(k);
        std::printf(" %9s", ops::gemm_kernel_name(k));
    }
    std::printf("   (the blocked kernel with each micro-kernel this CPU runs)\n");
    for (int S : {64, 128, 256, 512}) {
        std::printf("  %6d %8.2f", S, gflops(ops::gemm_naive, S));
        for (ops::GemmKernel k : kernels) {
            ops::set_gemm_kernel(k);
            std::printf(" %9.1f", gflops(ops::gemm, S));
        }
        std::printf("\n");
    }
    ops::set_gemm_kernel(best);
    std::printf("  Look at: the naive loop reads B down a column (stride N floats), so every\n"
                "  multiply waits on memory; the blocked kernel reads packed, contiguous tiles.\n"
                "  Every version does one fma per step of k, in the same order, so the bits agree\n"
                "  (step 1). ops::gemm uses %s, the best this CPU runs (PIPETRAIN_GEMM chooses).\n\n",
                ops::gemm_kernel_name(best));

    std::printf("Step 3: the blocked kernel on 2 threads (tiles of C are split between them)\n");
    double one = gflops(ops::gemm, 512);
    ops::set_num_threads(2);
    double two = gflops(ops::gemm, 512);
    ops::set_num_threads(1);
    std::printf("  S=512: 1 thread %.2f GFLOP/s, 2 threads %.2f GFLOP/s: %.2fx\n", one, two, two / one);
    if (std::thread::hardware_concurrency() < 2)
        std::printf("  (note: this machine has %u core for 2 threads)\n", std::thread::hardware_concurrency());
    if (two / one >= 1.7)
        std::printf("  Look at: close to 2x: both cores were free.\n");
    else
        std::printf("  Look at: %.2fx, short of the ~2x two free cores give: most likely another program\n"
                    "  was using a core (run it again on an idle machine).\n", two / one);
    std::printf("  The bits of C do not change, because every output is still computed by exactly one\n"
                "  thread in the same order.\n\n");

    gpu_versions();

    std::printf("Question: the AVX-512 micro-kernel keeps a 14 x 32 tile of C in registers. Why does\n"
                "a larger tile (say 16 x 32) get *slower*? Count the vector registers it needs.\n");
    std::printf("answer: docs/answers.md, section \"01 gemm\"\n");
    return 0;
}
