// Tutorial 11 — ERNIE in, ERNIE out: tokenize Chinese like ERNIE, load a model directory,
// fill a mask, then fine-tune a sentiment classifier through a 2-stage pipeline.
//
// The model directory used here is a small *random* ERNIE 3.0-shaped model from the test
// fixtures (head size 26, task-type embeddings, like ernie-3.0-nano). With real weights
// (README: "ERNIE checkpoints") the same calls give real predictions.
//
// Run: build/tutorial_11_ernie
#include <cstdio>
#include <filesystem>

#include "src/formats/checkpoint.hpp"
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

int main() {
    const std::string fx = PT_SOURCE_DIR "/tests/fixtures";
    const std::string model = fx + "/ernie/nano-like/hf";
    const std::string tmp = lab::fresh_run_dir("11");   // this run's own: two runs at once never collide
    std::printf("writing under %s/\n\n", tmp.c_str());

    std::printf("== step 1: tokenize like ERNIE (BasicTokenizer + WordPiece) ==\n");
    Tokenizer tok = Tokenizer::from_file(fx + "/tokenizer/vocab.txt");
    std::string text = "今天天气很好，我们去公园散步。Pipeline parallelism!";
    std::vector<std::string> pieces = tok.tokenize(text);
    std::vector<int32_t> ids = tok.convert_tokens_to_ids(pieces);
    std::printf("%s\n", text.c_str());
    for (size_t i = 0; i < pieces.size(); i++) std::printf("  %-10s %d\n", pieces[i].c_str(), ids[i]);
    Tokenizer::Encoded pair = tok.encode_pair("今天天气很好", "我们去散步", 32);
    std::printf("pair [CLS] A [SEP] B [SEP]: %zu ids, token types:", pair.input_ids.size());
    for (int32_t t : pair.token_type_ids) std::printf(" %d", t);
    std::printf("\nlook at: each Chinese character is one token; English words split into ##pieces;\n"
                "the second sentence of a pair has token type 1.\n\n");

    std::printf("== step 2: a model directory (config.json + vocab.txt + model.safetensors) ==\n");
    ModelConfig cfg = load_model_config(model);
    std::printf("hidden %d, %d layers, %d heads of %d, vocab %d, task ids %s\n", cfg.hidden_size, cfg.num_hidden_layers,
                cfg.num_attention_heads, cfg.head_size(), cfg.vocab_size, cfg.use_task_id ? "yes" : "no");
    cli("inspect", {fx + "/ernie/nano-like/paddle"}, inspect_main);   // the same model, PaddleNLP names
    std::printf("look at: every tensor in the file and the model parameter it becomes. PaddleNLP files\n"
                "(q_proj, linear1, norm1, ... with [in, out] weights) map to the same parameters.\n\n");

    std::printf("== step 3: fill a mask (random weights: expect nonsense; real ERNIE says 光) ==\n");
    cli("fill-mask", {"--model", model, "床前明月[MASK]"}, fill_mask_main);
    std::printf("\n");

    std::printf("== step 4: pre-train briefly, then fine-tune a classifier through 2 stages ==\n");
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
