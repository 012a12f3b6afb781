// labs/solutions/04_1f1b/one_f_one_b.cpp — lab 04's answer (what a student should end with).
#include "labs/04_1f1b/one_f_one_b.hpp"

#include <algorithm>

namespace student {

// Rank r must fill the P-1-r stages after it before the first gradient can come back.
int num_warmup_microbatches(int P, int M, int rank) { return std::min(P - rank - 1, M); }

pp::Schedule one_f_one_b(int P, int M) {
    pp::Schedule schedule(P);
    for (int rank = 0; rank < P; rank++) {
        std::vector<pp::Action>& actions = schedule[rank];
        int warmup = num_warmup_microbatches(P, M, rank);
        // Warmup
        for (int mb = 0; mb < warmup; mb++) actions.push_back({pp::Op::F, mb});
        // Steady: the forward of micro-batch warmup + i, then the backward of i.
        for (int i = 0; i < M - warmup; i++) {
            actions.push_back({pp::Op::F, warmup + i});
            actions.push_back({pp::Op::B, i});
        }
        // Cooldown: the warm-up's micro-batches, oldest first.
        for (int mb = M - warmup; mb < M; mb++) actions.push_back({pp::Op::B, mb});
    }
    return schedule;
}

}  // namespace student
