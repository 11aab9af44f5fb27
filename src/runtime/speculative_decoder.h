#pragma once
// Greedy speculative decoding (spec §6; requests must be greedy) with any DraftProposer: prefill, round 0, then
// verify -> accept -> commit -> draft, per sequence, for a batch of requests. Lossless: the
// output equals PlainDecoder's token for token on the CPU backend.
//
// First version: host-orchestrated (the target's logits are read back each step; accept runs on
// the host with the same rule as the greedy EAGLE accept kernel). The device-resident loop with
// CUDA graphs is the runtime issue's next step.
#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "runtime/draft_proposer.h"
#include "runtime/plain_decoder.h"

namespace es::runtime {

// Acceptance statistics of one generate() call.
struct SpeculationStats {
  int64_t verifySteps = 0;            // verify forwards (per sequence-step)
  int64_t acceptedTokens = 0;         // tokens emitted by verify steps (bonus included)
  std::vector<int64_t> acceptHistogram;  // [BS + 1]: how often each accept length occurred
  double meanAcceptLength() const {
    return verifySteps ? static_cast<double>(acceptedTokens) / static_cast<double>(verifySteps) : 0.0;
  }
};

// Greedy accept of one linear chain: drafts[i] (i = 1..BS-1) is accepted while it equals the
// target's argmax of the row before it. Returns the emitted tokens: the target argmax of rows
// 0..matched (the last one the correction or bonus token), at most `budget` of them.
std::vector<int32_t> acceptGreedyChain(const std::vector<int32_t>& drafts,
                                       const std::vector<int32_t>& targetArgmax, int32_t budget);

class SpeculativeDecoder {
 public:
  // `cache` must be empty and hold the draft layers too; the target must have been built with
  // the taps the proposer needs, and maxTokens >= batch * BS (one verify forward).
  SpeculativeDecoder(model::TargetModel& target, DraftProposer& proposer, kv::KvCacheManager& cache);

  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests,
                                         const PlainDecoder::TokenCallback& onToken = {});
  const SpeculationStats& stats() const { return stats_; }

 private:
  model::TargetModel& target_;
  DraftProposer& proposer_;
  kv::KvCacheManager& cache_;
  SpeculationStats stats_;
};

}  // namespace es::runtime
