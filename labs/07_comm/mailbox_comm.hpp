// labs/07_comm/mailbox_comm.hpp — lab 07's contract: what your mailbox_comm.cpp defines.
// Read pipeline.hpp's Comm (search "class Comm") first, then labs/07_comm/README.md. The World and
// the class layout are given; you write the four method bodies in mailbox_comm.cpp.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline.hpp"

namespace student {

struct Message {
    int tag;
    std::vector<char> bytes;   // a copy of what was sent
};

// What the ranks (threads) share: a FIFO mailbox per (src, dst), one mutex and one condition
// variable for all of them, the abort flag and the timeout. Given: nothing to write here.
struct World {
    World(int size, double timeout_s) : size(size), timeout_s(timeout_s), boxes(std::size_t(size) * size) {}
    std::deque<Message>& box(int src, int dst) { return boxes[std::size_t(src) * size + dst]; }

    const int size;
    const double timeout_s;            // the longest a recv waits, in seconds
    std::mutex mutex;                  // guards everything below
    std::condition_variable cv;        // notified when a message arrives or the world aborts
    std::vector<std::deque<Message>> boxes;   // [src * size + dst]: the oldest message at the front
    bool aborted = false;
    std::string why;                   // the first abort's reason
};

// One rank's view of the World: pp::Comm's point-to-point part. (allreduce_sum and barrier keep
// pp::Comm's default, which throws: the Pipeline does not need them, lab 08 builds them.)
class MailboxComm : public pp::Comm {
 public:
    MailboxComm(World& world, int rank) : world_(world), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return world_.size; }

    // Task 1. Buffered: copies `bytes` bytes into a new message at the back of box(rank, peer) and
    // returns at once, never waiting for the receiver; wakes whoever waits. After an abort it throws
    // std::runtime_error("aborted: <why>").
    void send(const void* data, std::size_t bytes, int peer, int tag) override;

    // Tasks 1-3. Takes the OLDEST message of box(peer, rank) into `data`. Waits for one at most the
    // world's timeout after the call (a deadline: wake-ups for other mailboxes do not extend it).
    // Throws std::runtime_error, naming itself, the peer and what it waited for:
    //   on the deadline     "rank 1: recv from rank 0 timed out after 0.3 s (waiting for tag 12)"
    //   on an abort         "aborted: <why>"   (also when the world was aborted before the call)
    //   on another tag      "rank 1: recv from rank 0: expected tag 12, got tag 13"
    //   on another size     "rank 1: recv from rank 0: tag 12 has 40 bytes, the receive buffer 24"
    void recv(void* data, std::size_t bytes, int peer, int tag) override;

    // Task 4. Every send of `ops` first, then every receive: a pair of ranks that send to each other
    // in one group then both get past their sends. Returns when all are done.
    void group(const std::vector<pp::P2POp>& ops) override;

    // Task 3. Marks the world aborted (the first reason is kept) and wakes EVERY blocked recv, which
    // then throws "aborted: <why>".
    void abort(const std::string& why) override;

 private:
    World& world_;
    int rank_;
};

}   // namespace student
