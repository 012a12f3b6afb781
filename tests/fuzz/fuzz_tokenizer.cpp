// fuzz: max_len=4096 seeds=tokenizer/input.txt tokenizer/tokens.txt tokenizer/invalid_utf8.bin text/*.txt classify/dev.tsv
// Fuzzed text through the fixture vocab (tests/fixtures/tokenizer/vocab.txt): tokenize, encode
// and encode_pair (A and B split at the first TAB, max_len from the last byte).
#include "tests/fuzz/fuzz_util.hpp"

#include "src/formats/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const pt::Tokenizer tok = pt::Tokenizer::from_file(fuzz::fixture("tokenizer/vocab.txt"));
    const int max_len = size ? 1 + data[size - 1] % 64 : 8;
    const std::string text = fuzz::text(data, size);
    std::vector<std::string> tokens;
    if (!fuzz::parse([&] { tokens = tok.tokenize(text); })) return 0;
    const std::vector<int32_t> ids = tok.convert_tokens_to_ids(tokens);
    fuzz::expect(ids == tok.encode(text), "encode = tokenize + convert_tokens_to_ids");
    for (int32_t id : ids) fuzz::expect(id >= 0 && size_t(id) < tok.size(), "ids are in [0, vocab size)");

    const size_t tab = text.find('\t');
    const std::string a = text.substr(0, tab), b = tab == std::string::npos ? "" : text.substr(tab + 1);
    pt::Tokenizer::Encoded e;
    if (!fuzz::parse([&] { e = tok.encode_pair(a, b, max_len); })) return 0;
    fuzz::expect(e.input_ids.size() == e.token_type_ids.size() && int(e.input_ids.size()) <= max_len,
                 "encode_pair: ids and types agree, at most max_len");
    fuzz::expect(!e.input_ids.empty() && e.input_ids[0] == tok.cls_id() && e.input_ids.back() == tok.sep_id(),
                 "encode_pair: [CLS] ... [SEP]");
    return 0;
}
