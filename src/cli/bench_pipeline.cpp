// src/cli/bench_pipeline.cpp — `pipetrain bench-pipeline`: real pipelined steps against pp::simulate.
//
// Measures the forward, input-gradient and weight-gradient time of every layer, runs real
// pipelined steps (one thread per stage, ThreadComm) for P = 1, 2, 4 and each schedule, and
// prints the measured makespan (median over steps, from the measured timeline) next to what
// pp::simulate predicts from the per-stage costs, and the speed-up against one stage and against
// the theory M / (M + P - 1) · P. A benchmark: it prints numbers and asserts nothing.
// Used by scripts/bench_pipeline.sh.
#include "src/cli/commands.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include "kernels/cpu/gemm_reuse.hpp"
#include "pipeline_lab.hpp"
#include "src/cli/args.hpp"
#include "src/cli/train.hpp"
#include "src/comm.hpp"
#include "src/formats/io.hpp"
#include "src/stage.hpp"
#include "src/train_step.hpp"

namespace pt {

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Cost {   // µs of one micro-batch
    double f = 0, bi = 0, bw = 0;
    double total() const { return f + bi + bw; }
};

// Median over `reps` runs of each layer's F, BI and BW on micro-batch `mb` (after one warm-up).
std::vector<Cost> measure_layers(const ModelConfig& cfg, const MicroBatch& mb, const RunOptions& opt, int reps) {
    size_t act = size_t(mb.B) * mb.T * cfg.hidden_size;
    std::vector<float> x(act, 0.5f), dx(act), dout(act, 1e-3f);
    std::vector<Cost> costs;
    for (int i = 0; i < num_model_layers(cfg); i++) {
        std::unique_ptr<Layer> l = make_layer(cfg, i);
        l->init(1, 0.02f);
        bool first = i == 0, last = i == num_model_layers(cfg) - 1;
        std::vector<double> f, bi, bw;
        std::vector<float> out(l->out_numel(mb.B, mb.T));
        ops::ConstantWeights constant(weight_ranges({l.get()}), ops::Packings::freed);   // as train runs a step (train.hpp)
        for (int rep = 0; rep <= reps; rep++) {
            auto t0 = Clock::now();
            std::unique_ptr<Stash> s = l->forward(out.data(), first ? nullptr : x.data(), mb, opt);
            double t_f = us_since(t0);
            t0 = Clock::now();
            l->backward_input(first ? nullptr : dx.data(), last ? nullptr : dout.data(), *s, mb, opt);
            double t_bi = us_since(t0);
            t0 = Clock::now();
            l->backward_weight(*s, mb, opt);
            if (rep > 0) f.push_back(t_f), bi.push_back(t_bi), bw.push_back(us_since(t0));
        }
        costs.push_back({median(f), median(bi), median(bw)});
    }
    return costs;
}

// Half the round trip of one activation between two ThreadComm ranks: a transfer's cost here
// is mostly a thread hand-off, not the copy.
double measure_comm(size_t bytes, int reps) {
    pt::ThreadWorld world(2, 30.0);
    double us = 0;
    pt::run_ranks(world, [&](int rank) {
        pt::ThreadComm comm(world, rank);
        std::vector<char> buf(bytes);
        comm.barrier();
        auto t0 = Clock::now();
        for (int i = 0; i < reps; i++) {
            if (rank == 0) comm.send(buf.data(), bytes, 1, i), comm.recv(buf.data(), bytes, 1, i);
            else comm.recv(buf.data(), bytes, 0, i), comm.send(buf.data(), bytes, 0, i);
        }
        if (rank == 0) us = us_since(t0) / (2.0 * reps);
    });
    return us;
}

struct Measured {
    double makespan = 0, bubble = 0;   // medians over the timed steps
    std::vector<pp::Event> events;     // of the median step
};

// The slowest rank's median F, BI, BW durations in a measured run. A full B is split into BI and
// BW in the proportion of the isolated layer costs `iso` (simulate only uses their sum for B).
Cost in_run_cost(const std::vector<pp::Event>& events, int P, const Cost& iso) {
    Cost slowest;
    for (int r = 0; r < P; r++) {
        std::vector<double> d[4];
        for (const pp::Event& e : events)
            if (!e.comm && e.rank == r) d[int(e.action.op)].push_back(e.end - e.start);
        Cost c;
        c.f = median(d[int(pp::Op::F)]);
        double b = median(d[int(pp::Op::B)]);
        c.bi = d[int(pp::Op::B)].empty() ? median(d[int(pp::Op::BI)]) : b * iso.bi / (iso.bi + iso.bw);
        c.bw = d[int(pp::Op::B)].empty() ? median(d[int(pp::Op::BW)]) : b - c.bi;
        if (c.total() > slowest.total()) slowest = c;
    }
    return slowest;
}

// `steps` + 1 pipelined steps (the first warms up and is not counted); virtual stage s holds
// layers [bounds[s], bounds[s+1]), placed on the ranks as the schedule says. The makespan of a
// step is the latest event end over the ranks, whose clocks start together after a barrier. The
// steps go through train_step without the update: the optimizer costs the same on any split.
Measured run_pipeline(const ModelConfig& cfg, const pp::Schedule& schedule, int V, const std::vector<int>& bounds,
                      const Batch& batch, int M, const RunOptions& opt, int steps) {
    int P = int(schedule.size());
    std::vector<std::vector<std::vector<int>>> split = split_layers(bounds, pp::Layout{P, V, schedule.placement});
    std::vector<std::unique_ptr<TransformerStage>> stages;
    std::vector<std::unique_ptr<Optimizer>> optim;   // unused: no update
    for (int p = 0; p < P; p++) {
        stages.push_back(std::make_unique<TransformerStage>(cfg, split[p], Recompute::none, opt));
        for (Layer* l : stages.back()->layers()) l->init(1, 0.02f);
        optim.push_back(std::make_unique<Optimizer>(*stages.back()));
    }
    std::vector<std::vector<std::vector<pp::Event>>> timelines(steps + 1, std::vector<std::vector<pp::Event>>(P));
    std::vector<int> ranks(P);
    for (int p = 0; p < P; p++) ranks[p] = p;
    pt::ThreadWorld world(P, 120.0);
    pt::run_ranks(world, [&](int rank) {
        pt::ThreadComm comm(world, rank);
        pp::Pipeline pipe(schedule, V, *stages[rank], comm, rank, ranks, pp::plan_for(schedule, V));
        StepHooks hooks;
        std::optional<ops::ConstantWeights> constant;   // as train runs a step (train_run.cpp)
        hooks.start = [&] {
            if (M > 1) constant.emplace(weight_ranges(stages[rank]->layers()));
            comm.barrier();
            return Clock::now();
        };
        hooks.after_schedule = [&](double) { constant.reset(); };
        for (int step = 0; step <= steps; step++) {
            Update u;
            u.step = step, u.apply = false;
            train_step(pipe, comm, *stages[rank], *optim[rank], cfg, RankPlace{P, 1, rank, 0}, batch, M, u, hooks);
            timelines[step][rank] = pipe.timeline();
        }
    });
    std::vector<std::pair<double, int>> spans;
    std::vector<double> bubbles;
    for (int step = 1; step <= steps; step++) {
        std::vector<pp::Event> all;
        for (const auto& events : timelines[step]) all.insert(all.end(), events.begin(), events.end());
        double span = 0;
        bubbles.push_back(measured_bubble(all, P, &span));
        spans.push_back({span, step});
    }
    std::sort(spans.begin(), spans.end());
    Measured m;
    m.makespan = spans[spans.size() / 2].first;
    m.bubble = median(bubbles);
    for (const auto& events : timelines[spans[spans.size() / 2].second])
        m.events.insert(m.events.end(), events.begin(), events.end());
    return m;
}

// The chunks per rank of schedule `name`: the V shape's 2, `chunks` for the looped ones.
int chunks_of(const std::string& name, int chunks) {
    return takes_chunks(name) ? chunks : default_chunks(name);
}

}  // namespace

