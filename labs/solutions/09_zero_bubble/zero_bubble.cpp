// labs/solutions/09_zero_bubble/zero_bubble.cpp — lab 09's answer (what a student should end with).
#include "labs/09_zero_bubble/zero_bubble.hpp"

#include <deque>

namespace student {

pp::Schedule split_backward(pp::Schedule schedule, const std::vector<int>& delay) {
    for (size_t rank = 0; rank < schedule.size(); rank++) {
        std::vector<pp::Action> out;
        std::deque<pp::Action> owed;   // BWs not yet placed, oldest first
        for (const pp::Action& a : schedule[rank]) {
            if (a.op != pp::Op::B) {
                out.push_back(a);
                continue;
            }
            out.push_back({pp::Op::BI, a.microbatch, a.chunk});
            owed.push_back({pp::Op::BW, a.microbatch, a.chunk});
            // BW(i) runs right after the BI delay[rank] backwards later.
            if (int(owed.size()) > delay[rank]) {
                out.push_back(owed.front());
                owed.pop_front();
            }
        }
        // The tail: what is still owed, oldest first (one device's order of weight gradients).
        for (const pp::Action& w : owed) out.push_back(w);
        schedule[rank] = out;
    }
    return schedule;
}

// The last BIs travel from rank P-1 down to rank 0, so rank r runs its last BI r units before
// rank 0 does: r BWs kept for the end fill that time instead of an idle tail.
pp::Schedule zero_bubble_h1(int P, int M) {
    std::vector<int> delay(P);
    for (int r = 0; r < P; r++) delay[r] = r;
    return split_backward(pp::one_f_one_b(P, M), delay);
}

}   // namespace student
