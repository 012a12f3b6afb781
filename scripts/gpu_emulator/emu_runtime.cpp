// scripts/gpu_emulator/emu_runtime.cpp — the emulated GPU behind cuda_runtime.h (README.md says
// what it can and cannot show). Host side: devices, streams that run their work lazily at the
// next synchronisation point, device memory in guarded mappings that host code cannot touch.
// Device side: a block is blockDim fibers that switch only at barriers and warp collectives.
// Environment:
//   EMU_GPUS=N                     number of devices (default 1; 0 = a machine without a GPU)
//   EMU_ORDER=fwd|rev|rand[:seed]  order of the threads of a block (every round) and of blocks
//   EMU_EAGER=1                    run stream work when it is issued instead of lazily
//   EMU_TRACE=1                    print every launch and copy
//   EMU_OOM_GPU=N                  device N is full: every allocation on it fails (fault injection)
#include <cuda_runtime.h>
#include <execinfo.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>

// x86-64 context switch: push the callee-saved registers and the FP control words, store the
// stack pointer in *save, continue on the stack `to` (which was saved the same way).
extern "C" void emu_ctx_switch(void** save, void* to);
asm(R"(
.text
.globl emu_ctx_switch
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
)");

struct EmuStream {  // non-blocking: the legacy stream neither waits for it nor makes it wait
    int device;
    int id;  // -1: the legacy default stream
    std::deque<std::function<bool()>> q;  // false: an NCCL operation that waits for its peers
    uint64_t queued = 0, ran = 0;         // work items ever queued, ever run (an event is a mark)
};
struct EmuEvent {  // cudaEventRecord: the work queued on s so far (a never-recorded event is complete)
    EmuStream* s = nullptr;
    uint64_t mark = 0;
};
struct EmuPool {};

