// Exact resume: training 2 steps, saving, and resuming for 2 more gives the bits of 4
// uninterrupted steps, on any pipeline layout; --keep prunes old checkpoints; a resume whose
// flags would change the bits is refused.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "src/formats/safetensors.hpp"

#include "tests/cli_util.hpp"
#include "tests/model_diff.hpp"

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
    const std::string reference = a + "/model.safetensors";   // the uninterrupted run
    CHECK(model_difference(b + "/model.safetensors", reference) == "");
    CHECK(model_difference(b + "/checkpoint-4/model.safetensors", reference) == "");
    for (std::string layout : {"--stages 1", "--stages 2 --schedule zb-h1", "--stages 4 --schedule 1f1b --recompute full"}) {
        std::string c = temp_dir("resumed");
        Run r = run_cli("train" + common + "--out " + c + " --resume " + b + "/checkpoint-3 " + layout);
        CAPTURE(layout);
        REQUIRE_MESSAGE(r.code == 0, r.out);
        CHECK(r.out.find("step 3/4") == std::string::npos);   // it continued after step 3
        CHECK(r.out.find("step 4/4") != std::string::npos);
        CHECK(model_difference(c + "/model.safetensors", reference) == "");
    }
    // The checkpoint's settings are the defaults: --resume, --data and --out are enough.
    std::string plain = temp_dir("plain");
    Run p = run_cli("train --data " + fixture("text/sample_zh.txt") + " --out " + plain + " --resume " + b + "/checkpoint-3");
    REQUIRE_MESSAGE(p.code == 0, p.out);
    CHECK(model_difference(plain + "/model.safetensors", reference) == "");
    // Another number of micro-batches draws other dropout masks: refused, as another seed is.
    Run m = run_cli("train" + common + "--micro-batches 4 --out " + temp_dir("m4") + " --resume " + b + "/checkpoint-3");
    CHECK(m.code != 0);
    CHECK(m.out.find("--micro-batches: the checkpoint") != std::string::npos);
    // A checkpoint without its optimizer moments cannot resume exactly: refused.
    fs::remove(b + "/checkpoint-3/optimizer.safetensors");
    CHECK(run_cli("train" + common + "--out " + temp_dir("nomoments") + " --resume " + b + "/checkpoint-3").code != 0);
    // 2 micro-batches in all on 3 replicas: it blamed --batch ("8 is not divisible by --dp × --micro-batches = 6").
    Run three = run_cli("train --data " + fixture("text/sample_zh.txt") + " --dp 3 --out " + temp_dir("dp3") + " --resume " + b + "/checkpoint-4");
    CHECK(three.code == 1);
    CHECK(three.out.find("--dp: the checkpoint was trained with 2 micro-batches in all (--dp × --micro-batches), which 3 replicas "
                         "cannot share evenly") != std::string::npos);
    Run seed = run_cli("train" + common + "--seed 6 --out " + temp_dir("seed") + " --resume " + b + "/checkpoint-4");
    CHECK(seed.code != 0);
    CHECK(seed.out.find("--seed") != std::string::npos);
}

// A bf16 run's checkpoint records its dtype: a plain --resume continued it in fp32, other bits,
// saying nothing.
TEST_CASE("a bf16 checkpoint resumes in bf16, with the bits of the uninterrupted run; --dtype fp32 is refused") {
    const std::string common = " --data " + fixture("text/sample_zh.txt") + " --batch 8 --seq 16 --seed 5 ";
    std::string a = temp_dir("bf16_straight"), b = temp_dir("bf16_saved"), c = temp_dir("bf16_resumed");
    REQUIRE(run_cli("train --preset tiny --steps 4 --dtype bf16" + common + "--out " + a).code == 0);
    REQUIRE(run_cli("train --preset tiny --steps 4 --dtype bf16 --save-every 2" + common + "--out " + b).code == 0);
    Run r = run_cli("train --data " + fixture("text/sample_zh.txt") + " --resume " + b + "/checkpoint-2 --out " + c);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(r.out.find("bf16") != std::string::npos);
    CHECK(model_difference(c + "/model.safetensors", a + "/model.safetensors") == "");
    Run fp32 = run_cli("train" + common + "--dtype fp32 --resume " + b + "/checkpoint-2 --out " + temp_dir("bf16_fp32"));
    CHECK(fp32.code == 1);
    CHECK(fp32.out.find("--dtype: the checkpoint " + b + "/checkpoint-2 was trained with \"bf16\", not \"fp32\"") != std::string::npos);
}

