// Using trained models: fill-mask finds the masked character of a sentence the model has
// learned, generate continues a learned sentence; bad input fails with one line.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "src/formats/safetensors.hpp"
#include "src/formats/tokenizer.hpp"
#include "tests/cli_util.hpp"

using namespace test;

namespace {

// A corpus of one sentence repeated: a tiny model learns it in a few dozen steps.
std::string repeated_corpus() {
    std::string path = temp_dir("corpus") + "/one_sentence.txt";
    std::ofstream f(path);
    for (int i = 0; i < 200; i++) f << "今天天气很好，我们去公园散步。\n";
    return path;
}

// The most memory a command held at once (its own process and what it ran: wait4's ru_maxrss), in
// bytes; -1 when it failed.
double peak_bytes(const std::string& command) {
    const std::string line = command + " >/dev/null 2>&1";
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", line.c_str(), (char*)nullptr);
        _exit(127);
    }
    int status = 0;
    struct rusage ru {};
    if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    return double(ru.ru_maxrss) * 1024;
}

}  // namespace

TEST_CASE("fill-mask, eval, inspect and export hold the weights about once: no gradients, no model file built whole") {
    // `small` with 12 blocks: 39 MB of weights. Measured here, at peak: fill-mask and eval 125 MB,
    // export --onnx 125, inspect 89 (the file and the weights); before, 164 and 164 (each layer kept
    // a zeroed gradient buffer it never used), 314 (the ONNX file built whole in memory, then copied
    // twice on its way out) and 125.
    if (sanitized()) {
        MESSAGE("skipped: a sanitizer's shadow memory and quarantine make peak memory meaningless");
        return;
    }
    std::string data = repeated_corpus(), out = temp_dir("peak") + "/small";
    Run r = run_cli("train --preset small --blocks 12 --data " + data + " --out " + out + " --steps 1 --batch 2 --seq 17");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    const double weights = double(std::filesystem::file_size(out + "/model.safetensors"));
    const std::string cli = PT_CLI;
    const std::pair<std::string, double> commands[] = {   // (command, at most this many times the weights, + 8 MB)
        {cli + " fill-mask --model " + out + " 今天天气[MASK]好", 3.6},
        {cli + " eval --model " + out + " --data " + data + " --seq 17", 3.6},
        {cli + " export --model " + out + " --onnx --out " + temp_dir("peak_onnx") + "/onnx", 3.6},
        {cli + " inspect " + out, 2.6}};
    for (const auto& [command, times] : commands) {
        const double peak = peak_bytes(command);
        CAPTURE(command);
        CHECK(peak > 0);
        CHECK_MESSAGE(peak < times * weights + 8e6, "peak ", peak / 1e6, " MB for ", weights / 1e6, " MB of weights");
    }
}

TEST_CASE("fill-mask: a model trained on one sentence fills its mask") {
    std::string data = repeated_corpus(), out = temp_dir("mlm");
    // --seq 17 = [CLS] + the 15 characters + [SEP]: every training sequence is the sentence,
    // aligned, so the masked position's answer is learned within a few dozen steps.
    Run r = run_cli("train --preset tiny --data " + data + " --out " + out +
                    " --steps 60 --batch 16 --seq 17 --lr 3e-3 --dropout 0 --seed 3");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    Run f = run_cli("fill-mask --model " + out + " 今天天气[MASK]好");
    REQUIRE_MESSAGE(f.code == 0, f.out);
    CAPTURE(f.out);
    CHECK(f.out.find("[MASK] 1 (position 5):  很 ") != std::string::npos);   // [CLS] 今 天 天 气 [MASK]
    // Two masks, each answered from its own row (the head computes the masks' rows only).
    Run two = run_cli("fill-mask --model " + out + " [MASK]天天气很好，我们去公园散[MASK]。");
    REQUIRE_MESSAGE(two.code == 0, two.out);
    CHECK_MESSAGE(two.out.find("[MASK] 1 (position 1):  今 ") != std::string::npos, two.out);
    CHECK_MESSAGE(two.out.find("[MASK] 2 (position 14):  步 ") != std::string::npos, two.out);
    // --top above the vocabulary size lists every id once (it used to sort past the array's end).
    std::ifstream vocab(out + "/vocab.txt");
    int V = 0;
    for (std::string line; std::getline(vocab, line);) V++;
    REQUIRE(V < 100);
    Run all = run_cli("fill-mask --model " + out + " --top 100 今天天气[MASK]好");
    REQUIRE_MESSAGE(all.code == 0, all.out);
    const std::string line = all.out.substr(0, all.out.find('\n'));
    int listed = 0;   // each candidate is printed as "  <token> <probability>"
    for (size_t at = line.find("  "); at != std::string::npos; at = line.find("  ", at + 2)) listed++;
    CHECK(listed == V);
    Run bad_text = run_cli("fill-mask --model " + out + " \"$(printf '\\377')[MASK]\"");
    CHECK(bad_text.code != 0);
    CHECK(bad_text.out.find("TEXT: invalid UTF-8 at byte 0") != std::string::npos);
    Run none = run_cli("fill-mask --model " + out + " 今天天气很好");
    CHECK(none.code != 0);
    CHECK(none.out.find("no [MASK]") != std::string::npos);
    // The tiny preset has 128 positions: 130 characters + [CLS] + [SEP] do not fit.
    std::string long_text;
    for (int i = 0; i < 130; i++) long_text += i == 5 ? "[MASK]" : "天";
    Run too_long = run_cli("fill-mask --model " + out + " " + long_text);
    CHECK(too_long.code != 0);
    CHECK(too_long.out.find("TEXT: 132 tokens, special ones included; the model reads at most 128") != std::string::npos);
    Run wrong = run_cli("generate --model " + out + " --prompt 今天");   // a masked LM cannot continue text
    CHECK(wrong.code != 0);
    CHECK(wrong.out.find("generate needs a model trained with --objective causal") != std::string::npos);
}

