// labs/05_recompute/recompute_stage.hpp — lab 05's contract: what your recompute_stage.cpp defines.
// Read src/model.hpp's MicroBatch, Stash and Layer first, then labs/05_recompute/README.md.
//
// RecomputeStage is one chunk of the model's layers (a rank's slice) as a pp::Stage that keeps,
// between a micro-batch's forward and its backward, only the activation it received. Its backward
// runs the forward again to rebuild every layer's stash. Everything a stage needs besides the
// three actions (the received buffers, what waits to be sent, the bookkeeping) is given here,
// below the class; the five members marked "yours" are your file.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipeline.hpp"
#include "src/batch.hpp"
#include "src/model.hpp"

namespace student {

class RecomputeStage : public pp::Stage {
 public:
    // `layers`: one chunk of the model, contiguous and in model order (not owned; index() 0 is the
    // embedding, num_model_layers(cfg) - 1 the head).
    RecomputeStage(std::vector<pt::Layer*> layers, const pt::ModelConfig& cfg, pt::RunOptions opt)
        : layers_(std::move(layers)), cfg_(cfg), opt_(opt) {}

    // Micro-batch m of this step is rows [m * mb_rows, (m + 1) * mb_rows) of `batch`; its global
    // index is first_microbatch + m. (step, index) key the dropout masks; loss_scale goes to the head.
    void begin_step(const pt::Batch* batch, int mb_rows, int first_microbatch, uint32_t step, float loss_scale);

    // ---- yours (recompute_stage.cpp) -------------------------------------------------------------
    // Task 1. Runs the chunk's layers on the micro-batch and returns what to send on (to_send):
    // afterwards slot(microbatch) holds the received input and NO stash.
    pp::Bytes forward(int microbatch, int chunk) override;
    // Task 2. Rebuilds the stash (the same forward on the kept input, the same MicroBatch: the same
    // dropout masks), then runs every layer's backward_input, last layer first; returns the gradient
    // of the chunk's input (to_send). The stash stays for backward_weight.
    pp::Bytes backward_input(int microbatch, int chunk) override;
    // Task 2. Every layer's backward_weight on the stash backward_input left, then release(microbatch).
    void backward_weight(int microbatch, int chunk) override;

    // ---- given -----------------------------------------------------------------------------------
    pp::Bytes input_buffer(pp::Op op, int microbatch, int chunk) override;   // fills slot(m).input or .grad_out
    void sent(pp::Op op, int microbatch, int chunk) override;   // frees what to_send kept
    size_t held_stash_bytes() const;   // every stash the stage holds now, summed (the check reads it)
    std::vector<pt::Layer*> layers() const { return layers_; }

 private:
    // What the stage holds for one micro-batch between its forward and its backward.
    struct InFlight {
        pt::Buf input;   // (B, T, C): the received activation; empty on the embedding's chunk
        pt::Buf grad_out;   // (B, T, C): the received gradient of the output; empty on the head's chunk
        std::vector<std::unique_ptr<pt::Stash>> stash;   // one per layer, in layer order, while it exists
    };
    // Task 1 (yours). Micro-batch m as every layer sees it: its rows (batch_->rows(first, count)),
    // with .step, .index (the global index first_mb_ + m) and .loss_scale set.
    pt::MicroBatch micro_batch(int microbatch) const;
    // Task 1 (yours). Runs every layer in order from f.input (null for the embedding), keeping each
    // layer's stash in f.stash; returns the last layer's output: (B, T, C), or (1), the loss sum, after
    // the head. forward and backward_input both call it.
    pt::Buf run_layers(InFlight& f, const pt::MicroBatch& mb);

    // Given.
    InFlight& slot(int microbatch);   // created on first use
    void release(int microbatch);   // drops the slot: its input and its stash
    // Keeps `value` until the executor has sent it and returns the view to send: {} for the head's
    // output (the loss stays here) and for an empty value (the embedding's input has no gradient).
    pp::Bytes to_send(pp::Op op, int microbatch, pt::Buf value);
    bool holds_head() const { return layers_.back()->index() == pt::num_model_layers(cfg_) - 1; }

    std::vector<pt::Layer*> layers_;
    pt::ModelConfig cfg_;
    pt::RunOptions opt_;
    const pt::Batch* batch_ = nullptr;
    int mb_rows_ = 0, first_mb_ = 0;
    uint32_t step_ = 0;
    float loss_scale_ = 1;
    std::map<int, InFlight> inflight_;   // by micro-batch
    std::map<std::pair<bool, int>, pt::Buf> outputs_;   // (gradient?, micro-batch): until sent
};

// ---- the given members ---------------------------------------------------------------------------
inline void RecomputeStage::begin_step(const pt::Batch* batch, int mb_rows, int first_microbatch, uint32_t step,
                                       float loss_scale) {
    batch_ = batch, mb_rows_ = mb_rows, first_mb_ = first_microbatch, step_ = step, loss_scale_ = loss_scale;
    inflight_.clear(), outputs_.clear();
    for (pt::Layer* l : layers_) l->sum_micro_batches(batch->B / mb_rows);   // the lesson's gradient tree
}

inline RecomputeStage::InFlight& RecomputeStage::slot(int microbatch) {
    if (!batch_) throw std::logic_error("RecomputeStage: begin_step was not called");
    return inflight_[microbatch];
}

inline void RecomputeStage::release(int microbatch) { inflight_.erase(microbatch); }

inline pp::Bytes RecomputeStage::input_buffer(pp::Op op, int microbatch, int chunk) {
    if (chunk != 0) throw std::out_of_range("RecomputeStage holds one chunk, not chunk " + std::to_string(chunk));
    InFlight& f = slot(microbatch);
    pt::Buf& v = op == pp::Op::F ? f.input : f.grad_out;
    v.zeros(size_t(mb_rows_) * batch_->T * cfg_.hidden_size);   // (B, T, C) of one micro-batch
    return {v.data(), v.size() * sizeof(float)};
}

inline pp::Bytes RecomputeStage::to_send(pp::Op op, int microbatch, pt::Buf value) {
    if (value.empty() || (op == pp::Op::F && holds_head())) return {};
    pt::Buf& kept = outputs_[{op != pp::Op::F, microbatch}];
    kept = std::move(value);
    return {kept.data(), kept.size() * sizeof(float)};
}

inline void RecomputeStage::sent(pp::Op op, int microbatch, int) { outputs_.erase({op != pp::Op::F, microbatch}); }

inline size_t RecomputeStage::held_stash_bytes() const {
    size_t bytes = 0;
    for (const auto& [m, f] : inflight_)
        for (const auto& s : f.stash) bytes += s ? s->bytes() : 0;
    return bytes;
}

}   // namespace student
