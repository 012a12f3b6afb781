// Tutorial 11 — ERNIE in, ERNIE out: load an ERNIE model directory piece by piece with the
// functions of src/ernie.hpp (config → names → weights → tokens → a fill-mask guess), then
// fine-tune a sentiment classifier through a 2-stage pipeline.
//
// The model directory used here is a small *random* ERNIE 3.0-shaped model from the test
// fixtures (head size 26, task-type embeddings, like ernie-3.0-nano), stored twice: with Hugging
// Face names and with PaddleNLP names. With real weights (README: "ERNIE checkpoints") the same
// calls give real predictions.
//
// Run: build/tutorial_11_ernie
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "src/ernie.hpp"
#include "src/batch.hpp"
#include "src/formats/checkpoint.hpp"   // map_checkpoint: a file's tensors → ernie's names
#include "src/formats/config_json.hpp"
#include "src/formats/io.hpp"
#include "src/formats/json.hpp"
#include "src/formats/safetensors.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/cli/commands.hpp"
#include "tutorials/common.hpp"

using namespace pt;

// Runs a CLI subcommand in-process, printing the command line a user would type.
static int cli(const char* command, std::vector<std::string> args, int (*fn)(const std::vector<std::string>&)) {
    std::printf("$ pipetrain %s", command);
    for (const auto& a : args) std::printf(" %s", a.c_str());
    std::printf("\n");
    std::fflush(stdout);
    return fn(args);
}

// The model as its pipeline layers, [Embedding, Block 0..N-1, Head], on one device.
struct Layers {
    std::vector<std::unique_ptr<Layer>> owned;
    std::vector<Layer*> all;
};
static Layers make_layers(const ModelConfig& cfg) {
    Layers m;
    for (int i = 0; i < num_model_layers(cfg); i++) {
        m.owned.push_back(make_layer(cfg, i));
        m.all.push_back(m.owned.back().get());
    }
    return m;
}

// A weights file, read by the formats layer and mapped to model names with ernie's table.
static Checkpoint open_weights(const std::string& path) { return map_checkpoint(path, {st::read(path)}); }

