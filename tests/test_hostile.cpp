// Hostile directories (issue #31): devices, FIFOs and symbolic links planted in model and
// checkpoint directories, huge JSON, a deleted manifest, bytes that are not UTF-8 in a message.
// Every command runs under `timeout`, so a loader that waits forever fails the test (exit 124)
// instead of hanging it.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "big_header.hpp"
#include "cli_util.hpp"
#include "src/formats/io.hpp"
#include "src/formats/json.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/formats/safetensors.hpp"

namespace fs = std::filesystem;
using test::Run;

namespace {

const std::string kSample = test::fixture("text/sample_zh.txt");
const std::string kTrain = "train --preset tiny --data " + kSample + " --batch 4 --seq 16 --seed 3 --steps 1 ";

// The CLI with a deadline: exit 124 means it was still running after 30 s.
Run cli(const std::string& args) { return test::run_command("timeout -k 5 30 " + std::string(PT_CLI) + " " + args); }

// A fresh run: OUT/model.safetensors (sealed) and OUT/checkpoint-1 (sealed), P stages.
std::string trained(const std::string& name, int stages = 1) {
    std::string out = test::temp_dir(name);
    Run r = cli(kTrain + "--save-every 1 --stages " + std::to_string(stages) + " --out " + out + "/run");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    return out + "/run";
}

void mkfifo_at(const std::string& path) {
    fs::remove(path);
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
}

void symlink_at(const std::string& target, const std::string& path) {
    fs::remove(path);
    fs::create_symlink(target, path);
}

// Refused by name, in time, and the message is one printable line.
void refused(const Run& r, const std::string& expected) {
    INFO(r.out);
    CHECK(r.code != 124);   // 124: timeout stopped it (a hang)
    CHECK(r.code == 1);
    CHECK(r.out.find(expected) != std::string::npos);
}

}  // namespace

TEST_CASE("a FIFO or a device in a model or checkpoint directory is refused at once, not waited on") {
    const std::string run = trained("fifo");
    const std::string ckpt = run + "/checkpoint-1";
    SUBCASE("config.json a FIFO, unsealed (as another tool's directory)") {
        fs::remove(run + "/" + pt::kManifest);
        mkfifo_at(run + "/config.json");
        refused(cli("inspect " + run), "config.json: not a regular file");
        refused(cli("eval --model " + run + " --data " + kSample + " --seq 16"), "config.json: not a regular file");
    }
    SUBCASE("trainer_state.json a FIFO in a sealed checkpoint: train --resume") {
        mkfifo_at(ckpt + "/trainer_state.json");
        refused(cli(kTrain + "--resume " + ckpt + " --out " + run + "/again"), "trainer_state.json: not a regular file");
    }
    SUBCASE("trainer_state.json a FIFO, --no-verify (no manifest hashing first)") {
        mkfifo_at(ckpt + "/trainer_state.json");
        refused(cli(kTrain + "--resume " + ckpt + " --out " + run + "/again --no-verify"), "trainer_state.json: not a regular file");
    }
    SUBCASE("model.safetensors a link to /dev/zero, unsealed") {
        fs::remove(run + "/" + pt::kManifest);
        symlink_at("/dev/zero", run + "/model.safetensors");
        refused(cli("inspect " + run), "model.safetensors: not a regular file");
        refused(cli("fill-mask --model " + run + " 床前明[MASK]光"), "model.safetensors: not a regular file");
    }
    SUBCASE("vocab.txt a FIFO, sealed: the manifest's hashing refuses it") {
        mkfifo_at(run + "/vocab.txt");
        refused(cli("inspect " + run), "vocab.txt: not a regular file");
    }
    SUBCASE("read_file, read_bytes and sha256 on a FIFO and a character device") {
        const std::string fifo = run + "/fifo";
        mkfifo_at(fifo);
        for (const std::string& p : {fifo, std::string("/dev/zero")}) {
            CAPTURE(p);
            CHECK(test::error_of([&] { pt::read_file(p); }) == p + ": not a regular file");
            CHECK(test::error_of([&] { pt::read_bytes(p); }) == p + ": not a regular file");
        }
    }
}

