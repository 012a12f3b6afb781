#include "src/formats/tokenizer_json.hpp"

#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "src/ernie.hpp"   // is_special_token: the tokens the tokenizer keeps whole
#include "src/formats/io.hpp"
#include "src/formats/json.hpp"

namespace pt {

namespace {
using ojson = nlohmann::ordered_json;   // keys in the order Hugging Face writes them

const char* const kSpecials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

ojson special(const std::string& token, int type) { return {{"SpecialToken", {{"id", token}, {"type_id", type}}}}; }
ojson sequence(const char* which, int type) { return {{"Sequence", {{"id", which}, {"type_id", type}}}}; }

// token -> id, the later line winning; ids in line order. Each kept token is appended to the
// ordered map's vector directly: its operator[] searches the keys one by one, which made a
// 40,000-token vocabulary take 1.9 s a save (quadratic); here every token is new by construction.
std::map<std::string, int> ids_of(const std::vector<std::string>& lines, ojson& vocab) {
    std::map<std::string, int> id;
    for (size_t i = 0; i < lines.size(); i++) id[lines[i].substr(0, lines[i].find('\t'))] = int(i);
    ojson::object_t& entries = vocab.get_ref<ojson::object_t&>();   // (token, id) pairs in order
    for (size_t i = 0; i < lines.size(); i++) {
        std::string token = lines[i].substr(0, lines[i].find('\t'));
        if (id[token] == int(i)) entries.ojson::object_t::Container::emplace_back(std::move(token), int(i));
    }
    return id;
}

// What pipetrain's tokenizer does: BERT's basic tokenizer (control characters dropped, CJK
// characters split off, lowercase, accents stripped), then WordPiece with "##" and at most 100
// characters a word, [UNK] for the rest. A tokenizer.json that says otherwise would give other ids
// than Hugging Face's for the same text: refused, naming the setting.
void check_followable(const std::string& path, const nlohmann::json& j, const nlohmann::json& model) {
    using json = nlohmann::json;
    const json& norm = j.value("normalizer", json());
    // Another normalizer (or none: no lowercasing, no CJK split) or pre-tokenizer gives Hugging
    // Face other ids than pipetrain's for the same text.
    auto type_of = [](const json& step) { return step.is_object() ? step.value("type", json()).dump() : step.dump(); };
    if (!norm.is_object() || norm.value("type", json()) != "BertNormalizer")
        fail(path, "its normalizer is " + type_of(norm) + ", not BertNormalizer: pipetrain's tokenizer is BERT's (lowercase, "
                   "accents stripped, CJK characters split)");
    const json& pre = j.value("pre_tokenizer", json());
    if (!pre.is_object() || pre.value("type", json()) != "BertPreTokenizer")
        fail(path, "its pre_tokenizer is " + type_of(pre) + ", not BertPreTokenizer: pipetrain's tokenizer splits words as BERT's");
    if (norm.value("lowercase", json(true)) == false)
        fail(path, "its normalizer keeps case (\"lowercase\": false); pipetrain's tokenizer lowercases (uncased models only)");
    for (const std::string key : {"clean_text", "handle_chinese_chars", "strip_accents"})
        if (norm.value(key, json()) == false)
            fail(path, "its normalizer has \"" + key + "\": false; pipetrain's tokenizer does it, as BERT's uncased ones do");
    const std::pair<std::string, json> wordpiece[] = {
        {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"}, {"max_input_chars_per_word", 100}};
    for (const auto& [key, want] : wordpiece)
        if (model.contains(key) && model[key] != want)
            fail(path, "its WordPiece model has \"" + key + "\": " + model[key].dump() + "; pipetrain's tokenizer uses " +
                           want.dump());
}

// Hugging Face keeps each of tokenizer.json's added tokens whole wherever it appears in a text;
// pipetrain's tokenizer keeps [PAD] [UNK] [CLS] [SEP] [MASK] whole, at their vocab ids. Another
// added token (`add_tokens`, often with an id past the vocab) would be split by pipetrain, giving
// other ids for the same text: refused, naming it. (A file without "added_tokens", which
// save_pretrained always writes, is taken as it is.)
void check_added_tokens(const std::string& path, const nlohmann::json& j, const std::map<int64_t, std::string>& by_id) {
    using json = nlohmann::json;
    if (!j.contains("added_tokens")) return;
    if (!j["added_tokens"].is_array()) fail(path, "\"added_tokens\" must be an array");
    std::set<std::string> added;
    for (const json& t : j["added_tokens"]) {
        const json content = t.is_object() ? t.value("content", json()) : json(), id = t.is_object() ? t.value("id", json()) : json();
        if (!content.is_string() || !id.is_number_integer())
            fail(path, "added token " + t.dump() + " has no \"content\" string and \"id\" number");
        const std::string token = content.get<std::string>();
        if (!is_special_token(token))
            fail(path, "added token " + content.dump() + " (id " + id.dump() + ") is not one of [PAD] [UNK] [CLS] [SEP] [MASK], "
                       "the only tokens pipetrain's tokenizer keeps whole (Hugging Face's would keep it whole: other ids)");
        auto in_vocab = by_id.find(id.get<int64_t>());
        if (in_vocab == by_id.end() || in_vocab->second != token)
            fail(path, "added token " + content.dump() + " has id " + id.dump() + ", which its vocab gives " +
                           (in_vocab == by_id.end() ? std::string("no token") : "to " + json(in_vocab->second).dump()));
        added.insert(token);
    }
    for (const auto& [i, token] : by_id)   // the other way: a special Hugging Face would split
        if (is_special_token(token) && !added.count(token))
            fail(path, "its vocab holds " + token + " but \"added_tokens\" does not (Hugging Face would split " + token +
                           " in a text; pipetrain's tokenizer keeps it whole)");
}

ojson post_processor(const std::map<std::string, int>& id) {
    ojson p = {{"type", "TemplateProcessing"},
               {"single", {special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0)}},
               {"pair", {special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0), sequence("B", 1), special("[SEP]", 1)}},
               {"special_tokens", ojson::object()}};
    for (const char* t : {"[CLS]", "[SEP]"})
        if (id.count(t)) p["special_tokens"][t] = {{"id", t}, {"ids", {id.at(t)}}, {"tokens", {t}}};
    return p;
}
}  // namespace

TokenizerFiles tokenizer_files(const std::vector<std::string>& vocab_lines, int model_max_length) {
    ojson vocab = ojson::object();
    const std::map<std::string, int> id = ids_of(vocab_lines, vocab);
    ojson added = ojson::array(), decoder = ojson::object(), specials_map = ojson::object();
    std::map<int, std::string> specials;   // by id, as save_pretrained lists them
    for (const char* t : kSpecials)
        if (id.count(t)) specials[id.at(t)] = t;
    for (const auto& [i, t] : specials) {
        ojson entry = {{"id", i},           {"content", t},   {"single_word", false}, {"lstrip", false},
                       {"rstrip", false},   {"normalized", false}, {"special", true}};
        added.push_back(entry);
        entry.erase("id");
        decoder[std::to_string(i)] = entry;
    }
    ojson tok = {{"version", "1.0"},
                 {"truncation", nullptr},
                 {"padding", nullptr},
                 {"added_tokens", added},
                 {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                                 {"strip_accents", nullptr}, {"lowercase", true}}},
                 {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
                 {"post_processor", post_processor(id)},
                 {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
                 {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                            {"max_input_chars_per_word", 100}, {"vocab", vocab}}}};
    ojson config = {{"added_tokens_decoder", decoder}, {"clean_up_tokenization_spaces", true}};
    for (const auto& [key, t] : {std::pair{"cls_token", "[CLS]"}, {"mask_token", "[MASK]"}, {"pad_token", "[PAD]"},
                                {"sep_token", "[SEP]"}, {"unk_token", "[UNK]"}})
        if (id.count(t)) config[key] = t, specials_map[key] = t;
    config["do_lower_case"] = true;
    config["model_max_length"] = model_max_length;
    config["strip_accents"] = nullptr;
    config["tokenize_chinese_chars"] = true;
    config["tokenizer_class"] = "BertTokenizer";
    return {tok.dump(2) + "\n", config.dump(2) + "\n", specials_map.dump(2) + "\n"};
}

namespace {
// id -> token of a tokenizer.json that pipetrain can follow, or fail(path, why).
std::map<int64_t, std::string> wordpiece_ids(const std::string& path) {
    using json = nlohmann::json;
    json j = parse_json(read_file(path), path);
    // value(key, json()) and ==: a key that holds another type compares unequal (value(key, "")
    // would throw the library's type_error: found by fuzz_tokenizer_json, "type": 100).
    const json* model = j.is_object() && j.contains("model") ? &j["model"] : nullptr;
    if (!model || !model->is_object() || model->value("type", json()) != "WordPiece" || !model->contains("vocab") ||
        !(*model)["vocab"].is_object())
        fail(path, "expected a WordPiece tokenizer: {\"model\": {\"type\": \"WordPiece\", \"vocab\": {token: id}}}");
    check_followable(path, j, *model);
    std::map<int64_t, std::string> by_id;
    for (const auto& [token, v] : (*model)["vocab"].items()) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (int64_t(1) << 31))
            fail(path, "vocab[\"" + token + "\"] must be an id >= 0");
        // vocab.txt, which every saved model holds, is one token a line, cut at a tab: such a token
        // would come back as two lines, or cut, and shift or change the ids after it.
        if (token.find_first_of("\n\r\t") != std::string::npos)
            fail(path, "vocab[\"" + token + "\"] holds a line break or a tab (a vocab.txt line is one token)");
        if (!by_id.emplace(v.get<int64_t>(), token).second)
            fail(path, "id " + std::to_string(v.get<int64_t>()) + " is given to both \"" + by_id[v.get<int64_t>()] +
                           "\" and \"" + token + "\"");
    }
    if (by_id.empty()) fail(path, "its vocab is empty");
    check_added_tokens(path, j, by_id);
    return by_id;
}
}  // namespace

