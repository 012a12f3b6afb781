// src/formats/tokenizer_json.hpp — the tokenizer files Hugging Face's fast tokenizers (and
// transformers.js) read: tokenizer.json, tokenizer_config.json, special_tokens_map.json, written
// beside every vocab.txt pipetrain writes, as BertTokenizerFast.save_pretrained would write them
// for pipetrain's tokenizer (uncased: BertNormalizer lowercase, accents stripped, CJK characters
// split; BertPreTokenizer; WordPiece with [UNK], "##", 100 characters at most; [CLS] A [SEP] and
// [CLS] A [SEP] B [SEP]; the WordPiece decoder). And the way back: a model directory that holds
// only tokenizer.json (many Hugging Face repositories ship no vocab.txt) gives its vocab lines.
#pragma once
#include <string>
#include <vector>

namespace pt {

struct TokenizerFiles {
    std::string tokenizer_json, tokenizer_config_json, special_tokens_map_json;
};
// From vocab.txt's lines (a `token<TAB>id` line is `token`, as pipetrain reads it; a token on two
// lines keeps the later id, as transformers' load_vocab does). model_max_length: the model's
// max_position_embeddings.
TokenizerFiles tokenizer_files(const std::vector<std::string>& vocab_lines, int model_max_length);
// The vocab lines of a tokenizer.json (token i on line i). Refused, naming the file: not a
// WordPiece model, a normalizer that does not lowercase (pipetrain's tokenizer is uncased), no
// [UNK], an id that is negative or repeated, an added token other than [PAD] [UNK] [CLS] [SEP]
// [MASK] at their vocab ids (or one of those missing from "added_tokens"). An id no token has (a
// vocab.txt with a repeated token leaves one) becomes "[unused<ID>]", which no text tokenizes to.
std::vector<std::string> vocab_from_tokenizer_json(const std::string& path);
// A directory's tokenizer files must agree: transformers' fast tokenizer reads tokenizer.json, its
// slow one vocab.txt and tokenizer_config.json, pipetrain vocab_path (its vocab.txt, or its
// tokenizer.json when it has no vocab.txt). Refused, naming the file: a tokenizer.json whose ids are
// not vocab.txt's (or that pipetrain cannot follow), a tokenizer_config.json that keeps case or
// accents or leaves CJK characters whole.
void check_tokenizer_files(const std::string& dir, const std::vector<std::string>& vocab_lines, const std::string& vocab_path);

}  // namespace pt
