// Requests join and leave the running batch between steps (DecodeEngine::submit / cancel / step):
// a request's tokens equal its solo run whatever the batch around it does (requests submitted
// at other steps, finishing early, cancelled mid-way, queued for lack of a slot), greedy and
// sampled, plain and with the replay draft; cancel frees the slot and pages at once; a full
// admission queue is a clear error.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/replay_proposer.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

constexpr int32_t kBatch = 3;  // fewer slots than requests: some wait in the queue
constexpr int32_t kBlock = 4;  // replay draft block size
constexpr int32_t kVocab = 384;

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch, int64_t retained = 0) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 256;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  c.prefixCachePages = retained;
  return c;
}

enum class Mode { kGreedy, kSampled, kMixed };

// Five requests of different prompts, budgets and settings; request 1 ends early (a short
// budget), request 3 is the one cancelled in the scenario.
std::vector<GenerationRequest> requestsFor(Mode mode) {
  std::vector<GenerationRequest> rs = {
      {{5, 17, 99, 42, 7}, 24, {}, {}},
      {{11, 3}, 3, {}, {}},
      {{200, 201, 202, 17, 5, 9, 31}, 16, {}, {}},
      {{77, 78}, 30, {}, {}},
      {{9, 8, 7, 6}, 12, {}, {}},
  };
  for (size_t i = 0; i < rs.size(); ++i) {
    const bool sampled = mode == Mode::kSampled || (mode == Mode::kMixed && i % 2 == 1);
    if (sampled) rs[i].sampling = {1.2f, i == 2 ? 40 : 0, i == 4 ? 0.9f : 1.0f, 1000 + i};
  }
  return rs;
}

// An engine with its own cache (and replay draft when `recordings` is not empty).
struct Rig {
  Rig(model::TargetModel& target, ops::Backend& backend,
      const std::vector<std::vector<int32_t>>& recordings, EngineOptions options = {},
      int64_t retained = 0)
      : cache(cacheFor(target, kBatch, retained), MemorySpace::kHost) {
    if (!recordings.empty()) {
      proposer =
          std::make_unique<ReplayProposer>(backend, kBlock, kBatch, recordings, kVocab, 0.3f, 7);
    }
    engine = std::make_unique<DecodeEngine>(target, cache, proposer.get(), options);
  }
  kv::KvCacheManager cache;
  std::unique_ptr<ReplayProposer> proposer;
  std::unique_ptr<DecodeEngine> engine;
};

// Request i alone on a fresh engine (index i: the replay draft proposes its recording).
GenerationResult solo(model::TargetModel& target, ops::Backend& backend,
                      const std::vector<std::vector<int32_t>>& recordings,
                      const GenerationRequest& q, int32_t index) {
  Rig rig(target, backend, recordings);
  rig.engine->submit(q, {}, index);
  while (rig.engine->step()) {
  }
  std::vector<FinishedRequest> done = rig.engine->takeFinished();
  EXPECT_EQ(done.size(), 1u);
  return done.empty() ? GenerationResult{} : done[0].result;
}

