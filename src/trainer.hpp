// src/trainer.hpp — `pipetrain train` and `pipetrain eval`: a model (preset or directory),
// data (corpus or fixed batch), a schedule, P × D threads running pp::Pipeline, AdamW.
#pragma once
#include <string>
#include <vector>

namespace pt {

// Returns 130 or 143 when SIGINT or SIGTERM stopped the run (src/interrupt.hpp); `program` is how
// pipetrain was invoked (argv[0]), for the command it then prints to continue the run.
int train_main(const std::vector<std::string>& args, const std::string& program);
int train_main(const std::vector<std::string>& args);   // program: "pipetrain"
int eval_main(const std::vector<std::string>& args);
int schedule_main(const std::vector<std::string>& args);
int partition_main(const std::vector<std::string>& args);
int fill_mask_main(const std::vector<std::string>& args);   // src/infer.cpp
int generate_main(const std::vector<std::string>& args);    // src/infer.cpp

}  // namespace pt
