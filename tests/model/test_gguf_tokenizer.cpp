// GGUF vocab metadata -> TokenizerSpec.
#include <gtest/gtest.h>

#include "common/errors.h"
#include "model/gguf_test_writer.h"
#include "model/gguf_tokenizer.h"

namespace es::model {
namespace {

using test::GgufTestWriter;

GgufTestWriter vocabFile(const std::string& pre = "smollm") {
  GgufTestWriter w;
  w.kvString("tokenizer.ggml.model", "gpt2");
  if (!pre.empty()) w.kvString("tokenizer.ggml.pre", pre);
  w.kvStringArray("tokenizer.ggml.tokens",
                  {"<|endoftext|>", "<|im_start|>", "a", "b", "ab", "Ġab", "<extra>"});
  w.kvI32Array("tokenizer.ggml.token_type", {3, 3, 1, 1, 1, 1, 4});
  w.kvStringArray("tokenizer.ggml.merges", {"a b", "Ġ ab"});
  w.kvU32("tokenizer.ggml.bos_token_id", 1);
  w.kvU32("tokenizer.ggml.eos_token_id", 0);
  w.kvU32("tokenizer.ggml.padding_token_id", 0);
  w.kvBool("tokenizer.ggml.add_bos_token", false);
  w.kvString("tokenizer.chat_template", "{{ messages }}");
  return w;
}

tokenizer::TokenizerSpec specOf(const GgufTestWriter& w) {
  const auto bytes = w.build();
  return tokenizerSpecFromGguf(parseGgufHeader(std::span<const uint8_t>(bytes), "vocab.gguf"));
}

TEST(GgufTokenizer, FillsSpec) {
  const auto spec = specOf(vocabFile());
  ASSERT_EQ(spec.vocab.size(), 7u);
  EXPECT_EQ(spec.vocab[5], "Ġab");
  ASSERT_EQ(spec.merges.size(), 2u);
  EXPECT_EQ(spec.merges[0], (std::pair<std::string, std::string>{"a", "b"}));
  EXPECT_EQ(spec.merges[1], (std::pair<std::string, std::string>{"Ġ", "ab"}));
  ASSERT_EQ(spec.addedTokens.size(), 3u);
  EXPECT_EQ(spec.addedTokens[0].id, 0);
  EXPECT_EQ(spec.addedTokens[0].content, "<|endoftext|>");
  EXPECT_TRUE(spec.addedTokens[0].special);
  EXPECT_EQ(spec.addedTokens[2].id, 6);
  EXPECT_FALSE(spec.addedTokens[2].special);  // user-defined
  EXPECT_EQ(spec.preTokenizer, tokenizer::PreTokenizer::kSmolLm);
  EXPECT_FALSE(spec.nfc);
  EXPECT_FALSE(spec.ignoreMerges);
  EXPECT_EQ(spec.bosId, 1);
  EXPECT_EQ(spec.eosId, 0);
  EXPECT_EQ(spec.padId, 0);
  EXPECT_FALSE(spec.addBos);
  EXPECT_EQ(spec.chatTemplate, "{{ messages }}");
}

TEST(GgufTokenizer, PreTokenizerFamilies) {
  EXPECT_EQ(specOf(vocabFile("gpt2")).preTokenizer, tokenizer::PreTokenizer::kGpt2);
  const auto llama3 = specOf(vocabFile("llama-bpe"));
  EXPECT_EQ(llama3.preTokenizer, tokenizer::PreTokenizer::kLlama3);
  EXPECT_TRUE(llama3.ignoreMerges);
  const auto qwen = specOf(vocabFile("qwen2"));
  EXPECT_EQ(qwen.preTokenizer, tokenizer::PreTokenizer::kQwen2);
  EXPECT_TRUE(qwen.nfc);
  try {
    specOf(vocabFile("deepseek-coder"));
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'deepseek-coder' is an unsupported pre-tokenizer"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(specOf(vocabFile("")), FormatError);
}

TEST(GgufTokenizer, Errors) {
  GgufTestWriter spm;
  spm.kvString("tokenizer.ggml.model", "llama");
  EXPECT_THROW(specOf(spm), FormatError);
  GgufTestWriter w = vocabFile();
  w.kvU32("tokenizer.ggml.unknown_token_id", 0);
  EXPECT_NO_THROW(specOf(w));
  GgufTestWriter bad;  // bos id out of range
  bad.kvString("tokenizer.ggml.model", "gpt2");
  bad.kvString("tokenizer.ggml.pre", "gpt2");
  bad.kvStringArray("tokenizer.ggml.tokens", {"a"});
  bad.kvU32("tokenizer.ggml.bos_token_id", 5);
  EXPECT_THROW(specOf(bad), FormatError);
  GgufTestWriter types;  // token_type count mismatch
  types.kvString("tokenizer.ggml.model", "gpt2");
  types.kvString("tokenizer.ggml.pre", "gpt2");
  types.kvStringArray("tokenizer.ggml.tokens", {"a", "b"});
  types.kvI32Array("tokenizer.ggml.token_type", {1});
  EXPECT_THROW(specOf(types), FormatError);
  GgufTestWriter merges;
  merges.kvString("tokenizer.ggml.model", "gpt2");
  merges.kvString("tokenizer.ggml.pre", "gpt2");
  merges.kvStringArray("tokenizer.ggml.tokens", {"a", "b"});
  merges.kvStringArray("tokenizer.ggml.merges", {"ab"});
  EXPECT_THROW(specOf(merges), FormatError);
}

}  // namespace
}  // namespace es::model
