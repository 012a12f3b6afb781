// kernels/cpu/threads.cpp — the intra-op thread count and a tiny persistent worker pool.
// The count is thread_local, and so is the pool: several pipeline-stage threads may call
// kernels at the same time, each with its own count and its own workers. Workers sleep on a
// condition variable between jobs; spawning std::threads per call would cost more than the
// many small kernels of a tiny model. Before sleeping, a worker (and a caller waiting for its
// workers) watches for 200 µs: a step runs thousands of jobs, often microseconds apart, and each
// sleep and wake goes through the kernel. Measured on 2 cores, --threads 2 against sleeping at
// once: tiny's step 1.2x as fast, small's 1.05x, GEMMs up to 1.18x (20 µs gave less, 200 the most).
// What is left (small on 2 threads, the family-26 EPYC, counted in a local build): of ~450 jobs a
// step ~40 find the worker asleep (a one-thread stretch of over 200 µs came before), each started
// ~100 µs late: ~4 ms a step. In all the caller waits 8-19 ms a step for its worker after its own
// piece; the rest, as far as measured, the worker's core running slower (which one changes by the minute).
// Below the pool, the lending of idle cores between pipeline ranks run as threads (Lender).
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ops {

namespace {

thread_local int tl_num_threads = 1;
thread_local bool tl_inside_parallel = false;  // a nested parallel_for runs inline, never deadlocks
thread_local LentWork tl_lent;                 // this thread's pieces given and taken (lent_work)

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

    // Runs fn on [begin, end) and returns its exception, if any (workers and lent pieces alike).
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

private:
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
        tl_inside_parallel = true;   // a worker only runs pieces: a parallel_for in one runs inline
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

// ---- idle ranks lend their core -------------------------------------------------------------
// Pipeline stages as threads run their kernels on one thread each, and a stage waiting for a
// message leaves its core idle (the bubble, and the lighter stage of an uneven split). While a rank
// waits in a Lender, a one-thread rank's parallel_for cuts its job in pieces and offers them;
// the waiting rank runs one, then looks at its messages again. Every kernel gives the same bits for
// any cut (parallel.hpp), so this moves work, never changes a result.
struct Job {   // a job's pieces, offered to waiting ranks; the owner runs whatever nobody took
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n;
    int parts;
    std::atomic<int> next{0}, done{0};   // the next piece to take; pieces finished
    std::mutex mu;
    std::condition_variable finished;
    std::exception_ptr error;   // the first piece's failure, under mu
    double lent_s = 0;          // the seconds other threads ran its pieces, under mu

    // On the thread that took it (lent: not the owner's); returns the seconds it ran.
    double run(int piece, bool lent) {
        const bool outer = tl_inside_parallel;
        tl_inside_parallel = true;   // a parallel_for inside the piece runs inline
        const auto t0 = std::chrono::steady_clock::now();
        std::exception_ptr e = WorkerPool::run_piece(*fn, n * piece / parts, n * (piece + 1) / parts);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        tl_inside_parallel = outer;
        std::lock_guard<std::mutex> lock(mu);
        if (e && !error) error = e;
        if (lent) lent_s += seconds;
        if (++done == parts) finished.notify_all();
        return seconds;
    }
};

struct Board {   // the process's offered jobs and its waiting ranks
    std::mutex mu;
    std::vector<std::shared_ptr<Job>> jobs;
    std::vector<std::condition_variable*> waiting;   // each waiting rank's wake-up (under mu)
    std::atomic<int> idle{0};                        // waiting.size(), read without mu
    std::atomic<int> ranks{0};                       // threads that ever waited here, still alive

    std::shared_ptr<Job> open_job() const {   // one with a piece nobody took yet, or null (under mu)
        for (const auto& j : jobs)
            if (j->next.load() < j->parts) return j;
        return nullptr;
    }
};
Board& board() {
    static Board b;
    return b;
}

// A rank thread counts itself in board().ranks from its first wait to its end.
struct RankThread {
    RankThread() { board().ranks++; }
    ~RankThread() { board().ranks--; }
};

// Pieces for waiting ranks only while no more rank threads than cores exist: oversubscribed (4
// stages on 2 cores), a waiting rank has no idle core to lend, and the owner would wait for a piece
// whose thread is not running (bench_pipeline, 4 stages: 1.39-1.53x one stage instead of 1.50-1.72x).
const int kCores = int(std::max(1u, std::thread::hardware_concurrency()));

// The node's waiting MPI processes (lend_between_processes), set before any kernel runs.
std::atomic<int>* g_waiting_processes = nullptr;
int g_processes_on_node = 0;

int lendable() {
    if (g_waiting_processes)   // one helper thread (ProcessHelper); oversubscribed, no idle core either
        return g_processes_on_node <= kCores ? std::min(1, g_waiting_processes->load(std::memory_order_relaxed)) : 0;
    const Board& b = board();
    return b.ranks.load(std::memory_order_relaxed) <= kCores ? b.idle.load(std::memory_order_relaxed) : 0;
}

// The owner's side: offers pieces 1.. , runs piece 0 and every piece nobody took, and returns once
// all are done (a helper may still run one: fn lives in the caller's frame).
void run_lent(int64_t n, int parts, const std::function<void(int64_t, int64_t)>& fn) {
    auto job = std::make_shared<Job>();
    job->fn = &fn, job->n = n, job->parts = parts;
    Board& b = board();
    {
        std::lock_guard<std::mutex> lock(b.mu);
        b.jobs.push_back(job);
        for (std::condition_variable* cv : b.waiting) cv->notify_all();
    }
    int mine = 0;
    for (int p; (p = job->next.fetch_add(1)) < parts; mine++) job->run(p, false);
    tl_lent.given += parts - mine;
    {
        std::lock_guard<std::mutex> lock(b.mu);
        auto it = std::find(b.jobs.begin(), b.jobs.end(), job);
        if (it != b.jobs.end()) b.jobs.erase(it);
    }
    // A helper's piece is often nearly done: watch before sleeping, as the pool does.
    WorkerPool::watch([&] { return job->done.load(std::memory_order_acquire) == parts; });
    std::unique_lock<std::mutex> lock(job->mu);
    job->finished.wait(lock, [&] { return job->done == parts; });
    tl_lent.given_s += job->lent_s;
    if (job->error) std::rethrow_exception(job->error);
}

// Under MPI the pieces a one-thread rank offers go to one helper thread of its own process, which
// waits on the board as a waiting rank would; the scheduler runs it on a waiting process's idle core.
// Taken like any offered piece, so a helper woken late leaves the owner nothing to wait for.
class ProcessHelper {
 public:
    ProcessHelper() : thread_([this] { run(); }) {}
    ~ProcessHelper() {
        {
            std::lock_guard<std::mutex> lock(board().mu);
            stop_ = true;
            cv_.notify_all();
        }
        thread_.join();
    }

 private:
    void run() {
        Board& b = board();
        std::unique_lock<std::mutex> lock(b.mu);
        b.waiting.push_back(&cv_);   // run_lent notifies it under b.mu: no offer goes unseen
        for (;;) {
            std::shared_ptr<Job> job;
            cv_.wait(lock, [&] { return stop_ || (job = b.open_job()); });
            if (stop_) break;
            lock.unlock();
            const int p = job->next.fetch_add(1);
            if (p < job->parts) job->run(p, true);
            lock.lock();
        }
        b.waiting.erase(std::find(b.waiting.begin(), b.waiting.end(), &cv_));
    }

    std::condition_variable cv_;
    bool stop_ = false;   // under board().mu
    std::thread thread_;   // last: it starts once the members above exist
};
// Ended by lend_between_processes(nullptr) (~MpiWorld). A raw pointer: where a process exits
// without it, a destructor run after board()'s would touch a destroyed board.
ProcessHelper* g_helper = nullptr;

// Pinned to one core (mpirun binds each process to a core by default), the helper would only take
// turns with its owner: lend only where this process may run on more cores than one.
bool may_use_other_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 1;
}

}  // namespace

