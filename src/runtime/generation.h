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
// the call are not affected.
enum class FinishReason { kLength, kStop, kError };

struct GenerationResult {
  std::vector<int32_t> tokens = {};  // generated tokens (a stop token, if hit, is the last)
  FinishReason finish = FinishReason::kLength;
  // finish == kError: one line saying why, without the request's index (a caller that batches
  // requests names them its own way); empty otherwise. Tokens before the failure are kept.
  std::string error = {};
};

// "stop", "length" or "error" (the JSON finish_reason).
inline const char* finishReasonName(FinishReason f) {
  return f == FinishReason::kStop ? "stop" : f == FinishReason::kError ? "error" : "length";
}

// Called with (request index, token) as each token is generated, e.g. to stream text.
using TokenCallback = std::function<void(int32_t request, int32_t token)>;

inline bool isGreedy(const SamplingConfig& s) { return s.temperature < 1e-3f; }

}  // namespace es::runtime
