// test_safetensors.cpp — the strict reader against the reference fixtures in
// tests/fixtures/bad (copied from the independent Python reference), the writer's byte
// layout and atomicity, and a mutation fuzz test of the parser.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <new>
#include <random>
#include <tuple>

#include "src/formats/io.hpp"
#include "src/formats/safetensors.hpp"

namespace fs = std::filesystem;
using pt::st::File;
using pt::st::Writer;

// Largest single allocation while g_track is set: the fuzz test proves that no mutated
// header makes the reader allocate more than a small multiple of the file size.
static bool g_track = false;
static size_t g_max_alloc = 0;
void* operator new(size_t n) {
    if (g_track && n > g_max_alloc) g_max_alloc = n;
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
// Not inlined: GCC would otherwise see free() of a new'ed pointer and warn.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept { std::free(p); }

static std::string fixture(const std::string& name) { return std::string(PT_FIXTURES) + "/bad/" + name; }

static std::vector<uint8_t> slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot open " << path);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// The runtime_error message of f(), "" if it did not throw.
static std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::runtime_error& e) {
        return e.what();
    } catch (...) {
        return "<an exception that is not a std::runtime_error>";
    }
    return "";
}

// A safetensors file from a header text and a data buffer of `data_size` bytes.
static std::vector<uint8_t> make_file(const std::string& header, size_t data_size) {
    std::vector<uint8_t> b(8 + header.size() + data_size, 0x3f);
    for (int i = 0; i < 8; i++) b[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
    std::copy(header.begin(), header.end(), b.begin() + 8);
    return b;
}

static std::string repeat(const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; i++) out += s;
    return out;
}

