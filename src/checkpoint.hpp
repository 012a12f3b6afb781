// src/checkpoint.hpp — model directories in the Hugging Face layout:
// config.json + vocab.txt + model.safetensors (ErnieForMaskedLM names, Linear weights [out, in]).
#pragma once
#include <string>
#include <vector>

#include "src/config.hpp"
#include "src/model.hpp"

namespace pt {

// Writes config.json, vocab.txt and model.safetensors into dir (created if needed). Each file
// is replaced atomically; the tied copy of the word embedding is not written (it is tied).
void save_model_dir(const std::string& dir, const ModelConfig& cfg, const std::vector<std::string>& vocab_lines,
                    const std::vector<Layer*>& layers);

// Fills the parameters of `layers` from dir/model.safetensors. A missing or mis-shaped tensor
// is a one-line error naming it with the expected and found shapes; unexpected tensors are
// listed on stderr as a warning (an error when strict).
void load_weights(const std::string& dir, const std::vector<Layer*>& layers, bool strict = false);

std::string shape_str(const std::vector<int64_t>& shape);   // "[3, 16]"

}  // namespace pt
