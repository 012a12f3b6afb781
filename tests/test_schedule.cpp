// Schedules as data: generators, validate, simulate, timeline and partition. No threads, no model.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include "pipeline_lab.hpp"

using namespace pp;

// doctest prints a failed CHECK(a == b) with these instead of "{?} == {?}".
namespace doctest {
template <>
struct StringMaker<Action> {
    static String convert(const Action& a) {
        return (to_string(a, true) + (a.overlapped ? " (overlapped)" : "")).c_str();
    }
};
template <>
struct StringMaker<Schedule> {
    static String convert(const Schedule& s) {
        return ("\n" + to_string(s, true) + (s.placement == Placement::vee ? "(vee placement)\n" : "")).c_str();
    }
};
}  // namespace doctest

namespace {

std::string error_of(const Schedule& s) {
    try {
        validate(s, 0, 0, plan_for(s));  // plan_for: the plain plan, or the late-send plan where needed
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

// Every generator, over the whole legal grid: (name, P, M, V, schedule).
template <typename Fn>
void for_each_schedule(Fn fn) {  // fn(std::string name, ...)
    for (int P = 1; P <= 5; P++)
        for (int M = 1; M <= 12; M++) {
            fn("gpipe", P, M, 1, gpipe(P, M));
            fn("1f1b", P, M, 1, one_f_one_b(P, M));
            fn("zb-h1", P, M, 1, zero_bubble_h1(P, M));
            fn("zb-h2", P, M, 1, zero_bubble_h2(P, M));
            fn("zbv", P, M, 2, zbv(P, M));
            fn("v-half", P, M, 2, v_half(P, M));
            fn("v-min", P, M, 2, v_min(P, M));
            if (M >= 2 * P) fn("dualpipev", P, M, 2, dualpipev(P, M));
            fn("auto", P, M, 1, auto_schedule(P, M, std::vector<Costs>(P), std::vector<int>(P, P)));
            for (int V = 1; V <= 3; V++) fn("looped-bfs", P, M, V, looped_bfs(P, M, V));
            if (M % P == 0)
                for (int V = 1; V <= 3; V++) {
                    fn("interleaved", P, M, V, interleaved(P, M, V));
                    fn("interleaved-zb", P, M, V, interleaved_zero_bubble(P, M, V));
                }
        }
}

}  // namespace

TEST_CASE("every generator is valid and runs backward work in increasing micro-batch order") {
    for_each_schedule([](const std::string& name, int P, int M, int V, const Schedule& s) {
        INFO(name << " P=" << P << " M=" << M << " V=" << V);
        REQUIRE(int(s.size()) == P);
        CHECK_NOTHROW(validate(s, M, V, plan_for(s, V)));
        // The forwards, the input-gradient work (B or BI) and the weight-gradient work (B or BW)
        // of each chunk: micro-batches 0, 1, 2, ... (DualPipeV mixes B with BI/BW).
        for (int r = 0; r < P; r++)
            for (int c = 0; c < V; c++)
                for (std::vector<Op> ops : {std::vector<Op>{Op::F}, {Op::B, Op::BI}, {Op::B, Op::BW}}) {
                    int last = -1;
                    for (const Action& a : s[r])
                        if (std::count(ops.begin(), ops.end(), a.op) && a.chunk == c) {
                            CHECK(a.microbatch == last + 1);  // increasing, and none skipped
                            last = a.microbatch;
                        }
                }
    });
}

TEST_CASE("the plain plan is the simulator's plan for every core schedule") {
    // GPipe, 1F1B and interleaved need no late send: each rank posts the previous step's sends and
    // this step's receives, and the simulator, left to make its own plans, keeps exactly those.
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 16; M++) {
            std::vector<std::pair<int, Schedule>> core = {{1, gpipe(P, M)}, {1, one_f_one_b(P, M)}};
            if (M % P == 0)
                for (int V = 1; V <= 4; V++) core.push_back({V, interleaved(P, M, V)});
            for (const auto& [V, s] : core) {
                std::vector<Plan> plans = detail::make_plans(s, V);
                for (int r = 0; r < P; r++) {
                    INFO("P=" << P << " M=" << M << " V=" << V << " rank " << r << "\n" << to_string(s, true));
                    CHECK(detail::comm_plan(s[r], r, Layout{P, V, s.placement}) == plans[r]);
                }
            }
        }
}

TEST_CASE("the core validate refuses a schedule that needs late sends, and says which plan to pass") {
    // Looped BFS: rank 1 sends F0 of chunk 0 on to rank 0, which takes it only after all of its own
    // chunk-0 forwards. Without the lab header's plan the plain plan deadlocks.
    Schedule bfs = looped_bfs(2, 4, 2);
    std::string plain;
    try {
        validate(bfs);
    } catch (const std::runtime_error& e) {
        plain = e.what();
    }
    CHECK(plain.find("rank 0 (before ") != std::string::npos);
    CHECK(plain.find("pass the plan of pipeline_lab.hpp: pp::plan_for(schedule, V)") != std::string::npos);
    CHECK(plain.find('\n') == std::string::npos);
    CHECK_NOTHROW(validate(bfs, 0, 0, late_send_plan(bfs)));
    CHECK(plan_for(one_f_one_b(4, 8)).empty());   // the core schedules run with the plain plan
    CHECK(!plan_for(bfs).empty());
}

TEST_CASE("interleaved with one chunk is 1F1B; its constraint on M is checked") {
    for (int P = 1; P <= 5; P++)
        for (int M = P; M <= 12; M += P) CHECK(interleaved(P, M, 1) == one_f_one_b(P, M));
    try {
        interleaved(4, 6, 2);
        FAIL("expected a throw");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("multiple of the number of stages") != std::string::npos);
    }
    CHECK_THROWS_AS(gpipe(0, 4), std::invalid_argument);
    CHECK_THROWS_AS(one_f_one_b(2, 0), std::invalid_argument);
}

