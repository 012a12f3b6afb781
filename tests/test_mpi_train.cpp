// `pipetrain train` with one rank per process (scripts/mpirun.sh N ... --comm mpi), against the
// same run with the ranks as threads of one process:
//   - bitwise: the final model.safetensors and the last checkpoint (sharded weights, sharded AdamW
//     moments, indexes, trainer state, manifest) are byte-identical, for gpipe, 1f1b, interleaved
//     (V = 2), zb-h1, --recompute full, dp 2 × pp 2, bf16 with eval, trace and --dump-grads, and a
//     classifier;
//   - resume across transports: 4 processes save, 2 threads resume, and the other way round, both
//     ending bitwise where an uninterrupted run ends;
//   - faults: a rank killed (SIGKILL) or a rank whose disk fails (an fsync returns EIO, so it
//     throws) mid-run ends every process within --timeout plus a few seconds, non-zero, naming the
//     rank, and leaves only whole checkpoints.
// Every job runs under timeout(1): a hang is a failed case, never a stuck ctest. Skipped (exit
// code 77) in a build without MPI or where no mpirun is on PATH.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "model_diff.hpp"
#include "mpi_util.hpp"
#include "process_util.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/mpi_comm.hpp"

namespace fs = std::filesystem;
using test::fixture;
using test::model_difference;
using test::read_file;
using test::Run;

namespace {

const std::string kCorpus = fixture("text/sample_zh.txt");

std::string mpirun(int np) { return "timeout -k 5 120 " + std::string(PT_SOURCE_DIR) + "/scripts/mpirun.sh " + std::to_string(np) + " "; }

// Every file of a directory, by name (sub-directories recursively), as bytes.
// Every file but metrics.jsonl, which holds the step times (the same keys and steps on both sides).
std::vector<std::pair<std::string, std::string>> files_of(const std::string& dir) {
    std::vector<std::pair<std::string, std::string>> all;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && e.path().filename() != "metrics.jsonl")
            all.push_back({fs::relative(e.path(), dir).string(), read_file(e.path().string())});
    std::sort(all.begin(), all.end());
    return all;
}

// The same files, with the same bytes: the first difference, or "".
std::string first_difference(const std::string& a, const std::string& b) {
    auto fa = files_of(a), fb = files_of(b);
    for (size_t i = 0; i < std::max(fa.size(), fb.size()); i++) {
        if (i >= fa.size()) return b + "/" + fb[i].first + " only in the second";
        if (i >= fb.size()) return a + "/" + fa[i].first + " only in the first";
        if (fa[i].first != fb[i].first) return "file names differ: " + fa[i].first + " / " + fb[i].first;
        if (fa[i].second != fb[i].second) {
            const std::string& name = fa[i].first;
            bool tensors = name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
            return name + " differs" + (tensors ? ": " + test::model_difference(a + "/" + name, b + "/" + name) : "");
        }
    }
    return fa.empty() ? "no files at all" : "";
}

// Trains `flags` with threads and with np processes; both must succeed with the same files and
// the same closing line.
void same_bits(int np, const std::string& flags) {
    CAPTURE(flags);
    std::string dir = test::temp_dir("mpi_bits"), threads = dir + "/threads", procs = dir + "/procs";
    Run t = test::run_cli("train " + flags + " --out " + threads);
    REQUIRE_MESSAGE(t.code == 0, t.out);
    Run p = test::run_command(mpirun(np) + PT_CLI + " train " + flags + " --comm mpi --out " + procs);
    INFO("processes:\n" << p.out);
    REQUIRE(p.code == 0);
    CHECK(p.out.find("(" + std::to_string(np) + " processes)") != std::string::npos);
    CHECK(first_difference(threads, procs) == "");
    CHECK(test::value_after(t.out, "final loss ") == test::value_after(p.out, "final loss "));
    CHECK(test::value_after(t.out, "eval loss ") == test::value_after(p.out, "eval loss "));
    size_t steps = 0;   // only rank 0 prints the step lines
    for (size_t at = p.out.find("step 1/"); at != std::string::npos; at = p.out.find("step 1/", at + 1)) steps++;
    CHECK(steps == 1);
}

// --partition uniform: a checkpoint's shards hold each rank's layers, so threads and processes
// must split alike to write the same files (the default time split is measured in each run).
std::string common(int stages, int steps = 2) {
    return "--preset tiny --data " + kCorpus + " --batch 8 --seq 32 --steps " + std::to_string(steps) + " --stages " +
           std::to_string(stages) + " --save-every " + std::to_string(steps) + " --dropout 0.1 --timeout 30 --partition uniform";
}

}  // namespace

