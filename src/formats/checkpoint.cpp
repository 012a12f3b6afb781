#include "src/formats/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "src/formats/io.hpp"
#include "src/formats/json.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/formats/config_json.hpp"

namespace pt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kWordEmbedding = "ernie.embeddings.word_embeddings.weight";

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// Hugging Face ↔ PaddleNLP renames, as name prefixes. `linear`: a Linear layer, whose weight
// PaddleNLP stores as [in, out].
struct Rename {
    const char* hf;
    const char* paddle;
    bool linear;
};
// After "ernie.encoder.layer.N." (HF) / "ernie.encoder.layers.N." (Paddle).
const Rename kLayerRenames[] = {
    {"attention.self.query.", "self_attn.q_proj.", true},   {"attention.self.key.", "self_attn.k_proj.", true},
    {"attention.self.value.", "self_attn.v_proj.", true},   {"attention.output.dense.", "self_attn.out_proj.", true},
    {"attention.output.LayerNorm.", "norm1.", false},       {"intermediate.dense.", "linear1.", true},
    {"output.dense.", "linear2.", true},                    {"output.LayerNorm.", "norm2.", false},
};
const Rename kTopRenames[] = {
    {"ernie.embeddings.LayerNorm.", "ernie.embeddings.layer_norm.", false},
    {"ernie.pooler.dense.", "ernie.pooler.dense.", true},   // same name, different layout: the pitfall
    {"cls.predictions.transform.dense.", "cls.predictions.transform.", true},
    {"cls.predictions.transform.LayerNorm.", "cls.predictions.layer_norm.", false},
    {"cls.predictions.bias", "cls.predictions.decoder_bias", false},
    {"classifier.", "classifier.", true},
};

// `transpose`: the tensor is a Linear weight, stored [in, out] by PaddleNLP.
std::string rename(const std::string& name, bool to_hf, bool* transpose) {
    *transpose = false;
    const std::string from_layer = to_hf ? "ernie.encoder.layers." : "ernie.encoder.layer.";
    const std::string to_layer = to_hf ? "ernie.encoder.layer." : "ernie.encoder.layers.";
    std::string head, rest = name;
    const Rename* rules = kTopRenames;
    size_t n = std::size(kTopRenames);
    if (starts_with(name, from_layer)) {
        size_t dot = name.find('.', from_layer.size());
        if (dot == std::string::npos) return name;
        head = to_layer + name.substr(from_layer.size(), dot + 1 - from_layer.size());
        rest = name.substr(dot + 1);
        rules = kLayerRenames, n = std::size(kLayerRenames);
    }
    for (size_t i = 0; i < n; i++) {
        const char* from = to_hf ? rules[i].paddle : rules[i].hf;
        if (starts_with(rest, from)) {
            *transpose = rules[i].linear && ends_with(rest, ".weight");
            return head + (to_hf ? rules[i].hf : rules[i].paddle) + rest.substr(std::strlen(from));
        }
    }
    return head + rest;   // unknown: kept, and reported as unexpected if the model has no such name
}

// Name fragments only one convention uses. A checkpoint is Paddle if it has any of the first.
const char* const kPaddleMarks[] = {"encoder.layers.", ".self_attn.", "embeddings.layer_norm.",
                                    "cls.predictions.layer_norm.", "cls.predictions.decoder_bias"};
const char* const kHfMarks[] = {"encoder.layer.", ".attention.self.", "embeddings.LayerNorm.",
                                "cls.predictions.transform.dense.", "cls.predictions.transform.LayerNorm."};

Checkpoint index_tensors(const std::string& path, std::vector<st::File> files) {
    Checkpoint c;
    c.path = path;
    c.files = std::move(files);
    std::string hf, paddle;   // the first name of each convention
    for (const st::File& f : c.files)
        for (const st::TensorInfo& t : f.tensors) {
            for (const char* m : kHfMarks)
                if (hf.empty() && t.name.find(m) != std::string::npos) hf = t.name;
            for (const char* m : kPaddleMarks)
                if (paddle.empty() && t.name.find(m) != std::string::npos) paddle = t.name;
        }
    if (!hf.empty() && !paddle.empty())
        fail(path, "mixes Hugging Face names (" + hf + ") and PaddleNLP names (" + paddle +
                       "); a checkpoint must use one convention");
    c.convention = paddle.empty() ? "hf" : "paddle";
    for (size_t i = 0; i < c.files.size(); i++)
        for (const st::TensorInfo& t : c.files[i].tensors) {
            bool transpose = false;
            std::string m = to_model_name(t.name, !paddle.empty(), &transpose);
            if (!m.empty()) c.by_model_name[m].push_back({int(i), t.name, transpose});
        }
    return c;
}

