// src/nccl_comm.cpp — see nccl_comm.hpp.
//
// NCCL is loaded when a run needs it, not linked. libnccl.so.2 is about 210 MB, and a linked
// library is mapped before main: under an address-space limit (`ulimit -v 200000`) every
// pipetrain run, a CPU one too, died in the dynamic loader or with a segfault before it could
// print a word. So the first NcclWorld (or nccl_available) opens the library with dlopen and looks
// up, once, the functions this file calls; calls go through that table, nccl().ncclSend(...).
// nccl.h is still included: its types, and the declarations the pointers take their types from.
// The CUDA runtime stays linked: libcudart.so.13 is under 1 MB (every cuda* symbol binds to it;
// the cudart_static that CMake adds after it contributes nothing), and it opens the driver,
// libcuda.so.1, only at the first CUDA call, so `pipetrain --help` maps neither NCCL nor the driver.
//
// Processes (MPI): rank 0's ncclGetUniqueId reaches the others by MpiWorld::broadcast, then every
// rank calls ncclCommInitRank; its GPU is its local rank on the node (NcclWorld::device_for).
//
// Two processes on ONE GPU — what NCCL would need (found while writing this; not tried here, the
// build machine has no GPU):
//   * NCCL refuses it. Since NCCL 2.5, communicator init compares every peer's (host hash, PCI
//     bus id) and fails with ncclInvalidUsage, "Duplicate GPU detected : rank 1 and rank 0 both
//     on CUDA device 1000" (NVIDIA/nccl#231 proposed the check, #418 shows it; in #103 sjeaugey,
//     2022: "It is no longer possible to have multiple ranks use the same GPU since NCCL 2.5").
//     The user guide still says so in its 2.29/2.30 editions (usage/communicators.html: "Using
//     the same CUDA device multiple times as different ranks of the same NCCL communicator is not
//     supported and may lead to hangs"); no release we found lifts it (the nccl.h here is 2.28).
//   * The check keys on the host hash, which the environment variable NCCL_HOSTID overrides: a
//     different NCCL_HOSTID per process makes NCCL take the ranks for different hosts, so init
//     passes and the traffic goes over the network transport (sockets, or IB/RoCE loopback)
//     instead of P2P/shared memory. Public test setups do just that (several MPI ranks on one
//     GPU, NCCL_HOSTID per rank, the socket transport), but NVIDIA does not support it: "This is
//     not allowed and it will not work, even if you remove the check. The whole topology
//     detection / graph search would not work with multiple ranks being on the same GPU"
//     (sjeaugey, NVIDIA/nccl#418). And kernels of two processes (two CUDA contexts) run
//     concurrently only under MPS, which collectives on one GPU need or they may deadlock
//     (nluehr, NVIDIA/nccl#32).
// So pipetrain keeps one GPU per rank under MPI too (device_for refuses a node with more ranks
// than GPUs, in one line, before NCCL would); stages that share a GPU use ThreadComm (device-to-
// device copies) or MpiComm (through host memory). NCCL_HOSTID per rank plus MPS is left to a
// lab that wants to try it, at its own risk.
#include "src/nccl_comm.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "kernels/cuda/check.cuh"
#include "src/device.hpp"
#include "src/mpi_comm.hpp"

// Every NCCL function this file calls. ncclGetUniqueId and ncclCommInitRank are also all that a
// communicator across processes (one rank each, bootstrapped by MPI) needs.
#define PT_NCCL_FUNCTIONS(X) \
    X(ncclGetErrorString)    \
    X(ncclGetUniqueId)       \
    X(ncclCommInitAll)       \
    X(ncclCommInitRank)      \
    X(ncclCommDestroy)       \
    X(ncclCommAbort)         \
    X(ncclCommGetAsyncError) \
    X(ncclGroupStart)        \
    X(ncclGroupEnd)          \
    X(ncclSend)              \
    X(ncclRecv)              \
    X(ncclAllReduce)

// Every NCCL call: file:line and NCCL's error string, then throw.
#define NCCL_CHECK(call)                                                                                  \
    do {                                                                                                  \
        ncclResult_t r_ = (call);                                                                         \
        if (r_ != ncclSuccess)                                                                            \
            throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +             \
                                     ": NCCL error: " + nccl().ncclGetErrorString(r_) + " (" #call ")");  \
    } while (0)

