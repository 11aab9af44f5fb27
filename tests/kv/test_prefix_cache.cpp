#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kv/prefix_cache.h"
#include "support/test_util.h"

namespace es::kv {
namespace {

using test::expectInvalidArgument;

constexpr int32_t P = kTokensPerPage;

// Block `choice` at depth `depth`: few distinct contents so random prompts share prefixes.
std::vector<int32_t> block(int32_t depth, int32_t choice) {
  std::vector<int32_t> t(P);
  for (int32_t j = 0; j < P; ++j) t[static_cast<size_t>(j)] = choice * 7919 + depth * 31 + j;
  return t;
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<int32_t> tail(int32_t n, int32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), seed * 1000 + 500000);
  return t;
}

// Runs a request to completion of its prompt: acquire, allocate the missing blocks, publish.
int64_t admitPrompt(PrefixCache& c, const std::vector<int32_t>& prompt, bool withDraft = false) {
  const PrefixAcquireResult r = c.acquire(prompt, withDraft);
  const int32_t blocks = static_cast<int32_t>((prompt.size() + P - 1) / P);
  for (int32_t b = r.matchedBlocks; b < blocks; ++b) c.allocateBlock(r.request);
  c.publish(r.request, prompt);
  return r.request;
}

TEST(PrefixCache, HashIsFnv1aOverParentAndTokens) {
  std::vector<int32_t> t(P);
  std::iota(t.begin(), t.end(), 0);
  // Golden values computed independently (Python) from the definition in prefix_cache.h.
  const uint64_t h0 = hashPrefixBlock(kPrefixRootHash, t);
  EXPECT_EQ(h0, 0xb4501f8a850aebc5ull);
  EXPECT_EQ(hashPrefixBlock(h0, std::vector<int32_t>(P, -1)), 0x257a4e3533bdf5c3ull);
  EXPECT_NE(hashPrefixBlock(1, t), h0);  // the parent is mixed in
  expectInvalidArgument([&] { hashPrefixBlock(0, std::span(t).first(5)); }, "blockTokens.size()");
}

TEST(PrefixCache, PoolSizing) {
  EXPECT_EQ(computePrefixCachePoolPages(4, 1000, 0), 32);
  EXPECT_EQ(computePrefixCachePoolPages(4, 1000, 10), 42);
  expectInvalidArgument([] { computePrefixCachePoolPages(4, 1000, -1); }, "retainedPages");
  expectInvalidArgument([] { computePrefixCachePoolPages(4, 1024, kMaxKvPoolPages - 31); },
                        "retainedPages");
  expectInvalidArgument([] { computePrefixCachePoolPages(0, 1024, 1); }, "maxBatchSize");
}

TEST(PrefixCache, TwoRequestsShareAPrefix) {
  PrefixCache c(16, 0);
  const auto a = concat({block(0, 0), block(1, 0), tail(44, 1)});
  const int64_t ra = admitPrompt(c, a);
  EXPECT_EQ(c.recordCount(), 2);  // the partial tail stays private
  const auto aBlocks = c.requestBlocks(ra);
  const auto b = concat({block(0, 0), block(1, 0), tail(50, 2)});
  const PrefixAcquireResult rb = c.acquire(b, false);
  EXPECT_EQ(rb.matchedBlocks, 2);
  ASSERT_EQ(rb.pages.size(), 2u);
  EXPECT_EQ(rb.pages[0], aBlocks[0]);
  EXPECT_EQ(rb.pages[1], aBlocks[1]);
  EXPECT_EQ(c.baseActiveCount(aBlocks[0].base), 2);
  EXPECT_EQ(c.baseCacheCount(aBlocks[0].base), 1);
  EXPECT_EQ(c.baseCacheCount(aBlocks[2].base), 0);
  // A different first block shares nothing even when later blocks are equal.
  EXPECT_EQ(c.matchBlocks(concat({block(0, 1), block(1, 0), tail(3, 3)}), false), 0);
  c.release(ra);
  EXPECT_EQ(c.baseActiveCount(aBlocks[0].base), 1);
  EXPECT_EQ(c.freeBasePages(), 16 - 2 - 0);  // A's tail page is free; the shared pages are held
  c.release(rb.request);
  EXPECT_EQ(c.freeBasePages(), 14);  // two pages retained by records
}

TEST(PrefixCache, FullyMatchedAlignedPromptRecomputesItsLastBlock) {
  PrefixCache c(16, 0);
  const auto two = concat({block(0, 0), block(1, 0)});
  c.release(admitPrompt(c, concat({two, tail(10, 1)})));
  EXPECT_EQ(c.matchBlocks(two, false), 1);  // (256 - 1) / 128
  EXPECT_EQ(c.matchBlocks(concat({two, tail(1, 2)}), false), 2);
  EXPECT_EQ(c.matchBlocks(block(0, 0), false), 0);
  expectInvalidArgument([&] { c.matchBlocks({}, false); }, "prompt.size()");
}

TEST(PrefixCache, EvictionIsLruAndLeafFirst) {
  PrefixCache c(8, 0);
  // Three single-block chains X, Y, Z published in that order, then Y is hit again.
  for (int32_t choice = 0; choice < 3; ++choice)
    c.release(admitPrompt(c, concat({block(0, choice), tail(1, choice)})));
  const PrefixAcquireResult hit = c.acquire(concat({block(0, 1), tail(2, 9)}), false);
  EXPECT_EQ(hit.matchedBlocks, 1);
  const PageId y = hit.pages[0].base;
  c.release(hit.request);
  // A two-block chain W0 <- W1, older than nothing: published last.
  c.release(admitPrompt(c, concat({block(0, 5), block(1, 5), tail(1, 5)})));
  EXPECT_EQ(c.recordCount(), 5);
  // Order: X, Z, Y (refreshed), then W1 (leaf) before its parent W0.
  EXPECT_EQ(c.evictOne()->base, 0);  // X's page was the first allocated
  auto z = c.evictOne();
  ASSERT_TRUE(z);
  EXPECT_NE(z->base, y);
  EXPECT_EQ(c.evictOne()->base, y);
  EXPECT_EQ(c.matchBlocks(concat({block(0, 5), block(1, 5), tail(1, 5)}), false), 2);
  c.evictOne();
  EXPECT_EQ(c.matchBlocks(concat({block(0, 5), block(1, 5), tail(1, 5)}), false), 1);
  c.evictOne();
  EXPECT_EQ(c.recordCount(), 0);
  EXPECT_FALSE(c.evictOne());
  EXPECT_EQ(c.freeBasePages(), 8);
}

TEST(PrefixCache, NeverEvictsPagesInUse) {
  PrefixCache c(3, 0);
  const int64_t a = admitPrompt(c, concat({block(0, 0), block(1, 0), tail(5, 0)}));
  EXPECT_EQ(c.freeBasePages(), 0);
  EXPECT_FALSE(c.evictOne());  // both records are pinned by the running request
  const PrefixAcquireResult b = c.acquire(tail(5, 1), false);
  try {
    c.allocateBlock(b.request);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'request'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("numBasePages (3)"), std::string::npos) << msg;
  }
  EXPECT_EQ(c.recordCount(), 2);
  c.release(a);
  // Now the leaf record goes first, then the tail page of A is already free.
  EXPECT_EQ(c.freeBasePages(), 1);
  c.allocateBlock(b.request);
  const PageId second = c.allocateBlock(b.request).base;  // evicts the leaf record
  EXPECT_EQ(c.recordCount(), 1);
  EXPECT_EQ(c.baseActiveCount(second), 1);
  EXPECT_EQ(c.baseCacheCount(second), 0);
}

