#pragma once
// The page constants of the paged KV cache (spec §1.1) that both the kernels and the cache
// bookkeeping (kv/page_geometry.h) are built on: one page holds the K (or V) rows of
// kTokensPerPage tokens, and a pool of numPages K pages keeps its V pages at ids k + numPages.
#include <cstdint>
#include <limits>

namespace es::kv {

using PageId = int32_t;  // one K/V page *pair* in one pool; the V id is derived, never stored

constexpr int32_t kTokensPerPage = 128;  // one attention K/V tile = one page
constexpr int32_t kUnusedPageEntry = -1;
// Largest K-page count for which V ids (k + numPages) and 2 * numPages stay positive int32.
constexpr int64_t kMaxKvPoolPages = std::numeric_limits<int32_t>::max() / 2;
// Largest token capacity whose page-aligned value fits int32.
constexpr int32_t kMaxKvCacheCapacity =
    (std::numeric_limits<int32_t>::max() / kTokensPerPage) * kTokensPerPage;

}  // namespace es::kv
