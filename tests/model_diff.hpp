// Test helper: where two safetensors files differ, in words ("" when their bytes are equal), so
// a failed comparison names the first differing tensor, element and values, not raw bytes.
#pragma once
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "src/formats/safetensors.hpp"
#include "tests/cli_util.hpp"

namespace test {

inline std::string model_difference(const std::string& a_path, const std::string& b_path) {
    if (read_file(a_path) == read_file(b_path)) return "";
    pt::st::File a = pt::st::read(a_path), b = pt::st::read(b_path);
    std::ostringstream s;
    s.precision(9);
    for (const pt::st::TensorInfo& t : a.tensors) {
        const pt::st::TensorInfo* u = b.find(t.name);
        if (!u) return t.name + ": only in " + a_path;
        if (t.dtype != u->dtype || t.shape != u->shape) return t.name + ": dtype or shape differs";
        std::vector<uint8_t> x(a.data.begin() + t.begin, a.data.begin() + t.end), y(b.data.begin() + u->begin, b.data.begin() + u->end);
        if (x == y) continue;
        size_t item = pt::st::dtype_size(t.dtype), i = 0;
        while (i + item <= x.size() && std::memcmp(&x[i], &y[i], item) == 0) i += item;
        s << t.name << "[" << i / item << "]";
        if (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F64")
            s << ": " << a.to_f32(t.name)[i / item] << " vs " << b.to_f32(t.name)[i / item];
        return s.str();
    }
    if (b.tensors.size() != a.tensors.size()) return "tensor lists differ: " + b_path + " has more";
    return "same tensors, different header bytes (metadata or order)";
}

}  // namespace test
