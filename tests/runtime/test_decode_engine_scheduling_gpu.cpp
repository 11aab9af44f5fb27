// Chunked prefill between captured decode steps on the CUDA backend (bf16, CUDA graphs): request
// A decodes alone (batch 1, its step captured and replayed) while a 200-token prompt L arrives
// and prefills in 32-row chunks between A's steps, then joins the batch.
//  * The same schedule with graphs and eagerly gives the same tokens: a chunk between two
//    replays leaves the decode batch's prepared state and the captured tables valid.
//  * Until L joins, A emits one token a step and its tokens are exactly its solo run's (the same
//    batch-1 step; L's chunks write only L's slot).
// Greedy and sampled. After L joins, A decodes in a batch of 2, whose GEMMs may round differently
// on the GPU (test_decode_engine_gpu judges such divergences).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

kv::KvCacheConfig cacheFor(const model::TargetModel& m) {
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
  kv::KvCacheManager cache(cacheFor(target), MemorySpace::kDevice);
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
