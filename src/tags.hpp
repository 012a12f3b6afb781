// src/tags.hpp — the message tags the trainer uses outside a step's transfers.
//
// Every transfer of the step has been received by then, so these never meet one, though their
// numbers are transfer tags too (pipeline.hpp's transfer_tag). The tied word embedding's two copies
// (its gradients, then the check of its weights), ZeRO-1's, and the gathers to rank 0: a layer's weights
// (kTagLayer + its index), a timeline, clock errors and moments' bytes (two tags each: a size, then the bytes), clocks.
#pragma once

namespace pt {

enum OtherTag : int {
    kTagTiedGrads = 9001,
    kTagTiedCheck = 9002,
    kTagZeroGrads = 9003,    // ZeRO-1: a tensor's gradient to the replica that updates it
    kTagZeroParams = 9004,   // ... and its new values back to every replica
    kTagZeroDump = 9005,     // ... and, for --dump-grads, its sum to replica 0
    kTagTimeline = 9200,     // and 9201
    kTagClockError = 9202,   // and 9203
    kTagMoments = 9204,      // and 9205: the AdamW moments' bytes of each rank
    kTagClock = 9300,
    kTagLayer = 20000,       // + layer index (a model has at most 1026 layers)
};

}  // namespace pt