std::vector<int64_t> reversed(std::vector<int64_t> v) {
    std::reverse(v.begin(), v.end());
    return v;
}

bool is_float(const std::string& dtype) {
    return dtype == "F32" || dtype == "F64" || dtype == "F16" || dtype == "BF16";
}

// (rows, cols) → (cols, rows): a Linear weight between PaddleNLP's [in, out] and our [out, in].
std::vector<float> transposed(const float* x, size_t rows, size_t cols) {
    std::vector<float> out(rows * cols);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) out[c * rows + r] = x[r * cols + c];
    return out;
}

// A source tensor as float32 in the model's layout ([out, in] for Linear weights).
std::vector<float> read_source(const Checkpoint& c, const Checkpoint::Source& s) {
    const st::File& f = c.files[s.file];
    std::vector<float> v = f.to_f32(s.name);
    if (!s.transpose) return v;
    const std::vector<int64_t>& shape = f.find(s.name)->shape;   // [in, out], checked to be 2-D
    return transposed(v.data(), size_t(shape[0]), size_t(shape[1]));
}

std::string join(const std::vector<std::string>& names, size_t max_names) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < max_names; i++) s += (i ? ", " : "") + names[i];
    if (names.size() > max_names) s += ", ... (" + std::to_string(names.size()) + " in all)";
    return s;
}

}  // namespace

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string to_model_name(const std::string& file_name, bool paddle, bool* transpose) {
    *transpose = false;
    if (ends_with(file_name, "position_ids")) return "";   // a buffer (0..max_pos-1), not a parameter
    std::string n = file_name;
    for (const char* bare : {"embeddings.", "encoder.", "pooler."})   // a bare ErnieModel's state dict
        if (starts_with(n, bare)) n = "ernie." + n;
    if (ends_with(n, ".gamma")) n = n.substr(0, n.size() - 6) + ".weight";   // old LayerNorm names
    if (ends_with(n, ".beta")) n = n.substr(0, n.size() - 5) + ".bias";
    // The decoder is tied to the word embedding: a stored copy is an alias that must equal it.
    if (n == "cls.predictions.decoder.weight" || n == "cls.predictions.decoder_weight") return kWordEmbedding;
    if (n == "cls.predictions.decoder.bias") return "cls.predictions.bias";
    return paddle ? rename(n, true, transpose) : n;
}

std::string to_file_name(const std::string& model_name, bool paddle, bool* transpose) {
    *transpose = false;
    return paddle ? rename(model_name, false, transpose) : model_name;
}

Checkpoint open_checkpoint_file(const std::string& path) { return index_tensors(path, {st::read(path)}); }

