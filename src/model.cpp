#include "src/model.hpp"

#include <cmath>
#include <stdexcept>

#include "kernels/ops.hpp"

namespace pt {

size_t Stash::bytes() const {
    size_t n = 0;
    for (const auto* b : buffers) n += b->size() * sizeof(float);
    return n;
}

float* Layer::param(const std::string& name) {
    for (const ParamInfo& p : params_info)
        if (p.name == name) return params.data() + p.offset;
    throw std::runtime_error("no parameter named " + name);
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
    params.assign(n, 0.0f);
    grads.assign(n, 0.0f);
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
    for (const ParamInfo& p : params_info) {
        float* w = params.data() + p.offset;
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
}

namespace {

// Linear layer with Hugging Face [out, in] weights: out (N, OC) = inp (N, IC) @ W^T + b.
void linear_forward(float* out, const float* inp, const float* w, const float* b, int N, int IC, int OC) {
    ops::gemm(out, inp, w, b, N, OC, IC, false, true, 1.0f, 0.0f);
}
// dinp (N, IC) += dout (N, OC) @ W
void linear_backward_input(float* dinp, const float* dout, const float* w, int N, int IC, int OC) {
    ops::gemm(dinp, dout, w, nullptr, N, IC, OC, false, false, 1.0f, 1.0f);
}
// dW (OC, IC) += dout^T @ inp ; db (OC) += column sums of dout
void linear_backward_weight(float* dw, float* db, const float* dout, const float* inp, int N, int IC, int OC) {
    ops::gemm(dw, dout, inp, nullptr, OC, IC, N, true, false, 1.0f, 1.0f);
    if (db) ops::bias_backward(db, dout, N, OC);
}

void act_forward(const std::string& act, float* out, const float* inp, int n) {
    if (act == "relu") ops::relu_forward(out, inp, n);
    else ops::gelu_forward(out, inp, n);
}
void act_backward(const std::string& act, float* dinp, const float* inp, const float* dout, int n) {
    if (act == "relu") ops::relu_backward(dinp, inp, dout, n);
    else ops::gelu_backward(dinp, inp, dout, n);
}

ops::DropoutKey dropout_key(const RunOptions& opt, const MicroBatch& mb, int layer, int site) {
    ops::DropoutKey k;
    k.seed = opt.seed, k.step = mb.step, k.microbatch = mb.index;
    k.layer = uint32_t(layer), k.site = uint32_t(site);
    return k;
}


std::vector<float> zeros(size_t n) { return std::vector<float>(n, 0.0f); }

// ---------------------------------------------------------------------------------------------
// Embedding: out = dropout(LN(word[ids] + pos[t] + type[types] (+ task[tasks])))
struct EmbeddingStash : Stash {
    std::vector<float> e, mean, rstd;   // e (B*T, C): the sum before LayerNorm
    std::vector<float> dy, de;          // BI → BW: gradient at the LN output and at e
    EmbeddingStash() { buffers = {&e, &mean, &rstd, &dy, &de}; }
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
        s->e = zeros(size_t(N) * C);
        s->mean.resize(N), s->rstd.resize(N);
        std::vector<int32_t> pos = positions(mb.B, mb.T);
        ops::embedding_forward(s->e.data(), mb.input_ids, P(word_), N, C);
        ops::embedding_forward(s->e.data(), pos.data(), P(pos_), N, C);
        ops::embedding_forward(s->e.data(), mb.token_type_ids, P(type_), N, C);
        if (task_used(mb)) ops::embedding_forward(s->e.data(), mb.task_type_ids, P(task_), N, C);
        ops::layernorm_forward(out, s->mean.data(), s->rstd.data(), s->e.data(), P(lnw_), P(lnb_), N, C,
                               cfg_.layer_norm_eps);
        ops::dropout_forward(out, out, opt.train ? opt.hidden_dropout : 0.0f, dropout_key(opt, mb, index_, 0), N * C);
        return s;
    }
    // Nothing flows further back: BI only prepares dL/de so that BW is pure scatter-adds.
    void backward_input(float*, const float* dout, Stash& st, const MicroBatch& mb, const RunOptions& opt) override {
        auto& s = static_cast<EmbeddingStash&>(st);
        int N = mb.B * mb.T, C = cfg_.hidden_size;
        s.dy = zeros(size_t(N) * C);
        ops::dropout_backward(s.dy.data(), dout, opt.train ? opt.hidden_dropout : 0.0f,
                              dropout_key(opt, mb, index_, 0), N * C);
        s.de = zeros(size_t(N) * C);
        ops::layernorm_backward(s.de.data(), nullptr, nullptr, s.dy.data(), s.e.data(), P(lnw_), s.mean.data(),
                                s.rstd.data(), N, C);
    }
    void backward_weight(Stash& st, const MicroBatch& mb, const RunOptions&) override {
        auto& s = static_cast<EmbeddingStash&>(st);
        int N = mb.B * mb.T, C = cfg_.hidden_size;
        std::vector<int32_t> pos = positions(mb.B, mb.T);
        ops::layernorm_backward(nullptr, G(lnw_), G(lnb_), s.dy.data(), s.e.data(), P(lnw_), s.mean.data(),
                                s.rstd.data(), N, C);
        ops::embedding_backward(G(word_), s.de.data(), mb.input_ids, N, C);
        ops::embedding_backward(G(pos_), s.de.data(), pos.data(), N, C);
        ops::embedding_backward(G(type_), s.de.data(), mb.token_type_ids, N, C);
        if (task_used(mb)) ops::embedding_backward(G(task_), s.de.data(), mb.task_type_ids, N, C);
    }

 private:
    bool task_used(const MicroBatch& mb) const { return cfg_.use_task_id && mb.task_type_ids; }
    static std::vector<int32_t> positions(int B, int T) {
        std::vector<int32_t> pos(size_t(B) * T);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) pos[size_t(b) * T + t] = t;
        return pos;
    }
    ModelConfig cfg_;
    size_t word_, pos_, type_, task_ = 0, lnw_, lnb_;
};

// ---------------------------------------------------------------------------------------------
// Block (post-LN):  a = LN1(x + drop(Attn(x)))   y = LN2(a + drop(W2 act(W1 a + b1) + b2))
struct BlockStash : Stash {
    // forward, all (N, C) unless noted; N = B*T
    std::vector<float> x, q, k, v, att /* (B, NH, T, T) */, yatt, r1, mean1, rstd1, a,
        h /* (N, I) */, g /* (N, I) */, r2, mean2, rstd2;
    // BI → BW: the gradients at each weight's output
    std::vector<float> dy, df, dh, da, dproj, dq, dk, dv;
    BlockStash() {
        buffers = {&x, &q, &k, &v, &att, &yatt, &r1, &mean1, &rstd1, &a, &h, &g, &r2, &mean2, &rstd2,
                   &dy, &df, &dh, &da, &dproj, &dq, &dk, &dv};
    }
};

class Block : public Layer {
 public:
    Block(const ModelConfig& cfg, int index) : Layer(index), cfg_(cfg) {
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
        s->x.assign(in, in + NC);
        s->q.resize(NC), s->k.resize(NC), s->v.resize(NC), s->yatt.resize(NC);
        s->att.resize(size_t(B) * NH * T * T);
        linear_forward(s->q.data(), in, P(wq_), P(bq_), N, C, C);
        linear_forward(s->k.data(), in, P(wk_), P(bk_), N, C, C);
        linear_forward(s->v.data(), in, P(wv_), P(bv_), N, C, C);
        ops::attention_forward(s->yatt.data(), s->att.data(), s->q.data(), s->k.data(), s->v.data(),
                               mb.attention_mask, opt.causal, p_att(opt), dropout_key(opt, mb, index_, 0), B, T, NH, HS);
        std::vector<float> o(NC);
        linear_forward(o.data(), s->yatt.data(), P(wo_), P(bo_), N, C, C);
        ops::dropout_forward(o.data(), o.data(), p_hid(opt), dropout_key(opt, mb, index_, 1), int(NC));
        s->r1.resize(NC), s->a.resize(NC), s->mean1.resize(N), s->rstd1.resize(N);
        ops::add_forward(s->r1.data(), in, o.data(), int(NC));
        ops::layernorm_forward(s->a.data(), s->mean1.data(), s->rstd1.data(), s->r1.data(), P(ln1w_), P(ln1b_), N, C, eps);
        s->h.resize(NI), s->g.resize(NI);
        linear_forward(s->h.data(), s->a.data(), P(w1_), P(b1_), N, C, I);
        act_forward(cfg_.hidden_act, s->g.data(), s->h.data(), int(NI));
        std::vector<float>& f = o;   // reuse: FFN output (N, C)
        linear_forward(f.data(), s->g.data(), P(w2_), P(b2_), N, I, C);
        ops::dropout_forward(f.data(), f.data(), p_hid(opt), dropout_key(opt, mb, index_, 2), int(NC));
        s->r2.resize(NC), s->mean2.resize(N), s->rstd2.resize(N);
        ops::add_forward(s->r2.data(), s->a.data(), f.data(), int(NC));
        ops::layernorm_forward(out, s->mean2.data(), s->rstd2.data(), s->r2.data(), P(ln2w_), P(ln2b_), N, C, eps);
        return s;
    }

