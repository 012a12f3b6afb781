// src/cli/train_flags.cpp — `pipetrain train`: the flags, --dry-run, and the order of a run.
#include "src/cli/train.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "pipeline_lab.hpp"
#include "src/cli/args.hpp"
#include "src/cli/interrupt.hpp"
#include "src/cli/schedule_csv.hpp"
#include "src/mpi_comm.hpp"

namespace pt {

namespace {

// The flags that size the run, into w (and the batch size into s).
void read_flags(TrainFlags& w, Setup& s, Args& a) {
    w.out = a.required("--out");
    w.save_format = a.str("--save-format", "hf");
    if (w.save_format != "hf" && w.save_format != "paddle")
        throw std::runtime_error("--save-format: expected hf or paddle, got \"" + w.save_format + "\"");
    w.P = int(a.integer("--stages", 1, 1, 64));
    w.D = int(a.integer("--dp", 1, 1, 64));
    w.zero = a.integer("--zero", 0, 0, 1) == 1;
    w.overlap = a.integer("--dp-overlap", 1, 0, 1) == 1;
    // --schedule-file: the file's micro-batches unless --micro-batches says (and is checked against it)
    bool from_file = a.has("--schedule-file") && !a.has("--micro-batches");
    w.M = int(a.integer("--micro-batches", from_file ? read_schedule_csv(a.str("--schedule-file"), {w.P, 0, 0, ""}).M : 1, 1, 4096));
    w.steps = int(a.integer("--steps", 10, 0, 1 << 30));
    w.threads = int(a.integer("--threads", 1, 1, 256));
    w.lr = a.real("--lr", 1e-3, 0);
    w.clip = a.real("--clip", 1.0, 1e-6);
    w.weight_decay = a.real("--weight-decay", 0.01, 0);
    w.warmup = int(a.integer("--warmup", std::max(1, w.steps / 10), 1, 1 << 30));
    w.dump_grads = a.str("--dump-grads");
    w.eval_every = int(a.integer("--eval-every", s.cfg.num_labels > 0 ? std::max(1, w.steps / 5) : 0, 0, 1 << 30));
    bool fixed = a.has("--inputs");
    s.B = fixed ? s.fixed.B : int(a.integer("--batch", 8, 1, 1 << 20));
    if (fixed && a.has("--batch") && a.integer("--batch", 0) != s.fixed.B)
        throw std::runtime_error("--batch: the --inputs file holds " + std::to_string(s.fixed.B) + " rows");
    if (s.B % (w.D * w.M) != 0)
        throw std::runtime_error("--batch: " + std::to_string(s.B) + " is not divisible by --dp × --micro-batches = " +
                                 std::to_string(w.D * w.M));
}

// Checkpoints and the state an exact --resume needs (a dry run checks them too).
void record_state(TrainRun& w, const Setup& s, Args& a, const nlohmann::json& saved) {
    w.save_every = int(a.integer("--save-every", 0, 0, 1 << 30));
    w.keep = int(a.integer("--keep", 2, 1, 1 << 20));
    if (a.has("--keep") && w.save_every == 0) throw std::runtime_error("--keep: only with --save-every (it keeps the last K checkpoints)");
    w.state = {{"seed", s.seed}, {"batch", s.B}, {"seq", s.T}, {"objective", s.cfg.is_decoder ? "causal" : "mlm"},
               {"lr", w.lr}, {"warmup", w.warmup}, {"steps", w.steps}, {"clip", w.clip}, {"weight-decay", w.weight_decay},
               {"dropout", std::stod(std::to_string(s.cfg.hidden_dropout_prob))},   // 0.1, not 0.10000000149
               {"micro-batches", w.M}, {"dp", w.D},   // D × M: the micro-batches' size and dropout keys
               {"dtype", w.dtype}};   // bf16 rounds the weights' copies: an fp32 resume gives other bits
    if (a.has("--resume")) {
        namespace fs = std::filesystem;
        fs::path from = fs::weakly_canonical(a.str("--resume")), to = fs::weakly_canonical(w.out);
        if (std::mismatch(from.begin(), from.end(), to.begin(), to.end()).first == from.end())
            throw std::runtime_error("--out: " + w.out + " is inside the checkpoint --resume reads (" + a.str("--resume") +
                                     "): saving there would overwrite it");
        check_resume_state(w, a.str("--resume"), saved);
    }
    w.state["save-format"] = w.save_format;   // not compared on --resume: it does not change the bits
}

// This process's ranks: all of them, or under MPI its own.
void make_ranks(TrainRun& w, Args& a) {
    int R = w.P * w.D;
    w.stages.resize(R), w.optim.resize(R);
    for (int r = 0; r < R; r++)
        if (!w.mpi || r == w.rank) make_rank(w, r);
    w.peak_stash.assign(w.P, 0.0);
    w.peak_stashes.assign(w.P, 0);
    w.packed_weights.assign(w.P, 0.0);
    w.trace = a.has("--trace");
}

// --dry-run: the flags are read and the pipeline planned (model, split, schedule) as for the run,
// then it stops: nothing trained, nothing written, --data not read. A line for another machine
// (mpirun -H, srun) can be checked here.
int dry_run(TrainRun& w, const Setup& s, Args& a) {
    check_out_for_dry_run(w, a);
    w.comm = w.mpi ? "mpi" : a.str("--comm", "auto");
    print_banner(w, s, a);
    pp::validate(w.schedule, w.M, w.V, pp::plan_for(w.schedule, w.V));
    std::printf("dry run: the flags and the plan are valid (%s × %s = %s); nothing was trained or written\n",
                count_of(w.P, "stage").c_str(), count_of(w.D, "replica").c_str(), count_of(w.P * w.D, "rank").c_str());
    return 0;
}

// The run, in every process: all ranks as threads (mpi null), or this process's rank of an MPI job.
int train(Args& a, const std::vector<std::string>& argv, const std::string& program, pt::MpiWorld* mpi) {
    TrainRun w;
    w.mpi = mpi;
#ifdef PIPETRAIN_MPI
    if (mpi) w.rank = mpi->rank(), w.local_rank = mpi->local_rank();
#endif
    w.root = w.rank == 0;
    w.comm = a.str("--comm", "auto");
    w.timeout = a.real("--timeout", 120.0, 1e-3, 1e6);
    nlohmann::json saved = a.has("--resume") ? read_trainer_state(a.str("--resume")) : nlohmann::json();
    if (a.has("--resume")) resume_defaults(a, saved);
    Setup s = make_setup(a, true);
    w.setup = &s;
    read_flags(w, s, a);
#ifdef PIPETRAIN_MPI
    if (mpi && mpi->size() != w.P * w.D) {   // every process sees it: rank 0 says it, all exit
        if (!w.root) return 1;
        std::fprintf(stderr, "pipetrain train: --stages %d × --dp %d = %s, but the launcher started %s (mpirun -np %d)\n",
                     w.P, w.D, count_of(w.P * w.D, "rank").c_str(), count_of(mpi->size(), "process", "processes").c_str(),
                     w.P * w.D);
        return 1;
    }
#endif
    plan_pipeline(w, s, a);
    record_state(w, s, a, saved);
    if (a.has("--dry-run")) return dry_run(w, s, a);
    choose_comm(w);
    make_ranks(w, a);
    OutDir out;
    if (w.root) out = prepare_out(w, a), print_banner(w, s, a);
    if (w.root) {   // plots: what `pipetrain plot OUT` reads (src/cli/plot.cpp)
        w.metrics.open(w.out + "/metrics.jsonl", a.has("--resume"), w.start_step);
        write_schedule_json(w.out + "/schedule.json", w.schedule_name, w.schedule, w.M, w.V, a.str("--trace"));
    }
    // From here a first Ctrl-C or SIGTERM stops the run after the step in flight, with a checkpoint
    // (run_rank); until the end, so that one after the last step lets the final save finish.
    InterruptHandlers interrupts;
    auto t0 = Clock::now();
    run_world(w, out.made);
    return finish(w, s, a, argv, program, std::chrono::duration<double>(Clock::now() - t0).count());
}

}  // namespace

// Under an MPI launcher (or --comm mpi) every process is one rank, and runs `train` with the MPI
// world; a failure on any rank prints its rank and host and ends the whole job (MPI_Abort), so no
// rank is left waiting for one that has gone.
int train_main(const std::vector<std::string>& argv, const std::string& program) {
    Args a(argv, {"--data", "--inputs", "--out", "--model", "--preset", "--stages", "--micro-batches", "--batch",
                  "--seq", "--schedule", "--schedule-file", "--chunks", "--memory-cap", "--recompute", "--steps", "--lr", "--seed",
                  "--dropout",
                  "--threads", "--dp", "--objective", "--trace", "--dump-grads", "--partition", "--vocab-size",
                  "--blocks", "--warmup", "--clip", "--weight-decay", "--timeout", "--task", "--labels", "--eval",
                  "--eval-every", "--save-format", "--save-every", "--keep", "--resume", "--device", "--dtype", "--comm", "--zero",
                  "--dp-overlap"},
           {"--dry-run", "--overwrite"});
    std::string comm = a.str("--comm", "auto");
    if (comm != "auto" && comm != "thread" && comm != "nccl" && comm != "mpi")
        throw std::runtime_error("--comm: expected auto, thread, nccl or mpi, got \"" + comm + "\"");
    bool launched = pt::launched_by_mpi();
    if (comm == "thread" && launched)
        throw std::runtime_error("--comm thread: this process was started by an MPI launcher, where each process is one "
                                 "rank (--comm mpi or auto); run it without mpirun for threads");
    if ((comm != "mpi" && !launched) || a.has("--dry-run")) return train(a, argv, program, nullptr);
#ifndef PIPETRAIN_MPI
    throw std::runtime_error(std::string(comm == "mpi" ? "--comm mpi" : "started by an MPI launcher") +
                             ": this build has no MPI (install libopenmpi-dev, then configure and build again)");
#else
    pt::MpiWorld mpi(a.real("--timeout", 120.0, 1e-3, 1e6));
    try {
        return train(a, argv, program, &mpi);
    } catch (const std::exception& e) {
        mpi.abort(e.what());
    }
#endif
}

int train_main(const std::vector<std::string>& argv) { return train_main(argv, "pipetrain"); }

}  // namespace pt
