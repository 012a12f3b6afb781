// src/comm.cpp — ThreadComm: see comm.hpp.
#include "src/comm.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include "kernels/cpu/parallel.hpp"
#include "src/pairwise.hpp"
#include "src/watchdog.hpp"

namespace pt {

namespace {
const int kReduceTag = -2, kResultTag = -3, kBarrierTag = -4;

std::string tag_text(int tag) {
    if (tag == kReduceTag || tag == kResultTag) return "allreduce";
    if (tag == kBarrierTag) return "barrier";
    return tag >= 0 ? pp::tag_label(tag) + " (tag " + std::to_string(tag) + ")" : "tag " + std::to_string(tag);
}
}  // namespace

ThreadWorld::ThreadWorld(int size, double timeout_s)
    : size_(size), timeout_s_(timeout_s), queues_(size_t(3) * size * size) {
    if (size < 1 || timeout_s <= 0)
        throw std::invalid_argument("ThreadWorld: need size >= 1 and timeout > 0, got size=" + std::to_string(size) +
                                    " timeout=" + std::to_string(timeout_s));
}

void ThreadWorld::abort(const std::string& why) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!aborted_) aborted_ = true, why_ = why;
    }
    cv_.notify_all();
}

bool ThreadWorld::aborted() {
    std::lock_guard<std::mutex> lock(mutex_);
    return aborted_;
}

std::string ThreadWorld::abort_reason() {
    std::lock_guard<std::mutex> lock(mutex_);
    return why_;
}

ThreadComm::ThreadComm(ThreadWorld& world, int rank) : world_(world), rank_(rank) {
    if (rank < 0 || rank >= world.size())
        throw std::invalid_argument("ThreadComm: rank " + std::to_string(rank) + " outside a world of " +
                                    std::to_string(world.size()));
}

void ThreadComm::post(int channel, const void* data, std::size_t bytes, int peer, int tag) {
    if (peer < 0 || peer >= world_.size())
        throw std::runtime_error("rank " + std::to_string(rank_) + ": send to rank " + std::to_string(peer) +
                                 " outside a world of " + std::to_string(world_.size()));
    ThreadWorld::Message m{tag, {}};
    m.bytes.assign(static_cast<const char*>(data), bytes, pt::device_of(data));
    pt::synchronize();   // the copy is complete before another thread can see the message
    {
        std::lock_guard<std::mutex> lock(world_.mutex_);
        if (world_.aborted_) throw std::runtime_error("aborted: " + world_.why_);
        world_.queues_[(size_t(channel) * world_.size_ + rank_) * world_.size_ + peer].push_back(std::move(m));
    }
    world_.cv_.notify_all();   // a buffered send waits for nothing: no beat (a receive is one)
}

void ThreadComm::take(int channel, void* data, std::size_t bytes, int peer, int tag) {
    std::string who = "rank " + std::to_string(rank_) + ": recv from rank " + std::to_string(peer);
    if (peer < 0 || peer >= world_.size()) throw std::runtime_error(who + ": no such rank");
    auto& queue = world_.queues_[(size_t(channel) * world_.size_ + peer) * world_.size_ + rank_];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(int64_t(world_.timeout_s_ * 1e6));
    std::unique_lock<std::mutex> lock(world_.mutex_);
    auto gone = [&] { return world_.aborted_ || (channel == 2 && sums_cancelled_); };
    ops::Lender lender(world_.cv_, channel < 2);   // its core runs other ranks' pieces meanwhile
    while (queue.empty() && !gone())
        if (lender.wait(lock, deadline) && queue.empty() && !gone()) {
            char secs[32];
            std::snprintf(secs, sizeof secs, "%g", world_.timeout_s_);
            throw std::runtime_error(who + " timed out after " + secs + " s (waiting for " + tag_text(tag) + ")");
        }
    if (gone()) throw std::runtime_error(world_.aborted_ ? "aborted: " + world_.why_ : who + ": the rank ended mid-sum");
    ThreadWorld::Message m = std::move(queue.front());
    queue.pop_front();
    if (m.tag != tag) throw std::runtime_error(who + ": expected " + tag_text(tag) + " but got " + tag_text(m.tag));
    if (m.bytes.size() != bytes)
        throw std::runtime_error(who + ": " + tag_text(tag) + " has " + std::to_string(m.bytes.size()) +
                                 " bytes, the receive buffer " + std::to_string(bytes));
    pt::copy_bytes(data, m.bytes.data(), bytes);
    pt::synchronize();   // before the message (and its device memory) is freed
    beat();   // a wait that ended is progress, for the watchdog
}

