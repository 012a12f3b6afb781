// src/mpi_comm.cpp — see mpi_comm.hpp. Always compiled: launched_by_mpi() and mpi_built() exist in
// every build; the MPI parts only where CMake found MPI (PIPETRAIN_MPI), stubs that throw elsewhere.
#include "src/mpi_comm.hpp"

#include <cstdlib>
#include <stdexcept>

namespace pt {

bool launched_by_mpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

#ifndef PIPETRAIN_MPI

bool mpi_built() { return false; }

// Nothing below can run: every MpiComm and run_mpi_rank needs an MpiWorld, whose constructor throws.
struct MpiWorld::Comms {};
MpiWorld::MpiWorld(double timeout_s) : timeout_s_(timeout_s) {
    throw std::runtime_error("this pipetrain was built without MPI: install libopenmpi-dev (scripts/setup.sh) and rebuild");
}
MpiWorld::~MpiWorld() = default;
void MpiWorld::abort(const std::string& why, int code) { (void)why, std::_Exit(code); }
void MpiWorld::broadcast(void*, std::size_t, int) {}
struct MpiComm::Sends {};
struct MpiComm::Background {};
MpiComm::MpiComm(MpiWorld& world) : world_(world) {}
void MpiComm::start_sum(float*, std::size_t, const std::vector<int>&) {}
std::vector<AsyncSum::Span> MpiComm::wait_sums() { return {}; }
MpiComm::~MpiComm() = default;
void MpiComm::send(const void*, std::size_t, int, int) {}
void MpiComm::recv(void*, std::size_t, int, int) {}
void MpiComm::group(const std::vector<pp::P2POp>&) {}
void MpiComm::allreduce_sum(float*, std::size_t, const std::vector<int>&) {}
void MpiComm::allreduce_sum(double*, std::size_t, const std::vector<int>&) {}
void MpiComm::barrier() {}
void run_mpi_rank(MpiWorld& world, const std::function<void(pp::Comm& comm)>&) { world.abort("no MPI"); }

}  // namespace pt

#else   // PIPETRAIN_MPI

}  // namespace pt

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <list>
#include <new>
#include <thread>

#include "kernels/cpu/parallel.hpp"
#include "src/device.hpp"
#include "src/pairwise.hpp"
#include "src/watchdog.hpp"

// Every MPI call: file:line, MPI's error string and the call, then throw. The communicators return
// errors (MPI_ERRORS_RETURN) instead of MPI's default of ending the job without a word of ours.
#define MPI_CHECK(call)                                                                                  \
    do {                                                                                                 \
        int e_ = (call);                                                                                 \
        if (e_ != MPI_SUCCESS)                                                                           \
            throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +            \
                                     ": MPI error: " + mpi_error_text(e_) + " (" #call ")");             \
    } while (0)

namespace pt {

namespace {
std::string mpi_error_text(int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "error code " + std::to_string(code);
    return std::string(text, len);
}

// Collectives run on a communicator of their own, so their tags never meet a pipeline's.
const int kReduceTag = 1, kGatherTag = 2;

using Clock = std::chrono::steady_clock;

std::string seconds_text(double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", s);
    return text;
}

// MPI counts are ints: a larger message would need derived datatypes, which no pipetrain tensor needs.
int count_of(std::size_t bytes, const std::string& who) {
    if (bytes > std::size_t(INT_MAX))
        throw std::runtime_error(who + ": " + std::to_string(bytes) + " bytes is more than one MPI message carries (2 GiB)");
    return int(bytes);
}

// Polls until done() says so, sleeping a little longer each time (a yield first: a message
// usually arrives within microseconds in a pipeline's steady state; later up to 1 ms, so a
// rank waiting for seconds leaves the core to the others). Throws timeout() at the deadline.
template <typename Done, typename Timeout>
void poll_until(double timeout_s, Done done, Timeout timeout) {
    Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    if (done()) return;
    ops::ProcessWaiting waiting;   // this core is idle meanwhile: the node's other processes may use it
    for (int k = 0; !done(); k++) {
        if (Clock::now() > deadline) timeout();
        if (k < 100) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 << std::min(k - 100, 7))));
    }
}
}  // namespace

