// The KV cache manager with prefix reuse wired in (plan prefixCachePages > 0): admission shares
// the longest published prefix through the page tables, publication, retirement, eviction.
// The randomized test drives admit / commit+publish / retire sequences and checks the manager
// after every operation against a small reference model of the expected state (records, LRU,
// which pages each slot and record holds, active and cache counts, free pages).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/prefix_cache.h"
#include "support/test_util.h"

namespace es::kv {
namespace {

using test::expectInvalidArgument;

constexpr int32_t P = kTokensPerPage;

KvCacheConfig tinyReuse(int32_t batch, int32_t seq, int64_t retained, bool draft = true) {
  KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = seq;
  c.dtype = DType::kF32;
  c.baseLayers.assign(2, KvLayerShape{1, 8, 0});
  if (draft) c.draftLayers.assign(1, KvLayerShape{2, 8, 0});
  c.prefixCachePages = retained;
  return c;
}

// Block content `choice` at `depth`: few distinct contents, so random requests share prefixes.
std::vector<int32_t> sequence(const std::vector<int32_t>& choices, int32_t length) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < length; ++i) {
    const int32_t depth = i / P;
    t.push_back(choices[static_cast<size_t>(depth)] * 7919 + depth * 31 + i % P);
  }
  return t;
}

TEST(KvPrefixReusePlan, RetainedPagesSizeThePoolAndAreReported) {
  KvCacheConfig c = tinyReuse(3, 300, 5);
  const KvCachePlan p = planKvCache(c);
  EXPECT_EQ(p.numPages, computePrefixCachePoolPages(3, 300, 5));
  EXPECT_EQ(p.numPages, 3 * 3 + 5);
  EXPECT_EQ(p.prefixCachePages, 5);
  // Per page: K and V planes of 128 tokens in every base and draft layer.
  EXPECT_EQ(p.prefixCacheBytes, 5 * (2 * 2 * P * 1 * 8 * 4 + 2 * P * 2 * 8 * 4));
  EXPECT_NE(p.describe().find("prefix reuse: 5 retained pages"), std::string::npos) << p.describe();
  EXPECT_EQ(p.toJson()["prefix_cache_pages"], 5);
  EXPECT_EQ(planKvCache(tinyReuse(3, 300, 0)).prefixCacheBytes, 0);

  c.prefixCachePages = -1;
  expectInvalidArgument([&] { planKvCache(c); }, "prefixCachePages");
  c.prefixCachePages = kMaxKvPoolPages;
  expectInvalidArgument([&] { planKvCache(c); }, "prefixCachePages");
  c.prefixCachePages = 2;
  c.numPages = 20;
  expectInvalidArgument([&] { planKvCache(c); }, "numPages");
  c.numPages = 0;
  c.baseLayers[1].kvCacheCapacity = 128;  // a sliding-window layer
  expectInvalidArgument([&] { planKvCache(c); }, "prefixCachePages");
}

