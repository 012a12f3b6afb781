// test_tokenizer.cpp — the ERNIE/BERT tokenizer against the independent Python goldens
// (tests/fixtures/tokenizer, see its README), targeted unit cases, invalid UTF-8, the vocab
// builder's properties and the `pipetrain tokenize` CLI.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cctype>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "src/cli/commands.hpp"
#include "src/formats/tokenizer.hpp"

namespace fs = std::filesystem;
using pt::Tokenizer;
using Tokens = std::vector<std::string>;

static const std::string kDir = std::string(PT_FIXTURES) + "/tokenizer/";

static std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot open " << path);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

// Split on 0x0A only: CR, VT, FF, U+2028... inside a line belong to it (fixture README).
static std::vector<std::string> lf_lines(const std::string& data) {
    std::vector<std::string> lines;
    size_t start = 0, end;
    while ((end = data.find('\n', start)) != std::string::npos) {
        lines.push_back(data.substr(start, end - start));
        start = end + 1;
    }
    if (start < data.size()) lines.push_back(data.substr(start));
    return lines;
}

static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + v[i];
    return s;
}

static std::string join(const std::vector<int32_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
    return s;
}

static std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::runtime_error& e) { return e.what(); }
    return "<no exception>";
}

// A test-side decoder (valid input only) so the CJK checks do not reuse the tokenizer's code.
static std::vector<char32_t> code_points(const std::string& s) {
    std::vector<char32_t> out;
    for (size_t i = 0; i < s.size();) {
        unsigned char b = s[i];
        size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        char32_t c = n == 1 ? b : b & (0xFF >> (n + 1));
        for (size_t k = 1; k < n; ++k) c = (c << 6) | (s[i + k] & 0x3F);
        out.push_back(c);
        i += n;
    }
    return out;
}

static std::string utf8_of(char32_t c) {
    std::string s;
    if (c < 0x80) return std::string(1, char(c));
    if (c < 0x800) return {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
    if (c < 0x10000) return {char(0xE0 | (c >> 12)), char(0x80 | ((c >> 6) & 0x3F)), char(0x80 | (c & 0x3F))};
    return {char(0xF0 | (c >> 18)), char(0x80 | ((c >> 12) & 0x3F)), char(0x80 | ((c >> 6) & 0x3F)),
            char(0x80 | (c & 0x3F))};
}

// Unified ideographs only (no compatibility ones, which NFD maps to other code points).
static bool is_unified_cjk(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2CEAF);
}

TEST_CASE("goldens: every line of input.txt gives tokens.txt and ids.txt exactly") {
    Tokenizer tok = Tokenizer::from_file(kDir + "vocab.txt");
    CHECK(tok.size() == 3587);
    std::vector<std::string> inputs = lf_lines(read_bytes(kDir + "input.txt"));
    std::vector<std::string> tokens = lf_lines(read_bytes(kDir + "tokens.txt"));
    std::vector<std::string> ids = lf_lines(read_bytes(kDir + "ids.txt"));
    // An input yielding no tokens is an empty line; lf_lines keeps interior empty lines.
    REQUIRE(inputs.size() == 168);
    REQUIRE(tokens.size() == inputs.size());
    REQUIRE(ids.size() == inputs.size());
    int mismatches = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        INFO("input.txt line " << i + 1 << ": " << inputs[i]);
        Tokens t = tok.tokenize(inputs[i]);
        CHECK(join(t) == tokens[i]);
        CHECK(join(tok.convert_tokens_to_ids(t)) == ids[i]);
        CHECK(join(tok.encode(inputs[i])) == ids[i]);
        mismatches += join(t) != tokens[i];
    }
    CHECK(mismatches == 0);
}

