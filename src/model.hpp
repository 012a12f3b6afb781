// src/model.hpp — the ERNIE 3.0 / BERT post-LayerNorm encoder as a list of pipeline layers.
//
//   Embedding  : word + position + token_type (+ task_type) → LayerNorm → dropout
//   Block × N  : x → self-attention → dropout → add → LayerNorm → FFN → dropout → add → LayerNorm
//   Head       : dense → act → LayerNorm → decoder (tied to the word embedding) + bias → loss
//
// Every layer has an explicit backward split in two halves, because the zero-bubble schedule
// runs them at different times: backward_input (BI) propagates the gradient to the layer's
// input and keeps what the weight gradient needs; backward_weight (BW) accumulates the
// parameter gradients. B = BI then BW, with the same bits as running them apart.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/config.hpp"
#include "src/device.hpp"
#include "src/pairwise.hpp"

namespace pt {

constexpr int32_t kIgnore = -100;   // target id that contributes no loss

// One micro-batch as every layer sees it. Token arrays are (B, T).
struct MicroBatch {
    int B = 0, T = 0;
    const int32_t* input_ids = nullptr;
    const int32_t* token_type_ids = nullptr;
    const int32_t* task_type_ids = nullptr;   // null: all zero
    const int32_t* attention_mask = nullptr;  // 1 real, 0 padding; null: no padding
    const int32_t* targets = nullptr;         // kIgnore where no loss
    // The token arrays the kernels read: the host arrays above on the CPU, device copies on a GPU
    // (TransformerStage uploads each step's batch once).
    struct {
        const int32_t *input_ids = nullptr, *token_type_ids = nullptr, *task_type_ids = nullptr,
                      *attention_mask = nullptr;
    } dev;
    uint32_t step = 0;         // optimizer step, part of the dropout key
    uint32_t index = 0;        // global micro-batch index, part of the dropout key
    float loss_scale = 1.0f;   // 1 / (number of targets in the global batch)
};

// How a forward runs: everything that is not data.
struct RunOptions {
    bool train = true;          // dropout on
    bool causal = false;        // causal attention mask (objective "causal")
    bool all_logits = false;    // compute logits at every position (eval), not only at targets
    uint64_t seed = 0;
    float hidden_dropout = 0.0f;
    float attention_dropout = 0.0f;
    bool bf16 = false;          // --dtype bf16: the linear layers' GEMMs on bfloat16 inputs
};

struct ParamInfo {
    std::string name;            // Hugging Face ErnieForMaskedLM name
    std::vector<int64_t> shape;  // Linear weights are [out, in]
    size_t offset = 0, numel = 0;
    bool decay = true;           // AdamW weight decay (off for biases and LayerNorm)
    bool tied = false;           // the head's copy of the word embedding: never saved
    bool optional = false;       // may be absent from a checkpoint: then it keeps its fresh init
};

// What a layer keeps between its forward and its backward for one micro-batch.
// With --dtype bf16 the activations among them (the logits too) wait for the backward as
// bfloat16 bits: half the memory, as where a GPU framework stores bf16 activations. Statistics
// (mean, rstd, lse) stay fp32. The stage packs each stash after the forward and unpacks it
// before the backward, so every split rounds the same values and the bits stay split-independent.
struct Stash {
    virtual ~Stash() = default;
    std::vector<Buf*> buffers;       // for byte accounting
    std::vector<Buf*> activations;   // those that --dtype bf16 keeps in 16 bits
    size_t bytes() const;
    void pack();                     // activations -> bf16 bits; the fp32 arrays are freed
    void unpack();                   // back to fp32 (no-op when not packed)

 private:
    std::vector<Array<uint16_t>> packed_;
};

class Layer {
 public:
    explicit Layer(int index) : index_(index) {}
    virtual ~Layer() = default;
    int index() const { return index_; }   // position in the whole model: dropout key, names

