// Tutorial 05 — model parallelism: cut the model in two and give each half its own device.
//
// Two stages, one micro-batch (M = 1). Stage 1 cannot start before stage 0 has sent it the
// activation, and stage 0 cannot run its backward before stage 1 has sent the gradient back:
// each device waits while the other computes, so half of the time is idle. The math does not
// change at all: the two-stage step produces the same bits as the one-device step.
//
// Run: build/tutorial_05_model_parallel
#include "tutorials/common.hpp"

using namespace lab;

int main() {
    const int B = 8, T = 32;
    Data data = load_data(T);
    Batch batch = batch_of(data, B);

    std::printf("== step 1: cut the model's layers into two stages ==\n");
    Stages one = make_stages(data.cfg, 1), two = make_stages(data.cfg, 2);
    print_split(two);
    for (int p = 0; p < 2; p++) {
        size_t n = 0;
        for (Layer* l : two.stages[p]->layers()) n += l->params.size();
        std::printf("  rank %d holds %zu parameters\n", p, n);
    }
    std::printf("look at: the cut balances the layers' FLOPs; the embedding is big in parameters but cheap to run.\n\n");

    std::printf("== step 2: the schedule with one micro-batch ==\n");
    pp::Schedule schedule = pp::gpipe(2, 1);
    std::printf("%s", pp::to_string(schedule).c_str());
    std::printf("forward: rank 0 sends a (B, T, C) = (%d, %d, %d) activation, %s; backward: its gradient, same size\n",
                B, T, data.cfg.hidden_size, kb(4.0 * B * T * data.cfg.hidden_size).c_str());
    pp::SimResult sim = pp::simulate(schedule, pp::Costs{1, 1, 1, 0});   // B = BI + BW costs twice F
    std::printf("simulated (F = 1, B = 2):\n%s", pp::ascii_timeline(sim.events, 2, 60).c_str());
    std::printf("simulated bubble %.0f%%\n", 100 * sim.bubble);
    std::printf("look at: the two rows never run at the same time.\n\n");

    std::printf("== step 3: run it, one thread per stage ==\n");
    StepResult run = measure(two, schedule, batch);
    std::printf("%s", pp::ascii_timeline(run.events, 2, 60).c_str());
    std::printf("measured: step %.1f ms, bubble %.1f%%\n", run.makespan / 1000, 100 * run.bubble);
    loaded(2, run);
    for (const pp::Event& e : run.events)
        if (e.comm) std::printf("  rank %d waited %.2f ms in {%s}\n", e.rank, (e.end - e.start) / 1000, e.detail.c_str());
    std::vector<Transfer> ts = transfers(run.events);   // both ranks' clocks start at one origin
    for (const Transfer& t : ts)
        std::printf("  transfer %s: rank %d started sending at %.0f µs, rank %d had it at %.0f µs\n", t.tag.c_str(), t.from,
                    t.sent, t.to, t.received);
    std::printf("transfers in causal order: %s\n", causal(ts) ? "yes" : "no");
    std::printf("look at: '.' is idle; whatever the split, busy time / (2 × step) cannot pass 50%% with M = 1.\n"
                "Both ranks measure from one origin, so every message arrives after it was sent.\n\n");

    std::printf("== step 4: the same step on one device, the same bits ==\n");
    StepResult r1 = step_on_threads(one, pp::gpipe(1, 1), batch);
    StepResult r2 = step_on_threads(two, schedule, batch);
    std::printf("loss: one device %.9g, two stages %.9g\n", r1.loss, r2.loss);
    compare(two, one, true);
    compare(two, one, false);
    std::printf("look at: 'bitwise equal' after AdamW — each layer runs the same kernels on the same inputs;\n"
                "only where they run changed. (Dropout is on: its masks are keyed by layer, not by device.)\n\n");

    std::printf("question: two devices hold half the weights each, yet the step is no faster than on one.\n"
                "What would you have to split, besides the model, to keep both devices busy?\n");
    std::printf("answer: docs/answers.md, section \"05 model parallel\"\n");
    return 0;
}
