// Crash safety of what `pipetrain train` writes (issue #14), tested from outside: the CLI and
// the files, nothing of the implementation.
//
// 1. Kill test. A victim run (REF's flags: 2 steps, --save-every 1 --keep 1) starts in a copy
//    of a template OUT that another run C (other seed, --objective causal, --vocab-size 300,
//    --keep 2) filled, so the victim replaces C's checkpoint-1 and checkpoint-2, prunes its own
//    checkpoint-1 and saves its final model over C's. Every file of C differs from REF's (its
//    config.json says "is_decoder": true, its vocab.txt has 300 lines, not 313), so a mix
//    shows. tests/kill_shim.c counts the victim's filesystem calls (N, from an unarmed run)
//    and, for every K in 1..N, SIGKILLs a fresh victim right before its K-th call. After each
//    kill:
//      * every directory (OUT and every subdirectory, hidden ones too) that `inspect` accepts
//        is, file by file, REF's same-named directory or the template's, as a whole, never a
//        mix; staging and trash directories (.tmp-*, .trash-*, .saving) are refused;
//      * every directory refused is refused by name (the message names it), without a crash;
//      * recovery: the largest checkpoint-N that loads and equals REF's is resumed into the
//        same --out (else a fresh start); OUT's model, every checkpoint left and the names of
//        the files left then equal the uninterrupted run's bit for bit, nothing staged left;
//      * where the resume was possible, a fresh start into a copy of the killed OUT must
//        recover the same way.
//    Kills run two at a time in a tmpfs (/dev/shm) when there is one.
//    One kill again, keeping its files: PT_CRASH_K=K build/test_crash_safety -tc='kill*'
// 2. Corruption test. In a checkpoint-N and a final model OUT written by training, one byte of
//    each file in turn is flipped (safetensors: in the JSON header and three places in the
//    data; text files: first, middle, last byte); inspect, eval --model and (checkpoint)
//    train --resume must each exit non-zero naming that file. A file of the manifest removed
//    is refused by name; an extra unrelated file still loads.
//
// Assumptions where the contract leaves room (say if the implementation differs):
//  * a directory's "files" are config.json, vocab.txt, model.safetensors, and in a checkpoint
//    also optimizer.safetensors and trainer_state.json; pipetrain_manifest.json is not
//    compared byte for byte (it may hold anything beyond names, sizes and hashes);
//  * every loader verifies every file the manifest lists, even one it does not read (eval
//    and inspect check a checkpoint's optimizer.safetensors and trainer_state.json too);
//  * a refusal's message contains the refused directory's name (its last path component) or,
//    for a file that fails its manifest, that file's name;
//  * a directory that loads must have a name the run itself commits (OUT, checkpoint-N);
//  * --save-every/--keep are not recorded by the checkpoint, so REF with --keep 2 (which holds
//    the checkpoint-1 that --keep 1 prunes) has the same bits; a resume of the last
//    checkpoint with no step left may leave an older checkpoint unpruned, which then must be
//    REF's.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/cli_util.hpp"

using namespace test;
namespace fs = std::filesystem;

namespace {

const std::string data_flag = " --data " + fixture("text/sample_zh.txt");
// REF's flags without --preset (a resume takes the model from the checkpoint), --keep and --out.
const std::string ref_flags = data_flag + " --steps 2 --batch 4 --seq 16 --seed 5 --save-every 1";
const std::string run_flags = ref_flags + " --keep 1";
const std::vector<std::string> model_files = {"config.json", "vocab.txt", "model.safetensors"};
const std::vector<std::string> checkpoint_files = {"config.json", "vocab.txt", "model.safetensors",
                                                   "optimizer.safetensors", "trainer_state.json"};

bool is_checkpoint_name(const std::string& name) { return std::regex_match(name, std::regex("checkpoint-[0-9]+")); }
bool is_staging_name(const std::string& name) {
    return name.rfind(".tmp-", 0) == 0 || name.rfind(".trash-", 0) == 0 || name == ".saving";
}

// A directory's files in memory: file name → bytes ("" stands for a missing file).
using Files = std::map<std::string, std::string>;
Files read_files(const std::string& dir, const std::vector<std::string>& names) {
    Files f;
    for (const std::string& n : names) f[n] = fs::exists(dir + "/" + n) ? read_file(dir + "/" + n) : "";
    return f;
}

// The names of the plain files directly in a directory (what a run left there).
std::set<std::string> file_names(const std::string& dir) {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator(dir))
        if (!e.is_directory()) s.insert(e.path().filename().string());
    return s;
}

