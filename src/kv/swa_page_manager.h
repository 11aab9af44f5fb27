#pragma once
// Bounded sliding-window page management for the reduced (sliding-attention) layers (spec §1.4,
// last bullet but one). CPU-side bookkeeping only: it decides which physical page of the bounded
// pool backs each logical page of each slot and keeps the sparse window page table up to date;
// it never touches KV data.
//
// Model. The bounded pool has numPages K pages (at least computeMinimumSwaPoolPages). Each
// admitted slot takes privatePagesPerSlot() = computeSwaPrivatePagesPerSlot(W, 128, 1) pages
// from the pool and keeps them until it is retired; every one of them is, at any time, exactly one
// of
//   bound    - mapped in the slot's table row (some logical page of the current window),
//   pending  - fell out of the window but a step that read it may still be running,
//   reserved - free for this slot to bind.
// Invariant: bound + pending + reserved == privatePagesPerSlot() for every active slot.
//
// Steps. beginStep() starts one execution (a prefill chunk, or a decode/verify step writing up to
// S rows) over some slots: slot s writes rows [length(s), length(s) + count). The step reads the
// window of every row it writes, so the logical pages
//   [floor(max(0, length - W) / 128), ceil((length + count) / 128))
// must be bound; missing ones are bound from the slot's reservation. commit() advances a slot's
// length by the rows the caller keeps (speculative rows beyond it are scratch). Once the length
// is e, pages below floor(max(0, e - W) / 128) can never be read again (lengths only grow) and
// become pending; they return to the slot's reservation when completeStep() reports the last
// step that read them complete. Because a page is rebound only from the reservation, no step ever
// writes into a page that a still-running step reads under another logical identity.
// Step ids are issued in order (1, 2, ...) and complete in order (one stream): completeStep(k)
// means every step <= k has finished.
//
// Table. Every change is one setEntry/clearEntry on the sparse-window PageTable, which records the
// slot's rows as dirty; the caller uploads (PageTable::copyDirty) after beginStep() and before
// the step's kernels run.
#include <cstdint>
#include <span>
#include <vector>

#include "kv/page_geometry.h"
#include "kv/page_table.h"

namespace es::kv {

struct SwaStepWrite {
  int32_t slot;
  int32_t count;  // rows written from the slot's current length, > 0
};

// The checks a step's writes pass whoever tracks the step (SwaPageManager, or KvCacheManager
// without sliding layers): at least one write, every slot in [0, activeCount) and named once,
// every count > 0. Errors name `where` and the write.
void checkStepWrites(std::span<const SwaStepWrite> writes, int32_t activeCount, const char* where);

class SwaPageManager {
 public:
  // `table` is the bounded pool's page table ([maxBatch, maxPagesPerSeq], numPages K pages); it
  // must outlive the manager. Its rows are cleared (all -1). slidingWindow = W tokens.
  // Errors: slidingWindow out of (0, kMaxKvCacheCapacity]; table.numPages() below
  // computeMinimumSwaPoolPages(table.maxBatch(), slidingWindow).
  SwaPageManager(PageTable& table, int32_t slidingWindow);

  int32_t slidingWindow() const { return window_; }
  int32_t privatePagesPerSlot() const { return privatePages_; }
  int32_t maxBatchSize() const { return table_->maxBatch(); }
  int32_t activeCount() const { return activeCount_; }
  // Tokens one slot can reach: maxPagesPerSeq * 128 (the table's logical page range).
  int64_t capacity() const { return int64_t{table_->maxPagesPerSeq()} * kTokensPerPage; }
  const PageTable& table() const { return *table_; }

  // Activates the next free slot (active slots are the prefix [0, activeCount())), moves
  // privatePagesPerSlot() pages from the pool into its reservation and returns it. Errors when
  // every slot is active, or when pages of retired slots are still waiting for completeStep().
  int32_t admit();

  // Starts one step; returns its id. Every write is validated (active slot, at most once per step,
  // count > 0, capacity, enough reserved pages, no overwrite of rows a running step produced and
  // did not commit) before anything changes.
  int64_t beginStep(std::span<const SwaStepWrite> writes);
  // Every step <= stepId has completed: pending pages they read return to their reservations.
  // stepId must be in (lastCompletedStep(), lastIssuedStep()].
  void completeStep(int64_t stepId);

  // Keeps `tokens` more rows of the slot's last step: 0 <= tokens <= rows written past length.
  void commit(int32_t slot, int32_t tokens);

  int32_t length(int32_t slot) const;
  // The most rows a step starting now could write for this slot (reservation and capacity).
  int64_t maxStepTokens(int32_t slot) const;

  int32_t boundPages(int32_t slot) const;
  int32_t pendingPages(int32_t slot) const;
  int32_t reservedPages(int32_t slot) const;
  // Every physical page the slot owns (bound, pending, reserved), sorted.
  std::vector<PageId> ownedPages(int32_t slot) const;
  // Pool pages nobody owns; pages of retired slots waiting for a step to complete are not free.
  int32_t freePoolPages() const { return static_cast<int32_t>(freePool_.size()); }
  int32_t deferredPoolPages() const;

  int64_t lastIssuedStep() const { return lastIssued_; }
  int64_t lastCompletedStep() const { return lastCompleted_; }

  // Retires the active slots with keep[s] == 0 and moves the survivors, in order, to the front
  // (like KvCacheManager::retireAndCompact; page-table rows move, no KV data is copied). A retired
  // slot's pages go back to the pool at once, or after completeStep() of the last step that read
  // them. keep has activeCount() entries; returns oldToNew (-1 = retired).
  std::vector<int32_t> retireAndCompact(std::span<const uint8_t> keep);

 private:
  struct Bound {
    PageId page;
    int64_t lastReader;  // last step that read or wrote the page, 0 = none
  };
  struct Pending {
    PageId page;
    int64_t lastReader;
  };
  struct Slot {
    int32_t length = 0;
    int32_t writtenEnd = 0;    // rows written by the last step end here (>= length)
    int64_t writerStep = 0;    // the step that wrote [length, writtenEnd)
    std::vector<Bound> bound;  // indexed by logical page (page -1 = unbound), sized lazily
    std::vector<Pending> pending;
    std::vector<PageId> reserved;
  };
  struct Deferred {
    PageId page;
    int64_t lastReader;
  };

  void checkActive(int32_t slot, const char* where) const;
  int64_t windowFirstPage(int64_t endpoint) const;
  // Unbinds the pages of `slot` below the window of its current length.
  void retireOutOfWindow(int32_t slotIndex);

  PageTable* table_;
  int32_t window_;
  int32_t privatePages_;
  int32_t activeCount_ = 0;
  int64_t lastIssued_ = 0;
  int64_t lastCompleted_ = 0;
  std::vector<Slot> slots_;         // [maxBatch]
  std::vector<PageId> freePool_;    // a stack; popped from the back
  std::vector<Deferred> deferred_;  // retired slots' pages waiting for their last reader
};

}  // namespace es::kv
