#include "src/cli/commands.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "kernels/ops.hpp"
#include "pipeline.hpp"
#include "src/cli/args.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/comm.hpp"
#include "src/formats/corpus.hpp"
#include "src/device.hpp"
#ifdef PIPETRAIN_NCCL
#include "src/nccl_comm.hpp"
#endif
#include "src/cli/interrupt.hpp"
#include "src/mpi_comm.hpp"
#include "src/formats/io.hpp"
#include "src/formats/json.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/formats/safetensors.hpp"
#include "src/stage.hpp"
#include "src/step.hpp"
#include "src/train_step.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/formats/trainer_state.hpp"
#include "src/watchdog.hpp"

namespace pt {

namespace {

using Clock = std::chrono::steady_clock;

// ---- the model and the data a run needs -----------------------------------------------------

struct Setup {
    ModelConfig cfg;
    std::vector<std::string> vocab;             // vocab.txt lines written with the model
    std::string model_dir;                      // --model, empty for a preset
    Objective objective = Objective::mlm;
    std::vector<std::vector<int32_t>> train;    // corpus sequences (empty with --inputs)
    std::vector<Example> examples;              // --task classify: labeled sequences
    Batch fixed;                                // --inputs batch
    std::vector<Batch> eval;
    SpecialIds special;
    uint64_t seed = 0;
    int B = 0, T = 0;
};

std::vector<std::string> placeholder_vocab(int V) {
    std::vector<std::string> v = {"[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"};
    while (int(v.size()) < V) v.push_back("[unused" + std::to_string(v.size()) + "]");
    v.resize(V);
    return v;
}

// Every id must index its table: a bad id is an error naming the source, not a crash.
void check_batch(const Batch& b, const ModelConfig& cfg, const std::string& source) {
    if (b.T > cfg.max_position_embeddings)
        throw std::runtime_error(source + ": sequence length " + std::to_string(b.T) + " exceeds max_position_embeddings " +
                                 std::to_string(cfg.max_position_embeddings));
    auto check = [&](const std::vector<int32_t>& v, int limit, const char* what, bool allow_ignore) {
        for (int32_t x : v)
            if ((x < 0 || x >= limit) && !(allow_ignore && x == kIgnore))
                throw std::runtime_error(source + ": " + what + " id " + std::to_string(x) + " out of range [0, " +
                                         std::to_string(limit) + ")");
    };
    check(b.input_ids, cfg.vocab_size, "input", false);
    check(b.token_type_ids, cfg.type_vocab_size, "token_type", false);
    if (cfg.use_task_id) check(b.task_type_ids, cfg.task_type_vocab_size, "task_type", false);
    check(b.targets, cfg.vocab_size, "target", true);
    for (int32_t m : b.attention_mask)
        if (m != 0 && m != 1) throw std::runtime_error(source + ": attention_mask must be 0 or 1");
}

// --model, --resume or --preset: the model's shape and vocabulary into s, and the tokenizer of
// --data (null without a vocabulary: a preset trained on --inputs).
std::unique_ptr<Tokenizer> choose_model(const Args& a, bool training, bool has_data, Setup& s) {
    std::unique_ptr<Tokenizer> tok;
    if (a.has("--model") + a.has("--preset") + a.has("--resume") > 1)
        throw std::runtime_error("--model / --preset / --resume: give only one of them");
    if (a.has("--model") || a.has("--resume")) {
        if (a.has("--vocab-size")) throw std::runtime_error("--vocab-size: only with --preset (the model has its vocab.txt)");
        if (a.has("--blocks")) throw std::runtime_error("--blocks: only with --preset (the model's config.json has its blocks)");
        s.model_dir = a.has("--resume") ? a.str("--resume") : a.str("--model");
        s.cfg = load_model_config(s.model_dir);
        s.vocab = load_vocab_lines(s.model_dir, s.cfg);
        if (!s.vocab.empty()) tok = std::make_unique<Tokenizer>(s.vocab, s.model_dir + "/vocab.txt");
        else if (has_data && !a.has("--dry-run")) throw std::runtime_error(s.model_dir + "/vocab.txt: missing (needed to tokenize --data)");
    } else {
        if (!training) throw std::runtime_error("--model: required");
        if (a.has("--vocab-size") && !has_data)
            throw std::runtime_error("--vocab-size: only with --data (the vocabulary is built from the corpus)");
        s.cfg = ModelConfig::preset(a.str("--preset", "tiny"));
        s.cfg.num_hidden_layers = int(a.integer("--blocks", s.cfg.num_hidden_layers, 1, 1024));
        if (has_data && !a.has("--dry-run")) {
            // A preset trained on a corpus gets a vocabulary built from that corpus.
            int max_vocab = int(a.integer("--vocab-size", s.cfg.vocab_size, 16, 1 << 20));
            s.vocab = build_vocab_file(a.str("--data"), size_t(max_vocab));
            tok = std::make_unique<Tokenizer>(s.vocab, a.str("--data") + " (built vocab)");
            s.cfg.vocab_size = int(s.vocab.size());
        }
    }
    return tok;
}

// The training data and the evaluation batches: a TSV of labeled examples (classify), a corpus
// (--data), or the fixed --inputs batch. Every id is checked against the model's tables.
void load_data(const Args& a, bool classify, const Tokenizer* tok, Setup& s) {
    bool has_data = a.has("--data");
    const int eval_rows = 8;   // fixed, so that eval after training and eval of the saved model agree
    std::string eval_path = a.str(has_data ? "--data" : "--inputs");
    if (has_data) s.special = special_ids(*tok);
    if (classify) {
        s.examples = load_tsv(a.str("--data"), *tok, s.T, s.cfg.num_labels);
        // Without --eval, the accuracy is measured on the training set itself.
        eval_path = a.str("--eval", eval_path);
        s.eval = make_classify_eval_batches(
            eval_path == a.str("--data") ? s.examples : load_tsv(eval_path, *tok, s.T, s.cfg.num_labels), eval_rows,
            s.special.pad);
    } else if (has_data) {
        Corpus c = load_corpus(a.str("--data"), *tok, s.T);
        s.train = std::move(c.train);
        s.eval = make_eval_batches(c.eval, eval_rows, s.objective, s.special, s.seed);
    } else {
        s.fixed = load_inputs(a.str("--inputs"), s.objective);
        if (s.fixed.num_targets() == 0) throw std::runtime_error(a.str("--inputs") + ": no target (every label is -100)");
        s.T = s.fixed.T;
        s.eval = {s.fixed};
    }
    for (const Batch& b : s.eval) check_batch(b, s.cfg, eval_path);
}

Setup make_setup(const Args& a, bool training) {
    Setup s;
    s.seed = uint64_t(a.integer("--seed", 1234, 0, (1LL << 62)));
    s.T = int(a.integer("--seq", 64, 3, 1 << 16));
    bool has_data = a.has("--data"), has_inputs = a.has("--inputs");
    if (has_data == has_inputs) throw std::runtime_error("--data / --inputs: give exactly one of them");

    std::unique_ptr<Tokenizer> tok = choose_model(a, training, has_data, s);
    if (s.vocab.empty()) s.vocab = placeholder_vocab(s.cfg.vocab_size);
    if (!a.has("--seq")) s.T = std::min(s.T, s.cfg.max_position_embeddings);   // the default fits a small model
    bool classify = a.str("--task", s.cfg.num_labels > 0 ? "classify" : "lm") == "classify";
    if (a.has("--task") && a.str("--task") != "classify" && a.str("--task") != "lm")
        throw std::runtime_error("--task: expected lm or classify, got \"" + a.str("--task") + "\"");
    for (const char* flag : {"--labels", "--eval"})
        if (!classify && a.has(flag)) throw std::runtime_error(std::string(flag) + ": only with --task classify");
    if (classify) {
        int labels = int(a.integer("--labels", s.cfg.num_labels, 0, 1 << 20));
        if (labels < 2) throw std::runtime_error("--labels: --task classify needs the number of classes (at least 2)");
        if (s.cfg.num_labels > 0 && labels != s.cfg.num_labels)
            throw std::runtime_error("--labels: the model has " + std::to_string(s.cfg.num_labels) + " labels, not " +
                                     std::to_string(labels));
        s.cfg.num_labels = labels;
        if (!has_data) throw std::runtime_error("--data: a classifier (--task classify, or a model with num_labels) reads a TSV (label<TAB>text_a)");
    }
    // A causal model says so in its config.json (is_decoder), so eval and a further run default to
    // it. A classifier never is one: it reads [CLS], which a causal mask would hide from the text.
    s.objective = parse_objective(a.str("--objective", s.cfg.is_decoder && !classify ? "causal" : "mlm"));
    if (classify && s.objective == Objective::causal)
        throw std::runtime_error("--objective causal: a classifier reads [CLS], which a causal mask hides from the text");
    s.cfg.is_decoder = s.objective == Objective::causal;
    if (a.has("--dropout")) {
        double p = a.real("--dropout", 0);
        if (!(p >= 0 && p < 1)) throw std::runtime_error("--dropout: expected a probability in [0, 1)");
        s.cfg.hidden_dropout_prob = s.cfg.attention_probs_dropout_prob = float(p);
    }
    if (has_data && s.T > s.cfg.max_position_embeddings)   // with --inputs, T comes from the file
        throw std::runtime_error("--seq: " + std::to_string(s.T) + " exceeds the model's max_position_embeddings " +
                                 std::to_string(s.cfg.max_position_embeddings));

    // --dry-run reads no corpus or TSV (it may be on another machine): the plan needs only the model.
    if (!(a.has("--dry-run") && has_data)) load_data(a, classify, tok.get(), s);
    return s;
}

// ---- schedules and partitions -------------------------------------------------------------

// Per-layer costs for partitioning (see layer_costs). With "memory", `cost` is the stash one
// micro-batch leaves in the layer and `weights` the bytes of its parameters, gradients and AdamW
// moments; stage i of 1F1B holds its weights and up to P - i stashes. With "time" (and "auto"),
// `cost` is F + BI + BW in seconds, and f, bi, bw, stash the pieces and the stash bytes.
struct LayerCosts {
    std::string by;
    std::vector<double> cost, weights, f, bi, bw, stash;
    double stage_cost(int stage, int P, int begin, int end) const {
        double sum = 0;
        for (int l = begin; l < end; l++) sum += by == "memory" ? weights[l] + (P - stage) * cost[l] : cost[l];
        return sum;
    }
};

// chunk_layers[rank][chunk] = layer indices; which rank and chunk hold virtual stage s is the
// schedule's placement.
std::vector<std::vector<std::vector<int>>> partition_layers(const LayerCosts& costs, int P, int V,
                                                           pp::Placement placement = pp::Placement::loop) {
    int S = P * V, L = int(costs.cost.size());
    if (S > L)
        throw std::runtime_error("--stages: " + count_of(P, "stage") + " × " + count_of(V, "chunk") + " need at least " +
                                 count_of(S, "layer") + ", the model has " + std::to_string(L) + " (embedding, " +
                                 count_of(L - 2, "block") + ", head): use --stages " + std::to_string(L / V) +
                                 " or fewer" + (V > 1 ? ", fewer --chunks" : "") +
                                 ", or a model with more blocks (--blocks N with a preset; --preset small has 8 layers)");
    if (costs.by == "memory" && V > 1)
        throw std::runtime_error("--partition memory: balances 1F1B's in-flight stashes, not those of --chunks > 1");
    std::vector<int> bounds = costs.by == "memory" ? pp::partition_memory(costs.weights, costs.cost, P)
                                                   : pp::partition(costs.cost, S);
    return split_layers(bounds, pp::Layout{P, V, placement});
}

// Per-layer cost for partitioning: "params" (parameter count), "time" (measured forward +
// backward on one micro-batch of B×T), "memory" (bytes, as LayerCosts says) or "uniform".
LayerCosts layer_costs(const ModelConfig& cfg, const std::string& by, int B, int T, Device device = {}) {
    int L = num_model_layers(cfg);
    LayerCosts costs{by, std::vector<double>(L, 1.0), std::vector<double>(L, 0.0), {}, {}, {}, {}};
    if (by == "uniform") return costs;
    if (by == "params") {
        for (int i = 0; i < L; i++) costs.cost[i] = double(make_layer(cfg, i)->params.size());
        return costs;
    }
    if (by != "time" && by != "memory")
        throw std::runtime_error("--partition/--by: expected time, params, memory or uniform, got \"" + by + "\"");
    if (T > cfg.max_position_embeddings)   // the layers are run on a B x T batch
        throw std::runtime_error("--seq: " + std::to_string(T) + " exceeds the model's max_position_embeddings " +
                                 std::to_string(cfg.max_position_embeddings));
    // Measure forward + backward of each layer on a random micro-batch (best of 3), on the
    // device the run will use; for memory, one forward's stash is the layer's activation memory.
    Device caller = current_device();
    set_device(device);
    Batch b = synthetic_batch(cfg, B, T);
    MicroBatch mb = b.rows(0, B);
    mb.loss_scale = 1.0f / float(b.num_targets());
    Array<int32_t> ids, types, mask;
    ids.assign(b.input_ids), types.assign(b.token_type_ids), mask.assign(b.attention_mask);
    mb.dev = {ids.data(), types.data(), nullptr, mask.data()};
    RunOptions opt;
    size_t NC = size_t(B) * T * cfg.hidden_size;
    Buf x, dx(NC), dout;
    x.assign(std::vector<float>(NC, 0.5f)), dout.assign(std::vector<float>(NC, 1e-3f));
    costs.f = costs.bi = costs.bw = costs.stash = std::vector<double>(L, 1e30);
    auto seconds = [](Clock::time_point t0) {
        synchronize();
        return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    for (int i = 0; i < L; i++) {
        auto l = make_layer(cfg, i);
        l->init(1, 0.02f);
        costs.weights[i] = 4.0 * sizeof(float) * double(l->params.size());   // parameter, gradient, two AdamW moments
        // Each piece: the best of 3, after one untimed run (its first call allocates and faults memory in).
        for (int rep = by == "time" ? -1 : 0; rep < (by == "time" ? 3 : 1); rep++) {
            if (rep == 0) costs.f[i] = costs.bi[i] = costs.bw[i] = 1e30;
            auto t0 = Clock::now();
            Buf out(l->out_numel(B, T));
            auto s = l->forward(out.data(), i == 0 ? nullptr : x.data(), mb, opt);
            costs.f[i] = std::min(costs.f[i], seconds(t0));
            costs.stash[i] = double(s->bytes());
            t0 = Clock::now();
            l->backward_input(i == 0 ? nullptr : dx.data(), dout.data(), *s, mb, opt);
            costs.bi[i] = std::min(costs.bi[i], seconds(t0));
            t0 = Clock::now();
            l->backward_weight(*s, mb, opt);
            costs.bw[i] = std::min(costs.bw[i], seconds(t0));
        }
        costs.cost[i] = by == "memory" ? costs.stash[i] : costs.f[i] + costs.bi[i] + costs.bw[i];
    }
    set_device(caller);
    return costs;
}

// ---- evaluation -----------------------------------------------------------------------------

struct EvalResult {
    double loss_sum = 0;
    int64_t targets = 0, correct = 0;   // correct: argmax predictions equal to the target
    double loss() const { return targets ? loss_sum / double(targets) : 0.0; }
    double accuracy() const { return targets ? double(correct) / double(targets) : 0.0; }
    std::string summary(bool classifier) const {   // as `pipetrain eval` prints it
        char buf[512];   // ppl %.3f of a diverged loss can take 300 digits
        if (targets == 0) return "eval n/a (no target position: a loss of 0 would read as a perfect model)";
        if (classifier)
            std::snprintf(buf, sizeof buf, "eval loss %.9g accuracy %.4f (%lld/%lld)", loss(), accuracy(),
                          (long long)correct, (long long)targets);
        else
            std::snprintf(buf, sizeof buf, "eval loss %.9g ppl %.3f (%lld targets)", loss(), std::exp(loss()),
                          (long long)targets);
        return buf;
    }
};

// Forward only (no dropout) through `layers` in model order, batch by batch.
EvalResult evaluate(const std::vector<Layer*>& layers, const std::vector<Batch>& batches, bool causal) {
    EvalResult r;
    RunOptions opt;
    opt.train = false, opt.causal = causal;
    for (const Batch& b : batches) {
        MicroBatch mb = b.rows(0, b.B);
        std::vector<float> act, next;
        for (Layer* l : layers) {
            next.assign(l->out_numel(mb.B, mb.T), 0.0f);
            std::unique_ptr<Stash> s = l->forward(next.data(), act.empty() ? nullptr : act.data(), mb, opt);
            if (auto* hs = dynamic_cast<HeadStash*>(s.get())) {
                r.loss_sum += hs->loss_sum, r.targets += hs->num_targets;
                size_t n = hs->rows.size(), L = n ? hs->logits.size() / n : 0;
                for (size_t i = 0; i < n; i++) {   // accuracy: argmax of each row against its target
                    if (hs->targets[i] == kIgnore) continue;
                    const float* row = hs->logits.data() + i * L;
                    r.correct += int64_t(std::max_element(row, row + L) - row) == hs->targets[i];
                }
            }
            act.swap(next);
            pp::beat();   // on rank 0 during --eval-every: a long evaluation is not a hang
        }
    }
    return r;
}

// ---- training -------------------------------------------------------------------------------

std::string human_bytes(double b) {
    char buf[32];
    if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2fG", b / (1 << 30));
    else if (b >= 1 << 20) std::snprintf(buf, sizeof buf, "%.1fM", b / (1 << 20));
    else std::snprintf(buf, sizeof buf, "%.0fK", b / 1024);
    return buf;
}

std::string human_time(double s) {
    char buf[32];
    if (s >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
    else std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(s) % 60);
    return buf;
}

// Learning rate: linear warm-up, then cosine decay to 10% of the peak.
double lr_at(int step, int steps, int warmup, double lr) {
    if (step < warmup) return lr * (step + 1) / warmup;
    double progress = steps > warmup ? double(step - warmup) / (steps - warmup) : 1.0;
    return lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * std::min(1.0, progress))));
}