std::vector<std::string> vocab_from_tokenizer_json(const std::string& path) {
    const std::map<int64_t, std::string> by_id = wordpiece_ids(path);
    // Gaps come from tokens repeated in a vocab.txt: a few. An id far past the count would make
    // a vocabulary of placeholders (and could ask for gigabytes).
    if (uint64_t(by_id.rbegin()->first) >= 2 * by_id.size() + 16)
        fail(path, "its ids run to " + std::to_string(by_id.rbegin()->first) + " for " + std::to_string(by_id.size()) +
                       " tokens (expected ids 0 to " + std::to_string(by_id.size() - 1) + ", a few gaps at most)");
    std::vector<std::string> lines(size_t(by_id.rbegin()->first) + 1);
    for (size_t i = 0; i < lines.size(); i++) lines[i] = "[unused" + std::to_string(i) + "]";
    for (const auto& [i, token] : by_id) lines[size_t(i)] = token;
    return lines;
}

void check_tokenizer_files(const std::string& dir, const std::vector<std::string>& vocab_lines, const std::string& vocab_path) {
    using json = nlohmann::json;
    const std::string config = dir + "/tokenizer_config.json", tokenizer = dir + "/tokenizer.json";
    if (std::filesystem::exists(config)) {   // read_file refuses a FIFO or a device, naming it
        const json c = parse_json(read_file(config), config);
        for (const char* key : {"do_lower_case", "tokenize_chinese_chars", "strip_accents"})
            if (c.is_object() && c.value(key, json()) == false)
                fail(config, std::string("\"") + key + "\": false; pipetrain's tokenizer is BERT's uncased one (lowercase, "
                                                   "accents stripped, CJK characters split)");
    }
    if (vocab_path == tokenizer || !std::filesystem::exists(tokenizer)) return;
    ojson unused = ojson::object();
    const std::map<std::string, int> vocab = ids_of(vocab_lines, unused);   // token -> its last line
    const std::map<int64_t, std::string> by_id = wordpiece_ids(tokenizer);
    if (by_id.size() != vocab.size())
        fail(tokenizer, "holds " + std::to_string(by_id.size()) + " tokens, " + vocab_path + " " + std::to_string(vocab.size()) +
                            ": transformers' fast tokenizer reads this file, its slow one and pipetrain " + vocab_path);
    for (const auto& [id, token] : by_id) {
        auto it = vocab.find(token);
        if (it == vocab.end() || it->second != id)
            fail(tokenizer, "gives \"" + token + "\" the id " + std::to_string(id) + ", " + vocab_path + " " +
                                (it == vocab.end() ? std::string("has no such token") : std::to_string(it->second)));
    }
}

}  // namespace pt
