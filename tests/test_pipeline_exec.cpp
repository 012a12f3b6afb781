// The executor over ThreadComm: parallel equals serial, failures end the run with their rank and
// action, nothing hangs. The model is a toy: virtual stage s computes y = a_s * x + b_s.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <chrono>
#include <cmath>
#include <tuple>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include <thread>

#include "kernels/cpu/parallel.hpp"
#include "kernels/ops.hpp"
#include "pipeline_lab.hpp"
#include "src/comm.hpp"
#include "src/model.hpp"
#include "src/stage.hpp"
#include "src/step.hpp"
#include "tests/rendezvous_comm.hpp"

using namespace pp;
using pt::run_ranks;
using pt::ThreadComm;
using pt::ThreadWorld;

namespace {

const int kN = 7;  // elements per activation

float weight_of(int s) { return 1.0f + 0.1f * float(s); }
std::vector<float> input_of(int mb) {
    std::vector<float> x(kN);
    for (int i = 0; i < kN; i++) x[i] = 0.3f * float(mb + 1) + 0.01f * float(i * i);
    return x;
}

// Gradients of the toy model: da[s], db[s], accumulated over micro-batches.
struct Grads {
    std::vector<float> da, db;
    bool operator==(const Grads& o) const { return da == o.da && db == o.db; }
};

// One rank's V chunks. Loss = sum of the last stage's outputs, so its output gradient is all ones.
class ToyStage : public Stage {
 public:
    ToyStage(int rank, int P, int V, int fail_at = -1, Placement placement = Placement::loop)
        : rank_(rank), P_(P), V_(V), fail_at_(fail_at), at_{P, V, placement} {
        grads.da.assign(P * V, 0.0f), grads.db.assign(P * V, 0.0f);
    }
    Bytes input_buffer(Op op, int mb, int chunk) override {
        std::vector<float>& v = (op == Op::F ? act_in_ : grad_in_)[{mb, chunk}];
        v.assign(kN, 0.0f);
        return {v.data(), v.size() * sizeof(float)};
    }
    Bytes forward(int mb, int chunk) override {
        record("F", mb, chunk);
        int s = at_.stage(rank_, chunk);
        std::vector<float>& x = stash_[{mb, chunk}];
        x = s == 0 ? input_of(mb) : act_in_.at({mb, chunk});
        std::vector<float>& y = out_[{mb, chunk}];
        y.resize(kN);
        for (int i = 0; i < kN; i++) y[i] = weight_of(s) * x[i] + float(s);
        if (s == P_ * V_ - 1) return {};
        return {y.data(), y.size() * sizeof(float)};
    }
    Bytes backward(int mb, int chunk) override {
        record("B", mb, chunk);
        Bytes dx = input_grad(mb, chunk);
        weight_grad(mb, chunk);
        return dx;
    }
    Bytes backward_input(int mb, int chunk) override {
        record("BI", mb, chunk);
        return input_grad(mb, chunk);
    }
    void backward_weight(int mb, int chunk) override {
        record("BW", mb, chunk);
        weight_grad(mb, chunk);
    }
    // What the executor no longer needs: spoiled, so that a send after sent() would poison the
    // gradients (late sends keep outputs across later actions).
    void sent(Op op, int mb, int chunk) override {
        std::vector<float>& v = (op == Op::F ? out_ : dx_).at({mb, chunk});
        std::fill(v.begin(), v.end(), NAN);
        sends++;
    }
    int sends = 0;

    Grads grads;
    std::vector<std::string> order;

