// src/formats/checkpoint.hpp — model directories: config.json (or PaddleNLP's model_config.json) +
// vocab.txt + weights, as model.safetensors or as shards listed by model.safetensors.index.json.
//
// Two naming conventions are read and written (the model itself uses Hugging Face names):
//   hf     ErnieForMaskedLM names, Linear weights [out, in], LayerNorm weight/bias or gamma/beta;
//   paddle PaddleNLP names (encoder.layers.N.self_attn.q_proj, linear1, norm1, ...), every Linear
//          weight [in, out] — transposed on load and on save.
// The convention is decided once per checkpoint from its encoder names, never per tensor:
// ernie.pooler.dense.weight has the same name and a square shape in both.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "src/config.hpp"
#include "src/model.hpp"
#include "src/formats/safetensors.hpp"

namespace pt {

// Writes config.json, vocab.txt and model.safetensors into dir (created if needed), through the
// lifecycle of src/formats/lifecycle.hpp: staged, sealed by a manifest, committed. The tied copy of the
// word embedding is not written (it is tied). format "hf" (Hugging Face names) or "paddle"
// (PaddleNLP names, Linear weights [in, out]; config.json keeps the Hugging Face keys, which
// PaddleNLP's ErnieConfig reads as well).
void save_model_dir(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines,
                    const std::vector<Layer*>& layers, const std::string& format = "hf");
// The pieces of a model directory, each written atomically into an existing (staging) directory:
// config.json and vocab.txt; one weights file (the whole model, or one shard of it).
void write_model_info(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines);
void write_weights(const std::string& path, const std::vector<Layer*>& layers, const std::string& format = "hf");
// The same three files written into an existing (staging) directory, each atomically.
void write_model_files(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines,
                       const std::vector<Layer*>& layers, const std::string& format = "hf");

// Fills the parameters of `layers` from the checkpoint in dir. A missing or mis-shaped tensor
// is a one-line error naming it with the expected and found shapes; unexpected tensors are
// listed on stderr as a warning (an error when strict). Missing optional parameters keep their
// values (one note line on stderr), unless !fresh_ok: evaluating a classifier without its head.
// `partial`: the layers are one pipeline rank's part of the model, so the tensors of the other
// parts are expected, not reported.
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

// ---- the pieces, for `pipetrain inspect` and tests -------------------------------------------

// A checkpoint's tensors and where each one goes in the model.
struct Checkpoint {
    std::string path;                 // model.safetensors or the index: names the checkpoint in errors
    std::string convention;           // "hf" or "paddle"
    std::vector<st::File> files;      // one, or the shards in index order
    struct Source {
        int file;                     // index into files
        std::string name;             // name in the file
        bool transpose;               // Paddle Linear weight: [in, out] in the file
    };
    std::map<std::string, std::vector<Source>> by_model_name;   // several: aliases (tied decoder)
};

// Reads and validates the weight files of dir: a missing shard, a tensor in another shard than
// the index says, or names mixing both conventions is a one-line error.
Checkpoint open_checkpoint(const std::string& dir);
// The same for one .safetensors file.
Checkpoint open_checkpoint_file(const std::string& path);

// The model name of a tensor name in a checkpoint of that convention ("" = ignored), and
// whether its data is transposed. And back: the name a model parameter is saved under.
std::string to_model_name(const std::string& file_name, bool paddle, bool* transpose);
std::string to_file_name(const std::string& model_name, bool paddle, bool* transpose);

// Every problem loading `ckpt` into `layers` would hit, in model order: errors first-class,
// warnings (unexpected tensors; errors when strict) and notes (optional parameters kept).
struct Problem {
    enum Kind { error, warning, note } kind;
    std::string message;
};
std::vector<Problem> check_checkpoint(const Checkpoint& ckpt, const std::vector<Layer*>& layers, bool strict,
                                      bool partial = false);

std::string shape_str(const std::vector<int64_t>& shape);   // "[3, 16]"


}  // namespace pt
