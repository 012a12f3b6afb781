// fuzz: max_len=4096 seeds=text/*.txt tokenizer/input.txt classify/train.tsv
// The text corpus loader (pt::load_corpus, `train --data`) with the fixture vocab; --seq T in
// [3, 66] from the last byte. Every packed sequence must be [CLS] (T-2 ids) [SEP].
#include "tests/fuzz/fuzz_util.hpp"

#include "src/formats/corpus.hpp"
#include "src/formats/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const pt::Tokenizer tok = pt::Tokenizer::from_file(fuzz::fixture("tokenizer/vocab.txt"));
    const int T = 3 + (size ? data[size - 1] % 64 : 0);
    pt::Corpus c;
    if (!fuzz::parse([&] { c = pt::load_corpus(fuzz::as_file(data, size), tok, T); })) return 0;
    fuzz::expect(!c.train.empty() && !c.eval.empty(), "train and eval sequences");
    for (const auto* part : {&c.train, &c.eval})
        for (const std::vector<int32_t>& s : *part) {
            fuzz::expect(int(s.size()) == T, "sequences of exactly T ids");
            fuzz::expect(s.front() == tok.cls_id() && s.back() == tok.sep_id(), "[CLS] ... [SEP]");
            for (int32_t id : s) fuzz::expect(id >= 0 && size_t(id) < tok.size(), "ids are in [0, vocab size)");
        }
    return 0;
}
