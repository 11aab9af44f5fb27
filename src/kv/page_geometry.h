#pragma once
// Paged-KV geometry: the sizing functions of spec §1.1 over the page constants of
// common/kv_page.h, and the sliding-window page budget.
//
// Every function validates its own inputs and throws es::InvalidArgument naming the argument,
// its value and the limit; nothing wraps, truncates or returns a sentinel. Results that can
// exceed int32 are int64; narrowing to int32 happens only through checkedPoolPages().
#include <cstdint>
#include <limits>

#include "common/kv_page.h"

namespace es::kv {

// The retained sliding-window image may straddle a page boundary.
constexpr int32_t kSwaBoundaryHeadroomPages = 1;
// Keeps single-token decode writable when it enters a new page.
constexpr int32_t kSwaReplacementPages = 1;

// capPadded / 128; capPadded must be a positive multiple of 128, at most kMaxKvCacheCapacity.
int32_t pagesPerSlot(int32_t maxCapPadded);

// ceil(cap / 128) computed in int64: the page table's last dimension. 0 < cap <=
// kMaxKvCacheCapacity.
int32_t computeMaxPagesPerSeq(int32_t maxKVCacheCapacity);

// Page-aligned capacity: computeMaxPagesPerSeq(cap) * 128 (fits int32 by construction).
int32_t padKvCacheCapacity(int32_t maxKVCacheCapacity);

// Per-layer marker: 0 (missing) means the engine's full capacity, else the marker itself.
// Errors: max <= 0, max > kMaxKvCacheCapacity, c < 0, c > max.
int32_t resolveKvCacheCapacity(int32_t kvCacheCapacity, int32_t maxKVCacheCapacity);

// Whether the marker advertises bounded (sliding-window) storage: resolved < max.
bool isReducedKvCacheCapacity(int32_t kvCacheCapacity, int32_t maxKVCacheCapacity);

// 2 * (ceil(W / P) + kSwaBoundaryHeadroomPages) + R: two retained window images (old and new stay
// live until the execution that reads them completes) plus R replacement pages.
// All inputs must be positive; W at most kMaxKvCacheCapacity. W=512 -> 11, W=4096 -> 67 (P=128,
// R=1).
int64_t computeSwaPrivatePagesPerSlot(int64_t slidingWindowCapacity, int64_t tokensPerPage,
                                      int64_t replacementPageCount);

// maxB * computeSwaPrivatePagesPerSlot(W, 128, kSwaReplacementPages).
int64_t computeMinimumSwaPoolPages(int64_t maxBatchSize, int64_t slidingWindowCapacity);

// maxB * ceil(cap / 128): the identity-mapped active slots own these first pages.
int64_t computeMinimumKvPoolPages(int64_t maxBatchSize, int64_t maxKVCacheCapacity);

// Narrow a pool page count to int32 after checking 0 < pages <= kMaxKvPoolPages.
int32_t checkedPoolPages(int64_t pages, const char* argumentName);

}  // namespace es::kv
