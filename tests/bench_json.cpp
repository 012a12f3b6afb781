// bench_json — JSON parse time against size (issue #31): safetensors headers of 10 KB to 95 MB
// (N tensors, one object each, all siblings), through pipetrain's readers and, as the peer, the
// JSON library's plain parser on the same text (no depth or duplicate-key checks). Prints a
// markdown table; scripts/reliability.sh puts it in docs/reliability.md.
//   usage: bench_json [max-MB]          (default 100: up to a 95 MB header, the format allows 100)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "big_header.hpp"
#include "src/formats/json.hpp"
#include "src/formats/safetensors.hpp"

namespace {

template <typename F>
double seconds(F&& f) {   // the fastest of 3 runs (1 for the largest inputs)
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (best > 2) break;
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    const double max_mb = argc > 1 ? std::atof(argv[1]) : 100;
    std::printf("| header | tensors | nlohmann::json::parse (peer) | check_json (depth, duplicate keys) | "
                "pt::parse_json | pt::st::parse (the whole header checked) | st::parse / peer |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    // About 68 bytes an entry; the largest stays under safetensors' 100 MB header limit.
    for (int n : {147, 1470, 14705, 147058, 1300000}) {
        if (n * 68e-6 > max_mb) break;
        auto [text, file] = test::many_tensors(n);
        double peer = seconds([&] { (void)nlohmann::json::parse(text); });
        double check = seconds([&] { (void)pt::check_json(text.data(), text.data() + text.size(), true); });
        double ours = seconds([&] { (void)pt::parse_json(text, "header"); });
        double whole = seconds([&] { (void)pt::st::parse("bench.safetensors", file); });
        std::printf("| %.2f MB | %d | %.4f s | %.4f s | %.4f s | %.4f s | %.2f |\n", text.size() / 1e6, n, peer, check,
                    ours, whole, whole / peer);
        std::fflush(stdout);
    }
}
