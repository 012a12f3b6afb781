// labs/09_zero_bubble/zero_bubble.cpp — lab 09: zero bubble. Your file: replace each TODO(student) body.
// Check it with: scripts/lab.sh check 09
#include "labs/09_zero_bubble/zero_bubble.hpp"

#include "labs/todo.hpp"

namespace student {

// TODO(student) Task 1: for each rank, walk its actions in order into a new list:
//   F:  copy it;
//   B:  push BI of the same micro-batch (and chunk); its BW is owed, and goes out right after
//       the BI of the backward delay[rank] backwards later (a queue of owed BWs).
// At the end of the list push the BWs still owed, oldest first. Return the schedule with the
// new lists (it keeps its placement).
pp::Schedule split_backward(pp::Schedule schedule, const std::vector<int>& delay) {
    labcheck::not_implemented("split_backward");
    return schedule;
}

// TODO(student) Tasks 2-4: ZB-H1 is split_backward of pp::one_f_one_b(P, M), rank r delaying by r.
pp::Schedule zero_bubble_h1(int P, int M) {
    labcheck::not_implemented("zero_bubble_h1");
    return pp::Schedule(P);
}

}   // namespace student