// What a process knows of the run. The ranks r = d*P + p are threads of this process (all of them),
// or with --comm mpi one rank per process (this one); everything between ranks goes through
// pp::Comm, so the same run_rank serves both.
struct World {
    const Setup* setup = nullptr;
    int P = 1, D = 1, M = 1, V = 1, steps = 1, warmup = 1, threads = 1, eval_every = 0;
    int start_step = 0, save_every = 0, keep = 2;   // --resume, --save-every, --keep
    Device device;                                     // --device: rank r on GPU (index + r) mod count
    int gpus = 0;
    pp::MpiWorld* mpi = nullptr;                       // null: the ranks are threads of this process
    int rank = 0;                                      // with mpi, this process's rank
    bool root = true;                                  // rank 0 runs here: it prints, owns --out, commits
    std::string comm, schedule_name, dtype = "fp32";   // --comm (resolved by choose_comm), --schedule, --dtype
    double timeout = 120;                              // --timeout
    int local_rank = 0;                                // with mpi: this rank's place on its node
    std::string out, save_format = "hf", resume;
    nlohmann::json state;                              // trainer_state.json: what an exact resume needs
    double lr = 1e-3, clip = 1.0, weight_decay = 0.01;
    pp::Schedule schedule;
    std::string plan_note;                             // --schedule auto: what the plan predicts
    std::vector<std::vector<std::vector<int>>> split;  // [p][chunk] = model layer indices
    std::vector<int> owner;                            // [layer] = the pipeline rank that holds it
    std::vector<pp::Costs> stage_costs;                // [p] F, BI, BW of one action, measured alone (s)
    Recompute recompute = Recompute::none;
    RunOptions run_opt;
    // [rank]: the stages and AdamW moments of this process's ranks; null for another process's.
    std::vector<std::unique_ptr<TransformerStage>> stages;
    std::vector<std::unique_ptr<Optimizer>> optim;
    std::string dump_grads;
    bool trace = false;
    // Known on rank 0 after the run: its results, for train_main to print.
    double last_loss = 0;
    std::vector<double> peak_stash;                    // [p] bytes, replica 0
    std::vector<int> peak_stashes;                     // [p] (micro-batch, chunk) pairs held at once, replica 0
    std::vector<pp::Event> trace_events;               // every rank's last step, on rank 0's clock
    double clock_error_us = 0;                         // how far the ranks' clocks may be off that axis
    EvalResult final_eval;
    int eval_step = 0;                                 // the step of the evaluation in progress
    // ---- plots (src/cli/plot.cpp): OUT/metrics.jsonl, a line per step; the step being logged
    MetricsLog metrics;
    StepRecord record;
    // ----
    std::atomic<int> stopped_at{0};                    // a signal stopped the run after this step (0: none did)
    Clock::time_point origin = Clock::now();
    st::Writer grads_dump;
};

