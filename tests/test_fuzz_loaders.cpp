// Loader fuzzing: deterministic mutations of every text/binary input a user hands us (config.json,
// vocab.txt, inputs.safetensors, classification TSV, tokenizer text). Each parse either succeeds
// or throws std::runtime_error (a one-line message) — never a crash, never another exception.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <random>

#include "src/formats/config_json.hpp"
#include "src/formats/corpus.hpp"
#include "src/formats/io.hpp"
#include "src/formats/safetensors.hpp"
#include "src/formats/tokenizer.hpp"
#include "tests/cli_util.hpp"

using namespace pt;

namespace {

std::string mutate(std::string s, std::mt19937& rng) {
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); e++) {
        size_t at = rng() % s.size();
        switch (rng() % 5) {
            case 0: s[at] = char(rng()); break;                                // random byte
            case 1: s.erase(at, 1 + rng() % 8); break;                          // deletion
            case 2: s.insert(at, std::string(1 + rng() % 4, char(rng()))); break;   // insertion
            case 3: s.resize(at); break;                                       // truncation
            case 4: s[at] = "{}[]\",:0-9\t\n"[rng() % 12]; break;              // structural character
        }
    }
    return s;
}

// Runs `parse` on `trials` mutations of `original`; counts the outcomes.
void fuzz(const std::string& what, const std::string& original, int trials,
          const std::function<void(const std::string&)>& parse) {
    std::mt19937 rng(1234);
    int ok = 0, rejected = 0;
    for (int i = 0; i < trials; i++) {
        std::string input = mutate(original, rng);
        try {
            parse(input);
            ok++;
        } catch (const std::runtime_error& e) {
            std::string msg = e.what();
            CHECK(msg.find('\n') == std::string::npos);   // one line
            rejected++;
        } catch (const std::exception& e) {
            FAIL(what << ": mutation " << i << " threw a non-runtime_error: " << e.what());
        }
    }
    MESSAGE(what << ": " << ok << " accepted, " << rejected << " rejected");
    CHECK(rejected > 0);   // the mutations do reach the checks
}

std::string write_temp(const std::string& name, const std::string& bytes) {
    static std::string dir = test::temp_dir("fuzz");
    std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
}

}  // namespace

TEST_CASE("config.json mutations") {
    fuzz("config.json", read_file(test::fixture("ernie/nano-like/config.json")), 3000,
         [](const std::string& text) { check_config(config_from_json_string(text, "config.json"), "config.json"); });
}

TEST_CASE("vocab.txt mutations") {
    fuzz("vocab.txt", read_file(test::fixture("tokenizer/vocab.txt")), 300, [](const std::string& text) {
        Tokenizer tok(split_lines(text), "vocab.txt");
        tok.encode("今天天气很好, Hello WORLD ##x [MASK]");
    });
}

TEST_CASE("tokenizer input mutations (invalid UTF-8 included)") {
    Tokenizer tok = Tokenizer::from_file(test::fixture("tokenizer/vocab.txt"));
    fuzz("tokenizer text", read_file(test::fixture("tokenizer/input.txt")).substr(0, 2000), 2000,
         [&](const std::string& text) { tok.encode(text); });
}

TEST_CASE("inputs.safetensors mutations") {
    std::string original = read_file(test::fixture("ernie/nano-like/inputs.safetensors"));
    fuzz("inputs.safetensors", original, 1500, [](const std::string& bytes) {
        load_inputs(write_temp("inputs.safetensors", bytes), Objective::mlm);
    });
}

TEST_CASE("classification TSV mutations") {
    Tokenizer tok = Tokenizer::from_file(test::fixture("tokenizer/vocab.txt"));
    fuzz("train.tsv", read_file(test::fixture("classify/train.tsv")), 500, [&](const std::string& text) {
        load_tsv(write_temp("train.tsv", text), tok, 32, 2);
    });
}

// ---- findings of the libFuzzer targets (tests/fuzz/, scripts/fuzz.sh), each with its reproducer ----

