// src/device.cpp — see device.hpp. Everything CUDA sits behind PIPETRAIN_CUDA, so a machine
// without the toolkit builds the same file with the CPU alone.
#include "src/device.hpp"

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

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

Device parse_device(const std::string& s) {
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

// Each op runs the CUDA kernel on this thread's stream when the thread is on a GPU.
#define DISPATCH(op, ...) (tl_context.device.cuda ? ops::cuda::op(__VA_ARGS__, stream()) : ops::op(__VA_ARGS__))
#define DISPATCH2(cpu_op, cuda_op, ...) \
    (tl_context.device.cuda ? ops::cuda::cuda_op(__VA_ARGS__, stream()) : ops::cpu_op(__VA_ARGS__))

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

#define DISPATCH(op, ...) ops::op(__VA_ARGS__)
#define DISPATCH2(cpu_op, cuda_op, ...) ops::cpu_op(__VA_ARGS__)

#endif

namespace dev {
void gemm(float* C, const float* A, const float* B, const float* bias, int M, int N, int K, bool transA,
          bool transB, float alpha, float beta) {
    DISPATCH(gemm, C, A, B, bias, M, N, K, transA, transB, alpha, beta);
}
void gemm_bf16(float* C, const float* A, const float* B, const float* bias, int M, int N, int K, bool transA,
               bool transB, float alpha, float beta) {
    DISPATCH2(gemm_bf16, gemm_v4_bf16_mma, C, A, B, bias, M, N, K, transA, transB, alpha, beta);
}
void bias_backward(float* dbias, const float* dout, int N, int OC) { DISPATCH(bias_backward, dbias, dout, N, OC); }
void to_bf16(uint16_t* out, const float* inp, int N) { DISPATCH(to_bf16, out, inp, N); }
void from_bf16(float* out, const uint16_t* inp, int N) { DISPATCH(from_bf16, out, inp, N); }
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, float eps) {
    DISPATCH(layernorm_forward, out, mean, rstd, inp, weight, bias, N, C, eps);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    DISPATCH(layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void gelu_forward(float* out, const float* inp, int N) { DISPATCH(gelu_forward, out, inp, N); }
void gelu_backward(float* dinp, const float* inp, const float* dout, int N) { DISPATCH(gelu_backward, dinp, inp, dout, N); }
void relu_forward(float* out, const float* inp, int N) { DISPATCH(relu_forward, out, inp, N); }
void relu_backward(float* dinp, const float* inp, const float* dout, int N) { DISPATCH(relu_backward, dinp, inp, dout, N); }
void tanh_forward(float* out, const float* inp, int N) { DISPATCH(tanh_forward, out, inp, N); }
void tanh_backward(float* dinp, const float* out, const float* dout, int N) { DISPATCH(tanh_backward, dinp, out, dout, N); }
void add_forward(float* out, const float* a, const float* b, int N) { DISPATCH(add_forward, out, a, b, N); }
void accumulate(float* out, const float* inp, int N) { DISPATCH(accumulate, out, inp, N); }
void scale(float* x, float s, int N) { DISPATCH(scale, x, s, N); }
void dropout_forward(float* out, const float* inp, float p, const ops::DropoutKey& key, int N) {
    DISPATCH(dropout_forward, out, inp, p, key, N);
}
void dropout_backward(float* dinp, const float* dout, float p, const ops::DropoutKey& key, int N) {
    DISPATCH(dropout_backward, dinp, dout, p, key, N);
}
// The CUDA flash kernels keep a head in registers and shared memory, 128 channels at most.
static void check_flash_head_size(int HS) {
    if (tl_context.device.cuda && HS > 128)
        throw std::runtime_error("--device cuda: attention head size " + std::to_string(HS) +
                                 " (hidden_size / num_attention_heads) is above 128, the most the CUDA "
                                 "attention kernels support; use --device cpu");
}
void attention_forward_flash(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int32_t* mask, bool causal, float p, const ops::DropoutKey& key, int B, int T,
                             int NH, int HS) {
    check_flash_head_size(HS);
    DISPATCH2(attention_forward_flash, attention_forward_flash_tc, out, lse, q, k, v, mask, causal, p, key, B, T, NH, HS);
}
void attention_backward_flash(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                              const float* q, const float* k, const float* v, const int32_t* mask, bool causal,
                              float p, const ops::DropoutKey& key, int B, int T, int NH, int HS) {
    check_flash_head_size(HS);
    DISPATCH(attention_backward_flash, dq, dk, dv, dout, out, lse, q, k, v, mask, causal, p, key, B, T, NH, HS);
}
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) {
    DISPATCH(crossentropy_forward, losses, logits, targets, N, V);
}
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, float scale, int N, int V) {
    DISPATCH(crossentropy_backward, dlogits, logits, targets, scale, N, V);
}
void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C) {
    DISPATCH(embedding_forward, out, ids, table, N, C);
}
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C) {
    DISPATCH(embedding_backward, dtable, dout, ids, N, C);
}
void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t) {
    DISPATCH(adamw_update, params, m, v, grads, N, lr, beta1, beta2, eps, weight_decay, t);
}
double sum_squares(const float* x, int64_t N) { return DISPATCH(sum_squares, x, N); }
}  // namespace dev

}  // namespace pt
