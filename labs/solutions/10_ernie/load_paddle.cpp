// labs/solutions/10_ernie/load_paddle.cpp — lab 10's answer (what a student should end with).
#include "labs/10_ernie/load_paddle.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <stdexcept>

namespace student {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// PaddleNLP -> Hugging Face, as name prefixes. `linear`: a Linear layer, its weight stored [in, out].
struct Rename {
    const char* paddle;
    const char* hf;
    bool linear;
};
// After "ernie.encoder.layers.N." (PaddleNLP) / "ernie.encoder.layer.N." (Hugging Face).
const Rename kLayerRenames[] = {
    {"self_attn.q_proj.", "attention.self.query.", true},
    {"self_attn.k_proj.", "attention.self.key.", true},
    {"self_attn.v_proj.", "attention.self.value.", true},
    {"self_attn.out_proj.", "attention.output.dense.", true},
    {"norm1.", "attention.output.LayerNorm.", false},   // after the attention
    {"linear1.", "intermediate.dense.", true},
    {"linear2.", "output.dense.", true},
    {"norm2.", "output.LayerNorm.", false},   // after the feed-forward
};
const Rename kTopRenames[] = {
    {"ernie.embeddings.layer_norm.", "ernie.embeddings.LayerNorm.", false},
    {"ernie.embeddings.", "ernie.embeddings.", false},   // the tables: [rows, H] in both
    {"ernie.pooler.dense.", "ernie.pooler.dense.", true},   // the same name, but a Linear
    {"cls.predictions.transform.", "cls.predictions.transform.dense.", true},
    {"cls.predictions.layer_norm.", "cls.predictions.transform.LayerNorm.", false},
    {"cls.predictions.decoder_bias", "cls.predictions.bias", false},
};

// (rows, cols) -> (cols, rows): a Linear weight from PaddleNLP's [in, out] to the model's [out, in].
std::vector<float> transposed(const std::vector<float>& x, size_t rows, size_t cols) {
    std::vector<float> out(x.size());
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) out[c * rows + r] = x[r * cols + c];
    return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s;
    for (int64_t d : shape) s += (s.empty() ? "[" : ", ") + std::to_string(d);
    return s + "]";
}

// One tensor of the file into one parameter, after checking its shape.
void copy_into(pt::Layer& layer, const pt::ParamInfo& p, const pt::st::File& file, const pt::st::TensorInfo& t,
               bool transpose) {
    std::vector<int64_t> stored = p.shape;   // what the file must hold: [in, out] for a Linear weight
    if (transpose) std::reverse(stored.begin(), stored.end());
    if (t.shape != stored)
        throw std::runtime_error(t.name + " has shape " + shape_text(t.shape) + ", but " + p.name + " needs " +
                                 shape_text(stored) + (transpose ? " (transposed)" : ""));
    std::vector<float> v = file.to_f32(t.name);
    if (transpose) v = transposed(v, size_t(t.shape[0]), size_t(t.shape[1]));
    std::copy(v.begin(), v.end(), layer.params.data() + p.offset);
}

}   // namespace

std::string to_model_name(const std::string& paddle_name, bool* transpose) {
    *transpose = false;
    const std::string layers = "ernie.encoder.layers.";
    std::string head, rest = paddle_name;   // head: "ernie.encoder.layer.N." inside the encoder
    const Rename* rules = kTopRenames;
    size_t n = std::size(kTopRenames);
    if (starts_with(paddle_name, layers)) {
        size_t dot = paddle_name.find('.', layers.size());
        if (dot == std::string::npos) return "";
        head = "ernie.encoder.layer." + paddle_name.substr(layers.size(), dot + 1 - layers.size());
        rest = paddle_name.substr(dot + 1);
        rules = kLayerRenames, n = std::size(kLayerRenames);
    }
    for (size_t i = 0; i < n; i++) {
        if (!starts_with(rest, rules[i].paddle)) continue;
        *transpose = rules[i].linear && ends_with(rest, ".weight");
        return head + rules[i].hf + rest.substr(std::strlen(rules[i].paddle));
    }
    return "";   // not a parameter: cls.predictions.decoder_weight (the tied copy), or unknown
}

void load_paddle(const std::vector<pt::Layer*>& layers, const pt::st::File& file) {
    const std::string word_embeddings = "ernie.embeddings.word_embeddings.weight";
    for (const pt::st::TensorInfo& t : file.tensors) {
        bool transpose = false;
        std::string name = to_model_name(t.name, &transpose);
        if (name.empty()) continue;
        int copies = 0;
        for (pt::Layer* layer : layers)
            for (const pt::ParamInfo& p : layer->params_info)
                if (p.name == name || (p.tied && name == word_embeddings)) {   // the decoder: tied
                    copy_into(*layer, p, file, t, transpose);
                    copies++;
                }
        if (copies == 0) throw std::runtime_error(t.name + " -> " + name + ": the model has no such parameter");
    }
}

}   // namespace student