 private:
    void record(const char* op, int mb, int chunk) { order.push_back(op + std::to_string(mb) + "." + std::to_string(chunk)); }
    // dx = dy * a_s, sent to the previous stage; dy is kept for the weight gradient.
    Bytes input_grad(int mb, int chunk) {
        if (mb == fail_at_) throw std::runtime_error("boom");
        int s = at_.stage(rank_, chunk);
        std::vector<float>& dy = dy_[{mb, chunk}];
        dy = s == P_ * V_ - 1 ? std::vector<float>(kN, 1.0f) : grad_in_.at({mb, chunk});
        std::vector<float>& dx = dx_[{mb, chunk}];
        dx.resize(kN);
        for (int i = 0; i < kN; i++) dx[i] = dy[i] * weight_of(s);
        if (s == 0) return {};
        return {dx.data(), dx.size() * sizeof(float)};
    }
    void weight_grad(int mb, int chunk) {
        int s = at_.stage(rank_, chunk);
        const std::vector<float>&x = stash_.at({mb, chunk}), &dy = dy_.at({mb, chunk});
        for (int i = 0; i < kN; i++) grads.da[s] += dy[i] * x[i], grads.db[s] += dy[i];
    }
    int rank_, P_, V_, fail_at_;
    Layout at_;
    std::map<std::pair<int, int>, std::vector<float>> act_in_, grad_in_, stash_, out_, dy_, dx_;
};

// The same model on one device: micro-batches in order, each forward then backward.
Grads serial(int S, int M) {
    Grads g{std::vector<float>(S, 0.0f), std::vector<float>(S, 0.0f)};
    for (int mb = 0; mb < M; mb++) {
        std::vector<std::vector<float>> xs;
        std::vector<float> x = input_of(mb);
        for (int s = 0; s < S; s++) {
            xs.push_back(x);
            for (int i = 0; i < kN; i++) x[i] = weight_of(s) * x[i] + float(s);
        }
        std::vector<float> dy(kN, 1.0f);
        for (int s = S - 1; s >= 0; s--) {
            for (int i = 0; i < kN; i++) g.da[s] += dy[i] * xs[s][i], g.db[s] += dy[i];
            for (int i = 0; i < kN; i++) dy[i] = dy[i] * weight_of(s);
        }
    }
    return g;
}

// One step of `schedule` on P threads over `comm` (ThreadComm, whose sends are buffered), or over
// test::RendezvousComm (NCCL's semantics: a send waits for its receive), with plan_for's plans.
enum class Sends { buffered, unbuffered };
void run_threads(const Schedule& schedule, int V, std::vector<ToyStage>& stages, std::vector<std::vector<Event>>& events,
                 Sends sends) {
    int P = int(schedule.size());
    std::vector<int> ranks(P);
    for (int r = 0; r < P; r++) ranks[r] = r;
    auto step = [&](int r, Comm& comm) {
        Pipeline pipeline(schedule, V, stages[r], comm, r, ranks, plan_for(schedule, V));
        pipeline.run_step();
        events[r] = pipeline.timeline();
    };
    if (sends == Sends::buffered) {
        ThreadWorld world(P, 2.0);
        run_ranks(world, [&](int r) { ThreadComm comm(world, r); step(r, comm); });
        return;
    }
    for (const std::string& e : test::run_unbuffered(P, step)) REQUIRE_MESSAGE(e.empty(), e);
}

// Runs one step of `schedule` on P threads; returns the gradients gathered per virtual stage.
Grads run_pipeline(const Schedule& schedule, int V, std::vector<std::vector<Event>>* timelines = nullptr,
                   Sends sends = Sends::buffered) {
    int P = int(schedule.size());
    std::vector<ToyStage> stages;
    for (int r = 0; r < P; r++) stages.emplace_back(r, P, V, -1, schedule.placement);
    std::vector<std::vector<Event>> events(P);
    run_threads(schedule, V, stages, events, sends);
    Grads g{std::vector<float>(P * V, 0.0f), std::vector<float>(P * V, 0.0f)};
    Layout at{P, V, schedule.placement};
    for (int r = 0; r < P; r++)
        for (int c = 0; c < V; c++) {
            int s = at.stage(r, c);
            g.da[s] = stages[r].grads.da[s], g.db[s] = stages[r].grads.db[s];
        }
    for (int r = 0; r < P; r++) {  // each stage ran exactly its schedule, in order, and heard of each send once
        std::vector<std::string> expected;
        int sends = 0;
        for (const Action& a : schedule[r]) {
            expected.push_back(to_string(a, true));
            int s = at.stage(r, a.chunk);
            sends += (a.op == Op::F && s < P * V - 1) || ((a.op == Op::B || a.op == Op::BI) && s > 0);
        }
        CHECK(stages[r].order == expected);
        CHECK(stages[r].sends == sends);
    }
    if (timelines) *timelines = events;
    return g;
}

}  // namespace