TEST(KvPrefixReuse, AdmissionSharesPublishedPagesAndNeverWritesThem) {
  KvCacheManager m(tinyReuse(2, 512, 4), MemorySpace::kHost);
  ASSERT_TRUE(m.prefixReuse());
  EXPECT_FALSE(m.basePageTable().isIdentity());
  expectInvalidArgument([&] { m.admit(); }, "prompt");

  const std::vector<int32_t> a = sequence({1, 2, 3, 4}, 300);
  const KvCacheManager::Admission first = m.admit(a, 400, true);
  EXPECT_EQ(first.slot, 0);
  EXPECT_EQ(first.reusedTokens, 0);
  EXPECT_EQ(m.baseLength(0), 0);
  // ceil(400 / 128) = 4 private pages, base and draft.
  for (int32_t p = 0; p < 4; ++p) {
    EXPECT_GE(m.basePageTable().kPage(0, p), 0);
    EXPECT_GE(m.draftPageTable().kPage(0, p), 0);
  }
  // Nothing is published before it is committed.
  EXPECT_EQ(m.publish(0, a), 0);
  m.commitBase(0, 300);
  EXPECT_EQ(m.publish(0, a), 0);  // the draft context is not committed yet
  m.commitDraft(0, 300);
  EXPECT_EQ(m.publish(0, a), 2);  // two complete blocks; the tail stays private
  EXPECT_EQ(m.sharedTokens(0), 256);
  expectInvalidArgument([&] { m.checkWritable(0, 255, 1); }, "firstPosition");
  EXPECT_NO_THROW(m.checkWritable(0, 256, 4));

  // Shares two blocks, then diverges: rows point at slot 0's pages, lengths start after them.
  std::vector<int32_t> b = sequence({1, 2, 9}, 280);
  const KvCacheManager::Admission second = m.admit(b, 300, true);
  EXPECT_EQ(second.slot, 1);
  EXPECT_EQ(second.reusedTokens, 256);
  EXPECT_EQ(m.baseLength(1), 256);
  EXPECT_EQ(m.draftLength(1), 256);
  for (int32_t p = 0; p < 2; ++p) {
    EXPECT_EQ(m.basePageTable().kPage(1, p), m.basePageTable().kPage(0, p));
    EXPECT_EQ(m.draftPageTable().kPage(1, p), m.draftPageTable().kPage(0, p));
    EXPECT_EQ(m.prefixCache()->baseActiveCount(m.basePageTable().kPage(0, p)), 2);
    EXPECT_EQ(m.prefixCache()->baseCacheCount(m.basePageTable().kPage(0, p)), 1);
  }
  EXPECT_NE(m.basePageTable().kPage(1, 2), m.basePageTable().kPage(0, 2));
  EXPECT_EQ(m.basePageTable().kPage(1, 3), kUnusedPageEntry);  // 300 positions: 3 pages
  expectInvalidArgument([&] { m.checkWritable(1, 200, 60); }, "firstPosition");

  // Retiring slot 0 keeps its records; slot 1 moves to row 0 with its pins.
  const PageId shared0 = m.basePageTable().kPage(0, 0);
  const std::vector<int32_t> oldToNew = m.retireAndCompact(std::vector<uint8_t>{0, 1});
  EXPECT_EQ(oldToNew, (std::vector<int32_t>{-1, 0}));
  EXPECT_EQ(m.basePageTable().kPage(0, 0), shared0);
  EXPECT_EQ(m.basePageTable().kPage(1, 0), kUnusedPageEntry);
  EXPECT_EQ(m.baseLength(0), 256);
  EXPECT_EQ(m.sharedTokens(0), 256);
  EXPECT_EQ(m.prefixCache()->baseActiveCount(shared0), 1);
  m.retireAndCompact(std::vector<uint8_t>{0});
  EXPECT_EQ(m.prefixCache()->baseActiveCount(shared0), 0);
  EXPECT_EQ(m.prefixCache()->baseCacheCount(shared0), 1);

  // A fully matched, page-aligned prompt recomputes its last block.
  const std::vector<int32_t> aligned(a.begin(), a.begin() + 256);
  EXPECT_EQ(m.admit(aligned, 256, true).reusedTokens, 128);
  // A request without the draft reuses base pages only and gets no draft pages.
  const std::vector<int32_t> c = sequence({1, 2, 9, 4}, 400);
  const KvCacheManager::Admission plain = m.admit(c, 400, false);
  EXPECT_EQ(plain.reusedTokens, 256);
  EXPECT_EQ(m.draftPageTable().kPage(plain.slot, 0), kUnusedPageEntry);
  m.commitBase(plain.slot, 400 - 256);
  EXPECT_EQ(m.publish(plain.slot, c), 1);  // its third block, without a draft page
  m.retireAndCompact(std::vector<uint8_t>{1, 0});
  // ... so a draft request matches only the two blocks that carry draft context.
  EXPECT_EQ(m.prefixCache()->matchBlocks(c, false), 3);
  EXPECT_EQ(m.prefixCache()->matchBlocks(c, true), 2);
  EXPECT_EQ(m.admit(c, 400, true).reusedTokens, 256);
}

TEST(KvPrefixReuse, ArgumentErrorsChangeNothing) {
  KvCacheManager m(tinyReuse(1, 256, 1, /*draft=*/false), MemorySpace::kHost);
  const std::vector<int32_t> a = sequence({1, 2}, 200);
  expectInvalidArgument([&] { m.admit(std::vector<int32_t>{}, 10, false); }, "prompt.size()");
  expectInvalidArgument([&] { m.admit(a, 199, false); }, "positions");
  expectInvalidArgument([&] { m.admit(a, 257, false); }, "positions");
  expectInvalidArgument([&] { m.admit(a, 200, true); }, "withDraft");
  EXPECT_EQ(m.activeCount(), 0);
  EXPECT_EQ(m.prefixCache()->activeRequests(), 0);
  m.admit(a, 200, false);
  expectInvalidArgument([&] { m.admit(a, 200, false); }, "active slots");
  expectInvalidArgument([&] { m.publish(3, a); }, "slot");
  KvCacheManager identity(tinyReuse(1, 256, 0), MemorySpace::kHost);
  expectInvalidArgument([&] { identity.admit(a, 200, false); }, "prompt.size()");
  identity.admit();
  expectInvalidArgument([&] { identity.publish(0, a); }, "slot");
}

