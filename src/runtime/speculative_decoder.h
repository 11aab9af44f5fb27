#pragma once
// Speculative decoding (spec §6) with any DraftProposer (the DFlash draft, or the replay draft in
// tests and benchmarks): one DecodeEngine step of verify width W per iteration (W <= BS,
// EngineOptions::verifyWidth, default BS) — verify, accept
// (greedy or lossless sampled), commit, draft context, next proposal — on the device. Greedy
// output equals PlainDecoder's token for token: exactly on the CPU backend, and on the GPU at
// batch 1 (verify rows equal decode rows bit for bit: the gemv's and the split-KV attention's
// row invariance); at batch > 1 on the GPU up to near-ties of bf16 rounding. Sampled output has
// the target's distribution (spec §3.7).
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "runtime/decode_engine.h"
#include "runtime/draft_proposer.h"
#include "runtime/generation.h"

namespace es::runtime {

class SpeculativeDecoder {
 public:
  // `cache` must be empty and hold the draft layers too; the target must have been built with
  // the taps the proposer needs, and maxTokens >= W (one verify forward of one sequence).
  SpeculativeDecoder(model::TargetModel& target, DraftProposer& proposer, kv::KvCacheManager& cache,
                     EngineOptions options = {})
      : engine_(target, cache, &proposer, options) {}

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
