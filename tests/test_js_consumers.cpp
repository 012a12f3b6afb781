// Independent consumers of what pipetrain writes (issue #32 §3): transformers.js (npm
// @huggingface/transformers, pinned in tests/js/package-lock.json and installed by scripts/setup.sh
// with `npm ci --ignore-scripts`) reads the tokenizer.json pipetrain writes. Where node or the npm
// packages are missing, only the checks of Debian's python3-onnx run (test suite "python-onnx"),
// saying so; with neither, the program skips.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "process_util.hpp"
#include "src/formats/io.hpp"
#include "src/formats/onnx.hpp"
#include "src/formats/safetensors.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/formats/tokenizer_json.hpp"

namespace fs = std::filesystem;
using test::Run;

namespace {

const std::string kJs = std::string(PT_SOURCE_DIR) + "/tests/js";
const std::string kInput = test::fixture("tokenizer/input.txt");

// Lines of tests/fixtures/tokenizer/input.txt where transformers.js 4.3.2 is known to give other
// ids than pipetrain (and Hugging Face's Rust tokenizers), and why. Any other difference fails,
// and so does a known one that no longer differs (the list would be stale).
const std::map<int, std::string> kKnown = {
    {105, "JavaScript's toLowerCase applies Unicode's final-sigma rule (a word-final Σ becomes ς); pipetrain and "
          "Hugging Face's tokenizers lower each character alone (σ)"},
    {153, "transformers.js does not count CJK Extension B (U+20000 and up) as CJK: 𠀀𠀁 stays one word, one [UNK]; "
          "pipetrain and Hugging Face's tokenizers split them into two tokens"},
};

// A model directory holding the tokenizer files pipetrain writes for the fixture vocabulary,
// edited by `edit` (to plant a mistake).
std::string tokenizer_dir(const std::string& name, void (*edit)(nlohmann::json&) = nullptr) {
    pt::Tokenizer vocab = pt::Tokenizer::from_file(test::fixture("tokenizer/vocab.txt"));
    std::vector<std::string> lines;
    for (size_t i = 0; i < vocab.size(); i++) lines.push_back(vocab.token(int32_t(i)));
    pt::TokenizerFiles f = pt::tokenizer_files(lines, 512);
    if (edit) {
        nlohmann::json j = nlohmann::json::parse(f.tokenizer_json);
        edit(j);
        f.tokenizer_json = j.dump();
    }
    std::string dir = test::temp_dir(name) + "/model";
    fs::create_directories(dir);
    pt::write_file_atomic(dir + "/tokenizer.json", f.tokenizer_json);
    pt::write_file_atomic(dir + "/tokenizer_config.json", f.tokenizer_config_json);
    pt::write_file_atomic(dir + "/special_tokens_map.json", f.special_tokens_map_json);
    return dir;
}

std::vector<std::string> lines_of(const std::string& text) { return pt::split_lines(text); }

// Line numbers (1-based) where transformers.js's ids differ from `pipetrain tokenize --ids`.
std::vector<int> differing_lines(const std::string& dir, std::string* report) {
    Run js = test::run_command("cd " + kJs + " && node tokenize.mjs " + dir + " " + kInput);
    REQUIRE_MESSAGE(js.code == 0, js.out);
    Run ours = test::run_cli("tokenize --vocab " + test::fixture("tokenizer/vocab.txt") + " --ids --file " + kInput);
    REQUIRE_MESSAGE(ours.code == 0, ours.out);
    std::vector<std::string> a = lines_of(ours.out), b = lines_of(js.out), text = pt::read_lines(kInput);
    REQUIRE(a.size() == text.size());
    REQUIRE(b.size() == text.size());
    std::vector<int> differ;
    for (size_t i = 0; i < text.size(); i++)
        if (a[i] != b[i]) {
            differ.push_back(int(i) + 1);
            *report += "line " + std::to_string(i + 1) + " (" + pt::printable(text[i]) + "): pipetrain " + a[i] +
                       " | transformers.js " + b[i] + "\n";
        }
    return differ;
}

}  // namespace

