// src/device.cpp — see device.hpp. Everything CUDA sits behind PIPETRAIN_CUDA, so a machine
// without the toolkit builds the same file with the CPU alone.
#include "src/device.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <vector>

#ifdef PIPETRAIN_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/ops_cuda.cuh"
#endif

namespace pt {

namespace {
struct Context {
    Device device;
    void* stream = nullptr;   // cudaStream_t of this thread on device.index
};
thread_local Context tl_context;
std::atomic<bool> g_cuda_used{false};   // has any thread selected a GPU? (else every pointer is host)
}  // namespace

Device parse_device(const std::string& s, bool must_exist) {
    Device d;
    if (s == "cpu") return d;
    d.cuda = true;
    if (s != "cuda") {
        size_t used = 0;
        bool ok = s.rfind("cuda:", 0) == 0 && s.size() > 5;
        try {
            if (ok) d.index = std::stoi(s.substr(5), &used);
        } catch (const std::exception&) {
            ok = false;
        }
        if (!ok || used != s.size() - 5 || d.index < 0)
            throw std::runtime_error("--device: expected cpu, cuda or cuda:N, got \"" + s + "\"");
    }
    if (!must_exist) return d;
    int n = cuda_device_count();
    if (n == 0)
        throw std::runtime_error("--device " + s +
#ifdef PIPETRAIN_CUDA
                                 ": no CUDA GPU is visible on this machine");
#else
                                 ": this build has no CUDA (nvcc was not found when it was configured)");
#endif
    if (d.index >= n)
        throw std::runtime_error("--device " + s + ": this machine has " + std::to_string(n) + " GPU(s)");
    return d;
}

Device current_device() { return tl_context.device; }
void* current_stream() { return tl_context.stream; }

#ifdef PIPETRAIN_CUDA

namespace {
cudaStream_t stream() { return static_cast<cudaStream_t>(tl_context.stream); }
}  // namespace

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();   // no driver or no GPU: not an error, just no device
        return 0;
    }
    return n;
}

void set_device(Device d, int stream_id) {
    tl_context = {d, nullptr};
    if (!d.cuda) return;
    g_cuda_used = true;
    // Streams live until the program ends: arrays remember the stream they are freed on.
    static std::mutex mu;
    static std::map<std::pair<int, int>, cudaStream_t> streams;
    std::lock_guard<std::mutex> lock(mu);
    CUDA_CHECK(cudaSetDevice(d.index));
    cudaStream_t& s = streams[{d.index, stream_id}];
    if (!s) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        // Keep freed blocks in the stream-ordered pool: allocation in the training loop then
        // costs no driver call and never synchronises the device.
        cudaMemPool_t pool;
        CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, d.index));
        uint64_t keep = UINT64_MAX;
        CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    tl_context.stream = s;
}

void synchronize() {
    if (tl_context.device.cuda) CUDA_CHECK(cudaStreamSynchronize(stream()));
}

Device device_of(const void* p) {
    Device d;
    cudaPointerAttributes a;
    if (!p || !g_cuda_used || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return d;
    }
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) d.cuda = true, d.index = a.device;
    return d;
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    bool dst_gpu = device_of(dst).cuda, src_gpu = device_of(src).cuda;
    if (!dst_gpu && !src_gpu) {
        std::memcpy(dst, src, bytes);
    } else if (!tl_context.device.cuda) {   // a CPU thread: a blocking copy
        CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    } else {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
        if (!dst_gpu || !src_gpu) synchronize();
    }
}

namespace detail {
void* alloc(size_t bytes, Device d, void** s) {
    if (!(tl_context.device == d)) throw std::logic_error("Array: allocating on " + d.name() + " from a thread on " +
                                                          tl_context.device.name());
    void* p = nullptr;
    CUDA_CHECK(cudaMallocAsync(&p, bytes, stream()));
    *s = tl_context.stream;
    return p;
}
void release(void* p, void* s, int device) {
    // Freed on the stream that allocated it, with that stream's GPU current: the thread freeing
    // may be on another GPU (a ThreadComm message dropped by its receiver). Destructors must not
    // throw; a failure here means the context is already gone (exit).
    int current = device;
    if (cudaGetDevice(&current) != cudaSuccess || current != device) (void)cudaSetDevice(device);
    if (cudaFreeAsync(p, static_cast<cudaStream_t>(s)) != cudaSuccess) (void)cudaGetLastError();
    if (current != device) (void)cudaSetDevice(current);
}
void zero(void* p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream()));
}
}  // namespace detail

// The CUDA version each dev:: op runs: ops::cuda's of the same name, except the one below whose
// best version has a name of its own (gpu::name finds it before the using-directive's).
namespace gpu {
using namespace ops::cuda;
constexpr auto& attention_forward_flash = attention_forward_flash_tc;   // v3, tensor cores (v2 has the name)
}  // namespace gpu

// Runs op on this thread's stream when the thread is on a GPU, else the CPU version.
#define DISPATCH(op, args) (tl_context.device.cuda ? gpu::op(PT_UNPAREN args, stream()) : ops::op args)

#else  // no CUDA in this build

int cuda_device_count() { return 0; }
void set_device(Device d, int) {
    if (d.cuda) throw std::runtime_error("--device " + d.name() + ": this build has no CUDA");
    tl_context = {d, nullptr};
}
void synchronize() {}
Device device_of(const void*) { return Device{}; }
void copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
}
namespace detail {
void* alloc(size_t, Device, void**) { throw std::logic_error("Array: no CUDA in this build"); }
void release(void*, void*, int) {}
void zero(void*, size_t) { throw std::logic_error("Array: no CUDA in this build"); }
}  // namespace detail

#define DISPATCH(op, args) ops::op args

#endif

