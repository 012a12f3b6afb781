// fuzz: max_len=4096 seeds=classify/*.tsv
// The classification TSV loader (pt::load_tsv) with the fixture vocab; --seq T in [3, 66] and
// --labels in [2, 5] from the last byte. Each example must be T ids with a label in range.
#include "tests/fuzz/fuzz_util.hpp"

#include "src/formats/corpus.hpp"
#include "src/formats/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const pt::Tokenizer tok = pt::Tokenizer::from_file(fuzz::fixture("tokenizer/vocab.txt"));
    const int knob = size ? data[size - 1] : 0, T = 3 + knob % 64, labels = 2 + knob / 64;
    std::vector<pt::Example> examples;
    if (!fuzz::parse([&] { examples = pt::load_tsv(fuzz::as_file(data, size), tok, T, labels); })) return 0;
    fuzz::expect(!examples.empty(), "at least one example");
    for (const pt::Example& e : examples) {
        fuzz::expect(int(e.ids.size()) == T && int(e.types.size()) == T, "T ids and T types per example");
        fuzz::expect(e.label >= 0 && e.label < labels, "label in [0, num_labels)");
        fuzz::expect(e.ids[0] == tok.cls_id(), "an example starts with [CLS]");
    }
    return 0;
}