TEST_CASE("generate: a causal model continues the sentence it learned") {
    std::string data = repeated_corpus(), out = temp_dir("causal");
    Run r = run_cli("train --preset tiny --data " + data + " --out " + out +
                    " --steps 60 --batch 16 --seq 16 --lr 3e-3 --dropout 0 --seed 3 --objective causal");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    Run g = run_cli("generate --model " + out + " --prompt 今天天气 --tokens 6 --temperature 0");
    REQUIRE_MESSAGE(g.code == 0, g.out);
    CHECK(g.out == "今天天气很好，我们去\n");
    // Past the learned sentence the model writes [SEP], which ends the text: it says so.
    Run end = run_cli("generate --model " + out + " --prompt 今天天气 --tokens 60 --temperature 0");
    REQUIRE_MESSAGE(end.code == 0, end.out);
    CHECK_MESSAGE(end.out.find(" of --tokens 60: the model wrote [SEP], the end of a text\n") != std::string::npos, end.out);
    // Tokens that are not text are never sampled, however likely: with the output bias of
    // [CLS], [MASK] and [UNK] raised far above every other logit, the text is the same.
    pt::st::File f = pt::st::read(out + "/model.safetensors");
    std::vector<float> bias = f.to_f32("cls.predictions.bias");
    pt::Tokenizer tok = pt::Tokenizer::from_file(out + "/vocab.txt");
    for (int32_t id : {tok.cls_id(), tok.mask_id(), tok.unk_id()}) bias[id] = 1e4f;
    pt::st::Writer w;
    for (const pt::st::TensorInfo& t : f.tensors)
        if (t.name == "cls.predictions.bias") w.add_f32(t.name, t.shape, bias.data());
        else w.add(t.name, t.dtype, t.shape, f.data.data() + t.begin, t.end - t.begin);
    w.write(out + "/model.safetensors");
    std::filesystem::remove(out + "/pipetrain_manifest.json");   // edited by hand, as by another tool: not sealed
    Run special = run_cli("generate --model " + out + " --prompt 今天天气 --tokens 6 --temperature 0");
    CHECK(special.out == "今天天气很好，我们去\n");
    Run bad = run_cli("generate --model /no/such/model --prompt x");
    CHECK(bad.code != 0);
    CHECK(bad.out.find("/no/such/model") != std::string::npos);
    // [CLS] + 127 characters fill the 128 positions: no room for a new token.
    std::string prompt;
    for (int i = 0; i < 127; i++) prompt += "天";
    Run full = run_cli("generate --model " + out + " --prompt " + prompt + " --tokens 1");
    CHECK(full.code != 0);
    Run wrong = run_cli("fill-mask --model " + out + " 今天天气[MASK]好");
    CHECK(wrong.code != 0);
    CHECK(wrong.out.find("fill-mask needs a masked LM") != std::string::npos);
    CHECK(full.out.find("--prompt: 128 tokens, special ones included; the model reads at most 128") != std::string::npos);
}