std::vector<st::File> read_tensor_files(const std::string& dir, const std::string& base, std::string* source) {
    std::string single = dir + "/" + base + ".safetensors", index = single + ".index.json";
    if (fs::exists(single)) {
        if (source) *source = single;
        return {st::read(single)};
    }
    if (!fs::exists(index)) return {};
    if (source) *source = index;
    // Hugging Face's sharded layout: {"metadata": {...}, "weight_map": {tensor: shard file}}.
    json j = parse_json(read_file(index), index);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() ||
        j["weight_map"].empty())
        fail(index, "expected a JSON object with a non-empty \"weight_map\": {tensor: shard file}");
    std::map<std::string, std::string> where;   // tensor -> shard
    std::map<std::string, st::File> shards;     // shard -> its file, in name order
    for (const auto& [name, v] : j["weight_map"].items()) {
        if (!v.is_string()) fail(index, "weight_map[\"" + name + "\"] must be a file name");
        std::string shard = v.get<std::string>();
        if (shard.empty() || shard == "." || shard == ".." || shard.find_first_of("/\\") != std::string::npos)
            fail(index, "shard \"" + shard + "\" of " + name + " must be a file name in the same directory");
        where[name] = shard;
        shards.emplace(shard, st::File{});
    }
    for (auto& [shard, f] : shards) {
        std::string path = dir + "/" + shard;
        if (!fs::exists(path)) fail(index, "shard " + shard + " not found in " + dir);
        f = st::read(path);
    }
    for (const auto& [shard, f] : shards)
        for (const st::TensorInfo& t : f.tensors) {
            auto it = where.find(t.name);
            if (it == where.end()) fail(f.path, "holds tensor " + t.name + ", which " + index + " does not list");
            if (it->second != shard)
                fail(f.path, "holds tensor " + t.name + ", but " + index + " puts it in " + it->second);
        }
    for (const auto& [name, shard] : where)
        if (!shards.at(shard).find(name))
            fail(index, "lists tensor " + name + " in " + shard + ", which does not hold it");
    std::vector<st::File> files;
    for (auto& [shard, f] : shards) files.push_back(std::move(f));
    return files;
}

std::string shard_name(const std::string& base, int k, int n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "-%05d-of-%05d.safetensors", k + 1, n);
    return base + buf;
}

void write_shard_index(const std::string& dir, const std::string& base, int n) {
    json map = json::object();
    uint64_t total = 0;
    for (int k = 0; k < n; k++) {
        st::File f = st::read(dir + "/" + shard_name(base, k, n));
        for (const st::TensorInfo& t : f.tensors) {
            map[t.name] = shard_name(base, k, n);
            total += t.end - t.begin;
        }
    }
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    write_file_atomic(dir + "/" + base + ".safetensors.index.json", index.dump(2) + "\n");
}

Checkpoint open_checkpoint(const std::string& dir) {
    if (!fs::is_directory(dir)) fail(dir, "not a model directory");
    std::string source;
    std::vector<st::File> files = read_tensor_files(dir, "model", &source);
    if (files.empty())
        fail(dir, std::string("no model.safetensors or model.safetensors.index.json") +
                      (fs::exists(dir + "/model_state.pdparams")
                           ? " (model_state.pdparams: convert it with scripts/convert_checkpoint.py)"
                           : ""));
    return index_tensors(source, std::move(files));
}

namespace {
// The part of the model a parameter name belongs to: 0 the embedding, 1 + N block N, -1 the head
// (pooler, MLM head, classifier). Enough to tell a tensor of another rank's layers from a stray one.
int part_of(const std::string& model_name) {
    const std::string block = "ernie.encoder.layer.";
    if (model_name.rfind("ernie.embeddings.", 0) == 0) return 0;
    if (model_name.rfind(block, 0) == 0) return 1 + std::atoi(model_name.c_str() + block.size());
    return -1;
}
}  // namespace

