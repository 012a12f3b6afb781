// tests/fuzz/fuzz_util.hpp — what the libFuzzer targets in tests/fuzz/ share: the loaders'
// contract, a file holding the input (for loaders that take a path), and the fixtures.
//
// The contract (the same as tests/test_fuzz_loaders.cpp): every parse either succeeds or throws
// std::runtime_error with a one-line message. Anything else is a finding: a message with a
// newline, another exception type, a crash or sanitizer report, a hang (-timeout) or unbounded
// memory (-rss_limit_mb). scripts/fuzz.sh builds and runs the targets.
//
// A new target is one file, tests/fuzz/fuzz_NAME.cpp (CMake finds it), shaped like this:
//
//   // fuzz: max_len=4096 seeds=some/dir/*.json dict=json.dict      <- read by scripts/fuzz.sh
//   #include "tests/fuzz/fuzz_util.hpp"
//   #include "src/the_loader.hpp"
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//       fuzz::parse([&] { pt::load_the_thing(fuzz::as_file(data, size)); });
//       return 0;
//   }
//
// `seeds` are globs under tests/fixtures/ (files in tests/fuzz/seeds/NAME/ are added too),
// `dict` a libFuzzer dictionary in tests/fuzz/. Checks stronger than the contract (what an
// accepted input must satisfy) go after a `fuzz::parse` that returned true, with fuzz::expect.
#pragma once

#include <cxxabi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <typeinfo>

namespace fuzz {

// An invariant of an accepted input; a failure aborts, so libFuzzer keeps the input.
inline void expect(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "fuzz: broken invariant: %s\n", what);
    std::abort();
}

// Runs `load` once: true if it succeeded, false if it rejected the input correctly (a
// std::runtime_error with a one-line message). Any other outcome aborts with what happened.
template <typename F>
bool parse(F&& load) {
    try {
        load();
        return true;
    } catch (const std::runtime_error& e) {
        const std::string msg = e.what();
        if (msg.empty() || msg.find('\n') != std::string::npos) {
            std::fprintf(stderr, "fuzz: a rejection must be one non-empty line, got \"%s\"\n", e.what());
            std::abort();
        }
        return false;
    } catch (const std::exception& e) {   // a loader let a library's exception through
        char* name = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, nullptr);
        std::fprintf(stderr, "fuzz: %s escaped (expected std::runtime_error): %s\n", name ? name : typeid(e).name(),
                     e.what());
        std::abort();
    }
}

// A path to a file that holds exactly these bytes: a memfd (memory, not disk) that is reused
// for every input, named /proc/self/fd/N. Opening the path gives a regular file, as a loader
// expects; it is the same file each call, so read it before the next as_file().
inline std::string as_file(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 0) != 0) {
        std::perror("fuzz: memfd");
        std::abort();
    }
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(fd, data + done, size - done, off_t(done));
        if (n <= 0) {
            std::perror("fuzz: writing the memfd");
            std::abort();
        }
        done += size_t(n);
    }
    return "/proc/self/fd/" + std::to_string(fd);
}

// A path in a directory of this process's own in /dev/shm (memory), removed at exit, for what a
// target writes with a writer that needs a directory (it renames a temporary file into place).
inline std::string scratch_path(const std::string& name) {
    static char dir[] = "/dev/shm/pipetrain-fuzz-XXXXXX";
    static const bool made = [] {
        if (!mkdtemp(dir)) {
            std::perror("fuzz: mkdtemp in /dev/shm");
            std::abort();
        }
        return std::atexit([] { std::filesystem::remove_all(dir); }) == 0;
    }();
    (void)made;
    return std::string(dir) + "/" + name;
}

inline std::string text(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

// A file of tests/fixtures/ (PT_FIXTURES is set by tests/fuzz/CMakeLists.txt).
inline std::string fixture(const std::string& rel) { return std::string(PT_FIXTURES) + "/" + rel; }

}  // namespace fuzz
