// src/mpi_comm.hpp — MpiComm: the pp::Comm for ranks that are processes (one machine or many),
// started by mpirun/mpiexec or Slurm's srun. Pipeline rank r is world rank r (r = d*P + p, as with
// threads), so a run gives the same bits under threads and under MPI.
//
// Every wait has the --timeout deadline, exactly as in ThreadComm: messages are nonblocking
// (MPI_Isend/MPI_Irecv, MPI_Ibarrier, MPI_Ibcast) and polled with MPI_Test, so a rank whose peer
// never answers throws "rank 1: recv from rank 0 timed out after 2 s (waiting for F3 (tag 6))"
// instead of hanging. abort() is MPI_Abort: one failing rank ends every process of the job.
// All-reduce is our own, in a fixed rank order (MPI_Allreduce's order is unspecified), so it
// gives ThreadComm's bits. GPU buffers go through host memory (no CUDA-aware MPI is assumed).
//
// Builds without MPI: this header is the same, so callers need no #ifdef. launched_by_mpi() and
// mpi_built() always work; the MpiWorld constructor throws a one-line error saying that this
// pipetrain was built without MPI (and nothing else can be made without an MpiWorld).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipeline.hpp"
#include "src/async_sum.hpp"
#include "src/tags.hpp"

namespace pt {

// True when this process was started by an MPI launcher: Open MPI (OMPI_COMM_WORLD_SIZE),
// MPICH/Hydra and Slurm's srun with PMI (PMI_SIZE / PMI_RANK), PMIx (PMIX_RANK). Reads the
// environment only; no MPI call is made. Also in builds without MPI.
bool launched_by_mpi();
// True in a build with MPI (PIPETRAIN_MPI defined).
bool mpi_built();

// The MPI library of this process: initialized by the constructor, finalized by the destructor.
// One per process, made and used on the main thread (MPI_THREAD_FUNNELED). The start waits for
// every process of the job; if that takes longer than the timeout and a grace (a process that
// never starts MPI), a watchdog ends this one with kWatchdogExit, naming the call it was in.
class MpiWorld {
 public:
    explicit MpiWorld(double timeout_s);
    ~MpiWorld();
    MpiWorld(const MpiWorld&) = delete;
    MpiWorld& operator=(const MpiWorld&) = delete;

    int rank() const { return rank_; }
    int size() const { return size_; }
    int local_rank() const { return local_rank_; }   // on this node (MPI_COMM_TYPE_SHARED)
    int local_size() const { return local_size_; }
    const std::string& host() const { return host_; }   // MPI_Get_processor_name
    double timeout_s() const { return timeout_s_; }

    // Prints "rank R (HOST): why" once on stderr and ends every process of the job: MPI_Abort(code).
    // A `why` that already starts with "rank R" gets only " (HOST)" added after it.
    [[noreturn]] void abort(const std::string& why, int code = 1);
    // Root's bytes to every rank (the NCCL unique id), polled against the deadline.
    void broadcast(void* data, std::size_t bytes, int root);

 private:
    friend class MpiComm;
    void start();                    // the constructor's MPI calls, under a watchdog
    struct Comms;                    // the MPI communicators (mpi.h stays out of this header)
    std::unique_ptr<Comms> comms_;
    int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
    long tag_ub_ = 0;                // the largest tag this MPI allows (MPI_TAG_UB, at least 32767)
    std::string host_;
    double timeout_s_;
};

// Sends are buffered, as ThreadComm's: group() copies what it sends and returns once its receives
// are done, while its sends travel on (a 1F1B rank computes its next forward meanwhile instead of
// waiting for its peer to take the message). Every schedule pp::validate accepts is safe with
// unbuffered sends, so buffering cannot deadlock one. A send still in flight is finished by a
// later call, or, at the latest, by the destructor (with the deadline).
class MpiComm : public pp::Comm, public AsyncSum {
 public:
    explicit MpiComm(MpiWorld& world);
    ~MpiComm() override;
    int rank() const override { return world_.rank(); }
    int size() const override { return world_.size(); }
    void send(const void* data, std::size_t bytes, int peer, int tag) override;
    void recv(void* data, std::size_t bytes, int peer, int tag) override;
    void group(const std::vector<pp::P2POp>& ops) override;   // posts every op, then waits for all
    void allreduce_sum(float* data, std::size_t n, const std::vector<int>& ranks) override;
    void allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) override;
    void barrier() override;
    void abort(const std::string& why) override { world_.abort(why); }
    // AsyncSum: the reduce-scatter's messages are posted at once, on the main thread (MPI is
    // FUNNELED); each later start_sum moves the earlier sums on as far as their messages allow.
    void start_sum(float* data, std::size_t n, const std::vector<int>& ranks) override;   // CPU data
    std::vector<Span> wait_sums() override;

 private:
    template <typename T>
    void allreduce(T* data, std::size_t n, const std::vector<int>& ranks);
    void reap_sends(bool wait);   // drops the sends that are done; wait: until all are (deadline)
    struct Sends;                 // the sends in flight, each with its own copy of the bytes
    struct Background;            // the background sums in flight
    MpiWorld& world_;
    std::unique_ptr<Sends> sending_;
    std::unique_ptr<Background> bg_;
};

// Runs fn(comm) as this process's rank, on the calling (main) thread, while a second thread is its
// watchdog (src/watchdog.hpp). If fn throws, the error is printed once, "rank R (HOST): what", and
// the job ends (world.abort, exit code 1). Returns normally when fn does.
void run_mpi_rank(MpiWorld& world, const std::function<void(pp::Comm& comm)>& fn);

}  // namespace pt
