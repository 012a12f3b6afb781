// `pipetrain export --model DIR --onnx --out ODIR [--task-type N]`: the model as ONNX (opset 17),
// for onnxruntime and transformers.js: ODIR/onnx/model.onnx, and ODIR's config.json (with
// "model_type": "bert": ERNIE with its task embedding baked in is BERT's architecture, and
// transformers.js knows no "ernie"), vocab.txt and the tokenizer files.
//   inputs  input_ids, attention_mask, token_type_ids: int64 (batch, sequence), both axes dynamic
//   output  logits: (batch, sequence, vocab) for the masked and the causal LM, (batch, labels) for
//           a classifier
// The graph is the spec's forward written with ONNX operators: Gather for the embeddings,
// LayerNormalization, MatMul + Add for every Linear (weights stored transposed, (in, out)), exact
// GELU through Erf, Softmax over the keys with masked keys at -1e9 (exactly 0 after the softmax,
// as pipetrain's -inf), tanh for the pooler. The writer is src/formats/onnx.hpp.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/cli/args.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/train.hpp"
#include "src/ernie.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/config_json.hpp"
#include "src/formats/io.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/formats/onnx.hpp"

namespace pt {

namespace {
namespace fs = std::filesystem;
using onnx::attr_float;
using onnx::attr_int;
using onnx::attr_ints;

// A model's weights by Hugging Face name, on the host, with their shapes.
struct Weights {
    std::map<std::string, std::pair<const float*, std::vector<int64_t>>> by_name;
    const float* at(const std::string& n) const { return by_name.at(n).first; }
    const std::vector<int64_t>& shape(const std::string& n) const { return by_name.at(n).second; }
};

struct Builder {
    const ModelConfig& cfg;
    const Weights& w;
    onnx::Graph g;
    std::vector<std::vector<float>> transposed;   // kept alive until the model is written

