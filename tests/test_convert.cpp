// test_convert.cpp — runs tests/test_convert.py, the tests of scripts/convert_checkpoint.py
// (PaddleNLP .pdparams and PyTorch .bin to safetensors), so that ctest covers them too.
// The converter is Python + numpy; where either is missing the case is skipped.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

// Debian's python3 (where scripts/setup.sh installs python3-numpy) before whatever
// python3 comes first on PATH, which may be a pyenv one without numpy.
static std::string python() { return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

// Exit status and output (stdout + stderr) of a shell command.
static int run(const std::string& cmd, std::string& out) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("convert_checkpoint.py passes tests/test_convert.py") {
    std::string probe;
    if (run(python() + " -c 'import numpy'", probe) != 0) {
        MESSAGE("skipped: python3 with numpy not found");
        return;
    }
    std::string out;
    int code = run(python() + " '" PT_SOURCE_DIR "/tests/test_convert.py'", out);
    INFO(out);
    CHECK(code == 0);
    CHECK(out.find(" passed, 0 failed") != std::string::npos);
}
