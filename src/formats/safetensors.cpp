// safetensors.cpp — see safetensors.hpp. Assumes a little-endian host (x86, ARM), as the
// format does, so tensor bytes are copied as they are.
#include "src/formats/safetensors.hpp"

#include "src/formats/io.hpp"
#include "src/formats/json.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

namespace pt::st {
namespace {

using nlohmann::json;

// The same limit as the reference reader: a larger header is treated as an attack.
constexpr uint64_t kMaxHeaderSize = 100'000'000;

struct Dtype {
    const char* name;
    size_t size;
};
// In the order of the Rust `Dtype` enum: the writer sorts by this index, descending.
constexpr Dtype kDtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                             {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                             {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};

int dtype_rank(const std::string& dtype) {
    for (size_t i = 0; i < std::size(kDtypes); i++)
        if (dtype == kDtypes[i].name) return int(i);
    return -1;
}

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

// numel × element size with every product checked, as the reference does: a shape like
// [2^62, 4] would otherwise wrap to 0 elements and "match" an empty span.
std::optional<uint64_t> checked_nbytes(const std::vector<int64_t>& shape, uint64_t elem_size) {
    uint64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0 || (d != 0 && n > UINT64_MAX / uint64_t(d))) return std::nullopt;
        n *= uint64_t(d);
    }
    if (n != 0 && elem_size > UINT64_MAX / n) return std::nullopt;
    return n * elem_size;
}

bool is_count(const json& v) {  // a JSON integer >= 0 (nlohmann reads "-0" as signed)
    return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

// nlohmann::json keeps the last of two equal keys; a checkpoint whose header names a
// tensor twice must be rejected instead, so a first pass (check_json) records every key.
json parse_header(const std::string& path, const uint8_t* first, const uint8_t* last) {
    const char* begin = reinterpret_cast<const char*>(first);
    const char* end = reinterpret_cast<const char*>(last);
    JsonShape shape = check_json(begin, end, true);
    if (shape.too_deep)   // a header is two levels deep; nothing may recurse this far
        fail(path, "header is not valid JSON (nested deeper than " + std::to_string(kMaxJsonDepth) + " levels)");
    json header;
    try {
        header = json::parse(begin, end);
    } catch (const json::exception& e) {
        const std::string what = e.what();
        const size_t tag_end = what.find("] ");  // drop the "[json.exception.parse_error.101] " tag
        fail(path, "header is not valid JSON: " + what.substr(tag_end == std::string::npos ? 0 : tag_end + 2));
    }
    if (!shape.duplicate.empty()) fail(path, "duplicate key '" + shape.duplicate + "' in header");
    return header;
}

TensorInfo parse_entry(const std::string& path, const std::string& name, const json& v) {
    const std::string who = "tensor '" + name + "': ";
    if (!v.is_object() || v.size() != 3 || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
        fail(path, who + "entry must be an object with exactly the keys dtype, shape, data_offsets");
    TensorInfo t;
    t.name = name;
    const json& dtype = v["dtype"];
    if (!dtype.is_string() || dtype_rank(dtype.get<std::string>()) < 0)
        fail(path, who + "unknown dtype " +
                       (dtype.is_string() ? "'" + dtype.get<std::string>() + "'" : std::string(dtype.type_name())) +
                       " (expected F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL U64 U32 U16 F8_E4M3 F8_E5M2)");
    t.dtype = dtype.get<std::string>();
    const json& shape = v["shape"];
    if (!shape.is_array()) fail(path, who + "bad shape: " + shape.type_name() + ", expected a list");
    for (const json& d : shape) {
        // Scalars only are printed: dumping a container could recurse arbitrarily deep.
        if (!is_count(d) || d.get<uint64_t>() > uint64_t(INT64_MAX))
            fail(path, who + "bad shape: dimension " + (d.is_number() ? d.dump() : d.type_name()) +
                           " (expected integers >= 0)");
        t.shape.push_back(d.get<int64_t>());
    }
    const json& offsets = v["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !is_count(offsets[0]) || !is_count(offsets[1]))
        fail(path, who + "bad data_offsets (expected [begin, end], two integers >= 0)");
    t.begin = offsets[0].get<uint64_t>();
    t.end = offsets[1].get<uint64_t>();
    if (t.begin > t.end)
        fail(path, who + "data_offsets begin " + std::to_string(t.begin) + " > end " + std::to_string(t.end));
    const size_t elem = dtype_size(t.dtype);
    const std::string span = "span " + std::to_string(t.end - t.begin) + " bytes";
    const std::optional<uint64_t> nbytes = checked_nbytes(t.shape, elem);
    if (!nbytes)
        fail(path, who + span + " but shape " + shape_str(t.shape) + " x " + std::to_string(elem) + "-byte " + t.dtype +
                       " overflows 64 bits");
    if (t.end - t.begin != *nbytes)
        fail(path, who + span + " != shape " + shape_str(t.shape) + " x " + std::to_string(elem) + "-byte " + t.dtype +
                       " = " + std::to_string(*nbytes) + " bytes");
    return t;
}

float half_to_float(uint16_t h) {
    const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    float v;
    if (exponent == 0)
        v = std::ldexp(float(mantissa), -24);  // zero or subnormal
    else if (exponent == 31)
        v = mantissa ? NAN : INFINITY;
    else
        v = std::ldexp(float(mantissa | 0x400), exponent - 25);
    return (h & 0x8000) ? -v : v;
}

template <typename T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// The tensor that to_f32 and to_i64 convert: `name` in f, or a one-line error naming the file.
const TensorInfo& tensor_to_convert(const File& f, const std::string& name) {
    const TensorInfo* t = f.find(name);
    if (!t) fail(f.path, "no tensor '" + name + "'");
    return *t;
}

}  // namespace

size_t dtype_size(const std::string& dtype) {
    const int r = dtype_rank(dtype);
    return r < 0 ? 0 : kDtypes[r].size;
}

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // validated: no overflow for tensors from read/Writer
    return n;
}

File parse(const std::string& path, std::vector<uint8_t> bytes) {
    const uint64_t size = bytes.size();
    if (size < 8) fail(path, "file is " + std::to_string(size) + " bytes, too small for the 8-byte header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes[i];  // little-endian u64
    if (n > kMaxHeaderSize) fail(path, "header length " + std::to_string(n) + " exceeds the limit of 100000000 bytes");
    if (8 + n > size)
        fail(path,
             "header length " + std::to_string(n) + " runs past end of file (" + std::to_string(size) + " bytes)");
    const json header = parse_header(path, bytes.data() + 8, bytes.data() + 8 + n);
    if (!header.is_object()) fail(path, std::string("header is not a JSON object (found ") + header.type_name() + ")");

    File f;
    f.path = path;
    for (const auto& [key, value] : header.items()) {
        if (key != "__metadata__") {
            f.tensors.push_back(parse_entry(path, key, value));
            continue;
        }
        if (!value.is_object()) fail(path, "__metadata__ must be an object mapping strings to strings");
        for (const auto& [k, v] : value.items()) {
            if (!v.is_string())
                fail(path, "__metadata__ must map strings to strings ('" + k + "' is " + v.type_name() + ")");
            f.metadata[k] = v.get<std::string>();
        }
    }

    // Sorted by offsets, the tensors must tile the data buffer exactly: no hole, no overlap.
    std::sort(f.tensors.begin(), f.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
        return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    const uint64_t buffer = size - 8 - n;
    const std::string where = " (file size " + std::to_string(size) + ", header " + std::to_string(n) + " bytes)";
    uint64_t expected = 0;
    for (const TensorInfo& t : f.tensors) {
        if (t.begin != expected)
            fail(path, "tensor '" + t.name + "': offsets not contiguous (begins at " + std::to_string(t.begin) +
                           ", expected " + std::to_string(expected) +
                           (t.begin < expected ? ": overlaps the previous tensor)" : ": leaves a hole)"));
        if (t.end > buffer)
            fail(path, "tensor '" + t.name + "': data_offsets end " + std::to_string(t.end) +
                           " is past the end of the " + std::to_string(buffer) + "-byte data buffer" + where);
        expected = t.end;
    }
    if (expected != buffer)
        fail(path, "tensors cover " + std::to_string(expected) + " bytes but the data buffer is " +
                       std::to_string(buffer) + " bytes" + where);

    bytes.erase(bytes.begin(), bytes.begin() + int64_t(8 + n));
    f.data = std::move(bytes);
    return f;
}

File read(const std::string& path) { return parse(path, read_bytes(path)); }

const TensorInfo* File::find(const std::string& name) const {
    for (const TensorInfo& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

std::vector<float> File::to_f32(const std::string& name) const {
    const TensorInfo& t = tensor_to_convert(*this, name);
    const uint8_t* p = data.data() + t.begin;
    const std::string& dt = t.dtype;
    if (dt != "F32" && dt != "F16" && dt != "BF16" && dt != "F64")
        fail(path, "tensor '" + name + "' has dtype " + dt + ", expected F32, F64, F16 or BF16");
    std::vector<float> out(size_t(t.numel()));
    if (dt == "F32" && !out.empty()) std::memcpy(out.data(), p, 4 * out.size());
    if (dt == "F16")
        for (size_t i = 0; i < out.size(); i++) out[i] = half_to_float(load<uint16_t>(p + 2 * i));
    if (dt == "BF16")
        for (size_t i = 0; i < out.size(); i++) {
            const uint32_t bits = uint32_t(load<uint16_t>(p + 2 * i)) << 16;  // bf16 = top half of an f32
            std::memcpy(&out[i], &bits, 4);
        }
    if (dt == "F64")
        for (size_t i = 0; i < out.size(); i++) {
            const double v = load<double>(p + 8 * i);
            if (std::isfinite(v) && std::fabs(v) > FLT_MAX)
                fail(path, "tensor '" + name + "': F64 value " + std::to_string(v) + " at index " + std::to_string(i) +
                               " does not fit in float32");
            out[i] = float(v);
        }
    return out;
}

std::vector<int64_t> File::to_i64(const std::string& name) const {
    const TensorInfo& t = tensor_to_convert(*this, name);
    const uint8_t* p = data.data() + t.begin;
    const std::string& dt = t.dtype;
    std::vector<int64_t> out(size_t(t.numel()));
    auto widen = [&](auto type_tag) {
        using T = decltype(type_tag);
        for (size_t i = 0; i < out.size(); i++) out[i] = int64_t(load<T>(p + sizeof(T) * i));
    };
    if (dt == "I64") widen(int64_t());
    else if (dt == "I32") widen(int32_t());
    else if (dt == "I16") widen(int16_t());
    else if (dt == "I8") widen(int8_t());
    else if (dt == "U32") widen(uint32_t());
    else if (dt == "U16") widen(uint16_t());
    else if (dt == "U8") widen(uint8_t());
    else if (dt == "BOOL")
        for (size_t i = 0; i < out.size(); i++) out[i] = p[i] != 0;
    else if (dt == "U64")
        for (size_t i = 0; i < out.size(); i++) {
            const uint64_t v = load<uint64_t>(p + 8 * i);
            if (v > uint64_t(INT64_MAX))
                fail(path, "tensor '" + name + "': U64 value " + std::to_string(v) + " at index " + std::to_string(i) +
                               " does not fit in int64");
            out[i] = int64_t(v);
        }
    else
        fail(path, "tensor '" + name + "' has dtype " + dt + ", expected an integer dtype or BOOL");
    return out;
}

void Writer::add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, const void* data,
                 size_t bytes) {
    const std::string who = "safetensors writer: tensor '" + name + "'";
    if (name == "__metadata__") fail(who, "this name is reserved for the metadata");
    const size_t elem = dtype_size(dtype);
    if (elem == 0) fail(who, "unknown dtype '" + dtype + "'");
    const std::optional<uint64_t> nbytes = checked_nbytes(shape, elem);
    if (!nbytes)
        fail(who, "bad shape " + shape_str(shape) + " (a negative dimension, or the byte count overflows)");
    if (*nbytes != bytes)
        fail(who, "got " + std::to_string(bytes) + " bytes, expected shape " + shape_str(shape) + " x " +
                      std::to_string(elem) + " = " + std::to_string(*nbytes));
    if (bytes > 0 && data == nullptr) fail(who, "data is null");
    for (const Entry& e : entries_)
        if (e.info.name == name) fail(who, "added twice");
    Entry e;
    e.info = TensorInfo{name, dtype, std::move(shape), 0, bytes};
    const uint8_t* p = static_cast<const uint8_t*>(data);
    e.bytes.assign(p, p + bytes);
    entries_.push_back(std::move(e));
}

// A shape whose byte count overflows passes 0 bytes, and add() reports the shape.
void Writer::add_f32(const std::string& name, std::vector<int64_t> shape, const float* data) {
    const uint64_t nbytes = checked_nbytes(shape, 4).value_or(0);
    add(name, "F32", std::move(shape), data, nbytes);
}

void Writer::add_i64(const std::string& name, std::vector<int64_t> shape, const int64_t* data) {
    const uint64_t nbytes = checked_nbytes(shape, 8).value_or(0);
    add(name, "I64", std::move(shape), data, nbytes);
}

void Writer::write(const std::string& path) const {
    std::vector<const Entry*> order;
    for (const Entry& e : entries_) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
        const int ra = dtype_rank(a->info.dtype), rb = dtype_rank(b->info.dtype);
        return ra != rb ? ra > rb : a->info.name < b->info.name;
    });
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const Entry* e : order) {
        const uint64_t end = offset + e->bytes.size();
        header[e->info.name] = {{"dtype", e->info.dtype}, {"shape", e->info.shape}, {"data_offsets", {offset, end}}};
        offset = end;
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception&) {
        fail(path, "a tensor name or metadata string is not valid UTF-8");
    }
    text.append((8 - text.size() % 8) % 8, ' ');  // so the data buffer starts 8-byte aligned
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
    std::vector<Chunk> chunks = {{len, 8}, {text.data(), text.size()}};
    for (const Entry* e : order) chunks.push_back({e->bytes.data(), e->bytes.size()});
    write_chunks_atomic(path, chunks);
}

}  // namespace pt::st
