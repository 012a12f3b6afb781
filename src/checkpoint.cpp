#include "src/checkpoint.hpp"

#include <filesystem>
#include <iostream>
#include <set>
#include <stdexcept>

#include "src/safetensors.hpp"

namespace pt {

namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

void save_model_dir(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines,
                    const std::vector<Layer*>& layers) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw std::runtime_error(dir + ": cannot create directory (" + ec.message() + ")");
    st::Writer w;
    w.metadata["format"] = "pt";
    for (Layer* l : layers)
        for (const ParamInfo& p : l->params_info)
            if (!p.tied) w.add_f32(p.name, p.shape, l->params.data() + p.offset);
    std::string vocab;
    for (const std::string& t : vocab_lines) vocab += t + "\n";
    st::write_file_atomic(dir + "/config.json", cfg.to_json_string());
    st::write_file_atomic(dir + "/vocab.txt", vocab);
    w.write(dir + "/model.safetensors");
}

void load_weights(const std::string& dir, const std::vector<Layer*>& layers, bool strict) {
    std::string path = dir + "/model.safetensors";
    st::File f = st::read(path);
    std::set<std::string> used;
    for (Layer* l : layers)
        for (const ParamInfo& p : l->params_info) {
            // The decoder is tied to the word embedding unless the file stores its own copy.
            std::string name = p.tied && !f.find(p.name) ? "ernie.embeddings.word_embeddings.weight" : p.name;
            const st::TensorInfo* t = f.find(name);
            if (!t) throw std::runtime_error(path + ": missing tensor " + name + " (expected " + shape_str(p.shape) + ")");
            if (t->shape != p.shape)
                throw std::runtime_error(path + ": tensor " + name + " has shape " + shape_str(t->shape) +
                                         ", expected " + shape_str(p.shape));
            std::vector<float> v = f.to_f32(name);
            std::copy(v.begin(), v.end(), l->params.begin() + p.offset);
            used.insert(name);
        }
    std::string unexpected;
    for (const st::TensorInfo& t : f.tensors)
        if (!used.count(t.name) && t.name.find("position_ids") == std::string::npos)
            unexpected += (unexpected.empty() ? "" : ", ") + t.name;
    if (!unexpected.empty()) {
        if (strict) throw std::runtime_error(path + ": unexpected tensors: " + unexpected);
        std::cerr << "warning: " << path << ": ignoring tensors the model does not use: " << unexpected << "\n";
    }
}

}  // namespace pt
