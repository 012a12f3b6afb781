// kernels/cpu/threads.cpp — the intra-op thread count and a tiny persistent worker pool.
// The count is thread_local, and so is the pool: several pipeline-stage threads may call
// kernels at the same time, each with its own count and its own workers. Workers sleep on a
// condition variable between jobs; spawning std::threads per call would cost more than the
// many small kernels of a tiny model. Before sleeping, a worker (and a caller waiting for its
// workers) watches for 200 µs: a step runs thousands of jobs, often microseconds apart, and each
// sleep and wake goes through the kernel. Measured on 2 cores, --threads 2 against sleeping at
// once: tiny's step 1.2x as fast, small's 1.05x, GEMMs up to 1.18x (20 µs gave less, 200 the most).
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ops {

namespace {

class WorkerPool {
public:
    ~WorkerPool() { resize(0); }

    // Runs fn on `parts` pieces: piece 0 on the caller, pieces 1.. on workers 0.. .
    void run(int64_t n, int parts, const std::function<void(int64_t, int64_t)>& fn) {
        if ((int)workers_.size() < parts - 1) resize(parts - 1);
        {
            std::lock_guard<std::mutex> lock(mu_);
            fn_ = &fn;
            n_ = n;
            parts_ = parts;
            pending_ = (int)workers_.size();
            ++generation_;
        }
        start_.notify_all();
        std::exception_ptr error = run_piece(fn, 0, n / parts);
        watch([&] { return pending_.load(std::memory_order_acquire) == 0; });
        std::unique_lock<std::mutex> lock(mu_);
        done_.wait(lock, [&] { return pending_ == 0; });
        // An exception (e.g. bad_alloc) in any piece is rethrown here, once no worker uses fn.
        if (!error) error = worker_error_;
        worker_error_ = nullptr;
        if (error) std::rethrow_exception(error);
    }

private:
    static std::exception_ptr run_piece(const std::function<void(int64_t, int64_t)>& fn,
                                        int64_t begin, int64_t end) {
        try {
            fn(begin, end);
        } catch (...) {
            return std::current_exception();
        }
        return nullptr;
    }

    // Polls `ready` for up to kWatch before the caller sleeps on a condition variable (which it
    // still does: this only saves the sleep where the wait is short).
    template <class Ready>
    static void watch(const Ready& ready) {
        constexpr auto kWatch = std::chrono::microseconds(200);
        const auto until = std::chrono::steady_clock::now() + kWatch;
        while (!ready() && std::chrono::steady_clock::now() < until) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
    }

    void resize(int count) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        start_.notify_all();
        for (std::thread& w : workers_) w.join();
        workers_.clear();
        stop_ = false;
        // A new worker starts from the current generation, which is read here and not in the
        // worker: the thread may first run after the job it was created for has been posted.
        for (int id = 0; id < count; id++)
            workers_.emplace_back([this, id, g = generation_.load()] { work(id + 1, g); });
    }

    void work(int piece, uint64_t seen) {
        for (;;) {
            watch([&] { return generation_.load(std::memory_order_acquire) != seen; });
            std::unique_lock<std::mutex> lock(mu_);
            start_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            const auto* fn = fn_;
            int64_t n = n_;
            int parts = parts_;
            lock.unlock();
            // int64 products: n * piece cannot overflow for any tensor we can allocate
            std::exception_ptr error;
            if (piece < parts) error = run_piece(*fn, n * piece / parts, n * (piece + 1) / parts);
            lock.lock();
            if (error && !worker_error_) worker_error_ = error;
            if (--pending_ == 0) done_.notify_one();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable start_, done_;
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
    int parts_ = 0;
    std::atomic<int> pending_{0};           // written under mu_, also read without it (watch)
    std::exception_ptr worker_error_;
    std::atomic<uint64_t> generation_{0};   // likewise
    bool stop_ = false;
};

thread_local int tl_num_threads = 1;
thread_local bool tl_inside_parallel = false;  // a nested parallel_for runs inline, never deadlocks

}  // namespace

void set_num_threads(int n) { tl_num_threads = n < 1 ? 1 : n; }
int num_threads() { return tl_num_threads; }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t parts = (n + grain - 1) / grain;
    if (parts > tl_num_threads) parts = tl_num_threads;
    if (parts <= 1 || tl_inside_parallel) {
        fn(0, n);
        return;
    }
    thread_local WorkerPool pool;
    tl_inside_parallel = true;
    try {
        pool.run(n, (int)parts, fn);
    } catch (...) {
        tl_inside_parallel = false;
        throw;
    }
    tl_inside_parallel = false;
}

}  // namespace ops
