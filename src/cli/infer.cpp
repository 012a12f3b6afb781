// src/cli/infer.cpp — using a trained model: `pipetrain fill-mask` (MLM), `pipetrain generate`
// (a model trained with --objective causal) and `pipetrain classify` (a fine-tuned classifier). Plain forward passes through every layer on one
// device; no key/value cache, which is fine for the small models of the labs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "kernels/cpu/gemm_reuse.hpp"
#include "src/cli/args.hpp"
#include "src/cli/train.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/io.hpp"
#include "src/formats/json.hpp"
#include "src/formats/corpus.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/cli/commands.hpp"

namespace pt {

namespace {

struct LoadedModel {
    ModelConfig cfg;
    std::unique_ptr<Tokenizer> tok;
    ForwardModel model;   // its layers, weights only
};

// `causal`: the command needs a model trained with --objective causal (is_decoder in its config).
LoadedModel load(const std::string& dir, bool causal) {
    LoadedModel m;
    m.cfg = load_model_config(dir);
    if (m.cfg.num_labels > 0) throw std::runtime_error(dir + ": a classifier has no language-model head");
    if (m.cfg.is_decoder != causal)
        throw std::runtime_error(dir + ": " +
                                 (causal ? "a masked LM (config.json has no \"is_decoder\": true); generate needs a model "
                                           "trained with --objective causal"
                                         : "a causal LM (config.json has \"is_decoder\": true); fill-mask needs a masked LM"));
    m.tok = std::make_unique<Tokenizer>(load_tokenizer(dir, m.cfg));
    m.model = forward_model(m.cfg);
    load_weights(dir, m.model.layers);
    return m;
}

// The model has max_position_embeddings positions: an input that leaves fewer than `room` of them
// free is an error naming `what`.
void check_length(const LoadedModel& m, const std::vector<int32_t>& ids, const std::string& what, int room = 0) {
    if (int(ids.size()) + room > m.cfg.max_position_embeddings)
        throw std::runtime_error(what + ": " + std::to_string(ids.size()) + " tokens, special ones included; the model reads at most " +
                                 std::to_string(m.cfg.max_position_embeddings) + " (max_position_embeddings)");
}

// Logits (n, V) of one sequence at the n positions `at` (increasing). The head computes those rows
// only, as it computes a training step's targets only (a target of id 0 marks each: the loss is
// not read), each with the bits it has beside every other position: generate computed a
// vocabulary's logits at every position of its text for each token (`small` with 8,000 words:
// a quarter of its time).
std::vector<float> logits_at(const LoadedModel& m, const std::vector<int32_t>& ids, bool causal, const std::vector<int>& at) {
    Batch b;
    b.B = 1, b.T = int(ids.size());
    b.input_ids = ids;
    b.token_type_ids.assign(ids.size(), 0), b.attention_mask.assign(ids.size(), 1), b.targets.assign(ids.size(), kIgnore);
    for (int t : at) b.targets[size_t(t)] = 0;
    MicroBatch mb = b.rows(0, 1);
    RunOptions opt;
    opt.train = false, opt.causal = causal;
    std::vector<float> act, next;
    for (Layer* l : m.model.layers) {
        next.assign(l->out_numel(1, b.T), 0.0f);
        auto s = l->forward(next.data(), act.empty() ? nullptr : act.data(), mb, opt);
        if (auto* hs = dynamic_cast<HeadStash*>(s.get())) return hs->logits.host();
        act.swap(next);
    }
    throw std::logic_error("model without a head");
}

std::vector<double> softmax(const float* x, int V) {
    double mx = *std::max_element(x, x + V), sum = 0;
    std::vector<double> p(V);
    for (int i = 0; i < V; i++) sum += p[i] = std::exp(double(x[i]) - mx);
    for (double& v : p) v /= sum;
    return p;
}

// The ids of the k largest scores (at most V), largest first.
template <typename Score>
std::vector<int> top_ids(const Score* x, int V, int k) {
    std::vector<int> order(V);
    std::iota(order.begin(), order.end(), 0);
    k = std::min(k, V);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return x[a] > x[b]; });
    order.resize(k);
    return order;
}

