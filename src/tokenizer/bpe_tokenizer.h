#pragma once
// Byte-level BPE (GPT-2 family: GPT-2, SmolLM2, Llama-3, Qwen2/Qwen3), built from a TokenizerSpec.
//
// encode: added tokens are cut out first (leftmost, then longest match; special ones only when
// parseSpecial), each remaining segment is NFC-normalised if the spec asks, split by the
// pre-tokenizer, and each pre-token's bytes are merged by rank. The merge loop works on raw bytes
// and token ids (the GPT-2 byte->unicode alphabet only exists in the vocabulary strings, and is
// undone once at construction). Results per pre-token are cached, which is what makes English
// text fast: most words repeat.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace es::tokenizer {

// GPT-2's reversible map between bytes and printable code points (bytes_to_unicode()).
char32_t byteToUnicode(uint8_t byte);
// The byte a code point of that alphabet stands for, or -1.
int byteFromUnicode(char32_t cp);
// "Hello world" -> "HelloĠworld". The inverse returns false when a character is outside the
// alphabet (out is then unspecified).
std::string bytesToByteLevel(std::string_view bytes);
bool byteLevelToBytes(std::string_view byteLevel, std::string& out);

class BpeTokenizer {
 public:
  // Throws FormatError when the spec is inconsistent (a merge whose parts or result are not in
  // the vocabulary, an added token id out of range or empty, bos/eos out of range).
  explicit BpeTokenizer(TokenizerSpec spec);
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // Token ids of `text` (no bos added: see encodePrompt). With parseSpecial = false, special
  // added tokens in the text are ordinary text; non-special added tokens always match (as in
  // Hugging Face tokenizers and llama.cpp).
  std::vector<int32_t> encode(std::string_view text, bool parseSpecial = true) const;
  // encode() with bos prepended when the spec says addBos.
  std::vector<int32_t> encodePrompt(std::string_view text, bool parseSpecial = true) const;

  // The text of `ids`; ill-formed UTF-8 in the joined bytes becomes U+FFFD (as HF's decode).
  // Throws InvalidArgument naming the id when one is outside [0, vocabSize()).
  std::string decode(std::span<const int32_t> ids, bool skipSpecial = false) const;

  // Raw bytes of one token (an added token's content). Throws InvalidArgument when out of range.
  const std::string& tokenBytes(int32_t id) const;
  int32_t vocabSize() const;
  bool isSpecial(int32_t id) const;  // special added token (false when out of range)
  // The id of a token given by its raw bytes (a vocabulary entry or an added token's content).
  std::optional<int32_t> tokenId(std::string_view bytes) const;
  const TokenizerSpec& spec() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Turns ids into text one id at a time and returns only complete UTF-8 characters, holding back
// the bytes of a character split across tokens (emoji and CJK often are). Ill-formed bytes are
// replaced by U+FFFD as soon as they are known to be ill-formed. The tokenizer must outlive it.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const BpeTokenizer& tokenizer, bool skipSpecial = false);
  // The text that became complete with this id (possibly empty).
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete character becomes U+FFFD); resets the decoder.
  std::string flush();
  size_t pendingBytes() const { return pending_.size(); }

 private:
  const BpeTokenizer* tokenizer_;
  bool skipSpecial_;
  std::string pending_;
};

}  // namespace es::tokenizer
