// The whole model's backward against central finite differences, for both objectives, with
// padding, task ids, a head size that is not a power of two and dropout on (the counter-based
// masks are a pure function of the key, so the perturbed forwards see the same masks).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "src/formats/corpus.hpp"
#include "src/model.hpp"
#include "src/pairwise.hpp"

using namespace pt;

namespace {

ModelConfig small_config(const std::string& act) {
    ModelConfig c;
    c.vocab_size = 23, c.hidden_size = 15, c.num_hidden_layers = 2, c.num_attention_heads = 3;   // HS = 5
    c.intermediate_size = 19, c.hidden_act = act, c.max_position_embeddings = 9, c.type_vocab_size = 2;
    c.use_task_id = true, c.task_type_vocab_size = 3, c.layer_norm_eps = 1e-5f;
    return c;
}

Batch small_batch(const ModelConfig& c, Objective obj, int rows = 2) {
    Batch b;
    b.B = rows, b.T = 7;
    std::mt19937 rng(7);
    for (int i = 0; i < b.B * b.T; i++) {
        b.input_ids.push_back(int32_t(1 + rng() % (c.vocab_size - 1)));
        b.token_type_ids.push_back(int32_t(rng() % 2));
        b.task_type_ids.push_back(int32_t(rng() % 3));
        b.attention_mask.push_back(i / b.T == 1 && i % b.T >= 5 ? 0 : 1);   // row 1 has 2 padding positions
        b.targets.push_back(i % 3 == 1 ? int32_t(rng() % c.vocab_size) : kIgnore);
    }
    if (obj == Objective::causal) set_causal_targets(b);
    return b;
}

struct Model {
    std::vector<std::unique_ptr<Layer>> layers;
    Model(const ModelConfig& c) {
        for (int i = 0; i < num_model_layers(c); i++) {
            layers.push_back(make_layer(c, i));
            layers.back()->init(99, 0.3f);   // large weights: attention and GELU far from linear
        }
        // Non-trivial LayerNorm affine parameters and biases.
        std::mt19937 rng(3);
        std::normal_distribution<float> n(0.0f, 0.1f);
        for (auto& l : layers)
            for (const ParamInfo& p : l->params_info)
                if (p.shape.size() == 1)
                    for (size_t i = 0; i < p.numel; i++) l->params[p.offset + i] += n(rng);
        sync_tied();
    }
    void zero_grads() {
        for (auto& l : layers) std::fill(l->grads.begin(), l->grads.end(), 0.0f);
    }
    void sync_tied() {   // the head's decoder is the word embedding
        Layer& emb = *layers.front();
        Layer& head = *layers.back();
        if (!tied_param(head)) return;   // a classifier head has no decoder
        std::copy_n(emb.params.begin(), tied_param(head)->numel, head.params.begin() + tied_param(head)->offset);
    }
    // Loss (mean over targets) in double, and optionally the gradients; `rows` of b only: their
    // gradients add into the layers' (not zeroed), scaled by the whole batch's targets.
    double run(const Batch& b, const RunOptions& opt, bool backward, int first = 0, int rows = 0) {
        MicroBatch mb = b.rows(first, rows ? rows : b.B);
        mb.loss_scale = 1.0f / float(b.num_targets());
        std::vector<std::unique_ptr<Stash>> stash;
        std::vector<std::vector<float>> acts(1);
        for (auto& l : layers) {
            std::vector<float> out(l->out_numel(mb.B, mb.T));
            stash.push_back(l->forward(out.data(), acts.back().empty() ? nullptr : acts.back().data(), mb, opt));
            acts.push_back(std::move(out));
        }
        double loss = static_cast<HeadStash&>(*stash.back()).loss_sum / double(b.num_targets());
        if (backward) {
            if (!rows) zero_grads();
            std::vector<float> dout;
            for (int i = int(layers.size()) - 1; i >= 0; i--) {
                std::vector<float> din(i == 0 ? 0 : acts[i].size(), 0.0f);
                layers[i]->backward_input(i == 0 ? nullptr : din.data(), dout.empty() ? nullptr : dout.data(), *stash[i], mb, opt);
                layers[i]->backward_weight(*stash[i], mb, opt);
                dout.swap(din);
            }
        }
        return loss;
    }
};

// Directional derivative along a random direction, per parameter tensor: robust to fp32 noise
// because the analytic side is a dot product over the whole tensor.
void check_gradients(const ModelConfig& c, Objective obj, float dropout) {
    Model m(c);
    Batch b = small_batch(c, obj);
    if (c.num_labels > 0)   // one label per sequence, at its [CLS] position
        for (int r = 0; r < b.B; r++)
            for (int t = 0; t < b.T; t++) b.targets[size_t(r) * b.T + t] = t == 0 ? r % c.num_labels : kIgnore;
    RunOptions opt;
    opt.train = dropout > 0, opt.causal = obj == Objective::causal, opt.seed = 5;
    opt.hidden_dropout = opt.attention_dropout = dropout;
    m.run(b, opt, true);
    std::mt19937 rng(11);
    std::normal_distribution<float> n(0.0f, 1.0f);
    int checked = 0;
    for (auto& l : m.layers)
        for (const ParamInfo& p : l->params_info) {
            if (p.tied) continue;   // perturbed together with the word embedding below
            bool word = p.name == "ernie.embeddings.word_embeddings.weight";
            // ReLU: perturb a few elements only, so that hardly any input crosses the kink.
            std::vector<float> dir(p.numel, 0.0f);
            for (size_t i = 0; i < p.numel; i++)
                if (c.hidden_act != "relu" || i % 97 == rng() % 97 || i == 0) dir[i] = n(rng);
            double analytic = 0;
            Layer& head = *m.layers.back();
            for (size_t i = 0; i < p.numel; i++) {
                double g = l->grads[p.offset + i];
                if (word && tied_param(head)) g += head.grads[tied_param(head)->offset + i];   // the tied sum
                analytic += g * dir[i];
            }
            std::vector<float> saved(l->params.begin() + p.offset, l->params.begin() + p.offset + p.numel);
            auto loss_at = [&](float eps) {
                for (size_t i = 0; i < p.numel; i++) l->params[p.offset + i] = saved[i] + eps * dir[i];
                if (word) m.sync_tied();
                return m.run(b, opt, false);
            };
            // Small enough that few ReLU inputs cross their kink and that the central difference's
            // eps^2 term stays small (at 1e-2 it reached 1.3x the tolerance for some dropout
            // masks; at 3e-3 the worst case uses 0.11 of it), large enough for fp32 loss noise.
            const float eps = c.hidden_act == "relu" ? 1e-3f : 3e-3f;
            double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
            loss_at(0);
            CAPTURE(p.name);
            CAPTURE(analytic);
            CAPTURE(numeric);
            CHECK(std::fabs(numeric - analytic) <= 2e-3 + 2e-2 * std::fabs(analytic));
            checked++;
        }
    CHECK(checked >= 16 * c.num_hidden_layers);
}

}  // namespace

