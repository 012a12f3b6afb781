// src/bench_pipeline.hpp — `pipetrain bench-pipeline`: real pipelined steps against pp::simulate.
//
// Measures the forward, input-gradient and weight-gradient time of every layer, runs real
// pipelined steps (one thread per stage, ThreadComm) for P = 1, 2, 4 and each schedule, and
// prints the measured makespan (median over steps, from the measured timeline) next to what
// pp::simulate predicts from the per-stage costs, and the speed-up against one stage and against
// the theory M / (M + P - 1) · P. A benchmark: it prints numbers and asserts nothing.
#pragma once
#include <string>
#include <vector>

namespace pt {

int bench_pipeline_main(const std::vector<std::string>& args);

}  // namespace pt