TEST_CASE("transformers.js reads pipetrain's tokenizer.json: the same ids on every fixture line but the known ones") {
    std::string report;
    std::vector<int> differ = differing_lines(tokenizer_dir("js_tok"), &report);
    INFO(report);
    for (int line : differ) {
        CAPTURE(line);
        CHECK_MESSAGE(kKnown.count(line), "a difference that is not a known transformers.js departure");
    }
    for (const auto& [line, why] : kKnown) {
        CAPTURE(line);
        CHECK_MESSAGE(std::find(differ.begin(), differ.end(), line) != differ.end(),
                      "a known departure no longer differs: remove it from kKnown (" << why << ")");
    }
    const size_t total = pt::read_lines(kInput).size(), same = total - differ.size();
    MESSAGE(same << " of " << total << " fixture lines id for id; known departures: " << differ.size());
}

TEST_CASE("planted wrong, the check fails: a tokenizer.json that keeps case, one whose ids are shifted") {
    std::string report;
    auto keeps_case = [](nlohmann::json& j) { j["normalizer"]["lowercase"] = false; };
    std::vector<int> differ = differing_lines(tokenizer_dir("js_tok_case", keeps_case), &report);
    CHECK(differ.size() > kKnown.size() + 3);
    report.clear();
    auto shifted = [](nlohmann::json& j) {   // every id from 1000 on one too high
        for (auto& entry : j["model"]["vocab"].items())
            if (entry.value().get<int>() >= 1000) entry.value() = entry.value().get<int>() + 1;
    };
    differ = differing_lines(tokenizer_dir("js_tok_shift", shifted), &report);
    CHECK(differ.size() > kKnown.size());
}

// ---- the ONNX export, run by onnxruntime-node -------------------------------------------------

namespace {

const std::string kSample = test::fixture("text/sample_zh.txt");
constexpr double kLogitsTolerance = 1e-4;

struct Compared {
    double max_abs_diff = 1e30, max_abs_ref = 0;
    std::string out;
};

// onnxruntime-node on ONNX_FILE with the batch of DUMP (written by eval --dump-logits), against DUMP's `name`.
Compared run_onnx(const std::string& onnx_file, const std::string& dump, const std::string& name) {
    Compared c;
    Run r = test::run_command("cd " + kJs + " && node onnx_logits.mjs " + onnx_file + " " + dump + " " + name);
    c.out = r.out;
    if (r.code != 0) return c;
    nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    c.max_abs_diff = j["max_abs_diff"].get<double>(), c.max_abs_ref = j["max_abs_ref"].get<double>();
    return c;
}

// Exports MODEL, evaluates it with `eval_flags` (--dump-logits), and compares.
Compared export_and_compare(const std::string& model, const std::string& eval_flags, const std::string& name,
                            const std::string& export_flags = "") {
    const std::string out = test::temp_dir("onnx_export");
    Run e = test::run_cli("export --model " + model + " --onnx --out " + out + "/exported " + export_flags);
    REQUIRE_MESSAGE(e.code == 0, e.out);
    Run d = test::run_cli("eval --model " + model + " " + eval_flags + " --dump-logits " + out + "/dump.safetensors");
    REQUIRE_MESSAGE(d.code == 0, d.out);
    Compared c = run_onnx(out + "/exported/onnx/model.onnx", out + "/dump.safetensors", name);
    c.out += " (" + out + ")";
    return c;
}

std::string trained(const std::string& name, const std::string& flags) {
    const std::string out = test::temp_dir(name) + "/run";
    Run r = test::run_cli("train --preset tiny --batch 4 --seq 24 --steps 3 --seed 5 " + flags + " --out " + out);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    return out;
}

// An --inputs file of B rows of T tokens: ids below `vocab`, the last row padded from T - 5 on,
// token types 1 in the second half of row 0, `task` everywhere when task >= 0, some targets.
std::string inputs_file(int B, int T, int vocab, int task) {
    std::vector<int64_t> ids(size_t(B) * T), mask(ids.size(), 1), types(ids.size(), 0), labels(ids.size(), -100), tasks(ids.size(), task);
    for (size_t i = 0; i < ids.size(); i++) ids[i] = int64_t(5 + (i * 7919) % size_t(vocab - 5));
    for (int t = T - 5; t < T; t++) mask[size_t(B - 1) * T + t] = 0, ids[size_t(B - 1) * T + t] = 0;
    for (int t = T / 2; t < T; t++) types[size_t(t)] = 1;
    for (size_t i = 3; i < ids.size(); i += 4) labels[i] = mask[i] ? ids[i] : -100;
    pt::st::Writer w;
    w.add_i64("input_ids", {B, T}, ids.data());
    w.add_i64("attention_mask", {B, T}, mask.data());
    w.add_i64("token_type_ids", {B, T}, types.data());
    w.add_i64("labels", {B, T}, labels.data());
    if (task >= 0) w.add_i64("task_type_ids", {B, T}, tasks.data());
    std::string path = test::temp_dir("onnx_inputs") + "/inputs.safetensors";
    w.write(path);
    return path;
}

bool have_python_onnx() { return std::system("/usr/bin/python3 -c 'import onnx' >/dev/null 2>&1") == 0; }

// Why node's consumers cannot run here ("" when they can): no node, or its packages not installed.
std::string why_no_node() {
    if (std::system("node --version >/dev/null 2>&1") != 0) return "node is not installed (apt-get install nodejs npm, then scripts/setup.sh)";
    if (!fs::exists(kJs + "/node_modules/@huggingface/transformers/package.json"))
        return "tests/js/node_modules is not installed (scripts/setup.sh runs npm ci --ignore-scripts there)";
    return "";
}

}  // namespace

