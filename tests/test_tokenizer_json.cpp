// tokenizer.json, tokenizer_config.json and special_tokens_map.json (issue #32 §1): written beside
// every vocab.txt as BertTokenizerFast.save_pretrained writes them, and read back where a model
// directory has no vocab.txt. The consumers themselves (transformers.js, Python tokenizers) are
// checked elsewhere; here the structure, the ids, and the round trip through pipetrain's reader.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "src/formats/io.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/formats/tokenizer_json.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using test::Run;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
    std::string path = test::temp_dir("tokjson") + "/" + name;
    pt::write_file_atomic(path, text);
    return path;
}

// The tokenizer fixture's vocab.txt as the tokenizer.json pipetrain writes for it: its path.
std::string fixture_tokenizer_json() {
    pt::Tokenizer direct = pt::Tokenizer::from_file(test::fixture("tokenizer/vocab.txt"));
    std::vector<std::string> lines;
    for (size_t i = 0; i < direct.size(); i++) lines.push_back(direct.token(int32_t(i)));
    return write_temp("tokenizer.json", pt::tokenizer_files(lines, 512).tokenizer_json);
}

// A tokenizer.json text with BERT's normalizer and pre-tokenizer where it names none.
std::string bert(std::string text) {
    for (const char* step : {R"("pre_tokenizer": {"type": "BertPreTokenizer"}, )", R"("normalizer": {"type": "BertNormalizer"}, )"})
        if (text.find(std::string(step).substr(0, 14)) == std::string::npos) text.insert(text.find('{') + 1, step);
    return text;
}

std::string error_loading(const std::string& text) {
    return test::error_of([&] { pt::vocab_from_tokenizer_json(write_temp("tokenizer.json", bert(text))); });
}

}  // namespace

