// kernels/bench.cu — pipetrain-bench: times every CUDA kernel version against a reference
// measured in the same run, and prints one markdown table (scripts/gpu_check.sh files it into
// docs/gpu-results.md). Each time is the median of 15 runs after 3 warm-up runs, measured with
// CUDA events. References: cuBLAS (cublasSgemm for fp32, cublasGemmEx bf16 for the tensor-core
// version) for GEMM; a device-to-device cudaMemcpyAsync (the bandwidth ceiling) for the
// memory-bound kernels; the unfused v1 for flash attention. Only this program uses cuBLAS.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#define CUBLAS_CHECK(call)                                                                  \
    do {                                                                                    \
        const cublasStatus_t st_ = (call);                                                  \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                   \
            throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                     ": cuBLAS error " + std::to_string((int)st_));         \
    } while (0)

namespace {

using ops::cuda::ceil_div;

// Deterministic pseudo-random fill in [-1, 1) without cuRAND.
__global__ void fill_kernel(float* x, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
}
__global__ void to_bf16_kernel(__nv_bfloat16* y, const float* x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

// A device buffer of n floats filled with random values.
struct Buf {
    float* p = nullptr;
    explicit Buf(size_t n, uint32_t seed = 1) {
        CUDA_CHECK(cudaMalloc(&p, sizeof(float) * std::max<size_t>(n, 1)));
        fill_kernel<<<1024, 256>>>(p, n, seed);
        CUDA_CHECK_LAST();
    }
    ~Buf() { cudaFree(p); }
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
};

double median_ms(const std::function<void()>& fn, int warmup = 3, int reps = 15) {
    for (int i = 0; i < warmup; i++) fn();
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<float> ms(reps);
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(start));
        fn();
        CUDA_CHECK(cudaEventRecord(stop));
        CUDA_CHECK(cudaEventSynchronize(stop));
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
}

struct Row {
    std::string kernel, shape;
    double ms, rate;
    const char* unit;
    double ratio;
    std::string reference;
    double goal;   // the issue's target for ratio on an H200; 0: none
};
std::vector<Row> rows;

void add_row(const std::string& kernel, const std::string& shape, double ms, double rate,
             const char* unit, double ratio, const std::string& reference, double goal = 0) {
    rows.push_back({kernel, shape, ms, rate, unit, ratio, reference, goal});
    std::fprintf(stderr, "  %-24s %-22s %9.3f ms\n", kernel.c_str(), shape.c_str(), ms);
}

void bench_gemm(cublasHandle_t handle, int M, int N, int K) {
    Buf A((size_t)M * K, 1), B((size_t)K * N, 2), C((size_t)M * N, 3);
    __nv_bfloat16 *Ah, *Bh;
    CUDA_CHECK(cudaMalloc(&Ah, sizeof(__nv_bfloat16) * M * (size_t)K));
    CUDA_CHECK(cudaMalloc(&Bh, sizeof(__nv_bfloat16) * K * (size_t)N));
    to_bf16_kernel<<<1024, 256>>>(Ah, A.p, (size_t)M * K);
    to_bf16_kernel<<<1024, 256>>>(Bh, B.p, (size_t)K * N);
    CUDA_CHECK_LAST();
    const std::string shape = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
    const double tflop = 2.0 * M * N * K * 1e-12;
    const float alpha = 1.0f, beta = 0.0f;
    // cuBLAS is column-major: row-major C = A B is column-major C^T = B^T A^T.
    const double t_sgemm = median_ms([&] {
        CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B.p, N, A.p, K, &beta, C.p, N));
    });
    const double t_bf16 = median_ms([&] {
        CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, Bh, CUDA_R_16BF, N, Ah,
                                  CUDA_R_16BF, K, &beta, C.p, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    add_row("cublasSgemm (fp32)", shape, t_sgemm, tflop / (t_sgemm * 1e-3), "TFLOP/s", 1.0, "cublasSgemm");
    add_row("cublasGemmEx (bf16)", shape, t_bf16, tflop / (t_bf16 * 1e-3), "TFLOP/s", 1.0, "cublasGemmEx bf16");
    using Fn = void (*)(float*, const float*, const float*, const float*, int, int, int, bool, bool, float,
                        float, cudaStream_t);
    const struct { const char* name; Fn fn; bool bf16; } versions[] = {
        {"gemm_v1_naive", ops::cuda::gemm_v1_naive, false},
        {"gemm_v2_smem_tiles", ops::cuda::gemm_v2_smem_tiles, false},
        {"gemm_v3_register_tiles", ops::cuda::gemm_v3_register_tiles, false},
        {"gemm_v4_bf16_mma", ops::cuda::gemm_v4_bf16_mma, true}};
    for (const auto& v : versions) {
        const double t = median_ms([&] { v.fn(C.p, A.p, B.p, nullptr, M, N, K, false, false, 1.0f, 0.0f, 0); },
                                   1, v.fn == ops::cuda::gemm_v1_naive ? 3 : 15);  // v1 is slow
        // Goals at 4096^3: fp32 >= 70% of cublasSgemm, mma.sync bf16 >= 45% of cuBLAS bf16.
        const double goal = M == 4096 && N == 4096 && K == 4096 && v.fn != ops::cuda::gemm_v1_naive &&
                                    v.fn != ops::cuda::gemm_v2_smem_tiles
                                ? (v.bf16 ? 0.45 : 0.70)
                                : 0;
        add_row(v.name, shape, t, tflop / (t * 1e-3), "TFLOP/s", (v.bf16 ? t_bf16 : t_sgemm) / t,
                v.bf16 ? "cublasGemmEx bf16" : "cublasSgemm", goal);
    }
    CUDA_CHECK(cudaFree(Ah));
    CUDA_CHECK(cudaFree(Bh));
}

// Bandwidth of a device-to-device copy of `bytes` (read + write), the ceiling for the rest.
double memcpy_gbps(size_t bytes) {
    Buf src(bytes / 4, 1), dst(bytes / 4, 2);
    const double t = median_ms([&] { CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice)); });
    return 2.0 * bytes / (t * 1e-3) * 1e-9;
}

