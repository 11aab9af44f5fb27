#pragma once
// Plain (non-speculative) generation for a batch of requests on one target model: the baseline
// the speculative decoder must reproduce token for token (spec §6). One DecodeEngine step of
// width 1 per token: forward of one row per sequence, argmax or a request-stable sample, commit —
// on the device, one CUDA graph per batch size on the CUDA backend.
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "runtime/decode_engine.h"
#include "runtime/generation.h"

namespace es::runtime {

class PlainDecoder {
 public:
  // `cache` must be empty (no active slots), its pools in the backend's memory space.
  PlainDecoder(model::TargetModel& target, kv::KvCacheManager& cache, EngineOptions options = {})
      : engine_(target, cache, nullptr, options) {}

  using TokenCallback = runtime::TokenCallback;

  // At most engine().maxBatch() requests; each chooses tokens by its own SamplingConfig.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests,
                                         const TokenCallback& onToken = {}) {
    return engine_.generate(requests, onToken);
  }
  const SpeculationStats& stats() const { return engine_.stats(); }
  const DecodeEngine& engine() const { return engine_; }

 private:
  DecodeEngine engine_;
};

}  // namespace es::runtime