TEST_CASE("tokenizer.json: BertNormalizer, BertPreTokenizer, WordPiece, [CLS] A [SEP], as save_pretrained writes it") {
    const std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "床", "##光", "a\t7"};
    pt::TokenizerFiles f = pt::tokenizer_files(vocab, 512);
    json t = json::parse(f.tokenizer_json);
    CHECK(t["version"] == "1.0");
    CHECK(t["normalizer"] == json::parse(R"({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                                              "strip_accents": null, "lowercase": true})"));
    CHECK(t["pre_tokenizer"] == json::parse(R"({"type": "BertPreTokenizer"})"));
    CHECK(t["decoder"] == json::parse(R"({"type": "WordPiece", "prefix": "##", "cleanup": true})"));
    CHECK(t["model"]["type"] == "WordPiece");
    CHECK(t["model"]["unk_token"] == "[UNK]");
    CHECK(t["model"]["continuing_subword_prefix"] == "##");
    CHECK(t["model"]["max_input_chars_per_word"] == 100);
    CHECK(t["model"]["vocab"] == json::parse(R"({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4,
                                                 "床": 5, "##光": 6, "a": 7})"));   // ERNIE's `token<TAB>id`: "a"
    const json& pp = t["post_processor"];
    CHECK(pp["type"] == "TemplateProcessing");
    CHECK(pp["single"] == json::parse(R"([{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}])"));
    CHECK(pp["pair"].size() == 5);
    CHECK(pp["pair"][3] == json::parse(R"({"Sequence": {"id": "B", "type_id": 1}})"));
    CHECK(pp["pair"][4] == json::parse(R"({"SpecialToken": {"id": "[SEP]", "type_id": 1}})"));
    CHECK(pp["special_tokens"]["[CLS]"]["ids"] == json::array({2}));
    CHECK(pp["special_tokens"]["[SEP]"]["ids"] == json::array({3}));
    REQUIRE(t["added_tokens"].size() == 5);
    for (int i = 0; i < 5; i++) {
        CAPTURE(i);
        CHECK(t["added_tokens"][i]["id"] == i);
        CHECK(t["added_tokens"][i]["content"] == vocab[size_t(i)]);
        CHECK(t["added_tokens"][i]["special"] == true);
        CHECK(t["added_tokens"][i]["normalized"] == false);
    }
    json c = json::parse(f.tokenizer_config_json);
    CHECK(c["do_lower_case"] == true);
    CHECK(c["tokenize_chinese_chars"] == true);
    CHECK(c["strip_accents"].is_null());
    CHECK(c["model_max_length"] == 512);
    CHECK(c["tokenizer_class"] == "BertTokenizer");
    CHECK(c["mask_token"] == "[MASK]");
    CHECK(c["added_tokens_decoder"]["4"]["content"] == "[MASK]");
    CHECK(json::parse(f.special_tokens_map_json) ==
          json::parse(R"({"cls_token": "[CLS]", "mask_token": "[MASK]", "pad_token": "[PAD]", "sep_token": "[SEP]", "unk_token": "[UNK]"})"));
}

TEST_CASE("a token repeated in vocab.txt keeps its last id; the id it loses reads back as a placeholder") {
    const std::vector<std::string> vocab = {"[PAD]", "[UNK]", "x", "y", "x"};
    json t = json::parse(pt::tokenizer_files(vocab, 64).tokenizer_json);
    CHECK(t["model"]["vocab"] == json::parse(R"({"[PAD]": 0, "[UNK]": 1, "y": 3, "x": 4})"));
    std::vector<std::string> back = pt::vocab_from_tokenizer_json(write_temp("tokenizer.json", t.dump()));
    CHECK(back == std::vector<std::string>{"[PAD]", "[UNK]", "[unused2]", "y", "x"});
    // pipetrain's tokenizer gives the same ids either way: x is 4 in both.
    CHECK(pt::Tokenizer(vocab, "vocab.txt").encode("x y") == pt::Tokenizer(back, "tokenizer.json").encode("x y"));
}

TEST_CASE("a million-token vocabulary is written in linear time, every token with its id") {
    // The ordered map's operator[] searches its keys one by one: adding the tokens through it took
    // 1.9 s at 40,000 tokens (every checkpoint of an ERNIE vocabulary) and would take ~20 minutes
    // here, past this bound and the test's own 600 s limit. Appending takes under a second.
    std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 5; i < 1000000; i++) vocab.push_back("t" + std::to_string(i));
    vocab[7] = "t999999";   // repeated: the later line keeps it
    const auto t0 = std::chrono::steady_clock::now();
    const std::string text = pt::tokenizer_files(vocab, 512).tokenizer_json;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_MESSAGE(seconds < 60, "tokenizer_files took ", seconds, " s for 1,000,000 tokens");
    const json v = json::parse(text)["model"]["vocab"];
    CHECK(v.size() == vocab.size() - 1);
    CHECK(v["[MASK]"] == 4);
    CHECK(v["t500000"] == 500000);
    CHECK(v["t999999"] == 999999);
}

TEST_CASE("the fixture vocabulary through tokenizer.json tokenizes every fixture line id for id as vocab.txt does") {
    pt::Tokenizer direct = pt::Tokenizer::from_file(test::fixture("tokenizer/vocab.txt"));
    const std::string path = fixture_tokenizer_json();
    pt::Tokenizer via_json(pt::vocab_from_tokenizer_json(path), path);
    CHECK(via_json.size() == direct.size());
    int checked = 0;
    for (const std::string& text : pt::read_lines(test::fixture("tokenizer/input.txt"))) {
        std::vector<int32_t> a, b;
        std::string err_a = test::error_of([&] { a = direct.encode(text); });
        std::string err_b = test::error_of([&] { b = via_json.encode(text); });
        CAPTURE(text);
        CHECK(err_a == err_b);
        CHECK(a == b);
        checked++;
    }
    CHECK(checked > 100);
}