    std::vector<ParamInfo> params_info;
    Buf params, grads;                      // flat buffers, on the layer's device
    void to(Device d);                      // moves params and grads (from a thread on d or on the CPU)

    // Output elements per micro-batch: B*T*C for Embedding and Block, 1 (the loss sum) for Head.
    virtual size_t out_numel(int B, int T) const = 0;
    // `in` is (B, T, C) or null for the Embedding. Returns what the backward needs.
    virtual std::unique_ptr<Stash> forward(float* out, const float* in, const MicroBatch& mb,
                                           const RunOptions& opt) = 0;
    // din (B, T, C) += dL/din; null for the first layer. dout is the gradient of the output
    // (ignored by the Head, whose output is the loss). May keep gradients in the stash for BW.
    virtual void backward_input(float* din, const float* dout, Stash& stash, const MicroBatch& mb,
                                const RunOptions& opt) = 0;
    // grads += this micro-batch's parameter gradients. After sum_micro_batches(M) (M > 1, from
    // begin_step, grads zeroed), the micro-batches' are summed in PairwiseSum's fixed tree (the same
    // bits however replicas cut the batch), in order; the M-th call leaves the sum in grads and
    // returns true: the step's gradients are final (M ≤ 1: every call, straight into grads).
    bool backward_weight(Stash& stash, const MicroBatch& mb, const RunOptions& opt);
    void sum_micro_batches(int M);   // starts a step's tree; M ≤ 1: straight into grads
    bool summing() const { return tree_.leaves() > 0; }   // a step's tree waits for more micro-batches

    // Deterministic init from (seed, parameter name): a layer initializes the same numbers on
    // one device and on any pipeline stage.
    void init(uint64_t seed, float std_dev);

 protected:
    size_t add_param(const std::string& name, std::vector<int64_t> shape, bool decay = true);
    float* param(size_t off) { return params.data() + off; }
    float* grad(size_t off) { return grads.data() + off; }
    void finish_params();   // sizes params/grads once every add_param is done
    virtual void weight_grads(Stash& stash, const MicroBatch& mb, const RunOptions& opt) = 0;   // grads +=
    int index_;

 private:
    int sum_of_ = 0;   // micro-batches in this step's tree (0: none)
    std::vector<Buf> spare_;   // gradient-sized buffers for the tree's leaves, reused within a step
    PairwiseSum<Buf> tree_{[this](Buf& into, Buf& from) {
        dev::accumulate(into.data(), from.data(), int(into.size()));
        spare_.push_back(std::move(from));
    }};
};

// The model as pipeline layers: [Embedding, Block 0..N-1, Head]; num_model_layers() = N + 2.
int num_model_layers(const ModelConfig& cfg);
std::unique_ptr<Layer> make_layer(const ModelConfig& cfg, int index);
// Rough forward cost of layer `index` per token in FLOPs (for partitioning by params/compute).
double layer_flops_per_token(const ModelConfig& cfg, int index, int T);

// The parameter that mirrors another one (the head's copy of the word embedding), or null.
const ParamInfo* tied_param(const Layer& layer);

// Head internals exposed for eval / dumps: the logits of the last forward (rows as computed),
// and the pooled [CLS] output tanh(Wp h[:, 0] + bp) of each sequence (eval only for MLM).
struct HeadStash : Stash {
    // n = the rows computed (the MLM head: those with a target; the classifier: B, one per [CLS])
    Buf h, t, u, z;           // (n, C): gathered rows, after the dense layer, after the activation, after LN
    Buf mean, rstd;           // (n)
    Buf logits, dlogits;      // (n, V) or (B, L)
    Buf dz, dt;               // (n, C)
    Buf pooled;               // (B, C)
    std::vector<int32_t> rows, targets;   // which (b, t) rows were computed, and their targets
    Array<int32_t> rows_dev, targets_dev; // the same on the layer's device
    double loss_sum = 0;
    int64_t num_targets = 0;
};

}  // namespace pt
