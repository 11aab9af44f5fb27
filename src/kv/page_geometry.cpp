#include "kv/page_geometry.h"

#include "common/errors.h"

namespace es::kv {
namespace {

void check_capacity(int64_t cap, const char* where, const char* name) {
  ES_CHECK_ARG(cap > 0, where, name, cap, "must be > 0");
  ES_CHECK_ARG(cap <= kMaxKvCacheCapacity, where, name, cap, "must be <= kMaxKvCacheCapacity (",
               kMaxKvCacheCapacity, ")");
}

int64_t pages_for(int64_t cap) { return (cap + kTokensPerPage - 1) / kTokensPerPage; }

// a * b for positive a, b; throws if the product would overflow int64.
int64_t checked_product(int64_t a, int64_t b, const char* where, const char* name) {
  ES_CHECK_ARG(a <= std::numeric_limits<int64_t>::max() / b, where, name, a, "times ", b,
               " pages overflows int64");
  return a * b;
}

}  // namespace

int32_t pagesPerSlot(int32_t maxCapPadded) {
  check_capacity(maxCapPadded, "pagesPerSlot", "maxCapPadded");
  ES_CHECK_ARG(maxCapPadded % kTokensPerPage == 0, "pagesPerSlot", "maxCapPadded", maxCapPadded,
               "must be a multiple of ", kTokensPerPage);
  return maxCapPadded / kTokensPerPage;
}

int32_t computeMaxPagesPerSeq(int32_t maxKVCacheCapacity) {
  check_capacity(maxKVCacheCapacity, "computeMaxPagesPerSeq", "maxKVCacheCapacity");
  return static_cast<int32_t>(pages_for(maxKVCacheCapacity));
}

int32_t padKvCacheCapacity(int32_t maxKVCacheCapacity) {
  check_capacity(maxKVCacheCapacity, "padKvCacheCapacity", "maxKVCacheCapacity");
  return static_cast<int32_t>(pages_for(maxKVCacheCapacity) * kTokensPerPage);
}

int32_t resolveKvCacheCapacity(int32_t kvCacheCapacity, int32_t maxKVCacheCapacity) {
  check_capacity(maxKVCacheCapacity, "resolveKvCacheCapacity", "maxKVCacheCapacity");
  ES_CHECK_ARG(kvCacheCapacity >= 0, "resolveKvCacheCapacity", "kvCacheCapacity", kvCacheCapacity,
               "must be >= 0 (0 means full capacity)");
  ES_CHECK_ARG(kvCacheCapacity <= maxKVCacheCapacity, "resolveKvCacheCapacity", "kvCacheCapacity",
               kvCacheCapacity, "must be <= maxKVCacheCapacity (", maxKVCacheCapacity, ")");
  return kvCacheCapacity == 0 ? maxKVCacheCapacity : kvCacheCapacity;
}

bool isReducedKvCacheCapacity(int32_t kvCacheCapacity, int32_t maxKVCacheCapacity) {
  return resolveKvCacheCapacity(kvCacheCapacity, maxKVCacheCapacity) < maxKVCacheCapacity;
}

int64_t computeSwaPrivatePagesPerSlot(int64_t slidingWindowCapacity, int64_t tokensPerPage,
                                      int64_t replacementPageCount) {
  const char* where = "computeSwaPrivatePagesPerSlot";
  check_capacity(slidingWindowCapacity, where, "slidingWindowCapacity");
  ES_CHECK_ARG(tokensPerPage > 0, where, "tokensPerPage", tokensPerPage, "must be > 0");
  ES_CHECK_ARG(replacementPageCount > 0, where, "replacementPageCount", replacementPageCount,
               "must be > 0");
  ES_CHECK_ARG(replacementPageCount <= kMaxKvPoolPages, where, "replacementPageCount",
               replacementPageCount, "must be <= kMaxKvPoolPages (", kMaxKvPoolPages, ")");
  const int64_t windowPages = (slidingWindowCapacity + tokensPerPage - 1) / tokensPerPage;
  return 2 * (windowPages + kSwaBoundaryHeadroomPages) + replacementPageCount;
}

int64_t computeMinimumSwaPoolPages(int64_t maxBatchSize, int64_t slidingWindowCapacity) {
  ES_CHECK_ARG(maxBatchSize > 0, "computeMinimumSwaPoolPages", "maxBatchSize", maxBatchSize,
               "must be > 0");
  const int64_t perSlot =
      computeSwaPrivatePagesPerSlot(slidingWindowCapacity, kTokensPerPage, kSwaReplacementPages);
  return checked_product(maxBatchSize, perSlot, "computeMinimumSwaPoolPages", "maxBatchSize");
}

int64_t computeMinimumKvPoolPages(int64_t maxBatchSize, int64_t maxKVCacheCapacity) {
  ES_CHECK_ARG(maxBatchSize > 0, "computeMinimumKvPoolPages", "maxBatchSize", maxBatchSize,
               "must be > 0");
  check_capacity(maxKVCacheCapacity, "computeMinimumKvPoolPages", "maxKVCacheCapacity");
  return checked_product(maxBatchSize, pages_for(maxKVCacheCapacity), "computeMinimumKvPoolPages",
                         "maxBatchSize");
}

int32_t checkedPoolPages(int64_t pages, const char* argumentName) {
  ES_CHECK_ARG(pages > 0, "checkedPoolPages", argumentName, pages, "must be > 0");
  ES_CHECK_ARG(pages <= kMaxKvPoolPages, "checkedPoolPages", argumentName, pages,
               "must be <= kMaxKvPoolPages (", kMaxKvPoolPages, ")");
  return static_cast<int32_t>(pages);
}

}  // namespace es::kv
