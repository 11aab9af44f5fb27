#pragma once
// One completion request from its parsed body to its text: the prompt's token ids (the chat
// template for chat, the raw prompt for completions), the context check, the engine submit,
// then, as tokens arrive, streaming detokenization and stop strings, in the calling (handler)
// thread. The engine thread only moves token ids.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/generation.h"
#include "server/engine_loop.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/served_model.h"
#include "server/stop_strings.h"
#include "tokenizer/bpe_tokenizer.h"

namespace es::server {

class CompletionSession {
 public:
  // Encodes the prompt, checks it against the context and submits it. ApiError: 400 for a prompt
  // that encodes to nothing, 400 code "context_length_exceeded" for prompt (+ max_tokens) beyond
  // the context, 503 when the engine's queue is full.
  CompletionSession(const ServedModel& model, EngineLoop& loop, CompletionRequest request);
  // Cancels the request if it still runs.
  ~CompletionSession();
  CompletionSession(const CompletionSession&) = delete;
  CompletionSession& operator=(const CompletionSession&) = delete;

  // Waits up to `timeout` for tokens; returns the text that may be shown now (stop strings held
  // back). After the last piece, finished() is true.
  std::string next(std::chrono::milliseconds timeout);
  bool finished() const { return finished_; }
  // Ends the request early (the client left): the engine frees its slot and pages.
  void cancel();

  // Once finished: "stop", "length", "cancelled" or "error" (then error() says why).
  runtime::FinishReason outcome() const { return outcome_; }
  const std::string& error() const { return error_; }
  Usage usage() const { return {.promptTokens = promptTokens_, .completionTokens = generated_}; }
  const CompletionRequest& request() const { return request_; }

 private:
  CompletionRequest request_;
  EngineLoop& loop_;
  std::shared_ptr<RequestChannel> channel_;
  tokenizer::StreamingDecoder decoder_;
  StopStringMatcher stops_;
  int64_t promptTokens_ = 0;
  int64_t generated_ = 0;  // tokens taken, up to the one that completed a stop string
  bool finished_ = false;
  bool cancelled_ = false;
  runtime::FinishReason outcome_ = runtime::FinishReason::kLength;
  std::string error_;
};

// The prompt's token ids for `request` (exposed for tests): the chat template around the
// messages (chat), or the prompt text with the tokenizer's bos rule (completions). ApiError 400
// for a conversation the template refuses, no chat template, or no tokens.
std::vector<int32_t> encodePrompt(const ServedModel& model, const CompletionRequest& request);

}  // namespace es::server
