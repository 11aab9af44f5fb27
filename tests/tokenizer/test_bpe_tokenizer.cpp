// BpeTokenizer on the real Qwen3 tokenizer.json (committed under tests/data/tokenizer/qwen3, see
// SOURCE.md there) and on hand-made vocabularies; StreamingDecoder; tokenizer.json errors.
// Expected ids were looked up in the vocabulary: "Hello" 9707, "Ġworld" 1879, "user" 872,
// "Ċ" 198, "ä½łå¥½" (the bytes of 你好) 108386, and the added tokens' ids.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace es::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

const BpeTokenizer& qwen3() {
  static const BpeTokenizer tok(loadTokenizerJson(std::filesystem::path(test::test_data_dir()) /
                                                  "tokenizer" / "qwen3" / "tokenizer.json"));
  return tok;
}

TEST(Qwen3Tokenizer, SpecFromTokenizerJsonAndConfig) {
  const TokenizerSpec& s = qwen3().spec();
  EXPECT_EQ(s.preTokenizer, PreTokenizer::kQwen2);
  EXPECT_TRUE(s.nfc);
  EXPECT_FALSE(s.ignoreMerges);
  EXPECT_EQ(s.merges.size(), 151387u);
  EXPECT_EQ(s.addedTokens.size(), 26u);
  EXPECT_EQ(qwen3().vocabSize(), 151669);
  EXPECT_EQ(s.eosId, 151645);  // tokenizer_config.json: <|im_end|>
  EXPECT_EQ(s.padId, 151643);
  EXPECT_FALSE(s.bosId.has_value());
  EXPECT_FALSE(s.addBos);
  EXPECT_NE(s.chatTemplate.find("<|im_start|>"), std::string::npos);
}

TEST(Qwen3Tokenizer, KnownEncodings) {
  const BpeTokenizer& t = qwen3();
  EXPECT_EQ(t.encode("Hello world"), (Ids{9707, 1879}));
  EXPECT_EQ(t.encode("\xE4\xBD\xA0\xE5\xA5\xBD"), (Ids{108386}));  // 你好
  EXPECT_EQ(t.encode("<|im_start|>user\nHello<|im_end|>"), (Ids{151644, 872, 198, 9707, 151645}));
  EXPECT_EQ(t.encode(""), Ids{});
  // Digits one by one (Qwen2's \p{N}).
  const Ids digits = t.encode("2024");
  EXPECT_EQ(digits, (Ids{*t.tokenId("2"), *t.tokenId("0"), *t.tokenId("2"), *t.tokenId("4")}));
}

TEST(Qwen3Tokenizer, SpecialTokensOnlyWhenAsked) {
  const BpeTokenizer& t = qwen3();
  const Ids asText = t.encode("<|im_start|>", /*parseSpecial=*/false);
  EXPECT_GT(asText.size(), 1u);
  EXPECT_EQ(t.decode(asText), "<|im_start|>");
  // <think> is an added token that is not special: always matched, kept by skipSpecial.
  EXPECT_EQ(t.encode("<think>", false), (Ids{151667}));
  EXPECT_EQ(t.decode(Ids{151644, 9707, 151667, 151645}, /*skipSpecial=*/true), "Hello<think>");
  EXPECT_EQ(t.decode(Ids{151644, 9707}), "<|im_start|>Hello");
  EXPECT_TRUE(t.isSpecial(151644));
  EXPECT_FALSE(t.isSpecial(151667));
}

TEST(Qwen3Tokenizer, NfcBeforeSplitting) {
  // e + COMBINING ACUTE normalises to é first, so both spellings tokenize alike.
  EXPECT_EQ(qwen3().encode("caf"
                           "e\xCC\x81"),
            qwen3().encode("caf\xC3\xA9"));
}

TEST(Qwen3Tokenizer, RoundTrips) {
  const BpeTokenizer& t = qwen3();
  for (const std::string& text : std::vector<std::string>{
           "The quick brown fox jumps over the lazy dog.\n\n  Indented   spaces\t\ttabs\r\n",
           "def f(x):\n    return x**2  # comment\n",
           "\xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE \xF0\x9F\xA6\x99 "
           "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
           "apple\xE5\xB7\xA5\xE4\xBD\x9C"
           "1314151\xE5\xA4\xA9\xEF\xBD\x9E",
           "I'M SHOUTING, y'all'll see 'quotes' 1,234.56",
           std::string(300, 'a') + std::string(70, ' ')}) {
    EXPECT_EQ(t.decode(t.encode(text)), text) << text;
  }
}

