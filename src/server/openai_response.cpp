#include "server/openai_response.h"

#include <random>

namespace es::server {

using nlohmann::json;

std::string newCompletionId(Endpoint endpoint) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  constexpr char kHex[] = "0123456789abcdef";
  std::string id = endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

json usageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.promptTokens},
          {"completion_tokens", usage.completionTokens},
          {"total_tokens", usage.promptTokens + usage.completionTokens}};
}

namespace {

json headerJson(const AnswerHeader& h, bool chunk) {
  const char* object = h.endpoint == Endpoint::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

json reasonJson(std::optional<std::string_view> reason) {
  return reason ? json(std::string(*reason)) : json(nullptr);
}

}  // namespace

json completionJson(const AnswerHeader& header, const std::string& text,
                    std::string_view finishReason, const Usage& usage) {
  json out = headerJson(header, false);
  json choice = {{"index", 0}, {"finish_reason", std::string(finishReason)}};
  if (header.endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  out["choices"] = json::array({choice});
  out["usage"] = usageJson(usage);
  return out;
}

json chunkJson(const AnswerHeader& header, const std::optional<std::string>& text,
               std::optional<std::string_view> finishReason, bool role) {
  json out = headerJson(header, true);
  json choice = {{"index", 0}, {"finish_reason", reasonJson(finishReason)}, {"logprobs", nullptr}};
  if (header.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (text) delta["content"] = *text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text.value_or("");
  }
  out["choices"] = json::array({choice});
  return out;
}

json usageChunkJson(const AnswerHeader& header, const Usage& usage) {
  json out = headerJson(header, true);
  out["choices"] = json::array();
  out["usage"] = usageJson(usage);
  return out;
}

json modelsJson(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "edgespec"}}})}};
}

json errorJson(const ApiError& error) {
  const auto orNull = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error",
           {{"message", error.what()},
            {"type", error.type()},
            {"param", orNull(error.param())},
            {"code", orNull(error.code())}}}};
}

std::string sseEvent(const json& event) {
  // Invalid UTF-8 cannot occur (the decoder emits whole characters, U+FFFD otherwise); replace
  // rather than throw all the same.
  return "data: " + event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace es::server