TEST_CASE("a tokenizer.json pipetrain cannot follow is refused, naming the file and the reason") {
    const std::string ok_model = R"("model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1}})";
    CHECK(error_loading("{" + ok_model + "}") == "");
    CHECK(error_loading(R"({"model": {"type": "BPE", "vocab": {"a": 0}}})").find("expected a WordPiece tokenizer") != std::string::npos);
    // Keys of another type (fuzz_tokenizer_json: the JSON library's type_error escaped, not one line).
    CHECK(error_loading(R"({"model": {"type": 100, "vocab": {"a": 0}}})").find("expected a WordPiece tokenizer") != std::string::npos);
    CHECK(error_loading(R"({"normalizer": {"type": 7, "lowercase": "no"}, )" + ok_model + "}").find("its normalizer is 7, not BertNormalizer") !=
          std::string::npos);
    // No normalizer, or another one, or no BERT pre-tokenizer: Hugging Face would keep case and
    // CJK characters whole, or split words otherwise (a null normalizer was accepted).
    auto raw = [&](const std::string& text) { return test::error_of([&] { pt::vocab_from_tokenizer_json(write_temp("tokenizer.json", text)); }); };
    CHECK(raw("{" + ok_model + "}").find("its normalizer is null, not BertNormalizer") != std::string::npos);
    CHECK(raw(R"({"normalizer": null, "pre_tokenizer": {"type": "BertPreTokenizer"}, )" + ok_model + "}").find("its normalizer is null") !=
          std::string::npos);
    CHECK(raw(R"({"normalizer": {"type": "NFKC"}, "pre_tokenizer": {"type": "BertPreTokenizer"}, )" + ok_model + "}")
              .find("its normalizer is \"NFKC\", not BertNormalizer") != std::string::npos);
    CHECK(raw(R"({"normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "Whitespace"}, )" + ok_model + "}")
              .find("its pre_tokenizer is \"Whitespace\", not BertPreTokenizer") != std::string::npos);
    CHECK(raw(bert("{" + ok_model + "}")) == "");
    CHECK(error_loading(R"({"normalizer": {"type": "BertNormalizer", "lowercase": 0}, )" + ok_model + "}") == "");
    CHECK(error_loading(R"({"normalizer": {"type": "BertNormalizer", "lowercase": false}, )" + ok_model + "}")
              .find("keeps case") != std::string::npos);
    // Settings pipetrain's tokenizer does not follow: it would give other ids than Hugging Face's.
    for (const char* key : {"clean_text", "handle_chinese_chars", "strip_accents"}) {
        CAPTURE(std::string(key));
        CHECK(error_loading(std::string(R"({"normalizer": {"type": "BertNormalizer", ")") + key + R"(": false}, )" + ok_model +
                            "}")
                  .find(std::string("\"") + key + "\": false") != std::string::npos);
    }
    CHECK(error_loading(R"({"normalizer": {"type": "BertNormalizer", "strip_accents": true, "lowercase": true}, )" + ok_model +
                        "}") == "");   // what lowercase does anyway
    for (const char* setting : {R"("unk_token": "<unk>")", R"("continuing_subword_prefix": "@@")",
                                R"("max_input_chars_per_word": 200)"}) {
        CAPTURE(std::string(setting));
        CHECK(error_loading(std::string(R"({"model": {"type": "WordPiece", )") + setting + R"(, "vocab": {"[UNK]": 0}}})")
                  .find("its WordPiece model has") != std::string::npos);
    }
    CHECK(error_loading(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", )"
                        R"("max_input_chars_per_word": 100, "vocab": {"[UNK]": 0}}})") == "");
    CHECK(error_loading(R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 0}}})").find("id 0 is given to both") !=
          std::string::npos);
    CHECK(error_loading(R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": -1}}})").find("must be an id >= 0") !=
          std::string::npos);
    CHECK(error_loading(R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 2000000000}}})").find("ids run to 2000000000") !=
          std::string::npos);
    CHECK(error_loading(R"({"model": {"type": "WordPiece", "vocab": {}}})").find("vocab is empty") != std::string::npos);
    // A token vocab.txt cannot hold: a model saved from it would read back other ids (found by fuzz_tokenizer_json's
    // invariant; before, a newline in one token made the saved vocab.txt one line longer than the vocabulary).
    for (const char* bad : {"a\\nb", "a\\rb", "a\\tb"}) {
        CAPTURE(std::string(bad));
        CHECK(error_loading(std::string(R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, ")") + bad + R"(": 1}}})")
                  .find("holds a line break or a tab") != std::string::npos);
    }
    // Added tokens: Hugging Face keeps each whole in a text; pipetrain keeps only the five specials whole.
    const std::string specials_model = R"("model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "[MASK]": 1, "a": 2}})";
    auto added = [&](const std::string& list) { return error_loading(R"({"added_tokens": )" + list + ", " + specials_model + "}"); };
    CHECK(added(R"([{"id": 0, "content": "[UNK]"}, {"id": 1, "content": "[MASK]"}])") == "");
    CHECK(added(R"([{"id": 0, "content": "[UNK]"}, {"id": 1, "content": "[MASK]"}, {"id": 3, "content": "<e>"}])")
              .find("added token \"<e>\" (id 3) is not one of [PAD] [UNK] [CLS] [SEP] [MASK]") != std::string::npos);
    CHECK(added(R"([{"id": 0, "content": "[UNK]"}, {"id": 1, "content": "[MASK]"}, {"id": 2, "content": "a"}])")
              .find("added token \"a\" (id 2) is not one of") != std::string::npos);   // one in the vocab, too
    CHECK(added(R"([{"id": 0, "content": "[UNK]"}, {"id": 2, "content": "[MASK]"}])")
              .find("added token \"[MASK]\" has id 2, which its vocab gives to \"a\"") != std::string::npos);
    CHECK(added(R"([{"id": 0, "content": "[UNK]"}, {"id": 1, "content": "[MASK]"}, {"id": 7, "content": "[CLS]"}])")
              .find("has id 7, which its vocab gives no token") != std::string::npos);
    CHECK(added(R"([{"id": 0, "content": "[UNK]"}])").find("its vocab holds [MASK] but \"added_tokens\" does not") !=
          std::string::npos);
    CHECK(added(R"([{"id": "0", "content": "[UNK]"}])").find("has no \"content\" string and \"id\" number") !=
          std::string::npos);
    CHECK(added(R"([7])").find("has no \"content\" string") != std::string::npos);
    CHECK(added(R"({})").find("\"added_tokens\" must be an array") != std::string::npos);
    CHECK(error_loading("{\"model\": ").find("tokenizer.json: not valid JSON") != std::string::npos);
    const std::string no_unk = write_temp("tokenizer.json", bert(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})"));
    CHECK(test::error_of([&] { pt::Tokenizer(pt::vocab_from_tokenizer_json(no_unk), no_unk); }).find("no [UNK]") !=
          std::string::npos);
}