TEST(Qwen3Tokenizer, IllFormedInputIsReplacedNotFatal) {
  const std::string bad = "ok\xFF\xC3 end\xE4";
  const Ids ids = qwen3().encode(bad);
  EXPECT_EQ(qwen3().decode(ids), sanitizeUtf8(bad));
}

TEST(Qwen3Tokenizer, DecodeRejectsOutOfRangeIds) {
  test::expectInvalidArgument([] { (void)qwen3().decode(Ids{9707, 151669}); }, "ids[1]");
  test::expectInvalidArgument([] { (void)qwen3().decode(Ids{-1}); }, "ids[0]");
}

TEST(StreamingDecoder, NeverEmitsPartialCharacters) {
  const BpeTokenizer& t = qwen3();
  // Emoji (one with ZWJ and variation selector), CJK, Khmer: several split across tokens.
  const std::string text =
      "\xF0\x9F\x9A\x80 \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F \xE5\x9C\xA8"
      "\xE5\xB7\xA5\xE4\xBD\x9C \xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B \xF0\x9F\xA6\x99!";
  const Ids ids = t.encode(text);
  StreamingDecoder dec(t);
  std::string joined;
  size_t heldBack = 0;
  for (int32_t id : ids) {
    const std::string piece = dec.push(id);
    EXPECT_EQ(completeUtf8Prefix(piece), piece.size());
    EXPECT_EQ(sanitizeUtf8(piece), piece) << "partial UTF-8 emitted for id " << id;
    heldBack += dec.pendingBytes() > 0;
    joined += piece;
  }
  joined += dec.flush();
  EXPECT_EQ(joined, text);
  EXPECT_GT(heldBack, 0u) << "the test text should split characters across tokens";
}

TEST(StreamingDecoder, FlushReplacesAnUnfinishedCharacter) {
  const BpeTokenizer& t = qwen3();
  const Ids ids = t.encode("\xF0\xA0\x80\x80");  // U+20000 (CJK Ext. B): byte tokens
  ASSERT_GT(ids.size(), 1u);
  StreamingDecoder dec(t);
  EXPECT_EQ(dec.push(ids[0]), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.pendingBytes(), 0u);
  StreamingDecoder skipping(t, /*skipSpecial=*/true);
  EXPECT_EQ(skipping.push(151644), "");
  test::expectInvalidArgument([&] { (void)dec.push(999999); }, "token id");
}

// A vocabulary of the bytes plus a few merges, to pin down merge order.
TokenizerSpec tinySpec() {
  TokenizerSpec s;
  for (int b = 0; b < 256; ++b)
    s.vocab.push_back(bytesToByteLevel(std::string(1, static_cast<char>(b))));
  s.vocab.push_back("aa");                    // 256
  s.vocab.push_back("aaa");                   // 257
  s.vocab.push_back(bytesToByteLevel(" a"));  // 258 "Ġa"
  s.merges = {{"a", "a"}, {"Ġ", "a"}, {"aa", "a"}};
  s.addedTokens = {{259, "<s>", true}, {260, "<s>x", false}};
  return s;
}

TEST(BpeTokenizer, MergeOrderAndLongestAddedToken) {
  const BpeTokenizer t(tinySpec());
  const int32_t b = 'b';
  EXPECT_EQ(t.encode("aaa"), (Ids{257}));           // a a -> aa (rank 0), then aa a -> aaa
  EXPECT_EQ(t.encode("aaaa"), (Ids{256, 256}));     // leftmost first, then the rank-0 pair again
  EXPECT_EQ(t.encode(" aab"), (Ids{' ', 256, b}));  // rank 0 "a a" beats the leftmost "Ġ a"
  EXPECT_EQ(t.encode("<s>x<s>"), (Ids{260, 259}));  // longest added token wins
  EXPECT_EQ(t.encode("<s>x<s>", false), (Ids{260, '<', 's', '>'}));  // special only when asked
  // Words up to 48 bytes take the simple merge loop, longer ones the heap: same results.
  Ids simple(19, 256), heap(49, 256);
  simple.push_back(257), heap.push_back(257);
  EXPECT_EQ(t.encode(std::string(41, 'a')), simple);
  EXPECT_EQ(t.encode(std::string(101, 'a')), heap);
}

