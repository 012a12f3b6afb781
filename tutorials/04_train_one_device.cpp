// Tutorial 04 — train the tiny ERNIE-style model on one device, with the loop written out.
//
// The CLI (`pipetrain train`) does the same thing with more options; here every step of one
// optimizer step is visible: micro-batches forward, backward in increasing order, the tied
// embedding's two gradients summed, the global gradient norm, AdamW.
//
// Run: build/tutorial_04_train_one_device [corpus.txt] [steps] [M]   (default: the shipped sample, 60, 2)
#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/ops.hpp"
#include "src/formats/corpus.hpp"
#include "src/formats/io.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/stage.hpp"

using namespace pt;

int main(int argc, char** argv) {
    // The shipped sample unless a corpus is named (data/poems.txt of scripts/run.sh, say): the sample
    // gives every machine the numbers of docs/answers.md.
    const std::string sample = "tests/fixtures/text/sample_zh.txt";
    std::string path = argc > 1 ? argv[1] : PT_SOURCE_DIR "/" + sample;
    std::string shown = argc > 1 ? path : sample;   // the sample's path as the student types it
    int steps = argc > 2 ? std::atoi(argv[2]) : 60;
    const int B = 16, T = 32;
    const int M = argc > 3 ? std::atoi(argv[3]) : 2;   // the question's experiment: try 4
    if (M < 1 || B % M != 0) return std::fprintf(stderr, "M must divide B = %d\n", B), 2;

    std::printf("== step 1: a vocabulary from the corpus, and the tokenizer ==\n");
    std::vector<std::string> lines = read_lines(path);
    Tokenizer tok(build_vocab(lines, 3000), path);
    std::vector<std::string> pieces = tok.tokenize(lines[0]);
    std::printf("corpus %s: %zu lines, vocab %zu tokens\n\"%s\" ->", shown.c_str(), lines.size(), tok.size(),
                lines[0].c_str());
    for (const auto& p : pieces) std::printf(" %s", p.c_str());
    std::printf("\nlook at: every Chinese character is its own token (BERT splits the CJK ranges).\n\n");

    std::printf("== step 2: the model as a list of pipeline layers ==\n");
    ModelConfig cfg = ModelConfig::preset("tiny");
    cfg.vocab_size = int(tok.size());
    std::vector<int> all;
    for (int i = 0; i < num_model_layers(cfg); i++) all.push_back(i);
    RunOptions opt;
    opt.seed = 1, opt.hidden_dropout = opt.attention_dropout = 0.1f;
    TransformerStage model(cfg, {all}, Recompute::none, opt);   // one stage holding every layer
    for (Layer* l : model.layers()) {
        l->init(1, 0.02f);
        std::printf("  layer %d: %zu tensors, %zu parameters\n", l->index(), l->params_info.size(), l->params.size());
    }
    std::printf("look at: the embedding and the head are the big layers (vocab × hidden each).\n\n");

    std::printf("== step 3: train (B=%d in M=%d micro-batches of T=%d tokens) ==\n", B, M, T);
    Corpus corpus = load_corpus(path, tok, T);
    SpecialIds sp = special_ids(tok);
    std::vector<std::vector<float>> m, v;
    for (Layer* l : model.layers()) m.emplace_back(l->params.size(), 0.0f), v.emplace_back(l->params.size(), 0.0f);
    Layer* emb = model.layer(0);
    Layer* head = model.layer(num_model_layers(cfg) - 1);
    size_t n_tied = size_t(cfg.vocab_size) * cfg.hidden_size;
    double first = 0, last = 0;
    for (int step = 0; step < steps; step++) {
        Batch batch = make_batch(corpus.train, step, B, Objective::mlm, sp, 1);
        model.zero_grads();
        model.begin_step(&batch, B / M, 0, uint32_t(step), 1.0f / float(batch.num_targets()));
        for (int mb = 0; mb < M; mb++) model.forward(mb, 0);    // all forwards (GPipe on one device) ...
        for (int mb = 0; mb < M; mb++) model.backward(mb, 0);   // ... then backwards, in increasing order
        // The word embedding is used twice (input and decoder): its gradient is the sum.
        float* g_emb = emb->grads.data();
        float* g_head = head->grads.data() + tied_param(*head)->offset;
        ops::accumulate(g_emb, g_head, int(n_tied));
        std::copy(g_emb, g_emb + n_tied, g_head);
        double sumsq = 0;
        for (Layer* l : model.layers())
            for (const ParamInfo& p : l->params_info)
                if (!p.tied) sumsq += ops::sum_squares(l->grads.data() + p.offset, int64_t(p.numel));
        float coef = std::sqrt(sumsq) > 1.0 ? float(1.0 / std::sqrt(sumsq)) : 1.0f;   // clip the norm at 1
        auto layers = model.layers();
        for (size_t i = 0; i < layers.size(); i++) {
            ops::scale(layers[i]->grads.data(), coef, int(layers[i]->grads.size()));
            ops::adamw_update(layers[i]->params.data(), m[i].data(), v[i].data(), layers[i]->grads.data(),
                              int64_t(layers[i]->params.size()), 2e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, step + 1);
        }
        double loss = model.loss_sum() / double(batch.num_targets());
        if (step == 0) first = loss;
        last = loss;
        if (step % 10 == 0 || step == steps - 1)
            std::printf("  step %3d  loss %.3f  |grad| %.3f  stash peak %.1f KB\n", step, loss, std::sqrt(sumsq),
                        model.peak_stash_bytes() / 1024.0);
    }
    std::printf("loss %.3f -> %.3f (ln(vocab) = %.3f is a uniform guess)\n\n", first, last, std::log(double(tok.size())));
    std::printf("look at: the loss starts near ln(vocab) and falls as the model learns to guess each masked character\n"
                "from the characters on both sides of it (a masked LM: 15%% of the tokens are targets). The stash\n"
                "peak is the largest so far: the head keeps logits only for a batch's masked tokens, so it grows\n"
                "when a batch with more of them comes.\n");
    std::printf("question: the stash peak is the activation memory of %d micro-batches. What happens to it with M=%d?\n"
                "(try it: build/tutorial_04_train_one_device %s %d %d)\n",
                M, 2 * M, shown.c_str(), steps, 2 * M);
    std::printf("answer: docs/answers.md, section \"04 train one device\"\n");
    return 0;
}