std::string join(const std::set<std::string>& s) {
    std::string out;
    for (const std::string& x : s) out += (out.empty() ? "" : " ") + x;
    return out;
}

// The scratch root: tmpfs when there is one (dozens of copies of a 10 MB OUT), unique per
// process, removed at the end of the test case however it ends (unless `keep`).
struct Scratch {
    std::string dir;
    bool keep = false;
    ~Scratch() {
        std::error_code ec;
        if (!keep) fs::remove_all(dir, ec);
    }
};
std::string scratch_dir(const std::string& name) {
    fs::path base = fs::is_directory("/dev/shm") && access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm")
                                                                                  : fs::temp_directory_path();
    fs::path d = base / ("pipetrain_crash_" + std::to_string(getpid()) + "_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d.string();
}

// ---- the kill test ---------------------------------------------------------------------------

// The reference directories, read once: REF's (--keep 2: checkpoint-1, -2 and the final model)
// and the template's (run C), each by its name relative to OUT ("" for OUT itself).
struct References {
    std::map<std::string, Files> ref, tmpl;
    std::set<std::string> ref_top_names;                           // the files an uninterrupted run leaves at OUT's top
    std::map<std::string, std::set<std::string>> ref_ckpt_names;   // and in each checkpoint
    std::set<std::string> ref_kept;                                // the checkpoints REF (--keep 1) keeps
    std::set<std::string> ref_other_dirs;                          // REF's directories that are no checkpoint
    std::string tmpl_dir;
};

// What one kill found: each problem is one line; the counts feed the summary.
struct KillOutcome {
    bool killed = false;
    int loaded = 0, refused = 0;
    bool resumed = false;          // recovery was a resume (else a fresh start)
    bool recovered = false;        // the first recovery left exactly the uninterrupted run's files
    bool fresh_recovered = true;   // where a resume was possible: a fresh start recovered too
    std::vector<std::string> problems;
};

std::string shim_env(long kill_at, const std::string& count_file) {
#ifdef PT_KILL_SHIM
    // An AddressSanitizer build wants its runtime first in the library list; the shim is first.
    const char* asan = std::getenv("ASAN_OPTIONS");
    return std::string("LD_PRELOAD=") + PT_KILL_SHIM + " PT_KILL_AT=" + std::to_string(kill_at) +
           (count_file.empty() ? "" : " PT_KILL_COUNT=" + count_file) +
           " ASAN_OPTIONS=" + (asan && *asan ? std::string(asan) + ":" : "") + "verify_asan_link_order=0 ";
#else
    (void)kill_at, (void)count_file;
    return "";
#endif
}

std::string victim_command(const std::string& out) {
    return std::string(PT_CLI) + " train --preset tiny" + run_flags + " --overwrite --out " + out;   // over the template's files
}

// Every directory under OUT after a kill: loads whole or is refused by name.
void check_after_kill(const std::string& out, const References& refs, KillOutcome& k, std::set<int>& complete) {
    std::vector<std::string> dirs = {""};
    for (const auto& e : fs::recursive_directory_iterator(out))
        if (e.is_directory() && !e.is_symlink()) dirs.push_back(fs::relative(e.path(), out).string());
    for (const std::string& rel : dirs) {
        std::string dir = rel.empty() ? out : out + "/" + rel;
        std::string name = fs::path(dir).filename().string();
        Run r = run_cli("inspect " + dir);
        if (r.code != 0) {
            k.refused++;
            if (r.code < 0 || r.code >= 128)
                k.problems.push_back(rel + ": inspect crashed (exit " + std::to_string(r.code) + ")");
            else if (r.out.find(name) == std::string::npos)
                k.problems.push_back(rel + ": refused without naming it: " + r.out.substr(0, 200));
            continue;
        }
        k.loaded++;
        bool staged = false;
        for (const auto& part : fs::path(rel)) staged = staged || is_staging_name(part.string());
        if (staged) {
            k.problems.push_back(rel + ": a staging/trash directory loads (inspect: ok)");
            continue;
        }
        bool top = rel.empty(), ckpt = is_checkpoint_name(rel);
        if (!top && !ckpt) {
            k.problems.push_back(rel + ": loads, but a run commits no directory of this name");
            continue;
        }
        Files got = read_files(dir, top ? model_files : checkpoint_files);
        auto same_as = [&](const std::map<std::string, Files>& m) { return m.count(rel) && m.at(rel) == got; };
        if (same_as(refs.ref)) {
            if (ckpt) complete.insert(std::atoi(rel.c_str() + 11));
        } else if (!same_as(refs.tmpl)) {
            std::string mix;   // where each file came from
            for (const auto& [file, bytes] : got) {
                std::string from = bytes.empty()                                                 ? "missing"
                                   : refs.ref.count(rel) && refs.ref.at(rel).at(file) == bytes   ? "REF"
                                   : refs.tmpl.count(rel) && refs.tmpl.at(rel).at(file) == bytes ? "template"
                                                                                                 : "neither";
                mix += " " + file + "=" + from;
            }
            k.problems.push_back((top ? std::string("OUT") : rel) + ": loads, but is a mix:" + mix);
        }
    }
}

// After recovery OUT holds what the uninterrupted run leaves: its model, its checkpoints (an
// older one of REF's may stay), the same file names, nothing staged.
bool check_recovered(const std::string& what, const Run& r, const std::string& out, const References& refs,
                     KillOutcome& k) {
    size_t before = k.problems.size();
    if (r.code != 0) {
        k.problems.push_back(what + " failed (exit " + std::to_string(r.code) +
                             "): " + r.out.substr(r.out.size() > 400 ? r.out.size() - 400 : 0));
        return false;
    }
    if (read_files(out, model_files) != refs.ref.at("")) k.problems.push_back(what + ": OUT's model is not REF's");
    if (file_names(out) != refs.ref_top_names)
        k.problems.push_back(what + ": OUT holds {" + join(file_names(out)) + "}, REF {" + join(refs.ref_top_names) +
                             "}");
    std::set<std::string> ckpts;
    for (const auto& e : fs::directory_iterator(out)) {
        if (!e.is_directory()) continue;
        std::string name = e.path().filename().string();
        if (refs.ref_other_dirs.count(name)) continue;
        if (!is_checkpoint_name(name) || !refs.ref.count(name)) {
            k.problems.push_back(what + ": left " + name);
            continue;
        }
        ckpts.insert(name);
        if (read_files(e.path().string(), checkpoint_files) != refs.ref.at(name))
            k.problems.push_back(what + ": " + name + " is not REF's");
        if (file_names(e.path().string()) != refs.ref_ckpt_names.at(name))
            k.problems.push_back(what + ": " + name + " holds {" + join(file_names(e.path().string())) + "}");
        for (const auto& sub : fs::directory_iterator(e.path()))
            if (sub.is_directory())
                k.problems.push_back(what + ": left " + name + "/" + sub.path().filename().string());
    }
    for (const std::string& kept : refs.ref_kept)
        if (!ckpts.count(kept)) k.problems.push_back(what + ": " + kept + " is missing");
    Run inspect = run_cli("inspect " + out);
    if (inspect.code != 0) k.problems.push_back(what + ": OUT does not load: " + inspect.out.substr(0, 200));
    return k.problems.size() == before;
}

KillOutcome kill_at(long K, const std::string& root, const References& refs) {
    KillOutcome k;
    std::string dir = root + "/k" + std::to_string(K), out = dir + "/out", fresh = dir + "/fresh";
    fs::create_directories(dir);
    fs::copy(refs.tmpl_dir, out, fs::copy_options::recursive);
    Run v = run_command(shim_env(K, "") + victim_command(out));
    k.killed = v.code == -1 || v.code == 128 + 9;   // the shell reports a SIGKILLed child as 137
    if (!k.killed && v.code != 0)
        k.problems.push_back("the victim failed instead of being killed: " + v.out.substr(0, 300));
    std::set<int> complete;   // checkpoint numbers that load and are REF's
    check_after_kill(out, refs, k, complete);
    if (!complete.empty()) fs::copy(out, fresh, fs::copy_options::recursive);
    k.resumed = !complete.empty();
    const std::string fresh_start = "train --preset tiny" + run_flags + " --overwrite --out ";
    if (k.resumed) {
        std::string last = out + "/checkpoint-" + std::to_string(*complete.rbegin());
        k.recovered = check_recovered("resume", run_cli("train" + run_flags + " --resume " + last + " --out " + out),
                                      out, refs, k);
        k.fresh_recovered = check_recovered("fresh start", run_cli(fresh_start + fresh), fresh, refs, k);
    } else {
        k.recovered = check_recovered("fresh start", run_cli(fresh_start + out), out, refs, k);
    }
    return k;
}

}   // namespace