// Every micro-batch's gradient is summed in one tree over the global micro-batch index
// (src/pairwise.hpp), so a checkpoint resumes at any other (stages, replicas) with the same
// micro-batches in all, bitwise; --micro-batches defaults to the checkpoint's count over the new --dp.
TEST_CASE("resume 2x2 -> 4x1 -> 1x2 (stages x replicas): the bits of one device's uninterrupted run") {
    const std::string common = " --data " + fixture("text/sample_zh.txt") +
                               " --steps 6 --batch 8 --seq 16 --seed 5 --dropout 0.1 --save-every 2 --keep 3 ";
    std::string one = temp_dir("pd_one"), a = temp_dir("pd_2x2"), b = temp_dir("pd_4x1"), c = temp_dir("pd_1x2");
    REQUIRE(run_cli("train --preset tiny" + common + "--micro-batches 4 --out " + one).code == 0);
    Run r = run_cli("train --preset tiny" + common + "--stages 2 --dp 2 --micro-batches 2 --out " + a);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    r = run_cli("train" + common + "--resume " + a + "/checkpoint-2 --stages 4 --dp 1 --schedule zb-h1 --out " + b);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(r.out.find("4 stages × 1 replica, schedule zb-h1, 4 micro-batches of 2 rows") != std::string::npos);
    CHECK(r.out.find("warning") == std::string::npos);   // each rank loads its layers: the others' tensors are expected
    r = run_cli("train" + common + "--resume " + b + "/checkpoint-4 --stages 1 --dp 2 --out " + c);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(model_difference(c + "/model.safetensors", one + "/model.safetensors") == "");
    // Other micro-batches in all (here 2 of 4 rows each) are refused, naming both counts.
    Run m = run_cli("train" + common + "--resume " + b + "/checkpoint-4 --dp 2 --micro-batches 1 --out " + temp_dir("pd_bad"));
    CHECK(m.code != 0);
    CHECK(m.out.find("trained with 4 micro-batches in all (--dp × --micro-batches), not --dp 2 × --micro-batches 1") !=
          std::string::npos);
}

// A ZeRO-1 checkpoint holds each replica's moments in shards of its own (optimizer-0000k-of-0000N,
// N = stages × replicas) and resumes without ZeRO or with it at another --dp, bitwise.
TEST_CASE("--zero 1 checkpoints: sharded moments that resume at --zero 0 and at another --dp") {
    const std::string common = " --data " + fixture("text/sample_zh.txt") +
                               " --steps 4 --batch 8 --seq 16 --seed 5 --dropout 0.1 --save-every 2 ";
    std::string one = temp_dir("z_one"), z = temp_dir("z_2x2");
    REQUIRE(run_cli("train --preset tiny" + common + "--micro-batches 4 --out " + one).code == 0);
    Run r = run_cli("train --preset tiny" + common + "--stages 2 --dp 2 --micro-batches 2 --zero 1 --out " + z);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    for (int k = 1; k <= 4; k++) CHECK(fs::exists(z + "/checkpoint-2/optimizer-0000" + std::to_string(k) + "-of-00004.safetensors"));
    for (std::string layout : {"--stages 1 --dp 1 --zero 0", "--stages 1 --dp 4 --zero 1"}) {
        std::string c = temp_dir("z_resumed");
        Run resumed = run_cli("train" + common + "--resume " + z + "/checkpoint-2 " + layout + " --out " + c);
        CAPTURE(layout);
        REQUIRE_MESSAGE(resumed.code == 0, resumed.out);
        CHECK(model_difference(c + "/model.safetensors", one + "/model.safetensors") == "");
    }
}

