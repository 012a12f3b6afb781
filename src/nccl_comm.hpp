// src/nccl_comm.hpp — NcclComm: pp::Comm for ranks that are threads of one process, one GPU
// each. Tensors in GPU memory travel by NCCL (ncclSend/ncclRecv inside one ncclGroupStart/End,
// so a steady-state 1F1B step that sends and receives at once cannot deadlock; ncclAllReduce for
// data parallelism). Host buffers (the loss, the gradient-norm partials) and barriers go through
// a ThreadComm, which also brings the timeouts and the abort that names the failing rank.
//
// NCCL allows one rank per GPU in a communicator: with fewer GPUs than ranks, use ThreadComm
// (whose device-to-device copies serve stages that share a GPU). Built only when CMake finds
// nccl.h; libnccl itself is opened at run time, by the first NcclWorld (nccl_comm.cpp says why).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline.hpp"
#include "src/comm.hpp"

namespace pp {

// True when libnccl loads and has every function NcclComm calls. The first call opens it (~10 ms;
// PIPETRAIN_NCCL_LIBRARY=path chooses the file), later calls only read the result.
// Otherwise false, and *why says what failed in one line: "cannot load libnccl.so.2 (...)".
bool nccl_available(std::string* why = nullptr);

class NcclWorld {
 public:
    // devices[r] = the GPU of rank r, all different. Loads NCCL and creates the world communicator.
    NcclWorld(const std::vector<int>& devices, double timeout_s);
    ~NcclWorld();
    ThreadWorld& host() { return host_; }

 private:
    friend class NcclComm;
    struct Group;                          // a sub-communicator for an all-reduce over some ranks
    ThreadWorld host_;
    std::vector<int> devices_;
    std::vector<void*> comms_;             // ncclComm_t of each rank in the world communicator
    std::mutex mu_;
    std::map<std::vector<int>, std::shared_ptr<Group>> groups_;
};

class NcclComm : public Comm {
 public:
    NcclComm(NcclWorld& world, int rank);   // call on rank's thread, after pt::set_device
    int rank() const override { return rank_; }
    int size() const override { return int(world_.devices_.size()); }
    void send(const void* data, std::size_t bytes, int peer, int tag) override;
    void recv(void* data, std::size_t bytes, int peer, int tag) override;
    void group(const std::vector<P2POp>& ops) override;
    void allreduce_sum(float* data, std::size_t n, const std::vector<int>& ranks) override;
    void allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) override;
    void barrier() override { host_.barrier(); }
    void abort(const std::string& why) override { host_.abort(why); }

 private:
    void wait(void*& comm, const std::string& what);   // the stream, with a timeout and abort
    NcclWorld& world_;
    ThreadComm host_;
    int rank_;
};

}  // namespace pp
