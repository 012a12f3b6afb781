// src/cli/predict.cpp — `pipetrain schedule --predict`: one optimizer step of a shape this machine
// cannot run (P stages × D replicas of a real model on many nodes), predicted from a communication
// model and the model's arithmetic, in seconds (issue #33 §5). Every assumption is a flag, and the
// command prints them with the prediction:
//   compute   a layer's forward costs its FLOPs (layer_flops_per_token × rows × T) / --flops, its
//             input gradient (BI) and its weight gradient (BW) as much again each (a GEMM's two
//             backward products); or, with --measured, the layers timed here (as `train` times them),
//             on as many cores at once as the run has ranks (they share this machine's caches and memory);
//   links     rank d·P + p sits on node (d·P + p) / --ranks-per-node; a transfer between two ranks
//             costs latency + bytes / bandwidth of their link (--links: within a node, then across);
//             an activation of one micro-batch is rows × T × C × 4 bytes (2 with --dtype bf16);
//   pipeline  pp::simulate of the schedule with those costs; simulate charges a rank one transfer
//             cost for what it receives, so a rank gets the slower of its two pipeline links;
//   replicas  a rank's gradients (4 bytes a parameter) summed over the D replicas in a ring:
//             2(D-1)/D · bytes / bandwidth + 2(D-1) · latency, on the across link when the replicas
//             span nodes; with --dp-overlap 1 (as train) all of it but the last layer's share can hide
//             behind the rank's last backward, on devices that sum beside their compute (GPUs: NCCL
//             on a stream of its own). Not with --measured: its ranks are this machine's CPU cores,
//             each busy computing, and a sum's adds and copies take the core it would hide on (dp 2
//             on 2 cores: overlapped against not 0.99-1.01x on threads, processes and TCP alike);
//   tied      with P > 1, ranks 0 and P-1 swap their copies of the word embedding's gradient (vocab ×
//             hidden floats, both ways at once over their link) once the sums are done;
//   passes    with --measured, the memory-bound passes over a rank's parameters, at rates timed here
//             on 4M parameters out of the caches: the gradients zeroed before the step; the
//             micro-batches' gradient tree (src/model.cpp: ⌈M/2⌉ - 1 leaves zeroed, ⌈M/2⌉ - 1 adds)
//             in the BWs where each falls (most adds in the last: every rank's last backward is on
//             the critical path); after the sums, the gradient norm's sum of squares, the clip's
//             scaling (as where the norm exceeds --clip: early in training, at train's default 1)
//             and AdamW's update (1/D of the parameters with --zero 1);
//   memory    per rank: parameters, gradients and AdamW's two moments (16 bytes a parameter; the
//             moments 1/D of it with --zero 1) plus the schedule's peak stashes × one micro-batch's
//             stash of the rank's layers (measured here on one row, times the rows).
// Not modelled: the passes without --measured, the norm's all-reduce (a float64 a tensor), the tied
// copies' check (a hash of each), kernel launches, transfers that share a link and slow each other.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipeline_lab.hpp"
#include "src/pairwise.hpp"
#include "src/cli/args.hpp"
#include "src/cli/train.hpp"
#include "src/device.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/io.hpp"

