// src/cli/train_plan.cpp — layer costs, the partition of the layers, the schedule (auto too),
// the transport.
#include "src/cli/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "kernels/cpu/gemm_reuse.hpp"
#include "pipeline_lab.hpp"
#include "src/cli/args.hpp"
#include "src/cli/schedule_csv.hpp"
#include "src/comm.hpp"
#include "src/device.hpp"
#include "src/mpi_comm.hpp"
#ifdef PIPETRAIN_NCCL
#include "src/nccl_comm.hpp"
#endif

namespace pt {

namespace {

// The time of one activation's copy (best of 3): auto's transfer cost.
double copy_seconds(size_t activation) {
    std::vector<float> from(activation, 1.0f), to(activation);
    double copy = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        auto t0 = Clock::now();
        std::memcpy(to.data(), from.data(), activation * sizeof(float));
        copy = std::min(copy, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return copy;
}

// Each rank's F, BI, BW per action (seconds, measured alone): its layers' sums, a chunk 1/V of them.
std::vector<pp::Costs> stage_costs(const std::vector<std::vector<std::vector<int>>>& split, const LayerCosts& times) {
    std::vector<pp::Costs> costs(split.size(), pp::Costs{0, 0, 0, 0});
    for (size_t p = 0; p < split.size(); p++) {
        for (const std::vector<int>& chunk : split[p])
            for (int l : chunk) costs[p].f += times.f[l], costs[p].bi += times.bi[l], costs[p].bw += times.bw[l];
        double V = double(split[p].size());
        costs[p].f /= V, costs[p].bi /= V, costs[p].bw /= V;
    }
    return costs;
}

// --schedule-file F.csv (PyTorch's schedule CSV, at --stages and --micro-batches) or --schedule NAME
// into w.schedule, w.V and w.schedule_name; true for auto, which plan_auto plans later.
bool choose_schedule(TrainRun& w, Args& a) {
    if (a.has("--schedule-file")) {
        if (a.has("--schedule")) throw std::runtime_error("--schedule-file: not with --schedule (the file is the schedule)");
        if (a.has("--memory-cap")) throw std::runtime_error("--memory-cap: only with --schedule auto");
        CsvSchedule file = read_schedule_csv(a.str("--schedule-file"),
                                             {w.P, w.M, int(a.integer("--chunks", 0, 1, pp::kMaxChunks)), ""});
        w.schedule = file.schedule, w.V = file.V;
        w.schedule_name = a.str("--schedule-file");
        return false;
    }
    w.schedule_name = a.str("--schedule", w.P == 1 ? "gpipe" : "1f1b");
    bool planned = w.schedule_name == "auto";   // from the measured costs, in plan_pipeline
    require_chunks(w.schedule_name, a.has("--chunks"));
    w.V = int(a.integer("--chunks", default_chunks(w.schedule_name), 1, pp::kMaxChunks));
    if (planned && w.V != 1) throw std::runtime_error("--chunks: the auto schedule plans one chunk per rank");
    if (a.has("--memory-cap") && !planned) throw std::runtime_error("--memory-cap: only with --schedule auto");
    if (!planned) w.schedule = make_schedule(w.schedule_name, w.P, w.M, w.V);
    return planned;
}

// One placement as auto sees it: each rank's costs per chunk, the bytes of its largest chunk's
// stash, and its cap in such stashes: --memory-cap bytes, or by default 1F1B's peak (P stages'
// worth: P stashes of one chunk per rank, 2P of the V shape's half-stage chunks).
struct AutoPlacement {
    std::vector<std::vector<std::vector<int>>> split;
    std::vector<pp::Costs> costs;
    std::vector<double> stash;
    std::vector<int> cap;
};

AutoPlacement auto_placement(const TrainRun& w, std::vector<std::vector<std::vector<int>>> split, const LayerCosts& times,
                             Args& a, double copy) {
    std::vector<pp::Costs> costs = stage_costs(split, times);
    AutoPlacement at{std::move(split), costs, std::vector<double>(w.P, 0.0), {}};
    int V = int(at.split[0].size());
    for (int p = 0; p < w.P; p++) {
        at.costs[p].comm = copy;
        for (const std::vector<int>& chunk : at.split[p]) {
            double bytes = 0;
            for (int l : chunk) bytes += times.stash[l];
            at.stash[p] = std::max(at.stash[p], bytes);
        }
        double cap = a.has("--memory-cap") ? std::floor(a.real("--memory-cap", 0, 1) / std::max(at.stash[p], 1.0)) : V * w.P;
        at.cap.push_back(int(std::min<double>(V * w.M, cap)));
    }
    return at;
}

// --schedule auto: each stage's F, BI, BW (the sums of its layers' measured times) and the time
// of one activation's copy plan a zero-bubble schedule whose stash fits --memory-cap bytes per
// stage (default: 1F1B's peak, P micro-batches), or V-Half or V-Min on the V placement where they
// fit and are faster (they need 2P layers). Sets w.schedule, and w.V and w.split for a V shape;
// the plan and its prediction go to the banner.
void plan_auto(TrainRun& w, const LayerCosts& costs, const LayerCosts& times, Args& a, size_t activation) {
    double copy = copy_seconds(activation);
    AutoPlacement loop = auto_placement(w, w.split, times, a, copy);
    for (int p = 0; p < w.P; p++)
        if (loop.cap[p] < 1)
            throw std::runtime_error("--memory-cap: " + human_bytes(a.real("--memory-cap", 0, 1)) + " holds no stash of stage " +
                                     std::to_string(p) + " (one micro-batch leaves " + human_bytes(loop.stash[p]) + ")");
    bool vee_fits = 2 * w.P <= int(costs.cost.size()) && costs.by != "memory";   // --partition memory balances 1F1B
    AutoPlacement vee = vee_fits ? auto_placement(w, partition_layers(costs, w.P, 2, pp::Placement::vee), times, a, copy)
                                 : AutoPlacement{{}, loop.costs, {}, std::vector<int>(w.P, 0)};
    w.schedule = pp::auto_schedule(w.P, w.M, loop.costs, loop.cap, vee.costs, vee.cap);
    const AutoPlacement& at = w.schedule.placement == pp::Placement::vee ? vee : loop;
    w.V = int(at.split[0].size()), w.split = at.split;
    pp::SimResult r = pp::simulate(w.schedule, at.costs);
    char line[256];
    std::snprintf(line, sizeof line, "auto: planned from measured costs: predicted step %.1f ms, bubble %.1f%%; peak stash per stage",
                  1e3 * r.makespan, 100 * r.bubble);
    w.plan_note = line;
    for (int p = 0; p < w.P; p++)   // a V shape's: (micro-batch, chunk) stashes, bytes at most those of its largest chunk
        w.plan_note += " " + std::to_string(r.peak_live[p]) + " (" + human_bytes(r.peak_live[p] * at.stash[p]) + ", cap " +
                       std::to_string(at.cap[p]) + ")";
    if (w.V == 2) w.plan_note += std::string("; picked ") + (w.schedule == pp::v_min(w.P, w.M) ? "v-min" : "v-half") + " (V placement)";
}

}  // namespace

// chunk_layers[rank][chunk] = layer indices; which rank and chunk hold virtual stage s is the
// schedule's placement.
std::vector<std::vector<std::vector<int>>> partition_layers(const LayerCosts& costs, int P, int V,
                                                           pp::Placement placement) {
    int S = P * V, L = int(costs.cost.size());
    if (S > L)
        throw std::runtime_error("--stages: " + count_of(P, "stage") + " × " + count_of(V, "chunk") + " need at least " +
                                 count_of(S, "layer") + ", the model has " + std::to_string(L) + " (embedding, " +
                                 count_of(L - 2, "block") + ", head): use --stages " + std::to_string(L / V) +
                                 " or fewer" + (V > 1 ? ", fewer --chunks" : "") +
                                 ", or a model with more blocks (--blocks N with a preset; --preset small has 8 layers)");
    if (costs.by == "memory" && V > 1)
        throw std::runtime_error("--partition memory: balances 1F1B's in-flight stashes, not those of --chunks > 1");
    const pp::Layout layout{P, V, placement};
    std::vector<int> bounds = costs.by == "memory" ? pp::partition_memory(costs.weights, costs.cost, P)
                                                   : pp::partition_ranks(costs.cost, layout);
    return split_layers(bounds, layout);
}

namespace {
// The blocks are one computation on the same shapes, so each gets the blocks' mean times: the
// timing noise (±10% here) no longer picks among splits that tie, and a split no longer moves from
// run to run (2 V-shaped stages of `small`: 3 different splits in 4 runs, steps 1.1-1.3x apart).
// The mean keeps their sum, which `schedule --predict --measured` adds up (the fastest of 6 made
// its steps 2% shorter).
void same_blocks(LayerCosts& c) {
    const int L = int(c.f.size());   // the embedding, the blocks, the head
    if (L < 3) return;
    for (std::vector<double>* v : {&c.f, &c.bi, &c.bw})
        std::fill(v->begin() + 1, v->end() - 1, std::accumulate(v->begin() + 1, v->end() - 1, 0.0) / (L - 2));
}
// One pass of a step's order: every layer's forward, then from the last layer back every layer's
// BI and BW, each timed. A layer timed alone, forward and backward back to back,
// finds its weights and stash still in the core's cache; in a step other layers have run in between
// (`small`, 8 micro-batches of 2 rows on 1 thread: timed alone 628 ms of layers, in this order 751,
// the run's compute 788).
void time_step_order(LayerCosts& costs, const std::vector<std::unique_ptr<Layer>>& layers, const MicroBatch& mb,
                     const RunOptions& opt, const float* x, float* dx, const float* dout) {
    const int L = int(layers.size());
    auto seconds = [](Clock::time_point t0) {
        synchronize();
        return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    std::vector<Buf> outs(L);
    std::vector<std::unique_ptr<Stash>> stashes(L);
    for (int i = 0; i < L; i++) {
        auto t0 = Clock::now();
        outs[i] = Buf(layers[i]->out_numel(mb.B, mb.T));
        stashes[i] = layers[i]->forward(outs[i].data(), i == 0 ? nullptr : x, mb, opt);
        costs.f[i] = seconds(t0);
        costs.stash[i] = double(stashes[i]->bytes());
    }
    for (int i = L - 1; i >= 0; i--) {
        auto t0 = Clock::now();
        layers[i]->backward_input(i == 0 ? nullptr : dx, dout, *stashes[i], mb, opt);
        costs.bi[i] = seconds(t0);
        t0 = Clock::now();
        layers[i]->backward_weight(*stashes[i], mb, opt);
        costs.bw[i] = seconds(t0);
    }
}

// Forward + backward of `layers` (made on this thread's device) on a random micro-batch of B×T,
// in a step's order: each piece's median of 3 (time), one forward's stash (memory).
LayerCosts run_layers(const ModelConfig& cfg, const std::string& by, const std::vector<std::unique_ptr<Layer>>& layers,
                      int B, int T) {
    const int L = int(layers.size());
    Batch b = synthetic_batch(cfg, B, T);
    MicroBatch mb = b.rows(0, B);
    mb.loss_scale = 1.0f / float(b.num_targets());
    Array<int32_t> ids, types, mask;
    ids.assign(b.input_ids), types.assign(b.token_type_ids), mask.assign(b.attention_mask);
    mb.dev = {ids.data(), types.data(), nullptr, mask.data()};
    RunOptions opt;
    size_t NC = size_t(B) * T * cfg.hidden_size;
    Buf x, dx(NC), dout;
    x.assign(std::vector<float>(NC, 0.5f)), dout.assign(std::vector<float>(NC, 1e-3f));
    LayerCosts costs{by, {}, {}, {}, {}, {}, {}};
    costs.f = costs.bi = costs.bw = costs.stash = std::vector<double>(L, 0.0);
    // Each piece: the median of 3, after one untimed pass (its first calls allocate and fault memory
    // in, and pack the weights, which the timed passes read packed, as a step of M > 1 does). Not
    // the least of 3: a run's layers take their usual time, which the least undercut by 1-2%
    // (`small`, 2 stages: `schedule --predict --measured` against the run's trace).
    std::vector<LayerCosts> reps;
    std::vector<Layer*> timed;
    for (auto& l : layers) timed.push_back(l.get());
    ops::ConstantWeights constant(by == "time" ? weight_ranges(timed) : std::vector<std::pair<const void*, size_t>>{},
                                  ops::Packings::freed);
    for (int rep = by == "time" ? -1 : 0; rep < (by == "time" ? 3 : 1); rep++) {
        time_step_order(costs, layers, mb, opt, x.data(), dx.data(), dout.data());
        if (rep >= 0) reps.push_back(costs);
    }
    for (int i = 0; i < L; i++)
        for (std::vector<double> LayerCosts::*v : {&LayerCosts::f, &LayerCosts::bi, &LayerCosts::bw}) {
            std::vector<double> t;
            for (const LayerCosts& r : reps) t.push_back((r.*v)[i]);
            std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
            (costs.*v)[i] = t[t.size() / 2];
        }
    return costs;
}
}  // namespace

// Per-layer cost for partitioning: "params" (parameter count), "time" (measured forward +
// backward on one micro-batch of B×T), "memory" (bytes, as LayerCosts says) or "uniform".
// The blocks are alike, so not all are built: "memory" and "params" build one layer of each kind
// (the embedding, block 1, the head), whose numbers every block shares (`schedule --predict` of
// ERNIE-base with 64 blocks ran all of them, 37 s and 6.9 GB). "time" runs the embedding, up to
// kTimedBlocks blocks and the head in a step's order, as the caches see them in a step, and every
// block gets the timed blocks' mean (as same_blocks gives them when all are timed). 6: `small`'s
// six are all timed, as before (4 of them ran 3% faster than in the whole model: their memory
// stays nearer in cache); ERNIE-base's 12 blocks timed 4 at a time were within 1% of all 12.
constexpr int kTimedBlocks = 6;
LayerCosts layer_costs(const ModelConfig& cfg, const std::string& by, int B, int T, Device device, bool check_only) {
    int L = num_model_layers(cfg);
    if (by != "time" && by != "params" && by != "memory" && by != "uniform")
        throw std::runtime_error("--partition/--by: expected time, params, memory or uniform, got \"" + by + "\"");
    LayerCosts costs{by, std::vector<double>(L, 1.0), std::vector<double>(L, 0.0), {}, {}, {}, {}};
    costs.f = costs.bi = costs.bw = std::vector<double>(L, 1.0);   // replaced where measured
    if (by == "uniform" || check_only) return costs;
    if (by != "params" && T > cfg.max_position_embeddings)   // the layers are run on a B x T batch
        throw std::runtime_error("--seq: " + std::to_string(T) + " exceeds the model's max_position_embeddings " +
                                 std::to_string(cfg.max_position_embeddings));
    std::vector<int> slot(L);   // layer i's costs are those of layers[slot[i]]
    std::vector<std::unique_ptr<Layer>> layers;
    Device caller = current_device();
    if (by != "params") set_device(device);   // made and run on the device the run will use
    const int built_blocks = by == "time" ? std::min(cfg.num_hidden_layers, kTimedBlocks) : 1;
    for (int i = 0; i < L; i++) {
        if (i > built_blocks && i <= cfg.num_hidden_layers) {
            slot[i] = 1;   // block 1 stands for every block (for "time", with the timed blocks' mean)
            continue;
        }
        slot[i] = int(layers.size());
        layers.push_back(make_layer(cfg, i));
        if (by != "params") layers.back()->init(1, 0.02f);
    }
    LayerCosts run = by == "params" ? costs : run_layers(cfg, by, layers, B, T);
    if (by == "time") same_blocks(run);   // the timed blocks' mean, in block 1's place
    set_device(caller);
    costs.stash = std::vector<double>(L, 0.0);
    for (int i = 0; i < L; i++) {
        const int k = slot[i];
        const double params = double(layers[k]->params.size());
        costs.weights[i] = 4.0 * sizeof(float) * params;   // parameter, gradient, two AdamW moments
        if (by == "params") {
            costs.cost[i] = params;
            continue;
        }
        costs.f[i] = run.f[k], costs.bi[i] = run.bi[k], costs.bw[i] = run.bw[k], costs.stash[i] = run.stash[k];
        costs.cost[i] = by == "memory" ? costs.stash[i] : costs.f[i] + costs.bi[i] + costs.bw[i];
    }
    return costs;
}

// The schedule, the devices, the split of the layers over the ranks, and how the layers run.
void plan_pipeline(TrainRun& w, const Setup& s, Args& a) {
    w.recompute = for_flag("--recompute", [&] { return parse_recompute(a.str("--recompute", "none")); });
    bool planned = choose_schedule(w, a);
    bool dry = a.has("--dry-run");   // plans on this machine's CPU: a GPU line can be checked without one
    w.device = parse_device(a.str("--device", "cpu"), !dry);
    w.gpus = w.device.cuda && !dry ? cuda_device_count() : 0;   // a CPU run never opens the CUDA driver
    int rows = s.B / (w.D * w.M);
    Device measure_on = dry ? Device{} : w.device;
    // Balanced stages need measured time: parameters say little of the attention's or the loss's
    // cost. One stage has nothing to split and no bubble to simulate, so its layers are not timed
    // (a forward and backward of the whole model 4 times: 3 of the 4.7 s of `small`'s 1-step run).
    LayerCosts costs = layer_costs(s.cfg, a.str("--partition", "time"), rows, s.T, measure_on, /*check_only=*/w.P == 1);
    // The times of another --partition serve auto's plan and the end of a run's simulated bubble:
    // a dry run of a fixed schedule has neither (ERNIE-base, 2 stages: 16 s of a 16 s --dry-run).
    LayerCosts times = costs.by == "time" || w.P == 1 || (dry && !planned)
                           ? costs
                           : layer_costs(s.cfg, "time", rows, s.T, measure_on);
#ifdef PIPETRAIN_MPI
    // Measured times differ from process to process: every rank takes rank 0's, so all split and plan alike.
    if (w.mpi)
        for (LayerCosts* c : {&costs, &times})
            for (std::vector<double>* v : {&c->cost, &c->f, &c->bi, &c->bw, &c->stash})
                if (!v->empty()) w.mpi->broadcast(v->data(), v->size() * sizeof(double), 0);
#endif
    w.split = partition_layers(costs, w.P, w.V, planned ? pp::Placement::loop : w.schedule.placement);
    if (planned) plan_auto(w, costs, times, a, size_t(rows) * s.T * s.cfg.hidden_size);   // may pick a V shape
    w.stage_costs = stage_costs(w.split, times);
    w.owner.assign(num_model_layers(s.cfg), 0);
    for (int p = 0; p < w.P; p++)
        for (const auto& chunk : w.split[p])
            for (int l : chunk) w.owner[l] = p;

    w.dtype = a.str("--dtype", "fp32");
    if (w.dtype != "fp32" && w.dtype != "bf16") throw std::runtime_error("--dtype: expected fp32 or bf16, got \"" + w.dtype + "\"");
    w.run_opt.train = true, w.run_opt.causal = s.objective == Objective::causal, w.run_opt.seed = s.seed;
    w.run_opt.bf16 = w.dtype == "bf16";
    w.run_opt.hidden_dropout = s.cfg.hidden_dropout_prob, w.run_opt.attention_dropout = s.cfg.attention_probs_dropout_prob;
}

// Which transport carries the ranks' messages (w.comm: thread, nccl or mpi).
void choose_comm(TrainRun& w) {
    // Ranks on different GPUs talk through NCCL; the CPU, and stages that share a GPU, through
    // ThreadComm (host copies, or device-to-device copies on a GPU). Processes talk through MPI:
    // NCCL bootstrapped over MPI when every rank of a node has a GPU of its own (--comm auto or
    // nccl), else MpiComm, whose messages from GPU memory go through host memory (--comm mpi).
    int R = w.P * w.D, ranks_here = R;   // the ranks that share this machine's GPUs
#ifdef PIPETRAIN_MPI
    if (w.mpi) ranks_here = w.mpi->local_size();
#endif
    bool nccl_possible = w.device.cuda && R > 1 && ranks_here <= w.gpus;
    // libnccl is opened (dlopen) only when the run asks for it or could use it: a CPU run never
    // maps its 200 MB, and a missing NCCL is an error for --comm nccl alone.
    std::string no_nccl = "this build has no NCCL";
    bool nccl_loads = false;
#ifdef PIPETRAIN_NCCL
    if (w.comm == "nccl" || (w.comm == "auto" && nccl_possible)) nccl_loads = pt::nccl_available(&no_nccl);
#endif
    if (w.comm == "nccl" && !nccl_loads) throw std::runtime_error("--comm nccl: " + no_nccl);
    if (w.comm == "auto" && nccl_possible && !nccl_loads && w.root)
        std::fprintf(stderr, "pipetrain train: note: --comm auto uses the %s communicator, NCCL is unavailable: %s\n",
                     w.mpi ? "MPI" : "thread", no_nccl.c_str());
    if (w.comm == "auto") w.comm = nccl_possible && nccl_loads ? "nccl" : w.mpi ? "mpi" : "thread";
    if (w.comm == "nccl" && !nccl_possible)
        throw std::runtime_error("--comm nccl: needs --device cuda and one GPU per rank (" + std::to_string(ranks_here) +
                                  " ranks" + (w.mpi ? " on this machine, " : ", ") + std::to_string(w.gpus) + " GPUs)");
}

}  // namespace pt