void ThreadComm::send(const void* data, std::size_t bytes, int peer, int tag) { post(0, data, bytes, peer, tag); }
void ThreadComm::recv(void* data, std::size_t bytes, int peer, int tag) { take(0, data, bytes, peer, tag); }

void ThreadComm::group(const std::vector<pp::P2POp>& ops) {
    // Buffered sends never block, so posting every send before any receive cannot deadlock.
    for (const pp::P2POp& op : ops)
        if (op.send) post(0, op.data, op.bytes, op.peer, op.tag);
    for (const pp::P2POp& op : ops)
        if (!op.send) take(0, op.data, op.bytes, op.peer, op.tag);
}

// Reduce to ranks[0], then broadcast: every rank gets the same bits. The sum is PairwiseSum's
// tree over the positions in `ranks` (up to 3 ranks the left fold ((x0 + x1) + x2)), so D replicas'
// gradient trees complete the tree of one device (src/pairwise.hpp).
template <typename T>
void ThreadComm::allreduce(T* data, std::size_t n, const std::vector<int>& ranks, int channel) {
    auto me = std::find(ranks.begin(), ranks.end(), rank_);
    if (me == ranks.end())
        throw std::runtime_error("rank " + std::to_string(rank_) + ": allreduce over a group that does not contain it");
    int root = ranks[0];
    if (rank_ != root) {
        post(channel, data, n * sizeof(T), root, kReduceTag);
        take(channel, data, n * sizeof(T), root, kResultTag);
        return;
    }
    pt::Device where = pt::device_of(data);
    if (!std::is_same_v<T, float> && where.cuda) throw std::logic_error("allreduce_sum(double*): GPU data is not supported");
    pt::PairwiseSum<pt::Array<T>> sum([n](pt::Array<T>& into, pt::Array<T>& from) {
        if constexpr (std::is_same_v<T, float>) pt::dev::accumulate(into.data(), from.data(), int(n));   // on its device
        else for (size_t i = 0; i < n; i++) into[i] += from[i];   // float64 (the loss, norm partials): host only
    });
    pt::Array<T> mine;
    mine.assign(data, n, where);
    sum.push(std::move(mine));
    for (size_t k = 1; k < ranks.size(); k++) {
        pt::Array<T> other(n, where);
        take(channel, other.data(), n * sizeof(T), ranks[k], kReduceTag);
        sum.push(std::move(other));
    }
    pt::Array<T> total = sum.finish();
    pt::copy_bytes(data, total.data(), n * sizeof(T));
    for (size_t k = 1; k < ranks.size(); k++) post(channel, data, n * sizeof(T), ranks[k], kResultTag);
}

void ThreadComm::allreduce_sum(float* data, std::size_t n, const std::vector<int>& ranks) { allreduce(data, n, ranks); }
template void ThreadComm::allreduce<float>(float*, std::size_t, const std::vector<int>&, int);   // comm_async.cpp
void ThreadComm::allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) { allreduce(data, n, ranks); }

void ThreadComm::barrier() {
    if (rank_ != 0) {
        post(1, nullptr, 0, 0, kBarrierTag);
        take(1, nullptr, 0, 0, kBarrierTag);
        return;
    }
    for (int r = 1; r < world_.size(); r++) take(1, nullptr, 0, r, kBarrierTag);
    for (int r = 1; r < world_.size(); r++) post(1, nullptr, 0, r, kBarrierTag);
}

// The calling thread does not only join: it is the watchdog (src/watchdog.hpp), which ends the
// process if a rank makes no progress for the timeout and a grace, even when it never returns.
void run_ranks(ThreadWorld& world, const std::function<void(int rank)>& fn) {
    Watchdog watchdog(world.size(), world.timeout_s());
    std::vector<std::thread> threads;
    std::vector<std::string> errors(world.size());
    for (int r = 0; r < world.size(); r++)
        threads.emplace_back([&, r] {
            watchdog.enter(r);
            try {
                fn(r);
            } catch (const std::exception& e) {
                // An error outside a pipeline step (weights moving to a GPU, the optimizer, a
                // checkpoint) does not say where it happened yet.
                const std::string what = e.what();
                errors[r] = what.rfind("rank ", 0) == 0 ? what : "rank " + std::to_string(r) + ": " + what;
                world.abort(errors[r]);  // no-op if someone (the failing rank) aborted first
            } catch (...) {
                errors[r] = "rank " + std::to_string(r) + ": unknown exception";
                world.abort(errors[r]);
            }
            watchdog.leave(r, errors[r]);
        });
    watchdog.supervise();
    for (std::thread& t : threads) t.join();
    for (const std::string& e : errors)
        if (!e.empty()) throw std::runtime_error(world.abort_reason());
}

}  // namespace pt
