// fuzz: max_len=1048576 seeds=ernie/*/config.json ernie/*/*/config.json bad/*.json bad/*/config.json dict=config.dict
// config.json and PaddleNLP's model_config.json ({"init_args": [...]}, tests/fuzz/seeds/config/)
// through pt::ModelConfig::from_json_string. An accepted config must pass check() and read back
// the same from what config_to_json() writes (what a saved checkpoint will hold).
#include "tests/fuzz/fuzz_util.hpp"

#include "src/formats/config_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text = fuzz::text(data, size);
    pt::ModelConfig c;
    if (!fuzz::parse([&] { c = pt::config_from_json_string(text, "config.json"); })) return 0;
    pt::check_config(c, "config.json");   // an exception from here on escapes: libFuzzer reports it
    // A saved config names every label twice (id2label, label2id): past a few thousand the read-back
    // takes seconds under ASan and proves nothing new; check() bounds num_labels.
    if (c.num_labels > 4096) return 0;
    const std::string saved = config_to_json(c);
    fuzz::expect(pt::config_to_json(pt::config_from_json_string(saved, "saved config.json")) == saved,
                 "a saved config reads back the same");
    return 0;
}
