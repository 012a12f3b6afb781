// pipeline.hpp — pipeline parallelism in one header: schedules, a validator, a simulator, a
// timeline, a layer partitioner and the executor that runs a schedule on real stages.
//
// What it is: the whole idea of pipeline-parallel training written down for reading. A model is
// cut into S consecutive pieces ("virtual stages"); P ranks (GPUs, threads or processes) each hold
// V of them; a batch is split into M micro-batches that flow forward through the stages and
// backward again. A *schedule* says in which order each rank runs its forward (F) and backward
// (B, or BI = input gradient and BW = weight gradient) steps. It is plain data, so it can be
// printed, checked for deadlocks and timed before any tensor exists.
//
// What it is not: a model, an autograd, a communication library. The model slice implements
// `Stage`, the transport implements `Comm` (src/stage.*, src/comm.* in pipetrain; copy this file
// into your own project and write those two). Standard C++17 library only.
//
// Reading order: actions and schedules → validate → simulate and timeline → partition →
// Stage/Comm interfaces → Pipeline. A reader who stops after `one_f_one_b` has the idea.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pp {

// ----------------------------------------------------------------------------------------------
// Actions and schedules
// ----------------------------------------------------------------------------------------------

// F: forward. B: full backward. BI: backward for the input gradient only (what the previous stage
// waits for). BW: backward for the weight gradient only (nobody waits for it; it can be delayed).
enum class Op { F, B, BI, BW };

// One step of one rank: run `op` for `microbatch` on this rank's model chunk `chunk`.
// With V chunks per rank, chunk c on rank r is virtual stage s = c*P + r (Megatron's layout), so
// the model has S = P*V virtual stages and consecutive stages sit on consecutive ranks.
struct Action {
    Op op;
    int microbatch;
    int chunk = 0;
};
inline bool operator==(const Action& a, const Action& b) {
    return a.op == b.op && a.microbatch == b.microbatch && a.chunk == b.chunk;
}
inline bool operator!=(const Action& a, const Action& b) { return !(a == b); }

using Schedule = std::vector<std::vector<Action>>;  // one list of actions per pipeline rank

inline const char* op_name(Op op) {
    switch (op) {
        case Op::F: return "F";
        case Op::B: return "B";
        case Op::BI: return "BI";
        case Op::BW: return "BW";
    }
    return "?";
}

