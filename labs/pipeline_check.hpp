// labs/pipeline_check.hpp — what the schedule labs' checks share: a schedule's first difference in
// the student's terms, and one training step of the tiny model on threads compared, bit for bit,
// with the same step on one device (tutorials/common.hpp's stages and step).
#pragma once
#include <cstring>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "labs/check.hpp"
#include "pipeline_lab.hpp"
#include "tutorials/common.hpp"

namespace labcheck {

// "F0 F1 B0 F2 B1": a rank's actions (the first `most`, then "...").
inline std::string actions_text(const std::vector<pp::Action>& actions, size_t most = 24, bool chunks = false) {
    std::string s;
    for (size_t i = 0; i < actions.size() && i < most; i++) s += (i ? " " : "") + pp::to_string(actions[i], chunks);
    if (actions.size() > most) s += " ...";
    return s.empty() ? "(no actions)" : s;
}

// Every (P, M) with P <= max_P and M <= max_M, P = 4 and M = 8 first: the first difference a check
// reports is then in the size every picture of the lesson uses, where there is one.
inline std::vector<std::pair<int, int>> sizes_up_to(int max_P, int max_M) {
    std::vector<std::pair<int, int>> all;
    if (max_P >= 4 && max_M >= 8) all.push_back({4, 8});
    for (int P = 1; P <= max_P; P++)
        for (int M = 1; M <= max_M; M++)
            if (P != 4 || M != 8) all.push_back({P, M});
    return all;
}

// The message of pp::validate, or "" when the schedule is valid (unbuffered sends, NCCL's semantics).
inline std::string validate_message(const pp::Schedule& schedule, int M, int V = 1) {
    try {
        pp::validate(schedule, M, V, pp::plan_for(schedule, V));
        return "";
    } catch (const std::exception& e) {
        return e.what();
    }
}

// "" when every rank runs its backwards (B, BI and BW each) in increasing micro-batch order per
// chunk; else the first that does not: "your rank 0, action 14: B6 after B7: F0 F1 ...".
inline std::string backward_order_problem(const pp::Schedule& s) {
    for (size_t r = 0; r < s.size(); r++) {
        std::map<std::pair<pp::Op, int>, int> last;   // (op, chunk) -> the last micro-batch seen
        for (size_t i = 0; i < s[r].size(); i++) {
            const pp::Action& a = s[r][i];
            if (a.op == pp::Op::F) continue;
            auto it = last.find({a.op, a.chunk});
            if (it != last.end() && a.microbatch < it->second)
                return "your rank " + std::to_string(r) + ", action " + std::to_string(i) + ": " + pp::to_string(a) +
                       " after " + pp::to_string(pp::Action{a.op, it->second, a.chunk}) + ": " + actions_text(s[r]);
            last[{a.op, a.chunk}] = a.microbatch;
        }
    }
    return "";
}
inline const char* const kBackwardOrderHint =
    "run every rank's backwards in increasing micro-batch order: one device sums the weight gradients in a "
    "fixed tree in that order, (g0 + g1) + (g2 + g3); float addition is not associative, so another order "
    "gives other bits";

// The step's shape: the tiny preset, 8 sequences of 32 tokens of the shipped corpus.
constexpr int kRows = 8, kTokens = 32;

inline const lab::Data& tiny_data() {
    static const lab::Data data = lab::read_data(kTokens);
    return data;
}

// One optimizer step of `schedule` on threads (a rank each), from the seed every Stages starts from.
inline lab::Stages step_of(const pp::Schedule& schedule, int V = 1, pt::Recompute recompute = pt::Recompute::none) {
    const lab::Data& d = tiny_data();
    lab::Stages m = lab::make_stages(d.cfg, int(schedule.size()), V, recompute, 1, 0.1f, schedule.placement);
    lab::step_on_threads(m, schedule, lab::batch_of(d, kRows));
    return m;
}

// The reference: the same step on one device, written here by hand (not by a generator a lab
// asks for): every forward, then every backward, in increasing micro-batch order.
inline lab::Stages one_device_step(int M) {
    pp::Schedule one(1);
    for (int mb = 0; mb < M; mb++) one[0].push_back({pp::Op::F, mb});
    for (int mb = 0; mb < M; mb++) one[0].push_back({pp::Op::B, mb});
    return step_of(one);
}

// "" when every parameter holds the same bits; else the first that differs, named as in a checkpoint.
inline std::string first_parameter_difference(const lab::Stages& yours, const lab::Stages& reference) {
    std::vector<pt::Layer*> a = yours.layers(), b = reference.layers();
    for (size_t i = 0; i < a.size() && i < b.size(); i++)
        for (const pt::ParamInfo& pi : a[i]->params_info) {
            std::string d = first_difference(a[i]->params.data() + pi.offset, b[i]->params.data() + pi.offset, pi.numel,
                                             pi.shape.size() == 2 ? size_t(pi.shape[1]) : 1, pi.name);
            if (!d.empty()) return d;
        }
    return "";
}

// The schedule labs' last task: after one step on threads the parameters have one device's bits.
// Fails with the first parameter that differs and, where the backward order is the cause, says so;
// `otherwise` is the hint when the order is right.
inline void check_one_device_bits(const pp::Schedule& s, int M, const std::string& otherwise) {
    std::string differs = first_parameter_difference(step_of(s), one_device_step(M));
    std::string order = backward_order_problem(s);
    // Every rank's backwards exactly reversed mirror the pairwise tree (src/pairwise.hpp) when M is
    // a power of two, and a + b is b + a: the bits agree by luck, so the order is checked anyway.
    if (!order.empty())
        fail("after one step: " + (differs.empty() ? "one device's bits, by luck: " + std::to_string(M) +
                                                         " micro-batches in reverse mirror its pairwise tree (M = 6 would not)"
                                                   : differs) + "\n" + order,
             kBackwardOrderHint);
    if (!differs.empty()) fail("after one step: " + differs, otherwise);
}

}  // namespace labcheck
