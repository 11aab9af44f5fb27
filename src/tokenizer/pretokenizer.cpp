#include "tokenizer/pretokenizer.h"

#include <cstdint>

#include "tokenizer/unicode.h"

namespace es::tokenizer {
namespace {

// The text decoded once: code point, class flags and byte offset of each character (offset has
// one extra entry, the text size), so the rules below look ahead freely.
struct Decoded {
  std::vector<char32_t> cp;
  std::vector<uint8_t> flags;
  std::vector<uint32_t> offset;

  void decode(std::string_view text) {
    cp.clear(), flags.clear(), offset.clear();
    cp.reserve(text.size()), flags.reserve(text.size()), offset.reserve(text.size() + 1);
    for (size_t pos = 0; pos < text.size();) {
      char32_t c;
      uint32_t len;
      if (static_cast<uint8_t>(text[pos]) < 0x80) {
        c = static_cast<uint8_t>(text[pos]), len = 1;
      } else {
        const DecodedCodepoint d = decodeUtf8(text, pos);
        c = d.cp, len = d.length;
      }
      cp.push_back(c);
      flags.push_back(codepointFlags(c));
      offset.push_back(static_cast<uint32_t>(pos));
      pos += len;
    }
    offset.push_back(static_cast<uint32_t>(text.size()));
  }
};

class Splitter {
 public:
  Splitter(const Decoded& d, std::string_view text, std::vector<std::string_view>& out)
      : d_(d), text_(text), out_(out) {}

  bool letter(size_t i) const { return d_.flags[i] & kFlagLetter; }
  bool number(size_t i) const { return d_.flags[i] & kFlagNumber; }
  bool space(size_t i) const { return d_.flags[i] & kFlagWhitespace; }
  bool other(size_t i) const { return d_.flags[i] == 0; }  // [^\s\p{L}\p{N}]
  char32_t at(size_t i) const { return d_.cp[i]; }
  static bool lineBreak(char32_t c) { return c == '\r' || c == '\n'; }

  void emit(size_t i, size_t j) {
    out_.push_back(text_.substr(d_.offset[i], d_.offset[j] - d_.offset[i]));
  }

  // 's|'t|'re|'ve|'m|'ll|'d at i, optionally case-insensitive (then with Unicode simple case
  // folding, under which U+017F LATIN SMALL LETTER LONG S is an 's'). Returns the match length.
  size_t contraction(size_t i, size_t end, bool ignoreCase) const {
    if (at(i) != '\'' || i + 1 >= end) return 0;
    auto fold = [&](char32_t c) -> char32_t {
      if (!ignoreCase) return c;
      if (c >= 'A' && c <= 'Z') return c + 32;
      return c == 0x17F ? U's' : c;
    };
    const char32_t a = fold(at(i + 1));
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= end) return 0;
    const char32_t b = fold(at(i + 2));
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }

  // \s+(?!\S)|\s+ at i (a whitespace character): the run, minus its last character when a
  // non-space follows and the run is longer than one.
  size_t whitespaceRun(size_t i, size_t end) const {
    size_t j = i;
    while (j < end && space(j)) ++j;
    if (j < end && j - i >= 2) return j - 1;
    return j;
  }

  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ over [begin, end)
  // (end acts as the end of the text, as for a piece produced by an earlier split).
  void gpt2(size_t begin, size_t end) {
    for (size_t i = begin; i < end;) {
      size_t j;
      if (const size_t c = contraction(i, end, false)) {
        j = i + c;
      } else {
        const size_t k = (at(i) == ' ' && i + 1 < end) ? i + 1 : i;  // the optional space
        if (letter(k)) {
          for (j = k + 1; j < end && letter(j);) ++j;
        } else if (number(k)) {
          for (j = k + 1; j < end && number(j);) ++j;
        } else if (other(k)) {
          for (j = k + 1; j < end && other(j);) ++j;
        } else {
          j = whitespaceRun(i, end);
        }
      }
      emit(i, j);
      i = j;
    }
  }

  // Llama-3 (maxDigits 3) and Qwen2 (maxDigits 1):
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  void llama3(size_t n, size_t maxDigits) {
    for (size_t i = 0; i < n;) {
      size_t j;
      if (const size_t c = contraction(i, n, true)) {
        j = i + c;
      } else if (letter(i) || (!lineBreak(at(i)) && !number(i) && i + 1 < n && letter(i + 1))) {
        for (j = i + 1; j < n && letter(j);) ++j;
      } else if (number(i)) {
        for (j = i + 1; j < n && number(j) && j - i < maxDigits;) ++j;
      } else if (const size_t k = (at(i) == ' ' && i + 1 < n) ? i + 1 : i; other(k)) {
        for (j = k + 1; j < n && other(j);) ++j;
        while (j < n && lineBreak(at(j))) ++j;
      } else {
        // Whitespace. \s*[\r\n]+ reaches the last line break of the run, if there is one.
        size_t runEnd = i, lastBreak = SIZE_MAX;
        for (; runEnd < n && space(runEnd); ++runEnd)
          if (lineBreak(at(runEnd))) lastBreak = runEnd;
        j = lastBreak != SIZE_MAX ? lastBreak + 1 : whitespaceRun(i, n);
      }
      emit(i, j);
      i = j;
    }
  }

  // Digits(individual_digits = true) then GPT-2 on each piece between digits.
  void smolLm(size_t n) {
    size_t pieceBegin = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!number(i)) continue;
      gpt2(pieceBegin, i);
      emit(i, i + 1);
      pieceBegin = i + 1;
    }
    gpt2(pieceBegin, n);
  }

 private:
  const Decoded& d_;
  std::string_view text_;
  std::vector<std::string_view>& out_;
};

}  // namespace

std::string_view preTokenizerRegex(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kGpt2:
    case PreTokenizer::kSmolLm:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case PreTokenizer::kLlama3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case PreTokenizer::kQwen2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return {};
}

void preTokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& out) {
  if (text.empty()) return;
  // One scratch per thread: encode() is called once per segment and must not allocate per call.
  thread_local Decoded decoded;
  decoded.decode(text);
  Splitter s(decoded, text, out);
  const size_t n = decoded.cp.size();
  switch (kind) {
    case PreTokenizer::kGpt2:
      s.gpt2(0, n);
      break;
    case PreTokenizer::kLlama3:
      s.llama3(n, 3);
      break;
    case PreTokenizer::kQwen2:
      s.llama3(n, 1);
      break;
    case PreTokenizer::kSmolLm:
      s.smolLm(n);
      break;
  }
}

}  // namespace es::tokenizer
