// kernels/cuda/check.cuh — CUDA_CHECK for every CUDA runtime call. Host code only, so plain
// C++ files (src/device.cpp) share it with the kernel files.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>

// Every CUDA runtime call goes through CUDA_CHECK: file:line and the error string, then throw.
#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        const cudaError_t err_ = (call);                                                     \
        if (err_ != cudaSuccess) {                                                           \
            const std::string msg_ = std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                     ": CUDA error: " + cudaGetErrorString(err_) + " (" #call ")"; \
            std::fprintf(stderr, "%s\n", msg_.c_str());                                      \
            throw std::runtime_error(msg_);                                                  \
        }                                                                                    \
    } while (0)

// After each kernel launch: catches bad launch configurations (the kernel itself runs later).
#define CUDA_CHECK_LAST() CUDA_CHECK(cudaGetLastError())