// The best of three runs of `f`, in seconds.
template <typename F>
double best_seconds(F&& f) {
    double best = 1e30;
    for (int k = 0; k < 3; k++) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

// Our parse of `json` against the JSON library's own parse of the same text, in the same run: a
// ratio, not a time, so that a slow machine or a sanitizer build cannot fail it: 0.2-2 times the
// library measured here (up to 4.8 on a loaded machine); the old parsers below were quadratic,
// 50 to 200 times the library.
template <typename Parse>
void check_near_library(const char* what, const std::string& json, Parse&& parse) {
    double ours = best_seconds(parse), library = best_seconds([&] { CHECK(!nlohmann::json::parse(json).is_null()); });
    MESSAGE(std::string(what) << " (" << json.size() / 1e6 << " MB): " << ours << " s, the JSON library alone " << library
                              << " s: x" << ours / library);
    CHECK(ours < 15 * library);
}

TEST_CASE("JSON is parsed in linear time: a 200,000-tensor safetensors header, a 1 MB config.json") {
    // 200,000 sibling objects: the old depth-limiting callback rescanned the parent at each one's
    // end (over 40 s; now 1.2-1.4 s on 2 cores).
    const int n = 200000;
    auto [header, bytes] = test::many_tensors(n);
    check_near_library("safetensors header of 200,000 tensors", header,
                       [&] { CHECK(pt::st::parse("big.safetensors", bytes).tensors.size() == size_t(n)); });
    // 20,000 sibling objects in a config.json: the old parser took 15-19 s for 640 KB.
    std::string config = "{\"hidden_size\":64";
    for (int i = 0; i < 20000; i++) config += ",\"x" + std::to_string(i) + "\":{\"a\":[1,2,{\"b\":null}]}";
    config += "}";
    check_near_library("config.json of 20,000 sibling objects", config,
                       [&] { CHECK(pt::parse_json(config, "config.json").size() == 20001); });
}

TEST_CASE("the bounds stay: depth, duplicate keys, syntax errors, each one line naming the file") {
    const std::string deep = std::string(65, '[') + std::string(65, ']'), ok = std::string(64, '[') + std::string(64, ']');
    CHECK(test::error_of([&] { pt::parse_json(deep, "a.json"); }) == "a.json: not valid JSON (nested deeper than 64 levels)");
    CHECK(test::error_of([&] { pt::parse_json(ok, "a.json"); }) == "");
    CHECK(test::error_of([&] { pt::parse_json("{\"a\": 1e447}", "a.json"); }).find("a.json: not valid JSON (") == 0);
    const std::string syntax = test::error_of([&] { pt::parse_json("{\"a\": [1, 2}", "a.json"); });
    CHECK(syntax.find("a.json: not valid JSON (") == 0);
    CHECK(syntax.find("syntax error") != std::string::npos);
    const std::string dup = R"({"a": {"x": 1, "y": 2}, "b": {"x": 3}, "a": 4})";
    pt::JsonShape s = pt::check_json(dup.data(), dup.data() + dup.size(), true);
    CHECK(s.complete);
    CHECK(s.duplicate == "a");   // "x" in two different objects is no duplicate
}

TEST_CASE("outputs never go through a planted symbolic link: metrics.jsonl, schedule.json, fresh and resumed") {
    const std::string dir = test::temp_dir("links_out"), out = dir + "/out";
    fs::create_directories(out);
    const std::string victim = dir + "/victim.txt", victim2 = dir + "/victim2.txt";
    test::run_command("printf 'keep me\\n' > " + victim + " && printf 'keep me too\\n' > " + victim2);
    symlink_at(victim, out + "/metrics.jsonl");
    symlink_at(victim2, out + "/schedule.json");
    const std::string two = "train --preset tiny --data " + kSample + " --batch 4 --seq 16 --seed 3 --steps 2 ";
    Run r = cli(two + "--save-every 1 --out " + out);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(test::read_file(victim) == "keep me\n");
    CHECK(test::read_file(victim2) == "keep me too\n");
    CHECK(fs::is_regular_file(fs::symlink_status(out + "/metrics.jsonl")));
    CHECK(fs::is_regular_file(fs::symlink_status(out + "/schedule.json")));
    CHECK(test::read_file(out + "/metrics.jsonl").find("\"step\"") != std::string::npos);

    // --resume appends to the log: a link planted there since is replaced, not appended through.
    symlink_at(victim, out + "/metrics.jsonl");
    r = cli("train --data " + kSample + " --batch 4 --seq 16 --seed 3 --resume " + out + "/checkpoint-1 --out " + out);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    REQUIRE(r.out.find("step 2/2") != std::string::npos);   // a step ran, and its line was logged
    CHECK(test::read_file(victim) == "keep me\n");
    CHECK(fs::is_regular_file(fs::symlink_status(out + "/metrics.jsonl")));
    CHECK(test::read_file(out + "/metrics.jsonl").find("\"step\":2") != std::string::npos);
}

TEST_CASE("files an index or a manifest names must be inside the directory; links inside it and Hugging Face's cache are fine") {
    const std::string run = trained("links_in", 2);
    const std::string ckpt = run + "/checkpoint-1", shard = ckpt + "/model-00002-of-00002.safetensors";
    REQUIRE(fs::exists(shard));
    SUBCASE("a shard linked to /etc/passwd, sealed: refused by the manifest's check, no byte of it printed") {
        symlink_at("/etc/passwd", shard);
        Run r = cli("inspect " + ckpt);
        refused(r, "model-00002-of-00002.safetensors: a symbolic link to /etc/passwd, outside");
        CHECK(r.out.find("root") == std::string::npos);
        CHECK(r.out.find("header") == std::string::npos);
    }
    SUBCASE("the same, --no-verify (no manifest check): the index's names are checked too") {
        symlink_at("/etc/passwd", shard);
        Run r = cli("inspect --no-verify " + ckpt);
        refused(r, "model-00002-of-00002.safetensors: a symbolic link to /etc/passwd, outside");
        CHECK(r.out.find("header length") == std::string::npos);
    }
    SUBCASE("a shard linked to another run's shard: outside, refused") {
        const std::string other = trained("links_other", 2);
        symlink_at(other + "/checkpoint-1/model-00002-of-00002.safetensors", shard);
        refused(cli("inspect --no-verify " + ckpt), "a symbolic link to " + fs::canonical(other).string());
    }
    SUBCASE("a link to a file inside the directory loads") {
        fs::rename(shard, ckpt + "/real.bin");
        symlink_at("real.bin", shard);
        fs::remove(ckpt + "/" + pt::kManifest);
        Run r = cli("inspect --no-verify " + ckpt);
        INFO(r.out);
        CHECK(r.code == 0);
    }
    SUBCASE("Hugging Face's cache: snapshots/REV/shard -> ../../blobs/HASH") {
        const std::string repo = test::temp_dir("hf_cache") + "/models--pt--tiny", snap = repo + "/snapshots/abc123";
        fs::create_directories(snap);
        fs::create_directories(repo + "/blobs");
        for (const auto& e : fs::directory_iterator(ckpt)) {
            std::string name = e.path().filename().string();
            if (name == pt::kManifest || name == "trainer_state.json" || name.rfind("optimizer", 0) == 0) continue;
            fs::copy_file(e.path(), repo + "/blobs/" + name);
            fs::create_symlink("../../blobs/" + name, snap + "/" + name);
        }
        Run r = cli("inspect " + snap);
        INFO(r.out);
        CHECK(r.code == 0);
    }
}

TEST_CASE("a checkpoint must keep its manifest: deleted, it is refused by name unless --no-verify") {
    const std::string a = trained("manifest_a", 2), b = trained("manifest_b", 2);
    const std::string ckpt = a + "/checkpoint-1", out = a + "/again";
    fs::remove(ckpt + "/" + pt::kManifest);
    const std::string resume = "train --data " + kSample + " --batch 4 --seq 16 --seed 3 --stages 2 --resume " + ckpt;
    refused(cli(resume + " --out " + out), ckpt + "/pipetrain_manifest.json: missing");
    refused(cli("inspect " + ckpt), "pipetrain_manifest.json: missing");
    refused(cli("eval --model " + ckpt + " --data " + kSample + " --seq 16"), "pipetrain_manifest.json: missing");
    // Shards swapped in from another checkpoint: without the manifest nothing could tell.
    fs::copy_file(b + "/checkpoint-1/model-00002-of-00002.safetensors", ckpt + "/model-00002-of-00002.safetensors",
                  fs::copy_options::overwrite_existing);
    refused(cli(resume + " --out " + out), "pipetrain_manifest.json: missing");
    Run r = cli(resume + " --out " + out + " --no-verify");
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("--no-verify: " + ckpt + " loaded without checking its manifest") != std::string::npos);
    // A directory from elsewhere (no trainer_state.json) still loads without one.
    fs::remove(a + "/" + pt::kManifest);
    CHECK(cli("inspect " + a).code == 0);
}

