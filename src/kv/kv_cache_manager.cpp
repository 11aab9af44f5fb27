#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "common/errors.h"

namespace es::kv {
namespace {

TensorView poolView(const Buffer& arena, const KvLayerPlan& l, DType dtype) {
  auto* base = static_cast<uint8_t*>(arena.data()) + l.offset;
  return TensorView::make(base, dtype, {2, l.numPages, kTokensPerPage, l.numKvHeads, l.headDim},
                          arena.space());
}

}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& config, MemorySpace space)
    : plan_(planKvCache(config)),
      arena_(Buffer::allocate(space, plan_.totalBytes)),
      base_(plan_.maxBatchSize, plan_.maxPagesPerSeq, plan_.numPages),
      draft_(plan_.maxBatchSize, plan_.maxPagesPerSeq, plan_.numPages),
      baseLengths_(static_cast<size_t>(plan_.maxBatchSize), 0),
      draftLengths_(static_cast<size_t>(plan_.maxBatchSize), 0),
      slotRequest_(static_cast<size_t>(plan_.maxBatchSize), -1),
      slotDraft_(static_cast<size_t>(plan_.maxBatchSize), 0),
      sharedBlocks_(static_cast<size_t>(plan_.maxBatchSize), 0) {
  if (plan_.prefixCachePages > 0) {
    // Rows stay -1 until a slot is admitted with its pages.
    prefix_.emplace(plan_.numPages, plan_.draft.empty() ? 0 : plan_.numPages);
  } else {
    base_.setIdentity();
    draft_.setIdentity();
  }
  if (plan_.numSwaPages > 0) {
    // Same logical page range as the dense table (positions stay absolute); only the pages of
    // each slot's window are mapped.
    swa_.emplace(plan_.maxBatchSize, plan_.maxPagesPerSeq, plan_.numSwaPages);
    swaPages_.emplace(*swa_, plan_.slidingWindow);
  }
}

TensorView KvCacheManager::basePool(int32_t layer) const {
  ES_CHECK_ARG(layer >= 0 && layer < static_cast<int32_t>(plan_.base.size()),
               "KvCacheManager::basePool", "layer", layer, "must be in [0, ", plan_.base.size(),
               ")");
  return poolView(arena_, plan_.base[static_cast<size_t>(layer)], plan_.dtype);
}

TensorView KvCacheManager::draftPool(int32_t layer) const {
  ES_CHECK_ARG(layer >= 0 && layer < static_cast<int32_t>(plan_.draft.size()),
               "KvCacheManager::draftPool", "layer", layer, "must be in [0, ", plan_.draft.size(),
               ")");
  return poolView(arena_, plan_.draft[static_cast<size_t>(layer)], plan_.dtype);
}

void KvCacheManager::checkActive(int32_t slot, const char* where) const {
  ES_CHECK_ARG(slot >= 0 && slot < activeCount_, where, "slot", slot,
               "must be an active slot in [0, ", activeCount_, ")");
}

int32_t KvCacheManager::admit() {
  ES_CHECK_ARG(!prefix_, "KvCacheManager::admit", "prompt", "(none)",
               "is needed with prefix reuse on: use admit(prompt, positions, withDraft)");
  ES_CHECK_ARG(activeCount_ < plan_.maxBatchSize, "KvCacheManager::admit", "active slots",
               activeCount_, "already at maxBatchSize (", plan_.maxBatchSize, ")");
  if (swaPages_) {
    // Refuses (changing nothing) while retired slots' window pages wait for their last step.
    const int32_t windowSlot = swaPages_->admit();
    ES_CHECK_ARG(windowSlot == activeCount_, "KvCacheManager::admit", "window slot", windowSlot,
                 "internal: differs from the dense slot ", activeCount_);
  }
  const int32_t slot = activeCount_++;
  baseLengths_[static_cast<size_t>(slot)] = 0;
  draftLengths_[static_cast<size_t>(slot)] = 0;
  return slot;
}

void KvCacheManager::setPoisonFreshPages(bool on) {
  ES_CHECK_ARG(!on || arena_.space() != MemorySpace::kDevice, "KvCacheManager::setPoisonFreshPages",
               "on", on, "needs host pools (the CPU backend)");
  poisonFresh_ = on;
}

