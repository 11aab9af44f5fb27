#pragma once
// The byte-level BPE tokenizer description of a GGUF file, from its tokenizer.ggml.* metadata:
//   tokenizer.ggml.model       must be "gpt2" (byte-level BPE; SentencePiece "llama" vocabularies
//                              are not supported and say so)
//   tokenizer.ggml.pre         the pre-tokenizer family: "gpt2" -> kGpt2, "smollm" -> kSmolLm,
//                              "llama-bpe" -> kLlama3 (+ ignoreMerges), "qwen2" -> kQwen2 (+ NFC);
//                              others an error
//   tokenizer.ggml.tokens      id -> token string (already in the GPT-2 byte alphabet)
//   tokenizer.ggml.merges      "left right" strings in rank order
//   tokenizer.ggml.token_type  1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte:
//                              control tokens become special AddedTokens, user-defined ones
//                              non-special AddedTokens (both matched before pre-tokenization)
//   tokenizer.ggml.{bos,eos,padding}_token_id, tokenizer.ggml.add_bos_token,
//   tokenizer.chat_template
#include <string>
#include <string_view>

#include "model/gguf.h"
#include "tokenizer/tokenizer_spec.h"

namespace es::model {

// llama.cpp's token_type values.
enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

// Throws FormatError naming the file and key on missing/ill-typed/inconsistent metadata and on
// an unsupported tokenizer model or pre-tokenizer.
tokenizer::TokenizerSpec tokenizerSpecFromGguf(const GgufHeader& header);
tokenizer::TokenizerSpec tokenizerSpecFromGguf(const GgufFile& file);

// The GGUF pre-tokenizer name -> family (false when unsupported).
bool preTokenizerFromGgufName(std::string_view pre, tokenizer::PreTokenizer* out);

}  // namespace es::model

#include <nlohmann/json.hpp>

namespace es::model {

// Hugging Face tokenizer files equivalent to the GGUF vocabulary, so that transformers can load
// a converted folder: a tokenizer.json (byte-level BPE model with vocab and merges, the
// pre-tokenizer of `header`'s tokenizer.ggml.pre — GPT-2 ByteLevel, SmolLM's Digits + ByteLevel,
// or the Llama-3 / Qwen2 Split regex — NFC for Qwen2, added_tokens, a bos template when
// add_bos_token) and a tokenizer_config.json (special token strings, add_bos_token, the chat
// template, `model_max_length`). FormatError on an unsupported vocabulary, as
// tokenizerSpecFromGguf.
nlohmann::json hfTokenizerJson(const GgufHeader& header);
nlohmann::json hfTokenizerConfigJson(const GgufHeader& header, int64_t model_max_length);

// The Split regexes of the Llama-3 and Qwen2 tokenizer.json files.
extern const char* const kLlama3SplitRegex;
extern const char* const kQwen2SplitRegex;

}  // namespace es::model