TEST_CASE("kill a training at every filesystem call of its saves: what loads is whole, a resume is exact") {
#ifndef PT_KILL_SHIM
    MESSAGE("skipped: the kill shim needs Linux + glibc (LD_PRELOAD)");
    return;
#else
    auto start = std::chrono::steady_clock::now();
    const char* only = std::getenv("PT_CRASH_K");
    Scratch root_dir{scratch_dir("kill"), only != nullptr};
    const std::string& root = root_dir.dir;
    // REF: the uninterrupted run, --keep 1 (what a run keeps) and --keep 2 (every checkpoint's bits).
    References refs;
    std::string ref = root + "/ref", ref_all = root + "/ref_all", tmpl = root + "/template";
    Run r = run_cli("train --preset tiny" + run_flags + " --out " + ref);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    r = run_cli("train --preset tiny" + ref_flags + " --keep 2 --out " + ref_all);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    refs.ref[""] = read_files(ref, model_files);
    REQUIRE(read_files(ref_all, model_files) == refs.ref[""]);
    refs.ref_top_names = file_names(ref);
    for (const auto& e : fs::directory_iterator(ref)) {
        std::string name = e.path().filename().string();
        if (e.is_directory()) (is_checkpoint_name(name) ? refs.ref_kept : refs.ref_other_dirs).insert(name);
    }
    CHECK(join(refs.ref_kept) == "checkpoint-2");
    for (const std::string name : {"checkpoint-1", "checkpoint-2"}) {
        REQUIRE(fs::exists(ref_all + "/" + name + "/trainer_state.json"));
        refs.ref[name] = read_files(ref_all + "/" + name, checkpoint_files);
        refs.ref_ckpt_names[name] = file_names(ref_all + "/" + name);
        if (refs.ref_kept.count(name)) REQUIRE(read_files(ref + "/" + name, checkpoint_files) == refs.ref[name]);
    }
    // The template: run C's model and checkpoints under the same names, every file different.
    const std::string c_flags = " --steps 2 --batch 4 --seq 16 --seed 7 --objective causal --vocab-size 300";
    r = run_cli("train --preset tiny" + data_flag + c_flags + " --save-every 1 --keep 2 --out " + tmpl);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    refs.tmpl_dir = tmpl;
    refs.tmpl[""] = read_files(tmpl, model_files);
    for (const std::string name : {"checkpoint-1", "checkpoint-2"})
        refs.tmpl[name] = read_files(tmpl + "/" + name, checkpoint_files);
    REQUIRE(refs.tmpl[""].at("config.json").find("\"is_decoder\": true") != std::string::npos);
    for (const std::string& file : model_files) REQUIRE(refs.tmpl[""].at(file) != refs.ref[""].at(file));

    // N: the calls of one unarmed victim run, twice (a kill at K means the same call every time).
    std::string counts;
    long N = 0;
    for (int i = 0; i < 2; i++) {
        std::string out = root + "/unarmed" + std::to_string(i), count_file = root + "/count";
        fs::copy(tmpl, out, fs::copy_options::recursive);
        auto t0 = std::chrono::steady_clock::now();
        r = run_command(shim_env(0, count_file) + victim_command(out));
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        REQUIRE_MESSAGE(r.code == 0, r.out);
        counts = read_file(count_file);
        long n = std::atol(counts.c_str());
        if (i == 1) CHECK_MESSAGE(n == N, "the number of calls changes from run to run: " << N << " then " << n);
        N = n;
        KillOutcome unarmed;   // the uninterrupted victim over the template is REF
        CHECK(check_recovered("the unarmed victim", r, out, refs, unarmed));
        for (const std::string& p : unarmed.problems) CHECK_MESSAGE(false, p);
        if (i == 0) MESSAGE("one victim run: " << seconds << " s");
        fs::remove_all(out);
    }
    REQUIRE(N > 0);
    std::string by_kind = counts.substr(counts.find('\n') + 1);
    std::replace(by_kind.begin(), by_kind.end(), '\n', ' ');
    while (!by_kind.empty() && by_kind.back() == ' ') by_kind.pop_back();
    MESSAGE("the victim makes " << N << " counted filesystem calls: " << by_kind);

    // Every K, two at a time.
    long first = 1, last = N;
    if (only) first = last = std::atol(only);
    std::vector<KillOutcome> outcome(size_t(last + 1));
    std::atomic<long> next{first};
    auto worker = [&] {
        for (long K; (K = next++) <= last;) {
            try {
                outcome[size_t(K)] = kill_at(K, root, refs);
            } catch (const std::exception& e) {   // a filesystem error of the test itself
                outcome[size_t(K)].problems.push_back(std::string("the test failed: ") + e.what());
            }
            if (!only) fs::remove_all(root + "/k" + std::to_string(K));
        }
    };
    std::thread second(worker);
    worker();
    second.join();

    int killed = 0, loaded = 0, refused = 0, resumes = 0, resumes_ok = 0, fresh_ok = 0, failing = 0;
    std::string failing_ks;
    for (long K = first; K <= last; K++) {
        const KillOutcome& k = outcome[size_t(K)];
        killed += k.killed;
        loaded += k.loaded;
        refused += k.refused;
        resumes += k.resumed;
        resumes_ok += k.resumed && k.recovered;
        fresh_ok += k.resumed ? k.fresh_recovered : k.recovered;   // every K gets a fresh start
        CHECK_MESSAGE(k.killed, "K=" << K << ": the victim was not killed");
        if (k.problems.empty()) continue;
        failing_ks += " " + std::to_string(K);
        if (++failing > 12) continue;   // the first dozen in full, then only their numbers
        std::string text;
        for (const std::string& p : k.problems) text += "\n    " + p;
        CHECK_MESSAGE(false, "kill before call K=" << K << ":" << text
                                                   << "\n  again, keeping the files: PT_CRASH_K=" << K << " "
                                                   << fs::read_symlink("/proc/self/exe").string() << " -tc='kill*'");
    }
    CHECK_MESSAGE(failing == 0, failing << " of " << (last - first + 1) << " kills went wrong, at K =" << failing_ks);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE("calls " << N << " | kills tried " << (last - first + 1) << " | killed " << killed
                     << " | directories that loaded " << loaded
                     << " (all whole: " << std::string(failing == 0 ? "yes" : "no") << ") | refused " << refused
                     << " | recoveries ok: resume " << resumes_ok << "/" << resumes << ", fresh start " << fresh_ok
                     << "/" << (last - first + 1) << " | " << seconds << " s");
    if (only) MESSAGE("kept " << root << "/k" << std::string(only));
#endif
}