    std::string weight(const std::string& name) { return g.weight(name, w.shape(name), w.at(name)); }
    // A Linear's weight [out, in] stored as [in, out], for x (.., in) @ W^T.
    std::string weight_t(const std::string& name) {
        const std::vector<int64_t>& s = w.shape(name);
        std::vector<float> t(size_t(s[0] * s[1]));
        for (int64_t o = 0; o < s[0]; o++)
            for (int64_t i = 0; i < s[1]; i++) t[size_t(i * s[0] + o)] = w.at(name)[o * s[1] + i];
        transposed.push_back(std::move(t));
        return g.weight(name + ".T", {s[1], s[0]}, transposed.back().data());
    }
    std::string linear(const std::string& x, const std::string& prefix) {
        return g.node("Add", {g.node("MatMul", {x, weight_t(prefix + "weight")}), weight(prefix + "bias")});
    }
    std::string layernorm(const std::string& x, const std::string& prefix) {
        return g.node("LayerNormalization", {x, weight(prefix + "weight"), weight(prefix + "bias")},
                      {attr_int("axis", -1), attr_float("epsilon", cfg.layer_norm_eps)});
    }
    std::string act(const std::string& x) {   // exact GELU: x/2 (1 + erf(x/sqrt 2)), or ReLU
        if (cfg.hidden_act == "relu") return g.node("Relu", {x});
        std::string e = g.node("Erf", {g.node("Div", {x, g.scalar(1.41421356237309504880f)})});
        return g.node("Mul", {g.node("Mul", {x, g.scalar(0.5f)}), g.node("Add", {e, g.scalar(1.0f)})});
    }
};

// (B, S, C): word + position + token type (+ the task row, baked in), then LayerNorm; the sums in
// pipetrain's order.
std::string embeddings(Builder& b, int task_type) {
    onnx::Graph& g = b.g;
    const int C = b.cfg.hidden_size;
    std::string S = g.node("Gather", {g.node("Shape", {"input_ids"}), g.ints({1}, true)}, {attr_int("axis", 0)});
    std::string positions = g.node("Range", {g.ints({0}, true), S, g.ints({1}, true)});   // (S)
    std::string e = g.node("Gather", {b.weight("ernie.embeddings.word_embeddings.weight"), "input_ids"});
    e = g.node("Add", {e, g.node("Gather", {b.weight("ernie.embeddings.position_embeddings.weight"), positions})});
    e = g.node("Add", {e, g.node("Gather", {b.weight("ernie.embeddings.token_type_embeddings.weight"), "token_type_ids"})});
    if (b.cfg.use_task_id) {
        const float* row = b.w.at("ernie.embeddings.task_type_embeddings.weight") + size_t(task_type) * C;
        e = g.node("Add", {e, g.weight("task_type_embedding_" + std::to_string(task_type), {C}, row)});
    }
    return b.layernorm(e, "ernie.embeddings.LayerNorm.");
}

// (B, 1, 1 or S, S): 0 where a query may see a key, -1e9 where not (padding; later keys when causal).
std::string attention_bias(Builder& b) {
    onnx::Graph& g = b.g;
    std::string keep = g.node("Cast", {"attention_mask"}, {attr_int("to", onnx::kFloat)});   // (B, S)
    std::string bias = g.node("Mul", {g.node("Sub", {g.scalar(1.0f), keep}), g.scalar(-1e9f)});
    bias = g.node("Unsqueeze", {bias, g.ints({1, 2})});   // (B, 1, 1, S)
    if (!b.cfg.is_decoder) return bias;
    std::string shape = g.node("Concat", {g.node("Slice", {g.node("Shape", {"input_ids"}), g.ints({1}), g.ints({2})}),
                                          g.node("Slice", {g.node("Shape", {"input_ids"}), g.ints({1}), g.ints({2})})},
                               {attr_int("axis", 0)});   // (S, S)
    std::string ones = g.node("Expand", {g.scalar(1.0f), shape});
    std::string later = g.node("Trilu", {ones, g.ints({1}, true)}, {attr_int("upper", 1)});   // 1 above the diagonal
    return g.node("Add", {bias, g.node("Mul", {later, g.scalar(-1e9f)})});
}

// One encoder block, post-LayerNorm as BERT's: x + attention, LayerNorm; + feed-forward, LayerNorm.
std::string block(Builder& b, const std::string& x, const std::string& bias, int l) {
    onnx::Graph& g = b.g;
    const int H = b.cfg.num_attention_heads, D = b.cfg.head_size(), C = b.cfg.hidden_size;
    const std::string p = "ernie.encoder.layer." + std::to_string(l) + ".";
    auto heads = [&](const std::string& name, std::vector<int64_t> perm) {   // (B, S, C) -> per head
        std::string y = g.node("Reshape", {b.linear(x, p + "attention.self." + name + "."), g.ints({0, 0, H, D})});
        return g.node("Transpose", {y}, {attr_ints("perm", std::move(perm))});
    };
    std::string q = heads("query", {0, 2, 1, 3}), k = heads("key", {0, 2, 3, 1}), v = heads("value", {0, 2, 1, 3});
    std::string scores = g.node("Mul", {g.node("MatMul", {q, k}), g.scalar(1.0f / std::sqrt(float(D)))});   // (B, H, S, S)
    std::string probs = g.node("Softmax", {g.node("Add", {scores, bias})}, {attr_int("axis", -1)});
    std::string ctx = g.node("Transpose", {g.node("MatMul", {probs, v})}, {attr_ints("perm", {0, 2, 1, 3})});
    ctx = g.node("Reshape", {ctx, g.ints({0, 0, C})});   // (B, S, C)
    std::string h = b.layernorm(g.node("Add", {b.linear(ctx, p + "attention.output.dense."), x}), p + "attention.output.LayerNorm.");
    std::string f = b.linear(b.act(b.linear(h, p + "intermediate.dense.")), p + "output.dense.");
    return b.layernorm(g.node("Add", {f, h}), p + "output.LayerNorm.");
}

// (B, S, V): dense, activation, LayerNorm, then the tied word embedding (transposed) and a bias.
std::string lm_head(Builder& b, const std::string& x) {
    onnx::Graph& g = b.g;
    std::string z = b.layernorm(b.act(b.linear(x, "cls.predictions.transform.dense.")), "cls.predictions.transform.LayerNorm.");
    std::string words = g.node("Transpose", {"ernie.embeddings.word_embeddings.weight"}, {attr_ints("perm", {1, 0})});
    return g.node("Add", {g.node("MatMul", {z, words}), b.weight("cls.predictions.bias")}, {}, "logits");
}

// (B, labels): the pooler (the first token, dense, tanh), then the classifier.
std::string classifier_head(Builder& b, const std::string& x) {
    onnx::Graph& g = b.g;
    std::string first = g.node("Gather", {x, g.ints({0}, true)}, {attr_int("axis", 1)});   // (B, C)
    std::string pooled = g.node("Tanh", {b.linear(first, "ernie.pooler.dense.")});
    return g.node("Add", {g.node("MatMul", {pooled, b.weight_t("classifier.weight")}), b.weight("classifier.bias")}, {}, "logits");
}

// ODIR/config.json: the model's, with "model_type": "bert" and a BERT architecture name.
void write_config(const std::string& out, const ModelConfig& cfg, int task_type) {
    nlohmann::json j = nlohmann::json::parse(config_to_json(cfg));
    j["model_type"] = "bert";
    j["architectures"] = {cfg.num_labels > 0 ? "BertForSequenceClassification" : cfg.is_decoder ? "BertLMHeadModel" : "BertForMaskedLM"};
    j["pipetrain_onnx_task_type"] = task_type;   // the task row baked into the embeddings
    write_file_atomic(out + "/config.json", j.dump(2) + "\n");
}

// DIR exported as ONNX into OUT (OUT/onnx/model.onnx, config.json, vocab and tokenizer files).
void export_onnx(const std::string& dir, const std::string& out, int task, const ModelConfig& cfg, const std::string& shown) {
    std::vector<std::string> vocab = load_vocab_lines(dir, cfg);
    ForwardModel loaded = forward_model(cfg);
    const std::vector<Layer*>& layers = loaded.layers;
    load_weights(dir, layers);
    Weights w;
    for (Layer* l : layers)
        for (const ParamInfo& p : l->params_info)
            if (!p.tied) w.by_name[p.name] = {l->params.data() + p.offset, p.shape};
    Builder b{cfg, w, {}, {}};
    for (const char* in : {"input_ids", "attention_mask", "token_type_ids"}) b.g.input(in, onnx::kInt64, {-1, -1}, {"batch", "sequence"});
    std::string x = embeddings(b, task), bias = attention_bias(b);
    for (int l = 0; l < cfg.num_hidden_layers; l++) x = block(b, x, bias, l);
    if (cfg.num_labels > 0) classifier_head(b, x), b.g.output("logits", onnx::kFloat, {-1, cfg.num_labels}, {"batch"});
    else lm_head(b, x), b.g.output("logits", onnx::kFloat, {-1, -1, cfg.vocab_size}, {"batch", "sequence"});
    fs::create_directories(out + "/onnx");
    std::vector<Chunk> external;
    onnx::Message model = b.g.model("pipetrain", size_t(2000) << 20, "model.onnx_data", &external);   // protobuf's 2 GB
    size_t bytes = model.size();
    for (const Chunk& c : external) bytes += c.second;
    if (!external.empty()) write_chunks_atomic(out + "/onnx/model.onnx_data", external);
    write_chunks_atomic(out + "/onnx/model.onnx", model.pieces());
    write_config(out, cfg, task);
    if (!vocab.empty()) write_vocab_files(out, vocab, cfg.max_position_embeddings);
    std::printf("wrote %s/onnx/model.onnx (%.1f MB, opset 17%s) and its config and tokenizer files\n", shown.c_str(),
                bytes / 1e6, external.empty() ? "" : ", weights in model.onnx_data");
}

// The files a page needs from npm: transformers.js's browser build and onnxruntime-web's WASM
// runtime (the build imports "onnxruntime-web/webgpu" and "onnxruntime-common": the page's import
// map points both at the bundle).
const std::pair<const char*, const char*> kWebFiles[] = {
    {"@huggingface/transformers/dist/", "transformers.web.min.js"},
    {"onnxruntime-web/dist/", "ort.webgpu.bundle.min.mjs"},
    {"onnxruntime-web/dist/", "ort-wasm-simd-threaded.asyncify.mjs"},
    {"onnxruntime-web/dist/", "ort-wasm-simd-threaded.asyncify.wasm"},
};

extern const char* const kPage;   // below
extern const char* const kFillOrClassify;
extern const char* const kGenerate;

// index.html for this model: kPage with what it runs (transformers.js's fill-mask or
// text-classification pipeline; for a causal LM, greedy generation on onnxruntime-web's session).
std::string web_page(const ModelConfig& cfg) {
    const bool causal = cfg.is_decoder;
    const std::map<std::string, std::string> fill = {
        {"@EXAMPLE@", causal ? "床前" : cfg.num_labels > 0 ? "床前明月光" : "床前明[MASK]光"},
        {"@BUTTON@", causal ? "Generate" : "Predict"},
        {"@RUN@", causal ? kGenerate : kFillOrClassify},
        {"@TASK@", causal ? "text-generation" : cfg.num_labels > 0 ? "text-classification" : "fill-mask"},
    };
    std::string page = kPage;
    for (const auto& [key, value] : fill)
        for (size_t at; (at = page.find(key)) != std::string::npos;) page.replace(at, key.size(), value);
    return page;
}

// OUT: index.html, the model under OUT/model, the npm files from JS (a node_modules folder),
// and the run's pictures when DIR is a run's --out (it has metrics.jsonl).
void export_web(const std::string& dir, const std::string& out, const std::string& js, int task, const ModelConfig& cfg,
                const std::string& shown) {
    for (const auto& [sub, file] : kWebFiles)
        if (!fs::is_regular_file(js + "/" + sub + file))
            throw std::runtime_error("--js: " + js + "/" + sub + file + " not found (expected a node_modules folder with "
                                     "@huggingface/transformers 4 and onnxruntime-web: npm install @huggingface/transformers)");
    export_onnx(dir, out + "/model", task, cfg, shown + "/model");
    for (const auto& [sub, file] : kWebFiles) write_file_atomic(out + "/" + file, read_file(js + "/" + sub + file));
    write_file_atomic(out + "/index.html", web_page(cfg));
    if (fs::exists(dir + "/metrics.jsonl")) plot_main({dir, "--out", out});
    std::printf("wrote %s/index.html: serve %s (e.g. python3 -m http.server -d %s) and open it; nothing is fetched from outside\n",
                shown.c_str(), shown.c_str(), shown.c_str());
}

// The page: a box, a button, what the model makes of the text; ?text=... fills the box and presses
// the button, ?report=URL posts what it shows there (the browser test's hook).
const char* const kPage = R"html(<!doctype html>
<html lang="zh"><head><meta charset="utf-8"><title>pipetrain: your model in the browser</title>
<script type="importmap">{"imports": {"onnxruntime-web/webgpu": "./ort.webgpu.bundle.min.mjs", "onnxruntime-common": "./ort.webgpu.bundle.min.mjs"}}</script>
<style>body { font: 16px sans-serif; margin: 2em; max-width: 50em } input { font-size: 1.2em } li { font-size: 1.2em }
#generated { font-size: 1.4em } img { max-width: 100%; border: 1px solid #ddd; margin-top: 1em }</style></head><body>
<h1>Your model, in this browser</h1>
<p>Trained by pipetrain, exported to ONNX, run by transformers.js and onnxruntime-web (WebAssembly), all from this folder.</p>
<input id="text" size="30" value="@EXAMPLE@"> <button id="go" disabled>@BUTTON@</button>
<p id="status">loading the model…</p><p id="generated"></p><ol id="predictions"></ol>
<img src="loss.svg" alt="" onerror="this.remove()"><img src="timeline.svg" alt="" onerror="this.remove()">
<script type="module">
import { pipeline, AutoTokenizer, env } from "./transformers.web.min.js";
import * as ort from "./ort.webgpu.bundle.min.mjs";
env.allowRemoteModels = false;   // everything from this folder
env.allowLocalModels = true;
env.localModelPath = new URL("./", location.href).pathname;   // a path: a full URL would count as remote
env.useBrowserCache = false;
ort.env.wasm.wasmPaths = { mjs: new URL("./ort-wasm-simd-threaded.asyncify.mjs", location.href).href,
                           wasm: new URL("./ort-wasm-simd-threaded.asyncify.wasm", location.href).href };
ort.env.wasm.numThreads = 1;   // threads need a cross-origin-isolated page
const task = "@TASK@", status = document.getElementById("status"), go = document.getElementById("go");
const params = new URLSearchParams(location.search);
function show(rows) {   // [{token_str, score}], as a numbered list
  document.getElementById("predictions").replaceChildren(...rows.map((r) => {
    const li = document.createElement("li");
    li.textContent = `${r.token_str}  ${r.score.toFixed(4)}`;
    return li;
  }));
}
async function report(what) {
  status.textContent = "done";
  if (params.get("report")) await fetch(params.get("report"), { method: "POST", body: JSON.stringify(what) });
}
try {
@RUN@
  go.disabled = false;
  if (params.has("text")) { document.getElementById("text").value = params.get("text"); go.click(); }
} catch (e) { status.textContent = "error: " + e.message; }
</script></body></html>
)html";

// A masked LM's or a classifier's page: transformers.js's own pipeline.
const char* const kFillOrClassify = R"js(  const run = await pipeline(task, "model", { dtype: "fp32", device: "wasm" });
  status.textContent = task === "fill-mask" ? "type a sentence with [MASK]" : "type a sentence";
  go.addEventListener("click", async () => {
    const out = await run(document.getElementById("text").value, task === "fill-mask" ? { top_k: 5 } : { top_k: null });
    const rows = out.map((o) => ({ token_str: o.token_str ?? o.label, score: o.score }));
    show(rows);
    await report(rows);
  });)js";

