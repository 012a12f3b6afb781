// pipeline.hpp — pipeline parallelism, the copyable core: schedules as data, the plan of their
// transfers, a validator and the executor that runs a schedule on real stages.
//
// A model is cut into S consecutive stages; P ranks (GPUs, threads, processes) hold V each; a batch
// is split into M micro-batches that flow forward through the stages and backward again. A
// *schedule* says in which order each rank runs its forward (F) and backward (B, or BI + BW)
// steps: plain data, checked before any tensor exists. Not a model, an autograd or a transport:
// implement `Stage` and `Comm`. C++17 standard library only; pipeline_lab.hpp adds the rest.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pp {

// ---- Actions and schedules ---------------------------------------------------------------------
// F: forward. B: full backward. BI: backward for the input gradient only (what the previous stage
// waits for). BW: backward for the weight gradient only (nobody waits for it; it can be delayed).
enum class Op { F, B, BI, BW };

// One step of one rank: run `op` for `microbatch` on its chunk `chunk` of the S = P*V virtual stages.
struct Action {
    Op op;
    int microbatch;
    int chunk = 0;
    bool overlapped = false;  // DualPipe's F&B: overlaps the F before it (run in turn; simulated F + B or max)
};
inline bool operator==(const Action& a, const Action& b) {
    return a.op == b.op && a.microbatch == b.microbatch && a.chunk == b.chunk && a.overlapped == b.overlapped;
}

// Where the virtual stages live. loop (Megatron): chunk c of rank r is stage c*P + r, round the ranks V
// times. vee (ZB-V, DualPipeV): odd chunks run back (stage c*P + P-1-r); with V = 2 the first and last
// stages (and the tied embedding) share rank 0, and the turn at rank P-1 never leaves the rank.
enum class Placement { loop, vee };

struct Layout {
    int P = 1, V = 1;
    Placement placement = Placement::loop;
    bool turned(int chunk) const { return placement == Placement::vee && chunk % 2 == 1; }
    int stage(int rank, int chunk) const { return chunk * P + (turned(chunk) ? P - 1 - rank : rank); }
    int rank(int stage) const { return turned(stage / P) ? P - 1 - stage % P : stage % P; }
    int chunk(int stage) const { return stage / P; }
};

// One list of actions per pipeline rank, and the placement they assume.
struct Schedule : std::vector<std::vector<Action>> {
    using std::vector<std::vector<Action>>::vector;
    Placement placement = Placement::loop;
};
inline bool operator==(const Schedule& a, const Schedule& b) {
    return a.placement == b.placement && std::equal(a.begin(), a.end(), b.begin(), b.end());
}

inline const char* op_name(Op op) { return op == Op::F ? "F" : op == Op::B ? "B" : op == Op::BI ? "BI" : "BW"; }

// "F3", "BI3"; with_chunk gives "F3.1" (used whenever V > 1, and always by the executor).
inline std::string to_string(const Action& a, bool with_chunk = false) {
    return op_name(a.op) + std::to_string(a.microbatch) + (with_chunk ? "." + std::to_string(a.chunk) : "");
}

inline std::string to_string(const Schedule& schedule, bool with_chunk = false) {
    std::string out;
    for (size_t r = 0; r < schedule.size(); r++) {
        out += "rank " + std::to_string(r) + ":";
        for (const Action& a : schedule[r]) out += " " + to_string(a, with_chunk);
        out += "\n";
    }
    return out;
}

namespace detail {
inline void check_sizes(const char* name, int P, int M, int V = 1) {
    if (P < 1 || M < 1 || V < 1 || V > 127)
        throw std::invalid_argument(std::string(name) + ": need stages P >= 1, micro-batches M >= 1 and"
                                    " 1 <= chunks V <= 127, got P=" + std::to_string(P) + " M=" +
                                    std::to_string(M) + " V=" + std::to_string(V));
}
}  // namespace detail