// --stages "1,2,4": each between 1 and the model's number of layers.
std::vector<int> parse_stage_counts(const std::string& text, const ModelConfig& cfg) {
    std::vector<int> stage_counts;
    for (const std::string& s : split(text, ',')) {
        int P = s.empty() || s.size() > 3 || s.find_first_not_of("0123456789") != std::string::npos ? 0 : std::stoi(s);
        if (P < 1 || P > num_model_layers(cfg))
            throw std::runtime_error("--stages: expected stage counts between 1 and " + std::to_string(num_model_layers(cfg)) +
                                     " (the model's layers), got \"" + s + "\"");
        stage_counts.push_back(P);
    }
    return stage_counts;
}

struct BenchRow {
    std::string schedule;
    int P;
    double measured, bubble, predicted, replayed;   // makespans in µs
};

// (2, 3) for P stages: the split, then each schedule's measured steps against pp::simulate.
void bench_stages(std::vector<BenchRow>& rows, const ModelConfig& cfg, const std::vector<Cost>& layer,
                  const std::vector<double>& totals, int P, int M, int chunks, double comm,
                  const std::vector<std::string>& schedules, const Batch& batch, const RunOptions& opt, int steps,
                  unsigned cores) {
    if (unsigned(P) > cores)
        std::printf("  %d stage threads on %u cores: oversubscribed, the measured steps are slower than predicted\n", P, cores);
    int shown = 0;   // the V whose split was printed last
    for (const std::string& name : P == 1 ? std::vector<std::string>{"1f1b"} : schedules) {
        int V = chunks_of(name, chunks), S = P * V;
        // Why it cannot run here: only the condition that fails (both conditions were printed).
        std::string why = S > int(totals.size()) ? "needs " + std::to_string(S) + " layers (has " + std::to_string(totals.size()) + ")"
                          : name == "dualpipev" && M < 2 * P ? "needs M >= 2P (M " + std::to_string(M) + ", P " + std::to_string(P) + ")"
                          : (name == "interleaved" || name == "interleaved-zb") && M % P != 0
                              ? "needs M a multiple of P (M " + std::to_string(M) + ", P " + std::to_string(P) + ")"
                              : "";
        if (!why.empty()) {
            std::printf("  %-14s skipped: %s\n", name.c_str(), why.c_str());
            continue;
        }
        std::vector<int> bounds = pp::partition(totals, S);
        std::vector<Cost> stage(S);   // simulate takes one cost per action: the slowest stage sets the pace
        Cost slowest;
        std::string layout;
        for (int v = 0; v < S; v++) {
            for (int l = bounds[v]; l < bounds[v + 1]; l++) stage[v].f += layer[l].f, stage[v].bi += layer[l].bi, stage[v].bw += layer[l].bw;
            if (stage[v].total() > slowest.total()) slowest = stage[v];
            char buf[64];
            std::snprintf(buf, sizeof buf, " [%d..%d] %.1f ms", bounds[v], bounds[v + 1] - 1, stage[v].total() / 1000);
            layout += buf;
        }
        if (V != shown) std::printf("P = %d, %d chunk(s) per rank: layers and cost per micro-batch of each virtual stage:%s\n", P, V, layout.c_str());
        shown = V;
        double c = P > 1 ? comm : 0.0;
        pp::Schedule schedule;
        if (name == "auto") {   // planned from each stage's own costs, at 1F1B's peak memory
            std::vector<pp::Costs> per_rank;
            for (const Cost& k : stage) per_rank.push_back({k.f, k.bi, k.bw, c});
            schedule = pp::auto_schedule(P, M, per_rank, std::vector<int>(P, P));
        } else {
            schedule = make_schedule(name, P, M, V);
        }
        Measured m = run_pipeline(cfg, schedule, V, bounds, batch, M, opt, steps);
        Cost run = in_run_cost(m.events, P, slowest);
        pp::SimResult predicted = pp::simulate(schedule, pp::Costs{slowest.f, slowest.bi, slowest.bw, c});
        pp::SimResult replayed = pp::simulate(schedule, pp::Costs{run.f, run.bi, run.bw, c});
        rows.push_back({P == 1 ? "(one stage)" : name, P, m.makespan, m.bubble, predicted.makespan, replayed.makespan});
        std::printf("  %-14s measured %.1f ms | predicted %.1f ms, ratio %.2f | replayed %.1f ms, ratio %.2f\n", name.c_str(),
                    m.makespan / 1000, predicted.makespan / 1000, m.makespan / predicted.makespan,
                    replayed.makespan / 1000, m.makespan / replayed.makespan);
        if (P == 2 && name == schedules.back()) std::printf("%s", pp::ascii_timeline(m.events, P, terminal_columns()).c_str());
    }
}

