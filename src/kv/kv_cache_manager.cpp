#include "kv/kv_cache_manager.h"

#include <algorithm>
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
      draftLengths_(static_cast<size_t>(plan_.maxBatchSize), 0) {
  base_.setIdentity();
  draft_.setIdentity();
  if (plan_.numSwaPages > 0) {
    swa_.emplace(plan_.maxBatchSize, plan_.maxPagesPerSeq, plan_.numSwaPages);
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
  ES_CHECK_ARG(activeCount_ < plan_.maxBatchSize, "KvCacheManager::admit", "active slots",
               activeCount_, "already at maxBatchSize (", plan_.maxBatchSize, ")");
  const int32_t slot = activeCount_++;
  baseLengths_[static_cast<size_t>(slot)] = 0;
  draftLengths_[static_cast<size_t>(slot)] = 0;
  return slot;
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
  commit(baseLengths_, slot, tokens, "KvCacheManager::commitBase");
}

void KvCacheManager::commitDraft(int32_t slot, int32_t tokens) {
  commit(draftLengths_, slot, tokens, "KvCacheManager::commitDraft");
}

void KvCacheManager::checkWritable(int32_t slot, int64_t firstPosition, int64_t count) const {
  checkActive(slot, "KvCacheManager::checkWritable");
  ES_CHECK_ARG(firstPosition >= 0, "KvCacheManager::checkWritable", "firstPosition",
               firstPosition, "must be >= 0");
  ES_CHECK_ARG(count >= 0 && firstPosition + count <= plan_.capacityPadded,
               "KvCacheManager::checkWritable", "count", count,
               "from position " + std::to_string(firstPosition) + " must end within capacity ",
               plan_.capacityPadded);
}

std::vector<int32_t> KvCacheManager::retireAndCompact(std::span<const uint8_t> keep) {
  ES_CHECK_ARG(static_cast<int32_t>(keep.size()) == activeCount_,
               "KvCacheManager::retireAndCompact", "keep.size()", keep.size(),
               "must equal activeCount (", activeCount_, ")");
  // Full permutation of all slots: survivors to [0, n) in order, retired slots' rows to
  // [n, activeCount) so their pages stay owned, inactive slots stay put.
  std::vector<int32_t> permutation(static_cast<size_t>(plan_.maxBatchSize));
  std::iota(permutation.begin(), permutation.end(), 0);
  std::vector<int32_t> oldToNew(static_cast<size_t>(activeCount_), -1);
  const int32_t survivors = static_cast<int32_t>(std::count_if(keep.begin(), keep.end(), [](uint8_t k) { return k != 0; }));
  int32_t nextLive = 0, nextFree = survivors;
  std::vector<int32_t> baseNext(baseLengths_.size(), 0), draftNext(draftLengths_.size(), 0);
  for (int32_t s = 0; s < activeCount_; ++s) {
    if (keep[static_cast<size_t>(s)]) {
      permutation[static_cast<size_t>(s)] = nextLive;
      oldToNew[static_cast<size_t>(s)] = nextLive;
      baseNext[static_cast<size_t>(nextLive)] = baseLengths_[static_cast<size_t>(s)];
      draftNext[static_cast<size_t>(nextLive)] = draftLengths_[static_cast<size_t>(s)];
      ++nextLive;
    } else {
      permutation[static_cast<size_t>(s)] = nextFree++;
    }
  }
  base_.compactRows(permutation);
  draft_.compactRows(permutation);
  if (swa_) swa_->compactRows(permutation);
  baseLengths_.swap(baseNext);
  draftLengths_.swap(draftNext);
  activeCount_ = survivors;
  return oldToNew;
}

}  // namespace es::kv