// GPipe: every forward, then every backward. Simple, but each rank stashes all M micro-batches.
inline Schedule gpipe(int P, int M) {
    detail::check_sizes("gpipe", P, M);
    Schedule schedule(P);
    for (int rank = 0; rank < P; rank++) {
        for (int mb = 0; mb < M; mb++) schedule[rank].push_back({Op::F, mb});
        // Backward in INCREASING micro-batch order (figures often draw it reversed): one device's
        // order of accumulating weight gradients, so the pipeline reproduces it bit for bit.
        for (int mb = 0; mb < M; mb++) schedule[rank].push_back({Op::B, mb});
    }
    return schedule;
}

// 1F1B (PipeDream-Flush): after a short warm-up each rank alternates one forward and one backward,
// so rank r never holds more than P - r micro-batches, whatever M is.
inline Schedule one_f_one_b(int P, int M) {
    detail::check_sizes("one_f_one_b", P, M);
    Schedule schedule(P);
    for (int rank = 0; rank < P; rank++) {
        std::vector<Action>& actions = schedule[rank];
        int num_warmup_microbatches = std::min(P - rank - 1, M);
        int num_microbatches_remaining = M - num_warmup_microbatches;
        // Warmup: run ahead by the number of stages after this one, so the first backward comes as it fills.
        for (int i = 0; i < num_warmup_microbatches; i++) actions.push_back({Op::F, i});
        // Steady state: one forward, one backward.
        for (int i = 0; i < num_microbatches_remaining; i++) {
            actions.push_back({Op::F, num_warmup_microbatches + i});
            actions.push_back({Op::B, i});
        }
        // Cooldown: drain the backwards of the micro-batches still in flight.
        for (int i = 0; i < num_warmup_microbatches; i++)
            actions.push_back({Op::B, num_microbatches_remaining + i});
    }
    return schedule;
}

// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): each rank holds V chunks, so the pipeline fills V
// times faster and the bubble shrinks by about V, for V times more messages. Megatron's order: forwards in
// groups of P micro-batches per chunk (chunk 0 for 0..P-1, chunk 1 for the same, ..., chunk 0 for P..2P-1),
// backwards with the chunks reversed, each chunk in increasing micro-batch order; M a multiple of P (full groups).
inline Schedule interleaved(int P, int M, int V) {
    detail::check_sizes("interleaved", P, M, V);
    if (M % P != 0)
        throw std::invalid_argument("interleaved: Megatron's interleaved schedule needs the number of micro-batches M (" +
                                    std::to_string(M) + ") to be a multiple of the number of stages P (" +
                                    std::to_string(P) + ")");
    int total = M * V;  // forward steps per rank (all chunks)
    auto action = [&](Op op, int k) {  // a rank's k-th forward or backward
        int group = k / (P * V), in_group = k % (P * V);
        if (op == Op::F) return Action{Op::F, group * P + in_group % P, in_group / P};
        return Action{Op::B, group * P + in_group % P, V - 1 - in_group / P};
    };
    Schedule schedule(P);
    for (int rank = 0; rank < P; rank++) {
        std::vector<Action>& actions = schedule[rank];
        // Megatron's warm-up: (V - 1) * P forwards so every chunk has started, plus two per later stage,
        // as a forward's output leaves only with the next backward's (the plain plan). V = 1: 1F1B.
        int num_warmup_microbatches = V == 1 ? std::min(P - rank - 1, M)
                                             : std::min((P - rank - 1) * 2 + (V - 1) * P, total);
        int num_microbatches_remaining = total - num_warmup_microbatches;
        // Warmup
        for (int k = 0; k < num_warmup_microbatches; k++) actions.push_back(action(Op::F, k));
        // Steady state
        for (int k = 0; k < num_microbatches_remaining; k++) {
            actions.push_back(action(Op::F, num_warmup_microbatches + k));
            actions.push_back(action(Op::B, k));
        }
        // Cooldown
        for (int k = num_microbatches_remaining; k < total; k++) actions.push_back(action(Op::B, k));
    }
    return schedule;
}