TEST_CASE("ZB-H1 is the paper's order: 1F1B with B split into BI and BW, rank r's BWs r behind") {
    // Written out by hand from Qi et al. 2024 (figure 3's rule) for P = 3, M = 4, not by the code.
    CHECK(to_string(zero_bubble_h1(3, 4)) ==
          "rank 0: F0 F1 F2 BI0 BW0 F3 BI1 BW1 BI2 BW2 BI3 BW3\n"
          "rank 1: F0 F1 BI0 F2 BI1 BW0 F3 BI2 BW1 BI3 BW2 BW3\n"
          "rank 2: F0 BI0 F1 BI1 F2 BI2 BW0 F3 BI3 BW1 BW2 BW3\n");
    CHECK_THROWS_AS(zero_bubble_h1(0, 4), std::invalid_argument);
}

TEST_CASE("ZB-H2 is the paper's order: 2(P-r)-1 warm-up forwards, then BI before F, BWs 2r behind") {
    // Written out by hand from the rule (Qi et al. 2024, §2.2), not by the code. P = 4, M = 4 has
    // M < 2P: rank r warms up with min(2(P-r)-1, M) = 4, 4, 3, 1 forwards.
    CHECK(to_string(zero_bubble_h2(4, 4)) ==
          "rank 0: F0 F1 F2 F3 BI0 BW0 BI1 BW1 BI2 BW2 BI3 BW3\n"
          "rank 1: F0 F1 F2 F3 BI0 BI1 BI2 BW0 BI3 BW1 BW2 BW3\n"
          "rank 2: F0 F1 F2 BI0 F3 BI1 BI2 BI3 BW0 BW1 BW2 BW3\n"
          "rank 3: F0 BI0 F1 BI1 F2 BI2 F3 BI3 BW0 BW1 BW2 BW3\n");
    // P = 2, M = 5 >= 2P: the steady state BI, F, BW.
    CHECK(to_string(zero_bubble_h2(2, 5)) ==
          "rank 0: F0 F1 F2 BI0 F3 BW0 BI1 F4 BW1 BI2 BW2 BI3 BW3 BI4 BW4\n"
          "rank 1: F0 BI0 F1 BI1 F2 BI2 F3 BW0 BI3 F4 BW1 BI4 BW2 BW3 BW4\n");
    CHECK_THROWS_AS(zero_bubble_h2(0, 4), std::invalid_argument);
}

// The same schedule with every "BI i, F j" pair run as "F j, BI i": the forward first.
Schedule forward_before_input_grad(Schedule s) {
    for (std::vector<Action>& actions : s)
        for (size_t k = 0; k + 1 < actions.size(); k++)
            if (actions[k].op == Op::BI && actions[k + 1].op == Op::F) std::swap(actions[k], actions[k + 1]);
    return s;
}

TEST_CASE("ZB-H2 runs BI before F: with M < 2P or a transfer cost, the forward first is slower") {
    // BI is on the critical path (the previous rank waits for it), the next F is not yet: running
    // the F first never helps, and costs time whenever M < 2P or a transfer takes time.
    for (int P = 1; P <= 5; P++)
        for (int M = 1; M <= 12; M++)
            for (double comm : {0.0, 0.5, 1.0}) {
                INFO("P=" << P << " M=" << M << " comm=" << comm);
                Costs c{1, 1, 1, comm};
                Schedule h2 = zero_bubble_h2(P, M), f_first = forward_before_input_grad(h2);
                REQUIRE_NOTHROW(validate(f_first, M, 1, plan_for(f_first, 1)));
                CHECK(simulate(h2, c).makespan <= simulate(f_first, c).makespan + 1e-12);
            }
    // The cases where it shows (unit costs): P = 4, M = 4 (16, not 17); M = 2 on any P > 1; and with
    // a transfer as long as a compute step, P = 2 for every M > 1.
    CHECK(simulate(zero_bubble_h2(4, 4)).makespan == doctest::Approx(16));
    CHECK(simulate(forward_before_input_grad(zero_bubble_h2(4, 4))).makespan == doctest::Approx(17));
    for (int P = 2; P <= 5; P++) {
        INFO("P=" << P);
        CHECK(simulate(zero_bubble_h2(P, 2)).makespan < simulate(forward_before_input_grad(zero_bubble_h2(P, 2))).makespan);
    }
    for (int M = 2; M <= 12; M++) {
        INFO("P=2 M=" << M << " comm=1");
        Costs c{1, 1, 1, 1};
        CHECK(simulate(zero_bubble_h2(2, M), c).makespan + 1 <=
              simulate(forward_before_input_grad(zero_bubble_h2(2, M)), c).makespan);
    }
    // Makespans below 2P and with a transfer (unit compute costs), as simulated today: a change to
    // the order must come with new numbers here.
    const double zero_comm[] = {9, 11, 14, 16, 19, 21, 24}, unit_comm[] = {15, 18, 22, 26, 30, 34, 38};
    for (int M = 1; M <= 7; M++) {
        INFO("P=4 M=" << M);
        CHECK(simulate(zero_bubble_h2(4, M)).makespan == doctest::Approx(zero_comm[M - 1]));
        CHECK(simulate(zero_bubble_h2(4, M), Costs{1, 1, 1, 1}).makespan == doctest::Approx(unit_comm[M - 1]));
    }
}