namespace pt {

namespace {

struct Link {
    double latency = 0, bandwidth = 1;   // seconds, bytes per second
    double seconds(double bytes) const { return latency + bytes / bandwidth; }
};

struct Shape {
    int P = 1, D = 1, M = 1, V = 1, rows = 1, T = 64, per_node = 1;
    bool bf16 = false, zero = false, overlap = true;   // overlap: a replica sum may hide (--dp-overlap 1, not --measured)
    int timed_together = 1;   // --measured: the most copies of the layers timed at the same time (at_once)
    std::vector<double> copy_s;   // --measured: each copy's F + BI + BW of a micro-batch, seconds
    Link within, across;
    const Link& link(int a, int b) const { return a / per_node == b / per_node ? within : across; }
};

// --links W_US,W_GBPS,A_US,A_GBPS: latency (µs) and bandwidth (GB/s) within a node, then across nodes.
void read_links(const Args& a, Shape& s) {
    std::string text = a.str("--links", "5,100,10,12.5");
    std::vector<double> v = numbers(text, 1e9);
    if (v.size() != 4 || !(v[1] > 0 && v[3] > 0))
        throw std::runtime_error("--links: expected W_US,W_GBPS,A_US,A_GBPS: latency µs and bandwidth GB/s within a node, "
                                 "then across nodes (bandwidths above 0), got \"" + text + "\"");
    s.within = {v[0] * 1e-6, v[1] * 1e9}, s.across = {v[2] * 1e-6, v[3] * 1e9};
}

// With --measured the run's ranks are this machine's cores, all computing at once and sharing its
// caches and memory: so the layers and the passes are timed on as many threads at once as the run
// has ranks (at most the cores, and 8: each thread times a copy of its own); the layers are then the
// slowest copy's (slowest_costs), the passes' rates the copies' mean. dp 2 on 2 cores
// (PIPETRAIN_LEND=0, alternated in one window): each replica's forwards and backwards took 8-10%
// longer than one replica's alone, the other core idle. The two replicas' rows
// of scripts/bench_predict.sh (predicted / measured, the best runs): 0.86 and 0.86 with the layers
// timed alone; timed at once, in three runs, 0.94 and 0.93, 0.78 and 0.93, 0.99 and 0.94.
constexpr unsigned kMostCopies = 8;
int copies_at_once(const Shape& s) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    return int(std::min({unsigned(s.P * s.D), cores, kMostCopies}));
}
// `time` on n threads started together; `together` gets the most that ran it at the same time.
template <typename R>
std::vector<R> at_once(int n, const std::function<R()>& time, int& together) {
    std::vector<R> out(static_cast<size_t>(n));
    std::vector<std::exception_ptr> error(static_cast<size_t>(n));
    std::atomic<int> inside{0}, most{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < n; i++)
        threads.emplace_back([&, i] {
            for (int now = ++inside, seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
            }
            try {
                out[size_t(i)] = time();
            } catch (...) {
                error[size_t(i)] = std::current_exception();
            }
            --inside;
        });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : error)
        if (e) std::rethrow_exception(e);
    together = most.load();
    return out;
}
// The layers as the slowest of the copies timed at once: replicas wait for each other every step and
// a pipeline goes at its slowest stage's pace, so a run follows its slowest core. The mean of the
// copies, before: scripts/bench_predict.sh on the family-26 EPYC, dp 2 across the two namespaces,
// predicted / measured 0.78-0.92 in the 10 rounds; with the slowest, 0.82-0.97 (both sums' rows),
// the 2-stage pipelines 0.90-1.03 (0.92-0.99 before).
LayerCosts slowest_costs(const std::vector<LayerCosts>& each, std::vector<double>& copy_s) {
    copy_s.clear();
    for (const LayerCosts& c : each) copy_s.push_back(std::accumulate(c.cost.begin(), c.cost.end(), 0.0));
    return each[size_t(std::max_element(copy_s.begin(), copy_s.end()) - copy_s.begin())];
}

// Per layer, one micro-batch: forward, BI, BW seconds and the weights' and the stash's bytes.
// --measured times the layers at the run's rows, which measures their stashes too; otherwise one
// forward and backward of one row gives the stashes (linear in the rows) and the FLOPs the times.
LayerCosts layer_model(const ModelConfig& cfg, Shape& s, const Args& a) {
    bool measured = a.has("--measured");
    auto time = [&] { return layer_costs(cfg, "time", s.rows, s.T); };
    LayerCosts c = measured ? slowest_costs(at_once<LayerCosts>(copies_at_once(s), time, s.timed_together), s.copy_s)
                            : layer_costs(cfg, "memory", 1, s.T);   // weights: 16 bytes a parameter
    for (double& x : c.stash) x *= (measured ? 1 : s.rows) * (s.bf16 ? 0.5 : 1.0);
    c.by = "time";
    if (measured) return c;
    double rate = a.real("--flops", 1e11, 1e6);
    for (size_t l = 0; l < c.cost.size(); l++) {
        c.f[l] = c.bi[l] = c.bw[l] = layer_flops_per_token(cfg, int(l), s.T) * s.rows * s.T / rate;
        c.cost[l] = 3 * c.f[l];
    }
    return c;
}

