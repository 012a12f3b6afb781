// src/formats/corpus.hpp — where training sequences come from: a UTF-8 text corpus (tokenized and
// packed), a ChnSentiCorp-style TSV of labeled examples, or a fixed batch in a safetensors file.
#pragma once
#include <string>
#include <vector>

#include "src/batch.hpp"

namespace pt {

class Tokenizer;

// Tokenized corpus packed into fixed-length sequences [CLS] tokens… [SEP].
struct Corpus {
    std::vector<std::vector<int32_t>> train, eval;   // sequences of exactly T ids
};
// Reads a UTF-8 text file (one document or line per line), tokenizes it, and packs it.
// The last ~5% of sequences (at least one, at most 64) are held out for evaluation.
Corpus load_corpus(const std::string& path, const Tokenizer& tok, int T);

SpecialIds special_ids(const Tokenizer& tok);

// A fixed batch from a safetensors file with I64 tensors input_ids, token_type_ids,
// attention_mask, optional task_type_ids and labels ([B, T] each). MLM uses `labels`;
// causal derives next-token targets.
Batch load_inputs(const std::string& path, Objective obj);

// Sequence classification data: a TSV with a header row naming the columns `label`, `text_a`,
// optional `text_b` and `qid`, each row one Example.
std::vector<Example> load_tsv(const std::string& path, const Tokenizer& tok, int T, int num_labels);

}  // namespace pt
