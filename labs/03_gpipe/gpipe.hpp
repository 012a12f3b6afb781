// labs/03_gpipe/gpipe.hpp — lab 03's contract: what your gpipe.cpp defines.
// Read pipeline.hpp's top ~70 lines first (Op, Action, Schedule), then labs/03_gpipe/README.md.
#pragma once
#include "pipeline.hpp"

namespace student {

// GPipe (Huang et al. 2019) as data: P ranks, M micro-batches. schedule[rank] is the list of
// actions rank `rank` runs in one optimizer step, in order: {pp::Op::F, 3} is "F3", the forward
// of micro-batch 3 through this rank's layers; {pp::Op::B, 3} is "B3", its backward.
// GPipe: every forward first, then every backward.
pp::Schedule gpipe(int P, int M);

}  // namespace student