// ---- The plain plan: the transfers a schedule implies ------------------------------------------
// F receives from the previous virtual stage and sends to the next, B and BI the other way. Between
// two steps a rank posts ONE group, the sends just finished and the next receives, complete when each
// operation has met its peer's (unbuffered, FIFO per pair of ranks). Why, and late sends: docs/communication.md.

// A tag names what a transfer carries: (gradient?, micro-batch, chunk of the receiving action),
// the chunk in 7 bits: a rank holds at most kMaxChunks chunks (validate and --chunks check it).
constexpr int kMaxChunks = 128;
inline int transfer_tag(bool grad, int microbatch, int chunk) { return (microbatch * kMaxChunks + chunk) * 2 + int(grad); }
inline bool tag_is_grad(int tag) { return tag & 1; }
inline int tag_microbatch(int tag) { return tag / (2 * kMaxChunks); }
inline int tag_chunk(int tag) { return (tag / 2) % kMaxChunks; }
// The receiving action's name: "F3" for an activation, "B3" for a gradient ("F3.1" with chunk).
inline std::string tag_label(int tag, bool with_chunk = true) {
    return to_string(Action{tag_is_grad(tag) ? Op::B : Op::F, tag_microbatch(tag), tag_chunk(tag)}, with_chunk);
}

struct CommOp { bool send; int peer; int tag; };  // peer: a pipeline rank
inline bool operator==(const CommOp& a, const CommOp& b) { return a.send == b.send && a.peer == b.peer && a.tag == b.tag; }

// A rank's groups of transfers, plan[i] before action i; one per rank is a plan of the schedule.
using Plan = std::vector<std::vector<CommOp>>;

