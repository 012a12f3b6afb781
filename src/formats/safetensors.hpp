// safetensors.hpp — a strict reader and an atomic writer for the safetensors format.
//
// File layout: 8-byte little-endian header length N, N bytes of JSON header, data buffer.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data buffer) plus an optional "__metadata__" string map.
//
// The reader checks everything the reference Rust implementation checks (header size, a
// single JSON object without duplicate keys, known dtypes, overflow-checked byte counts,
// tensors tiling the buffer exactly) and reports each problem as ONE line
// "<path>: <what is wrong>" thrown as std::runtime_error. It never allocates more than the
// file size before the header has been validated against it.
// The writer produces the same bytes as the official writer (tensor order, padding), and
// replaces the target file atomically. It is not a memory-mapped, zero-copy loader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pt::st {

struct TensorInfo {
    std::string name, dtype;
    std::vector<int64_t> shape;   // empty for a rank-0 scalar
    uint64_t begin = 0, end = 0;  // byte range inside File::data
    int64_t numel() const;
};

// Bytes per element of a dtype name ("F32" → 4); 0 if the name is unknown.
size_t dtype_size(const std::string& dtype);

struct File {
    std::string path;
    std::map<std::string, std::string> metadata;
    std::vector<TensorInfo> tensors;  // in data-offset order
    std::vector<uint8_t> data;        // the byte buffer after the header

    const TensorInfo* find(const std::string& name) const;  // null if absent
    // Converted copies. F32/F64/F16/BF16 → float; integer dtypes and BOOL → int64.
    // Asking for a missing tensor, a dtype of the other kind, or a value that does not fit
    // throws a one-line error naming the file and the tensor.
    std::vector<float> to_f32(const std::string& name) const;
    std::vector<int64_t> to_i64(const std::string& name) const;
};

File read(const std::string& path);
// The same validation on bytes already in memory; path_for_errors only labels messages.
File parse(const std::string& path_for_errors, std::vector<uint8_t> bytes);

// Collects tensors, then writes them in the official writer's order: dtype descending in
// the Rust enum order (U64 I64 F64 F32 U32 I32 BF16 F16 U16 I16 F8_E4M3 F8_E5M2 I8 U8 BOOL,
// so larger elements come first and every tensor stays aligned), ties by name. The header
// is compact JSON, "__metadata__" first when non-empty, padded with spaces to a multiple of 8.
struct Writer {
    std::map<std::string, std::string> metadata;

    // Copies `bytes` bytes; throws unless bytes == numel × dtype size and the name is new.
    void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, const void* data,
             size_t bytes);
    void add_f32(const std::string& name, std::vector<int64_t> shape, const float* data);
    void add_i64(const std::string& name, std::vector<int64_t> shape, const int64_t* data);
    // Atomic, as write_chunks_atomic (io.hpp): on failure nothing is left but a one-line error.
    void write(const std::string& path) const;

  private:
    struct Entry {
        TensorInfo info;
        std::vector<uint8_t> bytes;
    };
    std::vector<Entry> entries_;
};

}  // namespace pt::st
