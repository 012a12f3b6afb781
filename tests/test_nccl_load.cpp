// NCCL is opened when a run needs it, not linked (src/nccl_comm.cpp): the pipetrain binary names
// no libnccl, starts and trains on the CPU under an address-space limit that the linked
// libnccl.so.2 (~210 MB) alone exceeded, and a missing NCCL is one line for --comm nccl only.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <elf.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "src/device.hpp"
#ifdef PIPETRAIN_NCCL
#include "src/nccl_comm.hpp"
#endif
#include "tests/cli_util.hpp"

using namespace test;

namespace {

// The DT_NEEDED entries of a 64-bit ELF file (what `readelf -d` lists as "Shared library"):
// the .dynamic section's entries, whose names are offsets into the section it links to.
std::vector<std::string> needed_libraries(const std::string& path) {
    std::string elf = read_file(path);
    REQUIRE_MESSAGE(elf.size() > sizeof(Elf64_Ehdr), path << ": not an ELF file");
    REQUIRE_MESSAGE(std::memcmp(elf.data(), ELFMAG, SELFMAG) == 0, path << ": not an ELF file");
    REQUIRE(elf[EI_CLASS] == ELFCLASS64);
    Elf64_Ehdr eh;
    std::memcpy(&eh, elf.data(), sizeof eh);
    auto section = [&](int i) {
        Elf64_Shdr sh;
        REQUIRE(eh.e_shoff + (i + 1) * sizeof sh <= elf.size());
        std::memcpy(&sh, elf.data() + eh.e_shoff + i * sizeof sh, sizeof sh);
        return sh;
    };
    std::vector<std::string> needed;
    for (int i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr dyn = section(i);
        if (dyn.sh_type != SHT_DYNAMIC) continue;
        Elf64_Shdr strings = section(int(dyn.sh_link));
        REQUIRE(dyn.sh_offset + dyn.sh_size <= elf.size());
        for (size_t at = dyn.sh_offset; at + sizeof(Elf64_Dyn) <= dyn.sh_offset + dyn.sh_size; at += sizeof(Elf64_Dyn)) {
            Elf64_Dyn d;
            std::memcpy(&d, elf.data() + at, sizeof d);
            if (d.d_tag == DT_NULL) break;
            if (d.d_tag == DT_NEEDED) needed.push_back(elf.c_str() + strings.sh_offset + d.d_un.d_val);
        }
    }
    return needed;
}

// The old binary (libnccl.so.2 linked) needed 201000 KiB to print --help on the machine this
// was written on: at 200000 it segfaulted before main, below that the loader refused libnccl.
const char* kLimitKiB = "200000";

std::string tiny_train(const std::string& out) {
    return "train --preset tiny --data " + fixture("text/sample_zh.txt") + " --steps 2 --batch 4 --seq 16 --out " + out;
}

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("the pipetrain binary does not link libnccl") {
    std::vector<std::string> needed = needed_libraries(PT_CLI);
    CHECK(!needed.empty());   // the parser works: libc at least
    for (const std::string& lib : needed) {
        INFO("pipetrain needs " << lib);
        CHECK(lib.find("nccl") == std::string::npos);
    }
}

TEST_CASE("under a 200 MB address-space limit pipetrain starts and trains on the CPU") {
    if (sanitized()) {
        MESSAGE("skipped: sanitizer build (its shadow memory exceeds any address-space limit)");
        return;
    }
    std::string limit = std::string("ulimit -v ") + kLimitKiB + " && ";
    Run help = run_command("bash -c '" + limit + "exec " + PT_CLI + " --help'");
    INFO(help.out);
    CHECK(help.code == 0);
    CHECK(help.out.find("usage: pipetrain") != std::string::npos);

    std::string dir = temp_dir("nccl_load_ulimit");
    Run train = run_command("bash -c '" + limit + "exec " + PT_CLI + " " + tiny_train(dir + "/out") + "'");
    INFO(train.out);
    CHECK(train.code == 0);
    CHECK(std::filesystem::exists(dir + "/out/model.safetensors"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("a CPU run never opens libnccl") {
    // LD_DEBUG=files makes the dynamic loader report every library it opens, dlopen included.
    std::string dir = temp_dir("nccl_load_cpu");
    Run r = run_command("LD_DEBUG=files " + std::string(PT_CLI) + " " + tiny_train(dir + "/out") + " --stages 2");
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("| comm thread") != std::string::npos);
    CHECK(r.out.find("libnccl") == std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("without a loadable NCCL, --comm nccl is one line and --comm auto says nothing of it") {
    std::string dir = temp_dir("nccl_load_missing");
    std::string missing = "PIPETRAIN_NCCL_LIBRARY=" + dir + "/no/libnccl.so.2 ";
#ifdef PIPETRAIN_NCCL
    std::string expect = "pipetrain train: --comm nccl: cannot load " + dir + "/no/libnccl.so.2 (";
#else
    std::string expect = "pipetrain train: --comm nccl: this build has no NCCL";
#endif
    // On the CPU NCCL is asked for anyway: the library is checked before the devices.
    Run cpu = run_command(missing + PT_CLI + " " + tiny_train(dir + "/out") + " --stages 2 --comm nccl");
    INFO(cpu.out);
    CHECK(cpu.code == 1);
    CHECK(cpu.out.rfind(expect, 0) == 0);
    CHECK(lines(cpu.out) == 1);
    CHECK(!std::filesystem::exists(dir + "/out"));

    // --device cuda: the same line where there are GPUs; here without one, --device says so first.
    Run gpu = run_command(missing + PT_CLI + " " + tiny_train(dir + "/out") + " --stages 2 --device cuda --comm nccl");
    INFO(gpu.out);
    CHECK(gpu.code == 1);
    CHECK(lines(gpu.out) == 1);
    if (pt::cuda_device_count() > 0) CHECK(gpu.out.rfind(expect, 0) == 0);
#ifdef PIPETRAIN_CUDA
    else CHECK(gpu.out.find("no CUDA GPU is visible") != std::string::npos);
#else
    else CHECK(gpu.out.find("this build has no CUDA") != std::string::npos);
#endif

    Run cpu_auto = run_command(missing + PT_CLI + " " + tiny_train(dir + "/out") + " --stages 2");
    INFO(cpu_auto.out);
    CHECK(cpu_auto.code == 0);
    CHECK(cpu_auto.out.find("| comm thread") != std::string::npos);
    CHECK(cpu_auto.out.find("NCCL") == std::string::npos);
    std::filesystem::remove_all(dir + "/out");

    // With a GPU per rank auto would take NCCL: it falls back to threads with a one-line note.
    if (pt::cuda_device_count() >= 2) {
        Run gpu_auto = run_command(missing + PT_CLI + " " + tiny_train(dir + "/out") + " --stages 2 --device cuda");
        INFO(gpu_auto.out);
        CHECK(gpu_auto.code == 0);
        CHECK(gpu_auto.out.find("| comm thread") != std::string::npos);
        CHECK(gpu_auto.out.find("note: --comm auto uses the thread communicator, NCCL is unavailable: ") !=
              std::string::npos);
    } else {
        MESSAGE("skipped: --comm auto's fallback from NCCL needs two GPUs");
    }
    std::filesystem::remove_all(dir);
}

#ifdef PIPETRAIN_NCCL
// In this process NCCL is opened once, here, from a path that does not exist.
TEST_CASE("nccl_available: a missing library is one line naming it, and NcclWorld throws it") {
    std::string missing = temp_dir("nccl_load_api") + "/no/libnccl.so.2";
    ::setenv("PIPETRAIN_NCCL_LIBRARY", missing.c_str(), 1);
    std::string why;
    CHECK_FALSE(pt::nccl_available(&why));
    INFO(why);
    CHECK(why.rfind("cannot load " + missing + " (", 0) == 0);
    CHECK(why.find("No such file") != std::string::npos);   // dlerror's reason is kept
    CHECK(why.find('\n') == std::string::npos);

    // Opened once: a later call gives the first answer without looking again.
    ::unsetenv("PIPETRAIN_NCCL_LIBRARY");
    std::string again;
    CHECK_FALSE(pt::nccl_available(&again));
    CHECK(again == why);
    CHECK_THROWS_WITH_AS(pt::NcclWorld({0, 1}, 1.0), ("NCCL: " + why).c_str(), std::runtime_error);
}
#endif
