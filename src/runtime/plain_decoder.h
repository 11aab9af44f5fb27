#pragma once
// Plain (non-speculative) greedy generation for a batch of requests on one target model: the
// baseline the speculative decoder must reproduce token for token (spec §6), and the simplest
// way to run a model end to end.
//
// First version: host-orchestrated (one logits download per step). Prompts longer than the
// model's maxTokens are prefilled in chunks; finished sequences retire and the batch compacts
// through the KV cache manager (page-table rows move, KV data does not).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"

namespace es::runtime {

// How the next token is chosen (spec §3). temperature < 1e-3 is greedy (argmax, ties to the
// lower index); otherwise top-k / top-p filtered sampling with request-stable uniforms:
// the token after position s uses request_uniform(seed, s, kTarget, 0), so a request's output
// depends only on its own prompt, settings and seed, never on its batch-mates.
struct SamplingConfig {
  float temperature = 0.0f;
  int32_t topK = 0;     // <= 0: off
  float topP = 1.0f;    // (0, 1]
  uint64_t seed = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;       // non-empty
  int32_t maxNewTokens = 0;          // >= 1
  std::vector<int32_t> stopTokens;   // generation ends after emitting one of these
  SamplingConfig sampling;           // default: greedy
};

enum class FinishReason { kLength, kStop };

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated tokens (a stop token, if hit, is the last)
  FinishReason finish = FinishReason::kLength;
};

class PlainDecoder {
 public:
  // `cache` must be empty (no active slots), its pools in the backend's memory space.
  PlainDecoder(model::TargetModel& target, kv::KvCacheManager& cache);

  // Called with (request index, token) as each token is generated, e.g. to stream text.
  using TokenCallback = std::function<void(int32_t request, int32_t token)>;

  // At most cache.maxBatchSize() requests; each chooses tokens by its own SamplingConfig.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests,
                                         const TokenCallback& onToken = {});

 private:
  model::TargetModel& target_;
  kv::KvCacheManager& cache_;
};

}  // namespace es::runtime
