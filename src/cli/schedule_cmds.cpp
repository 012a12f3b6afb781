// src/cli/schedule_cmds.cpp — `pipetrain schedule` (a schedule simulated) and `pipetrain
// partition` (a model's layers split over stages).
#include "src/cli/train.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "pipeline_lab.hpp"
#include "src/cli/args.hpp"
#include "src/cli/schedule_csv.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/io.hpp"

namespace pt {

namespace {

// --costs f,bi,bw,comm (times of one micro-batch: F and BI must take some, BW and comm may not), --overlap.
pp::Costs read_costs(const Args& a) {
    pp::Costs costs;
    costs.overlap = a.has("--overlap");   // DualPipe's F&B pairs cost max(F, B)
    if (!a.has("--costs")) return costs;
    std::vector<std::string> f = split(a.str("--costs"), ',');
    std::vector<double> c;
    for (const std::string& x : f) {
        char* end = nullptr;
        double v = std::strtod(x.c_str(), &end);
        if (x.empty() || *end != '\0' || !(v >= 0 && v <= 1e6)) break;
        c.push_back(v);
    }
    if (c.size() != 4 || f.size() != 4 || !(c[0] > 0 && c[1] > 0))
        throw std::runtime_error("--costs: expected f,bi,bw,comm: four numbers in [0, 1e6], f and bi above 0, got \"" +
                                 a.str("--costs") + "\"");
    costs.f = c[0], costs.bi = c[1], costs.bw = c[2], costs.comm = c[3];
    return costs;
}

// --import F.csv: PyTorch's schedule CSV, its ranks, micro-batches and chunks from the file unless given.
pp::Schedule imported(const Args& a, int* P, int* M, int* V, std::string* name) {
    for (const char* flag : {"--schedule", "--memory-cap"})
        if (a.has(flag)) throw std::runtime_error(std::string(flag) + ": not with --import (the file is the schedule)");
    CsvExpect expect{int(a.integer("--stages", 0, 1, 64)), int(a.integer("--micro-batches", 0, 1, 4096)),
                     int(a.integer("--chunks", 0, 1, pp::kMaxChunks)), a.str("--placement")};
    CsvSchedule file = read_schedule_csv(a.str("--import"), expect);
    *P = int(file.schedule.size()), *M = file.M, *V = file.V, *name = a.str("--import");
    return file.schedule;
}

// --schedule S (auto: planned from the costs), at --stages, --micro-batches and --chunks.
pp::Schedule generated(const Args& a, const pp::Costs& costs, int* P, int* M, int* V, std::string* name) {
    if (a.has("--placement")) throw std::runtime_error("--placement: only with --import (a built-in schedule has its own)");
    *P = int(a.integer("--stages", 4, 1, 64)), *M = int(a.integer("--micro-batches", 8, 1, 4096));
    *name = a.str("--schedule", "1f1b");
    require_chunks(*name, a.has("--chunks"));
    *V = int(a.integer("--chunks", default_chunks(*name), 1, pp::kMaxChunks));
    if (a.has("--memory-cap") && *name != "auto") throw std::runtime_error("--memory-cap: only with --schedule auto");
    if (*name != "auto") return make_schedule(*name, *P, *M, *V);
    // The cap counts micro-batch stashes here: there is no model to weigh them.
    if (*V != 1) throw std::runtime_error("--chunks: the auto schedule plans one chunk per rank");
    int cap = int(a.integer("--memory-cap", *P, 1, 1 << 20));
    return pp::auto_schedule(*P, *M, std::vector<pp::Costs>(*P, costs), std::vector<int>(*P, cap));
}

}  // namespace

int schedule_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--stages", "--micro-batches", "--schedule", "--chunks", "--costs", "--memory-cap", "--trace", "--svg",
                  "--import", "--export", "--placement"}, {"--overlap"});
    pp::Costs costs = read_costs(a);
    int P = 0, M = 0, V = 0;
    std::string name;
    pp::Schedule sched = a.has("--import") ? imported(a, &P, &M, &V, &name) : generated(a, costs, &P, &M, &V, &name);
    if (a.has("--export")) check_output_path(a.str("--export"), "--export");
    pp::Costs chunk = costs;   // a chunk is 1/V of a stage, so V chunks cost what one stage does
    chunk.f /= V, chunk.bi /= V, chunk.bw /= V;
    pp::SimResult r = pp::simulate(sched, chunk, V);
    std::printf("%s", pp::ascii_timeline(r.events, P, terminal_columns()).c_str());
    if (V > 1)
        std::printf("costs: f,bi,bw = %g,%g,%g per stage, each of the %d chunks of a rank 1/%d of them; comm %g\n", costs.f,
                    costs.bi, costs.bw, V, V, costs.comm);
    std::printf("makespan %.2f | bubble %.1f%%\n", r.makespan, 100 * r.bubble);
    for (int p = 0; p < P; p++)
        if (V == 1) std::printf("  rank %d: peak live micro-batches %d\n", p, r.peak_live[p]);
        else std::printf("  rank %d: peak live stashes %d ((micro-batch, chunk) pairs: up to M = %d for each of %d chunks)\n",
                         p, r.peak_live[p], M, V);
    if (a.has("--trace")) write_file_atomic(a.str("--trace"), pp::chrome_trace(r.events));
    if (a.has("--svg"))   // plots: the simulated chart as a picture (src/cli/plot.cpp)
        write_file_atomic(a.str("--svg"), timeline_svg(r.events, "simulated: " + name + ", P=" + std::to_string(P) + " M=" +
                                                       std::to_string(M) + " V=" + std::to_string(V), nullptr, "",
                                                       "time (cost units: --costs)"));
    if (a.has("--export")) {   // PyTorch's compute-only CSV (src/cli/schedule_csv.hpp)
        write_file_atomic(a.str("--export"), schedule_csv(sched));
        std::printf("wrote %s: PyTorch's schedule CSV (%s, placement %s)\n", a.str("--export").c_str(), count_of(P, "rank").c_str(),
                    sched.placement == pp::Placement::vee ? "v" : "loop");
    }
    return 0;
}