// The ids of a text given on the command line; an error names the argument.
std::vector<int32_t> encode(const Tokenizer& tok, const std::string& text, const std::string& what) {
    try {
        return tok.encode(text);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(what + ": " + e.what());
    }
}

// Joins WordPiece tokens back into text: "##" pieces attach to the previous token, CJK
// characters need no spaces, other words do.
std::string detokenize(const std::vector<std::string>& pieces) {
    std::string out;
    for (const std::string& p : pieces) {
        if (p.rfind("##", 0) == 0) out += p.substr(2);
        else if (!out.empty() && (unsigned char)p[0] < 0x80 && (unsigned char)out.back() < 0x80) out += " " + p;
        else out += p;
    }
    return out;
}

}  // namespace

int fill_mask_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--model", "--top"}, {}, true);
    if (a.positional().size() != 1) throw std::runtime_error("usage: pipetrain fill-mask --model DIR TEXT (TEXT holds [MASK])");
    LoadedModel m = load(a.required("--model"), false);
    int top = int(a.integer("--top", 5, 1, 100));
    std::vector<int32_t> ids = {m.tok->cls_id()};
    for (int32_t id : encode(*m.tok, a.positional()[0], "TEXT")) ids.push_back(id);
    ids.push_back(m.tok->sep_id());
    check_length(m, ids, "TEXT");
    std::vector<int> masks;   // their positions
    for (size_t t = 0; t < ids.size(); t++)
        if (ids[t] == m.tok->mask_id()) masks.push_back(int(t));
    if (masks.empty()) throw std::runtime_error("TEXT: no [MASK] token in \"" + a.positional()[0] + "\"");
    std::vector<float> logits = logits_at(m, ids, false, masks);   // (masks, V)
    int V = m.cfg.vocab_size;
    for (size_t k = 0; k < masks.size(); k++) {
        std::vector<double> p = softmax(logits.data() + k * V, V);
        std::printf("[MASK] %zu (position %d):", k + 1, masks[k]);
        for (int id : top_ids(p.data(), V, top)) {
            std::string tok = id < int(m.tok->size()) ? m.tok->token(id) : "[id " + std::to_string(id) + "]";
            std::printf("  %s %.4f", tok.c_str(), p[id]);
        }
        std::printf("\n");
    }
    return 0;
}

