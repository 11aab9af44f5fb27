#include "kv/page_table.h"

#include <algorithm>
#include <string>
#include <unordered_set>

#include "common/errors.h"

namespace es::kv {

PageTable::PageTable(int32_t maxBatch, int32_t maxPagesPerSeq, int32_t numPages)
    : maxBatch_(maxBatch), maxPagesPerSeq_(maxPagesPerSeq), numPages_(numPages) {
  ES_CHECK_ARG(maxBatch > 0, "PageTable", "maxBatch", maxBatch, "must be > 0");
  ES_CHECK_ARG(maxPagesPerSeq > 0, "PageTable", "maxPagesPerSeq", maxPagesPerSeq, "must be > 0");
  ES_CHECK_ARG(maxPagesPerSeq <= kMaxKvCacheCapacity / kTokensPerPage, "PageTable",
               "maxPagesPerSeq", maxPagesPerSeq,
               "must be <= ", kMaxKvCacheCapacity / kTokensPerPage);
  checkedPoolPages(numPages, "numPages");
  const int64_t entries = int64_t{maxBatch} * maxPagesPerSeq;
  ES_CHECK_ARG(entries * 2 <= std::numeric_limits<int32_t>::max(), "PageTable",
               "maxBatch * maxPagesPerSeq", entries, "must keep the device layout (x2) in int32");
  kIds_.assign(static_cast<size_t>(entries), kUnusedPageEntry);
  image_.assign(static_cast<size_t>(entries * 2), kUnusedPageEntry);
  slotDirty_.assign(static_cast<size_t>(maxBatch), 1);  // the device copy starts unknown
}

void PageTable::checkSlot(int32_t slot, const char* where) const {
  ES_CHECK_ARG(slot >= 0 && slot < maxBatch_, where, "slot", slot, "must be in [0, ", maxBatch_,
               ")");
}

void PageTable::checkLogicalPage(int32_t logicalPage, const char* where) const {
  ES_CHECK_ARG(logicalPage >= 0 && logicalPage < maxPagesPerSeq_, where, "logicalPage", logicalPage,
               "must be in [0, ", maxPagesPerSeq_, ")");
}

void PageTable::setIdentity() {
  const int64_t needed = int64_t{maxBatch_} * maxPagesPerSeq_;
  ES_CHECK_ARG(numPages_ >= needed, "PageTable::setIdentity", "numPages", numPages_,
               "must be >= maxBatch * maxPagesPerSeq (", needed, ") for identity mapping");
  for (int64_t i = 0; i < needed; ++i) kIds_[static_cast<size_t>(i)] = static_cast<PageId>(i);
  for (int32_t b = 0; b < maxBatch_; ++b) markSlotDirty(b);
  isIdentity_ = true;
}

PageId PageTable::kPage(int32_t slot, int32_t logicalPage) const {
  checkSlot(slot, "PageTable::kPage");
  checkLogicalPage(logicalPage, "PageTable::kPage");
  return kIds_[static_cast<size_t>(int64_t{slot} * maxPagesPerSeq_ + logicalPage)];
}

PageId PageTable::vPage(int32_t slot, int32_t logicalPage) const {
  const PageId k = kPage(slot, logicalPage);
  return k == kUnusedPageEntry ? kUnusedPageEntry : k + numPages_;
}

std::span<const PageId> PageTable::kRow(int32_t slot) const {
  checkSlot(slot, "PageTable::kRow");
  return {kIds_.data() + int64_t{slot} * maxPagesPerSeq_, static_cast<size_t>(maxPagesPerSeq_)};
}

void PageTable::validateIds(std::span<const PageId> row, PageTableValidation mode,
                            const char* where, int32_t slot) const {
  ES_CHECK_ARG(static_cast<int64_t>(row.size()) <= maxPagesPerSeq_, where, "row length", row.size(),
               "must be <= maxPagesPerSeq (", maxPagesPerSeq_, ")");
  std::unordered_set<PageId> seen;
  bool sawUnused = false;
  for (size_t i = 0; i < row.size(); ++i) {
    const PageId id = row[i];
    const std::string name = "slot " + std::to_string(slot) + " page[" + std::to_string(i) + "]";
    if (id == kUnusedPageEntry) {
      sawUnused = true;
      continue;
    }
    ES_CHECK_ARG(id >= 0 && id < numPages_, where, name, id, "must be -1 or in [0, ", numPages_,
                 ")");
    ES_CHECK_ARG(mode != PageTableValidation::kDense || !sawUnused, where, name, id,
                 "follows a -1 entry: a dense row must be a prefix of live pages");
    ES_CHECK_ARG(seen.insert(id).second, where, name, id, "repeats a page id within the slot");
  }
}

void PageTable::validateRow(int32_t slot, PageTableValidation mode) const {
  validateIds(kRow(slot), mode, "PageTable::validateRow", slot);
}

void PageTable::setRow(int32_t slot, std::span<const PageId> kPages, PageTableValidation mode) {
  const PageTableRowUpdate update{slot, std::vector<PageId>(kPages.begin(), kPages.end())};
  setRows(std::span<const PageTableRowUpdate>(&update, 1), mode);
}

void PageTable::setRows(std::span<const PageTableRowUpdate> updates, PageTableValidation mode) {
  std::vector<uint8_t> touched(static_cast<size_t>(maxBatch_), 0);
  for (const PageTableRowUpdate& u : updates) {  // validate everything first
    checkSlot(u.slot, "PageTable::setRows");
    ES_CHECK_ARG(!touched[static_cast<size_t>(u.slot)], "PageTable::setRows", "slot", u.slot,
                 "appears more than once in one update");
    touched[static_cast<size_t>(u.slot)] = 1;
    validateIds(u.kPages, mode, "PageTable::setRows", u.slot);
  }
  for (const PageTableRowUpdate& u : updates) {  // then commit
    PageId* row = kIds_.data() + int64_t{u.slot} * maxPagesPerSeq_;
    std::fill(row, row + maxPagesPerSeq_, kUnusedPageEntry);
    std::copy(u.kPages.begin(), u.kPages.end(), row);
    markSlotDirty(u.slot);
  }
  if (!updates.empty()) isIdentity_ = false;
}

void PageTable::setEntry(int32_t slot, int32_t logicalPage, PageId kPage) {
  checkSlot(slot, "PageTable::setEntry");
  checkLogicalPage(logicalPage, "PageTable::setEntry");
  std::vector<PageId> row(kRow(slot).begin(), kRow(slot).end());
  row[static_cast<size_t>(logicalPage)] = kPage;
  validateIds(row, PageTableValidation::kSparseWindow, "PageTable::setEntry", slot);
  kIds_[static_cast<size_t>(int64_t{slot} * maxPagesPerSeq_ + logicalPage)] = kPage;
  markSlotDirty(slot);
  isIdentity_ = false;
}

void PageTable::clearEntry(int32_t slot, int32_t logicalPage) {
  setEntry(slot, logicalPage, kUnusedPageEntry);
}

void PageTable::compactRows(std::span<const int32_t> oldToNew) {
  ES_CHECK_ARG(static_cast<int64_t>(oldToNew.size()) <= maxBatch_, "PageTable::compactRows",
               "oldToNew.size()", oldToNew.size(), "must be <= maxBatch (", maxBatch_, ")");
  std::vector<uint8_t> destinationUsed(static_cast<size_t>(maxBatch_), 0);
  for (size_t s = 0; s < oldToNew.size(); ++s) {
    const int32_t d = oldToNew[s];
    const std::string name = "oldToNew[" + std::to_string(s) + "]";
    if (d == -1) continue;
    ES_CHECK_ARG(d >= 0 && d < maxBatch_, "PageTable::compactRows", name, d,
                 "must be -1 or in [0, ", maxBatch_, ")");
    ES_CHECK_ARG(!destinationUsed[static_cast<size_t>(d)], "PageTable::compactRows", name, d,
                 "is a destination more than once");
    destinationUsed[static_cast<size_t>(d)] = 1;
  }
  std::vector<PageId> next(kIds_.size(), kUnusedPageEntry);
  for (size_t s = 0; s < oldToNew.size(); ++s) {
    const int32_t d = oldToNew[s];
    if (d < 0) continue;
    std::copy_n(kIds_.begin() + static_cast<int64_t>(s) * maxPagesPerSeq_, maxPagesPerSeq_,
                next.begin() + int64_t{d} * maxPagesPerSeq_);
  }
  for (int32_t b = 0; b < maxBatch_; ++b) {
    const bool moved = static_cast<size_t>(b) < oldToNew.size() && oldToNew[b] == b;
    if (!moved) markSlotDirty(b);  // a slot that keeps its own row keeps its device copy
  }
  kIds_.swap(next);
  isIdentity_ = false;
}

void PageTable::writeSlotLayout(int32_t slot, int32_t* dst) const {
  const PageId* k = kIds_.data() + int64_t{slot} * maxPagesPerSeq_;
  for (int32_t p = 0; p < maxPagesPerSeq_; ++p) {
    dst[p] = k[p];
    dst[maxPagesPerSeq_ + p] = k[p] == kUnusedPageEntry ? kUnusedPageEntry : k[p] + numPages_;
  }
}

void PageTable::writeDeviceLayout(std::span<int32_t> out) const {
  ES_CHECK_ARG(static_cast<int64_t>(out.size()) == deviceLayoutElements(),
               "PageTable::writeDeviceLayout", "out.size()", out.size(), "must equal ",
               deviceLayoutElements());
  for (int32_t b = 0; b < maxBatch_; ++b) {
    writeSlotLayout(b, out.data() + int64_t{b} * 2 * maxPagesPerSeq_);
  }
}

void PageTable::markSlotDirty(int32_t slot) { slotDirty_[static_cast<size_t>(slot)] = 1; }

void PageTable::markAllDirty() { std::fill(slotDirty_.begin(), slotDirty_.end(), 1); }

std::vector<PageTableRange> PageTable::dirtyRanges() const {
  // One slot's K and V rows are adjacent in the device layout, and so are consecutive slots:
  // a run of dirty slots is one contiguous range.
  std::vector<PageTableRange> ranges;
  const int64_t slotElements = int64_t{2} * maxPagesPerSeq_;
  for (int32_t b = 0; b < maxBatch_;) {
    if (!slotDirty_[static_cast<size_t>(b)]) {
      ++b;
      continue;
    }
    int32_t end = b;
    while (end < maxBatch_ && slotDirty_[static_cast<size_t>(end)]) ++end;
    ranges.push_back({b * slotElements, (end - b) * slotElements});
    b = end;
  }
  return ranges;
}

std::vector<PageTableRange> PageTable::takeDirtyRanges() {
  std::vector<PageTableRange> ranges = dirtyRanges();
  for (int32_t b = 0; b < maxBatch_; ++b) {
    if (slotDirty_[static_cast<size_t>(b)]) {
      writeSlotLayout(b, image_.data() + int64_t{b} * 2 * maxPagesPerSeq_);
    }
  }
  std::fill(slotDirty_.begin(), slotDirty_.end(), 0);
  return ranges;
}

std::vector<PageTableRange> PageTable::syncDirtyToHost(std::span<int32_t> mirror) {
  ES_CHECK_ARG(static_cast<int64_t>(mirror.size()) == deviceLayoutElements(),
               "PageTable::syncDirtyToHost", "mirror.size()", mirror.size(), "must equal ",
               deviceLayoutElements());
  return copyDirty([&](const PageTableRange& r, const int32_t* src) {
    std::copy_n(src, r.count, mirror.begin() + r.offset);
  });
}

std::vector<PageTableRange> PageTable::copyDirty(const RangeCopy& copy) {
  std::vector<PageTableRange> ranges = takeDirtyRanges();
  for (const PageTableRange& r : ranges) copy(r, image_.data() + r.offset);
  return ranges;
}

}  // namespace es::kv
