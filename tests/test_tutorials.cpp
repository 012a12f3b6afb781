// The tutorials tell students what to look at ("bitwise equal", "the error is exactly 0", "the
// bubble falls like the formula"). Each one runs here and what it claims is read back from its
// output, so a change that breaks a claim fails a test instead of teaching something false.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <vector>

#include "tests/cli_util.hpp"

using namespace test;

namespace {

// docs/answers.md quotes the tutorials' deterministic numbers, each inside an invisible marker
//   <!--05 /loss: one device ([0-9.]+)/-->5.79223653<!---->
// that says where it comes from: the first group of the regex's first match in tutorial 05's
// output. Checked on every run, so a tutorial that prints another number fails here.
struct Marker {
    std::string tutorial, pattern, value, section;
    size_t value_at = 0;   // where the value starts in the document
};

const char* const kAnswers = PT_SOURCE_DIR "/docs/answers.md";

std::vector<Marker> answer_markers(const std::string& doc) {
    std::vector<Marker> all;
    std::regex marker(R"(<!--(\d\d) /(.*?)/-->([^<]*)<!---->)");
    for (auto it = std::sregex_iterator(doc.begin(), doc.end(), marker); it != std::sregex_iterator(); ++it) {
        const std::smatch& m = *it;
        size_t heading = doc.rfind("\n## ", size_t(m.position(0)));   // the section the marker is in
        size_t title = heading == std::string::npos ? 0 : heading + 4;
        std::string section = title ? doc.substr(title, doc.find('\n', title) - title) : "";
        all.push_back({m[1].str(), m[2].str(), m[3].str(), section, size_t(m.position(3))});
    }
    return all;
}

// Checks every marker of `tutorial` against its output. With PT_UPDATE_ANSWERS=1
// (scripts/answer_key.sh) it writes the printed values into the key instead: no number is typed.
void check_answer_key(const std::string& tutorial, const std::string& out) {
    std::string doc = read_file(kAnswers);
    std::vector<Marker> markers = answer_markers(doc);
    bool update = std::getenv("PT_UPDATE_ANSWERS") != nullptr;
    // From the last to the first: a value replaced leaves the earlier markers where they were.
    for (auto m = markers.rbegin(); m != markers.rend(); ++m) {
        if (m->tutorial != tutorial) continue;
        std::smatch got;
        std::string where = "docs/answers.md, section \"" + m->section + "\", marker /" + m->pattern + "/";
        bool found = std::regex_search(out, got, std::regex(m->pattern)) && got.size() > 1;
        CHECK_MESSAGE(found, where << ": no match in tutorial " << tutorial << "'s output");
        if (!found) continue;
        if (update) {
            doc.replace(m->value_at, m->value.size(), got[1].str());
            continue;
        }
        CHECK_MESSAGE(got[1].str() == m->value, where << ": the key says " << m->value << ", tutorial " << tutorial << " prints "
                                                      << got[1].str() << " (scripts/answer_key.sh rewrites the key)");
    }
    if (update) std::ofstream(kAnswers, std::ios::binary) << doc;
}

// Every tutorial exits 0, says what to look at and ends with a question for the student.
void check_lesson_shape(const std::string& name, const Run& r) {
    INFO(r.out);
    REQUIRE(r.code == 0);
    std::string lower = r.out;
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    CHECK(lower.find("look at") != std::string::npos);
    CHECK(lower.find("question") != std::string::npos);
    // ...and its last line points to the answer: "answer: docs/answers.md, section "05 model parallel"".
    std::string section = name;
    for (char& c : section) c = c == '_' ? ' ' : c;
    std::string pointer = "answer: docs/answers.md, section \"" + section + "\"\n";
    CHECK_MESSAGE(r.out.size() >= pointer.size(), "the output is shorter than the answer pointer");
    if (r.out.size() >= pointer.size()) CHECK(r.out.substr(r.out.size() - pointer.size()) == pointer);
}

// The tutorials are built next to the pipetrain binary. The answer key is checked outside
// check_lesson_shape's INFO, so that a stale number is reported in one line, not after the output.
Run run_tutorial(const std::string& name) {
    std::string path = (std::filesystem::path(PT_CLI).parent_path() / ("tutorial_" + name)).string();
    REQUIRE_MESSAGE(std::filesystem::exists(path), path << " is missing: build the tutorials");
    Run r = run_command(path);
    check_lesson_shape(name, r);
    check_answer_key(name.substr(0, 2), r.out);
    return r;
}

// Every match of `pattern` in `text`: the captured groups of each, as numbers.
std::vector<std::vector<double>> numbers(const std::string& text, const std::string& pattern) {
    std::vector<std::vector<double>> all;
    std::regex re(pattern);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
        std::vector<double> groups;
        for (size_t i = 1; i < it->size(); i++) groups.push_back(std::stod((*it)[i].str()));
        all.push_back(groups);
    }
    return all;
}

