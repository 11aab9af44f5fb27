// The answers' JSON and Server-Sent Events framing in OpenAI's shapes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/openai_response.h"

namespace es::server {
namespace {

using nlohmann::json;

const AnswerHeader kChat{
    .endpoint = Endpoint::kChat, .id = "chatcmpl-1", .created = 5, .model = "m"};
const AnswerHeader kText{
    .endpoint = Endpoint::kCompletion, .id = "cmpl-1", .created = 5, .model = "m"};

TEST(OpenAIResponse, Ids) {
  const std::string a = newCompletionId(Endpoint::kChat), b = newCompletionId(Endpoint::kChat);
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(newCompletionId(Endpoint::kCompletion).rfind("cmpl-", 0), 0u);
  EXPECT_NE(a, b);
}

TEST(OpenAIResponse, WholeAnswers) {
  const json chat = completionJson(kChat, "hi", "stop", {.promptTokens = 3, .completionTokens = 2});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["id"], "chatcmpl-1");
  EXPECT_EQ(chat["model"], "m");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chat["usage"]["total_tokens"], 5);
  const json text =
      completionJson(kText, "x", "length", {.promptTokens = 1, .completionTokens = 1});
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "x");
  EXPECT_EQ(text["choices"][0]["finish_reason"], "length");
}

TEST(OpenAIResponse, Chunks) {
  const json first = chunkJson(kChat, std::string(), std::nullopt, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json last = chunkJson(kChat, std::nullopt, "stop");
  EXPECT_TRUE(last["choices"][0]["delta"].is_object());
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const json text = chunkJson(kText, std::string("ab"), std::nullopt);
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "ab");
  const json usage = usageChunkJson(kChat, {.promptTokens = 2, .completionTokens = 3});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
}

TEST(OpenAIResponse, SseFraming) {
  const std::string event = sseEvent(json{{"a", "line\nbreak"}});
  EXPECT_EQ(event, "data: {\"a\":\"line\\nbreak\"}\n\n");  // one line: newlines are escaped
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(OpenAIResponse, ErrorObjects) {
  const json e = errorJson(badRequest("bad top_k", "top_k"));
  EXPECT_EQ(e["error"]["message"], "bad top_k");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "top_k");
  EXPECT_TRUE(e["error"]["code"].is_null());
  const json m = modelsJson("m", 7);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "m");
  EXPECT_EQ(m["data"][0]["owned_by"], "edgespec");
}

}  // namespace
}  // namespace es::server
