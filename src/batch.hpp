// src/batch.hpp — batches of token ids: masked for MLM, shifted for causal LM, labeled for
// classification, and sliced into micro-batches. Where the sequences come from (a corpus, a TSV, a
// safetensors batch) is src/formats/corpus.hpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/model.hpp"

namespace pt {

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

// Token ids for the special tokens and the vocabulary size, all the masker needs to know.
struct SpecialIds { int32_t pad = 0, cls = 1, sep = 2, mask = 3, unk = 100; int vocab = 0; };

// B rows of T real tokens of type 0 and no target: what every batch starts from.
Batch empty_batch(int B, int T);

// Batch `index` of a training run over `seqs` (reshuffled every epoch with `seed`) with
// targets for `objective`. MLM: 15% of the real tokens become targets; of those 80% [MASK],
// 10% a random token, 10% unchanged. The randomness is a pure function of (seed, index, row,
// position), so every stage and replica builds the same batch.
Batch make_batch(const std::vector<std::vector<int32_t>>& seqs, int64_t index, int B, Objective obj,
                 const SpecialIds& sp, uint64_t seed);
// The fixed evaluation batches: all `seqs` in order, B at a time (the last one may be short).
std::vector<Batch> make_eval_batches(const std::vector<std::vector<int32_t>>& seqs, int B, Objective obj,
                                     const SpecialIds& sp, uint64_t seed);


// Causal targets: token t predicts token t+1 where both are real, else kIgnore.
void set_causal_targets(Batch& b);

// A (B, T) batch of pseudo-random ids for timing, which needs the shapes and the target density
// of real data, not its text: every 7th token an MLM target (~15%), every token for a causal model
// (is_decoder), or a label per row.
Batch synthetic_batch(const ModelConfig& cfg, int B, int T);

// One labeled sequence for classification: [CLS] A [SEP] (B [SEP]), truncated to T and padded;
// the label sits at the [CLS] position of `targets`.
struct Example {
    std::vector<int32_t> ids, types;   // T each (padded)
    int32_t label = kIgnore;
};
Batch make_classify_batch(const std::vector<Example>& data, int64_t index, int B, int32_t pad, uint64_t seed);
std::vector<Batch> make_classify_eval_batches(const std::vector<Example>& data, int B, int32_t pad);

}  // namespace pt
