// scripts/gpu_emulator/cuda_bf16.h — __nv_bfloat16 for the emulated GPU: 16 bits, and the
// conversion rounds to nearest even like cvt.rn.bf16.f32 (a NaN stays a quiet NaN).
#pragma once
#include <cstdint>
#include <cstring>

#include "cuda_runtime.h"

struct __nv_bfloat16 {
    uint16_t x;
};

inline __nv_bfloat16 __float2bfloat16(float f) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40u)};
    return {uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