bool has(const std::string& text, const std::string& s) { return text.find(s) != std::string::npos; }

// Tutorials that write files print their own fresh directory runs/tutorialNN-<pid>: the test
// removes what its run made (and only that) once it has checked it.
void remove_run_dirs(const std::string& out) {
    std::regex dir(R"((/[^ \n]*)?runs/tutorial\d\d-\d+)");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), dir); it != std::sregex_iterator(); ++it)
        std::filesystem::remove_all(it->str());
}

// "<what>: bitwise equal", and no tensor reported as differing.
void check_bitwise(const std::string& out, std::vector<std::string> what) {
    for (const std::string& w : what) CHECK_MESSAGE(has(out, w + ": bitwise equal"), w);
    CHECK(!has(out, "first differing tensor"));
}

}  // namespace

TEST_CASE("01_gemm: the blocked kernel's error against the naive loop is exactly 0") {
    Run r = run_tutorial("01_gemm");
    auto errors = numbers(r.out, R"(max \|blocked - naive\| = ([0-9.e+-]+))");
    CHECK(errors.size() == 12);
    for (const auto& e : errors) CHECK(e[0] == 0.0);
}

TEST_CASE("02_layernorm: unit variance, rows of dinp summing to 0, analytic = numeric") {
    Run r = run_tutorial("02_layernorm");
    for (const auto& v : numbers(r.out, R"(out has mean ([0-9.e+-]+), variance ([0-9.e+-]+))")) {
        CHECK(std::abs(v[0]) < 1e-6);
        CHECK(v[1] == doctest::Approx(1.0).epsilon(1e-4));
    }
    auto fd = numbers(r.out, R"(d\w+\[\d\]\s+([0-9.e+-]+)\s+([0-9.e+-]+))");
    CHECK(fd.size() == 5);
    for (const auto& v : fd) CHECK(v[0] == doctest::Approx(v[1]).epsilon(1e-3));
}

TEST_CASE("03_attention: no gradient into padding keys; flash = unfused") {
    Run r = run_tutorial("03_attention");
    CHECK(has(r.out, "sum |dk| + |dv| over the padding keys = 0\n"));
    CHECK(has(r.out, "max |out_flash - out| = 0,"));
    auto fd = numbers(r.out, R"(d[qkv]: max \|analytic - numeric\| = ([0-9.e+-]+))");
    CHECK(fd.size() == 3);
    for (const auto& v : fd) CHECK(v[0] < 1e-4);
}

TEST_CASE("04_train_one_device: the loss falls") {
    Run r = run_tutorial("04_train_one_device");
    auto loss = numbers(r.out, R"(\nloss ([0-9.]+) -> ([0-9.]+))");
    REQUIRE(loss.size() == 1);
    CHECK(loss[0][1] < loss[0][0] - 0.5);
}

TEST_CASE("05_model_parallel: two stages give one device's bits, on one time axis") {
    Run r = run_tutorial("05_model_parallel");
    check_bitwise(r.out, {"gradients", "parameters"});
    CHECK(has(r.out, "simulated bubble 50%"));
    // Both ranks time from one origin: F0 goes 0 -> 1, B0 comes back, and neither arrives before
    // it was sent. The tutorial computes the verdict; the numbers are checked here again.
    auto ts = numbers(r.out, R"(transfer [FB]\d+(?:\.\d+)?: rank \d started sending at (-?[0-9.]+) µs, rank \d had it at (-?[0-9.]+) µs)");
    CHECK(ts.size() == 2);
    for (const auto& t : ts) CHECK(t[1] >= t[0]);
    CHECK(has(r.out, "transfers in causal order: yes\n"));
}

TEST_CASE("06_gpipe: the simulated bubble is (P-1)/(M+P-1)") {
    Run r = run_tutorial("06_gpipe");
    auto rows = numbers(r.out, R"(\n\s+(\d+)\s+\d+ \|\s+([0-9.]+)%\s+([0-9.]+)%)");
    CHECK(rows.size() == 4);
    for (const auto& v : rows) {
        CHECK(v[1] == doctest::Approx(100.0 / (v[0] + 1)).epsilon(1e-3));   // P = 2
        CHECK(v[2] == v[1]);
    }
}

TEST_CASE("07_1f1b: P - rank live micro-batches, same bits as GPipe") {
    Run r = run_tutorial("07_1f1b");
    CHECK(has(r.out, "gpipe: makespan 33, bubble 27.3%, live micro-batches per rank: 8 8 8 8"));
    CHECK(has(r.out, "1f1b: makespan 33, bubble 27.3%, live micro-batches per rank: 4 3 2 1"));
    check_bitwise(r.out, {"parameters"});
}

