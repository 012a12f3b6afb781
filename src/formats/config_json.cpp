#include "src/formats/config_json.hpp"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "src/formats/io.hpp"
#include "src/formats/json.hpp"

namespace pt {

using nlohmann::json;

void check_config(const ModelConfig& c, const std::string& source) {
    // fail() keeps the message one line: hidden_act is quoted as the file holds it, "\n" included.
    auto bad = [&](const std::string& what) { fail(source, what); };
    if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.num_attention_heads <= 0 ||
        c.intermediate_size <= 0 || c.max_position_embeddings <= 0 || c.type_vocab_size <= 0)
        bad("sizes must be positive (vocab_size, hidden_size, num_hidden_layers, num_attention_heads, "
            "intermediate_size, max_position_embeddings, type_vocab_size)");
    // Every table is indexed with 32-bit element counts, and a model of more than 1024 blocks is a
    // typo here, not a model.
    if (c.num_hidden_layers > 1024) bad("num_hidden_layers " + std::to_string(c.num_hidden_layers) + " is above 1024");
    for (auto [key, rows] : {std::pair{"vocab_size", c.vocab_size}, {"max_position_embeddings", c.max_position_embeddings},
                             {"type_vocab_size", c.type_vocab_size}, {"task_type_vocab_size", c.task_type_vocab_size},
                             {"intermediate_size", c.intermediate_size}, {"hidden_size", c.hidden_size}, {"num_labels", c.num_labels}})
        if (int64_t(rows) * c.hidden_size > INT32_MAX)
            bad(std::string(key) + " " + std::to_string(rows) + " × hidden_size " + std::to_string(c.hidden_size) +
                " is more than 2^31 elements");
    if (c.hidden_size % c.num_attention_heads != 0)
        bad("hidden_size " + std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
            std::to_string(c.num_attention_heads));
    if (c.hidden_act != "gelu" && c.hidden_act != "relu")
        bad("hidden_act must be \"gelu\" or \"relu\", got \"" + c.hidden_act + "\"");
    if (c.use_task_id && c.task_type_vocab_size <= 0) bad("use_task_id needs task_type_vocab_size > 0");
    if (c.pad_token_id < 0 || c.pad_token_id >= c.vocab_size) bad("pad_token_id out of range");
    if (!(c.layer_norm_eps > 0)) bad("layer_norm_eps must be > 0");
    if (c.num_labels < 0 || c.num_labels == 1) bad("num_labels must be 0 (no classifier) or at least 2");
    // As --labels: a saved config.json names every label twice (id2label, label2id).
    if (c.num_labels > 1 << 20) bad("num_labels " + std::to_string(c.num_labels) + " is above 1048576");
    for (float p : {c.hidden_dropout_prob, c.attention_probs_dropout_prob})
        if (!(p >= 0 && p < 1)) bad("dropout probabilities must be in [0, 1)");
}

namespace {

// PaddleNLP <= 2.4 wrote model_config.json as the constructor call that built the model:
// {"init_args": [{...ErnieModel's arguments..., "init_class": "ErnieModel"}], "init_class":
// "ErnieForMaskedLM", "num_classes": 2}. Flattens it; an outer key wins over an inner one.
json flatten_init_args(const json& j, const std::string& source) {
    json flat = json::object();
    for (const json* cur = &j; cur && cur->is_object();) {
        for (const auto& [k, v] : cur->items())
            if (k != "init_args" && k != "init_class" && !flat.contains(k)) flat[k] = v;
        if (!cur->contains("init_args")) break;
        const json& args = (*cur)["init_args"];
        if (!args.is_array()) throw std::runtime_error(source + ": \"init_args\" must be a list");
        cur = !args.empty() && args[0].is_object() ? &args[0] : nullptr;
    }
    // Those files hold only the arguments given to ErnieModel(...); the rest are that one
    // class's fixed defaults. Its init_weights set every LayerNorm epsilon to 1e-12, and it
    // had task ids off unless asked.
    const json defaults = {{"hidden_size", 768}, {"num_hidden_layers", 12}, {"num_attention_heads", 12},
                           {"intermediate_size", 3072}, {"hidden_act", "gelu"}, {"max_position_embeddings", 512},
                           {"type_vocab_size", 2}, {"task_type_vocab_size", 3}, {"use_task_id", false},
                           {"layer_norm_eps", 1e-12}};
    for (const auto& [k, v] : defaults.items())
        if (!flat.contains(k)) flat[k] = v;
    return flat;
}

}  // namespace