// Rank r's stage and AdamW moments, on the host: initialized from the seed, or loaded from --model
// or --resume. Each rank reads only its own layers' tensors.
void make_rank(World& w, int rank) {
    const Setup& s = *w.setup;
    w.stages[rank] = std::make_unique<TransformerStage>(s.cfg, w.split[rank % w.P], w.recompute, w.run_opt);
    w.optim[rank] = std::make_unique<Optimizer>(*w.stages[rank]);
    std::vector<Layer*> layers = w.stages[rank]->layers();
    if (s.model_dir.empty())
        for (Layer* l : layers) l->init(s.seed, 0.02f);
    else
        load_weights(s.model_dir, layers, false, true, /*partial=*/w.P > 1);
    if (w.resume.empty()) return;
    // The AdamW moments: DIR/optimizer.safetensors, or its shards (one per pipeline rank that saved it).
    std::string source;
    std::vector<st::File> files = read_tensor_files(w.resume, "optimizer", &source);
    if (files.empty())
        throw std::runtime_error(w.resume + ": no optimizer.safetensors or optimizer.safetensors.index.json "
                                 "(a checkpoint of --save-every has the AdamW moments)");
    Optimizer& opt = *w.optim[rank];
    for (size_t li = 0; li < layers.size(); li++)
        for (const ParamInfo& pi : layers[li]->params_info) {
            std::string name = pi.tied ? "ernie.embeddings.word_embeddings.weight" : pi.name;
            for (auto [suffix, buf] : {std::pair{".exp_avg", &opt.m[li]}, {".exp_avg_sq", &opt.v[li]}}) {
                const st::File* f = nullptr;
                for (const st::File& file : files) f = f ? f : file.find(name + suffix) ? &file : nullptr;
                if (!f) throw std::runtime_error(source + ": no tensor " + name + suffix);
                std::vector<float> x = f->to_f32(name + suffix);
                if (x.size() != pi.numel) throw std::runtime_error(f->path + ": " + name + suffix + " has the wrong size");
                // A NaN or infinite moment, or a negative mean of squares, would surface steps
                // later as "training diverged"; a second moment is a mean of squares.
                bool second = std::string(suffix) == ".exp_avg_sq";
                for (float m : x)
                    if (!std::isfinite(m) || (second && m < 0))
                        throw std::runtime_error(f->path + ": " + name + suffix + " holds " +
                                                 (std::isfinite(m) ? "a negative value" : "NaN or infinite values") +
                                                 (second ? " (a mean of squares is finite and >= 0)" : " (AdamW moments are finite)"));
                std::copy(x.begin(), x.end(), buf->begin() + long(pi.offset));
            }
        }
}

// Replica 0's layers in model order, on rank 0, for an evaluation, a save or --dump-grads (`grads`:
// their gradients). Rank 0 reads the layers of its own process's ranks where they are; every other
// rank of replica 0 sends its layers, which land in fresh layers that `held` keeps. Every rank
// calls it; it returns nothing on the others. Rank 0 thus holds one copy of the model.
std::vector<Layer*> gather_replica(World& w, pp::Comm& comm, int rank, bool grads, std::vector<std::unique_ptr<Layer>>& held) {
    std::vector<Layer*> all;
    bool with_root = w.stages[0] != nullptr;   // rank 0 runs in this process
    for (int i = 0; i < num_model_layers(w.setup->cfg); i++) {
        int owner = w.owner[i];
        if (with_root && w.stages[owner]) {
            if (rank == 0) all.push_back(w.stages[owner]->layer(i));
        } else if (rank == owner) {
            Buf& b = grads ? w.stages[rank]->layer(i)->grads : w.stages[rank]->layer(i)->params;
            comm.send(b.data(), b.size() * sizeof(float), 0, pp::kTagLayer + i);
        } else if (rank == 0) {
            held.push_back(make_layer(w.setup->cfg, i));
            Buf& b = grads ? held.back()->grads : held.back()->params;
            comm.recv(b.data(), b.size() * sizeof(float), owner, pp::kTagLayer + i);
            all.push_back(held.back().get());
        }
    }
    return all;
}

// Rank 0 gets every rank's bytes (its own included), in rank order; the others send theirs.
std::vector<std::string> gather_bytes(pp::Comm& comm, int rank, const std::string& mine, int tag) {
    std::vector<std::string> all;
    if (rank != 0) {
        uint64_t n = mine.size();
        comm.send(&n, sizeof n, 0, tag);
        comm.send(mine.data(), n, 0, tag + 1);
        return all;
    }
    all.push_back(mine);
    for (int r = 1; r < comm.size(); r++) {
        uint64_t n = 0;
        comm.recv(&n, sizeof n, r, tag);
        std::string bytes(n, '\0');
        comm.recv(bytes.data(), n, r, tag + 1);
        all.push_back(std::move(bytes));
    }
    return all;
}

// A timeline as bytes, to travel to rank 0: per event rank, op, micro-batch, chunk, comm, start,
// end, and the detail's length and text.
std::string pack_events(const std::vector<pp::Event>& events) {
    std::string out;
    auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
    for (const pp::Event& e : events) {
        int32_t ints[5] = {e.rank, int32_t(e.action.op), e.action.microbatch, e.action.chunk, e.comm};
        uint32_t len = uint32_t(e.detail.size());
        put(ints, sizeof ints), put(&e.start, sizeof e.start), put(&e.end, sizeof e.end), put(&len, sizeof len);
        put(e.detail.data(), len);
    }
    return out;
}

std::vector<pp::Event> unpack_events(const std::string& bytes) {
    std::vector<pp::Event> events;
    size_t at = 0;
    auto get = [&](void* p, size_t n) {
        if (at + n > bytes.size()) throw std::runtime_error("--trace: a rank sent a truncated timeline");
        std::memcpy(p, bytes.data() + at, n), at += n;
    };
    while (at < bytes.size()) {
        pp::Event e;
        int32_t ints[5];
        uint32_t len = 0;
        get(ints, sizeof ints), get(&e.start, sizeof e.start), get(&e.end, sizeof e.end), get(&len, sizeof len);
        e.rank = ints[0], e.action = {pp::Op(ints[1]), ints[2], ints[3]}, e.comm = ints[4] != 0;
        e.detail.resize(len);
        get(e.detail.data(), len);
        events.push_back(std::move(e));
    }
    return events;
}

// This rank's clock minus rank 0's, in µs of the w.origin axis (Cristian's method): the rank sends
// its time, rank 0 answers with its own, and of 16 round trips the shortest is believed, with rank
// 0's answer assumed halfway through it. So the offset is off by at most half that round trip,
// returned in *error_us. Ranks in rank 0's process share its clock and origin: 0, exactly.
double clock_offset_us(World& w, pp::Comm& comm, int rank, double* error_us) {
    const int rounds = 16, tag = pp::kTagClock;
    auto now = [&] { return std::chrono::duration<double, std::micro>(Clock::now() - w.origin).count(); };
    *error_us = 0;
    if (rank == 0) {
        for (int r = 1; r < comm.size(); r++)
            for (int k = 0; k < rounds && !w.stages[r]; k++) {
                double t = 0;
                comm.recv(&t, sizeof t, r, tag);
                t = now();
                comm.send(&t, sizeof t, r, tag);
            }
        return 0;
    }
    if (w.stages[0]) return 0;
    double offset = 0, best = 1e300;
    for (int k = 0; k < rounds; k++) {
        double t1 = now(), t0 = 0;
        comm.send(&t1, sizeof t1, 0, tag);
        comm.recv(&t0, sizeof t0, 0, tag);
        double t2 = now();
        if (t2 - t1 < best) best = t2 - t1, offset = t0 - (t1 + t2) / 2;
    }
    *error_us = best / 2;
    return offset;
}