std::vector<Problem> check_checkpoint(const Checkpoint& c, const std::vector<Layer*>& layers, bool strict, bool partial) {
    std::vector<Problem> out;
    std::set<int> parts;   // with `partial`, only tensors of these parts can be unexpected
    for (const Layer* l : layers)
        for (const ParamInfo& p : l->params_info) parts.insert(part_of(p.name));
    auto error = [&](const std::string& msg) { out.push_back({Problem::error, msg}); };
    bool paddle = c.convention == "paddle", has_embedding = false;
    std::set<std::string> used;
    std::vector<std::string> kept;
    for (const Layer* l : layers)
        for (const ParamInfo& p : l->params_info) {
            std::string m = p.tied ? kWordEmbedding : p.name;
            has_embedding |= p.name == kWordEmbedding;
            if (!used.insert(m).second) continue;   // the tied copy: checked with the word embedding
            bool transpose = false;
            std::string file_name = to_file_name(m, paddle, &transpose);
            auto it = c.by_model_name.find(m);
            if (it == c.by_model_name.end()) {
                if (p.optional) kept.push_back(file_name);
                else error(c.path + ": missing tensor " + file_name + " (expected shape " +
                           shape_str(transpose ? reversed(p.shape) : p.shape) + ")");
                continue;
            }
            const std::vector<Checkpoint::Source>& sources = it->second;
            size_t errors = out.size();
            for (const Checkpoint::Source& s : sources) {
                const st::File& f = c.files[s.file];
                const st::TensorInfo& t = *f.find(s.name);
                std::vector<int64_t> want = s.transpose ? reversed(p.shape) : p.shape;
                if (!is_float(t.dtype))
                    error(f.path + ": tensor " + s.name + " has dtype " + t.dtype + ", expected F32 (F64, F16, BF16)");
                else if (t.shape != want)
                    error(f.path + ": tensor " + s.name + " has shape " + shape_str(t.shape) + ", expected " +
                          shape_str(want) + (s.transpose ? " (PaddleNLP [in, out] layout)" : ""));
            }
            if (out.size() > errors || sources.size() < 2) continue;
            // Aliases (a stored decoder, weight and gamma side by side) must hold the same numbers.
            std::vector<float> first = read_source(c, sources[0]);
            for (size_t k = 1; k < sources.size(); k++)
                if (read_source(c, sources[k]) != first)
                    error(c.files[sources[k].file].path + ": " + sources[k].name + " differs from " + sources[0].name +
                          ", though both are " + m + (m == kWordEmbedding ? " (the decoder is tied to it)" : ""));
        }
    std::vector<std::string> unexpected;
    for (const st::File& f : c.files)
        for (const st::TensorInfo& t : f.tensors) {
            bool transpose = false;
            std::string m = to_model_name(t.name, paddle, &transpose);
            if (m.empty() || used.count(m) || (partial && !parts.count(part_of(m)))) continue;
            // Not a mere leftover: ignoring a task embedding changes every output.
            if (has_embedding && m == "ernie.embeddings.task_type_embeddings.weight")
                error(f.path + ": holds " + t.name + " but the config has use_task_id false (it would be ignored)");
            else unexpected.push_back(t.name);
        }
    if (!unexpected.empty())
        out.push_back({strict ? Problem::error : Problem::warning,
                       c.path + ": unexpected tensors, not used by the model: " + join(unexpected, 8)});
    if (!kept.empty())
        out.push_back({Problem::note, c.path + ": no " + join(kept, 8) + "; keeping their initial values"});
    return out;
}

void load_weights(const std::string& dir, const std::vector<Layer*>& layers, bool strict, bool fresh_ok, bool partial) {
    Checkpoint c = open_checkpoint(dir);
    std::vector<Problem> problems = check_checkpoint(c, layers, strict, partial);
    for (Problem& p : problems)
        if (p.kind == Problem::note && !fresh_ok)
            p = {Problem::error, p.message.substr(0, p.message.find("; keeping")) +
                                     ": an evaluation of freshly initialised weights would mean nothing"};
    size_t errors = 0;
    for (const Problem& p : problems) errors += p.kind == Problem::error;
    for (const Problem& p : problems)
        if (p.kind == Problem::error)
            throw std::runtime_error(p.message + (errors > 1 ? " (and " + std::to_string(errors - 1) +
                                                                   " more problems: pipetrain inspect " + dir + ")"
                                                             : ""));
    for (const Problem& p : problems)
        std::cerr << (p.kind == Problem::warning ? "warning: " : "note: ") << p.message << "\n";
    for (Layer* l : layers)
        for (const ParamInfo& p : l->params_info) {
            auto it = c.by_model_name.find(p.tied ? kWordEmbedding : p.name);
            if (it == c.by_model_name.end()) continue;   // optional: keeps its initial values
            std::vector<float> v = read_source(c, it->second[0]);
            for (float x : v)   // would surface as a "diverged" training or a NaN loss, far from here
                if (!std::isfinite(x)) fail(c.path, it->second[0].name + " holds NaN or infinite values");
            std::copy(v.begin(), v.end(), l->params.begin() + long(p.offset));
        }
}

