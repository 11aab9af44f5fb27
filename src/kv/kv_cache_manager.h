#pragma once
// The KV cache manager of spec §1.4 (dense pools; prefix reuse and sliding-window page
// management build on it later).
//
// Owns one arena holding every layer's pool [2, numPages, 128, Hkv, D], the base (target) and
// draft page tables (identity-mapped: slot b owns pages [b*P, (b+1)*P), P = maxPagesPerSeq),
// and per-slot committed lengths. Active slots are always the prefix [0, activeCount()).
// A sequence's length is a counter advanced by commit; speculative rollback is simply not
// committing (rows written past the committed length are scratch and get overwritten).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/buffer.h"
#include "kv/kv_cache_plan.h"
#include "kv/page_table.h"

namespace es::kv {

class KvCacheManager {
 public:
  // Plans (validating everything), then allocates the arena in `space`.
  KvCacheManager(const KvCacheConfig& config, MemorySpace space);

  const KvCachePlan& plan() const { return plan_; }
  MemorySpace space() const { return arena_.space(); }

  // Pools: [2, numPages, 128, Hkv, D] of the plan's dtype.
  TensorView basePool(int32_t layer) const;
  TensorView draftPool(int32_t layer) const;

  const PageTable& basePageTable() const { return base_; }
  const PageTable& draftPageTable() const { return draft_; }
  PageTable& basePageTable() { return base_; }
  PageTable& draftPageTable() { return draft_; }
  // The bounded sliding-window pool's table (all -1 until issue 10's window manager fills it);
  // null when no layer is reduced.
  PageTable* swaPageTable() { return swa_ ? &*swa_ : nullptr; }

  int32_t maxBatchSize() const { return plan_.maxBatchSize; }
  int32_t activeCount() const { return activeCount_; }
  int32_t capacity() const { return plan_.capacityPadded; }

  // Activates the next free slot with empty base and draft caches; returns it.
  int32_t admit();

  int32_t baseLength(int32_t slot) const;
  int32_t draftLength(int32_t slot) const;
  // Advance a committed length by `tokens` (>= 0); the result must stay within capacity().
  void commitBase(int32_t slot, int32_t tokens);
  void commitDraft(int32_t slot, int32_t tokens);
  // Throws unless positions [firstPosition, firstPosition + count) of an active slot fit.
  void checkWritable(int32_t slot, int64_t firstPosition, int64_t count) const;

  // Retires the active slots with keep[s] == 0 and moves the survivors, in order, to the front.
  // Only page-table rows move (no KV data is copied); retired slots' pages go to the freed
  // slots, so every slot still owns a full, disjoint set of pages. keep has activeCount()
  // entries. Returns oldToNew for the active slots (-1 = retired).
  std::vector<int32_t> retireAndCompact(std::span<const uint8_t> keep);

 private:
  void checkActive(int32_t slot, const char* where) const;
  void commit(std::vector<int32_t>& lengths, int32_t slot, int32_t tokens, const char* where);

  KvCachePlan plan_;
  Buffer arena_;
  PageTable base_;
  PageTable draft_;
  std::optional<PageTable> swa_;
  int32_t activeCount_ = 0;
  std::vector<int32_t> baseLengths_;   // [maxBatch]
  std::vector<int32_t> draftLengths_;  // [maxBatch]
};

}  // namespace es::kv
