// The HTTP server end to end on the CPU backend, in-process: the tiny qwen3 fixture (as a GGUF,
// so it carries a tokenizer and a chat template) behind an EngineLoop and an HttpServer on a
// free port, asked with cpp-httplib's client. Whole and streamed answers agree (greedy), a stop
// string cuts the answer, errors are OpenAI error objects, a client that leaves mid-stream
// cancels its request and its pages return, and drain() ends run().
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_fixture.h"
#include "model/gguf_tokenizer.h"
#include "model/safetensors_test_writer.h"
#include "runtime/engine_builder.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/served_model.h"
#include "support/cli_test_util.h"
#include "support/test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace es::server {
namespace {

using nlohmann::json;

constexpr int64_t kContext = 256;

class ServerTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto path = tmp_ / "tiny.gguf";
    test::writeBytes(path, test::ggufFromFolder(test::test_data_dir() + "/models/qwen3").build());
    engine_ = runtime::buildEngine({.model = path,
                                    .backend = "cpu",
                                    .maxBatch = 2,
                                    .longestPrompt = kContext - 1,
                                    .longestRequest = kContext,
                                    .prefixCachePages = 4,
                                    .maxQueued = 4});
    tok_ = std::make_unique<tokenizer::BpeTokenizer>(
        model::tokenizerSpecFromGguf(model::GgufFile::open(path)));
    // No stop tokens: every answer runs to its max_tokens unless a stop string ends it.
    served_ = {.name = "tiny",
               .tokenizer = tok_.get(),
               .chatTemplate = tokenizer::ChatTemplate::fromTemplateText(tok_->spec().chatTemplate),
               .stopTokens = {},
               .context = kContext};
    loop_ = std::make_unique<EngineLoop>(engine_->decoder(), engine_->cache());
    http_ = std::make_unique<HttpServer>(
        served_, *loop_,
        ServerOptions{.host = "127.0.0.1", .port = 0, .maxBodyBytes = 4096, .threads = 8});
    port_ = http_->bind();
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { http_->run(); });
  }

  void TearDown() override {
    if (thread_.joinable()) {
      http_->drain();
      thread_.join();
    }
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }

  json post(const std::string& path, const json& body, int expectStatus = 200) {
    httplib::Client c = client();
    const httplib::Result r = c.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << httplib::to_string(r.error());
    if (!r) return {};
    EXPECT_EQ(r->status, expectStatus) << r->body;
    return json::parse(r->body);
  }

  // The SSE events of a streamed answer (the JSON of each "data:" line; [DONE] as a string).
  std::vector<json> stream(const std::string& path, json body) {
    body["stream"] = true;
    httplib::Client c = client();
    const httplib::Result r = c.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    std::vector<json> events;
    size_t at = 0;
    while (at < r->body.size()) {
      const size_t end = r->body.find("\n\n", at);
      EXPECT_NE(end, std::string::npos) << "an event without its blank line";
      if (end == std::string::npos) break;
      const std::string line = r->body.substr(at, end - at);
      EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
      const std::string data = line.substr(6);
      events.push_back(data == "[DONE]" ? json(data) : json::parse(data));
      at = end + 2;
    }
    return events;
  }

  // Polls /metrics until `pred` holds for the named gauges (or 10 s pass).
  std::string metrics() {
    httplib::Client c = client();
    const httplib::Result r = c.Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    return r ? r->body : std::string();
  }
  static double metric(const std::string& text, const std::string& name) {
    const size_t at = text.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + name.size() + 2));
  }

  test::TempDir tmp_;
  std::unique_ptr<runtime::Engine> engine_;
  std::unique_ptr<tokenizer::BpeTokenizer> tok_;
  ServedModel served_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<HttpServer> http_;
  int32_t port_ = 0;
  std::thread thread_;
};

TEST_F(ServerTest, LightRoutes) {
  httplib::Client c = client();
  httplib::Result r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["status"], "ok");
  r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "tiny");
  r = c.Get("/nowhere");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "not_found_error");
  r = c.Post("/health", "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  r = c.Post("/v1/completions", std::string(5000, ' '), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("4096 bytes"), std::string::npos) << r->body;
}

