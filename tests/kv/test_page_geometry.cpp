#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "common/errors.h"
#include "kv/page_geometry.h"
#include "support/test_util.h"

namespace es::kv {
namespace {

constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();

using test::expectInvalidArgument;

TEST(PageGeometry, Constants) {
  EXPECT_EQ(kTokensPerPage, 128);
  EXPECT_EQ(kUnusedPageEntry, -1);
  EXPECT_EQ(kMaxKvPoolPages, 1073741823);
  EXPECT_EQ(kMaxKvCacheCapacity, 2147483520);  // 16777215 * 128
  // The limits mean what they say: V ids and 2*numPages stay positive int32.
  EXPECT_LE(2 * kMaxKvPoolPages, int64_t{kInt32Max});
  EXPECT_GT(2 * (kMaxKvPoolPages + 1), int64_t{kInt32Max});
  EXPECT_GT(int64_t{kMaxKvCacheCapacity} + kTokensPerPage, int64_t{kInt32Max});
}

TEST(PageGeometry, PagesPerSlot) {
  EXPECT_EQ(pagesPerSlot(128), 1);
  EXPECT_EQ(pagesPerSlot(256), 2);
  EXPECT_EQ(pagesPerSlot(kMaxKvCacheCapacity), kMaxKvCacheCapacity / 128);
  expectInvalidArgument([] { pagesPerSlot(127); }, "maxCapPadded");
  expectInvalidArgument([] { pagesPerSlot(129); }, "maxCapPadded");
  expectInvalidArgument([] { pagesPerSlot(0); }, "maxCapPadded");
  expectInvalidArgument([] { pagesPerSlot(-128); }, "maxCapPadded");
  // The only int32 values above kMaxKvCacheCapacity are not page multiples (the next multiple
  // overflows int32): INT32_MAX is refused.
  expectInvalidArgument([] { pagesPerSlot(kMaxKvCacheCapacity + 127); }, "maxCapPadded");
}

TEST(PageGeometry, MaxPagesPerSeqAndPadding) {
  EXPECT_EQ(computeMaxPagesPerSeq(1), 1);
  EXPECT_EQ(computeMaxPagesPerSeq(127), 1);
  EXPECT_EQ(computeMaxPagesPerSeq(128), 1);
  EXPECT_EQ(computeMaxPagesPerSeq(129), 2);
  EXPECT_EQ(computeMaxPagesPerSeq(4000), 32);
  EXPECT_EQ(computeMaxPagesPerSeq(kMaxKvCacheCapacity), 16777215);
  EXPECT_EQ(padKvCacheCapacity(129), 256);
  EXPECT_EQ(padKvCacheCapacity(kMaxKvCacheCapacity), kMaxKvCacheCapacity);
  expectInvalidArgument([] { computeMaxPagesPerSeq(kMaxKvCacheCapacity + 1); },
                        "maxKVCacheCapacity");
  expectInvalidArgument([] { computeMaxPagesPerSeq(kInt32Max); }, "maxKVCacheCapacity");
  expectInvalidArgument([] { computeMaxPagesPerSeq(0); }, "maxKVCacheCapacity");
  expectInvalidArgument([] { padKvCacheCapacity(-5); }, "maxKVCacheCapacity");
}

TEST(PageGeometry, ResolveCapacityMarkers) {
  EXPECT_EQ(resolveKvCacheCapacity(0, 4096), 4096);  // missing marker = full capacity
  EXPECT_EQ(resolveKvCacheCapacity(512, 4096), 512);
  EXPECT_EQ(resolveKvCacheCapacity(4096, 4096), 4096);
  EXPECT_FALSE(isReducedKvCacheCapacity(0, 4096));
  EXPECT_FALSE(isReducedKvCacheCapacity(4096, 4096));
  EXPECT_TRUE(isReducedKvCacheCapacity(4095, 4096));
  EXPECT_TRUE(isReducedKvCacheCapacity(1, 4096));
  expectInvalidArgument([] { resolveKvCacheCapacity(-1, 4096); }, "kvCacheCapacity");
  expectInvalidArgument([] { resolveKvCacheCapacity(4097, 4096); }, "kvCacheCapacity");
  expectInvalidArgument([] { resolveKvCacheCapacity(0, 0); }, "maxKVCacheCapacity");
  expectInvalidArgument([] { resolveKvCacheCapacity(0, -1); }, "maxKVCacheCapacity");
  expectInvalidArgument([] { isReducedKvCacheCapacity(5000, 4096); }, "kvCacheCapacity");
}

TEST(PageGeometry, SwaPrivatePages) {
  EXPECT_EQ(computeSwaPrivatePagesPerSlot(512, 128, 1), 11);
  EXPECT_EQ(computeSwaPrivatePagesPerSlot(4096, 128, 1), 67);
  EXPECT_EQ(computeSwaPrivatePagesPerSlot(513, 128, 1), 13);  // window straddles one more page
  EXPECT_EQ(computeSwaPrivatePagesPerSlot(1, 128, 1), 5);
  EXPECT_EQ(computeSwaPrivatePagesPerSlot(512, 128, 3), 13);
  expectInvalidArgument([] { computeSwaPrivatePagesPerSlot(0, 128, 1); }, "slidingWindowCapacity");
  expectInvalidArgument([] { computeSwaPrivatePagesPerSlot(512, 0, 1); }, "tokensPerPage");
  expectInvalidArgument([] { computeSwaPrivatePagesPerSlot(512, 128, 0); }, "replacementPageCount");
  expectInvalidArgument([] { computeSwaPrivatePagesPerSlot(-512, 128, 1); },
                        "slidingWindowCapacity");
  expectInvalidArgument([] { computeSwaPrivatePagesPerSlot(int64_t{1} << 40, 128, 1); },
                        "slidingWindowCapacity");
  EXPECT_EQ(computeMinimumSwaPoolPages(4, 512), 44);
  EXPECT_EQ(computeMinimumSwaPoolPages(1, 4096), 67);
  expectInvalidArgument([] { computeMinimumSwaPoolPages(0, 512); }, "maxBatchSize");
  expectInvalidArgument(
      [] { computeMinimumSwaPoolPages(std::numeric_limits<int64_t>::max(), 512); }, "maxBatchSize");
}

TEST(PageGeometry, MinimumKvPoolPages) {
  EXPECT_EQ(computeMinimumKvPoolPages(1, 127), 1);
  EXPECT_EQ(computeMinimumKvPoolPages(1, 128), 1);
  EXPECT_EQ(computeMinimumKvPoolPages(1, 129), 2);
  EXPECT_EQ(computeMinimumKvPoolPages(8, 4096), 256);
  // int64 result: 64 slots of the largest capacity exceed int32 and are still computed exactly.
  EXPECT_EQ(computeMinimumKvPoolPages(64, kMaxKvCacheCapacity), int64_t{64} * 16777215);
  expectInvalidArgument([] { computeMinimumKvPoolPages(0, 128); }, "maxBatchSize");
  expectInvalidArgument([] { computeMinimumKvPoolPages(-1, 128); }, "maxBatchSize");
  expectInvalidArgument([] { computeMinimumKvPoolPages(1, 0); }, "maxKVCacheCapacity");
  expectInvalidArgument([] { computeMinimumKvPoolPages(1, int64_t{kMaxKvCacheCapacity} + 1); },
                        "maxKVCacheCapacity");
  expectInvalidArgument(
      [] { computeMinimumKvPoolPages(std::numeric_limits<int64_t>::max() / 2, 4096); },
      "maxBatchSize");
}

TEST(PageGeometry, CheckedPoolPagesNarrowing) {
  EXPECT_EQ(checkedPoolPages(kMaxKvPoolPages, "numPages"), 1073741823);
  EXPECT_EQ(checkedPoolPages(1, "numPages"), 1);
  expectInvalidArgument([] { checkedPoolPages(kMaxKvPoolPages + 1, "numPages"); }, "numPages");
  expectInvalidArgument([] { checkedPoolPages(0, "numPages"); }, "numPages");
  expectInvalidArgument([] { checkedPoolPages(int64_t{1} << 33, "numSwaPages"); }, "numSwaPages");
}

}  // namespace
}  // namespace es::kv