void write_weights(const std::string& path, const std::vector<Layer*>& layers, const std::string& format) {
    if (format != "hf" && format != "paddle")
        throw std::runtime_error("--format: expected hf or paddle, got \"" + format + "\"");
    bool paddle = format == "paddle";
    st::Writer w;
    w.metadata["format"] = paddle ? "np" : "pt";   // what PaddleNLP's and transformers' writers put there
    for (const Layer* l : layers)
        for (const ParamInfo& p : l->params_info) {
            if (p.tied) continue;
            bool transpose = false;
            std::string name = to_file_name(p.name, paddle, &transpose);
            const float* src = l->params.data() + p.offset;
            if (transpose) w.add_f32(name, reversed(p.shape), transposed(src, size_t(p.shape[0]), size_t(p.shape[1])).data());
            else w.add_f32(name, p.shape, src);
        }
    w.write(path);
}

void write_model_info(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines) {
    std::string vocab;
    for (const std::string& tok : vocab_lines) vocab += tok + "\n";
    write_file_atomic(dir + "/config.json", config_to_json(cfg));
    write_file_atomic(dir + "/vocab.txt", vocab);
}

void write_model_files(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines,
                       const std::vector<Layer*>& layers, const std::string& format) {
    if (format != "hf" && format != "paddle")
        throw std::runtime_error("--format: expected hf or paddle, got \"" + format + "\"");
    write_model_info(dir, cfg, vocab_lines);
    write_weights(dir + "/model.safetensors", layers, format);
}

void save_model_dir(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines,
                    const std::vector<Layer*>& layers, const std::string& format) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail(dir, "cannot create directory (" + ec.message() + ")");
    // Staged in dir/.saving and committed with its manifest (lifecycle.hpp): a kill at any moment
    // leaves the previous model whole, or a directory that is refused until the move is finished.
    write_model_files(stage_files(dir), cfg, vocab_lines, layers, format);
    commit_files(dir);
}

ModelConfig load_model_config(const std::string& dir) {
    if (!fs::is_directory(dir)) fail(dir, "not a model directory");
    verify_dir(dir);   // the first read of every model directory: a sealed one is checked whole here
    for (const char* name : {"config.json", "model_config.json"}) {
        std::string path = dir + "/" + name;
        if (!fs::exists(path)) continue;
        ModelConfig c = config_from_json_file(path);
        // The tensors every checkpoint of this shape holds, at 2 bytes (bf16) or more each, must
        // about fit in its weight files: a wrong size would otherwise allocate gigabytes before the
        // first tensor is checked (or the OOM killer ends the process). Within 64 MiB, the load
        // itself names the tensor that is wrong.
        uintmax_t bytes = 0;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir, ec)) {
            std::string f = e.path().filename().string();
            if (f.size() > 12 && f.compare(f.size() - 12, 12, ".safetensors") == 0 && f.rfind("optimizer", 0) != 0)
                bytes += e.file_size(ec);
        }
        double C = c.hidden_size, I = c.intermediate_size;
        double least = 2 * ((double(c.vocab_size) + c.max_position_embeddings + c.type_vocab_size) * C +
                            c.num_hidden_layers * (4 * C * C + 2 * C * I));
        if (bytes > 0 && least > double(bytes) + double(64 << 20))
            fail(path, "its sizes need at least " + std::to_string(uintmax_t(least)) + " bytes of weights, the "
                       ".safetensors files in " + dir + " hold " + std::to_string(bytes) +
                       " (check vocab_size, hidden_size, intermediate_size, num_hidden_layers, max_position_embeddings)");
        return c;
    }
    fail(dir, "no config.json (or PaddleNLP model_config.json)");
}

std::vector<std::string> load_vocab_lines(const std::string& dir, const ModelConfig& cfg) {
    std::string path = dir + "/vocab.txt";
    if (!fs::exists(path)) return {};
    Tokenizer tok = Tokenizer::from_file(path);
    if (tok.size() > size_t(cfg.vocab_size))
        fail(path, std::to_string(tok.size()) + " tokens but the model's vocab_size is " +
                       std::to_string(cfg.vocab_size) + " (more tokens than embedding rows)");
    std::vector<std::string> lines;
    for (size_t i = 0; i < tok.size(); i++) lines.push_back(tok.token(int32_t(i)));
    return lines;
}

}  // namespace pt
