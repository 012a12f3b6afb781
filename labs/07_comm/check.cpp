// labs/07_comm/check.cpp — lab 07's check: scripts/lab.sh check 07 (or build/lab_07).
// build/lab_07 --bench measures the deliverable (ping-pong over your Comm against memcpy).
//
// References, none of them your code: the messages the check sent (their order and bytes), the
// world's timeout against a clock, and the tiny model's gradients on one device (every forward,
// then every backward, called on one stage that holds every layer, no Comm at all).
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "labs/07_comm/mailbox_comm.hpp"
#include "labs/pipeline_check.hpp"

using namespace labcheck;
using student::MailboxComm;
using student::World;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
std::string secs(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f s", s);
    return buf;
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs fn(rank) on n threads, one each; returns what each threw ("" when nothing).
std::vector<std::string> on_threads(int n, const std::function<void(int rank)>& fn) {
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; r++)
        threads.emplace_back([&, r] {
            try {
                fn(r);
            } catch (const std::exception& e) {
                errors[size_t(r)] = e.what();
                if (errors[size_t(r)].empty()) errors[size_t(r)] = "(an exception with an empty message)";
            } catch (...) {
                errors[size_t(r)] = "(an exception that is not a std::exception)";
            }
        });
    for (std::thread& t : threads) t.join();
    return errors;
}

// A TODO of the student's anywhere ends the task as "not implemented".
void rethrow_todo(const std::vector<std::string>& errors) {
    for (const std::string& e : errors)
        if (has(e, "not implemented: ")) throw std::runtime_error(e);
}

// Message k from rank src: `bytes` bytes that no other message of the check holds.
std::vector<char> payload(int src, int k, size_t bytes) {
    std::vector<char> p(bytes);
    for (size_t i = 0; i < bytes; i++) p[i] = char((src * 97 + k * 31 + i * 7 + i / 251) & 0xff);
    return p;
}

// ---- task 1: FIFO mailboxes, intact bytes, the tag and the size checked --------------------------
struct Sent {
    int src, tag;
    std::vector<char> bytes;
};

void expect_received(MailboxComm& comm, const Sent& m, int index) {
    std::vector<char> got(m.bytes.size() + 1, char(0x5a));   // one guard byte past the end
    std::string what = "message " + std::to_string(index) + " from rank " + std::to_string(m.src) + " (tag " +
                       std::to_string(m.tag) + ", " + std::to_string(m.bytes.size()) + " bytes)";
    try {
        comm.recv(got.data(), m.bytes.size(), m.src, m.tag);
    } catch (const labcheck::NotImplemented&) {
        throw;
    } catch (const std::exception& e) {
        fail(what + ": your recv threw: " + e.what(),
             "the messages of one (src, dst) pair come out in the order they were sent: take the front of "
             "box(peer, rank); the front holds the message sent first");
    }
    for (size_t i = 0; i < m.bytes.size(); i++)
        if (got[i] != m.bytes[i])
            fail(what + ": byte " + std::to_string(i) + " is yours " + std::to_string((unsigned char)got[i]) +
                     ", sent " + std::to_string((unsigned char)m.bytes[i]),
                 "copy the message's bytes as they were sent: std::vector<char>(p, p + bytes) in send, "
                 "memcpy(data, m.bytes.data(), bytes) in recv");
    if (got.back() != char(0x5a))
        fail(what + ": your recv wrote past the end of the receive buffer", "copy exactly `bytes` bytes");
}

// The tags in box(src, dst), oldest first: "10 11 12".
std::string tags_in(World& w, int src, int dst) {
    std::string s;
    for (const student::Message& m : w.box(src, dst)) s += (s.empty() ? "" : " ") + std::to_string(m.tag);
    return s.empty() ? "(nothing)" : s;
}

