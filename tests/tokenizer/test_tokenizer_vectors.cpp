// llama.cpp's tokenizer test vectors (ggml-vocab-{qwen2,gpt-2,llama-bpe}.gguf with .inp/.out,
// expected ids produced by Hugging Face tokenizers), fetched by tools/fetch_tokenizer_vectors.sh
// from the pinned llama-cpp-python sdist. Missing files are a failure, not a skip: CI runs the
// fetch script first.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_test_support.h"

namespace es::tokenizer {
namespace {

std::string idsText(const std::vector<int32_t>& ids) {
  std::ostringstream os;
  for (int32_t id : ids) os << id << ' ';
  return os.str();
}

void checkVocab(const std::string& name, size_t expectedCases) {
  const std::filesystem::path gguf = test::vectorsDir() / ("ggml-vocab-" + name + ".gguf");
  ASSERT_TRUE(std::filesystem::exists(gguf))
      << gguf << " is missing: run tools/fetch_tokenizer_vectors.sh (or set ES_TOKENIZER_VECTORS)";
  const BpeTokenizer tok(test::specFromVocabGguf(gguf));
  const std::vector<test::VocabTest> cases = test::readVocabTests(gguf);
  ASSERT_EQ(cases.size(), expectedCases);
  size_t passed = 0;
  for (const test::VocabTest& c : cases) {
    const std::vector<int32_t> ids = tok.encode(c.text, /*parseSpecial=*/false);
    EXPECT_EQ(ids, c.ids) << name << " input '" << c.text << "'\n  got      " << idsText(ids)
                          << "\n  expected " << idsText(c.ids);
    passed += ids == c.ids;
    // Byte-level BPE is lossless on valid UTF-8 (modulo NFC, which these inputs already are).
    if (nfc(c.text) == c.text) {
      EXPECT_EQ(tok.decode(c.ids), c.text) << name << " '" << c.text << "'";
    }
  }
  std::cout << "[ vectors  ] " << name << ": " << passed << "/" << cases.size()
            << " inputs match\n";
}

TEST(TokenizerVectors, Qwen2) { checkVocab("qwen2", 46); }
// Qwen3 shares Qwen2's vocabulary, merges and pre-tokenizer: the same expected ids through the
// committed tokenizer.json checks the JSON loader end to end.
TEST(TokenizerVectors, Qwen2InputsThroughQwen3TokenizerJson) {
  const std::filesystem::path gguf = test::vectorsDir() / "ggml-vocab-qwen2.gguf";
  ASSERT_TRUE(std::filesystem::exists(gguf.string() + ".inp"))
      << gguf << ".inp is missing: run tools/fetch_tokenizer_vectors.sh";
  const BpeTokenizer tok(loadTokenizerJson(std::filesystem::path(test::test_data_dir()) /
                                           "tokenizer" / "qwen3" / "tokenizer.json"));
  for (const test::VocabTest& c : test::readVocabTests(gguf))
    EXPECT_EQ(tok.encode(c.text, false), c.ids) << "input '" << c.text << "'";
}

TEST(TokenizerVectors, Gpt2) { checkVocab("gpt-2", 46); }
TEST(TokenizerVectors, Llama3) { checkVocab("llama-bpe", 46); }

}  // namespace
}  // namespace es::tokenizer
