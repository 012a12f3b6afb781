// src/formats/config_json.hpp — config.json (and PaddleNLP's model_config.json) ↔ ModelConfig: read
// from a file or a string, the key-by-key map, the shape check, and config.json written back.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "src/config.hpp"

namespace pt {

// Throws a one-line error naming `source` when the shape is impossible.
void check_config(const ModelConfig& c, const std::string& source);
// Hugging Face's config.json (and PaddleNLP's model_config.json, old init_args form included), read
// strictly: keys that decide the shape must be present, since Hugging Face and PaddleNLP defaults differ.
ModelConfig config_from_json(nlohmann::json j, const std::string& source);
std::string config_to_json(const ModelConfig& c);   // every key written out, Hugging Face names

// Parses strictly (NaN, which Python's json.dump writes, is not JSON), then config_from_json.
ModelConfig config_from_json_file(const std::string& path);
ModelConfig config_from_json_string(const std::string& text, const std::string& source);

}  // namespace pt
