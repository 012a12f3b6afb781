// src/cli/train_report.cpp — what a run prints first (the banner) and last (the trace, the
// bubble explained).
#include "src/cli/train.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>

#include "pipeline_lab.hpp"
#include "src/cli/args.hpp"
#include "src/cli/interrupt.hpp"
#include "src/formats/io.hpp"

namespace pt {

namespace {

// "embedding, blocks 0-1" for layers {0, 1, 2}: layer 0 is the embedding, 1..L the blocks 0..L-1,
// L+1 the head.
std::string layer_names(const std::vector<int>& layers, int L) {
    std::string out;
    for (size_t i = 0; i < layers.size();) {
        int l = layers[i];
        if (l == 0 || l == L + 1) {
            out += (out.empty() ? "" : ", ") + std::string(l == 0 ? "embedding" : "head");
            i++;
            continue;
        }
        size_t j = i;
        while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1 && layers[j + 1] <= L) j++;
        out += (out.empty() ? "" : ", ") + (i == j ? "block " + std::to_string(l - 1)
                                                   : "blocks " + std::to_string(l - 1) + "-" + std::to_string(layers[j] - 1));
        i = j + 1;
    }
    return out;
}

// The threads that compute at once on this machine, and its cores: more threads than cores take
// turns, so their compute stretches and the measured bubble says little about the schedule.
std::pair<int, int> threads_and_cores(const TrainRun& w) {
    int threads = w.P * w.D;
#ifdef PIPETRAIN_MPI
    if (w.mpi) threads = w.mpi->local_size();
#endif
    return {threads * w.threads, int(std::max(1u, std::thread::hardware_concurrency()))};
}

// Why the measured bubble is what it is: the schedule's own bubble with equal stages, the one the
// simulator expects for these stages (their F, BI, BW measured alone, so on enough cores), a note
// when threads outnumber cores, and the stage that holds the others up, with what would balance it.
std::string bubble_report(const TrainRun& w, int blocks, const Args& a) {
    std::string out;
    char line[512];
    pp::Costs unit{1.0 / w.V, 1.0 / w.V, 1.0 / w.V, 0};
    double equal = pp::simulate(w.schedule, unit).bubble, expected = pp::simulate(w.schedule, w.stage_costs).bubble;
    std::snprintf(line, sizeof line, "bubble: measured %.1f%% (last step) | %s with equal stages %.1f%% | these stages, "
                  "simulated from their times measured alone: %.1f%%\n", 100 * w.record.bubble, w.schedule_name.c_str(),
                  100 * equal, 100 * expected);
    out += line;
    auto [threads, cores] = threads_and_cores(w);
    if (threads > cores) {
        std::snprintf(line, sizeof line, "note: %d compute threads share %d cores here, so they take turns: the measured bubble "
                      "mixes waiting with time-sharing; on %d free cores the simulator expects %.1f%%\n", threads, cores,
                      threads, 100 * expected);
        out += line;
    }
    // Each stage's least compute of a step: a step in which a thread lost its core for a while (a
    // scheduler tick is 4 ms, more than a tiny model's stage computes) must not name the wrong stage.
    const std::vector<double>& busy = w.least_busy_us;
    double mean = 0;
    for (double b : busy) mean += b / double(busy.size());
    for (size_t p = 0; p < busy.size() && w.P > 1; p++) {
        if (busy[p] < 1.5 * mean) continue;
        std::string names;
        for (const auto& chunk : w.split[p]) names += (names.empty() ? "" : " | ") + layer_names(chunk, blocks);
        std::string fix = a.str("--partition", "time") != "time"
                              ? "--partition time balances measured times"
                              : "its layers cannot be split finer: fewer --stages, or more blocks per stage (--blocks with a preset)";
        std::snprintf(line, sizeof line, "stage %zu computes %.1f ms a step at the least, %.1fx the mean of %.1f ms (%s): %s\n",
                      p, busy[p] / 1e3, busy[p] / mean, mean / 1e3, names.c_str(), fix.c_str());
        out += line;
    }
    return out;
}

// --trace: the last step of every rank (replica d's ranks are d*P .. d*P+P-1), from 0.
void write_trace(TrainRun& w, Args& a) {
    double first = 1e300;
    for (const pp::Event& e : w.trace_events) first = std::min(first, e.start);
    for (pp::Event& e : w.trace_events) e.start -= first, e.end -= first;
    std::vector<pp::Event> sums;   // the data-parallel sums go on tracks of their own
    for (const pp::Event& e : w.trace_events)
        if (is_dp_sum(e)) sums.push_back(e);
    w.trace_events.erase(std::remove_if(w.trace_events.begin(), w.trace_events.end(), is_dp_sum), w.trace_events.end());
    for (pp::Event& e : w.trace_events)   // what a compute event ran: its layers
        if (!e.comm) {
            const std::vector<int>& l = w.split[e.rank % w.P][e.action.chunk];
            e.detail = "layers " + std::to_string(l.front()) + "-" + std::to_string(l.back());
        }
    // plots: counters (loss, stashes per rank) join the timeline's events
    std::string trace = with_trace_counters(pp::chrome_trace(w.trace_events), w.trace_events, w.last_loss, w.record.ranks);
    write_file_atomic(a.str("--trace"), with_dp_sums(trace, sums, w.moment_bytes));
    std::printf("%s", pp::ascii_timeline(w.trace_events, w.P, terminal_columns()).c_str());
    if (w.mpi) std::printf("trace: every rank's clock put on rank 0's, within ±%.0f µs (half the fastest round trip)\n", w.clock_error_us);
}

}  // namespace