// ---- the corruption test ----------------------------------------------------------------------

namespace {

// Where to flip: in a .safetensors file the middle of its JSON header and the first, a middle
// and the last data byte; in a text file the first, the middle and the last byte.
std::vector<size_t> flip_positions(const std::string& name, const std::string& bytes) {
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0 && bytes.size() > 8) {
        uint64_t header = 0;
        for (int i = 7; i >= 0; i--) header = header * 256 + uint8_t(bytes[size_t(i)]);
        size_t data = size_t(8 + header);
        return {8 + size_t(header) / 2, data, data + (bytes.size() - data) / 2, bytes.size() - 1};
    }
    return {0, bytes.size() / 2, bytes.size() - 1};
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
}

}   // namespace

TEST_CASE("a flipped byte or a missing file in a saved directory is refused by name; an extra file is not") {
    Scratch root_dir{scratch_dir("corrupt")};
    const std::string& root = root_dir.dir;
    const std::string out = root + "/out";
    Run r = run_cli("train --preset tiny" + data_flag + " --steps 2 --batch 4 --seq 16 --seed 5 --save-every 2 --out " +
                    out);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    int tried = 0, detected = 0, removed = 0, removed_refused = 0, resume_runs = 0;
    for (bool checkpoint : {true, false}) {
        std::string dir = checkpoint ? out + "/checkpoint-2" : out;
        CAPTURE(dir);
        const std::vector<std::string>& files = checkpoint ? checkpoint_files : model_files;
        CHECK_MESSAGE(fs::exists(dir + "/pipetrain_manifest.json"), dir << " has no pipetrain_manifest.json");
        // The loaders, each run on `dir` as it is now.
        auto loaders = [&](std::vector<std::pair<std::string, Run>>& runs) {
            runs.clear();
            runs.push_back({"inspect", run_cli("inspect " + dir)});
            runs.push_back({"eval", run_cli("eval --model " + dir + data_flag)});
            if (checkpoint) {
                std::string to = root + "/resumed" + std::to_string(resume_runs++);
                runs.push_back({"train --resume", run_cli("train --resume " + dir + data_flag + " --out " + to)});
                fs::remove_all(to);
            }
        };
        std::vector<std::pair<std::string, Run>> runs;
        loaders(runs);
        for (const auto& [what, run] : runs)
            REQUIRE_MESSAGE(run.code == 0, what << " of the intact " << dir << ": " << run.out);
        // Refused by every loader, naming `file`: the verdict on one broken state.
        auto refused_naming = [&](const std::string& file, const std::string& how) {
            loaders(runs);
            bool all = true;
            for (const auto& [what, run] : runs) {
                bool ok = run.code > 0 && run.code < 128 && run.out.find(file) != std::string::npos;
                CHECK_MESSAGE(ok, how << ": " << what << " exits " << run.code << ": " << run.out.substr(0, 300));
                all = all && ok;
            }
            return all;
        };
        Files intact = read_files(dir, files);
        for (const std::string& file : files) {
            std::string bytes = intact.at(file);
            for (size_t at : flip_positions(file, bytes)) {
                std::string flipped = bytes;
                flipped[at] = char(flipped[at] ^ 0x01);
                write_bytes(dir + "/" + file, flipped);
                tried++;
                detected += refused_naming(
                    file, file + " byte " + std::to_string(at) + " of " + std::to_string(bytes.size()) + " flipped");
                write_bytes(dir + "/" + file, bytes);
            }
            fs::rename(dir + "/" + file, root + "/aside");
            removed++;
            removed_refused += refused_naming(file, file + " missing");
            fs::rename(root + "/aside", dir + "/" + file);
        }
        write_bytes(dir + "/NOTES.txt", "not pipetrain's\n");
        loaders(runs);
        for (const auto& [what, run] : runs) CHECK_MESSAGE(run.code == 0, "an extra file: " << what << ": " << run.out);
        fs::remove(dir + "/NOTES.txt");
        REQUIRE(read_files(dir, files) == intact);
    }
    CHECK(detected == tried);
    MESSAGE("corruptions tried " << tried << " | detected (every loader refused, naming the file) " << detected
                                 << " | files removed " << removed << " | refused by name " << removed_refused);
}

