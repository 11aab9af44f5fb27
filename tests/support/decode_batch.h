#pragma once
// The forward of one decode step, shared by the model tests: one row per listed slot.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"

namespace es::test {

// Sequence i of the batch is page-table row slots[i]: token tokens[i] at that slot's committed
// length (its K/V written there), keys up to and including it, its logits wanted.
inline model::ForwardBatch decodeBatch(const kv::KvCacheManager& cache,
                                       const std::vector<int32_t>& slots,
                                       const std::vector<int32_t>& tokens) {
  model::ForwardBatch f;
  f.tokens = tokens;
  f.cuQSeqLens = {0};
  for (size_t i = 0; i < slots.size(); ++i) {
    const int32_t row = static_cast<int32_t>(i);
    f.positions.push_back(cache.baseLength(slots[i]));
    f.tokenToSequence.push_back(slots[i]);
    f.cuQSeqLens.push_back(row + 1);
    f.kvLengths.push_back(cache.baseLength(slots[i]) + 1);
    f.logitRows.push_back(row);
  }
  return f;
}

}  // namespace es::test
