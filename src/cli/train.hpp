// src/cli/train.hpp — what the files of `pipetrain train` (and eval, schedule, partition) share:
// the model and data of a run (Setup), the flags (TrainFlags), the run's state (TrainRun), and the
// functions one file calls in another. The step itself is the lesson's (src/train_step.hpp).
//
//   train_flags.cpp    train_main: the flags, checked; --dry-run; the order of everything below
//   train_setup.cpp    the model (--model, --preset, --resume) and the data (--data, --inputs)
//   train_plan.cpp     layer costs, the partition, the schedule (auto too), the transport
//   train_run.cpp      the ranks' run loop: a step, its line, evaluations and checkpoints in between
//   train_out.cpp      --out, checkpoints and --resume, gathering layers, the trace, the final model
//   train_report.cpp   the banner, the end of the run, what the bubble is made of
//   eval.cpp           evaluation and `pipetrain eval`;  schedule_cmds.cpp: schedule, partition
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline_lab.hpp"
#include "src/batch.hpp"
#include "src/cli/args.hpp"
#include "src/cli/commands.hpp"
#include "src/formats/corpus.hpp"
#include "src/formats/safetensors.hpp"
#include "src/mpi_comm.hpp"
#include "src/stage.hpp"
#include "src/step.hpp"

namespace pt {

using Clock = std::chrono::steady_clock;

// ---- the model and the data a run needs (train_setup.cpp) -------------------------------------

struct Setup {
    ModelConfig cfg;
    std::vector<std::string> vocab;             // vocab.txt lines written with the model
    std::string model_dir;                      // --model, empty for a preset
    Objective objective = Objective::mlm;
    std::vector<std::vector<int32_t>> train;    // corpus sequences (empty with --inputs)
    std::vector<Example> examples;              // --task classify: labeled sequences
    Batch fixed;                                // --inputs batch
    std::vector<Batch> eval;
    SpecialIds special;
    uint64_t seed = 0;
    int B = 0, T = 0;
};

Setup make_setup(const Args& a, bool training);   // `training`: a preset is allowed (train), not only --model

// ---- layer costs and the partition (train_plan.cpp) -------------------------------------------

// Per-layer costs for partitioning (see layer_costs). With "memory", `cost` is the stash one
// micro-batch leaves in the layer and `weights` the bytes of its parameters, gradients and AdamW
// moments; stage i of 1F1B holds its weights and up to P - i stashes. With "time" (and "auto"),
// `cost` is F + BI + BW in seconds, and f, bi, bw, stash the pieces and the stash bytes.
struct LayerCosts {
    std::string by;
    std::vector<double> cost, weights, f, bi, bw, stash;
    double stage_cost(int stage, int P, int begin, int end) const {
        double sum = 0;
        for (int l = begin; l < end; l++) sum += by == "memory" ? weights[l] + (P - stage) * cost[l] : cost[l];
        return sum;
    }
};

// Per-layer cost: "params" (parameter count), "time" (measured forward + backward on one micro-batch
// of B×T on `device`), "memory" (bytes, as LayerCosts says) or "uniform".
// check_only: the flag checked, uniform costs returned, nothing timed.
LayerCosts layer_costs(const ModelConfig& cfg, const std::string& by, int B, int T, Device device = {},
                       bool check_only = false);
// [rank][chunk] = layer indices: the partition of `costs` over P·V virtual stages, placed as `placement` says.
std::vector<std::vector<std::vector<int>>> partition_layers(const LayerCosts& costs, int P, int V,
                                                           pp::Placement placement = pp::Placement::loop);

// ---- evaluation (eval.cpp) --------------------------------------------------------------------

struct EvalResult {
    double loss_sum = 0;
    int64_t targets = 0, correct = 0;   // correct: argmax predictions equal to the target
    double loss() const { return targets ? loss_sum / double(targets) : 0.0; }
    double accuracy() const { return targets ? double(correct) / double(targets) : 0.0; }
    std::string summary(bool classifier) const;   // as `pipetrain eval` prints it
};

// Forward only (no dropout) through `layers` in model order, batch by batch.
EvalResult evaluate(const std::vector<Layer*>& layers, const std::vector<Batch>& batches, bool causal);

// ---- pipetrain train: what the user asked, and the run ----------------------------------------

// The flags of `pipetrain train`, read and checked (read_flags, plan_pipeline, record_state).
struct TrainFlags {
    int P = 1, D = 1, M = 1, V = 1, steps = 1, warmup = 1, threads = 1, eval_every = 0;
    int save_every = 0, keep = 2;                      // --save-every, --keep
    bool zero = false;                                 // --zero 1: ZeRO-1 over the D replicas
    bool overlap = true;                               // --dp-overlap 0: data-parallel sums after the backward
    RankPlace place(int rank) const { return {P, D, rank % P, rank / P, zero, overlap}; }
    Device device;                                     // --device: rank r on GPU (index + r) mod count
    std::string comm, schedule_name, dtype = "fp32";   // --comm (resolved by choose_comm), --schedule, --dtype
    double timeout = 120;                              // --timeout
    std::string out, save_format = "hf";
    double lr = 1e-3, clip = 1.0, weight_decay = 0.01;
    Recompute recompute = Recompute::none;
    std::string dump_grads;
    bool trace = false;
};

// What a process knows of the run beyond its flags. The ranks r = d*P + p are threads of this
// process (all of them), or with --comm mpi one rank per process (this one); everything between
// ranks goes through pp::Comm, so the same run_rank serves both.
struct TrainRun : TrainFlags {
    const Setup* setup = nullptr;
    int start_step = 0;                                // --resume: the checkpoint's step
    std::string resume;                                // --resume: the checkpoint each rank loads its moments from
    int gpus = 0;
    pt::MpiWorld* mpi = nullptr;                       // null: the ranks are threads of this process
    int rank = 0;                                      // with mpi, this process's rank
    bool root = true;                                  // rank 0 runs here: it prints, owns --out, commits
    int local_rank = 0;                                // with mpi: this rank's place on its node
    nlohmann::json state;                              // trainer_state.json: what an exact resume needs
    pp::Schedule schedule;
    std::string plan_note;                             // --schedule auto: what the plan predicts
    std::vector<std::vector<std::vector<int>>> split;  // [p][chunk] = model layer indices
    std::vector<int> owner;                            // [layer] = the pipeline rank that holds it
    std::vector<pp::Costs> stage_costs;                // [p] F, BI, BW of one action, measured alone (s)
    RunOptions run_opt;
    // [rank]: the stages and AdamW moments of this process's ranks; null for another process's.
    std::vector<std::unique_ptr<TransformerStage>> stages;
    std::vector<std::unique_ptr<Optimizer>> optim;
    // Known on rank 0 after the run: its results, for train_main to print.
    double last_loss = 0;
    std::vector<double> peak_stash;                    // [p] bytes, replica 0
    std::vector<int> peak_stashes;                     // [p] (micro-batch, chunk) pairs held at once, replica 0
    std::vector<double> packed_weights;                // [p] bytes of weights packed once a step (M > 1), replica 0
    std::vector<double> least_busy_us;                 // [p] its least compute of a step, replica 0 (bubble_report)
    std::vector<pp::Event> trace_events;               // every rank's last step, on rank 0's clock
    double clock_error_us = 0;                         // how far the ranks' clocks may be off that axis
    std::vector<double> moment_bytes;                  // [rank]: its AdamW moments' bytes, for the trace
    EvalResult final_eval;
    // ---- plots (src/cli/plot.cpp): OUT/metrics.jsonl, a line per step; the step being logged
    MetricsLog metrics;
    StepRecord record;
    // ----
    std::atomic<int> stopped_at{0};                    // a signal stopped the run after this step (0: none did)
    std::atomic<int> stop_signal{0};                   // the signal all ranks agreed on (0: none; see step_slots)
    Clock::time_point origin = Clock::now();
    st::Writer grads_dump;
};

// train_plan.cpp: the schedule, the devices, the split of the layers and how they run; the transport.
void plan_pipeline(TrainRun& w, const Setup& s, Args& a);
void choose_comm(TrainRun& w);

// train_run.cpp
std::string human_bytes(double b);
void make_rank(TrainRun& w, int rank);            // rank r's stage and AdamW moments, on the host
Device device_of_rank(const TrainRun& w, int rank);
void log_eval(TrainRun& w, const EvalResult& ev);   // an evaluation into the step's metrics line
void run_world(TrainRun& w, bool made_out);       // every rank of this process runs
// The layers' parameters, for ops::ConstantWeights (kernels/cpu/gemm_reuse.hpp): constant while a
// step's schedule runs, so with M > 1 each GEMM packs its weight once a step. What times the layers
// (layer_costs, bench-pipeline) times them the same way: packed in the untimed pass, read packed after.
std::vector<std::pair<const void*, size_t>> weight_ranges(const std::vector<Layer*>& layers);
// A model's layers for forwards only (eval, fill-mask, generate, classify, export, inspect): each
// layer's gradient buffer is freed as soon as the layer is built, so only the weights are held
// (ERNIE-base: 470 MB less). In eval.cpp.
struct ForwardModel {
    std::vector<std::unique_ptr<Layer>> owned;
    std::vector<Layer*> layers;
};
ForwardModel forward_model(const ModelConfig& cfg);

// train_out.cpp
// --out, made and locked by rank 0 before training: a path that cannot be written fails now, not
// after the run. The lock is released when the process ends, however it ends.
struct OutDir {
    bool made = false;   // by this run: removed again if the run fails before saving anything
    int lock = -1;
    OutDir() = default;
    OutDir(OutDir&& o) noexcept : made(o.made), lock(o.lock) { o.lock = -1; }
    OutDir& operator=(OutDir&& o) noexcept {
        std::swap(made, o.made), std::swap(lock, o.lock);
        return *this;
    }
    ~OutDir();
};
OutDir prepare_out(TrainRun& w, Args& a);
// --dry-run: what prepare_out checks that can be told here without writing (a line for another
// machine may name an --out that does not exist here): an existing --out is a directory that holds
// no model unless --overwrite, and --trace and --dump-grads name no file the run writes in it.
void check_out_for_dry_run(const TrainRun& w, const Args& a);
nlohmann::json read_trainer_state(const std::string& dir);
void check_resume_state(TrainRun& w, const std::string& dir, const nlohmann::json& saved);
void resume_defaults(Args& a, const nlohmann::json& saved);
std::vector<Layer*> gather_replica(TrainRun& w, pp::Comm& comm, int rank, bool grads,
                                   std::vector<std::unique_ptr<Layer>>& held);
void save_checkpoint(TrainRun& w, pp::Comm& comm, int rank, int step);
void gather_trace(TrainRun& w, pp::Comm& comm, int rank, const std::vector<pp::Event>& timeline,
                  const std::vector<pp::Event>& dp_sums);
void save_final_model(TrainRun& w, pp::Comm& comm, int rank);
std::string continue_command(const std::string& program, const std::vector<std::string>& argv,
                             const std::string& checkpoint);

// train_report.cpp
void print_banner(const TrainRun& w, const Setup& s, Args& a);
int finish(TrainRun& w, const Setup& s, Args& a, const std::vector<std::string>& argv, const std::string& program,
           double secs);

}  // namespace pt
