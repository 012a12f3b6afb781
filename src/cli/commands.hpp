// src/cli/commands.hpp — the pipetrain commands (src/cli/main.cpp dispatches to them). Each takes
// the words after the command name and returns the exit code: 0 on success, non-zero after a
// one-line error on stderr (main prints the errors these throw).
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "pipeline_lab.hpp"

namespace pt {

int train_main(const std::vector<std::string>& args, const std::string& program);   // train_flags.cpp
int train_main(const std::vector<std::string>& args);   // program: "pipetrain"
int eval_main(const std::vector<std::string>& args);
int schedule_main(const std::vector<std::string>& args);
class Args;
int predict_main(const Args& a);   // schedule --predict (src/cli/predict.cpp)
int partition_main(const std::vector<std::string>& args);
int fill_mask_main(const std::vector<std::string>& args);        // infer.cpp
int generate_main(const std::vector<std::string>& args);         // infer.cpp
int classify_main(const std::vector<std::string>& args);         // infer.cpp: --model DIR (TEXT | --file F)
int inspect_main(const std::vector<std::string>& args);          // inspect.cpp: FILE.safetensors | DIR [--strict]
int tokenize_main(const std::vector<std::string>& args);         // tokenize.cpp: --vocab FILE [--ids] (TEXT | --file F)
int vocab_main(const std::vector<std::string>& args);            // tokenize.cpp: --data F --out vocab.txt [--size N]
int bench_pipeline_main(const std::vector<std::string>& args);   // bench_pipeline.cpp
int bench_gemm_main(const std::vector<std::string>& args);       // bench_gemm.cpp
int bench_link_main(const std::vector<std::string>& args);       // bench_link.cpp
int plot_main(const std::vector<std::string>& args);
int export_main(const std::vector<std::string>& args);           // export.cpp: --model DIR --onnx --out ODIR             // plot.cpp: OUT | --metrics F --trace F --out DIR

// schedules.cpp: --schedule NAME as a pp::Schedule (every name but auto, which needs costs), and
// the chunks per rank it takes when --chunks is not given (the V shape's two).
pp::Schedule make_schedule(const std::string& name, int P, int M, int V, const char* flag = "--schedule");
int default_chunks(const std::string& name);
bool takes_chunks(const std::string& name);   // interleaved, interleaved-zb, looped-bfs: any --chunks V
void require_chunks(const std::string& name, bool given);   // those three need --chunks: an error without it

// ---- plot.cpp: what `train` keeps of a run for `pipetrain plot` ------------------------------
// OUT/metrics.jsonl (a line per step), OUT/schedule.json (what to simulate), counters in --trace.

// One rank's numbers of one step, from its timeline (the trainer's step slots).
struct RankStep {
    double busy_us = 0;      // in F, B, BI, BW
    double span_us = 0;      // the step's wall time on this rank
    double comm_us = 0;      // in send/recv groups: waiting for the peer plus the transfer
    double comm_min_us = 0;  // the shortest group: about one transfer that did not wait
    double groups = 0;       // how many send/recv groups
    double stash_bytes = 0, stashes = 0;   // peaks (TransformerStage)
    double lent_us = 0;      // of its waiting, running pieces of other ranks' kernels (kernels/cpu/threads.cpp)
    double helped_us = 0;    // its own kernels' pieces, run by other threads: waiting ranks, or its process's helper
};

struct StepRecord {
    int step = 0;   // counted from 1
    double loss = 0, lr = 0, grad_norm = 0, tok_per_s = 0, bubble = 0;
    std::vector<RankStep> ranks;   // replica 0's pipeline ranks
    bool eval = false, classifier = false;
    double eval_loss = 0, eval_metric = 0;   // accuracy (classifier) or perplexity
};

// OUT/metrics.jsonl, appended and flushed a line per step. A fresh run starts it empty; a resumed
// one keeps the lines up to the step it resumes from (a crashed run may have logged later ones).
class MetricsLog {
 public:
    void open(const std::string& path, bool resume, int start_step);
    void append(const StepRecord& r);
    ~MetricsLog();

 private:
    std::string path_;
    std::FILE* f_ = nullptr;
};

// OUT/schedule.json: P, M, V, the schedule's name, placement and action lists, the --trace path
// (relative to OUT).
void write_schedule_json(const std::string& path, const std::string& name, const pp::Schedule& s, int M, int V,
                         const std::string& trace);
// Chrome-trace text (pp::chrome_trace) with counter events ("ph":"C"): `loss` on rank 0's track and
// each rank's live stashes and their bytes (stash_bytes[r] / stashes[r] a stash) over the step.
std::string with_trace_counters(const std::string& trace, const std::vector<pp::Event>& events, double loss,
                                const std::vector<RankStep>& ranks);
// `more` (",\n"-led JSON events) added to a pp::chrome_trace text.
std::string with_trace_events(const std::string& trace, const std::string& more);
// The data-parallel sums that ran beside the backward, each rank's on a track of its own (tid
// kSumLane + rank), and each rank's AdamW moments' bytes as a counter (ZeRO-1 splits them).
constexpr int kSumLane = 100000;
std::string with_dp_sums(const std::string& trace, const std::vector<pp::Event>& sums, const std::vector<double>& moment_bytes);
// A data-parallel sum of DpReducer::spans (src/step.hpp), not a pipeline transfer.
bool is_dp_sum(const pp::Event& e);
// Per rank: compute, waiting, transfer and idle time, and the bubble; lines to print.
std::string rank_time_report(const std::vector<RankStep>& ranks);
// A failed run that saved nothing leaves no --out: removes metrics.jsonl and schedule.json when
// they are all OUT holds.
void discard_run_notes(const std::string& out);
// The timeline as an SVG: one row per rank, a legend, and under it `simulated` (if not null).
std::string timeline_svg(const std::vector<pp::Event>& measured, const std::string& title,
                         const std::vector<pp::Event>* simulated, const std::string& simulated_title, const std::string& axis = "time (µs)");

}  // namespace pt