void task_fifo() {
    World w(3, 2.0);
    MailboxComm c0(w, 0), c1(w, 1), c2(w, 2);
    // On one thread: every send returns before anything is received (a buffered send).
    const size_t sizes[] = {24, 0, 1000, 7, 4096};
    std::vector<Sent> from0, from2;
    for (int k = 0; k < 5; k++) from0.push_back({0, 10 + k, payload(0, k, sizes[k])});
    for (int k = 0; k < 3; k++) from2.push_back({2, 20 + k, payload(2, k, 100 + 13 * k)});
    for (const Sent& m : from0) c0.send(m.bytes.data(), m.bytes.size(), 1, m.tag);
    for (const Sent& m : from2) c2.send(m.bytes.data(), m.bytes.size(), 1, m.tag);
    std::string holds =
        "after rank 0 sent tags 10 11 12 13 14 to rank 1, box(0, 1) holds " + tags_in(w, 0, 1) + " (front to back)";
    if (tags_in(w, 0, 1) == "14 13 12 11 10")
        fail(holds,
             "your mailbox is LIFO: the newest message would be received first; push_back in send, take the "
             "front in recv");
    if (tags_in(w, 0, 1) != "10 11 12 13 14")
        fail(holds, "a message from rank src to rank dst goes at the back of world_.box(src, dst), src = your rank");
    // Rank 1 takes them in another order between the pairs: each pair is its own FIFO.
    expect_received(c1, from2[0], 0);
    for (int k = 0; k < 5; k++) expect_received(c1, from0[size_t(k)], k);
    for (int k = 1; k < 3; k++) expect_received(c1, from2[size_t(k)], k);

    // The wrong tag, then the wrong size: recv must say so.
    std::vector<char> buf(40);
    c0.send(buf.data(), 40, 1, 37);
    std::string why;
    try {
        c1.recv(buf.data(), 40, 0, 12);
    } catch (const labcheck::NotImplemented&) {
        throw;
    } catch (const std::exception& e) {
        why = e.what();
    }
    if (why.empty() || !has(why, "12") || !has(why, "37"))
        fail("rank 1 asked for tag 12 and the message has tag 37: " +
                 (why.empty() ? std::string("your recv returned") : "your recv threw \"" + why + "\""),
             "throw std::runtime_error(\"rank 1: recv from rank 0: expected tag 12, got tag 37\"): two ranks "
             "that disagree on the order of their messages must hear it");
    c0.send(buf.data(), 40, 1, 12);
    why.clear();
    try {
        c1.recv(buf.data(), 24, 0, 12);
    } catch (const std::exception& e) {
        why = e.what();
    }
    if (why.empty() || !has(why, "40") || !has(why, "24"))
        fail("rank 1 received a 40-byte message into a 24-byte buffer: " +
                 (why.empty() ? std::string("your recv returned") : "your recv threw \"" + why + "\""),
             "throw std::runtime_error(\"rank 1: recv from rank 0: tag 12 has 40 bytes, the receive buffer 24\")");

    // Across threads: rank 1 is asleep in recv when rank 0 sends; the send must wake it.
    World w2(2, 1.0);
    double took = 0;
    std::vector<char> got(64);
    std::vector<char> sent = payload(0, 9, 64);
    std::vector<std::string> errors = on_threads(2, [&](int r) {
        MailboxComm comm(w2, r);
        if (r == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            comm.send(sent.data(), 64, 1, 3);
        } else {
            Clock::time_point t0 = Clock::now();
            comm.recv(got.data(), 64, 0, 3);
            took = since(t0);
        }
    });
    rethrow_todo(errors);
    const char* wake =
        "send must wake the receiver: world_.cv.notify_all() after pushing the message (rank 1 was "
        "asleep in wait_until, and nobody woke it before its deadline)";
    if (!errors[1].empty() || !errors[0].empty())
        fail("rank 1 waited in recv, rank 0 sent 50 ms later: " + (errors[1].empty() ? errors[0] : errors[1]), wake);
    if (took > 0.7)
        fail("rank 1 waited in recv, rank 0 sent 50 ms later: rank 1 got it only after " + secs(took) +
                 " (the world's timeout is 1 s)",
             wake);
    if (got != sent) fail("the message rank 1 got across threads is not the one rank 0 sent", "copy the bytes as sent");
}

