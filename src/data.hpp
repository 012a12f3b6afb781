// src/data.hpp — batches of token ids: from a text corpus (packed, masked) or a fixed
// safetensors batch, split into micro-batches.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/io.hpp"
#include "src/model.hpp"

namespace pt {

class Tokenizer;

// A (B, T) batch. Every array is B*T long; task_type_ids may be empty (all zero).
struct Batch {
    int B = 0, T = 0;
    std::vector<int32_t> input_ids, token_type_ids, task_type_ids, attention_mask, targets;
    int64_t num_targets() const;
    // Rows [first, first + count) as a MicroBatch view (pointers into this batch).
    MicroBatch rows(int first, int count) const;
    Batch slice(int first, int count) const;   // a copy of some rows
};

enum class Objective { mlm, causal };
Objective parse_objective(const std::string& s);   // throws naming --objective

// Tokenized corpus packed into fixed-length sequences [CLS] tokens… [SEP].
struct Corpus {
    std::vector<std::vector<int32_t>> train, eval;   // sequences of exactly T ids
};
// Reads a UTF-8 text file (one document or line per line), tokenizes it, and packs it.
// The last ~5% of sequences (at least one, at most 64) are held out for evaluation.
Corpus load_corpus(const std::string& path, const Tokenizer& tok, int T);

// Token ids for the special tokens and the vocabulary size, all the masker needs to know.
struct SpecialIds { int32_t pad = 0, cls = 1, sep = 2, mask = 3, unk = 100; int vocab = 0; };
SpecialIds special_ids(const Tokenizer& tok);

// Batch `index` of a training run over `seqs` (reshuffled every epoch with `seed`) with
// targets for `objective`. MLM: 15% of the real tokens become targets; of those 80% [MASK],
// 10% a random token, 10% unchanged. The randomness is a pure function of (seed, index, row,
// position), so every stage and replica builds the same batch.
Batch make_batch(const std::vector<std::vector<int32_t>>& seqs, int64_t index, int B, Objective obj,
                 const SpecialIds& sp, uint64_t seed);
// The fixed evaluation batches: all `seqs` in order, B at a time (the last one may be short).
std::vector<Batch> make_eval_batches(const std::vector<std::vector<int32_t>>& seqs, int B, Objective obj,
                                     const SpecialIds& sp, uint64_t seed);

// A fixed batch from a safetensors file with I64 tensors input_ids, token_type_ids,
// attention_mask, optional task_type_ids and labels ([B, T] each). MLM uses `labels`;
// causal derives next-token targets.
Batch load_inputs(const std::string& path, Objective obj);

// Causal targets: token t predicts token t+1 where both are real, else kIgnore.
void set_causal_targets(Batch& b);

// A (B, T) batch of pseudo-random ids for timing, which needs the shapes and the target density
// of real data, not its text: every 7th token an MLM target (~15%), or a label per row.
Batch synthetic_batch(const ModelConfig& cfg, int B, int T);

// Sequence classification data: a ChnSentiCorp-style TSV with a header row naming the columns
// `label`, `text_a`, optional `text_b` and `qid`. Each example is [CLS] A [SEP] (B [SEP]),
// truncated to T and padded; the label sits at the [CLS] position of `targets`.
struct Example {
    std::vector<int32_t> ids, types;   // T each (padded)
    int32_t label = kIgnore;
};
std::vector<Example> load_tsv(const std::string& path, const Tokenizer& tok, int T, int num_labels);
Batch make_classify_batch(const std::vector<Example>& data, int64_t index, int B, int32_t pad, uint64_t seed);
std::vector<Batch> make_classify_eval_batches(const std::vector<Example>& data, int B, int32_t pad);

}  // namespace pt
