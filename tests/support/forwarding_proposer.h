#pragma once
// A DraftProposer that passes every call to another one: test proposers derive from it and
// override only what they change (log the proposals, expose a distribution), so the rest of the
// interface keeps the wrapped proposer's behaviour.
#include <cstdint>
#include <vector>

#include "runtime/draft_proposer.h"

namespace es::test {

class ForwardingProposer : public runtime::DraftProposer {
 public:
  // `inner` must outlive this object; it is only stored here, so it may be a member of a derived
  // class that is constructed after this base.
  explicit ForwardingProposer(runtime::DraftProposer& inner) : inner_(inner) {}

  int32_t blockSize() const override { return inner_.blockSize(); }
  int32_t maxContextRows() const override { return inner_.maxContextRows(); }
  int32_t maxBatch() const override { return inner_.maxBatch(); }
  void appendContext(const model::TargetModel& target, const std::vector<int32_t>& positions,
                     const std::vector<int32_t>& owners, kv::KvCacheManager& cache) override {
    inner_.appendContext(target, positions, owners, cache);
  }
  void appendContext(const model::DraftContextDelta& delta, kv::KvCacheManager& cache) override {
    inner_.appendContext(delta, cache);
  }
  void propose(const model::DraftProposalInputs& inputs, kv::KvCacheManager& cache) override {
    inner_.propose(inputs, cache);
  }
  const float* proposalLogits() const override { return inner_.proposalLogits(); }
  bool usesDraftCache() const override { return inner_.usesDraftCache(); }
  int32_t maxPositions() const override { return inner_.maxPositions(); }
  const void* prepareLaunch(kv::KvCacheManager& cache) override {
    return inner_.prepareLaunch(cache);
  }
  void onAdmit(int32_t slot, int32_t request) override { inner_.onAdmit(slot, request); }
  void onCompact(const std::vector<int32_t>& oldToNew) override { inner_.onCompact(oldToNew); }

 private:
  runtime::DraftProposer& inner_;
};

}  // namespace es::test
