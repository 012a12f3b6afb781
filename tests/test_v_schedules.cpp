// V-Half and V-Min (issue #34 §2): their memory and bubble formulas against the simulator, their
// stashes measured by the executor, auto under a tight memory cap, and `pipetrain schedule --compare`.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "pipeline_lab.hpp"
#include "tests/cli_util.hpp"

using namespace test;

namespace {

// The paper's peak, in (micro-batch, chunk) stashes on the rank that holds most: V-Min 2⌊(P+4)/3⌋,
// V-Half 2⌊(P+2)/2⌋ (its ⌊(P+4)/3⌋ and ⌊(P+2)/2⌋ micro-batches of a whole stage), never above 2M.
int formula_peak(bool half, int P, int M) { return std::min(2 * M, half ? 2 * ((P + 2) / 2) : 2 * ((P + 4) / 3)); }

// Idle units per rank with costs per chunk F = BI = BW = 1 and M >= P (of 6M busy).
double formula_idle(bool half, int P) {
    if (half) return (7.0 * (P - 1) + (P % 2 == 0 ? 3 : 0)) / 2;
    return P == 1 ? 0 : 4 * P - 5 + (P % 3 == 0 ? 2 : 0);
}

pp::Schedule generate(bool half, int P, int M) { return half ? pp::v_half(P, M) : pp::v_min(P, M); }

int most(const std::vector<int>& v) { return *std::max_element(v.begin(), v.end()); }

// Whether a schedule's peak and idle are what the formulas say (idle only for M >= P).
bool as_stated(bool half, int P, int M, const pp::Schedule& s) {
    pp::SimResult r = pp::simulate(s);
    bool idle = true;
    for (double x : r.idle) idle = idle && (M < P || std::fabs(x - formula_idle(half, P)) < 1e-9);
    return most(r.peak_live) == formula_peak(half, P, M) && idle;
}

// The same schedule with rank 0's first BW run last: that stash lives to the end.
pp::Schedule one_bw_late(pp::Schedule s) {
    auto& a = s[0];
    auto bw = std::find_if(a.begin(), a.end(), [](const pp::Action& x) { return x.op == pp::Op::BW; });
    pp::Action moved = *bw;
    a.erase(bw);
    a.push_back(moved);
    return s;
}

}  // namespace

TEST_CASE("V-Half and V-Min: valid, the V placement, peak stashes and bubble as their comments state") {
    for (int P = 1; P <= 10; P++)
        for (int M = 1; M <= 3 * P; M++)
            for (bool half : {false, true}) {
                INFO((half ? "v_half" : "v_min") << " P=" << P << " M=" << M);
                pp::Schedule s = generate(half, P, M);
                CHECK(s.placement == pp::Placement::vee);
                CHECK_NOTHROW(pp::validate(s, M, 2, pp::plan_for(s, 2)));
                CHECK(as_stated(half, P, M, s));
            }
    // Against 1F1B's P micro-batches of a whole stage (2P chunk stashes): a third and a half, at P = 8.
    CHECK(most(pp::simulate(pp::v_min(8, 32)).peak_live) == 8);    // 4 stages' worth
    CHECK(most(pp::simulate(pp::v_half(8, 32)).peak_live) == 10);  // 5
    CHECK(most(pp::simulate(pp::zbv(8, 32)).peak_live) == 16);     // 8, 1F1B's
}

TEST_CASE("the memory check can fail: a V-Min or V-Half that keeps one stash longer is caught") {
    for (int P : {2, 4, 6})
        for (bool half : {false, true}) {
            INFO((half ? "v_half" : "v_min") << " P=" << P);
            pp::Schedule late = one_bw_late(generate(half, P, 4 * P));
            CHECK_NOTHROW(pp::validate(late, 4 * P, 2, pp::plan_for(late, 2)));   // still a schedule
            CHECK_FALSE(as_stated(half, P, 4 * P, late));
        }
}

