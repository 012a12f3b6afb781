// src/formats/corpus.cpp — see corpus.hpp.
#include "src/formats/corpus.hpp"

#include <algorithm>
#include <stdexcept>

#include "src/formats/io.hpp"
#include "src/formats/safetensors.hpp"
#include "src/formats/tokenizer.hpp"

namespace pt {

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
            fail(path, "line " + std::to_string(i + 1) + ": " + e.what());
        }
        stream.insert(stream.end(), ids.begin(), ids.end());
    }
    // Pack the token stream into [CLS] (T-2 tokens) [SEP]: no padding, every position trains.
    Corpus c;
    std::vector<std::vector<int32_t>> seqs;
    for (size_t i = 0; i + (T - 2) <= stream.size(); i += T - 2) {
        std::vector<int32_t> s{tok.cls_id()};
        s.insert(s.end(), stream.begin() + i, stream.begin() + i + (T - 2));
        s.push_back(tok.sep_id());
        seqs.push_back(std::move(s));
    }
    if (seqs.size() < 2)
        fail(path, "too little text for --seq " + std::to_string(T) + " (" + std::to_string(stream.size()) + " tokens)");
    size_t n_eval = std::min<size_t>(64, std::max<size_t>(1, seqs.size() / 20));
    c.train.assign(seqs.begin(), seqs.end() - n_eval);
    c.eval.assign(seqs.end() - n_eval, seqs.end());
    return c;
}

Batch load_inputs(const std::string& path, Objective obj) {
    st::File f = st::read(path);
    auto get = [&](const char* name) -> std::vector<int32_t> {   // empty if absent
        const st::TensorInfo* info = f.find(name);
        if (!info) return {};
        const st::TensorInfo* ids = f.find("input_ids");
        if (info->shape.size() != 2 || (ids && info->shape != ids->shape))
            fail(path, "tensor \"" + std::string(name) + "\" must be [B, T] like input_ids");
        std::vector<int64_t> v = f.to_i64(name);
        std::vector<int32_t> out(v.size());
        for (size_t i = 0; i < v.size(); i++) {
            if (v[i] < INT32_MIN || v[i] > INT32_MAX)
                fail(path, "tensor \"" + std::string(name) + "\" has an out-of-range value");
            out[i] = int32_t(v[i]);
        }
        return out;
    };
    Batch b;
    const st::TensorInfo* ids = f.find("input_ids");
    if (!ids || ids->shape.size() != 2) fail(path, "needs an input_ids tensor of shape [B, T]");
    // [2^31, 0] holds no byte, yet B would wrap; and a batch without a token is not one.
    if (ids->shape[0] < 1 || ids->shape[1] < 1 || ids->shape[0] > INT32_MAX || ids->shape[1] > INT32_MAX)
        fail(path, "input_ids shape [" + std::to_string(ids->shape[0]) + ", " + std::to_string(ids->shape[1]) +
                       "]: B and T must be at least 1 and fit in 32 bits");
    b.B = int(ids->shape[0]), b.T = int(ids->shape[1]);
    b.input_ids = get("input_ids");
    b.token_type_ids = get("token_type_ids");
    b.attention_mask = get("attention_mask");
    b.task_type_ids = get("task_type_ids");
    b.targets = get("labels");
    size_t n = size_t(b.B) * b.T;
    if (b.token_type_ids.empty()) b.token_type_ids.assign(n, 0);
    if (b.attention_mask.empty()) b.attention_mask.assign(n, 1);
    if (obj == Objective::causal) {
        b.targets.assign(n, kIgnore);
        set_causal_targets(b);
    } else if (b.targets.size() != n) {
        fail(path, "--objective mlm needs a labels tensor [B, T] (-100 = no target)");
    }
    return b;
}

std::vector<Example> load_tsv(const std::string& path, const Tokenizer& tok, int T, int num_labels) {
    std::vector<std::string> lines = read_lines(path);
    if (lines.empty()) fail(path, "empty (expected a header row: label<TAB>text_a)");
    for (std::string& line : lines)   // CRLF files (csv in Python reads them the same way)
        if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lines[0].rfind("\xEF\xBB\xBF", 0) == 0) lines[0].erase(0, 3);   // "UTF-8 with BOM", as spreadsheets save
    std::vector<std::string> header = split(lines[0], '\t');
    int label_col = -1, a_col = -1, b_col = -1;
    for (int i = 0; i < int(header.size()); i++) {
        const std::string& h = header[i];
        if (std::count(header.begin(), header.end(), h) > 1) fail(path, "header: column \"" + h + "\" appears twice");
        if (h == "label") label_col = i;
        else if (h == "text_a") a_col = i;
        else if (h == "text_b") b_col = i;
    }
    if (label_col < 0 || a_col < 0)
        fail(path, "header must name the columns label and text_a (optional text_b, qid)");
    std::vector<Example> out;
    for (size_t i = 1; i < lines.size(); i++) {
        if (lines[i].empty()) continue;
        std::string where = path + ": line " + std::to_string(i + 1);
        std::vector<std::string> cols = split(lines[i], '\t');
        if (int(cols.size()) != int(header.size()))
            fail(where, std::to_string(cols.size()) + " columns, the header has " + std::to_string(header.size()));
        Example e;
        try {
            size_t used = 0;
            e.label = std::stoi(cols[label_col], &used);
            if (used != cols[label_col].size()) throw std::invalid_argument("");
        } catch (const std::exception&) {
            fail(where, "label \"" + cols[label_col] + "\" is not an integer");
        }
        if (e.label < 0 || e.label >= num_labels)
            fail(where, "label " + std::to_string(e.label) + " out of range [0, " + std::to_string(num_labels) +
                            ") (--labels, or the model's num_labels)");
        Tokenizer::Encoded enc;
        try {
            enc = tok.encode_pair(cols[a_col], b_col >= 0 ? cols[b_col] : "", T);
        } catch (const std::exception& ex) {
            fail(where, ex.what());
        }
        e.ids = enc.input_ids, e.types = enc.token_type_ids;
        e.ids.resize(T, tok.pad_id()), e.types.resize(T, 0);
        out.push_back(std::move(e));
    }
    if (out.empty()) fail(path, "no examples");
    return out;
}

}  // namespace pt