// A fresh empty directory for one test case, removed by the destructor.
struct TempDir {
    fs::path dir;
    explicit TempDir(const std::string& tag) {
        dir = fs::temp_directory_path() / ("pt_test_st_" + tag + "_" + std::to_string(::getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    ~TempDir() { fs::remove_all(dir); }
    std::vector<std::string> entries() const {
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
};

TEST_CASE("valid_edge_cases.safetensors returns exactly the listed values") {
    const File f = pt::st::read(fixture("valid_edge_cases.safetensors"));
    CHECK(f.tensors.size() == 5);
    CHECK(f.metadata.size() == 1);
    CHECK(f.metadata.count("note") == 1);

    const auto* scalar = f.find("scalar_f32");
    REQUIRE(scalar != nullptr);
    CHECK(scalar->shape.empty());
    CHECK(scalar->numel() == 1);
    CHECK(f.to_f32("scalar_f32") == std::vector<float>{1.5f});

    const auto* empty = f.find("empty_f32");
    REQUIRE(empty != nullptr);
    CHECK(empty->shape == std::vector<int64_t>{0, 3});
    CHECK(empty->begin == empty->end);
    CHECK(f.to_f32("empty_f32").empty());

    CHECK(f.find("ids_i64")->shape == std::vector<int64_t>{1, 3});
    CHECK(f.to_i64("ids_i64") == std::vector<int64_t>{1, -2, 3});
    CHECK(f.to_f32("vec_f64") == std::vector<float>{0.25f, -0.5f});
    CHECK(f.to_i64("flags_u8") == std::vector<int64_t>{0, 1, 255});

    CHECK(f.find("missing") == nullptr);
    const std::string path = fixture("valid_edge_cases.safetensors");
    for (const std::string& e : {error_of([&] { f.to_f32("missing"); }), error_of([&] { f.to_f32("ids_i64"); }),
                                 error_of([&] { f.to_i64("vec_f64"); })}) {
        CHECK(e.rfind(path + ": ", 0) == 0);
        CHECK(e.find("tensor '") != std::string::npos);
    }
}

TEST_CASE("base_tiny/model.safetensors loads") {
    const File f = pt::st::read(fixture("base_tiny/model.safetensors"));
    CHECK(f.tensors.size() == 28);
    CHECK(f.metadata.at("format") == "pt");
    CHECK(f.data.size() == 4000);
    // config.json of base_tiny: V=16, H=8, I=16, max_pos=8.
    CHECK(f.find("ernie.embeddings.word_embeddings.weight")->shape == std::vector<int64_t>{16, 8});
    CHECK(f.find("ernie.encoder.layer.0.intermediate.dense.weight")->shape == std::vector<int64_t>{16, 8});
    CHECK(f.find("ernie.embeddings.position_embeddings.weight")->shape == std::vector<int64_t>{8, 8});
    for (const auto& t : f.tensors) {
        CHECK(t.dtype == "F32");
        CHECK(f.to_f32(t.name).size() == size_t(t.numel()));
    }
}

TEST_CASE("every broken safetensors fixture is rejected with a one-line reason") {
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"truncated.safetensors", {"past the end", "file size"}},
        {"truncated_header.safetensors", {"header length 2832", "past end"}},
        {"header_len_too_large.safetensors", {"header length 6940", "past end"}},
        {"header_not_json.safetensors", {"JSON"}},
        {"header_json_array.safetensors", {"not a JSON object"}},
        {"offsets_out_of_range.safetensors", {"ernie.pooler.dense.weight", "4400", "past the end", "file size"}},
        {"offsets_overlap.safetensors", {"cls.predictions.transform.LayerNorm.bias", "contiguous", "overlap"}},
        {"offsets_hole.safetensors", {"ernie.encoder.layer.0.attention.self.key.bias", "contiguous", "hole"}},
        {"dtype_unknown.safetensors", {"cls.predictions.bias", "dtype", "F33"}},
        {"shape_span_mismatch.safetensors", {"ernie.embeddings.LayerNorm.bias", "span 32", "28"}},
        {"negative_shape.safetensors", {"ernie.embeddings.LayerNorm.bias", "shape", "-8"}},
        {"huge_shape_overflow.safetensors", {"zz_huge", "overflow"}},
        {"duplicate_keys.safetensors", {"duplicate", "ernie.pooler.dense.bias"}},
    };
    for (const auto& [name, keywords] : cases) {
        const std::string path = fixture(name);
        const std::string e = error_of([&] { pt::st::read(path); });
        INFO(name << " -> " << e);
        CHECK(e.rfind(path + ": ", 0) == 0);
        CHECK(e.find('\n') == std::string::npos);
        for (const std::string& k : keywords) CHECK(e.find(k) != std::string::npos);
    }
    CHECK(error_of([] { pt::st::read("/nonexistent/x.safetensors"); }).find("cannot open") != std::string::npos);
    CHECK(error_of([] { pt::st::read(PT_FIXTURES); }).find(std::string(PT_FIXTURES) + ": is a directory, expected a file") != std::string::npos);
}

TEST_CASE("a header length that runs past the end by fewer than the 8 length bytes is refused") {
    // The header starts after the 8-byte length: n bytes of header need 8 + n bytes of file. A
    // check of n alone passed n = size - 4 and then read 4 bytes past the end.
    std::string header = R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    TempDir tmp("past_end");
    std::string path = (tmp.dir / "short.safetensors").string();
    for (uint64_t n : {uint64_t(header.size() + 4 + 1), uint64_t(header.size() + 4 + 7)}) {   // file: 8 + header + 4 data bytes
        std::string bytes(8, '\0');
        for (int i = 0; i < 8; i++) bytes[i] = char((n >> (8 * i)) & 0xff);
        bytes += header + std::string(4, '\0');
        REQUIRE(n <= bytes.size());
        REQUIRE(8 + n > bytes.size());
        std::ofstream(path, std::ios::binary) << bytes;
        const std::string e = error_of([&] { pt::st::read(path); });
        CAPTURE(n);
        CHECK(e.find("header length " + std::to_string(n) + " runs past end of file") != std::string::npos);
    }
}

TEST_CASE("hand-made headers: every rule of the reference reader") {
    const std::string ok = R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";
    const std::vector<std::tuple<std::string, size_t, std::string>> cases = {
        {"{\"t\":{" + ok + "},\"__metadata__\":{\"a\":1}}", 4, "strings to strings"},
        {"{\"__metadata__\":[]}", 0, "__metadata__"},
        {"{\"__metadata__\":{\"a\":\"x\",\"a\":\"y\"}}", 0, "duplicate key 'a'"},
        {"{\"t\":{" + ok + ",\"extra\":1}}", 4, "exactly the keys"},
        {R"({"t":{"dtype":"F32","data_offsets":[0,4]}})", 4, "exactly the keys"},
        {R"({"t":[1]})", 4, "exactly the keys"},
        {"{\"t\":{" + ok + ",\"dtype\":\"F32\"}}", 4, "duplicate key 'dtype'"},
        {R"({"t":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4, "unknown dtype 'f32'"},
        {R"({"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4, "unknown dtype number"},
        {R"({"t":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4, "bad shape"},
        {R"({"t":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4, "bad shape"},
        {R"({"t":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", 4, "bad shape"},
        {R"({"t":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0, "bad shape"},
        {R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0, "overflow"},
        {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4, "data_offsets"},
        {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4, "data_offsets"},
        {R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4, "begin 4 > end 0"},
        {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "contiguous"},
        {"{\"t\":{" + ok + "}}", 8, "tensors cover 4 bytes but the data buffer is 8"},
        {"{\"t\xff\":{" + ok + "}}", 4, "not valid JSON"},
        {"{\"t\":{" + ok + "}} x", 4, "not valid JSON"},
        {"", 0, "not valid JSON"},
        {"null", 0, "not a JSON object"},
        {std::string(100000, '[') + std::string(100000, ']'), 0, "nested deeper than 64 levels"},
        {repeat("{\"a\":", 100000) + "{}" + std::string(100000, '}'), 0, "nested deeper than 64 levels"},
    };
    for (const auto& [header, data_size, keyword] : cases) {
        const std::string e = error_of([&] { pt::st::parse("mem.safetensors", make_file(header, data_size)); });
        INFO(header.substr(0, 100) << " -> " << e);
        CHECK(e.rfind("mem.safetensors: ", 0) == 0);
        CHECK(e.find(keyword) != std::string::npos);
    }
    // The header-length field itself: too short a file, over the 100 MB limit, 2^64 - 1.
    CHECK(error_of([] { pt::st::parse("m", {1, 2, 3}); }).find("too small") != std::string::npos);
    std::vector<uint8_t> big = make_file("{}", 0);
    big[3] = 0x10;  // 2^28 > 100,000,000
    CHECK(error_of([&] { pt::st::parse("m", big); }).find("exceeds the limit") != std::string::npos);
    std::fill(big.begin(), big.begin() + 8, 0xff);
    CHECK(error_of([&] { pt::st::parse("m", big); }).find("exceeds the limit") != std::string::npos);
    // Controls: the minimal valid files.
    CHECK(pt::st::parse("m", make_file("{}", 0)).tensors.empty());
    CHECK(pt::st::parse("m", make_file("{\"t\":{" + ok + "}}   ", 4)).to_f32("t").size() == 1);
}

// Half and bfloat16 bit patterns with values known from the IEEE 754 / bfloat16 definitions.
TEST_CASE("writer round trip: values, order, padding, alignment, determinism") {
    TempDir tmp("roundtrip");
    const std::vector<float> w = {0.5f, -1.25f, 3.0e-8f, 1e30f, -0.0f, 7.0f};
    const std::vector<int64_t> ids = {INT64_MIN, -1, 0, INT64_MAX};
    const uint16_t half[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x8000};
    const uint16_t bf16[] = {0x3F80, 0xC040, 0x4049};
    const double f64[] = {0.1, -2.5};
    const int32_t i32[] = {-7, 123456};
    const uint8_t u8[] = {0, 9, 255}, flags[] = {1, 0};
    const float scalar = 42.0f;
    auto build = [&](bool reversed) {
        Writer wr;
        std::vector<std::function<void()>> adds = {
            [&] {
                wr.add_f32("b_weight", {2, 3}, w.data());
            },
            [&] { wr.add_i64("a_ids", {4}, ids.data()); },
            [&] { wr.add("c_half", "F16", {6}, half, sizeof(half)); },
            [&] { wr.add("d_bf16", "BF16", {3}, bf16, sizeof(bf16)); },
            [&] { wr.add("e_f64", "F64", {2}, f64, sizeof(f64)); },
            [&] {
                wr.add("f_i32", "I32", {1, 2}, i32, sizeof(i32));
            },
            [&] { wr.add("g_u8", "U8", {3}, u8, sizeof(u8)); },
            [&] { wr.add("h_bool", "BOOL", {2}, flags, sizeof(flags)); },
            [&] { wr.add_f32("scalar", {}, &scalar); },
            [&] {
                wr.add_f32("empty", {0, 4}, nullptr);
            },
        };
        if (reversed) std::reverse(adds.begin(), adds.end());
        for (auto& add : adds) add();
        wr.metadata = {{"format", "pt"}, {"step", "3"}};
        return wr;
    };
    const std::string p1 = (tmp.dir / "one.safetensors").string(), p2 = (tmp.dir / "two.safetensors").string();
    build(false).write(p1);
    build(true).write(p2);
    CHECK(slurp(p1) == slurp(p2));  // same tensors, any insertion order → identical bytes
    CHECK(tmp.entries() == std::vector<std::string>{"one.safetensors", "two.safetensors"});

    const std::vector<uint8_t> bytes = slurp(p1);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes[i];
    CHECK(n % 8 == 0);
    const std::string header(bytes.begin() + 8, bytes.begin() + 8 + int64_t(n));
    CHECK(header.rfind("{\"__metadata__\":{\"format\":\"pt\",\"step\":\"3\"},", 0) == 0);

    const File f = pt::st::read(p1);
    std::vector<std::string> order;
    for (const auto& t : f.tensors) {
        order.push_back(t.name);
        CHECK(t.begin % pt::st::dtype_size(t.dtype) == 0);  // descending element size keeps alignment
    }
    // The official order: I64 > F64 > F32 > I32 > BF16 > F16 > U8 > BOOL, then by name.
    CHECK(order == std::vector<std::string>{"a_ids", "e_f64", "b_weight", "empty", "scalar", "f_i32", "d_bf16",
                                            "c_half", "g_u8", "h_bool"});
    CHECK(f.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"step", "3"}});

    const std::vector<float> w_back = f.to_f32("b_weight");
    CHECK(std::memcmp(w_back.data(), w.data(), w.size() * 4) == 0);  // bitwise, -0.0 included
    CHECK(f.to_i64("a_ids") == ids);
    CHECK(f.to_f32("c_half") == std::vector<float>{1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24),
                                                   std::numeric_limits<float>::infinity(), -0.0f});
    CHECK(std::signbit(f.to_f32("c_half")[5]));
    CHECK(f.to_f32("d_bf16") == std::vector<float>{1.0f, -3.0f, 3.140625f});
    CHECK(f.to_f32("e_f64") == std::vector<float>{0.1f, -2.5f});
    CHECK(f.to_i64("f_i32") == std::vector<int64_t>{-7, 123456});
    CHECK(f.to_i64("g_u8") == std::vector<int64_t>{0, 9, 255});
    CHECK(f.to_i64("h_bool") == std::vector<int64_t>{1, 0});
    CHECK(f.to_f32("scalar") == std::vector<float>{42.0f});
    CHECK(f.find("empty")->shape == std::vector<int64_t>{0, 4});
    CHECK(f.to_f32("empty").empty());
}

TEST_CASE("conversions refuse values that do not fit, naming the tensor") {
    Writer wr;
    const double huge[] = {1.0, 1e300};
    const uint64_t big[] = {1, uint64_t(INT64_MAX) + 1};
    wr.add("huge_f64", "F64", {2}, huge, sizeof(huge));
    wr.add("big_u64", "U64", {2}, big, sizeof(big));
    TempDir tmp("narrow");
    const std::string path = (tmp.dir / "n.safetensors").string();
    wr.write(path);
    const File f = pt::st::read(path);
    CHECK(error_of([&] { f.to_f32("huge_f64"); }).find("'huge_f64'") != std::string::npos);
    CHECK(error_of([&] { f.to_i64("big_u64"); }).find("'big_u64'") != std::string::npos);
}

TEST_CASE("the writer reproduces the reference files byte for byte") {
    TempDir tmp("reference");
    // valid_edge_cases from the values its README lists.
    Writer wr;
    const float scalar = 1.5f;
    const int64_t ids[] = {1, -2, 3};
    const double vec[] = {0.25, -0.5};
    const uint8_t flags[] = {0, 1, 255};
    wr.add_f32("scalar_f32", {}, &scalar);
    wr.add_f32("empty_f32", {0, 3}, nullptr);
    wr.add_i64("ids_i64", {1, 3}, ids);
    wr.add("vec_f64", "F64", {2}, vec, sizeof(vec));
    wr.add("flags_u8", "U8", {3}, flags, sizeof(flags));
    wr.metadata = pt::st::read(fixture("valid_edge_cases.safetensors")).metadata;
    const std::string out = (tmp.dir / "edge.safetensors").string();
    wr.write(out);
    CHECK(slurp(out) == slurp(fixture("valid_edge_cases.safetensors")));

    // base_tiny: read, copy every tensor, write.
    const File f = pt::st::read(fixture("base_tiny/model.safetensors"));
    Writer copy;
    copy.metadata = f.metadata;
    for (const auto& t : f.tensors) copy.add(t.name, t.dtype, t.shape, f.data.data() + t.begin, t.end - t.begin);
    const std::string out2 = (tmp.dir / "model.safetensors").string();
    copy.write(out2);
    CHECK(slurp(out2) == slurp(fixture("base_tiny/model.safetensors")));
}

TEST_CASE("writer: bad adds throw, failed writes leave nothing behind") {
    Writer wr;
    const float x[6] = {};
    CHECK(error_of([&] {
              wr.add("t", "F32", {2, 3}, x, 20);
          }).find("expected shape [2,3] x 4 = 24") != std::string::npos);
    CHECK(error_of([&] { wr.add("t", "F31", {6}, x, 24); }).find("unknown dtype") != std::string::npos);
    CHECK(error_of([&] { wr.add("t", "F32", {-6}, x, 24); }).find("bad shape") != std::string::npos);
    CHECK(error_of([&] { wr.add("t", "F32", {int64_t(1) << 62, 4}, x, 0); }).find("overflow") != std::string::npos);
    CHECK(error_of([&] { wr.add("__metadata__", "F32", {6}, x, 24); }).find("reserved") != std::string::npos);
    wr.add_f32("t", {6}, x);
    CHECK(error_of([&] { wr.add_f32("t", {6}, x); }).find("added twice") != std::string::npos);

    TempDir tmp("atomic");
    const std::string missing = (tmp.dir / "no_such_dir" / "m.safetensors").string();
    CHECK(error_of([&] { wr.write(missing); }).rfind(missing + ": ", 0) == 0);
    CHECK(tmp.entries().empty());

    // Renaming over a non-empty directory fails after the temp file was written: it must go.
    fs::create_directories(tmp.dir / "occupied" / "inside");
    const std::string occupied = (tmp.dir / "occupied").string();
    CHECK(error_of([&] { wr.write(occupied); }).find("cannot rename") != std::string::npos);
    CHECK(tmp.entries() == std::vector<std::string>{"occupied"});

    // Replacing an existing file: the new content, and no temp file left over.
    const std::string text = (tmp.dir / "state.json").string();
    pt::write_file_atomic(text, "old contents, longer than the new ones\n");
    pt::write_file_atomic(text, "{\"step\": 2}\n");
    const std::vector<uint8_t> back = slurp(text);
    CHECK(std::string(back.begin(), back.end()) == "{\"step\": 2}\n");
    CHECK(tmp.entries() == std::vector<std::string>{"occupied", "state.json"});
    CHECK(error_of([&] { pt::write_file_atomic(missing, "x"); }).rfind(missing + ": ", 0) == 0);
}

// Every accepted mutation must satisfy what the rest of the project relies on.
static void check_invariants(const File& f) {
    uint64_t expected = 0;
    for (const auto& t : f.tensors) {
        REQUIRE(t.begin == expected);
        REQUIRE(t.end >= t.begin);
        REQUIRE(t.end <= f.data.size());
        unsigned __int128 nbytes = pt::st::dtype_size(t.dtype);  // wide enough that nothing wraps
        for (int64_t d : t.shape) {
            REQUIRE(d >= 0);
            nbytes *= uint64_t(d);
            if (nbytes > f.data.size()) nbytes = f.data.size() + 1;  // saturate: already too big
        }
        REQUIRE(nbytes == t.end - t.begin);
        expected = t.end;
    }
    REQUIRE(expected == f.data.size());
}

TEST_CASE("fuzz: mutated files parse cleanly or fail with a runtime_error") {
    std::mt19937_64 rng(20240611);
    auto pick = [&](size_t n) { return n == 0 ? size_t(0) : size_t(rng() % n); };
    const std::string specials = "{}[]\":,-.e0123456789 \\";
    int accepted = 0, rejected = 0;
    for (const char* name : {"base_tiny/model.safetensors", "valid_edge_cases.safetensors"}) {
        const std::vector<uint8_t> original = slurp(fixture(name));
        const size_t header_end = 8 + size_t(original[0]) + 256 * size_t(original[1]);  // N < 65536
        for (int iter = 0; iter < 2000; iter++) {
            std::vector<uint8_t> b = original;
            for (int m = 0, count = 1 + int(pick(3)); m < count && !b.empty(); m++) {
                const size_t in_header = 8 + pick(std::min(b.size(), header_end) - std::min(b.size(), size_t(8)));
                switch (pick(7)) {
                    case 0:
                        b[pick(b.size())] ^= uint8_t(1u << pick(8));
                        break;
                    case 1:
                        if (in_header < b.size()) b[in_header] = uint8_t(specials[pick(specials.size())]);
                        break;
                    case 2:
                        b.resize(pick(b.size()));
                        break;
                    case 3: {  // the header-length field: near the truth, anywhere in the file, or wild
                        uint64_t n = pick(3) == 0   ? rng()
                                     : pick(3) == 0 ? pick(b.size() + 16)
                                                    : header_end - 8 + pick(17) - 8;
                        for (int i = 0; i < 8 && i < int(b.size()); i++) b[i] = uint8_t(n >> (8 * i));
                        break;
                    }
                    case 4:
                        b.insert(b.begin() + int64_t(pick(b.size() + 1)), 1 + pick(8), uint8_t(rng()));
                        break;
                    case 5:  // a digit of an offset or a shape: the subtle, well-formed corruptions
                        if (in_header < b.size() && std::isdigit(b[in_header])) b[in_header] = uint8_t('0' + pick(10));
                        break;
                    default: {
                        const size_t at = pick(b.size());
                        b.erase(b.begin() + int64_t(at), b.begin() + int64_t(std::min(b.size(), at + 1 + pick(16))));
                    }
                }
            }
            const size_t size = b.size();
            g_max_alloc = 0;
            g_track = true;
            try {
                const File f = pt::st::parse("fuzz.safetensors", std::move(b));
                for (const auto& t : f.tensors) {  // conversions must not crash either
                    CHECK(error_of([&] { f.to_f32(t.name); }).find("<an exception") == std::string::npos);
                    CHECK(error_of([&] { f.to_i64(t.name); }).find("<an exception") == std::string::npos);
                }
                g_track = false;
                check_invariants(f);
                accepted++;
            } catch (const std::runtime_error& e) {
                g_track = false;
                REQUIRE(std::string(e.what()).rfind("fuzz.safetensors: ", 0) == 0);
                rejected++;
            } catch (...) {
                g_track = false;
                FAIL("mutation " << iter << " of " << name << " threw something other than std::runtime_error");
            }
            REQUIRE_MESSAGE(g_max_alloc <= 8 * size + 65536,
                            "allocation of " << g_max_alloc << " bytes for a " << size << "-byte file");
        }
    }
    MESSAGE("fuzz: " << accepted << " accepted, " << rejected << " rejected");
    CHECK(accepted > 100);  // the mutations reach both outcomes
    CHECK(rejected > 1000);
}
