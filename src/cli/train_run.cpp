// src/cli/train_run.cpp — the ranks' run loop: each step through train_step, its line, the
// evaluations and checkpoints between steps.
#include "src/cli/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>

#include "kernels/cpu/gemm_reuse.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/ops.hpp"
#include "pipeline_lab.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/comm.hpp"
#include "src/device.hpp"
#ifdef PIPETRAIN_NCCL
#include "src/nccl_comm.hpp"
#endif
#include "src/cli/interrupt.hpp"
#include "src/mpi_comm.hpp"
#include "src/formats/safetensors.hpp"
#include "src/stage.hpp"
#include "src/step.hpp"
#include "src/tags.hpp"
#include "src/train_step.hpp"
#include "src/watchdog.hpp"

namespace pt {

namespace {

std::string human_time(double s) {
    char buf[32];
    if (s >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
    else std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(s) % 60);
    return buf;
}

// Learning rate: linear warm-up, then cosine decay to 10% of the peak.
double lr_at(int step, int steps, int warmup, double lr) {
    if (step < warmup) return lr * (step + 1) / warmup;
    double progress = steps > warmup ? double(step - warmup) / (steps - warmup) : 1.0;
    return lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * std::min(1.0, progress))));
}

constexpr int kSlots = 10;   // per rank in the step's reduction (step_slots)

// Rank 0: the step line, from the numbers every rank put in its slots of the step's reduction.
void print_step(TrainRun& w, int step, double loss, float lr, double norm, const std::vector<double>& slots, double elapsed) {
    const Setup& s = *w.setup;
    double busy = 0, worst_span = 0;
    std::string stash;
    w.record = StepRecord{step + 1, loss, lr, norm, 0, 0, {}};
    w.least_busy_us.resize(size_t(w.P), 1e300);
    for (int p = 0; p < w.P; p++) {   // replica 0: slots[1 + kSlots r ..], see step_slots
        const double* k = &slots[1 + kSlots * p];
        busy += k[0], worst_span = std::max(worst_span, k[1]), w.least_busy_us[p] = std::min(w.least_busy_us[p], k[0]);
        w.peak_stash[p] = k[2], w.peak_stashes[p] = int(k[3]), w.packed_weights[p] = k[8];
        stash += (p ? "/" : "") + human_bytes(w.peak_stash[p]);
        w.record.ranks.push_back(RankStep{k[0], k[1], k[4], k[5], k[6], k[2], k[3], k[7], k[9]});
    }
    double bubble = bubble_fraction(busy, w.P, worst_span);
    double tok_s = double(step + 1 - w.start_step) * s.B * s.T / std::max(elapsed, 1e-9);
    w.record.tok_per_s = tok_s, w.record.bubble = bubble;
    std::printf("step %d/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | bubble %.1f%% | stash %s | ETA %s\n",
                step + 1, w.steps, loss, lr, norm, tok_s, 100 * bubble, stash.c_str(),
                human_time(elapsed / (step + 1 - w.start_step) * (w.steps - step - 1)).c_str());
}

// ZeRO-1: a replica holds summed only the gradients of the tensors it updates. For --dump-grads each
// owner sends its sums to replica 0's rank of the same stage, over replica 0's unsummed copies, which
// nothing reads after the sum (the norm and AdamW read the owner's): the dump was of replica 0's own.
void owners_sums_to_replica_0(TrainRun& w, pp::Comm& comm, int rank) {
    const RankPlace at = w.place(rank);
    if (!at.zero || at.D == 1) return;
    TransformerStage& stage = *w.stages[rank];
    const std::vector<std::vector<int>> owner = zero_owners(stage, at);
    const std::vector<int> group = at.data_parallel_group();
    const std::vector<Layer*> layers = stage.layers();
    std::vector<pp::P2POp> ops;
    for (size_t li = 0; li < layers.size(); li++)
        for (size_t i = 0; i < layers[li]->params_info.size(); i++) {
            const ParamInfo& pi = layers[li]->params_info[i];
            const int o = owner[li][i];
            float* g = layers[li]->grads.data() + pi.offset;   // (numel)
            if (o > 0 && (at.d == o || at.d == 0))
                ops.push_back({at.d == o, g, pi.numel * sizeof(float), group[at.d == o ? 0 : o], kTagZeroDump});
        }
    comm.group(ops);
}

