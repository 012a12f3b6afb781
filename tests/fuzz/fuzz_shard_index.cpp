// fuzz: max_len=4096 dict=config.dict
// model.safetensors.index.json (Hugging Face's sharded layout: {"weight_map": {tensor: shard}})
// through pt::open_checkpoint, in a directory of fixed files: two shards of Hugging Face names, a
// shard of PaddleNLP names and a text file. An accepted index lists exactly the tensors of the
// shards it names, each in the shard that holds it, and the checkpoint opened maps every one.
#include "tests/fuzz/fuzz_util.hpp"

#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "src/formats/checkpoint.hpp"

namespace {

// Writes the shards once; returns the directory.
std::string shard_dir() {
    static const std::string dir = [] {
        std::string d = fuzz::scratch_path("shards");
        std::filesystem::create_directory(d);
        const float x[3] = {1, 2, 3};
        auto shard = [&](const std::string& name, const std::vector<std::string>& tensors) {
            pt::st::Writer w;
            for (const std::string& t : tensors) w.add_f32(t, {3}, x);
            w.write(d + "/" + name);
        };
        shard("model-00001-of-00002.safetensors",
              {"ernie.embeddings.word_embeddings.weight", "ernie.encoder.layer.0.attention.self.query.bias"});
        shard("model-00002-of-00002.safetensors", {"cls.predictions.bias"});
        shard("paddle.safetensors", {"ernie.encoder.layers.0.self_attn.q_proj.bias"});
        std::ofstream(d + "/notes.txt") << "not a shard\n";
        return d;
    }();
    return dir;
}

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string dir = shard_dir(), index = dir + "/model.safetensors.index.json";
    std::ofstream(index, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
    pt::Checkpoint c;
    if (!fuzz::parse([&] { c = pt::open_checkpoint(dir); })) return 0;
    nlohmann::json listed = nlohmann::json::parse(fuzz::text(data, size))["weight_map"];
    std::set<std::string> held;
    for (const pt::st::File& f : c.files)
        for (const pt::st::TensorInfo& t : f.tensors) {
            held.insert(t.name);
            fuzz::expect(listed.contains(t.name) && listed[t.name] == base_name(f.path), "every tensor held is listed, in its shard");
        }
    fuzz::expect(held.size() == listed.size(), "every tensor listed is held");
    size_t mapped = 0;
    for (const auto& [model_name, sources] : c.by_model_name) mapped += sources.size();
    fuzz::expect(mapped == held.size(), "every tensor maps to a model name");
    return 0;
}
