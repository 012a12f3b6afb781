// kernels/cpu/parallel.hpp — internal to the CPU kernels: a static-partition parallel for.
// Every kernel splits its work over *independent outputs* only, so results are the same bits
// for any thread count; this helper just hands out contiguous ranges.
#pragma once
#include <cstdint>
#include <functional>

namespace ops {

// Calls fn(begin, end) on contiguous pieces of [0, n): piece t of P is
// [n*t/P, n*(t+1)/P). P = min(num_threads(), ceil(n / grain)), so small jobs run inline
// on the calling thread; the other pieces run on that thread's persistent worker pool.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace ops