TEST_CASE("a trained model directory holds the tokenizer files; without vocab.txt it loads from tokenizer.json alike") {
    const std::string dir = test::temp_dir("tokjson_model"), out = dir + "/run";
    Run r = test::run_cli("train --preset tiny --data " + test::fixture("text/sample_zh.txt") +
                          " --batch 4 --seq 16 --steps 1 --save-every 1 --out " + out);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    for (const std::string& d : {out, out + "/checkpoint-1"})
        for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
            CAPTURE(d);
            CAPTURE(std::string(f));
            CHECK(fs::is_regular_file(d + "/" + f));
        }
    Run with_vocab = test::run_cli("fill-mask --model " + out + " 床前明[MASK]光");
    REQUIRE_MESSAGE(with_vocab.code == 0, with_vocab.out);
    fs::remove(out + "/vocab.txt");
    fs::remove(out + "/" + pt::kManifest);   // a Hugging Face repository: no manifest, no vocab.txt
    Run without = test::run_cli("fill-mask --model " + out + " 床前明[MASK]光");
    INFO(without.out);
    CHECK(without.code == 0);
    CHECK(without.out == with_vocab.out);
    fs::remove(out + "/tokenizer.json");
    Run none = test::run_cli("fill-mask --model " + out + " 床前明[MASK]光");
    CHECK(none.code == 1);
    CHECK(none.out.find(out + "/vocab.txt: missing (and no tokenizer.json)") != std::string::npos);
}