void KvCacheManager::poison(PageId page, bool draftPools) {
  const std::vector<KvLayerPlan>& layers = draftPools ? plan_.draft : plan_.base;
  for (size_t l = 0; l < layers.size(); ++l) {
    const TensorView pool = poolView(arena_, layers[l], plan_.dtype);
    const int64_t pageBytes = layers[l].bytes / 2 / layers[l].numPages;
    for (int64_t plane = 0; plane < 2; ++plane) {  // K, then V
      auto* at = static_cast<uint8_t*>(pool.data) + (plane * layers[l].numPages + page) * pageBytes;
      std::memset(at, 0xFF, static_cast<size_t>(pageBytes));  // NaN in f32, f16 and bf16
    }
  }
}

KvCacheManager::Admission KvCacheManager::admit(std::span<const int32_t> prompt, int32_t positions,
                                                bool withDraft) {
  constexpr const char* kWhere = "KvCacheManager::admit";
  ES_CHECK_ARG(prefix_.has_value(), kWhere, "prompt.size()", prompt.size(),
               "needs prefix reuse on (plan prefixCachePages > 0): use admit()");
  ES_CHECK_ARG(activeCount_ < plan_.maxBatchSize, kWhere, "active slots", activeCount_,
               "already at maxBatchSize (", plan_.maxBatchSize, ")");
  ES_CHECK_ARG(!prompt.empty(), kWhere, "prompt.size()", 0, "must be > 0");
  ES_CHECK_ARG(
      positions >= static_cast<int64_t>(prompt.size()) && positions <= plan_.capacityPadded, kWhere,
      "positions", positions,
      "must be in [prompt.size() = " + std::to_string(prompt.size()) + ", capacity ",
      plan_.capacityPadded, "]");
  ES_CHECK_ARG(!withDraft || !plan_.draft.empty(), kWhere, "withDraft", withDraft,
               "needs draft layers in the cache");
  const PrefixAcquireResult acquired = prefix_->acquire(prompt, withDraft);
  const int32_t blocks = (positions + kTokensPerPage - 1) / kTokensPerPage;
  try {
    for (int32_t b = acquired.matchedBlocks; b < blocks; ++b) {
      const PrefixBlockPages fresh = prefix_->allocateBlock(acquired.request);
      if (poisonFresh_) {
        poison(fresh.base, false);
        if (fresh.draft >= 0) poison(fresh.draft, true);
      }
    }
  } catch (...) {
    prefix_->release(acquired.request);
    throw;
  }
  std::vector<PageId> baseRow, draftRow;
  for (const PrefixBlockPages& p : prefix_->requestBlocks(acquired.request)) {
    baseRow.push_back(p.base);
    if (withDraft) draftRow.push_back(p.draft);
  }
  const int32_t slot = activeCount_++;
  base_.setRow(slot, baseRow);
  draft_.setRow(slot, draftRow);
  const int32_t reused = acquired.matchedBlocks * kTokensPerPage;
  baseLengths_[static_cast<size_t>(slot)] = reused;
  draftLengths_[static_cast<size_t>(slot)] = reused;
  slotRequest_[static_cast<size_t>(slot)] = acquired.request;
  slotDraft_[static_cast<size_t>(slot)] = withDraft;
  sharedBlocks_[static_cast<size_t>(slot)] = acquired.matchedBlocks;
  return {slot, reused};
}

int32_t KvCacheManager::publish(int32_t slot, std::span<const int32_t> tokens) {
  constexpr const char* kWhere = "KvCacheManager::publish";
  ES_CHECK_ARG(prefix_.has_value(), kWhere, "slot", slot, "needs prefix reuse on");
  checkActive(slot, kWhere);
  const size_t s = static_cast<size_t>(slot);
  // Only committed positions hold K/V of exactly these tokens (rows past them are scratch).
  int64_t known = std::min<int64_t>(static_cast<int64_t>(tokens.size()), baseLengths_[s]);
  if (slotDraft_[s]) known = std::min<int64_t>(known, draftLengths_[s]);
  const int32_t created =
      prefix_->publish(slotRequest_[s], tokens.first(static_cast<size_t>(known)));
  sharedBlocks_[s] += created;
  // Published blocks are full blocks below the committed length: later writes start after them.
  ES_CHECK_ARG(int64_t{sharedBlocks_[s]} * kTokensPerPage <= baseLengths_[s], kWhere, "slot", slot,
               "internal: shares ", sharedBlocks_[s], " blocks beyond its committed length ",
               baseLengths_[s]);
  return created;
}

int32_t KvCacheManager::sharedTokens(int32_t slot) const {
  checkActive(slot, "KvCacheManager::sharedTokens");
  return sharedBlocks_[static_cast<size_t>(slot)] * kTokensPerPage;
}

