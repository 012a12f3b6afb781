// fuzz: max_len=4194304 seeds=bad/*.safetensors ernie/*/inputs.safetensors dict=safetensors.dict
// The safetensors reader on bytes in memory (pt::st::parse), then every tensor converted the way
// the loaders use it: to_f32 (weights) and to_i64 (inputs), each accepted or rejected alone.
// What the reader accepts, the writer must write back (a checkpoint re-saves what it loaded),
// and the reader must read that back as the same tensors.
#include "tests/fuzz/fuzz_util.hpp"

#include <cstring>

#include "src/formats/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    pt::st::File f;
    if (!fuzz::parse([&] { f = pt::st::parse("model.safetensors", std::vector<uint8_t>(data, data + size)); }))
        return 0;
    // Accepted: the tensors tile the buffer, and each byte range matches its shape and dtype.
    uint64_t covered = 0;
    for (const pt::st::TensorInfo& t : f.tensors) {
        fuzz::expect(t.begin == covered && t.begin <= t.end && t.end <= f.data.size(), "tensors tile the data buffer");
        fuzz::expect(t.end - t.begin == uint64_t(t.numel()) * pt::st::dtype_size(t.dtype), "span = numel x dtype size");
        covered = t.end;
        fuzz::parse([&] { fuzz::expect(f.to_f32(t.name).size() == size_t(t.numel()), "to_f32 gives numel values"); });
        fuzz::parse([&] { fuzz::expect(f.to_i64(t.name).size() == size_t(t.numel()), "to_i64 gives numel values"); });
    }
    fuzz::expect(covered == f.data.size(), "the tensors cover the whole buffer");

    // Written back (an exception here escapes: the writer must take what the reader took) and read again.
    pt::st::Writer w;
    w.metadata = f.metadata;
    for (const pt::st::TensorInfo& t : f.tensors) w.add(t.name, t.dtype, t.shape, f.data.data() + t.begin, t.end - t.begin);
    const std::string path = fuzz::scratch_path("rewritten.safetensors");
    w.write(path);
    const pt::st::File g = pt::st::read(path);
    fuzz::expect(g.metadata == f.metadata && g.tensors.size() == f.tensors.size(), "rewritten: same metadata and names");
    for (const pt::st::TensorInfo& t : f.tensors) {
        const pt::st::TensorInfo* u = g.find(t.name);
        fuzz::expect(u && u->dtype == t.dtype && u->shape == t.shape && u->end - u->begin == t.end - t.begin &&
                         std::memcmp(g.data.data() + u->begin, f.data.data() + t.begin, t.end - t.begin) == 0,
                     "rewritten: every tensor the same");
    }
    return 0;
}