TEST_CASE("whole-model gradients match finite differences: MLM, gelu, no dropout") {
    check_gradients(small_config("gelu"), Objective::mlm, 0.0f);
}
TEST_CASE("whole-model gradients match finite differences: causal, relu, no dropout") {
    check_gradients(small_config("relu"), Objective::causal, 0.0f);
}
TEST_CASE("whole-model gradients match finite differences with dropout on (fixed masks)") {
    check_gradients(small_config("gelu"), Objective::mlm, 0.1f);
    check_gradients(small_config("gelu"), Objective::causal, 0.1f);
}

TEST_CASE("whole-model gradients match finite differences: sequence classifier with dropout") {
    ModelConfig c = small_config("gelu");
    c.num_labels = 3;
    check_gradients(c, Objective::mlm, 0.0f);
    check_gradients(c, Objective::mlm, 0.1f);
}

TEST_CASE("causal targets: t predicts t+1, none at the last real position or into padding") {
    ModelConfig c = small_config("gelu");
    Batch b = small_batch(c, Objective::causal);
    for (int r = 0; r < b.B; r++)
        for (int t = 0; t < b.T; t++) {
            size_t i = size_t(r) * b.T + t;
            bool real_next = t + 1 < b.T && b.attention_mask[i] && b.attention_mask[i + 1];
            CHECK(b.targets[i] == (real_next ? b.input_ids[i + 1] : kIgnore));
        }
    CHECK(b.targets[b.T + 4] == kIgnore);   // row 1: position 4 is the last real token
}

TEST_CASE("causal mask: a later token cannot change an earlier position's loss") {
    ModelConfig c = small_config("gelu");
    Model m(c);
    Batch b = small_batch(c, Objective::causal);
    for (int32_t& t : b.targets) t = kIgnore;
    b.targets[2] = 5;   // only position 2 of row 0 counts
    RunOptions opt;
    opt.train = false, opt.causal = true;
    double before = m.run(b, opt, false);
    b.input_ids[5] = (b.input_ids[5] + 1) % c.vocab_size;   // a future token
    CHECK(m.run(b, opt, false) == before);
    b.input_ids[1] = (b.input_ids[1] + 1) % c.vocab_size;   // a past token
    CHECK(m.run(b, opt, false) != before);
}