namespace detail {
// The receive action `a` on `rank` needs before it runs; peer < 0 when none.
inline CommOp input_of(const Action& a, int rank, const Layout& layout) {
    int s = layout.stage(rank, a.chunk), S = layout.P * layout.V;
    if (a.op == Op::F && s > 0) return {false, layout.rank(s - 1), transfer_tag(false, a.microbatch, a.chunk)};
    if ((a.op == Op::B || a.op == Op::BI) && s < S - 1)
        return {false, layout.rank(s + 1), transfer_tag(true, a.microbatch, a.chunk)};
    return {false, -1, 0};
}
// The send `a` makes after it runs; peer < 0 when none.
inline CommOp output_of(const Action& a, int rank, const Layout& layout) {
    int s = layout.stage(rank, a.chunk), S = layout.P * layout.V;
    if (a.op == Op::F && s < S - 1) return {true, layout.rank(s + 1), transfer_tag(false, a.microbatch, layout.chunk(s + 1))};
    if ((a.op == Op::B || a.op == Op::BI) && s > 0)
        return {true, layout.rank(s - 1), transfer_tag(true, a.microbatch, layout.chunk(s - 1))};
    return {true, -1, 0};
}
// The groups a rank posts: plan[i] before action i, plan[n] after the last one. A step is one
// action, or a pair: F then B with the loop placement and V > 1 (Megatron's), an overlapped F&B.
inline Plan comm_plan(const std::vector<Action>& actions, int rank, const Layout& layout) {
    size_t n = actions.size();
    Plan plan(n + 1);
    std::vector<CommOp> sends;  // of the previous step
    for (size_t i = 0; i <= n; i++) {
        std::vector<CommOp>& group = plan[i];
        for (const CommOp& out : sends) {
            group.push_back(out);
            if (out.peer == rank) group.push_back({false, rank, out.tag});  // within the rank: a local copy
        }
        sends.clear();
        if (i == n) break;
        bool megatron = layout.V > 1 && layout.placement == Placement::loop && i + 2 < n && actions[i].op == Op::F &&
                        (actions[i + 1].op == Op::B || actions[i + 1].op == Op::BI) &&
                        std::any_of(actions.begin() + long(i) + 2, actions.end(), [](const Action& a) { return a.op == Op::F; });
        bool pair = megatron || (i + 1 < n && actions[i].op == Op::F && actions[i + 1].overlapped);
        for (size_t j = i; j <= i + pair; j++) {
            CommOp in = input_of(actions[j], rank, layout), out = output_of(actions[j], rank, layout);
            if (in.peer >= 0 && in.peer != rank) group.push_back(in);
            if (out.peer >= 0) sends.push_back(out);
        }
        i += pair;
    }
    return plan;
}
inline std::string describe(const CommOp& op, bool with_chunk) {
    return std::string(op.send ? "send " : "recv ") + tag_label(op.tag, with_chunk) +
           (op.send ? " to rank " : " from rank ") + std::to_string(op.peer);
}

// ---- validate ----------------------------------------------------------------------------------
// Static checks on each rank's own list: every (micro-batch, chunk) runs F, then B or BI then BW, once each.
inline void check_actions(const Schedule& schedule, int M, int V) {
    for (size_t r = 0; r < schedule.size(); r++) {
        std::vector<int> seen(size_t(M) * V, 0);  // bit flags per (chunk, micro-batch)
        const int kF = 1, kB = 2, kBI = 4, kBW = 8;
        for (const Action& a : schedule[r]) {
            std::string where = "rank " + std::to_string(r) + ", action " + to_string(a, V > 1) + ": ";
            if (a.microbatch < 0 || a.microbatch >= M || a.chunk < 0 || a.chunk >= V)
                throw std::runtime_error(where + "micro-batch or chunk out of range (M=" + std::to_string(M) +
                                         ", V=" + std::to_string(V) + ")");
            int& f = seen[size_t(a.chunk) * M + a.microbatch];
            auto name = [&](Op op) { return to_string(Action{op, a.microbatch, a.chunk}, V > 1); };
            int bit = a.op == Op::F ? kF : a.op == Op::B ? kB : a.op == Op::BI ? kBI : kBW;
            if (f & bit) throw std::runtime_error(where + "duplicated " + name(a.op));
            if (a.op != Op::F && !(f & kF))
                throw std::runtime_error(where + "needs " + name(Op::F) + " before " + name(a.op));
            if ((a.op == Op::B && (f & (kBI | kBW))) || (a.op != Op::F && a.op != Op::B && (f & kB)))
                throw std::runtime_error(where + "mixes B with BI/BW for micro-batch " + std::to_string(a.microbatch));
            if (a.op == Op::BW && !(f & kBI))
                throw std::runtime_error(where + "needs " + name(Op::BI) + " before " + name(Op::BW));
            f |= bit;
        }
        for (int c = 0; c < V; c++)
            for (int mb = 0; mb < M; mb++) {
                int f = seen[size_t(c) * M + mb];
                std::string what = to_string(Action{Op::F, mb, c}, V > 1).substr(1);
                if (!(f & kF)) throw std::runtime_error("rank " + std::to_string(r) + ": missing F" + what);
                if (!(f & kB) && !((f & kBI) && (f & kBW)))
                    throw std::runtime_error("rank " + std::to_string(r) + ": missing the backward of micro-batch " +
                                             what + " (B" + what + ", or BI" + what + " and BW" + what + ")");
            }
    }
}

// The checks of each rank's own list (tag ranges, check_actions); returns the number of chunks.
inline int check_lists(const Schedule& schedule, int num_microbatches, int num_chunks) {
    if (schedule.empty()) throw std::runtime_error("validate: the schedule has no ranks");
    if (num_microbatches < 0 || num_chunks < 0 || num_chunks > kMaxChunks)
        throw std::invalid_argument("validate: num_microbatches >= 0 and 0 <= num_chunks <= " +
                                    std::to_string(kMaxChunks) + " (0 = inferred)");
    int M = num_microbatches, V = num_chunks;  // 0: inferred, the largest in the schedule + 1
    for (size_t r = 0; r < schedule.size(); r++)
        for (const Action& a : schedule[r]) {
            // A transfer's tag holds its micro-batch and chunk (transfer_tag): what does not fit cannot be sent.
            if (a.microbatch < 0 || a.microbatch >= (1 << 22) || a.chunk < 0 || a.chunk >= kMaxChunks)
                throw std::runtime_error("rank " + std::to_string(r) + ", action " + to_string(a, true) +
                                         ": micro-batch or chunk out of range (0 <= micro-batch < 2^22, 0 <= chunk < " +
                                         std::to_string(kMaxChunks) + ")");
            if (num_microbatches == 0) M = std::max(M, a.microbatch + 1);
            if (num_chunks == 0) V = std::max(V, a.chunk + 1);
        }
    if (M == 0 || V == 0) throw std::runtime_error("validate: the schedule has no actions");
    check_actions(schedule, M, V);
    return V;
}

// Runs every rank's groups without costs (FIFO per sender and receiver, complete once each operation has
// met its peer's); throws on a mismatch, an action whose input has not come, or a deadlock. `given` empty: plain plan.
inline void check_plans(const Schedule& schedule, int V, const std::vector<Plan>& given) {
    int P = int(schedule.size());
    Layout layout{P, V, schedule.placement};
    std::vector<Plan> plans = given;
    for (int r = 0; given.empty() && r < P; r++) plans.push_back(comm_plan(schedule[r], r, layout));
    for (int r = 0; r < P; r++)
        if (int(plans.size()) != P || plans[r].size() != schedule[r].size() + 1)
            throw std::invalid_argument("validate: a plan holds, per rank, one group per action and one after the last");
    std::string hint = given.empty() ? " (if the schedule needs late sends, pass the plan of pipeline_lab.hpp: "
                                       "pp::plan_for(schedule, V))" : "";
    std::vector<std::vector<int>> posted(size_t(P) * P * 2);  // tags, [(src * P + dst) * 2 + receives?]
    auto list = [&](int r, const CommOp& op, bool peers) -> std::vector<int>& {  // r's own list, or its peer's
        return posted[(op.send ? size_t(r) * P + op.peer : size_t(op.peer) * P + r) * 2 + (op.send == peers)];
    };
    std::vector<size_t> pos(P, 0);                                 // the next group of each rank
    std::vector<std::vector<std::pair<CommOp, size_t>>> group(P);  // the posted group: op, FIFO index
    std::vector<bool> waits(P, false);                             // a group is posted
    std::vector<std::vector<int>> arrived(P);
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < P; r++) {
            size_t n = schedule[r].size();
            if (pos[r] > n) continue;
            if (!waits[r]) {
                group[r].clear();
                for (const CommOp& op : plans[r][pos[r]]) {
                    group[r].push_back({op, list(r, op, false).size()});
                    list(r, op, false).push_back(op.tag);
                }
                waits[r] = progress = true;
            }
            bool met = true;
            for (const auto& [op, k] : group[r]) {
                const std::vector<int>& other = list(r, op, true);
                met = met && other.size() > k;
                if (other.size() <= k || other[k] == op.tag) continue;
                int dst = op.send ? op.peer : r, src = op.send ? r : op.peer;
                throw std::runtime_error("rank " + std::to_string(dst) + " receives " + tag_label(op.send ? other[k] : op.tag, V > 1) +
                                         " from rank " + std::to_string(src) + " but rank " + std::to_string(src) + " sends " +
                                         tag_label(op.send ? op.tag : other[k], V > 1) + " first (FIFO mismatch)" + hint);
            }
            if (!met) continue;
            for (const auto& [op, k] : group[r])
                if (!op.send) arrived[r].push_back(op.tag);
            CommOp in = pos[r] < n ? input_of(schedule[r][pos[r]], r, layout) : CommOp{false, -1, 0};
            if (in.peer >= 0 && std::find(arrived[r].begin(), arrived[r].end(), in.tag) == arrived[r].end())
                throw std::runtime_error("rank " + std::to_string(r) + ", action " + to_string(schedule[r][pos[r]], V > 1) +
                                         ": runs before the action that produces its input" + hint);
            pos[r]++, waits[r] = false, progress = true;
        }
    }
    std::string waiting;  // "rank 1 (before F3) waits in {recv F3 from rank 0}; ..."
    for (int r = 0; r < P; r++) {
        if (pos[r] > schedule[r].size()) continue;
        std::string ops;
        for (const auto& [op, k] : group[r])
            if (list(r, op, true).size() <= k) ops += (ops.empty() ? "" : ", ") + describe(op, V > 1);
        std::string before = pos[r] < schedule[r].size() ? "before " + to_string(schedule[r][pos[r]], V > 1) : "after its last action";
        waiting += (waiting.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " (" + before + ") waits in {" + ops + "}");
    }
    if (!waiting.empty()) throw std::runtime_error("deadlock: " + waiting + hint);
}
}  // namespace detail