TEST_F(ServerTest, WholeAndStreamedAnswersAgree) {
  const json body = {{"prompt", "hello there"}, {"max_tokens", 6}, {"temperature", 0}};
  const json whole = post("/v1/completions", body);
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["completion_tokens"], 6);
  EXPECT_EQ(whole["usage"]["prompt_tokens"], tok_->encodePrompt("hello there", false).size());
  const std::string text = whole["choices"][0]["text"];
  EXPECT_EQ(post("/v1/completions", body)["choices"][0]["text"].get<std::string>(),
            text);  // greedy: the same

  json streamed = body;
  streamed["stream_options"] = {{"include_usage", true}};
  const std::vector<json> events = stream("/v1/completions", streamed);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json& usage = events[events.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  EXPECT_EQ(events[events.size() - 3]["choices"][0]["finish_reason"], "length");
  std::string joined;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    EXPECT_EQ(events[i]["id"], events[0]["id"]);
    joined += events[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(joined, text);
}

TEST_F(ServerTest, ChatAnswers) {
  const json body = {
      {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}, {"temperature", 0}};
  const json whole = post("/v1/chat/completions", body);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["usage"]["completion_tokens"], 4);
  const std::vector<json> events = stream("/v1/chat/completions", body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string joined;
  for (const json& e : events) {
    if (e.is_object() && e["choices"][0]["delta"].contains("content")) {
      joined += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(joined, whole["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(ServerTest, AStopStringEndsTheAnswer) {
  json body = {{"prompt", "hello there"}, {"max_tokens", 12}, {"temperature", 0}};
  const std::string text = post("/v1/completions", body)["choices"][0]["text"];
  // The stop: the answer's second and third characters (whole UTF-8 characters).
  const auto next = [&text](size_t at) {
    do {
      ++at;
    } while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80);
    return at;
  };
  const size_t from = next(0), to = next(next(from));
  ASSERT_LT(to, text.size()) << text;
  const std::string stop = text.substr(from, to - from);
  body["stop"] = stop;
  const json cut = post("/v1/completions", body);
  EXPECT_EQ(cut["choices"][0]["text"].get<std::string>(), text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(cut["usage"]["completion_tokens"].get<int>(), 12);
  std::string joined;
  const std::vector<json> events = stream("/v1/completions", body);
  for (const json& e : events) {
    if (e.is_object()) joined += e["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(joined, cut["choices"][0]["text"].get<std::string>());
}

TEST_F(ServerTest, ErrorsAreErrorObjectsAndCounted) {
  json e = post("/v1/completions", {{"prompt", "a"}, {"top_k", -1}}, 400);
  EXPECT_EQ(e["error"]["param"], "top_k");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  e = post("/v1/completions", {{"prompt", std::string(300, 'q')}}, 400);
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  e = post("/v1/completions", {{"prompt", "a"}, {"max_tokens", kContext}}, 400);
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  e = post("/v1/completions", {{"prompt", "a"}, {"model", "other"}}, 404);
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  const std::string m = metrics();
  EXPECT_NE(m.find("edgespec_request_errors_total{status=\"400\"} 3"), std::string::npos) << m;
  EXPECT_NE(m.find("edgespec_request_errors_total{status=\"404\"} 1"), std::string::npos) << m;
}

TEST_F(ServerTest, AClientLeavingMidStreamCancelsAndPagesReturn) {
  const json body = {{"prompt", "hello"}, {"max_tokens", kContext - 8}, {"stream", true}};
  httplib::Client c = client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  int chunks = 0;
  req.content_receiver = [&chunks](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 2;  // leave after the first chunk
  };
  c.send(req);
  EXPECT_EQ(chunks, 2);
  // The engine finishes the request as cancelled; then only prefix-cache records hold pages.
  std::string m;
  for (int i = 0; i < 200; ++i) {
    m = metrics();
    if (metric(m, "edgespec_requests_total{finish_reason=\"cancelled\"}") == 1 &&
        metric(m, "edgespec_requests_running") == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric(m, "edgespec_requests_total{finish_reason=\"cancelled\"}"), 1) << m;
  EXPECT_EQ(metric(m, "edgespec_requests_running"), 0) << m;
  EXPECT_LT(metric(m, "edgespec_generated_tokens_total"), kContext - 8) << m;
  EXPECT_EQ(metric(m, "edgespec_kv_pages_used"), metric(m, "edgespec_kv_pages_cached")) << m;
  EXPECT_GT(metric(m, "edgespec_kv_pages_total"), 0) << m;
}

TEST_F(ServerTest, DrainEndsRun) {
  post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}});
  http_->drain();
  thread_.join();
  httplib::Client c = client();
  c.set_connection_timeout(1, 0);
  EXPECT_FALSE(c.Get("/health"));  // no longer accepting
}

TEST(ServeCli, BadFlagsNameTheFlag) {
  const auto expectError = [](std::vector<std::string> args, const std::string& part) {
    try {
      test::runCli(args);
      ADD_FAILURE() << "accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expectError({"serve", "--port", "70000"}, "serve: argument '--port' = 70000");
  expectError({"serve", "--max-batch", "0"}, "serve: argument '--max-batch' = 0");
  expectError({"serve", "--context", "1"}, "serve: argument '--context' = 1");
  expectError({"serve", "--max-queued", "0"}, "serve: argument '--max-queued' = 0");
  expectError({"serve", "--max-body-bytes", "10"}, "serve: argument '--max-body-bytes' = 10");
  expectError({"serve", "--model", "/nonexistent/x"}, "serve: argument '--model'");
}

}  // namespace
}  // namespace es::server
