#include "src/formats/checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "src/formats/io.hpp"
#include "src/formats/json.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/formats/tokenizer_json.hpp"
#include "src/formats/config_json.hpp"

namespace pt {

namespace fs = std::filesystem;
using nlohmann::json;


// ---- the checks of a user's checkpoint (moved from src/ernie.cpp) --------------------------

namespace {

// Name fragments only one convention uses. A checkpoint is Paddle if it has any of the first.
const char* const kPaddleMarks[] = {"encoder.layers.", ".self_attn.", "embeddings.layer_norm.",
                                    "cls.predictions.layer_norm.", "cls.predictions.decoder_bias"};
const char* const kHfMarks[] = {"encoder.layer.", ".attention.self.", "embeddings.LayerNorm.",
                                "cls.predictions.transform.dense.", "cls.predictions.transform.LayerNorm."};


std::vector<int64_t> reversed(std::vector<int64_t> v) {
    std::reverse(v.begin(), v.end());
    return v;
}

bool is_float(const std::string& dtype) {
    return dtype == "F32" || dtype == "F64" || dtype == "F16" || dtype == "BF16";
}

std::string join(const std::vector<std::string>& names, size_t max_names) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < max_names; i++) s += (i ? ", " : "") + names[i];
    if (names.size() > max_names) s += ", ... (" + std::to_string(names.size()) + " in all)";
    return s;
}

// The part of the model a parameter name belongs to: 0 the embedding, 1 + N block N, -1 the head
// (pooler, MLM head, classifier). Enough to tell a tensor of another rank's layers from a stray one.
int part_of(const std::string& model_name) {
    const std::string block = "ernie.encoder.layer.";
    if (model_name.rfind("ernie.embeddings.", 0) == 0) return 0;
    if (model_name.rfind(block, 0) == 0) return 1 + std::atoi(model_name.c_str() + block.size());
    return -1;
}

// The file's tensors no parameter of `layers` takes (with `parts`, only those of these parts).
void unexpected_tensors(std::vector<Problem>& out, const Checkpoint& c, const std::set<std::string>& used,
                        const std::set<int>* parts, bool strict, bool has_embedding) {
    bool paddle = c.convention == "paddle";
    std::vector<std::string> unexpected;
    for (const st::File& f : c.files)
        for (const st::TensorInfo& t : f.tensors) {
            bool transpose = false;
            std::string m = to_model_name(t.name, paddle, &transpose);
            if (m.empty() || used.count(m) || (parts && !parts->count(part_of(m)))) continue;
            // Not a mere leftover: ignoring a task embedding changes every output.
            if (has_embedding && m == "ernie.embeddings.task_type_embeddings.weight")
                out.push_back({Problem::error, f.path + ": holds " + t.name + " but the config has use_task_id false (it would be ignored)"});
            else unexpected.push_back(t.name);
        }
    if (!unexpected.empty())
        out.push_back({strict ? Problem::error : Problem::warning,
                       c.path + ": unexpected tensors, not used by the model: " + join(unexpected, 8)});
}

}  // namespace

Checkpoint map_checkpoint(const std::string& path, std::vector<st::File> files) {
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
    unexpected_tensors(out, c, used, partial ? &parts : nullptr, strict, has_embedding);
    if (!kept.empty())
        out.push_back({Problem::note, c.path + ": no " + join(kept, 8) + "; keeping their initial values"});
    return out;
}


