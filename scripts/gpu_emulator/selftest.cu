// scripts/gpu_emulator/selftest.cu — the emulator's checks fire (run by scripts/emulate_gpu.sh
// --selftest, which expects the text after each arrow). ./selftest MODE:
//   ok          a 2-D block, warp shuffles and __syncthreads_or give the right numbers -> "ok"
//   host_deref  host code reads device memory                -> "HOST CODE touched"
//   hostptr     a kernel gets a host pointer                  -> "is a HOST pointer"
//   oob         a kernel writes past the end of its buffer    -> "PAST THE END"
//   diverge     __syncthreads that half the threads skip      -> "deadlock"
//   race        the legacy stream reads what a non-blocking stream may still be writing -> "RACE"
//   early       a thread reads the target of its cp.async before cp.async.wait_group -> "NaN"
//   unwaited    a thread returns with a cp.async it never waited for -> "never waited for"
//   event       a second stream reads what the first wrote, after cudaStreamWaitEvent -> "event: ok"
//   eventrace   the same without the wait                     -> "RACE"
//   nccl        (EMU_GPUS=2) receives wait for their sends, in posting order; an all-reduce sums;
//               then a 4-byte send meets an 8-byte receive   -> "meets a half"
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

__global__ void fill(float* x, float v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

__global__ void diverge(float* x) {
    if (threadIdx.x < 16) __syncthreads();
    x[threadIdx.x] = 1.0f;
}

// Each warp sums its thread numbers by shuffles; thread 37's predicate reaches thread 0.
__global__ void reduce(float* sums, float* any) {
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    float v = (float)t;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (t % 32 == 0) sums[t / 32] = v;
    const int a = __syncthreads_or(t == 37);
    if (t == 0) *any = (float)a;
}

// Each of 32 threads copies 16 bytes of `in` into shared memory with cp.async and returns one
// float of them, read after cp.async.wait_group ("ok"), before it ("early"), or never waited
// for ("unwaited").
__global__ void async_copy(float* out, const float* in, int mode) {
    __shared__ __align__(16) float s[32 * 4];
    const int t = threadIdx.x;
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(&s[t * 4]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(in + t * 4));
    asm volatile("cp.async.commit_group;\n" ::);
    const float early = s[t * 4 + 1];
    if (mode == 2) return;
    asm volatile("cp.async.wait_group %0;\n" ::"n"(0));
    out[t] = mode == 1 ? early : s[t * 4 + 1];
}

// ldmatrix.x4 from 4 matrices of 8 rows x 8 16-bit values, element (j, r, c) = 64j + 8r + c,
// the rows stored in reverse order so that the lanes' addresses matter.
__global__ void ldmatrix_x4(uint32_t* out) {
    __shared__ __align__(16) uint16_t m[32][8];
    const int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) m[i / 64 * 8 + 7 - i / 8 % 8][i % 8] = (uint16_t)i;
    __syncwarp();
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(&m[l / 8 * 8 + 7 - l % 8][0]);
    uint32_t r[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    for (int j = 0; j < 4; j++) out[l * 4 + j] = r[j];
}

// Rank r of two, on cuda:r: b = [1, 1, 1, 1] on rank 0, [2, 3, 2, 2] on rank 1. Rank 0 receives
// b[2] before rank 1 has sent anything (its stream must be "not ready"), then b[3]; rank 1 sends
// b[0], b[1]. The all-reduce then gives [3, 4, 4, 5] to both.
bool nccl_rank(ncclComm_t comm, int r, std::atomic<int>& posted) {
    cudaSetDevice(r);
    cudaStream_t s;
    float* b;
    std::vector<float> h(4);
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMallocAsync(&b, 4 * sizeof(float), s);
    fill<<<1, 4, 0, s>>>(b, 1.0f + r, 4);
    if (r == 1) fill<<<1, 1, 0, s>>>(b + 1, 3.0f, 1);
    bool ok = true;
    if (r == 0) {
        ncclRecv(b + 2, 4, ncclChar, 1, comm, s);
        ok = cudaStreamQuery(s) == cudaErrorNotReady;
        posted = 1;
        ncclRecv(b + 3, 4, ncclChar, 1, comm, s);
    } else {
        while (!posted) std::this_thread::yield();
        ncclSend(b, 4, ncclChar, 0, comm, s), ncclSend(b + 1, 4, ncclChar, 0, comm, s);
    }
    ncclAllReduce(b, b, 4, ncclFloat, ncclSum, comm, s);
    while (cudaStreamQuery(s) == cudaErrorNotReady) std::this_thread::yield();
    cudaMemcpy(h.data(), b, 4 * sizeof(float), cudaMemcpyDeviceToHost);
    return ok && h == std::vector<float>{3, 4, 4, 5};
}

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "ok";
    if (mode == "nccl") {
        ncclComm_t comms[2];
        const int devices[2] = {0, 1};
        ncclCommInitAll(comms, 2, devices);
        std::atomic<int> posted{0};
        bool ok[2];
        std::thread t([&] { ok[1] = nccl_rank(comms[1], 1, posted); });
        ok[0] = nccl_rank(comms[0], 0, posted);
        t.join();
        if (!ok[0] || !ok[1]) return std::printf("nccl: WRONG\n"), 1;
        float* d;
        cudaMalloc(&d, 8);
        ncclRecv(d, 8, ncclChar, 1, comms[0], nullptr);
        cudaSetDevice(1);
        cudaMalloc(&d, 8);
        ncclSend(d, 4, ncclChar, 0, comms[1], nullptr);
        return std::printf("nccl: nothing caught\n"), 1;
    }
    cudaStream_t s;
    float* d;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMallocAsync(&d, 1024 * sizeof(float), s);
    std::vector<float> h(1024);
    if (mode == "host_deref") h[0] = d[3];
    if (mode == "hostptr") fill<<<4, 256, 0, s>>>(h.data(), 1.0f, 1024);
    if (mode == "oob") fill<<<5, 256, 0, s>>>(d, 1.0f, 1280);
    if (mode == "diverge") diverge<<<1, 64, 0, s>>>(d);
    if (mode == "crossfree") cudaSetDevice(1), cudaFreeAsync(d, s);   // cuda:0 memory freed from cuda:1
    if (mode == "event" || mode == "eventrace") {   // NcclComm's data-parallel sums: a side stream reads a gradient
        cudaStream_t side;
        cudaEvent_t written;
        float* copy;
        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&written, cudaEventDisableTiming);
        fill<<<4, 256, 0, s>>>(d, 2.0f, 1024);
        cudaEventRecord(written, s);
        if (mode == "event") cudaStreamWaitEvent(side, written, 0);
        cudaMallocAsync(&copy, 1024 * sizeof(float), side);
        cudaMemcpyAsync(copy, d, 1024 * sizeof(float), cudaMemcpyDeviceToDevice, side);
        cudaMemcpyAsync(h.data(), copy, 1024 * sizeof(float), cudaMemcpyDeviceToHost, side);
        const bool ok = h[0] == 2.0f && h[1023] == 2.0f && cudaEventQuery(written) == cudaSuccess;
        cudaEventDestroy(written);
        cudaStreamDestroy(side);
        return std::printf("event: %s\n", ok ? "ok" : "WRONG"), ok ? 0 : 1;
    }
    if (mode == "race") {
        fill<<<4, 256, 0, s>>>(d, 2.0f, 1024);
        cudaMemcpy(h.data(), d, sizeof(float), cudaMemcpyDeviceToHost);
    }
    if (mode == "early" || mode == "unwaited") {
        fill<<<1, 128, 0, s>>>(d, 5.0f, 128);
        async_copy<<<1, 32, 0, s>>>(d + 128, d, mode == "early" ? 1 : 2);
        cudaMemcpyAsync(h.data(), d + 128, 32 * sizeof(float), cudaMemcpyDeviceToHost, s);
        if (h[0] != h[0]) return std::printf("early: NaN, the cp.async had not landed\n"), 1;
    }
    if (mode == "ok") {
        reduce<<<1, dim3(32, 4), 0, s>>>(d, d + 4);
        cudaMemcpyAsync(h.data(), d, 5 * sizeof(float), cudaMemcpyDeviceToHost, s);
        bool ok = h[4] == 1.0f;
        for (int w = 0; w < 4; w++) ok = ok && h[w] == 32 * 32 * w + 496;  // sum of 32w .. 32w + 31
        std::printf("%s: sums %g %g %g %g, any %g\n", ok ? "ok" : "WRONG", h[0], h[1], h[2], h[3], h[4]);
        // cp.async then wait: the copied values; ldmatrix: lane l, register j holds row l / 4 of
        // matrix j, columns 2 (l % 4) and + 1, low half first.
        std::vector<float> in(128);
        for (int i = 0; i < 128; i++) in[i] = (float)i;
        std::vector<uint32_t> frag(128);
        cudaMemcpyAsync(d, in.data(), 128 * sizeof(float), cudaMemcpyHostToDevice, s);
        async_copy<<<1, 32, 0, s>>>(d + 128, d, 0);
        ldmatrix_x4<<<1, 32, 0, s>>>((uint32_t*)d + 256);
        cudaMemcpyAsync(h.data(), d + 128, 32 * sizeof(float), cudaMemcpyDeviceToHost, s);
        cudaMemcpyAsync(frag.data(), d + 256, 128 * sizeof(uint32_t), cudaMemcpyDeviceToHost, s);
        bool async_ok = true, ldm_ok = true;
        for (int t = 0; t < 32; t++) async_ok = async_ok && h[t] == 4 * t + 1;
        for (int l = 0; l < 32; l++)
            for (uint32_t j = 0; j < 4; j++) {
                const uint32_t lo = 64 * j + 8 * (l / 4) + 2 * (l % 4);
                ldm_ok = ldm_ok && frag[l * 4 + j] == (lo | (lo + 1) << 16);
            }
        std::printf("%s: cp.async %s, ldmatrix %s\n", async_ok && ldm_ok ? "ok" : "WRONG", async_ok ? "right" : "WRONG",
                    ldm_ok ? "right" : "WRONG");
        return ok && async_ok && ldm_ok ? 0 : 1;
    }
    cudaStreamSynchronize(s);
    std::printf("%s: nothing caught\n", mode.c_str());
    return 1;
}