void bench_memory_bound(double copy_gbps) {
    const std::string ref = "cudaMemcpyAsync D2D";
    auto row = [&](const char* name, const std::string& shape, double bytes, const std::function<void()>& fn,
                   double goal = 0) {
        const double t = median_ms(fn), gbps = bytes / (t * 1e-3) * 1e-9;
        add_row(name, shape, t, gbps, "GB/s", gbps / copy_gbps, ref, goal);
    };
    {
        const int N = 16384, C = 768;
        Buf inp((size_t)N * C), out((size_t)N * C), w(C), b(C), mean(N), rstd(N), dout((size_t)N * C), dinp((size_t)N * C);
        const std::string shape = std::to_string(N) + "x" + std::to_string(C);
        row("layernorm_forward", shape, 2.0 * N * C * 4,
            [&] { ops::cuda::layernorm_forward(out.p, mean.p, rstd.p, inp.p, w.p, b.p, N, C, 1e-5f); }, 0.75);
        row("layernorm_backward dinp", shape, 4.0 * N * C * 4,
            [&] { ops::cuda::layernorm_backward(dinp.p, nullptr, nullptr, dout.p, inp.p, w.p, mean.p, rstd.p, N, C); });
    }
    {
        const int N = 1 << 26;
        Buf inp(N), out(N);
        ops::DropoutKey key;
        key.seed = 7;
        row("gelu_forward", "2^26", 2.0 * N * 4, [&] { ops::cuda::gelu_forward(out.p, inp.p, N); }, 0.85);
        row("dropout_forward p=0.1", "2^26", 2.0 * N * 4, [&] { ops::cuda::dropout_forward(out.p, inp.p, 0.1f, key, N); },
            0.85);
        // The bytes of gemm v4's pre-pass: at 4096^3 it converts 2^25 elements (A and B), so half
        // this time is what v4 spends before its main loop.
        row("to_bf16", "2^26", 6.0 * N, [&] { ops::cuda::to_bf16((uint16_t*)out.p, inp.p, N); });
    }
    {
        const int N = 4096, V = 30522;
        Buf logits((size_t)N * V), dlogits((size_t)N * V), losses(N);
        int32_t* targets;
        CUDA_CHECK(cudaMalloc(&targets, sizeof(int32_t) * N));
        std::vector<int32_t> t(N);
        for (int n = 0; n < N; n++) t[n] = (n * 7919) % V;
        CUDA_CHECK(cudaMemcpy(targets, t.data(), sizeof(int32_t) * N, cudaMemcpyHostToDevice));
        const std::string shape = std::to_string(N) + "x" + std::to_string(V);
        row("crossentropy_forward", shape, 1.0 * N * V * 4,
            [&] { ops::cuda::crossentropy_forward(losses.p, logits.p, targets, N, V); });
        row("crossentropy_backward", shape, 3.0 * N * V * 4,
            [&] { ops::cuda::crossentropy_backward(dlogits.p, logits.p, targets, 1e-4f, N, V); });
        CUDA_CHECK(cudaFree(targets));
    }
    {
        const int64_t N = 1 << 25;
        Buf p(N), m(N), v(N), g(N);
        CUDA_CHECK(cudaMemset(v.p, 0, sizeof(float) * N));  // a variance must not be negative
        row("adamw_update", "2^25", 7.0 * N * 4,
            [&] { ops::cuda::adamw_update(p.p, m.p, v.p, g.p, N, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 3); });
    }
}

