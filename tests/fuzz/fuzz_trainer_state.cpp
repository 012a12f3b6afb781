// fuzz: max_len=1048576 dict=config.dict
// trainer_state.json (what --resume reads before anything else) through pt::parse_trainer_state,
// seeded with one a run wrote (tests/fuzz/seeds/trainer_state/). An accepted state holds only
// the known keys, a step in [0, 2^30], and reads back the same from its own dump (what
// resume_defaults turns into flag defaults).
#include "tests/fuzz/fuzz_util.hpp"

#include <algorithm>
#include <iterator>

#include "src/formats/trainer_state.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    nlohmann::json state;
    if (!fuzz::parse([&] { state = pt::parse_trainer_state(fuzz::text(data, size), "trainer_state.json"); })) return 0;
    for (const auto& item : state.items()) {
        const std::string& key = item.key();
        const nlohmann::json& value = item.value();
        auto is_key = [&](const char* k) { return key == k; };
        fuzz::expect(std::any_of(std::begin(pt::kTrainerStateKeys), std::end(pt::kTrainerStateKeys), is_key),
                     "only known keys are accepted");
        fuzz::expect(!value.dump().empty(), "every value can be written as a flag's default");
    }
    fuzz::expect(state["step"].get<uint64_t>() <= uint64_t(1) << 30, "the step is in range");
    fuzz::expect(pt::parse_trainer_state(state.dump(), "dump") == state, "the state reads back the same");
    return 0;
}