TEST(PrefixCache, DuplicatePublishKeepsItsCopyPrivateAndStopsTheChain) {
  PrefixCache c(16, 0);
  const auto prompt = concat({block(0, 0), block(1, 0), tail(3, 0)});
  const PrefixAcquireResult a = c.acquire(prompt, false);
  const PrefixAcquireResult b = c.acquire(prompt, false);  // both miss: computed twice
  for (int i = 0; i < 3; ++i) c.allocateBlock(a.request), c.allocateBlock(b.request);
  EXPECT_EQ(c.publish(a.request, prompt), 2);
  EXPECT_EQ(c.publish(b.request, prompt), 0);
  EXPECT_EQ(c.recordCount(), 2);
  c.release(b.request);
  EXPECT_EQ(c.freeBasePages(), 16 - 3);  // all of B's pages came back
  c.release(a.request);
}

TEST(PrefixCache, DraftPagesTravelWithTheirBlocks) {
  PrefixCache c(8, 8);
  const auto prompt = concat({block(0, 0), block(1, 0), tail(7, 0)});
  const int64_t plain = admitPrompt(c, concat({block(0, 3), tail(1, 3)}), false);
  EXPECT_EQ(c.requestBlocks(plain)[0].draft, -1);
  const int64_t a = admitPrompt(c, prompt, true);
  const auto aBlocks = c.requestBlocks(a);
  EXPECT_GE(aBlocks[0].draft, 0);
  EXPECT_EQ(c.draftCacheCount(aBlocks[0].draft), 1);
  const PrefixAcquireResult b = c.acquire(prompt, true);
  EXPECT_EQ(b.matchedBlocks, 2);
  EXPECT_EQ(b.pages[1], aBlocks[1]);
  EXPECT_EQ(c.draftActiveCount(aBlocks[1].draft), 2);
  // A record without a draft page does not serve a draft request, but serves a plain one.
  EXPECT_EQ(c.matchBlocks(concat({block(0, 3), tail(2, 4)}), true), 0);
  EXPECT_EQ(c.matchBlocks(concat({block(0, 3), tail(2, 4)}), false), 1);
  const PrefixAcquireResult p = c.acquire(prompt, false);  // plain request: base pages only
  EXPECT_EQ(p.pages[0].draft, -1);
  EXPECT_EQ(c.draftActiveCount(aBlocks[0].draft), 2);
  c.release(a);
  c.release(b.request);
  c.release(p.request);
  c.release(plain);
  EXPECT_EQ(c.freeDraftPages(), 8 - 2);
}

