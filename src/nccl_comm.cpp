// src/nccl_comm.cpp — see nccl_comm.hpp.
#include "src/nccl_comm.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "src/device.hpp"

// Every NCCL call: file:line and NCCL's error string, then throw.
#define NCCL_CHECK(call)                                                                                  \
    do {                                                                                                  \
        ncclResult_t r_ = (call);                                                                         \
        if (r_ != ncclSuccess)                                                                            \
            throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +             \
                                     ": NCCL error: " + ncclGetErrorString(r_) + " (" #call ")");         \
    } while (0)

namespace pp {

namespace {
ncclComm_t as_comm(void* c) { return static_cast<ncclComm_t>(c); }
cudaStream_t stream() { return static_cast<cudaStream_t>(pt::current_stream()); }
bool on_gpu(const void* p) { return pt::device_of(p).cuda; }
}  // namespace

struct NcclWorld::Group {
    ncclUniqueId id;
    std::vector<void*> comms;   // by position in the group's rank list
    std::mutex mu;
};

NcclWorld::NcclWorld(const std::vector<int>& devices, double timeout_s)
    : host_(int(devices.size()), timeout_s), devices_(devices) {
    std::vector<int> sorted = devices;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        throw std::runtime_error("NcclComm: NCCL needs one GPU per rank; " + std::to_string(devices.size()) +
                                 " ranks share fewer GPUs (use the thread communicator)");
    std::vector<ncclComm_t> comms(devices.size());
    NCCL_CHECK(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()));
    comms_.assign(comms.begin(), comms.end());
}

NcclWorld::~NcclWorld() {
    for (void* c : comms_)
        if (c) ncclCommDestroy(as_comm(c));
    for (auto& [ranks, g] : groups_)
        for (void* c : g->comms)
            if (c) ncclCommDestroy(as_comm(c));
}

NcclComm::NcclComm(NcclWorld& world, int rank) : world_(world), host_(world.host_, rank), rank_(rank) {
    if (!pt::current_device().cuda || pt::current_device().index != world.devices_[rank])
        throw std::logic_error("NcclComm: rank " + std::to_string(rank) + " must run on cuda:" +
                               std::to_string(world.devices_[rank]));
}

// Polls the stream so that a peer that never posts its half ends in an error, not a hang.
void NcclComm::wait(void*& comm, const std::string& what) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(world_.host_.timeout_s());
    for (;;) {
        cudaError_t e = cudaStreamQuery(stream());
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady)
            throw std::runtime_error("rank " + std::to_string(rank_) + ": " + what + ": CUDA error: " + cudaGetErrorString(e));
        ncclResult_t async;
        NCCL_CHECK(ncclCommGetAsyncError(as_comm(comm), &async));
        std::string why;
        if (async != ncclSuccess) why = std::string("NCCL error: ") + ncclGetErrorString(async);
        else if (world_.host_.aborted()) why = "aborted: " + world_.host_.abort_reason();
        else if (std::chrono::steady_clock::now() > deadline) why = "timed out";
        if (!why.empty()) {
            ncclCommAbort(as_comm(comm));   // frees the communicator and the stream's pending operation
            comm = nullptr;                 // so that ~NcclWorld does not destroy it a second time
            throw std::runtime_error("rank " + std::to_string(rank_) + ": " + what + " " + why);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

void NcclComm::send(const void* data, std::size_t bytes, int peer, int tag) { group({{true, const_cast<void*>(data), bytes, peer, tag}}); }
void NcclComm::recv(void* data, std::size_t bytes, int peer, int tag) { group({{false, data, bytes, peer, tag}}); }

// NCCL matches messages between two ranks in posting order (it has no tags); pp::validate
// proves every schedule posts them in the same order on both sides.
void NcclComm::group(const std::vector<P2POp>& ops) {
    std::vector<P2POp> host_ops;
    void*& comm = world_.comms_[rank_];
    bool any = false;
    NCCL_CHECK(ncclGroupStart());
    for (const P2POp& op : ops) {
        if (op.bytes > 0 && !on_gpu(op.data)) {
            host_ops.push_back(op);
            continue;
        }
        if (op.bytes == 0) continue;
        any = true;
        if (op.send) NCCL_CHECK(ncclSend(op.data, op.bytes, ncclChar, op.peer, as_comm(comm), stream()));
        else NCCL_CHECK(ncclRecv(op.data, op.bytes, ncclChar, op.peer, as_comm(comm), stream()));
    }
    NCCL_CHECK(ncclGroupEnd());
    if (any) wait(comm, "send/recv (tag " + std::to_string(ops.front().tag) + ")");
    if (!host_ops.empty()) host_.group(host_ops);
}

void NcclComm::allreduce_sum(float* data, std::size_t n, const std::vector<int>& ranks) {
    if (!on_gpu(data)) return host_.allreduce_sum(data, n, ranks);
    auto me = std::find(ranks.begin(), ranks.end(), rank_);
    if (me == ranks.end()) throw std::runtime_error("rank " + std::to_string(rank_) + ": allreduce over a group without it");
    std::shared_ptr<NcclWorld::Group> g;
    {   // the first member to arrive makes the group's id; all members then join the communicator
        std::lock_guard<std::mutex> lock(world_.mu_);
        auto& slot = world_.groups_[ranks];
        if (!slot) {
            slot = std::make_shared<NcclWorld::Group>();
            NCCL_CHECK(ncclGetUniqueId(&slot->id));
            slot->comms.assign(ranks.size(), nullptr);
        }
        g = slot;
    }
    int pos = int(me - ranks.begin());
    if (!g->comms[pos]) {
        // ncclCommInitRank blocks, with no timeout, until every member calls it. Meeting on the
        // host first (which times out and aborts, naming the rank) means none waits for a
        // member that died before its first all-reduce.
        double arrived = 0;
        host_.allreduce_sum(&arrived, 1, ranks);
        ncclComm_t c;
        NCCL_CHECK(ncclCommInitRank(&c, int(ranks.size()), g->id, pos));
        std::lock_guard<std::mutex> lock(g->mu);
        g->comms[pos] = c;
    }
    NCCL_CHECK(ncclAllReduce(data, data, n, ncclFloat, ncclSum, as_comm(g->comms[pos]), stream()));
    wait(g->comms[pos], "allreduce");
}

void NcclComm::allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) {
    host_.allreduce_sum(data, n, ranks);   // host values only (loss, norm partials): exact fixed order
}

}  // namespace pp
