#include "src/formats/config_json.hpp"

#include "src/formats/io.hpp"
#include "src/formats/json.hpp"

namespace pt {

ModelConfig config_from_json_string(const std::string& text, const std::string& source) {
    return config_from_json(parse_json(text, source), source);   // NaN, which Python's json.dump writes, is not JSON
}

ModelConfig config_from_json_file(const std::string& path) { return config_from_json_string(read_file(path), path); }

}  // namespace pt
