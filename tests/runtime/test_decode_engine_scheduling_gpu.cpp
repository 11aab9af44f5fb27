// Requests joining and leaving the batch between steps on the CUDA backend (bf16): the captured
// steps of a changing batch give exactly the eager steps' tokens. Each admission, retirement and
// cancel re-uploads the per-slot state the graphs read (lengths, anchors, sampling settings);
// a stale value in a replayed graph shows as a token that differs from the eager run, which
// re-reads everything at each launch. Mixed greedy and sampled requests, plain and with the
// replay draft.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/replay_proposer.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

constexpr int32_t kBatch = 3;  // fewer slots than requests: some wait in the queue

kv::KvCacheConfig cacheFor(const model::TargetModel& m) {
  kv::KvCacheConfig c;
  c.maxBatchSize = kBatch;
  c.maxSequenceLength = 256;
  c.dtype = DType::kBF16;
  c.baseLayers = m.kvLayerShapes();
  c.prefixCachePages = 8;
  return c;
}

// Six requests: prompts of 3..140 tokens (one crosses a 128-token page), budgets 5..40, odd ones
// sampled with their own settings.
std::vector<GenerationRequest> requestsFor(int32_t vocab) {
  std::mt19937 rng(5);
  std::vector<GenerationRequest> rs;
  const std::vector<std::pair<int32_t, int32_t>> shapes = {{3, 30}, {140, 5}, {17, 40},
                                                           {9, 25}, {60, 12}, {4, 33}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    GenerationRequest q;
    for (int32_t t = 0; t < shapes[i].first; ++t) {
      q.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
    }
    q.maxNewTokens = shapes[i].second;
    if (i % 2 == 1) q.sampling = {0.9f, i == 3 ? 20 : 0, i == 5 ? 0.8f : 1.0f, 40 + i};
    rs.push_back(q);
  }
  return rs;
}

// Runs the requests with arrivals at fixed steps and request 2 cancelled at step 8; returns each
// request's tokens by index.
std::map<int32_t, std::vector<int32_t>> runChangingBatch(model::TargetModel& target,
                                                         const std::vector<GenerationRequest>& rs,
                                                         DraftProposer* proposer, bool graphs) {
  kv::KvCacheManager cache(cacheFor(target), MemorySpace::kDevice);
  DecodeEngine engine(target, cache, proposer, EngineOptions{.useGraphs = graphs});
  const std::map<int32_t, std::vector<int32_t>> arrivals = {
      {0, {0, 1}}, {2, {2}}, {4, {3, 4}}, {9, {5}}};
  std::map<RequestId, int32_t> indexOf;
  std::map<int32_t, std::vector<int32_t>> tokens;
  bool more = true;
  for (int32_t stepIndex = 0; more || stepIndex <= 9; ++stepIndex) {
    if (auto it = arrivals.find(stepIndex); it != arrivals.end()) {
      for (int32_t i : it->second) indexOf[engine.submit(rs[static_cast<size_t>(i)], {}, i)] = i;
    }
    if (stepIndex == 8) {
      for (const auto& [id, i] : indexOf) {
        if (i == 2) {
          EXPECT_TRUE(engine.cancel(id));
        }
      }
    }
    more = engine.step();
    for (FinishedRequest& f : engine.takeFinished()) tokens[indexOf.at(f.id)] = f.result.tokens;
  }
  EXPECT_EQ(cache.activeCount(), 0);
  EXPECT_EQ(cache.prefixCache()->activeRequests(), 0);
  return tokens;
}

TEST(DecodeEngineSchedulingGpu, CapturedStepsOfAChangingBatchEqualTheEagerSteps) {
  ES_SKIP_IF_NO_GPU();
  auto gpu = ops::makeCudaBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *gpu, 64);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<GenerationRequest> rs = requestsFor(V);

  const auto eager = runChangingBatch(target, rs, nullptr, false);
  const auto graphed = runChangingBatch(target, rs, nullptr, true);
  ASSERT_EQ(eager.size(), rs.size());
  for (const auto& [i, want] : eager) {
    EXPECT_EQ(graphed.at(i), want) << "plain, request " << i;
    if (i != 2) {
      EXPECT_EQ(want.size(), static_cast<size_t>(rs[static_cast<size_t>(i)].maxNewTokens));
    }
  }
  EXPECT_LT(eager.at(2).size(), static_cast<size_t>(rs[2].maxNewTokens)) << "cancelled mid-way";

  // With the replay draft proposing the plain run's tokens, some corrupted.
  std::vector<GenerationResult> plain(rs.size());
  for (const auto& [i, t] : eager) plain[static_cast<size_t>(i)].tokens = t;
  const auto recordings = ReplayProposer::recordingsOf(rs, plain);
  ReplayProposer replayA(*gpu, 8, kBatch, recordings, V, 0.3f),
      replayB(*gpu, 8, kBatch, recordings, V, 0.3f);
  const auto specEager = runChangingBatch(target, rs, &replayA, false);
  const auto specGraphed = runChangingBatch(target, rs, &replayB, true);
  ASSERT_EQ(specEager.size(), rs.size());
  for (const auto& [i, want] : specEager) {
    EXPECT_EQ(specGraphed.at(i), want) << "speculative, request " << i;
  }
}

}  // namespace
}  // namespace es::runtime
