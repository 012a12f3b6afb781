// Tutorial 06 — GPipe: cut the batch into micro-batches so the stages work at the same time.
//
// With M micro-batches, stage 1 runs the forward of micro-batch 0 while stage 0 already runs
// micro-batch 1. The idle "bubble" at the start and end of the step is P - 1 micro-batch slots
// out of M + P - 1, so it shrinks as M grows. The price: GPipe runs every forward before any
// backward, so each stage keeps the activations of all M micro-batches until the backwards.
//
// Run: build/tutorial_06_gpipe
#include "tutorials/common.hpp"

using namespace lab;

int main() {
    const int P = 2, T = 32, rows = 2;   // every micro-batch is 2 sequences of 32 tokens
    Data data = load_data(T);

    std::printf("== step 1: the GPipe schedule ==\n");
    std::printf("%s", pp::to_string(pp::gpipe(P, 4)).c_str());
    std::printf("look at: all forwards, then all backwards (in increasing order, as on one device).\n\n");

    std::printf("== step 2: more micro-batches, smaller bubble (P = %d, %d rows per micro-batch) ==\n", P, rows);
    std::printf("  M    B | bubble (P-1)/(M+P-1)  simulated  measured |     step | peak stash per stage\n");
    StepResult last;
    std::vector<double> simulated, measured;
    StepResult noisiest;
    for (int M : {1, 2, 4, 8}) {
        pp::Schedule schedule = pp::gpipe(P, M);
        pp::SimResult sim = pp::simulate(schedule);
        Stages model = make_stages(data.cfg, P);
        last = measure(model, schedule, batch_of(data, rows * M));
        std::printf("%3d %4d | %19.1f%% %10.1f%% %8.1f%% | %5.1f ms |", M, rows * M, 100.0 * (P - 1) / (M + P - 1),
                    100 * sim.bubble, 100 * last.bubble, last.makespan / 1000);
        for (int p = 0; p < P; p++) std::printf(" %s", kb(double(model.stages[p]->peak_stash_bytes())).c_str());
        std::printf("\n");
        simulated.push_back(sim.bubble), measured.push_back(last.bubble);
        if (last.spread > noisiest.spread) noisiest = last;
    }
    loaded(P, noisiest);
    std::printf("look at: the simulated bubble falls like 1/M; the stash grows like M (a whole batch's activations).\n");
    bool falls = measured.back() < measured.front(), larger = true;
    for (size_t i = 0; i < measured.size(); i++) larger = larger && measured[i] > simulated[i];
    std::printf("The measured bubble %s from M = 1 to M = 8 (%.1f%% -> %.1f%%)", falls ? "fell too" : "did NOT fall here",
                100 * measured.front(), 100 * measured.back());
    if (larger)
        std::printf("\nand is larger than simulated: the stages are not equally fast, each message costs a hand-off,\n"
                    "and on a busy machine other programs take turns.\n\n");
    else
        std::printf(";\nit is not larger than simulated for every M: most likely noise (a thread that waits for a core\n"
                    "still counts as busy). Run it again.\n\n");

    std::printf("== step 3: the timeline of M = 8, simulated (F = 1, B = 2) and measured ==\n");
    std::printf("simulated:\n%s", pp::ascii_timeline(pp::simulate(pp::gpipe(P, 8)).events, P, 100).c_str());
    std::printf("measured:\n%s", pp::ascii_timeline(last.events, P, 100).c_str());
    std::printf("look at: the diagonal edges are the bubble; measured blocks differ in width where the stages\n"
                "are not perfectly balanced, and the slower stage sets the pace.\n\n");

    std::printf("question: with M = 8 each stage held all 8 micro-batches at once. Rank 1 could start the\n"
                "backward of micro-batch 0 right after its forward. How many would it then need to keep?\n");
    std::printf("answer: docs/answers.md, section \"06 gpipe\"\n");
    return 0;
}
