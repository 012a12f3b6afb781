// kernels/cpu/parallel.hpp — the CPU kernels' static-partition parallel for, and the wait through which
// pipeline ranks run as threads (src/comm.cpp) lend their idle core to it.
// Every kernel splits its work over *independent outputs* only, so results are the same bits
// for any thread count; this helper just hands out contiguous ranges.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

namespace ops {

// Calls fn(begin, end) on contiguous pieces of [0, n): piece t of P is
// [n*t/P, n*(t+1)/P). P = min(num_threads(), ceil(n / grain)), so small jobs run inline
// on the calling thread; the other pieces run on that thread's persistent worker pool.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// The grain, in columns, of a sum over `rows` rows whose threads own columns (bias_backward and
// LayerNorm's weight gradients): pieces of at least 2^21 floats (8 MiB). Below that, one thread
// was faster than two (small, --threads 2, its 2048-row sums of 256 and 1024 columns, op profile
// of 11 steps, alternated: bias_backward 0.067-0.081 s split by 64 columns against 0.042-0.052 on
// one thread and LayerNorm's backward 0.106 against 0.088-0.103 (3 rounds, one binary); another
// window, two builds, 5 rounds: 0.048-0.063 against 0.047-0.049, 0.076-0.092 against 0.072-0.086;
// the Xeon had found bias_backward 0.73x on 2 threads). Which thread sums a column never changes
// its bits.
inline int64_t column_grain(int64_t rows) { return std::max<int64_t>(64, (int64_t(1) << 21) / std::max<int64_t>(1, rows)); }

// Host memory zeroed or copied (dst and src apart) in pieces as parallel_for cuts a kernel's work: a
// step's fresh gradient buffers were ~200 MB of zeros (~120 since products written whole skip theirs),
// and on one thread they kept the others waiting.
void zero_bytes(void* p, size_t bytes);
void copy_bytes_apart(void* dst, const void* src, size_t bytes);

// A rank of a pipeline run as threads waiting for a message (src/comm.cpp's receive) lends its core:
// from its first wait() to the end of the receive it counts as a helper, so the other one-thread
// ranks' parallel_for cut their jobs in pieces for it, and it runs those pieces while it waits
// (threads.cpp). It stays counted while it runs a piece: the owner waits for that piece before its
// next job, so by then this rank is free again.
class Lender {
 public:
    Lender(std::condition_variable& cv, bool lend) : cv_(cv), lend_(lend) {}
    ~Lender();
    Lender(const Lender&) = delete;
    Lender& operator=(const Lender&) = delete;
    // Runs one offered piece, or cv.wait_until(lock, deadline) for at most a millisecond. Returns
    // true once the deadline has passed; like any wait it may return early, so the caller looks at
    // what it waits for again.
    bool wait(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline);

 private:
    std::condition_variable& cv_;
    bool lend_, counted_ = false;
};
// False when PIPETRAIN_LEND=0 (then a Lender only waits); throws on a value other than 0 or 1.
bool lending_on();

// MPI processes of one machine lend their cores too, though they cannot run each other's pieces:
// `waiting` counts the node's processes that wait (in memory they share, set up by MpiWorld), and
// while it is above 0 a one-thread rank's parallel_for offers pieces to a helper thread of its own
// process, which the scheduler puts on the idle core. nullptr turns it off (before MPI_Finalize).
void lend_between_processes(std::atomic<int>* waiting, int processes_on_node);
// Counts this process in `waiting` for the waiter's lifetime (MpiComm's waits).
class ProcessWaiting {
 public:
    ProcessWaiting();
    ~ProcessWaiting();
    ProcessWaiting(const ProcessWaiting&) = delete;
    ProcessWaiting& operator=(const ProcessWaiting&) = delete;

 private:
    std::atomic<int>* counted_;
};

// The calling thread's pieces so far: of its jobs, run by waiting ranks (under MPI, by its helper
// thread on a waiting process's core), and the seconds they ran there (train's "helped: ..."); of
// other ranks' jobs, run while it waited, and the seconds they took (train's "lent: ...").
struct LentWork {
    int64_t given = 0, taken = 0;
    double given_s = 0, taken_s = 0;
};
LentWork lent_work();

}  // namespace ops