TEST(KvPrefixReuse, FreshPagesArePoisoned) {
  KvCacheManager m(tinyReuse(1, 256, 1), MemorySpace::kHost);
  m.setPoisonFreshPages(true);
  const int32_t slot = m.admit(sequence({1, 1}, 130), 130, true).slot;
  const TensorView pool = m.basePool(1);
  const auto* k = static_cast<const float*>(pool.data);
  const int64_t pageFloats = P * 1 * 8;
  for (int32_t p = 0; p < 2; ++p) {
    const PageId page = m.basePageTable().kPage(slot, p);
    EXPECT_TRUE(std::isnan(k[page * pageFloats])) << "page " << page;
    EXPECT_TRUE(std::isnan(k[(page + 1) * pageFloats - 1]));
  }
}

// ---- Randomized sequences against a reference model ----

struct ModelRecord {
  PageId base, draft;
  uint64_t lastUse;
};

struct ModelSlot {
  std::vector<int32_t> choices;  // block contents of its whole sequence
  std::vector<int32_t> tokens;   // its sequence (prompt first)
  bool withDraft;
  std::vector<PageId> base, draft;  // its rows
  int32_t committed = 0;
  int32_t published;  // leading blocks it holds records for (matched, then its own)
  bool chainOpen = true;
};

// The expected state: records keyed by their chain of block choices.
struct Model {
  int32_t numPages;
  std::map<std::vector<int32_t>, ModelRecord> records;
  std::vector<ModelSlot> slots;
  uint64_t clock = 0;

  static std::vector<int32_t> key(const std::vector<int32_t>& choices, int32_t blocks) {
    return {choices.begin(), choices.begin() + blocks};
  }
  bool hasChild(const std::vector<int32_t>& k) const {
    for (const auto& [other, r] : records) {
      if (other.size() == k.size() + 1 && std::equal(k.begin(), k.end(), other.begin()))
        return true;
    }
    return false;
  }
  bool activeBase(PageId p) const {
    for (const ModelSlot& s : slots) {
      if (std::count(s.base.begin(), s.base.end(), p)) return true;
    }
    return false;
  }
  bool activeDraft(PageId p) const {
    for (const ModelSlot& s : slots) {
      if (std::count(s.draft.begin(), s.draft.end(), p)) return true;
    }
    return false;
  }
  int32_t usedBase() const {
    std::set<PageId> used;
    for (const ModelSlot& s : slots) used.insert(s.base.begin(), s.base.end());
    for (const auto& [k, r] : records) used.insert(r.base);
    return static_cast<int32_t>(used.size());
  }
  int32_t usedDraft() const {
    std::set<PageId> used;
    for (const ModelSlot& s : slots) used.insert(s.draft.begin(), s.draft.end());
    for (const auto& [k, r] : records) {
      if (r.draft >= 0) used.insert(r.draft);
    }
    return static_cast<int32_t>(used.size());
  }
  // LRU over records no running request uses and no record descends from.
  bool evictOne() {
    auto victim = records.end();
    for (auto it = records.begin(); it != records.end(); ++it) {
      const ModelRecord& r = it->second;
      if (hasChild(it->first) || activeBase(r.base) || (r.draft >= 0 && activeDraft(r.draft)))
        continue;
      if (victim == records.end() || r.lastUse < victim->second.lastUse) victim = it;
    }
    if (victim == records.end()) return false;
    records.erase(victim);
    return true;
  }
};