TEST_CASE("pipeline equals serial, bit for bit, for every schedule, with buffered and unbuffered sends") {
    for (int P = 1; P <= 4; P++) {
        int M = 2 * P + 1;
        std::vector<std::pair<std::string, Schedule>> cases = {
            {"gpipe", gpipe(P, M)}, {"1f1b", one_f_one_b(P, M)}, {"zb-h1", zero_bubble_h1(P, M)}};
        for (const auto& [name, schedule] : cases) {
            INFO(name << " P=" << P);
            CHECK(run_pipeline(schedule, 1) == serial(P, M));
            CHECK(run_pipeline(schedule, 1, nullptr, Sends::unbuffered) == serial(P, M));
        }
        for (int V = 1; V <= 3; V++) {
            INFO("interleaved P=" << P << " V=" << V);
            CHECK(run_pipeline(interleaved(P, 2 * P, V), V) == serial(P * V, 2 * P));
            CHECK(run_pipeline(interleaved(P, 2 * P, V), V, nullptr, Sends::unbuffered) == serial(P * V, 2 * P));
        }
    }
}

TEST_CASE("the new schedules and the V shape equal serial too, late sends included") {
    for (int P = 1; P <= 4; P++) {
        int M = 2 * P + 1;
        std::vector<std::tuple<std::string, Schedule, int>> cases = {
            {"zb-h2", zero_bubble_h2(P, M), 1},
            {"zbv", zbv(P, M), 2},
            {"dualpipev", dualpipev(P, M), 2},
            {"looped-bfs 2", looped_bfs(P, M, 2), 2},
            {"looped-bfs 3", looped_bfs(P, M, 3), 3},
            {"interleaved-zb", interleaved_zero_bubble(P, 2 * P, 2), 2},
            {"auto", auto_schedule(P, M, std::vector<Costs>(P), std::vector<int>(P, 2)), 1}};
        for (const auto& [name, schedule, V] : cases) {
            INFO(name << " P=" << P);
            int m = name == "interleaved-zb" ? 2 * P : M;
            CHECK(run_pipeline(schedule, V) == serial(P * V, m));
            CHECK(run_pipeline(schedule, V, nullptr, Sends::unbuffered) == serial(P * V, m));   // NCCL's semantics
        }
    }
}

TEST_CASE("the measured timeline has one event per action") {
    Schedule s = interleaved(3, 6, 2);
    std::vector<std::vector<Event>> timelines;
    run_pipeline(s, 2, &timelines);
    for (int r = 0; r < 3; r++) {
        size_t compute = 0;
        double last_end = 0;
        for (const Event& e : timelines[r]) {
            CHECK(e.rank == r);
            CHECK(e.start >= last_end);  // one rank: sequential
            CHECK(e.end >= e.start);
            last_end = e.end;
            compute += !e.comm;
        }
        CHECK(compute == s[r].size());
    }
    std::string chart = ascii_timeline(timelines[0], 3, 60);
    CHECK(chart.find("rank 0 |") == 0);
}

TEST_CASE("a stage that throws ends the whole run with its rank and action") {
    int P = 4, M = 6;
    Schedule schedule = one_f_one_b(P, M);
    ThreadWorld world(P, 2.0);
    std::vector<ToyStage> stages;
    for (int r = 0; r < P; r++) stages.emplace_back(r, P, 1, r == 2 ? 1 : -1);
    auto t0 = std::chrono::steady_clock::now();
    std::string error;
    try {
        run_ranks(world, [&](int r) {
            ThreadComm comm(world, r);
            Pipeline(schedule, 1, stages[r], comm, r, {0, 1, 2, 3}).run_step();
        });
    } catch (const std::runtime_error& e) {
        error = e.what();
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(error.rfind("rank 2, action B1.0: boom", 0) == 0);
    CHECK(seconds < 1.0);  // the others were woken by abort, not by their 2 s timeout
}

TEST_CASE("a stage that throws something else still stops every rank; num_chunks < 1 is refused") {
    struct ThrowsInt : ToyStage {
        using ToyStage::ToyStage;
        Bytes backward(int mb, int chunk) override {
            if (mb == 1) throw 42;
            return ToyStage::backward(mb, chunk);
        }
    };
    int P = 3;
    ThreadWorld world(P, 2.0);
    std::vector<ThrowsInt> stages;
    for (int r = 0; r < P; r++) stages.emplace_back(r, P, 1);
    std::string error;
    auto t0 = std::chrono::steady_clock::now();
    try {
        run_ranks(world, [&](int r) {
            ThreadComm comm(world, r);
            ToyStage quiet(r, P, 1);
            Pipeline(one_f_one_b(P, 4), 1, r == 1 ? static_cast<Stage&>(stages[r]) : quiet, comm, r, {0, 1, 2}).run_step();
        });
    } catch (const std::runtime_error& e) {
        error = e.what();
    }
    CHECK(error.rfind("rank 1, action B1.0: an exception that is not a std::exception", 0) == 0);
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0);   // woken by abort

    ThreadWorld one(1, 1.0);
    ThreadComm comm(one, 0);
    ToyStage stage(0, 1, 1);
    for (int V : {0, -1}) CHECK_THROWS_AS(Pipeline(gpipe(1, 2), V, stage, comm, 0, {0}), std::invalid_argument);
}

