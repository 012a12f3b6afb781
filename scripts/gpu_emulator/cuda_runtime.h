// scripts/gpu_emulator/cuda_runtime.h — the CUDA runtime API and device built-ins that pipetrain
// uses, for g++ and the emulated GPU in emu_runtime.cpp (see README.md). It replaces the real
// header when scripts/emulate_gpu.sh compiles src/ and the kernels (rewritten by transform.py).
// Only what pipetrain calls is here: a new CUDA call fails to compile instead of being emulated
// wrongly.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

// ---- host API ---------------------------------------------------------------------------------
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchOutOfResources = 701,
};
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaMemoryType { cudaMemoryTypeUnregistered, cudaMemoryTypeHost, cudaMemoryTypeDevice, cudaMemoryTypeManaged };
struct cudaPointerAttributes {
    cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
};
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
typedef struct EmuStream* cudaStream_t;
typedef struct EmuPool* cudaMemPool_t;
typedef struct EmuEvent* cudaEvent_t;
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02

const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void* p, cudaStream_t s);
template <class T> cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc((void**)p, bytes); }
template <class T> cudaError_t cudaMallocAsync(T** p, size_t bytes, cudaStream_t s) { return cudaMallocAsync((void**)p, bytes, s); }
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int d);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p);

// ---- device code ------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static  // one copy shared by the block's fibers; transform.py adds EMU_SHARED
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline dim3 threadIdx, blockIdx, blockDim, gridDim;  // set by the scheduler before each switch
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
using std::max;
using std::min;

namespace emu {
// What a warp collective deposits: up to two 32-bit words of a shuffle or vote, or the six A/B
// fragment registers of mma.sync; `line` is the call site, which must agree across the warp.
struct Slot {
    uint32_t w[6];
    int line;
};
int syncthreads(int line, int pred);  // the OR of all threads' predicates
const Slot* warp_sync(Slot mine, unsigned mask, const char* what);  // all 32 lanes' slots
int lane();
void* dyn_smem();
void shared_array(void* p, size_t bytes);
void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c, int line);
void mma_m16n8k8_tf32(float* d, const uint32_t* a, const uint32_t* b, const float* c, int line);
// sm_80 asynchronous copies and matrix loads (transform.py rewrites their inline asm into these).
// A shared address is an offset in the block's shared window, as on the GPU.
size_t shared_offset(const void* p);
void cp_async(uint32_t dst, const void* src, int bytes, int line);
void cp_async_commit();
void cp_async_wait(int pending);
void ldmatrix_x4(uint32_t* r, uint32_t addr, int line);
[[noreturn]] void misaligned(const void* p, size_t align);

struct Launch {
    const char* name;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    unsigned bound;  // __launch_bounds__, 0 if none
};
struct PtrArg {
    const void* p;  // null for non-pointer arguments (keeps the argument numbers)
    bool readonly;  // pointer to const: the race check lets two readers overlap
};
void launch_impl(const Launch& c, std::function<void()> body, const std::vector<PtrArg>& ptrs);

template <class P, class A> PtrArg ptr_arg(const A& a) {
    if constexpr (std::is_pointer_v<P>) {
        const P converted = a;  // the kernel's parameter type decides read-only
        return {(const void*)converted, std::is_const_v<std::remove_pointer_t<P>>};
    } else {
        return {nullptr, true};
    }
}
// kernel<<<grid, block, smem, stream>>>(args...), as rewritten by transform.py. The arguments are
// copied: the kernel runs when its stream is synchronised.
template <class... P, class... A>
void launch(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t s, unsigned bound,
            void (*kernel)(P...), A... args) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    launch_impl({name, grid, block, smem, s, bound}, [=] { kernel(args...); }, {ptr_arg<P>(args)...});
}
// reinterpret_cast<T*>(p) in CUDA files: a GPU faults on a float4 or 32-bit load that is not aligned.
template <class T> T aligned_cast(const void* p) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(std::remove_pointer_t<T>)) misaligned(p, alignof(std::remove_pointer_t<T>));
    return (T)(p);
}
template <class T> T shfl(unsigned mask, T v, int src, const char* what, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a type wider than 8 bytes");
    Slot mine{{}, line};
    std::memcpy(mine.w, &v, sizeof(T));
    T r;
    std::memcpy(&r, warp_sync(mine, mask, what)[src].w, sizeof(T));
    return r;
}
}  // namespace emu

#define EMU_SHARED(name) emu::shared_array((void*)(name), sizeof(name))

// Every built-in takes its caller's line: threads of a block (lanes of a warp) that meet at
// different barriers (collectives) are reported instead of silently pairing up.
inline void __syncthreads(int line = __builtin_LINE()) { emu::syncthreads(line, 0); }
inline int __syncthreads_or(int p, int line = __builtin_LINE()) { return emu::syncthreads(line, p); }
// width is always 32 in pipetrain; a source lane is taken modulo 32.
template <class T> T __shfl_sync(unsigned m, T v, int src, int = 32, int line = __builtin_LINE()) {
    return emu::shfl(m, v, src & 31, "__shfl_sync", line);
}
template <class T> T __shfl_xor_sync(unsigned m, T v, int x, int = 32, int line = __builtin_LINE()) {
    return emu::shfl(m, v, (emu::lane() ^ x) & 31, "__shfl_xor_sync", line);
}
inline unsigned __ballot_sync(unsigned m, int pred, int line = __builtin_LINE()) {
    const emu::Slot* all = emu::warp_sync({{pred != 0}, line}, m, "__ballot_sync");
    unsigned bits = 0;
    for (int l = 0; l < 32; l++) bits |= all[l].w[0] << l;
    return bits;
}
inline int __any_sync(unsigned m, int pred, int line = __builtin_LINE()) { return __ballot_sync(m, pred, line) != 0; }
inline void __syncwarp(unsigned m = 0xffffffffu, int line = __builtin_LINE()) { emu::warp_sync({{}, line}, m, "__syncwarp"); }
inline size_t __cvta_generic_to_shared(const void* p) { return emu::shared_offset(p); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }

// Kernels are compiled with -ffp-contract=fast like nvcc's --fmad=true; the empty asm keeps the
// product from being fused into a following add, as __fmul_rn promises.
inline float __fmul_rn(float a, float b) { float r = a * b; asm("" : "+x"(r)); return r; }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
