#include "src/stage.hpp"

#include <stdexcept>

namespace pt {

Recompute parse_recompute(const std::string& s) {
    if (s == "none") return Recompute::none;
    if (s == "full") return Recompute::full;
    throw std::runtime_error("unknown recompute policy \"" + s + "\" (expected none or full)");
}

std::vector<std::vector<std::vector<int>>> split_layers(const std::vector<int>& bounds, const pp::Layout& layout) {
    int S = layout.P * layout.V;
    std::vector<std::vector<std::vector<int>>> out(layout.P, std::vector<std::vector<int>>(layout.V));
    for (int s = 0; s < S; s++)
        for (int l = bounds[s]; l < bounds[s + 1]; l++) out[layout.rank(s)][layout.chunk(s)].push_back(l);
    return out;
}

TransformerStage::TransformerStage(const ModelConfig& cfg, std::vector<std::vector<int>> chunk_layers,
                                   Recompute recompute, RunOptions opt)
    : cfg_(cfg), recompute_(recompute), opt_(opt) {
    for (const auto& ids : chunk_layers) {
        chunks_.emplace_back();
        for (int i : ids) chunks_.back().push_back(make_layer(cfg, i));
    }
}

void TransformerStage::begin_step(const Batch* batch, int mb_rows, int first_microbatch, uint32_t step,
                                  float loss_scale) {
    batch_ = batch, mb_rows_ = mb_rows, first_mb_ = first_microbatch, step_ = step, loss_scale_ = loss_scale;
    int M = mb_rows > 0 ? batch->B / mb_rows : 0;
    losses_.assign(size_t(M), 0.0), num_targets_ = 0;
    for (Layer* l : layers()) l->sum_micro_batches(M);   // each layer's gradient tree
    inflight_.clear();
    outputs_.clear();
    if (current_device().cuda) {
        ids_.assign(batch->input_ids), types_.assign(batch->token_type_ids);
        tasks_.assign(batch->task_type_ids), mask_.assign(batch->attention_mask);
    }
    live_bytes_ = 0, live_ = 0;
}

// The micro-batches' losses in the gradients' tree: the same bits for any cut into replicas.
double TransformerStage::loss_sum() const {
    PairwiseSum<double> sum([](double& into, double& from) { into += from; });
    for (double l : losses_) sum.push(l);
    return losses_.empty() ? 0.0 : sum.finish();
}

void TransformerStage::zero_grads() {
    for (Layer* l : layers()) l->grads.zeros(l->grads.size(), l->grads.device());
}

void TransformerStage::to(Device d) {
    for (Layer* l : layers()) l->to(d);
}

std::vector<Layer*> TransformerStage::layers() {
    std::vector<Layer*> all;
    for (auto& c : chunks_)
        for (auto& l : c) all.push_back(l.get());
    return all;
}

Layer* TransformerStage::layer(int index) {
    for (Layer* l : layers())
        if (l->index() == index) return l;
    return nullptr;
}

MicroBatch TransformerStage::micro_batch(int m) const {
    if (!batch_) throw std::logic_error("TransformerStage: begin_step was not called");
    MicroBatch mb = batch_->rows(m * mb_rows_, mb_rows_);
    mb.step = step_, mb.index = uint32_t(first_mb_ + m), mb.loss_scale = loss_scale_;
    if (current_device().cuda) {
        size_t off = size_t(m) * mb_rows_ * batch_->T;
        mb.dev = {ids_.data() + off, types_.data() + off, tasks_.empty() ? nullptr : tasks_.data() + off,
                  mask_.data() + off};
    }
    return mb;
}

TransformerStage::InFlight& TransformerStage::slot(int microbatch, int chunk) {
    if (chunk < 0 || chunk >= int(chunks_.size())) throw std::out_of_range("chunk " + std::to_string(chunk));
    return inflight_[{microbatch, chunk}];
}

void TransformerStage::account(InFlight& f) {
    size_t b = (f.input.size() + f.grad_out.size()) * sizeof(float) +
               (f.input16.size() + f.grad16.size()) * sizeof(uint16_t);
    for (const auto& s : f.stash) b += s ? s->bytes() : 0;
    live_bytes_ = live_bytes_ - f.bytes + b;
    f.bytes = b;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
}

namespace {
// --dtype bf16: whatever leaves a layer (activation or input gradient) is rounded to bfloat16, as
// if stored in it; `packed` keeps the 16-bit form, which is what a stage sends: half the bytes.
// Rounding at every layer, not only at stage boundaries, keeps any split bitwise equal to one stage.
void round_bf16(Buf& x, Array<uint16_t>& packed) {   // packed (n) from x (n)
    packed.resize(x.size());
    dev::to_bf16(packed.data(), x.data(), int(x.size()));
    dev::from_bf16(x.data(), packed.data(), int(x.size()));
}

// The fp32 values of a received bf16 message (which is then dropped).
void unpack(Buf& x, Array<uint16_t>& packed) {
    if (packed.empty()) return;
    x.resize(packed.size());
    dev::from_bf16(x.data(), packed.data(), int(packed.size()));
    packed.clear();
}
}  // namespace

pp::Bytes TransformerStage::view(Output& out) const {
    if (out.v.empty()) return {};
    if (opt_.bf16) return {out.v16.data(), out.v16.size() * sizeof(uint16_t)};
    return {out.v.data(), out.v.size() * sizeof(float)};
}

void TransformerStage::sent(pp::Op op, int microbatch, int chunk) {
    outputs_.erase({op != pp::Op::F, microbatch, chunk});
}

pp::Bytes TransformerStage::input_buffer(pp::Op op, int microbatch, int chunk) {
    InFlight& f = slot(microbatch, chunk);
    size_t n = size_t(mb_rows_) * batch_->T * cfg_.hidden_size;   // (B, T, C) of one micro-batch
    pp::Bytes b;
    if (opt_.bf16) {
        Array<uint16_t>& v = op == pp::Op::F ? f.input16 : f.grad16;
        v.zeros(n);
        b = {v.data(), n * sizeof(uint16_t)};
    } else {
        Buf& v = op == pp::Op::F ? f.input : f.grad_out;
        v.zeros(n);
        b = {v.data(), n * sizeof(float)};
    }
    account(f);
    return b;
}

// Runs the chunk's layers on micro-batch m, keeping one stash per layer. A recompute only
// rebuilds the stash: it neither counts the loss again nor produces anything to send.
void TransformerStage::run_forward(InFlight& f, int m, int chunk, bool recomputing) {
    MicroBatch mb = micro_batch(m);
    unpack(f.input, f.input16);
    const float* in = f.input.empty() ? nullptr : f.input.data();   // (B, T, C), null before the embedding
    Buf out;                 // (B, T, C), or (1) after the head: the loss sum
    Array<uint16_t> out16;   // out as bf16 bits (--dtype bf16): what is sent
    f.stash.clear();
    bool head = chunks_[chunk].back()->index() == num_model_layers(cfg_) - 1;
    for (auto& layer : chunks_[chunk]) {
        Buf next(layer->out_numel(mb.B, mb.T));   // (B, T, C), or (1) for the head
        f.stash.push_back(layer->forward(next.data(), in, mb, opt_));
        if (opt_.bf16) f.stash.back()->pack();
        if (opt_.bf16 && !(head && layer == chunks_[chunk].back())) round_bf16(next, out16);
        out.swap(next);
        in = out.data();
    }
    if (recomputing) return;
    if (head) {   // the head: its output is the loss
        auto& hs = static_cast<HeadStash&>(*f.stash.back());
        losses_.at(size_t(m)) = hs.loss_sum, num_targets_ += hs.num_targets;
    } else {
        Output& sent = outputs_[{false, m, chunk}];
        sent.v.swap(out), sent.v16.swap(out16);
    }
}

pp::Bytes TransformerStage::forward(int microbatch, int chunk) {
    InFlight& f = slot(microbatch, chunk);
    run_forward(f, microbatch, chunk, false);
    peak_live_ = std::max(peak_live_, ++live_);
    if (recompute_ == Recompute::full) f.stash.clear();   // keep only the input
    account(f);
    synchronize();   // on a GPU: the action ends when its kernels do, so the timeline tells the truth
    auto out = outputs_.find({false, microbatch, chunk});   // none on the last stage: its output is the loss
    return out == outputs_.end() ? pp::Bytes{} : view(out->second);
}

pp::Bytes TransformerStage::backward_input(int microbatch, int chunk) {
    InFlight& f = slot(microbatch, chunk);
    if (f.stash.empty()) {   // recompute: the same forward, the same dropout masks, the same bits
        run_forward(f, microbatch, chunk, true);
        account(f);
    }
    MicroBatch mb = micro_batch(microbatch);
    auto& layers = chunks_[chunk];
    unpack(f.grad_out, f.grad16);
    Buf dout = std::move(f.grad_out), din;   // (B, T, C) each; dout is empty at the head (its output is the loss)
    Array<uint16_t> dout16;                  // dout as bf16 bits (--dtype bf16): what is sent
    for (int i = int(layers.size()) - 1; i >= 0; i--) {
        bool first_layer = layers[i]->index() == 0;
        din.zeros(first_layer ? 0 : size_t(mb.B) * mb.T * cfg_.hidden_size);   // (B, T, C); none for the embedding
        f.stash[i]->unpack();
        layers[i]->backward_input(first_layer ? nullptr : din.data(), dout.empty() ? nullptr : dout.data(),
                                  *f.stash[i], mb, opt_);
        // Back to 16 bits (exactly: the values are bf16) until BW, which may come much later
        // (zero bubble): one layer's stash at a time is fp32, not the whole chunk's.
        if (opt_.bf16) f.stash[i]->pack();
        if (opt_.bf16 && !first_layer) round_bf16(din, dout16);
        dout.swap(din);
    }
    f.grad_out.clear();
    account(f);
    Output& sent = outputs_[{true, microbatch, chunk}];
    sent.v = std::move(dout), sent.v16 = std::move(dout16);
    synchronize();
    return view(sent);
}

void TransformerStage::backward_weight(int microbatch, int chunk) {
    InFlight& f = slot(microbatch, chunk);
    MicroBatch mb = micro_batch(microbatch);
    auto& layers = chunks_[chunk];
    for (int i = int(layers.size()) - 1; i >= 0; i--) {
        f.stash[i]->unpack();   // a no-op unless packed (bf16)
        if (layers[i]->backward_weight(*f.stash[i], mb, opt_) && grads_done) grads_done(*layers[i]);
        f.stash[i].reset();
    }
    release(microbatch, chunk);
    synchronize();
}

void TransformerStage::release(int microbatch, int chunk) {
    auto it = inflight_.find({microbatch, chunk});
    if (it == inflight_.end()) return;
    live_--;
    live_bytes_ -= it->second.bytes;
    inflight_.erase(it);
}

}  // namespace pt
