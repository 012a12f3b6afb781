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

// Where rank r = d*P + p sits: pipeline rank p of replica d, among P stages and D replicas.
struct RankPlace {
    int P = 1, D = 1, p = 0, d = 0;
    bool zero = false;   // ZeRO-1: each parameter tensor is updated by one replica (zero_owners)
    bool overlap = false;   // each layer's data-parallel sum starts once its gradients are final (DpReducer)
    std::vector<int> pipeline_group() const;   // replica d's ranks: d*P .. d*P + P-1
    std::vector<int> data_parallel_group() const;   // pipeline rank p of every replica
    std::vector<int> everyone() const;   // 0 .. P*D - 1
};

// ZeRO-1: the replica that keeps the AdamW moments of each parameter tensor and updates it, as
// [layer][tensor] of stage.layers(); without place.zero, every replica (-1). Whole tensors, so a
// tensor's norm partial and update are one device's bits; balanced by size, greedily in model
// order; the word embedding's two copies stay with replica 0, which sums them.
std::vector<std::vector<int>> zero_owners(TransformerStage& stage, const RankPlace& place);

// AdamW moments of the tensors this rank updates (all of them without ZeRO), one flat buffer per
// layer of the stage (in stage.layers() order), tensor after tensor; at[layer][tensor] is where a
// tensor's start, or -1 where another replica keeps them.
struct Optimizer {
    std::vector<Buf> m, v;
    std::vector<std::vector<int64_t>> at;
    explicit Optimizer(TransformerStage& stage, const RankPlace& place = {});
    void to(Device d);
    size_t bytes() const;   // the moments held here
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

class DpReducer;
// 1. The gradients: the data-parallel sum over the replicas (finished by `dp` when given: the sums
// started during the backward, src/dp_overlap.hpp), then the tied word embedding's two copies.
void sum_gradients(pp::Comm& comm, TransformerStage& stage, const ModelConfig& cfg, const RankPlace& place,
                   DpReducer* dp = nullptr);

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
