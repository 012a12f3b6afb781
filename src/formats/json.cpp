#include "src/formats/json.hpp"

#include <stdexcept>

#include "src/formats/io.hpp"

namespace pt {

nlohmann::json parse_json(const std::string& text, const std::string& source) {
    using json = nlohmann::json;
    // The parser itself is iterative; the depth is checked as containers open, before anything
    // recursive (dump, our own walks) can see the value.
    auto bounded = [](int depth, json::parse_event_t event, json&) {
        if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
            depth >= kMaxJsonDepth)
            throw std::length_error("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        return true;
    };
    try {
        return json::parse(text, bounded);
    } catch (const json::exception& e) {   // parse errors, number overflow, ...
        std::string what = e.what();
        size_t tag = what.find("] ");       // drop "[json.exception.parse_error.101] "
        fail(source, "not valid JSON (" + (tag == std::string::npos ? what : what.substr(tag + 2)) + ")");
    } catch (const std::length_error& e) {
        fail(source, std::string("not valid JSON (") + e.what() + ")");
    }
}

}  // namespace pt
