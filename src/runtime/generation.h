#pragma once
// What a caller asks of the decoders and what it gets back.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace es::runtime {

// How the next token is chosen (spec §3). temperature < 1e-3 is greedy (argmax, ties to the
// lower index); otherwise top-k / top-p filtered sampling with request-stable uniforms:
// the token after position s uses request_uniform(seed, s, kTarget, 0) (speculative steps use
// the accept / residual / bonus streams anchored at the step's first position, spec §3.7), so a
// request's output depends only on its own prompt, settings and seed, never on its batch-mates.
struct SamplingConfig {
  float temperature = 0.0f;
  int32_t topK = 0;   // 0: off
  float topP = 1.0f;  // (0, 1]
  uint64_t seed = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt = {};      // non-empty
  int32_t maxNewTokens = 0;              // >= 1
  std::vector<int32_t> stopTokens = {};  // generation ends after emitting one of these
  SamplingConfig sampling = {};          // default: greedy
  // Asked after each generated token (after the token callback saw it): true ends the request
  // there (FinishReason::kStop), e.g. when the decoded text now holds a stop string.
  std::function<bool()> stopWhen = {};
};

// kError: the request could not go on (GenerationResult::error says why); the other requests of
// the call are not affected. kCancelled: the caller cancelled it (DecodeEngine::cancel).
enum class FinishReason { kLength, kStop, kError, kCancelled };

struct GenerationResult {
  std::vector<int32_t> tokens = {};  // generated tokens (a stop token, if hit, is the last)
  FinishReason finish = FinishReason::kLength;
  // finish == kError: one line saying why, without the request's index (a caller that batches
  // requests names them its own way); empty otherwise. Tokens before the failure are kept.
  std::string error = {};
};

// "stop", "length", "error" or "cancelled" (the JSON finish_reason).
inline const char* finishReasonName(FinishReason f) {
  switch (f) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kError:
      return "error";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kLength:
      break;
  }
  return "length";
}

// Called with (request index, token) as each token is generated, e.g. to stream text. The index
// is the request's position in generate()'s vector, or the index given to
// DecodeEngine::submit.
using TokenCallback = std::function<void(int32_t request, int32_t token)>;

// A request submitted to DecodeEngine::submit, unique per engine (0, 1, 2, ...).
using RequestId = int64_t;

// A request that left the engine (DecodeEngine::takeFinished): done, failed or cancelled.
struct FinishedRequest {
  RequestId id = -1;
  int32_t index = 0;  // the index its token callback saw
  GenerationResult result = {};
};

inline bool isGreedy(const SamplingConfig& s) { return s.temperature < 1e-3f; }

}  // namespace es::runtime
