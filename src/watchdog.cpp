// src/watchdog.cpp — see watchdog.hpp.
#include "src/watchdog.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace pt {

namespace {
using Clock = std::chrono::steady_clock;

// The calling thread's rank, set between enter and leave.
struct Current {
    Watchdog* watchdog = nullptr;
    int rank = -1;
};
thread_local Current current;

std::string seconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", s);
    return buf;
}

// write(2) until done: no stdio lock, which the stuck thread may hold.
void write_stderr(const char* text, size_t size) {
    for (size_t done = 0; done < size;) {
        ssize_t n = ::write(2, text + done, size - done);
        if (n <= 0) return;
        done += size_t(n);
    }
}
void write_stderr(const std::string& text) { write_stderr(text.data(), text.size()); }

// The last resort: a stopped rank may hold a lock the watching thread needs as well: the
// allocator's (one malloc arena: src/cli/main.cpp), taken by every string of the report, or mu_.
// So the watching thread re-arms alarm(2) as it goes, and SIGALRM, where it stalls, writes these
// words (set beforehand: nothing is allocated in a signal handler) and ends the process.
char last_words[256];
size_t last_words_size = 0;
extern "C" void say_last_words(int) {
    write_stderr(last_words, last_words_size);
    ::_exit(kWatchdogExit);
}
void arm_last_resort(unsigned seconds, const char* words) {
    static const bool installed = [] {
        struct sigaction a {};
        a.sa_handler = say_last_words;
        sigemptyset(&a.sa_mask);
        return ::sigaction(SIGALRM, &a, nullptr) == 0;
    }();
    if (!installed) return;
    ::alarm(0);   // not while the words change
    last_words_size = std::min(std::strlen(words), sizeof last_words);
    std::memcpy(last_words, words, last_words_size);
    ::alarm(seconds);
}
// "watchdog: no progress from ranks 0, 1 for longer than LIMITS: ending ...", made on this stack.
void write_headline(const std::vector<char>& stuck, int first_rank, const char* limits) {
    char head[512];
    int n = std::snprintf(head, sizeof head, "watchdog: no progress from rank%s", std::count(stuck.begin(), stuck.end(), 1) > 1 ? "s" : "");
    for (size_t r = 0, first = 1; r < stuck.size() && n > 0 && size_t(n) < sizeof head; r++)
        if (stuck[r]) n += std::snprintf(head + n, sizeof head - size_t(n), "%s %d", first ? "" : ",", first_rank + int(r)), first = 0;
    if (n > 0 && size_t(n) < sizeof head)
        n += std::snprintf(head + n, sizeof head - size_t(n), " for longer than %s: ending the process (exit %d) without waiting for it\n",
                           limits, kWatchdogExit);
    write_stderr(head, std::min(size_t(n > 0 ? n : 0), sizeof head - 1));
}
}  // namespace

void beat(const char* phase, int step) {
    if (!current.watchdog) return;
    Watchdog::Rank& k = current.watchdog->ranks_[current.rank];
    if (phase) k.phase.store(phase, std::memory_order_relaxed);
    if (step >= 0) k.step.store(step, std::memory_order_relaxed);
    k.ticks.fetch_add(1, std::memory_order_relaxed);
}

WatchedPipeline::WatchedPipeline(pp::Pipeline& pipeline) : pipeline_(pipeline) {
    if (!current.watchdog) return;
    std::lock_guard<std::mutex> lock(current.watchdog->mu_);
    current.watchdog->ranks_[current.rank].pipeline = this;
    pipeline_.set_observer(this);
    watched_ = true;
}

WatchedPipeline::~WatchedPipeline() {
    if (!watched_) return;
    pipeline_.set_observer(nullptr);
    if (!current.watchdog) return;
    std::lock_guard<std::mutex> lock(current.watchdog->mu_);   // the watchdog reads it under the same lock
    current.watchdog->ranks_[current.rank].pipeline = nullptr;
}

void WatchedPipeline::on_action(std::size_t index, pp::Phase phase) {
    at_.store(phase == pp::Phase::step_end ? -1 : long(2 * index + (phase == pp::Phase::action)), std::memory_order_relaxed);
    ticks_.fetch_add(1, std::memory_order_relaxed);
}

std::string WatchedPipeline::where() const {
    long at = at_.load(std::memory_order_relaxed);
    if (at < 0) return "between steps";
    size_t i = size_t(at / 2);
    const std::vector<pp::Action>& actions = pipeline_.schedule()[size_t(pipeline_.rank())];
    if (at % 2 == 0 && i == actions.size()) return "transfers at the end of the step" + pipeline_.after(i);
    return (at % 2 ? "action " : "transfers before ") + to_string(actions[i], true) + pipeline_.after(i);
}

Watchdog::Watchdog(int size, double timeout_s, int first_rank)
    : size_(size), first_rank_(first_rank), timeout_s_(timeout_s), deadline_s_(timeout_s + grace_s(timeout_s)),
      ranks_(new Rank[size_t(size > 0 ? size : 0)]) {
    if (size < 1 || !(timeout_s > 0)) throw std::invalid_argument("Watchdog: need size >= 1 and timeout > 0");
}