namespace {

const size_t kPage = 4096, kStack = 256 << 10, kSmem = 48 << 10;
const int kMaxThreads = 1024;

bool env(const char* n) { const char* v = getenv(n); return v && *v && std::string(v) != "0"; }
std::recursive_mutex mu;  // every API call and all device work: stages are host threads
thread_local int t_locks = 0;  // how often this thread holds mu: a wait for NCCL peers frees it
struct Lock {
    Lock() { mu.lock(), t_locks++; }
    ~Lock() { t_locks--, mu.unlock(); }
};
const bool g_lazy = !env("EMU_EAGER"), g_trace = env("EMU_TRACE");
const int g_gpus = getenv("EMU_GPUS") ? atoi(getenv("EMU_GPUS")) : 1;
const int g_oom_gpu = getenv("EMU_OOM_GPU") ? atoi(getenv("EMU_OOM_GPU")) : -1;
thread_local int t_dev = 0;
thread_local cudaError_t t_err = cudaSuccess;

struct Order {
    int mode = 0;  // 0 fwd, 1 rev, 2 rand
    std::mt19937 rng;
};
Order g_order = [] {
    Order o;
    const std::string e = getenv("EMU_ORDER") ? getenv("EMU_ORDER") : "fwd";
    if (e == "rev") o.mode = 1;
    else if (e.rfind("rand", 0) == 0) o.mode = 2, o.rng.seed(e.size() > 5 ? std::stoul(e.substr(5)) : 1);
    else if (e != "fwd") fprintf(stderr, "EMU_ORDER must be fwd, rev or rand[:seed], got %s\n", e.c_str()), exit(2);
    return o;
}();
template <class V> void reorder(V& v) {  // once per launch; rand shuffles threads every round
    if (g_order.mode == 1) std::reverse(v.begin(), v.end());
    if (g_order.mode == 2) std::shuffle(v.begin(), v.end(), g_order.rng);
}

// ---- diagnostics ------------------------------------------------------------------------------
std::string hex(const void* p) {
    char b[32];
    snprintf(b, sizeof b, "%p", p);
    return b;
}
// The call stack through addr2line (binaries are linked -no-pie, so addresses are file addresses).
void backtrace_here() {
    void* frames[64];
    const int n = backtrace(frames, 64);
    std::string cmd = "addr2line -f -C -i -p -e /proc/" + std::to_string(getpid()) + "/exe";
    for (int i = 1; i < n; i++) cmd += " " + hex((char*)frames[i] - 1);
    fflush(stderr);
    if (system((cmd + " | sed 's/^/    /' 1>&2").c_str()) != 0) backtrace_symbols_fd(frames, n, 2);
}
[[noreturn]] void fatal(const std::string& msg) {
    fprintf(stderr, "\nEMU ERROR: %s\n", msg.c_str());
    backtrace_here();
    abort();
}
cudaError_t fail(cudaError_t e, const std::string& msg) {  // a CUDA call returns an error
    fprintf(stderr, "EMU: %s: %s\n", msg.c_str(), cudaGetErrorString(e));
    return t_err = e;
}

// ---- device memory ----------------------------------------------------------------------------
// Each allocation is its own mapping [guard page][data][guard page], PROT_NONE except while a
// kernel or copy that names it runs. The data ends at the trailing guard, rounded up to 256 bytes
// (the alignment cudaMalloc gives); the slack holds a canary, checked after kernels and at free.
struct Alloc {
    char *map, *p;
    size_t map_len, size;
    int device;
    bool live = true, free_queued = false;
    int open = 0;  // running operations that have it readable
    struct Pending {
        int ops = 0, writes = 0;
        std::string last;
    };
    std::map<EmuStream*, Pending> pending;  // queued, not yet executed work per stream
    size_t data_len() const { return map_len - 2 * kPage; }
};
std::map<uintptr_t, Alloc*> g_allocs;  // by user pointer; freed ones stay a while, PROT_NONE
std::deque<Alloc*> g_quarantine;
const unsigned char kCanary = 0xab;

size_t rounded(size_t bytes) { return (std::max<size_t>(bytes, 1) + 255) / 256 * 256; }
Alloc* find_alloc(const void* q, bool with_guards = false) {
    const uintptr_t a = (uintptr_t)q;
    auto it = g_allocs.upper_bound(a);
    if (with_guards) {  // the mapping holding a, guard pages included
        for (auto j : {it, it == g_allocs.begin() ? it : std::prev(it)})
            if (j != g_allocs.end() && a - (uintptr_t)j->second->map < j->second->map_len) return j->second;
        return nullptr;
    }
    if (it == g_allocs.begin()) return nullptr;
    Alloc* x = std::prev(it)->second;
    return a < (uintptr_t)x->p + x->size ? x : nullptr;
}
void protect(Alloc* x, int prot) {
    if (mprotect(x->map + kPage, x->data_len(), prot) != 0) fatal("mprotect failed");
}
void open_alloc(Alloc* x) { if (x->open++ == 0) protect(x, PROT_READ | PROT_WRITE); }
void close_alloc(Alloc* x) { if (--x->open == 0) protect(x, PROT_NONE); }
Alloc* new_alloc(size_t bytes, int device) {
    const size_t data = rounded(bytes), len = ((data + kPage - 1) / kPage + 2) * kPage;
    char* m = (char*)mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    Alloc* x = new Alloc{m, m + len - kPage - data, len, bytes, device, true, false, 0, {}};
    open_alloc(x);
    memset(x->p, 0xff, bytes);  // fresh memory reads as NaN: an unwritten output shows
    memset(x->p + bytes, kCanary, data - bytes);
    close_alloc(x);
    return g_allocs[(uintptr_t)x->p] = x;
}
// Writes past the end that stay inside the rounding slack do not fault; the canary shows them.
void check_canary(Alloc* x, const std::string& culprit) {
    open_alloc(x);
    for (size_t i = x->size; i < rounded(x->size); i++)
        if ((unsigned char)x->p[i] != kCanary)
            fatal(culprit + " wrote PAST THE END of the " + std::to_string(x->size) + "-byte allocation " + hex(x->p) +
                  " (byte " + std::to_string(i) + ")");
    close_alloc(x);
}
void release_alloc(Alloc* x) {
    check_canary(x, "something (found at its cudaFree)");
    x->live = false;
    madvise(x->map, x->map_len, MADV_DONTNEED);
    g_quarantine.push_back(x);
    if (g_quarantine.size() > 20000) {  // a use after free faults until the range is reused
        Alloc* old = g_quarantine.front();
        g_quarantine.pop_front();
        g_allocs.erase((uintptr_t)old->p);
        munmap(old->map, old->map_len);
        delete old;
    }
}
// "" if [p, p + n) lies in one live allocation x (or x is null: host memory), else why not.
std::string check_range(const void* p, size_t n, Alloc* x, const char* role) {
    if (!x) return "";
    if (!x->live) return std::string(role) + " " + hex(p) + " is freed device memory";
    const size_t off = (const char*)p - x->p;
    if (off + n <= x->size) return "";
    return std::string(role) + " range [" + hex(p) + ", +" + std::to_string(n) + ") runs past the end of its " +
           std::to_string(x->size) + "-byte allocation";
}

// ---- streams ----------------------------------------------------------------------------------
std::vector<EmuStream*> g_streams;  // created by cudaStreamCreateWithFlags
EmuStream* legacy(int d) {
    static std::vector<EmuStream*> l;
    while ((int)l.size() <= d) l.push_back(new EmuStream{(int)l.size(), -1, {}});
    return l[d];
}
EmuStream* resolve(cudaStream_t s) {
    if (s && std::find(g_streams.begin(), g_streams.end(), s) == g_streams.end()) fatal("unknown stream " + hex(s));
    return s ? s : legacy(t_dev);
}
std::string stream_name(EmuStream* s) {
    return (s->id < 0 ? "the legacy stream" : "stream #" + std::to_string(s->id)) + " of cuda:" + std::to_string(s->device);
}
// Runs s's work up to item `mark` (an event's); false: stopped at an NCCL operation that waits for its peers.
bool run_to(EmuStream* s, uint64_t mark) {
    for (; s->ran < mark && !s->q.empty(); s->q.pop_front(), s->ran++)
        if (!s->q.front()()) return false;
    return true;
}
bool run_ready(EmuStream* s) { return run_to(s, UINT64_MAX); }
// A synchronisation: lets the other host threads post their NCCL halves meanwhile.
void run_queue(EmuStream* s, uint64_t mark = UINT64_MAX) {
    for (auto t0 = std::chrono::steady_clock::now(); !run_to(s, mark);) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60))
            fatal("synchronising " + stream_name(s) + ": an NCCL operation has waited 60 s for its peers");
        const int held = t_locks;
        for (int i = 0; i < held; i++) mu.unlock();
        usleep(50);
        for (int i = 0; i < held; i++) mu.lock();
    }
}
struct Access {
    Alloc* x;
    bool write;
};
// Queues f on s. The race check: work on s may not touch an allocation that another stream still
// has queued work on, unless both only read. Any host synchronisation with that stream would have
// run the queued work, so a pending entry means nothing ordered the two.
// f returns false while it waits (NCCL); EMU_EAGER runs the queue at once, up to such a wait.
void submit_gated(EmuStream* s, const std::string& what, std::vector<Access> acc, std::function<bool()> f) {
    for (const Access& a : acc)
        for (auto& [t, p] : a.x->pending)
            if (t != s && p.ops > 0 && (a.write || p.writes > 0))
                fatal("RACE: " + what + " on " + stream_name(s) + (a.write ? " writes" : " reads") + " the " +
                      std::to_string(a.x->size) + "-byte allocation " + hex(a.x->p) + " while " + stream_name(t) +
                      " still has unsynchronised work on it (" + p.last + ")");
    for (const Access& a : acc) {
        auto& p = a.x->pending[s];
        p.ops++, p.writes += a.write, p.last = what;
    }
    s->queued++;
    s->q.push_back([acc, s, f = std::move(f)] {
        if (!f()) return false;
        for (const Access& a : acc) {
            auto& p = a.x->pending[s];
            p.ops--, p.writes -= a.write;
        }
        return true;
    });
    if (!g_lazy) run_ready(s);
}
void submit(EmuStream* s, const std::string& what, std::vector<Access> acc, std::function<void()> f) {
    submit_gated(s, what, std::move(acc), [f = std::move(f)] { return f(), true; });
}

// What runs now, for the fault handler.
const char* g_running = nullptr;
pthread_t g_running_thread;
template <class F> void with_open(std::set<Alloc*> xs, const char* what, F fn) {
    xs.erase(nullptr);
    for (Alloc* x : xs) open_alloc(x);
    g_running_thread = pthread_self(), g_running = what;
    fn();
    g_running = nullptr;
    for (Alloc* x : xs) close_alloc(x);
}
void do_copy(void* dst, const void* src, size_t n, Alloc* dx, Alloc* sx, const char* what) {
    if (g_trace) fprintf(stderr, "EMU %s %p <- %p (%zu bytes)\n", what, dst, src, n);
    std::string e = check_range(dst, n, dx, "destination") + check_range(src, n, sx, "source");
    if (!e.empty()) fatal(std::string(what) + " (as it ran): " + e);
    with_open({dx, sx}, what, [&] { memmove(dst, src, n); });
}