// The ring all-reduce of `bytes` over rank p's D replicas: as slow as its slowest hop.
double replica_sum_seconds(const Shape& s, int p, double bytes) {
    if (s.D == 1) return 0;
    bool across = false;
    for (int d = 1; d < s.D; d++) across = across || &s.link(p, d * s.P + p) == &s.across;
    const Link& l = across ? s.across : s.within;
    return 2.0 * (s.D - 1) / s.D * bytes / l.bandwidth + 2.0 * (s.D - 1) * l.latency;
}

// The tied word embedding's gradient: ranks 0 and P-1 of each replica swap their copies.
double tied_sum_seconds(const ModelConfig& cfg, const Shape& s) {
    if (s.P == 1 || cfg.num_labels > 0) return 0;   // one rank holds both copies; a classifier ties none
    return s.link(0, s.P - 1).seconds(double(cfg.vocab_size) * cfg.hidden_size * 4);
}

// Seconds a parameter of the memory-bound passes on this machine (as train runs them), each the best
// of 3 on 4M parameters (linear in the parameters, so timed once for every rank). In a step the
// micro-batches' activations pass through the caches between two passes over a parameter, so each
// pass is timed on memory just pushed out of them: by a 256 MB write (64 MB did already on the Xeon,
// whose 480 MB L3 is shared; warm, the passes ran 1.3-2.4× faster than cold, and a step's ran slower
// still: AdamW 1.5, the sum of squares 1.2 ns a parameter against 1.2 and 1.2 cold, 0.9 and 0.6 warm).
struct PassRates {
    double zero = 0, add = 0, norm = 0, scale = 0, adamw = 0;
};
PassRates time_passes() {
    const int64_t n = 4'000'000;
    std::vector<float> p(n, 0.01f), m(n), v(n), g(n, 1e-3f), evict(64'000'000);
    auto best_of_3 = [&](const std::function<void(int)>& pass) {
        double best = 1e9;
        for (int k = 1; k <= 3; k++) {
            for (size_t i = 0; i < evict.size(); i += 16) evict[i] += 1.0f;   // a write to every 64-byte line
            auto t0 = std::chrono::steady_clock::now();
            pass(k);
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return best / double(n);
    };
    volatile double sink = 0;   // keeps the sum of squares from being optimized away
    PassRates r;
    r.zero = best_of_3([&](int) { std::fill(m.begin(), m.end(), 0.0f); });   // Array::zero on the CPU
    r.add = best_of_3([&](int) { dev::accumulate(v.data(), g.data(), int(n)); });
    r.norm = best_of_3([&](int) { sink += dev::sum_squares(g.data(), n); });
    r.scale = best_of_3([&](int) { dev::scale(g.data(), 0.999f, int(n)); });
    r.adamw = best_of_3([&](int k) { dev::adamw_update(p.data(), m.data(), v.data(), g.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, k); });
    return r;
}
PassRates mean_rates(const std::vector<PassRates>& each) {
    PassRates m;
    for (auto v : {&PassRates::zero, &PassRates::add, &PassRates::norm, &PassRates::scale, &PassRates::adamw})
        for (const PassRates& e : each) m.*v += e.*v / double(each.size());
    return m;
}

// The micro-batches' tree of one step, seconds a parameter in each micro-batch's BW, as
// Layer::backward_weight (src/model.cpp) builds it: a new leaf zeroed (an odd leaf is computed into
// its lone left neighbour; leaf 0 into the gradients, zeroed at the step's start), then the partial
// sums that merge (at the last leaf, all that are left: most of the adds, on the critical path).
std::vector<double> tree_per_leaf(const PassRates& rate, int M) {
    std::vector<double> leaf(size_t(M), 0.0);
    if (M < 2) return leaf;   // one micro-batch adds into the gradients directly
    int adds = 0;
    PairwiseSum<int> tree([&adds](int&, int&) { adds++; });
    for (int i = 0; i < M; i++) {
        adds = 0;
        bool zeroed = i > 0 && !tree.lone_last();
        tree.lone_last() ? tree.grow() : tree.push(0);
        if (i == M - 1) tree.finish();
        leaf[size_t(i)] = (zeroed ? rate.zero : 0) + adds * rate.add;
    }
    return leaf;
}

struct RankPrediction {
    double f = 0, bi = 0, bw = 0, comm = 0, sum = 0, hidden = 0, end = 0, weights = 0, stash = 0;
    double zeroing = 0, tree = 0, norm = 0, scale = 0, adamw = 0;   // the passes (--measured)
    int layers = 0, peak = 0;
};

// The step: the gradients' zeroing (each rank's, before its first action: rank 0's delays all, the
// others' hide while they wait for their first input), each rank's last action, plus the part of
// its replica sum that did not hide, then the norm, the clip's scaling and AdamW (after the norm's
// all-reduce: every rank waits for the slowest). Fills end, hidden, peak.
double step_seconds(const Shape& s, const pp::SimResult& sim, std::vector<RankPrediction>& rank) {
    double step = 0, after = 0, zeroing = 0;
    for (int p = 0; p < s.P; p++) {
        RankPrediction& r = rank[p];
        double last_backward = 0, first = 1e30;
        for (const pp::Event& e : sim.events)
            if (e.rank == p && !e.comm) {
                r.end = std::max(r.end, e.end), first = std::min(first, e.start);
                if (e.action.op != pp::Op::F) last_backward = e.end - e.start;
            }
        zeroing = std::max(zeroing, r.zeroing - first);
        // Overlapped, a layer's sum starts when its last BW ends: all but the last layer's hide.
        if (s.overlap && r.layers > 1) r.hidden = std::min(r.sum, last_backward * (r.layers - 1) / r.layers);
        r.peak = sim.peak_live[p];
        step = std::max(step, r.end + r.sum - r.hidden);
        after = std::max(after, r.norm + r.scale + r.adamw);
    }
    return zeroing + step + after;
}

std::string ms(double seconds) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4g", 1e3 * seconds);
    return b;
}

