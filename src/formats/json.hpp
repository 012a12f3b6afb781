// src/formats/json.hpp — JSON from files a user hands us (config.json, trainer_state.json, indexes,
// manifests), parsed with bounds: nesting at most 64 deep (a 100,000-deep array would overflow
// the stack of whatever walks it recursively later), and every error of the JSON library, a
// number overflow (1e447) included, is one line naming the file.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace pt {

constexpr int kMaxJsonDepth = 64;

// Throws std::runtime_error("<source>: not valid JSON (<why>)").
nlohmann::json parse_json(const std::string& text, const std::string& source);

}  // namespace pt