// ---- fibers and kernels -----------------------------------------------------------------------
struct Bar {
    int n = 0, count = 0, acc = 0, result = 0, line = 0;  // line: where this generation waits
    long gen = 0;
};
struct Fiber {
    void* sp;
    bool done;
    int waiting;  // 0 running, 1 at __syncthreads, 2 at a warp collective
};
char *g_stacks = nullptr, *g_smem_end = nullptr;
Fiber g_fibers[kMaxThreads];
void* g_sched_sp;
int g_cur = 0, g_n = 0;
long g_progress = 0;
const std::function<void()>* g_body;
Bar g_block, g_warp[kMaxThreads / 32];
emu::Slot g_slots[2][kMaxThreads];  // by warp generation parity: a lane never overwrites unread slots
size_t g_smem_bytes = 0, g_shared_bytes = 0;
std::vector<std::pair<void*, size_t>> g_shared;  // the static __shared__ arrays this launch uses
const char* g_kernel = "";
// Each thread's cp.async copies: issued but not committed, then committed groups, oldest first.
// A copy lands only at the cp.async.wait_group that covers it; until then its destination is NaN.
struct AsyncCopy {
    char* dst;
    const char* src;
    int bytes;
};
struct AsyncQueue {
    std::vector<AsyncCopy> open;
    std::deque<std::vector<AsyncCopy>> groups;
};
AsyncQueue g_async[kMaxThreads];

void arrive(Bar& b, int kind) {
    const long g = b.gen;
    g_progress++;
    if (++b.count == b.n) {
        b.count = 0, b.result = b.acc, b.gen++;
        return;
    }
    g_fibers[g_cur].waiting = kind;
    while (b.gen == g) emu_ctx_switch(&g_fibers[g_cur].sp, g_sched_sp);
    g_fibers[g_cur].waiting = 0;
}
std::string block_name();
void fiber_entry() {
    (*g_body)();
    if (!g_async[g_cur].open.empty() || !g_async[g_cur].groups.empty())
        fatal(block_name() + ": thread " + std::to_string(g_cur) + " returned with cp.async copies it never waited for");
    g_fibers[g_cur].done = true;
    g_progress++;
    void* dead;
    emu_ctx_switch(&dead, g_sched_sp);
}
std::string block_name() {
    return std::string("kernel ") + g_kernel + " block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) +
           "," + std::to_string(blockIdx.z) + ")";
}

