// pipeline_lab.hpp — the rest of the pipeline lab, on top of the copyable core (pipeline.hpp):
// the zero-bubble family (ZB-H1, interleaved zero bubble, ZB-H2), ZB-V, V-Half, V-Min, DualPipeV,
// looped BFS, late-send plans, the simulator, the `auto` planner, the timeline (ASCII and Chrome
// trace) and the layer partitioner. Standard C++17 library only, namespace pp as in the core.
//
// A schedule whose sends must leave late (looped BFS, and most of these) runs with the plan from
// `plan_for(schedule, V)`, passed to pp::Pipeline and pp::validate (docs/communication.md).
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pipeline.hpp"

namespace pp {

// ----------------------------------------------------------------------------------------------
// Zero-bubble and V-shaped schedules
// ----------------------------------------------------------------------------------------------
namespace detail {
// A zero-bubble version of a schedule: each B becomes BI, and its BW follows `delay[rank]`
// backwards later (each chunk's BWs keep the order of its BIs); what is left fills the tail.
inline Schedule split_backward(Schedule schedule, const std::vector<int>& delay) {
    for (size_t rank = 0; rank < schedule.size(); rank++) {
        std::vector<Action> out, pending;
        for (const Action& a : schedule[rank]) {
            if (a.op != Op::B) {
                out.push_back(a);
                continue;
            }
            out.push_back({Op::BI, a.microbatch, a.chunk, a.overlapped});
            pending.push_back({Op::BW, a.microbatch, a.chunk});
            if (int(pending.size()) > delay[rank]) {
                out.push_back(pending.front());
                pending.erase(pending.begin());
            }
        }
        out.insert(out.end(), pending.begin(), pending.end());
        schedule[rank] = out;
    }
    return schedule;
}
}  // namespace detail

// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): the backward is split into BI (the
// input gradient, on the critical path to the previous stage) and BW (the weight gradient, which
// nobody waits for). 1F1B's order with B replaced by BI, and each BW delayed so it fills what
// were bubbles. Rank r delays its BWs by r micro-batches: it then holds up to P stashes (a
// micro-batch is live from its F until its BW), which is 1F1B's peak on rank 0, so the peak
// memory of the pipeline is unchanged (ranks r > 0 hold more than in 1F1B, as in the paper).
// With F = BI = BW the bubble is (P-1)/(3M+P-1), about a third of 1F1B's (P-1)/(M+P-1).
inline Schedule zero_bubble_h1(int P, int M) {
    detail::check_sizes("zero_bubble_h1", P, M);
    std::vector<int> delay(P);
    for (int r = 0; r < P; r++) delay[r] = r;  // BI(i) is followed by BW(i - r)
    return detail::split_backward(one_f_one_b(P, M), delay);
}

// Looped BFS (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"; PyTorch's
// ScheduleLoopedBFS): the loop placement, and GPipe's order one chunk at a time. Phase forward:
// every micro-batch through chunk 0, then through chunk 1, ...; phase backward: the chunks in
// reverse. PyTorch also reverses the micro-batches of each backward; we keep them increasing (one
// device's order), which the simulator says costs nothing. With costs per chunk and M >= P the
// bubble is interleaved 1F1B's (P-1)/(V*M+P-1), but every rank stashes all V*M (micro-batch,
// chunk) pairs, as in GPipe. Rank P-1 finishes chunk c long before rank 0 takes its outputs for
// chunk c+1, which only late sends allow (docs/communication.md).
inline Schedule looped_bfs(int P, int M, int V) {
    detail::check_sizes("looped_bfs", P, M, V);
    Schedule schedule(P);
    for (std::vector<Action>& actions : schedule) {
        for (int c = 0; c < V; c++)  // Forward
            for (int mb = 0; mb < M; mb++) actions.push_back({Op::F, mb, c});
        for (int c = V - 1; c >= 0; c--)  // Backward
            for (int mb = 0; mb < M; mb++) actions.push_back({Op::B, mb, c});
    }
    return schedule;
}

// Interleaved zero bubble (ZB1P on virtual stages; PyTorch's ScheduleInterleavedZeroBubble):
// Megatron's interleaved order with each B split into BI and BW, and rank r's BWs delayed by r
// backwards, as in ZB-H1, so they fill the bubbles of the warm-up and of the tail. With costs per
// chunk F = BI = BW and M >= 2P each rank idles P-1 units of 3VM: bubble (P-1)/(3VM+P-1), a
// third of interleaved 1F1B's, with its peak stashes. (M = P leaves fewer BWs to fill with.)
// V = 1 is ZB-H1.
inline Schedule interleaved_zero_bubble(int P, int M, int V) {
    if (P > 0 && M % P != 0)   // interleaved()'s own message would name the other schedule
        throw std::invalid_argument("interleaved zero bubble: built on Megatron's interleaved order, it needs the number of "
                                    "micro-batches M (" + std::to_string(M) + ") to be a multiple of the number of stages P (" +
                                    std::to_string(P) + ")");
    std::vector<int> delay(P);
    for (int r = 0; r < P; r++) delay[r] = r;
    return detail::split_backward(interleaved(P, M, V), delay);
}

// ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §2.2): rank r warms up with
// 2(P-r)-1 forwards instead of 1F1B's P-r-1, which fills the time until its first BI arrives,
// then runs BI, F, BW in turn with its BWs 2r backwards behind (the last ranks' BIs run early, so
// the tail's chain of BIs reaches rank 0 sooner) and the delayed BWs fill the tail. Every rank
// holds min(M, 2P) stashes: twice 1F1B's peak (P on rank 0). With M >= 2P each rank idles only
// (P-1)·F, the fill of the pipeline, for F = BI = BW and also when BI > BW (ZB-H1 idles
// (P-1)(F+BI-BW)): bubble = (P-1)F / (M(F+BI+BW) + (P-1)F). The paper's "zero" also removes the
// fill by overlapping a step with the next one, which our steps (ending in the optimizer) do not.
inline Schedule zero_bubble_h2(int P, int M) {
    detail::check_sizes("zero_bubble_h2", P, M);
    Schedule schedule(P);
    for (int rank = 0; rank < P; rank++) {
        std::vector<Action>& actions = schedule[rank];
        int num_warmup_microbatches = std::min(2 * (P - rank) - 1, M);
        int num_weight_delay = 2 * rank;  // BI(i) is followed by BW(i - 2 rank)
        int next_bw = 0;
        // Warmup
        for (int i = 0; i < num_warmup_microbatches; i++) actions.push_back({Op::F, i});
        // Steady state, then the cooldown once the forwards run out
        for (int i = 0; i < M; i++) {
            actions.push_back({Op::BI, i});
            if (num_warmup_microbatches + i < M) actions.push_back({Op::F, num_warmup_microbatches + i});
            if (i >= num_weight_delay) actions.push_back({Op::BW, next_bw++});
        }
        while (next_bw < M) actions.push_back({Op::BW, next_bw++});
    }
    return schedule;
}

// ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"; PyTorch's
// ScheduleZBVZeroBubble): the V placement, rank r holding chunk 0 = stage r and chunk 1 = stage
// 2P-1-r (the loss, on rank 0). A micro-batch goes down the ranks and back up, so rank 0 does
// not wait for the far end of the pipeline before its first backward. With costs per chunk
// F = BI = BW and M >= P, each rank idles (P-1) + max(0, 2P-2-M) units of 6M: zero bubble beyond
// the fill once M >= 2P-2. Rank r holds min(2P, M+1+r, 2M) (micro-batch, chunk) stashes: with
// M >= 2P, 2P half-stages on every rank, the activations of 1F1B's rank 0.
// For M < 2P-1 PyTorch plans 2P-1 micro-batches and drops the extra ones; we skip them as we go.
inline Schedule zbv(int P, int M) {
    detail::check_sizes("zbv", P, M);
    Schedule schedule(P);
    schedule.placement = Placement::vee;
    for (int rank = 0; rank < P; rank++) {
        std::vector<Action>& actions = schedule[rank];
        int f[2] = {0, 0}, bi[2] = {0, 0}, bw[2] = {0, 0};  // next micro-batch of each kind, per chunk
        auto F = [&](int c) { if (f[c] < M && (c == 0 || f[1] < f[0])) actions.push_back({Op::F, f[c]++, c}); };
        auto BI = [&](int c) { if (bi[c] < f[c]) actions.push_back({Op::BI, bi[c]++, c}); };
        auto BW = [&](int c) { if (bw[c] < bi[c]) actions.push_back({Op::BW, bw[c]++, c}); };
        // Warmup: chunk 0 runs ahead by the stages between it and its own chunk 1, then the two
        // alternate, then each chunk-1 forward is followed by its backward.
        for (int i = 0; i < 2 * (P - rank) - 1; i++) F(0);
        for (int i = 0; i < rank; i++) F(1), F(0);
        for (int i = 0; i < P - rank; i++) F(1), BI(1), BW(1);
        // Steady state: F, BI, BW of chunk 0, then of chunk 1.
        while (f[0] < M || f[1] < M) F(0), BI(0), BW(0), F(1), BI(1), BW(1);
        // Cooldown: the BIs first, BWs where they leave room, the rest at the end.
        for (int i = 0; i < rank; i++) BI(0), BI(1);
        for (int i = 0; i < P - rank; i++) BI(0), BW(0);
        while (bi[0] < M || bi[1] < M) BI(0), BI(1);
        while (bw[1] < M) BW(1);
        while (bw[0] < M) BW(0);
    }
    return schedule;
}

// V-Half and V-Min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory", §4; the
// authors' zbv_greedy.py): the V placement built from one building block repeated every 6 slots.
// Rank r runs F of chunk 0, F of chunk 1, BI of chunk 1 and BI of chunk 0 of micro-batch i at
// slots start[r] + 6i, and its BWs in the slots left free, oldest first. A stash lives about as
// many slots as its F is ahead of its BW, so the block's lifespan sets the memory: the list of
// actions is what we keep (simulate and the executor close the empty slots). The paper then
// reorders the warm-up and cool-down greedily to shave the bubble; we do not.
namespace detail {
inline Schedule from_building_block(int P, int M, const std::vector<std::array<int, 4>>& start) {
    const Action block[4] = {{Op::F, 0, 0}, {Op::F, 0, 1}, {Op::BI, 0, 1}, {Op::BI, 0, 0}};
    Schedule schedule(P);
    schedule.placement = Placement::vee;
    for (int rank = 0; rank < P; rank++) {
        std::map<int, Action> at;  // slot -> action
        for (int i = 0; i < M; i++)
            for (int k = 0; k < 4; k++)
                if (!at.insert({start[rank][k] + 6 * i, {block[k].op, i, block[k].chunk}}).second)
                    throw std::logic_error("from_building_block: two actions share a slot");  // a wrong block
        std::vector<Action> owed;  // BWs whose BI has run, oldest first
        for (int t = 0; t <= at.rbegin()->first || !owed.empty(); t++) {
            auto a = at.find(t);
            if (a != at.end() && a->second.op == Op::BI) owed.push_back({Op::BW, a->second.microbatch, a->second.chunk});
            if (a != at.end()) schedule[rank].push_back(a->second);
            else if (!owed.empty()) schedule[rank].push_back(owed.front()), owed.erase(owed.begin());
        }
    }
    return schedule;
}
}  // namespace detail

// V-Min: on rank r chunk 0's F runs at slot r and its BI at 4P-1-r, chunk 1's at 2P-1-r and 2P+r.
// The two lifespans add up to about 4P slots and a micro-batch enters every 6, so a rank holds at
// most 2⌊(P+4)/3⌋ (micro-batch, chunk) stashes (2M if fewer): the activations of ⌊(P+4)/3⌋
// micro-batches on a whole stage: a third of 1F1B's P as P grows (a half at P = 8). With costs per
// chunk F = BI = BW, P >= 2 and M >= P each rank idles 4P-5 units of 6M (+2 when 3 divides P):
// bubble about 2P/(3M), 1F1B's P/M.
inline Schedule v_min(int P, int M) {
    detail::check_sizes("v_min", P, M);
    int gap = P % 3 == 0 ? 2 : 0;  // without it F and BI of a rank would share a slot modulo 6
    std::vector<std::array<int, 4>> start;
    for (int r = 0; r < P; r++) start.push_back({r, 2 * P - 1 - r, 2 * P + gap + r, 4 * P + gap - 1 - r});
    return detail::from_building_block(P, M, start);
}

// V-Half: V-Min's block stretched, chunk 0's F two slots apart from rank to rank; the lifespans add
// up to about 6P slots: at most 2⌊(P+2)/2⌋ stashes (2M if fewer), half of 1F1B's activations. With
// costs per chunk F = BI = BW and M >= P each rank idles (7(P-1) + gap)/2 units of 6M (gap = 3 for
// even P): bubble about 7P/(12M).
inline Schedule v_half(int P, int M) {
    detail::check_sizes("v_half", P, M);
    int gap = P % 2 == 0 ? 3 : 0;  // as in V-Min: no two actions of a rank in one slot modulo 6
    std::vector<std::array<int, 4>> start;
    for (int r = 0; r < P; r++) start.push_back({2 * r, 3 * P - 2 - r, 3 * P - 1 + gap + 2 * r, 6 * P - 2 + gap - r});
    return detail::from_building_block(P, M, start);
}

// DualPipeV (DeepSeek-V3 report 2024; PyTorch's ScheduleDualPipeV): the V placement with
// DualPipe's eight steps. In the main step every rank pairs a forward of one chunk with a backward
// of the other (F&B, `overlapped`); the executor runs a pair one after the other, simulate charges
// it F + B, or max(F, B) with Costs::overlap. Backwards are full B except in steps 3, 6 and 7,
// whose BWs wait in a queue (DualPipe's WeightGradStore), in micro-batch order per chunk. Needs
// M >= 2P. Its stashes and bubble: docs/schedules.md.
inline Schedule dualpipev(int P, int M) {
    detail::check_sizes("dualpipev", P, M);
    if (M < 2 * P)
        throw std::invalid_argument("dualpipev: DualPipeV needs at least 2P micro-batches (M=" + std::to_string(M) +
                                    ", P=" + std::to_string(P) + ")");
    Schedule schedule(P);
    schedule.placement = Placement::vee;
    for (int rank = 0; rank < P; rank++) {
        std::vector<Action>& actions = schedule[rank];
        int f[2] = {0, 0}, b[2] = {0, 0};  // next micro-batch of each chunk
        std::vector<Action> weights;       // BWs waiting, in the order of their BIs
        auto F = [&](int c) { actions.push_back({Op::F, f[c]++, c}); };
        auto B = [&](int c, bool zero_bubble, bool overlapped = false) {
            if (!zero_bubble) return actions.push_back({Op::B, b[c]++, c, overlapped});
            actions.push_back({Op::BI, b[c], c, overlapped});
            weights.push_back({Op::BW, b[c]++, c});
        };
        auto W = [&] { actions.push_back(weights.front()), weights.erase(weights.begin()); };
        int after = P - rank - 1;  // ranks after this one
        // 1. nF0: chunk 0 runs ahead
        for (int i = 0; i < 2 * after; i++) F(0);
        // 2. nF0F1
        for (int i = 0; i <= rank; i++) F(0), F(1);
        // 3. nB1W1F1: zero bubble
        for (int i = 0; i < after; i++) B(1, true), W(), F(1);
        // 4. nF0B1F1B0, the main step (the last rank's first pair is not overlapped: a smaller bubble)
        for (int i = 0; i < M - 2 * P + rank + 1; i++) {
            F(0), B(1, false, !(i == 0 && rank == P - 1));
            F(1), B(0, false, true);
        }
        // 5. nB1F1B0
        for (int i = 0; i < after; i++) B(1, false), F(1), B(0, false, true);
        // 6. nB1B0: from the middle on, zero bubble
        bool zero_bubble = false;
        for (int i = 0; i <= rank; i++) {
            if (i == (rank + 1) / 2 && rank % 2 == 1) zero_bubble = true;
            B(1, zero_bubble);
            if (i == (rank + 1) / 2 && rank % 2 == 0) zero_bubble = true;
            B(0, zero_bubble);
        }
        // 7. nWB0
        for (int i = 0; i < after; i++) W(), B(0, true);
        // 8. nW
        while (!weights.empty()) W();
    }
    return schedule;
}

// ----------------------------------------------------------------------------------------------
// simulate, and the late-send plans it makes
// ----------------------------------------------------------------------------------------------
// Costs per action and per transfer, in any unit. B costs bi + bw.
struct Costs {
    double f = 1, bi = 1, bw = 1, comm = 0;
    bool overlap = false;  // an overlapped F&B pair (DualPipe) costs max(F, B) instead of F + B
    // [micro-batch] what its weight gradient costs beyond bw, if given: a tree of gradient sums
    // adds unevenly (src/pairwise.hpp: most adds at the last micro-batch, on the critical path).
    std::vector<double> bw_extra = {};
    double of(Op op, int microbatch) const {
        double extra = op != Op::F && op != Op::BI && microbatch < int(bw_extra.size()) ? bw_extra[microbatch] : 0;
        return (op == Op::F ? f : op == Op::B ? bi + bw : op == Op::BI ? bi : bw) + extra;
    }
};

struct SimResult {
    double makespan = 0;
    std::vector<double> busy, idle;  // per rank
    double bubble = 0;               // total idle / (P * makespan)
    std::vector<int> peak_live;      // per rank: most micro-batch stashes held at once
    std::vector<Event> events;
};

namespace detail {
// The simulator's state: the sends and receives posted so far between each pair of ranks, in FIFO
// order, and where each rank stands in its list of actions.
struct Sim {
    struct Posted { int tag; double time; };
    struct Rank {
        std::vector<std::vector<CommOp>> plan;         // the group posted before each action
        size_t pos = 0;                                // the next action
        bool posted = false, done = false;             // its group is posted; the rank has finished
        double post_time = 0;                          // when it posted that group (it is free from then)
        std::vector<std::pair<CommOp, size_t>> group;  // the posted group: each op and its FIFO index
        std::vector<int> arrived;                      // tags received
    };
    Sim(const Schedule& schedule, int V)
        : schedule(schedule), P(int(schedule.size())), V(V), layout{P, V, schedule.placement}, sends(size_t(P) * P),
          recvs(size_t(P) * P), ranks(P) {
        for (int r = 0; r < P; r++) ranks[r].plan = comm_plan(schedule[r], r, layout);
    }
    // What `op` of rank r must meet: the receives posted by its destination, or the sends by its source.
    std::vector<Posted>& peer_list(int r, const CommOp& op) {
        return op.send ? recvs[size_t(r) * P + op.peer] : sends[size_t(op.peer) * P + r];
    }
    const Schedule& schedule;
    int P, V;
    Layout layout;
    bool making = false, moved = false;  // plans are being made; a send was just moved later
    std::vector<std::vector<Posted>> sends, recvs;  // [src * P + dst]
    std::vector<Rank> ranks;
};

// A late send (docs/communication.md): rank r's sends to `peer` from FIFO index `from` on,
// all in its posted group (the earlier ones are met), move to the front of its next group.
// Returns false if there is none, or no next group.
inline bool move_sends_later(Sim& s, int r, int peer, size_t from) {
    Sim::Rank& me = s.ranks[r];
    if (me.done || !me.posted || me.pos + 1 >= me.plan.size()) return false;
    std::vector<CommOp> late;
    for (size_t j = me.group.size(); j-- > 0;) {  // backwards: the last one posted is last in the list
        auto [op, k] = me.group[j];
        if (!op.send || op.peer != peer || k < from) continue;
        s.sends[size_t(r) * s.P + peer].pop_back();
        me.group.erase(me.group.begin() + long(j));
        std::vector<CommOp>& now = me.plan[me.pos];
        now.erase(std::find(now.begin(), now.end(), op));
        late.insert(late.begin(), op);
    }
    std::vector<CommOp>& next = me.plan[me.pos + 1];
    next.insert(next.begin(), late.begin(), late.end());
    return !late.empty();
}

// A FIFO mismatch: the receiver wants `tag` from rank r at FIFO index `from`. If r's posted group
// holds that send (to `peer`, from index `from` on), it goes first; false if it does not.
inline bool send_first(Sim& s, int r, int peer, size_t from, int tag) {
    Sim::Rank& me = s.ranks[r];
    std::vector<size_t> slots;  // positions in the group (and in plan[pos]: the same order)
    for (size_t j = 0; j < me.group.size(); j++)
        if (me.group[j].first.send && me.group[j].first.peer == peer && me.group[j].second >= from) slots.push_back(j);
    auto wanted = std::find_if(slots.begin(), slots.end(), [&](size_t j) { return me.group[j].first.tag == tag; });
    if (wanted == slots.end()) return false;
    std::vector<CommOp> order = {me.group[*wanted].first};
    for (size_t j : slots)
        if (j != *wanted) order.push_back(me.group[j].first);
    for (size_t i = 0; i < slots.size(); i++) {
        auto& [op, k] = me.group[slots[i]];
        op = me.plan[me.pos][slots[i]] = order[i];
        s.sends[size_t(r) * s.P + peer][k].tag = op.tag;
    }
    return true;
}

// Every rank is blocked: the unmatched sends of the rank that has waited longest (the earliest
// posted group; ties: the lowest rank) leave later. Returns false when no rank has one: a deadlock.
inline bool move_oldest_unmatched_sends(Sim& s) {
    int late = -1;
    for (int r = 0; r < s.P; r++) {
        const Sim::Rank& me = s.ranks[r];
        bool waits = false;
        for (const auto& [op, k] : me.group) waits = waits || (op.send && s.peer_list(r, op).size() <= k);
        if (!me.done && waits && me.pos + 1 < me.plan.size() && (late < 0 || me.post_time < s.ranks[late].post_time))
            late = r;
    }
    bool moved = false;
    for (int peer = 0; late >= 0 && peer < s.P; peer++)
        moved = move_sends_later(s, late, peer, s.recvs[size_t(late) * s.P + peer].size()) || moved;
    return moved;
}

// Whether every operation of rank r's posted group has met its peer's. A FIFO mismatch (the
// receiver wants another tensor first) reorders the sender's group, or moves its send later,
// while plans are made; it is an error otherwise.
inline bool group_met(Sim& s, int r) {
    bool with_chunk = s.V > 1, complete = true;
    for (const auto& [op, k] : s.ranks[r].group) {
        auto& other = s.peer_list(r, op);
        if (other.size() <= k) { complete = false; continue; }
        if (other[k].tag != op.tag) {
            int recv_tag = op.send ? other[k].tag : op.tag, send_tag = op.send ? op.tag : other[k].tag;
            int dst = op.send ? op.peer : r, src = op.send ? r : op.peer;
            if (s.making && (send_first(s, src, dst, k, recv_tag) || move_sends_later(s, src, dst, k))) {
                s.moved = true;
                return false;
            }
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
    double ready = me.post_time, transfer = 0;  // transfer: of the receive that arrives last
    for (const auto& [op, k] : me.group) {
        if (op.send) continue;  // timing: a send does not hold up its sender (see `simulate`)
        double sent = std::max(me.post_time, s.peer_list(r, op)[k].time), cost = op.peer == r ? 0.0 : costs.comm;
        if (sent + cost > ready) ready = sent + cost, transfer = cost;
        me.arrived.push_back(op.tag);
    }
    if (ready > me.post_time) {
        std::string what;
        for (const auto& [op, k] : me.group) what += (what.empty() ? "" : ", ") + describe(op, s.V > 1);
        const std::vector<Action>& actions = s.schedule[r];
        Action next = me.pos < actions.size() ? actions[me.pos] : actions.back();
        res.events.push_back({r, next, true, me.post_time, ready, what, transfer});
    }
    return ready;
}

// Runs rank r's next action from time `ready`; throws if its input has not arrived.
inline void run_action(SimResult& res, Sim& s, int r, double ready, const Costs& costs) {
    Sim::Rank& me = s.ranks[r];
    const Action& a = s.schedule[r][me.pos];
    CommOp in = input_of(a, r, s.layout);
    if (in.peer >= 0 && std::find(me.arrived.begin(), me.arrived.end(), in.tag) == me.arrived.end())
        throw std::runtime_error("rank " + std::to_string(r) + ", action " + to_string(a, s.V > 1) +
                                 ": runs before the action that produces its input");
    double cost = costs.of(a.op, a.microbatch);
    if (a.overlapped && costs.overlap) cost = std::max(0.0, cost - costs.f);  // the pair ends max(F, B) after it began
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


// Runs the schedule under the communication policy (docs/communication.md). Matching is unbuffered: a group completes
// only when every one of its sends and receives has met its peer, else we report the deadlock.
// `plans` empty: the plans are made here, late sends included, and returned in it; use unit
// costs then (`make_plans`), so that every caller gets the same plans. Otherwise they are followed.
// Timing: rank r's actions take costs[r]; a transfer starts when both sides have posted it and
// takes the receiver's costs.comm; the receiver
// waits for it, the sender does not (eager or asynchronous sends, as real engines overlap them).
inline SimResult run(const Schedule& schedule, int V, const std::vector<Costs>& costs, std::vector<Plan>& plans) {
    bool making = plans.empty();
    Sim s(schedule, V);
    s.making = making;
    if (!making)
        for (int r = 0; r < s.P; r++) s.ranks[r].plan = plans[r];
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
            if (!group_met(s, r)) {
                progress = progress || s.moved;
                s.moved = false;
                continue;
            }
            progress = true;
            double ready = finish_group(res, s, r, costs[r]);
            if (me.pos == schedule[r].size()) {
                me.done = true;
                res.makespan = std::max(res.makespan, ready);
                continue;
            }
            run_action(res, s, r, ready, costs[r]);
        }
        if (!progress && making) progress = move_oldest_unmatched_sends(s);
    }
    std::string waiting = waiting_ranks(s);
    if (!waiting.empty()) throw std::runtime_error("deadlock: " + waiting);
    if (making)
        for (const Sim::Rank& me : s.ranks) plans.push_back(me.plan);
    return res;
}

inline std::vector<Plan> make_plans(const Schedule& schedule, int V) {
    std::vector<Plan> plans;
    run(schedule, V, std::vector<Costs>(schedule.size()), plans);
    return plans;
}
}  // namespace detail

// The late-send plan of every rank (the simulator's, unit costs): the plain plan where it does not
// deadlock, otherwise with sends moved later or reordered (docs/communication.md). Checks the
// action lists first, so a broken schedule gets validate's message.
inline std::vector<Plan> late_send_plan(const Schedule& schedule, int num_chunks = 0) {
    int V = detail::check_lists(schedule, 0, num_chunks);
    return detail::make_plans(schedule, V);
}

// The plan to run `schedule` with: empty (the core's plain plan) when that one completes, the
// late-send plan otherwise. `Pipeline(schedule, V, stage, comm, r, ranks, plan_for(schedule, V))`.
inline std::vector<Plan> plan_for(const Schedule& schedule, int num_chunks = 0) {
    int V = detail::check_lists(schedule, 0, num_chunks);
    try {
        detail::check_plans(schedule, V, {});
        return {};
    } catch (const std::runtime_error&) {
        return detail::make_plans(schedule, V);
    }
}

// Predicts time, bubble and memory of a schedule (validating it on the way), with costs per rank
// (per chunk when V > 1). With comm = 0 and F : B equal for every micro-batch, GPipe and 1F1B give
// bubble = (P-1)/(M+P-1), interleaved (P-1)/(V*M+P-1) and ZB-H1 with F = BI = BW and M >= P
// (P-1)/(3M+P-1); each generator above states its own.
inline SimResult simulate(const Schedule& schedule, const std::vector<Costs>& costs, int num_chunks = 0) {
    if (costs.size() != schedule.size()) throw std::invalid_argument("simulate: need one Costs per rank");
    for (const Costs& k : costs) {
        std::vector<double> all = k.bw_extra;
        all.insert(all.end(), {k.f, k.bi, k.bw, k.comm});
        for (double c : all)
            if (!(c >= 0 && std::isfinite(c))) throw std::invalid_argument("simulate: costs must be finite and >= 0");
    }
    int P = int(schedule.size());
    int V = detail::check_lists(schedule, 0, num_chunks);
    std::vector<Plan> plans = detail::make_plans(schedule, V);  // what the executor runs with plan_for
    SimResult res = detail::run(schedule, V, costs, plans);
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
inline SimResult simulate(const Schedule& schedule, const Costs& costs = {}, int num_chunks = 0) {
    return simulate(schedule, std::vector<Costs>(schedule.size(), costs), num_chunks);
}

// ----------------------------------------------------------------------------------------------
// auto: a zero-bubble schedule planned from measured costs under a memory cap
// ----------------------------------------------------------------------------------------------
// List scheduling on a simulated clock (the zero-bubble paper's heuristic, Qi et al. 2024, §3),
// BI/BW split, one chunk per rank. The rank that can act earliest runs the next BI if its gradient
// has arrived or the next F if its input has and it holds fewer than cap[r] stashes (both: they
// take turns, as in 1F1B), else its oldest BW owed, else it waits. The greedy plan is then
// simulated against 1F1B, ZB-H1 and ZB-H2 and the fastest that fits the cap wins. docs/schedules.md.
namespace detail {
inline Schedule plan_greedy(int P, int M, const std::vector<Costs>& costs, const std::vector<int>& cap) {
    const double never = HUGE_VAL;  // a time not known yet: its producer has not been planned
    std::vector<std::vector<double>> f_end(P, std::vector<double>(M, never)), bi_end = f_end;
    struct Rank { double clock = 0; int f = 0, bi = 0, bw = 0; bool after_bi = false; };
    std::vector<Rank> ranks(P);
    Schedule schedule(P);
    // When rank r's next F and BI can start (never: not allowed or not known yet).
    auto f_ready = [&](int r) {
        const Rank& me = ranks[r];
        if (me.f == M || me.f - me.bw >= cap[r]) return never;
        return r == 0 ? 0.0 : f_end[r - 1][me.f] + costs[r - 1].comm;
    };
    auto bi_ready = [&](int r) {
        const Rank& me = ranks[r];
        if (me.bi == me.f) return never;
        return r == P - 1 ? f_end[r][me.bi] : bi_end[r + 1][me.bi] + costs[r + 1].comm;
    };
    for (int planned = 0; planned < 3 * P * M; planned++) {
        int r = -1;  // the rank that can act first (ties: the lowest)
        double soonest = never;
        for (int q = 0; q < P; q++) {
            const Rank& me = ranks[q];
            double when = me.bw < me.bi ? me.clock : std::max(me.clock, std::min(f_ready(q), bi_ready(q)));
            if (when < soonest) r = q, soonest = when;
        }
        if (r < 0) throw std::logic_error("auto_schedule: no rank can act");  // cannot happen: each cap holds one
        Rank& me = ranks[r];
        const Costs& c = costs[r];
        bool bi = bi_ready(r) <= soonest, f = f_ready(r) <= soonest;
        if (bi && f) bi = me.bi == 0 || !me.after_bi;  // both ready: F and BI take turns, as in 1F1B
        Action a = bi ? Action{Op::BI, me.bi} : f ? Action{Op::F, me.f} : Action{Op::BW, me.bw};
        if (a.op != Op::BW) me.after_bi = a.op == Op::BI;
        me.clock = soonest + c.of(a.op, a.microbatch);
        if (a.op == Op::F) f_end[r][me.f++] = me.clock;
        if (a.op == Op::BI) bi_end[r][me.bi++] = me.clock;
        if (a.op == Op::BW) me.bw++;
        schedule[r].push_back(a);
    }
    return schedule;
}
}  // namespace detail

inline Schedule auto_schedule(int P, int M, const std::vector<Costs>& costs, const std::vector<int>& cap) {
    detail::check_sizes("auto_schedule", P, M);
    if (int(costs.size()) != P || int(cap.size()) != P)
        throw std::invalid_argument("auto_schedule: need the costs and the memory cap of each of the " + std::to_string(P) + " ranks");
    for (int r = 0; r < P; r++)
        if (cap[r] < 1) throw std::invalid_argument("auto_schedule: rank " + std::to_string(r) + "'s cap holds no stash");
    Schedule schedule = detail::plan_greedy(P, M, costs, cap);
    // The greedy plan, or a fixed schedule that fits the cap, whichever simulate says is faster
    // on these costs (the greedy one's clock knows nothing of groups of transfers).
    Schedule best = schedule;
    double fastest = simulate(schedule, costs).makespan;
    for (const Schedule& s : {one_f_one_b(P, M), zero_bubble_h1(P, M), zero_bubble_h2(P, M)}) {
        SimResult r = simulate(s, costs);
        bool fits = true;
        for (int q = 0; q < P; q++) fits = fits && r.peak_live[q] <= cap[q];
        if (fits && r.makespan < fastest) best = s, fastest = r.makespan;
    }
    return best;
}

// auto on both placements: the plan above, or V-Half or V-Min (the V placement, issue #34) when one
// fits its cap and simulate says it is faster. The V shape splits the layers into 2P chunks, so it
// takes its own costs per chunk and its own cap, in (micro-batch, chunk) stashes, per rank: where
// 1F1B does not fit, V-Min (a third of its activations) or V-Half (a half) may.
inline Schedule auto_schedule(int P, int M, const std::vector<Costs>& costs, const std::vector<int>& cap,
                              const std::vector<Costs>& vee_costs, const std::vector<int>& vee_cap) {
    if (int(vee_costs.size()) != P || int(vee_cap.size()) != P)
        throw std::invalid_argument("auto_schedule: need the V placement's costs and cap of each of the " + std::to_string(P) + " ranks");
    Schedule best;
    double fastest = HUGE_VAL;
    bool loop_fits = true;  // the greedy plan fits any cap of at least one stash
    for (int r = 0; r < P; r++) loop_fits = loop_fits && cap[r] >= 1;
    if (loop_fits) best = auto_schedule(P, M, costs, cap), fastest = simulate(best, costs).makespan;
    for (const Schedule& s : {v_half(P, M), v_min(P, M)}) {
        SimResult r = simulate(s, vee_costs);
        bool fits = true;
        for (int q = 0; q < P; q++) fits = fits && r.peak_live[q] <= vee_cap[q];
        if (fits && r.makespan < fastest) best = s, fastest = r.makespan;
    }
    if (best.empty()) throw std::invalid_argument("auto_schedule: no schedule fits the memory cap");
    return best;
}

// ----------------------------------------------------------------------------------------------
// Timeline: ASCII Gantt chart and Chrome trace
// ----------------------------------------------------------------------------------------------
// Charts and traces name an action as schedules do (`to_string`): "F3", "B3", "BI3", "BW3", and
// "F3.1" (chunk 1) when the timeline has more than one chunk per rank (V > 1).
inline bool names_chunks(const std::vector<Event>& events) {
    return std::any_of(events.begin(), events.end(), [](const Event& e) { return e.action.chunk > 0; });
}

// One line per rank; each action is drawn as its name padded with '-'; '.' is idle or waiting
// for a peer. A box too narrow for the name shows two characters, "I3" for BI3.0, "w3" for BW3.1
// (the op's letter, lower case on odd chunks), or the micro-batch alone (or nothing): those are
// listed under the chart. A legend ends it. `width` counts whole lines, "rank N |" included; 0:
// $COLUMNS, else 100 (pipetrain's commands pass the terminal's width, asked of the terminal); at most 1000.
inline std::string ascii_timeline(const std::vector<Event>& events, int P, int width = 0) {
    if (width <= 0) {
        const char* columns = std::getenv("COLUMNS");
        const long n = columns ? std::strtol(columns, nullptr, 10) : 0;   // atoi wrapped 99999999999
        width = n > 0 ? int(std::min(n, 1000L)) : 100;
    }
    width = std::min(width, 1000);   // a chart a line of a terminal can show, not gigabytes
    auto prefix = [&](int r) {
        std::string n = std::to_string(r);
        return "rank " + std::string(std::to_string(std::max(P - 1, 0)).size() - n.size(), ' ') + n + " |";
    };
    int cols = std::max(width - int(prefix(0).size()) - 1, 8);
    double makespan = 0;
    for (const Event& e : events) makespan = std::max(makespan, e.end);
    std::vector<std::string> rows(P, std::string(cols, '.'));
    std::vector<std::string> dropped;
    double scale = makespan > 0 ? cols / makespan : 0;
    bool chunks = names_chunks(events);
    for (const Event& e : events) {
        if (e.comm || e.rank < 0 || e.rank >= P || !(e.start >= 0 && e.end <= makespan)) continue;  // NaN too
        int a = std::min(int(e.start * scale + 0.5), cols - 1), b = std::min(std::max(a + 1, int(e.end * scale + 0.5)), cols);
        std::string name = to_string(e.action, chunks), number = std::to_string(e.action.microbatch);
        char letter = "FBIW"[int(e.action.op)];
        if (e.action.chunk % 2 == 1) letter = char(letter - 'A' + 'a');
        std::string label = name;
        for (const std::string& shorter : {letter + number, number, std::string()})
            if (b - a < int(label.size())) label = shorter;
        if (label.size() <= number.size()) dropped.push_back("rank " + std::to_string(e.rank) + " " + name);
        for (int c = a; c < b; c++) rows[e.rank][c] = c - a < int(label.size()) ? label[c - a] : '-';
    }
    std::string out;
    for (int r = 0; r < P; r++) out += prefix(r) + rows[r] + "|\n";
    if (!dropped.empty()) {
        out += "too narrow to name (" + std::to_string(dropped.size()) + "):";
        for (size_t i = 0; i < dropped.size() && i < 8; i++) out += (i ? ", " : " ") + dropped[i];
        out += dropped.size() > 8 ? ", ... (to name them all, widen the terminal or run with COLUMNS=250)\n" : "\n";
    }
    return out + "F3 = forward of micro-batch 3, B3 backward, BI3/BW3 input/weight gradient" +
           (chunks ? ", F3.1 on chunk 1" : "") + "; narrow: I3 = BI3, W3 = BW3" + (chunks ? ", f3 = F3.1 (odd chunk)" : "") +
           "; - running, . idle or waiting\n";
}

// JSON for Perfetto (ui.perfetto.dev) or chrome://tracing: one track per rank, times in µs
// (simulated cost units are written as µs), actions named as in the charts, "comm" for a group.
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
    bool chunks = names_chunks(events);
    for (const Event& e : events) {
        std::string times = "\"ts\":" + number(e.start) + ",\"dur\":" + number(e.end - e.start);
        std::string id = std::to_string(e.rank);
        // args: a compute event's micro-batch and chunk, a group's operations and (simulated) its transfer time
        std::string args = e.comm ? "" : "\"microbatch\":" + std::to_string(e.action.microbatch) + ",\"chunk\":" +
                                             std::to_string(e.action.chunk);
        if (!e.detail.empty()) args += (args.empty() ? "" : ",") + ("\"detail\":" + quoted(e.detail));
        if (e.comm && e.transfer >= 0) args += (args.empty() ? "" : ",") + ("\"transfer\":" + number(e.transfer));
        out += sep + ("{\"name\":" + quoted(e.comm ? "comm" : to_string(e.action, chunks)) + ",\"cat\":\"" +
                      (e.comm ? "comm" : op_name(e.action.op)) + "\",\"ph\":\"X\",\"pid\":" + id + ",\"tid\":" + id +
                      "," + times + ",\"args\":{" + args + "}}");
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

// A split into P·V chunks that balances the ranks, not only the chunks: with V > 1 a rank runs V
// chunks (the layout says which) and is as slow as their sum. partition() balances the chunks,
// and among its ties may give one rank twice another's work: 6 equal blocks as V-shaped chunks
// [1 2 | 2 1] put 4 blocks on rank 1 and 2 on rank 0 (seen: steps 1.25x slower). A depth-first
// search over the chunks' ends, pruned by the best split so far (partition()'s to begin with),
// minimizes the slowest rank, then the slowest chunk; it stops, keeping the best, after 10^6 tries.
inline std::vector<int> partition_ranks(const std::vector<double>& layer_costs, const Layout& layout) {
    const int S = layout.P * layout.V, L = int(layer_costs.size());
    std::vector<int> best = partition(layer_costs, S);
    if (layout.V == 1) return best;
    std::vector<double> prefix = detail::prefix_sums(layer_costs, "partition");
    std::vector<double> rank(layout.P, 0.0);   // each rank's sum of the chunks placed so far
    std::pair<double, double> best_score{0, 0};   // (slowest rank, slowest chunk) of best
    for (int s = 0; s < S; s++) {
        double c = prefix[best[s + 1]] - prefix[best[s]];
        rank[layout.rank(s)] += c, best_score.second = std::max(best_score.second, c);
    }
    best_score.first = *std::max_element(rank.begin(), rank.end());
    std::fill(rank.begin(), rank.end(), 0.0);
    // Sums that differ only in rounding (the same layers added in another order) tie.
    const double eps = 1e-9 * prefix[L];
    auto better = [eps](std::pair<double, double> x, std::pair<double, double> y) {
        return x.first < y.first - eps || (x.first <= y.first + eps && x.second < y.second - eps);
    };
    std::vector<int> b(S + 1, 0);
    long tries = 0;
    std::function<void(int, double, double)> place = [&](int s, double worst_rank, double worst_chunk) {
        for (int e = s == S - 1 ? L : b[s] + 1; e <= L - (S - 1 - s) && ++tries <= 1000000; e++) {
            const double c = prefix[e] - prefix[b[s]], old = rank[layout.rank(s)];
            rank[layout.rank(s)] = old + c;
            std::pair<double, double> score{std::max(worst_rank, old + c), std::max(worst_chunk, c)};
            const bool kept = better(score, best_score);
            if (kept) {
                b[s + 1] = e;
                if (s == S - 1) best = b, best_score = score;
                else place(s + 1, score.first, score.second);
            }
            rank[layout.rank(s)] = old;
            if (!kept || !better(score, best_score)) break;   // a longer chunk costs no less
        }
    };
    place(0, 0.0, 0.0);
    return best;
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

}  // namespace pp
