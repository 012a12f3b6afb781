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
    std::vector<double> c = numbers(a.str("--costs"), 1e6);
    if (c.size() != 4 || !(c[0] > 0 && c[1] > 0))
        throw std::runtime_error("--costs: expected f,bi,bw,comm: four numbers in [0, 1e6], f and bi above 0, got \"" +
                                 a.str("--costs") + "\"");
    costs.f = c[0], costs.bi = c[1], costs.bw = c[2], costs.comm = c[3];
    return costs;
}

// A chunk is 1/V of a stage, so V chunks cost what one stage does.
pp::Costs per_chunk(pp::Costs c, int V) {
    c.f /= V, c.bi /= V, c.bw /= V;
    return c;
}

// --schedule auto: the cap counts a whole stage's stashes (there is no model to weigh them); a
// V-shaped plan's chunk holds half a stage, so it may hold twice as many.
pp::Schedule plan_auto_stashes(int P, int M, const pp::Costs& costs, int cap) {
    std::vector<pp::Costs> loop(P, costs), vee(P, per_chunk(costs, 2));
    return pp::auto_schedule(P, M, loop, std::vector<int>(P, cap), vee, std::vector<int>(P, 2 * cap));
}

// Which named schedule `s` is (auto's pick), or "the greedy plan".
std::string name_of(const pp::Schedule& s, int P, int M) {
    for (const char* name : {"1f1b", "zb-h1", "zb-h2", "v-half", "v-min"})
        if (make_schedule(name, P, M, default_chunks(name)) == s) return name;
    return "the greedy plan";
}

// `pipetrain schedule --compare`: bubble against peak activation memory of the schedules that trade
// one for the other, at the same P, M and costs, each simulated (pp::simulate). Memory is the most
// any rank stashes, in a whole stage's activations of one micro-batch: a V chunk's stash is half.
std::string compare_schedules(int P, int M, const pp::Costs& costs) {
    std::string out = "schedule  chunks  makespan  bubble  peak stashes  activations (stages)  of 1f1b's\n";
    double base = 0;
    for (const char* name : {"1f1b", "zb-h1", "zbv", "v-half", "v-min"}) {
        int V = default_chunks(name);
        pp::SimResult r = pp::simulate(make_schedule(name, P, M, V), per_chunk(costs, V));
        int peak = *std::max_element(r.peak_live.begin(), r.peak_live.end());
        double stages = double(peak) / V;
        if (base == 0) base = stages;
        char line[160];
        std::snprintf(line, sizeof line, "%-8s  %6d  %8.2f  %5.1f%%  %12d  %20.1f  %8.2f\n", name, V, r.makespan,
                      100 * r.bubble, peak, stages, stages / base);
        out += line;
    }
    return out;
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
    if (*V != 1) throw std::runtime_error("--chunks: the auto schedule plans one chunk per rank");
    return plan_auto_stashes(*P, *M, costs, int(a.integer("--memory-cap", *P, 1, 1 << 20)));
}

}  // namespace

int schedule_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--stages", "--micro-batches", "--schedule", "--chunks", "--costs", "--memory-cap", "--trace", "--svg",
                  "--import", "--export", "--placement", "--preset", "--model", "--blocks", "--dp", "--batch", "--seq",
                  "--ranks-per-node", "--dtype", "--zero", "--dp-overlap", "--links", "--flops"},
           {"--overlap", "--compare", "--predict", "--measured"});
    for (const char* flag : {"--preset", "--model", "--blocks", "--dp", "--batch", "--seq", "--ranks-per-node", "--dtype",
                             "--zero", "--dp-overlap", "--links", "--flops", "--measured"})
        if (a.has(flag) && !a.has("--predict")) throw std::runtime_error(std::string(flag) + ": only with --predict");
    if (a.has("--predict")) {
        for (const char* other : {"--costs", "--memory-cap", "--trace", "--svg", "--import", "--export", "--placement", "--compare", "--overlap"})
            if (a.has(other)) throw std::runtime_error(std::string(other) + ": not with --predict");
        if (a.has("--flops") && a.has("--measured")) throw std::runtime_error("--flops: not with --measured (the layers timed here)");
        if (a.has("--model") && a.has("--preset")) throw std::runtime_error("--model / --preset: give one of them");
        if (a.has("--blocks") && a.has("--model")) throw std::runtime_error("--blocks: only with --preset (a model has its own)");
        return predict_main(a);
    }
    pp::Costs costs = read_costs(a);
    if (a.has("--compare")) {
        for (const char* other : {"--schedule", "--chunks", "--memory-cap", "--trace", "--svg", "--import", "--export", "--placement", "--overlap"})
            if (a.has(other))
                throw std::runtime_error(std::string("--compare: compares 1f1b, zb-h1, zbv, v-half and v-min; drop ") + other);
        int P = int(a.integer("--stages", 4, 1, 64)), M = int(a.integer("--micro-batches", 8, 1, 4096));
        std::printf("P = %d, M = %d, costs f,bi,bw = %g,%g,%g per stage (a chunk 1/V of them), comm %g\n%s", P, M, costs.f,
                    costs.bi, costs.bw, costs.comm, compare_schedules(P, M, costs).c_str());
        return 0;
    }
    int P = 0, M = 0, V = 0;
    std::string name;
    pp::Schedule sched = a.has("--import") ? imported(a, &P, &M, &V, &name) : generated(a, costs, &P, &M, &V, &name);
    for (const char* flag : {"--trace", "--svg", "--export"})   // before anything is written: all of them, or none
        if (a.has(flag)) check_output_path(a.str(flag), flag);
    if (sched.placement == pp::Placement::vee) V = 2;
    pp::SimResult r = pp::simulate(sched, per_chunk(costs, V), V);
    std::printf("%s", pp::ascii_timeline(r.events, P, terminal_columns()).c_str());
    if (name == "auto") std::printf("auto picked %s\n", name_of(sched, P, M).c_str());
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