int generate_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--model", "--prompt", "--tokens", "--temperature", "--top-k", "--seed"});
    LoadedModel m = load(a.required("--model"), true);
    ops::ConstantWeights constant(weight_ranges(m.model.layers), ops::Packings::freed);   // a forward a token: each weight packed once
    int n_new = int(a.integer("--tokens", 32, 1, 4096)), top_k = int(a.integer("--top-k", 8, 1, 1 << 20));
    double temperature = a.real("--temperature", 0.8, 0);
    uint64_t state = uint64_t(a.integer("--seed", 1, 0, 1LL << 62)) * 0x9E3779B97F4A7C15ull + 1;
    std::vector<int32_t> ids = {m.tok->cls_id()};
    for (int32_t id : encode(*m.tok, a.required("--prompt"), "--prompt")) ids.push_back(id);
    check_length(m, ids, "--prompt", 1);   // and one position for the first new token
    std::vector<std::string> pieces;
    for (size_t i = 1; i < ids.size(); i++) pieces.push_back(m.tok->token(ids[i]));
    int V = m.cfg.vocab_size;
    // Only text is sampled, whatever weight the model gives the rest: never [CLS], [MASK],
    // [UNK] or an id past vocab.txt. [SEP] and [PAD] are kept: they end the text.
    std::vector<bool> never(V, false);
    for (int id = int(m.tok->size()); id < V; id++) never[id] = true;
    for (int32_t id : {m.tok->cls_id(), m.tok->mask_id(), m.tok->unk_id()})
        if (id >= 0 && id < V) never[id] = true;
    int made = 0;
    std::string ended;   // the token that ended the text early, if one did
    for (; made < n_new && int(ids.size()) < m.cfg.max_position_embeddings; made++) {
        std::vector<float> logits = logits_at(m, ids, true, {int(ids.size()) - 1});
        float* last = logits.data();   // (V)
        for (int id = 0; id < V; id++)
            if (never[id]) last[id] = -INFINITY;
        std::vector<int> order = top_ids(last, V, top_k);
        int K = int(order.size());
        // Sample among the top K with temperature (0 = greedy), from a small xorshift generator.
        std::vector<double> w(K);
        double sum = 0;
        for (int i = 0; i < K; i++) sum += w[i] = temperature > 0 ? std::exp((last[order[i]] - last[order[0]]) / temperature) : (i == 0);
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        double r = (state >> 11) * 0x1.0p-53 * sum;
        int pick = 0;
        while (pick + 1 < K && (r -= w[pick]) > 0) pick++;
        int32_t id = order[pick];
        if (id == m.tok->sep_id() || id == m.tok->pad_id()) {
            ended = m.tok->token(id);
            break;
        }
        ids.push_back(id);
        pieces.push_back(m.tok->token(id));
    }
    std::printf("%s\n", detokenize(pieces).c_str());
    if (!ended.empty())
        std::fprintf(stderr, "generate: stopped after %d of --tokens %d: the model wrote %s, the end of a text\n", made,
                     n_new, ended.c_str());
    else if (made < n_new && int(ids.size()) == m.cfg.max_position_embeddings)
        std::fprintf(stderr, "generate: stopped at the model's %d positions (max_position_embeddings)\n",
                     m.cfg.max_position_embeddings);
    return 0;
}

namespace {

// A classifier's label names: config.json's id2label (Hugging Face writes LABEL_0, ...; a dataset
// may name them), LABEL_i where it has none.
std::vector<std::string> label_names(const std::string& dir, int num_labels) {
    std::vector<std::string> names;
    const std::string path = dir + "/config.json";
    nlohmann::json config = parse_json(read_file(path), path);
    if (config.contains("id2label") && config["id2label"].is_object())   // a key that names no label was passed over
        for (const auto& item : config["id2label"].items()) {
            const std::string& k = item.key();
            const bool number = !k.empty() && k.size() < 10 && k.find_first_not_of("0123456789") == std::string::npos;
            if (!number || std::stoi(k) >= num_labels || !item.value().is_string())
                fail(path, "\"id2label\": \"" + k + "\": expected label numbers 0 to " + std::to_string(num_labels - 1) +
                               ", each with a name");
        }
    for (int i = 0; i < num_labels; i++) {
        std::string key = std::to_string(i);
        bool named = config.contains("id2label") && config["id2label"].is_object() && config["id2label"].contains(key) &&
                     config["id2label"][key].is_string();
        names.push_back(named ? config["id2label"][key].get<std::string>() : "LABEL_" + key);
    }
    return names;
}

// (where, text_a, text_b): each TEXT, or F's lines; a TSV whose header names text_a (as for
// training) gives that column, and text_b where it names one (a pair, encoded as training does).
struct ToClassify {
    std::string where, a, b;
};
std::vector<ToClassify> texts_to_classify(const Args& a) {
    std::vector<ToClassify> texts;
    const auto blank = [](const std::string& t) { return t.find_first_not_of(" \t\r\v\f") == std::string::npos; };
    for (size_t i = 0; i < a.positional().size(); i++) {
        if (blank(a.positional()[i])) throw std::runtime_error("TEXT " + std::to_string(i + 1) + ": empty: nothing to classify");
        texts.push_back({"TEXT " + std::to_string(i + 1), a.positional()[i], ""});
    }
    if (!a.has("--file")) return texts;
    std::vector<std::string> lines = read_lines(a.str("--file"));
    std::vector<std::string> header = lines.empty() ? std::vector<std::string>{} : split(lines[0], '\t');
    const auto column_a = std::find(header.begin(), header.end(), "text_a"), column_b = std::find(header.begin(), header.end(), "text_b");
    bool tsv = column_a != header.end();
    for (size_t i = tsv; i < lines.size(); i++) {
        if (blank(lines[i])) continue;   // a blank line, spaces only or none
        std::string where = a.str("--file") + ": line " + std::to_string(i + 1);
        std::vector<std::string> cols = split(lines[i], '\t');
        if (tsv && cols.size() != header.size())
            throw std::runtime_error(where + ": " + std::to_string(cols.size()) + " columns, the header has " +
                                     std::to_string(header.size()));
        if (!tsv) texts.push_back({where, lines[i], ""});
        else texts.push_back({where, cols[size_t(column_a - header.begin())], column_b == header.end() ? "" : cols[size_t(column_b - header.begin())]});
    }
    if (texts.empty()) throw std::runtime_error(a.str("--file") + ": no text to classify");
    return texts;
}

}  // namespace

