// kernels/cuda/adamw.cu — the AdamW update (the formula of kernels/cpu/adamw.cpp, one thread per
// parameter) and the float64 sum of squares for the global gradient norm, reduced in two
// fixed-order passes: per-chunk partials, then the partials in chunk order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"

#include <cmath>

namespace ops {
namespace cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 1 << 14;  // elements per partial sum (the CPU's chunk size)

__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, int64_t N,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float bc1, float bc2) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = grads[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        const float m_hat = m[i] / bc1;
        const float v_hat = v[i] / bc2;
        // Decoupled weight decay: applied to the parameter, not mixed into the gradient.
        params[i] -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * params[i]);
    }
}

// partial[chunk] = sum of x^2 over one chunk; one block per chunk.
__global__ void sum_squares_chunks_kernel(double* partial, const float* x, int64_t N) {
    const int64_t begin = blockIdx.x * kChunk, end = begin + kChunk < N ? begin + kChunk : N;
    double s = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += (double)x[i] * x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// *out = sum of the partials, by one block in a fixed order.
__global__ void sum_partials_kernel(double* out, const double* partial, int64_t chunks) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < chunks; i += blockDim.x) s += partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0) *out = s;
}

}  // namespace

void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t, cudaStream_t stream) {
    if (N <= 0) return;
    // Bias corrections in float64 on the host, once per call, exactly as the CPU.
    const float bc1 = (float)(1.0 - std::pow((double)beta1, t));
    const float bc2 = (float)(1.0 - std::pow((double)beta2, t));
    const int64_t blocks = ceil_div<int64_t>(N, kThreads);
    adamw_kernel<<<(unsigned)(blocks < 65536 * 16 ? blocks : 65536 * 16), kThreads, 0, stream>>>(
        params, m, v, grads, N, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
    CUDA_CHECK_LAST();
}

void sum_squares_async(double* out, const float* x, int64_t N, cudaStream_t stream) {
    if (N <= 0) {
        CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), stream));
        return;
    }
    const int64_t chunks = ceil_div(N, kChunk);
    double* partial = nullptr;
    CUDA_CHECK(cudaMallocAsync(&partial, sizeof(double) * chunks, stream));
    sum_squares_chunks_kernel<<<(unsigned)chunks, kThreads, 0, stream>>>(partial, x, N);
    CUDA_CHECK_LAST();
    sum_partials_kernel<<<1, 1024, 0, stream>>>(out, partial, chunks);
    CUDA_CHECK_LAST();
    CUDA_CHECK(cudaFreeAsync(partial, stream));
}

double sum_squares(const float* x, int64_t N, cudaStream_t stream) {
    double* d = nullptr;
    double result = 0.0;
    CUDA_CHECK(cudaMallocAsync(&d, sizeof(double), stream));
    sum_squares_async(d, x, N, stream);
    CUDA_CHECK(cudaMemcpyAsync(&result, d, sizeof(double), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaFreeAsync(d, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return result;
}

}  // namespace cuda
}  // namespace ops
