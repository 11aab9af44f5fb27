#pragma once
// UTF-8 and the bits of Unicode the byte-level BPE tokenizers need: code point decoding that never
// fails (invalid bytes become U+FFFD deterministically), the \p{L} / \p{N} / \s classes of the
// pre-tokenizer regexes, and NFC. Tables are generated (unicode_tables.h,
// tools/gen_unicode_tables.py).
#include <cstdint>
#include <string>
#include <string_view>

namespace es::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Version of the Unicode character database the tables were generated from.
const char* unicodeVersion();

struct DecodedCodepoint {
  char32_t cp;      // kReplacementChar for an ill-formed sequence
  uint32_t length;  // bytes consumed, >= 1 whenever pos < text.size()
  bool valid;
};

// Decodes the code point at text[pos] (pos < text.size()). An ill-formed sequence consumes its
// maximal valid prefix (at least one byte) and yields U+FFFD: the Unicode "maximal subpart"
// practice, the same as Rust's String::from_utf8_lossy and Python's errors="replace".
DecodedCodepoint decodeUtf8(std::string_view text, size_t pos);

// Appends the UTF-8 encoding of cp (surrogates and values > U+10FFFF become U+FFFD).
void appendUtf8(std::string& out, char32_t cp);

// Ill-formed sequences replaced by U+FFFD, well-formed text returned unchanged.
std::string sanitizeUtf8(std::string_view text);

// Length of the longest prefix of text that is complete, and leaves no trailing partial
// sequence that could still be completed by more bytes. Ill-formed bytes count as complete
// (they will be replaced); only a truncated-but-so-far-valid tail is held back.
size_t completeUtf8Prefix(std::string_view text);

// Character classes of the pre-tokenizer regexes.
enum CodepointFlags : uint8_t {
  kFlagLetter = 1,      // \p{L}
  kFlagNumber = 2,      // \p{N}
  kFlagWhitespace = 4,  // \s (Unicode White_Space)
};
uint8_t codepointFlags(char32_t cp);
inline bool isLetter(char32_t cp) { return codepointFlags(cp) & kFlagLetter; }
inline bool isNumber(char32_t cp) { return codepointFlags(cp) & kFlagNumber; }
inline bool isWhitespace(char32_t cp) { return codepointFlags(cp) & kFlagWhitespace; }

// Canonical combining class (0 for starters).
uint8_t combiningClass(char32_t cp);

// Unicode Normalization Form C. Ill-formed UTF-8 is replaced by U+FFFD first (the input of a
// tokenizer.json normalizer is always a valid string). Text that is already NFC is returned
// unchanged through a quick check.
std::string nfc(std::string_view text);
bool isNfcQuick(std::string_view text);  // true: certainly NFC already

}  // namespace es::tokenizer