TEST_CASE("the observer sees each group of transfers, each action and the end of the step, in order") {
    // One rank, two chunks: F0.0, then the copy to chunk 1 (a group), F0.1, B0.1, the copy back, B0.0.
    struct Recorder : Observer {
        std::vector<std::pair<size_t, Phase>> seen;
        void on_action(size_t index, Phase phase) override { seen.push_back({index, phase}); }
    } recorder;
    ThreadWorld one(1, 1.0);
    ThreadComm comm(one, 0);
    ToyStage stage(0, 1, 2);
    Pipeline pipe(interleaved(1, 1, 2), 2, stage, comm, 0, {0});
    pipe.set_observer(&recorder);
    pipe.run_step();
    using Seen = std::vector<std::pair<size_t, Phase>>;
    CHECK(recorder.seen == Seen{{0, Phase::action}, {1, Phase::transfers}, {1, Phase::action}, {2, Phase::action},
                                {3, Phase::transfers}, {3, Phase::action}, {4, Phase::step_end}});
    pipe.set_observer(nullptr);
    pipe.run_step();
    CHECK(recorder.seen.size() == 7);
}

TEST_CASE("ThreadComm: timeouts, tag checks, abort") {
    ThreadWorld world(2, 0.2);
    try {
        run_ranks(world, [&](int r) {
            ThreadComm comm(world, r);
            float x = 0;
            if (r == 1) comm.recv(&x, sizeof x, 0, transfer_tag(false, 3, 0));  // rank 0 never sends
        });
        FAIL("expected a timeout");
    } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()) == "rank 1: recv from rank 0 timed out after 0.2 s (waiting for F3.0 (tag " +
                                           std::to_string(transfer_tag(false, 3, 0)) + "))");
    }

    ThreadWorld world2(2, 2.0);
    try {
        run_ranks(world2, [&](int r) {
            ThreadComm comm(world2, r);
            float x = 1;
            if (r == 0) comm.send(&x, sizeof x, 1, transfer_tag(false, 4, 0));
            if (r == 1) comm.recv(&x, sizeof x, 0, transfer_tag(false, 3, 0));
        });
        FAIL("expected a tag mismatch");
    } catch (const std::runtime_error& e) {
        std::string expected = "rank 1: recv from rank 0: expected F3.0 (tag " + std::to_string(transfer_tag(false, 3, 0)) +
                               ") but got F4.0 (tag " + std::to_string(transfer_tag(false, 4, 0)) + ")";
        CHECK(std::string(e.what()) == expected);
    }

    ThreadWorld world3(3, 30.0);  // abort must wake a waiter long before its timeout
    auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(run_ranks(world3, [&](int r) {
                          ThreadComm comm(world3, r);
                          if (r == 0) throw std::runtime_error("rank 0: first");
                          comm.barrier();
                      }),
                      "rank 0: first");
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0);

    // An error that does not say where it happened (outside a pipeline step) gets its rank.
    ThreadWorld world4(3, 30.0);
    CHECK_THROWS_WITH(run_ranks(world4, [&](int r) {
                          ThreadComm comm(world4, r);
                          if (r == 2) throw std::runtime_error("out of memory");
                          comm.barrier();
                      }),
                      "rank 2: out of memory");
}

