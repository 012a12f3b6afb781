// labs/10_ernie/check.cpp — lab 10's check: scripts/lab.sh check 10 (or build/lab_10).
// `build/lab_10 --report` prints the deliverable's numbers from your code.
//
// References, none of them your code path: the fixture itself (tests/fixtures/ernie/nano-like holds
// the same model twice, paddle/ and hf/: the tensor of each Paddle name is found in hf/ by its
// numbers, as stored or transposed, and hf/'s name is the model's); the lesson's loader reading the
// Hugging Face file (pt::load_weights, no renaming, no transpose); and the logits that an
// independent PyTorch implementation computed (expected.safetensors).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "labs/10_ernie/load_paddle.hpp"
#include "labs/check.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/corpus.hpp"

using namespace labcheck;

namespace {

const std::string kModel = PT_FIXTURES "/ernie/nano-like";
const char* const kTiedCopy = "cls.predictions.decoder_weight";   // in .pdparams files: ignored
constexpr double kBar = 1e-4;   // DESIGN's ERNIE parity bar

const char* const kNotTransposedHint =
    "not transposed: PaddleNLP stores Linear weights [in, out] (x @ W), the model [out, in]: set *transpose "
    "for the weight of every Linear (q/k/v/out_proj, linear1, linear2, the pooler, cls.predictions.transform)";
const char* const kPoolerHint =
    "the pooler keeps its name in both conventions, but it is a Linear: PaddleNLP stores Linear weights [in, out] "
    "(square, so its shape cannot tell; only pooled_output would show it, not the logits)";
const char* const kTablesHint =
    "transposed by mistake: the embeddings are lookup tables, [rows, H] in both conventions (and the tied "
    "decoder is the word embeddings): transpose only what to_model_name flags, the Linear weights";
const char* const kNormHint =
    "norm1 is the LayerNorm after the attention (attention.output.LayerNorm), norm2 the one after the "
    "feed-forward (output.LayerNorm)";
const char* const kLayerIndexHint =
    "keep the layer index N as it is: PaddleNLP's encoder.layers.N is Hugging Face's encoder.layer.N, both "
    "counted from 0";

// ---- the model, the fixture's truth -------------------------------------------------------------

struct Model {
    std::vector<std::unique_ptr<pt::Layer>> owned;
    std::vector<pt::Layer*> layers;
};

// The model of the fixture's config.json, every parameter NaN: what nothing was copied into shows.
Model empty_model() {
    pt::ModelConfig cfg = pt::load_model_config(kModel + "/hf");
    Model m;
    for (int i = 0; i < pt::num_model_layers(cfg); i++) {
        m.owned.push_back(pt::make_layer(cfg, i));
        m.layers.push_back(m.owned.back().get());
        std::fill(m.layers.back()->params.data(), m.layers.back()->params.data() + m.layers.back()->params.size(),
                  std::numeric_limits<float>::quiet_NaN());
    }
    return m;
}

// The lesson's loader on the Hugging Face copy of the model.
const Model& reference() {
    static Model m = [] {
        Model r = empty_model();
        pt::load_weights(kModel + "/hf", r.layers);
        return r;
    }();
    return m;
}

const pt::ParamInfo* param_named(const Model& m, const std::string& name, const float** data = nullptr) {
    for (pt::Layer* l : m.layers)
        for (const pt::ParamInfo& p : l->params_info)
            if (p.name == name) {
                if (data) *data = l->params.data() + p.offset;
                return &p;
            }
    return nullptr;
}

std::vector<float> transposed(const std::vector<float>& x, size_t rows, size_t cols) {
    std::vector<float> out(x.size());
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) out[c * rows + r] = x[r * cols + c];
    return out;
}