// Runs one block: rounds over the live fibers in EMU_ORDER until all have returned. Exited
// threads do not count as arrived, so a barrier that some threads skip is a deadlock.
void run_block(std::vector<int>& order) {
    g_block = Bar{g_n};
    for (int w = 0; w * 32 < g_n; w++) g_warp[w] = Bar{std::min(32, g_n - w * 32)};
    for (auto& [p, n] : g_shared) memset(p, 0xff, n);  // shared memory starts as NaN in every block
    for (int t = 0; t < g_n; t++) g_async[t] = {};
    if (g_smem_bytes) memset(emu::dyn_smem(), 0xff, g_smem_bytes);
    for (int t = 0; t < g_n; t++) {  // a frame that emu_ctx_switch "returns" into fiber_entry from
        uint64_t* top = (uint64_t*)(g_stacks + (t + 1) * kStack) - 2;
        top[0] = (uint64_t)&fiber_entry, top[1] = 0;                // top[1]: ends a backtrace
        std::fill(top - 6, top, 0);                                 // rbp rbx r12..r15
        ((uint32_t*)(top - 7))[0] = 0x1f80, ((uint32_t*)(top - 7))[1] = 0x037f;  // mxcsr, x87 defaults
        g_fibers[t] = {top - 7, false, 0};
    }
    for (bool alive = true; alive;) {
        if (g_order.mode == 2) std::shuffle(order.begin(), order.end(), g_order.rng);
        const long before = g_progress;
        alive = false;
        for (int t : order) {
            if (g_fibers[t].done) continue;
            alive = true;
            g_cur = t;
            threadIdx = dim3(t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y));
            emu_ctx_switch(&g_sched_sp, g_fibers[t].sp);
        }
        if (alive && g_progress == before) {
            int n[3] = {0, 0, 0}, exited = 0;
            for (int t = 0; t < g_n; t++) g_fibers[t].done ? exited++ : n[g_fibers[t].waiting]++;
            fatal(block_name() + ": deadlock, a barrier that not all threads reach: " + std::to_string(n[1]) +
                  " threads wait at __syncthreads" + (n[1] ? " (line " + std::to_string(g_block.line) + ")" : "") +
                  ", " + std::to_string(n[2]) + " at a warp collective, " + std::to_string(exited) + " have returned");
        }
    }
}
void run_kernel(const emu::Launch& c, const std::function<void()>& body, const std::vector<Alloc*>& args) {
    for (Alloc* x : args)
        if (!x->live) fatal(std::string("kernel ") + c.name + ": a pointer argument was freed before the kernel ran");
    thread_local bool altstack = false;
    if (!altstack) {  // the fault report must run even when a fiber stack overflowed
        stack_t ss{malloc(1 << 16), 0, 1 << 16};
        sigaltstack(&ss, nullptr);
        altstack = true;
    }
    if (!g_stacks) {  // fiber stacks, each above a guard page, and the dynamic shared memory
        g_stacks = (char*)mmap(nullptr, kMaxThreads * kStack + kSmem + kPage, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (g_stacks == MAP_FAILED) fatal("cannot map the fiber stacks");
        for (int t = 0; t < kMaxThreads; t++) mprotect(g_stacks + t * kStack, kPage, PROT_NONE);
        g_smem_end = g_stacks + kMaxThreads * kStack + kSmem;
        mprotect(g_smem_end, kPage, PROT_NONE);  // an overrun of dynamic shared memory faults
    }
    g_kernel = c.name, gridDim = c.grid, blockDim = c.block, g_body = &body;
    g_n = int(c.block.x * c.block.y * c.block.z), g_smem_bytes = c.smem;
    g_shared.clear(), g_shared_bytes = 0;
    std::vector<unsigned> blocks((size_t)c.grid.x * c.grid.y * c.grid.z);
    std::iota(blocks.begin(), blocks.end(), 0u);
    reorder(blocks);
    std::vector<int> order(g_n);
    std::iota(order.begin(), order.end(), 0);
    reorder(order);
    with_open({args.begin(), args.end()}, c.name, [&] {
        for (unsigned b : blocks) {
            blockIdx = dim3(b % c.grid.x, b / c.grid.x % c.grid.y, b / (c.grid.x * c.grid.y));
            run_block(order);
        }
        for (Alloc* x : args) check_canary(x, std::string("kernel ") + c.name);
    });
}

// ---- the SIGSEGV report -----------------------------------------------------------------------
void on_segv(int, siginfo_t* si, void*) {
    const char* a = (const char*)si->si_addr;
    const bool in_kernel = g_running && pthread_equal(g_running_thread, pthread_self());
    std::string msg = "SIGSEGV at " + hex(a) + (in_kernel ? std::string(" in ") + g_running : "");
    Alloc* x = nullptr;
    for (int i = 0; i < 2000; i++, usleep(1000))  // another host thread may hold the lock briefly
        if (mu.try_lock()) {
            x = find_alloc(a, true);
            mu.unlock();
            break;
        }
    if (x) {
        const long off = a - x->p;
        msg = std::string(in_kernel ? g_running : "HOST CODE") + " touched " +
              (!x->live ? "FREED device memory, " : off < 0 || off >= (long)x->size ? "memory PAST THE END of " : "") +
              "the " + std::to_string(x->size) + "-byte allocation " + hex(x->p) + " of cuda:" + std::to_string(x->device) +
              " at offset " + std::to_string(off) +
              (in_kernel ? " (kernels and copies may touch only the allocations their pointer arguments name)"
                         : " (host code cannot dereference GPU memory: copy it to the host first)");
    } else if (g_stacks && a >= g_smem_end && a < g_smem_end + kPage) {
        msg = block_name() + " wrote past its " + std::to_string(g_smem_bytes) + " bytes of dynamic shared memory";
    } else if (g_stacks && a >= g_stacks && a < g_smem_end) {
        msg = block_name() + ": an emulated thread overflowed its 256 KiB stack";
    }
    fprintf(stderr, "\nEMU ERROR: %s\n", msg.c_str());
    backtrace_here();
    signal(SIGSEGV, SIG_DFL);  // returning repeats the access, which now kills the process
}
__attribute__((constructor)) void install_segv_report() {
    struct sigaction sa = {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
}

}  // namespace

// ---- device built-ins -------------------------------------------------------------------------
namespace emu {

int syncthreads(int line, int pred) {
    if (g_block.count == 0) g_block.line = line, g_block.acc = 0;  // first arrival of this generation
    else if (g_block.line != line)
        fatal(block_name() + ": threads wait at different __syncthreads (lines " + std::to_string(g_block.line) +
              " and " + std::to_string(line) + ")");
    g_block.acc |= pred != 0;
    arrive(g_block, 1);
    return g_block.result;
}

const Slot* warp_sync(Slot mine, unsigned mask, const char* what) {
    Bar& b = g_warp[g_cur / 32];
    if (mask != 0xffffffffu || b.n != 32)
        fatal(block_name() + ": " + what + " with mask " + hex((void*)(uintptr_t)mask) + " in a warp of " +
              std::to_string(b.n) + " threads (only full warps are emulated)");
    Slot* warp = g_slots[b.gen & 1] + g_cur / 32 * 32;
    warp[g_cur % 32] = mine;
    arrive(b, 2);
    for (int l = 0; l < 32; l++)
        if (warp[l].line != mine.line)
            fatal(block_name() + ": lanes of one warp at different collectives (" + what + " at line " +
                  std::to_string(mine.line) + ", lane " + std::to_string(l) + " at line " + std::to_string(warp[l].line) + ")");
    return warp;
}

int lane() { return g_cur % 32; }

// Dynamic shared memory ends at a guard page, 16-byte aligned.
void* dyn_smem() { return g_smem_end - (g_smem_bytes + 15) / 16 * 16; }

// A static __shared__ array on its first use in a launch: poisoned, counted against 48 KiB.
void shared_array(void* p, size_t bytes) {
    for (auto& s : g_shared)
        if (s.first == p) return;
    g_shared.push_back({p, bytes});
    memset(p, 0xff, bytes);
    if ((g_shared_bytes += bytes) + g_smem_bytes > kSmem)
        fatal(std::string("kernel ") + g_kernel + ": " + std::to_string(g_shared_bytes) + " bytes of static and " +
              std::to_string(g_smem_bytes) + " of dynamic shared memory exceed the 48 KiB default");
}

void misaligned(const void* p, size_t align) {
    fatal(block_name() + ": misaligned address " + hex(p) + " for a " + std::to_string(align) + "-byte access");
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, fragment layout of the PTX ISA ("Matrix
// Fragments for mma.m16n8k16 with floating point type"): with g = lane / 4, t = lane % 4 and the
// low half of a .b32 register first, lane 4g + t holds A rows g, g + 8 and columns 2t, 2t + 1,
// 2t + 8, 2t + 9 (a0 a1 | a2 a3 = row + 8 | a4 a5 = col + 8 | a6 a7), B rows 2t, 2t + 1, 2t + 8,
// 2t + 9 of column g, and C/D (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). bf16 products
// are exact in fp32; they are summed in k order (the hardware's order is unspecified).
void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c, int line) {
    const Slot* s = warp_sync({{a[0], a[1], a[2], a[3], b[0], b[1]}, line}, 0xffffffffu, "mma.sync");
    auto half = [](uint32_t reg, int k) { return __uint_as_float(k % 2 ? reg & 0xffff0000u : reg << 16); };
    auto A = [&](int r, int k) { return half(s[r % 8 * 4 + k % 8 / 2].w[(r >= 8) + 2 * (k >= 8)], k); };
    auto B = [&](int k, int n) { return half(s[n * 4 + k % 8 / 2].w[4 + (k >= 8)], k); };
    const int g = lane() / 4, t = lane() % 4;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
        float acc = c[i];
        for (int k = 0; k < 16; k++) acc += A(row, k) * B(k, col);
        d[i] = acc;
    }
}

// The block's shared window: the static __shared__ arrays in order of first use, then the
// dynamic shared memory. shared_offset maps a pointer into it; shared_pointer maps back.
size_t shared_offset(const void* p) {
    const char* c = (const char*)p;
    size_t base = 0;
    for (auto& [a, n] : g_shared) {
        if (c >= (char*)a && c < (char*)a + n) return base + (c - (char*)a);
        base += n;
    }
    if (c >= (char*)dyn_smem() && c < (char*)dyn_smem() + g_smem_bytes) return base + (c - (char*)dyn_smem());
    fatal(block_name() + ": __cvta_generic_to_shared of " + hex(p) + ", which is not shared memory");
}
char* shared_pointer(uint32_t off, int bytes, const char* what) {
    if (off % 16) misaligned((void*)(uintptr_t)off, 16);
    size_t base = 0;
    for (auto& [a, n] : g_shared) {
        if (off < base + n) {
            if (off + bytes > base + n) break;
            return (char*)a + (off - base);
        }
        base += n;
    }
    if (off >= base && off + bytes <= base + g_smem_bytes) return (char*)dyn_smem() + (off - base);
    fatal(block_name() + ": " + what + " of " + std::to_string(bytes) + " bytes at shared offset " + std::to_string(off) +
          " runs outside the block's shared arrays");
}

// cp.async.cg.shared.global [dst], [src], 16: the destination is NaN until the copy lands.
void cp_async(uint32_t dst, const void* src, int bytes, int line) {
    if ((uintptr_t)src % bytes) misaligned(src, bytes);
    char* d = shared_pointer(dst, bytes, "cp.async");
    memset(d, 0xff, bytes);
    g_async[g_cur].open.push_back({d, (const char*)src, bytes});
    (void)line;
}
void cp_async_commit() {
    AsyncQueue& q = g_async[g_cur];
    q.groups.push_back(std::move(q.open));
    q.open.clear();
}
// cp.async.wait_group N: all but the newest N committed groups have landed (this thread's only).
void cp_async_wait(int pending) {
    AsyncQueue& q = g_async[g_cur];
    for (; (int)q.groups.size() > pending; q.groups.pop_front())
        for (const AsyncCopy& c : q.groups.front()) memcpy(c.dst, c.src, c.bytes);
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: lanes 8j..8j+7 give the row addresses (16 bytes each)
// of matrix j; lane l receives, in register j, row l / 4 of matrix j, 16-bit columns 2(l % 4), +1.
void ldmatrix_x4(uint32_t* r, uint32_t addr, int line) {
    const Slot* s = warp_sync({{addr}, line}, 0xffffffffu, "ldmatrix");
    const int l = lane();
    for (int j = 0; j < 4; j++) memcpy(&r[j], shared_pointer(s[8 * j + l / 4].w[0], 16, "ldmatrix") + 4 * (l % 4), 4);
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: A (16x8) rows g, g + 8 and columns t, t + 4
// (a0 a1 | a2 a3 = col + 4), B rows t, t + 4 of column g, C/D as for m16n8k16. A tf32 operand is
// the fp32 in its register with the low 13 mantissa bits ignored; tf32 products are exact in fp32.
void mma_m16n8k8_tf32(float* d, const uint32_t* a, const uint32_t* b, const float* c, int line) {
    const Slot* s = warp_sync({{a[0], a[1], a[2], a[3], b[0], b[1]}, line}, 0xffffffffu, "mma.sync tf32");
    auto tf32 = [](uint32_t reg) { return __uint_as_float(reg & 0xffffe000u); };
    auto A = [&](int r, int k) { return tf32(s[r % 8 * 4 + k % 4].w[(r >= 8) + 2 * (k >= 4)]); };
    auto B = [&](int k, int n) { return tf32(s[n * 4 + k % 4].w[4 + (k >= 4)]); };
    const int g = lane() / 4, t = lane() % 4;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
        float acc = c[i];
        for (int k = 0; k < 8; k++) acc += A(row, k) * B(k, col);
        d[i] = acc;
    }
}

void launch_impl(const Launch& c, std::function<void()> body, const std::vector<PtrArg>& ptrs) {
    Lock lock;
    const unsigned long n = (unsigned long)c.block.x * c.block.y * c.block.z;
    const std::string cfg = std::string(c.name) + "<<<(" + std::to_string(c.grid.x) + "," + std::to_string(c.grid.y) +
                            "," + std::to_string(c.grid.z) + "), (" + std::to_string(c.block.x) + "," +
                            std::to_string(c.block.y) + "," + std::to_string(c.block.z) + "), " + std::to_string(c.smem) + ">>>";
    if (g_trace) fprintf(stderr, "EMU launch %s on cuda:%d\n", cfg.c_str(), t_dev);
    if (n == 0 || n > 1024 || c.block.z > 64 || !c.grid.x || !c.grid.y || !c.grid.z || c.grid.x > 0x7fffffffu ||
        c.grid.y > 65535 || c.grid.z > 65535)
        return (void)fail(cudaErrorInvalidConfiguration, "launch " + cfg);
    if (c.bound && n > c.bound)
        return (void)fail(cudaErrorLaunchOutOfResources, "launch " + cfg + ": more threads than __launch_bounds__(" +
                                                             std::to_string(c.bound) + ")");
    if (c.smem > kSmem) return (void)fail(cudaErrorInvalidValue, "launch " + cfg + ": dynamic shared memory above 48 KiB");
    EmuStream* s = resolve(c.stream);
    if (s->device != t_dev)
        return (void)fail(cudaErrorInvalidResourceHandle, "launch " + cfg + " on " + stream_name(s) +
                                                              " while the current device is cuda:" + std::to_string(t_dev));
    std::vector<Alloc*> args;
    std::vector<Access> acc;
    for (size_t i = 0; i < ptrs.size(); i++) {
        if (!ptrs[i].p) continue;
        Alloc* x = find_alloc(ptrs[i].p);
        Alloc* before = find_alloc((const char*)ptrs[i].p - 1);
        if (!x && before && before->live && ptrs[i].p == before->p + before->size) continue;  // one past the end
        const std::string bad = !x ? "is a HOST pointer " + hex(ptrs[i].p)
                                : !x->live ? "points into FREED device memory " + hex(ptrs[i].p)
                                : x->device != s->device ? "is memory of cuda:" + std::to_string(x->device) + " (no peer access)"
                                                         : "";
        if (!bad.empty()) fatal("launch " + cfg + " on cuda:" + std::to_string(s->device) + ": pointer argument #" + std::to_string(i) + " " + bad);
        args.push_back(x), acc.push_back({x, !ptrs[i].readonly});
    }
    submit(s, cfg, acc, [c, body = std::move(body), args] { run_kernel(c, body, args); });
}

}  // namespace emu

// ---- host API ---------------------------------------------------------------------------------

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
        case cudaErrorNotReady: return "device not ready";
    }
    return "unknown error";
}
cudaError_t cudaGetLastError() {
    const cudaError_t e = t_err;
    t_err = cudaSuccess;
    return e;
}
cudaError_t cudaGetDeviceCount(int* n) {
    *n = std::max(g_gpus, 0);
    return *n ? cudaSuccess : t_err = cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= g_gpus) return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(d) + ")");
    t_dev = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
    *d = t_dev;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
    Lock lock;
    run_queue(legacy(t_dev));
    for (EmuStream* x : g_streams)
        if (x->device == t_dev) run_queue(x);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    Lock lock;
    if (g_gpus <= 0) return fail(cudaErrorNoDevice, "cudaStreamCreateWithFlags");
    if (flags != cudaStreamNonBlocking) return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: only non-blocking streams are emulated");
    g_streams.push_back(*s = new EmuStream{t_dev, (int)g_streams.size(), {}});
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    Lock lock;
    run_queue(resolve(s));
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {  // runs what it can: lazy work has no other trigger
    Lock lock;
    return run_ready(resolve(s)) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {  // CUDA lets queued work finish; so does this
    Lock lock;
    if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of the legacy stream");
    run_queue(resolve(s));
    g_streams.erase(std::find(g_streams.begin(), g_streams.end(), s));   // kept in memory: allocations name it
    return cudaSuccess;
}

// ---- events -----------------------------------------------------------------------------------
// An event marks how much work its stream had queued when it was recorded. A stream that waits
// for it (cudaStreamWaitEvent) here runs the other stream up to the mark at once: the emulator
// may run queued work at any time before a synchronisation, and running it now is what lets the
// race check see the order (the waiting stream's later work no longer overlaps it). Work queued
// on the other stream after the record still races with the waiting stream's, as on a GPU.
std::set<EmuEvent*> g_events;
EmuEvent* event_of(cudaEvent_t e) {
    if (!g_events.count(e)) fatal("unknown or destroyed event " + hex(e));
    return e;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    Lock lock;
    if (flags != cudaEventDisableTiming) return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: only cudaEventDisableTiming is emulated");
    g_events.insert(*e = new EmuEvent{});
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    Lock lock;
    EmuEvent* ev = event_of(e);
    ev->s = resolve(s), ev->mark = ev->s->queued;
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    Lock lock;
    resolve(s);
    EmuEvent* ev = event_of(e);
    if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags must be 0");
    if (ev->s) run_queue(ev->s, ev->mark);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {  // runs what it can, as cudaStreamQuery
    Lock lock;
    EmuEvent* ev = event_of(e);
    return !ev->s || run_to(ev->s, ev->mark) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    Lock lock;
    g_events.erase(event_of(e));
    delete e;
    return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
    Lock lock;
    *p = nullptr;
    if (resolve(s)->device != t_dev)
        return fail(cudaErrorInvalidResourceHandle, "cudaMallocAsync on " + stream_name(resolve(s)) +
                                                        " while the current device is cuda:" + std::to_string(t_dev));
    Alloc* x = bytes && resolve(s)->device != g_oom_gpu ? new_alloc(bytes, resolve(s)->device) : nullptr;
    if (bytes && !x) return fail(cudaErrorMemoryAllocation, "cudaMallocAsync(" + std::to_string(bytes) + ")");
    if (x) *p = x->p;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) { return cudaMallocAsync(p, bytes, nullptr); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
    Lock lock;
    if (!p) return cudaSuccess;
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || !it->second->live || it->second->free_queued)
        return fail(cudaErrorInvalidValue, "cudaFreeAsync(" + hex(p) + "): not the start of a live device allocation" +
                                               (it != g_allocs.end() ? " (double free)" : ""));
    Alloc* x = it->second;
    // Whether CUDA accepts another GPU's stream here is not documented; we never rely on it.
    // Fatal, not an error code: destructors ignore the codes that free calls return.
    if (resolve(s)->device != t_dev || x->device != t_dev)
        fatal("cudaFreeAsync(" + hex(p) + ") of cuda:" + std::to_string(x->device) + " memory on " +
              stream_name(resolve(s)) + " while the current device is cuda:" + std::to_string(t_dev));
    x->free_queued = true;
    submit(resolve(s), "cudaFreeAsync", {{x, true}}, [x] { release_alloc(x); });
    return cudaSuccess;
}
cudaError_t cudaFree(void* p) {  // synchronises the device first, as the real one does
    Lock lock;
    const int saved = t_dev;   // frees any GPU's memory, as the real one does
    auto it = g_allocs.find((uintptr_t)p);
    if (p && it != g_allocs.end()) t_dev = it->second->device;
    cudaDeviceSynchronize();
    cudaError_t e = cudaFreeAsync(p, nullptr);
    run_queue(legacy(t_dev));
    t_dev = saved;
    return e;
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int d) {
    static EmuPool pool_of_every_device;  // the release threshold changes nothing here
    if (d < 0 || d >= g_gpus) return fail(cudaErrorInvalidDevice, "cudaDeviceGetDefaultMemPool");
    *pool = &pool_of_every_device;
    return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr, void* value) {
    return pool && value ? cudaSuccess : fail(cudaErrorInvalidValue, "cudaMemPoolSetAttribute");
}

// Copies: check the ranges and the kind, then queue. A pageable host source is staged at once; a
// host destination makes the call wait for the copy, as with the real runtime.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    Lock lock;
    if (n == 0) return cudaSuccess;
    Alloc *dx = find_alloc(dst), *sx = find_alloc(src);
    const std::string e = check_range(dst, n, dx, "destination") + check_range(src, n, sx, "source");
    if (!e.empty()) return fail(cudaErrorInvalidValue, "cudaMemcpy: " + e);
    const cudaMemcpyKind actual = cudaMemcpyKind((sx ? 2 : 0) + (dx ? 1 : 0));
    const char* names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};
    if (kind != cudaMemcpyDefault && kind != actual)
        return fail(cudaErrorInvalidValue, std::string("cudaMemcpy: kind ") + names[kind] + " but the pointers make it " + names[actual]);
    EmuStream* st = resolve(s);
    const std::string what = std::string("cudaMemcpy") + names[actual];
    if (!dx && !sx) return do_copy(dst, src, n, nullptr, nullptr, "cudaMemcpy"), cudaSuccess;
    if (!sx) {
        auto staged = std::make_shared<std::vector<char>>((const char*)src, (const char*)src + n);
        submit(st, what, {{dx, true}}, [=] { do_copy(dst, staged->data(), n, dx, nullptr, "cudaMemcpyHostToDevice"); });
        return cudaSuccess;
    }
    std::vector<Access> acc = {{sx, false}};
    if (dx) acc.push_back({dx, true});
    submit(st, what, acc, [=] { do_copy(dst, src, n, dx, sx, dx ? "cudaMemcpyDeviceToDevice" : "cudaMemcpyDeviceToHost"); });
    if (!dx) run_queue(st);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    Lock lock;
    const cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
    run_queue(legacy(t_dev));
    return e;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
    Lock lock;
    if (n == 0) return cudaSuccess;
    Alloc* x = find_alloc(p);
    const std::string e = x ? check_range(p, n, x, "memset") : "memset of the HOST pointer " + hex(p);
    if (!e.empty()) return fail(cudaErrorInvalidValue, "cudaMemsetAsync: " + e);
    submit(resolve(s), "cudaMemsetAsync", {{x, true}}, [=] {
        if (!x->live) fatal("cudaMemsetAsync (as it ran): " + hex(p) + " is freed device memory");
        with_open({x}, "cudaMemsetAsync", [&] { memset(p, v, n); });
    });
    return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
    Lock lock;
    const cudaError_t e = cudaMemsetAsync(p, v, n, nullptr);
    run_queue(legacy(t_dev));
    return e;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
    Lock lock;
    Alloc* x = find_alloc(p);  // a freed block still belongs to the device's pool
    *a = x ? cudaPointerAttributes{cudaMemoryTypeDevice, x->device, (void*)p, nullptr}
           : cudaPointerAttributes{cudaMemoryTypeUnregistered, -2, nullptr, (void*)p};
    return cudaSuccess;
}