// Ranks as threads lend their core while they wait (kernels/cpu/threads.cpp): rank 1 waits for a
// message while rank 0 multiplies on one thread, so rank 0's GEMMs are cut for two and rank 1
// runs pieces of them. Every product must have the bits of the same GEMM on one thread alone.
TEST_CASE("a waiting rank runs pieces of another rank's kernels, and the bits do not change") {
    const int M = 384, N = 320, K = 256;
    std::vector<float> A(size_t(M) * K), B(size_t(K) * N), alone(size_t(M) * N), C(alone.size());
    for (size_t i = 0; i < A.size(); i++) A[i] = float(int(i * 7919 % 201) - 100) / 64.0f;
    for (size_t i = 0; i < B.size(); i++) B[i] = float(int(i * 104729 % 199) - 99) / 128.0f;
    ops::set_num_threads(1);
    ops::gemm(alone.data(), A.data(), B.data(), nullptr, M, N, K, false, false, 1.0f, 0.0f);   // nobody waits
    ThreadWorld world(2, 30.0);
    ops::LentWork lent0, lent1;
    int products = 0, differ = 0;
    run_ranks(world, [&](int r) {
        ThreadComm comm(world, r);
        char c = 0;
        if (r == 1) {   // waits for rank 0's message, running pieces of its jobs meanwhile
            comm.recv(&c, 1, 0, 7);
            lent1 = ops::lent_work();
            return;
        }
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (ops::lent_work().given == 0 && std::chrono::steady_clock::now() < until) {   // a liveness bound
            std::fill(C.begin(), C.end(), -1.0f);
            ops::gemm(C.data(), A.data(), B.data(), nullptr, M, N, K, false, false, 1.0f, 0.0f);
            products++, differ += std::memcmp(C.data(), alone.data(), C.size() * sizeof(float)) != 0;
        }
        lent0 = ops::lent_work();
        comm.send(&c, 1, 1, 7);
    });
    INFO(products << " products");
    CHECK(lent0.given > 0);              // rank 0 gave pieces away...
    CHECK(lent1.taken == lent0.given);   // ...all of them to rank 1, the only rank that waited
    CHECK(lent1.taken_s > 0);
    // The seconds its pieces ran elsewhere, as the giver counts them: the same pieces' seconds as
    // the taker's count, added in another order.
    CHECK(lent0.given_s > 0);
    CHECK(lent0.given_s == doctest::Approx(lent1.taken_s).epsilon(1e-9));
    CHECK(lent0.taken == 0);
    CHECK(differ == 0);
}

TEST_CASE("a waiting rank counts as a helper for its whole receive, also while it runs a piece") {
    // Each job of rank 0 must be cut for rank 1 as long as rank 1 waits: not only when rank 1 happens
    // to be asleep in its wait at the moment rank 0 cuts, which left about a third of its wait unlent.
    ThreadWorld world(2, 30.0);
    int jobs = 0, cut = 0;
    ops::LentWork lent1;
    run_ranks(world, [&](int r) {
        ThreadComm comm(world, r);
        char c = 0;
        if (r == 1) {
            comm.recv(&c, 1, 0, 7);
            lent1 = ops::lent_work();
            return;
        }
        ops::set_num_threads(1);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);   // liveness bounds
        while (ops::num_threads() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        std::atomic<int> started{0};
        for (; jobs < 1000; jobs++) {   // back to back: the next job is cut as soon as rank 1's piece ends
            cut += ops::num_threads() == 2;
            ops::parallel_for(2, 1, [&](int64_t b, int64_t e) {
                if (e - b == 2) return;   // not cut
                // Each piece waits for the other to start, so rank 1 runs one piece of every cut job.
                started++;
                const auto bound = std::chrono::steady_clock::now() + std::chrono::seconds(5);
                while (started < 2 * cut && std::chrono::steady_clock::now() < bound) std::this_thread::yield();
            });
        }
        comm.send(&c, 1, 1, 7);
    });
    CHECK(cut == jobs);
    CHECK(lent1.taken == jobs);
}