// ", as the slowest of 2 copies timed them (F + BI + BW of a micro-batch 61.2 ms; the other 58.3)", or
// nothing for one copy.
std::string slowest_said(const std::vector<double>& copy_s) {
    if (copy_s.size() < 2) return "";
    const auto most = std::max_element(copy_s.begin(), copy_s.end());
    std::string others;
    for (auto it = copy_s.begin(); it != copy_s.end(); ++it)
        if (it != most) others += (others.empty() ? "" : ", ") + ms(*it);
    return ", as the slowest of " + std::to_string(copy_s.size()) + " copies timed them (F + BI + BW of a micro-batch " +
           ms(*most) + " ms; the other" + (copy_s.size() > 2 ? "s " : " ") + others + ")";
}

void print_prediction(const ModelConfig& cfg, const Shape& s, const std::string& name, const pp::SimResult& sim,
                      const std::vector<RankPrediction>& rank, const PassRates& rate, double step, int B, const Args& a) {
    std::printf("predicted step: %d blocks (hidden %d, vocab %d), %s × %s, %s (V = %d), %s of %s × T %d, %s\n",
                cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size, count_of(s.P, "stage").c_str(),
                count_of(s.D, "replica").c_str(), name.c_str(), s.V, count_of(s.M, "micro-batch", "micro-batches").c_str(),
                count_of(s.rows, "row").c_str(), s.T, s.bf16 ? "bf16" : "fp32");
    std::printf("assumptions: compute %s; links within a node %g µs, %g GB/s, across %g µs, %g GB/s; %s a node (%s);"
                " --zero %d, --dp-overlap %d%s\n",
                a.has("--measured") ? ("as measured here (timed on " + count_of(s.timed_together, "core") + (s.timed_together > 1 ? " at once, as the run's ranks compute" : "") +
                                       "), the layers in a step's order" + slowest_said(s.copy_s) + ", and the passes over the parameters").c_str()
                                    : ("at " + a.str("--flops", "1e11") + " FLOP/s a device, BI = BW = F").c_str(),
                s.within.latency * 1e6, s.within.bandwidth / 1e9, s.across.latency * 1e6, s.across.bandwidth / 1e9,
                count_of(s.per_node, "rank").c_str(), count_of((s.P * s.D + s.per_node - 1) / s.per_node, "node").c_str(), s.zero,
                int(a.integer("--dp-overlap", 1, 0, 1)),
                a.has("--measured") && s.D > 1 ? " (CPU cores, each computing: no sum hides)" : "");
    double params = 0;   // the largest rank's
    for (const RankPrediction& r : rank) params = std::max(params, r.weights / 16);
    if (a.has("--measured"))
        std::printf("passes timed here, ns a parameter: zeroing %.4g, adding %.4g, sum of squares %.4g, scaling %.4g,"
                    " AdamW %.4g (the largest rank: %.0f parameters)\n", 1e9 * rate.zero, 1e9 * rate.add, 1e9 * rate.norm,
                    1e9 * rate.scale, 1e9 * rate.adamw, params);
    std::printf("rank  layers  F / BI / BW ms (a micro-batch)  transfer ms  replica sum ms (hidden)  weights+grads+moments"
                "  peak stashes × bytes  memory\n");
    double most = 0;
    for (int p = 0; p < s.P; p++) {
        const RankPrediction& r = rank[p];
        double state = s.zero ? r.weights * (8.0 + 8.0 / s.D) / 16 : r.weights, memory = state + r.peak * r.stash;
        most = std::max(most, memory);
        std::string times = ms(r.f) + " / " + ms(r.bi) + " / " + ms(r.bw), sum = ms(r.sum) + " (" + ms(r.hidden) + ")";
        std::printf("%4d  %6d  %30s  %11s  %23s  %21s  %8d × %9s  %6s\n", p, r.layers, times.c_str(), ms(r.comm).c_str(), sum.c_str(),
                    human_bytes(state).c_str(), r.peak, human_bytes(r.stash).c_str(), human_bytes(memory).c_str());
    }
    double zeroing = 0, tree = 0, norm = 0, scale = 0, adamw = 0;   // the rank that spends most on each
    for (const RankPrediction& r : rank)
        zeroing = std::max(zeroing, r.zeroing), tree = std::max(tree, r.tree), norm = std::max(norm, r.norm),
        scale = std::max(scale, r.scale), adamw = std::max(adamw, r.adamw);
    const std::string passes = a.has("--measured") ? "the norm " + ms(norm) + " ms, the clip's scaling " + ms(scale) +
                                                         " ms, AdamW " + ms(adamw) + " ms"
                                                   : "the norm and AdamW not modelled";
    std::printf("step %s ms (pipeline %s ms, %s; then the tied copies' sum %s ms, %s) | bubble %.1f%% | %.0f tok/s"
                " | memory per rank up to %s\n", ms(step).c_str(), ms(sim.makespan).c_str(),
                a.has("--measured") ? ("after the gradients' zeroing " + ms(zeroing) + " ms, its BWs holding the gradient tree's " +
                                       ms(tree) + " ms").c_str() : "the gradient tree not modelled",
                ms(tied_sum_seconds(cfg, s)).c_str(), passes.c_str(), 100 * sim.bubble, double(B) * s.T / step,
                human_bytes(most).c_str());
}

}  // namespace