TEST_CASE("fuzz finding: config.json floats beyond float32 range are refused") {
    // fuzz_config: "layer_norm_eps": 3.5e38 became inf in the float, passed check(), and a saved
    // checkpoint then held "layer_norm_eps": null, which does not load. (The conversion itself is
    // undefined behaviour above FLT_MAX.)
    const std::string original = read_file(test::fixture("ernie/nano-like/config.json"));
    auto with = [&](const std::string& from, const std::string& to) {
        std::string text = original;
        REQUIRE(text.find(from) != std::string::npos);
        return text.replace(text.find(from), from.size(), to);
    };
    for (const char* eps : {"3.5e38", "1e300", "-3.5e38"}) {
        std::string text = with("\"layer_norm_eps\": 1e-12", std::string("\"layer_norm_eps\": ") + eps);
        CHECK_THROWS_WITH_AS(config_from_json_string(text, "config.json"),
                             doctest::Contains("config.json: \"layer_norm_eps\""), std::runtime_error);
    }
    CHECK_THROWS_WITH_AS(config_from_json_string(with("\"hidden_dropout_prob\": 0.1", "\"hidden_dropout_prob\": 1e39"),
                                                       "config.json"),
                         doctest::Contains("out of range"), std::runtime_error);
    // The largest float is a value, and what is saved reads back the same.
    ModelConfig c = config_from_json_string(with("\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": 3.4e38"), "config.json");
    CHECK(c.layer_norm_eps == 3.4e38f);
    CHECK(config_to_json(config_from_json_string(config_to_json(c), "saved")) == config_to_json(c));
}

TEST_CASE("fuzz finding: --inputs with a dimension beyond 32 bits is refused") {
    // fuzz_inputs: input_ids and labels of shape [2^31, 0] (no bytes at all) gave a Batch with
    // B = -2^31, which breaks "every array is B*T long"; the trainer then blamed the labels.
    for (std::vector<int64_t> shape : {std::vector<int64_t>{int64_t(1) << 31, 0}, {0, int64_t(1) << 32}}) {
        st::Writer w;
        w.add_i64("input_ids", shape, nullptr);
        w.add_i64("labels", shape, nullptr);
        std::string path = write_temp("huge_dims.safetensors", "");
        w.write(path);
        CHECK_THROWS_WITH_AS(load_inputs(path, Objective::mlm), doctest::Contains("32 bits"), std::runtime_error);
    }
}

TEST_CASE("fuzz finding: config.json num_labels is at most 2^20, as --labels") {
    // fuzz_config (a timeout): {"init_args": [{"num_labels": 218406, ...}]} was accepted, and saving it
    // wrote id2label and label2id with 218406 entries each (12 MB). check() bounded num_labels only
    // by num_labels × hidden_size < 2^31: 2^31 labels of hidden size 1 passed, and their config.json
    // (~120 GB) could never be written.
    const std::string shape = "\"vocab_size\": 16, \"hidden_size\": 1, \"num_hidden_layers\": 1, \"num_attention_heads\": 1, "
                              "\"intermediate_size\": 4, \"max_position_embeddings\": 8, \"type_vocab_size\": 2, "
                              "\"hidden_act\": \"relu\", \"use_task_id\": false";
    CHECK(config_from_json_string("{" + shape + ", \"num_labels\": 1048576}", "config.json").num_labels == 1 << 20);
    for (const char* n : {"1048577", "2147483647"})
        CHECK_THROWS_WITH_AS(config_from_json_string("{" + shape + ", \"num_labels\": " + n + "}", "config.json"),
                             doctest::Contains("num_labels"), std::runtime_error);
}

TEST_CASE("fuzz finding: --inputs with an empty batch is refused") {
    // fuzz_inputs (a slow unit): input_ids of shape [2144783648, 0] hold no byte and fit in 32 bits;
    // --objective causal then set targets row by row, 2^31 empty rows (12 s under ASan), for a
    // batch the trainer refuses anyway ("no target").
    for (std::vector<int64_t> shape : {std::vector<int64_t>{2144783648, 0}, {0, 5}, {3, 0}}) {
        st::Writer w;
        w.add_i64("input_ids", shape, nullptr);
        std::string path = write_temp("empty.safetensors", "");
        w.write(path);
        CHECK_THROWS_WITH_AS(load_inputs(path, Objective::causal), doctest::Contains("at least 1"), std::runtime_error);
    }
}

TEST_CASE("fuzz finding: a config.json value with a newline gives a one-line error") {
    // "hidden_act": "ge\nlu" was quoted into the error as it was, a message of two lines. Found by
    // reading check() after fuzz_trainer_state's finding of the same kind (a key with a newline);
    // fuzz_config had not produced it in 2 M runs.
    std::string text = read_file(test::fixture("ernie/nano-like/config.json"));
    text.replace(text.find("\"gelu\""), 6, "\"ge\\nlu\"");
    try {
        config_from_json_string(text, "config.json");
        FAIL("accepted");
    } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()).find("hidden_act") != std::string::npos);
        CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
}