    void backward_input(float* din, const float* dout, Stash& st, const MicroBatch& mb, const RunOptions& opt) override {
        auto& s = static_cast<BlockStash&>(st);
        int B = mb.B, T = mb.T, C = cfg_.hidden_size, I = cfg_.intermediate_size, N = B * T;
        int NH = cfg_.num_attention_heads, HS = cfg_.head_size();
        size_t NC = size_t(N) * C, NI = size_t(N) * I;
        s.dy.assign(dout, dout + NC);
        std::vector<float> dr2 = zeros(NC);
        ops::layernorm_backward(dr2.data(), nullptr, nullptr, dout, s.r2.data(), P(ln2w_), s.mean2.data(), s.rstd2.data(), N, C);
        // FFN branch
        s.df = zeros(NC);
        ops::dropout_backward(s.df.data(), dr2.data(), p_hid(opt), dropout_key(opt, mb, index_, 2), int(NC));
        std::vector<float> dg = zeros(NI);
        linear_backward_input(dg.data(), s.df.data(), P(w2_), N, I, C);
        s.dh = zeros(NI);
        act_backward(cfg_.hidden_act, s.dh.data(), s.h.data(), dg.data(), int(NI));
        s.da = dr2;   // the residual path a → r2
        linear_backward_input(s.da.data(), s.dh.data(), P(w1_), N, C, I);
        // attention branch
        std::vector<float> dr1 = zeros(NC);
        ops::layernorm_backward(dr1.data(), nullptr, nullptr, s.da.data(), s.r1.data(), P(ln1w_), s.mean1.data(), s.rstd1.data(), N, C);
        s.dproj = zeros(NC);
        ops::dropout_backward(s.dproj.data(), dr1.data(), p_hid(opt), dropout_key(opt, mb, index_, 1), int(NC));
        std::vector<float> dyatt = zeros(NC);
        linear_backward_input(dyatt.data(), s.dproj.data(), P(wo_), N, C, C);
        s.dq = zeros(NC), s.dk = zeros(NC), s.dv = zeros(NC);
        ops::attention_backward(s.dq.data(), s.dk.data(), s.dv.data(), dyatt.data(), s.att.data(), s.q.data(),
                                s.k.data(), s.v.data(), p_att(opt), dropout_key(opt, mb, index_, 0), B, T, NH, HS);
        // din += the residual path x → r1, then the three projections, in a fixed order
        ops::accumulate(din, dr1.data(), int(NC));
        linear_backward_input(din, s.dq.data(), P(wq_), N, C, C);
        linear_backward_input(din, s.dk.data(), P(wk_), N, C, C);
        linear_backward_input(din, s.dv.data(), P(wv_), N, C, C);
    }