// A causal LM's page: transformers.js has no text-generation for a BERT-shaped decoder, so the page
// runs the exported graph itself, as `pipetrain generate --top-k 1` does: [CLS] + the prompt, the
// most likely next token (never [CLS], [MASK], [UNK] or an id past the vocabulary) until [SEP] or
// [PAD], ?tokens=N of them (20) or the model's positions; the next token's top 5 are listed.
const char* const kGenerate = R"js(  const tokenizer = await AutoTokenizer.from_pretrained("model");
  const session = await ort.InferenceSession.create("model/onnx/model.onnx", { executionProviders: ["wasm"] });
  const vocab = (await (await fetch("model/tokenizer.json")).json()).model.vocab;
  const positions = (await (await fetch("model/config.json")).json()).max_position_embeddings;
  const id = (t) => vocab[t], size = Math.max(...Object.values(vocab)) + 1, name = [];
  for (const [t, i] of Object.entries(vocab)) name[i] = t;
  const never = new Set([id("[CLS]"), id("[MASK]"), id("[UNK]")]), wanted = Number(params.get("tokens") ?? 20);
  status.textContent = "type the start of a text";
  go.addEventListener("click", async () => {
    const ids = [id("[CLS]"), ...tokenizer.encode(document.getElementById("text").value, { add_special_tokens: false })];
    let next = [];
    for (let made = 0; made < wanted && ids.length < positions; made++) {
      const T = ids.length, feed = (v) => new ort.Tensor("int64", BigInt64Array.from(v.map(BigInt)), [1, T]);
      const out = await session.run({ input_ids: feed(ids), attention_mask: feed(ids.map(() => 1)),
                                      token_type_ids: feed(ids.map(() => 0)) });
      const V = out.logits.dims[2], last = out.logits.data.subarray((T - 1) * V, T * V);
      const allowed = (v) => v < size && !never.has(v);
      let best = -1;   // the first of the most likely, as a stable sort would put it
      for (let v = 0; v < V; v++) if (allowed(v) && (best < 0 || last[v] > last[best])) best = v;
      if (made === 0) {   // the model's probabilities of the next token (softmax over its whole vocabulary)
        const top = Math.max(...last), sum = last.reduce((s, x) => s + Math.exp(x - top), 0);
        next = [...last.keys()].filter(allowed).sort((a, b) => last[b] - last[a]).slice(0, 5)
                               .map((v) => ({ token_str: name[v], score: Math.exp(last[v] - top) / sum }));
      }
      if (best === id("[SEP]") || best === id("[PAD]")) break;
      ids.push(best);
    }
    document.getElementById("generated").textContent = tokenizer.decode(ids.slice(1), { skip_special_tokens: true });
    show(next);
    await report({ ids: ids.slice(1), next });
  });)js";