TEST_CASE("export --onnx, masked LM: onnxruntime-node's logits within 1e-4 of pipetrain eval, batch 3 x 17") {
    const std::string model = trained("onnx_mlm", "--data " + kSample);
    Compared c = export_and_compare(model, "--inputs " + inputs_file(3, 17, 313, -1), "mlm_logits");
    INFO(c.out);
    MESSAGE("masked LM: max |onnx - pipetrain| " << c.max_abs_diff << " (max |logit| " << c.max_abs_ref << ")");
    CHECK(c.max_abs_diff < kLogitsTolerance);
    CHECK(c.max_abs_ref > 0.01);   // not a comparison of zeros
}

TEST_CASE("export --onnx, causal LM and classifier: within 1e-4 of pipetrain eval") {
    Compared causal = export_and_compare(trained("onnx_causal", "--data " + kSample + " --objective causal"),
                                         "--data " + kSample + " --seq 23 --objective causal", "causal_logits");
    INFO(causal.out);
    MESSAGE("causal LM: max |onnx - pipetrain| " << causal.max_abs_diff << " (max |logit| " << causal.max_abs_ref << ")");
    CHECK(causal.max_abs_diff < kLogitsTolerance);
    const std::string tsv = test::fixture("classify/train.tsv");
    Compared cls = export_and_compare(trained("onnx_cls", "--task classify --labels 2 --data " + tsv),
                                      "--data " + test::fixture("classify/dev.tsv") + " --seq 19", "logits");
    INFO(cls.out);
    MESSAGE("classifier: max |onnx - pipetrain| " << cls.max_abs_diff << " (max |logit| " << cls.max_abs_ref << ")");
    CHECK(cls.max_abs_diff < kLogitsTolerance);
    CHECK(cls.max_abs_ref > 0);
}

TEST_CASE("export --onnx of a real ERNIE configuration (the nano-like parity fixture, task type 2 baked in)") {
    const std::string model = test::fixture("ernie/nano-like/hf");
    Compared c = export_and_compare(model, "--inputs " + inputs_file(2, 29, 40, 2), "mlm_logits", "--task-type 2");
    INFO(c.out);
    MESSAGE("ERNIE nano-like: max |onnx - pipetrain| " << c.max_abs_diff << " (max |logit| " << c.max_abs_ref << ")");
    CHECK(c.max_abs_diff < kLogitsTolerance);
    Run bad = test::run_cli("export --model " + model + " --onnx --out " + test::temp_dir("onnx_bad") + " --task-type 99");
    CHECK(bad.code != 0);
    CHECK(bad.out.find("--task-type") != std::string::npos);
}

