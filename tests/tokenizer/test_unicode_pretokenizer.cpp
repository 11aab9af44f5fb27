// UTF-8 decoding (maximal-subpart replacement, as Python's errors="replace"), the category
// classes, NFC, and the hand-written pre-tokenizer rules on the cases where the regexes'
// backtracking matters. Expected values come from Python 3.11 (unicodedata, the `regex` module
// on the tokenizer.json patterns).
#include <gtest/gtest.h>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace es::tokenizer {
namespace {

std::vector<std::string> split(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> views;
  preTokenize(kind, text, views);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;

TEST(Utf8, DecodeValidAndIllFormed) {
  const std::string text = "a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80";  // a é 你 😀
  std::vector<char32_t> cps;
  for (size_t pos = 0; pos < text.size();) {
    const DecodedCodepoint d = decodeUtf8(text, pos);
    EXPECT_TRUE(d.valid);
    cps.push_back(d.cp);
    pos += d.length;
  }
  EXPECT_EQ(cps, (std::vector<char32_t>{U'a', 0xE9, 0x4F60, 0x1F600}));
  const std::string r = "\xEF\xBF\xBD";
  // Python: b"...".decode("utf-8", "replace")
  EXPECT_EQ(sanitizeUtf8("\xE0\x80"), r + r);  // overlong lead: 2 replacements
  EXPECT_EQ(sanitizeUtf8("\xF0\x9F\x98"), r);  // truncated: 1
  EXPECT_EQ(sanitizeUtf8("a\xFF"
                         "b"),
            "a" + r + "b");
  EXPECT_EQ(sanitizeUtf8("\xED\xA0\x80"), r + r + r);          // surrogate: 3
  EXPECT_EQ(sanitizeUtf8("\xF4\x90\x80\x80"), r + r + r + r);  // > U+10FFFF: 4
  EXPECT_EQ(sanitizeUtf8(text), text);
  EXPECT_EQ(completeUtf8Prefix("ab\xF0\x9F\x98"), 2u);  // holds back a truncated emoji
  EXPECT_EQ(completeUtf8Prefix("ab\xFF"), 3u);          // ill-formed is not held back
  EXPECT_EQ(completeUtf8Prefix(text), text.size());
  std::string out;
  appendUtf8(out, 0x1F600);
  appendUtf8(out, 0xD800);  // a surrogate is not encodable
  EXPECT_EQ(out, "\xF0\x9F\x98\x80" + r);
}

TEST(Unicode, Classes) {
  EXPECT_TRUE(isLetter(U'a') && isLetter(0xE9) && isLetter(0x4F60) && isLetter(0x10400));
  EXPECT_TRUE(isNumber(U'7') && isNumber(0x0663) && isNumber(0xBD) && isNumber(0x2167));
  EXPECT_TRUE(isWhitespace(U' ') && isWhitespace(U'\n') && isWhitespace(0x3000) &&
              isWhitespace(0x85) && isWhitespace(0xA0));
  EXPECT_FALSE(isLetter(U'_') || isNumber(U'_') || isWhitespace(U'_'));
  EXPECT_FALSE(isWhitespace(0x200B));  // zero width space is not White_Space
  EXPECT_FALSE(isLetter(0x1F600) || isNumber(0x1F600));
  EXPECT_STREQ(unicodeVersion(), "14.0.0");
}

TEST(Unicode, Nfc) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                                 // e + U+0301 -> é
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                              // Å (Angstrom) -> Å
  EXPECT_EQ(nfc("a\xCC\xA3\xCC\x82"), "\xE1\xBA\xAD");                     // ậ
  EXPECT_EQ(nfc("\xCC\x81"
                "e"),
            "\xCC\x81"
            "e");                                            // leading mark stays
  EXPECT_EQ(nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");  // reordered, no composite
  EXPECT_TRUE(isNfcQuick("Hello, world! \xC3\xA9\xE4\xBD\xA0"));
  EXPECT_FALSE(isNfcQuick("e\xCC\x81"));
}

TEST(PreTokenizer, Gpt2) {
  const auto k = PreTokenizer::kGpt2;
  EXPECT_EQ(split(k, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split(k, "   Hello"), (Pieces{"  ", " Hello"}));  // \s+(?!\S) leaves one space
  EXPECT_EQ(split(k, "a  "), (Pieces{"a", "  "}));            // at the end: the whole run
  EXPECT_EQ(split(k, "\tHi"), (Pieces{"\t", "Hi"}));          // a single run char: \s+
  EXPECT_EQ(split(k, "I'm it's 'Tis''s"), (Pieces{"I", "'m", " it", "'s", " '", "Tis", "''", "s"}));
  EXPECT_EQ(split(k, "x 123 !!?"), (Pieces{"x", " 123", " !!?"}));
  EXPECT_EQ(split(k, "I'M"), (Pieces{"I", "'", "M"}));  // contractions are case-sensitive here
}

TEST(PreTokenizer, Llama3AndQwen2) {
  for (auto k : {PreTokenizer::kLlama3, PreTokenizer::kQwen2}) {
    EXPECT_EQ(split(k, "I'M here"), (Pieces{"I", "'M", " here"}));
    EXPECT_EQ(split(k, "\n\n  x"), (Pieces{"\n\n", " ", " x"}));
    EXPECT_EQ(split(k, "a \n \n b"), (Pieces{"a", " \n \n", " b"}));  // \s*[\r\n]+
    EXPECT_EQ(split(k, "  ("), (Pieces{" ", " ("}));
    EXPECT_EQ(split(k, "x);\n\ny"), (Pieces{"x", ");\n\n", "y"}));  // [\r\n]* after punctuation
    EXPECT_EQ(split(k, "$hello 'world"), (Pieces{"$hello", " '", "world"}));
    EXPECT_EQ(split(k, "\n=\tz"), (Pieces{"\n", "=", "\tz"}));
  }
  EXPECT_EQ(split(PreTokenizer::kLlama3, "1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split(PreTokenizer::kQwen2, "1234"), (Pieces{"1", "2", "3", "4"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, " 12"), (Pieces{" ", "12"}));
}

TEST(PreTokenizer, SmolLmIsolatesDigitsFirst) {
  // Digits(individual_digits) splits first, so the GPT-2 lookahead sees a piece boundary.
  EXPECT_EQ(split(PreTokenizer::kSmolLm, "a  12 b"), (Pieces{"a", "  ", "1", "2", " b"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "a  12 b"), (Pieces{"a", " ", " 12", " b"}));
}

TEST(PreTokenizer, IllFormedBytesAreKept) {
  const std::string text = "ab\xFF\xFE cd\xE4";
  std::string joined;
  for (const auto& p : split(PreTokenizer::kQwen2, text)) joined += p;
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace es::tokenizer