void bench_attention(int B, int T, int NH, int HS, bool causal) {
    const size_t n = (size_t)B * T * NH * HS;
    Buf q(n, 1), k(n, 2), v(n, 3), out(n), att((size_t)B * NH * T * T), lse((size_t)B * NH * T);
    Buf dout(n, 4), dq(n, 5), dk(n, 6), dv(n, 7);
    ops::DropoutKey key;
    const std::string shape = "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" + std::to_string(NH) +
                              " HS" + std::to_string(HS) + (causal ? " causal" : "");
    const double tflop = 4.0 * B * NH * (double)T * T * HS * 1e-12 * (causal ? 0.5 : 1.0);
    const double t1 = median_ms([&] {
        ops::cuda::attention_forward(out.p, att.p, q.p, k.p, v.p, nullptr, causal, 0.0f, key, B, T, NH, HS);
    });
    const double t2 = median_ms([&] {
        ops::cuda::attention_forward_flash(out.p, lse.p, q.p, k.p, v.p, nullptr, causal, 0.0f, key, B, T, NH, HS);
    });
    const double t3 = median_ms([&] {
        ops::cuda::attention_forward_flash_tc(out.p, lse.p, q.p, k.p, v.p, nullptr, causal, 0.0f, key, B, T, NH, HS);
    });
    // The backwards run after their forwards above, so att and lse hold what they need.
    const double tb1 = median_ms([&] {
        ops::cuda::attention_backward(dq.p, dk.p, dv.p, dout.p, att.p, q.p, k.p, v.p, 0.0f, key, B, T, NH, HS);
    });
    const double tb2 = median_ms([&] {
        ops::cuda::attention_backward_flash(dq.p, dk.p, dv.p, dout.p, out.p, lse.p, q.p, k.p, v.p, nullptr, causal,
                                            0.0f, key, B, T, NH, HS);
    });
    add_row("attention_forward v1", shape, t1, tflop / (t1 * 1e-3), "TFLOP/s", 1.0, "attention v1");
    add_row("attention_forward_flash v2", shape, t2, tflop / (t2 * 1e-3), "TFLOP/s", t1 / t2, "attention v1");
    add_row("attention_forward_flash_tc v3", shape, t3, tflop / (t3 * 1e-3), "TFLOP/s", t1 / t3, "attention v1");
    // The backward's five (T, T) products are 2.5x the forward's two (the flash one recomputes more).
    add_row("attention_backward v1", shape, tb1, 2.5 * tflop / (tb1 * 1e-3), "TFLOP/s", 1.0, "attention v1");
    add_row("attention_backward_flash v2", shape, tb2, 2.5 * tflop / (tb2 * 1e-3), "TFLOP/s", tb1 / tb2,
            "attention v1");
}

}  // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device: nothing to benchmark\n");
        return 0;
    }
    try {
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        std::fprintf(stderr, "pipetrain-bench on %s\n", prop.name);
        // Keep freed memory in the pool, as src/device.cpp does for training: gemm v4's
        // per-call scratch copy is then reused, not mapped again on every call.
        cudaMemPool_t pool;
        uint64_t keep = UINT64_MAX;
        CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
        CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
        cublasHandle_t handle;
        CUBLAS_CHECK(cublasCreate(&handle));
        for (const auto& s : std::vector<std::array<int, 3>>{{4096, 4096, 4096}, {4096, 3072, 768}, {4097, 1023, 4095}})
            bench_gemm(handle, s[0], s[1], s[2]);
        CUBLAS_CHECK(cublasDestroy(handle));
        bench_memory_bound(memcpy_gbps((size_t)1 << 30));
        bench_attention(8, 512, 12, 64, false);
        bench_attention(4, 1024, 8, 128, true);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pipetrain-bench: %s\n", e.what());
        return 1;
    }
    // ratio: the reference's time over this kernel's (GEMM: fraction of cuBLAS speed; memory-bound:
    // fraction of copy bandwidth; flash: speed-up over v1, forward and backward).
    std::printf("| kernel | shape | ms | rate | ratio | reference | goal |\n|---|---|---:|---:|---:|---|---|\n");
    for (const Row& r : rows) {
        char goal[32] = "";
        if (r.goal > 0) std::snprintf(goal, sizeof goal, ">= %.2f %s", r.goal, r.ratio >= r.goal ? "met" : "MISSED");
        std::printf("| %s | %s | %.3f | %.1f %s | %.2f | %s | %s |\n", r.kernel.c_str(), r.shape.c_str(), r.ms,
                    r.rate, r.unit, r.ratio, r.reference.c_str(), goal);
    }
    return 0;
}
