// src/cli/tokenize.cpp — `pipetrain tokenize` and `pipetrain vocab`.
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/cli/args.hpp"
#include "src/cli/commands.hpp"
#include "src/formats/io.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/formats/tokenizer_json.hpp"

namespace pt {

// -----------------------------------------------------------------------------------

// Errors go to main, as every command's: one line, exit 1.
int tokenize_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--vocab", "--file"}, {"--ids"}, true);
    if (a.positional().size() > 1) throw std::runtime_error("TEXT: more than one argument (quote the text)");
    bool have_text = a.positional().size() == 1;
    if (have_text == a.has("--file")) throw std::runtime_error("TEXT / --file: give exactly one of them");
    const std::string vocab = a.required("--vocab");   // a tokenizer.json was read as a vocab.txt ("no [UNK]")
    const bool json = vocab.size() >= 5 && vocab.compare(vocab.size() - 5, 5, ".json") == 0;
    Tokenizer tok = json ? Tokenizer(vocab_from_tokenizer_json(vocab), vocab) : Tokenizer::from_file(vocab);
    std::string source = have_text ? "TEXT" : a.str("--file");
    std::vector<std::string> lines = have_text ? split_lines(a.positional()[0]) : read_lines(source);
    if (have_text && lines.empty()) lines.emplace_back();   // an empty TEXT is one empty input
    std::string out;                                        // printed only when every line succeeded
    for (size_t l = 0; l < lines.size(); ++l) {
        std::vector<std::string> tokens;
        try {
            tokens = tok.tokenize(lines[l]);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(source + " line " + std::to_string(l + 1) + ": " + e.what());
        }
        std::vector<int32_t> token_ids = tok.convert_tokens_to_ids(tokens);
        for (size_t k = 0; k < tokens.size(); ++k) {
            if (k) out += ' ';
            out += a.has("--ids") ? std::to_string(token_ids[k]) : tokens[k];
        }
        out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);   // a failed write is said by main (stdout_written)
    return 0;
}

int vocab_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--data", "--out", "--size"});
    std::string data = a.required("--data"), out_path = a.required("--out");
    std::error_code ec;
    if (std::filesystem::equivalent(data, out_path, ec))
        throw std::runtime_error("--out: " + out_path + " is the --data file; it would be overwritten");
    // 8000 is enough for the Chinese poems of the labs with room for words.
    size_t size = size_t(a.integer("--size", 8000, 5, 10000000));
    std::vector<std::string> vocab = build_vocab_file(data, size);
    std::string text;
    for (const std::string& t : vocab) text += t + '\n';
    write_file_atomic(out_path, text);
    std::fprintf(stderr, "wrote %zu tokens to %s\n", vocab.size(), out_path.c_str());
    return 0;
}

}  // namespace pt
