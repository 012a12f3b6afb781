// src/async_sum.hpp — a transport's all-reduce that runs beside the backward (data-parallel overlap).
//
// pp::Comm::allreduce_sum blocks, and a blocking collective inside a schedule could deadlock (a
// replica waiting in it for a peer that waits for a pipeline message from a third rank). A sum
// started here returns at once: ThreadComm runs it on a thread of its own, MpiComm posts its
// messages and lets them travel while the rank computes. Each gives the bits of allreduce_sum.
#pragma once
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

namespace pt {

struct AsyncSum {
    using Clock = std::chrono::steady_clock;
    struct Span {   // when start_sum handed the sum over, and when this rank saw it done
        Clock::time_point start, end;
    };
    virtual ~AsyncSum() = default;
    // Where start_sum's data may live: host memory (ThreadComm, MpiComm), or GPU memory (NcclComm).
    virtual bool sums_device_memory() const { return false; }
    // allreduce_sum(data, n, ranks), started now. Every member of `ranks` starts the same sums in
    // the same order; `data` is not touched by the caller until wait_sums returns.
    virtual void start_sum(float* data, std::size_t n, const std::vector<int>& ranks) = 0;
    // Waits for every sum started since the last call (each with the transport's deadline) and
    // returns their spans, in the order they started. Rethrows the first one's error.
    virtual std::vector<Span> wait_sums() = 0;
};

}  // namespace pt
