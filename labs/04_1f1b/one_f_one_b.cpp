// labs/04_1f1b/one_f_one_b.cpp — lab 04: 1F1B. Your file: replace each TODO(student) body.
// Check it with: scripts/lab.sh check 04
#include "labs/04_1f1b/one_f_one_b.hpp"

#include <algorithm>

#include "labs/todo.hpp"

namespace student {

// TODO(student) Task 1: the warm-up. Rank P-1 (the last) can run B0 right after F0; rank r must
// first fill the P-1-r stages after it. Never more than there are micro-batches.
int num_warmup_microbatches(int P, int M, int rank) {
    labcheck::not_implemented("num_warmup_microbatches");
}

// TODO(student) Tasks 2-4: for each rank, push the actions in order:
//   Warmup:   num_warmup_microbatches(...) forwards: F0, F1, ...
//   Steady:   one forward, then one backward: F(w), B0, F(w+1), B1, ...
//   Cooldown: the backwards still owed, in increasing micro-batch order.
pp::Schedule one_f_one_b(int P, int M) {
    pp::Schedule schedule(P);
    labcheck::not_implemented("one_f_one_b");
    return schedule;
}

}  // namespace student