// Each Paddle tensor's model name and transpose, found by its numbers in the Hugging Face file.
struct Truth {
    std::string paddle, model;
    bool transpose;
};
std::vector<Truth> fixture_truth() {
    pt::st::File paddle = pt::st::read(kModel + "/paddle/model.safetensors"),
                 hf = pt::st::read(kModel + "/hf/model.safetensors");
    std::vector<Truth> truth;
    for (const pt::st::TensorInfo& t : paddle.tensors) {
        std::vector<float> v = paddle.to_f32(t.name);
        std::vector<float> vt = t.shape.size() == 2 ? transposed(v, size_t(t.shape[0]), size_t(t.shape[1])) : v;
        for (const pt::st::TensorInfo& h : hf.tensors) {
            if (h.numel() != t.numel()) continue;
            std::vector<float> w = hf.to_f32(h.name);
            bool same = std::vector<int64_t>(h.shape) == t.shape && w == v;
            bool flipped = t.shape.size() == 2 && std::vector<int64_t>(h.shape.rbegin(), h.shape.rend()) == t.shape &&
                           w == vt && !same;
            if (same || flipped) truth.push_back({t.name, h.name, flipped});
        }
        if (truth.empty() || truth.back().paddle != t.name ||
            (truth.size() > 1 && truth[truth.size() - 2].paddle == t.name))
            throw std::runtime_error("the fixture: " + t.name + " has not exactly one tensor of its numbers in hf/");
    }
    truth.push_back({kTiedCopy, "", false});
    return truth;
}

// ---- task 1: the names ----------------------------------------------------------------------------

// "ernie.encoder.layer.#.output.dense.weight": the name with its layer index hidden.
std::string without_index(const std::string& name) {
    std::string out;
    for (size_t i = 0; i < name.size(); i++) {
        if (!std::isdigit((unsigned char)name[i]) || i == 0 || name[i - 1] != '.') {
            out += name[i];
            continue;
        }
        out += '#';
        while (i + 1 < name.size() && std::isdigit((unsigned char)name[i + 1])) i++;
    }
    return out;
}

// Which LayerNorm of block `*block` ("ernie.encoder.layer.N") a name is: 1 after the attention, 2 after
// the feed-forward, 0 neither.
int block_norm(const std::string& name, std::string* block) {
    for (auto [suffix, kind] : {std::pair{".attention.output.LayerNorm.", 1}, {".output.LayerNorm.", 2}}) {
        size_t at = name.find(suffix);
        if (at == std::string::npos) continue;
        *block = name.substr(0, at);
        return kind;
    }
    return 0;
}

// One block's norm1 for its norm2, or the other way.
bool is_norm_pair(const std::string& a, const std::string& b) {
    std::string block_a, block_b;
    int kind_a = block_norm(a, &block_a), kind_b = block_norm(b, &block_b);
    return kind_a && kind_b && kind_a != kind_b && block_a == block_b;
}

// Why your name (or flag) for a tensor differs from the fixture's, as one hint.
std::string name_hint(const Truth& t, const std::string& yours) {
    if (yours == t.model) {
        if (t.transpose) return t.model.find("pooler") != std::string::npos ? kPoolerHint : kNotTransposedHint;
        if (t.model.find("embeddings") != std::string::npos && t.model.find("LayerNorm") == std::string::npos)
            return kTablesHint;
        return "only 2-D Linear weights are transposed: a bias or a LayerNorm is 1-D, and stored alike in both";
    }
    if (t.model.empty())
        return "return \"\" for it: the decoder is tied to the word embeddings, which the file holds already";
    if (is_norm_pair(yours, t.model)) return kNormHint;
    if (yours.find("encoder.layers.") != std::string::npos)
        return "Hugging Face says ernie.encoder.layer.N (singular), PaddleNLP ernie.encoder.layers.N";
    if (without_index(yours) == without_index(t.model)) return kLayerIndexHint;
    return "tests/fixtures/ernie/README.md, \"Name mapping\", pairs each PaddleNLP name with its Hugging Face one";
}

// The first tensor whose name or transpose your to_model_name gets wrong: "" when none, else what differs.
std::string name_problem(const Model& model, std::string* hint) {
    for (const Truth& t : fixture_truth()) {
        bool transpose = false;
        std::string yours = student::to_model_name(t.paddle, &transpose);
        if (yours == t.model && transpose == t.transpose) continue;
        *hint = name_hint(t, yours);
        if (yours != t.model) {
            std::string known = yours.empty() || param_named(model, yours) ? "" : " (the model has no such parameter)";
            return t.paddle + ": yours \"" + yours + "\"" + known + ", expected \"" + t.model + "\"" +
                   (t.model.empty() ? "" : " (hf/model.safetensors holds these numbers under that name)");
        }
        return t.paddle + " -> " + yours + ": yours *transpose = " + (transpose ? "true" : "false") + ", expected " +
               (t.transpose ? "true (hf/ holds its numbers transposed)" : "false (hf/ holds the same numbers)");
    }
    return "";
}

