// A safetensors file whose header lists n one-float tensors, all siblings: the shape that made
// JSON parsing quadratic (issue #31). For tests/test_hostile.cpp and tests/bench_json.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace test {

// (header text, whole file): 8-byte length, the header padded to 8 bytes, 4 zero bytes a tensor.
inline std::pair<std::string, std::vector<uint8_t>> many_tensors(int n) {
    std::string h = "{";
    for (int i = 0; i < n; i++)
        h += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
             std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    h += "}";
    while (h.size() % 8) h += ' ';
    std::vector<uint8_t> file(8 + h.size() + 4 * size_t(n), 0);
    for (int b = 0; b < 8; b++) file[b] = uint8_t(uint64_t(h.size()) >> (8 * b));
    std::copy(h.begin(), h.end(), file.begin() + 8);
    return {h, file};
}

}  // namespace test
