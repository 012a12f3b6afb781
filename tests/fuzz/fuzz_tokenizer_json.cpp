// fuzz: max_len=65536 dict=tokenizer_json.dict
// tokenizer.json (what a model directory without vocab.txt is read from) through
// pt::vocab_from_tokenizer_json, seeded with files pipetrain wrote (tests/fuzz/seeds/tokenizer_json/).
// An accepted vocabulary must survive what pipetrain does with it next: saved as vocab.txt and read
// back (Tokenizer::from_file's line rules), and written again as tokenizer.json and read back, each
// the same list; a tokenizer made from it refuses in one line or gives ids within it.
#include "tests/fuzz/fuzz_util.hpp"

#include "src/formats/io.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/formats/tokenizer_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<std::string> lines;
    if (!fuzz::parse([&] { lines = pt::vocab_from_tokenizer_json(fuzz::as_file(data, size)); })) return 0;
    std::string text;   // as write_vocab_files saves it
    for (const std::string& t : lines) text += t + "\n";
    const std::string vocab_txt = fuzz::as_file(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    std::vector<std::string> from_txt;
    pt::Tokenizer tok({"[UNK]"}, "none");
    if (fuzz::parse([&] { tok = pt::Tokenizer::from_file(vocab_txt); })) {
        for (size_t i = 0; i < tok.size(); i++) from_txt.push_back(tok.token(int32_t(i)));
        fuzz::expect(from_txt == lines, "vocab.txt reads back the same tokens, id for id");
        std::vector<int32_t> ids;
        if (fuzz::parse([&] { ids = tok.encode("今天 Hello, wörld! [MASK] ##x"); }))
            for (int32_t id : ids) fuzz::expect(id >= 0 && size_t(id) < tok.size(), "ids are in [0, vocab size)");
    }
    const std::string again = pt::tokenizer_files(lines, 512).tokenizer_json;
    const std::string again_file = fuzz::as_file(reinterpret_cast<const uint8_t*>(again.data()), again.size());
    std::vector<std::string> back;
    fuzz::expect(fuzz::parse([&] { back = pt::vocab_from_tokenizer_json(again_file); }), "pipetrain reads what it wrote");
    fuzz::expect(back == lines, "tokenizer.json written again reads back the same tokens, id for id");
    return 0;
}