// Two Open MPI runs at once on one host shared its session directory, and one finishing could
// remove it under the other's start (open-mpi/ompi#8510; a CI run failed so): scripts/mpirun.sh
// gives each run a base of its own and removes it after.
TEST_CASE("scripts/mpirun.sh gives each Open MPI run a session directory base of its own, removed after") {
    const Run v = test::run_command("mpirun --version");
    if (v.out.find("Open MPI") == std::string::npos) {
        MESSAGE("skipped: not Open MPI");
        return;
    }
    std::string bases[2];
    for (std::string& base : bases) {
        const Run r = test::run_command(mpirun(1) + "sh -c 'test -d \"$OMPI_MCA_orte_tmpdir_base\" && echo base=$OMPI_MCA_orte_tmpdir_base'");
        REQUIRE_MESSAGE(r.code == 0, r.out);
        base = test::value_after(r.out, "base=");
        CHECK(base.find("pipetrain-mpirun.") != std::string::npos);
        CHECK_FALSE(fs::exists(base));
    }
    CHECK(bases[0] != bases[1]);
}

TEST_CASE("processes write the bits of threads: gpipe, 1f1b, interleaved, zb-h1") {
    same_bits(2, common(2) + " --schedule gpipe --micro-batches 2");
    same_bits(4, common(4) + " --schedule 1f1b --micro-batches 4");
    same_bits(2, common(2) + " --schedule interleaved --chunks 2 --micro-batches 4");
    same_bits(2, common(2) + " --schedule zb-h1 --micro-batches 4");
}

TEST_CASE("processes write the bits of threads: the V shape (ZB-V, DualPipeV) and late sends (looped BFS)") {
    same_bits(2, common(2) + " --schedule zbv --micro-batches 4");
    same_bits(2, common(2) + " --schedule dualpipev --micro-batches 4");
    same_bits(2, common(2) + " --schedule looped-bfs --chunks 2 --micro-batches 8");
}

TEST_CASE("processes write the bits of threads: --recompute full, dp 2 x pp 2, and with ZeRO-1") {
    same_bits(2, common(2) + " --recompute full --micro-batches 2");
    same_bits(4, common(2) + " --dp 2 --micro-batches 2");
    same_bits(4, common(2) + " --dp 2 --micro-batches 2 --zero 1");   // and its 4 shards of moments
    same_bits(3, common(1) + " --dp 3 --micro-batches 1 --batch 6 --zero 1");
}

// The same micro-batches cut into P stages × D replicas of processes: one device's model (threads,
// P = D = 1), and a checkpoint of 2 × 2 processes resumes as 4 × 1 processes with those bits too.
TEST_CASE("processes: any P x D (1x4, 2x2, 4x1) writes one device's model; 2x2 resumes as 4x1") {
    std::string flags = "--data " + kCorpus + " --batch 8 --seq 32 --steps 4 --dropout 0.1 --timeout 30";
    std::string dir = test::temp_dir("mpi_pd");
    Run one = test::run_cli("train --preset tiny " + flags + " --micro-batches 4 --out " + dir + "/one");
    REQUIRE_MESSAGE(one.code == 0, one.out);
    for (auto [P, D] : {std::pair{1, 4}, {2, 2}, {4, 1}}) {
        std::string out = dir + "/p" + std::to_string(P) + "d" + std::to_string(D);
        Run r = test::run_command(mpirun(P * D) + PT_CLI + " train --preset tiny " + flags + " --stages " + std::to_string(P) + " --dp " +
                                  std::to_string(D) + " --micro-batches " + std::to_string(4 / D) +
                                  (D == 2 ? " --save-every 2" : "") + " --comm mpi --out " + out);
        INFO("P = " << P << ", D = " << D << ":\n" << r.out);
        REQUIRE(r.code == 0);
        CHECK(model_difference(out + "/model.safetensors", dir + "/one/model.safetensors") == "");
        CHECK(test::value_after(r.out, "final loss ") == test::value_after(one.out, "final loss "));
    }
    Run r = test::run_command(mpirun(4) + PT_CLI + " train " + flags + " --resume " + dir + "/p2d2/checkpoint-2 --stages 4" +
                              " --dp 1 --comm mpi --out " + dir + "/resumed");
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(model_difference(dir + "/resumed/model.safetensors", dir + "/one/model.safetensors") == "");
}

