#include "src/formats/json.hpp"

#include <unordered_set>
#include <vector>

#include "src/formats/io.hpp"

namespace pt {

namespace {
using json = nlohmann::json;

// Counts open containers and, where asked, the keys of each open object; keeps nothing else.
class ShapeCheck : public nlohmann::json_sax<json> {
 public:
    ShapeCheck(JsonShape& out, bool unique_keys) : out_(out), unique_(unique_keys) {}
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override {
        if (unique_) keys_.emplace_back();
        return open();
    }
    bool start_array(std::size_t) override { return open(); }
    bool end_object() override {
        if (unique_) keys_.pop_back();
        return --depth_, true;
    }
    bool end_array() override { return --depth_, true; }
    bool key(string_t& k) override {
        if (unique_ && out_.duplicate.empty() && !keys_.back().insert(k).second) out_.duplicate = k;
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
    bool open() {
        if (++depth_ > kMaxJsonDepth) out_.too_deep = true;
        return !out_.too_deep;   // stop at once: nothing deeper is looked at
    }
    JsonShape& out_;
    bool unique_;
    int depth_ = 0;
    std::vector<std::unordered_set<std::string>> keys_;   // per open object, innermost last
};
}  // namespace

JsonShape check_json(const char* first, const char* last, bool unique_keys) {
    JsonShape shape;
    ShapeCheck check(shape, unique_keys);
    try {
        shape.complete = json::sax_parse(first, last, &check);
    } catch (const json::exception&) {   // the SAX parser throws for some errors (number overflow)
        shape.complete = false;
    }
    return shape;
}

nlohmann::json parse_json(const std::string& text, const std::string& source) {
    // The depth first, before anything recursive (dump, our own walks) can see the value. A key twice
    // in one object: the library keeps one of them silently (Python's json the last), so which value
    // the writer meant is unknown.
    const JsonShape shape = check_json(text.data(), text.data() + text.size(), true);
    if (shape.too_deep) fail(source, "not valid JSON (nested deeper than " + std::to_string(kMaxJsonDepth) + " levels)");
    if (!shape.duplicate.empty()) fail(source, "the key \"" + shape.duplicate + "\" appears twice in one object: which value is meant?");
    try {
        return json::parse(text);
    } catch (const json::exception& e) {   // parse errors, number overflow, ...
        std::string what = e.what();
        size_t tag = what.find("] ");       // drop "[json.exception.parse_error.101] "
        fail(source, "not valid JSON (" + (tag == std::string::npos ? what : what.substr(tag + 2)) + ")");
    }
}

}  // namespace pt