TEST_CASE("08_recompute: recomputation changes no bit") {
    Run r = run_tutorial("08_recompute");
    auto loss = numbers(r.out, R"(loss: none ([0-9.]+), full ([0-9.]+))");
    REQUIRE(loss.size() == 1);
    CHECK(loss[0][0] == loss[0][1]);
    check_bitwise(r.out, {"gradients", "parameters"});
}

TEST_CASE("09_grad_accum_and_dp: accumulation differs by rounding only, data parallelism by no bit") {
    Run r = run_tutorial("09_grad_accum_and_dp");
    auto rel = numbers(r.out, R"(relative difference ([0-9.e+-]+))");
    CHECK(rel.size() == 1);   // one big batch against 4 micro-batches
    for (const auto& v : rel) CHECK(v[0] < 1e-6);
    CHECK(has(r.out, "gradients: bitwise equal\n  parameters: bitwise equal"));   // 2 replicas x 2 against 1 x 4
}

TEST_CASE("10_interleaved_zero_bubble: simulated bubbles equal the formulas") {
    Run r = run_tutorial("10_interleaved_zero_bubble");
    auto sim = numbers(r.out, R"((?:1f1b|interleaved V=2|zb-h1): makespan [0-9.]+, bubble ([0-9.]+)%)");
    auto formulas = numbers(r.out, R"(formulas: \(P-1\)/\(M\+P-1\) = ([0-9.]+)%, \(P-1\)/\(V\*M\+P-1\) = ([0-9.]+)%, )"
                                   R"(\(P-1\)/\(3M\+P-1\) = ([0-9.]+)%)");
    REQUIRE(sim.size() == 3);
    REQUIRE(formulas.size() == 1);
    for (int i = 0; i < 3; i++) CHECK(sim[i][0] == formulas[0][i]);
    CHECK(formulas[0][0] == doctest::Approx(20.0));   // P = 2, M = 4
}

TEST_CASE("11_ernie: loaded by hand, then the fine-tuned classifier beats chance") {
    Run r = run_tutorial("11_ernie");
    // Loaded by hand (steps 1-3): the PaddleNLP file and the Hugging Face file are one model.
    CHECK(has(r.out, "Hugging Face and PaddleNLP files differ in 0 of them"));
    CHECK(has(r.out, "[MASK] at position 5, top 5 logits:"));
    auto acc = numbers(r.out, R"(done: .* accuracy ([0-9.]+))");
    REQUIRE(acc.size() == 1);
    CHECK(acc[0][0] > 0.6);
    CHECK(std::regex_search(r.out, std::regex(R"(writing under runs/tutorial11-\d+/)")));
    remove_run_dirs(r.out);
}

TEST_CASE("11_ernie: two runs at once each write their own directory and both succeed") {
    // They once shared one fixed directory that each removed at its start: the second aborted (134).
    std::string path = (std::filesystem::path(PT_CLI).parent_path() / "tutorial_11_ernie").string();
    REQUIRE(std::filesystem::exists(path));
    Run a, b;
    std::thread first([&] { a = run_command(path); }), second([&] { b = run_command(path); });
    first.join(), second.join();
    INFO(a.out);
    INFO(b.out);
    CHECK(a.code == 0);
    CHECK(b.code == 0);
    std::smatch ma, mb;
    std::regex dir(R"(writing under (runs/tutorial11-\d+)/)");
    REQUIRE(std::regex_search(a.out, ma, dir));
    REQUIRE(std::regex_search(b.out, mb, dir));
    CHECK(ma[1].str() != mb[1].str());
    remove_run_dirs(a.out), remove_run_dirs(b.out);
}

TEST_CASE("12_gpu_pipeline: runs, on a GPU or on CPU threads standing in for one") {
    Run r = run_tutorial("12_gpu_pipeline");
    if (has(r.out, "no CUDA device here")) MESSAGE("no GPU: steps 2 and 4 (CPU vs GPU, GPU bits) were skipped");
    else CHECK(has(r.out, "  parameters: bitwise equal"));   // step 4: two GPU runs
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, std::regex(R"(wrote (runs/tutorial12-\d+/timeline\.json))")));
    CHECK(std::filesystem::file_size(m[1].str()) > 0);
    remove_run_dirs(r.out);
}

TEST_CASE("13_processes: processes give the threads' bits, and both timelines are drawn") {
    Run r = run_tutorial("13_processes");
    remove_run_dirs(r.out);
    if (has(r.out, "MPI unavailable")) {
        MESSAGE("no MPI or no mpirun: the process run (steps 2 and 3) was skipped");
        return;
    }
    check_bitwise(r.out, {"parameters"});
    CHECK(numbers(r.out, R"(\nrank 3 \|[^\n]*\|\n)").size() == 2);   // threads', then processes' timeline
    CHECK(numbers(r.out, R"(processes / threads = ([0-9.]+))").size() == 1);
}

