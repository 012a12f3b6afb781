// src/dp_overlap.hpp — data parallelism overlapped with the backward: DpReducer.
#pragma once
#include <chrono>
#include <vector>

#include "pipeline.hpp"
#include "src/async_sum.hpp"
#include "src/step.hpp"

namespace pt {

// The data-parallel sum of each layer's gradients. With place.overlap, a transport that sums in
// the background (AsyncSum: threads and MPI for gradients in host memory, NCCL for gradients on
// GPUs; ThreadComm between stages sharing a GPU does not), a layer's sum starts as
// soon as its last weight gradient of the step exists (TransformerStage::grads_done),
// while the backward of the other layers goes on; finish() waits for those and sums the rest in
// model order. The same bits either way: each layer's sum is the all-reduce's tree. Not with ZeRO-1
// (its sum goes to the owners, at the end).
class DpReducer {
 public:
    using Clock = std::chrono::steady_clock;
    // Hooks itself to the stage's grads_done for its lifetime (one step) when it overlaps.
    DpReducer(pp::Comm& comm, const RankPlace& place, TransformerStage& stage);
    ~DpReducer();
    DpReducer(const DpReducer&) = delete;
    DpReducer& operator=(const DpReducer&) = delete;
    void finish();   // every layer summed over the replicas
    // The background sums of the step as comm events ("data-parallel sum, layer L"), µs from origin.
    std::vector<pp::Event> spans(Clock::time_point origin) const;

 private:
    void ready(Layer& layer);   // grads_done: the layer's sum starts (host memory only)
    pp::Comm& comm_;
    RankPlace at_;
    TransformerStage& stage_;
    AsyncSum* async_ = nullptr;
    std::vector<int> started_;   // the layers summing in the background, in the order they started
    std::vector<AsyncSum::Span> spans_;
};

}   // namespace pt
