// src/step.cpp — see step.hpp.
#include "src/step.hpp"

#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace pt {

Optimizer::Optimizer(TransformerStage& stage) {
    for (Layer* l : stage.layers()) m.emplace_back(l->params.size()), v.emplace_back(l->params.size());
}

void Optimizer::to(Device d) {
    for (Buf& b : m) move_to(b, d);
    for (Buf& b : v) move_to(b, d);
}

std::vector<int> RankPlace::pipeline_group() const {
    std::vector<int> g(P);
    std::iota(g.begin(), g.end(), d * P);
    return g;
}
std::vector<int> RankPlace::data_parallel_group() const {
    std::vector<int> g;
    for (int i = 0; i < D; i++) g.push_back(i * P + p);
    return g;
}
std::vector<int> RankPlace::everyone() const {
    std::vector<int> g(P * D);
    std::iota(g.begin(), g.end(), 0);
    return g;
}

namespace {

// The word embedding's two copies on this rank: the embedding layer's (pipeline rank 0) and the
// MLM head's decoder (the last rank); null where this rank holds neither. `peer` is the rank
// that holds the other copy when they live apart.
struct TiedCopies {
    float* emb = nullptr;
    float* head = nullptr;
    size_t n = 0;
    int peer = -1;
};

TiedCopies tied_copies(TransformerStage& stage, const ModelConfig& cfg, const RankPlace& at, bool grads) {
    TiedCopies t;
    Layer* emb = stage.layer(0);
    Layer* head = stage.layer(cfg.num_hidden_layers + 1);
    const ParamInfo* tied = head ? tied_param(*head) : nullptr;
    if (cfg.num_labels > 0 || (!emb && !tied)) return t;   // a classifier ties nothing
    t.n = size_t(cfg.vocab_size) * cfg.hidden_size;
    if (emb) t.emb = (grads ? emb->grads : emb->params).data() + emb->params_info[0].offset;
    if (tied) t.head = (grads ? head->grads : head->params).data() + tied->offset;
    if (!t.emb || !t.head) t.peer = t.emb ? at.d * at.P + at.P - 1 : at.d * at.P;
    return t;
}

// Where the copies live apart, ranks 0 and P-1 swap theirs: the peer's lands in `other`, and
// both pointers of `t` are valid afterwards.
void fetch_peer_copy(pp::Comm& comm, TiedCopies& t, Buf& other, int tag) {
    if (t.peer < 0) return;
    other.resize(t.n);
    float* mine = t.emb ? t.emb : t.head;
    comm.group(
        {{true, mine, t.n * sizeof(float), t.peer, tag}, {false, other.data(), t.n * sizeof(float), t.peer, tag}});
    (t.emb ? t.head : t.emb) = other.data();
}

// The tied gradient is embedding + head, added in that order wherever the copies live, so one
// device and any pipeline get the same bits.
void tied_sum(pp::Comm& comm, TransformerStage& stage, const ModelConfig& cfg, const RankPlace& at) {
    TiedCopies t = tied_copies(stage, cfg, at, true);
    if (t.n == 0) return;
    Buf other;
    fetch_peer_copy(comm, t, other, pt::kTagTiedGrads);
    dev::accumulate(t.emb, t.head, int(t.n));
    copy_bytes(t.head, t.emb, t.n * sizeof(float));
}

// After the update both copies must hold the same bits: the proof that tying is exact.
void check_tied(pp::Comm& comm, TransformerStage& stage, const ModelConfig& cfg, const RankPlace& at) {
    TiedCopies t = tied_copies(stage, cfg, at, false);
    if (t.n == 0) return;
    Buf other;
    fetch_peer_copy(comm, t, other, pt::kTagTiedCheck);
    std::vector<float> a(t.n), b(t.n);   // compared on the host: a GPU's copies are read back
    copy_bytes(a.data(), t.emb, t.n * sizeof(float)), copy_bytes(b.data(), t.head, t.n * sizeof(float));
    if (std::memcmp(a.data(), b.data(), t.n * sizeof(float)) != 0)
        throw std::runtime_error("tied word embedding copies differ after the optimizer step");
}

// The global gradient norm's partials: one float64 per parameter tensor, in model order, the
// same list on every rank whichever layers it holds. Each rank knows only its own layers' tensors,
// so the ranks first sum their layers' tensor counts (one number per layer) to place them.
std::vector<double> norm_partials(pp::Comm& comm, TransformerStage& stage, const ModelConfig& cfg, const RankPlace& at) {
    std::vector<double> count(size_t(num_model_layers(cfg)), 0.0);   // [layer] = its parameter tensors
    for (Layer* l : stage.layers()) count[size_t(l->index())] = double(l->params_info.size());
    comm.allreduce_sum(count.data(), count.size(), at.pipeline_group());
    std::vector<size_t> first(count.size() + 1, 0);   // [layer] = its first slot
    for (size_t i = 0; i < count.size(); i++) first[i + 1] = first[i] + size_t(count[i]);
    std::vector<double> partial(first.back(), 0.0);
    for (Layer* l : stage.layers())
        for (size_t i = 0; i < l->params_info.size(); i++) {
            const ParamInfo& pi = l->params_info[i];
            if (!pi.tied) partial[first[size_t(l->index())] + i] = dev::sum_squares(l->grads.data() + pi.offset, int64_t(pi.numel));
        }
    comm.allreduce_sum(partial.data(), partial.size(), at.pipeline_group());
    return partial;
}

}   // namespace