    void backward_weight(Stash& st, const MicroBatch& mb, const RunOptions&) override {
        auto& s = static_cast<BlockStash&>(st);
        int C = cfg_.hidden_size, I = cfg_.intermediate_size, N = mb.B * mb.T;
        ops::layernorm_backward(nullptr, G(ln2w_), G(ln2b_), s.dy.data(), s.r2.data(), P(ln2w_), s.mean2.data(), s.rstd2.data(), N, C);
        linear_backward_weight(G(w2_), G(b2_), s.df.data(), s.g.data(), N, I, C);
        linear_backward_weight(G(w1_), G(b1_), s.dh.data(), s.a.data(), N, C, I);
        ops::layernorm_backward(nullptr, G(ln1w_), G(ln1b_), s.da.data(), s.r1.data(), P(ln1w_), s.mean1.data(), s.rstd1.data(), N, C);
        linear_backward_weight(G(wo_), G(bo_), s.dproj.data(), s.yatt.data(), N, C, C);
        linear_backward_weight(G(wq_), G(bq_), s.dq.data(), s.x.data(), N, C, C);
        linear_backward_weight(G(wk_), G(bk_), s.dk.data(), s.x.data(), N, C, C);
        linear_backward_weight(G(wv_), G(bv_), s.dv.data(), s.x.data(), N, C, C);
    }

