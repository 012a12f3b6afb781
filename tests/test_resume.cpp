// Exact resume: training 2 steps, saving, and resuming for 2 more gives the bits of 4
// uninterrupted steps, on any pipeline layout; --keep prunes old checkpoints; a resume whose
// flags would change the bits is refused.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <filesystem>

#include "tests/cli_util.hpp"

using namespace test;
namespace fs = std::filesystem;

TEST_CASE("save every 2 steps, resume from step 2: the same bits as 4 uninterrupted steps") {
    const std::string common = " --data " + fixture("text/sample_zh.txt") +
                               " --steps 4 --batch 8 --micro-batches 2 --seq 16 --seed 5 --dropout 0.1 ";
    std::string a = temp_dir("straight"), b = temp_dir("saved");
    REQUIRE(run_cli("train --preset tiny" + common + "--out " + a).code == 0);
    Run saved = run_cli("train --preset tiny" + common + "--out " + b + " --save-every 1 --keep 2");
    REQUIRE_MESSAGE(saved.code == 0, saved.out);
    CHECK(!fs::exists(b + "/checkpoint-1"));   // pruned: only the last two are kept
    CHECK(!fs::exists(b + "/checkpoint-2"));
    REQUIRE(fs::exists(b + "/checkpoint-3/optimizer.safetensors"));
    REQUIRE(fs::exists(b + "/checkpoint-3/trainer_state.json"));
    CHECK(fs::exists(b + "/checkpoint-4"));
    std::string reference = read_file(a + "/model.safetensors");
    CHECK(read_file(b + "/model.safetensors") == reference);
    CHECK(read_file(b + "/checkpoint-4/model.safetensors") == reference);
    for (const char* layout : {"--stages 1", "--stages 2 --schedule zb-h1", "--stages 4 --schedule 1f1b --recompute full"}) {
        std::string c = temp_dir("resumed");
        Run r = run_cli("train" + common + "--out " + c + " --resume " + b + "/checkpoint-3 " + layout);
        CAPTURE(layout);
        REQUIRE_MESSAGE(r.code == 0, r.out);
        CHECK(r.out.find("step 3/4") == std::string::npos);   // it continued after step 3
        CHECK(r.out.find("step 4/4") != std::string::npos);
        CHECK(read_file(c + "/model.safetensors") == reference);
    }
    // A checkpoint without its optimizer moments cannot resume exactly: refused.
    fs::remove(b + "/checkpoint-3/optimizer.safetensors");
    CHECK(run_cli("train" + common + "--out " + temp_dir("nomoments") + " --resume " + b + "/checkpoint-3").code != 0);
    Run seed = run_cli("train" + common + "--seed 6 --out " + temp_dir("seed") + " --resume " + b + "/checkpoint-4");
    CHECK(seed.code != 0);
    CHECK(seed.out.find("--seed") != std::string::npos);
}