TEST_CASE("every exported file passes onnx.checker (full_check) and strict shape inference; planted wrong, the logits check fails" *
          doctest::test_suite("python-onnx")) {
    if (!have_python_onnx()) {
        MESSAGE("skipped: Debian's python3-onnx is not installed (scripts/setup.sh installs it where it can)");
        return;
    }
    const std::string model = trained("onnx_check", "--data " + kSample), out = test::temp_dir("onnx_checked");
    REQUIRE(test::run_cli("export --model " + model + " --onnx --out " + out + "/e").code == 0);
    const std::string file = out + "/e/onnx/model.onnx";
    Run check = test::run_command("/usr/bin/python3 -c \"import onnx, sys; m = onnx.load(sys.argv[1]); "
                                  "onnx.checker.check_model(m, full_check=True); "
                                  "onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True); print('checked')\" " + file);
    INFO(check.out);
    CHECK(check.code == 0);
    CHECK(check.out.find("checked") != std::string::npos);
    if (!why_no_node().empty()) {
        MESSAGE("the planted exports are not run: " << why_no_node());
        return;
    }
    REQUIRE(test::run_cli("eval --model " + model + " --inputs " + inputs_file(3, 17, 313, -1) + " --dump-logits " + out +
                          "/dump.safetensors").code == 0);
    CHECK(run_onnx(file, out + "/dump.safetensors", "mlm_logits").max_abs_diff < kLogitsTolerance);
    // A wrong epsilon in one LayerNormalization; one square weight transposed: each must fail the check.
    const char* plants[] = {
        "n = [n for n in m.graph.node if n.op_type == 'LayerNormalization'][0]; "
        "[a for a in n.attribute if a.name == 'epsilon'][0].f = 1e-2",
        "import numpy as np; from onnx import numpy_helper as h; "
        "i = [k for k, t in enumerate(m.graph.initializer) if t.name.endswith('attention.self.query.weight.T')][0]; "
        "a = h.to_array(m.graph.initializer[i]); m.graph.initializer[i].CopyFrom(h.from_array(np.ascontiguousarray(a.T), m.graph.initializer[i].name))",
    };
    for (const char* plant : plants) {
        CAPTURE(std::string(plant));
        const std::string bad = out + "/planted.onnx";
        Run p = test::run_command(std::string("/usr/bin/python3 -c \"import onnx, sys; m = onnx.load(sys.argv[1]); ") + plant +
                                  "; onnx.save(m, sys.argv[2])\" " + file + " " + bad);
        REQUIRE_MESSAGE(p.code == 0, p.out);
        CHECK(run_onnx(bad, out + "/dump.safetensors", "mlm_logits").max_abs_diff > kLogitsTolerance);
    }
}

