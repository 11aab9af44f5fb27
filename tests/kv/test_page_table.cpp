#include <gtest/gtest.h>

#include <vector>

#include "kv/page_table.h"
#include "support/test_util.h"

namespace es::kv {
namespace {

using test::expectInvalidArgument;

std::vector<int32_t> deviceImage(const PageTable& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.deviceLayoutElements()));
  t.writeDeviceLayout(out);
  return out;
}

TEST(PageTable, ConstructionValidates) {
  expectInvalidArgument([] { PageTable(0, 4, 16); }, "maxBatch");
  expectInvalidArgument([] { PageTable(2, 0, 16); }, "maxPagesPerSeq");
  expectInvalidArgument([] { PageTable(2, 4, 0); }, "numPages");
  expectInvalidArgument([] { PageTable(2, 4, static_cast<int32_t>(kMaxKvPoolPages + 1)); },
                        "numPages");
  PageTable t(3, 4, 20);
  for (int b = 0; b < 3; ++b)
    for (int p = 0; p < 4; ++p) EXPECT_EQ(t.kPage(b, p), kUnusedPageEntry);
  EXPECT_FALSE(t.isIdentity());
}

TEST(PageTable, IdentityMappingAndDerivedVIds) {
  PageTable t(3, 4, 12);
  t.setIdentity();
  EXPECT_TRUE(t.isIdentity());
  EXPECT_EQ(t.kPage(0, 0), 0);
  EXPECT_EQ(t.kPage(2, 3), 11);
  EXPECT_EQ(t.vPage(2, 3), 23);  // v = k + numPages
  const std::vector<int32_t> image = deviceImage(t);
  // [b, 0, :] K ids, [b, 1, :] V ids
  const std::vector<int32_t> slot1 = {4, 5, 6, 7, 16, 17, 18, 19};
  EXPECT_EQ(std::vector<int32_t>(image.begin() + 8, image.begin() + 16), slot1);
  expectInvalidArgument([] { PageTable(3, 4, 11).setIdentity(); }, "numPages");
  expectInvalidArgument([&] { t.kPage(3, 0); }, "slot");
  expectInvalidArgument([&] { t.kPage(0, 4); }, "logicalPage");
  expectInvalidArgument([&] { t.vPage(-1, 0); }, "slot");
}

TEST(PageTable, SetRowDenseValidation) {
  PageTable t(2, 4, 10);
  t.setIdentity();
  t.setRow(1, std::vector<PageId>{9, 2});  // shorter rows are padded with -1
  EXPECT_FALSE(t.isIdentity());            // any mutation after identity mapping clears the flag
  EXPECT_EQ(t.kPage(1, 0), 9);
  EXPECT_EQ(t.vPage(1, 1), 12);
  EXPECT_EQ(t.kPage(1, 2), kUnusedPageEntry);
  EXPECT_EQ(t.vPage(1, 3), kUnusedPageEntry);  // -1 K gives -1 V
  const std::vector<PageId> before(t.kRow(1).begin(), t.kRow(1).end());
  // Each rejected row leaves the table unchanged.
  expectInvalidArgument([&] { t.setRow(1, std::vector<PageId>{3, -1, 4}); }, "slot 1 page[2]");
  expectInvalidArgument([&] { t.setRow(1, std::vector<PageId>{3, 10}); }, "slot 1 page[1]");
  expectInvalidArgument([&] { t.setRow(1, std::vector<PageId>{-2}); }, "slot 1 page[0]");
  expectInvalidArgument([&] { t.setRow(1, std::vector<PageId>{5, 6, 5}); }, "slot 1 page[2]");
  expectInvalidArgument([&] { t.setRow(1, std::vector<PageId>{1, 2, 3, 4, 5}); }, "row length");
  expectInvalidArgument([&] { t.setRow(2, std::vector<PageId>{1}); }, "slot");
  EXPECT_EQ(std::vector<PageId>(t.kRow(1).begin(), t.kRow(1).end()), before);
  // Sparse-window rows may have holes, never repeats.
  t.setRow(0, std::vector<PageId>{-1, 3, -1, 4}, PageTableValidation::kSparseWindow);
  EXPECT_EQ(t.kPage(0, 1), 3);
  expectInvalidArgument(
      [&] {
        t.setRow(0, std::vector<PageId>{-1, 3, -1, 3}, PageTableValidation::kSparseWindow);
      },
      "slot 0 page[3]");
  expectInvalidArgument([&] { t.validateRow(0, PageTableValidation::kDense); }, "slot 0 page[1]");
  EXPECT_NO_THROW(t.validateRow(0, PageTableValidation::kSparseWindow));
  // Pages may be shared between slots (prefix reuse): only repeats within a slot are errors.
  t.setRow(1, std::vector<PageId>{3, 4});
  EXPECT_NO_THROW(t.validateRow(1, PageTableValidation::kDense));
}

TEST(PageTable, SetRowsIsAtomic) {
  PageTable t(3, 2, 8);
  t.setIdentity();
  const std::vector<int32_t> before = deviceImage(t);
  std::vector<PageTableRowUpdate> bad = {{0, {7}}, {2, {6, 6}}};  // second update invalid
  expectInvalidArgument([&] { t.setRows(bad); }, "slot 2 page[1]");
  EXPECT_EQ(deviceImage(t), before);
  EXPECT_TRUE(t.isIdentity());
  std::vector<PageTableRowUpdate> twice = {{1, {7}}, {1, {6}}};
  expectInvalidArgument([&] { t.setRows(twice); }, "slot");
  EXPECT_EQ(deviceImage(t), before);
  std::vector<PageTableRowUpdate> good = {{0, {7}}, {2, {6, 0}}};
  t.setRows(good);
  EXPECT_EQ(t.kPage(0, 0), 7);
  EXPECT_EQ(t.kPage(0, 1), kUnusedPageEntry);
  EXPECT_EQ(t.kPage(2, 1), 0);
  EXPECT_EQ(t.kPage(1, 0), 2);  // untouched
}