// (4) the speed-up against one stage, and the summary table (markdown, for the README).
void print_table(const std::vector<BenchRow>& rows, int M, unsigned cores) {
    double one = 0;
    for (const BenchRow& r : rows)
        if (r.P == 1) one = r.measured;
    std::printf("\n| schedule | P | M | measured ms | bubble | predicted ms | measured / predicted | replayed ms |"
                " measured / replayed | speed-up vs P=1 | M/(M+P-1)·P |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const BenchRow& r : rows) {
        char speedup[64] = "-";
        if (one > 0) std::snprintf(speedup, sizeof speedup, "%.2f%s", one / r.measured, unsigned(r.P) > cores ? " (oversubscribed)" : "");
        std::printf("| %s | %d | %d | %.1f | %.1f%% | %.1f | %.2f | %.1f | %.2f | %s | %.2f |\n", r.schedule.c_str(), r.P, M,
                    r.measured / 1000, 100 * r.bubble, r.predicted / 1000, r.measured / r.predicted, r.replayed / 1000,
                    r.measured / r.replayed, speedup, double(M) / (M + r.P - 1) * r.P);
    }
}

int bench_pipeline_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--preset", "--blocks", "--batch", "--seq", "--micro-batches", "--stages", "--schedules", "--chunks",
                  "--steps", "--reps"});
    ModelConfig cfg = for_flag("--preset", [&] { return ModelConfig::preset(a.str("--preset", "tiny")); });
    // More blocks than the preset's: P = 4 with two chunks per rank needs 8 virtual stages.
    cfg.num_hidden_layers = int(a.integer("--blocks", cfg.num_hidden_layers, 1, 1024));
    int chunks = int(a.integer("--chunks", 2, 1, pp::kMaxChunks));   // of interleaved, interleaved-zb, looped-bfs
    int B = int(a.integer("--batch", 16, 1, 4096)), T = int(a.integer("--seq", 64, 3, cfg.max_position_embeddings));
    int M = int(a.integer("--micro-batches", 8, 1, 1024));
    int steps = int(a.integer("--steps", 10, 1, 1000)), reps = int(a.integer("--reps", 5, 1, 1000));
    if (B % M != 0) throw std::runtime_error("--batch: " + std::to_string(B) + " is not divisible by --micro-batches " + std::to_string(M));
    std::vector<int> stage_counts = parse_stage_counts(a.str("--stages", "1,2,4"), cfg);
    std::vector<std::string> schedules = split(a.str("--schedules", "gpipe,1f1b"), ',');
    for (const std::string& s : schedules)
        if (s != "auto") make_schedule(s, 1, 2, chunks_of(s, chunks), "--schedules");   // a bad name fails before any measuring
    RunOptions opt;
    opt.seed = 1, opt.hidden_dropout = cfg.hidden_dropout_prob, opt.attention_dropout = cfg.attention_probs_dropout_prob;
    Batch batch = synthetic_batch(cfg, B, T);
    unsigned cores = std::thread::hardware_concurrency();
    std::printf("bench-pipeline: preset %s (%d blocks, hidden %d), batch %d × %d tokens in M = %d micro-batches, "
                "%d timed steps per run, %u cores\n\n", a.str("--preset", "tiny").c_str(), cfg.num_hidden_layers,
                cfg.hidden_size, B, T, M, steps, cores);

    // (1) per-layer costs on one micro-batch
    MicroBatch mb = batch.rows(0, B / M);
    mb.loss_scale = 1.0f / float(batch.num_targets());
    std::vector<Cost> layer = measure_layers(cfg, mb, opt, reps);
    double comm = measure_comm(size_t(B / M) * T * cfg.hidden_size * sizeof(float), 200);
    std::printf("(1) per-layer cost of one micro-batch (%d rows), median of %d, µs\n", B / M, reps);
    std::printf("layer          F       BI       BW\n");
    for (size_t i = 0; i < layer.size(); i++) {
        std::string name = i == 0 ? "embedding" : i + 1 == layer.size() ? "head" : "block " + std::to_string(i - 1);
        std::printf("%-9s %8.0f %8.0f %8.0f\n", name.c_str(), layer[i].f, layer[i].bi, layer[i].bw);
    }
    std::printf("transfer of one activation between two threads: %.0f µs\n\n", comm);

    // (2) + (3) real pipelined steps against the simulator
    std::vector<double> totals;
    for (const Cost& c : layer) totals.push_back(c.total());
    std::vector<BenchRow> rows;
    std::printf("(2, 3) measured steps (median of %d) against pp::simulate with the slowest stage's costs:\n"
                "  predicted = from the isolated layer costs above; replayed = from the action durations\n"
                "  measured in the same run (so it checks the schedule and transfer model alone)\n", steps);
    for (int P : stage_counts) {
        bench_stages(rows, cfg, layer, totals, P, M, chunks, comm, schedules, batch, opt, steps, cores);
    }

    // (4) speed-up against one stage, and the summary table (markdown, for the README)
    print_table(rows, M, cores);
    return 0;
}

}  // namespace pt