void sum_gradients(pp::Comm& comm, TransformerStage& stage, const ModelConfig& cfg, const RankPlace& at) {
    for (Layer* l : stage.layers())
        if (l->summing()) throw std::logic_error("layer " + std::to_string(l->index()) + ": a micro-batch's backward is missing");
    // The replicas first, each copy of the tied embedding apart, then the copies: the order of one device.
    if (at.D > 1)
        for (Layer* l : stage.layers()) comm.allreduce_sum(l->grads.data(), l->grads.size(), at.data_parallel_group());
    tied_sum(comm, stage, cfg, at);
}

// Clipping by the global gradient norm, AdamW, and the check of the tied copies.
double update_weights(pp::Comm& comm, TransformerStage& stage, Optimizer& opt, const ModelConfig& cfg,
                      const RankPlace& at, const Update& u) {
    // Global gradient norm from per-tensor float64 partials, summed in model order: the same
    // bits whichever rank holds which layer.
    double sumsq = 0;
    for (double x : norm_partials(comm, stage, cfg, at)) sumsq += x;
    double norm = std::sqrt(sumsq);
    // Every rank knows the norm, so all stop together, before the update spreads the NaN.
    if (!std::isfinite(norm))
        throw TrainingDiverged("step " + std::to_string(u.step + 1) + ": the gradient norm is " +
                               (std::isnan(norm) ? "NaN" : "infinite") + ": training diverged");
    float coef = u.clip > 0 && norm > u.clip ? float(u.clip / (norm + 1e-6)) : 1.0f;
    std::vector<Layer*> layers = stage.layers();
    for (size_t li = 0; li < layers.size(); li++) {
        Layer* l = layers[li];
        if (coef != 1.0f) dev::scale(l->grads.data(), coef, int(l->grads.size()));
        for (const ParamInfo& pi : l->params_info)
            dev::adamw_update(l->params.data() + pi.offset, opt.m[li].data() + pi.offset, opt.v[li].data() + pi.offset,
                              l->grads.data() + pi.offset, int64_t(pi.numel), u.lr, 0.9f, 0.999f, 1e-8f,
                              pi.decay ? float(u.weight_decay) : 0.0f, u.step + 1);
    }
    check_tied(comm, stage, cfg, at);
    return norm;
}

// The loss of the global batch, with the caller's slots in the same reduction.
double global_loss_sum(pp::Comm& comm, const TransformerStage& stage, const RankPlace& at, std::vector<double>* shared) {
    std::vector<double> reduced = {stage.loss_sum()};
    if (shared) reduced.insert(reduced.end(), shared->begin(), shared->end());
    // Over the replicas (the loss in the gradients' tree), then over the stages (one holds it).
    comm.allreduce_sum(reduced.data(), reduced.size(), at.data_parallel_group());
    comm.allreduce_sum(reduced.data(), reduced.size(), at.pipeline_group());
    if (shared) std::copy(reduced.begin() + 1, reduced.end(), shared->begin());
    return reduced[0];
}

}   // namespace pt
