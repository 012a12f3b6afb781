// labs/03_gpipe/check.cpp — lab 03's check: scripts/lab.sh check 03 (or build/lab_03).
//
// References, none of them your code: pp::validate (unbuffered sends), pp::simulate (stashes and
// bubble against GPipe's formula), and the tiny model's step on one device written in
// labs/pipeline_check.hpp.
#include "labs/03_gpipe/gpipe.hpp"
#include "labs/pipeline_check.hpp"

using namespace labcheck;

namespace {

std::string sizes(int P, int M) { return "P=" + std::to_string(P) + ", M=" + std::to_string(M); }

// The likely mistake behind the validator's words.
std::string validate_hint(const std::string& why) {
    if (why.find("needs F") != std::string::npos || why.find("missing F") != std::string::npos)
        return "every micro-batch needs its forward before its backward: M forwards, F0 .. F(M-1), on every rank";
    if (why.find("missing the backward") != std::string::npos)
        return "every micro-batch needs its backward: M backwards on every rank";
    if (why.find("duplicated") != std::string::npos)
        return "each action once per rank: one F and one B per micro-batch";
    if (why.find("out of range") != std::string::npos) return "micro-batches are numbered 0 .. M-1";
    return "on every rank: F0 .. F(M-1), then the M backwards";
}

void check_valid(const pp::Schedule& s, int P, int M) {
    if (int(s.size()) != P)
        fail(sizes(P, M) + ": yours has " + std::to_string(s.size()) + " lists of actions, expected " +
                 std::to_string(P),
             "one list of actions per rank: pp::Schedule schedule(P), whatever M is");
    std::string why = validate_message(s, M);
    if (why.empty()) return;
    size_t at = why.find("rank ");
    int r = std::clamp(at == std::string::npos ? 0 : std::atoi(why.c_str() + at + 5), 0, P - 1);
    fail(sizes(P, M) + ": the validator says: " + why + "\nyour rank " + std::to_string(r) + ": " + actions_text(s[r]),
         validate_hint(why));
}

void task_valid() {
    for (auto [P, M] : sizes_up_to(6, 12)) check_valid(student::gpipe(P, M), P, M);
}

void task_gpipe_order() {
    for (auto [P, M] : sizes_up_to(6, 12)) {
        pp::Schedule s = student::gpipe(P, M);
        if (int(s.size()) != P || !validate_message(s, M).empty()) needs_task(1);
        for (int r = 0; r < P; r++)
            for (int i = 0; i < M; i++)
                if (s[r][i].op != pp::Op::F)
                    fail(sizes(P, M) + ", rank " + std::to_string(r) + ", action " + std::to_string(i) + ": yours " +
                             pp::to_string(s[r][i]) + " before F" + std::to_string(M - 1) + "\nyour rank " +
                             std::to_string(r) + ": " + actions_text(s[r]),
                         "GPipe runs every forward before the first backward: that is what lets all M micro-batches "
                         "fill the pipeline (and why it stashes all of them)");
        pp::SimResult sim = pp::simulate(s);   // F = 1, B = 2
        double expected = double(P - 1) / (M + P - 1);
        for (int r = 0; r < P; r++)
            if (sim.peak_live[r] != M)
                fail(sizes(P, M) + ", rank " + std::to_string(r) + ": yours holds " + std::to_string(sim.peak_live[r]) +
                         " micro-batches at once, GPipe all M = " + std::to_string(M),
                     "every forward before any backward: all M stashes are alive when the first backward starts");
        if (std::abs(sim.bubble - expected) > 1e-9)
            fail(sizes(P, M) + ": simulated bubble (F = 1, B = 2) yours " + percent(sim.bubble) + ", GPipe's " +
                     percent(expected) + " = (P-1)/(M+P-1)",
                 "each rank should start its forwards as soon as micro-batch 0 arrives and its backwards as soon "
                 "as the last rank sends the first gradient");
    }
}

void task_bitwise() {
    const int P = 4, M = 8;
    pp::Schedule s = student::gpipe(P, M);
    if (int(s.size()) != P || !validate_message(s, M).empty()) needs_task(1);
    check_one_device_bits(s, M,
                          "your backwards are in order: print pp::to_string(gpipe(4, 8)) and compare "
                          "it with tutorial 06's step 1");
}

}   // namespace

int main(int argc, char** argv) {
    Lab lab{"03", "GPipe as data", "labs/03_gpipe/gpipe.cpp", 1, {}};
    lab.tasks.push_back(
        {"gpipe(P, M) is a valid schedule for P 1-6, M 1-12 (each micro-batch F then B once per "
         "rank, no deadlock)",
         "pp::validate, with unbuffered sends as NCCL's", task_valid});
    lab.tasks.push_back({"GPipe's order: every forward first; all M micro-batches stashed; bubble (P-1)/(M+P-1)",
                         "pp::simulate with F = 1, B = 2, and GPipe's formula", task_gpipe_order});
    lab.tasks.push_back({"4 threads, M = 8: the tiny model after one step has one device's bits",
                         "the same step on one device (every F, then every B, in micro-batch order)", task_bitwise});
    return run(lab, argc, argv);
}