static fs::path temp_dir() {
    fs::path dir = fs::temp_directory_path() / ("pt_test_tokenizer_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir;
}

TEST_CASE("vocab rules: line = id, last duplicate wins, token<TAB>id, [UNK] by name") {
    Tokenizer tok({"[PAD]", "a", "model\t7", "b", "a", "[UNK]", "##s"}, "mem");
    CHECK(tok.size() == 7);
    CHECK(tok.id("a") == 4);
    CHECK(tok.token(1) == "a");
    CHECK(tok.id("model") == 2);
    CHECK(tok.token(2) == "model");
    CHECK(tok.unk_id() == 5);
    CHECK(tok.tokenize("models") == Tokens{"model", "##s"});
    CHECK(tok.encode("a b models zz") == std::vector<int32_t>{4, 3, 2, 6, 5});
    CHECK(tok.convert_tokens_to_ids({"nope"}) == std::vector<int32_t>{5});
    CHECK(message_of([&] { tok.id("[CLS]"); }).find("mem") != std::string::npos);
    CHECK(message_of([&] { tok.token(7); }).find("outside") != std::string::npos);

    Tokenizer golden = Tokenizer::from_file(kDir + "vocab.txt");
    CHECK(golden.id("，") == 3585);  // U+FF0C is on lines 37 and 3586
    CHECK(golden.id("model") == 121);
    CHECK(golden.unk_id() == 3586);
    CHECK(golden.pad_id() == 0);
    CHECK(golden.cls_id() == 1);
    CHECK(golden.sep_id() == 2);
    CHECK(golden.mask_id() == 3);

    // Python's text mode, which Hugging Face and PaddleNLP read vocab.txt in, ends a line at CR LF
    // and at a lone CR as at LF: a vocabulary saved on Windows has the same ids.
    fs::path dir = temp_dir();
    std::ofstream((dir / "crlf.txt").string(), std::ios::binary) << "[PAD]\r\n[UNK]\r\na\rb\r\n##s\r";
    Tokenizer crlf = Tokenizer::from_file((dir / "crlf.txt").string());
    CHECK(crlf.size() == 5);
    CHECK(crlf.unk_id() == 1);
    CHECK(crlf.id("a") == 2);
    CHECK(crlf.id("b") == 3);
    CHECK(crlf.token(4) == "##s");
    fs::remove_all(dir);
}

TEST_CASE("a vocab without [UNK] is a one-line error naming the file") {
    std::string msg = message_of([] { Tokenizer::from_file(kDir + "vocab_no_unk.txt"); });
    CHECK(msg.find("vocab_no_unk.txt") != std::string::npos);
    CHECK(msg.find("[UNK]") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    msg = message_of([] { Tokenizer::from_file(kDir + "missing_vocab.txt"); });
    CHECK(msg.find("missing_vocab.txt") != std::string::npos);
}

TEST_CASE("basic tokenizer: case, accents, CJK, punctuation, cleaning") {
    Tokenizer tok({"[UNK]", "[MASK]", "cafe", "angstrom", "οδοσ", "οδος", "中", "文", "ab", "i", "[",   "]",
                   "mask",  "x",      "y",    "ᄋ",       "##ᅡ", "##ᆫ", "안", ",",  "$",  "5", "abcd"},
                  "mem");
    CHECK(tok.tokenize("Café ÅNGSTRÖM") == Tokens{"cafe", "angstrom"});
    CHECK(tok.tokenize("Cafe\xCC\x81") == Tokens{"cafe"});  // e + combining acute
    CHECK(tok.tokenize("ΟΔΟΣ") == Tokens{"οδοσ"});          // each code point alone: Σ -> σ, never ς
    CHECK(tok.tokenize("\xC4\xB0") == Tokens{"i"});         // İ -> i + U+0307, the mark is dropped
    CHECK(tok.tokenize("中文ab中") == Tokens{"中", "文", "ab", "中"});
    CHECK(tok.tokenize("안") == Tokens{"ᄋ", "##ᅡ", "##ᆫ"});  // NFD: syllable -> jamo
    CHECK(tok.tokenize("x,$5") == Tokens{"x", ",", "$", "5"});
    CHECK(tok.tokenize("ab\xE2\x80\x8B"
                       "cd") == Tokens{"abcd"});  // ZWSP is dropped, not a space
    CHECK(tok.tokenize(std::string("ab\0cd", 5)) == Tokens{"abcd"});
    CHECK(tok.tokenize("x\xE3\x80\x80y\xE2\x80\xA8x\ty") == Tokens{"x", "y", "x", "y"});  // U+3000, U+2028
    CHECK(tok.tokenize("x[MASK]y") == Tokens{"x", "[MASK]", "y"});
    CHECK(tok.tokenize("[mask]") == Tokens{"[", "mask", "]"});
    CHECK(tok.tokenize(" \xCC\x81 ").empty());  // a lone combining mark disappears
    CHECK(tok.tokenize("").empty());
}

TEST_CASE("punctuation: every printable ASCII character but letters and digits is a token of its own") {
    // BERT's rule (_is_punctuation): 33-47, 58-64, 91-96, 123-126, whether or not Unicode calls
    // the character punctuation ($ + < = > ^ ` | ~ are symbols there).
    Tokenizer tok({"[UNK]", "a", "b"}, "mem");
    for (char c = 33; c <= 126; c++) {
        std::string s = std::string("a") + c + "b";
        CAPTURE(s);
        if (std::isalnum(static_cast<unsigned char>(c))) CHECK(tok.tokenize(s) == Tokens{"[UNK]"});   // one word
        else CHECK(tok.tokenize(s) == Tokens{"a", "[UNK]", "b"});
    }
}

TEST_CASE("CJK ranges: exactly the BERT ranges are split into single characters") {
    Tokenizer tok({"[UNK]", "x"}, "mem");
    // One code point from each range of the fixture README (2B820 is where HF fast differs).
    for (char32_t c :
         {0x4E00, 0x9FFF, 0x3400, 0x4DBF, 0x20000, 0x2A700, 0x2B740, 0x2B820, 0x2B91F, 0xF900, 0x2F800})
        CHECK_MESSAGE((tok.tokenize("x" + utf8_of(c) + "x") == Tokens{"x", "[UNK]", "x"}),
                      "U+" << std::hex << unsigned(c));
    // Kana, the ideographic zero, a CJK-compatibility symbol: part of the word, which becomes [UNK].
    for (char32_t c : {0x3041, 0x3007, 0x33FF, 0x2E80})
        CHECK_MESSAGE((tok.tokenize("x" + utf8_of(c) + "x") == Tokens{"[UNK]"}),
                      "U+" << std::hex << unsigned(c));
}

TEST_CASE("CJK ranges: both ends of every range are CJK, the code point just outside each is not") {
    // BERT's _is_chinese_char, written out again here: (first, last) of each range. Ext B..E touch
    // (2A700-2B73F, 2B740-2B81F, 2B820-2CEAF), so a neighbour outside one may be inside the next.
    const std::pair<char32_t, char32_t> ranges[] = {{0x4E00, 0x9FFF},   {0x3400, 0x4DBF},   {0x20000, 0x2A6DF},
                                                    {0x2A700, 0x2B73F}, {0x2B740, 0x2B81F}, {0x2B820, 0x2CEAF},
                                                    {0xF900, 0xFAFF},   {0x2F800, 0x2FA1F}};
    auto inside = [&](char32_t c) {
        for (auto [lo, hi] : ranges)
            if (c >= lo && c <= hi) return true;
        return false;
    };
    auto hex = [](char32_t c) {
        char s[16];
        std::snprintf(s, sizeof s, "U+%04X", unsigned(c));
        return std::string(s);
    };
    for (auto [lo, hi] : ranges) {
        for (char32_t c : {lo, hi}) CHECK_MESSAGE(pt::is_cjk(c), hex(c) << " is the end of a CJK range");
        for (char32_t c : {lo - 1, hi + 1})
            if (!inside(c)) CHECK_MESSAGE(!pt::is_cjk(c), hex(c) << " is just outside a CJK range");
    }
    // Through the tokenizer, at the ends that are assigned characters (cleaning drops the
    // unassigned ones, 2B73F, 2B81F, 2CEAF, FAFF and 2FA1F, before the ranges are asked), and
    // at assigned neighbours outside.
    Tokenizer tok({"[UNK]", "x"}, "mem");
    for (char32_t c : {0x4E00, 0x9FFF, 0x3400, 0x4DBF, 0x20000, 0x2A6DF, 0x2A700, 0x2B740, 0x2B820, 0xF900, 0x2F800})
        CHECK_MESSAGE((tok.tokenize("x" + utf8_of(c) + "x") == Tokens{"x", "[UNK]", "x"}), hex(c) << ": a token of its own");
    for (char32_t c : {0x4DFF, 0xA000, 0x33FF, 0x4DC0, 0xFB00})
        CHECK_MESSAGE((tok.tokenize("x" + utf8_of(c) + "x") == Tokens{"[UNK]"}), hex(c) << ": part of the word");
}

TEST_CASE("WordPiece: longest match first, whole word [UNK], 100-character limit") {
    Tokenizer tok({"[UNK]", "un", "##aff", "##able", "a", "##a", "##ab", "##b"}, "mem");
    CHECK(tok.tokenize("unaffable") == Tokens{"un", "##aff", "##able"});
    CHECK(tok.tokenize("unaffablex") == Tokens{"[UNK]"});  // ##x is missing: the whole word
    CHECK(tok.tokenize("aab") == Tokens{"a", "##ab"});
    std::string a100(100, 'a');
    Tokens t = tok.tokenize(a100);
    REQUIRE(t.size() == 100);
    CHECK(t.front() == "a");
    CHECK(std::all_of(t.begin() + 1, t.end(), [](const std::string& s) { return s == "##a"; }));
    CHECK(tok.tokenize(a100 + "a") == Tokens{"[UNK]"});
    CHECK(tok.tokenize(a100 + "a b") == Tokens{"[UNK]", "[UNK]"});
    // The limit counts code points after normalization, not bytes: 100 × "á" is 300 bytes.
    std::string a_acute;
    for (int i = 0; i < 100; ++i) a_acute += "\xC3\xA1";
    CHECK(tok.tokenize(a_acute).size() == 100);
}

TEST_CASE("encode_pair: [CLS] A [SEP] B [SEP], token types, longest-first truncation") {
    Tokenizer tok({"[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", "a", "b", "c", "d", "e", "x", "y", "z"},
                  "mem");
    Tokenizer::Encoded single = tok.encode_pair("a b", "", 16);
    CHECK(single.input_ids == std::vector<int32_t>{1, 5, 6, 2});
    CHECK(single.token_type_ids == std::vector<int32_t>{0, 0, 0, 0});
    Tokenizer::Encoded pair = tok.encode_pair("a b", "x", 16);
    CHECK(pair.input_ids == std::vector<int32_t>{1, 5, 6, 2, 10, 2});
    CHECK(pair.token_type_ids == std::vector<int32_t>{0, 0, 0, 0, 1, 1});
    // A has 5 tokens, B has 3; 8 leaves room for 5: cut A to 3 (the longer), then the tie cuts B.
    Tokenizer::Encoded cut = tok.encode_pair("a b c d e", "x y z", 8);
    CHECK(cut.input_ids == std::vector<int32_t>{1, 5, 6, 7, 2, 10, 11, 2});
    CHECK(cut.token_type_ids == std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1});
    CHECK(tok.encode_pair("a b c d e", "", 4).input_ids == std::vector<int32_t>{1, 5, 6, 2});
    CHECK(message_of([&] { tok.encode_pair("a", "b", 2); }).find("max_len") != std::string::npos);
}

TEST_CASE("invalid UTF-8: a one-line error with the byte offset, never a crash") {
    Tokenizer tok = Tokenizer::from_file(kDir + "vocab.txt");
    std::vector<std::string> lines = lf_lines(read_bytes(kDir + "invalid_utf8.bin"));
    REQUIRE(lines.size() == 8);
    Tokens first = tok.tokenize(lines[0]);  // "valid line 中文"
    CHECK(first == tok.tokenize("valid line \u4E2D\u6587"));
    CHECK(Tokens(first.end() - 2, first.end()) == Tokens{"中", "文"});
    // Where each bad sequence starts, read off the hex dump of the file (fixture README lists them).
    const size_t offsets[8] = {0, 18, 15, 10, 10, 8, 6, 3};
    for (size_t i = 1; i < lines.size(); ++i) {
        INFO("invalid_utf8.bin line " << i + 1);
        std::string msg = message_of([&] { tok.tokenize(lines[i]); });
        CHECK(msg.find("invalid UTF-8 at byte " + std::to_string(offsets[i]) + " ") != std::string::npos);
        CHECK(msg.find('\n') == std::string::npos);
    }
    const char* bad[] = {"\xE0\x80\x80", "\xED\xBF\xBF", "\xF5\x80\x80\x80", "\xF0\x8F\xBF\xBF", "\xC1\xBF",
                         "\xFF",         "a\xC3"};
    for (const char* b : bad)
        CHECK(message_of([&] { tok.tokenize(b); }).find("invalid UTF-8") != std::string::npos);
    // The extremes that are valid: U+10FFFF (Cn, dropped) and U+E000 (Co, dropped).
    CHECK(tok.tokenize("\xF4\x8F\xBF\xBF\xEE\x80\x80").empty());
}

TEST_CASE("speed: ~120 KB of Chinese poems in well under a second") {
    Tokenizer tok = Tokenizer::from_file(kDir + "vocab.txt");
    std::vector<std::string> inputs = lf_lines(read_bytes(kDir + "input.txt"));
    std::string text;
    while (text.size() < 120000)
        for (size_t i = 0; i < 60; ++i) text += inputs[i] + "\n";  // the poem lines come first
    auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const std::string& line : lf_lines(text)) n += tok.encode(line).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("tokenized " << text.size() << " bytes into " << n << " tokens in " << s * 1e3 << " ms");
    CHECK(n > 30000);
    CHECK(s < 0.5);
}