TEST_CASE("14_bring_your_own_model: pipeline.hpp alone, GPipe and 1F1B give one thread's bits") {
    // CMake builds this tutorial with a copy of pipeline.hpp as its only include directory.
    Run r = run_tutorial("14_bring_your_own_model");
    auto count = [&](const std::string& s) {
        size_t n = 0;
        for (size_t at = r.out.find(s); at != std::string::npos; at = r.out.find(s, at + 1)) n++;
        return n;
    };
    CHECK(count("gradients: bitwise equal") == 2);   // gpipe, 1f1b
    CHECK(count("loss: bitwise equal") == 2);
    CHECK(count("max difference 0)") == 2);
    CHECK(numbers(r.out, R"(\nrank 3 \|[^\n]*\|\n)").size() == 2);   // both measured timelines
}

TEST_CASE("15_v_shape: ZB-V's bubble is its formula, auto keeps its caps and beats ZB-H2, ZB-V trains bitwise") {
    Run r = run_tutorial("15_v_shape");
    auto zbv = numbers(r.out, R"(\nzbv +makespan +[0-9.]+ \| bubble +([0-9.]+)%)");
    auto formula = numbers(r.out, R"(formula: zbv's bubble \(P-1\)/\(6M\+P-1\) = ([0-9.]+)%)");
    REQUIRE(zbv.size() == 1);
    REQUIRE(formula.size() == 1);
    CHECK(zbv[0][0] == formula[0][0]);
    auto h2 = numbers(r.out, R"(zb-h2 ([0-9.]+) \(8\))");
    auto plans = numbers(r.out, R"(auto, cap ([0-9]+) stashes: makespan ([0-9.]+) \| bubble [0-9.]+% \| most stashes ([0-9]+))");
    REQUIRE(h2.size() == 1);
    REQUIRE(plans.size() == 3);
    for (const auto& p : plans) CHECK(p[2] <= p[0]);   // the cap holds
    CHECK(plans[2][1] < h2[0][0]);                      // 2P stashes: better than ZB-H2
    CHECK(plans[0][1] > plans[1][1]);                   // less memory, longer step
    check_bitwise(r.out, {"parameters"});
}

// docs/answers.md answers every tutorial's closing question (section "NN name", named after the
// file) and the README's lab guide: a tutorial added without its answer fails here.
TEST_CASE("docs/answers.md: one non-empty section per tutorial, and the lab guide") {
    std::string answers = read_file(PT_SOURCE_DIR "/docs/answers.md");
    REQUIRE_MESSAGE(!answers.empty(), PT_SOURCE_DIR "/docs/answers.md is missing or empty");
    // The body of "## <title>": the text up to the next "## " heading.
    auto body = [&](const std::string& title) -> std::string {
        size_t at = answers.find("\n## " + title + "\n");
        if (at == std::string::npos) return "";
        at += title.size() + 5;
        size_t end = answers.find("\n## ", at);
        std::string b = answers.substr(at, end == std::string::npos ? std::string::npos : end - at);
        return b.find_first_not_of(" \n\t") == std::string::npos ? "" : b;
    };
    int tutorials = 0;
    for (const auto& entry : std::filesystem::directory_iterator(PT_SOURCE_DIR "/tutorials")) {
        std::string file = entry.path().filename().string();
        if (!std::regex_match(file, std::regex(R"(\d\d_\w+\.cpp)"))) continue;
        std::string title = file.substr(0, file.size() - 4);
        for (char& c : title) c = c == '_' ? ' ' : c;
        CHECK_MESSAGE(!body(title).empty(), "docs/answers.md has no section \"## " << title << "\" with a body");
        tutorials++;
    }
    CHECK(tutorials >= 15);
    CHECK_MESSAGE(!body("Lab guide").empty(), "docs/answers.md has no section \"## Lab guide\"");
}

// A marker that names no tutorial, or whose regex captures nothing, would never be checked.
TEST_CASE("docs/answers.md: every marked number names a tutorial and a regex that captures it") {
    std::vector<Marker> markers = answer_markers(read_file(kAnswers));
    CHECK(markers.size() >= 30);
    for (const Marker& m : markers) {
        INFO("section \"" << m.section << "\", marker /" << m.pattern << "/");
        bool exists = false;
        for (const auto& entry : std::filesystem::directory_iterator(PT_SOURCE_DIR "/tutorials"))
            exists |= entry.path().filename().string().rfind(m.tutorial + "_", 0) == 0;
        CHECK_MESSAGE(exists, "no tutorials/" << m.tutorial << "_*.cpp");
        CHECK(std::regex(m.pattern).mark_count() >= 1);
        CHECK(!m.value.empty());
    }
}
