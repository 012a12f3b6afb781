// labs/solutions/05_recompute/recompute_stage.cpp — lab 05's answer (what a student should end with).
#include "labs/05_recompute/recompute_stage.hpp"

namespace student {

pt::MicroBatch RecomputeStage::micro_batch(int microbatch) const {
    pt::MicroBatch mb = batch_->rows(microbatch * mb_rows_, mb_rows_);
    // (step, index) key the dropout masks: a recompute that presents the same key draws the same masks.
    mb.step = step_, mb.index = uint32_t(first_mb_ + microbatch), mb.loss_scale = loss_scale_;
    return mb;
}

pt::Buf RecomputeStage::run_layers(InFlight& f, const pt::MicroBatch& mb) {
    const float* in = f.input.empty() ? nullptr : f.input.data();   // (B, T, C), null before the embedding
    pt::Buf out;   // (B, T, C), or (1) after the head: the loss sum
    f.stash.clear();
    for (pt::Layer* layer : layers_) {
        pt::Buf next(layer->out_numel(mb.B, mb.T));
        f.stash.push_back(layer->forward(next.data(), in, mb, opt_));
        out.swap(next);
        in = out.data();
    }
    return out;
}

pp::Bytes RecomputeStage::forward(int microbatch, int chunk) {
    InFlight& f = slot(microbatch);
    pt::Buf out = run_layers(f, micro_batch(microbatch));
    f.stash.clear();   // keep only the input: backward_input rebuilds the rest
    return to_send(pp::Op::F, microbatch, std::move(out));
}

pp::Bytes RecomputeStage::backward_input(int microbatch, int chunk) {
    InFlight& f = slot(microbatch);
    pt::MicroBatch mb = micro_batch(microbatch);
    if (f.stash.empty()) run_layers(f, mb);   // the same micro-batch, so the same masks and the same bits
    pt::Buf dout = std::move(f.grad_out), din;   // (B, T, C) each; dout is empty at the head (its output is the loss)
    for (int i = int(layers_.size()) - 1; i >= 0; i--) {
        bool embedding = layers_[i]->index() == 0;   // its input is token ids: no gradient to pass on
        din.zeros(embedding ? 0 : size_t(mb.B) * mb.T * cfg_.hidden_size);
        layers_[i]->backward_input(embedding ? nullptr : din.data(), dout.empty() ? nullptr : dout.data(), *f.stash[i],
                                   mb, opt_);
        dout.swap(din);
    }
    return to_send(pp::Op::BI, microbatch, std::move(dout));
}

void RecomputeStage::backward_weight(int microbatch, int chunk) {
    InFlight& f = slot(microbatch);
    pt::MicroBatch mb = micro_batch(microbatch);
    for (size_t i = layers_.size(); i-- > 0;) layers_[i]->backward_weight(*f.stash[i], mb, opt_);
    release(microbatch);   // its input and its stash: this micro-batch is done on this stage
}

}   // namespace student
