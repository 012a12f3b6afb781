// labs/06_grad_accum/train_step.cpp — lab 06: gradient accumulation and loss scaling. Your file:
// replace the TODO(student) body. Check it with: scripts/lab.sh check 06
#include "labs/06_grad_accum/train_step.hpp"

#include "labs/todo.hpp"

namespace student {

// TODO(student) Tasks 1-3, in order:
//   1. this replica's rows: global.slice(first row, rows) (data parallelism);
//   2. the loss scale: 1 / (the targets of the GLOBAL batch, global.num_targets());
//   3. zero the gradients once (stage.zero_grads());
//   4. stage.begin_step(&rows, rows per micro-batch, the global index of this replica's first
//      micro-batch, update.step, the loss scale), then pipe.run_step();
//   5. pt::sum_gradients, pt::update_weights when update.apply (its norm), pt::global_loss_sum.
pt::StepOutcome train_step(pp::Pipeline& pipe, pp::Comm& comm, pt::TransformerStage& stage, pt::Optimizer& opt,
                           const pt::ModelConfig& cfg, const pt::RankPlace& place, const pt::Batch& global, int M,
                           const pt::Update& update) {
    labcheck::not_implemented("train_step");
}

}   // namespace student
