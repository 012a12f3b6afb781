// The directory lifecycle (src/formats/lifecycle.hpp) piece by piece: SHA-256 against sha256sum and the
// FIPS vectors, manifests that refuse every changed byte by the file's name, commits that
// replace a directory in one step, recovery of what a kill left, and hostile JSON and trainer
// states, each of which crashed, hung or misled the old code. The kill-at-every-call test is
// tests/test_crash_safety.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "src/formats/config_json.hpp"
#include "src/formats/io.hpp"
#include "src/formats/json.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/formats/sha256.hpp"
#include "tests/cli_util.hpp"

using namespace test;
namespace fs = std::filesystem;

namespace {

std::string sha256_of(const std::string& s) {
    pt::Sha256 h;
    h.update(s.data(), s.size());
    return h.hex();
}

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A directory of three files, sealed.
std::string sealed_dir(const std::string& name) {
    std::string d = temp_dir(name);
    write(d + "/config.json", "{\"a\": 1}\n");
    write(d + "/vocab.txt", "[PAD]\n[UNK]\n");
    std::string big(100000, '\0');
    for (size_t i = 0; i < big.size(); i++) big[i] = char(i * 7919 % 251);
    write(d + "/model.safetensors", big);
    pt::seal_dir(d);
    return d;
}

const std::string kSample = fixture("text/sample_zh.txt");
const std::string kTrain = "train --preset tiny --data " + kSample + " --batch 4 --seq 16 --seed 3 ";

}  // namespace