// Throws std::runtime_error naming the rank, the action and the reason unless every micro-batch
// passes F then B (or BI then BW) exactly once on every virtual stage, in dependency order, and
// every rank's groups (`plans`, default the plain plan) run to the end, unbuffered sends. 0 counts: inferred.
inline void validate(const Schedule& schedule, int num_microbatches = 0, int num_chunks = 0,
                     const std::vector<Plan>& plans = {}) {
    int V = detail::check_lists(schedule, num_microbatches, num_chunks);
    detail::check_plans(schedule, V, plans);
}

// ---- Stage and Comm: what the executor needs from the model and from the transport -------------
struct Bytes { void* data = nullptr; std::size_t bytes = 0; };   // a view: what a transfer sends or fills

// A rank's V chunks of layers. It owns the activation stash per (micro-batch, chunk): the executor only moves buffers.
class Stage {
 public:
    virtual ~Stage() = default;
    // Where to receive this action's incoming tensor (F: the activation, B/BI: the output gradient),
    // owned by the stage; asked just before the action, or earlier (a pair of actions, a local copy).
    virtual Bytes input_buffer(Op op, int microbatch, int chunk) = 0;
    // Each returns what to send ({} for F on the last virtual stage, for B/BI on the first), valid until
    // sent() for the action (later for a late send); a forward's output has left before its backward.
    virtual Bytes forward(int microbatch, int chunk) = 0;
    // The full backward: by default BI then BW on the same stash, the same operations as a zero-bubble
    // schedule, hence the same bits. Override it where one pass is cheaper (or BW spoils BI's buffer).
    virtual Bytes backward(int microbatch, int chunk) {
        Bytes input_grad = backward_input(microbatch, chunk);
        backward_weight(microbatch, chunk);
        return input_grad;
    }
    virtual Bytes backward_input(int microbatch, int chunk) = 0;
    virtual void backward_weight(int microbatch, int chunk) = 0;
    virtual void sent(Op, int /*microbatch*/, int /*chunk*/) {}   // what that action returned has left
};

