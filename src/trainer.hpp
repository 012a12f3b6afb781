// src/trainer.hpp — `pipetrain train` and `pipetrain eval`: a model (preset or directory),
// data (corpus or fixed batch), a schedule, P × D threads running pp::Pipeline, AdamW.
#pragma once
#include <string>
#include <vector>

#include "src/data.hpp"
#include "src/device.hpp"
#include "src/model.hpp"

namespace pt {

int train_main(const std::vector<std::string>& args);
int eval_main(const std::vector<std::string>& args);
int schedule_main(const std::vector<std::string>& args);
int partition_main(const std::vector<std::string>& args);
int fill_mask_main(const std::vector<std::string>& args);   // src/infer.cpp
int generate_main(const std::vector<std::string>& args);    // src/infer.cpp

struct EvalResult {
    double loss_sum = 0;
    int64_t targets = 0, correct = 0;   // correct: argmax predictions equal to the target
    double loss() const { return targets ? loss_sum / double(targets) : 0.0; }
    double accuracy() const { return targets ? double(correct) / double(targets) : 0.0; }
};
// Forward only (no dropout) through `layers` in model order, batch by batch.
EvalResult evaluate(const std::vector<Layer*>& layers, const std::vector<Batch>& batches, bool causal);

// Per-layer cost for partitioning: "params" (parameter count), "time" (measured forward +
// backward on one micro-batch of B×T) or "uniform".
std::vector<double> layer_costs(const ModelConfig& cfg, const std::string& by, int B, int T, Device device = {});

}  // namespace pt
