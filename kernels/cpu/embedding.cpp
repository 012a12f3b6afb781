// kernels/cpu/embedding.cpp — table lookup and its scatter-add gradient.
#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

namespace ops {

void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C) {
    parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; n++) {
            const float* row = table + (size_t)ids[n] * C;  // (C)
            float* o = out + n * C;
            for (int c = 0; c < C; c++) o[c] += row[c];
        }
    });
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C) {
    // Group the rows by id (a stable sort keeps increasing n inside a group), sum each group in
    // that order, then add the sum to its table row once. Groups own distinct table rows, so
    // threads split the groups and nothing is ever written twice.
    std::vector<int> order(N);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ids[a] < ids[b]; });
    std::vector<int> group_start;  // group g is order[group_start[g] .. group_start[g + 1])
    for (int r = 0; r < N; r++)
        if (r == 0 || ids[order[r]] != ids[order[r - 1]]) group_start.push_back(r);
    group_start.push_back(N);
    const int64_t groups = (int64_t)group_start.size() - 1;
    parallel_for(groups, 16, [&](int64_t g0, int64_t g1) {
        std::vector<float> sum(C);  // (C)
        for (int64_t g = g0; g < g1; g++) {
            std::fill(sum.begin(), sum.end(), 0.0f);
            for (int r = group_start[g]; r < group_start[g + 1]; r++) {
                const float* d = dout + (size_t)order[r] * C;
                for (int c = 0; c < C; c++) sum[c] += d[c];
            }
            float* row = dtable + (size_t)ids[order[group_start[g]]] * C;
            for (int c = 0; c < C; c++) row[c] += sum[c];
        }
    });
}

}  // namespace ops
