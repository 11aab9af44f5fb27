#pragma once
// The KV cache manager of spec §1.4 (dense pools, and prefix reuse; sliding-window page
// management builds on it later).
//
// Owns one arena holding every layer's pool [2, numPages, 128, Hkv, D], the base (target) and
// draft page tables, and per-slot committed lengths. Active slots are always the prefix
// [0, activeCount()). A sequence's length is a counter advanced by commit; speculative rollback
// is simply not committing (rows written past the committed length are scratch and get
// overwritten).
//
// Pages. Without prefix reuse the tables are identity-mapped: slot b owns pages
// [b*P, (b+1)*P), P = maxPagesPerSeq, and admit() takes no arguments. With prefix reuse
// (plan().prefixCachePages > 0) pages come from a PrefixCache: admit(prompt, ...) pins the
// longest published prefix of complete 128-token blocks (base pages, and draft pages for a
// request that runs the draft), points the slot's first rows at those shared pages, starts the
// committed lengths after them and gives the slot private pages for the rest of what it may
// touch; publish() turns the slot's complete blocks into records other requests can reuse;
// retirement drops the slot's pins (records stay until evicted, LRU, when pages run out).
// Shared pages are never written: they are full blocks below the slot's committed length, and
// every write starts at or after it (checkWritable refuses a write into them).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/buffer.h"
#include "kv/kv_cache_plan.h"
#include "kv/page_table.h"
#include "kv/prefix_cache.h"

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

  // Activates the next free slot with empty base and draft caches; returns it. Identity
  // mapping only (prefix reuse off).
  int32_t admit();

  // Prefix reuse.
  bool prefixReuse() const { return prefix_.has_value(); }
  struct Admission {
    int32_t slot;
    int32_t reusedTokens;  // leading prompt tokens whose K/V the slot shares: committed already
  };
  // Prefix reuse only: activates the next free slot for a request with `prompt` that will touch
  // positions [0, positions) (prompt.size() <= positions <= capacity()). withDraft: the request
  // runs the DFlash draft, so only records with draft pages match and the slot gets draft pages
  // (needs draft layers). Base and draft lengths start at reusedTokens. Evicts records when
  // pages run out; throws, changing nothing, when running requests hold them all.
  Admission admit(std::span<const int32_t> prompt, int32_t positions, bool withDraft);
  // Prefix reuse only: publishes the slot's complete blocks not yet published; tokens are its
  // ids from position 0 (prompt, then generated). Only positions the slot has committed (base,
  // and draft for a draft request) count. Returns the records created.
  int32_t publish(int32_t slot, std::span<const int32_t> tokens);
  // Leading positions of the slot held in shared pages (reused or published): never written.
  int32_t sharedTokens(int32_t slot) const;
  // Pages allocated to a slot are filled with NaN bytes (0xFF) first, so a read of K/V nobody
  // wrote shows (tests; host memory only).
  void setPoisonFreshPages(bool on);
  // Null when prefix reuse is off.
  const PrefixCache* prefixCache() const { return prefix_ ? &*prefix_ : nullptr; }

  int32_t baseLength(int32_t slot) const;
  int32_t draftLength(int32_t slot) const;
  // Advance a committed length by `tokens` (>= 0); the result must stay within capacity().
  void commitBase(int32_t slot, int32_t tokens);
  void commitDraft(int32_t slot, int32_t tokens);
  // Throws unless positions [firstPosition, firstPosition + count) of an active slot fit and
  // none lies in the slot's shared pages.
  void checkWritable(int32_t slot, int64_t firstPosition, int64_t count) const;

  // Retires the active slots with keep[s] == 0 and moves the survivors, in order, to the front.
  // Only page-table rows move (no KV data is copied). Identity mapping: retired slots' pages go
  // to the freed slots, so every slot still owns a full, disjoint set of pages. Prefix reuse:
  // retired slots release their pins and their rows become -1. keep has activeCount() entries.
  // Returns oldToNew for the active slots (-1 = retired).
  std::vector<int32_t> retireAndCompact(std::span<const uint8_t> keep);

 private:
  void checkActive(int32_t slot, const char* where) const;
  void commit(std::vector<int32_t>& lengths, int32_t slot, int32_t tokens, const char* where);
  void poison(PageId page, bool draftPools);

  KvCachePlan plan_;
  Buffer arena_;
  PageTable base_;
  PageTable draft_;
  std::optional<PageTable> swa_;
  int32_t activeCount_ = 0;
  std::vector<int32_t> baseLengths_;   // [maxBatch]
  std::vector<int32_t> draftLengths_;  // [maxBatch]
  // Prefix reuse: the records, and per slot its PrefixCache request, whether it runs the draft,
  // and how many leading blocks are shared.
  std::optional<PrefixCache> prefix_;
  std::vector<int64_t> slotRequest_;   // [maxBatch]
  std::vector<uint8_t> slotDraft_;     // [maxBatch]
  std::vector<int32_t> sharedBlocks_;  // [maxBatch]
  bool poisonFresh_ = false;
};

}  // namespace es::kv