TEST_CASE("initializers past the limit go to external data, which onnx reads back value for value; below it, inline" *
          doctest::test_suite("python-onnx")) {
    if (!have_python_onnx()) {
        MESSAGE("skipped: Debian's python3-onnx is not installed (scripts/setup.sh installs it where it can)");
        return;
    }
    // y = x V W + b with V (200, 30) and W (30, 10): 24,000 and 1,200 bytes, both out, one after the
    // other; b (40 bytes) stays inline: under 1,024 bytes a constant does even when the rest goes
    // out. The exporter's limit is 2,000 MB (protobuf's 2 GB), past what a test can write.
    std::vector<float> v(6000), w(300), b(10, 0.5f);
    for (size_t i = 0; i < v.size(); i++) v[i] = 0.25f * float(i) - 7.0f;
    for (size_t i = 0; i < w.size(); i++) w[i] = float(i) / 64;
    for (size_t limit : {size_t(0), size_t(1) << 30}) {
        pt::onnx::Graph g;
        g.input("x", pt::onnx::kFloat, {-1, 200}, {"batch"});
        const std::string xv = g.node("MatMul", {"x", g.weight("v", {200, 30}, v.data())});
        g.node("Add", {g.node("MatMul", {xv, g.weight("w", {30, 10}, w.data())}), g.weight("b", {10}, b.data())}, {}, "y");
        g.output("y", pt::onnx::kFloat, {-1, 10}, {"batch"});
        std::vector<pt::Chunk> external;
        pt::onnx::Message m = g.model("test", limit, "m.onnx_data", &external);
        const std::string dir = test::temp_dir("onnx_external");
        if (!external.empty()) pt::write_chunks_atomic(dir + "/m.onnx_data", external);
        pt::write_chunks_atomic(dir + "/m.onnx", m.pieces());
        CAPTURE(limit);
        CHECK(external.size() == (limit == 0 ? 2u : 0u));
        CHECK(std::filesystem::file_size(dir + "/m.onnx") == m.size());
        CHECK((m.size() < 24000) == (limit == 0));
        Run check = test::run_command(
            "/usr/bin/python3 -c \"import onnx, sys, numpy as np; from onnx import numpy_helper as h; "
            "onnx.checker.check_model(sys.argv[1], full_check=True); m = onnx.load(sys.argv[1]); "
            "t = {i.name: h.to_array(i) for i in m.graph.initializer}; "
            "assert np.array_equal(t['v'].ravel(), np.arange(6000, dtype=np.float32) * 0.25 - 7), t['v']; "
            "assert np.array_equal(t['w'].ravel(), np.arange(300, dtype=np.float32) / 64), t['w']; "
            "assert np.array_equal(t['b'], np.full(10, 0.5, dtype=np.float32)), t['b']; "
            "print('read back', t['v'].shape, t['w'].shape)\" " + dir + "/m.onnx");
        INFO(check.out);
        CHECK(check.code == 0);
        CHECK(check.out.find("read back (200, 30) (30, 10)") != std::string::npos);
    }
}

// ---- transformers.js's own pipelines on an export ------------------------------------------------

namespace {
nlohmann::json pipeline_js(const std::string& args) {
    Run r = test::run_command("cd " + kJs + " && node pipelines.mjs " + args);
    INFO(r.out);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1));
}

// The 5 predictions `shown` (JSON [{token_str, score}, ...]) are `pipetrain fill-mask`'s for 床前明[MASK]光:
// the same tokens in order, the same scores to the 4 decimals pipetrain prints.
void same_top5_as_pipetrain(const std::string& model, const nlohmann::json& shown) {
    Run ours = test::run_cli("fill-mask --model " + model + " 床前明[MASK]光");   // "[MASK] 1 (position 4):  为 0.0054  模 0.0053 ..."
    REQUIRE_MESSAGE(ours.code == 0, ours.out);
    std::istringstream words(ours.out.substr(ours.out.find("):") + 2));
    REQUIRE(shown.size() == 5);
    for (int k = 0; k < 5; k++) {
        std::string token;
        double score = 0;
        words >> token >> score;
        CAPTURE(k);
        CHECK(shown[k]["token_str"].get<std::string>() == token);
        CHECK(std::abs(shown[k]["score"].get<double>() - score) <= 0.51e-4);
    }
}

std::string exported(const std::string& model) {
    const std::string out = test::temp_dir("onnx_pipe") + "/model";
    Run e = test::run_cli("export --model " + model + " --onnx --out " + out);
    REQUIRE_MESSAGE(e.code == 0, e.out);
    return out;
}
}  // namespace

TEST_CASE("transformers.js fill-mask on an export: pipetrain fill-mask's top 5 for 床前明[MASK]光, in order, same scores") {
    const std::string model = trained("pipe_mlm", "--data " + kSample + " --steps 20");
    same_top5_as_pipetrain(model, pipeline_js("fill-mask " + exported(model) + " '床前明[MASK]光'"));
}

