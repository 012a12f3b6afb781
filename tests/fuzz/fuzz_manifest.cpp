// fuzz: max_len=4096 dict=config.dict
// pipetrain_manifest.json (what seals every directory pipetrain writes) through pt::verify_dir, in
// a fresh directory of two known files each time (verify_dir remembers the directories it
// checked). The input's "files_sha256" is set to the digest of its "files" first, as seal_dir
// writes it, so that inputs get past the manifest's own checksum to the entries. A directory
// that verifies must hold every listed file with exactly the listed size and SHA-256.
#include "tests/fuzz/fuzz_util.hpp"

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "src/formats/lifecycle.hpp"
#include "src/formats/sha256.hpp"

namespace {

const std::map<std::string, std::string> kFiles = {{"weights.bin", "pipetrain\n"}, {"config.json", "{}\n"}};

std::string sha256_of(const std::string& text) {
    pt::Sha256 h;
    h.update(text.data(), text.size());
    return h.hex();
}

void write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static int count = 0;
    const std::string dir = fuzz::scratch_path("dir" + std::to_string(count++));
    std::filesystem::create_directory(dir);
    for (const auto& [name, text] : kFiles) write(dir + "/" + name, text);
    std::string manifest = fuzz::text(data, size);
    nlohmann::json j = nlohmann::json::parse(manifest, nullptr, false);
    if (j.is_object() && j.contains("files")) {
        j["files_sha256"] = sha256_of(j["files"].dump());
        manifest = j.dump();
    }
    write(dir + "/pipetrain_manifest.json", manifest);
    if (fuzz::parse([&] { pt::verify_dir(dir); }))
        for (const pt::ManifestEntry& e : pt::read_manifest(dir)) {
            auto it = kFiles.find(e.name);
            fuzz::expect(it != kFiles.end(), "a verified manifest lists only files that are there");
            fuzz::expect(e.size == it->second.size() && e.sha256 == sha256_of(it->second),
                         "a verified manifest's sizes and hashes are the files'");
        }
    std::filesystem::remove_all(dir);
    return 0;
}
