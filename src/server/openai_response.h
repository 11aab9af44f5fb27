#pragma once
// The JSON the server answers with, in OpenAI's shapes: whole answers, streamed chunks (as
// Server-Sent Events lines "data: {json}\n\n", ended by "data: [DONE]\n\n"), the model list and
// error objects.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace es::server {

struct Usage {
  int64_t promptTokens = 0;
  int64_t completionTokens = 0;
};

// What every answer of one request carries: its id ("chatcmpl-…" / "cmpl-…"), creation time
// (Unix seconds) and the served model's name.
struct AnswerHeader {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;
  int64_t created = 0;
  std::string model;
};

// A fresh id for `endpoint`: its prefix and 24 random hex digits.
std::string newCompletionId(Endpoint endpoint);

nlohmann::json usageJson(const Usage& usage);

// The whole answer: "chat.completion" with choices[0].message, or "text_completion" with
// choices[0].text; finish_reason "stop" or "length"; usage.
nlohmann::json completionJson(const AnswerHeader& header, const std::string& text,
                              std::string_view finishReason, const Usage& usage);

// One streamed chunk: chat's delta {role?, content?} or a completion's text. `role` sets the
// chat delta's role (the first chunk); finishReason null while the answer goes on.
nlohmann::json chunkJson(const AnswerHeader& header, const std::optional<std::string>& text,
                         std::optional<std::string_view> finishReason, bool role = false);

// The streamed usage chunk (stream_options.include_usage): empty choices, usage.
nlohmann::json usageChunkJson(const AnswerHeader& header, const Usage& usage);

// {"object": "list", "data": [{"id": model, "object": "model", "created", "owned_by":
// "edgespec"}]}.
nlohmann::json modelsJson(const std::string& model, int64_t created);

// {"error": {"message", "type", "param", "code"}}, empty param and code as null.
nlohmann::json errorJson(const ApiError& error);

// "data: <json>\n\n" and the stream's last line "data: [DONE]\n\n".
std::string sseEvent(const nlohmann::json& event);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace es::server