TEST_CASE("validate rejects broken schedules with the reason") {
    Schedule s = gpipe(2, 3);  // each rank: F0 F1 F2 B0 B1 B2

    Schedule missing = s;
    missing[1].pop_back();
    CHECK(error_of(missing) == "rank 1: missing the backward of micro-batch 2 (B2, or BI2 and BW2)");

    Schedule duplicated = s;
    duplicated[0].insert(duplicated[0].begin() + 1, Action{Op::F, 0});
    CHECK(error_of(duplicated) == "rank 0, action F0: duplicated F0");

    Schedule b_before_f = s;
    b_before_f[1] = {{Op::B, 0}, {Op::F, 0}, {Op::F, 1}, {Op::F, 2}, {Op::B, 1}, {Op::B, 2}};
    CHECK(error_of(b_before_f) == "rank 1, action B0: needs F0 before B0");

    Schedule bw_before_bi = {{{Op::F, 0}, {Op::BW, 0}, {Op::BI, 0}}};
    CHECK(error_of(bw_before_bi) == "rank 0, action BW0: needs BI0 before BW0");

    Schedule mixed = {{{Op::F, 0}, {Op::BI, 0}, {Op::B, 0}}};
    CHECK(error_of(mixed).find("mixes B with BI/BW") != std::string::npos);

    // Rank 0 waits for B0 before running F1, rank 1 waits for F1 before running B0.
    Schedule deadlock = {{{Op::F, 0}, {Op::B, 0}, {Op::F, 1}, {Op::B, 1}},
                         {{Op::F, 0}, {Op::F, 1}, {Op::B, 0}, {Op::B, 1}}};
    CHECK(error_of(deadlock) ==
          "deadlock: rank 0 (before B0) waits in {recv B0 from rank 1}; rank 1 (before F1) waits in {recv F1 from rank 0}");

    // Both orders are locally fine, but the tensors would be swapped on the wire: the plan holds
    // the one produced first back until the receiver has taken the other (late sends).
    auto sends_to = [](const Schedule& sched, int from, int to) {
        std::vector<std::string> order;
        std::vector<Plan> plans = detail::make_plans(sched, 1);
        for (const auto& group : plans[from])
            for (const CommOp& op : group)
                if (op.send && op.peer == to) order.push_back(tag_label(op.tag, false));
        return order;
    };
    Schedule fifo = s;
    std::swap(fifo[0][1], fifo[0][2]);  // rank 0: F0 F2 F1 ...
    CHECK(error_of(fifo) == "");
    CHECK(sends_to(fifo, 0, 1) == std::vector<std::string>{"F0", "F1", "F2"});
    CHECK(sends_to(s, 0, 1) == std::vector<std::string>{"F0", "F1", "F2"});
    Schedule fifo_back = s;
    std::swap(fifo_back[1][3], fifo_back[1][4]);  // rank 1: ... B1 B0 B2
    CHECK(error_of(fifo_back) == "");
    CHECK(sends_to(fifo_back, 1, 0) == std::vector<std::string>{"B0", "B1", "B2"});

    // One rank, two chunks: chunk 1 cannot run before chunk 0 produced its input.
    Schedule early = {{{Op::F, 0, 1}, {Op::F, 0, 0}, {Op::B, 0, 1}, {Op::B, 0, 0}}};
    CHECK(error_of(early) == "rank 0, action F0.1: runs before the action that produces its input");

    Schedule range = s;
    range[0].push_back({Op::F, 0, 1});
    try {
        validate(range, 3, 1);
        FAIL("expected a throw");
    } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()).find("out of range") != std::string::npos);
    }
}

TEST_CASE("simulated bubbles equal the textbook formulas") {
    for (int P = 1; P <= 5; P++)
        for (int M = 1; M <= 12; M++) {
            INFO("P=" << P << " M=" << M);
            double textbook = double(P - 1) / (M + P - 1);
            for (Costs c : {Costs{1, 1, 1, 0}, Costs{1, 0.5, 0.5, 0}, Costs{2, 3, 1, 0}}) {
                CHECK(simulate(gpipe(P, M), c).bubble == doctest::Approx(textbook).epsilon(1e-12));
                CHECK(simulate(one_f_one_b(P, M), c).bubble == doctest::Approx(textbook).epsilon(1e-12));
            }
            // ZB-H1 with F = BI = BW and M >= P: rank idle time P-1 of 3M+P-1, the paper's
            // (P-1)(F+B-W). With fewer micro-batches there are not enough BWs to fill the bubbles.
            SimResult zb = simulate(zero_bubble_h1(P, M));
            if (M >= P) CHECK(zb.bubble == doctest::Approx(double(P - 1) / (3 * M + P - 1)).epsilon(1e-12));
            CHECK(zb.bubble <= textbook + 1e-12);
            if (M >= 3 * P && P > 1) CHECK(zb.bubble <= 0.4 * textbook);
            if (M % P == 0)
                for (int V = 1; V <= 3; V++) {
                    INFO("V=" << V);
                    // Costs per chunk: the fraction does not depend on their scale.
                    CHECK(simulate(interleaved(P, M, V)).bubble ==
                          doctest::Approx(double(P - 1) / (V * M + P - 1)).epsilon(1e-12));
                }
        }
}

// Idle time of every rank: the same on each for these schedules (equal work per rank).
std::vector<double> idle_of(const Schedule& s, const Costs& c = {}) { return simulate(s, c).idle; }

