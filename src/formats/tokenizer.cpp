// tokenizer.cpp — the vocabulary (vocab.txt, ids), the ERNIE tokenizer over it, and the vocab builder.
// The tokenizer's rules (BasicTokenizer steps 0-5, WordPiece step 6) are in src/ernie.cpp.
#include "src/formats/tokenizer.hpp"

#include "src/formats/io.hpp"
#include "src/formats/unicode.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace pt {

// ---- Tokenizer -----------------------------------------------------------------------------

Tokenizer Tokenizer::from_file(const std::string& vocab_path) {
    // Hugging Face and PaddleNLP read vocab.txt in Python's text mode, where CR LF and a lone CR
    // end a line as LF does: a vocabulary saved on Windows is the same vocabulary.
    std::string text = read_file(vocab_path), lf;
    for (size_t i = 0; i < text.size(); i++)
        if (text[i] != '\r') lf += text[i];
        else if (i + 1 == text.size() || text[i + 1] != '\n') lf += '\n';
    return Tokenizer(split_lines(lf), vocab_path);
}

Tokenizer::Tokenizer(const std::vector<std::string>& vocab_lines, const std::string& source_name)
    : source_name_(source_name) {
    id_to_token_.reserve(vocab_lines.size());
    for (size_t i = 0; i < vocab_lines.size(); ++i) {
        const std::string& line = vocab_lines[i];
        std::string token = line.substr(0, line.find('\t'));  // ERNIE's `token<TAB>id` lines
        try {
            decode_utf8(token);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(source_name + " line " + std::to_string(i + 1) + ": " + e.what());
        }
        token_to_id_[token] = int32_t(i);  // a later duplicate overwrites: last line wins
        id_to_token_.push_back(std::move(token));
    }
    auto it = token_to_id_.find("[UNK]");
    if (it == token_to_id_.end())
        throw std::runtime_error(source_name + ": vocab has no [UNK] token (expected one line '[UNK]')");
    unk_id_ = it->second;
}

std::vector<std::string> Tokenizer::tokenize(std::string_view utf8) const {
    std::vector<std::string> out;
    for (const std::string& piece : basic_tokenize(utf8)) {
        if (is_special_token(piece))
            out.push_back(piece);
        else
            wordpiece(out, piece, token_to_id_);
    }
    return out;
}

std::vector<int32_t> Tokenizer::convert_tokens_to_ids(const std::vector<std::string>& tokens) const {
    std::vector<int32_t> ids;
    ids.reserve(tokens.size());
    for (const std::string& t : tokens) {
        auto it = token_to_id_.find(t);
        ids.push_back(it == token_to_id_.end() ? unk_id_ : it->second);
    }
    return ids;
}

std::vector<int32_t> Tokenizer::encode(std::string_view utf8) const {
    return convert_tokens_to_ids(tokenize(utf8));
}

Tokenizer::Encoded Tokenizer::encode_pair(std::string_view a, std::string_view b, int max_len) const {
    std::vector<int32_t> ids_a = encode(a), ids_b = encode(b);
    bool pair = !b.empty();
    int num_special = pair ? 3 : 2;
    if (max_len < num_special)
        throw std::runtime_error("encode_pair: max_len " + std::to_string(max_len) + " leaves no room for " +
                                 std::to_string(num_special) + " special tokens");
    // Longest first: drop the last token of the longer sequence until everything fits.
    while (int(ids_a.size() + ids_b.size()) + num_special > max_len) {
        if (ids_a.size() > ids_b.size())
            ids_a.pop_back();
        else
            ids_b.pop_back();
    }
    Encoded e;
    e.input_ids.push_back(cls_id());
    e.input_ids.insert(e.input_ids.end(), ids_a.begin(), ids_a.end());
    e.input_ids.push_back(sep_id());
    e.token_type_ids.assign(e.input_ids.size(), 0);
    if (pair) {
        e.input_ids.insert(e.input_ids.end(), ids_b.begin(), ids_b.end());
        e.input_ids.push_back(sep_id());
        e.token_type_ids.resize(e.input_ids.size(), 1);
    }
    return e;
}

int32_t Tokenizer::id(const std::string& token) const {
    auto it = token_to_id_.find(token);
    if (it == token_to_id_.end())
        throw std::runtime_error(source_name_ + ": vocab has no token '" + token + "'");
    return it->second;
}

const std::string& Tokenizer::token(int32_t id) const {
    if (id < 0 || size_t(id) >= id_to_token_.size())
        throw std::runtime_error(source_name_ + ": token id " + std::to_string(id) + " is outside [0, " +
                                 std::to_string(id_to_token_.size()) + ")");
    return id_to_token_[id];
}

// ---- vocabulary builder --------------------------------------------------------------------

std::vector<std::string> build_vocab(const std::vector<std::string>& lines, size_t max_size) {
    std::vector<std::string> vocab = {"[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"};
    if (max_size < vocab.size())
        throw std::runtime_error("vocab size " + std::to_string(max_size) +
                                 " is too small (need at least 5)");
    std::map<std::string, long> cjk, chars, pieces;  // token -> count
    for (size_t l = 0; l < lines.size(); ++l) {
        std::vector<std::string> words;
        try {
            words = basic_tokenize(lines[l]);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error("line " + std::to_string(l + 1) + ": " + e.what());
        }
        for (const std::string& w : words) {
            if (is_special_token(w)) continue;
            std::u32string cps = decode_utf8(w);
            if (cps.size() == 1 && is_cjk(cps[0])) {
                ++cjk[w];
                continue;
            }
            if (cps.size() > kMaxCharsPerWord) continue;  // WordPiece turns it into [UNK] anyway
            std::vector<std::string> ch(cps.size());      // (n,) each code point as UTF-8
            for (size_t i = 0; i < cps.size(); ++i) append_utf8(ch[i], cps[i]);
            ++chars[ch[0]];
            for (size_t i = 1; i < ch.size(); ++i) ++chars["##" + ch[i]];
            if (ch.size() >= 2) ++pieces[w];
            std::string suffix;  // every suffix of two or more code points, built from the back
            for (size_t i = ch.size() - 1; i >= 1; --i) {
                suffix = ch[i] + suffix;
                if (ch.size() - i >= 2) ++pieces["##" + suffix];
            }
        }
    }
    // Each group in order of frequency, ties by string; a token is added once.
    for (const auto* group : {&cjk, &chars, &pieces}) {
        std::vector<std::pair<std::string, long>> sorted(group->begin(), group->end());
        std::stable_sort(sorted.begin(), sorted.end(),
                         [](const auto& x, const auto& y) { return x.second > y.second; });
        for (const auto& [token, count] : sorted) {
            if (vocab.size() >= max_size) return vocab;
            vocab.push_back(token);
        }
    }
    return vocab;
}

std::vector<std::string> build_vocab_file(const std::string& path, size_t max_size) {
    std::vector<std::string> lines = read_lines(path), vocab;
    try {
        vocab = build_vocab(lines, max_size);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(path + " " + e.what());   // "F line 3: invalid UTF-8 at byte 5 ..."
    }
    if (vocab.size() == 5 && max_size > 5) fail(path, "no words to build a vocabulary from");   // specials alone
    return vocab;
}

}  // namespace pt
