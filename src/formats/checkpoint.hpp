// src/formats/checkpoint.hpp — model directories: config.json (or PaddleNLP's model_config.json) +
// vocab.txt + weights, as model.safetensors or as shards listed by model.safetensors.index.json.
// The bytes and the files; what the names and tensors mean (Hugging Face and PaddleNLP names, the
// transposes, the checks and the copy into the layers) is src/ernie.hpp.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "src/config.hpp"
#include "src/model.hpp"
#include "src/ernie.hpp"
#include "src/formats/safetensors.hpp"
#include "src/formats/tokenizer.hpp"

namespace pt {

// Writes config.json, vocab.txt and model.safetensors into dir (created if needed), through the
// lifecycle of src/formats/lifecycle.hpp: staged, sealed by a manifest, committed. The tied copy of the
// word embedding is not written (it is tied). format "hf" (Hugging Face names) or "paddle"
// (PaddleNLP names, Linear weights [in, out]; config.json keeps the Hugging Face keys, which
// PaddleNLP's ErnieConfig reads as well).
void save_model_dir(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines,
                    const std::vector<Layer*>& layers, const std::string& format = "hf");
// The pieces of a model directory, each written atomically into an existing (staging) directory:
// config.json and write_vocab_files' (a weights file, the whole model or one shard of it: write_weights, src/ernie.hpp).
void write_model_info(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines);
// dir/vocab.txt and, for Hugging Face's fast tokenizers and transformers.js, tokenizer.json,
// tokenizer_config.json and special_tokens_map.json (src/formats/tokenizer_json.hpp).
void write_vocab_files(const std::string& dir, const std::vector<std::string>& vocab_lines, int model_max_length);
// save_model_dir's files (config, vocabulary, weights) written into an existing (staging) directory, each atomically.
void write_model_files(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines,
                       const std::vector<Layer*>& layers, const std::string& format = "hf");

// ---- a user's checkpoint, checked against the model (moved from src/ernie.hpp) ---------------

// Maps the tensors of `files` (read from `path`) to model names with ernie's name table: the
// convention is decided once from the encoder names; names mixing both are a one-line error.
Checkpoint map_checkpoint(const std::string& path, std::vector<st::File> files);

// Every problem loading `ckpt` into `layers` would hit, in model order: errors first-class,
// warnings (unexpected tensors; errors when strict) and notes (optional parameters kept).
// `partial`: the layers are one pipeline rank's part of the model, so the tensors of the other
// parts are expected, not reported.
struct Problem {
    enum Kind { error, warning, note } kind;
    std::string message;
};
std::vector<Problem> check_checkpoint(const Checkpoint& ckpt, const std::vector<Layer*>& layers, bool strict,
                                      bool partial = false);

// open_checkpoint(dir), check_checkpoint (the first error thrown, warnings and notes on stderr;
// !fresh_ok: a missing optional parameter is an error), then load_weights of src/ernie.hpp copies.
void load_weights(const std::string& dir, const std::vector<Layer*>& layers, bool strict = false, bool fresh_ok = true,
                  bool partial = false);

// Hugging Face's sharded layout, for any set of tensors `base` ("model", "optimizer"):
// dir/BASE.safetensors, else the shards dir/BASE.safetensors.index.json lists, checked against it
// (a missing shard, a tensor in another shard than the index says: a one-line error). Empty when
// neither exists; *source names what was read.
std::vector<st::File> read_tensor_files(const std::string& dir, const std::string& base, std::string* source = nullptr);
// "model-00002-of-00004.safetensors" for k = 1, n = 4 (k counted from 0).
std::string shard_name(const std::string& base, int k, int n);
// dir/BASE.safetensors.index.json for the n shards already in dir, read back for their tensor names.
void write_shard_index(const std::string& dir, const std::string& base, int n);

// dir/config.json, else dir/model_config.json (PaddleNLP), after verify_dir(dir): a sealed
// directory whose files differ from its manifest is refused, naming the file.
ModelConfig load_model_config(const std::string& dir);
// dir/vocab.txt as token lines ([UNK] required). Fewer lines than vocab_size is fine (ERNIE 3.0
// has 39,980 for 40,000 rows); more is an error. Empty if the file does not exist.
std::vector<std::string> load_vocab_lines(const std::string& dir, const ModelConfig& cfg);
// Where a directory's vocabulary is: dir/vocab.txt, else dir/tokenizer.json (a Hugging Face
// repository without vocab.txt), else "" (none).
std::string vocab_file(const std::string& dir);
// The tokenizer of a model directory (vocab_file), at most vocab_size tokens; none is an error.
Tokenizer load_tokenizer(const std::string& dir, const ModelConfig& cfg);

// ---- the pieces, for `pipetrain inspect` and tests -------------------------------------------

// Reads and validates the weight files of dir: a missing shard, a tensor in another shard than
// the index says, or names mixing both conventions (map_checkpoint) is a one-line error.
Checkpoint open_checkpoint(const std::string& dir);
// The same for one .safetensors file.
Checkpoint open_checkpoint_file(const std::string& path);

}  // namespace pt
