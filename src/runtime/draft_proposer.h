#pragma once
// What the speculative decoder needs from a draft: keep its context in step with the target's
// committed tokens, and propose a block per sequence. The DFlash draft is the product's
// proposer (runtime/dflash_proposer.*); tests also script proposals to drive every accept path.
#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"

namespace es::runtime {

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;

  // Block size BS: a proposal is BS rows, row 0 re-predicts the anchor, rows 1..BS-1 are drafts.
  virtual int32_t blockSize() const = 0;

  // Limits the decoder checks before it starts: rows of one appendContext (a prefill chunk or a
  // verify forward) and sequences of one propose.
  virtual int32_t maxContextRows() const = 0;
  virtual int32_t maxBatch() const = 0;

  // The target forward that just ran committed some of its rows: row r (of that forward) is new
  // context at positions[r] for page-table row owners[r]; -1 marks rows that are not (padding,
  // rejected drafts). The target's taps of that forward are still in place.
  virtual void appendContext(const model::TargetModel& target, const std::vector<int32_t>& positions,
                             const std::vector<int32_t>& owners, kv::KvCacheManager& cache) = 0;

  // One block per sequence b (page-table row b): anchor token and the block's first position
  // blockStarts[b] (= the committed length). Returns [B, BS] token ids, row 0 included.
  virtual std::vector<int32_t> propose(const std::vector<int32_t>& anchors,
                                       const std::vector<int32_t>& blockStarts,
                                       kv::KvCacheManager& cache) = 0;
};

}  // namespace es::runtime