int classify_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--model", "--file", "--seq"}, {}, true);
    std::string dir = a.required("--model");
    ModelConfig cfg = load_model_config(dir);
    if (cfg.num_labels == 0)
        throw std::runtime_error(dir + ": not a classifier (config.json has no num_labels); fill-mask or generate read it");
    if (a.has("--file") == !a.positional().empty())
        throw std::runtime_error("usage: pipetrain classify --model DIR (TEXT... | --file F): " +
                                 std::string(a.has("--file") ? "texts or --file, not both" : "no TEXT and no --file"));
    Tokenizer tok = load_tokenizer(dir, cfg);
    ForwardModel model = forward_model(cfg);
    const std::vector<Layer*>& layers = model.layers;
    load_weights(dir, layers);
    std::vector<std::string> names = label_names(dir, cfg.num_labels);
    int T = int(a.integer("--seq", std::min(128, cfg.max_position_embeddings), 3, cfg.max_position_embeddings));
    std::vector<ToClassify> texts = texts_to_classify(a);
    RunOptions opt;
    opt.train = false;
    for (const ToClassify& text : texts) {
        Example e;
        try {
            Tokenizer::Encoded enc = tok.encode_pair(text.a, text.b, T);
            e.ids = enc.input_ids, e.types = enc.token_type_ids;
            // Cut as training cuts (the longer text first), as a pipeline with truncation does; said.
            const size_t whole = tok.encode(text.a).size() + (text.b.empty() ? 2 : tok.encode(text.b).size() + 3);
            if (whole > size_t(T))
                std::fprintf(stderr, "note: %s: %zu tokens with [CLS] and [SEP], cut to --seq %d (the longer text first)\n",
                             printable(text.where).c_str(), whole, T);
        } catch (const std::exception& ex) {
            throw std::runtime_error(text.where + ": " + ex.what());
        }
        e.ids.resize(T, tok.pad_id()), e.types.resize(T, 0), e.label = 0;
        Batch b = make_classify_eval_batches({e}, 1, tok.pad_id())[0];
        MicroBatch mb = b.rows(0, 1);
        std::vector<float> act, next;
        std::vector<double> p;
        for (Layer* l : layers) {
            next.assign(l->out_numel(1, T), 0.0f);
            auto s = l->forward(next.data(), act.empty() ? nullptr : act.data(), mb, opt);
            if (auto* hs = dynamic_cast<HeadStash*>(s.get())) p = softmax(hs->logits.host().data(), cfg.num_labels);
            act.swap(next);
        }
        std::vector<int> order = top_ids(p.data(), cfg.num_labels, cfg.num_labels);
        // printable: a label name (config.json's) or a text with a newline stays on its line
        std::printf("%s", printable(names[order[0]]).c_str());
        for (int id : order) std::printf("%s %s %.4f", id == order[0] ? " |" : ",", printable(names[id]).c_str(), p[id]);
        std::printf(" | %s%s\n", printable(text.a).c_str(), text.b.empty() ? "" : (" | " + printable(text.b)).c_str());
    }
    return 0;
}

}  // namespace pt
