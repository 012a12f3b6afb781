// Tutorial 10 — two ways to shrink the bubble further: interleaving and zero bubble.
//
// Interleaved 1F1B (Megatron-LM) gives each rank V smaller chunks of the model (rank r holds
// virtual stages r, r + P, ...), so the pipeline fills in steps of 1/V of a stage: the bubble
// shrinks by about V, at the price of V times more messages. ZB-H1 (zero bubble) splits the
// backward into BI, the input gradient the previous stage is waiting for, and BW, the weight
// gradient nobody waits for, and moves the BWs into what were bubbles.
//
// Run: build/tutorial_10_interleaved_zero_bubble
#include "tutorials/common.hpp"

using namespace lab;

int main() {
    const int P = 2, M = 4, T = 32, rows = 2;
    Data data = load_data(T);
    Batch batch = batch_of(data, rows * M);
    struct Case {
        const char* name;
        pp::Schedule schedule;
        int V;
    };
    std::vector<Case> cases = {{"1f1b", pp::one_f_one_b(P, M), 1},
                               {"interleaved V=2", pp::interleaved(P, M, 2), 2},
                               {"zb-h1", pp::zero_bubble_h1(P, M), 1}};

    std::printf("== step 1: the three schedules (P = %d, M = %d) ==\n", P, M);
    for (const Case& c : cases) std::printf("%s:\n%s", c.name, pp::to_string(c.schedule, c.V > 1).c_str());
    std::printf("look at: interleaved runs F0.0 F1.0 F0.1 F1.1 (micro-batch.chunk); zb-h1 has BI and BW.\n\n");

    std::printf("== step 2: simulated with F = BI = BW (a chunk of V costs 1/V) ==\n");
    std::vector<double> sim_bubble;
    for (const Case& c : cases) {
        double u = 1.0 / c.V;
        pp::SimResult sim = pp::simulate(c.schedule, pp::Costs{u, u, u, 0});
        sim_bubble.push_back(sim.bubble);
        std::printf("%s: makespan %.1f, bubble %.1f%%, live micro-batches per rank", c.name, sim.makespan, 100 * sim.bubble);
        for (int n : sim.peak_live) std::printf(" %d", n);
        std::printf("\n%s", pp::ascii_timeline(sim.events, P, 100).c_str());
    }
    std::printf("look at: F3.1 is chunk 1 (f3 where its box is narrow); zb-h1's BI and BW fill the tail.\n"
                "formulas: (P-1)/(M+P-1) = %.1f%%, (P-1)/(V*M+P-1) = %.1f%%, (P-1)/(3M+P-1) = %.1f%%.\n\n",
                100.0 * (P - 1) / (M + P - 1), 100.0 * (P - 1) / (2 * M + P - 1), 100.0 * (P - 1) / (3 * M + P - 1));

    std::printf("== step 3: measured, one thread per rank ==\n");
    print_split(make_stages(data.cfg, P, 1));
    print_split(make_stages(data.cfg, P, 2));
    std::printf("%-16s | bubble simulated  measured | step ms | messages on rank 0\n", "schedule");
    std::vector<std::string> charts;
    StepResult noisiest;
    bool larger = true;
    for (size_t i = 0; i < cases.size(); i++) {
        const Case& c = cases[i];
        Stages model = make_stages(data.cfg, P, c.V);
        StepResult r = measure(model, c.schedule, batch);
        int messages = 0;
        for (const pp::Event& e : r.events)
            if (e.comm && e.rank == 0) messages += 1 + int(std::count(e.detail.begin(), e.detail.end(), ','));
        std::printf("%-16s | %15.1f%% %8.1f%% | %7.1f | %d\n", c.name, 100 * sim_bubble[i], 100 * r.bubble, r.makespan / 1000, messages);
        charts.push_back(std::string(c.name) + ":\n" + pp::ascii_timeline(r.events, P, 100));
        if (r.spread > noisiest.spread) noisiest = r;
        larger = larger && r.bubble > sim_bubble[i];
    }
    loaded(P, noisiest);
    for (const std::string& chart : charts) std::printf("%s", chart.c_str());
    if (larger)
        std::printf("look at: the measured bubbles are larger than simulated: real stages are not balanced (6 layers\n"
                    "do not cut evenly), every message costs a thread hand-off, and on a busy machine other programs\n"
                    "share the cores. Run it twice: the simulation never changes, the measurement does.\n\n");
    else
        std::printf("look at: here not every measured bubble is larger than simulated: most likely noise (a thread\n"
                    "that waits for a core still counts as busy; unbalanced stages and hand-offs only add idle time).\n"
                    "Run it twice: the simulation never changes, the measurement does.\n\n");

    std::printf("question: zb-h1 gets its gain for free in memory on rank 0 but not on rank 1 (see the live\n"
                "micro-batches). Why must a stage keep a micro-batch's stash until its BW, not its BI?\n");
    std::printf("answer: docs/answers.md, section \"10 interleaved zero bubble\"\n");
    return 0;
}
