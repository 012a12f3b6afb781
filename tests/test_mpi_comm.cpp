// MpiComm (src/mpi_comm.hpp): processes as ranks. Each case launches tests/mpi_comm_worker.cpp
// as N ranks with `scripts/mpirun.sh N mpi_comm_worker MODE TIMEOUT` under timeout(1), so a hang
// is a failed case, never a stuck ctest; the workers check what they receive themselves
// (all-reduce bitwise against ThreadComm on the same inputs). Skipped (exit code 77) in a build
// without MPI or where no mpirun is on PATH.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli_util.hpp"
#include "mpi_util.hpp"
#include "process_util.hpp"
#include "src/mpi_comm.hpp"

namespace {

struct Job {
    int code;
    double seconds;   // from `mark` (or the launch) to the end of mpirun
    std::string out;
};

// Runs the worker as np ranks. `limit_s` is generous (timeout(1) ends a hung job); the cases check
// how long the job took from the moment the worker printed `mark`, so MPI's start is not counted.
Job launch(int np, const std::string& mode, double timeout_s, double limit_s, const std::string& mark = "") {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", limit_s);
    test::Child child = test::Child::exec({"timeout", "-k", "3", secs, std::string(PT_SOURCE_DIR) + "/scripts/mpirun.sh",
                                           std::to_string(np), PT_MPI_WORKER, mode, std::to_string(timeout_s)});
    if (!mark.empty()) child.wait_for(mark, limit_s);
    auto start = std::chrono::steady_clock::now();
    bool ended = child.wait_exit(limit_s + 10);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO("mpirun output:\n" << child.out);
    REQUIRE(ended);
    if (!mark.empty()) REQUIRE(child.out.find(mark) != std::string::npos);
    return {child.exit_code(), took, child.out};
}

bool has(const std::string& out, const std::string& text) { return out.find(text) != std::string::npos; }

void exchange(int np) {
    Job job = launch(np, "exchange", 20, 60);
    INFO("mpirun output:\n" << job.out);
    CHECK(job.code == 0);
    for (int r = 0; r < np; r++) CHECK(has(job.out, "rank " + std::to_string(r) + ": exchange ok"));
}

}  // namespace

TEST_CASE("send/recv, group, all-reduce (bitwise ThreadComm's) and barrier on 2 ranks") { exchange(2); }
TEST_CASE("send/recv, group, all-reduce (bitwise ThreadComm's) and barrier on 4 ranks") { exchange(4); }

// Open MPI's shared memory moves a large message in one copy that the receiver makes (CMA), where
// the kernel lets one process read another's memory. scripts/mpirun.sh used to turn that off in
// every container, and each message then waited for its sender's next MPI call (a 2-stage
// pipeline 21% slower, docs/parallel-bench.md); it now asks the kernel (scripts/cma_probe.py).
TEST_CASE("scripts/mpirun.sh turns Open MPI's single copy off exactly where the kernel forbids it") {
    const std::string scripts = std::string(PT_SOURCE_DIR) + "/scripts/";
    const bool allowed = std::system((scripts + "cma_probe.py 2>/dev/null").c_str()) == 0;
    test::Child child = test::Child::exec({"env", "-u", "OMPI_MCA_btl_vader_single_copy_mechanism", "timeout", "-k", "3", "60",
                                           scripts + "mpirun.sh", "1", "printenv", "OMPI_MCA_btl_vader_single_copy_mechanism"});
    REQUIRE(child.wait_exit(70));
    INFO("the probe says CMA is " << (allowed ? "allowed" : "forbidden") << "; mpirun output:\n" << child.out);
    const bool off = has("\n" + child.out, "\nnone\n");   // printenv's line: the variable's value
    CHECK(off != allowed);
}

// A waiting rank polls MPI_Test (every wait has a deadline, so no blocking MPI_Wait), but sleeps
// between polls once the first 100 found nothing: waiting costs the core almost nothing.
TEST_CASE("a rank that waits 2 s for a message burns under 10% of a core meanwhile") {
    Job job = launch(2, "idle", 20, 60);
    INFO("mpirun output:\n" << job.out);
    REQUIRE(job.code == 0);
    size_t at = job.out.find("rank 1: waited ");
    REQUIRE(at != std::string::npos);
    double wall = 0, cpu = 0;
    REQUIRE(std::sscanf(job.out.c_str() + at, "rank 1: waited %lf s, CPU %lf s", &wall, &cpu) == 2);
    CHECK(wall > 1.5);
    CHECK(cpu < 0.1 * wall);
}

// A waiting process lends its core (kernels/cpu/threads.cpp): the other process's one-thread rank
// gives pieces of its kernels to a helper thread, which may run there, and the bits stay.
TEST_CASE("a waiting process lends its core to the other's kernels, and the bits do not change") {
    Job job = launch(2, "lend", 20, 60);
    INFO("mpirun output:\n" << job.out);
    REQUIRE(job.code == 0);
    CHECK(has(job.out, "rank 0: lend ok"));
    if (std::thread::hardware_concurrency() < 2) {
        MESSAGE("one core: nobody lends");
        return;
    }
    long long given = 0;
    double seconds = 0;
    size_t at = job.out.find("rank 0: gave ");
    REQUIRE(at != std::string::npos);
    REQUIRE(std::sscanf(job.out.c_str() + at, "rank 0: gave %lld pieces, run by its helper for %lf s", &given, &seconds) == 2);
    CHECK(given > 0);
    CHECK(seconds > 0);   // the helper's time, counted for the giver (train's "helped: ...")
}