namespace pt {

namespace {

// The loaded library: one pointer per function of PT_NCCL_FUNCTIONS, typed like nccl.h's.
struct NcclLibrary {
#define PT_NCCL_POINTER(f) decltype(&::f) f = nullptr;
    PT_NCCL_FUNCTIONS(PT_NCCL_POINTER)
#undef PT_NCCL_POINTER
    std::string error;   // why it is not usable, one line; empty when every pointer is set
};

#ifdef PIPETRAIN_NCCL_STATIC
// The emulated GPU (scripts/gpu_emulator) links its own NCCL into the program: nothing to open.
NcclLibrary open_nccl() {
    NcclLibrary lib;
#define PT_NCCL_LINKED(f) lib.f = &::f;
    PT_NCCL_FUNCTIONS(PT_NCCL_LINKED)
#undef PT_NCCL_LINKED
    return lib;
}
#else
// Where to look: $PIPETRAIN_NCCL_LIBRARY alone when it is set; otherwise libnccl.so.2 by the
// loader's search (LD_LIBRARY_PATH, this program's run path, ld.so.cache), the unversioned name,
// and last the file CMake found, which may be off the search path (PyTorch's wheel).
std::vector<std::string> nccl_candidates() {
    const char* override_path = std::getenv("PIPETRAIN_NCCL_LIBRARY");
    if (override_path && *override_path) return {override_path};
    std::vector<std::string> names = {"libnccl.so.2", "libnccl.so"};
#ifdef PIPETRAIN_NCCL_FOUND
    names.push_back(PIPETRAIN_NCCL_FOUND);
#endif
    return names;
}

NcclLibrary open_nccl() {
    NcclLibrary lib;
    std::vector<std::string> names = nccl_candidates();
    void* handle = nullptr;
    std::string loaded, first_error;   // the first name's error: the others are fallbacks
    for (const std::string& name : names) {
        // Never closed: NCCL's threads and communicators live until the program ends.
        handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle) {
            loaded = name;
            break;
        }
        if (first_error.empty()) first_error = dlerror();
    }
    if (!handle) {
        lib.error = "cannot load " + names.front() + " (" + first_error + ")";
        return lib;
    }
#define PT_NCCL_LOOKUP(f)                                                         \
    lib.f = reinterpret_cast<decltype(lib.f)>(dlsym(handle, #f));                 \
    if (!lib.f && lib.error.empty()) lib.error = loaded + " has no " #f " (an NCCL older than 2.7?)";
    PT_NCCL_FUNCTIONS(PT_NCCL_LOOKUP)
#undef PT_NCCL_LOOKUP
    return lib;
}
#endif

// Opened on first use. A function's static is initialised exactly once even when several ranks'
// threads arrive together (C++11), which is what std::call_once would add.
const NcclLibrary& nccl_library() {
    static const NcclLibrary lib = open_nccl();
    return lib;
}

// The table for a call; throws the one-line reason when NCCL did not load.
const NcclLibrary& nccl() {
    const NcclLibrary& lib = nccl_library();
    if (!lib.error.empty()) throw std::runtime_error("NCCL: " + lib.error);
    return lib;
}

ncclComm_t as_comm(void* c) { return static_cast<ncclComm_t>(c); }
cudaStream_t stream() { return static_cast<cudaStream_t>(pt::current_stream()); }
bool on_gpu(const void* p) { return pt::device_of(p).cuda; }
}  // namespace

bool nccl_available(std::string* why) {
    const NcclLibrary& lib = nccl_library();
    if (why) *why = lib.error;
    return lib.error.empty();
}

struct NcclWorld::Group {
    std::vector<void*> comms;   // by position in the group's rank list (over MPI only this rank's)
    std::mutex mu;
};

NcclWorld::NcclWorld(const std::vector<int>& devices, double timeout_s)
    : threads_(std::make_unique<ThreadWorld>(int(devices.size()), timeout_s)), size_(int(devices.size())),
      timeout_s_(timeout_s), devices_(devices) {
    std::vector<int> sorted = devices;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        throw std::runtime_error("NcclComm: NCCL needs one GPU per rank; " + std::to_string(devices.size()) +
                                 " ranks share fewer GPUs (use the thread communicator)");
    std::vector<ncclComm_t> comms(devices.size());
    NCCL_CHECK(nccl().ncclCommInitAll(comms.data(), int(devices.size()), devices.data()));
    comms_.assign(comms.begin(), comms.end());
}

NcclWorld::NcclWorld(MpiWorld& mpi, int device, double timeout_s)
    : size_(mpi.size()), timeout_s_(timeout_s), devices_(mpi.size(), -1), comms_(mpi.size(), nullptr) {
    const int rank = mpi.rank();
    devices_[rank] = device;
    if (!pt::current_device().cuda || pt::current_device().index != device)
        throw std::logic_error("NcclWorld: rank " + std::to_string(rank) + " must run on cuda:" + std::to_string(device) +
                               " (pt::set_device) before joining NCCL");
    nccl();   // every rank loads NCCL (and fails alike) before any waits for rank 0
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank == 0) NCCL_CHECK(nccl().ncclGetUniqueId(&id));
    // ncclCommInitRank blocks, with no timeout, until every rank calls it; the broadcast has the
    // deadline, so none reaches it while a rank is missing.
    mpi.broadcast(&id, sizeof id, 0);
    ncclComm_t c;
    NCCL_CHECK(nccl().ncclCommInitRank(&c, size_, id, rank));
    comms_[rank] = c;
}

int NcclWorld::device_for(const MpiWorld& mpi) {
    int gpus = pt::cuda_device_count();
    if (gpus == 0) throw std::runtime_error("NcclComm: rank " + std::to_string(mpi.rank()) + " on " + mpi.host() + " sees no GPU");
    if (mpi.local_size() > gpus)
        throw std::runtime_error("NcclComm: NCCL needs one GPU per rank; " + std::to_string(mpi.local_size()) + " ranks on " +
                                 mpi.host() + " share " + std::to_string(gpus) + " GPU(s) (use the MPI communicator)");
    return mpi.local_rank() % gpus;
}

ThreadWorld& NcclWorld::host() {
    if (!threads_) throw std::logic_error("NcclWorld::host(): a world made over MPI has no ThreadWorld");
    return *threads_;
}

NcclWorld::~NcclWorld() {   // a communicator exists only if NCCL loaded, so nccl() does not throw
    for (void* c : comms_)
        if (c) nccl().ncclCommDestroy(as_comm(c));
    for (auto& [ranks, g] : groups_)
        for (void* c : g->comms)
            if (c) nccl().ncclCommDestroy(as_comm(c));
}

NcclComm::NcclComm(NcclWorld& world, pp::Comm& host, int rank) : world_(world), host_(host), rank_(rank) { check(); }

NcclComm::NcclComm(NcclWorld& world, int rank)
    : world_(world), own_host_(std::make_unique<ThreadComm>(world.host(), rank)), host_(*own_host_), rank_(rank) {
    check();
}

void NcclComm::check() const {
    if (rank_ < 0 || rank_ >= world_.size_ || host_.rank() != rank_ || host_.size() != world_.size_)
        throw std::logic_error("NcclComm: rank " + std::to_string(rank_) + " needs a host pp::Comm of the same rank in a world of " +
                               std::to_string(world_.size_));
    if (!pt::current_device().cuda || pt::current_device().index != world_.devices_[rank_])
        throw std::logic_error("NcclComm: rank " + std::to_string(rank_) + " must run on cuda:" +
                               std::to_string(world_.devices_[rank_]));
}

void NcclComm::wait(void*& comm, const std::string& what, const std::function<int()>& query) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(world_.timeout_s_);
    for (;;) {
        cudaError_t e = query ? cudaError_t(query()) : cudaStreamQuery(stream());
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady)
            throw std::runtime_error("rank " + std::to_string(rank_) + ": " + what + ": CUDA error: " + cudaGetErrorString(e));
        ncclResult_t async;
        NCCL_CHECK(nccl().ncclCommGetAsyncError(as_comm(comm), &async));
        std::string why;
        if (async != ncclSuccess) why = std::string("NCCL error: ") + nccl().ncclGetErrorString(async);
        else if (world_.threads_ && world_.threads_->aborted()) why = "aborted: " + world_.threads_->abort_reason();
        else if (std::chrono::steady_clock::now() > deadline) why = "timed out";
        if (!why.empty()) {
            nccl().ncclCommAbort(as_comm(comm));   // frees the communicator and the stream's pending operation
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
void NcclComm::group(const std::vector<pp::P2POp>& ops) {
    std::vector<pp::P2POp> host_ops, to_self;
    void*& comm = world_.comms_[rank_];
    bool any = false;
    NCCL_CHECK(nccl().ncclGroupStart());
    for (const pp::P2POp& op : ops) {
        if (op.bytes > 0 && !on_gpu(op.data)) {
            host_ops.push_back(op);
            continue;
        }
        if (op.bytes == 0) continue;
        if (op.peer == rank_) {   // between two chunks of this rank (the V shape's turn): a copy below
            to_self.push_back(op);
            continue;
        }
        any = true;
        if (op.send) NCCL_CHECK(nccl().ncclSend(op.data, op.bytes, ncclChar, op.peer, as_comm(comm), stream()));
        else NCCL_CHECK(nccl().ncclRecv(op.data, op.bytes, ncclChar, op.peer, as_comm(comm), stream()));
    }
    NCCL_CHECK(nccl().ncclGroupEnd());
    // Each receive from this rank takes the send of the same tag (the plan posts both together).
    for (const pp::P2POp& in : to_self) {
        if (in.send) continue;
        auto out = std::find_if(to_self.begin(), to_self.end(), [&](const pp::P2POp& o) { return o.send && o.tag == in.tag; });
        if (out == to_self.end() || out->bytes != in.bytes)
            throw std::runtime_error("rank " + std::to_string(rank_) + ": a receive from itself (tag " + std::to_string(in.tag) +
                                     ") without its send of the same size in the group");
        pt::copy_bytes(in.data, out->data, in.bytes);
    }
    if (any) wait(comm, "send/recv (tag " + std::to_string(ops.front().tag) + ")");
    if (!host_ops.empty()) host_.group(host_ops);
}

void*& NcclComm::group_comm(const std::vector<int>& ranks) {
    auto me = std::find(ranks.begin(), ranks.end(), rank_);
    if (me == ranks.end()) throw std::runtime_error("rank " + std::to_string(rank_) + ": allreduce over a group without it");
    std::shared_ptr<NcclWorld::Group> g;
    {
        std::lock_guard<std::mutex> lock(world_.mu_);
        auto& slot = world_.groups_[ranks];
        if (!slot) {
            slot = std::make_shared<NcclWorld::Group>();
            slot->comms.assign(ranks.size(), nullptr);
        }
        g = slot;
    }
    int pos = int(me - ranks.begin());
    if (!g->comms[pos]) {
        // A fresh unique id per group, threads or processes alike: the group's first member makes
        // it and hands it to the others over the host Comm, as a fixed-order all-reduce of its
        // bytes, one small integer per double (exact). That meeting has the timeout, and
        // ncclCommInitRank, which blocks without one until every member calls it, comes after
        // it, so no member waits for one that died before its first all-reduce. (ncclCommSplit,
        // NCCL 2.18, would need every rank of the world at the same call, those outside the
        // group too; the pipeline's all-reduces are called by their members only.)
        ncclUniqueId id;
        std::vector<double> bytes(sizeof id.internal, 0.0);
        if (pos == 0) {
            NCCL_CHECK(nccl().ncclGetUniqueId(&id));
            for (size_t i = 0; i < bytes.size(); i++) bytes[i] = double(static_cast<unsigned char>(id.internal[i]));
        }
        host_.allreduce_sum(bytes.data(), bytes.size(), ranks);
        for (size_t i = 0; i < bytes.size(); i++) id.internal[i] = char(static_cast<unsigned char>(bytes[i]));
        ncclComm_t c;
        NCCL_CHECK(nccl().ncclCommInitRank(&c, int(ranks.size()), id, pos));
        std::lock_guard<std::mutex> lock(g->mu);
        g->comms[pos] = c;
    }
    return g->comms[pos];   // the group outlives this NcclComm (the world owns it)
}

void NcclComm::allreduce_sum(float* data, std::size_t n, const std::vector<int>& ranks) {
    if (!on_gpu(data)) return host_.allreduce_sum(data, n, ranks);
    void*& comm = group_comm(ranks);
    NCCL_CHECK(nccl().ncclAllReduce(data, data, n, ncclFloat, ncclSum, as_comm(comm), stream()));
    wait(comm, "allreduce");
}

// ---- sums beside the backward (AsyncSum) ----------------------------------------------------------
//
// The compute stream writes a layer's gradient; an event recorded on it after the last write is
// what the side stream waits for before its ncclAllReduce, so the sum reads the final gradient
// while the compute stream goes on with the next layers (which never touch this gradient again
// in the step). A second event after the all-reduce is what wait_sums polls, with the deadline.
// The same ncclAllReduce on the same communicator as allreduce_sum: the same bits.
struct NcclComm::Sums {
    struct InFlight {
        cudaEvent_t written = nullptr, summed = nullptr;
        void** comm = nullptr;   // the group's communicator (ncclCommAbort clears it)
        Clock::time_point start;
    };
    cudaStream_t stream = nullptr;   // made at the first sum, on this rank's GPU
    std::vector<InFlight> flying;
    // Sums still in flight mean a rank failing mid-step (the error is elsewhere, so nothing here
    // is checked): their communicators are aborted, which drops the all-reduces that wait for
    // peers that may never come, and the stream then has nothing left to wait for.
    ~Sums() {
        for (InFlight& f : flying) {
            if (*f.comm) (void)nccl().ncclCommAbort(as_comm(*f.comm)), *f.comm = nullptr;
            for (cudaEvent_t e : {f.written, f.summed})
                if (e) (void)cudaEventDestroy(e);
        }
        if (stream) (void)cudaStreamDestroy(stream);
    }
};

void NcclComm::start_sum(float* data, std::size_t n, const std::vector<int>& ranks) {
    if (!on_gpu(data)) throw std::logic_error("NcclComm::start_sum: data in host memory (use allreduce_sum)");
    void*& comm = group_comm(ranks);
    if (!sums_) sums_ = std::make_unique<Sums>();
    Sums& s = *sums_;
    if (!s.stream) CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    s.flying.push_back({nullptr, nullptr, &comm, Clock::now()});
    Sums::InFlight& f = s.flying.back();
    CUDA_CHECK(cudaEventCreateWithFlags(&f.written, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&f.summed, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(f.written, stream()));
    CUDA_CHECK(cudaStreamWaitEvent(s.stream, f.written, 0));
    NCCL_CHECK(nccl().ncclAllReduce(data, data, n, ncclFloat, ncclSum, as_comm(comm), s.stream));
    CUDA_CHECK(cudaEventRecord(f.summed, s.stream));
}

std::vector<AsyncSum::Span> NcclComm::wait_sums() {
    std::vector<Span> spans;
    if (!sums_) return spans;
    std::vector<Sums::InFlight> flying;
    flying.swap(sums_->flying);
    for (size_t i = 0; i < flying.size(); i++) {
        Sums::InFlight& f = flying[i];
        try {
            wait(*f.comm, "data-parallel sum " + std::to_string(i + 1) + " of " + std::to_string(flying.size()),
                 [&] { return int(cudaEventQuery(f.summed)); });
        } catch (...) {
            sums_->flying.assign(flying.begin() + i, flying.end());   // the destructor frees their events
            throw;
        }
        spans.push_back({f.start, Clock::now()});
        CUDA_CHECK(cudaEventDestroy(f.written));
        CUDA_CHECK(cudaEventDestroy(f.summed));
    }
    return spans;
}

NcclComm::~NcclComm() = default;

void NcclComm::allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) {
    host_.allreduce_sum(data, n, ranks);   // host values only (loss, norm partials): exact fixed order
}

}  // namespace pt