// "F3", "BI3"; with_chunk gives "F3.1" (used whenever V > 1, and always by the executor).
inline std::string to_string(const Action& a, bool with_chunk = false) {
    std::string s = op_name(a.op) + std::to_string(a.microbatch);
    if (with_chunk) s += "." + std::to_string(a.chunk);
    return s;
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
        // Backward in INCREASING micro-batch order. GPipe figures often draw it reversed (last in,
        // first out); we keep the order of a single device so weight gradients are accumulated in
        // the same order and the pipeline reproduces one-device training bit for bit.
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
        // Warmup: run ahead by the number of stages after this one, so the first backward arrives
        // just as the pipeline is full.
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

// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): each rank holds V chunks, so a
// micro-batch visits every rank V times and the pipeline fills V times faster; the bubble
// shrinks by about V at the price of V times more messages.
// Megatron's order: forwards go in groups of P micro-batches per chunk (chunk 0 for micro-batches
// 0..P-1, chunk 1 for the same ones, ..., then chunk 0 for P..2P-1), backwards the same with the
// chunks reversed. "Increasing micro-batch order" holds per chunk: for a given chunk, its F, and
// its B, see the micro-batches in increasing order; across chunks they interleave.
// Constraint (Megatron's): M must be a multiple of P, so every group is full.
inline Schedule interleaved(int P, int M, int V) {
    detail::check_sizes("interleaved", P, M, V);
    if (M % P != 0)
        throw std::invalid_argument("interleaved: Megatron's interleaved schedule needs the number of micro-batches M (" +
                                    std::to_string(M) + ") to be a multiple of the number of stages P (" +
                                    std::to_string(P) + ")");
    int total = M * V;  // forward steps per rank (all chunks)
    auto forward_action = [&](int k) {
        int group = k / (P * V), in_group = k % (P * V);
        return Action{Op::F, group * P + in_group % P, in_group / P};
    };
    auto backward_action = [&](int k) {
        int group = k / (P * V), in_group = k % (P * V);
        return Action{Op::B, group * P + in_group % P, V - 1 - in_group / P};
    };
    Schedule schedule(P);
    for (int rank = 0; rank < P; rank++) {
        std::vector<Action>& actions = schedule[rank];
        // Megatron's warm-up: (V - 1) * P forwards so every chunk has started, plus two per stage
        // after this one, because a forward's output only leaves with the following backward's
        // (see the communication policy below). V = 1 is plain 1F1B, as in Megatron.
        int num_warmup_microbatches = V == 1 ? std::min(P - rank - 1, M)
                                             : std::min((P - rank - 1) * 2 + (V - 1) * P, total);
        int num_microbatches_remaining = total - num_warmup_microbatches;
        // Warmup
        for (int k = 0; k < num_warmup_microbatches; k++) actions.push_back(forward_action(k));
        // Steady state
        for (int k = 0; k < num_microbatches_remaining; k++) {
            actions.push_back(forward_action(num_warmup_microbatches + k));
            actions.push_back(backward_action(k));
        }
        // Cooldown
        for (int k = num_microbatches_remaining; k < total; k++) actions.push_back(backward_action(k));
    }
    return schedule;
}

// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): the backward is split into BI (the
// input gradient, on the critical path to the previous stage) and BW (the weight gradient, which
// nobody waits for). 1F1B's order with B replaced by BI, and each BW delayed so it fills what
// were bubbles. Rank r delays its BWs by r micro-batches: it then holds up to P stashes (a
// micro-batch is live from its F until its BW), which is 1F1B's peak on rank 0, so the peak
// memory of the pipeline is unchanged (ranks r > 0 hold more than in 1F1B, as in the paper).
// With F = BI = BW the bubble is (P-1)/(3M+P-1), about a third of 1F1B's (P-1)/(M+P-1).
inline Schedule zero_bubble_h1(int P, int M) {
    detail::check_sizes("zero_bubble_h1", P, M);
    Schedule schedule(P);
    for (int rank = 0; rank < P; rank++) {
        std::vector<Action>& actions = schedule[rank];
        int num_warmup_microbatches = std::min(P - rank - 1, M);
        int num_microbatches_remaining = M - num_warmup_microbatches;
        int num_weight_delay = rank;  // BI(i) is followed by BW(i - rank)
        int next_bw = 0;
        auto backward = [&](int i) {
            actions.push_back({Op::BI, i});
            if (i >= num_weight_delay) actions.push_back({Op::BW, next_bw++});
        };
        // Warmup
        for (int i = 0; i < num_warmup_microbatches; i++) actions.push_back({Op::F, i});
        // Steady state
        for (int i = 0; i < num_microbatches_remaining; i++) {
            actions.push_back({Op::F, num_warmup_microbatches + i});
            backward(i);
        }
        // Cooldown: the remaining BIs, then the delayed BWs fill the tail.
        for (int i = num_microbatches_remaining; i < M; i++) backward(i);
        while (next_bw < M) actions.push_back({Op::BW, next_bw++});
    }
    return schedule;
}

// ----------------------------------------------------------------------------------------------
// Communication implied by a schedule
// ----------------------------------------------------------------------------------------------
// F of virtual stage s > 0 receives its input activation from the rank holding s-1 and, unless
// s is the last stage (which computes the loss and starts the backward itself), sends its output
// to the rank holding s+1. B and BI go the other way with gradients. BW communicates nothing.
//
// The policy (validate, simulate and the executor all follow it): between two consecutive actions
// of a rank, the send of the action just finished and the receive needed by the next action are
// posted as ONE group, like ncclGroupStart/End or Megatron's send_forward_recv_backward. A group
// completes when each of its operations has met the peer's matching operation (unbuffered, NCCL
// semantics); sends and receives between two ranks match in FIFO order. On one rank (P = 1) a
// transfer is a copy: its receive is posted in the same group as its send.
// One refinement for V > 1: a forward followed by a backward and then a forward again (a steady-
// state pair of interleaved 1F1B) is one step, whose sends leave together after the backward and
// whose receives are posted together before the forward (Megatron's
// send_forward_backward_recv_forward_backward). Without it the chunks form a ring around the ranks
// (rank P-1 feeds rank 0) and every rank can block in a send to its neighbour at once: validate
// finds that deadlock in Megatron's order.

// A tag names what a transfer carries: (gradient?, micro-batch, chunk of the receiving action),
// the chunk in 7 bits: a rank holds at most kMaxChunks chunks (validate and --chunks check it).
constexpr int kMaxChunks = 128;
inline int transfer_tag(bool grad, int microbatch, int chunk) { return (microbatch * kMaxChunks + chunk) * 2 + int(grad); }
inline bool tag_is_grad(int tag) { return tag & 1; }
inline int tag_microbatch(int tag) { return tag / (2 * kMaxChunks); }
inline int tag_chunk(int tag) { return (tag / 2) % kMaxChunks; }
// Tags of what a trainer exchanges outside a step's transfers: every transfer of the step has been
// received by then, so these never meet one, though their numbers are transfer tags too. The tied
// word embedding's two copies (its gradients, then the check of its weights), and the gathers to
// rank 0: a layer's weights (kTagLayer + the layer's index), a timeline and the clock errors
// (two tags each: a size, then the bytes), the clocks' ping-pong.
enum OtherTag : int {
    kTagTiedGrads = 9001,
    kTagTiedCheck = 9002,
    kTagTimeline = 9200,     // and 9201
    kTagClockError = 9202,   // and 9203
    kTagClock = 9300,
    kTagLayer = 20000,       // + layer index (a model has at most 1026 layers)
};
// The receiving action's name: "F3" for an activation, "B3" for a gradient ("F3.1" with chunk).
inline std::string tag_label(int tag, bool with_chunk = true) {
    Action a{tag_is_grad(tag) ? Op::B : Op::F, tag_microbatch(tag), tag_chunk(tag)};
    return to_string(a, with_chunk);
}

struct CommOp {
    bool send;
    int peer;  // pipeline rank
    int tag;
};

namespace detail {
// The receive action `a` on `rank` needs before it runs; peer < 0 when none.
inline CommOp input_of(const Action& a, int rank, int P, int V) {
    int s = a.chunk * P + rank, S = P * V;
    if (a.op == Op::F && s > 0) return {false, (s - 1) % P, transfer_tag(false, a.microbatch, a.chunk)};
    if ((a.op == Op::B || a.op == Op::BI) && s < S - 1)
        return {false, (s + 1) % P, transfer_tag(true, a.microbatch, a.chunk)};
    return {false, -1, 0};
}
// The send `a` makes after it runs; peer < 0 when none.
inline CommOp output_of(const Action& a, int rank, int P, int V) {
    int s = a.chunk * P + rank, S = P * V;
    if (a.op == Op::F && s < S - 1) return {true, (s + 1) % P, transfer_tag(false, a.microbatch, (s + 1) / P)};
    if ((a.op == Op::B || a.op == Op::BI) && s > 0)
        return {true, (s - 1) % P, transfer_tag(true, a.microbatch, (s - 1) / P)};
    return {true, -1, 0};
}
// The groups a rank posts: plan[i] before action i, plan[n] after the last one. A step is one
// action, or with V > 1 a forward directly followed by a backward (Megatron's interleaved pairs).
// Before each step the rank posts the sends of the previous step and the receives of this one.
inline std::vector<std::vector<CommOp>> comm_plan(const std::vector<Action>& actions, int rank, int P, int V) {
    size_t n = actions.size();
    std::vector<std::vector<CommOp>> plan(n + 1);
    std::vector<CommOp> sends;  // of the previous step
    for (size_t i = 0; i <= n; i++) {
        std::vector<CommOp>& group = plan[i];
        for (const CommOp& out : sends) {
            group.push_back(out);
            if (out.peer == rank) group.push_back({false, rank, out.tag});  // P = 1: a local copy
        }
        sends.clear();
        if (i == n) break;
        bool pair = V > 1 && i + 2 < n && actions[i].op == Op::F && actions[i + 1].op == Op::B && actions[i + 2].op == Op::F;
        for (size_t j = i; j <= i + pair; j++) {
            CommOp in = input_of(actions[j], rank, P, V), out = output_of(actions[j], rank, P, V);
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
}  // namespace detail

// ----------------------------------------------------------------------------------------------
// Events: one entry of a timeline, simulated or measured
// ----------------------------------------------------------------------------------------------
struct Event {
    int rank = 0;
    Action action{Op::F, 0, 0};  // the action computed, or for a comm event the action it feeds
    bool comm = false;           // true: time spent in a send/recv group (waiting or transferring)
    double start = 0, end = 0;   // µs from step start (measured) or cost units (simulated)
    std::string detail;          // comm events: what the group did
};

// ----------------------------------------------------------------------------------------------
// validate and simulate
// ----------------------------------------------------------------------------------------------
// Costs per action and per transfer, in any unit. B costs bi + bw.
struct Costs {
    double f = 1, bi = 1, bw = 1, comm = 0;
};

struct SimResult {
    double makespan = 0;
    std::vector<double> busy, idle;  // per rank
    double bubble = 0;               // total idle / (P * makespan)
    std::vector<int> peak_live;      // per rank: most micro-batch stashes held at once
    std::vector<Event> events;
};

namespace detail {
inline int infer_count(const Schedule& schedule, bool chunks) {
    int n = 0;
    for (const auto& actions : schedule)
        for (const Action& a : actions) n = std::max(n, (chunks ? a.chunk : a.microbatch) + 1);
    return n;
}

// Static checks on each rank's own list: every (micro-batch, chunk) runs F once, then either B
// once or BI then BW once each.
inline void check_actions(const Schedule& schedule, int M, int V) {
    int P = int(schedule.size());
    for (int r = 0; r < P; r++) {
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

// The simulator's state: the sends and receives posted so far between each pair of ranks, in FIFO
// order, and where each rank stands in its list of actions.
struct Sim {
    struct Posted { int tag; double time; };
    struct Rank {
        std::vector<std::vector<CommOp>> plan;         // comm_plan: the group posted before each action
        size_t pos = 0;                                // the next action
        bool posted = false, done = false;             // its group is posted; the rank has finished
        double post_time = 0;                          // when it posted that group (it is free from then)
        std::vector<std::pair<CommOp, size_t>> group;  // the posted group: each op and its FIFO index
        std::vector<int> arrived;                      // tags received
    };
    Sim(const Schedule& schedule, int V)
        : schedule(schedule), P(int(schedule.size())), V(V), sends(size_t(P) * P), recvs(size_t(P) * P), ranks(P) {
        for (int r = 0; r < P; r++) ranks[r].plan = comm_plan(schedule[r], r, P, V);
    }
    // What `op` of rank r must meet: the receives posted by its destination, or the sends by its source.
    std::vector<Posted>& peer_list(int r, const CommOp& op) {
        return op.send ? recvs[size_t(r) * P + op.peer] : sends[size_t(op.peer) * P + r];
    }
    const Schedule& schedule;
    int P, V;
    std::vector<std::vector<Posted>> sends, recvs;  // [src * P + dst]
    std::vector<Rank> ranks;
};

// Whether every operation of rank r's posted group has met its peer's; throws on a FIFO mismatch.
inline bool group_met(Sim& s, int r) {
    bool with_chunk = s.V > 1, complete = true;
    for (const auto& [op, k] : s.ranks[r].group) {
        auto& other = s.peer_list(r, op);
        if (other.size() <= k) { complete = false; continue; }
        if (other[k].tag != op.tag) {
            int recv_tag = op.send ? other[k].tag : op.tag, send_tag = op.send ? op.tag : other[k].tag;
            int dst = op.send ? op.peer : r, src = op.send ? r : op.peer;
            throw std::runtime_error("rank " + std::to_string(dst) + " receives " + tag_label(recv_tag, with_chunk) +
                                     " from rank " + std::to_string(src) + " but rank " + std::to_string(src) +
                                     " sends " + tag_label(send_tag, with_chunk) + " first (FIFO mismatch)");
        }
    }
    return complete;
}

// Completes rank r's group once met: notes what arrived, and a comm event when the rank had to
// wait. Returns the time the rank is free to run its next action.
inline double finish_group(SimResult& res, Sim& s, int r, const Costs& costs) {
    Sim::Rank& me = s.ranks[r];
    double ready = me.post_time;
    for (const auto& [op, k] : me.group) {
        if (op.send) continue;  // timing: a send does not hold up its sender (see `simulate`)
        double sent = s.peer_list(r, op)[k].time;
        ready = std::max(ready, std::max(me.post_time, sent) + (op.peer == r ? 0.0 : costs.comm));
        me.arrived.push_back(op.tag);
    }
    if (ready > me.post_time) {
        std::string what;
        for (const auto& [op, k] : me.group) what += (what.empty() ? "" : ", ") + describe(op, s.V > 1);
        const std::vector<Action>& actions = s.schedule[r];
        Action next = me.pos < actions.size() ? actions[me.pos] : actions.back();
        res.events.push_back({r, next, true, me.post_time, ready, what});
    }
    return ready;
}

// Runs rank r's next action from time `ready`; throws if its input has not arrived.
inline void run_action(SimResult& res, Sim& s, int r, double ready, const Costs& costs) {
    Sim::Rank& me = s.ranks[r];
    const Action& a = s.schedule[r][me.pos];
    CommOp in = input_of(a, r, s.P, s.V);
    if (in.peer >= 0 && std::find(me.arrived.begin(), me.arrived.end(), in.tag) == me.arrived.end())
        throw std::runtime_error("rank " + std::to_string(r) + ", action " + to_string(a, s.V > 1) +
                                 ": runs before the action that produces its input");
    double cost = a.op == Op::F ? costs.f : a.op == Op::B ? costs.bi + costs.bw : a.op == Op::BI ? costs.bi : costs.bw;
    res.events.push_back({r, a, false, ready, ready + cost, ""});
    res.busy[r] += cost;
    me.post_time = ready + cost;
    me.pos++;
    me.posted = false;
}

// "rank 1 (before F3) waits in {recv F3 from rank 0}; ...": the ranks that could not finish.
inline std::string waiting_ranks(Sim& s) {
    std::string waiting;
    for (int r = 0; r < s.P; r++) {
        const Sim::Rank& me = s.ranks[r];
        if (me.done) continue;
        std::string ops;
        for (const auto& [op, k] : me.group)
            if (s.peer_list(r, op).size() <= k) ops += (ops.empty() ? "" : ", ") + describe(op, s.V > 1);
        std::string before = me.pos < s.schedule[r].size() ? "before " + to_string(s.schedule[r][me.pos], s.V > 1)
                                                           : "after its last action";
        waiting += (waiting.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " (" + before + ") waits in {" + ops + "}");
    }
    return waiting;
}

// Runs the schedule under the communication policy. Matching is unbuffered: a group completes
// only when every one of its sends and receives has met its peer, else we report the deadlock.
// Timing: a transfer starts when both sides have posted it and takes costs.comm; the receiver
// waits for it, the sender does not (eager or asynchronous sends, as real engines overlap them).
inline SimResult run(const Schedule& schedule, int V, const Costs& costs) {
    Sim s(schedule, V);
    SimResult res;
    res.busy.assign(s.P, 0);
    bool progress = true;
    while (progress) {  // each rank in turn: post its group; once the group is met, run the next action
        progress = false;
        for (int r = 0; r < s.P; r++) {
            Sim::Rank& me = s.ranks[r];
            if (me.done) continue;
            if (!me.posted) {  // the group before its next action (or after its last one)
                me.group.clear();
                for (const CommOp& op : me.plan[me.pos]) {
                    auto& list = op.send ? s.sends[size_t(r) * s.P + op.peer] : s.recvs[size_t(op.peer) * s.P + r];
                    me.group.push_back({op, list.size()});
                    list.push_back({op.tag, me.post_time});
                }
                me.posted = progress = true;
            }
            if (!group_met(s, r)) continue;
            progress = true;
            double ready = finish_group(res, s, r, costs);
            if (me.pos == schedule[r].size()) {
                me.done = true;
                res.makespan = std::max(res.makespan, ready);
                continue;
            }
            run_action(res, s, r, ready, costs);
        }
    }
    std::string waiting = waiting_ranks(s);
    if (!waiting.empty()) throw std::runtime_error("deadlock: " + waiting);
    return res;
}
}  // namespace detail

// Throws std::runtime_error naming the rank, the action and the reason unless every micro-batch
// passes F then B (or BI then BW) exactly once on every virtual stage, in dependency order, and
// the schedule runs to the end under the communication policy above with unbuffered sends.
// num_microbatches / num_chunks = 0: inferred from the schedule.
inline void validate(const Schedule& schedule, int num_microbatches = 0, int num_chunks = 0) {
    if (schedule.empty()) throw std::runtime_error("validate: the schedule has no ranks");
    if (num_microbatches < 0 || num_chunks < 0 || num_chunks > kMaxChunks)
        throw std::invalid_argument("validate: num_microbatches >= 0 and 0 <= num_chunks <= " +
                                    std::to_string(kMaxChunks) + " (0 = inferred)");
    // A transfer's tag holds its micro-batch and chunk (transfer_tag): what does not fit cannot be sent.
    for (size_t r = 0; r < schedule.size(); r++)
        for (const Action& a : schedule[r])
            if (a.microbatch < 0 || a.microbatch >= (1 << 22) || a.chunk < 0 || a.chunk >= kMaxChunks)
                throw std::runtime_error("rank " + std::to_string(r) + ", action " + to_string(a, true) +
                                         ": micro-batch or chunk out of range (0 <= micro-batch < 2^22, 0 <= chunk < " +
                                         std::to_string(kMaxChunks) + ")");
    int M = num_microbatches > 0 ? num_microbatches : detail::infer_count(schedule, false);
    int V = num_chunks > 0 ? num_chunks : detail::infer_count(schedule, true);
    if (M == 0 || V == 0) throw std::runtime_error("validate: the schedule has no actions");
    detail::check_actions(schedule, M, V);
    detail::run(schedule, V, Costs{});
}

// Predicts time, bubble and memory of a schedule (validating it on the way). With comm = 0 and
// F : B equal for every micro-batch, GPipe and 1F1B give bubble = (P-1)/(M+P-1), interleaved
// (P-1)/(V*M+P-1) (costs per chunk) and ZB-H1 with F = BI = BW and M >= P (P-1)/(3M+P-1).
inline SimResult simulate(const Schedule& schedule, const Costs& costs = {}, int num_chunks = 0) {
    for (double c : {costs.f, costs.bi, costs.bw, costs.comm})
        if (!(c >= 0 && std::isfinite(c))) throw std::invalid_argument("simulate: costs must be finite and >= 0");
    validate(schedule, 0, num_chunks);
    int P = int(schedule.size());
    int V = num_chunks > 0 ? num_chunks : detail::infer_count(schedule, true);
    SimResult res = detail::run(schedule, V, costs);
    for (int r = 0; r < P; r++) res.idle.push_back(res.makespan - res.busy[r]);
    double idle = 0;
    for (double x : res.idle) idle += x;
    res.bubble = res.makespan > 0 ? idle / (P * res.makespan) : 0;
    // A stash is live from F until the last piece of backward (B or BW). Actions of one rank run
    // one after the other, so counting in list order is counting in time.
    for (int r = 0; r < P; r++) {
        int live = 0, peak = 0;
        for (const Action& a : schedule[r]) {
            live += a.op == Op::F ? 1 : (a.op == Op::B || a.op == Op::BW) ? -1 : 0;
            peak = std::max(peak, live);
        }
        res.peak_live.push_back(peak);
    }
    return res;
}

// ----------------------------------------------------------------------------------------------
// Timeline: ASCII Gantt chart and Chrome trace
// ----------------------------------------------------------------------------------------------
// One line per rank; each action is drawn as its short name ("F3", "B3", "I3" for BI, "W3" for
// BW; lower case on odd chunks) padded with '-'; '.' is idle or waiting for a transfer.
inline std::string ascii_timeline(const std::vector<Event>& events, int P, int width = 100) {
    double makespan = 0;
    for (const Event& e : events) makespan = std::max(makespan, e.end);
    std::vector<std::string> rows(P, std::string(std::max(width, 1), '.'));
    double scale = makespan > 0 ? width / makespan : 0;
    for (const Event& e : events) {
        if (e.comm || e.rank < 0 || e.rank >= P || !(e.start >= 0 && e.end <= makespan)) continue;  // NaN too
        const char* letters = "FBIW";
        char op = letters[int(e.action.op)];
        if (e.action.chunk % 2 == 1) op = char(op - 'A' + 'a');
        std::string label = op + std::to_string(e.action.microbatch);
        int a = int(e.start * scale + 0.5), b = std::max(a + 1, int(e.end * scale + 0.5));
        for (int c = a; c < std::min(b, width); c++) rows[e.rank][c] = c - a < int(label.size()) ? label[c - a] : '-';
    }
    std::string out;
    for (int r = 0; r < P; r++) out += "rank " + std::to_string(r) + " |" + rows[r] + "|\n";
    return out;
}

// JSON for Perfetto (ui.perfetto.dev) or chrome://tracing: one track per rank, times in µs
// (simulated cost units are written as µs).
inline std::string chrome_trace(const std::vector<Event>& events) {
    auto quoted = [](const std::string& text) {  // a JSON string, whatever the text holds
        std::string q = "\"";
        for (char c : text) {
            if (c == '"' || c == '\\') {
                q += '\\';
                q += c;
            } else if (static_cast<unsigned char>(c) < 0x20) {
                char esc[8];
                std::snprintf(esc, sizeof esc, "\\u%04x", c);
                q += esc;
            } else {
                q += c;
            }
        }
        return q + "\"";
    };
    auto number = [](double x) {  // JSON has no NaN and no 300-digit "%.3f" fits a buffer
        char b[40];
        std::snprintf(b, sizeof b, std::fabs(x) < 1e15 ? "%.3f" : "%.6e", std::isfinite(x) ? x : 0.0);
        return std::string(b);
    };
    std::string out = "{\"traceEvents\":[\n";
    std::vector<int> ranks;
    for (const Event& e : events)
        if (std::find(ranks.begin(), ranks.end(), e.rank) == ranks.end()) ranks.push_back(e.rank);
    const char* sep = "";
    for (int r : ranks) {
        std::string id = std::to_string(r);
        out += sep + ("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + id + ",\"tid\":" + id +
                      ",\"args\":{\"name\":\"rank " + id + "\"}}");
        sep = ",\n";
    }
    for (const Event& e : events) {
        std::string times = "\"ts\":" + number(e.start) + ",\"dur\":" + number(e.end - e.start);
        std::string id = std::to_string(e.rank);
        out += sep + ("{\"name\":" + quoted(e.comm ? "comm" : to_string(e.action, true)) + ",\"cat\":\"" +
                      (e.comm ? "comm" : op_name(e.action.op)) + "\",\"ph\":\"X\",\"pid\":" + id + ",\"tid\":" + id +
                      "," + times + ",\"args\":{\"detail\":" + quoted(e.detail) + "}}");
        sep = ",\n";
    }
    return out + "\n]}\n";
}

// ----------------------------------------------------------------------------------------------
// partition: which layers go to which stage
// ----------------------------------------------------------------------------------------------
namespace detail {
// Exact dynamic programme over contiguous splits of L layers into P non-empty stages, minimizing
// the largest stage_cost(stage, begin, end). Ties: the last stage starts as early as possible,
// then the one before it, and so on (deterministic).
inline std::vector<int> min_max_split(int L, int P, const std::function<double(int, int, int)>& stage_cost) {
    if (P < 1 || L < P)
        throw std::invalid_argument("partition: cannot split " + std::to_string(L) + " layers into " +
                                    std::to_string(P) + " non-empty stages (need layers >= stages >= 1)");
    const double inf = HUGE_VAL;
    std::vector<std::vector<double>> best(P + 1, std::vector<double>(L + 1, inf));  // k stages, first i layers
    std::vector<std::vector<int>> from(P + 1, std::vector<int>(L + 1, -1));
    best[0][0] = 0;
    for (int k = 1; k <= P; k++)
        for (int i = k; i <= L; i++)
            for (int j = k - 1; j < i; j++) {
                double c = std::max(best[k - 1][j], stage_cost(k - 1, j, i));
                if (c < best[k][i] || from[k][i] < 0) {  // the second: even if c overflowed to inf
                    best[k][i] = c;
                    from[k][i] = j;
                }
            }
    std::vector<int> bounds(P + 1, L);
    for (int k = P; k > 0; k--) bounds[k - 1] = from[k][bounds[k]];
    return bounds;
}
}  // namespace detail

namespace detail {
// Prefix sums of costs that must each be finite and >= 0, as must their sum.
inline std::vector<double> prefix_sums(const std::vector<double>& costs, const char* what) {
    std::vector<double> prefix(costs.size() + 1, 0);
    for (size_t i = 0; i < costs.size(); i++) {
        prefix[i + 1] = prefix[i] + costs[i];
        if (!(costs[i] >= 0 && std::isfinite(prefix[i + 1])))
            throw std::invalid_argument(std::string(what) + ": costs must be finite and >= 0 (layer " + std::to_string(i) + ")");
    }
    return prefix;
}
}  // namespace detail

// Contiguous split of layers over P stages minimizing the slowest stage. Returns P+1 boundaries:
// stage i holds layers [b[i], b[i+1]). Costs are times (profiled), parameter counts, ...
inline std::vector<int> partition(const std::vector<double>& layer_costs, int P) {
    std::vector<double> prefix = detail::prefix_sums(layer_costs, "partition");
    return detail::min_max_split(int(layer_costs.size()), P,
                                 [&](int, int b, int e) { return prefix[e] - prefix[b]; });
}

// Memory-balanced split: stage i of 1F1B holds its parameters (plus gradients and optimizer
// state, fold them into param_bytes) and up to P - i micro-batch stashes of its activations.
inline std::vector<int> partition_memory(const std::vector<double>& param_bytes,
                                         const std::vector<double>& activation_bytes, int P) {
    if (param_bytes.size() != activation_bytes.size())
        throw std::invalid_argument("partition_memory: param_bytes and activation_bytes differ in length");
    std::vector<double> params = detail::prefix_sums(param_bytes, "partition_memory");
    std::vector<double> acts = detail::prefix_sums(activation_bytes, "partition_memory");
    return detail::min_max_split(int(param_bytes.size()), P, [&](int stage, int b, int e) {
        return (params[e] - params[b]) + (P - stage) * (acts[e] - acts[b]);
    });
}

// ----------------------------------------------------------------------------------------------
// Stage and Comm: what the executor needs from the model and from the transport
// ----------------------------------------------------------------------------------------------
struct Buffer {
    void* data = nullptr;
    std::size_t bytes = 0;
};

// A rank's slice of the model (V chunks of layers). It owns its activation stash per
// (micro-batch, chunk), so the executor only moves buffers around.
class Stage {
 public:
    virtual ~Stage() = default;
    // Where the executor must receive this action's incoming tensor (the activation for F, the
    // output gradient for B/BI) before calling the op. Owned by the stage (may be device memory).
    // Called just before the action; earlier in two cases: with V > 1 a backward's buffer before
    // the forward paired with it, and with P = 1 as soon as the producing chunk has run.
    virtual Buffer input_buffer(Op op, int microbatch, int chunk) = 0;
    // Each returns what to send ({} on the last virtual stage for F, on the first for B/BI). The
    // buffer must stay valid until sent: the start of the rank's next action, or with V > 1 the
    // end of the backward paired with a forward.
    virtual Buffer forward(int microbatch, int chunk) = 0;
    virtual Buffer backward(int microbatch, int chunk) = 0;        // full backward: BI then BW
    virtual Buffer backward_input(int microbatch, int chunk) = 0;
    virtual void backward_weight(int microbatch, int chunk) = 0;
};

struct P2POp {
    bool send;
    void* data;
    std::size_t bytes;
    int peer;  // Comm rank
    int tag;
};

// recv and group must not wait forever: a transport times out and throws, naming the peer
// (ThreadComm, NcclComm in pipetrain), and abort() makes every blocked or later call throw. The
// Pipeline calls abort when its own rank fails, so one failure stops all ranks.
class Comm {
 public:
    virtual ~Comm() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual void send(const void* data, std::size_t bytes, int peer, int tag) = 0;
    virtual void recv(void* data, std::size_t bytes, int peer, int tag) = 0;
    virtual void group(const std::vector<P2POp>& ops) = 0;  // posted together, returns when all done
    // Sum over `ranks` (in that order, so every rank gets identical bits), in place.
    virtual void allreduce_sum(float* data, std::size_t n, const std::vector<int>& ranks) = 0;
    virtual void allreduce_sum(double* data, std::size_t n, const std::vector<int>& ranks) = 0;
    virtual void barrier() = 0;
    virtual void abort(const std::string& why) = 0;  // wakes every blocked rank with an error
};

// ----------------------------------------------------------------------------------------------
// Pipeline: runs one rank's part of a schedule
// ----------------------------------------------------------------------------------------------
// PP_VERBOSE=1 prints every send and receive (or set pp::verbose() = true).
inline bool& verbose() {
    static bool on = [] { const char* v = std::getenv("PP_VERBOSE"); return v && std::string(v) == "1"; }();
    return on;
}

class Pipeline {
 public:
    // ranks[i] = the Comm rank of pipeline rank i (data-parallel replicas use disjoint sets).
    Pipeline(Schedule schedule, int num_chunks, Stage& stage, Comm& comm, int pp_rank, std::vector<int> ranks)
        : schedule_(std::move(schedule)), V_(num_chunks), stage_(stage), comm_(comm), rank_(pp_rank),
          ranks_(std::move(ranks)) {
        P_ = int(schedule_.size());
        if (int(ranks_.size()) != P_ || rank_ < 0 || rank_ >= P_ || comm_.rank() != ranks_[rank_] || V_ < 1)
            throw std::invalid_argument("Pipeline: need one Comm rank per pipeline rank (" + std::to_string(P_) +
                                        "), a pp_rank below that, comm.rank() == ranks[pp_rank] and num_chunks >= 1");
        validate(schedule_, 0, V_);
    }

    // Executes this rank's actions for one optimizer step. On any error: aborts the Comm (waking
    // every other rank) and throws "rank R, action F3.0: <reason> (after ...)".
    // Event times are µs since `origin`: ranks given the same origin share one time axis.
    void run_step(std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now()) {
        events_.clear();
        const std::vector<Action>& actions = schedule_[rank_];
        auto now = [&] { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin).count(); };
        std::vector<std::vector<CommOp>> plan = detail::comm_plan(actions, rank_, P_, V_);
        std::map<int, Buffer> outputs;  // by tag: what finished actions produced, until sent
        size_t i = 0;
        try {
            for (i = 0; i <= actions.size(); i++) {
                const std::vector<CommOp>& group = plan[i];
                if (!group.empty()) {
                    mark(i, false);
                    std::vector<P2POp> ops;
                    std::string what;
                    for (const CommOp& op : group) {
                        Buffer b = op.send ? outputs[op.tag] : input_buffer_for(op.tag, i);
                        if (op.send && !b.data) throw std::runtime_error("the stage returned no output to send");
                        ops.push_back({op.send, b.data, b.bytes, ranks_[op.peer], op.tag});
                        what += (what.empty() ? "" : ", ") + detail::describe(op, true);
                        if (verbose())
                            std::fprintf(stderr, "[pp rank %d] %s (%zu bytes)\n", rank_, detail::describe(op, true).c_str(), b.bytes);
                    }
                    double start = now();
                    comm_.group(ops);
                    for (const CommOp& op : group)
                        if (op.send) outputs.erase(op.tag);
                    Action next = i < actions.size() ? actions[i] : actions.back();
                    events_.push_back({rank_, next, true, start, now(), what});
                }
                if (i == actions.size()) break;
                const Action& a = actions[i];
                mark(i, true);
                double start = now();
                Buffer out;
                switch (a.op) {
                    case Op::F: out = stage_.forward(a.microbatch, a.chunk); break;
                    case Op::B: out = stage_.backward(a.microbatch, a.chunk); break;
                    case Op::BI: out = stage_.backward_input(a.microbatch, a.chunk); break;
                    case Op::BW: stage_.backward_weight(a.microbatch, a.chunk); break;
                }
                events_.push_back({rank_, a, false, start, now(), ""});
                CommOp send = detail::output_of(a, rank_, P_, V_);
                if (send.peer >= 0) outputs[send.tag] = out;
            }
        } catch (const std::exception& e) {
            fail(e.what(), i);
        } catch (...) {  // a stage may throw anything; the other ranks must still be woken
            fail("an exception that is not a std::exception", i);
        }
        at_.store(-1, std::memory_order_relaxed);
        ticks_.fetch_add(1, std::memory_order_relaxed);
    }

    // Where this rank is, readable from another thread while run_step runs (a watchdog's report):
    // "action F3.0 (after F1.0 F2.0 B0.0 B1.0)", "transfers before F3.0 (after ...)" or "between
    // steps". Lock-free: run_step only stores an index into the schedule, which never changes.
    std::string where() const {
        long at = at_.load(std::memory_order_relaxed);
        if (at < 0) return "between steps";
        size_t i = size_t(at / 2);
        if (at % 2 == 0 && i == schedule_[rank_].size()) return "transfers at the end of the step" + after(i);
        return (at % 2 ? "action " : "transfers before ") + to_string(schedule_[rank_][i], true) + after(i);
    }
    // Grows whenever an action or a group of transfers starts, and when the step ends: a watchdog
    // that sees it unchanged for long knows this rank is stuck.
    unsigned long progress() const { return ticks_.load(std::memory_order_relaxed); }

    // Measured events of the last step: µs from its origin (steady_clock), actions and comm waits.
    const std::vector<Event>& timeline() const { return events_; }
    const Schedule& schedule() const { return schedule_; }

 private:
    [[noreturn]] void fail(const std::string& why, size_t i) {
        const std::vector<Action>& actions = schedule_[rank_];
        std::string msg = "rank " + std::to_string(rank_) + ", action " +
                          (i < actions.size() ? to_string(actions[i], true) : "(end of step)") + ": " + why + after(i);
        comm_.abort(msg);
        throw std::runtime_error(msg);
    }

    // " (after F1.0 F2.0 B0.0 B1.0)": the last four actions before action i, the breadcrumbs of errors.
    std::string after(size_t i) const {
        if (i == 0) return "";
        std::string s = " (after";
        for (size_t j = i > 4 ? i - 4 : 0; j < i; j++) s += " " + to_string(schedule_[rank_][j], true);
        return s + ")";
    }

    // Before action i's transfers (computing = false) and before the action itself.
    void mark(size_t i, bool computing) {
        at_.store(long(2 * i + computing), std::memory_order_relaxed);
        ticks_.fetch_add(1, std::memory_order_relaxed);
    }

    // The stage buffer that receives transfer `tag`: its consumer is action i, or (P = 1) a later one.
    Buffer input_buffer_for(int tag, size_t i) {
        Op op = Op::F;
        if (tag_is_grad(tag)) {
            op = Op::B;
            const std::vector<Action>& actions = schedule_[rank_];
            for (size_t j = std::min(i, actions.size() - 1); j < actions.size(); j++)
                if ((actions[j].op == Op::B || actions[j].op == Op::BI) && actions[j].microbatch == tag_microbatch(tag) &&
                    actions[j].chunk == tag_chunk(tag)) { op = actions[j].op; break; }
        }
        return stage_.input_buffer(op, tag_microbatch(tag), tag_chunk(tag));
    }

    Schedule schedule_;
    int P_ = 0, V_ = 1;
    Stage& stage_;
    Comm& comm_;
    int rank_;
    std::vector<int> ranks_;
    std::vector<Event> events_;
    std::atomic<long> at_{-1};            // 2i: action i's transfers, 2i + 1: action i; -1 between steps
    std::atomic<unsigned long> ticks_{0};
};

}  // namespace pp