// MpiComm posts each layer's reduce-scatter as soon as the layer's gradients are final and moves it
// on whenever the rank starts another: the sums' spans in the trace begin while the backward runs.
TEST_CASE("processes overlap the data-parallel sums with the backward (--dp-overlap 1): the bits of no overlap") {
    std::string dir = test::temp_dir("mpi_overlap");
    std::string flags = common(2) + " --dp 2 --micro-batches 2";
    Run t = test::run_cli("train " + flags + " --dp-overlap 0 --out " + dir + "/threads");
    REQUIRE_MESSAGE(t.code == 0, t.out);
    Run p = test::run_command(mpirun(4) + PT_CLI + " train " + flags + " --dp-overlap 1 --comm mpi --trace " + dir +
                              "/t.json --out " + dir + "/procs");
    INFO("processes:\n" << p.out);
    REQUIRE(p.code == 0);
    CHECK(model_difference(dir + "/procs/model.safetensors", dir + "/threads/model.safetensors") == "");
    std::string trace = test::read_file(dir + "/t.json");
    for (int rank = 0; rank < 4; rank++)   // each process's sums on a track of their own
        CHECK_MESSAGE(trace.find("\"rank " + std::to_string(rank) + ": data-parallel sums\"") != std::string::npos, rank);
}

// With 2 ranks an all-reduce adds the same two numbers whatever its slice order; with 3 it does
// not: the gradient sum of 3 replicas must be the threads' bits too.
TEST_CASE("processes write the bits of threads: a 3-rank all-reduce (dp 3)") {
    same_bits(3, "--preset tiny --data " + kCorpus + " --batch 6 --seq 32 --steps 2 --stages 1 --dp 3 --micro-batches 1"
                 " --save-every 2 --dropout 0.1 --timeout 30");
}

TEST_CASE("processes write the bits of threads: bf16, evaluation, trace and --dump-grads; a classifier") {
    std::string dir = test::temp_dir("mpi_extras");
    // --trace and --dump-grads files land in the out directories compared (one per run).
    for (const char* where : {"threads", "procs"}) fs::create_directories(dir + "/" + where);
    std::string flags = common(2, 3) + " --dtype bf16 --eval-every 1 --micro-batches 2";
    Run t = test::run_cli("train " + flags + " --dump-grads " + dir + "/threads/g.safetensors --trace " + dir +
                          "/threads/t.json --out " + dir + "/threads/out");
    REQUIRE_MESSAGE(t.code == 0, t.out);
    Run p = test::run_command(mpirun(2) + PT_CLI + " train " + flags + " --comm mpi --dump-grads " + dir +
                              "/procs/g.safetensors --trace " + dir + "/procs/t.json --out " + dir + "/procs/out");
    INFO("processes:\n" << p.out);
    REQUIRE(p.code == 0);
    CHECK(first_difference(dir + "/threads/out", dir + "/procs/out") == "");
    CHECK(model_difference(dir + "/threads/g.safetensors", dir + "/procs/g.safetensors") == "");
    // The evaluations during the run print the same numbers.
    CHECK(test::value_after(t.out, "eval | loss ") == test::value_after(p.out, "eval | loss "));
    // The trace holds both ranks' actions, on one clock whose error the run states.
    std::string trace = read_file(dir + "/procs/t.json");
    for (const char* rank : {"\"cat\":\"F\",\"ph\":\"X\",\"pid\":0,", "\"cat\":\"B\",\"ph\":\"X\",\"pid\":1,"})
        CHECK_MESSAGE(trace.find(rank) != std::string::npos, rank);
    CHECK(p.out.find("trace: every rank's clock put on rank 0's, within") != std::string::npos);

    std::string tsv = " --task classify --labels 2 --data " + fixture("classify/train.tsv") + " --eval " +
                      fixture("classify/dev.tsv");
    same_bits(2, "--preset tiny --batch 8 --seq 32 --steps 2 --stages 2 --micro-batches 2 --save-every 2 --timeout 30" + tsv);
}

