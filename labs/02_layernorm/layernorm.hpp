// labs/02_layernorm/layernorm.hpp — lab 02's contract: what your layernorm.cpp defines.
// Read tutorial 02 and kernels/ops.inc's layernorm lines first, then labs/02_layernorm/README.md.
#pragma once

namespace student {

// The backward of LayerNorm over each row n of (N, C), whose forward (ops::layernorm_forward) was
//   norm[n][c] = (inp[n][c] - mean[n]) * rstd[n],   out[n][c] = norm[n][c] * weight[c] + bias[c]
// with mean (N) and rstd (N) saved by the forward. Given dout = dL/dout (N, C), it ADDS (+=, never =)
//   dinp (N, C) += dL/dinp,   dweight (C) += dL/dweight,   dbias (C) += dL/dbias
// into what they already hold, as every backward of kernels/ops.hpp does. A null pointer means "not
// wanted": write nothing there (the zero-bubble schedule asks for dinp and for the weights'
// gradients at different times).
//
// Task 1 asks for the right gradients, task 2 for += and null pointers, task 3 for the bits of
// ops::layernorm_backward, which needs its precision and order:
//   * in float: norm = (inp[n][c] - mean[n]) * rstd[n] and dnorm = weight[c] * dout[n][c];
//   * every sum over a row that dinp needs: a double, over c = 0, 1, ..., C-1 in order; a product
//     that goes into it is taken in double, sum += (double)dnorm * norm; the row mean is
//     (float)(sum / C), rounded to float once;
//   * dinp's element in float, left to right: dnorm, minus the row mean of dnorm, minus the third
//     term, all times rstd[n];
//   * dweight[c] and dbias[c]: a float sum over n = 0, 1, ..., N-1 (of norm * dout, and of dout),
//     added to the gradient once, at the end.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);

}  // namespace student