// --out: not --model's directory nor inside it (nor around it), and empty unless --overwrite; the
// directories above it are made, and the first one made is returned (removed if the export fails).
fs::path absolute_dir(const std::string& p) {   // absolute, no "." or "..", no trailing separator
    fs::path a = fs::weakly_canonical(fs::absolute(p)).lexically_normal();
    return a.has_filename() ? a : a.parent_path();
}

std::string check_export_out(const std::string& dir, const std::string& out, bool overwrite) {
    std::error_code ec;
    const fs::path m = absolute_dir(dir), o = absolute_dir(out);
    auto within = [](const fs::path& inner, const fs::path& outer) {
        return std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end()).first == outer.end();
    };
    if (within(o, m) || within(m, o))
        throw std::runtime_error("--out: " + out + " is " + (within(m, o) ? "--model's directory, or holds it" : "inside --model's directory") +
                                 ": the export would write over the model it reads");
    if (fs::exists(fs::symlink_status(out, ec)) && !fs::is_directory(out, ec))
        throw std::runtime_error("--out: " + out + " is a file, expected a directory (the export's)");
    if (fs::is_directory(out, ec) && !fs::is_empty(out, ec) && !overwrite)
        throw std::runtime_error("--out: " + out + " is not empty: choose another --out, or add --overwrite (it replaces the directory whole)");
    fs::path first_made;
    for (fs::path p = o.parent_path(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) first_made = p;
    fs::create_directories(o.parent_path(), ec);
    if (ec) throw std::runtime_error("--out: cannot create " + o.parent_path().string() + " (" + ec.message() + ")");
    try {
        check_writable_dir(o.parent_path().string(), "--out");   // the staging directory goes there
    } catch (...) {
        if (!first_made.empty()) fs::remove_all(first_made, ec);
        throw;
    }
    return first_made.string();
}

}  // namespace

