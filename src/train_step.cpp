// src/train_step.cpp — see train_step.hpp.
#include "src/train_step.hpp"

#include <algorithm>

#include "src/dp_overlap.hpp"
#include "src/watchdog.hpp"

namespace pt {

using Clock = std::chrono::steady_clock;

StepOutcome train_step(pp::Pipeline& pipe, pp::Comm& comm, TransformerStage& stage, Optimizer& opt,
                       const ModelConfig& cfg, const RankPlace& at, const Batch& global, int M, const Update& u,
                       const StepHooks& hooks) {
    // Data parallelism: this replica's rows of the global batch.
    int rows = global.B / at.D;
    Batch local = global.slice(at.d * rows, rows);
    // Gradient accumulation: M micro-batches of rows / M rows add into gradients zeroed once; each
    // is scaled by the global batch's targets, so their sum is the global mean.
    int64_t targets = global.num_targets();
    stage.zero_grads();
    stage.begin_step(&local, rows / M, at.d * M, uint32_t(u.step), targets ? 1.0f / float(targets) : 0.0f);

    pt::beat("forward/backward");
    Clock::time_point origin = hooks.start ? hooks.start() : Clock::now();
    Clock::time_point t0 = Clock::now();
    DpReducer dp(comm, at, stage);   // each layer's data-parallel sum starts as its gradients are final
    pipe.run_step(origin);
    if (hooks.after_schedule) hooks.after_schedule(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());

    pt::beat("gradient sum");
    sum_gradients(comm, stage, cfg, at, &dp);
    if (hooks.after_grads) hooks.after_grads();
    StepOutcome out{0, 0, dp.spans(origin)};
    pt::beat("optimizer");
    if (u.apply) out.norm = update_weights(comm, stage, opt, cfg, at, u);
    pt::beat("loss");
    out.loss_sum = global_loss_sum(comm, stage, at, hooks.shared);
    return out;
}

double bubble_fraction(double busy, int P, double span) { return span > 0 ? 1.0 - busy / (P * span) : 0.0; }

double measured_bubble(const std::vector<pp::Event>& events, int P, double* makespan) {
    double busy = 0, span = 0;
    for (const pp::Event& e : events) {
        span = std::max(span, e.end);
        if (!e.comm) busy += e.end - e.start;
    }
    if (makespan) *makespan = span;
    return bubble_fraction(busy, P, span);
}

}   // namespace pt