void runScenario(Mode mode, bool withDraft) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const std::vector<GenerationRequest> rs = requestsFor(mode);
  std::vector<std::vector<int32_t>> recordings;
  if (withDraft) {  // the plain runs' tokens: the draft proposes them, some corrupted
    std::vector<GenerationResult> plain;
    for (size_t i = 0; i < rs.size(); ++i) {
      plain.push_back(solo(target, *backend, {}, rs[i], static_cast<int32_t>(i)));
    }
    recordings = ReplayProposer::recordingsOf(rs, plain);
  }
  std::vector<GenerationResult> alone;
  for (size_t i = 0; i < rs.size(); ++i) {
    alone.push_back(solo(target, *backend, recordings, rs[i], static_cast<int32_t>(i)));
  }

  Rig rig(target, *backend, recordings);
  DecodeEngine& engine = *rig.engine;
  std::map<int32_t, std::vector<int32_t>> streamed;
  auto onToken = [&](int32_t r, int32_t token) { streamed[r].push_back(token); };
  std::map<RequestId, int32_t> indexOf;
  auto submit = [&](int32_t i) {
    indexOf[engine.submit(rs[static_cast<size_t>(i)], onToken, i)] = i;
  };
  // Steps 0, 2, 3, 5: arrivals; request 3 is cancelled at step 6, after it joined the batch.
  const std::map<int32_t, std::vector<int32_t>> arrivals = {{0, {0, 1}}, {2, {2}}, {3, {3, 4}}};
  RequestId cancelled = -1;
  std::map<int32_t, GenerationResult> results;
  bool more = true;
  for (int32_t stepIndex = 0; more || stepIndex <= 6; ++stepIndex) {
    if (auto it = arrivals.find(stepIndex); it != arrivals.end()) {
      for (int32_t i : it->second) submit(i);
    }
    if (stepIndex == 6) {
      for (const auto& [id, i] : indexOf) {
        if (i == 3) cancelled = id;
      }
      const int32_t running = engine.runningCount();
      ASSERT_TRUE(engine.cancel(cancelled));
      EXPECT_EQ(engine.runningCount(), running - 1) << "request 3 runs at step 6";
      EXPECT_EQ(rig.cache.activeCount(), running - 1) << "its slot is free at once";
      EXPECT_FALSE(engine.cancel(cancelled));  // already finished
    }
    more = engine.step();
    EXPECT_LE(engine.runningCount(), kBatch);
    for (FinishedRequest& f : engine.takeFinished()) results[indexOf.at(f.id)] = f.result;
  }
  EXPECT_EQ(rig.cache.activeCount(), 0);
  ASSERT_EQ(results.size(), rs.size());
  for (int32_t i = 0; i < static_cast<int32_t>(rs.size()); ++i) {
    const GenerationResult& got = results[i];
    const GenerationResult& want = alone[static_cast<size_t>(i)];
    EXPECT_EQ(streamed[i], got.tokens) << "request " << i;
    if (i == 3) {
      EXPECT_EQ(got.finish, FinishReason::kCancelled);
      ASSERT_LT(got.tokens.size(), want.tokens.size());
      EXPECT_FALSE(got.tokens.empty());
      EXPECT_EQ(got.tokens, std::vector<int32_t>(
                                want.tokens.begin(),
                                want.tokens.begin() + static_cast<ptrdiff_t>(got.tokens.size())));
      continue;
    }
    EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
    EXPECT_EQ(got.finish, want.finish) << "request " << i;
  }
  // The batch really was mixed: request 3 (sampled in both modes) left greedy decoding.
  if (mode != Mode::kGreedy) {
    const GenerationResult greedy =
        solo(target, *backend, recordings, requestsFor(Mode::kGreedy)[3], 3);
    EXPECT_NE(alone[3].tokens, greedy.tokens);
  }
}

TEST(DecodeEngineScheduling, GreedyRequestsInAChangingBatchEqualTheirSoloRuns) {
  runScenario(Mode::kGreedy, false);
}
TEST(DecodeEngineScheduling, SampledRequestsInAChangingBatchEqualTheirSoloRuns) {
  runScenario(Mode::kSampled, false);
}
TEST(DecodeEngineScheduling, GreedyAndSampledRequestsShareSteps) {
  runScenario(Mode::kMixed, false);
}
TEST(DecodeEngineScheduling, GreedyWithTheReplayDraftInAChangingBatch) {
  runScenario(Mode::kGreedy, true);
}
TEST(DecodeEngineScheduling, SampledWithTheReplayDraftInAChangingBatch) {
  runScenario(Mode::kSampled, true);
}
TEST(DecodeEngineScheduling, MixedWithTheReplayDraftInAChangingBatch) {
  runScenario(Mode::kMixed, true);
}

// Cancelling frees the slot and its pages at once (prefix reuse: pages come from a shared pool).
TEST(DecodeEngineScheduling, CancelFreesTheSlotAndPages) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  Rig rig(target, *backend, {}, {}, 4);
  const kv::PrefixCache& pool = *rig.cache.prefixCache();
  const int32_t freeAtStart = pool.freeBasePages();
  DecodeEngine& engine = *rig.engine;
  const RequestId a = engine.submit({{5, 17, 99}, 40, {}, {}});
  const RequestId b = engine.submit({{7, 8}, 40, {}, {0.8f, 0, 1.0f, 3}});
  const RequestId c = engine.submit({{9}, 40, {}, {}});
  const RequestId waiting = engine.submit({{10}, 40, {}, {}});  // no slot: stays queued
  EXPECT_EQ(engine.queuedCount(), 4);
  EXPECT_TRUE(engine.step());
  EXPECT_EQ(engine.runningCount(), kBatch);
  EXPECT_EQ(engine.queuedCount(), 1);
  EXPECT_LT(pool.freeBasePages(), freeAtStart);
  EXPECT_TRUE(engine.step());
  EXPECT_TRUE(engine.cancel(waiting));  // a queued request leaves the queue
  EXPECT_EQ(engine.queuedCount(), 0);
  EXPECT_TRUE(engine.cancel(b));
  EXPECT_EQ(rig.cache.activeCount(), kBatch - 1);
  EXPECT_TRUE(engine.cancel(a));
  EXPECT_TRUE(engine.cancel(c));
  EXPECT_EQ(rig.cache.activeCount(), 0);
  EXPECT_EQ(pool.activeRequests(), 0);
  EXPECT_EQ(pool.freeBasePages(), freeAtStart);
  EXPECT_FALSE(engine.step());
  const std::vector<FinishedRequest> done = engine.takeFinished();
  ASSERT_EQ(done.size(), 4u);
  for (const FinishedRequest& f : done) {
    EXPECT_EQ(f.result.finish, FinishReason::kCancelled);
    // Admitted ones: the prefill's token and one per step.
    EXPECT_EQ(f.result.tokens.size(), f.id == waiting ? 0u : 3u) << "request " << f.id;
  }
  EXPECT_FALSE(engine.cancel(12345));
  // The engine serves the next requests.
  EXPECT_EQ(engine.generate({{{5, 17, 99}, 4, {}, {}}})[0].tokens.size(), 4u);
}