struct MpiWorld::Comms {
    MPI_Comm p2p = MPI_COMM_NULL;   // the pipeline's sends and receives
    MPI_Comm coll = MPI_COMM_NULL;  // all-reduce, barrier, broadcast
    MPI_Win waiting = MPI_WIN_NULL;  // the node's count of waiting processes, in shared memory
};

bool mpi_built() { return true; }

namespace {
// Runs fn on this thread while a watchdog watches it from another (src/watchdog.hpp), which ends
// the process if fn stops making progress for the timeout and a grace. Returns fn's error, or "".
std::string watched(double timeout_s, int rank, const std::function<void()>& fn) {
    Watchdog watchdog(1, timeout_s, rank);
    std::thread supervisor([&] { watchdog.supervise(); });
    std::string error;
    watchdog.enter(0);
    try {
        fn();
    } catch (const std::exception& e) {
        error = e.what();
    } catch (...) {
        error = "unknown exception";
    }
    watchdog.leave(0, error);
    supervisor.join();
    return error;
}

// The rank the launcher gave this process, for the watchdog's report before MPI can say it.
int launcher_rank() {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
        if (const char* s = std::getenv(v)) return std::atoi(s);
    return 0;
}
}  // namespace

namespace {
// The node's processes share one counter of those that wait (kernels/cpu/parallel.hpp): a waiting
// process lends its core to the others' kernels. Where MPI offers no shared memory, nobody lends.
void share_waiting(MPI_Comm node, int local_rank, int local_size, MPI_Win* win) {
    static_assert(std::atomic<int>::is_always_lock_free, "an atomic in shared memory must not hold a lock");
    void* base = nullptr;
    const MPI_Aint bytes = local_rank == 0 ? MPI_Aint(sizeof(std::atomic<int>)) : 0;
    if (MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, node, &base, win) != MPI_SUCCESS) return;
    MPI_Aint size = 0;
    int unit = 0;
    MPI_CHECK(MPI_Win_shared_query(*win, 0, &size, &unit, &base));
    if (local_rank == 0) new (base) std::atomic<int>(0);
    MPI_CHECK(MPI_Barrier(node));   // initialised before anyone counts (watched, as all of start)
    ops::lend_between_processes(static_cast<std::atomic<int>*>(base), local_size);
}
}  // namespace

MpiWorld::MpiWorld(double timeout_s) : comms_(std::make_unique<Comms>()), timeout_s_(timeout_s) {
    if (timeout_s <= 0) throw std::invalid_argument("MpiWorld: need a timeout > 0, got " + seconds_text(timeout_s));
    // MPI_Init and the node split wait for every process, with no deadline of MPI's and no
    // nonblocking form before MPI 4: a watchdog gives them ours, as run_mpi_rank does the steps.
    std::string error = watched(timeout_s, launcher_rank(), [&] { start(); });
    if (!error.empty()) throw std::runtime_error(error);
}

void MpiWorld::start() {
    // FUNNELED: only the main thread calls MPI; the watchdog thread never does.
    int provided = 0;
    // Open MPI's TCP transport sends a message over its eager limit (64 KiB) only once the receiver
    // has asked for it, and then in pieces, each while the sender is inside an MPI call: an
    // activation sent before a layer's compute waited for the end of it. Up to 4 MiB it now goes at
    // once, into the socket (across two hosts, each rank of a 2-stage 1F1B of `small` waited 15 ms a
    // step instead of 34-37). Its TCP progress thread would move larger messages too, but made the
    // replicas' 28 MB all-reduce 1.5x slower. A launcher's setting is kept; other MPIs ignore it.
    setenv("OMPI_MCA_btl_tcp_eager_limit", "4194304", /*overwrite=*/0);
    beat("MPI start: MPI_Init");
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (provided < MPI_THREAD_FUNNELED) throw std::runtime_error("MPI: this MPI library offers no MPI_THREAD_FUNNELED");
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_CHECK(MPI_Get_processor_name(name, &len));
    host_.assign(name, len);
    void* ub = nullptr;
    int found = 0;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found));
    tag_ub_ = found ? *static_cast<int*>(ub) : 32767;   // 32767: the least the standard allows
    // The node's ranks, for the GPU of this one.
    MPI_Comm node;
    beat("MPI start: the node split");
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
    MPI_CHECK(MPI_Comm_size(node, &local_size_));
    beat("MPI start: the shared counter of waiting processes");
    share_waiting(node, local_rank_, local_size_, &comms_->waiting);
    MPI_CHECK(MPI_Comm_free(&node));
    beat("MPI start: the communicators");
    for (MPI_Comm* c : {&comms_->p2p, &comms_->coll}) {
        MPI_Request req;
        MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, c, &req));
        poll_until(
            timeout_s_, [&] { int done = 0; MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE)); return done != 0; },
            [&] { abort("MPI start timed out after " + seconds_text(timeout_s_) + " s (waiting for every rank to join)"); });
        MPI_CHECK(MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN));
    }
}

