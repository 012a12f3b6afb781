// src/watchdog.hpp — the supervisor that enforces the timeout even when a rank never returns.
//
// A rank blocked in a receive ends by itself when its deadline passes (ThreadComm, NcclComm throw,
// naming the peer). A rank stuck anywhere else (a driver call that never returns, a deadlock or an
// endless loop in a stage) cannot notice anything: its thread is not running our code. So a
// thread outside the ranks watches them. Each rank has a heartbeat that it bumps as it makes
// progress (pt::beat: ThreadComm after every receive, MpiComm after every message, train_step at
// each phase of the step) and may show the watchdog its Pipeline (a WatchedPipeline, the Pipeline's
// observer), whose actions count too and whose where() says what it was doing. When a rank's
// heartbeat has not moved for the deadline (the timeout plus a grace, so that the transport's own, more precise error comes first),
// the watchdog prints what every rank was doing and ends the process with kWatchdogExit, without
// waiting for the stuck thread. Whatever was committed stays whole (every
// commit is an atomic rename); a lock held on a file is released by the OS.
//
// run_ranks (src/comm.hpp) supervises from its calling thread, so every user of it is watched. The
// watchdog knows nothing of threads or worlds: one process with a single rank (under MPI) uses it
// the same way, with first_rank = its rank.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline.hpp"

namespace pt {

// Like timeout(1) for a command that ran out of time. (1 is an ordinary error, 130/143 a signal.)
constexpr int kWatchdogExit = 124;

// Progress of the calling rank: bumps its heartbeat. `phase` (a string literal: it is kept by
// pointer) names what the rank starts now, `step` the optimizer step it is in (-1: unchanged).
// Costs two relaxed atomic stores; a no-op on a thread that no watchdog watches.
void beat(const char* phase = nullptr, int step = -1);

// While alive, observes `pipeline` (Pipeline::set_observer): the watchdog of the calling rank counts
// its actions as progress and reports where(). A no-op on a thread that no watchdog watches.
class WatchedPipeline : public pp::Observer {
 public:
    explicit WatchedPipeline(pp::Pipeline& pipeline);
    ~WatchedPipeline() override;
    WatchedPipeline(const WatchedPipeline&) = delete;
    WatchedPipeline& operator=(const WatchedPipeline&) = delete;

    void on_action(std::size_t index, pp::Phase phase) override;
    // Readable from another thread while the step runs: "action F3.0 (after F1.0 F2.0 B0.0 B1.0)",
    // "transfers before F3.0 (after ...)" or "between steps". Lock-free: run_step only stores an
    // index into the schedule, which never changes.
    std::string where() const;
    // Grows whenever an action or a group of transfers starts, and when the step ends: a watchdog
    // that sees it unchanged for long knows this rank is stuck.
    unsigned long progress() const { return ticks_.load(std::memory_order_relaxed); }

 private:
    pp::Pipeline& pipeline_;
    bool watched_ = false;
    std::atomic<long> at_{-1};            // 2i: action i's transfers, 2i + 1: action i; -1 between steps
    std::atomic<unsigned long> ticks_{0};
};

class Watchdog {
 public:
    // Watches `size` ranks, named first_rank, first_rank + 1, ... in its report. A rank is stuck
    // when it made no progress for timeout_s + grace_s(timeout_s).
    Watchdog(int size, double timeout_s, int first_rank = 0);
    static double grace_s(double timeout_s) { return timeout_s / 10 > 2.0 ? timeout_s / 10 : 2.0; }

    // On rank r's own thread: enter before its work, leave after it (error: why it failed, or "").
    void enter(int r);
    void leave(int r, const std::string& error);

    // On the watching thread: returns once every rank has left. If one is stuck first, it prints
    // the report on stderr and ends the process with kWatchdogExit.
    void supervise();

 private:
    friend void beat(const char*, int);
    friend class WatchedPipeline;
    struct Rank {
        std::atomic<unsigned long> ticks{0};        // bumped by beat()
        std::atomic<const char*> phase{nullptr};
        std::atomic<int> step{-1};
        const WatchedPipeline* pipeline = nullptr;  // the rest under mu_
        bool entered = false, left = false;
        std::string error;
    };
    std::string rank_report(const std::vector<char>& stuck, const std::vector<double>& idle_s) const;   // under mu_
    [[noreturn]] void fire(const std::string& report);

    int size_, first_rank_;
    double timeout_s_, deadline_s_;
    std::unique_ptr<Rank[]> ranks_;   // atomics do not move, so not a vector
    std::mutex mu_;
    std::condition_variable left_;
};

}  // namespace pt
