#pragma once
// The page table of spec §1.3.
//
// Host truth: K page ids only, int32 [maxBatch, maxPagesPerSeq]. The device layout is
// int32 [maxBatch, 2, maxPagesPerSeq]: row [b,0,:] the K ids, row [b,1,:] the V ids, derived as
// v = k + numPages (a -1 K entry gives a -1 V entry). Every mutation is validated before it
// changes anything, marks the touched device rows dirty, and an upload copies only the dirty
// rows, coalesced into contiguous ranges (model/backend_page_table.h keeps a backend's copy).
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "kv/page_geometry.h"

namespace es::kv {

enum class PageTableValidation {
  kDense,         // live entries form a prefix, then only -1; no id repeats within a slot
  kSparseWindow,  // live entries may be disjoint (sliding windows); no id repeats within a slot
};

// One row replacement for setRows: slot's K ids (shorter than maxPagesPerSeq = padded with -1).
struct PageTableRowUpdate {
  int32_t slot;
  std::vector<PageId> kPages;
};

// A contiguous run of int32 elements of the device layout [maxBatch, 2, maxPagesPerSeq].
struct PageTableRange {
  int64_t offset;  // first element
  int64_t count;   // elements
  bool operator==(const PageTableRange&) const = default;
};

class PageTable {
 public:
  // numPages: K pages in the pool this table indexes (V ids are offset by it).
  PageTable(int32_t maxBatch, int32_t maxPagesPerSeq, int32_t numPages);

  int32_t maxBatch() const { return maxBatch_; }
  int32_t maxPagesPerSeq() const { return maxPagesPerSeq_; }
  int32_t numPages() const { return numPages_; }
  bool isIdentity() const { return isIdentity_; }

  // Slot b owns K pages [b*maxPagesPerSeq, (b+1)*maxPagesPerSeq); needs numPages >= maxBatch*that.
  void setIdentity();

  PageId kPage(int32_t slot, int32_t logicalPage) const;
  PageId vPage(int32_t slot, int32_t logicalPage) const;  // k + numPages, or -1
  std::span<const PageId> kRow(int32_t slot) const;

  // Replace one row (validated with `mode` before anything changes).
  void setRow(int32_t slot, std::span<const PageId> kPages,
              PageTableValidation mode = PageTableValidation::kDense);
  // Replace several rows atomically: every update is validated first (a slot at most once),
  // then all are committed; on any error nothing changes.
  void setRows(std::span<const PageTableRowUpdate> updates,
               PageTableValidation mode = PageTableValidation::kDense);
  // Set or clear one entry (sliding windows). The resulting row must pass sparse-window validation.
  void setEntry(int32_t slot, int32_t logicalPage, PageId kPage);
  void clearEntry(int32_t slot, int32_t logicalPage);
  // Move rows: oldToNew[s] is slot s's new slot, or -1 to retire it. Destinations are distinct
  // and in range; slots nobody moves into end up all -1. No KV data is copied.
  void compactRows(std::span<const int32_t> oldToNew);

  // Throws InvalidArgument describing the first violation of `mode` in the slot's row.
  void validateRow(int32_t slot, PageTableValidation mode) const;

  // The full device layout [maxBatch, 2, maxPagesPerSeq] written to host memory `out`
  // (used by the CPU backend, and by tests as the expected device image).
  void writeDeviceLayout(std::span<int32_t> out) const;
  int64_t deviceLayoutElements() const { return int64_t{maxBatch_} * 2 * maxPagesPerSeq_; }

  // Dirty device rows since the last upload, as coalesced element ranges, ascending.
  std::vector<PageTableRange> dirtyRanges() const;
  // Marks everything dirty (e.g. after the device copy was reallocated).
  void markAllDirty();

  // Brings a copy of the device layout up to date: calls copy(r, src) for each dirty range r,
  // src being the current layout's r.count elements from r.offset (valid during the call only;
  // the copy must have read them when it returns), then clears the dirty set. Returns the ranges.
  using RangeCopy = std::function<void(const PageTableRange& range, const int32_t* src)>;
  std::vector<PageTableRange> copyDirty(const RangeCopy& copy);
  // copyDirty into a host mirror ([maxBatch, 2, maxPagesPerSeq] int32).
  std::vector<PageTableRange> syncDirtyToHost(std::span<int32_t> mirror);

 private:
  void checkSlot(int32_t slot, const char* where) const;
  void checkLogicalPage(int32_t logicalPage, const char* where) const;
  void validateIds(std::span<const PageId> row, PageTableValidation mode, const char* where,
                   int32_t slot) const;
  void markSlotDirty(int32_t slot);
  // Refreshes image_ for the dirty slots, clears the dirty set and returns the ranges.
  std::vector<PageTableRange> takeDirtyRanges();
  // One slot's [2, maxPagesPerSeq] device-layout rows (K ids, then V ids) into dst.
  void writeSlotLayout(int32_t slot, int32_t* dst) const;

  int32_t maxBatch_;
  int32_t maxPagesPerSeq_;
  int32_t numPages_;
  bool isIdentity_ = false;
  std::vector<PageId> kIds_;        // [maxBatch, maxPagesPerSeq] host truth
  std::vector<int32_t> image_;      // [maxBatch, 2, maxPagesPerSeq] staging for uploads
  std::vector<uint8_t> slotDirty_;  // [maxBatch]
};

}  // namespace es::kv
