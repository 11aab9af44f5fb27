#include "kv/swa_page_manager.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "common/errors.h"

namespace es::kv {

namespace {
int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

SwaPageManager::SwaPageManager(PageTable& table, int32_t slidingWindow)
    : table_(&table), window_(slidingWindow) {
  const char* where = "SwaPageManager";
  // Both helpers validate their inputs and name them in their errors.
  const int64_t minimum = computeMinimumSwaPoolPages(table.maxBatch(), slidingWindow);
  privatePages_ = static_cast<int32_t>(
      computeSwaPrivatePagesPerSlot(slidingWindow, kTokensPerPage, kSwaReplacementPages));
  ES_CHECK_ARG(table.numPages() >= minimum, where, "table.numPages()", table.numPages(),
               "must be >= computeMinimumSwaPoolPages(maxBatch ", table.maxBatch(), ", window ",
               slidingWindow, ") = ", minimum);
  slots_.resize(static_cast<size_t>(table.maxBatch()));
  for (Slot& s : slots_) s.bound.assign(static_cast<size_t>(table.maxPagesPerSeq()), Bound{-1, 0});
  // Popped from the back: the lowest ids are handed out first, which keeps tests readable.
  freePool_.resize(static_cast<size_t>(table.numPages()));
  std::iota(freePool_.rbegin(), freePool_.rend(), 0);
  std::vector<PageTableRowUpdate> clear;
  for (int32_t b = 0; b < table.maxBatch(); ++b) clear.push_back({b, {}});
  table.setRows(clear, PageTableValidation::kSparseWindow);
}

void SwaPageManager::checkActive(int32_t slot, const char* where) const {
  ES_CHECK_ARG(slot >= 0 && slot < activeCount_, where, "slot", slot,
               "must be an active slot in [0, activeCount ", activeCount_, ")");
}

int64_t SwaPageManager::windowFirstPage(int64_t endpoint) const {
  return std::max<int64_t>(0, endpoint - window_) / kTokensPerPage;
}

int32_t SwaPageManager::admit() {
  const char* where = "SwaPageManager::admit";
  ES_CHECK_ARG(activeCount_ < maxBatchSize(), where, "activeCount", activeCount_,
               "must be < maxBatchSize (", maxBatchSize(), ") to admit a slot");
  ES_CHECK_ARG(freePoolPages() >= privatePages_, where, "freePoolPages", freePoolPages(),
               "must be >= privatePagesPerSlot (", privatePages_, "); ", deferredPoolPages(),
               " pages of retired slots wait for completeStep() of step ",
               deferred_.empty() ? 0
                                 : std::max_element(deferred_.begin(), deferred_.end(),
                                                    [](const Deferred& a, const Deferred& b) {
                                                      return a.lastReader < b.lastReader;
                                                    })
                                       ->lastReader);
  const int32_t slot = activeCount_;
  Slot& s = slots_[static_cast<size_t>(slot)];
  s = Slot{};
  s.bound.assign(static_cast<size_t>(table_->maxPagesPerSeq()), Bound{-1, 0});
  for (int32_t i = 0; i < privatePages_; ++i) {
    s.reserved.push_back(freePool_.back());
    freePool_.pop_back();
  }
  ++activeCount_;
  return slot;
}

int64_t SwaPageManager::maxStepTokens(int32_t slot) const {
  checkActive(slot, "SwaPageManager::maxStepTokens");
  const Slot& s = slots_[static_cast<size_t>(slot)];
  // A step binds every page of [first, hi): pages already bound there are free of charge, each
  // other one takes a reserved page. Walk up from `first` until the reservation runs out.
  int64_t reserved = static_cast<int64_t>(s.reserved.size());
  int64_t hi = windowFirstPage(s.length);
  while (hi < table_->maxPagesPerSeq()) {
    if (s.bound[static_cast<size_t>(hi)].page < 0) {
      if (reserved == 0) break;
      --reserved;
    }
    ++hi;
  }
  return std::max<int64_t>(0, hi * kTokensPerPage - s.length);
}

void checkStepWrites(std::span<const SwaStepWrite> writes, int32_t activeCount, const char* where) {
  ES_CHECK_ARG(!writes.empty(), where, "writes.size()", writes.size(), "must be > 0");
  std::vector<uint8_t> seen(static_cast<size_t>(activeCount), 0);
  for (size_t i = 0; i < writes.size(); ++i) {
    const SwaStepWrite& w = writes[i];
    const std::string name = "writes[" + std::to_string(i) + "]";
    ES_CHECK_ARG(w.slot >= 0 && w.slot < activeCount, where, name + ".slot", w.slot,
                 "must be an active slot in [0, activeCount ", activeCount, ")");
    ES_CHECK_ARG(!seen[static_cast<size_t>(w.slot)], where, name + ".slot", w.slot,
                 "appears more than once in one step");
    seen[static_cast<size_t>(w.slot)] = 1;
    ES_CHECK_ARG(w.count > 0, where, name + ".count", w.count, "must be > 0");
  }
}

int64_t SwaPageManager::beginStep(std::span<const SwaStepWrite> writes) {
  const char* where = "SwaPageManager::beginStep";
  checkStepWrites(writes, activeCount_, where);
  // Validate every write before changing anything.
  for (size_t i = 0; i < writes.size(); ++i) {
    const SwaStepWrite& w = writes[i];
    const std::string name = "writes[" + std::to_string(i) + "]";
    const Slot& s = slots_[static_cast<size_t>(w.slot)];
    ES_CHECK_ARG(int64_t{s.length} + w.count <= capacity(), where, name + ".count", w.count,
                 "must be <= capacity ", capacity(), " - length ", s.length);
    // Rows [length, writtenEnd) were produced by a step that may still read them (its own
    // queries attend to them); overwriting them before it completes would corrupt it.
    ES_CHECK_ARG(s.writtenEnd <= s.length || s.writerStep <= lastCompleted_, where, name + ".slot",
                 w.slot, "has uncommitted rows [", s.length, ", ", s.writtenEnd,
                 ") written by step ", s.writerStep,
                 ", which is still running; completeStep() it or commit them first");
    const int64_t first = windowFirstPage(s.length);
    const int64_t hi = ceilDiv(int64_t{s.length} + w.count, kTokensPerPage);
    int64_t missing = 0;
    for (int64_t p = first; p < hi; ++p) missing += s.bound[static_cast<size_t>(p)].page < 0;
    ES_CHECK_ARG(missing <= static_cast<int64_t>(s.reserved.size()), where, name + ".count",
                 w.count, "needs ", missing, " new pages but slot ", w.slot, " has only ",
                 s.reserved.size(), " reserved (", s.pending.size(),
                 " pending until their step completes; privatePagesPerSlot ", privatePages_,
                 "); at most ", maxStepTokens(w.slot), " rows fit now");
  }
  const int64_t step = ++lastIssued_;
  for (const SwaStepWrite& w : writes) {
    Slot& s = slots_[static_cast<size_t>(w.slot)];
    const int64_t first = windowFirstPage(s.length);
    const int64_t hi = ceilDiv(int64_t{s.length} + w.count, kTokensPerPage);
    for (int64_t p = first; p < hi; ++p) {
      Bound& b = s.bound[static_cast<size_t>(p)];
      if (b.page < 0) {
        b.page = s.reserved.back();
        s.reserved.pop_back();
        table_->setEntry(w.slot, static_cast<int32_t>(p), b.page);
      }
      b.lastReader = step;
    }
    s.writtenEnd = s.length + w.count;
    s.writerStep = step;
  }
  return step;
}

void SwaPageManager::completeStep(int64_t stepId) {
  ES_CHECK_ARG(stepId > lastCompleted_ && stepId <= lastIssued_, "SwaPageManager::completeStep",
               "stepId", stepId, "must be in (lastCompletedStep ", lastCompleted_,
               ", lastIssuedStep ", lastIssued_, "]");
  lastCompleted_ = stepId;
  for (int32_t slot = 0; slot < activeCount_; ++slot) {
    Slot& s = slots_[static_cast<size_t>(slot)];
    auto keep = std::partition(s.pending.begin(), s.pending.end(),
                               [&](const Pending& p) { return p.lastReader > stepId; });
    for (auto it = keep; it != s.pending.end(); ++it) s.reserved.push_back(it->page);
    s.pending.erase(keep, s.pending.end());
  }
  auto keep = std::partition(deferred_.begin(), deferred_.end(),
                             [&](const Deferred& d) { return d.lastReader > stepId; });
  for (auto it = keep; it != deferred_.end(); ++it) freePool_.push_back(it->page);
  deferred_.erase(keep, deferred_.end());
}

void SwaPageManager::commit(int32_t slot, int32_t tokens) {
  const char* where = "SwaPageManager::commit";
  checkActive(slot, where);
  Slot& s = slots_[static_cast<size_t>(slot)];
  ES_CHECK_ARG(tokens >= 0 && tokens <= s.writtenEnd - s.length, where, "tokens", tokens,
               "must be in [0, ", s.writtenEnd - s.length, "] (rows written past length ", s.length,
               " by the last step)");
  s.length += tokens;
  retireOutOfWindow(slot);
}

void SwaPageManager::retireOutOfWindow(int32_t slotIndex) {
  Slot& s = slots_[static_cast<size_t>(slotIndex)];
  const int64_t first = windowFirstPage(s.length);
  for (int64_t p = 0; p < first; ++p) {
    Bound& b = s.bound[static_cast<size_t>(p)];
    if (b.page < 0) continue;
    table_->clearEntry(slotIndex, static_cast<int32_t>(p));
    // A page whose last reader has already completed is free for this slot right away.
    if (b.lastReader <= lastCompleted_) {
      s.reserved.push_back(b.page);
    } else {
      s.pending.push_back({b.page, b.lastReader});
    }
    b = Bound{-1, 0};
  }
}

int32_t SwaPageManager::length(int32_t slot) const {
  checkActive(slot, "SwaPageManager::length");
  return slots_[static_cast<size_t>(slot)].length;
}

int32_t SwaPageManager::boundPages(int32_t slot) const {
  checkActive(slot, "SwaPageManager::boundPages");
  const auto& bound = slots_[static_cast<size_t>(slot)].bound;
  return static_cast<int32_t>(
      std::count_if(bound.begin(), bound.end(), [](const Bound& b) { return b.page >= 0; }));
}

int32_t SwaPageManager::pendingPages(int32_t slot) const {
  checkActive(slot, "SwaPageManager::pendingPages");
  return static_cast<int32_t>(slots_[static_cast<size_t>(slot)].pending.size());
}

int32_t SwaPageManager::reservedPages(int32_t slot) const {
  checkActive(slot, "SwaPageManager::reservedPages");
  return static_cast<int32_t>(slots_[static_cast<size_t>(slot)].reserved.size());
}

std::vector<PageId> SwaPageManager::ownedPages(int32_t slot) const {
  checkActive(slot, "SwaPageManager::ownedPages");
  const Slot& s = slots_[static_cast<size_t>(slot)];
  std::vector<PageId> out(s.reserved.begin(), s.reserved.end());
  for (const Bound& b : s.bound)
    if (b.page >= 0) out.push_back(b.page);
  for (const Pending& p : s.pending) out.push_back(p.page);
  std::sort(out.begin(), out.end());
  return out;
}

int32_t SwaPageManager::deferredPoolPages() const { return static_cast<int32_t>(deferred_.size()); }

std::vector<int32_t> SwaPageManager::retireAndCompact(std::span<const uint8_t> keep) {
  const char* where = "SwaPageManager::retireAndCompact";
  ES_CHECK_ARG(static_cast<int32_t>(keep.size()) == activeCount_, where, "keep.size()", keep.size(),
               "must equal activeCount (", activeCount_, ")");
  std::vector<int32_t> oldToNew(static_cast<size_t>(activeCount_), -1);
  std::vector<Slot> next(slots_.size());
  int32_t survivors = 0;
  for (int32_t slot = 0; slot < activeCount_; ++slot) {
    Slot& s = slots_[static_cast<size_t>(slot)];
    if (keep[static_cast<size_t>(slot)]) {
      oldToNew[static_cast<size_t>(slot)] = survivors;
      next[static_cast<size_t>(survivors++)] = std::move(s);
      continue;
    }
    // Every page of a retired slot may be read by its last step (bound and pending pages), so
    // the whole private set waits for the slot's latest reader. Reserved pages were never read
    // by a running step, but returning them together keeps the accounting simple.
    int64_t lastReader = s.writerStep;
    for (const Bound& b : s.bound) lastReader = std::max(lastReader, b.lastReader);
    for (const Pending& p : s.pending) lastReader = std::max(lastReader, p.lastReader);
    std::vector<PageId> pages = s.reserved;
    for (const Bound& b : s.bound)
      if (b.page >= 0) pages.push_back(b.page);
    for (const Pending& p : s.pending) pages.push_back(p.page);
    for (PageId p : pages) {
      if (lastReader <= lastCompleted_) {
        freePool_.push_back(p);
      } else {
        deferred_.push_back({p, lastReader});
      }
    }
  }
  for (Slot& s : next)
    if (s.bound.empty())
      s.bound.assign(static_cast<size_t>(table_->maxPagesPerSeq()), Bound{-1, 0});
  // compactRows leaves every slot nobody moves into all -1, which is what retired and inactive
  // slots must look like (their pages are no longer theirs).
  table_->compactRows(oldToNew);
  slots_.swap(next);
  activeCount_ = survivors;
  return oldToNew;
}

}  // namespace es::kv
