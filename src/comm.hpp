// src/comm.hpp — ThreadComm: the in-process pp::Comm. Every pipeline rank is a thread; messages
// are copied into per-(src, dst) FIFO queues. A message from GPU memory stays on the GPU: it is a
// device-to-device copy in, and one out, so stages sharing one GPU never go through the host. Sends are buffered (more lenient than NCCL, which is
// fine: pp::validate proves each schedule safe with unbuffered sends). Every wait has a timeout,
// and abort() wakes every waiting rank, so a failure anywhere ends the run instead of hanging it.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline.hpp"
#include "src/async_sum.hpp"
#include "src/tags.hpp"
#include "src/device.hpp"

namespace pt {

// The shared state of N ranks: mailboxes, the abort flag and the timeout.
class ThreadWorld {
 public:
    explicit ThreadWorld(int size, double timeout_s = 60.0);
    int size() const { return size_; }
    double timeout_s() const { return timeout_s_; }
    void abort(const std::string& why);  // the first reason is kept
    bool aborted();
    std::string abort_reason();

 private:
    friend class ThreadComm;
    struct Message {
        int tag;
        pt::Array<char> bytes;   // on the sender's device
    };
    int size_;
    double timeout_s_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<std::deque<Message>> queues_;  // [channel][src][dst]: 0 p2p, 1 collectives, 2 background sums
    bool aborted_ = false;
    std::string why_;
};

class ThreadComm : public pp::Comm, public AsyncSum {
 public:
    ThreadComm(ThreadWorld& world, int rank);
    ~ThreadComm() override;
    int rank() const override { return rank_; }
    int size() const override { return world_.size(); }
    void send(const void* data, std::size_t bytes, int peer, int tag) override;
    void recv(void* data, std::size_t bytes, int peer, int tag) override;
    void group(const std::vector<pp::P2POp>& ops) override;  // sends first (buffered), then receives
    void allreduce_sum(float* data, std::size_t n, const std::vector<int>& ranks) override;
    void allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) override;
    void barrier() override;
    void abort(const std::string& why) override { world_.abort(why); }
    void start_sum(float* data, std::size_t n, const std::vector<int>& ranks) override;   // src/comm_async.cpp
    std::vector<Span> wait_sums() override;

 private:
    void post(int channel, const void* data, std::size_t bytes, int peer, int tag);
    void take(int channel, void* data, std::size_t bytes, int peer, int tag);
    template <typename T>
    void allreduce(T* data, std::size_t n, const std::vector<int>& ranks, int channel = 1);
    void sum_in_background();   // the background thread's loop

    ThreadWorld& world_;
    int rank_;
    struct Background;   // the thread, its queue of sums and their spans (src/comm_async.cpp)
    std::shared_ptr<Background> bg_;   // shared_ptr: comm.cpp never sees the type
    bool sums_cancelled_ = false;      // under the world's mutex: the thread's receives give up
};

// Runs fn(rank) on world.size() threads. If any throws, the world is aborted (waking the others)
// and ONE std::runtime_error is thrown whose message is the first failure's. Meanwhile the calling
// thread is the ranks' watchdog: a rank that makes no progress (pt::beat, a message, a pipeline
// action) for the world's timeout plus a grace ends the process (src/watchdog.hpp).
void run_ranks(ThreadWorld& world, const std::function<void(int rank)>& fn);

}  // namespace pt
