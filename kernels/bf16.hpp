// kernels/bf16.hpp — float <-> bfloat16 bits, callable from host and device code: round to
// nearest, ties to even; a NaN stays a (quiet) NaN. The CPU and CUDA kernels share these two
// functions, so both produce the same 16 bits (--dtype bf16).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PT_BF16_HD __host__ __device__
#else
#define PT_BF16_HD
#endif

namespace ops {
namespace bf16 {

PT_BF16_HD inline uint32_t as_uint(float x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
#endif
}

PT_BF16_HD inline uint16_t bits(float x) {
    uint32_t u = as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);   // NaN: keep it a NaN
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                   // half to even
}

PT_BF16_HD inline float value(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    std::memcpy(&x, &u, 4);
    return x;
#endif
}

}  // namespace bf16
}  // namespace ops