TEST(BpeTokenizer, InconsistentSpecIsAFormatError) {
  TokenizerSpec s = tinySpec();
  s.merges.push_back({"b", "c"});  // "bc" is not in the vocabulary
  EXPECT_THROW(BpeTokenizer{s}, FormatError);
  try {
    BpeTokenizer{s};
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("merge 3 ('b' 'c'): its result"), std::string::npos)
        << e.what();
  }
  TokenizerSpec bad = tinySpec();
  bad.eosId = 5000;
  EXPECT_THROW(BpeTokenizer{bad}, FormatError);
}

std::string minimalJson(const std::string& preTokenizer,
                        const std::string& merges = R"([["a", "b"]])") {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": )" + merges +
         R"(}, "pre_tokenizer": )" + preTokenizer + "}";
}

void expectFormatError(const std::string& json, const std::string& fragment) {
  try {
    (void)parseTokenizerJson(json, "tok.json");
    ADD_FAILURE() << "no error for " << json;
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tok.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerJson, FamiliesAndMergeFormats) {
  const std::string byteLevel =
      R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  EXPECT_EQ(parseTokenizerJson(minimalJson(byteLevel), "t").preTokenizer, PreTokenizer::kGpt2);
  EXPECT_EQ(parseTokenizerJson(minimalJson(byteLevel, R"(["a b"])"), "t").merges,
            (std::vector<std::pair<std::string, std::string>>{{"a", "b"}}));
  const std::string smol =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},)" +
      byteLevel + "]}";
  EXPECT_EQ(parseTokenizerJson(minimalJson(smol), "t").preTokenizer, PreTokenizer::kSmolLm);
  const std::string llama3 =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  EXPECT_EQ(parseTokenizerJson(minimalJson(llama3), "t").preTokenizer, PreTokenizer::kLlama3);
}

TEST(TokenizerJson, ErrorsNameFileAndField) {
  const std::string byteLevel = R"({"type": "ByteLevel", "use_regex": true})";
  expectFormatError(R"({"model": {"type": "WordPiece", "vocab": {}}, "pre_tokenizer": {}})",
                    "'model.type'");
  expectFormatError(minimalJson(byteLevel, R"(["ab"])"), "'model.merges[0]'");
  expectFormatError(minimalJson(byteLevel, R"([["a", 3]])"), "'model.merges[0]'");
  expectFormatError(R"({"pre_tokenizer": {"type": "ByteLevel"}})", "'model' is missing");
  const std::string unknownRegex =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": false}]})";
  expectFormatError(minimalJson(unknownRegex), "is '\\w+', which is not one of the implemented");
  expectFormatError(
      R"({"model": {"vocab": {"a": 0, "b": 0}, "merges": []}, "pre_tokenizer": )" + byteLevel + "}",
      "reuses id 0");
  expectFormatError(
      R"({"model": {"vocab": {}, "merges": []}, "normalizer": {"type": "NFKC"}, "pre_tokenizer": )" +
          byteLevel + "}",
      "'normalizer.type'");
  expectFormatError("{\"model\": 1,", "invalid JSON");
  EXPECT_THROW((void)loadTokenizerJson("/nonexistent/tokenizer.json"), InvalidArgument);
}

// Ids are bounded by the number of entries the file lists (plus a slack), so a few bytes cannot
// size the vocabulary at 2^30 entries; an added token may repeat a vocab entry only with the
// same text.
TEST(TokenizerJson, TokenIdsAreBoundedAndConsistent) {
  const std::string byteLevel = R"({"type": "ByteLevel", "use_regex": true})";
  expectFormatError(R"({"model": {"vocab": {"a": 1073741824}, "merges": []}, "pre_tokenizer": )" +
                        byteLevel + "}",
                    "must be a token id (an integer in [0, 1025)");
  EXPECT_EQ(parseTokenizerJson(R"({"model": {"vocab": {"a": 1024}, "merges": []}, )"
                               R"("pre_tokenizer": )" +
                                   byteLevel + "}",
                               "t")
                .vocab.size(),
            1025u);
  expectFormatError(
      minimalJson(byteLevel).insert(1, R"("added_tokens": [{"id": 2, "content": "<s>"}], )"),
      "'added_tokens[0].id' is 2, the id of vocab token 'ab', but its content is '<s>'");
  // The same text under the same id (GPT-2's <|endoftext|>) is fine.
  EXPECT_EQ(parseTokenizerJson(minimalJson(byteLevel).insert(
                                   1, R"("added_tokens": [{"id": 2, "content": "ab"}], )"),
                               "t")
                .addedTokens.size(),
            1u);
}

}  // namespace
}  // namespace es::tokenizer
