// tests/rendezvous_comm.hpp — a pp::Comm over threads with NCCL's semantics, the strictest a
// schedule must survive: a send completes only when its receive is posted (nothing is buffered),
// each link (sender, receiver) FIFO. pp::validate promises every schedule it accepts runs to the
// end this way; ThreadComm buffers its sends, so it cannot show that. Used by test_pipeline_exec
// and tests/fuzz/fuzz_schedule_csv.cpp. A wait past 5 s is a hang: it aborts every rank.
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipeline.hpp"

namespace test {

// An unbuffered transport over threads: the k-th send from a to b meets the k-th receive of b
// from a; whichever is posted second copies the bytes, and a group returns when all of its
// operations have met theirs. A mismatch (tag or size) or a wait past the deadline aborts all.
class RendezvousWorld {
 public:
    explicit RendezvousWorld(int P) : P_(P), links_(size_t(P) * P), sent_(size_t(P) * P, 0), received_(size_t(P) * P, 0) {}

    void group(int rank, const std::vector<pp::P2POp>& ops) {
        std::unique_lock<std::mutex> lock(mu_);
        std::vector<Transfer*> mine;
        for (const pp::P2POp& op : ops) mine.push_back(&post(rank, op));
        cv_.notify_all();
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        auto all_done = [&] { return aborted_ || std::all_of(mine.begin(), mine.end(), [](Transfer* t) { return t->done; }); };
        if (!cv_.wait_until(lock, deadline, all_done)) abort_locked("rank " + std::to_string(rank) + " waited 5 s: a hang");
        if (aborted_) throw std::runtime_error(why_);
    }
    void abort(const std::string& why) {   // wakes every waiting rank, which then throws `why`
        std::lock_guard<std::mutex> lock(mu_);
        stop(why);
    }

 private:
    struct Transfer {
        const void* from = nullptr;
        void* to = nullptr;
        size_t send_bytes = 0, recv_bytes = 0;
        int send_tag = -1, recv_tag = -1;
        bool done = false;
    };
    Transfer& post(int rank, const pp::P2POp& op) {
        if (op.peer < 0 || op.peer >= P_) abort_locked("a transfer to rank " + std::to_string(op.peer));
        size_t link = op.send ? size_t(rank) * P_ + op.peer : size_t(op.peer) * P_ + rank;
        size_t k = (op.send ? sent_ : received_)[link]++;
        while (links_[link].size() <= k) links_[link].emplace_back();   // a deque: references stay valid
        Transfer& t = links_[link][k];
        if (op.send) t.from = op.data, t.send_bytes = op.bytes, t.send_tag = op.tag;
        else t.to = op.data, t.recv_bytes = op.bytes, t.recv_tag = op.tag;
        if (t.send_tag >= 0 && t.recv_tag >= 0) {
            if (t.send_tag != t.recv_tag || t.send_bytes != t.recv_bytes)
                abort_locked("link " + std::to_string(link / P_) + "->" + std::to_string(link % P_) + ": send of tag " +
                             std::to_string(t.send_tag) + " met the receive of tag " + std::to_string(t.recv_tag));
            std::memcpy(t.to, t.from, t.send_bytes);
            t.done = true;
        }
        return t;
    }
    void stop(const std::string& why) {   // the first reason is kept
        if (!aborted_) aborted_ = true, why_ = why;
        cv_.notify_all();
    }
    [[noreturn]] void abort_locked(const std::string& why) {
        stop(why);
        throw std::runtime_error(why_);
    }

    int P_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::deque<Transfer>> links_;   // [src * P + dst]
    std::vector<size_t> sent_, received_;       // [src * P + dst]: operations posted so far
    bool aborted_ = false;
    std::string why_;
};

class RendezvousComm : public pp::Comm {
 public:
    RendezvousComm(RendezvousWorld& world, int rank, int P) : world_(world), rank_(rank), P_(P) {}
    int rank() const override { return rank_; }
    int size() const override { return P_; }
    void send(const void* data, size_t bytes, int peer, int tag) override {
        group({{true, const_cast<void*>(data), bytes, peer, tag}});
    }
    void recv(void* data, size_t bytes, int peer, int tag) override { group({{false, data, bytes, peer, tag}}); }
    void group(const std::vector<pp::P2POp>& ops) override { world_.group(rank_, ops); }
    void abort(const std::string& why) override { world_.abort(why); }

 private:
    RendezvousWorld& world_;
    int rank_, P_;
};

// Runs step(rank, comm) on one thread a rank, all over one RendezvousWorld; each rank's failure
// message, or "" (a rank that throws aborts the others through the world, so none waits forever).
template <typename Step>
std::vector<std::string> run_unbuffered(int P, Step step) {
    RendezvousWorld world(P);
    std::vector<std::string> errors(P);
    std::vector<std::thread> threads;
    for (int r = 0; r < P; r++)
        threads.emplace_back([&, r] {
            RendezvousComm comm(world, r, P);
            try {
                step(r, comm);
            } catch (const std::exception& e) {
                errors[r] = e.what();
                comm.abort(e.what());
            }
        });
    for (std::thread& t : threads) t.join();
    return errors;
}

}  // namespace test
