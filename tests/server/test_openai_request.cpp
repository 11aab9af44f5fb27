// Request bodies of POST /v1/chat/completions and /v1/completions parsed into typed requests:
// every field of the contract read with its default, and a table of bad bodies each refused
// with the status, param (the field) and message naming the field and its limit.
#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace es::server {
namespace {

constexpr const char* kModel = "tiny";

TEST(OpenAIRequest, ChatDefaults) {
  const CompletionRequest r = parseCompletionRequest(
      Endpoint::kChat, R"({"messages": [{"role": "user", "content": "hi"}]})", kModel);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_FALSE(r.maxTokens.has_value());
  EXPECT_DOUBLE_EQ(r.settings.temperature, 1.0);
  EXPECT_DOUBLE_EQ(r.settings.topP, 1.0);
  EXPECT_EQ(r.settings.topK, 0);
  EXPECT_FALSE(r.seedGiven);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.includeUsage);
}

TEST(OpenAIRequest, EveryField) {
  const CompletionRequest r = parseCompletionRequest(Endpoint::kChat, R"({
      "model": "tiny",
      "messages": [{"role": "system", "content": "be brief"},
                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]},
                   {"role": "assistant", "content": "ok"}],
      "max_tokens": 7, "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "top_k": 40, "seed": 18446744073709551615, "stop": ["x", "yz"], "stream": true,
      "stream_options": {"include_usage": true}, "n": 1})",
                                                     kModel);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.maxTokens, 7);
  EXPECT_DOUBLE_EQ(r.settings.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r.settings.topP, 0.9);
  EXPECT_EQ(r.settings.topK, 40);
  EXPECT_TRUE(r.seedGiven);
  EXPECT_EQ(r.settings.seed, 18446744073709551615ull);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.includeUsage);
}

TEST(OpenAIRequest, CompletionPromptForms) {
  EXPECT_EQ(parseCompletionRequest(Endpoint::kCompletion, R"({"prompt": "abc"})", kModel).prompt,
            "abc");
  EXPECT_EQ(parseCompletionRequest(Endpoint::kCompletion, R"({"prompt": ["abc"]})", kModel).prompt,
            "abc");
  const CompletionRequest r = parseCompletionRequest(
      Endpoint::kCompletion, R"({"prompt": "a", "stop": "END", "max_tokens": 3})", kModel);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.maxTokens, 3);
}

TEST(OpenAIRequest, NullIsAbsent) {
  const CompletionRequest r = parseCompletionRequest(
      Endpoint::kCompletion,
      R"({"prompt": "a", "max_tokens": null, "temperature": null, "stop": null, "seed": null})",
      kModel);
  EXPECT_FALSE(r.maxTokens.has_value());
  EXPECT_DOUBLE_EQ(r.settings.temperature, 1.0);
  EXPECT_FALSE(r.seedGiven);
}

struct BadBody {
  Endpoint endpoint;
  const char* body;
  int status;
  const char* param;    // "" for null
  const char* message;  // a part of the message
};