struct P2POp { bool send; void* data; std::size_t bytes; int peer; int tag; };  // peer: a Comm rank

// recv and group must not wait forever: a transport times out and throws naming the peer (ThreadComm,
// NcclComm), abort() makes every blocked or later call throw; a failing Pipeline aborts, stopping all ranks.
class Comm {
 public:
    virtual ~Comm() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual void send(const void* data, std::size_t bytes, int peer, int tag) = 0;
    virtual void recv(void* data, std::size_t bytes, int peer, int tag) = 0;
    virtual void group(const std::vector<P2POp>& ops) = 0;  // posted together, returns when all done
    virtual void abort(const std::string& why) = 0;  // wakes every blocked rank with an error
    // In-place sum over `ranks` in one fixed order (identical bits everywhere), and a barrier: the step after
    // the Pipeline uses them (data parallelism, tied weights, the gradient norm); by default they throw.
    virtual void allreduce_sum(float*, std::size_t, const std::vector<int>&) { missing("allreduce_sum"); }
    virtual void allreduce_sum(double*, std::size_t, const std::vector<int>&) { missing("allreduce_sum"); }
    virtual void barrier() { missing("barrier"); }
 private:
    [[noreturn]] static void missing(const char* what) {
        throw std::logic_error(std::string("pp::Comm::") + what + ": this transport does not have it");
    }
};