void task_names() {
    std::string hint, differs = name_problem(reference(), &hint);
    if (!differs.empty()) fail(differs, hint);
}

// ---- task 2: the weights ----------------------------------------------------------------------------

// Your load of the Paddle file; a throw of your code comes back as a failure with the likely cause.
Model your_load() {
    Model m = empty_model();
    pt::st::File file = pt::st::read(kModel + "/paddle/model.safetensors");
    try {
        student::load_paddle(m.layers, file);
    } catch (const NotImplemented&) {
        throw;
    } catch (const std::exception& e) {
        std::string hint, names = name_problem(m, &hint);
        fail(std::string("your load_paddle threw: ") + e.what() + (names.empty() ? "" : "\nfirst, task 1: " + names),
             names.empty() ? "read the message: it names the tensor" : hint);
    }
    return m;
}

// Why parameter p holds `mine` instead of the reference's `theirs`: a line to add and one hint.
using Why = std::pair<std::string, std::string>;

Why why_nothing_copied(const pt::ParamInfo& p) {
    std::string line = "nothing was copied into it (the check filled it with NaN)";
    if (p.tied)
        return {line,
                "the Head's cls.predictions.decoder.weight is tied (ParamInfo::tied): copy the word embeddings "
                "into it too"};
    std::string hint, names = name_problem(reference(), &hint);
    if (!names.empty()) return {line + "\nfirst, task 1: " + names, hint};
    return {line,
            "your to_model_name maps a tensor to it (task 1 passes), so your load_paddle skipped it: copy every "
            "tensor whose model name is not \"\""};
}

Why why_transposed(const pt::ParamInfo& p, size_t rows, size_t cols) {
    std::string how = rows == cols ? "element (i, j) of yours is the reference's (j, i)"
                                   : "yours, read as [" + std::to_string(cols) + ", " + std::to_string(rows) +
                                         "], is the reference transposed";
    if (p.name.find("embeddings") != std::string::npos || p.tied) return {how, kTablesHint};
    return {how, p.name.find("pooler") != std::string::npos ? kPoolerHint : kNotTransposedHint};
}

Why why_differs(const pt::ParamInfo& p, const std::vector<float>& mine, const std::vector<float>& theirs) {
    if (std::all_of(mine.begin(), mine.end(), [](float x) { return std::isnan(x); })) return why_nothing_copied(p);
    size_t rows = size_t(p.shape[0]), cols = p.shape.size() == 2 ? size_t(p.shape[1]) : 1;
    if (cols > 1 && mine == transposed(theirs, rows, cols)) return why_transposed(p, rows, cols);
    for (const pt::Layer* other : reference().layers)   // the numbers of another parameter?
        for (const pt::ParamInfo& q : other->params_info) {
            const float* c = other->params.data() + q.offset;
            if (q.numel != p.numel || std::memcmp(mine.data(), c, p.numel * sizeof(float)) != 0) continue;
            std::string hint = is_norm_pair(p.name, q.name)                     ? kNormHint
                               : without_index(p.name) == without_index(q.name) ? kLayerIndexHint
                                                                                : "check what you map to " + p.name;
            return {"yours holds the numbers of " + q.name, hint};
        }
    return {"", "copy the file's numbers as they are (row-major), transposed only where *transpose says"};
}

// The first parameter whose bits differ from the reference's, and why: (what differs, hint), or ("", "").
Why first_weight_problem(const Model& yours) {
    const Model& ref = reference();
    for (size_t l = 0; l < ref.layers.size(); l++)
        for (const pt::ParamInfo& p : ref.layers[l]->params_info) {
            const float* a = yours.layers[l]->params.data() + p.offset;
            const float* b = ref.layers[l]->params.data() + p.offset;
            std::string d = first_difference(a, b, p.numel, p.shape.size() == 2 ? size_t(p.shape[1]) : 1, p.name);
            if (d.empty()) continue;
            auto [line, hint] = why_differs(p, {a, a + p.numel}, {b, b + p.numel});
            return {d + (line.empty() ? "" : "\n" + line), hint};
        }
    return {"", ""};
}

void task_weights() {
    Model m = your_load();
    auto [differs, hint] = first_weight_problem(m);
    if (!differs.empty()) fail(differs, hint);
}

// ---- task 3: the logits ----------------------------------------------------------------------------