// After each update the word embedding and the head's tied copy must hold the same bits. Apart,
// the two ranks swap a fingerprint of their copy: one bit flipped in one word (the first, one in the
// middle, the last) must still fail the step, on both ranks, as a difference does on one rank.
TEST_CASE("the tied copies' check: one bit flipped in one word fails the step, on one rank and across two") {
    const pt::ModelConfig cfg = pt::ModelConfig::preset("tiny");
    const int L = pt::num_model_layers(cfg);   // the embedding, the blocks, the head
    const size_t words = size_t(cfg.vocab_size) * cfg.hidden_size;
    for (int P : {1, 2})
        for (long planted : {-1L, 0L, long(words / 2) + 3, long(words) - 1}) {
            CAPTURE(P);
            CAPTURE(planted);
            std::vector<std::string> error(P);
            ThreadWorld world(P, 30.0);
            run_ranks(world, [&](int r) {
                std::vector<int> layers;
                for (int l = r * L / P; l < (r + 1) * L / P; l++) layers.push_back(l);
                pt::TransformerStage stage(cfg, {layers}, pt::Recompute::none, pt::RunOptions{});
                for (pt::Layer* l : stage.layers()) l->init(5, 0.02f);
                pt::Layer* head = stage.layer(L - 1);
                if (head && planted >= 0) {   // the head's copy, on the last rank
                    uint32_t bits;
                    float* x = head->params.data() + pt::tied_param(*head)->offset + planted;
                    std::memcpy(&bits, x, 4), bits ^= 1u << 7, std::memcpy(x, &bits, 4);
                }
                pt::Optimizer opt(stage);
                pt::RankPlace at;
                at.P = P, at.p = r;
                ThreadComm comm(world, r);
                try {
                    pt::update_weights(comm, stage, opt, cfg, at, pt::Update{});
                } catch (const std::exception& e) {
                    error[r] = e.what();
                }
            });
            for (int r = 0; r < P; r++)
                CHECK(error[r] == (planted < 0 ? "" : "tied word embedding copies differ after the optimizer step"));
        }
}

TEST_CASE("--recompute full: the same loss, targets and gradients as none, and only the inputs kept between F and B") {
    // One stage with every layer, 2 micro-batches of 2 rows; the recomputing forward of each
    // backward must neither count its targets again nor keep what --recompute full drops.
    const pt::ModelConfig cfg = pt::ModelConfig::preset("tiny");
    std::vector<int> all;
    for (int l = 0; l < pt::num_model_layers(cfg); l++) all.push_back(l);
    pt::Batch b;
    b.B = 4, b.T = 16;
    for (int i = 0; i < b.B * b.T; i++) {
        b.input_ids.push_back(int32_t(7 + (i * 37) % 200));
        b.targets.push_back(i % 3 == 0 ? int32_t((i * 11) % 200) : -100);
    }
    b.token_type_ids.assign(b.input_ids.size(), 0), b.attention_mask.assign(b.input_ids.size(), 1);
    struct Outcome { double loss; int64_t targets; size_t peak; std::vector<float> grads; };
    auto run = [&](pt::Recompute policy) {
        pt::TransformerStage stage(cfg, {all}, policy, pt::RunOptions{});
        for (pt::Layer* l : stage.layers()) l->init(3, 0.02f);
        stage.begin_step(&b, 2, 0, 0, 1.0f / float(b.num_targets()));
        stage.forward(0, 0), stage.forward(1, 0);
        const size_t peak = stage.peak_stash_bytes();   // both micro-batches in flight
        stage.backward(1, 0), stage.backward(0, 0);
        Outcome o{stage.loss_sum(), stage.num_targets(), peak, {}};
        for (pt::Layer* l : stage.layers())
            for (float g : l->grads.host()) o.grads.push_back(g);
        return o;
    };
    Outcome kept = run(pt::Recompute::none), redone = run(pt::Recompute::full);
    CHECK(kept.targets == b.num_targets());
    CHECK(redone.targets == b.num_targets());
    CHECK(redone.loss == kept.loss);
    CHECK(redone.grads == kept.grads);
    // Kept: every layer's activations of 2 micro-batches; recomputed: their 2 token-id inputs at most.
    CHECK(redone.peak < kept.peak / 10);
}

TEST_CASE("a Comm without all-reduce or barrier says so when they are called") {
    struct PointToPointOnly : Comm {   // what the Pipeline itself needs, and nothing more
        int rank() const override { return 0; }
        int size() const override { return 1; }
        void send(const void*, std::size_t, int, int) override {}
        void recv(void*, std::size_t, int, int) override {}
        void group(const std::vector<P2POp>&) override {}
        void abort(const std::string&) override {}
    } comm;
    float f = 1;
    double d = 1;
    try {
        comm.allreduce_sum(&f, 1, {0});
        FAIL("expected a throw");
    } catch (const std::logic_error& e) {
        CHECK(std::string(e.what()) == "pp::Comm::allreduce_sum: this transport does not have it");
    }
    CHECK_THROWS_AS(comm.allreduce_sum(&d, 1, {0}), std::logic_error);
    CHECK_THROWS_AS(comm.barrier(), std::logic_error);
}