// --dump-grads: step 1's summed gradients, before clipping, which rank 0 writes at the end.
void dump_gradients(TrainRun& w, pp::Comm& comm, int rank) {
    owners_sums_to_replica_0(w, comm, rank);
    comm.barrier();   // every rank's data-parallel sum is done: rank 0 may read its process's ranks
    std::vector<std::unique_ptr<Layer>> held;
    for (Layer* l : gather_replica(w, comm, rank, true, held)) {
        std::vector<float> g = l->grads.host();
        for (const ParamInfo& pi : l->params_info)
            if (!pi.tied) w.grads_dump.add_f32(pi.name, pi.shape, g.data() + pi.offset);
    }
    comm.barrier();   // rank 0 may read the gradients of its process's ranks: before they are clipped
}

// --eval-every: replica 0's layers, gathered to rank 0, on the held-out batches, after `step` steps.
void evaluate_during_run(TrainRun& w, pp::Comm& comm, int rank, Device mine, int step) {
    const Setup& s = *w.setup;
    std::vector<std::unique_ptr<Layer>> held;
    std::vector<Layer*> layers = gather_replica(w, comm, rank, false, held);
    if (rank != 0) return;
    set_device(Device{});
    EvalResult ev = evaluate(layers, s.eval, s.objective == Objective::causal);
    if (ev.targets > 0 && !std::isfinite(ev.loss()))
        throw std::runtime_error("step " + std::to_string(step) + ": the eval loss is not finite: the model diverged "
                                 "(lower --lr); nothing saved after the last checkpoint");
    if (ev.targets == 0) std::printf("  %s\n", ev.summary(false).c_str());
    else if (s.cfg.num_labels > 0) std::printf("  eval | loss %.4f | accuracy %.4f\n", ev.loss(), ev.accuracy());
    else std::printf("  eval | loss %.4f | ppl %.2f\n", ev.loss(), std::exp(ev.loss()));
    log_eval(w, ev);
    std::printf("  last step, per rank:\n%s", rank_time_report(w.record.ranks).c_str());
    set_device(mine, rank);
}

// The global batch of a step: labeled rows, the fixed --inputs batch, or masked corpus rows.
Batch batch_of_step(const Setup& s, int step) {
    if (!s.examples.empty()) return make_classify_batch(s.examples, step, s.B, s.special.pad, s.seed);
    if (s.train.empty()) return s.fixed;
    return make_batch(s.train, step, s.B, s.objective, s.special, s.seed);
}

// slots[0]: the ranks' signals, summed (a SIGINT counts 1, a SIGTERM this much: more than ranks).
constexpr double kTermWeight = 1 << 20;
// The signal that stops every rank, whichever ranks saw which: SIGTERM when any rank had one (a
// scheduler ending the job), else SIGINT. Every rank exits 128 + it (130 or 143).
int agreed_signal(double sum) { return sum >= kTermWeight ? SIGTERM : SIGINT; }
double signal_weight() { return interrupt_signal() == SIGTERM ? kTermWeight : interrupt_signal() ? 1.0 : 0.0; }

// What a rank adds to the step's loss reduction: whether a signal asked it to stop
// (src/cli/interrupt.hpp), so that all stop after the same step and save it, and its numbers for the
// step line in its own kSlots slots (zero in every other rank's, so the sum is each rank's own
// value, exactly): busy µs, span µs, peak stash bytes, stashes, and for metrics.jsonl µs in
// send/recv groups, the shortest group's µs and the number of groups, µs lent, the bytes of its
// packed weights (kernels/cpu/gemm_reuse.hpp; this thread's, so a process's own rank's), µs helped.
std::vector<double> step_slots(int ranks, int rank, const std::vector<pp::Event>& timeline, double span,
                               const TransformerStage& stage, double lent_us, double helped_us) {
    std::vector<double> slots(1 + kSlots * size_t(ranks), 0.0);
    // Summed over the ranks: a SIGINT counts 1, a SIGTERM kTermWeight, so every rank can tell from
    // the sum which signals arrived anywhere, and all exit with the same code (agreed_signal).
    slots[0] = signal_weight();
    double* k = &slots[1 + kSlots * size_t(rank)];
    for (const pp::Event& e : timeline) {
        if (!e.comm) k[0] += e.end - e.start;
        else k[4] += e.end - e.start, k[5] = k[6] ? std::min(k[5], e.end - e.start) : e.end - e.start, k[6]++;
    }
    k[1] = span;
    k[2] = double(stage.peak_stash_bytes());
    k[3] = stage.peak_stashes();
    k[7] = lent_us;
    k[8] = double(ops::packed_weight_bytes());
    k[9] = helped_us;
    return slots;
}