KvCacheManager::PageCounts KvCacheManager::pageCounts() const {
  PageCounts c{.total = plan_.numPages};
  if (prefix_) {
    c.free = prefix_->freeBasePages();
    c.cached = prefix_->cachedBasePages();
  } else {
    c.free = plan_.numPages - activeCount_ * plan_.maxPagesPerSeq;
  }
  c.used = c.total - c.free;
  return c;
}

int32_t KvCacheManager::baseLength(int32_t slot) const {
  checkActive(slot, "KvCacheManager::baseLength");
  return baseLengths_[static_cast<size_t>(slot)];
}

int32_t KvCacheManager::draftLength(int32_t slot) const {
  checkActive(slot, "KvCacheManager::draftLength");
  return draftLengths_[static_cast<size_t>(slot)];
}

void KvCacheManager::commit(std::vector<int32_t>& lengths, int32_t slot, int32_t tokens,
                            const char* where) {
  checkActive(slot, where);
  ES_CHECK_ARG(tokens >= 0, where, "tokens", tokens, "must be >= 0");
  const int64_t next = int64_t{lengths[static_cast<size_t>(slot)]} + tokens;
  ES_CHECK_ARG(next <= plan_.capacityPadded, where, "tokens", tokens,
               "would grow slot " + std::to_string(slot) + " to ", next,
               " tokens, above its capacity ", plan_.capacityPadded);
  lengths[static_cast<size_t>(slot)] = static_cast<int32_t>(next);
}

void KvCacheManager::commitBase(int32_t slot, int32_t tokens) {
  if (swaPages_) {
    checkActive(slot, "KvCacheManager::commitBase");
    // Validates tokens against the rows the slot's last step wrote (and changes nothing on error).
    swaPages_->commit(slot, tokens);
  }
  commit(baseLengths_, slot, tokens, "KvCacheManager::commitBase");
}

int64_t KvCacheManager::beginStep(std::span<const SwaStepWrite> writes) {
  constexpr const char* kWhere = "KvCacheManager::beginStep";
  if (swaPages_) return swaPages_->beginStep(writes);  // validates the same and more
  checkStepWrites(writes, activeCount_, kWhere);
  for (size_t i = 0; i < writes.size(); ++i) {
    const SwaStepWrite& w = writes[i];
    ES_CHECK_ARG(
        int64_t{baseLengths_[static_cast<size_t>(w.slot)]} + w.count <= plan_.capacityPadded,
        kWhere, "writes[" + std::to_string(i) + "].count", w.count, "must be <= capacity ",
        plan_.capacityPadded, " - length ", baseLengths_[static_cast<size_t>(w.slot)]);
  }
  return ++lastIssued_;
}

void KvCacheManager::completeStep(int64_t stepId) {
  if (swaPages_) return swaPages_->completeStep(stepId);
  ES_CHECK_ARG(stepId > lastCompleted_ && stepId <= lastIssued_, "KvCacheManager::completeStep",
               "stepId", stepId, "must be in (lastCompletedStep ", lastCompleted_,
               ", lastIssuedStep ", lastIssued_, "]");
  lastCompleted_ = stepId;
}

int64_t KvCacheManager::lastIssuedStep() const {
  return swaPages_ ? swaPages_->lastIssuedStep() : lastIssued_;
}

int64_t KvCacheManager::lastCompletedStep() const {
  return swaPages_ ? swaPages_->lastCompletedStep() : lastCompleted_;
}

int64_t KvCacheManager::maxStepTokens(int32_t slot) const {
  checkActive(slot, "KvCacheManager::maxStepTokens");
  const int64_t room = plan_.capacityPadded - int64_t{baseLengths_[static_cast<size_t>(slot)]};
  return swaPages_ ? std::min(room, swaPages_->maxStepTokens(slot)) : room;
}

void KvCacheManager::checkWindowMapped(int32_t slot, int64_t firstKey, int64_t endKey) const {
  constexpr const char* kWhere = "KvCacheManager::checkWindowMapped";
  checkActive(slot, kWhere);
  if (!swaPages_ || endKey <= firstKey) return;
  ES_CHECK_ARG(firstKey >= 0 && endKey <= plan_.capacityPadded, kWhere, "endKey", endKey,
               "must be within capacity ", plan_.capacityPadded,
               " (firstKey " + std::to_string(firstKey) + ")");
  const int64_t last = (endKey - 1) / kTokensPerPage;
  for (int64_t p = firstKey / kTokensPerPage; p <= last; ++p) {
    ES_CHECK_ARG(swa_->kPage(slot, static_cast<int32_t>(p)) >= 0, kWhere, "slot", slot,
                 "has no window page for keys [", p * kTokensPerPage, ", ",
                 (p + 1) * kTokensPerPage,
                 ") a sliding-window row reads (keys [" + std::to_string(firstKey) + ", " +
                     std::to_string(endKey) + ")): beginStep() must bind them before the forward");
  }
}

