#pragma once
// The product's DraftProposer: a DFlash block-diffusion draft (model::DFlashDraft) reading the
// target's tapped hidden states in backend memory.
#include "model/dflash_draft.h"
#include "runtime/draft_proposer.h"

namespace es::runtime {

class DFlashProposer final : public DraftProposer {
 public:
  explicit DFlashProposer(model::DFlashDraft& draft) : draft_(draft) {}

  int32_t blockSize() const override { return draft_.blockSize(); }
  int32_t maxContextRows() const override { return draft_.maxContextTokens(); }
  int32_t maxBatch() const override { return draft_.maxBatch(); }

  void appendContext(const model::TargetModel& target, const std::vector<int32_t>& positions,
                     const std::vector<int32_t>& owners, kv::KvCacheManager& cache) override {
    draft_.appendContext(target, positions, owners, cache);
  }
  void appendContext(const model::DraftContextDelta& delta, kv::KvCacheManager& cache) override {
    draft_.appendContext(delta, cache);
  }
  void propose(const model::DraftProposalInputs& inputs, kv::KvCacheManager& cache) override {
    draft_.propose(inputs, cache);
  }
  const float* proposalLogits() const override { return draft_.logitsDevice(); }
  bool usesDraftCache() const override { return true; }
  int32_t maxPositions() const override { return draft_.maxPositions(); }
  const void* prepareLaunch(kv::KvCacheManager& cache) override {
    return draft_.syncPageTable(cache);
  }

 private:
  model::DFlashDraft& draft_;
};

}  // namespace es::runtime
