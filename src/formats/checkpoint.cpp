#include "src/formats/checkpoint.hpp"

#include <cstdio>
#include <filesystem>
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
    load_weights(open_checkpoint(dir), layers, strict, fresh_ok, partial);
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