// The FIPS 180-4 vectors, and sha256sum (coreutils: an independent implementation) on every
// length around the block edges.
void check_sha256() {
    CHECK(sha256_of("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_of("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha256_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    pt::Sha256 million;   // in pieces of 1000: the partial-block path
    std::string a1000(1000, 'a');
    for (int i = 0; i < 1000; i++) million.update(a1000.data(), a1000.size());
    CHECK(million.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    REQUIRE(run_command("command -v sha256sum").code == 0);
    std::string d = temp_dir("sha");
    std::mt19937 rng(7);
    for (int n : {1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 65537}) {
        std::string bytes(size_t(n), '\0');
        for (char& c : bytes) c = char(rng());
        write(d + "/f", bytes);
        std::string ref = run_command("sha256sum " + d + "/f").out.substr(0, 64);
        CAPTURE(n);
        CHECK(sha256_of(bytes) == ref);
        CHECK(pt::sha256_file(d + "/f") == ref);
    }
}

TEST_CASE("SHA-256, the plain version and the CPU's SHA instructions: the FIPS vectors and sha256sum") {
    const bool sha_ni = pt::sha256_sha_ni;
    pt::sha256_sha_ni = false;
    check_sha256();
    if (sha_ni) {
        pt::sha256_sha_ni = true;
        check_sha256();
    }
    MESSAGE("SHA instructions: " << (sha_ni ? "checked as well" : "not on this CPU"));
}

TEST_CASE("a manifest refuses a flipped byte, a truncation or a missing file, naming the file") {
    std::string d = sealed_dir("sealed");
    CHECK(pt::read_manifest(d).size() == 3);
    CHECK(error_of([&] { pt::verify_dir(d); }) == "");
    write(d + "/README.md", "not in the manifest: another tool's file");
    CHECK(error_of([&] { pt::verify_dir(d); }) == "");   // extra files are not the model's
    int tried = 0, named = 0;
    std::mt19937 rng(11);
    for (std::string name : {"config.json", "vocab.txt", "model.safetensors", pt::kManifest}) {   // CAPTURE prints a string, not a pointer
        std::string path = d + "/" + name, original = read_file(path);
        for (int k = 0; k < 6; k++) {
            std::string bad = original;
            size_t at = rng() % bad.size();
            bad[at] = char(bad[at] ^ (1 << (rng() % 8)));
            write(path, bad);
            std::string e = error_of([&] { pt::verify_dir(d); });
            tried++;
            named += e.rfind(path + ":", 0) == 0;
            CAPTURE(name);
            CAPTURE(at);
            CAPTURE(e);
            CHECK(e.rfind(path + ":", 0) == 0);
            CHECK(e.find('\n') == std::string::npos);
        }
        write(path, original);
        CHECK(error_of([&] { pt::verify_dir(d); }) == "");
    }
    MESSAGE("byte flips: " << tried << " tried, " << named << " refused naming the file");
    // "format" of another type: the JSON library's type_error escaped without the file's name.
    const std::string manifest = d + "/" + pt::kManifest, original = read_file(manifest);
    write(manifest, R"({"format": 5, "files": []})");
    CHECK(error_of([&] { pt::verify_dir(d); }).rfind(manifest + ": not a pipetrain manifest", 0) == 0);
    write(manifest, original);
    write(d + "/vocab.txt", "[PAD]\n");   // shorter
    CHECK(error_of([&] { pt::verify_dir(d); }).find("vocab.txt: has 6 bytes") != std::string::npos);
    fs::remove(d + "/vocab.txt");
    CHECK(error_of([&] { pt::verify_dir(d); }).find("vocab.txt: missing") != std::string::npos);
    // A directory without a manifest (another tool's) is not checked.
    fs::remove(d + "/" + pt::kManifest);
    CHECK(error_of([&] { pt::verify_dir(d); }) == "");
}

TEST_CASE("another manifest over unchanged files is checked again, not taken from what was verified") {
    // verify_dir hashes a directory once per process, keyed by its files' sizes and times: a
    // manifest sealed for other bytes of vocab.txt, put in place while vocab.txt is as verified
    // (the same size and time), was accepted from that memory.
    std::string d = sealed_dir("swapped");
    CHECK(error_of([&] { pt::verify_dir(d); }) == "");
    const std::string vocab = d + "/vocab.txt", original = read_file(vocab);
    const fs::file_time_type time = fs::last_write_time(vocab);
    std::string other = original;
    other[0] = char(other[0] ^ 1);   // the same size
    write(vocab, other);
    pt::seal_dir(d);                 // the manifest of the other bytes
    write(vocab, original);
    fs::last_write_time(vocab, time);
    CHECK(error_of([&] { pt::verify_dir(d); }).rfind(vocab + ": does not match its SHA-256", 0) == 0);
}

TEST_CASE("staging, trash and interrupted saves are refused by name; recovery commits only what is whole") {
    std::string out = temp_dir("recover");
    std::string a = sealed_dir("recover_a");
    fs::rename(a, out + "/.tmp-checkpoint-4");        // sealed, nothing has its name: complete
    std::string b = sealed_dir("recover_b");
    fs::remove(b + "/vocab.txt");
    fs::rename(b, out + "/.tmp-checkpoint-5");        // sealed but a file is gone: not complete
    fs::create_directories(out + "/.tmp-checkpoint-6");   // never sealed
    fs::create_directories(out + "/.trash-checkpoint-1-99-0");
    for (std::string n : {"/.tmp-checkpoint-4", "/.tmp-checkpoint-6", "/.trash-checkpoint-1-99-0"}) {
        std::string e = error_of([&] { pt::verify_dir(out + n); });
        CAPTURE(n);
        CHECK(e.find("an unfinished or discarded save") != std::string::npos);
    }
    pt::recover_dir(out);
    CHECK(fs::exists(out + "/checkpoint-4/model.safetensors"));
    CHECK(error_of([&] { pt::verify_dir(out + "/checkpoint-4"); }) == "");
    for (const char* n : {"/.tmp-checkpoint-4", "/.tmp-checkpoint-5", "/checkpoint-5", "/.tmp-checkpoint-6",
                          "/.trash-checkpoint-1-99-0"})
        CHECK(!fs::exists(out + n));
}

TEST_CASE("commit_dir replaces a directory in one step; commit_files never leaves a loadable mix") {
    std::string out = temp_dir("commit");
    std::string old = sealed_dir("commit_old");
    fs::rename(old, out + "/checkpoint-2");
    std::string staging = pt::stage_dir(out + "/checkpoint-2");
    CHECK(staging == out + "/.tmp-checkpoint-2");
    write(staging + "/config.json", "{\"new\": true}\n");
    pt::commit_dir(staging, out + "/checkpoint-2");
    CHECK(read_file(out + "/checkpoint-2/config.json") == "{\"new\": true}\n");
    CHECK(!fs::exists(out + "/checkpoint-2/vocab.txt"));   // the old directory went whole
    CHECK(pt::read_manifest(out + "/checkpoint-2").size() == 1);
    size_t left = 0;
    for (const auto& e : fs::directory_iterator(out)) left += e.path().filename() != "checkpoint-2";
    CHECK(left == 0);   // no staging, no trash

    // The final model: a move interrupted after one file. The directory is refused (not loaded
    // as a mix of two models), and the next start finishes the move.
    std::string model = sealed_dir("commit_model");
    std::string saving = pt::stage_files(model);
    write(saving + "/config.json", "{\"b\": 2}\n");
    write(saving + "/vocab.txt", "[PAD]\n[UNK]\n[MASK]\n");
    pt::seal_dir(saving);
    fs::rename(saving + "/config.json", model + "/config.json");   // the kill came here
    std::string e = error_of([&] { pt::verify_dir(model); });
    CHECK(e.find("its last save was interrupted") != std::string::npos);
    pt::recover_dir(model);
    CHECK(error_of([&] { pt::verify_dir(model); }) == "");
    CHECK(read_file(model + "/config.json") == "{\"b\": 2}\n");
    CHECK(read_file(model + "/vocab.txt") == "[PAD]\n[UNK]\n[MASK]\n");
    // model.safetensors was the old model's and the new one has none: it went with the commit.
    CHECK(!fs::exists(model + "/model.safetensors"));
    CHECK(!fs::exists(model + "/.saving"));
}

TEST_CASE("hostile JSON: a depth limit and one line naming the file, never a crash") {
    std::string deep(100000, '[');
    deep += std::string(100000, ']');
    std::string e = error_of([&] { pt::parse_json(deep, "x.json"); });
    CHECK(e == "x.json: not valid JSON (nested deeper than 64 levels)");
    CHECK(error_of([&] { pt::parse_json(std::string(64, '[') + std::string(64, ']'), "ok.json"); }) == "");
    // A key twice in one object: the library kept the last silently (config.json's hidden_size 16, then 8).
    e = error_of([&] { pt::config_from_json_string("{\"hidden_size\": 16, \"hidden_size\": 8}", "cfg/config.json"); });
    CHECK(e == "cfg/config.json: the key \"hidden_size\" appears twice in one object: which value is meant?");
    CHECK(error_of([&] { pt::parse_json("{\"a\": {\"k\": 1}, \"b\": {\"k\": 2}}", "ok.json"); }) == "");   // per object
    e = error_of([&] { pt::config_from_json_string("{\"vocab_size\": 1e447}", "cfg/config.json"); });
    CHECK(e.rfind("cfg/config.json: not valid JSON (number overflow", 0) == 0);
    // PaddleNLP's model_config.json nests init_args; 200,000 deep crashed inspect and eval.
    std::string dir = temp_dir("deep_init_args");
    std::string nested;
    for (int i = 0; i < 200000; i++) nested += "{\"init_args\": [";
    nested += "{}";
    for (int i = 0; i < 200000; i++) nested += "]}";
    write(dir + "/model_config.json", nested);
    for (const std::string& cmd : {"inspect " + dir, "eval --model " + dir + " --data " + kSample}) {
        Run r = run_cli(cmd);
        CAPTURE(cmd);
        CHECK((r.code == 1 || r.code == 2));   // an error, not a signal (rc -1 from a crash)
        CHECK(r.out.find("model_config.json: not valid JSON (nested deeper than 64 levels)") != std::string::npos);
    }
}

TEST_CASE("resume reads only what it knows: unknown keys, deep JSON, bad steps and moments are refused") {
    std::string out = temp_dir("state");
    Run first = run_cli(kTrain + "--steps 2 --save-every 2 --out " + out);
    REQUIRE_MESSAGE(first.code == 0, first.out);
    const std::string ckpt = out + "/checkpoint-2", state_path = ckpt + "/trainer_state.json";
    const std::string state = read_file(state_path);
    auto resume_with = [&](const std::string& text) {
        write(state_path, text);
        fs::remove(ckpt + "/" + pt::kManifest);   // unsealed, so the content checks are reached
        Run r = run_cli("train --data " + kSample + " --out " + out + "/more --resume " + ckpt + " --no-verify");
        write(state_path, state);
        return r;
    };
    // A key that names a flag became that flag's default: --trace wrote any file, exit 0.
    std::string victim = out + "/victim.txt";
    write(victim, "keep me");
    Run trace = resume_with(state.substr(0, state.rfind('}')) + ", \"trace\": \"" + victim + "\"}");
    CHECK(trace.code != 0);
    CHECK(trace.out.find(state_path + ": unknown key \"trace\"") != std::string::npos);
    CHECK(read_file(victim) == "keep me");
    // 100,000 nested arrays segfaulted (rc 139) in the recursive dump of resume_defaults.
    Run deep = resume_with("{\"step\": 1, \"seed\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
    CHECK(deep.code == 1);
    CHECK(deep.out.find(state_path + ": not valid JSON (nested deeper than 64 levels)") != std::string::npos);
    // 2^63 was read as a negative int64 and reported as "negative".
    Run big = resume_with("{\"step\": 9223372036854775808}");
    CHECK(big.code != 0);
    CHECK(big.out.find("\"step\" 9223372036854775808 is out of range") != std::string::npos);
    Run neg = resume_with("{\"step\": -3}");
    CHECK(neg.out.find("\"step\" is negative") != std::string::npos);
    Run newline = resume_with("{\"step\": 1, \"a\\nb\": 1}");   // a key with a newline: still one line
    CHECK(newline.out.find("unknown key \"a\\x0ab\"") != std::string::npos);
    Run type = resume_with("{\"step\": 2, \"seed\": \"3\"}");
    CHECK(type.out.find("\"seed\" must be a number") != std::string::npos);
}

TEST_CASE("AdamW moments are checked at load: NaN, inf or a negative second moment is refused by name") {
    std::string out = temp_dir("moments");
    REQUIRE(run_cli(kTrain + "--steps 2 --save-every 1 --out " + out).code == 0);
    const std::string ckpt = out + "/checkpoint-1", opt = ckpt + "/optimizer.safetensors";
    fs::remove(ckpt + "/" + pt::kManifest);   // the manifest would refuse the edit first (hence --no-verify below)
    const std::string bytes = read_file(opt);
    uint64_t header = 0;
    std::memcpy(&header, bytes.data(), 8);
    nlohmann::json h = nlohmann::json::parse(bytes.substr(8, header));
    auto first_float_of = [&](const std::string& suffix) {   // byte offset of a tensor with that suffix
        for (const auto& [name, t] : h.items())
            if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
                return size_t(8 + header + t["data_offsets"][0].get<size_t>());
        return size_t(0);
    };
    struct Case { const char* tensor; float value; const char* needle; };
    for (Case c : {Case{".exp_avg", NAN, ".exp_avg holds NaN or infinite values"},
                   Case{".exp_avg_sq", INFINITY, ".exp_avg_sq holds NaN or infinite values"},
                   Case{".exp_avg_sq", -1.0f, ".exp_avg_sq holds a negative value"},
                   Case{".exp_avg", -1.0f, ""}}) {   // a negative first moment is an ordinary value
        size_t at = first_float_of(c.tensor);
        REQUIRE(at > 0);
        std::string bad = bytes;
        std::memcpy(&bad[at], &c.value, 4);
        write(opt, bad);
        Run r = run_cli("train --data " + kSample + " --out " + out + "/next --resume " + ckpt + " --no-verify");
        CAPTURE(c.tensor);
        CAPTURE(c.value);
        CAPTURE(r.out);
        if (*c.needle) {
            CHECK(r.code != 0);
            CHECK(r.out.find(opt + ": ") != std::string::npos);
            CHECK(r.out.find(c.needle) != std::string::npos);
        } else {
            CHECK(r.code == 0);
        }
        fs::remove_all(out + "/next");
    }
    write(opt, bytes);
}

TEST_CASE("inspect: a missing vocab.txt or config.json is an error, a sealed directory says so") {
    std::string out = temp_dir("inspect_missing");
    REQUIRE(run_cli(kTrain + "--steps 1 --out " + out).code == 0);
    Run ok = run_cli("inspect " + out);
    CHECK(ok.code == 0);
    CHECK(ok.out.find("manifest: 6 files match") != std::string::npos);
    Run unchecked = run_cli("inspect " + out + " --no-verify");   // it said the files matched, unchecked
    CHECK(unchecked.code == 0);
    CHECK(unchecked.out.find("manifest: 6 files listed, not checked (--no-verify)") != std::string::npos);
    CHECK(unchecked.out.find("match") == std::string::npos);
    fs::remove(out + "/" + pt::kManifest);
    fs::remove(out + "/vocab.txt");
    CHECK(run_cli("inspect " + out).code == 0);   // tokenizer.json holds the vocabulary too
    fs::remove(out + "/tokenizer.json");
    Run novocab = run_cli("inspect " + out);
    CHECK(novocab.code != 0);
    CHECK(novocab.out.find("vocab.txt: missing") != std::string::npos);
    CHECK(novocab.out.find("ok:") == std::string::npos);
    fs::remove(out + "/config.json");
    Run nocfg = run_cli("inspect " + out);
    CHECK(nocfg.code != 0);
    CHECK(nocfg.out.find("no config.json") != std::string::npos);
}