// Keys are Hugging Face's; PaddleNLP's config.json uses the same names. Defaults, and why:
// - shape keys (sizes, hidden_act) are required, as before;
// - use_task_id is required: Hugging Face defaults it to false, PaddleNLP's ErnieConfig to true;
// - layer_norm_eps defaults to 1e-12: both ErnieConfig classes (and old PaddleNLP) use 1e-12;
// - dropouts default to 0.1 and pad_token_id to 0, equal in both;
// - num_labels: "num_labels", else Paddle's "num_classes", else for an
//   *ForSequenceClassification architecture the size of "id2label" (absent means 2: Hugging
//   Face omits it when it equals the default), else 0 (no classifier).
namespace {
// "architectures": ["ErnieForSequenceClassification"]: a classifier, even without num_labels.
bool names_a_classifier(const json& j) {
    bool classifier = false;
    if (j.contains("architectures") && j["architectures"].is_array())
        for (const json& a : j["architectures"])
            classifier |= a.is_string() && a.get<std::string>().find("ForSequenceClassification") != std::string::npos;
    return classifier;
}

// What pipetrain computes: ERNIE's (BERT's) encoder with absolute positions, a single-label head.
// Another architecture with BERT's keys (RoBERTa counts positions from 2, GPT-2 is pre-norm), or a
// multi-label problem, loaded as ERNIE gave other outputs, silently.
void check_architecture(const json& j, const std::string& source) {
    if (j.contains("position_embedding_type") && j["position_embedding_type"] != "absolute")
        throw std::runtime_error(source + ": position_embedding_type must be \"absolute\"");
    if (j.contains("model_type") && j["model_type"] != "ernie" && j["model_type"] != "bert")
        throw std::runtime_error(source + ": \"model_type\": " + j["model_type"].dump() + ": pipetrain reads ERNIE and BERT models");
    if (j.contains("problem_type") && !j["problem_type"].is_null() && j["problem_type"] != "single_label_classification")
        throw std::runtime_error(source + ": \"problem_type\": " + j["problem_type"].dump() +
                                 ": pipetrain's classifier is single-label (a softmax over the labels)");
}
}  // namespace