TEST_CASE("a checkpoint of 4 processes resumes with 2 threads, and one of 2 threads with 4 processes, bitwise") {
    std::string dir = test::temp_dir("mpi_resume");
    std::string flags = "--preset tiny --data " + kCorpus + " --batch 8 --seq 32 --steps 4 --micro-batches 4 --dropout 0.1 --timeout 30 "
                        "--partition uniform";
    Run ref = test::run_cli("train " + flags + " --stages 2 --out " + dir + "/ref");
    REQUIRE_MESSAGE(ref.code == 0, ref.out);

    // 4 processes save checkpoint-2 (4 shards); 2 threads go on from it.
    Run a = test::run_command(mpirun(4) + PT_CLI + " train " + flags + " --stages 4 --save-every 2 --comm mpi --out " + dir + "/a");
    REQUIRE_MESSAGE(a.code == 0, a.out);
    REQUIRE(fs::exists(dir + "/a/checkpoint-2/model-00004-of-00004.safetensors"));
    Run a2 = test::run_cli("train --resume " + dir + "/a/checkpoint-2 --data " + kCorpus + " --stages 2 --out " + dir + "/a2");
    REQUIRE_MESSAGE(a2.code == 0, a2.out);
    CHECK(model_difference(dir + "/a2/model.safetensors", dir + "/ref/model.safetensors") == "");

    // 2 threads save checkpoint-2 (2 shards); 4 processes go on from it.
    Run b = test::run_cli("train " + flags + " --stages 2 --save-every 2 --out " + dir + "/b");
    REQUIRE_MESSAGE(b.code == 0, b.out);
    Run b2 = test::run_command(mpirun(4) + PT_CLI + " train --resume " + dir + "/b/checkpoint-2 --data " + kCorpus +
                               " --stages 4 --comm mpi --out " + dir + "/b2");
    REQUIRE_MESSAGE(b2.code == 0, b2.out);
    CHECK(model_difference(dir + "/b2/model.safetensors", dir + "/ref/model.safetensors") == "");
    // And one process (--comm mpi, -np 1) from the 4-shard checkpoint.
    Run c = test::run_command(mpirun(1) + PT_CLI + " train --resume " + dir + "/a/checkpoint-2 --data " + kCorpus +
                              " --comm mpi --out " + dir + "/c");
    REQUIRE_MESSAGE(c.code == 0, c.out);
    CHECK(model_difference(dir + "/c/model.safetensors", dir + "/ref/model.safetensors") == "");
}

TEST_CASE("mpirun -np N with N != stages x dp is one line from rank 0, and every process exits") {
    std::string dir = test::temp_dir("mpi_np");
    Run r = test::run_command(mpirun(3) + PT_CLI + " train " + common(2) + " --comm mpi --out " + dir + "/o");
    CHECK(r.code != 0);
    CHECK(r.out.find("pipetrain train: --stages 2 × --dp 1 = 2 ranks, but the launcher started 3 processes") != std::string::npos);
    size_t lines = 0;
    for (size_t at = r.out.find("pipetrain train:"); at != std::string::npos; at = r.out.find("pipetrain train:", at + 1)) lines++;
    CHECK(lines == 1);
    CHECK(!fs::exists(dir + "/o/model.safetensors"));
}

#ifdef PT_KILL_SHIM
namespace {

// Every committed checkpoint-N of `out` verifies against its manifest (pipetrain inspect).
void committed_whole(const std::string& out, int* count) {
    *count = 0;
    for (const auto& e : fs::directory_iterator(out)) {
        std::string name = e.path().filename().string();
        if (name.rfind("checkpoint-", 0) != 0) continue;
        ++*count;
        Run r = test::run_cli("inspect " + e.path().string());
        CHECK_MESSAGE(r.code == 0, r.out);
    }
}

}  // namespace