// Beside vocab.txt, a tokenizer.json that disagreed with it, or a tokenizer_config.json that keeps
// case, was ignored: pipetrain read vocab.txt, transformers' fast tokenizer the other file, and
// the same text got other ids. Now the directory is refused, naming the file that disagrees.
TEST_CASE("a model directory's tokenizer files must agree: tokenizer.json with vocab.txt, tokenizer_config.json's case") {
    const std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "床", "前", "明", "月", "光", "a\t9", "x", "x"};
    const std::string dir = test::temp_dir("tokfiles");
    const pt::TokenizerFiles f = pt::tokenizer_files(vocab, 512);
    auto write_all = [&](const std::string& tokenizer_json, const std::string& config_json) {
        pt::write_file_atomic(dir + "/tokenizer.json", tokenizer_json);
        pt::write_file_atomic(dir + "/tokenizer_config.json", config_json);
        std::string text;
        for (const std::string& line : vocab) text += line + "\n";
        pt::write_file_atomic(dir + "/vocab.txt", text);
    };
    auto check = [&] { return test::error_of([&] { pt::check_tokenizer_files(dir, vocab, dir + "/vocab.txt"); }); };
    write_all(f.tokenizer_json, f.tokenizer_config_json);
    CHECK(check() == "");   // what pipetrain writes agrees, a repeated token's later id included
    json t = json::parse(f.tokenizer_json);
    t["model"]["vocab"]["月"] = 7, t["model"]["vocab"]["明"] = 8;   // 月 and 明 swapped
    write_all(t.dump(), f.tokenizer_config_json);
    CHECK(check() == dir + "/tokenizer.json: gives \"月\" the id 7, " + dir + "/vocab.txt 8");
    t = json::parse(f.tokenizer_json);
    t["model"]["vocab"].erase("光");
    write_all(t.dump(), f.tokenizer_config_json);
    CHECK(check().find("tokenizer.json: holds 11 tokens, " + dir + "/vocab.txt 12") != std::string::npos);
    t = json::parse(f.tokenizer_json);
    t["normalizer"]["lowercase"] = false;
    write_all(t.dump(), f.tokenizer_config_json);
    CHECK(check().find("keeps case") != std::string::npos);
    for (const char* key : {"do_lower_case", "tokenize_chinese_chars", "strip_accents"}) {
        json c = json::parse(f.tokenizer_config_json);
        c[key] = false;
        write_all(f.tokenizer_json, c.dump());
        CAPTURE(std::string(key));
        CHECK(check() == dir + "/tokenizer_config.json: \"" + key + "\": false; pipetrain's tokenizer is BERT's uncased one "
                                 "(lowercase, accents stripped, CJK characters split)");
    }
    // Without vocab.txt, tokenizer.json is the vocabulary: nothing to compare, the config still read.
    write_all(f.tokenizer_json, f.tokenizer_config_json);
    fs::remove(dir + "/vocab.txt");
    CHECK(test::error_of([&] { pt::check_tokenizer_files(dir, pt::vocab_from_tokenizer_json(dir + "/tokenizer.json"), dir + "/tokenizer.json"); }) == "");
}

// tokenize --vocab with a tokenizer.json read it as a vocab.txt ("vocab has no [UNK] token").
TEST_CASE("tokenize --vocab takes a tokenizer.json as it takes a vocab.txt") {
    const std::string vocab = test::fixture("tokenizer/vocab.txt"), json_path = fixture_tokenizer_json();
    const std::string input = test::fixture("tokenizer/input.txt");
    Run a = test::run_cli("tokenize --vocab " + vocab + " --ids --file " + input);
    Run b = test::run_cli("tokenize --vocab " + json_path + " --ids --file " + input);
    REQUIRE_MESSAGE(b.code == 0, b.out);
    CHECK(a.out == b.out);
}
