// src/step.cpp — see step.hpp.
#include "src/step.hpp"

#include "src/dp_overlap.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace pt {

std::vector<std::vector<int>> zero_owners(TransformerStage& stage, const RankPlace& at) {
    std::vector<size_t> load(size_t(at.D), 0);   // [replica]: elements it updates so far
    std::vector<std::vector<int>> owner;
    for (Layer* l : stage.layers()) {
        owner.emplace_back();
        for (size_t i = 0; i < l->params_info.size(); i++) {
            bool word = (l->index() == 0 && i == 0) || l->params_info[i].tied;
            size_t d = word ? 0 : size_t(std::min_element(load.begin(), load.end()) - load.begin());
            load[d] += l->params_info[i].numel;
            owner.back().push_back(at.zero ? int(d) : -1);
        }
    }
    return owner;
}

Optimizer::Optimizer(TransformerStage& stage, const RankPlace& place) {
    std::vector<std::vector<int>> owner = zero_owners(stage, place);
    std::vector<Layer*> layers = stage.layers();
    for (size_t li = 0; li < layers.size(); li++) {
        int64_t n = 0;
        at.emplace_back();
        for (size_t i = 0; i < owner[li].size(); i++) {
            bool mine = owner[li][i] < 0 || owner[li][i] == place.d;
            at.back().push_back(mine ? n : -1);
            n += mine ? int64_t(layers[li]->params_info[i].numel) : 0;
        }
        m.emplace_back(size_t(n)), v.emplace_back(size_t(n));
    }
}

void Optimizer::to(Device d) {
    for (Buf& b : m) move_to(b, d);
    for (Buf& b : v) move_to(b, d);
}