// Rank 0's first lines: the model, the data, the pipeline, the devices, the split.
void print_banner(const TrainRun& w, const Setup& s, Args& a) {
    int64_t n_params = 0;
    for (int i = 0; i < num_model_layers(s.cfg); i++) {
        std::unique_ptr<Layer> l = make_layer(s.cfg, i);   // one at a time: this rank may hold none of them
        for (const ParamInfo& pi : l->params_info) n_params += pi.tied ? 0 : int64_t(pi.numel);
    }
    std::string data = a.has("--inputs")       ? "fixed batch " + a.str("--inputs")
                       : a.has("--dry-run")    ? a.str("--data") + " (not read: --dry-run)"
                       : !s.examples.empty()   ? count_of(int64_t(s.examples.size()), "labeled example") + " of " + std::to_string(s.T)
                                               : count_of(int64_t(s.train.size()), "sequence") + " of " + std::to_string(s.T);
    std::printf("model: %s, hidden %d, heads %d, vocab %d, %.2fM parameters | data: %s\n",
                count_of(s.cfg.num_hidden_layers, "block").c_str(), s.cfg.hidden_size, s.cfg.num_attention_heads,
                s.cfg.vocab_size, n_params / 1e6, data.c_str());
    std::printf("pipeline: %s × %s, schedule %s, %s of %s, recompute %s\n", count_of(w.P, "stage").c_str(),
                count_of(w.D, "replica").c_str(), w.schedule_name.c_str(), count_of(w.M, "micro-batch", "micro-batches").c_str(),
                count_of(s.B / (w.D * w.M), "row").c_str(), a.str("--recompute", "none").c_str());
    if (!w.plan_note.empty()) std::printf("%s\n", w.plan_note.c_str());
    std::printf("device: %s", w.device.name().c_str());
    if (w.device.cuda && !w.mpi && w.gpus > 0) {
        std::printf(" | ranks on");
        for (int r = 0; r < w.P * w.D; r++) std::printf(" %s", device_of_rank(w, r).name().c_str());
    }
    std::printf(" | %s | comm %s%s\n", w.dtype == "bf16" ? "bf16 GEMMs, fp32 weights and optimizer" : "fp32", w.comm.c_str(),
                w.mpi ? (" (" + count_of(w.P * w.D, "process", "processes") + ")").c_str() : "");
    for (int p = 0; p < w.P; p++) {
        std::printf("  stage %d:", p);
        std::string names;
        for (const auto& chunk : w.split[p]) {
            std::printf(" [");
            for (size_t i = 0; i < chunk.size(); i++) std::printf("%s%d", i ? " " : "", chunk[i]);
            std::printf("]");
            names += (names.empty() ? "" : " | ") + layer_names(chunk, s.cfg.num_hidden_layers);
        }
        std::printf(" (%s)\n", names.c_str());
    }
    auto [threads, cores] = threads_and_cores(w);
    if (threads > cores)
        std::printf("note: %d compute threads on %d cores take turns, so the step lines' bubble is above the schedule's; "
                    "the end of the run says what it would be on %d cores\n", threads, cores, threads);
    std::fflush(stdout);
}

