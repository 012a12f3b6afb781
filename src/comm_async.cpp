// src/comm_async.cpp — ThreadComm's background sums (AsyncSum, src/async_sum.hpp): the data-parallel
// sum of a layer runs on a thread of its rank while the rank's backward goes on, on a channel of
// its own (2), with allreduce_sum's code and bits. Every wait has the world's deadline.
#include <chrono>
#include <exception>
#include <stdexcept>
#include <thread>

#include "src/comm.hpp"
#include "src/watchdog.hpp"

namespace pt {

// The background sums of one rank: a thread that runs them in the order they started.
struct ThreadComm::Background {
    struct Job {
        float* data;
        std::size_t n;
        std::vector<int> ranks;
        Clock::time_point start;   // when start_sum handed it over
    };
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job> jobs;       // started and not yet done, the one running first
    std::vector<Span> spans;    // of the sums done since the last wait_sums
    std::exception_ptr error;   // the first sum that failed (the later ones are skipped)
    bool stop = false;          // the destructor: the thread ends once its queue is empty
};

ThreadComm::~ThreadComm() {
    if (!bg_) return;
    {   // a sum still queued here means the rank failed: its receives give up instead of waiting
        std::lock_guard<std::mutex> lock(world_.mutex_);
        sums_cancelled_ = true;
    }
    world_.cv_.notify_all();
    {
        std::lock_guard<std::mutex> lock(bg_->mu);
        bg_->stop = true;
    }
    bg_->cv.notify_all();
    bg_->thread.join();
}

void ThreadComm::start_sum(float* data, std::size_t n, const std::vector<int>& ranks) {
    if (!bg_) {
        bg_ = std::make_shared<Background>();
        bg_->thread = std::thread([this] { sum_in_background(); });
    }
    {
        std::lock_guard<std::mutex> lock(bg_->mu);
        bg_->jobs.push_back({data, n, ranks, Clock::now()});
    }
    bg_->cv.notify_all();
}

void ThreadComm::sum_in_background() {
    Background& b = *bg_;
    for (;;) {
        Background::Job job;
        {
            std::unique_lock<std::mutex> lock(b.mu);
            b.cv.wait(lock, [&] { return b.stop || !b.jobs.empty(); });
            if (b.jobs.empty()) return;
            job = b.jobs.front();
        }
        Span span{job.start, {}};
        std::exception_ptr error;
        try {
            if (!b.error) allreduce(job.data, job.n, job.ranks, 2);   // after a failure the peers no longer match
        } catch (...) {
            error = std::current_exception();
        }
        span.end = Clock::now();
        {
            std::lock_guard<std::mutex> lock(b.mu);
            b.jobs.pop_front(), b.spans.push_back(span);
            if (error && !b.error) b.error = error;
        }
        b.cv.notify_all();
    }
}

std::vector<AsyncSum::Span> ThreadComm::wait_sums() {
    if (!bg_) return {};
    Background& b = *bg_;
    std::unique_lock<std::mutex> lock(b.mu);
    // Each of the thread's receives has the deadline, and its error is the one to report; this one,
    // twice as long, is for a thread that stopped moving.
    for (size_t left = b.jobs.size(); !b.jobs.empty(); left = b.jobs.size()) {
        if (!b.cv.wait_for(lock, std::chrono::duration<double>(2 * world_.timeout_s_), [&] { return b.jobs.size() < left; }))
            throw std::runtime_error("rank " + std::to_string(rank_) + ": " + std::to_string(left) +
                                     " data-parallel sums made no progress for the timeout");
        beat();   // a sum done is progress, for the watchdog
    }
    std::vector<Span> spans;
    spans.swap(b.spans);
    if (std::exception_ptr e = b.error) b.error = nullptr, std::rethrow_exception(e);
    return spans;
}

}  // namespace pt