void Watchdog::enter(int r) {
    current = {this, r};
#if defined(__linux__)
    // "rank 1" in top -H, gdb and /proc/PID/task/*/comm.
    pthread_setname_np(pthread_self(), ("rank " + std::to_string(first_rank_ + r)).c_str());
#endif
    std::lock_guard<std::mutex> lock(mu_);
    ranks_[r].entered = true;
}

void Watchdog::leave(int r, const std::string& error) {
    current = {};
    {
        std::lock_guard<std::mutex> lock(mu_);
        ranks_[r].left = true, ranks_[r].error = error;
    }
    left_.notify_all();
}

// Polls every rank's progress ten times a second (its beats, and its pipeline's actions) and wakes
// at once when a rank leaves, so a run_ranks of a few milliseconds costs no more than that.
void Watchdog::supervise() {
    std::vector<unsigned long> ticks(size_, ~0ul), actions(size_, ~0ul);
    std::vector<const WatchedPipeline*> pipelines(size_, nullptr);
    std::vector<Clock::time_point> since(size_, Clock::now());
    std::vector<char> stuck(size_, 0);
    // Everything the stall and the headline need, made now: from here to the headline nothing allocates.
    char limits[96], stalled[256];
    std::snprintf(limits, sizeof limits, "the timeout (%g s) + a grace (%g s)", timeout_s_, grace_s(timeout_s_));
    const unsigned stall_s = unsigned(std::ceil(deadline_s_)) + 1;
    std::snprintf(stalled, sizeof stalled, "watchdog: its own thread made no progress for %u s (a stopped thread holds a lock it "
                  "needs): ending the process (exit %d) without waiting for it\n", stall_s, kWatchdogExit);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        arm_last_resort(stall_s, stalled);   // re-armed ten times a second while this loop goes round
        Clock::time_point now = Clock::now();
        bool all_left = true, any_stuck = false;
        for (int r = 0; r < size_; r++) {
            Rank& k = ranks_[r];
            if (k.left) continue;
            all_left = false;
            unsigned long t = k.ticks.load(std::memory_order_relaxed), a = k.pipeline ? k.pipeline->progress() : 0;
            if (t != ticks[r] || a != actions[r] || k.pipeline != pipelines[r])
                ticks[r] = t, actions[r] = a, pipelines[r] = k.pipeline, since[r] = now;
            else if (std::chrono::duration<double>(now - since[r]).count() > deadline_s_)
                stuck[size_t(r)] = 1, any_stuck = true;
        }
        if (all_left) {
            ::alarm(0);
            return;
        }
        if (any_stuck) {
            // The headline first, from this stack: it is out even if the details below wait forever
            // for a lock the stopped rank holds (then the last resort ends the process 2 s later).
            write_headline(stuck, first_rank_, limits);
            arm_last_resort(2, "  (no more detail: a stopped thread holds a lock the report needs)\n");
            std::vector<double> idle_s(size_t(size_), 0.0);
            for (int r = 0; r < size_; r++) idle_s[size_t(r)] = std::chrono::duration<double>(now - since[r]).count();
            fire(rank_report(stuck, idle_s));
        }
        left_.wait_for(lock, std::chrono::milliseconds(100));
    }
}

// A line a rank (its step, phase and last actions, or how it ended), and where a stuck rank is
// inside an action, not waiting for a message, that its compute may simply be that long.
std::string Watchdog::rank_report(const std::vector<char>& stuck, const std::vector<double>& idle_s) const {
    std::string report;
    bool computing = false;
    for (int r = 0; r < size_; r++) {
        const Rank& k = ranks_[r];
        std::string line = "  rank " + std::to_string(first_rank_ + r) + ": ";
        if (k.left) {
            line += k.error.empty() ? "finished" : "failed: " + k.error;
        } else if (!k.entered) {
            line += "not started";
        } else {
            int step = k.step.load(std::memory_order_relaxed);
            const char* phase = k.phase.load(std::memory_order_relaxed);
            if (step >= 0) line += "step " + std::to_string(step) + ", ";
            if (phase) line += std::string(phase) + ", ";
            if (k.pipeline) line += "pipeline " + k.pipeline->where() + ", ";
            computing |= stuck[size_t(r)] && k.pipeline && k.pipeline->where().rfind("action", 0) == 0;
            line += "no progress for " + seconds(idle_s[size_t(r)]);
        }
        report += line + "\n";
    }
    if (computing)   // a hang there, or one action that computes for longer than the timeout
        report += "  (inside an action, not waiting for a message: if its compute is that long (a very large "
                  "batch or sequence), a longer timeout lets it finish)\n";
    return report;
}

// The stuck thread never returns, so nothing may wait for it: no join, no static destructors,
// no exit handlers (std::_Exit), and no lock it might hold. That is also why the world is not
// aborted first: its lock may be the one the stuck thread holds, and ending the process ends every
// rank anyway (under MPI, the launcher then ends the other processes).
void Watchdog::fire(const std::string& report) {
    write_stderr(report);
    if (ftrylockfile(stdout) == 0) {   // what the run printed, unless a stuck thread holds stdout
        std::fflush(stdout);           // (the lock is recursive)
        funlockfile(stdout);
    }
    std::_Exit(kWatchdogExit);
}

}  // namespace pt
