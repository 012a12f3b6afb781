// src/formats/json.hpp — JSON from files a user hands us (config.json, trainer_state.json, indexes,
// manifests, safetensors headers), parsed with bounds: nesting at most 64 deep (a 100,000-deep
// array would overflow the stack of whatever walks it recursively later), and every error of the
// JSON library, a number overflow (1e447) included, is one line naming the file. Time is linear in
// the size: the bounds are checked by a SAX pass that builds nothing, then the library's own
// parser builds the value (its callback parser, which the checks once rode on, rescans a parent's
// members each time a child object closes: quadratic in the number of siblings).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace pt {

constexpr int kMaxJsonDepth = 64;

// What one pass over JSON text found. `complete` is false where the text is not valid JSON or
// is nested too deep (the pass stops there).
struct JsonShape {
    bool complete = false;
    bool too_deep = false;     // more than kMaxJsonDepth containers open at once
    std::string duplicate;     // the first key seen twice in one object (with unique_keys)
};
JsonShape check_json(const char* first, const char* last, bool unique_keys);

// Throws std::runtime_error("<source>: not valid JSON (<why>)").
nlohmann::json parse_json(const std::string& text, const std::string& source);

}  // namespace pt
