#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "kv/swa_page_manager.h"
#include "kv/swa_step_completion.h"
#include "support/test_util.h"

namespace es::kv {
namespace {

using test::expectInvalidArgument;

constexpr int32_t P = kTokensPerPage;

// Physical (page, row) of a slot's position through the host table; -1 when unmapped.
int64_t physicalRow(const PageTable& t, int32_t slot, int64_t pos) {
  const PageId p = t.kPage(slot, static_cast<int32_t>(pos / P));
  return p < 0 ? -1 : int64_t{p} * P + pos % P;
}

// Checks the bookkeeping invariants that must hold after every operation.
void checkInvariants(const SwaPageManager& m, const PageTable& t) {
  std::set<PageId> seen;
  int64_t owned = 0;
  for (int32_t s = 0; s < m.activeCount(); ++s) {
    EXPECT_EQ(m.boundPages(s) + m.pendingPages(s) + m.reservedPages(s), m.privatePagesPerSlot())
        << "slot " << s;
    const std::vector<PageId> pages = m.ownedPages(s);
    for (PageId p : pages) EXPECT_TRUE(seen.insert(p).second) << "page " << p << " owned twice";
    owned += static_cast<int64_t>(pages.size());
    // The table row holds exactly the bound pages, all inside the window of the current length.
    const int64_t first = std::max<int64_t>(0, m.length(s) - m.slidingWindow()) / P;
    int32_t live = 0;
    const auto row = t.kRow(s);
    for (int32_t lp = 0; lp < t.maxPagesPerSeq(); ++lp) {
      if (row[static_cast<size_t>(lp)] < 0) continue;
      ++live;
      EXPECT_GE(lp, first) << "slot " << s << " keeps a page below its window";
      EXPECT_TRUE(std::binary_search(pages.begin(), pages.end(), row[static_cast<size_t>(lp)]));
    }
    EXPECT_EQ(live, m.boundPages(s));
    // Every key the next row (at position length) can see is mapped.
    for (int64_t pos = std::max<int64_t>(0, m.length(s) - m.slidingWindow() + 1); pos < m.length(s);
         ++pos)
      EXPECT_GE(physicalRow(t, s, pos), 0) << "slot " << s << " pos " << pos;
  }
  for (int32_t s = m.activeCount(); s < t.maxBatch(); ++s)
    for (PageId p : t.kRow(s)) EXPECT_EQ(p, -1) << "inactive slot " << s << " maps a page";
  EXPECT_EQ(owned + m.freePoolPages() + m.deferredPoolPages(), t.numPages());
}

TEST(SwaPageManager, HandCaseWindowSlidesAndPendingWaitsForCompletion) {
  const int32_t W = 256;  // private pages = 2 * (2 + 1) + 1 = 7
  PageTable t(2, 16, static_cast<int32_t>(computeMinimumSwaPoolPages(2, W)));
  SwaPageManager m(t, W);
  EXPECT_EQ(m.privatePagesPerSlot(), 7);
  EXPECT_EQ(t.numPages(), 14);
  const int32_t s = m.admit();
  EXPECT_EQ(s, 0);
  EXPECT_EQ(m.reservedPages(s), 7);

  // Prefill chunk of 300 rows: logical pages [0, 3).
  const SwaStepWrite chunk1[] = {{s, 300}};
  const int64_t step1 = m.beginStep(chunk1);
  EXPECT_EQ(step1, 1);
  EXPECT_EQ(m.boundPages(s), 3);
  m.commit(s, 300);
  EXPECT_EQ(m.pendingPages(s), 0);  // window start max(0, 300-256)=44 is still in page 0

  // Pipelined second chunk while step 1 runs: [300, 512) needs page 3.
  const SwaStepWrite chunk2[] = {{s, 212}};
  const int64_t step2 = m.beginStep(chunk2);
  EXPECT_EQ(m.boundPages(s), 4);
  const PageId page0 = t.kPage(s, 0), page1 = t.kPage(s, 1);
  m.commit(s, 212);  // length 512: window starts at 256 = page 2, so pages 0 and 1 leave
  EXPECT_EQ(t.kPage(s, 0), -1);
  EXPECT_EQ(t.kPage(s, 1), -1);
  EXPECT_EQ(m.boundPages(s), 2);
  EXPECT_EQ(m.pendingPages(s), 2);
  EXPECT_EQ(m.reservedPages(s), 3);
  m.completeStep(step1);  // step 2 read pages 0 and 1 too: they stay pending
  EXPECT_EQ(m.pendingPages(s), 2);
  m.completeStep(step2);
  EXPECT_EQ(m.pendingPages(s), 0);
  EXPECT_EQ(m.reservedPages(s), 5);
  // The released pages come back for the next logical pages.
  const SwaStepWrite decode[] = {{s, 1}};
  m.beginStep(decode);
  const PageId page4 = t.kPage(s, 4);
  EXPECT_TRUE(page4 == page0 || page4 == page1);
  m.commit(s, 1);
  checkInvariants(m, t);

  // The dirty rows reach the mirror the kernels would read.
  std::vector<int32_t> mirror(static_cast<size_t>(t.deviceLayoutElements()), -7);
  t.syncDirtyToHost(mirror);
  std::vector<int32_t> expected(mirror.size());
  t.writeDeviceLayout(expected);
  EXPECT_EQ(mirror, expected);
  EXPECT_TRUE(t.dirtyRanges().empty());
}

TEST(SwaPageManager, SpeculativeRowsAreScratchUntilTheirStepCompletes) {
  PageTable t(1, 8, static_cast<int32_t>(computeMinimumSwaPoolPages(1, 128)));
  SwaPageManager m(t, 128);
  const int32_t s = m.admit();
  const SwaStepWrite verify[] = {{s, 16}};
  const int64_t step = m.beginStep(verify);
  m.commit(s, 3);  // 13 rows are scratch, but the running step still reads them
  expectInvalidArgument([&] { m.beginStep(verify); }, "writes[0].slot");
  m.completeStep(step);
  EXPECT_NO_THROW(m.beginStep(verify));
  expectInvalidArgument([&] { m.commit(s, 17); }, "tokens");
  m.commit(s, 16);
  EXPECT_EQ(m.length(s), 19);
}

TEST(SwaPageManager, ErrorsNameArgumentAndLimit) {
  PageTable small(2, 8, 21);  // minimum for W=256 and 2 slots is 14; for W=512 it is 22
  expectInvalidArgument([&] { SwaPageManager(small, 512); }, "table.numPages()");
  expectInvalidArgument([&] { SwaPageManager(small, 0); }, "slidingWindowCapacity");
  SwaPageManager m(small, 256);
  expectInvalidArgument([&] { m.length(0); }, "slot");
  expectInvalidArgument([&] { m.commit(0, 1); }, "slot");
  const int32_t a = m.admit();
  const SwaStepWrite unknown[] = {{1, 1}};
  expectInvalidArgument([&] { m.beginStep(unknown); }, "writes[0].slot");
  const SwaStepWrite twice[] = {{a, 1}, {a, 1}};
  expectInvalidArgument([&] { m.beginStep(twice); }, "writes[1].slot");
  const SwaStepWrite zero[] = {{a, 0}};
  expectInvalidArgument([&] { m.beginStep(zero); }, "writes[0].count");
  expectInvalidArgument([&] { m.beginStep({}); }, "writes.size()");
  const SwaStepWrite pastCapacity[] = {{a, 8 * P + 1}};
  expectInvalidArgument([&] { m.beginStep(pastCapacity); }, "writes[0].count");
  // 7 private pages, nothing bound: 7 pages = 896 rows at most; 897 is beyond the reservation.
  EXPECT_EQ(m.maxStepTokens(a), 7 * P);
  const SwaStepWrite tooBig[] = {{a, 7 * P + 1}};
  try {
    m.beginStep(tooBig);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'writes[0].count'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("only 7 reserved"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at most 896 rows"), std::string::npos) << msg;
  }
  EXPECT_EQ(m.lastIssuedStep(), 0);  // failed validation issued no step and bound nothing
  EXPECT_EQ(m.boundPages(a), 0);
  expectInvalidArgument([&] { m.completeStep(1); }, "stepId");
  const SwaStepWrite one[] = {{a, 1}};
  m.beginStep(one);
  m.completeStep(1);
  expectInvalidArgument([&] { m.completeStep(1); }, "stepId");
  m.admit();
  expectInvalidArgument([&] { m.admit(); }, "activeCount");
  const uint8_t keep[] = {1};
  expectInvalidArgument([&] { m.retireAndCompact(keep); }, "keep.size()");
}

TEST(SwaPageManager, RetiredSlotPagesWaitForTheirLastStep) {
  const int32_t W = 128;  // private = 2 * 2 + 1 = 5
  PageTable t(3, 8, static_cast<int32_t>(computeMinimumSwaPoolPages(3, W)));
  SwaPageManager m(t, W);
  for (int i = 0; i < 3; ++i) m.admit();
  const SwaStepWrite w[] = {{0, 200}, {1, 300}, {2, 100}};
  const int64_t step = m.beginStep(w);
  for (int32_t s = 0; s < 3; ++s) m.commit(s, w[s].count);
  const std::vector<PageId> row2(t.kRow(2).begin(), t.kRow(2).end());
  const std::vector<PageId> owned2 = m.ownedPages(2);
  const uint8_t keep[] = {1, 0, 1};
  const std::vector<int32_t> oldToNew = m.retireAndCompact(keep);
  EXPECT_EQ(oldToNew, (std::vector<int32_t>{0, -1, 1}));
  EXPECT_EQ(m.activeCount(), 2);
  EXPECT_EQ(std::vector<PageId>(t.kRow(1).begin(), t.kRow(1).end()), row2);
  EXPECT_EQ(m.ownedPages(1), owned2);
  EXPECT_EQ(m.length(1), 100);
  // Slot 1's pages were read by the running step: they are not free yet.
  EXPECT_EQ(m.deferredPoolPages(), 5);
  EXPECT_EQ(m.freePoolPages(), 0);
  checkInvariants(m, t);
  expectInvalidArgument([&] { m.admit(); }, "freePoolPages");
  m.completeStep(step);
  EXPECT_EQ(m.deferredPoolPages(), 0);
  EXPECT_EQ(m.admit(), 2);
  checkInvariants(m, t);
}

// Long generation: the pool use per slot is constant and the window never holds more than
// ceil(W/128) + 1 pages plus the step's own pages.
TEST(SwaPageManager, MemoryStaysFlatFarBeyondTheWindow) {
  const int32_t W = 256;
  const int32_t maxPages = 200;  // 25600 tokens of logical range
  PageTable t(1, maxPages, static_cast<int32_t>(computeMinimumSwaPoolPages(1, W)));
  SwaPageManager m(t, W);
  const int32_t s = m.admit();
  int32_t maxBound = 0;
  while (m.length(s) + 4 <= 20 * W) {
    const SwaStepWrite w[] = {{s, 4}};  // verify 4 rows, keep 3 once the step has completed
    const int64_t step = m.beginStep(w);
    m.completeStep(step);
    m.commit(s, 3);
    maxBound = std::max(maxBound, m.boundPages(s));
    ASSERT_EQ(m.ownedPages(s).size(), 7u);
  }
  EXPECT_GE(m.length(s), 19 * W);
  EXPECT_LE(maxBound, W / P + 2);
  EXPECT_EQ(m.freePoolPages(), 0);
  checkInvariants(m, t);
}

struct RunningStep {
  int64_t id;
  std::vector<int64_t> reads;  // physical rows (page * 128 + row) the step reads
};

// Random prefill chunks and decode/verify steps over several slots, with steps left running
// across later steps. After every operation: the invariants; at every beginStep: the new step
// writes no physical row that a running step reads, and sees only mapped rows.
TEST(SwaPageManager, PropertyRandomStepsNeverWriteWhatARunningStepReads) {
  std::mt19937 rng(20240610);
  for (int trial = 0; trial < 12; ++trial) {
    const int32_t W = std::uniform_int_distribution<int32_t>(1, 700)(rng);
    const int32_t maxB = std::uniform_int_distribution<int32_t>(1, 4)(rng);
    const int32_t maxPages = std::uniform_int_distribution<int32_t>(8, 40)(rng);
    const int32_t extra = std::uniform_int_distribution<int32_t>(0, 3)(rng);
    PageTable t(maxB, maxPages, static_cast<int32_t>(computeMinimumSwaPoolPages(maxB, W)) + extra);
    SwaPageManager m(t, W);
    std::vector<RunningStep> running;
    // Slots whose last step was a verify step: they commit only once it completes.
    swa_test::AwaitingCommits awaiting;
    std::vector<int32_t> mirror(static_cast<size_t>(t.deviceLayoutElements()), -1);
    int64_t steps = 0;
    for (int op = 0; op < 400; ++op) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (kind == 0 && m.activeCount() < maxB && m.freePoolPages() >= m.privatePagesPerSlot()) {
        m.admit();
      } else if (kind == 1 && m.activeCount() > 0) {
        std::vector<uint8_t> keep(static_cast<size_t>(m.activeCount()));
        for (auto& k : keep) k = std::uniform_int_distribution<int>(0, 3)(rng) != 0;
        swa_test::remapAwaiting(awaiting, m.retireAndCompact(keep));
      } else if (kind <= 3 && !running.empty()) {
        // Complete the oldest step (or several); verify slots then commit their accepted rows.
        swa_test::completeOldestSteps(
            running, awaiting, rng, [&](int64_t id) { m.completeStep(id); },
            [&](int32_t slot, int32_t rows) { m.commit(slot, rows); });
      } else if (m.activeCount() > 0) {
        std::vector<SwaStepWrite> writes;
        std::vector<uint8_t> prefill;
        for (int32_t s = 0; s < m.activeCount(); ++s) {
          if (awaiting.count(s) || std::uniform_int_distribution<int>(0, 2)(rng) == 0) continue;
          const int64_t room = std::min<int64_t>(m.maxStepTokens(s), m.capacity() - m.length(s));
          if (room <= 0) continue;
          const bool isPrefill = std::uniform_int_distribution<int>(0, 1)(rng) == 0;
          const int64_t want = isPrefill
                                   ? std::uniform_int_distribution<int64_t>(1, 2 * W + 130)(rng)
                                   : std::uniform_int_distribution<int64_t>(1, 16)(rng);
          writes.push_back({s, static_cast<int32_t>(std::min(room, want))});
          prefill.push_back(isPrefill);
        }
        if (writes.empty()) continue;
        // A count one past maxStepTokens must be refused and change nothing.
        if (std::uniform_int_distribution<int>(0, 7)(rng) == 0) {
          const SwaStepWrite& w0 = writes[0];
          if (m.length(w0.slot) + m.maxStepTokens(w0.slot) + 1 <= m.capacity()) {
            const int32_t bound = m.boundPages(w0.slot);
            std::vector<SwaStepWrite> bad = writes;
            bad[0].count = static_cast<int32_t>(m.maxStepTokens(w0.slot) + 1);
            expectInvalidArgument([&] { m.beginStep(bad); }, "writes[0].count");
            EXPECT_EQ(m.boundPages(w0.slot), bound);
            EXPECT_EQ(m.lastIssuedStep(), steps);
          }
        }
        const int64_t id = m.beginStep(writes);
        EXPECT_EQ(id, ++steps);
        RunningStep step{id, {}};
        std::set<int64_t> written;
        for (size_t i = 0; i < writes.size(); ++i) {
          const int32_t s = writes[i].slot;
          const int64_t L = m.length(s), end = L + writes[i].count;
          for (int64_t pos = std::max<int64_t>(0, L - W + 1); pos < end; ++pos) {
            const int64_t r = physicalRow(t, s, pos);
            ASSERT_GE(r, 0) << "slot " << s << " pos " << pos << " unmapped in step " << id;
            step.reads.push_back(r);
            if (pos >= L) written.insert(r);
          }
        }
        for (const RunningStep& other : running)
          for (int64_t r : other.reads)
            ASSERT_EQ(written.count(r), 0u) << "step " << id << " writes physical row " << r
                                            << " that running step " << other.id << " reads";
        running.push_back(std::move(step));
        for (size_t i = 0; i < writes.size(); ++i) {
          if (prefill[i]) {
            m.commit(writes[i].slot, writes[i].count);  // pipelined: kept before completion
          } else {
            awaiting[writes[i].slot] = {id, writes[i].count};
          }
        }
        // Upload point: the mirror equals the host table after syncing the dirty rows.
        t.syncDirtyToHost(mirror);
        std::vector<int32_t> expected(mirror.size());
        t.writeDeviceLayout(expected);
        ASSERT_EQ(mirror, expected);
      }
      checkInvariants(m, t);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace es::kv