int partition_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--model", "--preset", "--blocks", "--stages", "--by", "--batch", "--seq"});
    if (a.has("--model") == a.has("--preset")) throw std::runtime_error("--model / --preset: give exactly one of them");
    if (a.has("--blocks") && a.has("--model")) throw std::runtime_error("--blocks: only with --preset");
    ModelConfig cfg = a.has("--model") ? load_model_config(a.str("--model"))
                                        : for_flag("--preset", [&] { return ModelConfig::preset(a.str("--preset")); });
    cfg.num_hidden_layers = int(a.integer("--blocks", cfg.num_hidden_layers, 1, 1024));
    int P = int(a.integer("--stages", 4, 1, 64));
    std::string by = a.str("--by", "time");
    int T = int(a.integer("--seq", std::min(64, cfg.max_position_embeddings), 1, 1 << 16));
    LayerCosts costs = layer_costs(cfg, by, int(a.integer("--batch", 4, 1, 4096)), T);
    auto split = partition_layers(costs, P, 1);
    for (int p = 0; p < P; p++) {
        int first = split[p][0].front(), last = split[p][0].back();
        std::printf("stage %d: layers %d..%d  cost %.4g", p, first, last, costs.stage_cost(p, P, first, last + 1));
        if (by == "memory") {   // the two parts: weights, and the stash of one micro-batch times P - p
            double weights = 0, stash = 0;
            for (int l = first; l <= last; l++) weights += costs.weights[l], stash += costs.cost[l];
            std::printf(" bytes = weights %.0f + %d × stash %.0f", weights, P - p, stash);
        }
        std::printf("\n");
    }
    return 0;
}

}  // namespace pt
