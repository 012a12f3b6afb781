// src/step.hpp — what follows the pipeline's forward and backward in one optimizer step, on one
// rank: the tied word embedding's gradient sum, the data-parallel sum, the global gradient norm,
// clipping, AdamW, the check that the tied copies still agree, and the loss of the global batch.
//
// train_step (src/train_step.hpp) calls these three phases after pp::Pipeline::run_step. They talk
// to the other ranks only through pp::Comm, so the same functions serve threads (ThreadComm),
// processes (MpiComm) and GPUs (NcclComm). Every sum runs in a fixed order, so any split of the
// model over ranks gives the bits of one device.
#pragma once
#include <stdexcept>
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

// A gradient norm that is NaN or infinite: the training diverged (what to lower is the caller's
// to say: the CLI names its flag).
struct TrainingDiverged : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// 1. The gradients: the tied word embedding's two copies summed, then the data-parallel sum over
// the replicas, both in a fixed order.
void sum_gradients(pp::Comm& comm, TransformerStage& stage, const ModelConfig& cfg, const RankPlace& place);

// 2. The global gradient norm, clipping, AdamW and the check that the tied copies agree; returns
// the norm before clipping. Throws TrainingDiverged on a NaN or infinite norm, on every rank at
// once, before any update spreads it.
double update_weights(pp::Comm& comm, TransformerStage& stage, Optimizer& opt, const ModelConfig& cfg,
                      const RankPlace& place, const Update& update);

// 3. The loss summed over every rank's micro-batches. `shared` (may be null) holds more float64
// slots that are summed over every rank in the same reduction: the trainer gathers its progress
// line and the stop signal that way.
double global_loss_sum(pp::Comm& comm, const TransformerStage& stage, const RankPlace& place,
                       std::vector<double>* shared = nullptr);

}   // namespace pt
