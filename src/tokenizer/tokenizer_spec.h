#pragma once
// Everything a byte-level BPE tokenizer needs, independent of the file it came from: filled from
// a Hugging Face tokenizer.json (tokenizer/tokenizer_json.*) or from GGUF vocab metadata
// (tokenizer.ggml.*, model/gguf_tokenizer.*), consumed by tokenizer/bpe_tokenizer.*.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace es::tokenizer {

// The pre-tokenizer split rule (the regex families in use by the supported models). Each is
// implemented by hand over Unicode categories, as the regex engines of the standard library do
// not know \p{L} / \p{N}.
enum class PreTokenizer : uint8_t {
  kGpt2,    // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // Llama-3: case-insensitive contractions, [^\r\n\p{L}\p{N}]?\p{L}+, \p{N}{1,3}, ...
  kQwen2,   // Qwen2/Qwen3: as Llama-3 but single digits \p{N}
  kSmolLm,  // SmolLM/SmolLM2: every \p{N} isolated (Digits, individual), then the GPT-2 rule on
            // the rest; GGUF tokenizer.ggml.pre "smollm"
};

struct AddedToken {
  int32_t id = 0;
  std::string content;  // UTF-8, matched literally in the input before pre-tokenization
  bool special = true;  // special tokens are skipped by decode(skipSpecial = true)
};

struct TokenizerSpec {
  std::vector<std::string> vocab;  // id -> token string in the byte-level alphabet (GPT-2 map)
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  std::vector<AddedToken> addedTokens;
  PreTokenizer preTokenizer = PreTokenizer::kGpt2;
  bool nfc = false;  // apply Unicode NFC normalisation before splitting
  std::optional<int32_t> bosId, eosId, padId;
  bool addBos = false;       // prepend bos when encoding a prompt
  std::string chatTemplate;  // the model's Jinja chat template, if shipped
  // A pre-token that is itself in the vocabulary becomes that token without running the merges
  // (tokenizer.json model.ignore_merges; Llama-3, GGUF tokenizer.ggml.pre "llama-bpe"/"llama3").
  bool ignoreMerges = false;
};

}  // namespace es::tokenizer