void expectMatchesModel(const KvCacheManager& m, const Model& model, int step) {
  SCOPED_TRACE("step " + std::to_string(step));
  const PrefixCache& c = *m.prefixCache();
  ASSERT_EQ(m.activeCount(), static_cast<int32_t>(model.slots.size()));
  ASSERT_EQ(c.recordCount(), static_cast<int32_t>(model.records.size()));
  EXPECT_EQ(c.freeBasePages(), model.numPages - model.usedBase());
  EXPECT_EQ(c.freeDraftPages(), model.numPages - model.usedDraft());
  for (PageId p = 0; p < model.numPages; ++p) {
    int32_t active = 0, draftActive = 0, cached = 0, draftCached = 0;
    for (const ModelSlot& s : model.slots) {
      active += static_cast<int32_t>(std::count(s.base.begin(), s.base.end(), p));
      draftActive += static_cast<int32_t>(std::count(s.draft.begin(), s.draft.end(), p));
    }
    for (const auto& [k, r] : model.records) {
      cached += r.base == p;
      draftCached += r.draft == p;
    }
    ASSERT_EQ(c.baseActiveCount(p), active) << "base page " << p;
    ASSERT_EQ(c.baseCacheCount(p), cached) << "base page " << p;
    ASSERT_EQ(c.draftActiveCount(p), draftActive) << "draft page " << p;
    ASSERT_EQ(c.draftCacheCount(p), draftCached) << "draft page " << p;
  }
  for (int32_t s = 0; s < m.maxBatchSize(); ++s) {
    const bool live = s < m.activeCount();
    for (int32_t p = 0; p < m.plan().maxPagesPerSeq; ++p) {
      const ModelSlot* ms = live ? &model.slots[static_cast<size_t>(s)] : nullptr;
      const PageId base =
          ms && p < static_cast<int32_t>(ms->base.size()) ? ms->base[static_cast<size_t>(p)] : -1;
      const PageId draft =
          ms && p < static_cast<int32_t>(ms->draft.size()) ? ms->draft[static_cast<size_t>(p)] : -1;
      ASSERT_EQ(m.basePageTable().kPage(s, p), base) << "slot " << s << " page " << p;
      ASSERT_EQ(m.draftPageTable().kPage(s, p), draft) << "slot " << s << " page " << p;
    }
    if (live) {
      const ModelSlot& ms = model.slots[static_cast<size_t>(s)];
      EXPECT_EQ(m.baseLength(s), ms.committed);
      EXPECT_EQ(m.sharedTokens(s), ms.published * P);
    }
  }
}