// OUT/checkpoint-<step>/: the model directory, the AdamW moments (under "<parameter>.exp_avg" /
// ".exp_avg_sq") and trainer_state.json, written into OUT/.tmp-checkpoint-N, sealed by a manifest
// and committed in one step (src/formats/lifecycle.hpp). With P > 1 every pipeline rank of replica 0 writes
// its own layers, as one shard of Hugging Face's sharded layout (model-0000k-of-0000P.safetensors,
// optimizer-0000k-of-0000P.safetensors, and an index for each). Rank 0 commits once every shard is
// written: a crash of any rank before leaves an unsealed staging directory, which loads nowhere and
// the next start removes. Only the last `keep` checkpoints are kept; older ones go through the trash.
void save_checkpoint(World& w, pp::Comm& comm, int rank, int step) {
    auto t0 = Clock::now();
    std::string dir = w.out + "/checkpoint-" + std::to_string(step), tmp = staging_path(dir);
    if (rank == 0) stage_dir(dir);
    comm.barrier();   // the staging directory exists
    if (rank < w.P) {
        TransformerStage& stage = *w.stages[rank];
        Optimizer& opt = *w.optim[rank];
        bool sharded = w.P > 1;
        write_weights(tmp + "/" + (sharded ? shard_name("model", rank, w.P) : "model.safetensors"), stage.layers(), w.save_format);
        pp::beat();   // a save of a large model is progress for the watchdog, file by file
        st::Writer moments;
        std::vector<Layer*> layers = stage.layers();
        for (size_t li = 0; li < layers.size(); li++)
            for (const ParamInfo& pi : layers[li]->params_info) {
                if (pi.tied) continue;   // the same moments as the word embedding's
                moments.add_f32(pi.name + ".exp_avg", pi.shape, opt.m[li].data() + pi.offset);
                moments.add_f32(pi.name + ".exp_avg_sq", pi.shape, opt.v[li].data() + pi.offset);
            }
        moments.write(tmp + "/" + (sharded ? shard_name("optimizer", rank, w.P) : "optimizer.safetensors"));
        pp::beat();
    }
    comm.barrier();   // every shard is written (each write is fsynced)
    if (rank != 0) return;
    write_model_info(tmp, w.setup->cfg, w.setup->vocab);
    if (w.P > 1) write_shard_index(tmp, "model", w.P), write_shard_index(tmp, "optimizer", w.P);
    nlohmann::json state = w.state;
    state["step"] = step;
    write_file_atomic(tmp + "/trainer_state.json", state.dump(2) + "\n");
    double hashing = 0;
    uint64_t bytes = seal_dir(tmp, &hashing);
    pp::beat();
    commit_dir(tmp, dir);
    std::vector<std::pair<int, std::string>> all;
    for (const auto& e : std::filesystem::directory_iterator(w.out)) {
        std::string name = e.path().filename().string();
        if (name.rfind("checkpoint-", 0) != 0 || name.size() > 20 ||
            name.find_first_not_of("0123456789", 11) != std::string::npos || name.size() == 11)
            continue;
        int n = std::atoi(name.c_str() + 11);   // a later one is another run's: not ours to delete
        if (n <= step) all.push_back({n, e.path().string()});
    }
    std::sort(all.begin(), all.end());
    for (size_t i = 0; i + size_t(w.keep) < all.size(); i++) trash(all[i].second);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("  saved %s (%s in %.2f s, of which %.2f s hashing for the manifest)\n", dir.c_str(),
                human_bytes(double(bytes)).c_str(), secs, hashing);
}

// --resume DIR: the step to continue from and the AdamW moments; the weights were loaded like
// --model. Everything that decides the bits (seed, batch, sequence length, objective, schedule
// of the learning rate) must match, or the run would silently differ from an uninterrupted one.
// DIR/trainer_state.json, read once (src/formats/trainer_state.hpp): its settings default the flags
// (resume_defaults), then must match the run (check_resume_state).
nlohmann::json read_trainer_state(const std::string& dir) {
    verify_dir(dir);   // a sealed checkpoint is checked whole before any of it is believed
    std::string path = dir + "/trainer_state.json";
    return parse_trainer_state(read_file(path), path);
}

void check_resume_state(World& w, const std::string& dir, const nlohmann::json& saved) {
    for (const auto& [key, value] : w.state.items())
        if (!saved.contains(key) || saved[key] != value)
            throw std::runtime_error("--" + key + ": the checkpoint " + dir + " was trained with " +
                                     (saved.contains(key) ? saved[key].dump() : std::string("(none)")) + ", not " +
                                     value.dump() + ": omit --" + key + " to continue with the checkpoint's");
    if (saved["step"].get<int64_t>() > w.steps)
        throw std::runtime_error("--steps: the checkpoint is at step " + saved["step"].dump());
    w.start_step = saved["step"].get<int>();
    w.resume = dir;   // each rank loads its moments (make_rank)
}

// --resume DIR: the settings the checkpoint records ("seed", "lr", ... "save-format") are the
// defaults of the flags of the same names, so a plain `--resume DIR --data F --out O` continues
// the run; given ones must match them (check_resume_state), except --save-format.
void resume_defaults(Args& a, const nlohmann::json& saved) {
    for (const auto& [key, value] : saved.items())   // the allow-listed keys (read_trainer_state)
        if (key != "step") a.set_default("--" + key, value.is_string() ? value.get<std::string>() : value.dump());
}

Device device_of_rank(const World& w, int rank) {
    Device dev = w.device;
    if (dev.cuda) dev.index = (dev.index + (w.mpi ? w.local_rank : rank)) % w.gpus;
    return dev;
}

constexpr int kSlots = 7;   // per rank in the step's reduction (step_slots)

// Rank 0: the step line, from the numbers every rank put in its slots of the step's reduction.
void print_step(World& w, int step, double loss, float lr, double norm, const std::vector<double>& slots, double elapsed) {
    const Setup& s = *w.setup;
    double busy = 0, worst_span = 0;
    std::string stash;
    w.record = StepRecord{step + 1, loss, lr, norm, 0, 0, {}};
    for (int p = 0; p < w.P; p++) {   // replica 0: slots[1 + kSlots r ..], see step_slots
        const double* k = &slots[1 + kSlots * p];
        busy += k[0], worst_span = std::max(worst_span, k[1]);
        w.peak_stash[p] = k[2], w.peak_stashes[p] = int(k[3]);
        stash += (p ? "/" : "") + human_bytes(w.peak_stash[p]);
        w.record.ranks.push_back(RankStep{k[0], k[1], k[4], k[5], k[6], k[2], k[3]});
    }
    double bubble = bubble_fraction(busy, w.P, worst_span);
    double tok_s = double(step + 1 - w.start_step) * s.B * s.T / std::max(elapsed, 1e-9);
    w.record.tok_per_s = tok_s, w.record.bubble = bubble;
    std::printf("step %d/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | bubble %.1f%% | stash %s | ETA %s\n",
                step + 1, w.steps, loss, lr, norm, tok_s, 100 * bubble, stash.c_str(),
                human_time(elapsed / (step + 1 - w.start_step) * (w.steps - step - 1)).c_str());
}

// --dump-grads: step 1's summed gradients, before clipping, which rank 0 writes at the end.
void dump_gradients(World& w, pp::Comm& comm, int rank) {
    comm.barrier();   // every rank's data-parallel sum is done: rank 0 may read its process's ranks
    std::vector<std::unique_ptr<Layer>> held;
    for (Layer* l : gather_replica(w, comm, rank, true, held)) {
        std::vector<float> g = l->grads.host();
        for (const ParamInfo& pi : l->params_info)
            if (!pi.tied) w.grads_dump.add_f32(pi.name, pi.shape, g.data() + pi.offset);
    }
    comm.barrier();   // rank 0 may read the gradients of its process's ranks: before they are clipped
}

// plots: an evaluation goes into the metrics line of its step.
void log_eval(World& w, const EvalResult& ev) {
    if (ev.targets == 0) return;
    bool classifier = w.setup->cfg.num_labels > 0;
    w.record.eval = true, w.record.classifier = classifier;
    w.record.eval_loss = ev.loss(), w.record.eval_metric = classifier ? ev.accuracy() : std::exp(ev.loss());
}

// --eval-every: replica 0's layers, gathered to rank 0, on the held-out batches.
void evaluate_during_run(World& w, pp::Comm& comm, int rank, Device mine) {
    const Setup& s = *w.setup;
    std::vector<std::unique_ptr<Layer>> held;
    std::vector<Layer*> layers = gather_replica(w, comm, rank, false, held);
    if (rank != 0) return;
    set_device(Device{});
    EvalResult ev = evaluate(layers, s.eval, s.objective == Objective::causal);
    if (ev.targets > 0 && !std::isfinite(ev.loss()))
        throw std::runtime_error("step " + std::to_string(w.eval_step) + ": the eval loss is not finite: the model diverged "
                                 "(lower --lr); nothing saved after the last checkpoint");
    if (ev.targets == 0) std::printf("  %s\n", ev.summary(false).c_str());
    else if (s.cfg.num_labels > 0) std::printf("  eval | loss %.4f | accuracy %.4f\n", ev.loss(), ev.accuracy());
    else std::printf("  eval | loss %.4f | ppl %.2f\n", ev.loss(), std::exp(ev.loss()));
    log_eval(w, ev);
    std::printf("  last step, per rank:\n%s", rank_time_report(w.record.ranks).c_str());
    set_device(mine, rank);
}

// After the last step: every rank's timeline of it, on rank 0's clock, to rank 0.
void gather_trace(World& w, pp::Comm& comm, int rank, const std::vector<pp::Event>& timeline) {
    // Measured now, right after the step it is for: clocks drift apart (a few µs a second).
    double clock_error = 0, clock_offset = clock_offset_us(w, comm, rank, &clock_error);
    std::vector<pp::Event> events = timeline;
    for (pp::Event& e : events) e.rank = rank, e.start += clock_offset, e.end += clock_offset;
    std::vector<std::string> all = gather_bytes(comm, rank, pack_events(events), pp::kTagTimeline);
    std::vector<std::string> errors = gather_bytes(comm, rank, std::string((const char*)&clock_error, sizeof clock_error), pp::kTagClockError);
    for (size_t r = 0; r < all.size(); r++) {
        std::vector<pp::Event> e = unpack_events(all[r]);
        w.trace_events.insert(w.trace_events.end(), e.begin(), e.end());
        double err = 0;
        std::memcpy(&err, errors[r].data(), std::min(sizeof err, errors[r].size()));
        w.clock_error_us = std::max(w.clock_error_us, err);
    }
}