// A model that guesses scores ln(V) (V = vocabulary, or labels of a classifier). A loss above
// 4·ln(V) for kDivergedSteps steps in a row, or one that is not finite, stops the run on every
// rank at once (they all know the loss), before this step's checkpoint: it has diverged.
constexpr int kDivergedSteps = 3;

void check_divergence(const TrainRun& w, int step, double loss, int& above) {
    const ModelConfig& cfg = w.setup->cfg;
    double limit = 4 * std::log(double(cfg.num_labels > 0 ? std::max(cfg.num_labels, 2) : cfg.vocab_size));
    above = std::isfinite(loss) && loss <= limit ? 0 : above + 1;
    if (std::isfinite(loss) && above < kDivergedSteps) return;
    char why[96] = "is not finite";
    if (std::isfinite(loss)) std::snprintf(why, sizeof why, "has been above 4·ln(V) = %.2f for %d steps", limit, kDivergedSteps);
    char msg[256];
    std::snprintf(msg, sizeof msg, "step %d: the loss %.6g %s: training diverged (lower --lr); nothing saved after the "
                  "last checkpoint", step + 1, loss, why);
    throw std::runtime_error(msg);
}

// The step through train_step, with the trainer's additions: the timeline on the run's time axis,
// this rank's numbers for the step line (step_slots) in the loss reduction, --dump-grads.
StepOutcome take_step(TrainRun& w, pp::Pipeline& pipe, pp::Comm& comm, TransformerStage& stage, Optimizer& opt,
                      const RankPlace& at, const Batch& global, int step, float lr, std::vector<double>& slots) {
    int rank = at.d * w.P + at.p;
    StepHooks hooks;
    // With M > 1 micro-batches each GEMM packs its weight once a step instead of M times, for as
    // long as the schedule runs (kernels/cpu/gemm_reuse.hpp); the same bits either way.
    std::optional<ops::ConstantWeights> constant;
    hooks.start = [&] {
        if (w.M > 1) constant.emplace(weight_ranges(stage.layers()));
        return w.origin;   // one time axis for all ranks, so the trace shows sends before receives
    };
    const ops::LentWork lent0 = ops::lent_work();   // this thread's, up to now
    hooks.after_schedule = [&](double span) {
        constant.reset();
        const ops::LentWork lent = ops::lent_work();
        slots = step_slots(w.P * w.D, rank, pipe.timeline(), span, stage, (lent.taken_s - lent0.taken_s) * 1e6,
                           (lent.given_s - lent0.given_s) * 1e6);
    };
    hooks.shared = &slots;
    hooks.after_grads = [&] {
        if (!w.dump_grads.empty() && step == 0) dump_gradients(w, comm, rank);
    };
    try {
        return train_step(pipe, comm, stage, opt, w.setup->cfg, at, global, w.M, {step, lr, w.clip, w.weight_decay}, hooks);
    } catch (const TrainingDiverged& e) {   // the lesson names the quantity; the CLI names the flag
        throw std::runtime_error(std::string(e.what()) + " (lower --lr); nothing saved after the last checkpoint");
    }
}