TEST_CASE("placement: loop and V shape map every virtual stage to one (rank, chunk) and back") {
    for (int P = 1; P <= 6; P++)
        for (int V = 1; V <= 4; V++)
            for (Placement pl : {Placement::loop, Placement::vee}) {
                Layout at{P, V, pl};
                std::vector<int> seen(P * V, 0);
                for (int r = 0; r < P; r++)
                    for (int c = 0; c < V; c++) {
                        int st = at.stage(r, c);
                        REQUIRE(st >= 0);
                        REQUIRE(st < P * V);
                        seen[st]++;
                        CHECK(at.rank(st) == r);
                        CHECK(at.chunk(st) == c);
                    }
                CHECK(std::count(seen.begin(), seen.end(), 1) == P * V);
            }
    // V shape, two chunks: rank r holds stages r and 2P-1-r; the first and the last share rank 0,
    // and the turn (stage P-1 to P) stays on rank P-1.
    Layout vee{4, 2, Placement::vee};
    CHECK(vee.stage(0, 0) == 0);
    CHECK(vee.stage(0, 1) == 7);
    CHECK(vee.stage(3, 0) == 3);
    CHECK(vee.stage(3, 1) == 4);
    CHECK(vee.rank(7) == 0);
    CHECK(zbv(4, 8).placement == Placement::vee);
    CHECK(dualpipev(4, 8).placement == Placement::vee);
    CHECK(looped_bfs(4, 8, 2).placement == Placement::loop);
}

TEST_CASE("every new schedule's simulated bubble and memory equal the formulas in its comment") {
    for (int P = 2; P <= 8; P++)
        for (int M = 1; M <= 4 * P; M++) {
            INFO("P=" << P << " M=" << M);
            // Looped BFS: F + B = 3 per chunk; (P-1) of fill and drain, plus a stall of P - M at each
            // change of chunk when M < P. Every rank stashes all V*M pairs.
            for (int V = 1; V <= 3; V++) {
                INFO("V=" << V);
                SimResult r = simulate(looped_bfs(P, M, V));
                double idle = 3.0 * ((P - 1) + (V - 1) * std::max(0, P - M));
                for (int rank = 0; rank < P; rank++) {
                    CHECK(r.idle[rank] == doctest::Approx(idle));
                    CHECK(r.peak_live[rank] == V * M);
                }
                if (M >= P) CHECK(r.bubble == doctest::Approx(double(P - 1) / (V * M + P - 1)));
            }
            // Interleaved zero bubble: P-1 units of 3VM once M >= 2P, with interleaved 1F1B's stashes;
            // with M = P less than interleaved 1F1B's 3(P-1).
            if (M % P == 0)
                for (int V = 2; V <= 3; V++) {
                    INFO("V=" << V);
                    SimResult z = simulate(interleaved_zero_bubble(P, M, V)), i = simulate(interleaved(P, M, V));
                    for (int rank = 0; rank < P; rank++) {
                        if (M >= 2 * P) CHECK(z.idle[rank] == doctest::Approx(P - 1));
                        CHECK(z.idle[rank] < i.idle[rank]);
                        CHECK(z.peak_live[rank] <= *std::max_element(i.peak_live.begin(), i.peak_live.end()));
                    }
                    if (M >= 2 * P) CHECK(z.bubble == doctest::Approx(double(P - 1) / (3 * V * M + P - 1)));
                }
            // ZB-H2: min(M, 2P) stashes on every rank; with M >= 2P only the fill, (P-1)·F, also
            // where ZB-H1 idles more (BI > BW).
            SimResult h2 = simulate(zero_bubble_h2(P, M));
            for (int rank = 0; rank < P; rank++) CHECK(h2.peak_live[rank] == std::min(M, 2 * P));
            if (M >= 2 * P) {
                for (Costs c : {Costs{1, 1, 1, 0}, Costs{1, 1, 0.5, 0}, Costs{1, 2, 1, 0}, Costs{2, 1, 1, 0}}) {
                    INFO("costs " << c.f << "/" << c.bi << "/" << c.bw);
                    for (double x : idle_of(zero_bubble_h2(P, M), c)) CHECK(x == doctest::Approx((P - 1) * c.f));
                }
                CHECK(h2.bubble == doctest::Approx(double(P - 1) / (3 * M + P - 1)));
                for (double x : idle_of(zero_bubble_h1(P, M), Costs{1, 1, 0.5, 0})) CHECK(x == doctest::Approx(1.5 * (P - 1)));
            }
            // ZB-V: costs per chunk; (P-1) + max(0, 2P-2-M) units of 6M once M >= P, and
            // min(2P, M+1+r, 2M) stashes on rank r.
            SimResult v = simulate(zbv(P, M));
            for (int rank = 0; rank < P; rank++) {
                if (M >= P) CHECK(v.idle[rank] == doctest::Approx((P - 1) + std::max(0, 2 * P - 2 - M)));
                CHECK(v.peak_live[rank] == std::min({2 * P, M + 1 + rank, 2 * M}));
            }
            if (M >= 2 * P - 2) CHECK(v.bubble == doctest::Approx(double(P - 1) / (6 * M + P - 1)));
            // DualPipeV: 2P+1 stashes, 2(P-1) idle run one after the other, 4M + 3P overlapped.
            if (M >= 2 * P) {
                SimResult d = simulate(dualpipev(P, M));
                Costs overlapped;
                overlapped.overlap = true;
                for (int rank = 0; rank < P; rank++) {
                    CHECK(d.idle[rank] == doctest::Approx(2 * (P - 1)));
                    CHECK(d.peak_live[rank] == 2 * P + 1);
                }
                CHECK(simulate(dualpipev(P, M), overlapped).makespan == doctest::Approx(4 * M + 3 * P));
                CHECK(simulate(zbv(P, M), overlapped).makespan == doctest::Approx(6 * M + P - 1));  // no pairs
            }
        }
    // Looped BFS runs its backwards in increasing micro-batch order; PyTorch's reversed order
    // simulates to the same bubble, so keeping one device's order costs nothing.
    for (int P : {2, 4, 8})
        for (int V : {2, 3})
            for (int M : {1, P / 2 + 1, P, 2 * P, 4 * P}) {
                Schedule reversed(P);
                for (auto& actions : reversed) {
                    for (int c = 0; c < V; c++)
                        for (int mb = 0; mb < M; mb++) actions.push_back({Op::F, mb, c});
                    for (int c = V - 1; c >= 0; c--)
                        for (int mb = M - 1; mb >= 0; mb--) actions.push_back({Op::B, mb, c});
                }
                CHECK(simulate(reversed).bubble == doctest::Approx(simulate(looped_bfs(P, M, V)).bubble));
            }
    CHECK_THROWS_AS(dualpipev(4, 7), std::invalid_argument);
    for (int P = 1; P <= 5; P++)
        for (int M = P; M <= 12; M += P) CHECK(interleaved_zero_bubble(P, M, 1) == zero_bubble_h1(P, M));
    // Its own name in its error (it said "interleaved: Megatron's interleaved schedule needs ...").
    std::string e;
    try {
        interleaved_zero_bubble(3, 8, 2);
    } catch (const std::invalid_argument& x) {
        e = x.what();
    }
    CHECK(e.rfind("interleaved zero bubble: built on Megatron's interleaved order, it needs the number of micro-batches M (8)", 0) == 0);
}