// ---- task 2: a peer that never answers -----------------------------------------------------------
void task_deadline() {
    const double timeout = 0.3;
    World w(4, timeout);
    std::atomic<bool> done{false};
    double took = 0;
    bool returned = false;
    std::vector<std::string> errors = on_threads(2, [&](int r) {
        if (r == 0) {   // rank 2 sends to rank 3 every 20 ms for 2 s: each send wakes every waiting rank
            MailboxComm comm(w, 2);
            char byte = 0;
            Clock::time_point t0 = Clock::now();
            while (!done && since(t0) < 2) {
                comm.send(&byte, 1, 3, 0);
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        } else {   // rank 1 waits for rank 0, who never sends
            MailboxComm comm(w, 1);
            char buf[8];
            Clock::time_point t0 = Clock::now();
            try {
                comm.recv(buf, sizeof buf, 0, 12);
                returned = true;
            } catch (...) {
                took = since(t0);
                done = true;
                throw;
            }
            took = since(t0);
            done = true;
        }
    });
    rethrow_todo(errors);
    const std::string& why = errors[1];
    std::string what = "rank 1: recv from rank 0, who never sends (timeout 0.3 s): ";
    if (returned)
        fail(what + "your recv returned after " + secs(took),
             "return only with a message: wait while the box is empty");
    if (!errors[0].empty())
        fail("rank 2's sends to rank 3 threw: " + errors[0], "a send never waits and never throws, unless aborted");
    if (took < timeout - 0.02)
        fail(what + "yours gave up after " + secs(took) + ": \"" + why + "\"",
             "wait until the deadline, now + world_.timeout_s fixed before the loop: wait_until returns early on "
             "every notify (here rank 2's sends), so loop while the box is empty");
    if (took > timeout + 1.0)
        fail(what + "yours threw only after " + secs(took),
             "wait_until(lock, deadline) with the deadline fixed once, before the loop: wait_for(timeout) in a "
             "loop restarts the clock at every wake-up, and rank 2's sends woke it every 20 ms");
    if (!has(why, "rank 1") || !has(why, "rank 0") || !has(why, "timed out") || !has(why, "tag 12"))
        fail(what + "your message \"" + why + "\"",
             "name yourself, the peer and what you waited for: \"rank 1: recv from rank 0 timed out after 0.3 s "
             "(waiting for tag 12)\"; a student reading a hung run's log has nothing else");
}

// ---- task 3: abort wakes every blocked rank ------------------------------------------------------
void task_abort() {
    const double timeout = 1.5, abort_at = 0.15;
    World w(4, timeout);
    std::vector<double> took(4, 0.0);
    std::vector<std::string> errors = on_threads(4, [&](int r) {
        MailboxComm comm(w, r);
        if (r == 0) {
            std::this_thread::sleep_for(std::chrono::duration<double>(abort_at));
            comm.abort("rank 0: the stage failed");
            comm.abort("rank 0: a later reason");   // the first reason is kept
            return;
        }
        char buf[8];
        Clock::time_point t0 = Clock::now();
        try {
            comm.recv(buf, sizeof buf, 0, 5);
        } catch (...) {
            took[size_t(r)] = since(t0);
            throw;
        }
        took[size_t(r)] = since(t0);
    });
    rethrow_todo(errors);
    if (!errors[0].empty())
        fail("rank 0's abort threw: " + errors[0], "abort() only sets the flag and wakes the ranks");
    const char* wake_all =
        "abort() must wake EVERY waiting rank: set the flag under the lock, then cv.notify_all() "
        "(notify_one wakes one rank, no notify none: the others sleep to their deadline); and "
        "recv's wait must end on the flag as well as on a message";
    std::string what = "ranks 1-3 wait in recv from rank 0, which aborts after 0.15 s: ";
    for (int r = 1; r < 4; r++)
        if (errors[size_t(r)].empty())
            fail(what + "rank " + std::to_string(r) + "'s recv returned",
                 "after an abort, recv throws \"aborted: <why>\"");
    // Which ranks a notify_one wakes is up to the system: the report names none of them.
    double latest = 0;
    std::string late_error;
    for (int r = 1; r < 4; r++)
        if (took[size_t(r)] > abort_at + 0.6) {
            if (latest == 0) late_error = errors[size_t(r)];
            latest = std::max(latest, took[size_t(r)]);
        }
    if (latest > 0)
        fail(what + "not every one woke: a recv threw only after " + secs(latest) + " (the timeout is 1.5 s): \"" +
                 late_error + "\"",
             wake_all);
    for (int r = 1; r < 4; r++)
        if (errors[size_t(r)].rfind("aborted: ", 0) != 0 || !has(errors[size_t(r)], "the stage failed"))
            fail(what + "rank " + std::to_string(r) + "'s recv threw \"" + errors[size_t(r)] + "\"",
                 "throw std::runtime_error(\"aborted: \" + world_.why), the first reason given to abort()");
    // After the abort, every call fails at once.
    MailboxComm c1(w, 1), c2(w, 2);
    char buf[8] = {};
    std::string why;
    Clock::time_point t0 = Clock::now();
    try {
        c1.recv(buf, sizeof buf, 2, 6);
    } catch (const std::exception& e) {
        why = e.what();
    }
    if (why.rfind("aborted: ", 0) != 0 || since(t0) > 0.5)
        fail("a recv called after the abort: " +
                 (why.empty() ? "it returned" : "\"" + why + "\" after " + secs(since(t0))),
             "check the flag before waiting: an aborted world answers every recv with \"aborted: <why>\" at once");
    why.clear();
    try {
        c2.send(buf, sizeof buf, 1, 6);
    } catch (const std::exception& e) {
        why = e.what();
    }
    if (why.rfind("aborted: ", 0) != 0)
        fail("a send called after the abort: " + (why.empty() ? std::string("it returned") : "\"" + why + "\""),
             "send checks the flag under the lock and throws \"aborted: <why>\"");
}

// ---- task 4: group ------------------------------------------------------------------------------
void task_group() {
    World w(2, 1.0);
    std::vector<char> a = payload(0, 1, 40), b = payload(1, 2, 56), self = payload(0, 3, 16);
    std::vector<char> a_got(40), b_got(56), self_got(16);
    // Each rank lists its receive before its send, as a Pipeline may; rank 0 also copies to itself.
    std::vector<std::string> errors = on_threads(2, [&](int r) {
        MailboxComm comm(w, r);
        if (r == 0)
            comm.group({{false, b_got.data(), 56, 1, 8},
                        {false, self_got.data(), 16, 0, 9},
                        {true, a.data(), 40, 1, 7},
                        {true, self.data(), 16, 0, 9}});
        else
            comm.group({{false, a_got.data(), 40, 0, 7}, {true, b.data(), 56, 0, 8}});
    });
    rethrow_todo(errors);
    std::string what =
        "rank 0 group{recv tag 8 from 1, recv tag 9 from 0, send tag 7 to 1, send tag 9 to 0}, "
        "rank 1 group{recv tag 7 from 0, send tag 8 to 0}";
    for (int r = 0; r < 2; r++)
        if (!errors[size_t(r)].empty())
            fail(what + "\nrank " + std::to_string(r) + " threw: " + errors[size_t(r)],
                 has(errors[size_t(r)], "timed out")
                     ? "your group received before it sent: each rank waited for a message the other had not "
                       "sent yet; post every send of the group first (they never block), then the receives"
                     : "group calls your send and recv: run every send of ops, then every receive");
    if (a_got != a || b_got != b || self_got != self)
        fail(what + "\n" +
                 (a_got != a   ? "rank 1's tag 7"
                  : b_got != b ? "rank 0's tag 8"
                               : "rank 0's tag 9 (to itself)") +
                 " holds other bytes than were sent",
             "each op's data pointer is where its bytes come from (send) or go (recv)");
}

// ---- task 5: a pipeline step through your Comm --------------------------------------------------
const int kP = 4, kM = 8;

// What train_step does before the schedule: zeroed gradients, micro-batch m = rows m·B/M.., one scale.
void begin_step(pt::TransformerStage& stage, const pt::Batch& batch) {
    stage.zero_grads();
    stage.begin_step(&batch, kRows / kM, 0, 0, 1.0f / float(batch.num_targets()));
}

// "" when every gradient holds the same bits; else the first that differs, named as in a checkpoint.
std::string first_gradient_difference(const lab::Stages& yours, const lab::Stages& reference) {
    std::vector<pt::Layer*> a = yours.layers(), b = reference.layers();
    for (size_t i = 0; i < a.size() && i < b.size(); i++)
        for (const pt::ParamInfo& pi : a[i]->params_info) {
            std::string d =
                first_difference(a[i]->grads.data() + pi.offset, b[i]->grads.data() + pi.offset, pi.numel,
                                 pi.shape.size() == 2 ? size_t(pi.shape[1]) : 1, "the gradient of " + pi.name);
            if (!d.empty()) return d;
        }
    return "";
}

// The pipeline step needs tasks 1 and 4 first: without FIFO mailboxes or a group that sends first
// it fails at a place that depends on timing. Checked on one rank, talking to itself.
void require_fifo_and_group() {
    World w(1, 0.2);
    MailboxComm comm(w, 0);
    int one = 1, two = 2, got[2] = {0, 0};
    std::string why;
    try {
        comm.send(&one, sizeof one, 0, 1), comm.send(&two, sizeof two, 0, 2);
        comm.recv(&got[0], sizeof one, 0, 1), comm.recv(&got[1], sizeof two, 0, 2);
    } catch (const labcheck::NotImplemented&) {
        throw;
    } catch (const std::exception& e) {
        why = e.what();
    }
    if (!why.empty() || got[0] != 1 || got[1] != 2)
        fail("rank 0 sent tags 1 and 2 to itself: " +
                 (why.empty() ? "it received them out of order" : "your recv threw: " + why),
             "make task 1 pass first: each mailbox is FIFO");
    try {
        comm.group({{false, &got[0], sizeof one, 0, 3}, {true, &one, sizeof one, 0, 3}});
    } catch (const labcheck::NotImplemented&) {
        throw;
    } catch (const std::exception& e) {
        fail("rank 0's group{recv tag 3 from rank 0, send tag 3 to rank 0}: " + std::string(e.what()),
             "make task 4 pass first: a group sends first, then receives");
    }
}

void task_pipeline() {
    require_fifo_and_group();
    const lab::Data& d = tiny_data();
    pt::Batch batch = lab::batch_of(d, kRows);
    // The reference: one stage with every layer, every forward then every backward, no Comm.
    lab::Stages one = lab::make_stages(d.cfg, 1);
    begin_step(*one.stages[0], batch);
    for (int mb = 0; mb < kM; mb++) one.stages[0]->forward(mb, 0);
    for (int mb = 0; mb < kM; mb++) one.stages[0]->backward(mb, 0);
    // Yours: pp::one_f_one_b(4, 8), a rank per thread, every transfer through your MailboxComm.
    lab::Stages m = lab::make_stages(d.cfg, kP);
    World w(kP, 3.0);
    std::vector<std::string> errors = on_threads(kP, [&](int r) {
        MailboxComm comm(w, r);
        begin_step(*m.stages[size_t(r)], batch);
        pp::Pipeline pipe(pp::one_f_one_b(kP, kM), 1, *m.stages[size_t(r)], comm, r, {0, 1, 2, 3});
        pipe.run_step();
    });
    rethrow_todo(errors);
    // The first failure, not the "aborted: ..." it caused on the other ranks.
    std::string first;
    for (const std::string& e : errors)
        if (!e.empty() && (first.empty() || (has(first, "aborted: ") && !has(e, "aborted: ")))) first = e;
    if (!first.empty())
        fail("1F1B on 4 threads through your MailboxComm: " + first,
             has(first, "timed out")  ? "a transfer never arrived: does send notify, and does group send first?"
             : has(first, "expected") ? "a rank got another micro-batch than it asked for: take the OLDEST message "
                                        "of box(peer, rank), the pipeline sends in order"
             : has(first, " bytes")   ? "a message changed size on the way: copy exactly the bytes sent"
                                      : "read the message: the Pipeline names the rank and the action");
    std::string differs = first_gradient_difference(m, one);
    if (!differs.empty())
        fail("after 1F1B on 4 threads through your MailboxComm: " + differs,
             "every transfer arrived but some bytes changed: copy the message's bytes exactly, and never hand "
             "a message to two receives");
    double yours = m.stages[kP - 1]->loss_sum(), expected = one.stages[0]->loss_sum();
    if (std::memcmp(&yours, &expected, sizeof(double)) != 0)
        fail("the loss after 1F1B through your MailboxComm: yours " + num(yours) + ", one device " + num(expected),
             "the activations arrive changed: copy the message's bytes exactly");
}

// ---- the deliverable: one transfer over your Comm against memcpy --------------------------------
double best_memcpy_s(size_t bytes) {
    std::vector<char> src(bytes, 1), dst(bytes);
    double best = 1e9;
    for (int rep = 0; rep < 20; rep++) {
        Clock::time_point t0 = Clock::now();
        std::memcpy(dst.data(), src.data(), bytes);
        best = std::min(best, since(t0));
    }
    volatile char sink = dst[bytes / 2];   // the copy is used: the compiler keeps it
    (void)sink;
    return best;
}

// Rank 0 sends, rank 1 sends it back, `reps` times: half the best round trip is one transfer.
double best_one_way_s(size_t bytes, int reps) {
    World w(2, 10.0);
    std::vector<std::vector<char>> buf(2, std::vector<char>(bytes, 1));
    double best = 1e9;
    std::vector<std::string> errors = on_threads(2, [&](int r) {
        MailboxComm comm(w, r);
        for (int i = 0; i < reps; i++) {
            Clock::time_point t0 = Clock::now();
            if (r == 0)
                comm.send(buf[0].data(), bytes, 1, i), comm.recv(buf[0].data(), bytes, 1, i);
            else
                comm.recv(buf[1].data(), bytes, 0, i), comm.send(buf[1].data(), bytes, 0, i);
            if (r == 0) best = std::min(best, since(t0) / 2);
        }
    });
    for (const std::string& e : errors)
        if (!e.empty()) throw std::runtime_error(e);
    return best;
}

int bench() {
    const lab::Data& d = tiny_data();
    size_t activation = size_t(kRows / kM) * kTokens * size_t(d.cfg.hidden_size) * sizeof(float);
    std::printf(
        "one transfer over your MailboxComm (half the best ping-pong round trip between 2 threads)\n"
        "against memcpy of the same bytes; the tiny model's activation of one micro-batch is (%d, %d, %d)\n"
        "floats = %zu bytes (1F1B on 4 ranks, M = 8: %d of them per step per boundary, each way)\n\n",
        kRows / kM, kTokens, d.cfg.hidden_size, activation, kM);
    try {
        best_one_way_s(1024, 500);   // a warm-up: the threads, the allocator, the caches
    } catch (const std::exception& e) {
        std::printf("your Comm threw: %s\n", printable(e.what()).c_str());
        return 1;
    }
    std::printf("| bytes | one transfer (us) | formula: t(1 KB) + 2 x memcpy (us) | transfer / formula | GB/s |\n");
    std::printf("| --- | --- | --- | --- | --- |\n");
    double fixed = 0;   // t(1 KB): the cost of a transfer that copies almost nothing
    for (size_t bytes : {size_t(1) << 10, activation, size_t(1) << 16, size_t(1) << 20, size_t(16) << 20}) {
        int reps = int(std::clamp<size_t>((size_t(256) << 20) / bytes, 10, 2000));
        double t = 0;
        try {
            t = best_one_way_s(bytes, reps);
        } catch (const std::exception& e) {
            std::printf("your Comm threw: %s\n", printable(e.what()).c_str());
            return 1;
        }
        if (fixed == 0) fixed = t;
        double formula = fixed + 2 * best_memcpy_s(bytes);
        std::printf("| %zu%s | %.1f | %.1f | %.2f | %.2f |\n", bytes, bytes == activation ? " (activation)" : "",
                    t * 1e6, formula * 1e6, t / formula, bytes / t / 1e9);
    }
    std::printf(
        "\nformula: one transfer = a fixed cost (waking the receiver's thread, allocating the message),\n"
        "measured at 1 KB, + 2 copies (into the message, out of it) at memcpy's speed (best of 20, warm\n"
        "caches). %u cores here.\n",
        std::thread::hardware_concurrency());
    return 0;
}

}   // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::string(argv[1]) == "--bench") return bench();
    Lab lab{"07", "a Comm over threads, with deadlines", "labs/07_comm/mailbox_comm.cpp", 1, {}};
    lab.tasks.push_back(
        {"send/recv: buffered sends, one FIFO mailbox per (src, dst), bytes intact, wrong tag "
         "or size reported, a sleeping receiver woken",
         "the check's own messages, their order and bytes", task_fifo,
         "a send that waits for its receiver (buffer it: it must return at once), or a recv "
         "that waits without a deadline",
         5});
    lab.tasks.push_back(
        {"deadline: a recv from a rank that never sends throws after the timeout (0.3 s), naming "
         "both ranks and the tag",
         "the world's timeout against a clock", task_deadline,
         "recv waited forever: wait_until(lock, deadline) with the deadline fixed once, before "
         "the loop. cv.wait() never times out, and wait_for(timeout) in a loop restarts the clock "
         "at every wake-up (another rank's sends wake it every 20 ms here)",
         4});
    lab.tasks.push_back({"abort: three ranks blocked in recv all throw \"aborted: ...\" promptly; later calls too",
                         "a clock: the abort comes at 0.15 s, the timeout is 1.5 s", task_abort,
                         "a rank never woke from the abort: notify_all after setting the flag, and end the "
                         "wait on the flag",
                         5});
    lab.tasks.push_back({"group: two ranks that each list a receive before a send to the other both finish",
                         "the check's messages", task_group,
                         "your group received before it sent, with a recv that never times out", 4});
    lab.tasks.push_back(
        {"1F1B (P = 4, M = 8) on 4 threads through your Comm: the tiny model's gradients have "
         "one device's bits",
         "one stage holding every layer: every forward, then every backward, no Comm", task_pipeline,
         "a transfer that never arrives, and a recv without a deadline", 15});
    return run(lab, argc, argv);
}