// ---- Pipeline: runs one rank's part of a schedule ----------------------------------------------
// One entry of a timeline, simulated (pipeline_lab.hpp) or measured (Pipeline::timeline).
struct Event {
    int rank = 0;
    Action action{Op::F, 0, 0};  // the action computed, or for a comm event the action it feeds
    bool comm = false;           // true: time spent in a send/recv group (waiting or transferring)
    double start = 0, end = 0;   // µs from step start (measured) or cost units (simulated)
    std::string detail;          // comm events: what the group did
    double transfer = -1;        // comm events: the part that moved data (simulated; < 0: unknown)
};
inline bool& verbose() {  // PP_VERBOSE=1 prints every send and receive (or set pp::verbose() = true)
    static bool on = [] { const char* v = std::getenv("PP_VERBOSE"); return v && std::string(v) == "1"; }();
    return on;
}

// What the executor tells an observer (a watchdog, a trace), on the rank's own thread: it starts the
// transfers before action `index` (== n, the action count: after the last), action `index`, or step_end (n).
enum class Phase { transfers, action, step_end };
struct Observer {
    virtual ~Observer() = default;
    virtual void on_action(std::size_t index, Phase phase) = 0;
};

class Pipeline {
 public:
    // ranks[i] = the Comm rank of pipeline rank i (data-parallel replicas use disjoint sets). plans:
    // one per rank for a schedule that needs late sends (pipeline_lab.hpp's plan_for); empty: the plain plan.
    Pipeline(Schedule schedule, int num_chunks, Stage& stage, Comm& comm, int pp_rank, std::vector<int> ranks,
             std::vector<Plan> plans = {})
        : schedule_(std::move(schedule)), layout_{int(schedule_.size()), num_chunks, schedule_.placement}, stage_(stage),
          comm_(comm), rank_(pp_rank), ranks_(std::move(ranks)) {
        if (int(ranks_.size()) != layout_.P || rank_ < 0 || rank_ >= layout_.P || comm_.rank() != ranks_[rank_] || layout_.V < 1)
            throw std::invalid_argument("Pipeline: need one Comm rank per pipeline rank (" + std::to_string(layout_.P) +
                                        "), a pp_rank below that, comm.rank() == ranks[pp_rank] and num_chunks >= 1");
        validate(schedule_, 0, layout_.V, plans);
        plan_ = plans.empty() ? detail::comm_plan(schedule_[rank_], rank_, layout_) : plans[rank_];
    }