MpiWorld::~MpiWorld() {
    // A destructor must not throw: a failing MPI call here is ignored (the job is ending anyway).
    ops::lend_between_processes(nullptr, 0);
    if (comms_->waiting != MPI_WIN_NULL) MPI_Win_free(&comms_->waiting);
    for (MPI_Comm* c : {&comms_->p2p, &comms_->coll})
        if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    MPI_Finalize();
}

void MpiWorld::abort(const std::string& why, int code) {
    // "rank 1, action F3.0: ..." (a pipeline's error) becomes "rank 1 (node7), action F3.0: ...".
    const std::string me = "rank " + std::to_string(rank_);
    bool named = why.rfind(me, 0) == 0 && (why.size() == me.size() || !std::isdigit((unsigned char)why[me.size()]));
    std::string line = named ? me + " (" + host_ + ")" + why.substr(me.size()) : me + " (" + host_ + "): " + why;
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    // Ends every process of MPI_COMM_WORLD (mpirun exits with `code`). It does not return; if an
    // MPI library ever did, this process must still end.
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
}

void MpiWorld::broadcast(void* data, std::size_t bytes, int root) {
    const std::string who = "rank " + std::to_string(rank_) + ": broadcast from rank " + std::to_string(root);
    if (root < 0 || root >= size_) throw std::runtime_error(who + ": no such rank");
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast(data, count_of(bytes, who), MPI_BYTE, root, comms_->coll, &req));
    poll_until(
        timeout_s_, [&] { int done = 0; MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE)); return done != 0; },
        [&] { throw std::runtime_error(who + " timed out after " + seconds_text(timeout_s_) + " s"); });
    beat();
}

// ---- point to point -------------------------------------------------------------------------------

