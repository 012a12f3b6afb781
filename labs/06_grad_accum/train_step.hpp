// labs/06_grad_accum/train_step.hpp — lab 06's contract: what your train_step.cpp defines.
// Read src/step.hpp (the three phases after the pipeline), src/batch.hpp (Batch::slice,
// num_targets) and TransformerStage::begin_step in src/stage.hpp first, then labs/06_grad_accum/README.md.
#pragma once
#include "pipeline.hpp"
#include "src/step.hpp"
#include "src/train_step.hpp"   // pt::StepOutcome (pt::train_step there is the answer: do not call it)

namespace student {

// Tasks 1-3. This rank's part of one optimizer step on the global batch `global` (B rows, B divisible
// by D·M), with M micro-batches per replica; every one of the P·D ranks calls it, `place` says which
// pipeline rank p of which replica d this one is, and `pipe` runs this rank's schedule on `stage`.
//   Data parallelism: replica d takes the rows d·B/D .. (d+1)·B/D − 1; its micro-batches are the
//   global micro-batches d·M .. d·M + M − 1 (the index keys their dropout masks).
//   Gradient accumulation: the M micro-batches' gradients add up in the layers, zeroed once per step;
//   every micro-batch's loss is scaled by 1 / (the number of targets in the GLOBAL batch), so the
//   sums over micro-batches and replicas are the mean loss of the whole batch and its gradient.
// Then the gradients are summed (pt::sum_gradients), the weights updated when update.apply
// (pt::update_weights, which returns the norm), and the loss summed over every rank
// (pt::global_loss_sum). Returns {the norm (0 without an update), the global loss SUM}.
pt::StepOutcome train_step(pp::Pipeline& pipe, pp::Comm& comm, pt::TransformerStage& stage, pt::Optimizer& opt,
                           const pt::ModelConfig& cfg, const pt::RankPlace& place, const pt::Batch& global, int M,
                           const pt::Update& update);

}   // namespace student
