#pragma once
// TEST HELPERS for the tokenizer tests (not library code):
//   * specFromVocabGguf: a TokenizerSpec from the tokenizer.ggml.* metadata of llama.cpp's
//     ggml-vocab-*.gguf test vocabularies, read with the committed GGUF reader (model/gguf.h).
//     It exists because model/gguf_tokenizer.* was not committed yet when these tests were
//     written; once it is, tests can switch to model::tokenizerSpecFromGguf.
//   * readVocabTests: llama.cpp's .inp/.out pairs (inputs separated by
//     "\n__ggml_vocab_test__\n", one line of space-separated ids per input), parsed as
//     llama.cpp's tests/test-tokenizer-0.cpp does.
//   * vectorsDir: where tools/fetch_tokenizer_vectors.sh put those files.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "model/gguf.h"
#include "support/test_util.h"
#include "tokenizer/tokenizer_spec.h"

namespace es::test {

inline std::string readWholeFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ES_THROW(InvalidArgument, "cannot open '", path.string(), "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ES_TOKENIZER_VECTORS, else <repo>/build-vectors/tokenizer (the fetch script's default).
inline std::filesystem::path vectorsDir() {
  if (const char* env = std::getenv("ES_TOKENIZER_VECTORS"); env && *env) return env;
  return std::filesystem::path(test_data_dir()) / ".." / ".." / "build-vectors" / "tokenizer";
}

inline tokenizer::TokenizerSpec specFromVocabGguf(const std::filesystem::path& path) {
  const model::GgufFile file = model::GgufFile::open(path);
  const model::GgufHeader& h = file.header();
  if (h.getString("tokenizer.ggml.model") != "gpt2")
    ES_THROW(FormatError, path.string(), ": not a byte-level BPE vocabulary");
  tokenizer::TokenizerSpec spec;
  const std::string pre = h.getString("tokenizer.ggml.pre");
  if (pre == "gpt-2" || pre == "gpt2") {
    spec.preTokenizer = tokenizer::PreTokenizer::kGpt2;
  } else if (pre == "llama-bpe" || pre == "llama3") {
    spec.preTokenizer = tokenizer::PreTokenizer::kLlama3;
    spec.ignoreMerges = true;  // as llama.cpp and Llama-3's tokenizer.json
  } else if (pre == "qwen2") {
    spec.preTokenizer = tokenizer::PreTokenizer::kQwen2;
    spec.nfc = true;  // Qwen2's tokenizer.json normalizer
  } else if (pre == "smollm") {
    spec.preTokenizer = tokenizer::PreTokenizer::kSmolLm;
  } else {
    ES_THROW(FormatError, path.string(), ": pre-tokenizer '", pre,
             "' not handled by the test helper");
  }
  spec.vocab = h.getStringArray("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = h.getIntArray("tokenizer.ggml.token_type");
  for (size_t id = 0; id < spec.vocab.size() && id < types.size(); ++id) {
    if (types[id] == 3 || types[id] == 4) {  // control -> special, user-defined -> plain added
      spec.addedTokens.push_back({static_cast<int32_t>(id), spec.vocab[id], types[id] == 3});
    }
  }
  for (const std::string& m : h.getStringArray("tokenizer.ggml.merges")) {
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) ES_THROW(FormatError, path.string(), ": merge '", m, "'");
    spec.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  const auto id = [&](const char* key) -> std::optional<int32_t> {
    if (auto v = h.optInt(key, 0, INT32_MAX)) return static_cast<int32_t>(*v);
    return std::nullopt;
  };
  spec.bosId = id("tokenizer.ggml.bos_token_id");
  spec.eosId = id("tokenizer.ggml.eos_token_id");
  spec.padId = id("tokenizer.ggml.padding_token_id");
  return spec;
}

struct VocabTest {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::vector<VocabTest> readVocabTests(const std::filesystem::path& gguf) {
  const std::string inp = readWholeFile(gguf.string() + ".inp");
  const std::string out = readWholeFile(gguf.string() + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(inp.substr(pos));
      break;
    }
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<VocabTest> tests;
  std::istringstream lines(out);
  std::string line;
  for (size_t i = 0; std::getline(lines, line); ++i) {
    if (i >= inputs.size()) ES_THROW(FormatError, gguf.string(), ".out has more lines than inputs");
    VocabTest t{inputs[i], {}};
    std::istringstream ids(line);
    for (int64_t v; ids >> v;) t.ids.push_back(static_cast<int32_t>(v));
    tests.push_back(std::move(t));
  }
  if (tests.size() != inputs.size())
    ES_THROW(FormatError, gguf.string(), ": ", inputs.size(), " inputs but ", tests.size(),
             " outputs");
  return tests;
}

}  // namespace es::test
