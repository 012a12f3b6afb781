// src/stage.hpp — a contiguous slice of the model's layers as a pp::Stage.
//
// The stage owns the activation stash: for every micro-batch in flight it keeps what each of
// its layers needs for the backward. With recompute "full" it keeps only the input it received
// and re-runs its forward just before the backward; the counter-based dropout RNG makes the
// recomputed activations bitwise equal to the ones it threw away.
#pragma once
#include <functional>
#include <map>
#include <tuple>
#include <memory>
#include <vector>

#include "pipeline.hpp"
#include "src/batch.hpp"
#include "src/model.hpp"

namespace pt {

enum class Recompute { none, full };
Recompute parse_recompute(const std::string& s);   // "none" or "full"; throws naming the policy

// Which layers each rank holds: virtual stage s holds the model layers [bounds[s], bounds[s+1])
// (a partition of the layers, pp::partition), and the layout says which rank and chunk hold s.
// Returns [rank][chunk] = layer indices, the chunk_layers of that rank's TransformerStage.
std::vector<std::vector<std::vector<int>>> split_layers(const std::vector<int>& bounds, const pp::Layout& layout);

class TransformerStage : public pp::Stage {
 public:
    // chunk_layers[c] = the model layer indices of chunk c (contiguous, increasing).
    TransformerStage(const ModelConfig& cfg, std::vector<std::vector<int>> chunk_layers, Recompute recompute,
                     RunOptions opt);

    // Micro-batch m of this step is rows [m*mb_rows, (m+1)*mb_rows) of `batch`; its global
    // index (the dropout key) is first_microbatch + m.
    void begin_step(const Batch* batch, int mb_rows, int first_microbatch, uint32_t step, float loss_scale);
    double loss_sum() const;                           // summed over this step's micro-batches
    int64_t num_targets() const { return num_targets_; }

    void zero_grads();
    void to(Device d);                                 // moves every layer's parameters and gradients
    std::vector<Layer*> layers();                      // every layer of every chunk, in model order
    Layer* layer(int index);                           // null if not here
    size_t peak_stash_bytes() const { return peak_bytes_; }
    int peak_stashes() const { return peak_live_; }    // most (micro-batch, chunk) pairs from F to their last backward
    std::function<void(Layer&)> grads_done;   // when set: told as each layer's gradients of the step are final

    // pp::Stage
    pp::Bytes input_buffer(pp::Op op, int microbatch, int chunk) override;
    pp::Bytes forward(int microbatch, int chunk) override;
    pp::Bytes backward_input(int microbatch, int chunk) override;
    void backward_weight(int microbatch, int chunk) override;
    void sent(pp::Op op, int microbatch, int chunk) override;

 private:
    struct InFlight {   // one (micro-batch, chunk)
        Buf input;                                // received activation (empty on the first layer)
        Buf grad_out;                             // received gradient
        Array<uint16_t> input16, grad16;          // the same as received with --dtype bf16
        std::vector<std::unique_ptr<Stash>> stash;   // one per layer of the chunk (empty when recomputed)
        size_t bytes = 0;
    };
    MicroBatch micro_batch(int m) const;
    InFlight& slot(int microbatch, int chunk);
    void run_forward(InFlight& f, int microbatch, int chunk, bool recomputing);
    void account(InFlight& f);
    void release(int microbatch, int chunk);
    // What a forward or a backward produced for the executor to send, kept until sent() (which
    // may come after later actions: a late send). With --dtype bf16, v16 is what is sent.
    struct Output {
        Buf v;
        Array<uint16_t> v16;
    };
    pp::Bytes view(Output& out) const;
    std::map<std::tuple<bool, int, int>, Output> outputs_;   // (gradient?, micro-batch, chunk)
    // On a GPU, this step's token arrays copied to the device once (see MicroBatch::dev).
    Array<int32_t> ids_, types_, tasks_, mask_;

    ModelConfig cfg_;
    std::vector<std::vector<std::unique_ptr<Layer>>> chunks_;
    Recompute recompute_;
    RunOptions opt_;
    const Batch* batch_ = nullptr;
    int mb_rows_ = 0, first_mb_ = 0;
    uint32_t step_ = 0;
    float loss_scale_ = 1;
    std::vector<double> losses_;   // [micro-batch]: the head's loss sum (0 elsewhere)
    int64_t num_targets_ = 0;
    std::map<std::pair<int, int>, InFlight> inflight_;
    size_t live_bytes_ = 0, peak_bytes_ = 0;
    int live_ = 0, peak_live_ = 0;
};

}  // namespace pt