int main() {
    const std::string fx = PT_SOURCE_DIR "/tests/fixtures";
    const std::string hf = fx + "/ernie/nano-like/hf", paddle = fx + "/ernie/nano-like/paddle";
    const std::string tmp = lab::fresh_run_dir("11");   // this run's own: two runs at once never collide
    std::printf("writing under %s/\n\n", tmp.c_str());

    std::printf("== step 1: config.json → ModelConfig ==\n");
    ModelConfig cfg = config_from_json(parse_json(read_file(hf + "/config.json"), "config.json"), hf + "/config.json");
    std::printf("config_from_json: hidden %d, %d layers, %d heads of %d, vocab %d, task ids %s, eps %g\n",
                cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.head_size(), cfg.vocab_size,
                cfg.use_task_id ? "yes" : "no", double(cfg.layer_norm_eps));
    std::printf("look at: use_task_id must be written out (Hugging Face defaults it to false, PaddleNLP to\n"
                "true); a missing shape key is an error, never a silent default.\n\n");

    std::printf("== step 2: tensor names → model parameters (PaddleNLP names, [in, out] Linear weights) ==\n");
    Checkpoint pd = open_weights(paddle + "/model.safetensors");
    int shown = 0, transposes = 0, tensors = 0;
    for (const auto& [model_name, sources] : pd.by_model_name)
        for (const Checkpoint::Source& s : sources) {
            tensors++, transposes += s.transpose;
            if (model_name.find("encoder.layer.0.") == std::string::npos || shown++ >= 6) continue;
            std::printf("  %-48s → %s%s\n", s.name.c_str(), model_name.c_str(), s.transpose ? "  (transposed)" : "");
        }
    std::printf("convention %s: %d tensors mapped, %d of them transposed\n", pd.convention.c_str(), tensors,
                transposes);
    std::printf("look at: q_proj, linear1, norm1 ... become attention.self.query, intermediate.dense,\n"
                "attention.output.LayerNorm; only Linear weights are transposed, never biases or LayerNorms.\n\n");

    std::printf("== step 3: weights → the model's layers ==\n");
    Layers from_paddle = make_layers(cfg), from_hf = make_layers(cfg);
    load_weights(pd, from_paddle.all);
    load_weights(open_weights(hf + "/model.safetensors"), from_hf.all);
    size_t params = 0, differ = 0;
    for (size_t l = 0; l < from_hf.all.size(); l++) {
        std::vector<float> a = from_hf.all[l]->params.host(), b = from_paddle.all[l]->params.host();
        params += a.size();
        for (size_t i = 0; i < a.size(); i++) differ += a[i] != b[i];
    }
    std::printf("%zu layers, %zu parameters; Hugging Face and PaddleNLP files differ in %zu of them\n",
                from_hf.all.size(), params, differ);
    std::printf("look at: 0 — the two files are one model: PaddleNLP's [in, out] Linear weights, transposed\n"
                "on load, land on exactly the Hugging Face numbers (load_weights checks every shape first).\n\n");

    std::printf("== step 4: text → tokens (BasicTokenizer + WordPiece) ==\n");
    Tokenizer tok = Tokenizer::from_file(fx + "/tokenizer/vocab.txt");
    std::string text = "今天天气很好，我们去公园散步。Pipeline parallelism!";
    std::printf("%s\nbasic_tokenize (steps 0-5):", text.c_str());
    for (const std::string& w : basic_tokenize(text)) std::printf(" %s", w.c_str());
    std::vector<std::string> pieces = tok.tokenize(text);
    std::vector<int32_t> ids = tok.convert_tokens_to_ids(pieces);
    std::printf("\nwordpiece (step 6), and the ids:\n");
    for (size_t i = 0; i < pieces.size(); i++) std::printf("  %-10s %d\n", pieces[i].c_str(), ids[i]);
    Tokenizer::Encoded pair = tok.encode_pair("今天天气很好", "我们去散步", 32);
    std::printf("pair [CLS] A [SEP] B [SEP]: %zu ids, token types:", pair.input_ids.size());
    for (int32_t t : pair.token_type_ids) std::printf(" %d", t);
    std::printf("\nlook at: each Chinese character is one token; English words split into ##pieces;\n"
                "the second sentence of a pair has token type 1.\n\n");

    std::printf("== step 5: fill a mask (random weights: expect nonsense; real ERNIE says 光) ==\n");
    Tokenizer model_tok = Tokenizer::from_file(hf + "/vocab.txt");
    std::vector<int32_t> input = {model_tok.cls_id()};
    for (int32_t id : model_tok.encode("床前明月[MASK]")) input.push_back(id);
    input.push_back(model_tok.sep_id());
    const int T = int(input.size()), V = cfg.vocab_size;
    Batch b = empty_batch(1, T);   // one row, token type 0, no targets
    b.input_ids = input;
    RunOptions eval;
    eval.train = false, eval.all_logits = true;
    std::vector<float> x, y;   // (1, T, C) between the layers
    std::vector<float> logits;  // (1, T, V) from the head
    for (Layer* l : from_hf.all) {
        y.assign(l->out_numel(1, T), 0.0f);
        std::unique_ptr<Stash> s = l->forward(y.data(), x.empty() ? nullptr : x.data(), b.rows(0, 1), eval);
        if (auto* head = dynamic_cast<HeadStash*>(s.get())) logits = head->logits.host();
        x.swap(y);
    }
    for (int t = 0; t < T; t++) {
        if (input[t] != model_tok.mask_id()) continue;
        const float* row = logits.data() + size_t(t) * V;   // (V,) the scores at the [MASK]
        std::vector<int> best(V);
        for (int v = 0; v < V; v++) best[v] = v;
        std::partial_sort(best.begin(), best.begin() + 5, best.end(), [&](int p, int q) { return row[p] > row[q]; });
        std::printf("[MASK] at position %d, top 5 logits:", t);
        for (int k = 0; k < 5; k++) {
            std::string piece = best[k] < int(model_tok.size()) ? model_tok.token(best[k]) : "?";   // rows past vocab.txt
            std::printf("  %s %.3f", piece.c_str(), row[best[k]]);
        }
        std::printf("\n");
    }
    std::printf("look at: the head's decoder is the word embedding (tied): a guess is the token whose\n"
                "embedding is closest to the [MASK]'s final hidden state.\n\n");

    std::printf("== step 6: pre-train briefly, then fine-tune a classifier through 2 stages ==\n");
    // The random fixture model has no vocabulary for modern sentences, so we make our own
    // small "pre-trained" model first: MLM on the same sentences, saved as a model directory.
    cli("train", {"--preset", "tiny", "--data", fx + "/classify/train.tsv", "--out", tmp + "/base", "--steps", "30",
         "--batch", "16", "--seq", "32", "--lr", "3e-3"},
        train_main);
    // --partition uniform: the same split on every machine (the default splits by measured time,
    // which varies from run to run; the bits do not depend on it), so docs/answers.md can name it.
    cli("train", {"--model", tmp + "/base", "--task", "classify", "--labels", "2", "--data", fx + "/classify/train.tsv",
         "--eval", fx + "/classify/dev.tsv", "--stages", "2", "--schedule", "1f1b", "--micro-batches", "2", "--batch", "16",
         "--seq", "32", "--steps", "60", "--lr", "2e-3", "--partition", "uniform", "--out", tmp + "/classifier"},
        train_main);
    std::printf("look at: the 'eval | accuracy' lines rise from 0.5 (chance) as the classifier learns.\n");
    std::printf("question: the MLM head's tensors were reported as unused and the classifier as fresh.\n"
                "Which layers of the 2-stage pipeline hold the new parameters, and why does the first stage\n"
                "not need to know the task at all?\n");
    std::printf("answer: docs/answers.md, section \"11 ernie\"\n");
    return 0;
}