void set_num_threads(int n) { tl_num_threads = n < 1 ? 1 : n; }
// A one-thread rank counts the waiting ranks too: a GEMM then cuts its blocks for them.
int num_threads() {
    if (tl_num_threads > 1 || tl_inside_parallel) return tl_num_threads;
    return 1 + lendable();
}

LentWork lent_work() { return tl_lent; }

// PIPETRAIN_LEND=0 keeps each rank on its own core, as separate devices would be (to compare a run
// with pp::simulate, which knows no lending); unset or 1 lends. Anything else is an error.
bool lending_on() {
    static const bool on = [] {
        const char* v = std::getenv("PIPETRAIN_LEND");
        if (!v || std::string(v) == "1") return true;
        if (std::string(v) == "0") return false;
        throw std::runtime_error(std::string("PIPETRAIN_LEND: expected 0 or 1, got \"") + v + "\"");
    }();
    return on;
}

Lender::~Lender() {
    if (!counted_) return;
    Board& b = board();
    std::lock_guard<std::mutex> g(b.mu);
    b.waiting.erase(std::find(b.waiting.begin(), b.waiting.end(), &cv_)), b.idle--;
}

bool Lender::wait(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline) {
    if (!lend_ || !lending_on()) {
        cv_.wait_until(lock, deadline);
        return std::chrono::steady_clock::now() >= deadline;
    }
    static thread_local RankThread counted;   // from this rank thread's first wait to its end
    Board& b = board();
    std::shared_ptr<Job> job;
    {
        std::lock_guard<std::mutex> g(b.mu);
        if (!counted_) b.waiting.push_back(&cv_), b.idle++, counted_ = true;
        job = b.open_job();
    }
    if (job) {   // a piece of another rank's job, then the caller looks at its messages again
        lock.unlock();
        const int p = job->next.fetch_add(1);
        if (p < job->parts) tl_lent.taken_s += job->run(p, true), tl_lent.taken++;
        lock.lock();
        return false;
    }
    // The owner notifies without the caller's mutex, so a job offered just before this wait may
    // go unseen: wake at least every millisecond to look.
    cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(1)));
    return std::chrono::steady_clock::now() >= deadline;
}