void run_rank(TrainRun& w, pp::Comm& comm, int rank) {
    const Setup& s = *w.setup;
    RankPlace at = w.place(rank);
    ops::set_num_threads(w.threads);
    TransformerStage& stage = *w.stages[rank];
    Optimizer& opt = *w.optim[rank];
    // Weights and moments were made on the host; they move to this rank's device for the run,
    // and to the host for a checkpoint or an evaluation (a no-op on the CPU).
    Device mine = device_of_rank(w, rank);
    set_device(mine, rank);
    stage.to(mine), opt.to(mine);
    pp::Pipeline pipe(w.schedule, w.V, stage, comm, at.p, at.pipeline_group(), pp::plan_for(w.schedule, w.V));
    pt::WatchedPipeline watched(pipe);   // the watchdog (run_ranks) reports where it is
    auto t_start = Clock::now();
    int diverging = 0;   // steps in a row with the loss above check_divergence's limit
    std::vector<pp::Event> dp_spans;   // the last step's data-parallel sums beside the backward
    for (int step = w.start_step; step < w.steps; step++) {
        pt::beat("batch", step + 1);   // counted from 1, as the progress line does
        Batch global = batch_of_step(s, step);
        int64_t targets = global.num_targets();
        float lr = float(lr_at(step, w.steps, w.warmup, w.lr));
        std::vector<double> slots;
        StepOutcome o = take_step(w, pipe, comm, stage, opt, at, global, step, lr, slots);
        dp_spans = std::move(o.dp_spans);
        check_divergence(w, step, targets ? o.loss_sum / double(targets) : 0.0, diverging);
        if (slots[0] > 0) w.stop_signal = agreed_signal(slots[0]);
        bool stop = slots[0] > 0 && step + 1 < w.steps;   // after the last step, the run ends as usual
        bool eval_now = w.eval_every > 0 && (step + 1) % w.eval_every == 0 && step + 1 < w.steps;
        bool save_now = stop || (w.save_every > 0 && ((step + 1) % w.save_every == 0 || step + 1 == w.steps));
        if (eval_now || save_now) {
            stage.to(Device{}), opt.to(Device{});   // evaluate and save on the host
            synchronize();
            pt::beat("barrier");
            comm.barrier();   // rank 0 may read its process's other ranks' layers from here
        }
        if (rank == 0) {   // printed just before the save: a step line is followed by its checkpoint
            w.last_loss = targets ? o.loss_sum / double(targets) : 0.0;
            print_step(w, step, w.last_loss, lr, o.norm, slots, std::chrono::duration<double>(Clock::now() - t_start).count());
        }
        if (eval_now) pt::beat("evaluation"), evaluate_during_run(w, comm, rank, mine, step + 1);
        if (rank == 0 && step + 1 < w.steps) w.metrics.append(w.record);   // the last one after the final evaluation
        if (save_now) pt::beat("checkpoint"), save_checkpoint(w, comm, rank, step + 1);
        if (stop && !w.stopped_at) w.stopped_at = step + 1;
        if (rank == 0) std::fflush(stdout);   // the step line with its checkpoint line, once it is committed
        pt::beat("barrier");
        comm.barrier();
        if (stop) break;
        if (eval_now || save_now) stage.to(mine), opt.to(mine);
    }
    stage.to(Device{});   // the end: save and evaluate on the host
    synchronize();
    if (w.trace) gather_trace(w, comm, rank, pipe.timeline(), dp_spans);
    if (!w.stopped_at) save_final_model(w, comm, rank);
    // A signal after the last step's reduction (during the final save) may have reached only
    // some ranks: agree once more, so that every rank exits with the same code.
    double last = signal_weight();
    comm.allreduce_sum(&last, 1, at.everyone());
    if (last > 0) w.stop_signal = agreed_signal(last);
}

}  // namespace

std::vector<std::pair<const void*, size_t>> weight_ranges(const std::vector<Layer*>& layers) {
    std::vector<std::pair<const void*, size_t>> ranges;
    for (Layer* l : layers) ranges.push_back({l->params.data(), l->params.size() * sizeof(float)});
    return ranges;
}

std::string human_bytes(double b) {
    char buf[32];
    if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2fG", b / (1 << 30));
    else if (b >= 1 << 20) std::snprintf(buf, sizeof buf, "%.1fM", b / (1 << 20));
    else std::snprintf(buf, sizeof buf, "%.0fK", b / 1024);
    return buf;
}

