// src/formats/lifecycle.hpp — every directory pipetrain writes is written whole or not at all, and
// sealed, so a kill at any moment never leaves a mix and a flipped byte is refused by name.
//
//   stage    files go into a fresh staging directory, each fsynced (write_file_atomic);
//   seal     pipetrain_manifest.json, written last, lists each file's name, size and SHA-256;
//   commit   one atomic step makes them visible:
//              checkpoint-N   OUT/.tmp-checkpoint-N renamed to checkpoint-N, or exchanged with an
//                             existing one (renameat2 RENAME_EXCHANGE), whose old copy goes to trash;
//              the final model (config.json, vocab.txt, model.safetensors at OUT's top, where
//                             Hugging Face's from_pretrained expects them) is staged in OUT/.saving
//                             and moved in file by file, the manifest last: while OUT/.saving holds
//                             a manifest the directory is refused, and the next run finishes the move;
//   prune    a directory is renamed to .trash-* (atomic) before it is deleted file by file;
//   recover  at the start of a run, what an interrupted one left (.tmp-*, .trash-*, .saving) is
//            removed, or committed when it was sealed and nothing took its place.
// Loaders verify a manifest when there is one; a directory without (another tool's) loads as it is.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pt {

extern const char* const kManifest;   // "pipetrain_manifest.json"

struct ManifestEntry {
    std::string name;     // a file in the directory
    uint64_t size = 0;
    std::string sha256;   // 64 hex digits, as sha256sum prints them
};

// Writes dir/pipetrain_manifest.json for every regular file in dir, hashing what is on disk.
// Returns the bytes hashed; *seconds receives the time the hashing took.
uint64_t seal_dir(const std::string& dir, double* seconds = nullptr);
// The entries of dir's manifest; empty when it has none. A malformed one is an error naming it.
std::vector<ManifestEntry> read_manifest(const std::string& dir);
// The loaders' check: refuses a staging or trash directory, a directory whose final save was
// interrupted, and any file that differs from the manifest (missing, other size, other hash),
// naming it. A directory without a manifest loads as it is (another tool's), except a checkpoint
// (it has trainer_state.json: pipetrain seals every one), which is refused naming the manifest.
// Each directory is hashed once per process.
void verify_dir(const std::string& dir);
// --no-verify: verify_dir checks no manifest (present or missing), and says so once per directory.
void set_verify_manifests(bool on);
bool verifying_manifests();

// A fresh, empty OUT/.tmp-NAME for target OUT/NAME (a leftover one is removed first).
std::string stage_dir(const std::string& target);
// The name stage_dir gives it, made by nothing: where the other ranks write their shards.
std::string staging_path(const std::string& target);
// Seals staging (unless it is sealed already) and makes it target in one atomic step; an existing
// target goes to the trash.
void commit_dir(const std::string& staging, const std::string& target);
// Renames path to a .trash-* name beside it (one atomic step), then deletes it.
void trash(const std::string& path);

// The final model: a fresh dir/.saving to write into, and its commit into dir (sealing it first
// unless it is sealed: then this finishes an interrupted commit).
std::string stage_files(const std::string& dir);
void commit_files(const std::string& dir);

// What an interrupted run left in out (see the top of this file). Call with out locked.
void recover_dir(const std::string& out);

}  // namespace pt
