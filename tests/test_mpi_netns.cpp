// Two machines on one box: a 4-stage pipeline trained with --comm mpi, 2 ranks on host pt-a
// and 2 on host pt-b, saves the same model.safetensors, byte for byte, as the same pipeline run
// in one process (rule 9: parallel equals serial, here across "machines").
//
// The two machines are two network namespaces with their own host names, joined by a veth
// pair; tests/netns_mpirun.sh makes them, runs mpirun from pt-a with an rsh agent that starts
// the remote daemon inside pt-b, keeps every message on TCP over the veth pair (no shared
// memory), and removes everything afterwards. Its header says what that proves and what not
// (one kernel, one filesystem, a veth pair instead of a NIC).
//
// main() first runs `hostname` on 2 + 2 ranks through the harness. Where it exits 77 (not
// root, no CAP_SYS_ADMIN, no `ip` or `mpirun`) the whole file is skipped with its reason; else
// the first case checks that both host names appear twice. A build without MPI (no
// PIPETRAIN_MPI) has no --comm mpi: the harness case still runs, then the file reports
// "skipped" for the comparison. A few seconds: each mpirun through the harness starts in about
// 1 s on 2 cores, and the harness kills any that runs past 60 s (PT_NETNS_TIMEOUT).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "src/formats/safetensors.hpp"
#include "tests/cli_util.hpp"

using namespace test;
namespace fs = std::filesystem;

namespace {

const std::string kHarness = std::string(PT_SOURCE_DIR) + "/tests/netns_mpirun.sh";
Run g_hosts;   // `hostname` through the harness, run once by main()

// COMMAND on 2 × per_host ranks, per_host on each of pt-a and pt-b.
Run on_two_hosts(int per_host, const std::string& command) {
    return run_command("PT_NETNS_TIMEOUT=60 " + kHarness + " " + std::to_string(per_host) + " -- " + command);
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> v;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) v.push_back(line);
    return v;
}

#ifdef PIPETRAIN_MPI
// The first tensor of `got` whose bytes differ from `want`'s, and its first differing element.
std::string first_differing_tensor(const std::string& want, const std::string& got) {
    pt::st::File w = pt::st::read(want), g = pt::st::read(got);
    for (const pt::st::TensorInfo& t : w.tensors) {
        const pt::st::TensorInfo* u = g.find(t.name);
        if (!u) return t.name + " is missing";
        if (u->dtype != t.dtype || u->shape != t.shape) return t.name + " has another dtype or shape";
        size_t width = pt::st::dtype_size(t.dtype);
        for (int64_t i = 0; i < t.numel(); ++i)
            if (std::memcmp(&w.data[t.begin + i * width], &g.data[u->begin + i * width], width) != 0)
                return "first differing tensor " + t.name + ", element " + std::to_string(i) + ": " +
                       std::to_string(w.to_f32(t.name)[i]) + " in-process, " + std::to_string(g.to_f32(t.name)[i]) + " over MPI";
    }
    return "the tensors are equal: the header or metadata differs";
}
#endif

}  // namespace

TEST_CASE("the harness runs two ranks on host pt-a and two on host pt-b") {
    REQUIRE_MESSAGE(g_hosts.code == 0, "netns_mpirun.sh 2 -- hostname failed (exit " << g_hosts.code << "):\n" << g_hosts.out);
    int a = 0, b = 0;
    for (const std::string& line : lines_of(g_hosts.out)) {
        a += line == "pt-a";
        b += line == "pt-b";
    }
    MESSAGE("host names seen: pt-a ×" << a << ", pt-b ×" << b);
    CHECK_MESSAGE(a == 2, g_hosts.out);
    CHECK_MESSAGE(b == 2, g_hosts.out);
    CHECK(lines_of(g_hosts.out).size() == 4);   // and nothing else: no warning from mpirun
}

#ifdef PIPETRAIN_MPI
TEST_CASE("--comm mpi on two hosts saves the same bytes as the in-process pipeline") {
    const std::string data = std::string(PT_SOURCE_DIR) + "/tests/fixtures/text/sample_zh.txt";
    REQUIRE_MESSAGE(fs::exists(data), "missing fixture " << data);
    const std::string flags = "train --preset tiny --data " + data +
                              " --stages 4 --micro-batches 4 --batch 8 --seq 32 --steps 3";
    std::string dir1 = temp_dir("netns_ref"), dir2 = temp_dir("netns_mpi");

    Run ref = run_cli(flags + " --out " + dir1);   // 4 stages, 4 threads of one process
    REQUIRE_MESSAGE(ref.code == 0, ref.out);
    Run mpi = on_two_hosts(2, std::string(PT_CLI) + " " + flags + " --comm mpi --out " + dir2);
    REQUIRE_MESSAGE(mpi.code == 0, "pipetrain train --comm mpi on pt-a:2,pt-b:2 failed (exit "
                                       << mpi.code << "):\n" << mpi.out);

    const std::string model1 = dir1 + "/model.safetensors", model2 = dir2 + "/model.safetensors";
    REQUIRE_MESSAGE(fs::exists(model2), "--comm mpi saved no " << model2 << "\n" << mpi.out);
    std::string bytes1 = read_file(model1), bytes2 = read_file(model2);
    CHECK_MESSAGE(bytes1 == bytes2, "model.safetensors differs from the in-process run's ("
                                        << bytes1.size() << " and " << bytes2.size()
                                        << " bytes): " << first_differing_tensor(model1, model2));
    // The done: line is rank 0's; its losses are printed to the last digit.
    for (std::string key : {"final loss ", "eval loss "}) {
        REQUIRE(!value_after(ref.out, key).empty());
        CHECK_MESSAGE(value_after(mpi.out, key) == value_after(ref.out, key),
                      "the done: line's " << key << "differs; the MPI run printed:\n" << mpi.out);
    }
    fs::remove_all(dir1);
    fs::remove_all(dir2);
}
#endif

int main(int argc, char** argv) {
    g_hosts = on_two_hosts(2, "hostname");
    if (g_hosts.code == 77) {
        std::printf("%s", g_hosts.out.c_str());   // the harness's one line: "skipped: <why>"
        return 77;
    }
    doctest::Context ctx(argc, argv);
    int failed = ctx.run();
#ifndef PIPETRAIN_MPI
    if (failed == 0 && !ctx.shouldExit()) {
        std::printf("skipped: pipetrain was built without MPI, so no --comm mpi to compare (the harness itself works)\n");
        return 77;
    }
#endif
    return failed;
}
