#include "server/openai_request.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "common/json.h"
#include "server/api_error.h"

namespace es::server {
namespace {

using nlohmann::json;
using runtime::FieldNaming;
using runtime::RequestField;

constexpr const char* kWhere = "request";

// A value as an error shows it: a body may hold megabytes in one field.
std::string shown(const json& value) {
  constexpr size_t kMax = 64;
  const std::string text = value.dump();
  return text.size() <= kMax ? text : text.substr(0, kMax) + "...";
}

[[noreturn]] void fieldError(const std::string& field, const json& value,
                             const std::string& requirement) {
  throw badRequest(
      detail::concat(kWhere, ": field '", field, "' = ", shown(value), " ", requirement), field);
}

[[noreturn]] void missingField(const std::string& field, const std::string& what) {
  throw badRequest(detail::concat(kWhere, ": field '", field, "' is required (", what, ")"), field);
}

// The fields each endpoint takes; any other is refused by name.
const std::vector<std::string>& knownFields(Endpoint endpoint) {
  static const std::vector<std::string> kChat = {
      "model",       "messages", "max_tokens",     "max_completion_tokens",
      "temperature", "top_p",    "top_k",          "seed",
      "stop",        "stream",   "stream_options", "n"};
  static const std::vector<std::string> kCompletion = {
      "model", "prompt", "max_tokens", "temperature",    "top_p", "top_k",
      "seed",  "stop",   "stream",     "stream_options", "n"};
  return endpoint == Endpoint::kChat ? kChat : kCompletion;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

[[noreturn]] void unsupported(const std::string& field, const std::vector<std::string>& known) {
  throw badRequest(detail::concat(kWhere, ": unsupported field ", quoteShort(field),
                                  " (supported: ", joined(known), ")"),
                   field);
}

// A sampling field through runtime/request_settings.h: the same parse and bound as the CLI's
// flag. The earlier fields are already valid, so a failing validation is this field's.
void setSetting(runtime::RequestSettings& settings, RequestField field, const json& value) {
  const std::string key(runtime::requestFieldKey(field));
  try {
    runtime::setRequestField(settings, field, value.dump(), kWhere, FieldNaming::kKey);
    runtime::validateRequestSettings(settings, kWhere, FieldNaming::kKey);
  } catch (const InvalidArgument& e) {
    throw badRequest(e.what(), key);
  }
}

// max_tokens / max_completion_tokens: max_new_tokens's parse and bound under the OpenAI name.
int64_t maxTokensField(const std::string& field, const json& value) {
  runtime::RequestSettings settings;
  try {
    runtime::setRequestField(settings, RequestField::kMaxNewTokens, value.dump(), kWhere,
                             FieldNaming::kKey);
    runtime::validateRequestSettings(settings, kWhere, FieldNaming::kKey);
  } catch (const InvalidArgument&) {
    fieldError(field, value, runtime::requestFieldRequirement(RequestField::kMaxNewTokens));
  }
  return settings.maxNewTokens;
}

bool boolField(const std::string& field, const json& value) {
  if (!value.is_boolean()) fieldError(field, value, "must be true or false");
  return value.get<bool>();
}

std::vector<std::string> stopField(const json& value) {
  const char* requirement = "must be a string or a list of up to 4 strings of 1 to 256 bytes";
  std::vector<std::string> stops;
  if (value.is_string()) {
    stops.push_back(value.get<std::string>());
  } else if (value.is_array() && value.size() <= kMaxStopStrings) {
    for (const json& s : value) {
      if (!s.is_string()) fieldError("stop", value, requirement);
      stops.push_back(s.get<std::string>());
    }
  } else {
    fieldError("stop", value, requirement);
  }
  for (const std::string& s : stops) {
    if (s.empty() || s.size() > kMaxStopBytes) fieldError("stop", value, requirement);
  }
  return stops;
}

// A message's content: a string, or a list of {"type": "text", "text": string} parts (joined
// with newlines).
std::string contentField(const std::string& field, const json& value) {
  if (value.is_string()) return value.get<std::string>();
  const char* requirement = "must be a string or a list of {\"type\": \"text\", \"text\": string}";
  if (!value.is_array()) fieldError(field, value, requirement);
  std::string text;
  for (size_t i = 0; i < value.size(); ++i) {
    const json& part = value[i];
    const std::string name = field + "[" + std::to_string(i) + "]";
    if (!part.is_object()) fieldError(name, part, requirement);
    for (const auto& [key, v] : part.items()) {
      if (key != "type" && key != "text") unsupported(name + "." + key, {"type", "text"});
    }
    if (!part.contains("type") || part["type"] != "text") {
      fieldError(name + ".type", part.value("type", json()),
                 "must be \"text\" (only text content is supported)");
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      fieldError(name + ".text", part.value("text", json()), "must be a string");
    }
    if (i > 0) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<tokenizer::ChatMessage> messagesField(const json& value) {
  if (!value.is_array() || value.empty() || value.size() > kMaxMessages) {
    fieldError("messages", value,
               detail::concat("must be a list of 1 to ", kMaxMessages,
                              " messages {\"role\", \"content\"}"));
  }
  std::vector<tokenizer::ChatMessage> messages;
  for (size_t i = 0; i < value.size(); ++i) {
    const json& m = value[i];
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fieldError(name, m, "must be an object {\"role\", \"content\"}");
    for (const auto& [key, v] : m.items()) {
      if (key != "role" && key != "content") unsupported(name + "." + key, {"role", "content"});
    }
    if (!m.contains("role")) missingField(name + ".role", "system, user or assistant");
    const json& role = m["role"];
    if (role != "system" && role != "user" && role != "assistant") {
      fieldError(name + ".role", role, "must be \"system\", \"user\" or \"assistant\"");
    }
    if (!m.contains("content")) missingField(name + ".content", "a string");
    messages.push_back({.role = role.get<std::string>(),
                        .content = contentField(name + ".content", m["content"])});
  }
  return messages;
}

std::string promptField(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array() && value.size() == 1 && value[0].is_string()) {
    return value[0].get<std::string>();
  }
  fieldError("prompt", value, "must be a string or a list holding exactly one string");
}

}  // namespace

CompletionRequest parseCompletionRequest(Endpoint endpoint, std::string_view body,
                                         std::string_view servedModel) {
  json doc;
  try {
    doc = parseJsonStrict(body, "request body");
  } catch (const FormatError& e) {
    throw badRequest(e.what(), {});
  }
  if (!doc.is_object()) {
    throw badRequest(
        detail::concat(kWhere, ": the body must be a JSON object (it is ", doc.type_name(), ")"),
        {});
  }
  const std::vector<std::string>& known = knownFields(endpoint);
  for (const auto& [key, value] : doc.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) unsupported(key, known);
  }
  // A field present and not null.
  const auto given = [&doc](const char* key) { return doc.contains(key) && !doc[key].is_null(); };

  CompletionRequest r{.endpoint = endpoint};
  if (given("model")) {
    const json& model = doc["model"];
    if (!model.is_string()) fieldError("model", model, "must be a string");
    if (model.get<std::string>() != servedModel) {
      throw ApiError(
          404, "not_found_error",
          detail::concat(kWhere, ": model ", quoteShort(model.get<std::string>()),
                         " does not exist (this server serves ", quoteShort(servedModel), ")"),
          "model", "model_not_found");
    }
  }
  if (endpoint == Endpoint::kChat) {
    if (!given("messages")) missingField("messages", "a list of {\"role\", \"content\"}");
    r.messages = messagesField(doc["messages"]);
  } else {
    if (!given("prompt")) missingField("prompt", "a string");
    r.prompt = promptField(doc["prompt"]);
  }
  if (given("max_tokens")) r.maxTokens = maxTokensField("max_tokens", doc["max_tokens"]);
  if (given("max_completion_tokens")) {
    const int64_t n = maxTokensField("max_completion_tokens", doc["max_completion_tokens"]);
    if (r.maxTokens && *r.maxTokens != n) {
      throw badRequest(
          detail::concat(kWhere, ": field 'max_completion_tokens' = ", n,
                         " must equal field 'max_tokens' = ", *r.maxTokens, " when both are given"),
          "max_completion_tokens");
    }
    r.maxTokens = n;
  }
  for (const RequestField field : {RequestField::kTemperature, RequestField::kTopP,
                                   RequestField::kTopK, RequestField::kSeed}) {
    const std::string key(runtime::requestFieldKey(field));
    if (given(key.c_str())) setSetting(r.settings, field, doc[key]);
  }
  r.seedGiven = given("seed");
  if (given("stop")) r.stop = stopField(doc["stop"]);
  if (given("stream")) r.stream = boolField("stream", doc["stream"]);
  if (given("stream_options")) {
    const json& options = doc["stream_options"];
    if (!options.is_object()) fieldError("stream_options", options, "must be an object");
    for (const auto& [key, value] : options.items()) {
      if (key != "include_usage") unsupported("stream_options." + key, {"include_usage"});
      if (!value.is_null()) r.includeUsage = boolField("stream_options.include_usage", value);
    }
  }
  if (given("n")) {
    const json& n = doc["n"];
    if (!n.is_number_integer() || n.get<int64_t>() != 1) {
      fieldError("n", n, "must be 1 (one choice per request)");
    }
  }
  return r;
}

}  // namespace es::server
