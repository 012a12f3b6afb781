// kernels/cuda/layernorm.cu — layernorm over the last dimension, the formulas of
// kernels/cpu/layernorm.cpp: one warp per row, row statistics in float64 (two passes), and the
// parameter gradients summed over rows in a fixed order (no atomics).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"

namespace ops {
namespace cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // 8 warps of 32 threads, one row each

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C,
                                         float eps) {
    const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    if (n >= N) return;  // whole warps leave together, so the shuffles below stay full
    const float* x = inp + (size_t)n * C;  // (C)
    double sum = 0.0;
    for (int c = lane; c < C; c += 32) sum += x[c];
    const float m = (float)(warp_sum(sum) / C);
    double var = 0.0;
    for (int c = lane; c < C; c += 32) var += (double)(x[c] - m) * (x[c] - m);
    const float s = (float)(1.0 / sqrt(warp_sum(var) / C + eps));
    float* o = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = s;
    }
}

// dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), one warp per row; adds.
__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
    const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    if (n >= N) return;
    const float* x = inp + (size_t)n * C;
    const float* dy = dout + (size_t)n * C;
    const float mu = mean[n], rs = rstd[n];
    double dnorm_sum = 0.0, dnorm_norm_sum = 0.0;
    for (int c = lane; c < C; c += 32) {
        const float norm = (x[c] - mu) * rs;
        const float dnorm = weight[c] * dy[c];
        dnorm_sum += dnorm;
        dnorm_norm_sum += (double)dnorm * norm;
    }
    const float dnorm_mean = (float)(warp_sum(dnorm_sum) / C);
    const float dnorm_norm_mean = (float)(warp_sum(dnorm_norm_sum) / C);
    float* dx = dinp + (size_t)n * C;
    for (int c = lane; c < C; c += 32) {
        const float norm = (x[c] - mu) * rs;
        const float dnorm = weight[c] * dy[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
    }
}

// dweight/dbias: block (32, 8) owns 32 columns; thread row ty sums rows ty, ty+8, ... in order,
// then the 8 partials are added in ty order. Coalesced along columns, same bits every run.
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* dout,
                                                 const float* inp, const float* mean,
                                                 const float* rstd, int N, int C) {
    __shared__ float pw[8][32], pb[8][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float dw = 0.0f, db = 0.0f;
    if (c < C)
        for (int n = threadIdx.y; n < N; n += 8) {
            const float dy = dout[(size_t)n * C + c];
            dw += (inp[(size_t)n * C + c] - mean[n]) * rstd[n] * dy;
            db += dy;
        }
    pw[threadIdx.y][threadIdx.x] = dw;
    pb[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float sw = 0.0f, sb = 0.0f;
        for (int i = 0; i < 8; i++) sw += pw[i][threadIdx.x], sb += pb[i][threadIdx.x];
        if (dweight) dweight[c] += sw;
        if (dbias) dbias[c] += sb;
    }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps, cudaStream_t stream) {
    if (N <= 0) return;
    layernorm_forward_kernel<<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, N, C, eps);
    CUDA_CHECK_LAST();
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    if (dinp) {
        layernorm_backward_dinp_kernel<<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, stream>>>(
            dinp, dout, inp, weight, mean, rstd, N, C);
        CUDA_CHECK_LAST();
    }
    if (dweight || dbias) {
        layernorm_backward_params_kernel<<<ceil_div(C, 32), dim3(32, 8), 0, stream>>>(
            dweight, dbias, dout, inp, mean, rstd, N, C);
        CUDA_CHECK_LAST();
    }
}

}  // namespace cuda
}  // namespace ops