TEST_CASE("build_vocab: specials first, every CJK character, capped, deterministic, round trip") {
    std::vector<std::string> corpus = lf_lines(read_bytes(kDir + "input.txt"));
    std::vector<std::string> vocab = pt::build_vocab(corpus, 100000);
    REQUIRE(vocab.size() > 10);
    CHECK(std::vector<std::string>(vocab.begin(), vocab.begin() + 4) ==
          std::vector<std::string>{"[PAD]", "[CLS]", "[SEP]", "[MASK]"});
    CHECK(std::count(vocab.begin(), vocab.end(), "[UNK]") == 1);
    CHECK(std::set<std::string>(vocab.begin(), vocab.end()).size() == vocab.size());  // no duplicates

    std::set<std::string> in_vocab(vocab.begin(), vocab.end());
    std::set<char32_t> cjk;  // every CJK code point of the corpus, found independently
    for (const std::string& line : corpus)
        for (char32_t c : code_points(line))
            if (is_unified_cjk(c)) cjk.insert(c);
    CHECK(cjk.size() > 500);
    for (char32_t c : cjk) CHECK_MESSAGE(in_vocab.count(utf8_of(c)), "U+" << std::hex << unsigned(c));

    // Round trip: with the built vocab no CJK character (compatibility ones included) is unknown.
    Tokenizer tok(vocab, "built");
    for (const std::string& line : corpus)
        for (char32_t c : code_points(line)) {
            bool compat = (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
            if (is_unified_cjk(c) || compat) CHECK(tok.tokenize(utf8_of(c)) != Tokens{"[UNK]"});
        }
    // ... and every word of at most 100 characters is covered; [UNK] comes only from the literal
    // "[UNK]" and the one 101-character word of input.txt.
    size_t unknown = 0, literal = 0;
    for (const std::string& line : corpus) {
        for (const std::string& t : tok.tokenize(line)) unknown += t == "[UNK]";
        for (size_t p = line.find("[UNK]"); p != std::string::npos; p = line.find("[UNK]", p + 1)) ++literal;
    }
    CHECK(unknown == literal + 1);

    // Deterministic, and independent of line order (frequencies, ties broken by the string).
    CHECK(pt::build_vocab(corpus, 100000) == vocab);
    std::vector<std::string> shuffled = corpus;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
    CHECK(pt::build_vocab(shuffled, 100000) == vocab);

    // The cap: exactly max_size tokens, the most important ones (a prefix of the full list).
    std::vector<std::string> small = pt::build_vocab(corpus, 300);
    CHECK(small.size() == 300);
    CHECK(std::equal(small.begin(), small.end(), vocab.begin()));
    CHECK(message_of([&] { pt::build_vocab(corpus, 3); }).find("too small") != std::string::npos);
    std::string err = message_of([] { pt::build_vocab({"ok", "bad \xC0\xAF"}, 100); });
    CHECK(err.find("line 2") != std::string::npos);
}

// ---- the CLI -------------------------------------------------------------------------------


TEST_CASE("vocab_main and tokenize_main: files written atomically, bad input refused naming the flag or file") {
    fs::path dir = temp_dir();
    std::string corpus = (dir / "corpus.txt").string(), out = (dir / "vocab.txt").string();
    std::ofstream(corpus, std::ios::binary) << read_bytes(kDir + "input.txt");
    REQUIRE(pt::vocab_main({"--data", corpus, "--out", out, "--size", "400"}) == 0);
    std::vector<std::string> written = lf_lines(read_bytes(out));
    CHECK(written == pt::build_vocab(lf_lines(read_bytes(corpus)), 400));
    CHECK(!fs::exists(out + ".tmp"));

    // Each error reaches main (pipetrain's one line and exit 1: test_train's bad flags).
    auto refused = [](const std::function<int()>& run, const std::string& needle) {
        std::string e = message_of([&] { run(); });
        CAPTURE(needle);
        CAPTURE(e);
        CHECK(e.find(needle) != std::string::npos);
    };
    refused([&] { return pt::vocab_main({"--data", corpus, "--out", corpus}); }, "--out: " + corpus + " is the --data file");
    CHECK(read_bytes(corpus) == read_bytes(kDir + "input.txt"));   // it overwrote the corpus
    refused([&] { return pt::vocab_main({"--data", corpus}); }, "--out");
    refused([&] { return pt::vocab_main({"--data", corpus, "--out", out, "--size", "x"}); }, "--size");
    refused([&] { return pt::vocab_main({"--data", (dir / "nope.txt").string(), "--out", out}); }, "nope.txt");
    refused([&] { return pt::vocab_main({"--data", kDir + "invalid_utf8.bin", "--out", (dir / "v2.txt").string()}); },
            "invalid_utf8.bin");
    CHECK(!fs::exists(dir / "v2.txt"));

    refused([] { return pt::tokenize_main({"hello"}); }, "--vocab");
    refused([] { return pt::tokenize_main({"--vocab", kDir + "vocab.txt", "--bogus", "x"}); }, "--bogus");
    refused([] { return pt::tokenize_main({"--vocab", kDir + "vocab.txt"}); }, "TEXT / --file");
    refused([] { return pt::tokenize_main({"--vocab", kDir + "vocab_no_unk.txt", "x"}); }, "vocab_no_unk.txt");
    refused([] { return pt::tokenize_main({"--vocab", kDir + "vocab.txt", "--file", kDir + "invalid_utf8.bin"}); },
            "invalid_utf8.bin");
    refused([] { return pt::tokenize_main({"--vocab", kDir + "vocab.txt", "--file", "/dev/zero"}); }, "/dev/zero");   // it never ended
    refused([] { return pt::tokenize_main({"--vocab", kDir + "vocab.txt", "--file", "/dev/null"}); }, "/dev/null");   // a device: not read
    CHECK(pt::tokenize_main({"--vocab", kDir + "vocab.txt", "--file", std::string(PT_FIXTURES) + "/text/empty.txt"}) == 0);   // empty, not an error
    fs::remove_all(dir);
}

TEST_CASE("CLI: pipetrain tokenize --ids on the goldens") {
    fs::path dir = temp_dir();
    std::string cli = PT_CLI, out = (dir / "out.txt").string(), err = (dir / "err.txt").string();
    REQUIRE(fs::exists(cli));
    std::string base = cli + " tokenize --vocab '" + kDir + "vocab.txt' ";
    CHECK(std::system((base + "--ids --file '" + kDir + "input.txt' >'" + out + "'").c_str()) == 0);
    CHECK(read_bytes(out) == read_bytes(kDir + "ids.txt"));
    CHECK(std::system((base + "--file '" + kDir + "input.txt' >'" + out + "'").c_str()) == 0);
    CHECK(read_bytes(out) == read_bytes(kDir + "tokens.txt"));
    CHECK(std::system((base + "'ERNIE 3.0是一个模型' >'" + out + "'").c_str()) == 0);
    CHECK(read_bytes(out) == lf_lines(read_bytes(kDir + "tokens.txt"))[82] + "\n");
    // "--" ends the flags: what follows is TEXT even when it looks like one, tokenized as the
    // same line read from a file.
    std::string dashes = (dir / "dashes.txt").string(), via_file = (dir / "via_file.txt").string();
    std::ofstream(dashes) << "--ids\n";
    CHECK(std::system((base + "--file '" + dashes + "' >'" + via_file + "'").c_str()) == 0);
    CHECK(std::system((base + "-- --ids >'" + out + "'").c_str()) == 0);
    CHECK(read_bytes(out).size() > 1);
    CHECK(read_bytes(out) == read_bytes(via_file));

    // Invalid UTF-8: non-zero exit, nothing on stdout, one line on stderr naming file and line.
    int rc =
        std::system((base + "--file '" + kDir + "invalid_utf8.bin' >'" + out + "' 2>'" + err + "'").c_str());
    CHECK(rc != 0);
    CHECK(read_bytes(out).empty());
    std::string msg = read_bytes(err);
    CHECK(msg.find("invalid_utf8.bin line 2: invalid UTF-8 at byte 18") != std::string::npos);
    CHECK(std::count(msg.begin(), msg.end(), '\n') == 1);
    fs::remove_all(dir);
}