// A kill never loses the page cache, so the test above cannot see a missing fsync. The order of
// a save's calls says it instead: each file's data is fsynced before it is renamed into the
// staging directory; after the files are renamed into OUT, OUT itself is fsynced (the entries
// reach the disk), then the manifest's rename commits, then OUT is fsynced again.
TEST_CASE("a save's durable order: file fsyncs, directory fsync, the manifest's rename, directory fsync") {
#ifndef PT_KILL_SHIM
    MESSAGE("skipped: the kill shim needs Linux + glibc (LD_PRELOAD)");
#else
    Scratch root_dir{scratch_dir("order")};
    const std::string out = fs::canonical(root_dir.dir).string() + "/out", log = root_dir.dir + "/calls.log";
    Run r = run_command("LD_PRELOAD=" + std::string(PT_KILL_SHIM) + " PT_KILL_LOG=" + log + " " + PT_CLI +
                        " train --preset tiny" + data_flag + " --steps 1 --batch 4 --seq 16 --out " + out);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    std::vector<std::pair<std::string, std::string>> calls;   // (kind, path), in order
    std::istringstream in(read_file(log));
    for (std::string n, kind, path; in >> n >> kind && std::getline(in >> std::ws, path);) calls.push_back({kind, path});
    auto at = [&](const std::string& kind, const std::string& path, size_t from = 0) {
        for (size_t i = from; i < calls.size(); i++)
            if (calls[i].first == kind && calls[i].second == path) return i;
        return calls.size();
    };
    std::string trail;   // the calls, for the failure message
    for (auto& [kind, path] : calls) trail += "  " + kind + " " + path + "\n";
    INFO("the save's calls:\n" << trail);
    const size_t commit = at("rename", out + "/pipetrain_manifest.json");
    REQUIRE(commit < calls.size());
    REQUIRE(commit > 0);
    for (std::string file : {"config.json", "vocab.txt", "model.safetensors"}) {
        CAPTURE(file);
        size_t staged = at("rename", out + "/.saving/" + file), moved = at("rename", out + "/" + file);
        REQUIRE(staged < commit);
        REQUIRE(moved < commit);
        bool synced = false;   // its data, under the temporary name it had before the rename
        for (size_t i = 0; i < staged; i++)
            synced |= calls[i].first == "fsync" && calls[i].second.rfind(out + "/.saving/" + file + ".tmp", 0) == 0;
        CHECK_MESSAGE(synced, file << " was renamed before its data was fsynced");
        CHECK_MESSAGE(at("fsync", out, moved) < commit, "no fsync of " << out << " between moving " << file
                                                                       << " in and the manifest's rename");
    }
    auto call = [&](size_t i) { return calls[i].first + " " + calls[i].second; };
    CHECK_MESSAGE(call(commit - 1) == "fsync " + out, "the call before the manifest's rename");
    REQUIRE(commit + 1 < calls.size());
    CHECK_MESSAGE(call(commit + 1) == "fsync " + out, "the call after the manifest's rename");
#endif
}