// check_checkpoint's problems: the first error thrown (with a count of the others), warnings and
// notes on stderr. !fresh_ok: a missing optional parameter is an error (an evaluation needs the head).
static void report_problems(const Checkpoint& c, const std::vector<Layer*>& layers, bool strict, bool fresh_ok, bool partial) {
    std::vector<Problem> problems = check_checkpoint(c, layers, strict, partial);
    for (Problem& p : problems)
        if (p.kind == Problem::note && !fresh_ok)
            p = {Problem::error, p.message.substr(0, p.message.find("; keeping")) +
                                     ": an evaluation of freshly initialised weights would mean nothing"};
    size_t errors = 0;
    for (const Problem& p : problems) errors += p.kind == Problem::error;
    const std::string dir = std::filesystem::path(c.path).parent_path().string();   // c.path: a file in it
    for (const Problem& p : problems)
        if (p.kind == Problem::error)
            throw std::runtime_error(p.message + (errors > 1 ? " (and " + std::to_string(errors - 1) +
                                                                   " more problems: pipetrain inspect " + dir + ")"
                                                             : ""));
    for (const Problem& p : problems)
        std::cerr << (p.kind == Problem::warning ? "warning: " : "note: ") << p.message << "\n";
}

Checkpoint open_checkpoint_file(const std::string& path) { return map_checkpoint(path, {st::read(path)}); }

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
        check_inside(dir, shard);
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
    return map_checkpoint(source, std::move(files));
}

void load_weights(const std::string& dir, const std::vector<Layer*>& layers, bool strict, bool fresh_ok, bool partial) {
    Checkpoint c = open_checkpoint(dir);
    report_problems(c, layers, strict, fresh_ok, partial);
    load_weights(c, layers);
}

void write_vocab_files(const std::string& dir, const std::vector<std::string>& vocab_lines, int model_max_length) {
    std::string vocab;
    for (const std::string& tok : vocab_lines) vocab += tok + "\n";
    write_file_atomic(dir + "/vocab.txt", vocab);
    // The same vocabulary for Hugging Face's fast tokenizers and transformers.js.
    TokenizerFiles t = tokenizer_files(vocab_lines, model_max_length);
    write_file_atomic(dir + "/tokenizer.json", t.tokenizer_json);
    write_file_atomic(dir + "/tokenizer_config.json", t.tokenizer_config_json);
    write_file_atomic(dir + "/special_tokens_map.json", t.special_tokens_map_json);
}

void write_model_info(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines) {
    write_file_atomic(dir + "/config.json", config_to_json(cfg));
    write_vocab_files(dir, vocab_lines, cfg.max_position_embeddings);
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

std::string vocab_file(const std::string& dir) {
    for (const char* name : {"/vocab.txt", "/tokenizer.json"})
        if (fs::exists(dir + name)) return dir + name;
    return "";
}

namespace {
std::vector<std::string> token_lines(const Tokenizer& tok) {   // token i on line i, as vocab.txt
    std::vector<std::string> lines;
    for (size_t i = 0; i < tok.size(); i++) lines.push_back(tok.token(int32_t(i)));
    return lines;
}

// The tokenizer in `path` (vocab.txt, or tokenizer.json), at most vocab_size tokens; dir's other
// tokenizer files must agree with it.
Tokenizer read_vocab(const std::string& dir, const std::string& path, const ModelConfig& cfg) {
    const bool json = path.size() > 15 && path.compare(path.size() - 15, 15, "/tokenizer.json") == 0;
    Tokenizer tok = json ? Tokenizer(vocab_from_tokenizer_json(path), path) : Tokenizer::from_file(path);
    check_tokenizer_files(dir, token_lines(tok), path);
    if (tok.size() > size_t(cfg.vocab_size))
        fail(path, std::to_string(tok.size()) + " tokens but the model's vocab_size is " +
                       std::to_string(cfg.vocab_size) + " (more tokens than embedding rows)");
    return tok;
}
}  // namespace

std::vector<std::string> load_vocab_lines(const std::string& dir, const ModelConfig& cfg) {
    std::string path = vocab_file(dir);
    if (path.empty()) return {};
    return token_lines(read_vocab(dir, path, cfg));
}

Tokenizer load_tokenizer(const std::string& dir, const ModelConfig& cfg) {
    std::string path = vocab_file(dir);
    if (path.empty()) fail(dir + "/vocab.txt", "missing (and no tokenizer.json): text cannot be tokenized for this model");
    return read_vocab(dir, path, cfg);
}

}  // namespace pt