TEST_CASE("transformers.js text-classification on an export: every label's probability within 1e-5 of pipetrain's") {
    const std::string model = trained("pipe_cls", "--task classify --labels 2 --data " + test::fixture("classify/train.tsv") + " --steps 20");
    const std::string dev = test::fixture("classify/dev.tsv"), dump = test::temp_dir("pipe_cls_dump") + "/dump.safetensors";
    REQUIRE(test::run_cli("eval --model " + model + " --data " + dev + " --seq 64 --dump-logits " + dump).code == 0);
    pt::st::File f = pt::st::read(dump);
    std::vector<float> logits = f.to_f32("logits");   // (rows, 2)
    nlohmann::json js = pipeline_js("classify " + exported(model) + " " + dev);
    const size_t rows = logits.size() / 2;   // eval's first batch: the first rows of dev.tsv
    REQUIRE(rows >= 8);
    REQUIRE(js.size() >= rows);
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        double a = logits[2 * r], b = logits[2 * r + 1], m = std::max(a, b);
        double p0 = std::exp(a - m) / (std::exp(a - m) + std::exp(b - m));
        worst = std::max({worst, std::abs(js[r][0].get<double>() - p0), std::abs(js[r][1].get<double>() - (1 - p0))});
    }
    MESSAGE(rows << " texts: max |transformers.js - pipetrain| probability " << worst);
    CHECK(worst < 1e-5);
}

namespace {
// `pipetrain generate --top-k 1 --tokens 20` from 床前: its text's ids (without [CLS]), space-separated.
std::string pipetrain_greedy_ids(const std::string& model) {
    // stdout only: the "stopped after N" line goes to stderr (and, unbuffered, would come first).
    Run ours = test::run_command("(" + std::string(PT_CLI) + " generate --model " + model + " --prompt 床前 --top-k 1 --tokens 20 2>/dev/null)");
    REQUIRE_MESSAGE(ours.code == 0, ours.out);
    const std::string text = ours.out.substr(0, ours.out.find('\n'));
    Run ids = test::run_cli("tokenize --vocab " + model + "/vocab.txt --ids '" + text + "'");
    REQUIRE(ids.code == 0);
    return ids.out.substr(0, ids.out.find('\n'));
}
std::string joined(const nlohmann::json& ids) {
    std::string out;
    for (const auto& v : ids) out += (out.empty() ? "" : " ") + std::to_string(v.get<int>());
    return out;
}
}  // namespace

TEST_CASE("greedy generation of 20 tokens with onnxruntime on an exported causal LM: pipetrain generate's ids") {
    const std::string model = trained("pipe_causal", "--data " + kSample + " --objective causal --steps 30");
    nlohmann::json js = pipeline_js("greedy " + exported(model) + " 20 床前");
    CHECK(joined(js) == pipetrain_greedy_ids(model));
    CHECK(js.size() > 2);   // it generated something
}

// ---- the capstone: the student's model in a browser -------------------------------------------

