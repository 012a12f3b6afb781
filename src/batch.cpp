// src/batch.cpp — see batch.hpp.
#include "src/batch.hpp"

#include <algorithm>
#include <stdexcept>

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
    mb.dev = {mb.input_ids, mb.token_type_ids, mb.task_type_ids, mb.attention_mask};
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
    throw std::runtime_error("unknown objective \"" + s + "\" (expected mlm or causal)");
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

// The g-th item of an endless stream of epochs, each epoch its own Fisher-Yates permutation
// driven by (seed, epoch). Caches the last epoch's permutation.
class EpochOrder {
 public:
    EpochOrder(size_t n, uint64_t seed) : n_(n), seed_(seed) {}
    size_t at(uint64_t g) {
        uint64_t epoch = g / n_;
        if (epoch != epoch_) {
            perm_.resize(n_);
            for (size_t i = 0; i < n_; i++) perm_[i] = i;
            for (size_t i = n_ - 1; i > 0; i--) std::swap(perm_[i], perm_[hash4(seed_, epoch, 77, i) % (i + 1)]);
            epoch_ = epoch;
        }
        return perm_[g % n_];
    }

 private:
    size_t n_;
    uint64_t seed_, epoch_ = ~uint64_t(0);
    std::vector<size_t> perm_;
};

}  // namespace

Batch empty_batch(int B, int T) {
    Batch b;
    b.B = B, b.T = T;
    size_t n = size_t(B) * T;
    b.input_ids.resize(n), b.token_type_ids.resize(n), b.attention_mask.assign(n, 1), b.targets.assign(n, kIgnore);
    return b;
}

namespace {

void fill_example(Batch& b, int row, const Example& e, int32_t pad) {
    for (int t = 0; t < b.T; t++) {
        size_t i = size_t(row) * b.T + t;
        b.input_ids[i] = e.ids[t];
        b.token_type_ids[i] = e.types[t];
        b.attention_mask[i] = e.ids[t] != pad;
        b.targets[i] = t == 0 ? e.label : kIgnore;
    }
}

}  // namespace

Batch make_batch(const std::vector<std::vector<int32_t>>& seqs, int64_t index, int B, Objective obj,
                 const SpecialIds& sp, uint64_t seed) {
    if (seqs.empty()) throw std::runtime_error("no training sequences");
    int T = int(seqs[0].size());
    Batch b = empty_batch(B, T);
    EpochOrder order(seqs.size(), seed);
    for (int r = 0; r < B; r++) fill_row(b, r, seqs[order.at(uint64_t(index) * B + r)], obj, sp, seed, uint64_t(index) + 1);
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

Batch synthetic_batch(const ModelConfig& cfg, int B, int T) {
    Batch b = empty_batch(B, T);
    for (size_t i = 0; i < b.input_ids.size(); i++) {
        b.input_ids[i] = int32_t(5 + i * 7919 % size_t(cfg.vocab_size - 5));
        // A classifier reads a label in [0, num_labels) at each sequence's first row; MLM, token ids.
        if (cfg.num_labels > 0 && i % size_t(T) == 0) b.targets[i] = int32_t(i / T % size_t(cfg.num_labels));
        // MLM: about 15% of the positions; causal (is_decoder): every one, as in training, where
        // the head then costs several blocks (--partition time must see that).
        else if (cfg.num_labels == 0 && (cfg.is_decoder || i % 7 == 3)) b.targets[i] = b.input_ids[i];
    }
    return b;
}

Batch make_classify_batch(const std::vector<Example>& data, int64_t index, int B, int32_t pad, uint64_t seed) {
    Batch b = empty_batch(B, int(data.at(0).ids.size()));
    EpochOrder order(data.size(), seed);
    for (int r = 0; r < B; r++) fill_example(b, r, data[order.at(uint64_t(index) * B + r)], pad);
    return b;
}

std::vector<Batch> make_classify_eval_batches(const std::vector<Example>& data, int B, int32_t pad) {
    std::vector<Batch> out;
    for (size_t first = 0; first < data.size(); first += B) {
        int rows = int(std::min<size_t>(B, data.size() - first));
        Batch b = empty_batch(rows, int(data[0].ids.size()));
        for (int r = 0; r < rows; r++) fill_example(b, r, data[first + r], pad);
        out.push_back(std::move(b));
    }
    return out;
}

}  // namespace pt
