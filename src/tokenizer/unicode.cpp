#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "tokenizer/unicode_tables.h"

namespace es::tokenizer {
namespace {

enum class Utf8Status : uint8_t { kValid, kInvalid, kTruncated };

struct Utf8Step {
  char32_t cp;
  uint32_t length;
  Utf8Status status;
};

// One step of a UTF-8 decoder following the Unicode well-formed byte sequence table (3.9-3):
// an invalid or truncated sequence consumes its maximal valid prefix.
Utf8Step stepUtf8(std::string_view text, size_t pos) {
  const auto byteAt = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byteAt(pos);
  if (b0 < 0x80) return {b0, 1, Utf8Status::kValid};
  uint32_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return {kReplacementChar, 1, Utf8Status::kInvalid};
  }
  for (uint32_t k = 1; k <= need; ++k) {
    if (pos + k >= text.size()) return {kReplacementChar, k, Utf8Status::kTruncated};
    const uint8_t b = byteAt(pos + k);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {kReplacementChar, k, Utf8Status::kInvalid};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, Utf8Status::kValid};
}

template <typename Entry>
const Entry* findRange(const Entry* begin, const Entry* end, char32_t cp) {
  const Entry* it =
      std::upper_bound(begin, end, cp, [](char32_t c, const Entry& e) { return c < e.first; });
  if (it == begin) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

uint8_t flagsFromTable(char32_t cp) {
  const auto* r = findRange(std::begin(tables::kFlagRanges), std::end(tables::kFlagRanges), cp);
  return r ? r->flags : 0;
}

// The Basic Multilingual Plane as a flat table: the pre-tokenizer asks for every code point.
const std::array<uint8_t, 0x10000>& bmpFlags() {
  static const auto table = [] {
    auto t = std::make_unique<std::array<uint8_t, 0x10000>>();
    for (char32_t cp = 0; cp < 0x10000; ++cp) (*t)[cp] = flagsFromTable(cp);
    return t;
  }();
  return *table;
}

// Hangul syllable arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void decomposeInto(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* begin = std::begin(tables::kDecompositions);
  const auto* end = std::end(tables::kDecompositions);
  const auto* it = std::lower_bound(
      begin, end, cp, [](const tables::Decomposition& d, char32_t c) { return d.cp < c; });
  if (it != end && it->cp == cp) {
    for (uint32_t k = 0; k < it->length; ++k)
      out.push_back(tables::kDecompositionPool[it->offset + k]);
  } else {
    out.push_back(cp);
  }
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* begin = std::begin(tables::kCompositions);
  const auto* end = std::end(tables::kCompositions);
  const auto* it =
      std::lower_bound(begin, end, std::pair{a, b},
                       [](const tables::Composition& c, std::pair<char32_t, char32_t> k) {
                         return c.first != k.first ? c.first < k.first : c.second < k.second;
                       });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

bool isNfcUnstable(char32_t cp) {
  if (cp < 0x300) return false;  // the first entry of the table is U+0300
  return findRange(std::begin(tables::kNfcUnstableRanges), std::end(tables::kNfcUnstableRanges),
                   cp) != nullptr;
}

}  // namespace

const char* unicodeVersion() { return tables::kUnicodeVersion; }

DecodedCodepoint decodeUtf8(std::string_view text, size_t pos) {
  const Utf8Step s = stepUtf8(text, pos);
  return {s.cp, s.length, s.status == Utf8Status::kValid};
}

void appendUtf8(std::string& out, char32_t cp) {
  if ((cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string sanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    // Copy the ASCII / valid run as is; only ill-formed bytes are rewritten.
    const Utf8Step s = stepUtf8(text, pos);
    if (s.status == Utf8Status::kValid) {
      out.append(text.substr(pos, s.length));
    } else {
      appendUtf8(out, kReplacementChar);
    }
    pos += s.length;
  }
  return out;
}

size_t completeUtf8Prefix(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Step s = stepUtf8(text, pos);
    if (s.status == Utf8Status::kTruncated) return pos;
    pos += s.length;
  }
  return pos;
}

uint8_t codepointFlags(char32_t cp) {
  if (cp < 0x10000) return bmpFlags()[cp];
  return flagsFromTable(cp);
}

uint8_t combiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* r = findRange(std::begin(tables::kCccRanges), std::end(tables::kCccRanges), cp);
  return r ? r->ccc : 0;
}

bool isNfcQuick(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Step s = stepUtf8(text, pos);
    if (s.status != Utf8Status::kValid || isNfcUnstable(s.cp)) return false;
    pos += s.length;
  }
  return true;
}

std::string nfc(std::string_view text) {
  if (isNfcQuick(text)) return std::string(text);
  // Decompose.
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Step s = stepUtf8(text, pos);
    decomposeInto(s.cp, cps);
    pos += s.length;
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (combiningClass(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combiningClass(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t a, char32_t b) { return combiningClass(a) < combiningClass(b); });
    i = j;
  }
  // Canonical composition (UAX #15, sample code of section 14).
  if (!cps.empty()) {
    size_t starterPos = 0, outPos = 1;
    char32_t starter = cps[0];
    int lastClass = combiningClass(starter) ? 256 : 0;  // a leading non-starter blocks
    for (size_t i = 1; i < cps.size(); ++i) {
      const char32_t ch = cps[i];
      const int chClass = combiningClass(ch);
      const char32_t composite = compose(starter, ch);
      if (composite && (lastClass < chClass || lastClass == 0)) {
        cps[starterPos] = starter = composite;
        continue;
      }
      if (chClass == 0) {
        starterPos = outPos;
        starter = ch;
      }
      lastClass = chClass;
      cps[outPos++] = ch;
    }
    cps.resize(outPos);
  }
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : cps) appendUtf8(out, cp);
  return out;
}

}  // namespace es::tokenizer
