// fuzz: max_len=8192 seeds=tokenizer/vocab*.txt ernie/*/vocab.txt bad/vocab_no_unk.txt text/*.txt
// The input twice: as a vocab.txt (pt::Tokenizer::from_file), then a fixed text and the input's
// own lines tokenized with it; and as a corpus for `pipetrain vocab` (pt::build_vocab_file), then
// its lines tokenized with the vocabulary built from them. Ids must be valid for the vocab. Only
// the first 32 lines are tokenized: the tokenizer target fuzzes text, this one the vocabularies.
#include "tests/fuzz/fuzz_util.hpp"

#include <algorithm>

#include "src/formats/io.hpp"
#include "src/formats/tokenizer.hpp"

namespace {
void check_ids(const pt::Tokenizer& tok, const std::vector<int32_t>& ids) {
    for (int32_t id : ids) fuzz::expect(id >= 0 && size_t(id) < tok.size(), "ids are in [0, vocab size)");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text = fuzz::text(data, size);
    std::vector<std::string> lines = pt::split_lines(text);
    lines.resize(std::min<size_t>(lines.size(), 32));
    fuzz::parse([&] {
        pt::Tokenizer tok = pt::Tokenizer::from_file(fuzz::as_file(data, size));
        check_ids(tok, tok.encode("今天天气很好, Hello WORLD ##x [MASK] [UNK]"));
        for (const std::string& line : lines) check_ids(tok, tok.encode(line));
    });
    fuzz::parse([&] {
        std::vector<std::string> vocab = pt::build_vocab_file(fuzz::as_file(data, size), 64);
        fuzz::expect(vocab.size() >= 5 && vocab.size() <= 64, "built vocab: the specials, at most max_size tokens");
        pt::Tokenizer tok(vocab, "built vocab.txt");
        for (const std::string& line : lines) check_ids(tok, tok.encode(line));
    });
    return 0;
}