TEST_CASE("generate --top-k K --temperature X: every token among the model's K likeliest; the seed fixes the text") {
    std::string data = repeated_corpus(), out = temp_dir("sampling");
    Run r = run_cli("train --preset tiny --data " + data + " --out " + out +
                    " --steps 10 --batch 16 --seq 16 --lr 3e-3 --dropout 0 --seed 3 --objective causal");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    pt::Tokenizer tok = pt::Tokenizer::from_file(out + "/vocab.txt");
    auto text_of = [&](const std::string& flags) {
        Run g = test::run_command("(" + std::string(PT_CLI) + " generate --model " + out + " --prompt 今天 --tokens 12 " + flags +
                                  " 2>/dev/null)");   // the text alone: a stop is said on stderr
        REQUIRE_MESSAGE(g.code == 0, g.out);
        return g.out.substr(0, g.out.find('\n'));
    };
    const int K = 3;
    int picks = 0, below_top = 0;   // sampled tokens, and those that were not the likeliest
    std::set<std::string> texts;
    for (int seed = 1; seed <= 8; seed++) {
        const std::string flags = "--top-k 3 --temperature 2 --seed " + std::to_string(seed), text = text_of(flags);
        CHECK(text_of(flags) == text);
        texts.insert(text);
        // The model's logits at every position of [CLS] + the text, from eval --dump-logits.
        std::vector<int32_t> ids = {tok.cls_id()};
        for (int32_t id : tok.encode(text)) ids.push_back(id);
        std::vector<int64_t> wide(ids.begin(), ids.end());
        const int64_t T = int64_t(ids.size());
        pt::st::Writer w;
        w.add_i64("input_ids", {1, T}, wide.data());
        w.write(out + "/inputs.safetensors");
        Run e = run_cli("eval --model " + out + " --inputs " + out + "/inputs.safetensors --objective causal --dump-logits " + out +
                        "/dump.safetensors");
        REQUIRE_MESSAGE(e.code == 0, e.out);
        pt::st::File dump = pt::st::read(out + "/dump.safetensors");
        std::vector<float> logits = dump.to_f32("causal_logits");   // (1, T, V)
        const size_t V = logits.size() / size_t(T);
        for (int64_t t = 2; t + 1 < T; t++) {   // [CLS] 今 天 are given; the rest was sampled
            const float* row = logits.data() + t * V;
            auto never = [&](size_t j) { return j >= tok.size() || int32_t(j) == tok.cls_id() || int32_t(j) == tok.mask_id() || int32_t(j) == tok.unk_id(); };
            int above = 0;   // text tokens the model found likelier than the one sampled
            for (size_t j = 0; j < V; j++) above += !never(j) && row[j] > row[ids[size_t(t + 1)]];
            INFO("seed " << seed << ", position " << t + 1 << ": " << tok.token(ids[size_t(t + 1)]) << " has " << above << " likelier");
            CHECK(above < K);
            picks++, below_top += above > 0;
        }
    }
    CHECK(picks >= 20);
    CHECK(below_top > 0);       // sampled, not always the likeliest
    CHECK(texts.size() >= 2);   // the seed matters
    // One candidate is greedy whatever the temperature.
    CHECK(text_of("--top-k 1 --temperature 2 --seed 5") == text_of("--temperature 0"));
}

// export wrote into any --out: over the model it read (which then failed its manifest), into a
// folder of other files (mixed with them), and a failed export left what it had written.
TEST_CASE("export: never over --model, an existing --out only with --overwrite and replaced whole, nothing left by a failure") {
    const std::string root = temp_dir("export_out"), model = root + "/m";
    REQUIRE(run_cli("train --preset tiny --data " + fixture("text/sample_zh.txt") + " --batch 4 --seq 16 --steps 1 --out " + model).code == 0);
    const std::string export_cmd = "export --model " + model + " --onnx --out ";
    for (const auto& [out, message] : std::vector<std::pair<std::string, std::string>>{
             {model, "--out: " + model + " is --model's directory, or holds it"},
             {model + "/", "--out: " + model + "/ is --model's directory, or holds it"},
             {root, "--out: " + root + " is --model's directory, or holds it"},
             {model + "/onnx", "--out: " + model + "/onnx is inside --model's directory"},
             {model + "/vocab.txt", "is inside --model's directory"},
             {fixture("text/sample_zh.txt"), "is a file, expected a directory"}}) {
        Run r = run_cli(export_cmd + out + " --overwrite");
        CAPTURE(out);
        CHECK(r.code == 1);
        CHECK_MESSAGE(r.out.find(message) != std::string::npos, r.out);
    }
    CHECK(run_cli("inspect " + model).code == 0);   // untouched: its manifest still holds
    const std::string other = temp_dir("export_other");
    std::ofstream(other + "/mine.txt") << "mine\n";
    Run mixed = run_cli(export_cmd + other);
    CHECK(mixed.code == 1);
    CHECK(mixed.out.find("--out: " + other + " is not empty: choose another --out, or add --overwrite") != std::string::npos);
    CHECK(!std::filesystem::exists(other + "/onnx"));
    Run replaced = run_cli(export_cmd + other + " --overwrite");
    REQUIRE_MESSAGE(replaced.code == 0, replaced.out);
    CHECK(replaced.out.find("wrote " + other + "/onnx/model.onnx") != std::string::npos);
    CHECK(std::filesystem::exists(other + "/onnx/model.onnx"));
    CHECK(!std::filesystem::exists(other + "/mine.txt"));   // replaced whole, not mixed
    // A failure after the export began (--web without its npm files) leaves nothing: not --out,
    // not the folders above it that it made, not its staging directory.
    Run web = run_cli("export --model " + model + " --web --out " + root + "/new/site --js " + root + "/no_node_modules");
    CHECK(web.code == 1);
    CHECK(!std::filesystem::exists(root + "/new"));
    for (const auto& e : std::filesystem::directory_iterator(root)) CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
}