 private:
    float p_hid(const RunOptions& o) const { return o.train ? o.hidden_dropout : 0.0f; }
    float p_att(const RunOptions& o) const { return o.train ? o.attention_dropout : 0.0f; }
    ModelConfig cfg_;
    size_t wq_, bq_, wk_, bk_, wv_, bv_, wo_, bo_, ln1w_, ln1b_, w1_, b1_, w2_, b2_, ln2w_, ln2b_;
};

// pooled (B, C) = tanh(Wp h[b, 0] + bp): the [CLS] row of each sequence through the pooler.
std::vector<float> pool(const float* h, int B, int T, int C, const float* w, const float* b) {
    std::vector<float> cls(size_t(B) * C), pre(size_t(B) * C), out(size_t(B) * C);
    for (int i = 0; i < B; i++) std::copy(h + size_t(i) * T * C, h + (size_t(i) * T + 1) * C, cls.begin() + size_t(i) * C);
    linear_forward(pre.data(), cls.data(), w, b, B, C, C);
    ops::tanh_forward(out.data(), pre.data(), B * C);
    return out;
}

// ---------------------------------------------------------------------------------------------
// MLM head + loss: logits = LN(act(h Wt^T + bt)) E^T + bias, E tied to the word embedding.
// Training computes logits only at rows that have a target (15% of them for MLM): the other
// rows cannot change the loss, and the vocabulary GEMM is the most expensive one in the model.
class Head : public Layer {
 public:
    Head(const ModelConfig& cfg, int index) : Layer(index), cfg_(cfg) {
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
        auto s = std::make_unique<HeadStash>();
        s->buffers = {&s->h, &s->t, &s->u, &s->z, &s->mean, &s->rstd, &s->logits, &s->dlogits, &s->dz, &s->dt};
        for (int r = 0; r < NT; r++)
            if (opt.all_logits || mb.targets[r] != kIgnore) s->rows.push_back(r), s->targets.push_back(mb.targets[r]);
        int n = int(s->rows.size());
        s->h.resize(size_t(n) * C);
        for (int i = 0; i < n; i++)
            std::copy(in + size_t(s->rows[i]) * C, in + size_t(s->rows[i] + 1) * C, s->h.begin() + size_t(i) * C);
        s->t.resize(size_t(n) * C), s->u.resize(size_t(n) * C), s->z.resize(size_t(n) * C);
        s->mean.resize(n), s->rstd.resize(n), s->logits.resize(size_t(n) * V);
        if (n > 0) {
            linear_forward(s->t.data(), s->h.data(), P(wt_), P(bt_), n, C, C);
            act_forward(cfg_.hidden_act, s->u.data(), s->t.data(), n * C);
            ops::layernorm_forward(s->z.data(), s->mean.data(), s->rstd.data(), s->u.data(), P(lnw_), P(lnb_), n, C,
                                   cfg_.layer_norm_eps);
            linear_forward(s->logits.data(), s->z.data(), P(emb_), P(bias_), n, C, V);
            std::vector<float> losses(n);
            ops::crossentropy_forward(losses.data(), s->logits.data(), s->targets.data(), n, V);
            for (int i = 0; i < n; i++)
                if (s->targets[i] != kIgnore) s->loss_sum += losses[i], s->num_targets++;
        }
        if (opt.all_logits) s->pooled = pool(in, mb.B, mb.T, C, P(pw_), P(pb_));
        out[0] = float(s->loss_sum);
        return s;
    }

    void backward_input(float* din, const float*, Stash& st, const MicroBatch& mb, const RunOptions&) override {
        auto& s = static_cast<HeadStash&>(st);
        int C = cfg_.hidden_size, V = cfg_.vocab_size, n = int(s.rows.size());
        if (n == 0) return;
        s.dlogits = zeros(size_t(n) * V);
        ops::crossentropy_backward(s.dlogits.data(), s.logits.data(), s.targets.data(), mb.loss_scale, n, V);
        s.dz = zeros(size_t(n) * C);
        linear_backward_input(s.dz.data(), s.dlogits.data(), P(emb_), n, C, V);
        std::vector<float> du = zeros(size_t(n) * C);
        ops::layernorm_backward(du.data(), nullptr, nullptr, s.dz.data(), s.u.data(), P(lnw_), s.mean.data(), s.rstd.data(), n, C);
        s.dt = zeros(size_t(n) * C);
        act_backward(cfg_.hidden_act, s.dt.data(), s.t.data(), du.data(), n * C);
        std::vector<float> dh = zeros(size_t(n) * C);
        linear_backward_input(dh.data(), s.dt.data(), P(wt_), n, C, C);
        for (int i = 0; i < n; i++)   // scatter back to the (B, T) rows; rows are distinct
            ops::accumulate(din + size_t(s.rows[i]) * C, dh.data() + size_t(i) * C, C);
    }

