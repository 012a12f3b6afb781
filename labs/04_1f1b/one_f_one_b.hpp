// labs/04_1f1b/one_f_one_b.hpp — lab 04's contract: what your one_f_one_b.cpp defines.
// Read pipeline.hpp's Action and Schedule first (the top ~70 lines), then labs/04_1f1b/README.md.
#pragma once
#include "pipeline.hpp"

namespace student {

// Task 1. How many forwards rank `rank` of P runs before its first backward (the warm-up),
// with M micro-batches in the step.
int num_warmup_microbatches(int P, int M, int rank);

// Tasks 2-4. 1F1B (PipeDream-Flush): per rank, the warm-up forwards, then one forward and one
// backward in turn (the steady state), then the backwards still owed (the cool-down).
// schedule[rank] is that rank's list of actions, e.g. {pp::Op::F, 3} for F3.
pp::Schedule one_f_one_b(int P, int M);

}  // namespace student
