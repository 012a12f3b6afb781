// labs/solutions/07_comm/mailbox_comm.cpp — lab 07's answer (what a student should end with).
#include "labs/07_comm/mailbox_comm.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace student {

namespace {
std::string seconds_text(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", s);
    return buf;
}
}   // namespace

void MailboxComm::send(const void* data, std::size_t bytes, int peer, int tag) {
    const char* p = static_cast<const char*>(data);
    Message m{tag, std::vector<char>(p, p + bytes)};   // copied outside the lock: other ranks keep going
    {
        std::lock_guard<std::mutex> lock(world_.mutex);
        if (world_.aborted) throw std::runtime_error("aborted: " + world_.why);
        world_.box(rank_, peer).push_back(std::move(m));
    }
    world_.cv.notify_all();   // the receiver may be asleep (notify_one could wake another rank instead)
}

void MailboxComm::recv(void* data, std::size_t bytes, int peer, int tag) {
    std::string who = "rank " + std::to_string(rank_) + ": recv from rank " + std::to_string(peer);
    // The deadline is fixed once: a wake-up for another mailbox must not restart the clock.
    auto timeout = std::chrono::duration<double>(world_.timeout_s);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lock(world_.mutex);
    std::deque<Message>& box = world_.box(peer, rank_);
    auto arrived = [&] { return world_.aborted || !box.empty(); };
    while (!arrived())
        if (world_.cv.wait_until(lock, deadline) == std::cv_status::timeout && !arrived())
            throw std::runtime_error(who + " timed out after " + seconds_text(world_.timeout_s) +
                                     " s (waiting for tag " + std::to_string(tag) + ")");
    if (world_.aborted) throw std::runtime_error("aborted: " + world_.why);
    Message m = std::move(box.front());   // the oldest: each mailbox is FIFO
    box.pop_front();
    lock.unlock();   // the copy out needs no lock: the message is ours now
    if (m.tag != tag)
        throw std::runtime_error(who + ": expected tag " + std::to_string(tag) + ", got tag " + std::to_string(m.tag));
    if (m.bytes.size() != bytes)
        throw std::runtime_error(who + ": tag " + std::to_string(tag) + " has " + std::to_string(m.bytes.size()) +
                                 " bytes, the receive buffer " + std::to_string(bytes));
    if (bytes > 0) std::memcpy(data, m.bytes.data(), bytes);
}

void MailboxComm::group(const std::vector<pp::P2POp>& ops) {
    // Sends first: they never block, so two ranks that send to each other both reach their receives.
    std::vector<pp::P2POp> ordered(ops);
    std::stable_partition(ordered.begin(), ordered.end(), [](const pp::P2POp& op) { return op.send; });
    for (const pp::P2POp& op : ordered) {
        if (op.send)
            send(op.data, op.bytes, op.peer, op.tag);
        else
            recv(op.data, op.bytes, op.peer, op.tag);
    }
}

void MailboxComm::abort(const std::string& why) {
    {
        std::lock_guard<std::mutex> lock(world_.mutex);
        if (!world_.aborted) world_.aborted = true, world_.why = why;
    }
    world_.cv.notify_all();   // every blocked recv wakes up, sees the flag and throws
}

}   // namespace student