// After the run, on every process: rank 0 writes the trace and --dump-grads and prints the end.
int finish(TrainRun& w, const Setup& s, Args& a, const std::vector<std::string>& argv, const std::string& program, double secs) {
    if (!w.root) return w.stop_signal ? interrupt_exit_code(w.stop_signal) : 0;
    if (!w.dump_grads.empty()) w.grads_dump.write(w.dump_grads);   // step 1 did run
    if (w.stopped_at > 0) {
        // The checkpoint is the result. OUT/model.safetensors is not written: next to the config it
        // would read as a finished run's model, and the resumed run writes it when it has finished.
        std::fflush(stdout);
        std::string ckpt = w.out + "/checkpoint-" + std::to_string(w.stopped_at);
        std::fprintf(stderr, "interrupted at step %d: continue with %s\n", w.stopped_at.load(),
                     continue_command(program, argv, ckpt).c_str());
        return interrupt_exit_code(w.stop_signal);
    }
    if (w.trace) write_trace(w, a);
    std::printf("peak stash bytes per stage:");
    for (int p = 0; p < w.P; p++) std::printf(" %.0f", w.peak_stash[p]);
    std::printf("\npeak stashes per stage (micro-batch, chunk):");
    for (int p = 0; p < w.P; p++) std::printf(" %d", w.peak_stashes[p]);
    std::printf("\nweights packed once a step per stage, bytes:");   // M > 1 (kernels/cpu/gemm_reuse.hpp)
    for (int p = 0; p < w.P; p++) std::printf(" %.0f", w.packed_weights[p]);
    // ZeRO-1 splits them over the replicas; under MPI a process knows its own rank's only.
    std::printf("\nAdamW moments per rank, bytes%s:", w.zero && w.D > 1 ? " (ZeRO-1: each tensor's on one replica)" : "");
    for (size_t r = 0; r < w.optim.size(); r++)
        if (w.optim[r]) std::printf(" %zu", w.optim[r]->bytes());
    std::printf("\n");
    if (w.steps > w.start_step) {
        std::printf("last step, per rank:\n%s", rank_time_report(w.record.ranks).c_str());
        std::printf("%s", bubble_report(w, s.cfg.num_hidden_layers, a).c_str());
    }
    if (int sig = w.stop_signal) {   // after the last step: the run is complete, only the evaluation is skipped
        std::fflush(stdout);
        std::fprintf(stderr, "interrupted after the last step: %s holds the finished model; no final evaluation\n", w.out.c_str());
        return interrupt_exit_code(sig);
    }
    char final_loss[64] = "n/a (no step to run)";   // --steps 0, or a resume from the last step
    if (w.steps > w.start_step) std::snprintf(final_loss, sizeof final_loss, "%.7g", w.last_loss);
    std::printf("done: %d steps in %.1fs | final loss %s | %s | saved %s\n", w.steps, secs, final_loss,
                w.final_eval.summary(s.cfg.num_labels > 0).c_str(), w.out.c_str());
    if (w.final_eval.targets > 0 && !std::isfinite(w.final_eval.loss())) {
        std::fflush(stdout);
        std::fprintf(stderr, "pipetrain train: the final eval loss is not finite: the model diverged (lower --lr); %s holds it "
                     "as trained\n", w.out.c_str());
        return 1;
    }
    return 0;
}

}  // namespace pt