int predict_main(const Args& a) {
    ModelConfig cfg = a.has("--model") ? load_model_config(a.str("--model"))
                                       : for_flag("--preset", [&] { return ModelConfig::preset(a.str("--preset", "ernie-3.0-base-zh")); });
    cfg.num_hidden_layers = int(a.integer("--blocks", cfg.num_hidden_layers, 1, 1024));
    Shape s;
    s.P = int(a.integer("--stages", 4, 1, 64)), s.D = int(a.integer("--dp", 1, 1, 64));
    s.M = int(a.integer("--micro-batches", 8, 1, 512));
    int B = int(a.integer("--batch", s.D * s.M, 1, 1 << 24));
    if (B % (s.D * s.M) != 0)
        throw std::runtime_error("--batch: " + std::to_string(B) + " rows do not split into --dp " + std::to_string(s.D) +
                                 " × --micro-batches " + std::to_string(s.M));
    s.rows = B / (s.D * s.M), s.T = int(a.integer("--seq", 512, 1, cfg.max_position_embeddings));
    s.per_node = int(a.integer("--ranks-per-node", s.P * s.D, 1, 1 << 20));
    const std::string dtype = a.str("--dtype", "fp32");
    if (dtype != "fp32" && dtype != "bf16") throw std::runtime_error("--dtype: expected fp32 or bf16, got \"" + dtype + "\"");
    s.bf16 = dtype == "bf16", s.zero = a.integer("--zero", 0, 0, 1) == 1;
    s.overlap = a.integer("--dp-overlap", 1, 0, 1) == 1 && !a.has("--measured");
    read_links(a, s);
    std::string name = a.str("--schedule", s.P == 1 ? "gpipe" : "1f1b");   // train's default
    if (name == "auto") throw std::runtime_error("--schedule auto: not with --predict (auto plans from costs measured in a run; name a schedule)");
    require_chunks(name, a.has("--chunks"));
    s.V = int(a.integer("--chunks", default_chunks(name), 1, pp::kMaxChunks));
    pp::Schedule schedule = make_schedule(name, s.P, s.M, s.V);
    LayerCosts c = layer_model(cfg, s, a);
    auto split = partition_layers(c, s.P, s.V, schedule.placement);

    double message = double(s.rows) * s.T * cfg.hidden_size * (s.bf16 ? 2 : 4);
    std::vector<RankPrediction> rank(s.P);
    int passes_together = 1;
    const PassRates rate = a.has("--measured") ? mean_rates(at_once<PassRates>(copies_at_once(s), time_passes, passes_together))
                                               : PassRates{};   // else not modelled
    s.timed_together = std::min(s.timed_together, passes_together);
    std::vector<pp::Costs> costs(s.P);
    for (int p = 0; p < s.P; p++) {
        RankPrediction& r = rank[p];
        for (const auto& chunk : split[p])
            for (int l : chunk) r.f += c.f[l], r.bi += c.bi[l], r.bw += c.bw[l], r.weights += c.weights[l], r.layers++;
        for (const auto& chunk : split[p]) {   // the largest chunk's stash bounds each of the rank's
            double bytes = 0;
            for (int l : chunk) bytes += c.stash[l];
            r.stash = std::max(r.stash, bytes);
        }
        // Replica 0's ranks: the others are the same shifted by d·P, on their own nodes or not alike.
        for (int q : {p - 1, p + 1})
            if (q >= 0 && q < s.P) r.comm = std::max(r.comm, s.link(p, q).seconds(message));
        if (s.V == 2) r.comm = std::max(r.comm, s.link(p, s.P - 1 - p).seconds(message));   // the V turns at the last rank
        const double params = r.weights / 16;   // 16 bytes a parameter
        r.zeroing = rate.zero * params, r.norm = rate.norm * params, r.scale = rate.scale * params;
        r.adamw = rate.adamw * params / (s.zero ? s.D : 1);
        costs[p] = {r.f / s.V, r.bi / s.V, r.bw / s.V, r.comm};
        for (double leaf : tree_per_leaf(rate, s.M))   // each chunk's layers sum a tree of their own
            costs[p].bw_extra.push_back(leaf * params / s.V), r.tree += leaf * params;
        r.sum = replica_sum_seconds(s, p, params * 4);
    }
    pp::SimResult sim = pp::simulate(schedule, costs, s.V);
    double step = step_seconds(s, sim, rank) + tied_sum_seconds(cfg, s);
    print_prediction(cfg, s, name, sim, rank, rate, step, B, a);
    return 0;
}

}  // namespace pt