TEST_CASE("validate proves every schedule deadlock-free for P in {2, 4, 8} and every valid M") {
    for (int P : {2, 4, 8})
        for (int M = 1; M <= 3 * P; M++) {
            INFO("P=" << P << " M=" << M);
            std::vector<std::pair<const char*, Schedule>> all = {
                {"gpipe", gpipe(P, M)},         {"1f1b", one_f_one_b(P, M)},   {"zb-h1", zero_bubble_h1(P, M)},
                {"zb-h2", zero_bubble_h2(P, M)}, {"zbv", zbv(P, M)},            {"looped-bfs 2", looped_bfs(P, M, 2)},
                {"looped-bfs 3", looped_bfs(P, M, 3)}, {"v-half", v_half(P, M)}, {"v-min", v_min(P, M)},
                {"auto", auto_schedule(P, M, std::vector<Costs>(P), std::vector<int>(P, P))}};
            if (M >= 2 * P) all.push_back({"dualpipev", dualpipev(P, M)});
            if (M % P == 0)
                for (int V : {2, 3}) {
                    all.push_back({"interleaved", interleaved(P, M, V)});
                    all.push_back({"interleaved-zb", interleaved_zero_bubble(P, M, V)});
                }
            for (const auto& [name, sched] : all) {
                INFO(name);
                CHECK(error_of(sched) == "");
            }
        }
}

TEST_CASE("auto: no worse than ZB-H1 at 1F1B's memory and than ZB-H2 at twice it; the cap holds") {
    for (int P : {2, 3, 4, 8})
        for (int M : {1, 2, P, 2 * P, 3 * P, 4 * P}) {
            INFO("P=" << P << " M=" << M);
            std::vector<Costs> unit(P);
            // The greedy plan alone, before auto compares it with the fixed schedules.
            SimResult tight = simulate(detail::plan_greedy(P, M, unit, std::vector<int>(P, P)));
            SimResult loose = simulate(detail::plan_greedy(P, M, unit, std::vector<int>(P, 2 * P)));
            CHECK(tight.bubble <= simulate(zero_bubble_h1(P, M)).bubble + 1e-12);
            CHECK(loose.bubble <= simulate(zero_bubble_h2(P, M)).bubble + 1e-12);
            for (int r = 0; r < P; r++) {
                CHECK(tight.peak_live[r] <= P);
                CHECK(loose.peak_live[r] <= 2 * P);
            }
            // A cap of one stash per rank is GPipe's worst: F, BI, BW one micro-batch at a time.
            SimResult one = simulate(auto_schedule(P, M, unit, std::vector<int>(P, 1)));
            for (int r = 0; r < P; r++) CHECK(one.peak_live[r] == 1);
        }
    // Other costs: auto is never slower than a fixed schedule that fits its cap, and its greedy
    // plan beats them where BW is cheap (F = 1, BI = 1.5, BW = 0.5 at 2P: 28 against ZB-H2's 28.5).
    for (Costs c : {Costs{1, 1, 0.5, 0}, Costs{1, 1.5, 0.5, 0}, Costs{1, 2, 1, 0}, Costs{1, 1, 1, 0.2}}) {
        INFO("costs " << c.f << "/" << c.bi << "/" << c.bw << "/" << c.comm);
        std::vector<Costs> v(4, c);
        double tight = simulate(auto_schedule(4, 8, v, std::vector<int>(4, 4)), v).makespan;
        double loose = simulate(auto_schedule(4, 8, v, std::vector<int>(4, 8)), v).makespan;
        CHECK(tight <= simulate(zero_bubble_h1(4, 8), v).makespan);
        CHECK(tight <= simulate(one_f_one_b(4, 8), v).makespan);
        CHECK(loose <= simulate(zero_bubble_h2(4, 8), v).makespan);
    }
    std::vector<Costs> cheap_bw(4, Costs{1, 1.5, 0.5, 0});
    CHECK(simulate(auto_schedule(4, 8, cheap_bw, std::vector<int>(4, 8)), cheap_bw).makespan == doctest::Approx(28.0));
    // Unequal stages: the plan sees each rank's own costs (a slow last stage), and beats ZB-H1 on them.
    std::vector<Costs> skewed = {{1, 1, 1, 0}, {1, 1, 1, 0}, {1, 1, 1, 0}, {2, 2, 2, 0}};
    SimResult planned = simulate(auto_schedule(4, 12, skewed, std::vector<int>(4, 4)), skewed);
    CHECK(planned.makespan <= simulate(zero_bubble_h1(4, 12), skewed).makespan);
    CHECK_THROWS_AS(auto_schedule(2, 4, std::vector<Costs>(2), {1, 0}), std::invalid_argument);
    CHECK_THROWS_AS(auto_schedule(2, 4, std::vector<Costs>(3), {1, 1}), std::invalid_argument);
}