size_t Optimizer::bytes() const {
    size_t n = 0;
    for (const Buf& b : m) n += 2 * b.size() * sizeof(float);
    return n;
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

// After the update both copies must hold the same bits: the proof that tying is exact. Copies apart
// swap a fingerprint of their bits (src/device.hpp), not vocab × hidden floats every step.
void check_tied(pp::Comm& comm, TransformerStage& stage, const ModelConfig& cfg, const RankPlace& at) {
    TiedCopies t = tied_copies(stage, cfg, at, false);
    if (t.n == 0) return;
    uint64_t mine = fingerprint(t.emb ? t.emb : t.head, t.n * 4), other = t.peer < 0 ? fingerprint(t.head, t.n * 4) : 0;
    if (t.peer >= 0)
        comm.group({{true, &mine, 8, t.peer, pt::kTagTiedCheck}, {false, &other, 8, t.peer, pt::kTagTiedCheck}});
    if (mine != other) throw std::runtime_error("tied word embedding copies differ after the optimizer step");
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
    std::vector<std::vector<int>> owner = zero_owners(stage, at);   // ZeRO-1: only the owner's gradient is summed
    std::vector<Layer*> layers = stage.layers();
    for (size_t li = 0; li < layers.size(); li++)
        for (size_t i = 0; i < layers[li]->params_info.size(); i++) {
            const ParamInfo& pi = layers[li]->params_info[i];
            if (!pi.tied && (owner[li][i] < 0 || owner[li][i] == at.d))
                partial[first[size_t(layers[li]->index())] + i] = dev::sum_squares(layers[li]->grads.data() + pi.offset, int64_t(pi.numel));
        }
    if (at.zero) comm.allreduce_sum(partial.data(), partial.size(), at.data_parallel_group());   // one owner each: exact
    comm.allreduce_sum(partial.data(), partial.size(), at.pipeline_group());
    return partial;
}

// ZeRO-1's data-parallel sum: each tensor's gradient goes to the replica that updates it, which adds
// the D copies in the all-reduce's tree (src/pairwise.hpp): the bits of the all-reduce, in 1/D the
// messages. The other replicas' copies of a tensor they do not update are left as they were.
void reduce_to_owners(pp::Comm& comm, TransformerStage& stage, const RankPlace& at) {
    std::vector<std::vector<int>> owner = zero_owners(stage, at);
    std::vector<int> group = at.data_parallel_group();
    std::vector<Layer*> layers = stage.layers();
    for (size_t li = 0; li < layers.size(); li++) {
        Layer& l = *layers[li];
        std::vector<pp::P2POp> ops;
        std::vector<Buf> theirs(l.params_info.size() * size_t(at.D));   // [tensor * D + replica]
        for (size_t i = 0; i < l.params_info.size(); i++) {
            const ParamInfo& pi = l.params_info[i];
            float* g = l.grads.data() + pi.offset;   // (numel)
            if (owner[li][i] != at.d) ops.push_back({true, g, pi.numel * sizeof(float), group[owner[li][i]], kTagZeroGrads});
            for (int k = 0; k < at.D && owner[li][i] == at.d; k++)
                if (k != at.d) {
                    theirs[i * at.D + k].resize(pi.numel, l.grads.device());
                    ops.push_back({false, theirs[i * at.D + k].data(), pi.numel * sizeof(float), group[k], kTagZeroGrads});
                }
        }
        comm.group(ops);
        for (size_t i = 0; i < l.params_info.size(); i++) {
            if (owner[li][i] != at.d) continue;
            const ParamInfo& pi = l.params_info[i];
            PairwiseSum<Buf> sum([&](Buf& into, Buf& from) { dev::accumulate(into.data(), from.data(), int(pi.numel)); });
            theirs[i * at.D + at.d].assign(l.grads.data() + pi.offset, pi.numel, l.grads.device());
            for (int k = 0; k < at.D; k++) sum.push(std::move(theirs[i * at.D + k]));
            copy_bytes(l.grads.data() + pi.offset, sum.finish().data(), pi.numel * sizeof(float));
        }
    }
}

// ZeRO-1, after the update: every tensor's new values from the replica that updated it to the others.
void gather_from_owners(pp::Comm& comm, TransformerStage& stage, const RankPlace& at) {
    std::vector<std::vector<int>> owner = zero_owners(stage, at);
    std::vector<int> group = at.data_parallel_group();
    std::vector<Layer*> layers = stage.layers();
    for (size_t li = 0; li < layers.size(); li++) {
        std::vector<pp::P2POp> ops;
        for (size_t i = 0; i < layers[li]->params_info.size(); i++) {
            const ParamInfo& pi = layers[li]->params_info[i];
            float* w = layers[li]->params.data() + pi.offset;   // (numel)
            for (int k = 0; k < at.D; k++)
                if (k != at.d && (owner[li][i] == at.d || owner[li][i] == k))
                    ops.push_back({owner[li][i] == at.d, w, pi.numel * sizeof(float), group[k], kTagZeroParams});
        }
        comm.group(ops);
    }
}

}   // namespace

void sum_gradients(pp::Comm& comm, TransformerStage& stage, const ModelConfig& cfg, const RankPlace& at, DpReducer* dp) {
    for (Layer* l : stage.layers())
        if (l->summing()) throw std::logic_error("layer " + std::to_string(l->index()) + ": a micro-batch's backward is missing");
    // The replicas first, each copy of the tied embedding apart, then the copies: the order of one device.
    if (at.D > 1 && at.zero) reduce_to_owners(comm, stage, at);
    else if (dp) dp->finish();
    else if (at.D > 1)
        for (Layer* l : stage.layers()) comm.allreduce_sum(l->grads.data(), l->grads.size(), at.data_parallel_group());
    if (!at.zero || at.d == 0) tied_sum(comm, stage, cfg, at);   // ZeRO-1: replica 0 updates the word embedding
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
        for (size_t i = 0; i < l->params_info.size(); i++) {
            const ParamInfo& pi = l->params_info[i];
            if (opt.at[li][i] < 0) continue;   // another replica's (ZeRO-1)
            dev::adamw_update(l->params.data() + pi.offset, opt.m[li].data() + opt.at[li][i], opt.v[li].data() + opt.at[li][i],
                              l->grads.data() + pi.offset, int64_t(pi.numel), u.lr, 0.9f, 0.999f, 1e-8f,
                              pi.decay ? float(u.weight_decay) : 0.0f, u.step + 1);
        }
    }
    if (at.zero && at.D > 1) gather_from_owners(comm, stage, at);
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
