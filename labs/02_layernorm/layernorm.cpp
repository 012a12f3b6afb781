// labs/02_layernorm/layernorm.cpp — lab 02: LayerNorm backward. Your file: replace the TODO(student) body.
// Check it with: scripts/lab.sh check 02
#include "labs/02_layernorm/layernorm.hpp"

#include <cstddef>
#include <vector>

#include "labs/todo.hpp"

namespace student {

// TODO(student) Task 1: the gradients. dbias and dweight sum dout and norm * dout over the rows.
// dinp: the loss reaches inp[n][i] through norm[n][i] itself, through mean[n] and through rstd[n];
// with dnorm = weight * dout, work out dL/dinp[n][i] = sum_j dnorm[j] * d norm[j] / d inp[i]
// (README: "The derivation").
// TODO(student) Task 2: += into every gradient, and skip the ones whose pointer is null.
// TODO(student) Task 3: the precision and order of layernorm.hpp (double row sums, over c in order).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    labcheck::not_implemented("layernorm_backward");
}

}  // namespace student
