// labs/solutions/06_grad_accum/train_step.cpp — lab 06's answer (what a student should end with).
#include "labs/06_grad_accum/train_step.hpp"

namespace student {

pt::StepOutcome train_step(pp::Pipeline& pipe, pp::Comm& comm, pt::TransformerStage& stage, pt::Optimizer& opt,
                           const pt::ModelConfig& cfg, const pt::RankPlace& place, const pt::Batch& global, int M,
                           const pt::Update& update) {
    // Data parallelism: this replica's rows of the global batch.
    int rows = global.B / place.D;
    pt::Batch local = global.slice(place.d * rows, rows);
    // Every micro-batch adds sum(its losses) / (targets of the whole batch): the sum over all of
    // them is the global mean, whatever the split.
    int64_t targets = global.num_targets();
    float loss_scale = targets ? 1.0f / float(targets) : 0.0f;
    stage.zero_grads();   // once: the M micro-batches' gradients add up on top of each other
    // Replica d's micro-batch m is global micro-batch d·M + m: its index keys the dropout masks.
    stage.begin_step(&local, rows / M, place.d * M, uint32_t(update.step), loss_scale);
    pipe.run_step();

    pt::sum_gradients(comm, stage, cfg, place);
    pt::StepOutcome out;
    if (update.apply) out.norm = pt::update_weights(comm, stage, opt, cfg, place, update);
    out.loss_sum = pt::global_loss_sum(comm, stage, place);
    return out;
}

}   // namespace student
