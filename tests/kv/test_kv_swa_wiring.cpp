// Sliding-window layers through KvCacheManager (issue 10): the plan puts them in the bounded pool,
// and the manager's step protocol (admit / beginStep / completeStep / commitBase / retire) drives
// the window page table. The property test writes real K values through the uploaded table, as
// the kernels would, and reads them back.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/swa_step_completion.h"
#include "support/test_util.h"

namespace es::kv {
namespace {

using test::expectInvalidArgument;
constexpr int32_t P = kTokensPerPage;
constexpr int32_t kDim = 8;  // head dim of the test layers (one KV head)

KvCacheConfig slidingConfig(int32_t batch, int32_t seq, int32_t window) {
  KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = seq;
  c.dtype = DType::kF32;
  // [full, sliding, sliding]: markers stay 0, the plan derives them from the windows.
  c.baseLayers = {{1, kDim, 0, 0}, {1, kDim, 0, window}, {1, kDim, 0, window}};
  return c;
}

TEST(KvSwaWiring, PlanBoundsSlidingLayersBelowCapacityOnly) {
  const KvCachePlan p = planKvCache(slidingConfig(3, 1000, 160));
  EXPECT_FALSE(p.base[0].reduced);
  EXPECT_TRUE(p.base[1].reduced && p.base[2].reduced);
  EXPECT_EQ(p.slidingWindow, 160);
  EXPECT_EQ(p.swaPrivatePagesPerSlot, 7);  // 2 * (ceil(160/128) + 1) + 1
  EXPECT_EQ(p.numSwaPages, computeMinimumSwaPoolPages(3, 160));
  EXPECT_EQ(p.base[1].numPages, p.numSwaPages);
  EXPECT_EQ(p.base[0].numPages, p.numPages);
  EXPECT_NE(
      p.describe().find("sliding-window pool: 21 pages (window 160, 7 private pages per slot)"),
      std::string::npos)
      << p.describe();
  EXPECT_EQ(p.toJson()["swa_private_pages_per_slot"], 7);

  // A window covering the capacity bounds nothing; kFullCapacity forces the old layout.
  EXPECT_EQ(planKvCache(slidingConfig(3, 160, 160)).numSwaPages, 0);
  KvCacheConfig full = slidingConfig(3, 1000, 160);
  full.slidingWindowStorage = SlidingWindowStorage::kFullCapacity;
  const KvCachePlan f = planKvCache(full);
  EXPECT_EQ(f.numSwaPages, 0);
  for (const KvLayerPlan& l : f.base) EXPECT_FALSE(l.reduced);

  // Prefix reuse keeps refusing bounded layers (it shares full-capacity pages only) ...
  KvCacheConfig reuse = slidingConfig(3, 1000, 160);
  reuse.prefixCachePages = 4;
  expectInvalidArgument([&] { planKvCache(reuse); }, "prefixCachePages");
  // ... and accepts them stored at full capacity.
  reuse.slidingWindowStorage = SlidingWindowStorage::kFullCapacity;
  EXPECT_EQ(planKvCache(reuse).numSwaPages, 0);

  KvCacheConfig bad = slidingConfig(1, 1000, 160);
  bad.baseLayers[2].slidingWindow = 200;
  expectInvalidArgument([&] { planKvCache(bad); }, "baseLayers[2].kvCacheCapacity");
  bad.baseLayers[2].slidingWindow = -1;
  expectInvalidArgument([&] { planKvCache(bad); }, "baseLayers[2].slidingWindow");
  KvCacheConfig draft = slidingConfig(1, 1000, 160);
  draft.draftLayers = {{1, kDim, 0, 160}};
  expectInvalidArgument([&] { planKvCache(draft); }, "draftLayers[0].slidingWindow");
}

TEST(KvSwaWiring, StepProtocolBindsWindowAndRefusesMisuse) {
  KvCacheManager cache(slidingConfig(2, 1024, 160), MemorySpace::kHost);
  ASSERT_NE(cache.swaPages(), nullptr);
  const SwaPageManager& w = *cache.swaPages();
  const int32_t s = cache.admit();
  EXPECT_EQ(w.reservedPages(s), 7);
  // Writing without a step is refused (the window pages would not be bound).
  expectInvalidArgument([&] { cache.commitBase(s, 1); }, "tokens");
  expectInvalidArgument([&] { cache.checkWindowMapped(s, 0, 1); }, "slot");
  EXPECT_EQ(cache.maxStepTokens(s), 7 * P);  // all seven reserved pages from position 0

  const SwaStepWrite chunk{s, 300};
  const int64_t id = cache.beginStep({&chunk, 1});
  EXPECT_EQ(id, 1);
  EXPECT_EQ(w.boundPages(s), 3);  // pages 0-2
  cache.checkWindowMapped(s, 0, 300);
  cache.commitBase(s, 300);  // pipelined: kept before the step completes
  EXPECT_EQ(cache.baseLength(s), 300);
  EXPECT_EQ(w.length(s), 300);
  // The window of 300 is keys [140, 300): page 0 left it but step 1 still reads it.
  EXPECT_EQ(w.boundPages(s), 2);
  EXPECT_EQ(w.pendingPages(s), 1);
  EXPECT_EQ(cache.swaPageTable()->kPage(s, 0), -1);
  cache.completeStep(id);
  EXPECT_EQ(w.pendingPages(s), 0);
  EXPECT_EQ(w.reservedPages(s), 5);
  // The dense table is untouched: identity pages for every slot.
  EXPECT_TRUE(cache.basePageTable().isIdentity());

  // Errors name the argument: a slot twice, a count past capacity, completion out of range.
  const SwaStepWrite twice[2] = {{s, 1}, {s, 1}};
  expectInvalidArgument([&] { cache.beginStep(twice); }, "writes[1].slot");
  const SwaStepWrite huge{s, 1024};
  expectInvalidArgument([&] { cache.beginStep({&huge, 1}); }, "writes[0].count");
  expectInvalidArgument([&] { cache.completeStep(5); }, "stepId");

  // A retired slot's pages wait for its last step before admission can reuse them.
  const SwaStepWrite one{s, 1};
  const int64_t running = cache.beginStep({&one, 1});
  const std::vector<uint8_t> none{0};
  cache.retireAndCompact(none);
  EXPECT_EQ(cache.activeCount(), 0);
  cache.admit();  // the other slot's share of the pool is still free
  expectInvalidArgument([&] { cache.admit(); }, "freePoolPages");
  EXPECT_EQ(cache.activeCount(), 1);
  cache.completeStep(running);
  cache.admit();
  EXPECT_EQ(cache.activeCount(), 2);
}

TEST(KvSwaWiring, WithoutSlidingLayersStepsAreOnlyCounted) {
  KvCacheConfig c = slidingConfig(1, 256, 0);
  KvCacheManager cache(c, MemorySpace::kHost);
  EXPECT_EQ(cache.swaPages(), nullptr);
  const int32_t s = cache.admit();
  const SwaStepWrite w{s, 10};
  EXPECT_EQ(cache.beginStep({&w, 1}), 1);
  cache.commitBase(s, 10);  // commits need no step without reduced layers (the dense protocol)
  cache.checkWindowMapped(s, 0, 10);
  EXPECT_EQ(cache.maxStepTokens(s), 246);
  cache.completeStep(1);
  expectInvalidArgument([&] { cache.completeStep(1); }, "stepId");
  // The same write checks as with a window pool (checkStepWrites), and the capacity.
  const SwaStepWrite twice[] = {{s, 1}, {s, 1}}, unknown{s + 1, 1}, zero{s, 0}, past{s, 247};
  expectInvalidArgument([&] { cache.beginStep(twice); }, "writes[1].slot");
  expectInvalidArgument([&] { cache.beginStep({&unknown, 1}); }, "writes[0].slot");
  expectInvalidArgument([&] { cache.beginStep({&zero, 1}); }, "writes[0].count");
  expectInvalidArgument([&] { cache.beginStep({&past, 1}); }, "writes[0].count");
  expectInvalidArgument([&] { cache.beginStep({}); }, "writes.size()");
}

// A step in flight: the physical K rows (page * 128 + row) of layer 1 it reads.
struct RunningStep {
  int64_t id;
  std::set<int64_t> reads;
};

// Random prefill chunks (committed at once: pipelined) and decode/verify steps of 1-16 rows
// (committed after completion, a random number of them) for several slots, with admission and
// retirement, steps left running across later steps. Every step uploads the window table to a
// mirror (the backend copy) and writes a value naming (request, position) into the K rows of
// both sliding layers through that mirror, as qkv_rope_kv_write does. Checked after every
// operation: bound + pending + reserved = private per slot; swa and base lengths agree; every key
// the next row of a slot can see reads back its own value through the mirror. At every beginStep:
// no row it writes is read by a running step, and no page it newly binds is read by one.
TEST(KvSwaWiring, PropertyStepsThroughTheManagerNeverClobberWhatARunningStepReads) {
  std::mt19937 rng(1010);
  int64_t totalSteps = 0, slidPast = 0;  // steps; slots whose window left page 0 behind
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t maxB = std::uniform_int_distribution<int32_t>(1, 4)(rng);
    const int32_t seq = P * std::uniform_int_distribution<int32_t>(6, 24)(rng);
    const int32_t W = std::uniform_int_distribution<int32_t>(1, std::min(700, seq - 1))(rng);
    KvCacheManager cache(slidingConfig(maxB, seq, W), MemorySpace::kHost);
    ASSERT_NE(cache.swaPages(), nullptr);
    const SwaPageManager& m = *cache.swaPages();
    PageTable& table = *cache.swaPageTable();
    const int32_t numSwa = cache.plan().numSwaPages;
    std::vector<int32_t> mirror(static_cast<size_t>(table.deviceLayoutElements()), -1);
    const int32_t maxPages = table.maxPagesPerSeq();
    // K plane row of (slot, position) through the mirror; -1 when unmapped.
    auto physical = [&](int32_t slot, int64_t pos) -> int64_t {
      const int32_t k = mirror[static_cast<size_t>(int64_t{slot} * 2 * maxPages + pos / P)];
      return k < 0 ? -1 : int64_t{k} * P + pos % P;
    };
    auto value = [](int64_t request, int64_t pos) {
      return static_cast<float>(request * 4096 + pos);
    };
    std::vector<int64_t> requestOf(static_cast<size_t>(maxB), -1);
    int64_t nextRequest = 0;
    std::vector<RunningStep> running;
    swa_test::AwaitingCommits awaiting;

    auto checkAll = [&] {
      for (int32_t s = 0; s < cache.activeCount(); ++s) {
        ASSERT_EQ(m.boundPages(s) + m.pendingPages(s) + m.reservedPages(s),
                  cache.plan().swaPrivatePagesPerSlot)
            << "slot " << s;
        ASSERT_EQ(m.length(s), cache.baseLength(s));
        const int64_t L = cache.baseLength(s);
        for (int32_t layer : {1, 2}) {
          const float* k = cache.basePool(layer).as<float>();
          for (int64_t pos = std::max<int64_t>(0, L - W + 1); pos < L; ++pos) {
            const int64_t r = physical(s, pos);
            ASSERT_GE(r, 0) << "slot " << s << " key " << pos << " unmapped";
            ASSERT_EQ(k[r * kDim], value(requestOf[static_cast<size_t>(s)], pos))
                << "layer " << layer << " slot " << s << " key " << pos << " was overwritten";
          }
        }
      }
      int64_t owned = m.freePoolPages() + m.deferredPoolPages();
      for (int32_t s = 0; s < cache.activeCount(); ++s) owned += m.privatePagesPerSlot();
      ASSERT_EQ(owned, numSwa);
    };

    for (int op = 0; op < 400; ++op) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (kind == 0 && cache.activeCount() < maxB && m.freePoolPages() >= m.privatePagesPerSlot()) {
        const int32_t s = cache.admit();
        requestOf[static_cast<size_t>(s)] = nextRequest++;
      } else if (kind == 1 && cache.activeCount() > 0) {
        std::vector<uint8_t> keep(static_cast<size_t>(cache.activeCount()));
        for (auto& k : keep) k = std::uniform_int_distribution<int>(0, 3)(rng) != 0;
        const std::vector<int32_t> oldToNew = cache.retireAndCompact(keep);
        std::vector<int64_t> nextOf(static_cast<size_t>(maxB), -1);
        for (size_t s = 0; s < oldToNew.size(); ++s) {
          if (oldToNew[s] >= 0) nextOf[static_cast<size_t>(oldToNew[s])] = requestOf[s];
        }
        requestOf.swap(nextOf);
        swa_test::remapAwaiting(awaiting, oldToNew);
        table.syncDirtyToHost(mirror);
      } else if (kind <= 3 && !running.empty()) {
        swa_test::completeOldestSteps(
            running, awaiting, rng, [&](int64_t id) { cache.completeStep(id); },
            [&](int32_t slot, int32_t rows) { cache.commitBase(slot, rows); });
        table.syncDirtyToHost(mirror);
      } else if (cache.activeCount() > 0) {
        std::vector<SwaStepWrite> writes;
        std::vector<uint8_t> prefill;
        for (int32_t s = 0; s < cache.activeCount(); ++s) {
          if (awaiting.count(s) || std::uniform_int_distribution<int>(0, 2)(rng) == 0) continue;
          const int64_t room = cache.maxStepTokens(s);
          if (room <= 0) continue;
          const bool isPrefill = std::uniform_int_distribution<int>(0, 1)(rng) == 0;
          const int64_t want = isPrefill
                                   ? std::uniform_int_distribution<int64_t>(1, 2 * W + 130)(rng)
                                   : std::uniform_int_distribution<int64_t>(1, 16)(rng);
          writes.push_back({s, static_cast<int32_t>(std::min(room, want))});
          prefill.push_back(isPrefill);
        }
        if (writes.empty()) continue;
        for (const SwaStepWrite& w : writes) slidPast += cache.baseLength(w.slot) > W + P;
        const std::vector<int32_t> before = mirror;
        const int64_t id = cache.beginStep(writes);
        ++totalSteps;
        table.syncDirtyToHost(mirror);  // the upload before the kernels
        RunningStep step{id, {}};
        std::set<int64_t> written;
        std::set<int32_t> newlyBound;
        for (size_t i = 0; i < writes.size(); ++i) {
          const int32_t s = writes[i].slot;
          const int64_t L = cache.baseLength(s), end = L + writes[i].count;
          for (int64_t pos = std::max<int64_t>(0, L - W + 1); pos < end; ++pos) {
            const int64_t r = physical(s, pos);
            ASSERT_GE(r, 0) << "slot " << s << " pos " << pos << " unmapped in step " << id;
            step.reads.insert(r);
            if (pos >= L) written.insert(r);
          }
          for (int32_t lp = 0; lp < maxPages; ++lp) {
            const size_t at = static_cast<size_t>(int64_t{s} * 2 * maxPages + lp);
            if (mirror[at] >= 0 && mirror[at] != before[at]) newlyBound.insert(mirror[at]);
          }
        }
        for (const RunningStep& other : running) {
          for (int64_t r : other.reads) {
            ASSERT_EQ(written.count(r), 0u) << "step " << id << " writes physical row " << r
                                            << " that running step " << other.id << " reads";
            ASSERT_EQ(newlyBound.count(static_cast<int32_t>(r / P)), 0u)
                << "step " << id << " binds page " << r / P << " that running step " << other.id
                << " reads";
          }
        }
        // The step's K/V writes, through the uploaded table, into both sliding layers.
        for (size_t i = 0; i < writes.size(); ++i) {
          const int32_t s = writes[i].slot;
          const int64_t L = cache.baseLength(s);
          for (int64_t pos = L; pos < L + writes[i].count; ++pos) {
            for (int32_t layer : {1, 2}) {
              cache.basePool(layer).as<float>()[physical(s, pos) * kDim] =
                  value(requestOf[static_cast<size_t>(s)], pos);
            }
          }
        }
        running.push_back(std::move(step));
        for (size_t i = 0; i < writes.size(); ++i) {
          if (prefill[i]) {
            cache.commitBase(writes[i].slot, writes[i].count);
          } else {
            awaiting[writes[i].slot] = {id, writes[i].count};
          }
        }
        table.syncDirtyToHost(mirror);
      }
      checkAll();
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) return;
    }
  }
  // The runs must exercise sliding, not only short sequences.
  EXPECT_GT(totalSteps, 2000);
  EXPECT_GT(slidPast, 500);
}

}  // namespace
}  // namespace es::kv
