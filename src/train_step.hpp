// src/train_step.hpp — one optimizer step on one rank: gradient accumulation and data parallelism.
//
// Data parallelism: D replicas of the pipeline each take B/D rows of the global batch; replica d's
// rows are d·B/D .. (d+1)·B/D − 1 and its micro-batches are the global micro-batches d·M .. d·M+M−1
// (their index keys the dropout masks). Gradient accumulation: the replica's rows are cut into M
// micro-batches whose gradients add up in the layers, zeroed once before the first. Every
// micro-batch's loss is scaled by 1 / (the GLOBAL batch's targets), so the sums over micro-batches
// and replicas are the mean loss of the whole batch and its gradient, as one big batch on one
// device would compute them. The schedule runs through pp::Pipeline; the step then finishes
// (src/step.hpp): gradients summed (tied copies, then replicas), clipped, AdamW, the global loss.
//
// The trainer, the tutorials and the benchmark all take their steps through this one function.
#pragma once
#include <chrono>
#include <functional>
#include <vector>

#include "pipeline.hpp"
#include "src/step.hpp"

namespace pt {

struct StepOutcome {
    double norm = 0;       // the global gradient norm, before clipping (0 without an update)
    double loss_sum = 0;   // summed over every rank's micro-batches: divide by the global targets
    std::vector<pp::Event> dp_spans;   // the data-parallel sums that overlapped the backward (DpReducer)
};

// What a caller may add to the step; all optional.
struct StepHooks {
    // Called just before the schedule runs; returns the origin of the timeline's time axis (ranks
    // that return the same one share an axis). Default: now. A barrier here starts the ranks together.
    std::function<std::chrono::steady_clock::time_point()> start;
    // Called when this rank's schedule is done, with its wall time (µs): e.g. to fill `shared`.
    std::function<void(double span_us)> after_schedule;
    std::vector<double>* shared = nullptr;   // slots summed over every rank with the loss (global_loss_sum)
    std::function<void()> after_grads;       // the gradients are summed, not yet clipped
};

// This rank's step on the global batch `global` (B rows, B divisible by D·M), M micro-batches per
// replica. `update.step` is both AdamW's step and the dropout key; with update.apply false the
// gradients are summed and the loss known, and the weights stay as they were. Every rank of the
// P·D calls it. The watchdog (src/watchdog.hpp) is told each phase as it begins.
StepOutcome train_step(pp::Pipeline& pipe, pp::Comm& comm, TransformerStage& stage, Optimizer& opt,
                       const ModelConfig& cfg, const RankPlace& place, const Batch& global, int M,
                       const Update& update, const StepHooks& hooks = {});

// 1 − busy / (P · span): the share of P ranks' time in a step of `span` that computed nothing,
// `busy` their summed compute time (F, B, BI, BW).
double bubble_fraction(double busy, int P, double span);
// The same from a measured timeline of P ranks on one time axis: span is the latest event's end
// (returned in *makespan when not null).
double measured_bubble(const std::vector<pp::Event>& events, int P, double* makespan = nullptr);

}   // namespace pt
