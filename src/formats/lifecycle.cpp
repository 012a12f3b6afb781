// src/formats/lifecycle.cpp — staging, sealing, committing and pruning directories: see lifecycle.hpp.
#include "src/formats/lifecycle.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "src/formats/io.hpp"
#include "src/formats/json.hpp"
#include "src/formats/sha256.hpp"

namespace pt {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kManifest = "pipetrain_manifest.json";

namespace {

const char* const kStaging = ".tmp-";   // OUT/.tmp-checkpoint-N: a checkpoint being written
const char* const kTrash = ".trash-";   // a directory on its way out
const char* const kSaving = ".saving";  // OUT/.saving: the final model being written

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string parent_of(const std::string& path) {
    std::string p = fs::path(path).parent_path().string();
    return p.empty() ? "." : p;
}

std::string name_of(const std::string& path) {
    fs::path p = fs::path(path).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();   // "dir/" names dir
    return p.filename().string();
}

// A name in a manifest must be a plain file name: "../x" or "a/b" would reach outside the directory.
bool plain_name(const std::string& n) {
    return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos && n.find('\0') == std::string::npos;
}

// The manifest holds its files' list and that list's own SHA-256, so that a flipped byte in the
// manifest itself is reported as such, not as a mismatch of the file it happens to describe.
std::string digest_of(const json& files) {
    Sha256 h;
    std::string text = files.dump();
    h.update(text.data(), text.size());
    return h.hex();
}

void rename_or_fail(const std::string& from, const std::string& to) {
    if (::rename(from.c_str(), to.c_str()) != 0) fail(to, "cannot rename " + from + " to it", errno);
}

bool exists(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
}

// Every file of the manifest is there, with its size and hash.
void check_files(const std::string& dir, const std::vector<ManifestEntry>& files) {
    for (const ManifestEntry& e : files) {
        std::string path = dir + "/" + e.name;
        if (!exists(path)) fail(path, std::string("missing, though ") + kManifest + " lists it");
        check_inside(dir, e.name);
        uint64_t size = 0;
        std::string hash = sha256_file(path, &size);
        if (size != e.size)
            fail(path, "has " + std::to_string(size) + " bytes, " + kManifest + " says " + std::to_string(e.size) +
                           ": the file was truncated or changed after it was saved");
        if (hash != e.sha256)
            fail(path, std::string("does not match its SHA-256 in ") + kManifest +
                           ": the file is corrupted or was changed after it was saved");
    }
}

// A staging directory that was sealed and still holds every file it lists, unchanged.
bool sealed_and_whole(const std::string& dir) {
    try {
        std::vector<ManifestEntry> files = read_manifest(dir);
        check_files(dir, files);
        return !files.empty();
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace

uint64_t seal_dir(const std::string& dir, double* seconds) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().filename() != kManifest) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    json files = json::array();
    uint64_t total = 0;
    for (const std::string& n : names) {
        uint64_t size = 0;
        std::string hash = sha256_file(dir + "/" + n, &size);
        files.push_back({{"name", n}, {"size", size}, {"sha256", hash}});
        total += size;
    }
    if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    json manifest = {{"format", "pipetrain-manifest-1"}, {"files", files}, {"files_sha256", digest_of(files)}};
    write_file_atomic(dir + "/" + kManifest, manifest.dump(2) + "\n");   // fsyncs the file and dir
    return total;
}

std::vector<ManifestEntry> read_manifest(const std::string& dir) {
    const std::string path = dir + "/" + kManifest;
    if (!exists(path)) return {};
    json j = parse_json(read_file(path), path);
    auto bad = [&](const std::string& what) { fail(path, "not a pipetrain manifest (" + what + ")"); };
    if (!j.is_object() || j.value("format", json()) != "pipetrain-manifest-1") bad("expected \"format\": \"pipetrain-manifest-1\"");
    if (!j.contains("files") || !j["files"].is_array()) bad("expected a \"files\" list");
    if (!j.contains("files_sha256") || j["files_sha256"] != digest_of(j["files"]))
        fail(path, "does not match its own checksum (files_sha256): the manifest is corrupted");
    std::vector<ManifestEntry> out;
    std::set<std::string> seen;
    for (const json& f : j["files"]) {
        if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("size") ||
            !f["size"].is_number_unsigned() || !f.contains("sha256") || !f["sha256"].is_string() ||
            f["sha256"].get<std::string>().size() != 64)
            bad("each file needs \"name\", \"size\" and \"sha256\"");
        ManifestEntry e{f["name"].get<std::string>(), f["size"].get<uint64_t>(), f["sha256"].get<std::string>()};
        if (!plain_name(e.name) || !seen.insert(e.name).second) bad("\"" + e.name + "\" is not a file name, or listed twice");
        out.push_back(e);
    }
    return out;
}

namespace {
std::atomic<bool> g_verify{true};
}  // namespace

void set_verify_manifests(bool on) { g_verify = on; }
bool verifying_manifests() { return g_verify; }

void verify_dir(const std::string& dir) {
    std::string name = name_of(dir);
    if (starts_with(name, kStaging) || starts_with(name, kTrash) || name == kSaving)
        fail(dir, "an unfinished or discarded save, not a model directory (the next pipetrain train into " +
                      parent_of(fs::path(dir).lexically_normal().string()) + " removes it)");
    if (exists(dir + "/" + kSaving + "/" + kManifest))
        fail(dir, std::string("its last save was interrupted (") + kSaving +
                      " holds the new model): the next pipetrain train --out " + dir + " finishes it");
    if (!g_verify) {
        static std::mutex said_mu;
        static std::set<std::string> said;
        std::lock_guard<std::mutex> lock(said_mu);
        if (said.insert(dir).second) std::fprintf(stderr, "--no-verify: %s loaded without checking its manifest\n", printable(dir).c_str());
        return;
    }
    std::vector<ManifestEntry> files = read_manifest(dir);
    // Without a manifest, nothing proves that a checkpoint's files belong together (shards of
    // another checkpoint swapped in would load): pipetrain seals every checkpoint it writes.
    if (files.empty() && exists(dir + "/trainer_state.json"))
        fail(dir + "/" + kManifest, "missing: " + dir + " is a pipetrain checkpoint (it has trainer_state.json), which "
                                    "pipetrain always seals; pass --no-verify to load it unchecked");
    if (files.empty()) return;   // another tool's directory: nothing to check
    // Each directory is hashed once per process (--resume reads trainer_state.json, then the
    // model), unless a file changed since: the key holds the size and time of change of every
    // file, the manifest's too (another manifest over the same files must be checked again).
    auto stamp = [&](const std::string& name) {
        struct stat st;
        if (::stat((dir + "/" + name).c_str(), &st) != 0) return std::string("|?");
        return "|" + std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    };
    std::error_code ec;
    std::string key = fs::weakly_canonical(dir, ec).string() + stamp(kManifest);
    for (const ManifestEntry& e : files) key += stamp(e.name);
    static std::mutex mu;
    static std::set<std::string> verified;
    {
        std::lock_guard<std::mutex> lock(mu);
        if (verified.count(key)) return;
    }
    check_files(dir, files);
    std::lock_guard<std::mutex> lock(mu);
    verified.insert(key);
}

std::string staging_path(const std::string& target) { return parent_of(target) + "/" + kStaging + name_of(target); }

std::string stage_dir(const std::string& target) {
    std::string staging = staging_path(target);
    std::error_code ec;
    fs::remove_all(staging, ec);
    if (!fs::create_directory(staging, ec) || ec)
        fail(staging, "cannot create the staging directory (" + ec.message() + ")");
    return staging;
}

void trash(const std::string& path) {
    static std::atomic<int> counter{0};
    std::string bin = parent_of(path) + "/" + kTrash + name_of(path) + "-" + std::to_string(::getpid()) + "-" +
                      std::to_string(counter++);
    rename_or_fail(path, bin);
    fsync_dir(parent_of(path));
    std::error_code ec;   // a failure here leaves a .trash-* name, which the next start removes
    fs::remove_all(bin, ec);
}

void commit_dir(const std::string& staging, const std::string& target) {
    if (!exists(staging + "/" + kManifest)) seal_dir(staging);   // the caller may have sealed it (and timed that)
    fsync_dir(staging);
    const std::string parent = parent_of(target);
    if (exists(target)) {
        // One step: the new directory takes the old one's name, and the old one the staging name.
        if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
            fsync_dir(parent);
            trash(staging);
            return;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
            fail(target, "cannot exchange it with " + staging, errno);
        // A filesystem without the exchange: the old one goes first. A kill between the two renames
        // leaves only the sealed staging directory, which recover_dir commits.
        trash(target);
    }
    rename_or_fail(staging, target);
    fsync_dir(parent);
}

std::string stage_files(const std::string& dir) {
    const std::string staging = dir + "/" + kSaving;
    // A sealed leftover is a model half moved in: finished first, so dir is never left a mix.
    if (exists(staging + "/" + kManifest)) commit_files(dir);
    std::error_code ec;
    fs::remove_all(staging, ec);
    if (!fs::create_directory(staging, ec) || ec) fail(staging, "cannot create the staging directory (" + ec.message() + ")");
    return staging;
}

void commit_files(const std::string& dir) {
    const std::string staging = dir + "/" + kSaving;
    if (!exists(staging + "/" + kManifest)) {   // not sealed: this is the first commit of it
        seal_dir(staging);
        fsync_dir(staging);
    }
    std::vector<ManifestEntry> files = read_manifest(staging);
    std::set<std::string> now;
    for (const ManifestEntry& e : files) {
        now.insert(e.name);
        if (exists(staging + "/" + e.name)) rename_or_fail(staging + "/" + e.name, dir + "/" + e.name);
        else if (!exists(dir + "/" + e.name)) fail(staging, "lost " + e.name + " while it was moved into " + dir);
    }
    // Files of the previous model that this one does not have (shards of another layout) go
    // while the sealed staging manifest still marks the directory as unfinished.
    std::vector<ManifestEntry> old;
    try {
        old = read_manifest(dir);
    } catch (const std::exception&) {   // a corrupted old manifest: it is replaced below
    }
    for (const ManifestEntry& e : old)
        if (!now.count(e.name) && ::unlink((dir + "/" + e.name).c_str()) != 0 && errno != ENOENT)
            fail(dir + "/" + e.name, "cannot remove this file of the previous model", errno);
    fsync_dir(dir);
    rename_or_fail(staging + "/" + kManifest, dir + "/" + kManifest);   // the commit
    fsync_dir(dir);
    std::error_code ec;
    fs::remove_all(staging, ec);
}

void recover_dir(const std::string& out) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
    for (const std::string& name : names) {
        std::string path = out + "/" + name;
        std::error_code ec;
        if (name == kSaving) {
            if (exists(path + "/" + kManifest)) commit_files(out);   // sealed: finish moving it in
            else fs::remove_all(path, ec);
        } else if (starts_with(name, kTrash)) {
            fs::remove_all(path, ec);
        } else if (starts_with(name, kStaging)) {
            // Sealed, and nothing has its name: the kill came between sealing and committing (or
            // between the two renames of a filesystem without RENAME_EXCHANGE). It is complete.
            std::string target = out + "/" + name.substr(std::string(kStaging).size());
            if (!exists(target) && sealed_and_whole(path)) rename_or_fail(path, target), fsync_dir(out);
            else fs::remove_all(path, ec);
        } else if (starts_with(name, "checkpoint-") && name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
            fs::remove_all(path, ec);   // the staging name of pipetrain before manifests
        }
    }
}

}  // namespace pt
