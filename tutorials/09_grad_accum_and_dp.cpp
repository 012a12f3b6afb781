// Tutorial 09 — gradient accumulation, and data parallelism on top of the pipeline.
//
// The loss is the mean over the targets of the GLOBAL batch, so every micro-batch adds
// sum(its losses) / (targets in the whole batch) and the gradients of M micro-batches simply
// add up to the gradient of the big batch: only the order of the float additions changes.
// Data parallelism is the same sum cut elsewhere: D replicas of the pipeline each take B/D
// rows, and an all-reduce adds their gradients. 2 replicas × 2 micro-batches must equal
// 1 replica × 4 micro-batches, up to that same rounding.
//
// Run: build/tutorial_09_grad_accum_and_dp
#include <thread>

#include "tutorials/common.hpp"

using namespace lab;

int main() {
    const int T = 32, B = 8;
    Data data = load_data(T);
    Batch batch = batch_of(data, B);
    std::printf("batch: B = %d rows of T = %d tokens, %lld MLM targets\n\n", B, T, (long long)batch.num_targets());

    std::printf("== step 1: one big batch against 4 accumulated micro-batches (one device) ==\n");
    // Dropout off here: a mask is keyed by the micro-batch index, and the big batch is micro-batch 0.
    Stages big = make_stages(data.cfg, 1, 1, Recompute::none, 1, 0.0f), acc = make_stages(data.cfg, 1, 1, Recompute::none, 1, 0.0f);
    StepResult rb = step_on_threads(big, pp::gpipe(1, 1), batch, 0, false);
    StepResult ra = step_on_threads(acc, pp::gpipe(1, 4), batch, 0, false);
    std::printf("loss: big batch %.9g, 4 micro-batches %.9g\n", rb.loss, ra.loss);
    double rel = compare(acc, big, true);
    std::printf("look at: a relative difference of %.1e is float rounding (2^-24 = 6e-8): each weight gradient\n"
                "is one GEMM over %d rows, or four GEMMs over %d rows summed as (g0 + g1) + (g2 + g3).\n\n", rel,
                B * T, B * T / 4);

    std::printf("== step 2: 2 replicas × 2 stages, 2 micro-batches each, against 1 replica × 4 micro-batches ==\n");
    pp::Schedule s2 = pp::one_f_one_b(2, 2), s4 = pp::one_f_one_b(2, 4);
    Stages dp = make_stages(data.cfg, 2, 1, Recompute::none, 2), pp1 = make_stages(data.cfg, 2, 1, Recompute::none, 1);
    if (std::thread::hardware_concurrency() < 4)
        std::printf("(%u cores for 4 stage threads: the timeline is stretched)\n", std::thread::hardware_concurrency());
    StepResult rd = step_on_threads(dp, s2, batch), rp = step_on_threads(pp1, s4, batch);
    std::printf("replica 0 of dp (its 2 micro-batches are global micro-batches 0 and 1):\n%s",
                pp::ascii_timeline(rd.events, 2, 80).c_str());
    std::printf("the single replica:\n%s", pp::ascii_timeline(rp.events, 2, 80).c_str());
    std::printf("loss: dp %.9g, single %.9g\n", rd.loss, rp.loss);
    compare(dp, pp1, true);
    compare(dp, pp1, false);
    std::printf("look at: dropout is on and the bits are equal: replica 1's micro-batches carry the global\n"
                "indices 2 and 3, so they draw the masks of micro-batches 2 and 3 of the single replica; each\n"
                "replica sums its two gradients, g0 + g1 and g2 + g3, and the all-reduce adds those: the\n"
                "pairwise tree (g0 + g1) + (g2 + g3) that one replica builds over four (src/pairwise.hpp).\n\n");

    std::printf("== step 3: what each costs ==\n");
    std::printf("simulated bubble: 2 stages × 4 micro-batches %.0f%%, each replica of 2 × 2: %.0f%%\n",
                100 * pp::simulate(s4).bubble, 100 * pp::simulate(s2).bubble);
    std::printf("look at: with a fixed batch, more replicas leave fewer micro-batches per pipeline, so a\n"
                "larger bubble; in exchange the all-reduce moves every gradient once per step.\n\n");

    std::printf("question: on 8 devices with a fixed global batch of 64 micro-batches, which split of\n"
                "8 = D × P gives the smallest bubble, and what limits you from choosing it?\n");
    std::printf("answer: docs/answers.md, section \"09 grad accum and dp\"\n");
    return 0;
}
