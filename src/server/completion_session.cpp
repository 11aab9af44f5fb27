#include "server/completion_session.h"

#include <algorithm>
#include <random>

#include "common/errors.h"
#include "server/api_error.h"

namespace es::server {
namespace {

constexpr const char* kWhere = "request";

// A fresh seed for a request that gives none (OpenAI's sampling is not reproducible either).
uint64_t freshSeed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

const char* promptField(const CompletionRequest& r) {
  return r.endpoint == Endpoint::kChat ? "messages" : "prompt";
}

}  // namespace

std::vector<int32_t> encodePrompt(const ServedModel& model, const CompletionRequest& request) {
  std::vector<int32_t> ids;
  if (request.endpoint == Endpoint::kChat) {
    if (!model.chatTemplate) {
      throw badRequest(detail::concat(kWhere, ": model ", quoteShort(model.name),
                                      " ships no chat template; use /v1/completions"),
                       "messages");
    }
    std::string text;
    try {
      text = model.chatTemplate->render(request.messages, /*addGenerationPrompt=*/true);
    } catch (const InvalidArgument& e) {
      throw badRequest(detail::concat(kWhere, ": field 'messages': ", e.what()), "messages");
    }
    // The template writes the model's begin-of-text marker where it wants one.
    ids = model.tokenizer->encode(text, /*parseSpecial=*/true);
  } else {
    ids = model.tokenizer->encodePrompt(request.prompt, /*parseSpecial=*/false);
  }
  if (ids.empty()) {
    throw badRequest(
        detail::concat(kWhere, ": field '", promptField(request), "' encodes to no tokens"),
        promptField(request));
  }
  return ids;
}

CompletionSession::CompletionSession(const ServedModel& model, EngineLoop& loop,
                                     CompletionRequest request)
    : request_(std::move(request)),
      loop_(loop),
      decoder_(*model.tokenizer, /*skipSpecial=*/true),
      stops_(request_.stop) {
  std::vector<int32_t> prompt = encodePrompt(model, request_);
  promptTokens_ = static_cast<int64_t>(prompt.size());
  if (promptTokens_ >= model.context) {
    throw badRequest(
        detail::concat(kWhere, ": the prompt is ", promptTokens_, " tokens, but the context holds ",
                       model.context, " tokens of prompt and answer (serve --context)"),
        promptField(request_), "context_length_exceeded");
  }
  const int64_t room = model.context - promptTokens_;
  if (request_.maxTokens && *request_.maxTokens > room) {
    throw badRequest(detail::concat(kWhere, ": field 'max_tokens' = ", *request_.maxTokens,
                                    " must be <= ", room, ": the context holds ", model.context,
                                    " tokens and the prompt takes ", promptTokens_),
                     "max_tokens", "context_length_exceeded");
  }
  const int64_t maxTokens =
      request_.maxTokens.value_or(std::min<int64_t>(room, runtime::kMaxNewTokensLimit));
  runtime::SamplingConfig sampling = runtime::toSamplingConfig(request_.settings);
  if (!request_.seedGiven) sampling.seed = freshSeed();
  try {
    channel_ = loop_.submit({.prompt = std::move(prompt),
                             .maxNewTokens = static_cast<int32_t>(maxTokens),
                             .stopTokens = model.stopTokens,
                             .sampling = sampling});
  } catch (const runtime::QueueFull& e) {
    throw ApiError(503, "overloaded_error",
                   "the server is overloaded: too many requests wait (serve --max-queued); retry "
                   "later",
                   {}, "server_overloaded");
  } catch (const InvalidArgument& e) {
    throw badRequest(e.what(), {});
  }
}

CompletionSession::~CompletionSession() {
  if (channel_ && !finished_) loop_.cancel(channel_);
}

void CompletionSession::cancel() {
  if (finished_) return;
  loop_.cancel(channel_);
  finished_ = true;
  outcome_ = runtime::FinishReason::kCancelled;
}

std::string CompletionSession::next(std::chrono::milliseconds timeout) {
  if (finished_) return {};
  RequestChannel::Update u = channel_->take(timeout);
  std::string out;
  for (const int32_t token : u.tokens) {
    ++generated_;
    out += stops_.push(decoder_.push(token));
    if (stops_.stopped()) {
      // The answer is complete; the engine may have generated more: free its slot now.
      loop_.cancel(channel_);
      finished_ = true;
      outcome_ = runtime::FinishReason::kStop;
      return out;
    }
  }
  if (!u.finished) return out;
  out += stops_.push(decoder_.flush());
  out += stops_.finish();
  finished_ = true;
  outcome_ = stops_.stopped() ? runtime::FinishReason::kStop : u.finish;
  error_ = std::move(u.error);
  return out;
}

}  // namespace es::server
