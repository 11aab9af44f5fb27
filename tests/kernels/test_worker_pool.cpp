// The CPU backend's worker pool (src/ref/worker_pool.h) and the parallelFor on top of it: every
// task runs exactly once; a parallelFor inside a task, and runs from several threads at once,
// finish (inline where the pool is taken) with every index covered once.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "ref/forward_ref_util.h"
#include "ref/worker_pool.h"

namespace es {
namespace {

using ref::detail::parallelFor;
using ref::detail::WorkerPool;

// parallelFor over [0, count) with enough work per item to use every thread; counts visits.
std::vector<int> visitCounts(int64_t count) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
  parallelFor(count, int64_t{1} << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  std::vector<int> out;
  for (auto& h : hits) out.push_back(h.load());
  return out;
}

TEST(WorkerPool, EveryTaskRunsExactlyOnce) {
  WorkerPool& pool = WorkerPool::instance();
  EXPECT_GE(pool.width(), 1);
  EXPECT_LE(pool.width(), 8);
  for (int64_t count : {1, 2, 3, 8, 17, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
    pool.run(count, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << count << " tasks, task " << i;
  }
}

TEST(WorkerPool, ParallelForCoversTheRangeOnce) {
  for (int64_t count : {0, 1, 2, 5, 31, 4096}) {
    const std::vector<int> hits = visitCounts(count);
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << count << ": " << i;
  }
}

TEST(WorkerPool, NestedParallelForRunsInline) {
  std::atomic<int64_t> inner{0};
  parallelFor(8, int64_t{1} << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const std::vector<int> hits = visitCounts(100);
      for (int h : hits) inner.fetch_add(h);
    }
  });
  EXPECT_EQ(inner.load(), 8 * 100);
}

TEST(WorkerPool, RunsFromSeveralThreadsAtOnceAllFinish) {
  std::vector<std::thread> callers;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) {
        const std::vector<int> hits = visitCounts(257);
        bool ok = true;
        for (int h : hits) ok = ok && h == 1;
        if (ok) good.fetch_add(1);
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(good.load(), 4 * 50);
}

}  // namespace
}  // namespace es
