// Requests joining and leaving the batch between steps on the CUDA backend (bf16, CUDA graphs).
//  * A changing batch (arrivals, a queue, a cancel, mixed greedy and sampled, plain and with the
//    replay draft): the captured steps give exactly the eager steps' tokens. Each admission,
//    retirement and cancel re-uploads the per-slot state the graphs read (lengths, anchors,
//    sampling settings); a stale value in a replayed graph shows as a token that differs from
//    the eager run, which re-reads everything at each launch.
//  * Chunked prefill between captured decode steps: request A decodes alone (batch 1, its step
//    captured and replayed) while a 200-token prompt L arrives and prefills in 32-row chunks
//    between A's steps, then joins the batch. The same schedule with graphs and eagerly gives
//    the same tokens (a chunk between two replays leaves the decode batch's prepared state and
//    the captured tables valid); until L joins, A emits one token a step and its tokens are
//    exactly its solo run's (the same batch-1 step; L's chunks write only L's slot). Greedy and
//    sampled. After L joins, A decodes in a batch of 2, whose GEMMs may round differently on the
//    GPU (test_decode_engine_gpu judges such divergences).
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

kv::KvCacheConfig changingBatchCache(const model::TargetModel& m) {
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
  kv::KvCacheManager cache(changingBatchCache(target), MemorySpace::kDevice);
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

kv::KvCacheConfig twoSlotCache(const model::TargetModel& m) {
  kv::KvCacheConfig c;
  c.maxBatchSize = 2;
  c.maxSequenceLength = 256;
  c.dtype = DType::kBF16;
  c.baseLayers = m.kvLayerShapes();
  return c;
}

struct Streams {
  std::vector<int32_t> a, l;   // tokens
  std::vector<int32_t> aStep;  // the step of each of A's tokens
  int32_t lFirstStep = -1;     // the step of L's first token
};

// A from step 0, L (when given) from step 3; 32 prompt rows a step.
Streams runSchedule(model::TargetModel& target, const GenerationRequest& a,
                    const GenerationRequest* l, bool graphs) {
  kv::KvCacheManager cache(twoSlotCache(target), MemorySpace::kDevice);
  DecodeEngine engine(target, cache, nullptr,
                      EngineOptions{.useGraphs = graphs, .prefillTokensPerStep = 32});
  Streams r;
  int32_t step = 0;
  engine.submit(a, [&](int32_t, int32_t t) {
    r.a.push_back(t);
    r.aStep.push_back(step);
  });
  for (bool more = true; more || (l && step <= 3); ++step) {
    if (l && step == 3) {
      engine.submit(*l, [&](int32_t, int32_t t) {
        if (r.l.empty()) r.lFirstStep = step;
        r.l.push_back(t);
      });
    }
    more = engine.step();
  }
  EXPECT_EQ(cache.activeCount(), 0);
  return r;
}

TEST(DecodeEngineSchedulingGpu, PrefillChunksBetweenCapturedStepsLeaveTheBatchExact) {
  ES_SKIP_IF_NO_GPU();
  auto gpu = ops::makeCudaBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *gpu, 64);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  std::mt19937 rng(17);
  std::vector<int32_t> longPrompt(200);
  for (int32_t& t : longPrompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  for (const float temperature : {0.0f, 0.9f}) {
    SCOPED_TRACE(::testing::Message() << "temperature " << temperature);
    const GenerationRequest a{{5, 17, 99, 42, 7}, 40, {}, {temperature, 0, 1.0f, 21}};
    const GenerationRequest l{longPrompt, 12, {}, {temperature, 0, 1.0f, 22}};
    const Streams graphed = runSchedule(target, a, &l, true),
                  eager = runSchedule(target, a, &l, false);
    EXPECT_EQ(graphed.a, eager.a);
    EXPECT_EQ(graphed.l, eager.l);
    // 200 rows in chunks of 32: steps 3-9.
    EXPECT_EQ(graphed.lFirstStep, 9);
    const Streams alone = runSchedule(target, a, nullptr, true);
    std::vector<int32_t> before, aloneBefore;
    std::map<int32_t, int32_t> perStep;
    for (size_t i = 0; i < graphed.a.size(); ++i) {
      if (graphed.aStep[i] >= graphed.lFirstStep) break;
      before.push_back(graphed.a[i]);
      ++perStep[graphed.aStep[i]];
    }
    ASSERT_GT(before.size(), 8u);
    aloneBefore.assign(alone.a.begin(), alone.a.begin() + static_cast<ptrdiff_t>(before.size()));
    EXPECT_EQ(before, aloneBefore);
    for (int32_t s = 1; s < graphed.lFirstStep; ++s) EXPECT_EQ(perStep[s], 1) << "step " << s;
  }
}

}  // namespace
}  // namespace es::runtime
