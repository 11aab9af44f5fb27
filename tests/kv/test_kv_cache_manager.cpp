#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "support/test_util.h"

namespace es::kv {
namespace {

using test::expectInvalidArgument;

KvCacheConfig qwen3_8b(int32_t batch, int32_t seq) {
  KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = seq;
  c.dtype = DType::kBF16;
  c.baseLayers.assign(36, KvLayerShape{8, 128, 0});
  return c;
}

TEST(KvCachePlan, SizesFromAModelShape) {
  KvCacheConfig c = qwen3_8b(8, 4096);
  c.draftLayers.assign(5, KvLayerShape{8, 128, 0});
  const KvCachePlan p = planKvCache(c);
  EXPECT_EQ(p.capacityPadded, 4096);
  EXPECT_EQ(p.maxPagesPerSeq, 32);
  EXPECT_EQ(p.numPages, 256);  // 8 slots * 32 pages
  EXPECT_EQ(p.numSwaPages, 0);
  // 2 planes * 256 pages * 128 tokens * 8 heads * 128 dims * 2 bytes = 128 MiB per layer
  ASSERT_EQ(p.base.size(), 36u);
  EXPECT_EQ(p.base[0].bytes, int64_t{128} << 20);
  EXPECT_EQ(p.draft.size(), 5u);
  EXPECT_EQ(p.totalBytes, int64_t{41} * (int64_t{128} << 20));
  EXPECT_EQ(p.base[1].offset, p.base[0].bytes);
  EXPECT_NE(p.describe().find("total: "), std::string::npos);
  EXPECT_EQ(p.toJson()["num_pages"], 256);
}

TEST(KvCachePlan, PaddingAndExplicitPageCount) {
  KvCacheConfig c = qwen3_8b(3, 129);
  c.baseLayers.assign(2, KvLayerShape{2, 64, 0});
  c.dtype = DType::kF32;
  KvCachePlan p = planKvCache(c);
  EXPECT_EQ(p.capacityPadded, 256);
  EXPECT_EQ(p.numPages, 6);
  EXPECT_EQ(p.base[0].bytes, int64_t{2} * 6 * 128 * 2 * 64 * 4);
  c.numPages = 10;  // retained pages beyond the minimum
  EXPECT_EQ(planKvCache(c).numPages, 10);
  c.numPages = 5;
  expectInvalidArgument([&] { planKvCache(c); }, "numPages");
  c.numPages = kMaxKvPoolPages + 1;
  expectInvalidArgument([&] { planKvCache(c); }, "numPages");
}

TEST(KvCachePlan, SlidingWindowLayersGetTheBoundedPool) {
  KvCacheConfig c = qwen3_8b(4, 4096);
  c.baseLayers = {{8, 128, 512}, {8, 128, 0}, {8, 128, 512}, {8, 128, 4096}};
  const KvCachePlan p = planKvCache(c);
  EXPECT_EQ(p.slidingWindow, 512);
  EXPECT_EQ(p.numSwaPages, 44);  // 4 slots * 11 private pages
  EXPECT_TRUE(p.base[0].reduced);
  EXPECT_FALSE(p.base[1].reduced);
  EXPECT_FALSE(p.base[3].reduced);
  EXPECT_EQ(p.base[0].numPages, 44);
  EXPECT_EQ(p.base[1].numPages, 128);
  EXPECT_EQ(p.base[0].bytes, int64_t{2} * 44 * 128 * 8 * 128 * 2);
  c.baseLayers[2].kvCacheCapacity = 1024;
  expectInvalidArgument([&] { planKvCache(c); }, "baseLayers[2].kvCacheCapacity");
}

TEST(KvCachePlan, ImpossibleConfigurationsFailBeforeAllocating) {
  KvCacheConfig c = qwen3_8b(8, 4096);
  c.maxBatchSize = 0;
  expectInvalidArgument([&] { planKvCache(c); }, "maxBatchSize");
  c = qwen3_8b(8, kMaxKvCacheCapacity);
  c.maxSequenceLength = kMaxKvCacheCapacity + 1;
  expectInvalidArgument([&] { planKvCache(c); }, "maxSequenceLength");
  // 1024 slots of the largest capacity need more pages than an int32 pool can hold.
  c = qwen3_8b(1024, kMaxKvCacheCapacity);
  expectInvalidArgument([&] { planKvCache(c); }, "numPages");
  c = qwen3_8b(8, 4096);
  c.baseLayers[3].headDim = 100;
  expectInvalidArgument([&] { planKvCache(c); }, "baseLayers[3].headDim");
  c = qwen3_8b(8, 4096);
  c.baseLayers[0].numKvHeads = 0;
  expectInvalidArgument([&] { planKvCache(c); }, "baseLayers[0].numKvHeads");
  c = qwen3_8b(8, 4096);
  c.baseLayers.clear();
  expectInvalidArgument([&] { planKvCache(c); }, "baseLayers.size()");
  c = qwen3_8b(8, 4096);
  c.dtype = DType::kI32;
  expectInvalidArgument([&] { planKvCache(c); }, "dtype");
  c = qwen3_8b(8, 4096);
  c.memoryBudgetBytes = int64_t{4} << 30;  // needs 4.5 GiB
  expectInvalidArgument([&] { planKvCache(c); }, "memoryBudgetBytes");
  c = qwen3_8b(8, 4096);
  c.draftLayers = {{8, 128, 512}};
  expectInvalidArgument([&] { planKvCache(c); }, "draftLayers[0].kvCacheCapacity");
}

KvCacheConfig tiny(int32_t batch, int32_t seq) {
  KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = seq;
  c.dtype = DType::kF32;
  c.baseLayers.assign(2, KvLayerShape{1, 8, 0});
  c.draftLayers.assign(1, KvLayerShape{2, 8, 0});
  return c;
}

TEST(KvCacheManager, PoolsTablesAndLengths) {
  KvCacheManager m(tiny(3, 200), MemorySpace::kHost);
  EXPECT_EQ(m.capacity(), 256);
  const TensorView pool = m.basePool(1);
  EXPECT_EQ(pool.describe(), "f32[2, 6, 128, 1, 8] host");
  EXPECT_EQ(m.draftPool(0).describe(), "f32[2, 6, 128, 2, 8] host");
  expectInvalidArgument([&] { m.basePool(2); }, "layer");
  expectInvalidArgument([&] { m.draftPool(-1); }, "layer");
  EXPECT_TRUE(m.basePageTable().isIdentity());
  EXPECT_EQ(m.basePageTable().kPage(2, 1), 5);
  EXPECT_EQ(m.swaPageTable(), nullptr);

  EXPECT_EQ(m.admit(), 0);
  EXPECT_EQ(m.admit(), 1);
  EXPECT_EQ(m.activeCount(), 2);
  m.commitBase(1, 129);
  m.commitDraft(1, 100);
  EXPECT_EQ(m.baseLength(1), 129);
  EXPECT_EQ(m.draftLength(1), 100);
  // Rollback is not committing: a failed commit leaves the length alone.
  expectInvalidArgument([&] { m.commitBase(1, 128); }, "tokens");
  EXPECT_EQ(m.baseLength(1), 129);
  m.commitBase(1, 127);  // exactly full
  EXPECT_EQ(m.baseLength(1), 256);
  expectInvalidArgument([&] { m.commitBase(1, -1); }, "tokens");
  expectInvalidArgument([&] { m.commitBase(2, 1); }, "slot");  // not admitted
  EXPECT_NO_THROW(m.checkWritable(0, 240, 16));
  expectInvalidArgument([&] { m.checkWritable(0, 241, 16); }, "count");
  expectInvalidArgument([&] { m.checkWritable(0, -1, 1); }, "firstPosition");
  EXPECT_EQ(m.admit(), 2);
  expectInvalidArgument([&] { m.admit(); }, "active slots");
}

// Writes a marker for every committed token of a slot into K plane of base layer 0, through the
// page table (so the test also proves the rows moved and the data did not).
void writeMarkers(const KvCacheManager& m, int32_t slot, int32_t from, int32_t to, float seqId) {
  const TensorView pool = m.basePool(0);  // [2, N, 128, 1, 8] f32
  float* data = pool.as<float>();
  for (int32_t pos = from; pos < to; ++pos) {
    const PageId page = m.basePageTable().kPage(slot, pos / kTokensPerPage);
    data[(int64_t{page} * kTokensPerPage + pos % kTokensPerPage) * 8] = seqId * 100000.0f + pos;
  }
}

float readMarker(const KvCacheManager& m, int32_t slot, int32_t pos) {
  const float* data = m.basePool(0).as<float>();
  const PageId page = m.basePageTable().kPage(slot, pos / kTokensPerPage);
  return data[(int64_t{page} * kTokensPerPage + pos % kTokensPerPage) * 8];
}

TEST(KvCacheManager, CompactionMovesRowsNotData) {
  KvCacheManager m(tiny(4, 256), MemorySpace::kHost);
  for (int s = 0; s < 4; ++s) {
    m.admit();
    m.commitBase(s, 10 * (s + 1));
    m.commitDraft(s, 5 * (s + 1));
    writeMarkers(m, s, 0, 10 * (s + 1), static_cast<float>(s));
  }
  const std::vector<uint8_t> keep = {0, 1, 0, 1};
  EXPECT_EQ(m.retireAndCompact(keep), (std::vector<int32_t>{-1, 0, -1, 1}));
  EXPECT_EQ(m.activeCount(), 2);
  EXPECT_EQ(m.baseLength(0), 20);
  EXPECT_EQ(m.baseLength(1), 40);
  EXPECT_EQ(m.draftLength(1), 20);
  for (int pos = 0; pos < 20; ++pos) EXPECT_EQ(readMarker(m, 0, pos), 1 * 100000.0f + pos);
  for (int pos = 0; pos < 40; ++pos) EXPECT_EQ(readMarker(m, 1, pos), 3 * 100000.0f + pos);
  expectInvalidArgument([&] { m.retireAndCompact(std::vector<uint8_t>{1}); }, "keep.size()");
  // Freed slots are admitted again with empty caches and their own pages.
  EXPECT_EQ(m.admit(), 2);
  EXPECT_EQ(m.baseLength(2), 0);
}

// Property test: random admit / append / commit / compact against a plain model of the state.
TEST(KvCacheManager, RandomOperationsKeepEveryInvariant) {
  constexpr int32_t kBatch = 6, kSeq = 300;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    KvCacheManager m(tiny(kBatch, kSeq), MemorySpace::kHost);
    const int32_t capacity = m.capacity();
    struct Seq {
      int id;
      int32_t base;
      int32_t draft;
    };
    std::vector<Seq> model;  // index = slot
    int nextId = 1;
    std::mt19937 rng(seed);
    for (int step = 0; step < 400; ++step) {
      const int op = static_cast<int>(rng() % 4);
      if (op == 0) {  // admit
        if (static_cast<int32_t>(model.size()) == kBatch) {
          expectInvalidArgument([&] { m.admit(); }, "active slots");
        } else {
          ASSERT_EQ(m.admit(), static_cast<int32_t>(model.size()));
          model.push_back({nextId++, 0, 0});
        }
      } else if (op == 1 && !model.empty()) {  // verify-style append: write, maybe commit
        const int32_t slot = static_cast<int32_t>(rng() % model.size());
        Seq& s = model[static_cast<size_t>(slot)];
        const int32_t written = static_cast<int32_t>(rng() % 17);
        const int32_t accepted = written == 0 ? 0 : static_cast<int32_t>(rng() % (written + 1));
        if (s.base + written > capacity) {
          expectInvalidArgument([&] { m.checkWritable(slot, s.base, written); }, "count");
          continue;
        }
        m.checkWritable(slot, s.base, written);
        // Scratch rows past the commit get garbage markers; only committed rows are checked.
        writeMarkers(m, slot, s.base, s.base + written, -1.0f);
        writeMarkers(m, slot, s.base, s.base + accepted, static_cast<float>(s.id));
        m.commitBase(slot, accepted);
        s.base += accepted;
        const int32_t draftGrow = std::min(accepted, s.base - s.draft);
        m.commitDraft(slot, draftGrow);
        s.draft += draftGrow;
      } else if (op == 2 && !model.empty()) {  // finish some sequences and compact
        std::vector<uint8_t> keep(model.size());
        for (auto& k : keep) k = (rng() % 3) != 0;
        const std::vector<int32_t> oldToNew = m.retireAndCompact(keep);
        std::vector<Seq> next;
        for (size_t i = 0; i < model.size(); ++i) {
          ASSERT_EQ(oldToNew[i], keep[i] ? static_cast<int32_t>(next.size()) : -1);
          if (keep[i]) next.push_back(model[i]);
        }
        model.swap(next);
      } else if (op == 3 && !model.empty()) {  // over-commit is rejected, state unchanged
        const int32_t slot = static_cast<int32_t>(rng() % model.size());
        expectInvalidArgument(
            [&] { m.commitBase(slot, capacity - model[static_cast<size_t>(slot)].base + 1); },
            "tokens");
      }
      // Invariants.
      ASSERT_EQ(m.activeCount(), static_cast<int32_t>(model.size()));
      for (const PageTable* table : {&m.basePageTable(), &m.draftPageTable()}) {
        std::set<PageId> owned;
        for (int32_t b = 0; b < kBatch; ++b) {
          table->validateRow(b, PageTableValidation::kDense);
          for (PageId id : table->kRow(b)) {
            ASSERT_NE(id, kUnusedPageEntry) << "slot " << b << " lost a page";
            ASSERT_TRUE(owned.insert(id).second) << "page " << id << " owned twice";
          }
        }
        ASSERT_EQ(static_cast<int32_t>(owned.size()), m.plan().numPages);
      }
      for (size_t slot = 0; slot < model.size(); ++slot) {
        const Seq& s = model[slot];
        const int32_t b = static_cast<int32_t>(slot);
        ASSERT_EQ(m.baseLength(b), s.base);
        ASSERT_EQ(m.draftLength(b), s.draft);
        ASSERT_LE(s.draft, s.base);
        ASSERT_LE(s.base, capacity);
        for (int32_t pos = 0; pos < s.base; ++pos) {
          ASSERT_EQ(readMarker(m, b, pos), s.id * 100000.0f + pos)
              << "seed " << seed << " step " << step << " slot " << b << " pos " << pos;
        }
      }
    }
  }
}

}  // namespace
}  // namespace es::kv