// The worker's "overlap" case with `env` (NAME, VALUE pairs) set for its launch: rank 0 sends, then
// makes no MPI call until rank 1 has the message, and must say it arrived meanwhile. Open MPI only:
// the eager limits it relies on mean nothing to other MPIs.
namespace {
void check_moves_while_sender_computes(const std::vector<std::pair<std::string, std::string>>& env) {
    if (std::system("\"${MPIRUN:-mpirun}\" --version 2>&1 | grep -q 'Open MPI'") != 0) {
        MESSAGE("skipped: not Open MPI");
        return;
    }
    setenv("PT_OVERLAP_FLAG", (test::temp_dir("overlap") + "/arrived").c_str(), 1);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    Job job = launch(2, "overlap", 30, 60);
    for (const auto& [name, value] : env) unsetenv(name.c_str());
    INFO("mpirun output:\n" << job.out);
    CHECK(job.code == 0);
    CHECK(has(job.out, "rank 0: the message arrived while rank 0 made no MPI call"));
}
}  // namespace

// Open MPI's TCP transport sends a message over its eager limit only when the receiver asks, then
// in pieces, each while the sender is inside an MPI call; MpiWorld raises the limit from 64 KiB to
// 4 MiB, so a pipeline's activation moves while its sender computes. Both ranks on this machine,
// every message over TCP (btl self,tcp), 2 MB.
TEST_CASE("over TCP, a 2 MB message moves while its sender computes (Open MPI's eager limit)") {
    check_moves_while_sender_computes({{"OMPI_MCA_btl", "self,tcp"}});
}

// Where the kernel forbids the single copy, Open MPI's shared memory copies twice, and a message over
// its eager limit (4 KiB) goes in 32 KiB pieces, each while the sender is inside an MPI call:
// scripts/mpirun.sh raises the limit to 512 KiB there, so a 256 KiB activation moves at once.
TEST_CASE("copying twice through shared memory, a 256 KiB message moves while its sender computes") {
    check_moves_while_sender_computes({{"OMPI_MCA_btl_vader_single_copy_mechanism", "none"}, {"PT_OVERLAP_BYTES", "262144"}});
}

TEST_CASE("a receive that nobody sends times out, naming the rank, the peer and the tag") {
    Job job = launch(2, "timeout", 2, 30, "rank 1: receiving");
    INFO("mpirun output:\n" << job.out);
    CHECK(job.code != 0);
    CHECK(job.seconds < 2 + 2.5);   // the timeout, then the job's end
    CHECK(has(job.out, "rank 1 ("));
    // Rank 1 waits for F3; rank 0 sent F4 instead, which the error names too.
    auto text = [](int tag) { return pp::tag_label(tag) + " (tag " + std::to_string(tag) + ")"; };
    CHECK(has(job.out, "recv from rank 0 timed out after 2 s (waiting for " + text(pp::transfer_tag(false, 3, 0)) +
                           "; rank 0 sent " + text(pp::transfer_tag(false, 4, 0)) + " instead)"));
}

TEST_CASE("abort on one rank ends every process promptly, naming the rank and its host") {
    Job job = launch(4, "abort", 30, 30, "rank 2: aborting");
    INFO("mpirun output:\n" << job.out);
    CHECK(job.code != 0);
    CHECK(job.seconds < 3);   // far less than the 30 s the others would wait
    CHECK(has(job.out, "rank 2 ("));
    CHECK(has(job.out, "): stage exploded"));
    CHECK(!has(job.out, "abort ok"));
}

TEST_CASE("a rank that dies mid-exchange ends the job within its timeout") {
    for (std::string mode : {"exit", "kill"}) {   // a string: CAPTURE prints it (a const char* printed its address)
        CAPTURE(mode);
        Job job = launch(3, mode, 3, 30, "rank 1: ending");
        INFO("mpirun output:\n" << job.out);
        CHECK(job.code != 0);
        CHECK(job.seconds < 3 + 3);   // mpirun ends the others at once, or their timeout does
        CHECK(!has(job.out, std::string(mode) + " ok"));
    }
}

TEST_CASE("a process that starts MPI late ends the job after the timeout, naming the call it waited in") {
    // Rank 1 sleeps 15 s before MPI_Init; rank 0 waits in MPI_Init, where MPI itself has no
    // deadline (the old code waited the 15 s and then succeeded).
    Job job = launch(2, "late", 2, 40, "rank ?: starting MPI");
    INFO("mpirun output:\n" << job.out);
    CHECK(job.code != 0);
    CHECK(job.seconds < 2 + 2 + 4);   // the timeout, the watchdog's grace, then the job's end
    CHECK(has(job.out, "watchdog: no progress from rank 0"));
    CHECK(has(job.out, "rank 0: MPI start: MPI_Init, no progress for"));
    CHECK(!has(job.out, "late ok"));
}

int main(int argc, char** argv) {
    if (int skip = test::mpi_skip_code()) return skip;
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