    void backward_weight(Stash& st, const MicroBatch&, const RunOptions&) override {
        auto& s = static_cast<HeadStash&>(st);
        int C = cfg_.hidden_size, V = cfg_.vocab_size, n = int(s.rows.size());
        if (n == 0) return;
        linear_backward_weight(G(emb_), G(bias_), s.dlogits.data(), s.z.data(), n, C, V);
        ops::layernorm_backward(nullptr, G(lnw_), G(lnb_), s.dz.data(), s.u.data(), P(lnw_), s.mean.data(), s.rstd.data(), n, C);
        linear_backward_weight(G(wt_), G(bt_), s.dt.data(), s.h.data(), n, C, C);
    }

 private:
    ModelConfig cfg_;
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
        s->h.resize(size_t(B) * C);
        for (int b = 0; b < B; b++) {
            s->rows.push_back(b * mb.T), s->targets.push_back(mb.targets[size_t(b) * mb.T]);
            std::copy(in + size_t(b) * mb.T * C, in + (size_t(b) * mb.T + 1) * C, s->h.begin() + size_t(b) * C);
        }
        s->t.resize(size_t(B) * C), s->u.resize(size_t(B) * C), s->logits.resize(size_t(B) * L);
        std::vector<float> pre(size_t(B) * C);
        linear_forward(pre.data(), s->h.data(), P(pw_), P(pb_), B, C, C);
        ops::tanh_forward(s->t.data(), pre.data(), B * C);
        ops::dropout_forward(s->u.data(), s->t.data(), p_hid(opt), dropout_key(opt, mb, index_, 0), B * C);
        linear_forward(s->logits.data(), s->u.data(), P(cw_), P(cb_), B, C, L);
        std::vector<float> losses(B);
        ops::crossentropy_forward(losses.data(), s->logits.data(), s->targets.data(), B, L);
        for (int b = 0; b < B; b++)
            if (s->targets[b] != kIgnore) s->loss_sum += losses[b], s->num_targets++;
        s->pooled = s->t;
        out[0] = float(s->loss_sum);
        return s;
    }

    void backward_input(float* din, const float*, Stash& st, const MicroBatch& mb, const RunOptions& opt) override {
        auto& s = static_cast<HeadStash&>(st);
        int C = cfg_.hidden_size, L = cfg_.num_labels, B = mb.B;
        s.dlogits = zeros(size_t(B) * L);
        ops::crossentropy_backward(s.dlogits.data(), s.logits.data(), s.targets.data(), mb.loss_scale, B, L);
        std::vector<float> du = zeros(size_t(B) * C), dp = zeros(size_t(B) * C);
        linear_backward_input(du.data(), s.dlogits.data(), P(cw_), B, C, L);
        ops::dropout_backward(dp.data(), du.data(), p_hid(opt), dropout_key(opt, mb, index_, 0), B * C);
        s.dt = zeros(size_t(B) * C);   // gradient before tanh
        ops::tanh_backward(s.dt.data(), s.t.data(), dp.data(), B * C);
        std::vector<float> dh = zeros(size_t(B) * C);
        linear_backward_input(dh.data(), s.dt.data(), P(pw_), B, C, C);
        for (int b = 0; b < B; b++) ops::accumulate(din + size_t(b) * mb.T * C, dh.data() + size_t(b) * C, C);
    }

    void backward_weight(Stash& st, const MicroBatch& mb, const RunOptions&) override {
        auto& s = static_cast<HeadStash&>(st);
        int C = cfg_.hidden_size, L = cfg_.num_labels, B = mb.B;
        linear_backward_weight(G(cw_), G(cb_), s.dlogits.data(), s.u.data(), B, C, L);
        linear_backward_weight(G(pw_), G(pb_), s.dt.data(), s.h.data(), B, C, C);
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