void lend_between_processes(std::atomic<int>* waiting, int processes_on_node) {
    delete g_helper;
    g_helper = nullptr;
    g_waiting_processes = waiting && lending_on() && may_use_other_cores() ? waiting : nullptr;
    g_processes_on_node = processes_on_node;
    if (g_waiting_processes) g_helper = new ProcessHelper;
}

ProcessWaiting::ProcessWaiting() : counted_(g_waiting_processes) {
    if (counted_) counted_->fetch_add(1);
}
ProcessWaiting::~ProcessWaiting() {
    if (counted_) counted_->fetch_sub(1);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    const int64_t threads = num_threads();   // once: the waiting ranks it counts may change
    int64_t parts = std::min((n + grain - 1) / grain, threads);
    if (parts <= 1 || tl_inside_parallel) {
        fn(0, n);
        return;
    }
    if (tl_num_threads == 1) return run_lent(n, int(parts), fn);   // pieces for waiting ranks
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

// Pieces of at least 256 KiB: a smaller job costs more to hand out than to do.
constexpr int64_t kByteGrain = 1 << 18;

void zero_bytes(void* p, size_t bytes) {
    char* c = static_cast<char*>(p);
    parallel_for((int64_t)bytes, kByteGrain, [&](int64_t b0, int64_t b1) { std::memset(c + b0, 0, size_t(b1 - b0)); });
}

void copy_bytes_apart(void* dst, const void* src, size_t bytes) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    parallel_for((int64_t)bytes, kByteGrain, [&](int64_t b0, int64_t b1) { std::memcpy(d + b0, s + b0, size_t(b1 - b0)); });
}

}  // namespace ops
