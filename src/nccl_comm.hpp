// src/nccl_comm.hpp — NcclComm: pp::Comm for ranks with one GPU each, either threads of one
// process or processes started by MPI (one rank each). Tensors in GPU memory travel by NCCL
// (ncclSend/ncclRecv inside one ncclGroupStart/End, so a steady-state 1F1B step that sends and
// receives at once cannot deadlock; ncclAllReduce for data parallelism). Host buffers (the loss,
// the gradient-norm partials) and barriers go through a host Comm, a ThreadComm or an MpiComm,
// which also brings the timeouts and the abort that names the failing rank.
//
// NCCL allows one rank per GPU in a communicator: with fewer GPUs than ranks, use ThreadComm
// (whose device-to-device copies serve stages that share a GPU) or MpiComm (nccl_comm.cpp says
// what NCCL would need for two processes on one GPU). Built only when CMake finds nccl.h;
// libnccl itself is opened at run time, by the first NcclWorld (nccl_comm.cpp says why).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline.hpp"
#include "src/async_sum.hpp"
#include "src/comm.hpp"

namespace pt {

// True when libnccl loads and has every function NcclComm calls. The first call opens it (~10 ms;
// PIPETRAIN_NCCL_LIBRARY=path chooses the file), later calls only read the result.
// Otherwise false, and *why says what failed in one line: "cannot load libnccl.so.2 (...)".
bool nccl_available(std::string* why = nullptr);

class MpiWorld;

class NcclWorld {
 public:
    // Threads: devices[r] = the GPU of rank r, all different. Loads NCCL and creates the world
    // communicator of every rank (ncclCommInitAll); host() is the ThreadWorld for run_ranks.
    NcclWorld(const std::vector<int>& devices, double timeout_s);
    // Processes: this process is rank mpi.rank() of mpi.size(), on GPU `device` (see device_for),
    // already selected with pt::set_device. Rank 0's ncclGetUniqueId reaches every rank by
    // mpi.broadcast, then each joins with ncclCommInitRank. Called by every rank, like a collective.
    NcclWorld(MpiWorld& mpi, int device, double timeout_s);
    ~NcclWorld();
    // The GPU of this process's rank: its local rank on its node, modulo the node's GPU count.
    // Throws when the node has more ranks than GPUs (NCCL would refuse: "Duplicate GPU detected").
    static int device_for(const MpiWorld& mpi);
    ThreadWorld& host();   // the threads' world (a logic_error for a world made over MPI)

 private:
    friend class NcclComm;
    struct Group;                          // a sub-communicator for an all-reduce over some ranks
    std::unique_ptr<ThreadWorld> threads_; // the threads' host world; null over MPI
    int size_;
    double timeout_s_;
    std::vector<int> devices_;             // [rank]: its GPU (over MPI only this process's rank's, others -1)
    std::vector<void*> comms_;             // ncclComm_t of each rank of this process in the world communicator
    std::mutex mu_;
    std::map<std::vector<int>, std::shared_ptr<Group>> groups_;
};

// Also an AsyncSum: start_sum queues the ncclAllReduce on a stream of its own, after an event
// that says the compute stream has written the gradient, so the sum runs while the backward goes
// on (a GPU runs both streams' kernels at once); wait_sums waits on each sum's event.
class NcclComm : public pp::Comm, public AsyncSum {
 public:
    // Call on rank's thread, after pt::set_device. `host` carries host buffers, barriers and
    // abort: a ThreadComm of world.host() for threads, the process's MpiComm under MPI.
    NcclComm(NcclWorld& world, pp::Comm& host, int rank);
    NcclComm(NcclWorld& world, int rank);   // threads: makes its own ThreadComm of world.host()
    int rank() const override { return rank_; }
    int size() const override { return world_.size_; }
    void send(const void* data, std::size_t bytes, int peer, int tag) override;
    void recv(void* data, std::size_t bytes, int peer, int tag) override;
    void group(const std::vector<pp::P2POp>& ops) override;
    void allreduce_sum(float* data, std::size_t n, const std::vector<int>& ranks) override;
    void allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) override;
    void barrier() override { host_.barrier(); }
    void abort(const std::string& why) override { host_.abort(why); }
    bool sums_device_memory() const override { return true; }
    void start_sum(float* data, std::size_t n, const std::vector<int>& ranks) override;   // GPU memory
    std::vector<Span> wait_sums() override;
    ~NcclComm() override;

 private:
    struct Sums;                                        // the side stream and the sums in flight on it
    void check() const;                                 // the rank, its host pp::Comm and its GPU fit the world
    // Polls query() (the stream, by default) so that a peer that never posts its half ends in an
    // error, not a hang: the timeout, NCCL's asynchronous error, or the world's abort.
    void wait(void*& comm, const std::string& what, const std::function<int()>& query = nullptr);
    void*& group_comm(const std::vector<int>& ranks);   // this rank's communicator of `ranks`, made at first use
    NcclWorld& world_;
    std::unique_ptr<ThreadComm> own_host_;   // made by the two-argument constructor
    pp::Comm& host_;
    int rank_;
    std::unique_ptr<Sums> sums_;
};

}  // namespace pt