TEST_CASE("the executor holds, stage by stage, the stashes of the formula and of the simulator") {
    const std::string sample = fixture("text/sample_zh.txt");
    struct Case { std::string schedule; int P, M; std::string preset; };
    for (const Case& c : std::vector<Case>{{"v-min", 2, 3, "tiny"}, {"v-half", 2, 5, "tiny"}, {"v-min", 4, 4, "small"},
                                           {"v-min", 4, 8, "small"}, {"v-half", 4, 8, "small"}}) {
        INFO(c.schedule << " P=" << c.P << " M=" << c.M);
        std::string out = temp_dir("vmem_" + c.schedule + std::to_string(c.P) + "_" + std::to_string(c.M));
        Run r = run_cli("train --preset " + c.preset + " --data " + sample + " --steps 1 --seq 16 --seed 7 --batch " +
                        std::to_string(2 * c.M) + " --stages " + std::to_string(c.P) + " --micro-batches " +
                        std::to_string(c.M) + " --schedule " + c.schedule + " --out " + out);
        REQUIRE_MESSAGE(r.code == 0, r.out);
        std::vector<int> measured;
        std::istringstream in(r.out.substr(r.out.rfind("(micro-batch, chunk):") + 21));
        for (int x; in >> x;) measured.push_back(x);
        bool half = c.schedule == "v-half";
        CHECK(measured == pp::simulate(generate(half, c.P, c.M)).peak_live);
        REQUIRE(measured.size() == size_t(c.P));
        CHECK(most(measured) == formula_peak(half, c.P, c.M));
    }
}

TEST_CASE("auto under a tight cap picks V-Min or V-Half where 1F1B does not fit") {
    // P = 6, M = 12, unit costs per stage: a cap of 3 stages' stashes (6 half-stage chunks) holds
    // V-Min's 6 chunks but not 1F1B's 6 stages; 4 also holds V-Half's 8 chunks, and V-Half is faster.
    int P = 6, M = 12;
    std::vector<pp::Costs> stage(P), chunk(P, pp::Costs{0.5, 0.5, 0.5, 0});
    for (int cap : {3, 4}) {
        INFO("cap " << cap);
        CHECK(most(pp::simulate(pp::one_f_one_b(P, M)).peak_live) > cap);
        pp::Schedule s = pp::auto_schedule(P, M, stage, std::vector<int>(P, cap), chunk, std::vector<int>(P, 2 * cap));
        CHECK(s.placement == pp::Placement::vee);
        CHECK(s == (cap == 3 ? pp::v_min(P, M) : pp::v_half(P, M)));
        // The greedy plan under the same cap is slower (61 and 50 units against 46.5 and 45.5).
        pp::Schedule greedy = pp::auto_schedule(P, M, stage, std::vector<int>(P, cap));
        CHECK(pp::simulate(s, chunk).makespan < pp::simulate(greedy, stage).makespan);
    }
    // At 1F1B's memory the one-chunk plan is faster and stays; a cap that holds no V stash never picks one.
    CHECK(pp::auto_schedule(P, M, stage, std::vector<int>(P, P), chunk, std::vector<int>(P, 2 * P)).placement ==
          pp::Placement::loop);
    CHECK(pp::auto_schedule(P, M, stage, std::vector<int>(P, 1), chunk, std::vector<int>(P, 2)).placement ==
          pp::Placement::loop);
    // The CLI: `pipetrain schedule --schedule auto --memory-cap 2` says what it picked.
    Run r = run_cli("schedule --stages 6 --micro-batches 12 --schedule auto --memory-cap 3");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(r.out.find("auto picked v-min") != std::string::npos);
    CHECK(r.out.find("rank 0: peak live stashes 6") != std::string::npos);
    // train: the small preset's stages stash about 1 MB per micro-batch (16 rows of 16 tokens in 8):
    // 2.5 MB holds 2 of them on the middle ranks, not 1F1B's 4, but 4 of V-Min's half-stage chunks.
    // Which plan is faster depends on the measured times (the end ranks are light and may hold 4), so
    // this checks that a V pick runs as planned: the note names it, the stashes are V-Min's.
    std::string out = temp_dir("vauto");
    Run t = run_cli("train --preset small --data " + fixture("text/sample_zh.txt") + " --steps 1 --seq 16 --batch 16"
                    " --stages 4 --micro-batches 8 --schedule auto --memory-cap 2500000 --out " + out);
    REQUIRE_MESSAGE(t.code == 0, t.out);
    INFO(t.out);
    CHECK(t.out.find("picked v-half") == std::string::npos);   // V-Half's 6 chunks do not fit
    if (t.out.find("picked v-min (V placement)") != std::string::npos)
        CHECK(t.out.find("peak stashes per stage (micro-batch, chunk): 4 4 4 4") != std::string::npos);
}