// Rank r's stage and AdamW moments, on the host: initialized from the seed, or loaded from --model
// or --resume. Each rank reads only its own layers' tensors.
void make_rank(TrainRun& w, int rank) {
    const Setup& s = *w.setup;
    w.stages[rank] = std::make_unique<TransformerStage>(s.cfg, w.split[rank % w.P], w.recompute, w.run_opt);
    w.optim[rank] = std::make_unique<Optimizer>(*w.stages[rank], w.place(rank));   // ZeRO-1: this replica's tensors
    std::vector<Layer*> layers = w.stages[rank]->layers();
    if (s.model_dir.empty())
        for (Layer* l : layers) l->init(s.seed, 0.02f);
    else
        load_weights(s.model_dir, layers, false, true, /*partial=*/w.P > 1);
    if (w.resume.empty()) return;
    // The AdamW moments: DIR/optimizer.safetensors, or its shards (one per pipeline rank that saved it).
    std::string source;
    std::vector<st::File> files = read_tensor_files(w.resume, "optimizer", &source);
    if (files.empty())
        throw std::runtime_error(w.resume + ": no optimizer.safetensors or optimizer.safetensors.index.json "
                                 "(a checkpoint of --save-every has the AdamW moments)");
    Optimizer& opt = *w.optim[rank];
    for (size_t li = 0; li < layers.size(); li++)
        for (size_t ti = 0; ti < layers[li]->params_info.size(); ti++) {
            const ParamInfo& pi = layers[li]->params_info[ti];
            if (opt.at[li][ti] < 0) continue;   // another replica's (ZeRO-1)
            std::string name = pi.tied ? "ernie.embeddings.word_embeddings.weight" : pi.name;
            for (auto [suffix, buf] : {std::pair{".exp_avg", &opt.m[li]}, {".exp_avg_sq", &opt.v[li]}}) {
                const st::File* f = nullptr;
                for (const st::File& file : files) f = f ? f : file.find(name + suffix) ? &file : nullptr;
                if (!f) throw std::runtime_error(source + ": no tensor " + name + suffix);
                std::vector<float> x = f->to_f32(name + suffix);
                if (x.size() != pi.numel) throw std::runtime_error(f->path + ": " + name + suffix + " has the wrong size");
                // A NaN or infinite moment, or a negative mean of squares, would surface steps
                // later as "training diverged"; a second moment is a mean of squares.
                bool second = std::string(suffix) == ".exp_avg_sq";
                for (float m : x)
                    if (!std::isfinite(m) || (second && m < 0))
                        throw std::runtime_error(f->path + ": " + name + suffix + " holds " +
                                                 (std::isfinite(m) ? "a negative value" : "NaN or infinite values") +
                                                 (second ? " (a mean of squares is finite and >= 0)" : " (AdamW moments are finite)"));
                std::copy(x.begin(), x.end(), buf->begin() + long(opt.at[li][ti]));
            }
        }
}

Device device_of_rank(const TrainRun& w, int rank) {
    Device dev = w.device;
    if (dev.cuda) dev.index = (dev.index + (w.mpi ? w.local_rank : rank)) % w.gpus;
    return dev;
}

// plots: an evaluation goes into the metrics line of its step.
void log_eval(TrainRun& w, const EvalResult& ev) {
    if (ev.targets == 0) return;
    bool classifier = w.setup->cfg.num_labels > 0;
    w.record.eval = true, w.record.classifier = classifier;
    w.record.eval_loss = ev.loss(), w.record.eval_metric = classifier ? ev.accuracy() : std::exp(ev.loss());
}

// The ranks run: as threads (ThreadComm, or NCCL for one GPU each), or as this process's rank.
void run_world(TrainRun& w, bool made_out) {
    try {
        if (w.mpi) {
#ifdef PIPETRAIN_MPI
            if (w.comm == "nccl") {
#ifdef PIPETRAIN_NCCL
                set_device(device_of_rank(w, w.rank), w.rank);
                pt::MpiComm host(*w.mpi);
                pt::NcclWorld world(*w.mpi, device_of_rank(w, w.rank).index, w.timeout);
                pt::NcclComm comm(world, host, w.rank);
                pt::run_mpi_rank(*w.mpi, [&](pp::Comm&) { run_rank(w, comm, w.rank); });
#endif
            } else {
                pt::run_mpi_rank(*w.mpi, [&](pp::Comm& comm) { run_rank(w, comm, w.rank); });
            }
#endif
        } else if (w.comm == "nccl") {
#ifdef PIPETRAIN_NCCL
            std::vector<int> gpus;
            for (int r = 0; r < w.P * w.D; r++) gpus.push_back(device_of_rank(w, r).index);
            pt::NcclWorld world(gpus, w.timeout);
            pt::run_ranks(world.host(), [&](int rank) {
                set_device(device_of_rank(w, rank), rank);
                pt::NcclComm comm(world, rank);
                run_rank(w, comm, rank);
            });
#endif
        } else {
            pt::ThreadWorld world(w.P * w.D, w.timeout);
            pt::run_ranks(world, [&](int rank) {
                pt::ThreadComm comm(world, rank);
                run_rank(w, comm, rank);
            });
        }
    } catch (...) {   // a failed run leaves no empty --out behind (checkpoints it saved stay, for --resume)
        std::error_code ec;
        if (made_out) discard_run_notes(w.out);   // plots: the metrics of a run that saved nothing
        if (made_out && std::filesystem::is_empty(w.out, ec)) std::filesystem::remove(w.out, ec);
        throw;
    }
}

}  // namespace pt
