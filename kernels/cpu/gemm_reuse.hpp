// kernels/cpu/gemm_reuse.hpp — packing a weight once per step instead of once per micro-batch.
//
// ops::gemm packs op(B) into strips before its tiles read them. A layer's weight is B in its
// forward (x W^T, nt) and its input gradient (dy W, nn), so a step of M micro-batches packed each
// weight 2M times. While a ConstantWeights lives on a thread, gemm calls made on that thread
// whose B lies inside one of its ranges pack op(B) once (per B, N, K, transB and micro-kernel)
// and reuse the packing; the same bits either way, since packing only moves floats.
//
// The caller promises that nothing writes to the ranges while the object lives (`train`, from
// src/cli/train_run.cpp: a rank's parameters while a step's schedule runs; the optimizer comes
// after). By default the packings are kept, marked stale, when it ends, so the next step repacks
// into the same memory: one packed copy of each weight per orientation, about twice the
// parameters' bytes, held by the thread until a scope that does not name them (or frees them).
// Measured on 2-stage pipelines of `small` (README "Benchmarks"): 1F1B +5-10%, ZB-V +3-8%, dp 2
// +1-5%; one micro-batch reuses nothing. `generate` (a forward a token) holds one for the whole
// command.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

namespace ops {

// What becomes of the packings when the scope ends: kept, stale, for the next scope (a training
// step after another: no fresh memory to fault in each step), or freed (a one-off: timing layers).
enum class Packings { kept, freed };

class ConstantWeights {
 public:
    // (start, bytes) ranges; none: nothing is reused.
    explicit ConstantWeights(std::vector<std::pair<const void*, size_t>> ranges, Packings after = Packings::kept);
    ~ConstantWeights();
    ConstantWeights(const ConstantWeights&) = delete;
    ConstantWeights& operator=(const ConstantWeights&) = delete;

 private:
    Packings after_;
};

// The packings this thread holds, in bytes (its memory cost, for the trainer's report and tests).
size_t packed_weight_bytes();

}  // namespace ops
