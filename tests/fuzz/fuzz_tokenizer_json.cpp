// libFuzzer target for the tokenizer.json parser (built by tools/fuzz.sh tokenizer, not by
// CMake). The input is a whole tokenizer.json. A FormatError is the expected way to reject it
// (from the parser or from BpeTokenizer's consistency checks); any other exception, a sanitizer
// report or a broken invariant is a finding. An accepted tokenizer also encodes and decodes a
// fixed text: every id is in the vocabulary, and the decoded text is the sample with at most
// some bytes left out (bytes the vocabulary has no token for are dropped, as in HF).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/errors.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_json.h"

using namespace es::tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  TokenizerSpec spec;
  try {
    spec = parseTokenizerJson(text, "fuzz-input");
  } catch (const es::FormatError&) {
    return 0;
  }
  for (const AddedToken& t : spec.addedTokens) {
    if (t.id < 0 || static_cast<size_t>(t.id) >= spec.vocab.size()) __builtin_trap();
  }
  try {
    const BpeTokenizer tokenizer(std::move(spec));
    const std::string sample = "Hello, world! 123 <|im_start|>user\n\xc3\xa9\xe4\xb8\xad ab  ";
    const std::vector<int32_t> ids = tokenizer.encode(sample, false);
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer.vocabSize()) __builtin_trap();
    }
    (void)tokenizer.encode(sample, true);
    const std::string decoded = tokenizer.decode(ids);
    size_t next = 0;  // decoded must be a subsequence of sample
    for (char c : decoded) {
      next = sample.find(c, next);
      if (next == std::string::npos) __builtin_trap();
      ++next;
    }
  } catch (const es::FormatError&) {
  }
  return 0;
}