TEST(OpenAIRequest, BadBodiesNameTheField) {
  constexpr Endpoint kC = Endpoint::kChat, kT = Endpoint::kCompletion;
  const BadBody cases[] = {
      {kT, "nope", 400, "", "invalid JSON"},
      {kT, "[1]", 400, "", "must be a JSON object"},
      {kT, R"({"prompt": "a", "prompt": "b"})", 400, "", "duplicate"},
      {kT, R"({"prompt": "a", "logprobs": 1})", 400, "logprobs", "unsupported field 'logprobs'"},
      {kT, R"({"prompt": "a", "max_completion_tokens": 3})", 400, "max_completion_tokens",
       "unsupported field 'max_completion_tokens'"},
      {kC, R"({"messages": [{"role": "user", "content": "a"}], "prompt": "a"})", 400, "prompt",
       "unsupported field 'prompt'"},
      {kT, R"({"prompt": "a", "model": "gpt-4"})", 404, "model", "model 'gpt-4' does not exist"},
      {kT, R"({"prompt": "a", "model": 3})", 400, "model", "field 'model' = 3 must be a string"},
      {kT, R"({})", 400, "prompt", "field 'prompt' is required"},
      {kT, R"({"prompt": ["a", "b"]})", 400, "prompt", "list holding exactly one string"},
      {kT, R"({"prompt": [1, 2]})", 400, "prompt", "field 'prompt'"},
      {kC, R"({})", 400, "messages", "field 'messages' is required"},
      {kC, R"({"messages": []})", 400, "messages", "must be a list of 1 to 1024 messages"},
      {kC, R"({"messages": [{"role": "tool", "content": "a"}]})", 400, "messages[0].role",
       "must be \"system\", \"user\" or \"assistant\""},
      {kC, R"({"messages": [{"role": "user"}]})", 400, "messages[0].content", "is required"},
      {kC, R"({"messages": [{"role": "user", "content": "a", "name": "x"}]})", 400,
       "messages[0].name", "unsupported field 'messages[0].name'"},
      {kC, R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content",
       "must be a string or a list"},
      {kC, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages[0].content[0].type", "only text content"},
      {kT, R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens",
       "field 'max_tokens' = 0 must be an integer in [1, 1048576]"},
      {kT, R"({"prompt": "a", "max_tokens": 1.5})", 400, "max_tokens", "field 'max_tokens'"},
      {kT, R"({"prompt": "a", "max_tokens": "8"})", 400, "max_tokens", "field 'max_tokens'"},
      {kC,
       R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": 3,
           "max_completion_tokens": 4})",
       400, "max_completion_tokens", "must equal field 'max_tokens' = 3"},
      {kT, R"({"prompt": "a", "temperature": 101})", 400, "temperature",
       "field 'temperature' = 101 must be a finite number in [0, 100]"},
      {kT, R"({"prompt": "a", "temperature": -1})", 400, "temperature", "field 'temperature'"},
      {kT, R"({"prompt": "a", "temperature": "hot"})", 400, "temperature", "field 'temperature'"},
      {kT, R"({"prompt": "a", "top_p": 0})", 400, "top_p",
       "field 'top_p' = 0 must be a number in (0, 1]"},
      {kT, R"({"prompt": "a", "top_p": 1.5})", 400, "top_p", "field 'top_p'"},
      {kT, R"({"prompt": "a", "top_k": -3})", 400, "top_k",
       "field 'top_k' = -3 must be an integer in [0, 1048576]"},
      {kT, R"({"prompt": "a", "seed": -1})", 400, "seed", "field 'seed' = -1 must be an integer"},
      {kT, R"({"prompt": "a", "seed": 1.5})", 400, "seed", "field 'seed'"},
      {kT, R"({"prompt": "a", "stop": ""})", 400, "stop", "field 'stop'"},
      {kT, R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", 400, "stop", "up to 4 strings"},
      {kT, R"({"prompt": "a", "stop": [1]})", 400, "stop", "field 'stop'"},
      {kT, R"({"prompt": "a", "stream": "yes"})", 400, "stream",
       "field 'stream' = \"yes\" must be true or false"},
      {kT, R"({"prompt": "a", "stream_options": 1})", 400, "stream_options", "must be an object"},
      {kT, R"({"prompt": "a", "stream_options": {"x": 1}})", 400, "stream_options.x",
       "unsupported field 'stream_options.x'"},
      {kT, R"({"prompt": "a", "stream_options": {"include_usage": 1}})", 400,
       "stream_options.include_usage", "must be true or false"},
      {kT, R"({"prompt": "a", "n": 2})", 400, "n", "field 'n' = 2 must be 1"},
  };
  for (const BadBody& c : cases) {
    SCOPED_TRACE(c.body);
    try {
      parseCompletionRequest(c.endpoint, c.body, kModel);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), c.status);
      EXPECT_EQ(e.param(), c.param);
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      if (c.status == 404) {
        EXPECT_EQ(e.code(), "model_not_found");
      }
    }
  }
}

}  // namespace
}  // namespace es::server
