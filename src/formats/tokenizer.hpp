// tokenizer.hpp — the ERNIE/BERT tokenizer: BasicTokenizer (do_lower_case) + WordPiece over a
// vocab.txt, matching the PaddleNLP ErnieTokenizer / Hugging Face slow BertTokenizer id for id.
// Also a small vocabulary builder and the `pipetrain tokenize` / `pipetrain vocab` commands.
//
// Not here: fast (Rust) tokenizer quirks, NFKC, byte-level BPE, offsets mapping.
//
// The algorithm, steps 0-6, is in src/ernie.hpp (tests/fixtures/tokenizer/README.md has the long
// version). Input is UTF-8; invalid UTF-8 is rejected, never repaired: tokenize() throws
// std::runtime_error "invalid UTF-8 at byte N (...)": N is the 0-based offset where the bad sequence starts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/ernie.hpp"   // the rules: basic_tokenize, wordpiece, is_cjk

namespace pt {

class Tokenizer {
  public:
    // vocab.txt: token i is line i (LF, CR LF or CR end a line, as in Python's text mode; a
    // `token<TAB>id` line is read as `token`);
    // a token that appears twice gets the id of its later line. [UNK] must be present.
    static Tokenizer from_file(const std::string& vocab_path);
    Tokenizer(const std::vector<std::string>& vocab_lines, const std::string& source_name);

    std::vector<std::string> tokenize(std::string_view utf8) const;  // steps 0-6, no [CLS]/[SEP]
    // Unknown tokens map to [UNK], as in Hugging Face.
    std::vector<int32_t> convert_tokens_to_ids(const std::vector<std::string>& tokens) const;
    std::vector<int32_t> encode(std::string_view utf8) const;  // tokenize + ids

    struct Encoded {
        std::vector<int32_t> input_ids, token_type_ids;
    };
    // [CLS] A [SEP] (B [SEP]) with token types 0 for the first part, 1 for B [SEP]. An empty b
    // means a single sequence. Longest-first truncation to max_len (ties cut B, as HF does).
    Encoded encode_pair(std::string_view a, std::string_view b, int max_len) const;

    int32_t id(const std::string& token) const;  // throws if absent
    const std::string& token(int32_t id) const;  // throws if out of range
    int32_t pad_id() const { return id("[PAD]"); }
    int32_t cls_id() const { return id("[CLS]"); }
    int32_t sep_id() const { return id("[SEP]"); }
    int32_t mask_id() const { return id("[MASK]"); }
    int32_t unk_id() const { return unk_id_; }
    size_t size() const { return id_to_token_.size(); }  // number of ids (= number of lines)

  private:
    std::string source_name_;
    std::vector<std::string> id_to_token_;  // (V,)
    std::unordered_map<std::string, int32_t> token_to_id_;
    int32_t unk_id_ = -1;
};

// An ERNIE-style vocab from a corpus: [PAD] [CLS] [SEP] [MASK] [UNK] at ids 0-4, then every CJK
// character, then single-character pieces (`x`, `##x`), then whole words and `##` suffixes of
// two or more characters; each group by frequency, ties by string; at most max_size tokens.
// Deterministic. Throws on invalid UTF-8, naming the 1-based line.
std::vector<std::string> build_vocab(const std::vector<std::string>& lines, size_t max_size);
// build_vocab over the lines of a file; errors name it ("F line 3: ..."), and a file without a
// single word is an error too.
std::vector<std::string> build_vocab_file(const std::string& path, size_t max_size);

}  // namespace pt