TEST_CASE("busy, idle, makespan and transfer cost") {
    // P = 2, M = 1: F on rank 0, transfer, F and B on rank 1, transfer, B on rank 0.
    SimResult r = simulate(one_f_one_b(2, 1), Costs{1, 1, 1, 0.5});
    CHECK(r.makespan == doctest::Approx(7.0));
    CHECK(r.busy[0] == doctest::Approx(3.0));
    CHECK(r.idle[1] == doctest::Approx(4.0));
    int compute = 0, comm = 0;
    for (const Event& e : r.events) (e.comm ? comm : compute)++;
    CHECK(compute == 4);
    CHECK(comm == 2);  // one wait on each rank for its incoming transfer
    // Each group knows how much of it moved data (the receive that arrived last): rank 1 waits 1
    // for rank 0's F, then 0.5 for the transfer.
    for (const Event& e : r.events)
        if (e.comm) CHECK(e.transfer == doctest::Approx(0.5));
    // Free transfers: the waits are all waiting (the pictures draw them as idle, not as transfers).
    SimResult free = simulate(one_f_one_b(2, 1), Costs{1, 1, 1, 0});
    for (const Event& e : free.events)
        if (e.comm) CHECK((e.transfer == 0 && e.end > e.start));
}

// Costs::bw_extra, a micro-batch's own weight-gradient cost (a tree of gradient sums adds unevenly:
// src/cli/predict.cpp), lands where it falls. P = 2, M = 4, F = 1, B = 2: 1F1B ends at 15. In 1F1B
// the last micro-batch's B is each rank's last action and rank 1's sends the gradient rank 0's
// waits for, so 2 more on micro-batch 3 end it at 15 + 2 + 2 = 19 (worked by hand: rank 1's B3 runs
// 11-15, rank 0's 15-19); the same 2 spread as 0.5 on each ends it at 17.5 (rank 1's B3 12.5-15,
// rank 0's 15-17.5).
TEST_CASE("bw_extra: a micro-batch's weight-gradient cost lands in its own B or BW") {
    Costs base{1, 1, 1, 0}, last = base, spread = base;
    last.bw_extra = {0, 0, 0, 2}, spread.bw_extra = {0.5, 0.5, 0.5, 0.5};
    CHECK(simulate(one_f_one_b(2, 4), base).makespan == doctest::Approx(15));
    CHECK(simulate(one_f_one_b(2, 4), last).makespan == doctest::Approx(19));
    CHECK(simulate(one_f_one_b(2, 4), spread).makespan == doctest::Approx(17.5));
    CHECK(simulate(one_f_one_b(2, 4), last).busy[0] == doctest::Approx(4 * 3 + 2));
    // Split backwards: the extra goes to BW, never to BI or F.
    CHECK(last.of(Op::BW, 3) == 3);
    CHECK(last.of(Op::BI, 3) == 1);
    CHECK(last.of(Op::F, 3) == 1);
    CHECK(last.of(Op::B, 2) == 2);
    CHECK(last.of(Op::BW, 7) == 1);   // micro-batches past the list cost bw alone
    for (double bad : {-1.0, double(NAN), double(INFINITY)}) {
        Costs c = base;
        c.bw_extra = {0, bad};
        CHECK_THROWS_AS(simulate(gpipe(2, 4), c), std::invalid_argument);
    }
}

TEST_CASE("peak live micro-batches") {
    for (int P = 1; P <= 5; P++)
        for (int M = 1; M <= 12; M++) {
            INFO("P=" << P << " M=" << M);
            SimResult g = simulate(gpipe(P, M)), o = simulate(one_f_one_b(P, M)), z = simulate(zero_bubble_h1(P, M));
            int o_max = 0, z_max = 0;
            for (int r = 0; r < P; r++) {
                CHECK(g.peak_live[r] == M);
                CHECK(o.peak_live[r] == std::min(P - r, M));
                o_max = std::max(o_max, o.peak_live[r]);
                z_max = std::max(z_max, z.peak_live[r]);
            }
            CHECK(z_max <= o_max);  // ZB-H1's pipeline peak is 1F1B's
        }
}

TEST_CASE("ASCII chart and Chrome trace") {
    SimResult r = simulate(interleaved(3, 6, 2));
    std::string chart = ascii_timeline(r.events, 3, 90);
    CHECK(std::count(chart.begin(), chart.end(), '\n') == 4);   // 3 ranks and the legend
    CHECK(chart.rfind("rank 0 |F0", 0) == 0);
    CHECK(chart.find("rank 2 |") != std::string::npos);
    CHECK(chart.find("F3 = forward of micro-batch 3") != std::string::npos);
    CHECK(chart.find('\n') == 90);                                // the width counts the whole line
    // Too narrow for every name: the boxes keep the micro-batch alone and the names are listed.
    std::string narrow = ascii_timeline(simulate(one_f_one_b(2, 12)).events, 2, 40);
    CHECK(narrow.find("too narrow to name (") != std::string::npos);
    CHECK(narrow.find("too narrow to name (37): rank 0 F0, rank 0 F1,") != std::string::npos);
    CHECK(narrow.find('\n') == 40);
    CHECK(ascii_timeline(simulate(one_f_one_b(2, 2)).events, 2, 100).find("too narrow") == std::string::npos);
    // Width 0: the terminal's, from $COLUMNS.
    setenv("COLUMNS", "64", 1);
    CHECK(ascii_timeline(r.events, 3).find('\n') == 64);
    setenv("COLUMNS", "99999999999", 1);   // atoi wrapped it: gigabytes of chart, then bad_alloc
    CHECK(ascii_timeline(r.events, 3).find('\n') == 1000);
    unsetenv("COLUMNS");
    CHECK(ascii_timeline(r.events, 3).find('\n') == 100);
    CHECK(ascii_timeline(r.events, 3, 2147483647).find('\n') == 1000);

    std::string json = chrome_trace(r.events);
    CHECK(json.rfind("{\"traceEvents\":[", 0) == 0);
    CHECK(json.find("]}") != std::string::npos);
    CHECK(std::count(json.begin(), json.end(), '{') == std::count(json.begin(), json.end(), '}'));
    CHECK(std::count(json.begin(), json.end(), '[') == std::count(json.begin(), json.end(), ']'));
    size_t complete = 0;
    for (size_t at = json.find("\"ph\":\"X\""); at != std::string::npos; at = json.find("\"ph\":\"X\"", at + 1)) complete++;
    CHECK(complete == r.events.size());
    CHECK(json.find("\"name\":\"F0.1\"") != std::string::npos);
}

