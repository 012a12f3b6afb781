// src/formats/unicode.hpp — the few Unicode character-database queries BERT's BasicTokenizer needs,
// answered from the tables scripts/gen_unicode_tables.py generates (unicode_tables.inc), and strict
// UTF-8. The tokenizer's rules that use them are in src/ernie.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace pt {

// The general categories the tokenizer asks about: other C*, space Zs, punct P*, mark Mn.
enum class CharCategory : uint8_t { none, other, space, punct, mark };
CharCategory char_category(char32_t c);
// Appends the full lowercase mapping of one code point (İ is two).
void append_lower(std::u32string& out, char32_t c);
// Canonical decomposition (NFD): every code point decomposed, then combining marks in canonical order.
std::u32string nfd(const std::u32string& s);

// Strict decoder: shortest form only, no surrogates, nothing above U+10FFFF. Throws
// "invalid UTF-8 at byte N (expected UTF-8 text)", N the 0-based offset where the bad sequence starts.
std::u32string decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t c);

}  // namespace pt
