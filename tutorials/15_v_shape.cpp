// Tutorial 15 — the V shape: ZB-V, and a schedule planned from measured costs.
//
// Interleaving loops the chunks round the ranks (rank r holds stages r, r + P, ...). The V shape
// folds them instead: rank r holds stage r and stage 2P-1-r, so a micro-batch walks down the
// ranks and back up. Rank 0 then holds the first AND the last stage: the pipeline's two ends,
// and the tied word embedding's two copies, meet on one rank. ZB-V (zero bubble V) runs BI and BW
// on that shape. `pp::auto_schedule` goes one step further: it plans the BWs from measured costs
// under a memory cap.
//
// Run: build/tutorial_15_v_shape
#include "tutorials/common.hpp"

using namespace lab;

namespace {
int peak(const pp::SimResult& r) { return *std::max_element(r.peak_live.begin(), r.peak_live.end()); }
}  // namespace

int main() {
    const int P = 4, M = 8;
    std::printf("== step 1: where the 2P = %d virtual stages live ==\n", 2 * P);
    for (pp::Placement placement : {pp::Placement::loop, pp::Placement::vee}) {
        pp::Layout at{P, 2, placement};
        std::printf("%-4s:", placement == pp::Placement::loop ? "loop" : "vee");
        for (int r = 0; r < P; r++) std::printf("  rank %d holds %d and %d", r, at.stage(r, 0), at.stage(r, 1));
        std::printf("\n");
    }
    std::printf("look at: in the V shape rank 0 holds stages 0 and 7, and stages 3 and 4 (the turn) share rank 3,\n"
                "so that hop is a copy, not a message.\n\n");

    std::printf("== step 2: 1F1B, ZB-H1 and ZB-V on the same model (F = BI = BW = 1 per stage) ==\n");
    pp::Costs stage{1, 1, 1, 0}, half{0.5, 0.5, 0.5, 0};   // a V-shape chunk is half a stage
    struct Case { const char* name; pp::Schedule schedule; pp::Costs costs; int chunks; };
    std::vector<Case> cases = {{"1f1b", pp::one_f_one_b(P, M), stage, 1},
                               {"zb-h1", pp::zero_bubble_h1(P, M), stage, 1},
                               {"zbv", pp::zbv(P, M), half, 2}};
    for (const Case& c : cases) {
        pp::SimResult r = pp::simulate(c.schedule, c.costs);
        std::printf("%-6s makespan %5.1f | bubble %5.1f%% | most stashes on a rank %.1f stages\n", c.name, r.makespan,
                    100 * r.bubble, double(peak(r)) / c.chunks);
        std::printf("%s", pp::ascii_timeline(r.events, P, 96).c_str());
    }
    std::printf("formula: zbv's bubble (P-1)/(6M+P-1) = %.1f%% once M >= 2P-2, the fill alone.\n",
                100.0 * (P - 1) / (6 * M + P - 1));
    std::printf("look at: zbv's bubble is half zb-h1's with the memory of 1F1B's rank 0 on EVERY rank (F3.1, or\n"
                "lower case f3 where the box is narrow, is chunk 1: the way back up).\n\n");

    std::printf("== step 3: auto, planned from costs, under a tight and a loose memory cap ==\n");
    std::vector<pp::Costs> costs(P, pp::Costs{1, 1.5, 0.5, 0});   // BW cheaper than BI
    std::printf("costs: F = 1, BI = 1.5, BW = 0.5 | 1f1b makespan %.1f, zb-h1 %.1f (%d stashes), zb-h2 %.1f (%d)\n",
                pp::simulate(pp::one_f_one_b(P, M), costs).makespan, pp::simulate(pp::zero_bubble_h1(P, M), costs).makespan,
                P, pp::simulate(pp::zero_bubble_h2(P, M), costs).makespan, 2 * P);
    for (int cap : {2, P, 2 * P}) {
        pp::SimResult r = pp::simulate(pp::auto_schedule(P, M, costs, std::vector<int>(P, cap)), costs);
        std::printf("auto, cap %d stashes: makespan %.1f | bubble %.1f%% | most stashes %d\n", cap, r.makespan,
                    100 * r.bubble, peak(r));
    }
    std::printf("look at: each cap is kept; with 2P stashes BW can wait longer than in zb-h2 and auto's plan\n"
                "beats it; with 2 no fixed schedule fits at all.\n\n");

    std::printf("== step 4: ZB-V trains with the bits of one device ==\n");
    Data data = load_data(32);
    Batch batch = batch_of(data, 2 * 4);
    Stages one = make_stages(data.cfg, 1), vee = make_stages(data.cfg, 2, 2, Recompute::none, 1, 0.1f, pp::Placement::vee);
    print_split(vee);
    for (int step = 0; step < 2; step++) {
        step_on_threads(one, pp::gpipe(1, 4), batch, step);
        step_on_threads(vee, pp::zbv(2, 4), batch, step);
    }
    compare(vee, one, false);
    std::printf("look at: rank 0's two chunks hold the embedding and the head, so the tied embedding's\n"
                "gradient sum never leaves the rank.\n\n");

    std::printf("question: 1F1B's rank 0 stashes P micro-batches and its rank P-1 one. Why does ZB-V stash\n"
                "about the same on every rank, and what does that mean for the largest model that fits?\n");
    std::printf("answer: docs/answers.md, section \"15 v shape\"\n");
    return 0;
}