TEST(PrefixCache, ErrorsNameArgumentAndLimit) {
  expectInvalidArgument([] { PrefixCache(0, 0); }, "numBasePages");
  expectInvalidArgument([] { PrefixCache(4, -1); }, "numDraftPages");
  PrefixCache c(4, 0);
  expectInvalidArgument([&] { c.acquire({}, false); }, "prompt.size()");
  expectInvalidArgument([&] { c.acquire(tail(3, 0), true); }, "withDraft");
  expectInvalidArgument([&] { c.allocateBlock(99); }, "request");
  expectInvalidArgument([&] { c.release(99); }, "request");
  expectInvalidArgument([&] { c.publish(99, tail(3, 0)); }, "request");
  const PrefixAcquireResult r = c.acquire(tail(200, 0), false);
  c.allocateBlock(r.request);
  expectInvalidArgument([&] { c.publish(r.request, tail(200, 0)); }, "tokens.size()");
  expectInvalidArgument([&] { c.baseActiveCount(4); }, "page");
  c.release(r.request);
  expectInvalidArgument([&] { c.release(r.request); }, "request");
}

// ---------------------------------------------------------------------------------------------
// Randomized admit / generate / publish / finish / evict sequences against a plain model: records
// keyed by their full token prefix (no hashing), LRU by an explicit clock, refcounts recomputed.

struct ModelRequest {
  bool withDraft;
  std::vector<int32_t> tokens;
  std::vector<PrefixBlockPages> blocks;
  size_t records = 0;
  bool chainOpen = true;
};

struct Model {
  int32_t numBase, numDraft;
  std::map<std::vector<int32_t>, std::pair<PrefixBlockPages, uint64_t>> records;
  std::map<int64_t, ModelRequest> requests;
  uint64_t clock = 0;