TEST_CASE("schedule --overlap: DualPipeV's F&B pairs cost max(F, B), 4M + 3P, not F + B, 6M + 2(P - 1); ZB-V has none") {
    // Unit costs per chunk (--costs per stage: 2 each, halved over the V shape's two chunks); the
    // closed forms are test_schedule's: 2(P - 1) idle per rank beside 6M of work, and 4M + 3P overlapped.
    auto makespan = [](const std::string& args) {
        Run r = run_cli("schedule --costs 2,2,2,0 " + args);
        INFO(args << "\n" << r.out);
        REQUIRE(r.code == 0);
        size_t at = r.out.find("makespan ");
        REQUIRE(at != std::string::npos);
        return std::stod(r.out.substr(at + 9));
    };
    for (auto [P, M] : {std::pair{2, 4}, {4, 10}}) {
        std::string shape = " --stages " + std::to_string(P) + " --micro-batches " + std::to_string(M);
        CHECK(makespan("--schedule dualpipev" + shape) == 6 * M + 2 * (P - 1));
        CHECK(makespan("--schedule dualpipev --overlap" + shape) == 4 * M + 3 * P);
        CHECK(makespan("--schedule zbv --overlap" + shape) == makespan("--schedule zbv" + shape));
    }
}

TEST_CASE("schedule --compare: each row is pp::simulate's bubble and peak for that schedule") {
    struct Case { int P, M; std::string costs; pp::Costs c; };
    for (const Case& k : {Case{4, 8, "", pp::Costs{}}, Case{8, 16, " --costs 1,1.5,0.5,0.1", pp::Costs{1, 1.5, 0.5, 0.1}}}) {
        Run r = run_cli("schedule --compare --stages " + std::to_string(k.P) + " --micro-batches " + std::to_string(k.M) + k.costs);
        REQUIRE_MESSAGE(r.code == 0, r.out);
        INFO(r.out);
        double base = 0;
        for (const auto& [name, s] : std::vector<std::pair<std::string, pp::Schedule>>{
                 {"1f1b", pp::one_f_one_b(k.P, k.M)}, {"zb-h1", pp::zero_bubble_h1(k.P, k.M)}, {"zbv", pp::zbv(k.P, k.M)},
                 {"v-half", pp::v_half(k.P, k.M)}, {"v-min", pp::v_min(k.P, k.M)}}) {
            int V = s.placement == pp::Placement::vee ? 2 : 1;
            pp::Costs c = k.c;
            c.f /= V, c.bi /= V, c.bw /= V;
            pp::SimResult sim = pp::simulate(s, c);
            size_t at = r.out.find("\n" + name + " ");
            REQUIRE_MESSAGE(at != std::string::npos, name);
            std::istringstream row(r.out.substr(at + 1 + name.size()));
            int chunks = 0, peak = 0;
            double makespan = 0, bubble = 0, stages = 0, ratio = 0;
            std::string percent;
            row >> chunks >> makespan >> percent >> peak >> stages >> ratio;
            bubble = std::stod(percent);
            CHECK(chunks == V);
            CHECK(makespan == doctest::Approx(sim.makespan).epsilon(0.01 / sim.makespan));
            CHECK(bubble == doctest::Approx(100 * sim.bubble).epsilon(0.06 / std::max(1.0, 100 * sim.bubble)));
            CHECK(peak == most(sim.peak_live));
            CHECK(stages == doctest::Approx(double(most(sim.peak_live)) / V));
            if (base == 0) base = stages;
            CHECK(ratio == doctest::Approx(stages / base).epsilon(0.01));
        }
    }
    // README.md shows the table at P = 8, M = 32: it must be what the command prints.
    std::string readme = read_file(fixture("../../README.md"));
    std::string marker = "<!-- schedule --compare: the output of the last command above";
    size_t at = readme.find("```\n", readme.find(marker));
    REQUIRE(at != std::string::npos);
    std::string shown = readme.substr(at + 4, readme.find("```", at + 4) - at - 4);
    CHECK(shown == run_cli("schedule --compare --stages 8 --micro-batches 32").out);
    Run bad = run_cli("schedule --compare --schedule zbv");
    CHECK(bad.code != 0);
    CHECK(bad.out.find("--compare: compares 1f1b, zb-h1, zbv, v-half and v-min; drop --schedule") != std::string::npos);
}
