// src/ernie.hpp — ERNIE in one room: what turns a Hugging Face or PaddleNLP ERNIE checkpoint into
// this model, on data the formats layer has already read (src/formats/ reads and writes the bytes:
// safetensors, shards, vocab.txt, the lifecycle). Read it in order:
//   1. config.json ↔ ModelConfig is in src/formats/config_json.hpp (the keys, the defaults and why);
//   2. tensor names: Hugging Face ↔ PaddleNLP ↔ the model's parameters, and the Linear transposes;
//   3. a checkpoint's tensors → the model's layers (already checked by the formats), and back to a file;
//   4. the tokenizer's rules: BasicTokenizer (clean, CJK spacing, lowercase + accents, punctuation)
//      and WordPiece's greedy longest match.
// tutorials/11_ernie.cpp calls them one by one.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/config.hpp"
#include "src/model.hpp"
#include "src/formats/safetensors.hpp"   // st::File: a parsed file's names, dtypes, shapes and bytes

namespace pt {

// ---- 2. names: Hugging Face ↔ PaddleNLP ----------------------------------------------------
//   hf     ErnieForMaskedLM names, Linear weights [out, in], LayerNorm weight/bias or gamma/beta;
//   paddle PaddleNLP names (encoder.layers.N.self_attn.q_proj, linear1, norm1, ...), every Linear
//          weight [in, out] — transposed on load and on save.
// The convention is decided once per checkpoint from its encoder names, never per tensor:
// ernie.pooler.dense.weight has the same name and a square shape in both.

// The model name of a tensor name in a checkpoint of that convention ("" = ignored), and
// whether its data is transposed. And back: the name a model parameter is saved under.
std::string to_model_name(const std::string& file_name, bool paddle, bool* transpose);
std::string to_file_name(const std::string& model_name, bool paddle, bool* transpose);
// (rows, cols) → (cols, rows): a Linear weight between PaddleNLP's [in, out] and our [out, in].
std::vector<float> transposed(const float* x, size_t rows, size_t cols);

constexpr const char kWordEmbedding[] = "ernie.embeddings.word_embeddings.weight";   // the decoder's tie

// A checkpoint's tensors and where each one goes in the model (map_checkpoint, src/formats/checkpoint.hpp).
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

// ---- 3. weights into the model's layers, and out of them -----------------------------------

// The checkpoint's tensor (its first source) as float32 in the model's layout ([out, in] for Linears).
std::vector<float> read_source(const Checkpoint& ckpt, const Checkpoint::Source& s);
// Copies ckpt into the parameters of `layers`, each tensor's shape checked first; a missing optional
// parameter keeps its value. The full report (dtypes, aliases, unexpected tensors) is the product's:
// check_checkpoint and load_weights(dir) of src/formats/checkpoint.hpp run it before this copy.
void load_weights(const Checkpoint& ckpt, const std::vector<Layer*>& layers);
// The layers' parameters as one safetensors file (the tied copy of the word embedding is not
// written). format "hf" or "paddle" (PaddleNLP names, Linear weights [in, out]).
void write_weights(const std::string& path, const std::vector<Layer*>& layers, const std::string& format = "hf");

std::string shape_str(const std::vector<int64_t>& shape);   // "[3, 16]"

// ---- 4. the tokenizer's rules (PaddleNLP ErnieTokenizer / Hugging Face slow BertTokenizer) ---
//   0. cut out the literal special tokens [CLS] [SEP] [PAD] [MASK] [UNK] (case-sensitive);
//   1. drop U+0000, U+FFFD and every C* code point except TAB/LF/CR; those and Zs are spaces;
//   2. put spaces around CJK ideographs;  3. split on spaces, U+2028, U+2029;
//   4. lowercase each code point on its own, NFD, drop Mn;  5. split off punctuation;
//   6. WordPiece: longest vocab prefix first, `##` on continuations; a piece longer than 100
//      code points, or one that cannot be covered, becomes a single [UNK].
// Invalid UTF-8 is rejected, never repaired: "invalid UTF-8 at byte N (...)".

constexpr size_t kMaxCharsPerWord = 100;
// Steps 0-5: the words and punctuation marks of a text, special tokens kept whole.
std::vector<std::string> basic_tokenize(std::string_view utf8);
bool is_special_token(const std::string& token);   // [CLS] [SEP] [PAD] [MASK] [UNK]
// Step 6 for one piece of basic_tokenize: appends its WordPiece tokens (or one [UNK]) to out.
void wordpiece(std::vector<std::string>& out, const std::string& piece,
               const std::unordered_map<std::string, int32_t>& vocab);
// BERT's _is_chinese_char: the code point is in one of its CJK ranges (each becomes a token).
// Cleaning drops unassigned code points before this is asked, so tests ask it directly.
bool is_cjk(char32_t c);

}  // namespace pt