  std::vector<int32_t> key(const std::vector<int32_t>& tokens, size_t blocks) const {
    return {tokens.begin(), tokens.begin() + static_cast<long>(blocks * P)};
  }
  size_t match(const std::vector<int32_t>& prompt, bool draft) const {
    size_t b = 0;
    for (; b < (prompt.size() - 1) / P; ++b) {
      auto it = records.find(key(prompt, b + 1));
      if (it == records.end() || (draft && it->second.first.draft < 0)) break;
    }
    return b;
  }
  int activeBase(PageId p) const {
    int n = 0;
    for (auto& [id, r] : requests)
      for (auto& b : r.blocks) n += b.base == p;
    return n;
  }
  int activeDraft(PageId p) const {
    int n = 0;
    for (auto& [id, r] : requests)
      for (auto& b : r.blocks) n += b.draft == p;
    return n;
  }
  int cacheBase(PageId p) const {
    int n = 0;
    for (auto& [k, v] : records) n += v.first.base == p;
    return n;
  }
  int cacheDraft(PageId p) const {
    int n = 0;
    for (auto& [k, v] : records) n += v.first.draft == p;
    return n;
  }
  int freeBase() const {
    int n = 0;
    for (PageId p = 0; p < numBase; ++p) n += activeBase(p) == 0 && cacheBase(p) == 0;
    return n;
  }
  int freeDraft() const {
    int n = 0;
    for (PageId p = 0; p < numDraft; ++p) n += activeDraft(p) == 0 && cacheDraft(p) == 0;
    return n;
  }
  std::optional<PrefixBlockPages> evict() {
    auto best = records.end();
    for (auto it = records.begin(); it != records.end(); ++it) {
      const PrefixBlockPages& pg = it->second.first;
      if (activeBase(pg.base) || (pg.draft >= 0 && activeDraft(pg.draft))) continue;
      bool hasChild = false;
      for (auto& [k, v] : records)
        hasChild |= k.size() == it->first.size() + P &&
                    std::equal(it->first.begin(), it->first.end(), k.begin());
      if (hasChild) continue;
      if (best == records.end() || it->second.second < best->second.second) best = it;
    }
    if (best == records.end()) return std::nullopt;
    const PrefixBlockPages pg = best->second.first;
    records.erase(best);
    return pg;
  }
  void publish(ModelRequest& r) {
    const size_t complete = r.tokens.size() / P;
    for (size_t b = r.records; r.chainOpen && b < complete; ++b) {
      auto k = key(r.tokens, b + 1);
      if (records.count(k)) {
        r.chainOpen = false;
        break;
      }
      records[k] = {r.blocks[b], ++clock};
      r.records = b + 1;
    }
  }
};

void expectSameState(const PrefixCache& c, const Model& m) {
  ASSERT_EQ(c.recordCount(), static_cast<int32_t>(m.records.size()));
  ASSERT_EQ(c.activeRequests(), static_cast<int32_t>(m.requests.size()));
  for (PageId p = 0; p < m.numBase; ++p) {
    ASSERT_EQ(c.baseActiveCount(p), m.activeBase(p)) << "base page " << p;
    ASSERT_EQ(c.baseCacheCount(p), m.cacheBase(p)) << "base page " << p;
  }
  for (PageId p = 0; p < m.numDraft; ++p) {
    ASSERT_EQ(c.draftActiveCount(p), m.activeDraft(p)) << "draft page " << p;
    ASSERT_EQ(c.draftCacheCount(p), m.cacheDraft(p)) << "draft page " << p;
  }
  ASSERT_EQ(c.freeBasePages(), m.freeBase());
  ASSERT_EQ(c.freeDraftPages(), m.freeDraft());
  for (auto& [id, r] : m.requests) ASSERT_EQ(c.requestBlocks(id), r.blocks);
}