TEST(PageTable, SetAndClearEntry) {
  PageTable t(2, 4, 16);
  t.setIdentity();
  t.clearEntry(0, 0);  // a window slid past page 0
  EXPECT_EQ(t.kPage(0, 0), kUnusedPageEntry);
  EXPECT_EQ(t.vPage(0, 0), kUnusedPageEntry);
  t.setEntry(0, 0, 12);
  EXPECT_EQ(t.vPage(0, 0), 28);
  expectInvalidArgument([&] { t.setEntry(0, 2, 1); }, "slot 0 page[2]");  // 1 already in slot 0
  expectInvalidArgument([&] { t.setEntry(0, 2, 16); }, "slot 0 page[2]");
  expectInvalidArgument([&] { t.setEntry(0, 4, 13); }, "logicalPage");
  expectInvalidArgument([&] { t.clearEntry(2, 0); }, "slot");
  EXPECT_EQ(t.kPage(0, 2), 2);
}

TEST(PageTable, CompactRowsMovesRowsWithoutCopyingData) {
  PageTable t(4, 2, 8);
  t.setIdentity();
  // slot 0 retires, 1 -> 0, 2 stays 2... no: 2 -> 1, 3 retires; nobody moves into 2, 3.
  t.compactRows(std::vector<int32_t>{-1, 0, 1, -1});
  EXPECT_EQ(t.kPage(0, 0), 2);
  EXPECT_EQ(t.kPage(0, 1), 3);
  EXPECT_EQ(t.kPage(1, 0), 4);
  EXPECT_EQ(t.kPage(2, 0), kUnusedPageEntry);
  EXPECT_EQ(t.kPage(3, 1), kUnusedPageEntry);
  EXPECT_FALSE(t.isIdentity());
  const std::vector<int32_t> before = deviceImage(t);
  expectInvalidArgument([&] { t.compactRows(std::vector<int32_t>{1, 1}); }, "oldToNew[1]");
  expectInvalidArgument([&] { t.compactRows(std::vector<int32_t>{4}); }, "oldToNew[0]");
  expectInvalidArgument([&] { t.compactRows(std::vector<int32_t>{-2}); }, "oldToNew[0]");
  expectInvalidArgument([&] { t.compactRows(std::vector<int32_t>(5, -1)); }, "oldToNew.size()");
  EXPECT_EQ(deviceImage(t), before);
}

TEST(PageTable, SyncCopiesExactlyTheDirtySlotsCoalesced) {
  constexpr int32_t kPages = 3, kSlotElems = 2 * kPages;
  PageTable t(6, kPages, 32);
  std::vector<int32_t> mirror(static_cast<size_t>(t.deviceLayoutElements()), test::poison_i32());
  // A fresh table is all dirty: one range.
  EXPECT_EQ(t.syncDirtyToHost(mirror), (std::vector<PageTableRange>{{0, 6 * kSlotElems}}));
  EXPECT_EQ(mirror, deviceImage(t));
  EXPECT_TRUE(t.dirtyRanges().empty());
  t.setIdentity();
  EXPECT_EQ(t.syncDirtyToHost(mirror), (std::vector<PageTableRange>{{0, 6 * kSlotElems}}));
  EXPECT_EQ(mirror, deviceImage(t));

  // Mutate slots 1, 2 and 4: ranges {1..2} and {4}. Poison every other slot of the mirror first:
  // the sync must leave them alone (proof that clean rows are not copied).
  t.setRow(4, std::vector<PageId>{30});
  t.setEntry(2, 1, 31);
  t.setRow(1, std::vector<PageId>{29, 28});
  const std::vector<int32_t> expected = deviceImage(t);
  for (int slot : {0, 3, 5}) {
    std::fill_n(mirror.begin() + slot * kSlotElems, kSlotElems, test::poison_i32());
  }
  EXPECT_EQ(t.syncDirtyToHost(mirror),
            (std::vector<PageTableRange>{{1 * kSlotElems, 2 * kSlotElems},
                                         {4 * kSlotElems, kSlotElems}}));
  for (int slot = 0; slot < 6; ++slot) {
    for (int i = 0; i < kSlotElems; ++i) {
      const size_t at = static_cast<size_t>(slot * kSlotElems + i);
      if (slot == 1 || slot == 2 || slot == 4) {
        EXPECT_EQ(mirror[at], expected[at]) << "slot " << slot;
      } else {
        EXPECT_EQ(mirror[at], test::poison_i32()) << "clean slot " << slot << " was copied";
      }
    }
  }

  // A compaction dirties only the slots whose rows changed.
  t.syncDirtyToHost(mirror);
  t.compactRows(std::vector<int32_t>{0, 1, 2, 3, 5, 4});
  EXPECT_EQ(t.dirtyRanges(), (std::vector<PageTableRange>{{4 * kSlotElems, 2 * kSlotElems}}));
  // A rejected mutation dirties nothing.
  t.syncDirtyToHost(mirror);
  expectInvalidArgument([&] { t.setRow(0, std::vector<PageId>{40}); }, "slot 0 page[0]");
  EXPECT_TRUE(t.dirtyRanges().empty());
  t.markAllDirty();
  EXPECT_EQ(t.dirtyRanges(), (std::vector<PageTableRange>{{0, 6 * kSlotElems}}));
  expectInvalidArgument([&] { t.syncDirtyToHost(std::span<int32_t>(mirror.data(), 5)); },
                        "mirror.size()");
}

}  // namespace
}  // namespace es::kv