void KvCacheManager::commitDraft(int32_t slot, int32_t tokens) {
  commit(draftLengths_, slot, tokens, "KvCacheManager::commitDraft");
}

void KvCacheManager::checkWritable(int32_t slot, int64_t firstPosition, int64_t count) const {
  checkActive(slot, "KvCacheManager::checkWritable");
  ES_CHECK_ARG(firstPosition >= 0, "KvCacheManager::checkWritable", "firstPosition", firstPosition,
               "must be >= 0");
  ES_CHECK_ARG(count >= 0 && firstPosition + count <= plan_.capacityPadded,
               "KvCacheManager::checkWritable", "count", count,
               "from position " + std::to_string(firstPosition) + " must end within capacity ",
               plan_.capacityPadded);
  const int64_t shared = int64_t{sharedBlocks_[static_cast<size_t>(slot)]} * kTokensPerPage;
  ES_CHECK_ARG(count == 0 || firstPosition >= shared, "KvCacheManager::checkWritable",
               "firstPosition", firstPosition, "must be >= the slot's shared prefix (", shared,
               " tokens in pages other requests read)");
}

std::vector<int32_t> KvCacheManager::retireAndCompact(std::span<const uint8_t> keep) {
  ES_CHECK_ARG(static_cast<int32_t>(keep.size()) == activeCount_,
               "KvCacheManager::retireAndCompact", "keep.size()", keep.size(),
               "must equal activeCount (", activeCount_, ")");
  // Full permutation of all slots: survivors to [0, n) in order, retired slots' rows to
  // [n, activeCount) so their pages stay owned, inactive slots stay put.
  // Identity mapping: a full permutation of all slots (survivors to [0, n) in order, retired
  // slots' rows to [n, activeCount) so their pages stay owned, inactive slots stay put).
  // Prefix reuse: retired and inactive rows become -1.
  std::vector<int32_t> permutation(static_cast<size_t>(plan_.maxBatchSize), -1);
  if (!prefix_) std::iota(permutation.begin(), permutation.end(), 0);
  std::vector<int32_t> oldToNew(static_cast<size_t>(activeCount_), -1);
  const int32_t survivors = static_cast<int32_t>(
      std::count_if(keep.begin(), keep.end(), [](uint8_t k) { return k != 0; }));
  int32_t nextLive = 0, nextFree = survivors;
  const size_t maxBatch = static_cast<size_t>(plan_.maxBatchSize);
  std::vector<int32_t> baseNext(maxBatch, 0), draftNext(maxBatch, 0), sharedNext(maxBatch, 0);
  std::vector<int64_t> requestNext(maxBatch, -1);
  std::vector<uint8_t> draftFlagNext(maxBatch, 0);
  for (int32_t s = 0; s < activeCount_; ++s) {
    const size_t from = static_cast<size_t>(s);
    if (keep[from]) {
      const size_t to = static_cast<size_t>(nextLive);
      permutation[from] = nextLive;
      oldToNew[from] = nextLive;
      baseNext[to] = baseLengths_[from];
      draftNext[to] = draftLengths_[from];
      sharedNext[to] = sharedBlocks_[from];
      requestNext[to] = slotRequest_[from];
      draftFlagNext[to] = slotDraft_[from];
      ++nextLive;
    } else if (prefix_) {
      prefix_->release(slotRequest_[from]);
    } else {
      permutation[from] = nextFree++;
    }
  }
  base_.compactRows(permutation);
  draft_.compactRows(permutation);
  // The window manager moves the same survivors to the same slots and clears the rest of swa_.
  if (swaPages_) swaPages_->retireAndCompact(keep);
  baseLengths_.swap(baseNext);
  draftLengths_.swap(draftNext);
  sharedBlocks_.swap(sharedNext);
  slotRequest_.swap(requestNext);
  slotDraft_.swap(draftFlagNext);
  activeCount_ = survivors;
  return oldToNew;
}

}  // namespace es::kv