// The final model, from rank 0 (one copy of the model there), and its evaluation.
void save_final_model(World& w, pp::Comm& comm, int rank) {
    const Setup& s = *w.setup;
    comm.barrier();   // every rank's layers are on the host
    std::vector<std::unique_ptr<Layer>> held;
    std::vector<Layer*> layers = gather_replica(w, comm, rank, false, held);
    if (rank == 0) {
        set_device(Device{});
        save_model_dir(w.out, s.cfg, s.vocab, layers, w.save_format);
        // After the last step a signal skips only the evaluation: the run is complete.
        if (!interrupt_signal()) w.final_eval = evaluate(layers, s.eval, s.objective == Objective::causal);
        if (w.steps > w.start_step) log_eval(w, w.final_eval), w.metrics.append(w.record);   // the last step's line, with it
    }
    comm.barrier();   // rank 0 has read the other ranks of its process
}

// The global batch of a step: labeled rows, the fixed --inputs batch, or masked corpus rows.
Batch batch_of_step(const Setup& s, int step) {
    if (!s.examples.empty()) return make_classify_batch(s.examples, step, s.B, s.special.pad, s.seed);
    if (s.train.empty()) return s.fixed;
    return make_batch(s.train, step, s.B, s.objective, s.special, s.seed);
}

// What a rank adds to the step's loss reduction: whether a signal asked it to stop
// (src/cli/interrupt.hpp), so that all stop after the same step and save it, and its numbers for the
// step line in its own kSlots slots (zero in every other rank's, so the sum is each rank's own
// value, exactly): busy µs, span µs, peak stash bytes, stashes, and for metrics.jsonl µs in
// send/recv groups, the shortest group's µs and the number of groups.
std::vector<double> step_slots(int ranks, int rank, const std::vector<pp::Event>& timeline, double span,
                               const TransformerStage& stage) {
    std::vector<double> slots(1 + kSlots * size_t(ranks), 0.0);
    slots[0] = interrupt_signal() ? 1.0 : 0.0;
    double* k = &slots[1 + kSlots * size_t(rank)];
    for (const pp::Event& e : timeline) {
        if (!e.comm) k[0] += e.end - e.start;
        else k[4] += e.end - e.start, k[5] = k[6] ? std::min(k[5], e.end - e.start) : e.end - e.start, k[6]++;
    }
    k[1] = span;
    k[2] = double(stage.peak_stash_bytes());
    k[3] = stage.peak_stashes();
    return slots;
}

// A model that guesses scores ln(V) (V = vocabulary, or labels of a classifier). A loss above
// 4·ln(V) for kDivergedSteps steps in a row, or one that is not finite, stops the run on every
// rank at once (they all know the loss), before this step's checkpoint: it has diverged.
constexpr int kDivergedSteps = 3;
void check_divergence(const World& w, int step, double loss, int& above) {
    const ModelConfig& cfg = w.setup->cfg;
    double limit = 4 * std::log(double(cfg.num_labels > 0 ? std::max(cfg.num_labels, 2) : cfg.vocab_size));
    above = std::isfinite(loss) && loss <= limit ? 0 : above + 1;
    if (std::isfinite(loss) && above < kDivergedSteps) return;
    char why[96] = "is not finite";
    if (std::isfinite(loss)) std::snprintf(why, sizeof why, "has been above 4·ln(V) = %.2f for %d steps", limit, kDivergedSteps);
    char msg[256];
    std::snprintf(msg, sizeof msg, "step %d: the loss %.6g %s: training diverged (lower --lr); nothing saved after the "
                  "last checkpoint", step + 1, loss, why);
    throw std::runtime_error(msg);
}

// The step through train_step, with the trainer's additions: the timeline on the run's time axis,
// this rank's numbers for the step line (step_slots) in the loss reduction, --dump-grads.
StepOutcome take_step(World& w, pp::Pipeline& pipe, pp::Comm& comm, TransformerStage& stage, Optimizer& opt,
                      const RankPlace& at, const Batch& global, int step, float lr, std::vector<double>& slots) {
    int rank = at.d * w.P + at.p;
    StepHooks hooks;
    hooks.start = [&] { return w.origin; };   // one time axis for all ranks, so the trace shows sends before receives
    hooks.after_schedule = [&](double span) { slots = step_slots(w.P * w.D, rank, pipe.timeline(), span, stage); };
    hooks.shared = &slots;
    hooks.after_grads = [&] {
        if (!w.dump_grads.empty() && step == 0) dump_gradients(w, comm, rank);
    };
    try {
        return train_step(pipe, comm, stage, opt, w.setup->cfg, at, global, w.M, {step, lr, w.clip, w.weight_decay}, hooks);
    } catch (const TrainingDiverged& e) {   // the lesson names the quantity; the CLI names the flag
        throw std::runtime_error(std::string(e.what()) + " (lower --lr); nothing saved after the last checkpoint");
    }
}

void run_rank(World& w, pp::Comm& comm, int rank) {
    const Setup& s = *w.setup;
    RankPlace at{w.P, w.D, rank % w.P, rank / w.P};
    ops::set_num_threads(w.threads);
    TransformerStage& stage = *w.stages[rank];
    Optimizer& opt = *w.optim[rank];
    // Weights and moments were made on the host; they move to this rank's device for the run,
    // and to the host for a checkpoint or an evaluation (a no-op on the CPU).
    Device mine = device_of_rank(w, rank);
    set_device(mine, rank);
    stage.to(mine), opt.to(mine);
    pp::Pipeline pipe(w.schedule, w.V, stage, comm, at.p, at.pipeline_group());
    pp::WatchedPipeline watched(pipe);   // the watchdog (run_ranks) reports where it is
    auto t_start = Clock::now();
    int diverging = 0;   // steps in a row with the loss above check_divergence's limit
    for (int step = w.start_step; step < w.steps; step++) {
        pp::beat("batch", step + 1);   // counted from 1, as the progress line does
        Batch global = batch_of_step(s, step);
        int64_t targets = global.num_targets();
        float lr = float(lr_at(step, w.steps, w.warmup, w.lr));
        std::vector<double> slots;
        StepOutcome o = take_step(w, pipe, comm, stage, opt, at, global, step, lr, slots);
        check_divergence(w, step, targets ? o.loss_sum / double(targets) : 0.0, diverging);
        bool stop = slots[0] > 0 && step + 1 < w.steps;   // after the last step, the run ends as usual
        bool eval_now = w.eval_every > 0 && (step + 1) % w.eval_every == 0 && step + 1 < w.steps;
        bool save_now = stop || (w.save_every > 0 && ((step + 1) % w.save_every == 0 || step + 1 == w.steps));
        if (eval_now || save_now) {
            stage.to(Device{}), opt.to(Device{});   // evaluate and save on the host
            synchronize();
            pp::beat("barrier");
            comm.barrier();   // rank 0 may read its process's other ranks' layers from here
        }
        if (rank == 0) {   // printed just before the save: a step line is followed by its checkpoint
            w.last_loss = targets ? o.loss_sum / double(targets) : 0.0;
            print_step(w, step, w.last_loss, lr, o.norm, slots, std::chrono::duration<double>(Clock::now() - t_start).count());
        }
        if (eval_now) w.eval_step = step + 1, pp::beat("evaluation"), evaluate_during_run(w, comm, rank, mine);
        if (rank == 0 && step + 1 < w.steps) w.metrics.append(w.record);   // the last one after the final evaluation
        if (save_now) pp::beat("checkpoint"), save_checkpoint(w, comm, rank, step + 1);
        if (stop && !w.stopped_at) w.stopped_at = step + 1;
        if (rank == 0) std::fflush(stdout);   // the step line with its checkpoint line, once it is committed
        pp::beat("barrier");
        comm.barrier();
        if (stop) break;
        if (eval_now || save_now) stage.to(mine), opt.to(mine);
    }
    stage.to(Device{});   // the end: save and evaluate on the host
    synchronize();
    if (w.trace) gather_trace(w, comm, rank, pipe.timeline());
    if (!w.stopped_at) save_final_model(w, comm, rank);
}

