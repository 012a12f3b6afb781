// Test helpers: run the pipetrain CLI, read files, make temporary directories.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace test {

struct Run {
    int code = -1;
    std::string out;   // stdout and stderr together
};

// Runs a shell command line, capturing what it prints.
inline Run run_command(const std::string& command) {
    Run r;
    std::string cmd = command + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

inline Run run_cli(const std::string& args) { return run_command(std::string(PT_CLI) + " " + args); }

// Built with a sanitizer (scripts/sanitize.sh)? They reserve terabytes of shadow memory and keep
// freed memory in quarantine, so no limit on a child's memory is meaningful under them.
inline bool sanitized() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return true;
#else
    return false;
#endif
}

inline std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The directories temp_dir made, removed when the test program exits: a full ctest run writes
// gigabytes there (checkpoints, the browser folder). PIPETRAIN_KEEP_TEST_DIRS=1 keeps them, to look
// into a failure. Each entry names the process that made it, so a forked child that exits through
// exit() removes its own directories and never its parent's.
struct TempDirs {
    std::vector<std::pair<pid_t, std::filesystem::path>> made;
    ~TempDirs() {
        if (std::getenv("PIPETRAIN_KEEP_TEST_DIRS")) return;
        std::error_code ec;   // best effort: a directory that cannot be removed is left, never an error
        for (auto& [pid, dir] : made)
            if (pid == getpid()) std::filesystem::remove_all(dir, ec);
    }
};
inline TempDirs& temp_dirs() {
    static TempDirs dirs;
    return dirs;
}

// A fresh empty directory under the system temp dir, unique per process and name, removed at exit.
inline std::string temp_dir(const std::string& name) {
    auto d = std::filesystem::temp_directory_path() / ("pipetrain_test_" + std::to_string(getpid()) + "_" + name);
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    temp_dirs().made.emplace_back(getpid(), d);
    return d.string();
}

// The text after `key` up to the end of its word, from the last line that contains it.
inline std::string value_after(const std::string& text, const std::string& key) {
    size_t at = text.rfind(key);
    if (at == std::string::npos) return "";
    at += key.size();
    size_t end = text.find_first_of(" \n|", at);
    return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// What f throws, "" if nothing.
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

inline std::string fixture(const std::string& rel) { return std::string(PT_FIXTURES) + "/" + rel; }

}  // namespace test