TEST_CASE("chart and trace name actions alike: F3, BI3, BW3, F3.1 with chunks") {
    // One chunk per rank: no ".0" anywhere; the chart writes the names where they fit.
    SimResult z = simulate(zero_bubble_h1(2, 2));
    std::string chart = ascii_timeline(z.events, 2, 120), json = chrome_trace(z.events);
    for (const char* name : {"F0", "BI0", "BW1"}) {
        CHECK_MESSAGE(chart.find(name) != std::string::npos, name);
        CHECK_MESSAGE(json.find("\"name\":\"" + std::string(name) + "\"") != std::string::npos, name);
    }
    CHECK(json.find("\"name\":\"F0.0\"") == std::string::npos);
    CHECK(chart.find("BI3/BW3 input/weight gradient") != std::string::npos);
    // A compute event's args say its micro-batch and chunk; none carries an empty "detail".
    CHECK(json.find("\"name\":\"BI1\",\"cat\":\"BI\"") != std::string::npos);
    CHECK(json.find("\"args\":{\"microbatch\":1,\"chunk\":0}") != std::string::npos);
    CHECK(json.find("\"detail\":\"\"") == std::string::npos);
    CHECK(json.find("\"detail\":\"recv F0 from rank 0\"") != std::string::npos);   // a group's operations stay
    CHECK(json.find("\"transfer\":0.000") != std::string::npos);                     // simulated: free transfers
    // Two chunks: "F0.1" in both; a box too narrow for "BI3.1" shows "i3" (the legend says so).
    SimResult v = simulate(zbv(2, 4));
    CHECK(chrome_trace(v.events).find("\"name\":\"BI3.1\"") != std::string::npos);
    std::string wide = ascii_timeline(v.events, 2, 400), narrow = ascii_timeline(v.events, 2, 60);
    CHECK(wide.find("BI3.1") != std::string::npos);
    CHECK(narrow.find("BI3.1") == std::string::npos);
    CHECK(narrow.find("i3") != std::string::npos);
    CHECK(narrow.find("f3 = F3.1 (odd chunk)") != std::string::npos);
}

TEST_CASE("bad costs, events and actions are errors, never out-of-bounds writes or reads") {
    // simulate: costs must be finite and >= 0 (negative ones made events start before 0, and the
    // chart wrote before its row).
    for (Costs c : {Costs{-5, 3, 3, 0}, Costs{NAN, 1, 1, 0}, Costs{1, 1, 1, INFINITY}})
        CHECK_THROWS_AS(simulate(gpipe(2, 4), c), std::invalid_argument);
    // ascii_timeline draws what lies in [0, makespan] and skips the rest.
    std::vector<Event> events = {{0, {Op::F, 0, 0}, false, -50, 10, ""}, {1, {Op::B, 0, 0}, false, 0, NAN, ""},
                                 {0, {Op::B, 0, 0}, false, 10, 20, ""}};
    std::string chart = ascii_timeline(events, 2, 29);   // 20 columns of chart
    CHECK(chart.substr(0, chart.rfind("F3 =")) == "rank 0 |..........B0--------|\nrank 1 |....................|\n");
    // chrome_trace escapes what a user's detail holds and keeps long ones whole.
    events = {{0, {Op::F, 0, 0}, false, 0, 1, "a\"b\\c\nd" + std::string(600, 'x')}};
    std::string json = chrome_trace(events);
    CHECK(json.find("\"detail\":\"a\\\"b\\\\c\\u000ad" + std::string(600, 'x') + "\"}}") != std::string::npos);
    // partition: costs must be finite and >= 0; a sum that overflows still gives valid boundaries.
    for (std::vector<double> c : {std::vector<double>{INFINITY, 1, 1}, {NAN, 1, 1}, {1, -1, 1}})
        CHECK_THROWS_AS(partition(c, 2), std::invalid_argument);
    CHECK(partition({1e301, 1, 1}, 2) == std::vector<int>{0, 1, 3});
    CHECK_THROWS_AS(partition_memory({1, NAN}, {1, 1}, 2), std::invalid_argument);
    std::vector<int> b = partition_memory({1, 1, 1}, {1e308, 1e307, 1}, 3);   // 3 x 1e308 overflows
    CHECK(b == std::vector<int>{0, 1, 2, 3});
    // validate: actions outside what a transfer tag can hold are named, not "no actions".
    CHECK(error_of({{{Op::F, -1, 0}, {Op::B, -1, 0}}}).find("rank 0, action F-1.0: micro-batch or chunk out of range") == 0);
    CHECK(error_of({{{Op::F, INT32_MAX, 0}}}).find("out of range") != std::string::npos);
    CHECK(error_of({{{Op::F, 0, 128}, {Op::B, 0, 128}}}).find("out of range") != std::string::npos);
}

