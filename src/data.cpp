#include "src/data.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "src/safetensors.hpp"
#include "src/tokenizer.hpp"

namespace pt {

int64_t Batch::num_targets() const {
    int64_t n = 0;
    for (int32_t t : targets) n += (t != kIgnore);
    return n;
}

MicroBatch Batch::rows(int first, int count) const {
    MicroBatch mb;
    size_t off = size_t(first) * T;
    mb.B = count, mb.T = T;
    mb.input_ids = input_ids.data() + off;
    mb.token_type_ids = token_type_ids.data() + off;
    mb.task_type_ids = task_type_ids.empty() ? nullptr : task_type_ids.data() + off;
    mb.attention_mask = attention_mask.data() + off;
    mb.targets = targets.data() + off;
    return mb;
}

Batch Batch::slice(int first, int count) const {
    Batch b;
    b.B = count, b.T = T;
    auto cut = [&](const std::vector<int32_t>& v) {
        return v.empty() ? v : std::vector<int32_t>(v.begin() + size_t(first) * T, v.begin() + size_t(first + count) * T);
    };
    b.input_ids = cut(input_ids), b.token_type_ids = cut(token_type_ids), b.task_type_ids = cut(task_type_ids);
    b.attention_mask = cut(attention_mask), b.targets = cut(targets);
    return b;
}

Objective parse_objective(const std::string& s) {
    if (s == "mlm") return Objective::mlm;
    if (s == "causal") return Objective::causal;
    throw std::runtime_error("--objective: expected mlm or causal, got \"" + s + "\"");
}

std::vector<std::string> read_lines(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string all = ss.str();
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < all.size()) {
        size_t end = all.find('\n', start);
        if (end == std::string::npos) end = all.size();
        lines.push_back(all.substr(start, end - start));
        start = end + 1;
    }
    return lines;
}

SpecialIds special_ids(const Tokenizer& tok) {
    SpecialIds sp;
    sp.pad = tok.pad_id(), sp.cls = tok.cls_id(), sp.sep = tok.sep_id(), sp.mask = tok.mask_id();
    sp.unk = tok.unk_id(), sp.vocab = int(tok.size());
    return sp;
}

Corpus load_corpus(const std::string& path, const Tokenizer& tok, int T) {
    if (T < 3) throw std::runtime_error("--seq: must be at least 3");
    std::vector<std::string> lines = read_lines(path);
    std::vector<int32_t> stream;
    for (size_t i = 0; i < lines.size(); i++) {
        std::vector<int32_t> ids;
        try {
            ids = tok.encode(lines[i]);
        } catch (const std::exception& e) {
            throw std::runtime_error(path + ": line " + std::to_string(i + 1) + ": " + e.what());
        }
        stream.insert(stream.end(), ids.begin(), ids.end());
    }
    // Pack the token stream into [CLS] (T-2 tokens) [SEP]: no padding, every position trains.
    Corpus c;
    c.T = T;
    std::vector<std::vector<int32_t>> seqs;
    for (size_t i = 0; i + (T - 2) <= stream.size(); i += T - 2) {
        std::vector<int32_t> s{tok.cls_id()};
        s.insert(s.end(), stream.begin() + i, stream.begin() + i + (T - 2));
        s.push_back(tok.sep_id());
        seqs.push_back(std::move(s));
    }
    if (seqs.size() < 2)
        throw std::runtime_error(path + ": too little text for --seq " + std::to_string(T) + " (" +
                                 std::to_string(stream.size()) + " tokens)");
    size_t n_eval = std::min<size_t>(64, std::max<size_t>(1, seqs.size() / 20));
    c.train.assign(seqs.begin(), seqs.end() - n_eval);
    c.eval.assign(seqs.end() - n_eval, seqs.end());
    return c;
}

namespace {

uint64_t mix(uint64_t x) {   // splitmix64 finalizer: a counter-based hash
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
uint64_t hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) { return mix(a ^ mix(b ^ mix(c ^ mix(d)))); }
double unit(uint64_t h) { return (h >> 11) * 0x1.0p-53; }

// A random ordinary token: redraw (deterministically) until it is not a special token.
int32_t random_token(uint64_t h, const SpecialIds& sp) {
    if (sp.vocab <= 5) return sp.mask;   // nothing ordinary to draw
    for (;;) {
        h = mix(h);
        int32_t id = int32_t(h % uint64_t(sp.vocab));
        if (id != sp.pad && id != sp.cls && id != sp.sep && id != sp.mask && id != sp.unk) return id;
    }
}

void fill_row(Batch& b, int row, const std::vector<int32_t>& seq, Objective obj, const SpecialIds& sp,
              uint64_t seed, uint64_t stream) {
    for (int t = 0; t < b.T; t++) {
        size_t i = size_t(row) * b.T + t;
        int32_t id = seq[t];
        b.input_ids[i] = id;
        b.attention_mask[i] = 1;
        b.token_type_ids[i] = 0;
        b.targets[i] = kIgnore;
        if (obj == Objective::causal) continue;
        bool special = id == sp.cls || id == sp.sep || id == sp.pad;
        uint64_t h = hash4(seed, stream, uint64_t(row), uint64_t(t));
        if (special || unit(h) >= 0.15) continue;
        b.targets[i] = id;
        double r = unit(mix(h));
        if (r < 0.8) b.input_ids[i] = sp.mask;
        else if (r < 0.9) b.input_ids[i] = random_token(mix(h), sp);
    }
}

Batch empty_batch(int B, int T) {
    Batch b;
    b.B = B, b.T = T;
    size_t n = size_t(B) * T;
    b.input_ids.resize(n), b.token_type_ids.resize(n), b.attention_mask.resize(n), b.targets.resize(n);
    return b;
}

}  // namespace

