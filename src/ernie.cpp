// src/ernie.cpp — ERNIE in one room (see ernie.hpp): the config map, the Hugging Face ↔ PaddleNLP
// names, the weights in and out of the layers, the tokenizer's rules. Sections in the header's order.
#include "src/ernie.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <set>
#include <stdexcept>

// The formats layer's error helper and Unicode queries (scripts/check_layering.sh allows these two).
#include "src/formats/io.hpp"
#include "src/formats/unicode.hpp"

namespace pt {


// ---- 2. names: Hugging Face ↔ PaddleNLP ----------------------------------------------------

namespace {

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

}  // namespace

// (rows, cols) → (cols, rows): a Linear weight between PaddleNLP's [in, out] and our [out, in].
std::vector<float> transposed(const float* x, size_t rows, size_t cols) {
    std::vector<float> out(rows * cols);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) out[c * rows + r] = x[r * cols + c];
    return out;
}

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

// ---- 3. weights into the model's layers, and out of them -----------------------------------

namespace {

std::vector<int64_t> reversed(std::vector<int64_t> v) {
    std::reverse(v.begin(), v.end());
    return v;
}

}  // namespace

// A source tensor as float32 in the model's layout ([out, in] for Linear weights).
std::vector<float> read_source(const Checkpoint& c, const Checkpoint::Source& s) {
    const st::File& f = c.files[s.file];
    std::vector<float> v = f.to_f32(s.name);
    if (!s.transpose) return v;
    const std::vector<int64_t>& shape = f.find(s.name)->shape;   // [in, out], checked to be 2-D
    return transposed(v.data(), size_t(shape[0]), size_t(shape[1]));
}

void load_weights(const Checkpoint& c, const std::vector<Layer*>& layers) {
    for (Layer* l : layers)
        for (const ParamInfo& p : l->params_info) {
            auto it = c.by_model_name.find(p.tied ? kWordEmbedding : p.name);
            if (it == c.by_model_name.end()) {
                if (p.optional) continue;   // keeps its initial values
                fail(c.path, "missing tensor " + p.name);
            }
            const Checkpoint::Source& s = it->second[0];
            const std::vector<int64_t>& got = c.files[s.file].find(s.name)->shape;
            if ((s.transpose ? reversed(got) : got) != p.shape)   // never copy past a parameter's end
                fail(c.path, s.name + " has shape " + shape_str(got) + ", expected " + shape_str(p.shape) +
                                 (s.transpose ? " transposed" : ""));
            std::vector<float> v = read_source(c, s);
            for (float x : v)   // would surface as a "diverged" training or a NaN loss, far from here
                if (!std::isfinite(x)) fail(c.path, s.name + " holds NaN or infinite values");
            std::copy(v.begin(), v.end(), l->params.begin() + long(p.offset));
        }
}

void write_weights(const std::string& path, const std::vector<Layer*>& layers, const std::string& format) {
    if (format != "hf" && format != "paddle")
        throw std::invalid_argument("write_weights: the naming must be hf or paddle, got \"" + format + "\"");
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

// ---- 4. the tokenizer's rules ---------------------------------------------------------------

namespace {

const char* const kSpecialTokens[] = {"[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"};

// BERT counts every non-alphanumeric printable ASCII character as punctuation ($ + < = > ^ ` | ~).
bool is_punct(char32_t c) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126) ||
           char_category(c) == CharCategory::punct;
}

// Step 4 for one word: lowercase each code point alone, NFD, drop Mn (the accents).
std::u32string normalize_word(const std::u32string& word) {
    std::u32string lower, out;
    for (char32_t c : word) append_lower(lower, c);
    for (char32_t c : nfd(lower))
        if (char_category(c) != CharCategory::mark) out += c;
    return out;
}

// Steps 4-5 for one whitespace-separated word: normalize, then split off punctuation.
void split_word(std::vector<std::string>& out, const std::u32string& word) {
    std::string piece;
    auto flush = [&] {
        if (!piece.empty()) out.push_back(std::move(piece));
        piece.clear();
    };
    for (char32_t c : normalize_word(word)) {
        bool punct = is_punct(c);
        if (punct) flush();   // a punctuation mark is a piece of its own
        append_utf8(piece, c);
        if (punct) flush();
    }
    flush();
}

// Steps 1-3 in one pass: clean, isolate CJK ideographs, split on whitespace.
void basic_split(std::vector<std::string>& out, std::u32string_view text) {
    std::u32string word;
    auto flush = [&] {
        if (!word.empty()) split_word(out, word);
        word.clear();
    };
    for (char32_t c : text) {
        if (c == 0 || c == 0xFFFD) continue;
        CharCategory cls = char_category(c);
        bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || cls == CharCategory::space || c == 0x2028 ||
                     c == 0x2029;  // Zl and Zp survive cleaning; str.split() splits on them
        if (space) {
            flush();
            continue;
        }
        if (cls == CharCategory::other) continue;
        if (is_cjk(c)) {
            flush();
            word = c;
            flush();
            continue;
        }
        word += c;
    }
    flush();
}

}  // namespace

// The BERT "Chinese character" ranges: CJK Unified Ideographs (+ Ext A-E) and compatibility ones.
bool is_cjk(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= 0x2B820 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Steps 0-5: special tokens stay whole; the text between them goes through basic_split.
std::vector<std::string> basic_tokenize(std::string_view utf8) {
    std::u32string text = decode_utf8(utf8);
    std::vector<std::string> out;
    size_t start = 0;  // start of the text not yet tokenized
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '[') continue;
        for (const char* special : kSpecialTokens) {
            size_t n = std::strlen(special);
            if (text.compare(i, n, std::u32string(special, special + n)) != 0) continue;
            basic_split(out, std::u32string_view(text).substr(start, i - start));
            out.emplace_back(special);
            start = i + n;
            i = start - 1;
            break;
        }
    }
    basic_split(out, std::u32string_view(text).substr(start));
    return out;
}

bool is_special_token(const std::string& token) {
    for (const char* special : kSpecialTokens)
        if (token == special) return true;
    return false;
}

void wordpiece(std::vector<std::string>& out, const std::string& piece,
               const std::unordered_map<std::string, int32_t>& vocab) {
    std::vector<size_t> bounds;  // byte offset of every code point, and the end
    for (size_t i = 0; i <= piece.size(); ++i)
        if (i == piece.size() || (piece[i] & 0xC0) != 0x80) bounds.push_back(i);
    size_t first = out.size(), start = 0, n = bounds.size() - 1;   // n code points
    if (n > kMaxCharsPerWord) {
        out.emplace_back("[UNK]");
        return;
    }
    while (start < n) {
        size_t end = n;
        for (; end > start; --end) {
            std::string candidate =
                (start > 0 ? "##" : "") + piece.substr(bounds[start], bounds[end] - bounds[start]);
            if (vocab.count(candidate)) {
                out.push_back(std::move(candidate));
                break;
            }
        }
        if (end == start) {  // nothing matches here: the whole piece is unknown
            out.resize(first);
            out.emplace_back("[UNK]");
            return;
        }
        start = end;
    }
}

}  // namespace pt