namespace {
// Smallest possible largest-stage cost, by trying every split.
double brute_force(const std::vector<double>& c, int P, int begin, int stage,
                   const std::function<double(int, int, int)>& cost) {
    int L = int(c.size());
    if (stage == P - 1) return cost(stage, begin, L);
    double best = 1e300;
    for (int end = begin + 1; end <= L - (P - 1 - stage); end++)
        best = std::min(best, std::max(cost(stage, begin, end), brute_force(c, P, end, stage + 1, cost)));
    return best;
}
}  // namespace

TEST_CASE("partition is the exact optimum") {
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 300; trial++) {
        int L = 1 + int(rng() % 9), P = 1 + int(rng() % L);
        std::vector<double> c(L), act(L);
        for (int i = 0; i < L; i++) c[i] = double(1 + rng() % 20), act[i] = double(rng() % 5);
        auto sum = [&](const std::vector<double>& v, int b, int e) {
            double s = 0;
            for (int i = b; i < e; i++) s += v[i];
            return s;
        };
        auto time_cost = [&](int, int b, int e) { return sum(c, b, e); };
        auto memory_cost = [&](int stage, int b, int e) { return sum(c, b, e) + (P - stage) * sum(act, b, e); };
        for (int kind = 0; kind < 2; kind++) {
            std::function<double(int, int, int)> cost = kind == 0 ? std::function<double(int, int, int)>(time_cost) : memory_cost;
            std::vector<int> b = kind == 0 ? partition(c, P) : partition_memory(c, act, P);
            REQUIRE(int(b.size()) == P + 1);
            CHECK(b.front() == 0);
            CHECK(b.back() == L);
            double worst = 0;
            for (int i = 0; i < P; i++) {
                CHECK(b[i] < b[i + 1]);
                worst = std::max(worst, cost(i, b[i], b[i + 1]));
            }
            CHECK(worst == brute_force(c, P, 0, 0, cost));
        }
    }
    CHECK(partition({1, 1, 1, 1}, 2) == std::vector<int>{0, 2, 4});
    CHECK(partition({1, 1, 1}, 2) == std::vector<int>{0, 1, 3});  // tie: the last stage starts earliest
    CHECK_THROWS_AS(partition({1, 2}, 3), std::invalid_argument);
}

namespace {
// (slowest rank, slowest chunk) of the split b of c into the layout's P·V chunks.
std::pair<double, double> rank_score(const std::vector<double>& c, const Layout& layout, const std::vector<int>& b) {
    std::vector<double> rank(layout.P, 0.0);
    double chunk = 0;
    for (int k = 0; k < layout.P * layout.V; k++) {
        double x = 0;
        for (int i = b[k]; i < b[k + 1]; i++) x += c[i];
        rank[layout.rank(k)] += x, chunk = std::max(chunk, x);
    }
    return {*std::max_element(rank.begin(), rank.end()), chunk};
}
// Every split of c into the layout's P·V chunks: the smallest score.
void brute_force_ranks(const std::vector<double>& c, const Layout& layout, std::vector<int>& b, int s,
                       std::pair<double, double>& best) {
    const int S = layout.P * layout.V, L = int(c.size());
    if (s == S) return void(best = std::min(best, rank_score(c, layout, b)));
    for (int e = s == S - 1 ? L : b[s] + 1; e <= L - (S - 1 - s); e++) b[s + 1] = e, brute_force_ranks(c, layout, b, s + 1, best);
}
}  // namespace

TEST_CASE("partition_ranks balances the ranks that run several chunks: the exact optimum") {
    std::mt19937 rng(99);
    for (int trial = 0; trial < 600; trial++) {
        const int P = 1 + int(rng() % 4), V = 1 + int(rng() % 3), S = P * V, L = S + int(rng() % 7);
        const Layout layout{P, V, V == 2 && rng() % 2 ? Placement::vee : Placement::loop};
        std::vector<double> c(L);
        for (double& x : c) x = double(1 + rng() % 20);   // integers: every sum exact, no rounding ties
        std::vector<int> b = partition_ranks(c, layout);
        REQUIRE(int(b.size()) == S + 1);
        CHECK(b.front() == 0);
        CHECK(b.back() == L);
        for (int k = 0; k < S; k++) CHECK(b[k] < b[k + 1]);
        std::vector<int> all(S + 1, 0);
        std::pair<double, double> best{1e300, 1e300};
        brute_force_ranks(c, layout, all, 0, best);
        CHECK(rank_score(c, layout, b) == best);
        if (V == 1) CHECK(b == partition(c, S));
    }
    // 6 equal blocks between a light embedding and head, V-shaped on 2 ranks: partition() alone
    // balances the 4 chunks ([e 1 | 2 2 | 1 h]: 4 blocks on rank 1, 2 on rank 0); 3 blocks each.
    std::vector<double> c{0.1, 1, 1, 1, 1, 1, 1, 0.5};
    const Layout vee{2, 2, Placement::vee};
    std::vector<int> old = partition(c, 4), b = partition_ranks(c, vee);
    auto blocks_of = [&](const std::vector<int>& bounds, int r) {
        int n = 0;
        for (int k = 0; k < 4; k++)
            if (vee.rank(k) == r)
                for (int i = bounds[k]; i < bounds[k + 1]; i++) n += i > 0 && i < 7;
        return n;
    };
    CHECK(blocks_of(old, 0) == 2);   // what partition() gives, so that this case tests something
    CHECK(blocks_of(b, 0) == 3);
    CHECK(blocks_of(b, 1) == 3);
}