namespace {
std::string tag_text(int tag) { return pp::tag_label(tag) + " (tag " + std::to_string(tag) + ")"; }

// One posted send or receive, and what to say when it fails.
struct Pending {
    MPI_Request req = MPI_REQUEST_NULL;
    bool send = false;
    int peer = 0;
    std::size_t bytes = 0;     // a receive's expected size
    MPI_Comm comm = MPI_COMM_NULL;
    bool pipeline = false;     // a pipeline's message (its tag is a pp tag), not a collective's
    std::string what;          // "F3 (tag 6)", "allreduce"
    void* gpu = nullptr;       // a receive into GPU memory: where the staged bytes go at the end
    std::vector<char> staged;  // GPU bytes in host memory (MPI is not assumed to read GPU memory)
};

// "rank 0: send to rank 1", "rank 1: recv from rank 0": who failed, for an error.
std::string who(const Pending& p, int me) {
    return "rank " + std::to_string(me) + (p.send ? ": send to rank " : ": recv from rank ") + std::to_string(p.peer);
}

// Posts one message on `comm`. GPU memory is staged through host memory with pt::copy_bytes:
// a CUDA-aware MPI could send it directly, but pipetrain does not assume one.
void post(Pending& p, MPI_Comm comm, int me, bool send, void* data, std::size_t bytes, int peer, int tag,
          const std::string& what) {
    p.send = send, p.peer = peer, p.bytes = bytes, p.comm = comm, p.what = what;
    int count = count_of(bytes, who(p, me));
    void* buf = data;
    if (bytes > 0 && pt::device_of(data).cuda) {
        p.staged.resize(bytes);
        buf = p.staged.data();
        if (send) pt::copy_bytes(buf, data, bytes);   // host involved: done when it returns
        else p.gpu = data;
    }
    if (send) MPI_CHECK(MPI_Isend(buf, count, MPI_BYTE, peer, tag, comm, &p.req));
    else MPI_CHECK(MPI_Irecv(buf, count, MPI_BYTE, peer, tag, comm, &p.req));
}

// Tests every posted message once, checking each received size: true when all are done.
bool test_all(std::vector<Pending>& ops, int me) {
    bool all = true;
    for (Pending& p : ops) {
        if (p.req == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Status status;
        int e = MPI_Test(&p.req, &flag, &status);
        if (e != MPI_SUCCESS) {
            int cls = 0;
            MPI_CHECK(MPI_Error_class(e, &cls));
            if (cls == MPI_ERR_TRUNCATE)
                throw std::runtime_error(who(p, me) + ": " + p.what + " has more than " + std::to_string(p.bytes) +
                                         " bytes, the receive buffer " + std::to_string(p.bytes));
            MPI_CHECK(e);
        }
        if (!flag) {
            all = false;
            continue;
        }
        p.req = MPI_REQUEST_NULL;
        if (!p.send) {
            int got = 0;
            MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &got));
            if (std::size_t(got) != p.bytes)
                throw std::runtime_error(who(p, me) + ": " + p.what + " has " + std::to_string(got) +
                                         " bytes, the receive buffer " + std::to_string(p.bytes));
            if (p.gpu) pt::copy_bytes(p.gpu, p.staged.data(), p.bytes);
        }
        beat();   // every message sent or received is progress, for the watchdog
    }
    return all;
}

// Waits for every posted message, checking each received size, until the deadline. On a timeout
// the receives still posted are cancelled (so no message lands in a buffer the caller may free);
// the job is about to end, so a send still pending is only released.
void wait_all(std::vector<Pending>& ops, int me, double timeout_s) {
    auto done = [&] { return test_all(ops, me); };
    auto timeout = [&] {
        std::string error;
        for (Pending& p : ops) {
            if (p.req == MPI_REQUEST_NULL) continue;
            if (error.empty()) {
                error = who(p, me) + " timed out after " + seconds_text(timeout_s) + " s (" +
                        (p.send ? "rank " + std::to_string(p.peer) + " did not receive " : "waiting for ") + p.what;
                // MPI matches by tag, so a peer that sent something else leaves it waiting: say what came.
                int other = 0;
                MPI_Status status;
                if (!p.send && p.pipeline && MPI_Iprobe(p.peer, MPI_ANY_TAG, p.comm, &other, &status) == MPI_SUCCESS && other)
                    error += "; rank " + std::to_string(p.peer) + " sent " + tag_text(status.MPI_TAG) + " instead";
                error += ")";
            }
            // Unchecked: this rank is failing already, and the timeout is the error to report.
            if (!p.send) MPI_Cancel(&p.req);
            MPI_Request_free(&p.req);
        }
        throw std::runtime_error(error);
    };
    poll_until(timeout_s, done, timeout);
}
}  // namespace

struct MpiComm::Sends {
    std::list<Pending> in_flight;   // a list: MPI holds the address of each one's bytes
};

void MpiComm::reap_sends(bool wait) {
    std::list<Pending>& sends = sending_->in_flight;
    if (wait) {
        std::vector<Pending> all;
        for (Pending& p : sends) all.push_back(std::move(p));
        sends.clear();
        wait_all(all, rank(), world_.timeout_s());
        return;
    }
    for (auto it = sends.begin(); it != sends.end();) {
        int done = 0;
        MPI_CHECK(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE));
        it = done ? sends.erase(it) : std::next(it);
    }
}