// Layer::backward_weight adds micro-batch i + 1 straight into micro-batch i's buffer (i even) and
// micro-batch 0 into the zeroed gradients: right only while every weight-gradient op adds its whole
// sum once. The reference sums gradients computed one micro-batch at a time into zeros. Before each
// step, one that stopped a micro-batch short (its partial sums, gradients among them, are dropped).
TEST_CASE("M micro-batches: every layer's gradients are the pairwise tree of each one's alone, bitwise") {
    for (int labels : {0, 3}) {   // the masked LM's head, and a classifier's
        ModelConfig c = small_config("gelu");
        c.num_labels = labels;
        Batch b = small_batch(c, Objective::mlm, 7);
        for (int r = 0; r < b.B; r++)
            for (int t = 0; t < b.T; t++) {
                int32_t& y = b.targets[size_t(r) * b.T + t];
                if (labels) y = t == 0 ? r % labels : kIgnore;
                if (r == 3 && !labels) y = kIgnore;   // a micro-batch with no target: its head adds nothing
            }
        RunOptions opt;
        opt.train = true, opt.seed = 4, opt.hidden_dropout = opt.attention_dropout = 0.1f;
        for (int M = 2; M <= b.B; M++) {
            CAPTURE(labels);
            CAPTURE(M);
            Model alone(c), summed(c);
            std::vector<PairwiseSum<std::vector<float>>> trees;
            for (size_t i = 0; i < alone.layers.size(); i++)
                trees.emplace_back([](std::vector<float>& into, std::vector<float>& from) {
                    for (size_t k = 0; k < into.size(); k++) into[k] += from[k];
                });
            for (int m = 0; m < M; m++) {
                alone.zero_grads();
                alone.run(b, opt, true, m, 1);
                for (size_t i = 0; i < alone.layers.size(); i++) trees[i].push(alone.layers[i]->grads.host());
            }
            for (auto& l : summed.layers) l->sum_micro_batches(M);   // a step that an error ends after M - 1
            for (int m = 0; m + 1 < M; m++) summed.run(b, opt, true, m, 1);
            summed.zero_grads();
            for (auto& l : summed.layers) l->sum_micro_batches(M);
            for (int m = 0; m < M; m++) {
                for (auto& l : summed.layers) REQUIRE(l->summing() == (m > 0));
                summed.run(b, opt, true, m, 1);
            }
            for (size_t i = 0; i < summed.layers.size(); i++) {
                CAPTURE(i);
                CHECK_FALSE(summed.layers[i]->summing());
                std::vector<float> want = trees[i].finish(), got = summed.layers[i]->grads.host();
                REQUIRE(got.size() == want.size());
                CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
            }
        }
    }
}

TEST_CASE("backward = backward_input then backward_weight, bitwise, and recompute = stash") {
    ModelConfig c = small_config("gelu");
    Model m1(c), m2(c);
    Batch b = small_batch(c, Objective::mlm);
    RunOptions opt;
    opt.train = true, opt.seed = 9, opt.hidden_dropout = opt.attention_dropout = 0.2f;
    MicroBatch mb = b.rows(0, b.B);
    mb.loss_scale = 0.1f;
    // Forward twice on layer 1 (a block) from the same input: identical outputs (the recompute property).
    std::vector<float> x(size_t(b.B) * b.T * c.hidden_size), y1(x.size()), y2(x.size());
    for (size_t i = 0; i < x.size(); i++) x[i] = std::sin(float(i));
    auto s1 = m1.layers[1]->forward(y1.data(), x.data(), mb, opt);
    auto s2 = m1.layers[1]->forward(y2.data(), x.data(), mb, opt);
    CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) == 0);
    // Gradients of BI then BW, interleaved differently, still give the same bits.
    std::vector<float> dy(x.size()), dx1(x.size(), 0.0f), dx2(x.size(), 0.0f);
    for (size_t i = 0; i < dy.size(); i++) dy[i] = std::cos(float(i) * 0.37f);
    m1.layers[1]->backward_input(dx1.data(), dy.data(), *s1, mb, opt);
    m1.layers[1]->backward_weight(*s1, mb, opt);
    m2.layers[1]->backward_input(dx2.data(), dy.data(), *s2, mb, opt);
    std::vector<float> g_before = m2.layers[1]->grads.host();   // BI touches no weight gradient
    for (float g : g_before) REQUIRE(g == 0.0f);
    m2.layers[1]->backward_weight(*s2, mb, opt);
    CHECK(std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(float)) == 0);
    CHECK(m1.layers[1]->grads == m2.layers[1]->grads);
}
