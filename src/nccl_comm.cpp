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
#include "src/nccl_comm.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "src/device.hpp"

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

namespace pp {

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
    NCCL_CHECK(nccl().ncclCommInitAll(comms.data(), int(devices.size()), devices.data()));
    comms_.assign(comms.begin(), comms.end());
}

NcclWorld::~NcclWorld() {   // a communicator exists only if NCCL loaded, so nccl() does not throw
    for (void* c : comms_)
        if (c) nccl().ncclCommDestroy(as_comm(c));
    for (auto& [ranks, g] : groups_)
        for (void* c : g->comms)
            if (c) nccl().ncclCommDestroy(as_comm(c));
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
        NCCL_CHECK(nccl().ncclCommGetAsyncError(as_comm(comm), &async));
        std::string why;
        if (async != ncclSuccess) why = std::string("NCCL error: ") + nccl().ncclGetErrorString(async);
        else if (world_.host_.aborted()) why = "aborted: " + world_.host_.abort_reason();
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
void NcclComm::group(const std::vector<P2POp>& ops) {
    std::vector<P2POp> host_ops;
    void*& comm = world_.comms_[rank_];
    bool any = false;
    NCCL_CHECK(nccl().ncclGroupStart());
    for (const P2POp& op : ops) {
        if (op.bytes > 0 && !on_gpu(op.data)) {
            host_ops.push_back(op);
            continue;
        }
        if (op.bytes == 0) continue;
        any = true;
        if (op.send) NCCL_CHECK(nccl().ncclSend(op.data, op.bytes, ncclChar, op.peer, as_comm(comm), stream()));
        else NCCL_CHECK(nccl().ncclRecv(op.data, op.bytes, ncclChar, op.peer, as_comm(comm), stream()));
    }
    NCCL_CHECK(nccl().ncclGroupEnd());
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
            NCCL_CHECK(nccl().ncclGetUniqueId(&slot->id));
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
        NCCL_CHECK(nccl().ncclCommInitRank(&c, int(ranks.size()), g->id, pos));
        std::lock_guard<std::mutex> lock(g->mu);
        g->comms[pos] = c;
    }
    NCCL_CHECK(nccl().ncclAllReduce(data, data, n, ncclFloat, ncclSum, as_comm(g->comms[pos]), stream()));
    wait(g->comms[pos], "allreduce");
}

void NcclComm::allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) {
    host_.allreduce_sum(data, n, ranks);   // host values only (loss, norm partials): exact fixed order
}

}  // namespace pp