void MpiComm::send(const void* data, std::size_t bytes, int peer, int tag) { group({{true, const_cast<void*>(data), bytes, peer, tag}}); }
void MpiComm::recv(void* data, std::size_t bytes, int peer, int tag) { group({{false, data, bytes, peer, tag}}); }

// NCCL's semantics: every op is posted before any is waited for, so paired sends and receives in
// one group (a 1F1B steady state sends and receives at once) cannot deadlock, buffered or not.
void MpiComm::group(const std::vector<pp::P2POp>& ops) {
    const int me = rank();
    for (const pp::P2POp& op : ops) {   // every op checked before any is posted: none is left behind
        const std::string who = "rank " + std::to_string(me) + (op.send ? ": send to rank " : ": recv from rank ") +
                                std::to_string(op.peer);
        if (op.peer < 0 || op.peer >= size())
            throw std::runtime_error(who + (op.send ? " outside a world of " + std::to_string(size()) : ": no such rank"));
        if (op.tag < 0 || op.tag > world_.tag_ub_)
            throw std::runtime_error(who + ": tag " + std::to_string(op.tag) + " is outside this MPI's tags 0.." +
                                     std::to_string(world_.tag_ub_) + " (MPI_TAG_UB; fewer micro-batches or chunks fit)");
    }
    std::vector<Pending> receives;
    for (const pp::P2POp& op : ops) {
        Pending p;
        p.pipeline = true;
        if (op.send) {   // buffered: a copy of the bytes travels, and the caller may reuse its buffer
            p.staged.resize(op.bytes);
            if (op.bytes > 0) pt::copy_bytes(p.staged.data(), op.data, op.bytes);
            sending_->in_flight.push_back(std::move(p));
            post(sending_->in_flight.back(), world_.comms_->p2p, me, true, sending_->in_flight.back().staged.data(),
                 op.bytes, op.peer, op.tag, tag_text(op.tag));
        } else {
            receives.push_back(std::move(p));
            post(receives.back(), world_.comms_->p2p, me, false, op.data, op.bytes, op.peer, op.tag, tag_text(op.tag));
        }
    }
    wait_all(receives, me, world_.timeout_s());
    reap_sends(false);
}

void MpiComm::barrier() {
    MPI_Request req;
    MPI_CHECK(MPI_Ibarrier(world_.comms_->coll, &req));
    poll_until(
        world_.timeout_s(), [&] { int done = 0; MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE)); return done != 0; },
        [&] {
            throw std::runtime_error("rank " + std::to_string(rank()) + ": barrier timed out after " +
                                     seconds_text(world_.timeout_s()) + " s (waiting for every rank to reach it)");
        });
    beat();
}