// ---- PIPETRAIN_PROFILE: wall time per op ---------------------------------------------------------
namespace {
enum OpId {
#define OP(ret, name, params, args) kOp_##name,
#include "kernels/ops.inc"
#undef OP
    kNumOps
};
const char* const kOpNames[] = {
#define OP(ret, name, params, args) #name,
#include "kernels/ops.inc"
#undef OP
};
std::atomic<long long> g_op_ns[kNumOps], g_op_calls[kNumOps], g_op_flops[kNumOps];
const bool g_profiling = [] {
    const char* v = std::getenv("PIPETRAIN_PROFILE");
    return v && *v && std::string(v) != "0";
}();

// The floating-point operations of one call, for the profile's GFLOP/s: 2 for each multiply-add of
// the products that make up the ops built of them (as the CPU kernels compute them: the flash
// backward recomputes S), 0 for the other ops. Flops<kOp_name>::of takes the op's arguments.
template <int op>
struct Flops {
    template <typename... X>
    static double of(const X&...) { return 0; }
};
template <>
struct Flops<kOp_gemm> {
    static double of(float*, const float*, const float*, const float*, int M, int N, int K, bool, bool, float, float) {
        return 2.0 * M * N * K;
    }
};
template <>
struct Flops<kOp_gemm_bf16> : Flops<kOp_gemm> {};
// One (T, T, HS) product of every head: 2 B NH T T HS. An attention op's last four arguments are
// (B, T, NH, HS).
template <typename... X>
double head_product(const X&... x) {
    const auto a = std::forward_as_tuple(x...);
    constexpr size_t n = sizeof...(X);
    return 2.0 * std::get<n - 4>(a) * std::get<n - 2>(a) * std::get<n - 3>(a) * std::get<n - 3>(a) * std::get<n - 1>(a);
}
template <>
struct Flops<kOp_attention_forward> {   // S = Q K^T, out = P V
    template <typename... X>
    static double of(const X&... x) { return 2 * head_product(x...); }
};
template <>
struct Flops<kOp_attention_forward_flash> : Flops<kOp_attention_forward> {};
template <>
struct Flops<kOp_attention_backward> {   // dP = dO V^T, and one product for each gradient asked
    template <typename... X>
    static double of(float* dq, float* dk, float* dv, const X&... x) {
        return (dq || dk || dv) * (1 + (dq != nullptr) + (dk != nullptr) + (dv != nullptr)) * head_product(x...);
    }
};
template <>
struct Flops<kOp_attention_backward_flash> {   // S again, then as the unfused backward
    template <typename... X>
    static double of(float* dq, float* dk, float* dv, const X&... x) {
        return (dq || dk || dv) * head_product(x...) + Flops<kOp_attention_backward>::of(dq, dk, dv, x...);
    }
};

// Adds the time from its construction to its destruction, and `flops`, to op `id` (when profiling).
struct OpClock {
    int id;
    double flops;
    std::chrono::steady_clock::time_point t0;
    OpClock(int op, double f) : id(op), flops(f) {
        if (g_profiling) t0 = std::chrono::steady_clock::now();
    }
    ~OpClock() {
        if (!g_profiling) return;
        g_op_ns[id] += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        g_op_calls[id]++;
        g_op_flops[id] += (long long)flops;   // a whole number of flops: exact in 64 bits
    }
};
}  // namespace

bool op_profiling() { return g_profiling; }
std::vector<OpTime> op_profile() {
    std::vector<OpTime> all;
    for (int i = 0; i < kNumOps; i++)
        if (g_op_calls[i]) all.push_back({kOpNames[i], g_op_ns[i] * 1e-9, g_op_calls[i].load(), double(g_op_flops[i].load())});
    std::sort(all.begin(), all.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
    return all;
}

uint64_t fingerprint(const void* data, size_t bytes) {
    std::vector<uint32_t> copy;   // a GPU's bytes are read back first
    if (device_of(data).cuda) copy.resize(bytes / 4), copy_bytes(copy.data(), data, bytes / 4 * 4);
    const uint32_t* w = copy.empty() ? static_cast<const uint32_t*>(data) : copy.data();
    // 4 lanes (words 4k, 4k+1, ... to lanes 0, 1, ...): 4 multiply chains run at once. Each step (xor
    // the word, then multiply by an odd factor) and the lanes' combination are bijections of a lane.
    constexpr uint64_t kOdd = 0x9E3779B97F4A7C15ull;
    auto step = [](uint64_t h, uint32_t word) { return ((h << 5 | h >> 59) ^ word) * kOdd; };
    uint64_t h0 = 1, h1 = 2, h2 = 3, h3 = 4;
    const size_t n = bytes / 4;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) h0 = step(h0, w[i]), h1 = step(h1, w[i + 1]), h2 = step(h2, w[i + 2]), h3 = step(h3, w[i + 3]);
    for (; i < n; i++) h0 = step(h0, w[i]);   // the last n % 4 words
    return (((h0 * kOdd ^ h1) * kOdd ^ h2) * kOdd) ^ h3;
}

// ---- dev::name for every op of kernels/ops.inc ----------------------------------------------
// One function per OP line, e.g.
//   void scale(float* x, float s, int N) {
//       OpClock clock(kOp_scale, g_profiling ? Flops<kOp_scale>::of(x, s, N) : 0);
//       return DISPATCH(scale, (x, s, N));
//   }
namespace dev {
#define OP(ret, name, params, args)                                             \
    ret name params {                                                           \
        OpClock clock(kOp_##name, g_profiling ? Flops<kOp_##name>::of args : 0); \
        return DISPATCH(name, args);                                            \
    }
#include "kernels/ops.inc"
#undef OP
}  // namespace dev

}  // namespace pt
