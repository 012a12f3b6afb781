// src/cli/train_setup.cpp — the model (--model, --preset, --resume) and the data (--data,
// --inputs) of a run.
#include "src/cli/train.hpp"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include "src/cli/args.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/corpus.hpp"
#include "src/formats/tokenizer.hpp"

namespace pt {

namespace {

std::vector<std::string> placeholder_vocab(int V) {
    std::vector<std::string> v = {"[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"};
    while (int(v.size()) < V) v.push_back("[unused" + std::to_string(v.size()) + "]");
    v.resize(V);
    return v;
}

// Every id must index its table: a bad id is an error naming the source, not a crash.
void check_batch(const Batch& b, const ModelConfig& cfg, const std::string& source) {
    if (b.T > cfg.max_position_embeddings)
        throw std::runtime_error(source + ": sequence length " + std::to_string(b.T) + " exceeds max_position_embeddings " +
                                 std::to_string(cfg.max_position_embeddings));
    auto check = [&](const std::vector<int32_t>& v, int limit, const char* what, bool allow_ignore) {
        for (int32_t x : v)
            if ((x < 0 || x >= limit) && !(allow_ignore && x == kIgnore))
                throw std::runtime_error(source + ": " + what + " id " + std::to_string(x) + " out of range [0, " +
                                         std::to_string(limit) + ")");
    };
    check(b.input_ids, cfg.vocab_size, "input", false);
    check(b.token_type_ids, cfg.type_vocab_size, "token_type", false);
    if (cfg.use_task_id) check(b.task_type_ids, cfg.task_type_vocab_size, "task_type", false);
    check(b.targets, cfg.vocab_size, "target", true);
    for (int32_t m : b.attention_mask)
        if (m != 0 && m != 1) throw std::runtime_error(source + ": attention_mask must be 0 or 1");
}

// --model, --resume or --preset: the model's shape and vocabulary into s, and the tokenizer of
// --data (null without a vocabulary: a preset trained on --inputs).
std::unique_ptr<Tokenizer> choose_model(const Args& a, bool training, bool has_data, Setup& s) {
    std::unique_ptr<Tokenizer> tok;
    if (a.has("--model") + a.has("--preset") + a.has("--resume") > 1)
        throw std::runtime_error("--model / --preset / --resume: give only one of them");
    if (a.has("--model") || a.has("--resume")) {
        if (a.has("--vocab-size")) throw std::runtime_error("--vocab-size: only with --preset (the model has its vocab.txt)");
        if (a.has("--blocks")) throw std::runtime_error("--blocks: only with --preset (the model's config.json has its blocks)");
        s.model_dir = a.has("--resume") ? a.str("--resume") : a.str("--model");
        s.cfg = load_model_config(s.model_dir);
        s.vocab = load_vocab_lines(s.model_dir, s.cfg);
        if (!s.vocab.empty()) tok = std::make_unique<Tokenizer>(s.vocab, vocab_file(s.model_dir));
        else if (has_data && !a.has("--dry-run"))
            throw std::runtime_error(s.model_dir + "/vocab.txt: missing, and no tokenizer.json (needed to tokenize --data)");
    } else {
        if (!training) throw std::runtime_error("--model: required");
        if (a.has("--vocab-size") && !has_data)
            throw std::runtime_error("--vocab-size: only with --data (the vocabulary is built from the corpus)");
        s.cfg = for_flag("--preset", [&] { return ModelConfig::preset(a.str("--preset", "tiny")); });
        s.cfg.num_hidden_layers = int(a.integer("--blocks", s.cfg.num_hidden_layers, 1, 1024));
        if (has_data && !a.has("--dry-run")) {
            // A preset trained on a corpus gets a vocabulary built from that corpus.
            int max_vocab = int(a.integer("--vocab-size", s.cfg.vocab_size, 16, 1 << 20));
            s.vocab = build_vocab_file(a.str("--data"), size_t(max_vocab));
            tok = std::make_unique<Tokenizer>(s.vocab, a.str("--data") + " (built vocab)");
            s.cfg.vocab_size = int(s.vocab.size());
        }
    }
    return tok;
}

// The training data and the evaluation batches: a TSV of labeled examples (classify), a corpus
// (--data), or the fixed --inputs batch. Every id is checked against the model's tables.
void load_data(const Args& a, bool classify, const Tokenizer* tok, Setup& s) {
    bool has_data = a.has("--data");
    const int eval_rows = 8;   // fixed, so that eval after training and eval of the saved model agree
    std::string eval_path = a.str(has_data ? "--data" : "--inputs");
    if (has_data) s.special = special_ids(*tok);
    if (classify) {
        s.examples = load_tsv(a.str("--data"), *tok, s.T, s.cfg.num_labels);
        // Without --eval, the accuracy is measured on the training set itself.
        eval_path = a.str("--eval", eval_path);
        s.eval = make_classify_eval_batches(
            eval_path == a.str("--data") ? s.examples : load_tsv(eval_path, *tok, s.T, s.cfg.num_labels), eval_rows,
            s.special.pad);
    } else if (has_data) {
        Corpus c = load_corpus(a.str("--data"), *tok, s.T);
        s.train = std::move(c.train);
        s.eval = make_eval_batches(c.eval, eval_rows, s.objective, s.special, s.seed);
    } else {
        s.fixed = load_inputs(a.str("--inputs"), s.objective);
        if (s.fixed.num_targets() == 0) throw std::runtime_error(a.str("--inputs") + ": no target (every label is -100)");
        if (a.has("--seq") && a.integer("--seq", 0) != s.fixed.T)   // the file's length is the run's: say so, not ignore it
            throw std::runtime_error("--seq: the --inputs file holds sequences of " + std::to_string(s.fixed.T) + " tokens");
        s.T = s.fixed.T;
        s.eval = {s.fixed};
    }
    for (const Batch& b : s.eval) check_batch(b, s.cfg, eval_path);
}

}  // namespace

Setup make_setup(const Args& a, bool training) {
    Setup s;
    s.seed = uint64_t(a.integer("--seed", 1234, 0, (1LL << 62)));
    s.T = int(a.integer("--seq", 64, 3, 1 << 16));
    bool has_data = a.has("--data"), has_inputs = a.has("--inputs");
    if (has_data == has_inputs) throw std::runtime_error("--data / --inputs: give exactly one of them");

    std::unique_ptr<Tokenizer> tok = choose_model(a, training, has_data, s);
    if (s.vocab.empty()) s.vocab = placeholder_vocab(s.cfg.vocab_size);
    if (!a.has("--seq")) s.T = std::min(s.T, s.cfg.max_position_embeddings);   // the default fits a small model
    bool classify = a.str("--task", s.cfg.num_labels > 0 ? "classify" : "lm") == "classify";
    if (a.has("--task") && a.str("--task") != "classify" && a.str("--task") != "lm")
        throw std::runtime_error("--task: expected lm or classify, got \"" + a.str("--task") + "\"");
    for (const char* flag : {"--labels", "--eval"})
        if (!classify && a.has(flag)) throw std::runtime_error(std::string(flag) + ": only with --task classify");
    if (classify) {
        int labels = int(a.integer("--labels", s.cfg.num_labels, 0, 1 << 20));
        if (labels < 2) throw std::runtime_error("--labels: --task classify needs the number of classes (at least 2)");
        if (s.cfg.num_labels > 0 && labels != s.cfg.num_labels)
            throw std::runtime_error("--labels: the model has " + std::to_string(s.cfg.num_labels) + " labels, not " +
                                     std::to_string(labels));
        s.cfg.num_labels = labels;
        if (!has_data)
            throw std::runtime_error("--inputs: a classifier (--task classify, or a model with num_labels) trains on a TSV "
                                     "(label<TAB>text_a) given with --data, not on --inputs");
    }
    // A causal model says so in its config.json (is_decoder), so eval and a further run default to
    // it. A classifier never is one: it reads [CLS], which a causal mask would hide from the text.
    s.objective = for_flag("--objective", [&] {
        return parse_objective(a.str("--objective", s.cfg.is_decoder && !classify ? "causal" : "mlm"));
    });
    if (classify && s.objective == Objective::causal)
        throw std::runtime_error("--objective causal: a classifier reads [CLS], which a causal mask hides from the text");
    s.cfg.is_decoder = s.objective == Objective::causal;
    if (a.has("--dropout")) {
        double p = a.real("--dropout", 0);
        if (!(p >= 0 && p < 1)) throw std::runtime_error("--dropout: expected a probability in [0, 1)");
        s.cfg.hidden_dropout_prob = s.cfg.attention_probs_dropout_prob = float(p);
    }
    if (has_data && s.T > s.cfg.max_position_embeddings)   // with --inputs, T comes from the file
        throw std::runtime_error("--seq: " + std::to_string(s.T) + " exceeds the model's max_position_embeddings " +
                                 std::to_string(s.cfg.max_position_embeddings));

    // --dry-run reads no corpus or TSV (it may be on another machine): the plan needs only the model.
    if (!(a.has("--dry-run") && has_data)) load_data(a, classify, tok.get(), s);
    return s;
}

}  // namespace pt
