// src/formats/config_json.hpp — the model's shape as Hugging Face's config.json (and PaddleNLP's
// model_config.json), read strictly and written with every key.
#pragma once
#include <string>

#include "src/config.hpp"

namespace pt {

// Throws a one-line error naming `source` when the shape is impossible.
void check_config(const ModelConfig& c, const std::string& source);

// Reads config.json. Keys that decide the shape must be present: Hugging Face and PaddleNLP
// defaults differ, so a missing one is an error, never a silent default.
ModelConfig config_from_json_file(const std::string& path);
ModelConfig config_from_json_string(const std::string& text, const std::string& source);
std::string config_to_json(const ModelConfig& c);   // every key written out, Hugging Face names

}  // namespace pt
