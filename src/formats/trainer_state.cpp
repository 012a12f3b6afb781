#include "src/formats/trainer_state.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include "src/formats/io.hpp"
#include "src/formats/json.hpp"

namespace pt {

const char* const kTrainerStateKeys[15] = {"step", "seed", "batch", "seq", "objective", "lr", "warmup", "steps",
                                           "clip", "weight-decay", "dropout", "micro-batches", "dp", "save-format", "dtype"};

nlohmann::json parse_trainer_state(const std::string& text, const std::string& path) {
    nlohmann::json saved = parse_json(text, path);
    if (!saved.is_object() || !saved.contains("step"))
        throw std::runtime_error(path + ": not a trainer state (expected a JSON object with \"step\")");
    std::string known;
    for (const char* k : kTrainerStateKeys) known += std::string(known.empty() ? "" : ", ") + k;
    for (const auto& item : saved.items()) {   // (clang: a lambda may not capture a structured binding)
        const std::string& key = item.key();
        const nlohmann::json& value = item.value();
        auto is_key = [&](const char* k) { return key == k; };
        if (std::none_of(std::begin(kTrainerStateKeys), std::end(kTrainerStateKeys), is_key))
            fail(path, "unknown key \"" + key + "\" (a trainer state holds only " + known + ")");   // fail: one line, whatever the key holds
        bool text_value = key == "objective" || key == "save-format" || key == "dtype";
        if (text_value ? !value.is_string() : !value.is_number())
            throw std::runtime_error(path + ": \"" + key + "\" must be a " + (text_value ? "string" : "number"));
    }
    const nlohmann::json& step = saved["step"];
    if (!step.is_number_integer())
        throw std::runtime_error(path + ": \"step\" must be an integer, got " + step.dump());
    // 2^63 and above is an unsigned JSON integer, which get<int64_t> would read as negative.
    if (!step.is_number_unsigned() && step.get<int64_t>() < 0) throw std::runtime_error(path + ": \"step\" is negative");
    if (step.get<uint64_t>() > uint64_t(1) << 30)
        throw std::runtime_error(path + ": \"step\" " + step.dump() + " is out of range (at most 2^30 steps)");
    return saved;
}

}  // namespace pt
