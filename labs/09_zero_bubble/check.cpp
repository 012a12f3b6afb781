// labs/09_zero_bubble/check.cpp — lab 09's check: scripts/lab.sh check 09 (or build/lab_09).
//
// References, none of them your code: the rule of split_backward checked action by action (the
// BIs where the Bs were, the k-th BW right after the (k + delay)-th BI), pp::validate (unbuffered
// sends), pp::simulate against ZB-H1's bubble formula (P-1)/(3M+P-1) and 1F1B's peak of min(P, M)
// stashes, and the tiny model's step on one device (labs/pipeline_check.hpp).
#include <algorithm>

#include "labs/09_zero_bubble/zero_bubble.hpp"
#include "labs/pipeline_check.hpp"

using namespace labcheck;

namespace {

std::string sizes(int P, int M) { return "P=" + std::to_string(P) + ", M=" + std::to_string(M); }
std::string str(int n) { return std::to_string(n); }

const char* const kTailHint =
    "the BWs still owed at the end go out oldest first (increasing micro-batch order, as one device sums "
    "weight gradients); float addition is not associative, so another order gives other bits";
const char* const kOneShortHint =
    "one backward early: a BW leaves when MORE than delay[rank] are owed (with delay 0, right after its own BI)";
const char* const kLateHint =
    "a BW runs right after the BI of the backward `delay` backwards later, not later: push the oldest owed BW "
    "as soon as more than delay[rank] are owed";

// A rank's BWs (bw = true) or its other actions, each with its index in the rank's list.
std::vector<std::pair<size_t, pp::Action>> only(const std::vector<pp::Action>& actions, bool bw) {
    std::vector<std::pair<size_t, pp::Action>> out;
    for (size_t i = 0; i < actions.size(); i++)
        if ((actions[i].op == pp::Op::BW) == bw) out.push_back({i, actions[i]});
    return out;
}

// Task 1's rule on one rank: "" when `yours` is `input` split with `delay`, else what differs first.
std::string split_problem(const std::vector<pp::Action>& input, const std::vector<pp::Action>& yours, int rank,
                          int delay, std::string* hint) {
    std::string who = "your rank " + str(rank) + " (delay " + str(delay) + ")";
    // The Fs and BIs stand where the Fs and Bs stood.
    std::vector<std::pair<size_t, pp::Action>> rest = only(yours, false), bws = only(yours, true);
    for (size_t i = 0; i < input.size() || i < rest.size(); i++) {
        pp::Action expected = i < input.size() ? input[i] : pp::Action{pp::Op::F, -1};
        if (expected.op == pp::Op::B) expected.op = pp::Op::BI;
        if (i < rest.size() && i < input.size() && rest[i].second == expected) continue;
        *hint = "every B becomes one BI at the same place, and every other action stays as it is";
        if (i >= input.size())
            return who + ", action " + str(rest[i].first) + ": " + pp::to_string(rest[i].second) +
                   " is one more than the input has: " + actions_text(yours);
        return who +
               (i < rest.size() ? ", action " + str(rest[i].first) + ": yours " + pp::to_string(rest[i].second)
                                : ": yours ends") +
               ", expected " + pp::to_string(expected) + " (from the input's " + pp::to_string(input[i]) +
               ")\nyours: " + actions_text(yours);
    }
    // The k-th BW: the k-th BI's micro-batch and chunk, right after the (k + delay)-th BI.
    std::vector<size_t> bis;   // where each BI stands in yours
    for (const auto& [at, a] : rest)
        if (a.op == pp::Op::BI) bis.push_back(at);
    size_t n = bis.size();
    for (size_t k = 0; k < bws.size() || k < n; k++) {
        if (k >= bws.size()) {
            *hint = "every BI needs its BW: at the end of the list push the BWs still owed";
            return who + ": " + str(int(bws.size())) + " BWs for " + str(int(n)) + " BIs, BW" +
                   str(yours[bis[k]].microbatch) + " is missing: " + actions_text(yours);
        }
        auto [at, w] = bws[k];
        if (k >= n) {
            *hint = "one BW per B of the input, no more";
            return who + ", action " + str(int(at)) + ": " + pp::to_string(w) + " is BW number " + str(int(k)) +
                   ", for " + str(int(n)) + " BIs: " + actions_text(yours);
        }
        pp::Action bi = yours[bis[k]];
        if (w.microbatch != bi.microbatch || w.chunk != bi.chunk) {
            bool tail = at > bis.back();
            *hint = tail && w.microbatch > bi.microbatch ? kTailHint : "the BWs keep the order of their BIs";
            bool chunks = w.chunk != 0 || bi.chunk != 0;
            return who + ", action " + str(int(at)) + ": yours " + pp::to_string(w, chunks) + ", expected " +
                   pp::to_string(pp::Action{pp::Op::BW, bi.microbatch, bi.chunk}, chunks) + " (BW number " +
                   str(int(k)) + " belongs to BI number " + str(int(k)) + ")\nyours: " + actions_text(yours);
        }
        size_t before = size_t(std::count_if(bis.begin(), bis.end(), [&](size_t b) { return b < at; }));
        size_t after = std::min(k + size_t(delay), n - 1);   // the BI it follows
        bool placed = before == after + 1 && (yours[at - 1].op == pp::Op::BI || yours[at - 1].op == pp::Op::BW);
        if (placed) continue;
        bool too_soon = before <= k;   // before its own BI
        *hint = too_soon ? "BW before its BI: BW(i) needs the gradient BI(i) receives and the ones it computes, so "
                           "push the BI first, then the BW that is due"
                : before == after ? kOneShortHint
                : before < after  ? "too early: BW(i) waits until the BI of the backward `delay` backwards after it"
                                  : kLateHint;
        std::string where = k + size_t(delay) < n
                                ? "right after " + pp::to_string(yours[bis[after]])
                                : "in the tail, after the last BI (" + pp::to_string(yours[bis[n - 1]]) + ")";
        return who + ", action " + str(int(at)) + ": your " + pp::to_string(w) +
               (too_soon ? " comes before its BI" : " comes after " + pp::to_string(yours[at - 1])) + "; with delay " +
               str(delay) + " it comes " + where + "\nyours: " + actions_text(yours);
    }
    return "";
}

void check_split(const pp::Schedule& input, const std::vector<int>& delay, int M, int V, const std::string& what) {
    pp::Schedule s = student::split_backward(input, delay);
    if (s.size() != input.size())
        fail(what + ": yours has " + str(int(s.size())) + " ranks, the input " + str(int(input.size())),
             "one list of actions per rank, as the input");
    if (s.placement != input.placement) fail(what + ": yours lost the placement", "start from a copy of the input");
    for (size_t r = 0; r < s.size(); r++) {
        std::string hint, differs = split_problem(input[r], s[r], int(r), delay[r], &hint);
        if (!differs.empty()) fail(what + ": " + differs, hint);
    }
    std::string why = validate_message(s, M, V);
    if (!why.empty()) fail(what + ": the validator says: " + why, "a BW must come after its own BI");
}

void task_split() {
    const int P = 4, M = 8;
    check_split(pp::one_f_one_b(P, M), std::vector<int>(P, 0), M, 1,
                "split_backward(one_f_one_b(4, 8), delay 0 0 0 0)");
    check_split(pp::gpipe(3, 5), {0, 0, 0}, 5, 1, "split_backward(gpipe(3, 5), delay 0 0 0)");
    check_split(pp::one_f_one_b(P, M), {2, 0, 3, 1}, M, 1, "split_backward(one_f_one_b(4, 8), delay 2 0 3 1)");
    check_split(pp::gpipe(3, 5), {1, 7, 4}, 5, 1, "split_backward(gpipe(3, 5), delay 1 7 4)");
    check_split(pp::interleaved(2, 4, 2), {1, 2}, 4, 2, "split_backward(interleaved(2, 4, 2), delay 1 2)");
}

// How many backwards rank `rank`'s BWs run behind their BIs: the BIs before its first BW, minus 1;
// -1 when it has no BW.
int delay_of(const std::vector<pp::Action>& actions) {
    int bis = 0;
    for (const pp::Action& a : actions) {
        if (a.op == pp::Op::BW) return bis - 1;
        bis += a.op == pp::Op::BI;
    }
    return -1;
}

std::string delays_text(const pp::Schedule& s) {
    std::string out;
    for (const auto& actions : s) out += " " + str(delay_of(actions));
    return out;
}

// Task 2: valid, BIs where 1F1B has its Bs, and every rank's BWs in increasing order.
void check_zb_h1(const pp::Schedule& s, int P, int M) {
    if (int(s.size()) != P)
        fail(sizes(P, M) + ": yours has " + str(int(s.size())) + " ranks",
             "one list of actions per rank: pp::Schedule(P)");
    std::string why = validate_message(s, M);
    if (!why.empty())
        fail(sizes(P, M) + ": the validator says: " + why, "make task 1 pass first; then split pp::one_f_one_b(P, M)");
    pp::Schedule ref = pp::one_f_one_b(P, M);
    for (int r = 0; r < P; r++) {
        std::vector<std::pair<size_t, pp::Action>> rest = only(s[r], false);
        for (size_t i = 0; i < ref[r].size(); i++) {
            pp::Action expected = ref[r][i];
            if (expected.op == pp::Op::B) expected.op = pp::Op::BI;
            if (i < rest.size() && rest[i].second == expected) continue;
            fail(sizes(P, M) + ", your rank " + str(r) + ", action " +
                     str(int(i < rest.size() ? rest[i].first : s[r].size())) + ": yours " +
                     (i < rest.size() ? pp::to_string(rest[i].second) : "(end)") + ", expected " +
                     pp::to_string(expected) + "\nyour rank " + str(r) + ": " + actions_text(s[r]),
                 "ZB-H1 keeps 1F1B's order of F and backward, with each B split: split pp::one_f_one_b(P, M)");
        }
    }
    std::string order = backward_order_problem(s);
    if (order.empty()) return;
    int r = std::atoi(order.c_str() + 10), at = std::atoi(order.c_str() + order.find("action ") + 7);
    bool tail = true;
    for (size_t i = size_t(at); i < s[r].size(); i++) tail = tail && s[r][i].op == pp::Op::BW;
    fail(sizes(P, M) + ": " + order, tail ? kTailHint : kBackwardOrderHint);
}

void task_valid() {
    for (auto [P, M] : sizes_up_to(6, 12)) check_zb_h1(student::zero_bubble_h1(P, M), P, M);
}

// Task 3: the bubble of ZB-H1 with F = BI = BW = 1 and M >= P, and 1F1B's peak stashes.
void task_bubble_and_memory() {
    for (auto [P, M] : sizes_up_to(6, 12)) {
        if (M < P) continue;   // the formula needs the pipeline full: every rank's BWs fill its tail
        pp::Schedule s = student::zero_bubble_h1(P, M);
        if (int(s.size()) != P || !validate_message(s, M).empty()) needs_task(2);
        pp::SimResult sim = pp::simulate(s, pp::Costs{1, 1, 1, 0});
        double expected = double(P - 1) / (3 * M + P - 1);
        std::string delays =
            "\nyour delays per rank (BIs between a BI and its BW):" + delays_text(s) + "; ZB-H1's: 0 .. P-1";
        if (std::abs(sim.bubble - expected) > 1e-9) {
            bool reversed = P > 1;
            int short_rank = -1;
            for (int r = 0; r < P; r++) {
                reversed = reversed && delay_of(s[r]) == P - 1 - r;
                if (short_rank < 0 && delay_of(s[r]) < r) short_rank = r;
            }
            std::string hint =
                reversed ? "reversed: rank r delays by r, not P-1-r: the last BIs travel from rank P-1 down to rank 0, "
                           "so rank 0 runs the pipeline's last BI (nothing to fill) and rank r ends r units earlier"
                : short_rank >= 0
                    ? "rank " + str(short_rank) +
                          " keeps too few BWs for its tail: rank r runs its last BI r units "
                          "before rank 0 runs its own, and r BWs left for the end fill that time"
                    : "compare your schedule with 1F1B's, each B split into BI and BW, rank r's BWs r backwards late";
            fail(sizes(P, M) + ": simulated bubble (F = BI = BW = 1) yours " + percent(sim.bubble) + ", ZB-H1's " +
                     percent(expected) + " = (P-1)/(3M+P-1)" + delays,
                 hint);
        }
        for (int r = 0; r < P; r++)
            if (sim.peak_live[r] > std::min(P, M))
                fail(
                    sizes(P, M) + ", rank " + str(r) + ": yours holds " + str(sim.peak_live[r]) +
                        " micro-batches' stashes at once, ZB-H1 at most min(P, M) = " + str(std::min(P, M)) +
                        " (1F1B's peak, on rank 0)" + delays,
                    "a stash lives from its F until its BW, not its BI: each backward of delay beyond r keeps one more "
                    "micro-batch alive on rank r");
    }
}

void task_bitwise() {
    const int P = 4, M = 8;
    pp::Schedule s = student::zero_bubble_h1(P, M);
    if (int(s.size()) != P || !validate_message(s, M).empty()) needs_task(2);
    check_one_device_bits(s, M, "your backwards are in order, so compare your schedule with tutorial 10's zb-h1");
}

}   // namespace

int main(int argc, char** argv) {
    Lab lab{"09",
            "zero bubble: split the backward into BI and BW, then ZB-H1",
            "labs/09_zero_bubble/zero_bubble.cpp",
            1,
            {}};
    lab.tasks.push_back(
        {"split_backward(schedule, delay): each B becomes BI in place, its BW `delay` backwards later "
         "(delay 0: BI BW), valid",
         "the rule checked action by action, and pp::validate", task_split});
    lab.tasks.push_back(
        {"zero_bubble_h1(P, M) is valid for P 1-6, M 1-12: 1F1B's order with each B split, every "
         "rank's BWs in increasing micro-batch order",
         "pp::validate (unbuffered sends) and pp::one_f_one_b", task_valid});
    lab.tasks.push_back({"F = BI = BW = 1, M >= P: bubble (P-1)/(3M+P-1); no rank holds more than min(P, M) stashes",
                         "pp::simulate with pp::Costs{1, 1, 1, 0}, and ZB-H1's formula", task_bubble_and_memory});
    lab.tasks.push_back({"4 threads, M = 8: the tiny model after one step has one device's bits",
                         "the same step on one device (every F, then every B, in micro-batch order)", task_bitwise});
    return run(lab, argc, argv);
}
