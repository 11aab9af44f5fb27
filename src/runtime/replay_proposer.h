#pragma once
// The replay draft (tests and benchmarks only): proposes the tokens of a previously
// recorded run of each request — τ = BS while they match the target — with a deterministic,
// request-stable corruption rate to exercise partial acceptance (kernels/replay_proposal.h).
// Needs no draft model and no context.
#include <cstdint>
#include <vector>

#include "common/buffer.h"
#include "ops/backend.h"
#include "runtime/draft_proposer.h"
#include "runtime/generation.h"

namespace es::runtime {

class ReplayProposer final : public DraftProposer {
 public:
  // recordings[r]: request r's whole token sequence (prompt, then the recorded continuation),
  // indexed by absolute position. corruptRate in [0, 1]; vocab > every recorded token.
  ReplayProposer(ops::Backend& backend, int32_t blockSize, int32_t maxBatch,
                 std::vector<std::vector<int32_t>> recordings, int32_t vocab, float corruptRate,
                 uint64_t seed = 1);

  // The recordings of a run: requests[r]'s prompt followed by the tokens results[r] generated.
  static std::vector<std::vector<int32_t>> recordingsOf(
      const std::vector<GenerationRequest>& requests, const std::vector<GenerationResult>& results);

  int32_t blockSize() const override { return blockSize_; }
  int32_t maxContextRows() const override { return INT32_MAX; }
  int32_t maxBatch() const override { return maxBatch_; }

  void appendContext(const model::TargetModel&, const std::vector<int32_t>&,
                     const std::vector<int32_t>&, kv::KvCacheManager&) override {}
  void appendContext(const model::DraftContextDelta&, kv::KvCacheManager&) override {}
  void propose(const model::DraftProposalInputs& inputs, kv::KvCacheManager& cache) override;
  void onAdmit(int32_t slot, int32_t request) override;
  void onCompact(const std::vector<int32_t>& oldToNew) override;

 private:
  void upload();

  ops::Backend& backend_;
  int32_t blockSize_, maxBatch_, vocab_;
  float corruptRate_;
  uint64_t seed_;
  std::vector<std::vector<int32_t>> recordings_;
  int32_t stride_ = 1;
  std::vector<int32_t> requestOfSlot_;  // [maxBatch], -1 = empty
  Buffer table_;                        // [maxBatch, stride] i32 then [maxBatch] i32 lengths
  Buffer block_;  // [maxBatch, BS] i32 whole blocks when the caller takes W < BS rows
};

}  // namespace es::runtime