// A word for a POSIX shell: as it is when that is safe, else in single quotes.
std::string shell_quoted(const std::string& word) {
    bool plain = !word.empty();
    for (char c : word) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-+=/.,:@%", c));
    if (plain) return word;
    std::string q = "'";
    for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// The command that continues a run stopped by a signal: its own flags, with the model now from the
// checkpoint (--resume CHECKPOINT replaces --model, --preset, --resume, and --vocab-size goes with
// them). --dump-grads goes too: it holds step 1's gradients, which the resumed run does not compute
// and would overwrite with nothing. Every other flag stays, even those the checkpoint also records.
std::string continue_command(const std::string& program, const std::vector<std::string>& argv,
                             const std::string& checkpoint) {
    std::string cmd = shell_quoted(program) + " train --resume " + shell_quoted(checkpoint);
    for (size_t i = 0; i < argv.size(); i++) {   // "--flag value" pairs, and the switches alone
        const std::string& flag = argv[i];
        if (flag == "--overwrite" || flag == "--dry-run") continue;   // the checkpoint is inside --out: no need
        if (i + 1 >= argv.size()) break;
        i++;
        if (flag == "--model" || flag == "--preset" || flag == "--blocks" || flag == "--resume" || flag == "--vocab-size" ||
            flag == "--dump-grads")
            continue;
        cmd += " " + flag + " " + shell_quoted(argv[i]);
    }
    return cmd;
}

// ---- pipetrain train ------------------------------------------------------------------------

// The flags that size the run, into w (and the batch size into s).
void read_flags(World& w, Setup& s, Args& a) {
    w.out = a.required("--out");
    w.save_format = a.str("--save-format", "hf");
    if (w.save_format != "hf" && w.save_format != "paddle")
        throw std::runtime_error("--save-format: expected hf or paddle, got \"" + w.save_format + "\"");
    w.P = int(a.integer("--stages", 1, 1, 64));
    w.D = int(a.integer("--dp", 1, 1, 64));
    w.M = int(a.integer("--micro-batches", 1, 1, 4096));
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

// --schedule auto: each stage's F, BI, BW (the sums of its layers' measured times) and the time
// of one activation's copy plan a zero-bubble schedule whose stash fits --memory-cap bytes per
// stage (default: 1F1B's peak, P micro-batches). The plan and its prediction go to the banner.
pp::Schedule plan_auto(World& w, const LayerCosts& times, Args& a, size_t activation) {
    std::vector<float> from(activation, 1.0f), to(activation);
    double copy = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        auto t0 = Clock::now();
        std::memcpy(to.data(), from.data(), activation * sizeof(float));
        copy = std::min(copy, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::vector<pp::Costs> costs(w.P, pp::Costs{0, 0, 0, 0});
    std::vector<int> cap(w.P, w.P);
    std::vector<double> stash(w.P, 0.0);
    for (int p = 0; p < w.P; p++) {
        for (int l : w.split[p][0])
            costs[p].f += times.f[l], costs[p].bi += times.bi[l], costs[p].bw += times.bw[l], stash[p] += times.stash[l];
        costs[p].comm = copy;
        if (a.has("--memory-cap")) {
            double bytes = a.real("--memory-cap", 0, 1);
            cap[p] = int(std::min<double>(w.M, std::floor(bytes / std::max(stash[p], 1.0))));
            if (cap[p] < 1)
                throw std::runtime_error("--memory-cap: " + human_bytes(bytes) + " holds no stash of stage " +
                                         std::to_string(p) + " (one micro-batch leaves " + human_bytes(stash[p]) + ")");
        }
    }
    pp::Schedule plan = pp::auto_schedule(w.P, w.M, costs, cap);
    pp::SimResult r = pp::simulate(plan, costs);
    char line[256];
    std::snprintf(line, sizeof line, "auto: planned from measured costs: predicted step %.1f ms, bubble %.1f%%; peak stash per stage",
                  1e3 * r.makespan, 100 * r.bubble);
    w.plan_note = line;
    for (int p = 0; p < w.P; p++)
        w.plan_note += " " + std::to_string(r.peak_live[p]) + " (" + human_bytes(r.peak_live[p] * stash[p]) + ", cap " +
                       std::to_string(cap[p]) + ")";
    return plan;
}

// Each rank's F, BI, BW per action (seconds, measured alone): its layers' sums, a chunk 1/V of them.
std::vector<pp::Costs> stage_costs(const std::vector<std::vector<std::vector<int>>>& split, const LayerCosts& times) {
    std::vector<pp::Costs> costs(split.size(), pp::Costs{0, 0, 0, 0});
    for (size_t p = 0; p < split.size(); p++) {
        for (const std::vector<int>& chunk : split[p])
            for (int l : chunk) costs[p].f += times.f[l], costs[p].bi += times.bi[l], costs[p].bw += times.bw[l];
        double V = double(split[p].size());
        costs[p].f /= V, costs[p].bi /= V, costs[p].bw /= V;
    }
    return costs;
}

// The schedule, the devices, the split of the layers over the ranks, and how the layers run.
void plan_pipeline(World& w, const Setup& s, Args& a) {
    try {
        w.recompute = parse_recompute(a.str("--recompute", "none"));
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string("--recompute: ") + e.what());
    }
    w.schedule_name = a.str("--schedule", w.P == 1 ? "gpipe" : "1f1b");
    bool planned = w.schedule_name == "auto";   // from the measured costs, below
    require_chunks(w.schedule_name, a.has("--chunks"));
    w.V = int(a.integer("--chunks", default_chunks(w.schedule_name), 1, pp::kMaxChunks));
    if (planned && w.V != 1) throw std::runtime_error("--chunks: the auto schedule plans one chunk per rank");
    if (a.has("--memory-cap") && !planned) throw std::runtime_error("--memory-cap: only with --schedule auto");
    if (!planned) w.schedule = make_schedule(w.schedule_name, w.P, w.M, w.V);
    bool dry = a.has("--dry-run");   // plans on this machine's CPU: a GPU line can be checked without one
    w.device = parse_device(a.str("--device", "cpu"), !dry);
    w.gpus = w.device.cuda && !dry ? cuda_device_count() : 0;   // a CPU run never opens the CUDA driver
    int rows = s.B / (w.D * w.M);
    Device measure_on = dry ? Device{} : w.device;
    // Balanced stages need measured time: parameters say little of the attention's or the loss's cost.
    LayerCosts costs = layer_costs(s.cfg, a.str("--partition", "time"), rows, s.T, measure_on);
    LayerCosts times = costs.by == "time" ? costs : layer_costs(s.cfg, "time", rows, s.T, measure_on);
#ifdef PIPETRAIN_MPI
    // Measured times differ from process to process: every rank takes rank 0's, so all split and plan alike.
    if (w.mpi)
        for (LayerCosts* c : {&costs, &times})
            for (std::vector<double>* v : {&c->cost, &c->f, &c->bi, &c->bw, &c->stash})
                if (!v->empty()) w.mpi->broadcast(v->data(), v->size() * sizeof(double), 0);
#endif
    w.split = partition_layers(costs, w.P, w.V, planned ? pp::Placement::loop : w.schedule.placement);
    if (planned) w.schedule = plan_auto(w, times, a, size_t(rows) * s.T * s.cfg.hidden_size);
    w.stage_costs = stage_costs(w.split, times);
    w.owner.assign(num_model_layers(s.cfg), 0);
    for (int p = 0; p < w.P; p++)
        for (const auto& chunk : w.split[p])
            for (int l : chunk) w.owner[l] = p;

    w.dtype = a.str("--dtype", "fp32");
    if (w.dtype != "fp32" && w.dtype != "bf16") throw std::runtime_error("--dtype: expected fp32 or bf16, got \"" + w.dtype + "\"");
    w.run_opt.train = true, w.run_opt.causal = s.objective == Objective::causal, w.run_opt.seed = s.seed;
    w.run_opt.bf16 = w.dtype == "bf16";
    w.run_opt.hidden_dropout = s.cfg.hidden_dropout_prob, w.run_opt.attention_dropout = s.cfg.attention_probs_dropout_prob;
}

// Which transport carries the ranks' messages (w.comm: thread, nccl or mpi).
void choose_comm(World& w) {
    // Ranks on different GPUs talk through NCCL; the CPU, and stages that share a GPU, through
    // ThreadComm (host copies, or device-to-device copies on a GPU). Processes talk through MPI:
    // NCCL bootstrapped over MPI when every rank of a node has a GPU of its own (--comm auto or
    // nccl), else MpiComm, whose messages from GPU memory go through host memory (--comm mpi).
    int R = w.P * w.D, ranks_here = R;   // the ranks that share this machine's GPUs
#ifdef PIPETRAIN_MPI
    if (w.mpi) ranks_here = w.mpi->local_size();
#endif
    bool nccl_possible = w.device.cuda && R > 1 && ranks_here <= w.gpus;
    // libnccl is opened (dlopen) only when the run asks for it or could use it: a CPU run never
    // maps its 200 MB, and a missing NCCL is an error for --comm nccl alone.
    std::string no_nccl = "this build has no NCCL";
    bool nccl_loads = false;
#ifdef PIPETRAIN_NCCL
    if (w.comm == "nccl" || (w.comm == "auto" && nccl_possible)) nccl_loads = pp::nccl_available(&no_nccl);
#endif
    if (w.comm == "nccl" && !nccl_loads) throw std::runtime_error("--comm nccl: " + no_nccl);
    if (w.comm == "auto" && nccl_possible && !nccl_loads && w.root)
        std::fprintf(stderr, "pipetrain train: note: --comm auto uses the %s communicator, NCCL is unavailable: %s\n",
                     w.mpi ? "MPI" : "thread", no_nccl.c_str());
    if (w.comm == "auto") w.comm = nccl_possible && nccl_loads ? "nccl" : w.mpi ? "mpi" : "thread";
    if (w.comm == "nccl" && !nccl_possible)
        throw std::runtime_error("--comm nccl: needs --device cuda and one GPU per rank (" + std::to_string(ranks_here) +
                                  " ranks" + (w.mpi ? " on this machine, " : ", ") + std::to_string(w.gpus) + " GPUs)");
}

// Checkpoints and the state an exact --resume needs; then this process's ranks are made: all of
// them, or under MPI its own.
void make_state_and_ranks(World& w, const Setup& s, Args& a, const nlohmann::json& saved) {
    w.save_every = int(a.integer("--save-every", 0, 0, 1 << 30));
    w.keep = int(a.integer("--keep", 2, 1, 1 << 20));
    if (a.has("--keep") && w.save_every == 0) throw std::runtime_error("--keep: only with --save-every (it keeps the last K checkpoints)");
    w.state = {{"seed", s.seed}, {"batch", s.B}, {"seq", s.T}, {"objective", s.cfg.is_decoder ? "causal" : "mlm"},
               {"lr", w.lr}, {"warmup", w.warmup}, {"steps", w.steps}, {"clip", w.clip}, {"weight-decay", w.weight_decay},
               {"dropout", std::stod(std::to_string(s.cfg.hidden_dropout_prob))},   // 0.1, not 0.10000000149
               {"micro-batches", w.M}};   // dropout masks and the order of gradient sums depend on it
    if (a.has("--resume")) {
        namespace fs = std::filesystem;
        fs::path from = fs::weakly_canonical(a.str("--resume")), to = fs::weakly_canonical(w.out);
        if (std::mismatch(from.begin(), from.end(), to.begin(), to.end()).first == from.end())
            throw std::runtime_error("--out: " + w.out + " is inside the checkpoint --resume reads (" + a.str("--resume") +
                                     "): saving there would overwrite it");
        check_resume_state(w, a.str("--resume"), saved);
    }
    w.state["save-format"] = w.save_format;   // not compared on --resume: it does not change the bits
    int R = w.P * w.D;
    w.stages.resize(R), w.optim.resize(R);
    for (int r = 0; r < R; r++)
        if (!w.mpi || r == w.rank) make_rank(w, r);
    w.peak_stash.assign(w.P, 0.0);
    w.peak_stashes.assign(w.P, 0);
    w.trace = a.has("--trace");
}

// --out, made and locked by rank 0 before training: a path that cannot be written fails now, not
// after the run. The lock is released when the process ends, however it ends.
struct OutDir {
    bool made = false;   // by this run: removed again if the run fails before saving anything
    int lock = -1;
    OutDir() = default;
    OutDir(OutDir&& o) noexcept : made(o.made), lock(o.lock) { o.lock = -1; }
    OutDir& operator=(OutDir&& o) noexcept {
        std::swap(made, o.made), std::swap(lock, o.lock);
        return *this;
    }
    ~OutDir() { if (lock >= 0) ::close(lock); }
};

// An --out that holds another run's model or checkpoints would be silently replaced: refused unless
// --overwrite says so, or the run continues one of those checkpoints (--resume OUT/checkpoint-N).
void check_not_replacing(const World& w, const Args& a) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (a.has("--overwrite") || !fs::is_directory(w.out, ec)) return;
    if (a.has("--resume") && fs::weakly_canonical(a.str("--resume")).parent_path() == fs::weakly_canonical(w.out)) return;
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(w.out, ec)) {
        std::string name = e.path().filename().string();
        bool checkpoint = name.size() > 11 && name.size() <= 20 && name.rfind("checkpoint-", 0) == 0 &&
                          name.find_first_not_of("0123456789", 11) == std::string::npos;   // not a staging name
        if (name == "config.json" || name == "model.safetensors" || name == "model.safetensors.index.json" || checkpoint)
            names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    std::string found;
    for (const std::string& name : names) found += (found.empty() ? "" : ", ") + name;
    if (!found.empty())
        throw std::runtime_error("--out: " + w.out + " already holds a model (" + found + "), which this run would replace: "
                                 "choose another --out, or add --overwrite");
}

OutDir prepare_out(World& w, Args& a) {
    for (const char* flag : {"--trace", "--dump-grads"})
        if (a.has(flag)) check_output_path(a.str(flag), flag);
    for (const char* f : {"/model.safetensors", "/config.json", "/vocab.txt"})
        if (std::filesystem::is_directory(w.out + f)) check_output_path(w.out + f, "--out");
    OutDir o;
    o.made = !std::filesystem::exists(w.out);
    std::error_code ec;
    std::filesystem::create_directories(w.out, ec);
    if (ec) throw std::runtime_error("--out: cannot create " + w.out + " (" + ec.message() + ")");
    check_writable_dir(w.out, "--out");   // an existing read-only --out would lose the run at its end
    // One run per --out: two would stage their checkpoints under the same names. The lock is the
    // directory's own (flock), released when the process ends, however it ends.
    o.lock = ::open(w.out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (o.lock < 0 || ::flock(o.lock, LOCK_EX | LOCK_NB) != 0)
        throw std::runtime_error("--out: " + w.out + " is in use by another pipetrain run");
    check_not_replacing(w, a);
    recover_dir(w.out);   // what an interrupted run left: removed, or committed when it was sealed
    return o;
}

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
std::pair<int, int> threads_and_cores(const World& w) {
    int threads = w.P * w.D;
#ifdef PIPETRAIN_MPI
    if (w.mpi) threads = w.mpi->local_size();
#endif
    return {threads * w.threads, int(std::max(1u, std::thread::hardware_concurrency()))};
}

// Why the measured bubble is what it is: the schedule's own bubble with equal stages, the one the
// simulator expects for these stages (their F, BI, BW measured alone, so on enough cores), a note
// when threads outnumber cores, and the stage that holds the others up, with what would balance it.
std::string bubble_report(const World& w, int blocks, const Args& a) {
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
    const std::vector<RankStep>& ranks = w.record.ranks;
    double mean = 0;
    for (const RankStep& r : ranks) mean += r.busy_us / double(ranks.size());
    for (size_t p = 0; p < ranks.size() && w.P > 1; p++) {
        if (ranks[p].busy_us < 1.5 * mean) continue;
        std::string names;
        for (const auto& chunk : w.split[p]) names += (names.empty() ? "" : " | ") + layer_names(chunk, blocks);
        std::string fix = a.str("--partition", "time") != "time"
                              ? "--partition time balances measured times"
                              : "its layers cannot be split finer: fewer --stages, or more blocks per stage (--blocks with a preset)";
        std::snprintf(line, sizeof line, "stage %zu computes %.1f ms, %.1fx the mean of %.1f ms (%s): %s\n", p,
                      ranks[p].busy_us / 1e3, ranks[p].busy_us / mean, mean / 1e3, names.c_str(), fix.c_str());
        out += line;
    }
    return out;
}

// Rank 0's first lines: the model, the data, the pipeline, the devices, the split.
void print_banner(const World& w, const Setup& s, Args& a) {
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

// The ranks run: as threads (ThreadComm, or NCCL for one GPU each), or as this process's rank.
void run_world(World& w, bool made_out) {
    try {
        if (w.mpi) {
#ifdef PIPETRAIN_MPI
            if (w.comm == "nccl") {
#ifdef PIPETRAIN_NCCL
                set_device(device_of_rank(w, w.rank), w.rank);
                pp::MpiComm host(*w.mpi);
                pp::NcclWorld world(*w.mpi, device_of_rank(w, w.rank).index, w.timeout);
                pp::NcclComm comm(world, host, w.rank);
                pp::run_mpi_rank(*w.mpi, [&](pp::Comm&) { run_rank(w, comm, w.rank); });
#endif
            } else {
                pp::run_mpi_rank(*w.mpi, [&](pp::Comm& comm) { run_rank(w, comm, w.rank); });
            }
#endif
        } else if (w.comm == "nccl") {
#ifdef PIPETRAIN_NCCL
            std::vector<int> gpus;
            for (int r = 0; r < w.P * w.D; r++) gpus.push_back(device_of_rank(w, r).index);
            pp::NcclWorld world(gpus, w.timeout);
            pp::run_ranks(world.host(), [&](int rank) {
                set_device(device_of_rank(w, rank), rank);
                pp::NcclComm comm(world, rank);
                run_rank(w, comm, rank);
            });
#endif
        } else {
            pp::ThreadWorld world(w.P * w.D, w.timeout);
            pp::run_ranks(world, [&](int rank) {
                pp::ThreadComm comm(world, rank);
                run_rank(w, comm, rank);
            });
        }
    } catch (...) {   // a failed run leaves no empty --out behind (checkpoints it saved stay, for --resume)
        std::error_code ec;
        if (made_out) discard_run_notes(w.out);   // plots: the metrics of a run that saved nothing
        if (made_out && std::filesystem::is_empty(w.out, ec)) std::filesystem::remove(w.out, ec);
        throw;
    }
}

// After the run, on every process: rank 0 writes the trace and --dump-grads and prints the end.
int finish(World& w, const Setup& s, Args& a, const std::vector<std::string>& argv, const std::string& program, double secs) {
    if (!w.root) return w.stopped_at > 0 ? interrupt_exit_code(interrupt_signal()) : 0;
    if (!w.dump_grads.empty()) w.grads_dump.write(w.dump_grads);   // step 1 did run
    if (w.stopped_at > 0) {
        // The checkpoint is the result. OUT/model.safetensors is not written: next to the config it
        // would read as a finished run's model, and the resumed run writes it when it has finished.
        std::fflush(stdout);
        std::string ckpt = w.out + "/checkpoint-" + std::to_string(w.stopped_at);
        std::fprintf(stderr, "interrupted at step %d: continue with %s\n", w.stopped_at.load(),
                     continue_command(program, argv, ckpt).c_str());
        return interrupt_exit_code(interrupt_signal());
    }
    if (w.trace) {   // the last step of every rank (replica d's ranks are d*P .. d*P+P-1), from 0
        double first = 1e300;
        for (const pp::Event& e : w.trace_events) first = std::min(first, e.start);
        for (pp::Event& e : w.trace_events) e.start -= first, e.end -= first;
        for (pp::Event& e : w.trace_events)   // what a compute event ran: its layers
            if (!e.comm) {
                const std::vector<int>& l = w.split[e.rank % w.P][e.action.chunk];
                e.detail = "layers " + std::to_string(l.front()) + "-" + std::to_string(l.back());
            }
        // plots: counters (loss, stashes per rank) join the timeline's events
        write_file_atomic(a.str("--trace"), with_trace_counters(pp::chrome_trace(w.trace_events), w.trace_events,
                                                                w.last_loss, w.record.ranks));
        std::printf("%s", pp::ascii_timeline(w.trace_events, w.P, terminal_columns()).c_str());
        if (w.mpi) std::printf("trace: every rank's clock put on rank 0's, within ±%.0f µs (half the fastest round trip)\n", w.clock_error_us);
    }
    std::printf("peak stash bytes per stage:");
    for (int p = 0; p < w.P; p++) std::printf(" %.0f", w.peak_stash[p]);
    std::printf("\npeak stashes per stage (micro-batch, chunk):");
    for (int p = 0; p < w.P; p++) std::printf(" %d", w.peak_stashes[p]);
    std::printf("\n");
    if (w.steps > w.start_step) {
        std::printf("last step, per rank:\n%s", rank_time_report(w.record.ranks).c_str());
        std::printf("%s", bubble_report(w, s.cfg.num_hidden_layers, a).c_str());
    }
    if (int sig = interrupt_signal()) {   // after the last step: the run is complete, only the evaluation is skipped
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

// --dry-run: the flags are read and the pipeline planned (model, split, schedule) as for the run,
// then it stops: nothing trained, nothing written, --data not read. A line for another machine
// (mpirun -H, srun) can be checked here.
int dry_run(World& w, const Setup& s, Args& a) {
    w.comm = w.mpi ? "mpi" : a.str("--comm", "auto");
    print_banner(w, s, a);
    pp::validate(w.schedule, w.M, w.V);
    std::printf("dry run: the flags and the plan are valid (%s × %s = %s); nothing was trained or written\n",
                count_of(w.P, "stage").c_str(), count_of(w.D, "replica").c_str(), count_of(w.P * w.D, "rank").c_str());
    return 0;
}

// The run, in every process: all ranks as threads (mpi null), or this process's rank of an MPI job.
int train(Args& a, const std::vector<std::string>& argv, const std::string& program, pp::MpiWorld* mpi) {
    World w;
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
    if (a.has("--dry-run")) return dry_run(w, s, a);
    choose_comm(w);
    make_state_and_ranks(w, s, a, saved);
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

// ---- pipetrain train ------------------------------------------------------------------------

// Under an MPI launcher (or --comm mpi) every process is one rank, and runs `train` with the MPI
// world; a failure on any rank prints its rank and host and ends the whole job (MPI_Abort), so no
// rank is left waiting for one that has gone.
int train_main(const std::vector<std::string>& argv, const std::string& program) {
    Args a(argv, {"--data", "--inputs", "--out", "--model", "--preset", "--stages", "--micro-batches", "--batch",
                  "--seq", "--schedule", "--chunks", "--memory-cap", "--recompute", "--steps", "--lr", "--seed", "--dropout",
                  "--threads", "--dp", "--objective", "--trace", "--dump-grads", "--partition", "--vocab-size",
                  "--blocks", "--warmup", "--clip", "--weight-decay", "--timeout", "--task", "--labels", "--eval",
                  "--eval-every", "--save-format", "--save-every", "--keep", "--resume", "--device", "--dtype", "--comm"},
           {"--dry-run", "--overwrite"});
    std::string comm = a.str("--comm", "auto");
    if (comm != "auto" && comm != "thread" && comm != "nccl" && comm != "mpi")
        throw std::runtime_error("--comm: expected auto, thread, nccl or mpi, got \"" + comm + "\"");
    bool launched = pp::launched_by_mpi();
    if (comm == "thread" && launched)
        throw std::runtime_error("--comm thread: this process was started by an MPI launcher, where each process is one "
                                 "rank (--comm mpi or auto); run it without mpirun for threads");
    if ((comm != "mpi" && !launched) || a.has("--dry-run")) return train(a, argv, program, nullptr);
#ifndef PIPETRAIN_MPI
    throw std::runtime_error(std::string(comm == "mpi" ? "--comm mpi" : "started by an MPI launcher") +
                             ": this build has no MPI (install libopenmpi-dev, then configure and build again)");
#else
    pp::MpiWorld mpi(a.real("--timeout", 120.0, 1e-3, 1e6));
    try {
        return train(a, argv, program, &mpi);
    } catch (const std::exception& e) {
        mpi.abort(e.what());
    }
#endif
}

int train_main(const std::vector<std::string>& argv) { return train_main(argv, "pipetrain"); }

// ---- pipetrain eval -----------------------------------------------------------------------

int eval_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--model", "--data", "--inputs", "--objective", "--dump-logits", "--seq", "--seed", "--threads"});
    // The task comes from the model: a config with labels is a classifier, evaluated on a TSV.
    ops::set_num_threads(int(a.integer("--threads", 1, 1, 256)));
    Setup s = make_setup(a, false);
    std::vector<std::unique_ptr<Layer>> owned;
    std::vector<Layer*> layers;
    for (int i = 0; i < num_model_layers(s.cfg); i++) owned.push_back(make_layer(s.cfg, i)), layers.push_back(owned.back().get());
    if (a.has("--dump-logits")) check_output_path(a.str("--dump-logits"), "--dump-logits");
    load_weights(s.model_dir, layers, false, s.cfg.num_labels == 0);   // a classifier's head must be there
    EvalResult ev = evaluate(layers, s.eval, s.objective == Objective::causal);
    if (ev.targets == 0)
        throw std::runtime_error(a.str(a.has("--data") ? "--data" : "--inputs") + ": nothing to evaluate (no target position)");
    std::printf("%s\n", ev.summary(s.cfg.num_labels > 0).c_str());
    if (a.has("--dump-logits")) {
        // The tensors of the fixtures' expected.safetensors, for the first eval batch:
        // hidden_states.i (embedding output, then each block), last_hidden_state, pooled_output,
        // the logits at every position and the loss (prefix causal_ with --objective causal).
        const Batch& b = s.eval[0];
        MicroBatch mb = b.rows(0, b.B);
        RunOptions opt;
        opt.train = false, opt.causal = s.objective == Objective::causal, opt.all_logits = true;
        std::string pre = opt.causal ? "causal_" : "";
        std::vector<float> act, next;
        st::Writer w;
        int C = s.cfg.hidden_size;
        // The batch itself (I64, the --inputs names), so that another implementation can run the
        // same rows: with --data, the masking, the tokenizer and the padding made them.
        auto add_ids = [&](const char* name, const std::vector<int32_t>& v) {
            std::vector<int64_t> ids(v.begin(), v.end());
            if (ids.empty()) ids.assign(size_t(b.B) * b.T, 0);   // no task ids given: task 0
            w.add_i64(name, {b.B, b.T}, ids.data());
        };
        add_ids("input_ids", b.input_ids);
        add_ids("token_type_ids", b.token_type_ids);
        add_ids("attention_mask", b.attention_mask);
        if (s.cfg.use_task_id) add_ids("task_type_ids", b.task_type_ids);
        for (Layer* l : layers) {
            next.assign(l->out_numel(mb.B, mb.T), 0.0f);
            auto st = l->forward(next.data(), act.empty() ? nullptr : act.data(), mb, opt);
            if (auto* hs = dynamic_cast<HeadStash*>(st.get())) {
                w.add_f32(pre + "last_hidden_state", {b.B, b.T, C}, act.data());
                if (!hs->pooled.empty()) w.add_f32("pooled_output", {b.B, C}, hs->pooled.data());
                float loss = hs->num_targets ? float(hs->loss_sum / double(hs->num_targets)) : 0.0f;
                if (s.cfg.num_labels > 0) {
                    w.add_f32("logits", {b.B, s.cfg.num_labels}, hs->logits.data());
                    w.add_f32("loss", {1}, &loss);
                } else {
                    w.add_f32(opt.causal ? "causal_logits" : "mlm_logits", {b.B, b.T, s.cfg.vocab_size}, hs->logits.data());
                    w.add_f32(opt.causal ? "causal_lm_loss" : "mlm_loss", {1}, &loss);
                }
            } else if (!opt.causal) {
                w.add_f32("hidden_states." + std::to_string(l->index()), {b.B, b.T, C}, next.data());
            }
            act.swap(next);
        }
        w.write(a.str("--dump-logits"));
    }
    return 0;
}

// ---- pipetrain schedule / partition ------------------------------------------------------

int schedule_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--stages", "--micro-batches", "--schedule", "--chunks", "--costs", "--memory-cap", "--trace", "--svg"}, {"--overlap"});
    int P = int(a.integer("--stages", 4, 1, 64)), M = int(a.integer("--micro-batches", 8, 1, 4096));
    std::string name = a.str("--schedule", "1f1b");
    require_chunks(name, a.has("--chunks"));
    int V = int(a.integer("--chunks", default_chunks(name), 1, pp::kMaxChunks));
    if (a.has("--memory-cap") && name != "auto") throw std::runtime_error("--memory-cap: only with --schedule auto");
    pp::Costs costs;
    if (a.has("--costs")) {   // times of one micro-batch: F and BI must take some, BW and comm may not
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
    }
    costs.overlap = a.has("--overlap");   // DualPipe's F&B pairs cost max(F, B)
    pp::Schedule sched;
    if (name == "auto") {   // the cap counts micro-batch stashes here: there is no model to weigh them
        if (V != 1) throw std::runtime_error("--chunks: the auto schedule plans one chunk per rank");
        int cap = int(a.integer("--memory-cap", P, 1, 1 << 20));
        sched = pp::auto_schedule(P, M, std::vector<pp::Costs>(P, costs), std::vector<int>(P, cap));
    } else {
        sched = make_schedule(name, P, M, V);
    }
    pp::Costs chunk = costs;   // a chunk is 1/V of a stage, so V chunks cost what one stage does
    chunk.f /= V, chunk.bi /= V, chunk.bw /= V;
    pp::SimResult r = pp::simulate(sched, chunk);
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
    return 0;
}

int partition_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--model", "--preset", "--blocks", "--stages", "--by", "--batch", "--seq"});
    if (a.has("--model") == a.has("--preset")) throw std::runtime_error("--model / --preset: give exactly one of them");
    if (a.has("--blocks") && a.has("--model")) throw std::runtime_error("--blocks: only with --preset");
    ModelConfig cfg = a.has("--model") ? load_model_config(a.str("--model")) : ModelConfig::preset(a.str("--preset"));
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
