// labs/07_comm/mailbox_comm.cpp — lab 07: a Comm over threads, with deadlines. Your file: replace
// each TODO(student) body. Check it with: scripts/lab.sh check 07
#include "labs/07_comm/mailbox_comm.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "labs/todo.hpp"

namespace student {

// TODO(student) Task 1: build the Message (a copy of the bytes) before taking the lock, push it at
// the back of world_.box(rank_, peer) under the lock, then notify the condition variable: the
// receiver may be asleep in recv.
void MailboxComm::send(const void* data, std::size_t bytes, int peer, int tag) {
    labcheck::not_implemented("MailboxComm::send");
}

// TODO(student) Tasks 1-3: fix the deadline first (now + world_.timeout_s), then wait under the
// lock with world_.cv.wait_until(lock, deadline) while the mailbox is empty and the world is not
// aborted. Then: aborted? throw. Timed out? throw. Else take the front message, check its tag and
// size, copy it out. The messages to throw are in mailbox_comm.hpp.
void MailboxComm::recv(void* data, std::size_t bytes, int peer, int tag) {
    labcheck::not_implemented("MailboxComm::recv");
}

// TODO(student) Task 4: the sends of `ops` first, then the receives.
void MailboxComm::group(const std::vector<pp::P2POp>& ops) { labcheck::not_implemented("MailboxComm::group"); }

// TODO(student) Task 3: under the lock, set the flag and keep the first reason; then wake every
// waiting rank.
void MailboxComm::abort(const std::string& why) { labcheck::not_implemented("MailboxComm::abort"); }

}   // namespace student