    // Runs this rank's actions for one optimizer step; on any error aborts the Comm (waking every rank) and
    // throws "rank R, action F3.0: <reason> (after ...)". Event times: µs since `origin` (shared origin, shared axis).
    void run_step(std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now()) {
        events_.clear();
        const std::vector<Action>& actions = schedule_[rank_];
        auto now = [&] { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin).count(); };
        std::map<int, std::pair<Bytes, Action>> outputs;  // by tag: what finished actions produced, until sent
        size_t i = 0;
        try {
            for (i = 0; i <= actions.size(); i++) {
                const std::vector<CommOp>& group = plan_[i];
                if (!group.empty()) {
                    if (observer_) observer_->on_action(i, Phase::transfers);
                    std::vector<P2POp> ops;
                    std::string what;
                    for (const CommOp& op : group) {
                        Bytes b = op.send ? outputs[op.tag].first : input_buffer_for(op.tag);
                        if (op.send && !b.data) throw std::runtime_error("the stage returned no output to send");
                        ops.push_back({op.send, b.data, b.bytes, ranks_[op.peer], op.tag});
                        what += (what.empty() ? "" : ", ") + detail::describe(op, true);
                        if (verbose())
                            std::fprintf(stderr, "[pp rank %d] %s (%zu bytes)\n", rank_, detail::describe(op, true).c_str(), b.bytes);
                    }
                    double start = now();
                    comm_.group(ops);
                    for (const CommOp& op : group) {
                        if (!op.send) continue;
                        const Action& from = outputs[op.tag].second;
                        stage_.sent(from.op, from.microbatch, from.chunk);
                        outputs.erase(op.tag);
                    }
                    events_.push_back({rank_, actions[std::min(i, actions.size() - 1)], true, start, now(), what});
                }
                if (i == actions.size()) break;
                const Action& a = actions[i];
                if (observer_) observer_->on_action(i, Phase::action);
                double start = now();
                Bytes out;
                switch (a.op) {
                    case Op::F: out = stage_.forward(a.microbatch, a.chunk); break;
                    case Op::B: out = stage_.backward(a.microbatch, a.chunk); break;
                    case Op::BI: out = stage_.backward_input(a.microbatch, a.chunk); break;
                    case Op::BW: stage_.backward_weight(a.microbatch, a.chunk); break;
                }
                events_.push_back({rank_, a, false, start, now(), ""});
                CommOp send = detail::output_of(a, rank_, layout_);
                if (send.peer >= 0) outputs[send.tag] = {out, a};
            }
        } catch (const std::exception& e) {
            fail(e.what(), i);
        } catch (...) {  // a stage may throw anything; the other ranks must still be woken
            fail("an exception that is not a std::exception", i);
        }
        if (observer_) observer_->on_action(actions.size(), Phase::step_end);
    }

    // Called from run_step on this rank's thread; nullptr: none. The observer must outlive its use.
    void set_observer(Observer* observer) { observer_ = observer; }

    // Measured events of the last step: µs from its origin (steady_clock), actions and comm waits.
    const std::vector<Event>& timeline() const { return events_; }
    const Schedule& schedule() const { return schedule_; }
    int rank() const { return rank_; }

    // " (after F1.0 F2.0 B0.0 B1.0)": the last four actions before action i, the breadcrumbs of errors.
    std::string after(size_t i) const {
        std::string s;
        for (size_t j = i > 4 ? i - 4 : 0; j < i; j++) s += " " + to_string(schedule_[rank_][j], true);
        return s.empty() ? s : " (after" + s + ")";
    }

 private:
    [[noreturn]] void fail(const std::string& why, size_t i) {
        const std::vector<Action>& actions = schedule_[rank_];
        std::string msg = "rank " + std::to_string(rank_) + ", action " +
                          (i < actions.size() ? to_string(actions[i], true) : "(end of step)") + ": " + why + after(i);
        comm_.abort(msg);
        throw std::runtime_error(msg);
    }

    // The stage buffer that receives transfer `tag`; a gradient's consumer is its B or its BI (validate: not both).
    Bytes input_buffer_for(int tag) {
        Action a{tag_is_grad(tag) ? Op::B : Op::F, tag_microbatch(tag), tag_chunk(tag)};
        for (const Action& b : schedule_[rank_])
            if (a.op == Op::B && b.op == Op::BI && b.microbatch == a.microbatch && b.chunk == a.chunk) a.op = Op::BI;
        return stage_.input_buffer(a.op, a.microbatch, a.chunk);
    }

    Schedule schedule_;
    Layout layout_;
    Plan plan_;  // this rank's groups of transfers
    Stage& stage_;
    Comm& comm_;
    int rank_;
    std::vector<int> ranks_;
    std::vector<Event> events_;
    Observer* observer_ = nullptr;
};

}  // namespace pp
