// fuzz: max_len=8192 dict=plot.dict
// `pipetrain plot`'s inputs through pt::plot_main: the first byte picks the file the rest is —
// 0 a run's metrics.jsonl, 1 a Chrome trace (--trace), 2 a run's schedule.json (read, validated,
// simulated, beside a fixed metrics.jsonl). Seeds: files a training run wrote (seeds/plot/).
// Every picture of an accepted input must be whole SVG: only the elements the writer draws, and
// every coordinate and size a number within a million units of the canvas (not off the page).
#include "tests/fuzz/fuzz_util.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>

#include "src/cli/commands.hpp"

namespace {
const char kMetrics[] = R"({"step": 1, "loss": 5.8, "tok_per_s": 900.5}
{"step": 2, "loss": 5.6, "tok_per_s": 950.25, "eval": {"loss": 5.7}}
)";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const bool quiet = std::freopen("/dev/null", "w", stdout) != nullptr;   // plot says "wrote ..."
    (void)quiet;
    if (size == 0) return 0;
    // A run directory as pipetrain train leaves it: metrics.jsonl, and schedule.json in mode 2.
    const std::string run = fuzz::scratch_path("run"), out = fuzz::scratch_path("pictures");
    const char* names[] = {"metrics.jsonl", "trace.json", "schedule.json"};
    const int mode = data[0] % 3;
    std::filesystem::remove_all(run), std::filesystem::remove_all(out);
    std::filesystem::create_directory(run);
    std::ofstream(run + "/metrics.jsonl") << kMetrics;
    std::ofstream(run + "/" + names[mode], std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(data + 1), std::streamsize(size - 1));
    std::vector<std::string> args = {run, "--out", out};
    if (mode == 1) args = {"--trace", run + "/trace.json", "--out", out};
    if (!fuzz::parse([&] { pt::plot_main(args); })) return 0;
    static const std::set<std::string> kElements = {"svg", "defs", "pattern", "g", "rect", "line", "polyline", "circle", "text"};
    static const std::regex kTag("<([A-Za-z]+)"), kNumber("(?:^|\\s)(?:x|y|x1|x2|y1|y2|cx|cy|r|width|height|points)=\"([^\"]*)\"");
    for (const auto& e : std::filesystem::directory_iterator(out)) {
        std::ifstream f(e.path());
        const std::string svg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        fuzz::expect(svg.rfind("<?xml", 0) == 0 && svg.find("<svg") != std::string::npos && svg.find("</svg>") != std::string::npos,
                     "a picture is one SVG document");
        for (std::sregex_iterator m(svg.begin(), svg.end(), kTag), end; m != end; ++m)
            fuzz::expect(kElements.count((*m)[1]) == 1, "a picture holds only the elements the writer draws");
        for (std::sregex_iterator m(svg.begin(), svg.end(), kNumber), end; m != end; ++m) {
            const std::string v = (*m)[1];
            if (!v.empty() && v.back() == '%') continue;   // the background: 100%
            for (const char* at = v.c_str(); *at;) {   // "12.5" or points "1,2 3,4"
                char* end = nullptr;
                double x = std::strtod(at, &end);
                fuzz::expect(end != at && std::isfinite(x) && std::fabs(x) <= 1e6, "every coordinate and size is a number near the canvas");
                at = end + (*end == ',' || *end == ' ');
            }
        }
    }
    return 0;
}
