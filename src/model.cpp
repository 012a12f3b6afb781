#include "src/model.hpp"

#include <cmath>
#include <stdexcept>

namespace pt {

size_t Stash::bytes() const {
    size_t n = 0;
    for (const Buf* b : buffers) n += b->size() * sizeof(float);
    for (const auto& p : packed_) n += p.size() * sizeof(uint16_t);
    return n;
}

void Stash::pack() {
    packed_.resize(activations.size());
    for (size_t i = 0; i < activations.size(); i++) {
        Buf& b = *activations[i];
        packed_[i].resize(b.size());
        dev::to_bf16(packed_[i].data(), b.data(), int(b.size()));
        b.clear();
    }
}

void Stash::unpack() {
    for (size_t i = 0; i < packed_.size(); i++) {
        Buf& b = *activations[i];
        b.resize(packed_[i].size());
        dev::from_bf16(b.data(), packed_[i].data(), int(b.size()));
    }
    packed_.clear();
}

size_t Layer::add_param(const std::string& name, std::vector<int64_t> shape, bool decay) {
    ParamInfo p;
    p.name = name;
    p.numel = 1;
    for (int64_t d : shape) p.numel *= size_t(d);
    p.shape = std::move(shape);
    p.offset = params_info.empty() ? 0 : params_info.back().offset + params_info.back().numel;
    p.decay = decay;
    params_info.push_back(p);
    return p.offset;
}

void Layer::finish_params() {
    size_t n = params_info.empty() ? 0 : params_info.back().offset + params_info.back().numel;
    params.zeros(n);
    grads.zeros(n);
}

void Layer::to(Device d) { move_to(params, d), move_to(grads, d), spare_.clear(); }

void Layer::sum_micro_batches(int M) {
    sum_of_ = M > 1 ? M : 0;
    tree_.clear();   // an unfinished step's (an error ended it), which may hold the gradients' buffer
    if (grads.size() != params.size()) grads.zeros(params.size(), params.device());
}

// Every weight-gradient op adds its micro-batch's whole sum once (grad += sum), one op a parameter:
// so an odd leaf computed into its lone left neighbour is their sum, bitwise. Leaf 0 goes into the
// (zeroed) gradients, where the tree's sum, always growing in its first buffer, ends.
bool Layer::backward_weight(Stash& stash, const MicroBatch& mb, const RunOptions& opt) {
    if (!sum_of_) return weight_grads(stash, mb, opt), true;
    Buf leaf;   // (params): this micro-batch's gradients alone, added into zeros
    Buf* into = tree_.lone_last();   // or leaf i - 1 alone, for an odd i
    if (!into && tree_.leaves() == 0) leaf.swap(grads);
    else if (!into && spare_.empty()) leaf.zeros(params.size(), params.device());
    else if (!into) leaf.swap(spare_.back()), spare_.pop_back(), leaf.zero();
    Buf& sum = into ? *into : leaf;   // where this micro-batch's gradients add
    sum.swap(grads), weight_grads(stash, mb, opt), sum.swap(grads);
    into ? tree_.grow() : tree_.push(std::move(leaf));
    if (int(tree_.leaves()) < sum_of_) return false;
    grads = tree_.finish();
    spare_.clear();   // the tree's ⌈log2 M⌉ - 1 other buffers live only from the first backward to the last
    return true;
}

namespace {

uint64_t splitmix64(uint64_t& s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void Layer::init(uint64_t seed, float std_dev) {
    std::vector<float> host(params.size());   // drawn on the host, then copied to the layer's device
    for (const ParamInfo& p : params_info) {
        float* w = host.data() + p.offset;
        bool is_ln = p.name.find("LayerNorm") != std::string::npos;
        if (is_ln && ends_with(p.name, ".weight")) {
            for (size_t i = 0; i < p.numel; i++) w[i] = 1.0f;
        } else if (p.shape.size() == 1) {
            for (size_t i = 0; i < p.numel; i++) w[i] = 0.0f;   // biases
        } else {
            // The tied copy draws from the word embedding's stream, so both copies start equal.
            std::string key = p.tied ? "ernie.embeddings.word_embeddings.weight" : p.name;
            uint64_t s = seed ^ fnv1a(key);
            for (size_t i = 0; i < p.numel; i += 2) {   // Box-Muller, two normals per pair
                double u1 = ((splitmix64(s) >> 11) + 1.0) * 0x1.0p-53;
                double u2 = (splitmix64(s) >> 11) * 0x1.0p-53;
                double r = std::sqrt(-2.0 * std::log(u1));
                w[i] = float(std_dev * r * std::cos(2 * M_PI * u2));
                if (i + 1 < p.numel) w[i + 1] = float(std_dev * r * std::sin(2 * M_PI * u2));
            }
        }
    }
    params.assign(host, params.device());
}

namespace {

// The GEMM of the linear layers: fp32, or on bfloat16-rounded inputs with --dtype bf16.
using Gemm = void (*)(float*, const float*, const float*, const float*, int, int, int, bool, bool, float, float);
Gemm mm(const RunOptions& o) { return o.bf16 ? dev::gemm_bf16 : dev::gemm; }

// Linear layer with Hugging Face [out, in] weights: out (N, OC) = inp (N, IC) @ W^T + b.
void linear_forward(const RunOptions& o, float* out, const float* inp, const float* w, const float* b, int N, int IC,
                    int OC) {
    mm(o)(out, inp, w, b, N, OC, IC, false, true, 1.0f, 0.0f);
}
// dinp (N, IC) += dout (N, OC) @ W; with beta 0, dinp = dout @ W (its old contents never read)
void linear_backward_input(const RunOptions& o, float* dinp, const float* dout, const float* w, int N, int IC, int OC, float beta = 1.0f) {
    mm(o)(dinp, dout, w, nullptr, N, IC, OC, false, false, 1.0f, beta);
}
// dW (OC, IC) += dout^T @ inp ; db (OC) += column sums of dout
void linear_backward_weight(const RunOptions& o, float* dw, float* db, const float* dout, const float* inp, int N,
                            int IC, int OC) {
    mm(o)(dw, dout, inp, nullptr, OC, IC, N, true, false, 1.0f, 1.0f);
    if (db) dev::bias_backward(db, dout, N, OC);
}

// Rows `rows` of x (rows of width C) as a new (n, C) array: the embedding lookup is a gather.
Buf gather_rows(const float* x, const Array<int32_t>& rows, int C) {
    Buf out(rows.size() * C);   // (n, C)
    dev::embedding_forward(out.data(), rows.data(), x, int(rows.size()), C);
    return out;
}

// An int array on this thread's device.
Array<int32_t> on_device(const std::vector<int32_t>& v) {
    Array<int32_t> a;
    a.assign(v);
    return a;
}

// The sum in float64 of the per-row losses, read back to the host; counts the rows with a target.
void sum_losses(HeadStash& s, const Buf& losses) {
    std::vector<float> l = losses.host();
    for (size_t i = 0; i < l.size(); i++)
        if (s.targets[i] != kIgnore) s.loss_sum += l[i], s.num_targets++;
}

// The FFN's and the MLM head's activation, chosen once from config.json's hidden_act when the
// layer is built (the loader accepts only "gelu" and "relu"), not by a string on every call.
struct Activation {
    void (*forward)(float* out, const float* inp, int n);
    void (*backward)(float* dinp, const float* inp, const float* dout, int n);
};
Activation activation(const std::string& hidden_act) {
    if (hidden_act == "relu") return {dev::relu_forward, dev::relu_backward};
    if (hidden_act == "gelu") return {dev::gelu_forward, dev::gelu_backward};
    throw std::invalid_argument("hidden_act must be \"gelu\" or \"relu\", got \"" + hidden_act + "\"");
}

ops::DropoutKey dropout_key(const RunOptions& opt, const MicroBatch& mb, int layer, int site) {
    return {opt.seed, uint32_t(mb.step), uint32_t(mb.index), uint32_t(layer), uint32_t(site)};
}

Buf zeros(size_t n) { return Buf(n); }

// ---------------------------------------------------------------------------------------------
// Embedding: out = dropout(LN(word[ids] + pos[t] + type[types] (+ task[tasks])))
struct EmbeddingStash : Stash {
    Buf e, mean, rstd;   // e (B*T, C): the sum before LayerNorm
    Buf dy, de;          // BI → BW: gradient at the LN output and at e
    EmbeddingStash() { buffers = {&e, &mean, &rstd, &dy, &de}, activations = {&e}; }
};

class Embedding : public Layer {
 public:
    Embedding(const ModelConfig& cfg, int index) : Layer(index), cfg_(cfg) {
        int C = cfg.hidden_size;
        word_ = add_param("ernie.embeddings.word_embeddings.weight", {cfg.vocab_size, C});
        pos_ = add_param("ernie.embeddings.position_embeddings.weight", {cfg.max_position_embeddings, C});
        type_ = add_param("ernie.embeddings.token_type_embeddings.weight", {cfg.type_vocab_size, C});
        if (cfg.use_task_id)
            task_ = add_param("ernie.embeddings.task_type_embeddings.weight", {cfg.task_type_vocab_size, C});
        lnw_ = add_param("ernie.embeddings.LayerNorm.weight", {C}, false);
        lnb_ = add_param("ernie.embeddings.LayerNorm.bias", {C}, false);
        finish_params();
    }
    size_t out_numel(int B, int T) const override { return size_t(B) * T * cfg_.hidden_size; }

    std::unique_ptr<Stash> forward(float* out, const float*, const MicroBatch& mb, const RunOptions& opt) override {
        int N = mb.B * mb.T, C = cfg_.hidden_size;
        auto s = std::make_unique<EmbeddingStash>();
        s->e = zeros(size_t(N) * C);              // (N, C), N = B*T
        s->mean.resize(N), s->rstd.resize(N);     // (N)
        const Array<int32_t>& pos = positions(mb.B, mb.T);   // (B, T)
        dev::embedding_forward(s->e.data(), mb.dev.input_ids, param(word_), N, C);
        dev::embedding_forward(s->e.data(), pos.data(), param(pos_), N, C);
        dev::embedding_forward(s->e.data(), mb.dev.token_type_ids, param(type_), N, C);
        if (cfg_.use_task_id) dev::embedding_forward(s->e.data(), task_ids(mb), param(task_), N, C);
        // out (N, C)
        dev::layernorm_forward(out, s->mean.data(), s->rstd.data(), s->e.data(), param(lnw_), param(lnb_), N, C,
                               cfg_.layer_norm_eps);
        dev::dropout_forward(out, out, opt.train ? opt.hidden_dropout : 0.0f, dropout_key(opt, mb, index_, 0), N * C);
        return s;
    }
    // Nothing flows further back: BI only prepares dL/de so that BW is pure scatter-adds.
    void backward_input(float*, const float* dout, Stash& st, const MicroBatch& mb, const RunOptions& opt) override {
        auto& s = static_cast<EmbeddingStash&>(st);
        int N = mb.B * mb.T, C = cfg_.hidden_size;
        s.dy = zeros(size_t(N) * C);   // (N, C), like dout
        dev::dropout_backward(s.dy.data(), dout, opt.train ? opt.hidden_dropout : 0.0f,
                              dropout_key(opt, mb, index_, 0), N * C);
        s.de = zeros(size_t(N) * C);   // (N, C)
        dev::layernorm_backward(s.de.data(), nullptr, nullptr, s.dy.data(), s.e.data(), param(lnw_), s.mean.data(),
                                s.rstd.data(), N, C);
    }
    void weight_grads(Stash& st, const MicroBatch& mb, const RunOptions&) override {
        auto& s = static_cast<EmbeddingStash&>(st);
        int N = mb.B * mb.T, C = cfg_.hidden_size;
        const Array<int32_t>& pos = positions(mb.B, mb.T);   // (B, T)
        dev::layernorm_backward(nullptr, grad(lnw_), grad(lnb_), s.dy.data(), s.e.data(), param(lnw_), s.mean.data(),
                                s.rstd.data(), N, C);
        dev::embedding_backward(grad(word_), s.de.data(), mb.dev.input_ids, N, C);
        dev::embedding_backward(grad(pos_), s.de.data(), pos.data(), N, C);
        dev::embedding_backward(grad(type_), s.de.data(), mb.dev.token_type_ids, N, C);
        if (cfg_.use_task_id) dev::embedding_backward(grad(task_), s.de.data(), task_ids(mb), N, C);
    }

 private:
    // Without task_type_ids (text from --data, fill-mask, ...) every token has task 0, as in
    // Hugging Face and PaddleNLP: row 0 of the table is added, not nothing.
    const int32_t* task_ids(const MicroBatch& mb) {
        if (mb.dev.task_type_ids) return mb.dev.task_type_ids;
        if (no_tasks_.size() != size_t(mb.B) * mb.T || !(no_tasks_.device() == current_device()))
            no_tasks_.assign(std::vector<int32_t>(size_t(mb.B) * mb.T, 0));
        return no_tasks_.data();
    }
    // Position ids (B, T) on this thread's device, made once per shape rather than per call (on a
    // GPU each upload would wait for the copy).
    const Array<int32_t>& positions(int B, int T) {
        if (positions_.size() != size_t(B) * T || T != positions_T_ || !(positions_.device() == current_device())) {
            std::vector<int32_t> pos(size_t(B) * T);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) pos[size_t(b) * T + t] = t;
            positions_.assign(pos), positions_T_ = T;
        }
        return positions_;
    }
    ModelConfig cfg_;
    size_t word_, pos_, type_, task_ = 0, lnw_, lnb_;
    Array<int32_t> positions_, no_tasks_;
    int positions_T_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Block (post-LN):  a = LN1(x + drop(Attn(x)))   y = LN2(a + drop(W2 act(W1 a + b1) + b2))
struct BlockStash : Stash {
    // forward, all (N, C) unless noted; N = B*T
    Buf x, q, k, v, lse /* (B, NH, T) */, yatt, r1, mean1, rstd1, a,
        h /* (N, I) */, g /* (N, I) */, r2, mean2, rstd2;
    // BI → BW: the gradients at each weight's output
    Buf dy, df, dh, da, dproj, dq, dk, dv;
    BlockStash() {
        buffers = {&x, &q, &k, &v, &lse, &yatt, &r1, &mean1, &rstd1, &a, &h, &g, &r2, &mean2, &rstd2,
                   &dy, &df, &dh, &da, &dproj, &dq, &dk, &dv};
        activations = {&x, &q, &k, &v, &yatt, &r1, &a, &h, &g, &r2};
    }
};

class Block : public Layer {
 public:
    Block(const ModelConfig& cfg, int index) : Layer(index), cfg_(cfg), act_(activation(cfg.hidden_act)) {
        int C = cfg.hidden_size, I = cfg.intermediate_size;
        std::string p = "ernie.encoder.layer." + std::to_string(index - 1) + ".";
        wq_ = add_param(p + "attention.self.query.weight", {C, C});
        bq_ = add_param(p + "attention.self.query.bias", {C}, false);
        wk_ = add_param(p + "attention.self.key.weight", {C, C});
        bk_ = add_param(p + "attention.self.key.bias", {C}, false);
        wv_ = add_param(p + "attention.self.value.weight", {C, C});
        bv_ = add_param(p + "attention.self.value.bias", {C}, false);
        wo_ = add_param(p + "attention.output.dense.weight", {C, C});
        bo_ = add_param(p + "attention.output.dense.bias", {C}, false);
        ln1w_ = add_param(p + "attention.output.LayerNorm.weight", {C}, false);
        ln1b_ = add_param(p + "attention.output.LayerNorm.bias", {C}, false);
        w1_ = add_param(p + "intermediate.dense.weight", {I, C});
        b1_ = add_param(p + "intermediate.dense.bias", {I}, false);
        w2_ = add_param(p + "output.dense.weight", {C, I});
        b2_ = add_param(p + "output.dense.bias", {C}, false);
        ln2w_ = add_param(p + "output.LayerNorm.weight", {C}, false);
        ln2b_ = add_param(p + "output.LayerNorm.bias", {C}, false);
        finish_params();
    }
    size_t out_numel(int B, int T) const override { return size_t(B) * T * cfg_.hidden_size; }

    std::unique_ptr<Stash> forward(float* out, const float* in, const MicroBatch& mb, const RunOptions& opt) override {
        int B = mb.B, T = mb.T, C = cfg_.hidden_size, I = cfg_.intermediate_size, N = B * T;
        int NH = cfg_.num_attention_heads, HS = cfg_.head_size();
        size_t NC = size_t(N) * C, NI = size_t(N) * I;
        float eps = cfg_.layer_norm_eps;
        auto s = std::make_unique<BlockStash>();
        s->x.assign(in, NC);                                                      // (N, C)
        s->q.resize(NC), s->k.resize(NC), s->v.resize(NC), s->yatt.resize(NC);    // (N, C) = (B, T, NH, HS)
        s->lse.resize(size_t(B) * NH * T);  // flash attention: no (B, NH, T, T) probabilities kept
        linear_forward(opt, s->q.data(), in, param(wq_), param(bq_), N, C, C);
        linear_forward(opt, s->k.data(), in, param(wk_), param(bk_), N, C, C);
        linear_forward(opt, s->v.data(), in, param(wv_), param(bv_), N, C, C);
        dev::attention_forward_flash(s->yatt.data(), s->lse.data(), s->q.data(), s->k.data(), s->v.data(),
                                     mb.dev.attention_mask, opt.causal, p_att(opt), dropout_key(opt, mb, index_, 0), B,
                                     T, NH, HS);
        Buf o; o.resize(NC);   // (N, C): the attention's output projection
        linear_forward(opt, o.data(), s->yatt.data(), param(wo_), param(bo_), N, C, C);
        dev::dropout_forward(o.data(), o.data(), p_hid(opt), dropout_key(opt, mb, index_, 1), int(NC));
        s->r1.resize(NC), s->a.resize(NC), s->mean1.resize(N), s->rstd1.resize(N);   // (N, C), (N, C), (N), (N)
        dev::add_forward(s->r1.data(), in, o.data(), int(NC));
        dev::layernorm_forward(s->a.data(), s->mean1.data(), s->rstd1.data(), s->r1.data(), param(ln1w_), param(ln1b_), N, C, eps);
        s->h.resize(NI), s->g.resize(NI);   // (N, I): before and after the activation
        linear_forward(opt, s->h.data(), s->a.data(), param(w1_), param(b1_), N, C, I);
        act_.forward(s->g.data(), s->h.data(), int(NI));
        Buf& f = o;   // reuse: FFN output (N, C)
        linear_forward(opt, f.data(), s->g.data(), param(w2_), param(b2_), N, I, C);
        dev::dropout_forward(f.data(), f.data(), p_hid(opt), dropout_key(opt, mb, index_, 2), int(NC));
        s->r2.resize(NC), s->mean2.resize(N), s->rstd2.resize(N);   // (N, C), (N), (N)
        dev::add_forward(s->r2.data(), s->a.data(), f.data(), int(NC));
        // out (N, C)
        dev::layernorm_forward(out, s->mean2.data(), s->rstd2.data(), s->r2.data(), param(ln2w_), param(ln2b_), N, C, eps);
        return s;
    }

    void backward_input(float* din, const float* dout, Stash& st, const MicroBatch& mb, const RunOptions& opt) override {
        auto& s = static_cast<BlockStash&>(st);
        int B = mb.B, T = mb.T, C = cfg_.hidden_size, I = cfg_.intermediate_size, N = B * T;
        int NH = cfg_.num_attention_heads, HS = cfg_.head_size();
        size_t NC = size_t(N) * C, NI = size_t(N) * I;
        s.dy.assign(dout, NC);   // (N, C)
        Buf dr2 = zeros(NC);     // (N, C)
        dev::layernorm_backward(dr2.data(), nullptr, nullptr, dout, s.r2.data(), param(ln2w_), s.mean2.data(), s.rstd2.data(), N, C);
        // FFN branch
        s.df = zeros(NC);        // (N, C)
        dev::dropout_backward(s.df.data(), dr2.data(), p_hid(opt), dropout_key(opt, mb, index_, 2), int(NC));
        Buf dg; dg.resize(NI);   // (N, I), written whole below (beta 0): no zeros first
        linear_backward_input(opt, dg.data(), s.df.data(), param(w2_), N, I, C, 0.0f);
        s.dh = zeros(NI);        // (N, I)
        act_.backward(s.dh.data(), s.h.data(), dg.data(), int(NI));
        s.da = dr2;   // (N, C): the residual path a → r2
        linear_backward_input(opt, s.da.data(), s.dh.data(), param(w1_), N, C, I);
        // attention branch
        Buf dr1 = zeros(NC);     // (N, C)
        dev::layernorm_backward(dr1.data(), nullptr, nullptr, s.da.data(), s.r1.data(), param(ln1w_), s.mean1.data(), s.rstd1.data(), N, C);
        s.dproj = zeros(NC);     // (N, C)
        dev::dropout_backward(s.dproj.data(), dr1.data(), p_hid(opt), dropout_key(opt, mb, index_, 1), int(NC));
        Buf dyatt; dyatt.resize(NC);   // (N, C) = (B, T, NH, HS), written whole below
        linear_backward_input(opt, dyatt.data(), s.dproj.data(), param(wo_), N, C, C, 0.0f);
        s.dq = zeros(NC), s.dk = zeros(NC), s.dv = zeros(NC);   // (N, C) each
        dev::attention_backward_flash(s.dq.data(), s.dk.data(), s.dv.data(), dyatt.data(), s.yatt.data(),
                                      s.lse.data(), s.q.data(), s.k.data(), s.v.data(), mb.dev.attention_mask,
                                      opt.causal, p_att(opt), dropout_key(opt, mb, index_, 0), B, T, NH, HS);
        // din (N, C) += the residual path x → r1, then the three projections, in a fixed order
        dev::accumulate(din, dr1.data(), int(NC));
        linear_backward_input(opt, din, s.dq.data(), param(wq_), N, C, C);
        linear_backward_input(opt, din, s.dk.data(), param(wk_), N, C, C);
        linear_backward_input(opt, din, s.dv.data(), param(wv_), N, C, C);
    }

    void weight_grads(Stash& st, const MicroBatch& mb, const RunOptions& opt) override {
        auto& s = static_cast<BlockStash&>(st);
        int C = cfg_.hidden_size, I = cfg_.intermediate_size, N = mb.B * mb.T;
        dev::layernorm_backward(nullptr, grad(ln2w_), grad(ln2b_), s.dy.data(), s.r2.data(), param(ln2w_), s.mean2.data(), s.rstd2.data(), N, C);
        linear_backward_weight(opt, grad(w2_), grad(b2_), s.df.data(), s.g.data(), N, I, C);
        linear_backward_weight(opt, grad(w1_), grad(b1_), s.dh.data(), s.a.data(), N, C, I);
        dev::layernorm_backward(nullptr, grad(ln1w_), grad(ln1b_), s.da.data(), s.r1.data(), param(ln1w_), s.mean1.data(), s.rstd1.data(), N, C);
        linear_backward_weight(opt, grad(wo_), grad(bo_), s.dproj.data(), s.yatt.data(), N, C, C);
        linear_backward_weight(opt, grad(wq_), grad(bq_), s.dq.data(), s.x.data(), N, C, C);
        linear_backward_weight(opt, grad(wk_), grad(bk_), s.dk.data(), s.x.data(), N, C, C);
        linear_backward_weight(opt, grad(wv_), grad(bv_), s.dv.data(), s.x.data(), N, C, C);
    }

 private:
    float p_hid(const RunOptions& o) const { return o.train ? o.hidden_dropout : 0.0f; }
    float p_att(const RunOptions& o) const { return o.train ? o.attention_dropout : 0.0f; }
    ModelConfig cfg_;
    Activation act_;
    size_t wq_, bq_, wk_, bk_, wv_, bv_, wo_, bo_, ln1w_, ln1b_, w1_, b1_, w2_, b2_, ln2w_, ln2b_;
};

// pooled (B, C) = tanh(Wp h[b, 0] + bp): the [CLS] row of each sequence through the pooler.
Buf pool(const RunOptions& opt, const float* h, int B, int T, int C, const float* w, const float* b) {
    std::vector<int32_t> cls_rows(B);   // (B): row b*T of h (B*T, C) is sequence b's [CLS]
    for (int i = 0; i < B; i++) cls_rows[i] = i * T;
    Buf cls = gather_rows(h, on_device(cls_rows), C), pre(size_t(B) * C), out(size_t(B) * C);   // (B, C) each
    linear_forward(opt, pre.data(), cls.data(), w, b, B, C, C);
    dev::tanh_forward(out.data(), pre.data(), B * C);
    return out;
}

// The loss sum as the head's one output element (nobody sends it; it keeps the layer interface).
void write_loss(float* out, double loss_sum) {
    float v = float(loss_sum);
    copy_bytes(out, &v, sizeof v);
}

// ---------------------------------------------------------------------------------------------
// MLM head + loss: logits = LN(act(h Wt^T + bt)) E^T + bias, E tied to the word embedding.
// Training computes logits only at rows that have a target (15% of them for MLM): the other
// rows cannot change the loss, and the vocabulary GEMM is the most expensive one in the model.
class Head : public Layer {
 public:
    Head(const ModelConfig& cfg, int index) : Layer(index), cfg_(cfg), act_(activation(cfg.hidden_act)) {
        int C = cfg.hidden_size;
        wt_ = add_param("cls.predictions.transform.dense.weight", {C, C});
        bt_ = add_param("cls.predictions.transform.dense.bias", {C}, false);
        lnw_ = add_param("cls.predictions.transform.LayerNorm.weight", {C}, false);
        lnb_ = add_param("cls.predictions.transform.LayerNorm.bias", {C}, false);
        bias_ = add_param("cls.predictions.bias", {cfg.vocab_size}, false);
        // The pooler is not part of the MLM loss; it is kept (and saved) so that a checkpoint's
        // pooler survives MLM training and eval can report pooled_output.
        pw_ = add_param("ernie.pooler.dense.weight", {C, C}, false);
        pb_ = add_param("ernie.pooler.dense.bias", {C}, false);
        params_info[params_info.size() - 2].optional = params_info.back().optional = true;
        emb_ = add_param("cls.predictions.decoder.weight", {cfg.vocab_size, C});
        params_info.back().tied = true;
        finish_params();
    }
    size_t out_numel(int, int) const override { return 1; }

    std::unique_ptr<Stash> forward(float* out, const float* in, const MicroBatch& mb, const RunOptions& opt) override {
        int C = cfg_.hidden_size, V = cfg_.vocab_size, NT = mb.B * mb.T;
        auto s = std::make_unique<HeadStash>();   // n = the rows with a target (all with all_logits)
        s->buffers = {&s->h, &s->t, &s->u, &s->z, &s->mean, &s->rstd, &s->logits, &s->dlogits, &s->dz, &s->dt};
        s->activations = {&s->h, &s->t, &s->u, &s->z, &s->logits};
        for (int r = 0; r < NT; r++)
            if (opt.all_logits || mb.targets[r] != kIgnore) s->rows.push_back(r), s->targets.push_back(mb.targets[r]);
        int n = int(s->rows.size());
        s->rows_dev = on_device(s->rows), s->targets_dev = on_device(s->targets);   // (n), (n)
        s->h = gather_rows(in, s->rows_dev, C);                                      // (n, C) of in (B*T, C)
        s->t.resize(size_t(n) * C), s->u.resize(size_t(n) * C), s->z.resize(size_t(n) * C);   // (n, C) each
        s->mean.resize(n), s->rstd.resize(n), s->logits.resize(size_t(n) * V);       // (n), (n), (n, V)
        if (n > 0) {
            linear_forward(opt, s->t.data(), s->h.data(), param(wt_), param(bt_), n, C, C);
            act_.forward(s->u.data(), s->t.data(), n * C);
            dev::layernorm_forward(s->z.data(), s->mean.data(), s->rstd.data(), s->u.data(), param(lnw_), param(lnb_), n, C,
                                   cfg_.layer_norm_eps);
            linear_forward(opt, s->logits.data(), s->z.data(), param(emb_), param(bias_), n, C, V);
            Buf losses(n);   // (n)
            dev::crossentropy_forward(losses.data(), s->logits.data(), s->targets_dev.data(), n, V);
            sum_losses(*s, losses);
        }
        if (opt.all_logits) s->pooled = pool(opt, in, mb.B, mb.T, C, param(pw_), param(pb_));   // (B, C)
        write_loss(out, s->loss_sum);
        return s;
    }

    void backward_input(float* din, const float*, Stash& st, const MicroBatch& mb, const RunOptions& opt) override {
        auto& s = static_cast<HeadStash&>(st);
        int C = cfg_.hidden_size, V = cfg_.vocab_size, n = int(s.rows.size());
        if (n == 0) return;
        s.dlogits = zeros(size_t(n) * V);   // (n, V)
        dev::crossentropy_backward(s.dlogits.data(), s.logits.data(), s.targets_dev.data(), mb.loss_scale, n, V);
        s.dz.resize(size_t(n) * C);         // (n, C)
        linear_backward_input(opt, s.dz.data(), s.dlogits.data(), param(emb_), n, C, V, 0.0f);
        Buf du = zeros(size_t(n) * C);      // (n, C)
        dev::layernorm_backward(du.data(), nullptr, nullptr, s.dz.data(), s.u.data(), param(lnw_), s.mean.data(), s.rstd.data(), n, C);
        s.dt = zeros(size_t(n) * C);        // (n, C)
        act_.backward(s.dt.data(), s.t.data(), du.data(), n * C);
        Buf dh; dh.resize(size_t(n) * C);   // (n, C)
        linear_backward_input(opt, dh.data(), s.dt.data(), param(wt_), n, C, C, 0.0f);
        dev::embedding_backward(din, dh.data(), s.rows_dev.data(), n, C);   // din (B*T, C): scatter-add to the rows
    }

    void weight_grads(Stash& st, const MicroBatch&, const RunOptions& opt) override {
        auto& s = static_cast<HeadStash&>(st);
        int C = cfg_.hidden_size, V = cfg_.vocab_size, n = int(s.rows.size());
        if (n == 0) return;
        linear_backward_weight(opt, grad(emb_), grad(bias_), s.dlogits.data(), s.z.data(), n, C, V);
        dev::layernorm_backward(nullptr, grad(lnw_), grad(lnb_), s.dz.data(), s.u.data(), param(lnw_), s.mean.data(), s.rstd.data(), n, C);
        linear_backward_weight(opt, grad(wt_), grad(bt_), s.dt.data(), s.h.data(), n, C, C);
    }

 private:
    ModelConfig cfg_;
    Activation act_;
    size_t wt_, bt_, lnw_, lnb_, bias_, pw_, pb_, emb_;
};

// ---------------------------------------------------------------------------------------------
// Sequence classifier: logits = W dropout(tanh(Wp h[:, 0] + bp)) + b, cross-entropy against the
// label stored at each sequence's [CLS] position (targets[b*T]; kIgnore = unlabeled).
class ClassifierHead : public Layer {
 public:
    ClassifierHead(const ModelConfig& cfg, int index) : Layer(index), cfg_(cfg) {
        int C = cfg.hidden_size, L = cfg.num_labels;
        pw_ = add_param("ernie.pooler.dense.weight", {C, C});
        pb_ = add_param("ernie.pooler.dense.bias", {C}, false);
        cw_ = add_param("classifier.weight", {L, C});
        cb_ = add_param("classifier.bias", {L}, false);
        for (ParamInfo& p : params_info) p.optional = true;   // a pre-trained encoder has no classifier yet
        finish_params();
    }
    size_t out_numel(int, int) const override { return 1; }

    // Stash fields: h = [CLS] rows (B, C), t = pooled, u = pooled after dropout, logits (B, L).
    std::unique_ptr<Stash> forward(float* out, const float* in, const MicroBatch& mb, const RunOptions& opt) override {
        int C = cfg_.hidden_size, L = cfg_.num_labels, B = mb.B;
        auto s = std::make_unique<HeadStash>();
        s->buffers = {&s->h, &s->t, &s->u, &s->logits, &s->dlogits, &s->dt};
        s->activations = {&s->h, &s->t, &s->u, &s->logits};
        for (int b = 0; b < B; b++) s->rows.push_back(b * mb.T), s->targets.push_back(mb.targets[size_t(b) * mb.T]);
        s->rows_dev = on_device(s->rows), s->targets_dev = on_device(s->targets);   // (B), (B)
        s->h = gather_rows(in, s->rows_dev, C);                                      // (B, C) of in (B*T, C)
        // t (B, C), u (B, C), logits (B, L)
        s->t.resize(size_t(B) * C), s->u.resize(size_t(B) * C), s->logits.resize(size_t(B) * L);
        Buf pre(size_t(B) * C);   // (B, C): before tanh
        linear_forward(opt, pre.data(), s->h.data(), param(pw_), param(pb_), B, C, C);
        dev::tanh_forward(s->t.data(), pre.data(), B * C);
        dev::dropout_forward(s->u.data(), s->t.data(), p_hid(opt), dropout_key(opt, mb, index_, 0), B * C);
        linear_forward(opt, s->logits.data(), s->u.data(), param(cw_), param(cb_), B, C, L);
        Buf losses(B);   // (B)
        dev::crossentropy_forward(losses.data(), s->logits.data(), s->targets_dev.data(), B, L);
        sum_losses(*s, losses);
        s->pooled = s->t;
        write_loss(out, s->loss_sum);
        return s;
    }

    void backward_input(float* din, const float*, Stash& st, const MicroBatch& mb, const RunOptions& opt) override {
        auto& s = static_cast<HeadStash&>(st);
        int C = cfg_.hidden_size, L = cfg_.num_labels, B = mb.B;
        s.dlogits = zeros(size_t(B) * L);   // (B, L)
        dev::crossentropy_backward(s.dlogits.data(), s.logits.data(), s.targets_dev.data(), mb.loss_scale, B, L);
        Buf du = zeros(size_t(B) * C), dp = zeros(size_t(B) * C);   // (B, C): after and before dropout
        linear_backward_input(opt, du.data(), s.dlogits.data(), param(cw_), B, C, L);
        dev::dropout_backward(dp.data(), du.data(), p_hid(opt), dropout_key(opt, mb, index_, 0), B * C);
        s.dt = zeros(size_t(B) * C);   // (B, C): the gradient before tanh
        dev::tanh_backward(s.dt.data(), s.t.data(), dp.data(), B * C);
        Buf dh; dh.resize(size_t(B) * C);   // (B, C)
        linear_backward_input(opt, dh.data(), s.dt.data(), param(pw_), B, C, C, 0.0f);
        dev::embedding_backward(din, dh.data(), s.rows_dev.data(), B, C);   // din (B*T, C): back to the [CLS] rows
    }

    void weight_grads(Stash& st, const MicroBatch& mb, const RunOptions& opt) override {
        auto& s = static_cast<HeadStash&>(st);
        int C = cfg_.hidden_size, L = cfg_.num_labels, B = mb.B;
        linear_backward_weight(opt, grad(cw_), grad(cb_), s.dlogits.data(), s.u.data(), B, C, L);
        linear_backward_weight(opt, grad(pw_), grad(pb_), s.dt.data(), s.h.data(), B, C, C);
    }

 private:
    float p_hid(const RunOptions& o) const { return o.train ? o.hidden_dropout : 0.0f; }
    ModelConfig cfg_;
    size_t pw_, pb_, cw_, cb_;
};

}  // namespace

int num_model_layers(const ModelConfig& cfg) { return cfg.num_hidden_layers + 2; }

const ParamInfo* tied_param(const Layer& layer) {
    for (const ParamInfo& p : layer.params_info)
        if (p.tied) return &p;
    return nullptr;
}

std::unique_ptr<Layer> make_layer(const ModelConfig& cfg, int index) {
    if (index == 0) return std::make_unique<Embedding>(cfg, index);
    if (index <= cfg.num_hidden_layers) return std::make_unique<Block>(cfg, index);
    if (index == cfg.num_hidden_layers + 1) {
        if (cfg.num_labels > 0) return std::make_unique<ClassifierHead>(cfg, index);
        return std::make_unique<Head>(cfg, index);
    }
    throw std::out_of_range("layer index " + std::to_string(index) + " out of range");
}

double layer_flops_per_token(const ModelConfig& cfg, int index, int T) {
    double C = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
    if (index == 0) return 10 * C;                                   // gathers + LayerNorm
    if (index <= cfg.num_hidden_layers) return 2 * (4 * C * C + 2 * C * I) + 4 * T * C;
    if (cfg.num_labels > 0) return 2 * C * C / T;                    // one [CLS] row per sequence
    return 2 * (C * C + 0.15 * C * V);                               // MLM: ~15% of rows reach the vocab GEMM
}

}  // namespace pt
