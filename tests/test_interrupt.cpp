// Ctrl-C and SIGTERM: the step in flight finishes, OUT/checkpoint-N is saved, the run says how to
// continue and exits 130 / 143, and the command it printed continues to the same bits as a run that
// was never interrupted. A second signal quits at once, leaving every committed checkpoint whole.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/cli_util.hpp"
#include "tests/model_diff.hpp"
#include "tests/process_util.hpp"

using namespace test;
namespace fs = std::filesystem;

namespace {

// 30 steps of about 70 ms: a signal sent after step 3 lands well before the end.
std::vector<std::string> train_args(const std::string& data, const std::string& out) {
    return {"--data", data, "--steps", "30", "--batch", "8", "--seq", "32", "--stages", "2", "--dropout", "0.1",
            "--seed", "7", "--out", out};
}

Child start_train(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {PT_CLI, "train", "--preset", "tiny"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Child::exec(argv);
}

// The line of `text` that starts with `prefix`, without it; "" if none.
std::string line_after(const std::string& text, const std::string& prefix) {
    size_t at = text.find(prefix);
    if (at == std::string::npos) return "";
    at += prefix.size();
    return text.substr(at, text.find('\n', at) - at);
}

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every committed checkpoint (a plain checkpoint-N, not one being staged) holds a whole model,
// its optimizer moments and a trainer state at step N. These runs have 2 stages, so the weights
// and moments are 2 shards each, with their indexes.
void check_checkpoints_whole(const std::string& out) {
    for (const auto& e : fs::directory_iterator(out)) {
        std::string name = e.path().filename().string();
        if (name.rfind("checkpoint-", 0) != 0 || name.find_first_not_of("0123456789", 11) != std::string::npos) continue;
        CAPTURE(name);
        for (const char* f : {"config.json", "vocab.txt", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                              "model.safetensors.index.json", "optimizer-00001-of-00002.safetensors",
                              "optimizer-00002-of-00002.safetensors", "optimizer.safetensors.index.json"})
            CHECK((fs::is_regular_file(e.path() / f) && fs::file_size(e.path() / f) > 0));
        nlohmann::json state = nlohmann::json::parse(read_file((e.path() / "trainer_state.json").string()), nullptr, false);
        CHECK((!state.is_discarded() && state["step"] == std::atoi(name.c_str() + 11)));
    }
}

}  // namespace

TEST_CASE("SIGINT and SIGTERM finish the step, save OUT/checkpoint-N, say how to continue, exit 130 / 143") {
    const std::string data = fixture("text/sample_zh.txt");
    std::string ref = temp_dir("uninterrupted");
    Run straight = run_cli("train --preset tiny --data " + data +
                           " --steps 30 --batch 8 --seq 32 --stages 2 --dropout 0.1 --seed 7 --out " + ref);
    REQUIRE_MESSAGE(straight.code == 0, straight.out);
    const std::string reference = ref + "/model.safetensors";
    // With SIGTERM the corpus has a name that the printed command must quote for the shell.
    const std::string odd_dir = temp_dir("corpus"), odd = odd_dir + "/my corpus's.txt";
    fs::copy_file(data, odd);

    for (auto [sig, code] : {std::pair{SIGINT, 130}, {SIGTERM, 143}}) {
        CAPTURE(sig);
        std::string out = temp_dir("interrupted_" + std::to_string(sig)), corpus = sig == SIGTERM ? odd : data;
        Child c = start_train(train_args(corpus, out));
        REQUIRE_MESSAGE(c.wait_for("step 3/30", 120), c.out);
        c.signal(sig);
        REQUIRE_MESSAGE(c.wait_exit(120), c.out);
        CAPTURE(c.out);
        CHECK(c.exit_code() == code);
        int n = std::atoi(line_after(c.out, "interrupted at step ").c_str());
        REQUIRE(n >= 3);
        REQUIRE(n < 30);
        std::string ckpt = out + "/checkpoint-" + std::to_string(n);
        std::string quoted = sig == SIGTERM ? "'" + odd_dir + "/my corpus'\\''s.txt'" : data;
        std::string command = std::string(PT_CLI) + " train --resume " + ckpt + " --data " + quoted +
                              " --steps 30 --batch 8 --seq 32 --stages 2 --dropout 0.1 --seed 7 --out " + out;
        CHECK(line_after(c.out, "interrupted at step " + std::to_string(n) + ": continue with ") == command);
        // It finished the step it was in, saved it, and ran no other.
        CHECK(c.out.find("step " + std::to_string(n) + "/30") != std::string::npos);
        CHECK(c.out.find("step " + std::to_string(n + 1) + "/30") == std::string::npos);
        check_checkpoints_whole(out);
        REQUIRE(fs::exists(ckpt + "/trainer_state.json"));
        CHECK(!fs::exists(out + "/model.safetensors"));   // the checkpoint is the result, not a final model

        Run resumed = run_command(command);
        REQUIRE_MESSAGE(resumed.code == 0, resumed.out);
        CHECK(resumed.out.find("step " + std::to_string(n) + "/30") == std::string::npos);
        CHECK(resumed.out.find("step 30/30") != std::string::npos);
        CHECK(model_difference(out + "/model.safetensors", reference) == "");   // bitwise the uninterrupted run
    }
}

TEST_CASE("a second signal quits at once; every checkpoint committed is whole") {
    const std::string data = fixture("text/sample_zh.txt");
    // SIGINT then SIGTERM: both are delivered (two SIGINTs sent at once may merge into one), the
    // first asks to stop after the step, the second quits with its own code. Then two Ctrl-C's,
    // the second once the first was seen: a quit, or the end of the step if that came first.
    for (bool two_kinds : {true, false}) {
        CAPTURE(two_kinds);
        std::string out = temp_dir(two_kinds ? "int_term" : "int_int");
        std::vector<std::string> args = train_args(data, out);
        args.insert(args.end(), {"--save-every", "1", "--keep", "100"});   // a save in every step
        Child c = start_train(args);
        REQUIRE_MESSAGE(c.wait_for("step 3/30", 120), c.out);
        c.signal(SIGINT);
        if (two_kinds) {
            c.signal(SIGTERM);
        } else {
            REQUIRE_MESSAGE(c.wait_for("SIGINT: finishing this step", 60), c.out);
            c.signal(SIGINT);
        }
        auto t0 = std::chrono::steady_clock::now();
        REQUIRE_MESSAGE(c.wait_exit(60), c.out);
        CAPTURE(c.out);
        CHECK(since(t0) < 5.0);
        if (two_kinds) {   // whichever of the two a thread took first
            CHECK((c.exit_code() == 130 || c.exit_code() == 143));
            CHECK(c.out.find("pipetrain: second signal: quitting now") != std::string::npos);
            CHECK(c.out.find("interrupted at step") == std::string::npos);
        } else {
            CHECK(c.exit_code() == 130);
        }
        check_checkpoints_whole(out);
        CHECK(fs::exists(out + "/checkpoint-3"));
    }
}

TEST_CASE("a signal in the last step lets the final save finish: the finished model, exit 130") {
    const std::string common = "--data " + fixture("text/sample_zh.txt") + " --steps 2 --batch 64 --seq 64 --stages 2 --out ";
    std::string ref = temp_dir("two_steps"), out = temp_dir("last_step");
    Run straight = run_cli("train --preset tiny " + common + ref);
    REQUIRE_MESSAGE(straight.code == 0, straight.out);
    Child c = start_train({"--data", fixture("text/sample_zh.txt"), "--steps", "2", "--batch", "64", "--seq", "64",
                           "--stages", "2", "--out", out});
    REQUIRE_MESSAGE(c.wait_for("step 1/2", 120), c.out);   // step 2 (of about 0.5 s) is in flight
    c.signal(SIGINT);
    REQUIRE_MESSAGE(c.wait_exit(120), c.out);
    CAPTURE(c.out);
    CHECK(c.exit_code() == 130);
    CHECK(c.out.find("interrupted after the last step: " + out + " holds the finished model") != std::string::npos);
    CHECK(c.out.find("done:") == std::string::npos);   // the final evaluation is skipped
    CHECK(model_difference(out + "/model.safetensors", ref + "/model.safetensors") == "");
}