// ---- all-reduce in a fixed order ------------------------------------------------------------------
//
// MPI_Allreduce may add in any order (a tree, a ring, whatever the network prefers), so its bits
// may differ from ThreadComm's and between runs. This one gives ThreadComm's bits and still scales:
//
//   reduce-scatter  the D members split [0, n) into D slices; member k owns slice k and receives
//                   every other member's copy of it, then adds them in PairwiseSum's tree over the
//                   positions of `ranks`: out[i] = (x_0[i] + x_1[i]) + (x_2[i] + x_3[i]) ...;
//   all-gather      each owner sends its summed slice to every other member.
//
// Each element is the same tree as ThreadComm's reduce-to-ranks[0]: addition happens element by
// element, so splitting [0, n) into slices changes who adds, never the order of the additions, and
// the bits are identical. Each member sends and receives about 2n(D-1)/D elements, rank 0 no more than others.
namespace {
const int kBackgroundReduceTag = 3, kBackgroundGatherTag = 4;   // start_sum's, apart from allreduce_sum's

// One all-reduce in its two halves, so that a background sum (start_sum) posts the first and
// finishes later. Slice k is [lo(k), lo(k+1)): sizes differ by at most one element.
template <typename T>
struct Reduction {
    T* x = nullptr;   // the data (in host memory)
    std::size_t n = 0, D = 1, me = 0;   // elements, members, my position in `ranks`
    std::vector<int> ranks;
    std::vector<std::vector<T>> theirs;   // [position]: that member's copy of my slice
    std::vector<Pending> ops;             // the half in flight
    int half = 0;                         // 1: the reduce-scatter is posted, 2: the all-gather, 3: done
    AsyncSum::Span span;
    std::size_t lo(std::size_t k) const { return (n / D) * k + std::min(k, n % D); }
};

// Where `me` sits in `ranks`, checked.
std::size_t position_in(const std::vector<int>& ranks, int me, int world) {
    auto it = std::find(ranks.begin(), ranks.end(), me);
    if (it == ranks.end())
        throw std::runtime_error("rank " + std::to_string(me) + ": allreduce over a group that does not contain it");
    for (int r : ranks)
        if (r < 0 || r >= world)
            throw std::runtime_error("rank " + std::to_string(me) + ": allreduce over rank " + std::to_string(r) +
                                     ", outside a world of " + std::to_string(world));
    return std::size_t(it - ranks.begin());
}

// Reduce-scatter: my slice of everyone else's copy in; their slices of my copy out.
template <typename T>
void post_reduce_scatter(Reduction<T>& r, MPI_Comm comm, int me_rank, int tag) {
    const std::size_t mine_n = r.lo(r.me + 1) - r.lo(r.me);
    r.theirs.assign(r.D, {});
    r.ops.assign(2 * (r.D - 1), Pending());
    for (std::size_t k = 0, i = 0; k < r.D; k++) {
        if (k == r.me) continue;
        r.theirs[k].resize(mine_n);
        post(r.ops[i++], comm, me_rank, false, r.theirs[k].data(), mine_n * sizeof(T), r.ranks[k], tag, "allreduce");
        post(r.ops[i++], comm, me_rank, true, r.x + r.lo(k), (r.lo(k + 1) - r.lo(k)) * sizeof(T), r.ranks[k], tag, "allreduce");
    }
    r.half = 1;
}

// Once the reduce-scatter is in: my slice summed in the tree, then the all-gather posted (my summed
// slice out, every other slice in, straight into place).
template <typename T>
void add_and_post_gather(Reduction<T>& r, MPI_Comm comm, int me_rank, int tag) {
    const std::size_t mine = r.lo(r.me), mine_n = r.lo(r.me + 1) - mine;
    r.theirs[r.me].assign(r.x + mine, r.x + mine + mine_n);
    pt::PairwiseSum<std::vector<T>> sum([](std::vector<T>& into, std::vector<T>& from) {
        for (std::size_t i = 0; i < into.size(); i++) into[i] += from[i];
    });
    for (std::size_t k = 0; k < r.D; k++) sum.push(std::move(r.theirs[k]));
    std::vector<T> total = sum.finish();
    std::copy(total.begin(), total.end(), r.x + mine);
    r.ops.assign(2 * (r.D - 1), Pending());
    for (std::size_t k = 0, i = 0; k < r.D; k++) {
        if (k == r.me) continue;
        post(r.ops[i++], comm, me_rank, false, r.x + r.lo(k), (r.lo(k + 1) - r.lo(k)) * sizeof(T), r.ranks[k], tag, "allreduce");
        post(r.ops[i++], comm, me_rank, true, r.x + mine, mine_n * sizeof(T), r.ranks[k], tag, "allreduce");
    }
    r.half = 2;
}
}  // namespace

template <typename T>
void MpiComm::allreduce(T* data, std::size_t n, const std::vector<int>& ranks) {
    Reduction<T> r;
    r.me = position_in(ranks, rank(), size()), r.D = ranks.size(), r.n = n, r.ranks = ranks;
    if (r.D == 1) return;
    // GPU data: the whole array in host memory (staged once, not per message).
    const bool gpu = n > 0 && pt::device_of(data).cuda;
    std::vector<T> host;
    r.x = data;
    if (gpu) {
        host.resize(n);
        pt::copy_bytes(host.data(), data, n * sizeof(T));
        r.x = host.data();
    }
    MPI_Comm comm = world_.comms_->coll;
    post_reduce_scatter(r, comm, rank(), kReduceTag);
    wait_all(r.ops, rank(), world_.timeout_s());
    add_and_post_gather(r, comm, rank(), kGatherTag);
    wait_all(r.ops, rank(), world_.timeout_s());
    if (gpu) pt::copy_bytes(data, host.data(), n * sizeof(T));
}