TEST_CASE("resume and --keep never lose or corrupt a checkpoint") {
    const std::string common = " --data " + fixture("text/sample_zh.txt") + " --steps 4 --batch 4 --seq 16 --seed 5 ";
    std::string b = temp_dir("ckpts");
    // A checkpoint of another run, later than this one's, in the --out a run continues in (--resume
    // OUT/checkpoint-N: nothing there is cleared): --keep 1 prunes this run's older checkpoints,
    // never that one and never the newest of its own.
    REQUIRE(run_cli("train --preset tiny" + common + "--out " + b + " --save-every 1 --keep 10 --save-format paddle").code == 0);
    fs::create_directories(b + "/checkpoint-100");
    Run saved = run_cli("train" + common + "--out " + b + " --resume " + b + "/checkpoint-2 --save-every 1 --keep 1");
    REQUIRE_MESSAGE(saved.code == 0, saved.out);
    CHECK(fs::exists(b + "/checkpoint-100"));
    CHECK(fs::exists(b + "/checkpoint-4/trainer_state.json"));
    CHECK(!fs::exists(b + "/checkpoint-3"));
    // A fresh run with --overwrite replaces what was there, that checkpoint too.
    Run fresh = run_cli("train --preset tiny" + common + "--out " + b + " --save-every 1 --keep 1 --save-format paddle --overwrite");
    REQUIRE_MESSAGE(fresh.code == 0, fresh.out);
    CHECK(!fs::exists(b + "/checkpoint-100"));
    CHECK(fs::exists(b + "/checkpoint-4/trainer_state.json"));
    CHECK(!fs::exists(b + "/checkpoint-3"));
    // Saving into the checkpoint being resumed would overwrite it: refused, for it and inside it.
    std::string ckpt = b + "/checkpoint-4";
    std::string state = read_file(ckpt + "/trainer_state.json");
    for (const std::string& out : {ckpt, ckpt + "/more"}) {
        Run r = run_cli("train" + common + "--out " + out + " --resume " + ckpt);
        CAPTURE(r.out);
        CHECK(r.code != 0);
        CHECK(r.out.find("--out: " + out + " is inside the checkpoint --resume reads") != std::string::npos);
    }
    CHECK(read_file(ckpt + "/trainer_state.json") == state);
    // Dropout changes the bits, so a different --dropout is refused like a different --seed.
    Run drop = run_cli("train" + common + "--dropout 0 --out " + temp_dir("drop") + " --resume " + ckpt);
    CHECK(drop.code != 0);
    CHECK(drop.out.find("--dropout: the checkpoint " + ckpt + " was trained with 0.1, not 0.0: omit --dropout to continue "
                        "with the checkpoint's") != std::string::npos);
    // A resumed run saves in the format of the run it continues (--save-format paddle above).
    std::string c = temp_dir("continued");
    Run cont = run_cli("train" + common + "--steps 4 --out " + c + " --resume " + ckpt);
    REQUIRE_MESSAGE(cont.code == 0, cont.out);
    CHECK(read_file(c + "/model.safetensors").find("encoder.layers.0.self_attn.q_proj.weight") != std::string::npos);
    // A trainer_state.json with a negative step is refused, naming the file.
    std::string neg = temp_dir("negative");
    fs::copy(ckpt, neg, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    std::string st = read_file(neg + "/trainer_state.json");
    st.replace(st.find("\"step\": 4"), 9, "\"step\": -3");
    std::ofstream(neg + "/trainer_state.json") << st;
    fs::remove(neg + "/pipetrain_manifest.json");   // edited by hand: the manifest would refuse it first (--no-verify)
    Run r = run_cli("train" + common + "--out " + temp_dir("neg_out") + " --resume " + neg + " --no-verify");
    CHECK(r.code != 0);
    CHECK(r.out.find(neg + "/trainer_state.json: \"step\" is negative") != std::string::npos);
    // A checkpoint without its AdamW moments, or with one of the wrong size, is refused in one line
    // (after --no-verify's), before any step, with nothing written.
    auto refused = [&](const std::string& dir, const std::string& flags, const std::string& words) {
        const std::string out = temp_dir("refused_out");
        fs::remove_all(out);
        Run x = run_cli("train" + common + flags + " --out " + out + " --resume " + dir);
        INFO(flags << "\n" << x.out);
        CHECK(x.code != 0);
        CHECK(x.out.find(words) != std::string::npos);
        CHECK(std::count(x.out.begin(), x.out.end(), '\n') == 2);
        CHECK(!fs::exists(out));
    };
    const std::string moments = temp_dir("moments");
    fs::copy(ckpt, moments, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    fs::remove(moments + "/pipetrain_manifest.json");   // edited by hand, as by another tool
    const pt::st::File optimizer = pt::st::read(moments + "/optimizer.safetensors");
    const pt::st::TensorInfo& first = optimizer.tensors.front();
    pt::st::Writer shorter;   // the first moment one element short, the rest as saved
    for (const pt::st::TensorInfo& t : optimizer.tensors)
        if (&t == &first) shorter.add(t.name, t.dtype, {int64_t(t.end - t.begin) / 4 - 1}, optimizer.data.data() + t.begin, t.end - t.begin - 4);
        else shorter.add(t.name, t.dtype, t.shape, optimizer.data.data() + t.begin, t.end - t.begin);
    shorter.write(moments + "/optimizer.safetensors");
    refused(moments, "--no-verify", moments + "/optimizer.safetensors: " + first.name + " has the wrong size");
    fs::remove(moments + "/optimizer.safetensors");
    refused(moments, "--no-verify", moments + ": no optimizer.safetensors or optimizer.safetensors.index.json");
}