// The model's MLM logits (B, T, V) of the fixture's inputs, eval (no dropout).
std::vector<float> logits_of(const Model& m, const pt::Batch& b) {
    pt::MicroBatch mb = b.rows(0, b.B);
    pt::RunOptions eval;
    eval.train = false, eval.all_logits = true;
    std::vector<float> act, next, logits;
    for (pt::Layer* l : m.layers) {
        next.assign(l->out_numel(mb.B, mb.T), 0.0f);
        std::unique_ptr<pt::Stash> s = l->forward(next.data(), act.empty() ? nullptr : act.data(), mb, eval);
        if (auto* head = dynamic_cast<pt::HeadStash*>(s.get())) logits = head->logits.host();
        act.swap(next);
    }
    return logits;
}

// max |yours - reference| / max |reference| over the real tokens (attention_mask 1), the fixture's measure.
double relative_difference(const std::vector<float>& yours, const std::vector<float>& ref, const pt::Batch& b) {
    size_t V = ref.size() / b.attention_mask.size();
    double diff = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (b.attention_mask[i / V] != 1) continue;
        double d = std::fabs(double(yours[i]) - ref[i]);
        if (std::isnan(d)) return NAN;   // a NaN logit: no distance says how far
        diff = std::max(diff, d);
        scale = std::max(scale, std::fabs(double(ref[i])));
    }
    return diff / scale;
}

double your_logits_difference(const Model& m) {
    pt::Batch b = pt::load_inputs(kModel + "/inputs.safetensors", pt::Objective::mlm);
    std::vector<float> expected = pt::st::read(kModel + "/expected.safetensors").to_f32("mlm_logits");
    std::vector<float> yours = logits_of(m, b);
    if (yours.size() != expected.size())
        fail("your model gives no logits of the inputs' shape", "make task 2 pass first");
    return relative_difference(yours, expected, b);
}

void task_logits() {
    Model m = your_load();
    double rel = your_logits_difference(m);
    if (rel <= kBar) return;
    auto [differs, hint] = first_weight_problem(m);
    char line[160];
    std::snprintf(line, sizeof line,
                  "mlm_logits, real tokens: max |yours - reference| / max |reference| = %.3g, above %g", rel, kBar);
    fail(line + (differs.empty() ? "" : "\nthe first weight that differs: " + differs),
         differs.empty() ? "your weights are the reference's bits, so the forward is the lesson's: tell the teacher"
                         : hint);
}

// ---- the deliverable's numbers ----------------------------------------------------------------------
int report() {
    pt::st::File file = pt::st::read(kModel + "/paddle/model.safetensors");
    int mapped = 0, transposes = 0;
    for (const pt::st::TensorInfo& t : file.tensors) {
        bool transpose = false;
        mapped += !student::to_model_name(t.name, &transpose).empty();
        transposes += transpose;
    }
    std::printf(
        "your to_model_name on tests/fixtures/ernie/nano-like/paddle/model.safetensors: %zu tensors, %d "
        "mapped, %d transposed\n",
        file.tensors.size(), mapped, transposes);
    Model m = empty_model();
    student::load_paddle(m.layers, file);
    std::printf(
        "your load_paddle, then the eval forward: mlm_logits over the real tokens, max |yours - reference| / "
        "max |reference| = %.3g (the bar: %g)\n",
        your_logits_difference(m), kBar);
    return 0;
}

}   // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::string(argv[1]) == "--report") {
        try {
            return report();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "lab 10 --report: %s (make the check pass first: scripts/lab.sh check 10)\n",
                         e.what());
            return 1;
        }
    }
    Lab lab{"10", "ERNIE: PaddleNLP names and transposes onto our layers", "labs/10_ernie/load_paddle.cpp", 1, {}};
    lab.tasks.push_back(
        {"to_model_name: every tensor of the nano-like PaddleNLP file gets the model's name and "
         "the right transpose",
         "the same model with Hugging Face names (tests/fixtures/ernie/nano-like/hf): each tensor "
         "found there by its numbers",
         task_names});
    lab.tasks.push_back({"load_paddle: every parameter holds the bits of the Hugging Face file's tensor",
                         "the lesson's loader (pt::load_weights) on nano-like/hf/, no renaming, no transpose",
                         task_weights});
    lab.tasks.push_back({"the fixture's inputs through your loaded model (eval): logits within 1e-4 of the reference",
                         "expected.safetensors, from an independent PyTorch implementation (float64)", task_logits});
    return run(lab, argc, argv);
}
