// tutorials/common.hpp — what tutorials 05–13 share: the tiny model on a batch of the shipped
// sample corpus, split over P stages (threads), and one training step through pp::Pipeline.
//
// step_on_threads runs the step every rank of the CLI runs (pt::train_step, src/train_step.hpp:
// gradient accumulation and data parallelism), each rank on its own thread: the micro-batches
// through the schedule, then the tied word embedding's two gradients summed (embedding's + head's,
// always in that order), with D replicas the data-parallel sum, the global norm, clipping, AdamW
// and the loss.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/ops.hpp"
#include "pipeline_lab.hpp"
#include "src/comm.hpp"
#include "src/formats/corpus.hpp"
#include "src/formats/io.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/stage.hpp"
#include "src/step.hpp"
#include "src/train_step.hpp"

namespace lab {

using namespace pt;

// The tiny preset with a vocabulary built from the corpus, and the corpus as sequences of T ids.
struct Data {
    ModelConfig cfg;
    std::vector<std::vector<int32_t>> seqs;
    SpecialIds special;
};

// Every tutorial reads this one corpus, whatever else is on disk (scripts/run.sh's data/poems.txt
// too): its deterministic numbers are then the same on every machine, and docs/answers.md quotes them.
inline const char* const kCorpus = "tests/fixtures/text/sample_zh.txt";

inline Data read_data(int T) {
    std::string path = std::string(PT_SOURCE_DIR "/") + kCorpus;
    Tokenizer tok(build_vocab(read_lines(path), 3000), path);
    Data d;
    d.cfg = ModelConfig::preset("tiny");
    d.cfg.vocab_size = int(tok.size());
    d.seqs = load_corpus(path, tok, T).train;
    d.special = special_ids(tok);
    return d;
}

// read_data, saying which corpus it read (tutorial 13's worker processes read it silently).
inline Data load_data(int T) {
    Data d = read_data(T);
    std::printf("corpus: %s (%zu sequences of %d tokens, vocab %d), the one docs/answers.md was made with\n\n",
                kCorpus, d.seqs.size(), T, d.cfg.vocab_size);
    return d;
}

inline Batch batch_of(const Data& d, int B, int index = 0) {
    return make_batch(d.seqs, index, B, Objective::mlm, d.special, 1);
}

// The stages of P ranks × V chunks (× D data-parallel replicas), all in this process. Every Stages
// is initialized from seed 1, so all of them start from the same bits whatever their split.
struct Stages {
    ModelConfig cfg;
    int P = 1, V = 1, D = 1;
    std::vector<std::vector<std::vector<int>>> split;         // [rank][chunk] = layer indices
    std::vector<std::unique_ptr<TransformerStage>> stages;   // [d * P + p]
    std::vector<std::unique_ptr<Optimizer>> optim;           // AdamW moments, [d * P + p]
    Device device;   // cuda: rank r runs on GPU r mod (number of GPUs), on its own stream