TEST_CASE("allreduce sums in the order of ranks, identical bits everywhere") {
    // Float addition is not associative: the order decides the bits.
    std::vector<float> value = {1e8f, 1.0f, -1e8f, 3.5f};
    std::vector<int> order = {2, 0, 3, 1};
    float expected = ((value[2] + value[0]) + value[3]) + value[1];
    ThreadWorld world(4, 2.0);
    std::vector<float> got(4);
    std::vector<double> got_d(4);
    run_ranks(world, [&](int r) {
        ThreadComm comm(world, r);
        float x = value[r];
        comm.allreduce_sum(&x, 1, order);
        got[r] = x;
        double d = double(r) + 0.25;
        comm.allreduce_sum(&d, 1, {0, 1, 2, 3});
        got_d[r] = d;
        comm.barrier();
    });
    for (int r = 0; r < 4; r++) {
        CHECK(std::memcmp(&got[r], &expected, sizeof(float)) == 0);
        CHECK(got_d[r] == 7.0);
    }
}

// The background sums (AsyncSum): the bits of allreduce_sum, several in flight at once while the
// rank goes on with its pipeline messages, and a member that never starts its sum is an error in
// one line after the deadline, not a hang.
TEST_CASE("ThreadComm's background sums give allreduce_sum's bits; a missing member times out") {
    std::vector<float> value = {1e8f, 1.0f, -1e8f, 3.5f, 0.125f};
    std::vector<int> order = {2, 0, 3, 1, 4};
    float expected[2];
    for (int k = 0; k < 2; k++) {   // the tree over the positions of `order`: ((x2 + x0) + (x3 + x1)) + x4
        auto x = [&](int r) { return value[r] * float(k + 1); };
        expected[k] = ((x(2) + x(0)) + (x(3) + x(1))) + x(4);
    }
    ThreadWorld world(5, 2.0);
    std::vector<std::array<float, 2>> got(5);
    run_ranks(world, [&](int r) {
        ThreadComm comm(world, r);
        float a = value[r], b = 2 * value[r];
        comm.start_sum(&a, 1, order), comm.start_sum(&b, 1, order);
        int token = r;   // pipeline messages go on meanwhile, on their own channel
        if (r > 0) comm.send(&token, sizeof token, r - 1, 7);
        if (r < 4) comm.recv(&token, sizeof token, r + 1, 7);
        CHECK(comm.wait_sums().size() == 2);
        got[r] = {a, b};
    });
    for (int r = 0; r < 5; r++) {
        CHECK(std::memcmp(&got[r][0], &expected[0], sizeof(float)) == 0);
        CHECK(std::memcmp(&got[r][1], &expected[1], sizeof(float)) == 0);
    }
    ThreadWorld lonely(2, 0.3);
    std::string error;
    try {
        run_ranks(lonely, [&](int r) {
            ThreadComm comm(lonely, r);
            float x = 1;
            if (r == 1) comm.start_sum(&x, 1, {0, 1}), comm.wait_sums();   // rank 0 never starts its half
        });
    } catch (const std::exception& e) {
        error = e.what();
    }
    CHECK(error == "rank 1: recv from rank 0 timed out after 0.3 s (waiting for allreduce)");
}

TEST_CASE("two data-parallel pipelines on one world") {
    // World ranks {0, 1} and {2, 3} are two replicas of a 2-stage pipeline; stage grads are then
    // summed across replicas (0 with 2, 1 with 3), as data parallelism does.
    int P = 2, M = 3;
    Schedule schedule = zero_bubble_h1(P, M);
    ThreadWorld world(4, 2.0);
    std::vector<ToyStage> stages;
    for (int w = 0; w < 4; w++) stages.emplace_back(w % P, P, 1);
    run_ranks(world, [&](int w) {
        ThreadComm comm(world, w);
        std::vector<int> ranks = w < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
        Pipeline(schedule, 1, stages[w], comm, w % P, ranks).run_step();
        comm.allreduce_sum(stages[w].grads.da.data(), stages[w].grads.da.size(), {w % P, w % P + 2});
    });
    Grads one = serial(P, M);
    for (int w = 0; w < 4; w++) {
        int s = w % P;
        CHECK(stages[w].grads.da[s] == one.da[s] + one.da[s]);
    }
}