TEST(KvPrefixReuse, RandomizedSequencesMatchTheReferenceModel) {
  constexpr int32_t kBatch = 3, kSeq = 512, kRetained = 3, kSteps = 400;
  int64_t allEvictions = 0, reused = 0;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    int64_t evictions = 0;
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto uniform = [&](int32_t lo, int32_t hi) {
      return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
    };
    KvCacheManager m(tinyReuse(kBatch, kSeq, kRetained), MemorySpace::kHost);
    Model model;
    model.numPages = m.plan().numPages;
    ASSERT_EQ(model.numPages, kBatch * 4 + kRetained);

    for (int step = 0; step < kSteps; ++step) {
      // Admit and publish more often than retire, so records pile up and pages run out.
      const int roll = uniform(0, 9);
      const int op = roll < 4 ? 0 : roll < 8 ? 1 : 2;
      if (op == 0 && m.activeCount() < kBatch) {  // admit
        ModelSlot s;
        for (int d = 0; d < 4; ++d) s.choices.push_back(uniform(0, 2) == 0 ? 1 : 0);
        const int32_t total = uniform(0, 3) == 0 ? uniform(1, kSeq) : uniform(kSeq / 2, kSeq);
        s.tokens = sequence(s.choices, total);
        const int32_t promptLength = uniform(1, total);
        const std::vector<int32_t> prompt(s.tokens.begin(), s.tokens.begin() + promptLength);
        s.withDraft = uniform(0, 1) == 1;
        // Expected match: the longest recorded chain (with draft pages for a draft request),
        // at most (promptLength - 1) / 128 blocks; refreshed in block order.
        int32_t matched = 0;
        while (matched < (promptLength - 1) / P) {
          const auto it = model.records.find(Model::key(s.choices, matched + 1));
          if (it == model.records.end() || (s.withDraft && it->second.draft < 0)) break;
          it->second.lastUse = ++model.clock;
          s.base.push_back(it->second.base);
          if (s.withDraft) s.draft.push_back(it->second.draft);
          ++matched;
        }
        const std::vector<PageId> sharedBase = s.base, sharedDraft = s.draft;
        // Each further block takes a free page, evicting LRU records while none is free.
        const int32_t blocks = (total + P - 1) / P;
        model.slots.push_back(s);
        for (int32_t b = matched; b < blocks; ++b) {
          while (model.usedBase() == model.numPages ||
                 (s.withDraft && model.usedDraft() == model.numPages)) {
            ASSERT_TRUE(model.evictOne()) << "the minimum pool must always serve active slots";
            ++evictions;
          }
          model.slots.back().base.push_back(
              -2 - b);  // a placeholder until the manager's choice is known
          if (s.withDraft) model.slots.back().draft.push_back(-2 - b);
        }
        const KvCacheManager::Admission a = m.admit(prompt, total, s.withDraft);
        ASSERT_EQ(a.slot, static_cast<int32_t>(model.slots.size()) - 1);
        ASSERT_EQ(a.reusedTokens, matched * P);
        reused += matched;
        // The manager's page choices: shared rows are the records' pages; fresh pages were free
        // (no other slot's page, no surviving record's page) and are distinct.
        ModelSlot ms = model.slots.back();
        model.slots.pop_back();
        ms.committed = a.reusedTokens;
        ms.published = matched;
        for (int32_t b = 0; b < blocks; ++b) {
          const PageId base = m.basePageTable().kPage(a.slot, b);
          const PageId draft = m.draftPageTable().kPage(a.slot, b);
          if (b < matched) {
            ASSERT_EQ(base, sharedBase[static_cast<size_t>(b)]);
            if (s.withDraft) ASSERT_EQ(draft, sharedDraft[static_cast<size_t>(b)]);
            continue;
          }
          ASSERT_FALSE(model.activeBase(base)) << "page " << base << " handed out while in use";
          for (const auto& [k, r] : model.records)
            ASSERT_NE(r.base, base) << "a record's page handed out";
          ASSERT_EQ(std::count(ms.base.begin(), ms.base.begin() + b, base), 0);
          ms.base[static_cast<size_t>(b)] = base;
          if (s.withDraft) {
            ASSERT_FALSE(model.activeDraft(draft));
            for (const auto& [k, r] : model.records) ASSERT_NE(r.draft, draft);
            ms.draft[static_cast<size_t>(b)] = draft;
          } else {
            ASSERT_EQ(draft, kUnusedPageEntry);
          }
        }
        model.slots.push_back(ms);
      } else if (op == 1 && m.activeCount() > 0) {  // commit some tokens, publish
        const int32_t slot = uniform(0, m.activeCount() - 1);
        ModelSlot& ms = model.slots[static_cast<size_t>(slot)];
        const int32_t total = static_cast<int32_t>(ms.tokens.size());
        const int32_t grow = uniform(0, total - ms.committed);
        m.commitBase(slot, grow);
        if (ms.withDraft) m.commitDraft(slot, grow);
        ms.committed += grow;
        int32_t expected = 0;
        for (int32_t b = ms.published; ms.chainOpen && b < ms.committed / P; ++b) {
          const std::vector<int32_t> k = Model::key(ms.choices, b + 1);
          if (model.records.count(k)) {  // published by another request first: stays private
            ms.chainOpen = false;
            break;
          }
          model.records[k] = {ms.base[static_cast<size_t>(b)],
                              ms.withDraft ? ms.draft[static_cast<size_t>(b)] : -1, ++model.clock};
          ++ms.published;
          ++expected;
        }
        ASSERT_EQ(m.publish(slot, ms.tokens), expected);
        if (ms.published > 0) {
          expectInvalidArgument([&] { m.checkWritable(slot, ms.published * P - 1, 1); },
                                "firstPosition");
        }
      } else if (op == 2 && m.activeCount() > 0) {  // retire a random subset
        std::vector<uint8_t> keep;
        std::vector<ModelSlot> survivors;
        for (int32_t s = 0; s < m.activeCount(); ++s) {
          keep.push_back(uniform(0, 2) != 0);
          if (keep.back()) survivors.push_back(model.slots[static_cast<size_t>(s)]);
        }
        m.retireAndCompact(keep);
        model.slots = survivors;
      }
      expectMatchesModel(m, model, step);
      if (HasFatalFailure()) return;
    }
    EXPECT_EQ(m.prefixCache()->evictions(), evictions);
    allEvictions += evictions;
  }
  // The sequences exercised what they are meant to.
  EXPECT_GT(allEvictions, 40) << allEvictions;
  EXPECT_GT(reused, 200) << reused;
}

}  // namespace
}  // namespace es::kv