TEST_CASE("messages escape what is not UTF-8, and control characters") {
    CHECK(pt::printable("床前明月光 é ok") == "床前明月光 é ok");
    CHECK(pt::printable("a\xff\xfe" "b") == "a\\xff\\xfeb");
    CHECK(pt::printable("\xc3\x28") == "\\xc3(");                  // a lead byte without its continuation
    CHECK(pt::printable("\xc0\xaf") == "\\xc0\\xaf");              // overlong '/'
    CHECK(pt::printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");      // a UTF-16 surrogate
    CHECK(pt::printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
    CHECK(pt::printable("\x1b[31mred\n\x7f") == "\\x1b[31mred\\x0a\\x7f");
    CHECK(pt::printable("\xc2\x85|\xc2\xa0") == "\\xc2\\x85|\xc2\xa0");  // C1 NEL escaped, NBSP kept
    CHECK(pt::printable("\xe4\xb8") == "\\xe4\\xb8");              // cut in the middle of 中
    // End to end: a path with such bytes, in the CLI's one-line error.
    const std::string dir = test::temp_dir("utf8");
    const std::string bad = dir + "/m\xff\x1b[31m";
    Run r = cli("inspect '" + bad + "'");
    INFO(r.out);
    CHECK(r.code == 1);
    CHECK(r.out.find("m\\xff\\x1b[31m") != std::string::npos);
    CHECK(r.out.find('\x1b') == std::string::npos);
    CHECK(r.out.find('\xff') == std::string::npos);
    // A flag's value, a TEXT and a command name quoted in the message: escaped too, one line.
    for (const std::string& args : {std::string("fill-mask --model ") + dir + " --top $'2\\n\\x1b'  床前明[MASK]光",
                                    std::string("tokenize --vocab $'v\\x01\\nx' 床"), std::string("$'ev\\nal' x"),
                                    std::string("train --preset tiny --data ") + kSample + " --schedule $'g\\tpipe' --out " + dir + "/o"}) {
        Run q = test::run_command("bash -c \"timeout 30 " + std::string(PT_CLI) + " " + args + "\"");
        CAPTURE(args);
        INFO(q.out);
        CHECK(q.code != 0);
        CHECK(q.out.find_first_of("\x1b\x01\t") == std::string::npos);
        CHECK(std::count(q.out.begin(), q.out.end(), '\n') == 1);
    }
}

TEST_CASE("an output that is a FIFO or a device is refused, never replaced nor waited on") {
    const std::string run = trained("special-out");
    const std::string fifo = run + "/out.fifo";
    mkfifo_at(fifo);
    auto still_fifo = [&] {
        struct stat st;
        return ::lstat(fifo.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
    };
    refused(cli("eval --model " + run + " --data " + kSample + " --seq 16 --dump-logits " + fifo), "--dump-logits: " + fifo + ": not a regular file");
    refused(cli("vocab --data " + kSample + " --size 50 --out " + fifo), fifo + ": not a regular file");
    refused(cli(kTrain + "--out " + run + "/t --trace " + fifo), "--trace: " + fifo + ": not a regular file");
    CHECK(still_fifo());
    // The writers themselves: the rename would replace the node (as root, /dev/null with a file).
    CHECK(test::error_of([&] { pt::write_file_atomic(fifo, "x"); }).find(fifo + ": not a regular file") == 0);
    CHECK(test::error_of([&] { std::fclose(pt::open_output(fifo, false)); }).find(fifo + ": not a regular file") == 0);
    CHECK(still_fifo());
    CHECK(!fs::exists(fifo + ".tmp." + std::to_string(::getpid())));
}
