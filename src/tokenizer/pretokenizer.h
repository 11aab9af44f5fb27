#pragma once
// The pre-tokenizer split rules of the supported byte-level BPE families, written by hand over
// Unicode classes (tokenizer/unicode.h) to match the Hugging Face regexes exactly, including the
// backtracking of `\s+(?!\S)` (a whitespace run before a non-space gives up its last character,
// so that " word" stays together) and of `\s*[\r\n]+` (up to the run's last line break).
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace es::tokenizer {

// The regex of each family, as it appears in tokenizer.json (JSON-unescaped). kSmolLm is
// tokenizers' Digits(individual_digits) followed by the GPT-2 regex.
std::string_view preTokenizerRegex(PreTokenizer kind);

// Splits `text` into pre-tokens (appended to `out` as views into `text`; their concatenation is
// `text`). Ill-formed UTF-8 is split like U+FFFD (a symbol) but the original bytes are kept.
void preTokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& out);

}  // namespace es::tokenizer
