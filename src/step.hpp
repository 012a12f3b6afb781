// src/step.hpp — what follows the pipeline's forward and backward in one optimizer step, on one
// rank: the tied word embedding's gradient sum, the data-parallel sum, the global gradient norm,
// clipping, AdamW, the check that the tied copies still agree, and the loss of the global batch.
//
// Every rank calls finish_step after pp::Pipeline::run_step. It talks to the other ranks only
// through pp::Comm, so the same function serves threads (ThreadComm), processes (MpiComm) and
// GPUs (NcclComm), the trainer and the tutorials. Every sum runs in a fixed order, so any split
// of the model over ranks gives the bits of one device.
#pragma once
#include <functional>
#include <vector>

#include "pipeline.hpp"
#include "src/tags.hpp"
#include "src/stage.hpp"

namespace pt {

// AdamW moments, one flat buffer per layer of the stage (in stage.layers() order), like the parameters.
struct Optimizer {
    std::vector<Buf> m, v;
    explicit Optimizer(TransformerStage& stage);
    void to(Device d);
};

// Where rank r = d*P + p sits: pipeline rank p of replica d, among P stages and D replicas.
struct RankPlace {
    int P = 1, D = 1, p = 0, d = 0;
    std::vector<int> pipeline_group() const;   // replica d's ranks: d*P .. d*P + P-1
    std::vector<int> data_parallel_group() const;   // pipeline rank p of every replica
    std::vector<int> everyone() const;   // 0 .. P*D - 1
};

struct Update {
    int step = 0;   // counted from 0; AdamW's bias correction uses step + 1
    float lr = 1e-3f;
    double clip = 1.0;   // the global gradient norm is clipped to this (0: no clipping)
    double weight_decay = 0.01;   // on the parameters marked decay (not biases, not LayerNorms)
    bool apply = true;   // false: the gradients are summed and the loss known, nothing is updated
};

struct StepOutcome {
    double norm = 0;   // the global gradient norm, before clipping
    double loss_sum = 0;   // summed over every rank's micro-batches: divide by the global targets
};

// After run_step on `stage`. `shared` (may be null) holds more float64 slots that are summed over
// every rank together with the loss, in the same reduction: the trainer gathers its progress line
// and the stop signal that way. `after_grads` (may be empty) runs once the gradients are summed,
// before they are clipped (the trainer's --dump-grads). Throws on a NaN or infinite norm, on
// every rank at once, before any update spreads it.
StepOutcome finish_step(pp::Comm& comm, TransformerStage& stage, Optimizer& opt, const ModelConfig& cfg,
                        const RankPlace& place, const Update& update, std::vector<double>* shared = nullptr,
                        const std::function<void()>& after_grads = {});

}   // namespace pt