ModelConfig config_from_json(json j, const std::string& source) {
    if (!j.is_object()) throw std::runtime_error(source + ": not a JSON object");
    if (j.contains("init_args")) j = flatten_init_args(j, source);
    ModelConfig c;
    auto get_int = [&](const char* key, int& out, bool required) {
        if (!j.contains(key)) {
            if (required) throw std::runtime_error(source + ": missing key \"" + key + "\"");
            return;
        }
        const json& v = j[key];
        if (!v.is_number_integer()) throw std::runtime_error(source + ": \"" + key + "\" must be an integer");
        if (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX : v.get<int64_t>() < INT32_MIN)
            throw std::runtime_error(source + ": \"" + key + "\" " + v.dump() + " is out of range");
        out = v.get<int>();
    };
    auto get_float = [&](const char* key, float& out) {
        if (!j.contains(key)) return;
        if (!j[key].is_number()) throw std::runtime_error(source + ": \"" + key + "\" must be a number");
        // Beyond FLT_MAX the conversion is undefined (in practice inf, which check() would pass and
        // config_to_json() would save as null).
        const double v = j[key].get<double>();
        if (!(std::fabs(v) <= FLT_MAX))
            throw std::runtime_error(source + ": \"" + key + "\" " + j[key].dump() + " is out of range for float32");
        out = float(v);
    };
    get_int("vocab_size", c.vocab_size, true);
    get_int("hidden_size", c.hidden_size, true);
    get_int("num_hidden_layers", c.num_hidden_layers, true);
    get_int("num_attention_heads", c.num_attention_heads, true);
    get_int("intermediate_size", c.intermediate_size, true);
    get_int("max_position_embeddings", c.max_position_embeddings, true);
    get_int("type_vocab_size", c.type_vocab_size, true);
    get_int("pad_token_id", c.pad_token_id, false);
    if (!j.contains("hidden_act") || !j["hidden_act"].is_string())
        throw std::runtime_error(source + ": missing key \"hidden_act\" (string)");
    c.hidden_act = j["hidden_act"].get<std::string>();
    if (!j.contains("use_task_id"))
        throw std::runtime_error(source + ": missing key \"use_task_id\" (Hugging Face defaults it to false, "
                                 "PaddleNLP to true: write it out)");
    if (!j["use_task_id"].is_boolean()) throw std::runtime_error(source + ": \"use_task_id\" must be true/false");
    c.use_task_id = j["use_task_id"].get<bool>();
    get_int("task_type_vocab_size", c.task_type_vocab_size, c.use_task_id);
    get_float("layer_norm_eps", c.layer_norm_eps);
    get_float("hidden_dropout_prob", c.hidden_dropout_prob);
    get_float("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
    if (j.contains("is_decoder")) {
        if (!j["is_decoder"].is_boolean()) throw std::runtime_error(source + ": \"is_decoder\" must be true/false");
        c.is_decoder = j["is_decoder"].get<bool>();
    }
    check_architecture(j, source);
    if (j.contains("num_labels")) get_int("num_labels", c.num_labels, true);
    else if (j.contains("num_classes")) get_int("num_classes", c.num_labels, true);
    else if (names_a_classifier(j)) c.num_labels = j.contains("id2label") ? int(j["id2label"].size()) : 2;
    check_config(c, source);
    return c;
}

namespace {
// The shortest decimal that reads back as f: 1e-05 is written "1e-05", not 9.999999747378752e-06.
double shortest(float f) {
    char buf[32];
    for (int digits = 1; digits < 9; digits++) {
        std::snprintf(buf, sizeof buf, "%.*g", digits, double(f));
        if (std::strtof(buf, nullptr) == f) break;
    }
    return std::strtod(buf, nullptr);
}
}  // namespace

std::string config_to_json(const ModelConfig& c) {
    const char* arch = c.num_labels > 0 ? "ErnieForSequenceClassification" : c.is_decoder ? "ErnieForCausalLM" : "ErnieForMaskedLM";
    json j = {{"architectures", {arch}}, {"is_decoder", c.is_decoder},
              {"model_type", "ernie"}, {"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
              {"num_hidden_layers", c.num_hidden_layers}, {"num_attention_heads", c.num_attention_heads},
              {"intermediate_size", c.intermediate_size}, {"hidden_act", c.hidden_act},
              {"max_position_embeddings", c.max_position_embeddings}, {"type_vocab_size", c.type_vocab_size},
              {"task_type_vocab_size", c.task_type_vocab_size}, {"use_task_id", c.use_task_id},
              {"layer_norm_eps", shortest(c.layer_norm_eps)}, {"pad_token_id", c.pad_token_id},
              {"hidden_dropout_prob", shortest(c.hidden_dropout_prob)}, {"attention_probs_dropout_prob", shortest(c.attention_probs_dropout_prob)},
              {"initializer_range", 0.02}, {"position_embedding_type", "absolute"}};
    for (int i = 0; i < c.num_labels; i++) {
        j["id2label"][std::to_string(i)] = "LABEL_" + std::to_string(i);
        j["label2id"]["LABEL_" + std::to_string(i)] = i;
    }
    return j.dump(2) + "\n";
}


ModelConfig config_from_json_string(const std::string& text, const std::string& source) {
    return config_from_json(parse_json(text, source), source);   // NaN, which Python's json.dump writes, is not JSON
}

ModelConfig config_from_json_file(const std::string& path) { return config_from_json_string(read_file(path), path); }

}  // namespace pt
