// labs/05_recompute/recompute_stage.cpp — lab 05: activation recomputation. Your file: replace each
// TODO(student) body. Check it with: scripts/lab.sh check 05
#include "labs/05_recompute/recompute_stage.hpp"

#include "labs/todo.hpp"

namespace student {

// TODO(student) Task 1: the rows of micro-batch m (batch_->rows(first, count)), then set .step,
// .index and .loss_scale. (step, index) is the key of every dropout mask: the same key draws the
// same masks, however many times the forward runs.
pt::MicroBatch RecomputeStage::micro_batch(int microbatch) const {
    labcheck::not_implemented("micro_batch");
}

// TODO(student) Task 1: every layer of layers_ in order. A layer's forward(out, in, mb, opt_)
// writes out (layer->out_numel(B, T) floats) and returns its stash: push it onto f.stash. The first
// input is f.input (null when empty: the embedding reads token ids); each output is the next input.
pt::Buf RecomputeStage::run_layers(InFlight& f, const pt::MicroBatch& mb) {
    labcheck::not_implemented("run_layers");
}

// TODO(student) Task 1: run the layers, keep only the input (no stash), and return
// to_send(pp::Op::F, microbatch, the output).
pp::Bytes RecomputeStage::forward(int microbatch, int chunk) {
    labcheck::not_implemented("forward");
}

// TODO(student) Task 2: rebuild the stash if there is none (the same forward, the same micro-batch),
// then each layer's backward_input(din, dout, *f.stash[i], mb, opt_), last layer first: dout starts as
// f.grad_out (empty at the head: pass null), din is a zeroed (B, T, C) buffer (null for the embedding),
// and each din is the next dout. Return to_send(pp::Op::BI, microbatch, the last din).
pp::Bytes RecomputeStage::backward_input(int microbatch, int chunk) {
    labcheck::not_implemented("backward_input");
}

// TODO(student) Task 2: each layer's backward_weight(*f.stash[i], mb, opt_), then release the slot.
void RecomputeStage::backward_weight(int microbatch, int chunk) {
    labcheck::not_implemented("backward_weight");
}

}   // namespace student
