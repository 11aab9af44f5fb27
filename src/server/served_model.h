#pragma once
// What the server needs of the loaded model to turn requests into token ids and tokens back
// into text: its tokenizer, chat template, stop tokens, name and context length.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace es::server {

struct ServedModel {
  std::string name;  // what /v1/models lists and a request's "model" must equal
  const tokenizer::BpeTokenizer* tokenizer = nullptr;
  // nullopt: the model ships no chat template, and chat requests are refused.
  std::optional<tokenizer::ChatTemplate> chatTemplate = std::nullopt;
  std::vector<int32_t> stopTokens = {};  // eos and end-of-turn tokens
  // Tokens of prompt + answer one request may use (the engine's KV capacity and RoPE tables
  // less what a speculative step writes ahead).
  int64_t context = 0;
};

}  // namespace es::server
