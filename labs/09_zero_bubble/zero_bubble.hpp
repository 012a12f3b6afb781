// labs/09_zero_bubble/zero_bubble.hpp — lab 09's contract: what your zero_bubble.cpp defines.
// Read pipeline.hpp's Op (F, B, BI, BW) and one_f_one_b first, then labs/09_zero_bubble/README.md.
#pragma once
#include <vector>

#include "pipeline.hpp"

namespace student {

// Task 1. The zero-bubble version of `schedule`: on every rank, each B becomes BI (the input
// gradient, which the previous stage waits for) at the same place, and its BW (the weight
// gradient, which nobody waits for) runs `delay[rank]` backwards later: right after the BI of the
// backward that comes delay[rank] backwards after it. The BWs keep the order of their BIs, and the
// ones still owed when the rank's list ends follow it, oldest first. Delay 0: B -> BI BW in place.
// Every other action (F) stays where it is; `delay` holds one entry per rank.
pp::Schedule split_backward(pp::Schedule schedule, const std::vector<int>& delay);

// Tasks 2-4. ZB-H1 (Qi et al. 2024): 1F1B's order (use pp::one_f_one_b, the lesson's) with each
// B split, rank r delaying its BWs by r backwards, so they fill what were 1F1B's bubbles.
pp::Schedule zero_bubble_h1(int P, int M);

}   // namespace student