namespace {
// `export --web` of `model` into a new folder, the folder served from 127.0.0.1 and the page opened in
// headless Chromium with ?text=TEXT (the page fills its box and presses its button) and
// ?report=/result (it posts what it shows there): that report. Null where chromium is missing.
nlohmann::json page_shows(const std::string& model, const std::string& text, const std::string& name) {
    if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
        MESSAGE("skipped: Debian's chromium is not installed (apt-get install chromium)");
        return nullptr;
    }
    const std::string site = test::temp_dir(name + "_page") + "/site";
    Run e = test::run_cli("export --model " + model + " --web --out " + site + " --js " + kJs + "/node_modules");
    REQUIRE_MESSAGE(e.code == 0, e.out);
    for (const char* f : {"index.html", "transformers.web.min.js", "ort-wasm-simd-threaded.asyncify.wasm", "model/onnx/model.onnx",
                          "model/tokenizer.json", "loss.svg"})
        CHECK_MESSAGE(fs::exists(site + "/" + f), f);
    test::Child server = test::Child::exec({"node", kJs + "/serve.mjs", site, "120"});
    REQUIRE_MESSAGE(server.wait_for("\n", 10), server.out);
    const std::string url = server.out.substr(0, server.out.find('\n')) + "index.html?text=" + text + "&report=/result";
    test::Child browser = test::Child::exec({"chromium", "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + site + "-profile", url});
    const bool reported = server.wait_for("}]", 120);
    browser.signal(SIGKILL);
    INFO(server.out);
    REQUIRE(reported);
    return nlohmann::json::parse(server.out.substr(server.out.find_first_of("[{", server.out.find('\n'))));
}
}  // namespace

TEST_CASE("export --web: headless Chromium runs the page from 127.0.0.1 and shows pipetrain fill-mask's top 5") {
    const std::string model = trained("web_mlm", "--data " + kSample + " --steps 20");
    nlohmann::json shown = page_shows(model, "床前明[MASK]光", "web");
    if (shown.is_null()) return;
    same_top5_as_pipetrain(model, shown);
    Run no_js = test::run_cli("export --model " + model + " --web --out " + test::temp_dir("web_nojs") + "/site --js /nonexistent");
    CHECK(no_js.code == 1);
    CHECK(no_js.out.find("--js: /nonexistent/@huggingface/transformers/dist/transformers.web.min.js not found") != std::string::npos);
}

// A classifier's page: every label with its probability, most likely first, as `pipetrain classify`
// prints them ("LABEL_1 | LABEL_1 0.5141, LABEL_0 0.4859 | TEXT": the same labels, 4 decimals).
TEST_CASE("export --web of a classifier: the page in headless Chromium shows pipetrain classify's labels and probabilities") {
    const std::string model = trained("web_cls", "--task classify --labels 2 --data " + test::fixture("classify/train.tsv") + " --steps 20");
    const std::string text = "很好的一次体验，下次还会选择这里。";
    nlohmann::json shown = page_shows(model, text, "web_cls");
    if (shown.is_null()) return;
    Run ours = test::run_cli("classify --model " + model + " '" + text + "'");
    REQUIRE_MESSAGE(ours.code == 0, ours.out);
    const size_t from = ours.out.find(" | ") + 3;
    std::istringstream each(ours.out.substr(from, ours.out.find(" | ", from) - from));
    REQUIRE(shown.size() == 2);
    for (size_t k = 0; k < shown.size(); k++) {
        std::string label;
        double p = 0;
        each >> label >> p;
        each.ignore(1);   // the comma
        CAPTURE(k);
        CHECK(shown[k]["token_str"].get<std::string>() == label);
        CHECK(std::abs(shown[k]["score"].get<double>() - p) <= 0.51e-4);
    }
}

// A causal model's page generates greedily in the browser, as `pipetrain generate --top-k 1` does, and
// lists the next token's top 5: the first of them is the first token it generated.
TEST_CASE("export --web of a causal LM: the page in headless Chromium generates pipetrain generate's greedy ids") {
    const std::string model = trained("web_causal", "--data " + kSample + " --objective causal --steps 30");
    nlohmann::json shown = page_shows(model, "床前", "web_causal");
    if (shown.is_null()) return;
    const std::string ours = pipetrain_greedy_ids(model);
    CHECK(joined(shown["ids"]) == ours);
    REQUIRE(shown["ids"].size() > 2);   // the prompt's 2 ids, and something generated
    Run first = test::run_cli("tokenize --vocab " + model + "/vocab.txt --ids '" + shown["next"][0]["token_str"].get<std::string>() + "'");
    CHECK(first.out.substr(0, first.out.find('\n')) == std::to_string(shown["ids"][2].get<int>()));
    double last = 1;
    for (const auto& n : shown["next"]) {   // most likely first
        CHECK(n["score"].get<double>() <= last);
        last = n["score"].get<double>();
    }
}

int main(int argc, char** argv) {
    const std::string no_node = why_no_node();
    if (!no_node.empty() && !have_python_onnx()) {
        std::printf("skipped: %s; and Debian's python3-onnx is not installed either\n", no_node.c_str());
        return 77;
    }
    // node (an empty mat-debug-<pid>.log per run) and chromium (org.chromium.Chromium.*) leave files
    // in TMPDIR; give them one that temp_dir removes when this program exits.
    setenv("TMPDIR", test::temp_dir("consumers_tmpdir").c_str(), 1);
    doctest::Context ctx(argc, argv);
    if (!no_node.empty()) {
        std::printf("partly skipped: %s; only the python3-onnx checks run\n", no_node.c_str());
        ctx.addFilter("test-suite", "python-onnx");
    }
    return ctx.run();
}
