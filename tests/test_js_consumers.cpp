// Independent consumers of what pipetrain writes (issue #32 §3): transformers.js (npm
// @huggingface/transformers, pinned in tests/js/package-lock.json and installed by scripts/setup.sh
// with `npm ci --ignore-scripts`) reads the tokenizer.json pipetrain writes. Skipped, saying so,
// where node or the npm packages are missing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "src/formats/io.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/formats/tokenizer_json.hpp"

namespace fs = std::filesystem;
using test::Run;

namespace {

const std::string kJs = std::string(PT_SOURCE_DIR) + "/tests/js";
const std::string kInput = test::fixture("tokenizer/input.txt");

// Lines of tests/fixtures/tokenizer/input.txt where transformers.js 4.3.2 is known to give other
// ids than pipetrain (and Hugging Face's Rust tokenizers), and why. Any other difference fails,
// and so does a known one that no longer differs (the list would be stale).
const std::map<int, std::string> kKnown = {
    {105, "JavaScript's toLowerCase applies Unicode's final-sigma rule (a word-final Σ becomes ς); pipetrain and "
          "Hugging Face's tokenizers lower each character alone (σ)"},
    {153, "transformers.js does not count CJK Extension B (U+20000 and up) as CJK: 𠀀𠀁 stays one word, one [UNK]; "
          "pipetrain and Hugging Face's tokenizers split them into two tokens"},
};

// A model directory holding the tokenizer files pipetrain writes for the fixture vocabulary,
// edited by `edit` (to plant a mistake).
std::string tokenizer_dir(const std::string& name, void (*edit)(nlohmann::json&) = nullptr) {
    pt::Tokenizer vocab = pt::Tokenizer::from_file(test::fixture("tokenizer/vocab.txt"));
    std::vector<std::string> lines;
    for (size_t i = 0; i < vocab.size(); i++) lines.push_back(vocab.token(int32_t(i)));
    pt::TokenizerFiles f = pt::tokenizer_files(lines, 512);
    if (edit) {
        nlohmann::json j = nlohmann::json::parse(f.tokenizer_json);
        edit(j);
        f.tokenizer_json = j.dump();
    }
    std::string dir = test::temp_dir(name) + "/model";
    fs::create_directories(dir);
    pt::write_file_atomic(dir + "/tokenizer.json", f.tokenizer_json);
    pt::write_file_atomic(dir + "/tokenizer_config.json", f.tokenizer_config_json);
    pt::write_file_atomic(dir + "/special_tokens_map.json", f.special_tokens_map_json);
    return dir;
}

std::vector<std::string> lines_of(const std::string& text) { return pt::split_lines(text); }

// Line numbers (1-based) where transformers.js's ids differ from `pipetrain tokenize --ids`.
std::vector<int> differing_lines(const std::string& dir, std::string* report) {
    Run js = test::run_command("cd " + kJs + " && node tokenize.mjs " + dir + " " + kInput);
    REQUIRE_MESSAGE(js.code == 0, js.out);
    Run ours = test::run_cli("tokenize --vocab " + test::fixture("tokenizer/vocab.txt") + " --ids --file " + kInput);
    REQUIRE_MESSAGE(ours.code == 0, ours.out);
    std::vector<std::string> a = lines_of(ours.out), b = lines_of(js.out), text = pt::read_lines(kInput);
    REQUIRE(a.size() == text.size());
    REQUIRE(b.size() == text.size());
    std::vector<int> differ;
    for (size_t i = 0; i < text.size(); i++)
        if (a[i] != b[i]) {
            differ.push_back(int(i) + 1);
            *report += "line " + std::to_string(i + 1) + " (" + pt::printable(text[i]) + "): pipetrain " + a[i] +
                       " | transformers.js " + b[i] + "\n";
        }
    return differ;
}

}  // namespace

TEST_CASE("transformers.js reads pipetrain's tokenizer.json: the same ids on every fixture line but the known ones") {
    std::string report;
    std::vector<int> differ = differing_lines(tokenizer_dir("js_tok"), &report);
    INFO(report);
    for (int line : differ) {
        CAPTURE(line);
        CHECK_MESSAGE(kKnown.count(line), "a difference that is not a known transformers.js departure");
    }
    for (const auto& [line, why] : kKnown) {
        CAPTURE(line);
        CHECK_MESSAGE(std::find(differ.begin(), differ.end(), line) != differ.end(),
                      "a known departure no longer differs: remove it from kKnown (" << why << ")");
    }
    const size_t total = pt::read_lines(kInput).size(), same = total - differ.size();
    MESSAGE(same << " of " << total << " fixture lines id for id; known departures: " << differ.size());
}

TEST_CASE("planted wrong, the check fails: a tokenizer.json that keeps case, one whose ids are shifted") {
    std::string report;
    auto keeps_case = [](nlohmann::json& j) { j["normalizer"]["lowercase"] = false; };
    std::vector<int> differ = differing_lines(tokenizer_dir("js_tok_case", keeps_case), &report);
    CHECK(differ.size() > kKnown.size() + 3);
    report.clear();
    auto shifted = [](nlohmann::json& j) {   // every id from 1000 on one too high
        for (auto& entry : j["model"]["vocab"].items())
            if (entry.value().get<int>() >= 1000) entry.value() = entry.value().get<int>() + 1;
    };
    differ = differing_lines(tokenizer_dir("js_tok_shift", shifted), &report);
    CHECK(differ.size() > kKnown.size());
}

int main(int argc, char** argv) {
    if (std::system("node --version >/dev/null 2>&1") != 0) {
        std::printf("skipped: node is not installed (apt-get install nodejs npm, then scripts/setup.sh)\n");
        return 77;
    }
    if (!fs::exists(kJs + "/node_modules/@huggingface/transformers/package.json")) {
        std::printf("skipped: tests/js/node_modules is not installed (scripts/setup.sh runs npm ci --ignore-scripts there)\n");
        return 77;
    }
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
