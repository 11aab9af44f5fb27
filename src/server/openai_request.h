#pragma once
// An OpenAI request body (POST /v1/chat/completions or /v1/completions) parsed and validated
// into a typed request. Pure functions: no tokenizer, no engine, no sockets.
//
// Every field of docs/server.md is read here and nowhere else; any other field is an ApiError
// 400 "request: unsupported field 'logprobs' ..." whose param is the field. A JSON null counts as
// an absent field (clients send null for "not set"). The sampling fields are read and
// bounded by runtime/request_settings.h (the CLI's flags and request files use the same
// parser), so a value gets the same answer and message as `edgespec generate` gives it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/request_settings.h"
#include "tokenizer/chat_template.h"

namespace es::server {

enum class Endpoint { kChat, kCompletion };

// At most this many stop strings (OpenAI's limit), each 1 to kMaxStopBytes bytes.
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopBytes = 256;
// Messages of one chat request.
inline constexpr size_t kMaxMessages = 1024;

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::vector<tokenizer::ChatMessage> messages = {};  // chat
  std::string prompt = {};                            // completions
  // max_tokens (or chat's max_completion_tokens); nullopt: what fits in the context.
  std::optional<int64_t> maxTokens = std::nullopt;
  // temperature, top_k, top_p, seed (settings.maxNewTokens is not used: see maxTokens).
  // Defaults: temperature 1 (OpenAI's), top_p 1, top_k 0 (off).
  runtime::RequestSettings settings = {.temperature = 1.0};
  bool seedGiven = false;  // false: the server draws a fresh seed
  std::vector<std::string> stop = {};
  bool stream = false;
  bool includeUsage = false;  // stream_options.include_usage
};

// Parses `body` for `endpoint`. `servedModel`: the name the server answers to; a "model" field
// naming another is an ApiError 404 code "model_not_found". Everything else wrong is an
// ApiError 400 whose param names the field.
CompletionRequest parseCompletionRequest(Endpoint endpoint, std::string_view body,
                                         std::string_view servedModel);

}  // namespace es::server