// ---- NCCL (nccl.h) ----------------------------------------------------------------------------
// An operation (a send/receive pair, an all-reduce) is one NcclOp shared by the ranks taking part;
// each rank queues its half on its stream. The op runs (copies, sums) when the last half reaches
// the head of its stream, so a stream waiting for its peers is "not ready". A group's halves are
// one queue entry: a send and a receive between two ranks posted together cannot deadlock.
struct NcclWorld;
struct EmuNcclComm {
    std::shared_ptr<NcclWorld> world;
    int rank, device;
    bool aborted = false;                        // freed by ncclCommAbort; kept to report a later use
    std::map<std::pair<int, int>, long> posted;  // operations posted per (from, to); all-reduces: (-1, -1)
};
namespace {
struct NcclOp {
    std::shared_ptr<NcclWorld> world;
    int parties, posted = 0, arrived = 0;
    size_t bytes;
    bool reduce, done = false;
    std::vector<int> ranks;  // by party: sender and receiver, or every rank of the all-reduce
    std::vector<const void*> src;
    std::vector<void*> dst;
};
struct NcclHalf {
    std::shared_ptr<NcclOp> op;
    int party;
    bool arrived = false;
};
}  // namespace
struct NcclWorld {
    int n, joined;
    std::vector<EmuNcclComm*> comms;                                     // by rank; null once destroyed or aborted
    std::map<std::tuple<int, int, long>, std::shared_ptr<NcclOp>> open;  // (from, to, number) -> op with halves to come
};
namespace {
std::mutex g_join_mu;  // ncclCommInitRank waits here, without holding mu
std::condition_variable g_join_cv;
std::map<std::string, std::shared_ptr<NcclWorld>> g_joining;
struct Posted {
    EmuStream* s;
    NcclHalf half;
    std::vector<Access> acc;
};
thread_local std::vector<Posted> t_posted;  // this thread's halves until its group ends
thread_local int t_group = 0;

ncclResult_t nccl_fail(ncclResult_t r, const std::string& msg) {
    fprintf(stderr, "EMU: %s: %s\n", msg.c_str(), ncclGetErrorString(r));
    return r;
}
bool gone(const NcclOp& op, int party) { return !op.world->comms[op.ranks[party]]; }
// The last half has arrived: the sum of the sources (the one source of a send, in rank order for
// an all-reduce, so every rank gets the same bits) goes to every destination.
void nccl_run(NcclOp& op) {
    const char* what = op.reduce ? "ncclAllReduce" : "ncclSend/ncclRecv";
    std::set<Alloc*> xs;
    for (int p = 0; p < op.parties; p++) {
        if (gone(op, p)) return;  // a peer aborted: the others wait until they time out
        for (const void* q : {op.src[p], (const void*)op.dst[p]}) {
            Alloc* x = q ? find_alloc(q) : nullptr;
            if (q && x && !x->live) fatal(std::string(what) + " (as it ran): rank " + std::to_string(op.ranks[p]) + "'s buffer was freed");
            xs.insert(x);
        }
    }
    if (g_trace) fprintf(stderr, "EMU %s (%zu bytes)\n", what, op.bytes);
    op.done = true;
    with_open(xs, what, [&] {
        std::vector<float> sum((op.bytes + 3) / 4);
        memcpy(sum.data(), op.src[0], op.bytes);
        for (int p = 1; p < op.parties; p++)
            for (size_t i = 0; op.src[p] && i < sum.size(); i++) sum[i] += ((const float*)op.src[p])[i];
        for (void* d : op.dst)
            if (d) memcpy(d, sum.data(), op.bytes);
    });
}
// Queues the group's halves, one entry per stream, each done when all its operations are.
ncclResult_t nccl_flush() {
    Lock lock;
    while (!t_posted.empty()) {
        EmuStream* s = t_posted.front().s;
        std::vector<NcclHalf> halves;
        std::vector<Access> acc;
        for (auto it = t_posted.begin(); it != t_posted.end();) {
            if (it->s != s) { ++it; continue; }
            halves.push_back(it->half), acc.insert(acc.end(), it->acc.begin(), it->acc.end());
            it = t_posted.erase(it);
        }
        submit_gated(s, "NCCL", acc, [halves]() mutable {
            bool done = true;
            for (NcclHalf& h : halves) {
                if (gone(*h.op, h.party)) continue;  // its communicator was aborted: dropped
                if (!h.arrived && (h.arrived = true, ++h.op->arrived == h.op->parties)) nccl_run(*h.op);
                done &= h.op->done;
            }
            return done;
        });
    }
    return ncclSuccess;
}
// Adds this rank's half of the operation `key` (party `party` of `parties`) to its group.
ncclResult_t nccl_post(const std::string& what, ncclComm_t c, cudaStream_t st, std::tuple<int, int, long> key,
                       int parties, int party, const void* src, void* dst, size_t bytes) {
    Lock lock;
    if (!c || c->aborted) return nccl_fail(ncclInvalidArgument, what + ": no communicator, or an aborted one");
    EmuStream* s = resolve(st);
    if (s->device != c->device)
        return nccl_fail(ncclInvalidUsage, what + " on " + stream_name(s) + " for a communicator of cuda:" + std::to_string(c->device));
    std::vector<Access> acc;
    for (const void* p : {src, (const void*)dst}) {
        if (!p) continue;
        Alloc* x = find_alloc(p);
        const std::string e = !x || x->device != c->device ? hex(p) + " is not memory of cuda:" + std::to_string(c->device)
                                                           : check_range(p, bytes, x, "buffer");
        if (!e.empty()) return nccl_fail(ncclInvalidArgument, what + ": " + e);
        acc.push_back({x, p == dst});
    }
    std::shared_ptr<NcclOp>& slot = c->world->open[key];
    if (!slot)
        slot.reset(new NcclOp{c->world, parties, 0, 0, bytes, std::get<0>(key) < 0, false, std::vector<int>(parties),
                              std::vector<const void*>(parties), std::vector<void*>(parties)});
    else if (slot->bytes != bytes)
        fatal(what + " of " + std::to_string(bytes) + " bytes meets a half of " + std::to_string(slot->bytes) +
              " bytes (NCCL matches the sends and receives of two ranks in posting order)");
    std::shared_ptr<NcclOp> op = slot;
    op->ranks[party] = c->rank, op->src[party] = src, op->dst[party] = dst;
    if (++op->posted == parties) c->world->open.erase(key);
    t_posted.push_back({s, {op, party}, acc});
    return t_group ? ncclSuccess : nccl_flush();
}
ncclComm_t new_comm(const std::shared_ptr<NcclWorld>& w, int rank, int device) {
    return w->comms[rank] = new EmuNcclComm{w, rank, device, false, {}};
}
}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclSystemError: return "unhandled system error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
    }
    return "unknown result";
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    static std::atomic<int> next{0};
    snprintf(id->internal, sizeof id->internal, "emu-nccl-%d", next++);
    return ncclSuccess;
}
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int n, const int* devices) {
    Lock lock;
    auto w = std::make_shared<NcclWorld>(NcclWorld{n, n, std::vector<EmuNcclComm*>(n), {}});
    for (int r = 0; r < n; r++) {
        if (devices[r] < 0 || devices[r] >= g_gpus || std::count(devices, devices + r, devices[r]))
            return nccl_fail(ncclInvalidArgument, "ncclCommInitAll: device " + std::to_string(devices[r]) + " missing or twice");
        comms[r] = new_comm(w, r, devices[r]);
    }
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int n, ncclUniqueId id, int rank) {  // blocks until all n joined
    std::unique_lock<std::mutex> lock(g_join_mu);
    std::shared_ptr<NcclWorld>& slot = g_joining[id.internal];
    if (!slot) slot = std::make_shared<NcclWorld>(NcclWorld{n, 0, std::vector<EmuNcclComm*>(n), {}});
    std::shared_ptr<NcclWorld> w = slot;
    if (n != w->n || rank < 0 || rank >= n || w->comms[rank])
        return nccl_fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(n) +
                                                  " twice or out of range");
    for (EmuNcclComm* c : w->comms)
        if (c && c->device == t_dev) return nccl_fail(ncclInvalidUsage, "ncclCommInitRank: two ranks on cuda:" + std::to_string(t_dev));
    *comm = new_comm(w, rank, t_dev);
    if (++w->joined == n) g_joining.erase(id.internal), g_join_cv.notify_all();
    if (!g_join_cv.wait_for(lock, std::chrono::seconds(60), [&] { return w->joined == n; }))
        return nccl_fail(ncclSystemError, "ncclCommInitRank: not all " + std::to_string(n) + " ranks joined within 60 s");
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    Lock lock;
    if (c && c->aborted) fatal("ncclCommDestroy of a communicator that ncclCommAbort has already freed");
    if (c) c->world->comms[c->rank] = nullptr;
    delete c;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) {  // its queued halves are dropped; its peers' wait
    Lock lock;
    if (c && c->aborted) fatal("ncclCommAbort of a communicator that ncclCommAbort has already freed");
    if (c) c->world->comms[c->rank] = nullptr, c->aborted = true;
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* error) {
    *error = ncclSuccess;
    return c && !c->aborted ? ncclSuccess : nccl_fail(ncclInvalidArgument, "ncclCommGetAsyncError: no communicator");
}
ncclResult_t ncclGroupStart() { return t_group++, ncclSuccess; }
ncclResult_t ncclGroupEnd() {
    if (t_group == 0) return nccl_fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    return --t_group ? ncclSuccess : nccl_flush();
}
ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c, cudaStream_t s) {
    if (!c || peer < 0 || peer >= c->world->n || type != ncclChar) return nccl_fail(ncclInvalidArgument, "ncclSend: peer or type");
    return nccl_post("ncclSend", c, s, {c->rank, peer, c->posted[{c->rank, peer}]++}, 2, 0, buf, nullptr, count);
}
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c, cudaStream_t s) {
    if (!c || peer < 0 || peer >= c->world->n || type != ncclChar) return nccl_fail(ncclInvalidArgument, "ncclRecv: peer or type");
    return nccl_post("ncclRecv", c, s, {peer, c->rank, c->posted[{peer, c->rank}]++}, 2, 1, nullptr, buf, count);
}
ncclResult_t ncclAllReduce(const void* sendbuf, void* recvbuf, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t s) {
    if (!c || type != ncclFloat || op != ncclSum) return nccl_fail(ncclInvalidArgument, "ncclAllReduce: only float sums are emulated");
    return nccl_post("ncclAllReduce", c, s, {-1, -1, c->posted[{-1, -1}]++}, c->world->n, c->rank, sendbuf, recvbuf, count * 4);
}
