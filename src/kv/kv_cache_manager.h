#pragma once
// The KV cache manager of spec §1.4 (dense pools, prefix reuse, bounded sliding-window pools).
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
//
// Sliding-window (reduced) layers live in their own bounded pool (plan().numSwaPages =
// computeMinimumSwaPoolPages) behind a sparse-window page table driven by a SwaPageManager:
// admit() reserves the slot's private pages; every forward that writes K/V (a prefill chunk, a
// decode or verify step) is bracketed by beginStep() (binds the pages of the window of every row
// it writes, entry by entry; upload the table after it and before the kernels run) and
// completeStep() (the caller knows the step's kernels finished: pages that left the window go back
// to their slot's reservation); commitBase() advances the window. Full-capacity layers keep the
// dense pool and base table. Without reduced layers the steps are only counted, so callers run the
// same protocol for every model.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/buffer.h"
#include "kv/kv_cache_plan.h"
#include "kv/page_table.h"
#include "kv/prefix_cache.h"
#include "kv/swa_page_manager.h"

namespace es::kv {

class KvCacheManager {
 public:
  // Plans (validating everything), then allocates the arena in `space`.
  KvCacheManager(const KvCacheConfig& config, MemorySpace space);
  // The window manager points at swa_'s table: the manager stays where it was built.
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  const KvCachePlan& plan() const { return plan_; }
  MemorySpace space() const { return arena_.space(); }

  // Pools: [2, numPages, 128, Hkv, D] of the plan's dtype.
  TensorView basePool(int32_t layer) const;
  TensorView draftPool(int32_t layer) const;

  const PageTable& basePageTable() const { return base_; }
  const PageTable& draftPageTable() const { return draft_; }
  PageTable& basePageTable() { return base_; }
  PageTable& draftPageTable() { return draft_; }
  // The bounded sliding-window pool's sparse table (K ids of the bounded pool, -1 outside each
  // slot's window) and its manager; null when no layer is reduced.
  PageTable* swaPageTable() { return swa_ ? &*swa_ : nullptr; }
  const PageTable* swaPageTable() const { return swa_ ? &*swa_ : nullptr; }
  const SwaPageManager* swaPages() const { return swaPages_ ? &*swaPages_ : nullptr; }

  int32_t maxBatchSize() const { return plan_.maxBatchSize; }
  int32_t activeCount() const { return activeCount_; }
  int32_t capacity() const { return plan_.capacityPadded; }

  // Activates the next free slot with empty base and draft caches (and, with reduced layers, its
  // private window pages); returns it. Identity mapping only (prefix reuse off).
  int32_t admit();

  // Steps (every forward that writes the base cache). beginStep validates every write (active
  // slot, once per step, count > 0, capacity; with reduced layers also the slot's reservation and
  // no overwrite of rows a running step wrote and did not commit) before anything changes, binds
  // the window pages of reduced layers and returns the step's id (1, 2, ...). completeStep(id):
  // every step <= id has finished on the backend (ids complete in order); id in
  // (lastCompletedStep(), lastIssuedStep()].
  int64_t beginStep(std::span<const SwaStepWrite> writes);
  void completeStep(int64_t stepId);
  int64_t lastIssuedStep() const;
  int64_t lastCompletedStep() const;
  // The most rows one step can write for the slot now: capacity, and the window reservation.
  int64_t maxStepTokens(int32_t slot) const;
  // Throws unless every key of positions [firstKey, endKey) that a sliding-window row can see is
  // mapped in the slot's window table (no-op without reduced layers): a forward that skipped
  // beginStep would silently read nothing.
  void checkWindowMapped(int32_t slot, int64_t firstKey, int64_t endKey) const;

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

  // Pages of the full-capacity base pool (metrics; the draft pool follows the base one). used:
  // reserved by active slots or held by published prefix records (cached counts the latter, in
  // use or not), so once no request is active used == cached. Identity mapping: an active slot
  // holds maxPagesPerSeq pages, cached is 0.
  struct PageCounts {
    int32_t total = 0;
    int32_t used = 0;
    int32_t free = 0;
    int32_t cached = 0;
  };
  PageCounts pageCounts() const;

  int32_t baseLength(int32_t slot) const;
  int32_t draftLength(int32_t slot) const;
  // Advance a committed length by `tokens` (>= 0); the result must stay within capacity().
  // With reduced layers commitBase also advances the window: at most the rows the slot's last
  // step wrote past its length, and pages below the new window leave the table.
  void commitBase(int32_t slot, int32_t tokens);
  void commitDraft(int32_t slot, int32_t tokens);
  // Throws unless positions [firstPosition, firstPosition + count) of an active slot fit and
  // none lies in the slot's shared pages.
  void checkWritable(int32_t slot, int64_t firstPosition, int64_t count) const;

  // Retires the active slots with keep[s] == 0 and moves the survivors, in order, to the front.
  // Only page-table rows move (no KV data is copied). Identity mapping: retired slots' pages go
  // to the freed slots, so every slot still owns a full, disjoint set of pages. Prefix reuse:
  // retired slots release their pins and their rows become -1. Reduced layers: a retired slot's
  // window pages go back to the bounded pool once its last step has completed (admit refuses
  // until then). keep has activeCount() entries.
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
  std::optional<SwaPageManager> swaPages_;      // drives swa_
  int64_t lastIssued_ = 0, lastCompleted_ = 0;  // step ids without reduced layers
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