    std::vector<Layer*> layers(int d = 0) const {   // replica d, model order
        std::vector<Layer*> all;
        for (int i = 0; i < num_model_layers(cfg); i++)
            for (int p = 0; p < P; p++)
                if (Layer* l = stages[d * P + p]->layer(i)) all.push_back(l);
        return all;
    }
};

// The layers are split by their FLOPs per token (deterministic, unlike measured time, so every
// run prints the same split) over the P*V virtual stages; which rank and chunk hold stage s is
// the placement's (loop: rank s % P, chunk s / P).
inline std::vector<std::vector<std::vector<int>>> split_by_flops(const ModelConfig& cfg, int P, int V = 1,
                                                                 pp::Placement placement = pp::Placement::loop) {
    std::vector<double> flops;
    for (int i = 0; i < num_model_layers(cfg); i++) flops.push_back(layer_flops_per_token(cfg, i, 32));
    return split_layers(pp::partition(flops, P * V), pp::Layout{P, V, placement});   // [rank][chunk]
}

// One rank's stage, every layer initialized from seed 1: any split (and any process) starts from
// the same bits.
inline std::unique_ptr<TransformerStage> make_stage(const ModelConfig& cfg, const std::vector<std::vector<int>>& chunks,
                                                    Recompute recompute = Recompute::none, float dropout = 0.1f) {
    RunOptions opt;
    opt.seed = 1, opt.hidden_dropout = opt.attention_dropout = dropout;
    auto stage = std::make_unique<TransformerStage>(cfg, chunks, recompute, opt);
    for (Layer* l : stage->layers()) l->init(1, 0.02f);
    return stage;
}

inline Stages make_stages(const ModelConfig& cfg, int P, int V = 1, Recompute recompute = Recompute::none,
                          int D = 1, float dropout = 0.1f, pp::Placement placement = pp::Placement::loop) {
    Stages m;
    m.cfg = cfg, m.P = P, m.V = V, m.D = D;
    m.split = split_by_flops(cfg, P, V, placement);
    for (int i = 0; i < P * D; i++) {
        m.stages.push_back(make_stage(cfg, m.split[i % P], recompute, dropout));
        m.optim.push_back(std::make_unique<Optimizer>(*m.stages.back()));
    }
    return m;
}

struct StepResult {
    std::vector<pp::Event> events;   // every rank of replica 0, µs from one origin shared by all ranks
    double loss = 0, makespan = 0, bubble = 0;
    double spread = 0;   // measure(): (slowest - fastest) / fastest of its repeated steps
};

// One optimizer step on `batch`, M micro-batches per replica (M is read off the schedule), every
// rank on a thread of its own. With update false the gradients are summed and the loss known, and
// the weights stay as they were.
inline StepResult step_on_threads(Stages& m, const pp::Schedule& schedule, const Batch& batch, int step = 0,
                                  bool update = true) {
    int M = 0;
    for (const pp::Action& a : schedule[0]) M += a.op == pp::Op::F && a.chunk == 0;
    std::vector<std::vector<pp::Event>> events(m.P * m.D);
    double loss_sum = 0;
    std::chrono::steady_clock::time_point origin;   // rank 0 reads the clock once; every rank uses it
    pt::ThreadWorld world(m.P * m.D, 60.0);
    pt::run_ranks(world, [&](int rank) {
        pt::ThreadComm comm(world, rank);
        RankPlace at{m.P, m.D, rank % m.P, rank / m.P};
        TransformerStage& stage = *m.stages[rank];
        Optimizer& opt = *m.optim[rank];
        Device dev = m.device;
        if (dev.cuda) dev.index = rank % cuda_device_count();
        set_device(dev, rank);
        stage.to(dev), opt.to(dev);   // the weights and moments visit the GPU for the step
        pp::Pipeline pipe(schedule, m.V, stage, comm, at.p, at.pipeline_group(), pp::plan_for(schedule, m.V));
        StepHooks hooks;
        hooks.start = [&] {
            comm.barrier();   // start together...
            if (rank == 0) origin = std::chrono::steady_clock::now();
            comm.barrier();   // ...on one time axis: a receive can then never end before its send starts
            return origin;
        };
        Update u;
        u.step = step, u.apply = update;
        StepOutcome o = train_step(pipe, comm, stage, opt, m.cfg, at, batch, M, u, hooks);
        events[rank] = pipe.timeline();
        if (rank == 0) loss_sum = o.loss_sum;
        stage.to(Device{}), opt.to(Device{});
    });
    StepResult r;
    for (int p = 0; p < m.P; p++) r.events.insert(r.events.end(), events[p].begin(), events[p].end());
    r.bubble = measured_bubble(r.events, m.P, &r.makespan);
    r.loss = loss_sum / double(batch.num_targets());
    return r;
}

// The fastest of `repeats` steps without an update: the first one warms the caches up, and the
// fastest is the one least disturbed by other programs on the cores.
inline StepResult measure(Stages& m, const pp::Schedule& schedule, const Batch& batch, int repeats = 5) {
    StepResult best;
    double slowest = 0;
    for (int i = 0; i < repeats; i++) {
        StepResult r = step_on_threads(m, schedule, batch, 0, false);
        if (i == 0 || r.makespan < best.makespan) best = r;
        slowest = std::max(slowest, r.makespan);
    }
    best.spread = best.makespan > 0 ? slowest / best.makespan - 1 : 0;
    return best;
}

// Replica 0's parameters (or gradients) of a and b: prints "bitwise equal" or the first
// differing tensor, returns |a - b| / |b| over all of them.
inline double compare(const Stages& a, const Stages& b, bool grads) {
    std::vector<Layer*> la = a.layers(), lb = b.layers();
    double diff = 0, norm = 0;
    std::string first;
    for (size_t i = 0; i < la.size(); i++) {
        const pt::Buf& x = grads ? la[i]->grads : la[i]->params;
        const pt::Buf& y = grads ? lb[i]->grads : lb[i]->params;
        for (const ParamInfo& pi : la[i]->params_info) {
            const float *px = x.data() + pi.offset, *py = y.data() + pi.offset;
            if (first.empty() && std::memcmp(px, py, pi.numel * sizeof(float)) != 0) first = pi.name;
            for (size_t j = 0; j < pi.numel; j++) {
                double dj = double(px[j]) - py[j];
                diff += dj * dj, norm += double(py[j]) * py[j];
            }
        }
    }
    double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    if (first.empty()) std::printf("  %s: bitwise equal\n", grads ? "gradients" : "parameters");
    else std::printf("  %s: first differing tensor %s, relative difference %.2e\n", grads ? "gradients" : "parameters", first.c_str(), rel);
    return rel;
}

// "rank 0: [0 1 2] | rank 1: [3 4 5]"; with V > 1 one [...] per chunk.
inline void print_split(const Stages& m) {
    std::printf("layers (0 = embedding, 1..%d = blocks, %d = head):", m.cfg.num_hidden_layers, m.cfg.num_hidden_layers + 1);
    for (int p = 0; p < m.P; p++) {
        std::printf("%s rank %d:", p ? " |" : "", p);
        for (const std::vector<int>& chunk : m.split[p]) {
            std::printf(" [");
            for (size_t i = 0; i < chunk.size(); i++) std::printf("%s%d", i ? " " : "", chunk[i]);
            std::printf("]");
        }
    }
    std::printf("\n");
}

// Measured times are only as good as the machine is idle. Prints a note when there are fewer cores
// than threads, or when measure()'s repeated steps differ by more than 25%; returns true then, so
// a tutorial can hold back a claim the numbers cannot carry.
inline bool loaded(int threads, const StepResult& r) {
    unsigned cores = std::thread::hardware_concurrency();
    bool few = cores < unsigned(threads), noisy = r.spread > 0.25;
    if (few) std::printf("(note: %u cores for %d threads: the threads take turns, the times are stretched)\n", cores, threads);
    if (noisy) std::printf("(note: repeats of one step differed by up to %.0f%%: the machine is busy, read the times with care)\n",
                           100 * r.spread);
    return few || noisy;
}

// One transfer of a measured timeline: rank `from` started the group that sends `tag` at `sent`;
// rank `to` finished the group that receives it at `received` (µs on the step's time axis).
struct Transfer {
    std::string tag;
    int from = 0, to = 0;
    double sent = 0, received = 0;
};

// Pairs "send F0 to rank 1" in a comm event of rank 0 with "recv F0 from rank 0" on rank 1.
inline std::vector<Transfer> transfers(const std::vector<pp::Event>& events) {
    std::vector<Transfer> sends, all;
    for (int pass = 0; pass < 2; pass++)
        for (const pp::Event& e : events) {
            if (!e.comm) continue;
            std::stringstream ops(e.detail);
            for (std::string op; std::getline(ops, op, ',');) {
                std::istringstream words(op);
                std::string kind, tag, to_from, rank_word;
                int peer = -1;
                if (!(words >> kind >> tag >> to_from >> rank_word >> peer)) continue;
                if (pass == 0 && kind == "send") sends.push_back({tag, e.rank, peer, e.start, 0});
                if (pass == 1 && kind == "recv")
                    for (const Transfer& s : sends)
                        if (s.tag == tag && s.from == peer && s.to == e.rank) all.push_back({tag, peer, e.rank, s.sent, e.end});
            }
        }
    std::sort(all.begin(), all.end(), [](const Transfer& a, const Transfer& b) { return a.sent < b.sent; });
    return all;
}

// Causality: no receive ends before its send started. Holds on one time axis; it can fail when
// each rank measures from its own clock start.
inline bool causal(const std::vector<Transfer>& ts) {
    for (const Transfer& t : ts)
        if (t.received < t.sent) return false;
    return !ts.empty();
}

// A directory of this run's own, runs/tutorialNN-<pid>: two runs at once never share files, and
// nothing already there is removed. Every tutorial that writes files writes them here, under the
// working directory (from the repository root, beside scripts/run.sh's runs), and prints where.
inline std::string fresh_run_dir(const std::string& nn) {
    std::string base = "runs/tutorial" + nn + "-" + std::to_string(getpid());
    std::filesystem::create_directories("runs");
    std::string dir = base;
    for (int i = 1; !std::filesystem::create_directory(dir); i++) dir = base + "-" + std::to_string(i);
    return dir;
}

inline std::string kb(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f KB", bytes / 1024);
    return buf;
}

}  // namespace lab
