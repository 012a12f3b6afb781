// src/cli/train_out.cpp — --out, checkpoints and --resume, replica 0's layers and timelines
// gathered on rank 0, the final model.
#include "src/cli/train.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "pipeline_lab.hpp"
#include "src/cli/args.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/device.hpp"
#include "src/cli/interrupt.hpp"
#include "src/formats/io.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/formats/safetensors.hpp"
#include "src/stage.hpp"
#include "src/step.hpp"
#include "src/formats/trainer_state.hpp"
#include "src/watchdog.hpp"

namespace pt {

namespace {

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
double clock_offset_us(TrainRun& w, pp::Comm& comm, int rank, double* error_us) {
    const int rounds = 16, tag = pt::kTagClock;
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

// A word for a POSIX shell: as it is when that is safe, else in single quotes.
std::string shell_quoted(const std::string& word) {
    bool plain = !word.empty();
    for (char c : word) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-+=/.,:@%", c));
    if (plain) return word;
    std::string q = "'";
    for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// A name that a run writes at --out's top: the model (Hugging Face's files or PaddleNLP's), the
// manifest that seals it, the metrics, the schedule and the checkpoints.
bool written_by_runs(const std::string& name) {
    auto ends_with = [&](const std::string& tail) {
        return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    for (const char* file : {"config.json", "model_config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json",
                             "special_tokens_map.json", "model.safetensors.index.json", kManifest, "metrics.jsonl", "schedule.json"})
        if (name == file) return true;
    return name.rfind("checkpoint-", 0) == 0 || (name.rfind("model", 0) == 0 && ends_with(".safetensors")) || ends_with(".pdparams");
}

// weakly_canonical alone leaves a relative path that does not exist yet relative ("a.json").
std::filesystem::path canonical_path(const std::string& p) { return std::filesystem::weakly_canonical(std::filesystem::absolute(p)); }

bool continues_in_out(const TrainRun& w, const Args& a) {   // --resume OUT/checkpoint-N
    return a.has("--resume") && canonical_path(a.str("--resume")).parent_path() == canonical_path(w.out);
}

// --trace and --dump-grads are written at the end, after the model: one that names a file the run
// writes in --out (its model, a checkpoint, the metrics) would replace it, or be replaced.
void check_side_outputs(const TrainRun& w, const Args& a) {
    namespace fs = std::filesystem;
    const fs::path out = canonical_path(w.out);
    const fs::path trace = a.has("--trace") ? canonical_path(a.str("--trace")) : fs::path();
    for (const char* flag : {"--trace", "--dump-grads"}) {
        if (!a.has(flag)) continue;
        const fs::path rel = canonical_path(a.str(flag)).lexically_relative(out);
        if (!rel.empty() && *rel.begin() != ".." && written_by_runs(rel.begin()->string()))
            throw std::runtime_error(std::string(flag) + ": " + a.str(flag) + " is where this run writes its " +
                                     rel.begin()->string() + " in --out: choose another file name");
    }
    if (a.has("--dump-grads") && canonical_path(a.str("--dump-grads")) == trace)
        throw std::runtime_error("--dump-grads: " + a.str("--dump-grads") + " is also --trace: choose another file");
}

// --overwrite: what an earlier run left in --out goes first (the manifest last: until then a load is
// refused, never a mix), so that no old checkpoint or shard stays beside the new run's.
void clear_earlier_run(const TrainRun& w, const Args& a) {
    namespace fs = std::filesystem;
    if (!a.has("--overwrite") || continues_in_out(w, a)) return;
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(w.out, ec))
        if (written_by_runs(e.path().filename().string())) names.push_back(e.path().filename().string());
    std::stable_partition(names.begin(), names.end(), [](const std::string& n) { return n != kManifest; });
    for (const std::string& name : names) {
        const std::string path = w.out + "/" + name;
        if (fs::is_directory(fs::symlink_status(path, ec))) trash(path);
        else if (!fs::remove(path, ec) && ec) fail(path, "--overwrite: cannot remove it (" + ec.message() + ")");
    }
    if (!names.empty()) fsync_dir(w.out);
}

// An --out that holds another run's model or checkpoints would be silently replaced: refused unless
// --overwrite says so, or the run continues one of those checkpoints (--resume OUT/checkpoint-N).
void check_not_replacing(const TrainRun& w, const Args& a) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (a.has("--overwrite") || !fs::is_directory(w.out, ec)) return;
    if (continues_in_out(w, a)) return;
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

}  // namespace

// Replica 0's layers in model order, on rank 0, for an evaluation, a save or --dump-grads (`grads`:
// their gradients). Rank 0 reads the layers of its own process's ranks where they are; every other
// rank of replica 0 sends its layers, which land in fresh layers that `held` keeps. Every rank
// calls it; it returns nothing on the others. Rank 0 thus holds one copy of the model.
std::vector<Layer*> gather_replica(TrainRun& w, pp::Comm& comm, int rank, bool grads, std::vector<std::unique_ptr<Layer>>& held) {
    std::vector<Layer*> all;
    bool with_root = w.stages[0] != nullptr;   // rank 0 runs in this process
    for (int i = 0; i < num_model_layers(w.setup->cfg); i++) {
        int owner = w.owner[i];
        if (with_root && w.stages[owner]) {
            if (rank == 0) all.push_back(w.stages[owner]->layer(i));
        } else if (rank == owner) {
            Buf& b = grads ? w.stages[rank]->layer(i)->grads : w.stages[rank]->layer(i)->params;
            comm.send(b.data(), b.size() * sizeof(float), 0, pt::kTagLayer + i);
        } else if (rank == 0) {
            // On the host, whatever this thread's device: the callers read `all` there, as they
            // read rank 0's own layers (moved to the host before). A layer made on the GPU here
            // was read by the host as if it were host memory (a crash under mpirun on an H200).
            held.push_back(make_layer(w.setup->cfg, i));
            held.back()->to(Device{});
            (grads ? held.back()->params : held.back()->grads) = Buf();   // only what is received is read
            Buf& b = grads ? held.back()->grads : held.back()->params;
            comm.recv(b.data(), b.size() * sizeof(float), owner, pt::kTagLayer + i);
            all.push_back(held.back().get());
        }
    }
    return all;
}

// OUT/checkpoint-<step>/: the model directory, the AdamW moments (under "<parameter>.exp_avg" /
// ".exp_avg_sq") and trainer_state.json, written into OUT/.tmp-checkpoint-N, sealed by a manifest
// and committed in one step (src/formats/lifecycle.hpp). With P > 1 every pipeline rank of replica 0 writes
// its own layers, as one shard of Hugging Face's sharded layout (model-0000k-of-0000P.safetensors,
// optimizer-0000k-of-0000P.safetensors, and an index for each). Rank 0 commits once every shard is
// written: a crash of any rank before leaves an unsealed staging directory, which loads nowhere and
// the next start removes. Only the last `keep` checkpoints are kept; older ones go through the trash.
void save_checkpoint(TrainRun& w, pp::Comm& comm, int rank, int step) {
    auto t0 = Clock::now();
    std::string dir = w.out + "/checkpoint-" + std::to_string(step), tmp = staging_path(dir);
    if (rank == 0) stage_dir(dir);
    comm.barrier();   // the staging directory exists
    int moment_shards = w.zero ? w.P * w.D : w.P;   // ZeRO-1: every rank holds moments no other has
    if (rank < moment_shards) {
        TransformerStage& stage = *w.stages[rank];
        Optimizer& opt = *w.optim[rank];
        if (rank < w.P)
            write_weights(tmp + "/" + (w.P > 1 ? shard_name("model", rank, w.P) : "model.safetensors"), stage.layers(),
                          w.save_format);
        pt::beat();   // a save of a large model is progress for the watchdog, file by file
        st::Writer moments;
        std::vector<Layer*> layers = stage.layers();
        for (size_t li = 0; li < layers.size(); li++)
            for (size_t ti = 0; ti < layers[li]->params_info.size(); ti++) {
                const ParamInfo& pi = layers[li]->params_info[ti];
                if (pi.tied || opt.at[li][ti] < 0) continue;   // the word embedding's moments; another replica's
                moments.add_f32(pi.name + ".exp_avg", pi.shape, opt.m[li].data() + opt.at[li][ti]);
                moments.add_f32(pi.name + ".exp_avg_sq", pi.shape, opt.v[li].data() + opt.at[li][ti]);
            }
        moments.write(tmp + "/" + (moment_shards > 1 ? shard_name("optimizer", rank, moment_shards) : "optimizer.safetensors"));
        pt::beat();
    }
    comm.barrier();   // every shard is written (each write is fsynced)
    if (rank != 0) return;
    write_model_info(tmp, w.setup->cfg, w.setup->vocab);
    if (w.P > 1) write_shard_index(tmp, "model", w.P);
    if (moment_shards > 1) write_shard_index(tmp, "optimizer", moment_shards);
    nlohmann::json state = w.state;
    state["step"] = step;
    write_file_atomic(tmp + "/trainer_state.json", state.dump(2) + "\n");
    double hashing = 0;
    uint64_t bytes = seal_dir(tmp, &hashing);
    pt::beat();
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

std::string json_number(double x) {   // 4 as "4", 2.5 as "2.5" (which an integer flag then refuses)
    return x == std::floor(x) && std::fabs(x) < 1e15 ? std::to_string((long long)x) : nlohmann::json(x).dump();
}

// The micro-batches in all (--dp × --micro-batches) the checkpoint was trained with; a checkpoint
// from before "dp" was recorded counts per replica, as it was compared then.
double saved_micro_batches(const nlohmann::json& saved, long long D) {
    double M = saved.contains("micro-batches") ? saved["micro-batches"].get<double>() : 0;
    return M * (saved.contains("dp") ? saved["dp"].get<double>() : double(D));
}

void check_resume_state(TrainRun& w, const std::string& dir, const nlohmann::json& saved) {
    // Any (--stages, --dp) resumes bitwise with the same micro-batches in all (src/pairwise.hpp).
    if (double all = saved_micro_batches(saved, w.D); all != double(w.D) * w.M)
        throw std::runtime_error("--micro-batches: the checkpoint " + dir + " was trained with " + json_number(all) +
                                 " micro-batches in all (--dp × --micro-batches), not --dp " + std::to_string(w.D) +
                                 " × --micro-batches " + std::to_string(w.M) + ": their size and dropout masks would change");
    for (const auto& [key, value] : w.state.items())   // "dtype": recorded since 2026-12-08, fp32 or bf16 before
        if (key != "dp" && key != "micro-batches" && (key != "dtype" || saved.contains(key)) && (!saved.contains(key) || saved[key] != value))
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
        if (key != "step" && key != "micro-batches")
            a.set_default("--" + key, value.is_string() ? value.get<std::string>() : value.dump());
    // Another --dp keeps the micro-batches in all: each replica gets its share of them.
    long long D = a.integer("--dp", 1, 1, 64);
    double all = saved_micro_batches(saved, D);
    if (saved.contains("micro-batches") && !a.has("--micro-batches") && std::fmod(all, D) != 0)   // it then blamed --batch
        throw std::runtime_error("--dp: the checkpoint was trained with " + json_number(all) + " micro-batches in all (--dp × "
                                 "--micro-batches), which " + std::to_string(D) + " replicas cannot share evenly");
    if (saved.contains("micro-batches")) a.set_default("--micro-batches", json_number(std::fmod(all, D) == 0 ? all / D : all));
}

// After the last step: every rank's timeline of it, on rank 0's clock, to rank 0.
void gather_trace(TrainRun& w, pp::Comm& comm, int rank, const std::vector<pp::Event>& timeline,
                  const std::vector<pp::Event>& dp_sums) {
    // Measured now, right after the step it is for: clocks drift apart (a few µs a second).
    double clock_error = 0, clock_offset = clock_offset_us(w, comm, rank, &clock_error);
    std::vector<pp::Event> events = timeline;
    events.insert(events.end(), dp_sums.begin(), dp_sums.end());
    for (pp::Event& e : events) e.rank = rank, e.start += clock_offset, e.end += clock_offset;
    std::vector<std::string> all = gather_bytes(comm, rank, pack_events(events), pt::kTagTimeline);
    std::vector<std::string> errors = gather_bytes(comm, rank, std::string((const char*)&clock_error, sizeof clock_error), pt::kTagClockError);
    double moments = double(w.optim[rank]->bytes());   // ZeRO-1 shows here: about 1/D of them
    std::vector<std::string> held = gather_bytes(comm, rank, std::string((const char*)&moments, sizeof moments), pt::kTagMoments);
    if (rank != 0) return;   // the rest is rank 0's: the ranks of a process (threads) share w
    w.moment_bytes.assign(held.size(), 0.0);
    for (size_t r = 0; r < held.size(); r++) std::memcpy(&w.moment_bytes[r], held[r].data(), std::min(sizeof(double), held[r].size()));
    for (size_t r = 0; r < all.size(); r++) {
        std::vector<pp::Event> e = unpack_events(all[r]);
        w.trace_events.insert(w.trace_events.end(), e.begin(), e.end());
        double err = 0;
        std::memcpy(&err, errors[r].data(), std::min(sizeof err, errors[r].size()));
        w.clock_error_us = std::max(w.clock_error_us, err);
    }
}

// The final model, from rank 0 (one copy of the model there), and its evaluation.
void save_final_model(TrainRun& w, pp::Comm& comm, int rank) {
    const Setup& s = *w.setup;
    comm.barrier();   // every rank's layers are on the host
    std::vector<std::unique_ptr<Layer>> held;
    std::vector<Layer*> layers = gather_replica(w, comm, rank, false, held);
    if (rank == 0) {
        set_device(Device{});
        save_model_dir(w.out, s.cfg, s.vocab, layers, w.save_format);
        // After the last step a signal skips only the evaluation: the run is complete.
        if (!w.stop_signal && !interrupt_signal()) w.final_eval = evaluate(layers, s.eval, s.objective == Objective::causal);
        if (w.steps > w.start_step) log_eval(w, w.final_eval), w.metrics.append(w.record);   // the last step's line, with it
    }
    comm.barrier();   // rank 0 has read the other ranks of its process
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

OutDir::~OutDir() {
    if (lock >= 0) ::close(lock);
}

void check_out_for_dry_run(const TrainRun& w, const Args& a) {
    std::error_code ec;
    if (std::filesystem::exists(w.out, ec) && !std::filesystem::is_directory(w.out, ec))
        throw std::runtime_error("--out: " + w.out + " is a file, expected a directory");
    check_side_outputs(w, a);
    check_not_replacing(w, a);
}

OutDir prepare_out(TrainRun& w, Args& a) {
    for (const char* flag : {"--trace", "--dump-grads"})   // in an --out made below: checked with it
        if (a.has(flag) && !(canonical_path(a.str(flag)).parent_path() == canonical_path(w.out) && !std::filesystem::exists(w.out)))
            check_output_path(a.str(flag), flag);
    check_side_outputs(w, a);
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
    clear_earlier_run(w, a);
    return o;
}

}  // namespace pt