Batch make_batch(const std::vector<std::vector<int32_t>>& seqs, int64_t index, int B, Objective obj,
                 const SpecialIds& sp, uint64_t seed) {
    if (seqs.empty()) throw std::runtime_error("no training sequences");
    int T = int(seqs[0].size());
    Batch b = empty_batch(B, T);
    size_t n = seqs.size();
    std::vector<size_t> perm;
    uint64_t perm_epoch = ~uint64_t(0);
    for (int r = 0; r < B; r++) {
        // Position in the endless stream of epochs; each epoch is its own permutation.
        uint64_t g = uint64_t(index) * B + r, epoch = g / n, pos = g % n;
        if (epoch != perm_epoch) {   // Fisher-Yates driven by (seed, epoch)
            perm.resize(n);
            for (size_t i = 0; i < n; i++) perm[i] = i;
            for (size_t i = n - 1; i > 0; i--) std::swap(perm[i], perm[hash4(seed, epoch, 77, i) % (i + 1)]);
            perm_epoch = epoch;
        }
        fill_row(b, r, seqs[perm[pos]], obj, sp, seed, uint64_t(index) + 1);
    }
    if (obj == Objective::causal) set_causal_targets(b);
    return b;
}

std::vector<Batch> make_eval_batches(const std::vector<std::vector<int32_t>>& seqs, int B, Objective obj,
                                     const SpecialIds& sp, uint64_t seed) {
    std::vector<Batch> out;
    for (size_t first = 0; first < seqs.size(); first += B) {
        int rows = int(std::min<size_t>(B, seqs.size() - first));
        Batch b = empty_batch(rows, int(seqs[0].size()));
        for (int r = 0; r < rows; r++) fill_row(b, r, seqs[first + r], obj, sp, seed, ~uint64_t(first) ^ 0xE7A1);
        if (obj == Objective::causal) set_causal_targets(b);
        out.push_back(std::move(b));
    }
    return out;
}

void set_causal_targets(Batch& b) {
    for (int r = 0; r < b.B; r++)
        for (int t = 0; t < b.T; t++) {
            size_t i = size_t(r) * b.T + t;
            bool next_real = t + 1 < b.T && b.attention_mask[i] && b.attention_mask[i + 1];
            b.targets[i] = next_real ? b.input_ids[i + 1] : kIgnore;
        }
}

Batch load_inputs(const std::string& path, Objective obj) {
    st::File f = st::read(path);
    auto get = [&](const char* name, bool required) -> std::vector<int32_t> {
        const st::TensorInfo* info = f.find(name);
        if (!info) {
            if (required) throw std::runtime_error(path + ": missing tensor \"" + std::string(name) + "\"");
            return {};
        }
        if (info->shape.size() != 2)
            throw std::runtime_error(path + ": tensor \"" + std::string(name) + "\" must be [B, T]");
        std::vector<int64_t> v = f.to_i64(name);
        std::vector<int32_t> out(v.size());
        for (size_t i = 0; i < v.size(); i++) {
            if (v[i] < INT32_MIN || v[i] > INT32_MAX)
                throw std::runtime_error(path + ": tensor \"" + std::string(name) + "\" has an out-of-range value");
            out[i] = int32_t(v[i]);
        }
        return out;
    };
    Batch b;
    const st::TensorInfo* ids = f.find("input_ids");
    if (!ids || ids->shape.size() != 2) throw std::runtime_error(path + ": needs an input_ids tensor of shape [B, T]");
    b.B = int(ids->shape[0]), b.T = int(ids->shape[1]);
    b.input_ids = get("input_ids", true);
    b.token_type_ids = get("token_type_ids", false);
    b.attention_mask = get("attention_mask", false);
    b.task_type_ids = get("task_type_ids", false);
    b.targets = get("labels", false);
    size_t n = size_t(b.B) * b.T;
    if (b.token_type_ids.empty()) b.token_type_ids.assign(n, 0);
    if (b.attention_mask.empty()) b.attention_mask.assign(n, 1);
    for (auto* v : {&b.token_type_ids, &b.attention_mask, &b.task_type_ids})
        if (!v->empty() && v->size() != n) throw std::runtime_error(path + ": tensors must all be [B, T] like input_ids");
    if (obj == Objective::causal) {
        b.targets.assign(n, kIgnore);
        set_causal_targets(b);
    } else if (b.targets.size() != n) {
        throw std::runtime_error(path + ": --objective mlm needs a labels tensor [B, T] (-100 = no target)");
    }
    return b;
}

}  // namespace pt