void MpiComm::allreduce_sum(float* data, std::size_t n, const std::vector<int>& ranks) { allreduce(data, n, ranks); }
void MpiComm::allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) { allreduce(data, n, ranks); }

// ---- background sums: posted now, advanced whenever this rank starts another, finished by wait_sums

struct MpiComm::Background {
    std::list<Reduction<float>> sums;   // in the order they started (every member's order)
};

MpiComm::MpiComm(MpiWorld& world) : world_(world), sending_(std::make_unique<Sends>()), bg_(std::make_unique<Background>()) {}

MpiComm::~MpiComm() {
    for (auto& r : bg_->sums)   // left only by a failing rank: no message may land in freed memory
        for (Pending& p : r.ops)
            if (p.req != MPI_REQUEST_NULL) {
                if (!p.send) MPI_Cancel(&p.req);
                MPI_Request_free(&p.req);
            }
    try {   // the last messages of a run reach their peers before MPI_Finalize
        reap_sends(true);
    } catch (...) {   // a peer gone: the job is ending with an error reported elsewhere
        for (Pending& p : sending_->in_flight)
            if (p.req != MPI_REQUEST_NULL) MPI_Request_free(&p.req);
    }
}

void MpiComm::start_sum(float* data, std::size_t n, const std::vector<int>& ranks) {
    if (n > 0 && pt::device_of(data).cuda) throw std::logic_error("MpiComm::start_sum: GPU data is summed by allreduce_sum");
    Reduction<float>& r = bg_->sums.emplace_back();
    r.me = position_in(ranks, rank(), size()), r.D = ranks.size(), r.n = n, r.ranks = ranks, r.x = data;
    r.span.start = Clock::now();
    if (r.D > 1) post_reduce_scatter(r, world_.comms_->coll, rank(), kBackgroundReduceTag);
    // The earlier sums move on as far as their messages allow, without waiting: a reduce-scatter that
    // is in gets summed and its all-gather posted, so the transfers keep overlapping the backward.
    // All-gathers are posted in the order the sums started, as on every member: MPI matches a
    // peer's messages of one tag in the order they were posted.
    for (Reduction<float>& e : bg_->sums) {
        if (e.half == 1 && !test_all(e.ops, rank())) break;
        if (e.half == 1) add_and_post_gather(e, world_.comms_->coll, rank(), kBackgroundGatherTag);
        if (e.half == 2 && test_all(e.ops, rank())) e.half = 3, e.span.end = Clock::now();
    }
}

std::vector<AsyncSum::Span> MpiComm::wait_sums() {
    std::vector<Span> spans;
    for (Reduction<float>& r : bg_->sums) {
        if (r.half == 1) wait_all(r.ops, rank(), world_.timeout_s()), add_and_post_gather(r, world_.comms_->coll, rank(), kBackgroundGatherTag);
        if (r.half == 2) wait_all(r.ops, rank(), world_.timeout_s()), r.half = 3, r.span.end = Clock::now();
        if (r.D == 1) r.span.end = r.span.start;
        spans.push_back(r.span);
    }
    bg_->sums.clear();
    return spans;
}

// ---- one rank per process -------------------------------------------------------------------------

// fn runs here, on the main thread (MPI_THREAD_FUNNELED); the watchdog runs beside it and ends the
// process (kWatchdogExit) if fn makes no progress for the timeout and a grace. mpirun then ends
// the others: a process that exits without MPI_Finalize ends the job.
void run_mpi_rank(MpiWorld& world, const std::function<void(pp::Comm& comm)>& fn) {
    std::string error = watched(world.timeout_s(), world.rank(), [&] {
        MpiComm comm(world);
        fn(comm);
    });
    if (!error.empty()) world.abort(error);   // prints "rank R (HOST): ..." once, ends the job
}

}  // namespace pt

#endif   // PIPETRAIN_MPI
