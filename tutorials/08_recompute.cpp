// Tutorial 08 — activation recomputation: trade compute for memory.
//
// Between a micro-batch's forward and its backward a stage keeps, for every layer, what the
// backward needs (inputs of each GEMM, attention probabilities, LayerNorm statistics, dropout
// masks...). With --recompute full it keeps only the activation it received and runs the
// forward again just before the backward. The counter-based dropout RNG draws the same masks
// the second time, so the gradients, and the parameters after the step, do not change by a bit.
//
// Run: build/tutorial_08_recompute
#include "tutorials/common.hpp"

using namespace lab;

// Mean duration in ms of `op` on `rank` in a measured timeline.
double mean_ms(const std::vector<pp::Event>& events, int rank, pp::Op op) {
    double sum = 0;
    int n = 0;
    for (const pp::Event& e : events)
        if (!e.comm && e.rank == rank && e.action.op == op) sum += e.end - e.start, n++;
    return n ? sum / n / 1000 : 0;
}

int main() {
    const int P = 2, M = 4, T = 32, rows = 2;
    Data data = load_data(T);
    Batch batch = batch_of(data, rows * M);
    pp::Schedule schedule = pp::one_f_one_b(P, M);

    std::printf("== step 1: the same 1f1b step (P = %d, M = %d), without and with recomputation ==\n", P, M);
    Stages none = make_stages(data.cfg, P, 1, Recompute::none), full = make_stages(data.cfg, P, 1, Recompute::full);
    print_split(none);
    StepResult rn = measure(none, schedule, batch), rf = measure(full, schedule, batch);
    std::printf("recompute none:\n%s", pp::ascii_timeline(rn.events, P, 100).c_str());
    std::printf("recompute full:\n%s", pp::ascii_timeline(rf.events, P, 100).c_str());
    loaded(P, rn.spread > rf.spread ? rn : rf);
    std::printf("look at: with full, every B block should be longer by about one F block (the forward runs again).\n\n");

    std::printf("== step 2: memory against time ==\n");
    std::printf("rank | peak stash none     full | F ms  B ms none  B ms full | B full / B none  (F + B) / B\n");
    bool as_expected = true;
    for (int p = 0; p < P; p++) {
        double f = mean_ms(rn.events, p, pp::Op::F), b_none = mean_ms(rn.events, p, pp::Op::B),
               b_full = mean_ms(rf.events, p, pp::Op::B);
        double ratio = b_full / b_none, expected = (f + b_none) / b_none;
        as_expected = as_expected && std::fabs(ratio - expected) < 0.25 * expected;
        std::printf("%4d | %15s %8s | %4.2f %9.2f %10.2f | %15.2f %12.2f\n", p,
                    kb(double(none.stages[p]->peak_stash_bytes())).c_str(), kb(double(full.stages[p]->peak_stash_bytes())).c_str(),
                    f, b_none, b_full, ratio, expected);
    }
    std::printf("step: none %.1f ms, full %.1f ms (%+.0f%%)\n", rn.makespan / 1000, rf.makespan / 1000,
                100 * (rf.makespan / rn.makespan - 1));
    std::printf("look at: B full / B none %s (F + B) / B%s.\n", as_expected ? "is within 25% of" : "should be about",
                as_expected ? "" : ", but is not here (on a busy machine single blocks stretch at random: run it again)");
    std::printf("Rank 0 holds P = %d micro-batches in 1f1b and keeps only their inputs; the last rank holds one\n"
                "at a time, rebuilt in full before its backward, so its peak does not move: recomputation pays\n"
                "where many micro-batches wait.\n\n", P);

    std::printf("== step 3: recomputation changes no bit ==\n");
    StepResult sn = step_on_threads(none, schedule, batch), sf = step_on_threads(full, schedule, batch);
    std::printf("loss: none %.9g, full %.9g\n", sn.loss, sf.loss);
    compare(full, none, true);
    compare(full, none, false);
    std::printf("look at: dropout is on (p = 0.1) and still every bit matches: a mask is a pure function of\n"
                "(seed, step, micro-batch, layer, element), not of how many times it was drawn.\n\n");

    std::printf("question: 'full' recomputes every layer of the stage. Which activations would you keep\n"
                "so that the stash stays small but the recomputation costs much less than a forward?\n");
    std::printf("answer: docs/answers.md, section \"08 recompute\"\n");
    return 0;
}
