// src/formats/config_json.hpp — config.json (and PaddleNLP's model_config.json) read from a file or a
// string; the key-by-key map to ModelConfig, check_config and config_to_json are in src/ernie.hpp.
#pragma once
#include <string>

#include "src/config.hpp"
#include "src/ernie.hpp"

namespace pt {

// Parses strictly (NaN, which Python's json.dump writes, is not JSON), then config_from_json.
ModelConfig config_from_json_file(const std::string& path);
ModelConfig config_from_json_string(const std::string& text, const std::string& source);

}  // namespace pt
