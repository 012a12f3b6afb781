// labs/04_1f1b/check.cpp — lab 04's check: scripts/lab.sh check 04 (or build/lab_04).
//
// References, none of them your code: the warm-up formula (Megatron-LM's num_warmup_microbatches),
// pp::validate (unbuffered sends), pp::simulate (stashes and bubble), and the tiny model's step on
// one device, written in labs/pipeline_check.hpp as every forward then every backward.
#include <algorithm>

#include "labs/04_1f1b/one_f_one_b.hpp"
#include "labs/pipeline_check.hpp"

using namespace labcheck;

namespace {

std::string sizes(int P, int M) { return "P=" + std::to_string(P) + ", M=" + std::to_string(M); }

// How many forwards rank r of a schedule runs before its first backward.
int warmup_of(const std::vector<pp::Action>& actions) {
    int n = 0;
    for (const pp::Action& a : actions) {
        if (a.op != pp::Op::F) break;
        n++;
    }
    return n;
}

// The likely mistake behind a warm-up count, said once for tasks 1 and 2.
std::string warmup_hint(int P, int M, int rank, int yours) {
    if (yours == std::min(P - rank, M))
        return "one forward too many: the last rank (P-1) needs no warm-up, it runs B0 right after F0; "
               "rank r waits only for the P-1-r stages after it";
    if (yours == std::min(rank, M) && rank != P - rank - 1)
        return "reversed: the FIRST rank waits longest for its first gradient (it must cross every later stage "
               "forward and back), so rank 0 warms up with P-1 forwards and rank P-1 with none";
    if (yours > M) return "never more than M: with fewer micro-batches than stages, rank r runs all of them";
    return "rank r runs min(P - r - 1, M) forwards before its first backward: the P - r - 1 stages after it "
           "must each get a micro-batch before a gradient can come back";
}

void task_warmup() {
    for (auto [P, M] : sizes_up_to(8, 16))
        for (int r = 0; r < P; r++) {
            int yours = student::num_warmup_microbatches(P, M, r), expected = std::min(P - r - 1, M);
            if (yours != expected)
                fail(sizes(P, M) + ", rank " + std::to_string(r) + ": yours " + std::to_string(yours) + ", expected " +
                         std::to_string(expected),
                     warmup_hint(P, M, r, yours));
        }
}

// Why a schedule that the validator refuses is wrong, in 1F1B's terms.
std::string schedule_hint(const pp::Schedule& s, int P, int M) {
    for (int r = 0; r < P && r < int(s.size()); r++) {
        int yours = warmup_of(s[r]);
        if (yours != std::min(P - r - 1, M) && yours < M)
            return "rank " + std::to_string(r) + " warms up with " + std::to_string(yours) +
                   " forwards: " + warmup_hint(P, M, r, yours);
    }
    return "per rank: the warm-up forwards, then F B pairs (F(w+i), B(i)), then the backwards still owed; "
           "compare pp::to_string(your schedule) with tutorial 07's step 1";
}

// Task 2: valid for every small size; the first refused one, with the validator's words.
void check_valid(const pp::Schedule& s, int P, int M) {
    if (int(s.size()) != P)
        fail(sizes(P, M) + ": yours has " + std::to_string(s.size()) + " ranks",
             "one list of actions per rank: pp::Schedule schedule(P)");
    std::string why = validate_message(s, M);
    if (why.empty()) return;
    size_t at = why.find("rank ");   // show the list of the rank the message names first
    int r = std::clamp(at == std::string::npos ? 0 : std::atoi(why.c_str() + at + 5), 0, P - 1);
    fail(sizes(P, M) + ": the validator says: " + why + "\nyour rank " + std::to_string(r) + ": " + actions_text(s[r]),
         schedule_hint(s, P, M));
}

void task_valid() {
    for (auto [P, M] : sizes_up_to(6, 12)) check_valid(student::one_f_one_b(P, M), P, M);
}

void task_memory_and_bubble() {
    for (auto [P, M] : sizes_up_to(6, 12)) {
        pp::Schedule s = student::one_f_one_b(P, M);
        if (!validate_message(s, M).empty()) needs_task(2);
        pp::SimResult sim = pp::simulate(s);   // F = 1, B = 2
        for (int r = 0; r < P; r++)
            if (sim.peak_live[r] > std::min(P - r, M))
                fail(sizes(P, M) + ", rank " + std::to_string(r) + ": yours holds " + std::to_string(sim.peak_live[r]) +
                         " micro-batches' activations at once, 1F1B at most " + std::to_string(std::min(P - r, M)) +
                         "\nyour rank " + std::to_string(r) + ": " + actions_text(s[r]),
                     "a micro-batch's activations stay until its backward: run each backward as soon as its "
                     "gradient can arrive (after the warm-up, alternate F and B)");
        double expected = double(P - 1) / (M + P - 1);
        if (sim.bubble > expected + 1e-9)
            fail(sizes(P, M) + ": simulated bubble (F = 1, B = 2) yours " + percent(sim.bubble) + ", 1F1B's " +
                     percent(expected) + " = (P-1)/(M+P-1)",
                 "a rank idles where 1F1B would compute: a backward placed later than its gradient's arrival, "
                 "or a forward that waits for a backward it does not need");
    }
}

void task_bitwise() {
    const int P = 4, M = 8;
    pp::Schedule s = student::one_f_one_b(P, M);
    if (!validate_message(s, M).empty()) needs_task(2);
    check_one_device_bits(
        s, M, "your backwards are in order: compare pp::to_string(your schedule) with tutorial 07's step 1");
}

}   // namespace

int main(int argc, char** argv) {
    Lab lab{"04", "1F1B", "labs/04_1f1b/one_f_one_b.cpp", 1, {}};
    lab.tasks.push_back({"warm-up: num_warmup_microbatches(P, M, rank) for P 1-8, M 1-16, every rank",
                         "1F1B's warm-up, min(P - rank - 1, M) (Megatron-LM's num_warmup_microbatches)", task_warmup});
    lab.tasks.push_back(
        {"one_f_one_b(P, M) is a valid schedule for P 1-6, M 1-12 (each micro-batch F then B "
         "once per rank, no deadlock)",
         "pp::validate, with unbuffered sends as NCCL's", task_valid});
    lab.tasks.push_back({"memory and time: rank r holds at most min(P - r, M) micro-batches; bubble (P-1)/(M+P-1)",
                         "pp::simulate with F = 1, B = 2", task_memory_and_bubble});
    lab.tasks.push_back({"4 threads, M = 8: the tiny model after one step has one device's bits",
                         "the same step on one device (every F, then every B, in micro-batch order)", task_bitwise});
    return run(lab, argc, argv);
}