// Written into a staging directory beside --out, then renamed into place (an existing --out goes to
// the trash first): a failure leaves nothing, never a mix of an earlier export's files and this one's.
int export_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--model", "--out", "--task-type", "--js"}, {"--onnx", "--web", "--overwrite"});
    if (a.has("--onnx") == a.has("--web")) throw std::runtime_error("--onnx or --web: give one (the export's format)");
    const std::string dir = a.required("--model"), out = a.required("--out");
    ModelConfig cfg = load_model_config(dir);
    const int task = int(a.integer("--task-type", 0, 0, cfg.use_task_id ? cfg.task_type_vocab_size - 1 : 0));
    const std::string js = a.has("--web") ? a.required("--js") : "";
    const std::string made = check_export_out(dir, out, a.has("--overwrite")), target = absolute_dir(out).string();
    std::string staging;
    try {
        staging = stage_dir(target);
        if (a.has("--onnx")) export_onnx(dir, staging, task, cfg, out);
        else export_web(dir, staging, js, task, cfg, out);
        fsync_dir(staging);
        if (fs::exists(target)) trash(target);
        if (std::rename(staging.c_str(), target.c_str()) != 0) fail(out, "cannot rename " + staging + " to it", errno);
        fsync_dir(fs::path(target).parent_path().string());
    } catch (...) {
        std::error_code ec;
        if (!staging.empty()) fs::remove_all(staging, ec);
        if (!made.empty()) fs::remove_all(made, ec);
        throw;
    }
    return 0;
}

}  // namespace pt