TEST_CASE("a SIGINT or SIGTERM that reaches one rank: every rank saves, and every rank exits 130 / 143") {
    // Each rank's own exit code, from a wrapper around it; the job's from mpirun.
    const std::string dir = test::temp_dir("mpi_signal"), wrap = dir + "/rank.sh";
    // Open MPI ends the job as soon as one rank exits non-zero, so the first wrapper to print waits a
    // second before it exits: else it could kill the other rank's wrapper before that one prints its
    // line (seen once in CI: rank 0's 130 came first, rank 1's line never did).
    std::ofstream(wrap) << "\"$@\"; rc=$?; echo \"rank $OMPI_COMM_WORLD_RANK exit $rc\"; sleep 1; exit $rc\n";
    for (auto [sig, code] : {std::pair{SIGTERM, 143}, {SIGINT, 130}}) {
        CAPTURE(sig);
        const std::string out = dir + "/out" + std::to_string(sig);
        std::string cmd = std::string(PT_SOURCE_DIR) + "/scripts/mpirun.sh 2 bash " + wrap + " " + PT_CLI + " train " +
                          common(2, 2000) + " --micro-batches 2 --save-every 1000 --comm mpi --out " + out;
        test::Child job = test::Child::exec({"timeout", "-k", "5", "120", "bash", "-c", cmd});
        REQUIRE_MESSAGE(job.wait_for("step 3/", 60), job.out);
        // Rank 1's pipetrain (not its wrapper): the process whose command line starts with it.
        Run pid = test::run_command(std::string("for p in $(pgrep -f '^") + PT_CLI + " train .*" + out + "'); do "
                                    "tr '\\0' '\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && echo $p; done");
        REQUIRE_MESSAGE(std::atoi(pid.out.c_str()) > 0, pid.out);
        ::kill(std::atoi(pid.out.c_str()), sig);
        REQUIRE_MESSAGE(job.wait_exit(90), job.out);
        INFO(job.out);
        CHECK(job.out.find("rank 0 exit " + std::to_string(code)) != std::string::npos);   // was 128: rank 0 saw no signal
        CHECK(job.out.find("rank 1 exit " + std::to_string(code)) != std::string::npos);
        CHECK(job.exit_code() == code);
        const std::string stopped = test::value_after(job.out, "interrupted at step ");
        REQUIRE(!stopped.empty());
        CHECK(fs::exists(out + "/checkpoint-" + std::to_string(std::atoi(stopped.c_str())) + "/" + pt::kManifest));   // the step it stopped after
    }
}

TEST_CASE("a rank killed or failing mid-run ends every process within the timeout, naming it") {
    const double timeout = 5;
    std::string flags = common(2, 2000) + " --micro-batches 2 --save-every 1 --keep 1000 --timeout 5 --comm mpi";
    for (std::string fault : {"kill", "throw"}) {   // a string: CAPTURE prints it (a const char* printed its address)
        CAPTURE(fault);
        std::string out = test::temp_dir(std::string("mpi_fault_") + fault);
        // Rank 1 is a process of its own in the job (MPMD: "-np 1 A : -np 1 B"); for "throw" its
        // 10th fsync fails with EIO, in the shards of the third checkpoint or so.
        std::string cmd = std::string(PT_SOURCE_DIR) + "/scripts/mpirun.sh 1 " + PT_CLI + " train " + flags + " --out " + out +
                          " : -np 1 " + (std::string(fault) == "throw" ? "-x LD_PRELOAD=" PT_KILL_SHIM " -x PT_FAIL_FSYNC=10 " : "") +
                          PT_CLI + " train " + flags + " --out " + out;
        test::Child job = test::Child::exec({"timeout", "-k", "5", "120", "bash", "-c", cmd});
        auto t0 = std::chrono::steady_clock::now();
        if (std::string(fault) == "kill") {
            REQUIRE_MESSAGE(job.wait_for("step 3/", 60), job.out);
            t0 = std::chrono::steady_clock::now();
            // Rank 1's process: the pipetrain whose environment says so, and whose --out is ours.
            Run pid = test::run_command("for p in $(pgrep -f 'pipetrain train .*" + out + "'); do "
                                        "tr '\\0' '\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && echo $p; done");
            REQUIRE_MESSAGE(std::atoi(pid.out.c_str()) > 0, pid.out);
            ::kill(std::atoi(pid.out.c_str()), SIGKILL);
        } else {   // from rank 1's report of its failure
            REQUIRE_MESSAGE(job.wait_for("rank 1 (", 60), job.out);
            t0 = std::chrono::steady_clock::now();
        }
        REQUIRE_MESSAGE(job.wait_exit(timeout + 60), job.out);
        double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        CAPTURE(job.out);
        CHECK(job.exit_code() != 0);
        CHECK(took < timeout + 5);
        if (std::string(fault) == "kill") {
            CHECK(job.out.find("rank 1") != std::string::npos);   // mpirun names the process that died
        } else {
            CHECK(job.out.find("rank 1 (") != std::string::npos);    // the rank and its host, from the rank itself
            CHECK(job.out.find("Input/output error") != std::string::npos);
        }
        int count = 0;
        committed_whole(out, &count);
        CHECK(count < 20);   // the run was cut short, and what it committed is whole
        CHECK(!fs::exists(out + "/model.safetensors"));
    }
}
#endif

int main(int argc, char** argv) {
    if (int skip = test::mpi_skip_code()) return skip;
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