// A token callback may cancel its own request or another one: each stops there (the step's
// remaining tokens for it are dropped) and leaves the batch at the end of that step.
TEST(DecodeEngineScheduling, CancelFromATokenCallback) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const GenerationRequest a{{5, 17, 99}, 40, {}, {}}, b{{7, 8}, 40, {}, {}};
  const GenerationResult soloB = solo(target, *backend, {}, b, 1);
  Rig rig(target, *backend, {});
  DecodeEngine& engine = *rig.engine;
  RequestId idA = -1, idB = -1;
  int32_t seenA = 0, seenB = 0;
  idA = engine.submit(a, [&](int32_t, int32_t) {
    if (++seenA == 5) {
      EXPECT_TRUE(engine.cancel(idA));
      EXPECT_TRUE(engine.cancel(idB));
    }
  });
  idB = engine.submit(b, [&](int32_t, int32_t) { ++seenB; });
  while (engine.step()) {
  }
  EXPECT_EQ(rig.cache.activeCount(), 0);
  std::vector<FinishedRequest> done = engine.takeFinished();
  ASSERT_EQ(done.size(), 2u);
  for (const FinishedRequest& f : done) {
    EXPECT_EQ(f.result.finish, FinishReason::kCancelled);
    if (f.id == idA) {
      EXPECT_EQ(f.result.tokens.size(), 5u);
    }
    if (f.id != idB) continue;
    EXPECT_EQ(static_cast<int32_t>(f.result.tokens.size()), seenB);
    ASSERT_LT(f.result.tokens.size(), soloB.tokens.size());
    EXPECT_EQ(f.result.tokens,
              std::vector<int32_t>(soloB.tokens.begin(),
                                   soloB.tokens.begin() + static_cast<ptrdiff_t>(seenB)));
  }
}

TEST(DecodeEngineScheduling, AFullQueueAndRequestsThatCanNeverFitAreClearErrors) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  Rig rig(target, *backend, {}, {.maxQueued = 2});
  DecodeEngine& engine = *rig.engine;
  engine.submit({{1, 2}, 4, {}, {}});
  engine.submit({{3}, 4, {}, {}});
  try {
    engine.submit({{4}, 4, {}, {}});
    ADD_FAILURE() << "expected QueueFull";
  } catch (const QueueFull& e) {
    EXPECT_NE(std::string(e.what()).find("EngineOptions::maxQueued = 2"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(engine.queuedCount(), 2);
  // Prompt + budget beyond the KV capacity: refused at submit, never queued.
  test::expectInvalidArgument(
      [&] {
        engine.submit({{1}, 300, {}, {}});
      },
      "request prompt + maxNewTokens");
  test::expectInvalidArgument([&] { engine.submit({{}, 4, {}, {}}); }, "request.prompt.size()");
  // generate() needs an idle engine.
  test::expectInvalidArgument([&] { engine.generate({{{1}, 1, {}, {}}}); }, "submitted requests");
  EXPECT_TRUE(engine.step());  // both admitted: the queue has room again
  EXPECT_EQ(engine.queuedCount(), 0);
  engine.submit({{4}, 4, {}, {}});
  while (engine.step()) {
  }
  EXPECT_EQ(engine.takeFinished().size(), 3u);
  EXPECT_EQ(rig.cache.activeCount(), 0);
  test::expectInvalidArgument([&] { Rig bad(target, *backend, {}, {.maxQueued = 0}); },
                              "EngineOptions::maxQueued");
}

}  // namespace
}  // namespace es::runtime