TEST(PrefixCache, PropertyRandomSequencesMatchAPlainModel) {
  std::mt19937 rng(777);
  for (int trial = 0; trial < 10; ++trial) {
    const int32_t maxConcurrent = std::uniform_int_distribution<int32_t>(1, 3)(rng);
    const int32_t maxBlocks = 5;
    const int32_t minimum = maxConcurrent * maxBlocks;
    const int32_t numBase = minimum + std::uniform_int_distribution<int32_t>(0, 8)(rng);
    const int32_t numDraft = trial % 2 ? numBase : 0;
    PrefixCache c(numBase, numDraft);
    Model m{numBase, numDraft, {}, {}, 0};
    auto u = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    // Allocates one block for request id in both, predicting the model's evictions; the page
    // handed out must be free in the model (never one a request or record still holds).
    auto allocate = [&](int64_t id) {
      ModelRequest& r = m.requests.at(id);
      while (m.freeBase() == 0 || (r.withDraft && m.freeDraft() == 0))
        ASSERT_TRUE(m.evict()) << "the minimum pool must always serve active requests";
      const PrefixBlockPages pg = c.allocateBlock(id);
      ASSERT_EQ(m.activeBase(pg.base) + m.cacheBase(pg.base), 0) << "base page " << pg.base;
      if (r.withDraft) {
        ASSERT_GE(pg.draft, 0);
        ASSERT_EQ(m.activeDraft(pg.draft) + m.cacheDraft(pg.draft), 0);
      } else {
        ASSERT_EQ(pg.draft, -1);
      }
      r.blocks.push_back(pg);
    };
    for (int op = 0; op < 300; ++op) {
      const int kind = u(0, 9);
      if (kind <= 2 && static_cast<int32_t>(m.requests.size()) < maxConcurrent) {
        std::vector<int32_t> prompt;
        const int len = u(1, (maxBlocks - 1) * P);
        for (int b = 0; b * P < len; ++b) {
          const auto blk = block(b, u(0, 2) == 0);
          prompt.insert(prompt.end(), blk.begin(), blk.end());
        }
        if (u(0, 3) == 0 && len > P) prompt[static_cast<size_t>(u(0, len - 1))] = -5;  // divergence
        prompt.resize(static_cast<size_t>(len));
        const bool withDraft = numDraft > 0 && u(0, 1);
        const size_t expected = m.match(prompt, withDraft);
        ASSERT_EQ(c.matchBlocks(prompt, withDraft), static_cast<int32_t>(expected));
        const PrefixAcquireResult res = c.acquire(prompt, withDraft);
        ASSERT_EQ(res.matchedBlocks, static_cast<int32_t>(expected));
        ModelRequest r{withDraft, prompt, {}, expected, true};
        for (size_t b = 0; b < expected; ++b) {
          auto& rec = m.records.at(m.key(prompt, b + 1));
          ASSERT_EQ(res.pages[b].base, rec.first.base);
          ASSERT_EQ(res.pages[b].draft, withDraft ? rec.first.draft : -1);
          r.blocks.push_back(res.pages[b]);
          rec.second = ++m.clock;
        }
        m.requests[res.request] = r;
        while (m.requests.at(res.request).blocks.size() * P < prompt.size()) allocate(res.request);
        m.publish(m.requests.at(res.request));
        c.publish(res.request, prompt);
      } else if (kind <= 5 && !m.requests.empty()) {
        // Generate: extend a request's tokens (within maxBlocks) and publish complete blocks.
        auto it = std::next(m.requests.begin(), u(0, static_cast<int>(m.requests.size()) - 1));
        ModelRequest& r = it->second;
        const int room = maxBlocks * P - static_cast<int>(r.tokens.size());
        if (room <= 0) continue;
        const int add = u(1, std::min(room, 200));
        for (int i = 0; i < add; ++i) r.tokens.push_back(u(0, 1) ? 42 : u(0, 100000));
        while (r.blocks.size() * P < r.tokens.size()) allocate(it->first);
        const int32_t before = static_cast<int32_t>(m.records.size());
        m.publish(r);
        ASSERT_EQ(c.publish(it->first, r.tokens), static_cast<int32_t>(m.records.size()) - before);
      } else if (kind <= 8 && !m.requests.empty()) {
        auto it = std::next(m.requests.begin(), u(0, static_cast<int>(m.requests.size()) - 1));
        c.release(it->first);
        m.requests.erase(it);
      } else {
        const auto expected = m.evict();
        const auto got = c.evictOne();
        ASSERT_EQ(got.has_value(), expected.has_value());
        if (got) {
          ASSERT_EQ(*got, *expected);
        }
      }
      expectSameState(c, m);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace es::kv
