// Plain greedy generation on the CPU backend against the transformers greedy continuations of the
// fixtures, with chunked prefill, a stop token and batch compaction in the middle.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/sampling.h"
#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "support/prefill_logits.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

nlohmann::json fixtureMeta(const std::string& family) {
  std::ifstream f(test::test_data_dir() + "/models/" + family + "/reference.json");
  return nlohmann::json::parse(f);
}

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 256;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  return c;
}

class PlainDecodingCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(PlainDecodingCpu, GreedyMatchesTransformersWithStopAndCompaction) {
  const nlohmann::json meta = fixtureMeta(GetParam());
  auto backend = ops::makeCpuBackend();
  // maxTokens 8 < the 20-token prompt: the prefill runs in three chunks.
  model::TargetModel target(test::test_data_dir() + "/models/" + GetParam(), *backend, 8);
  kv::KvCacheManager cache(cacheFor(target, 3), MemorySpace::kHost);
  DecodeEngine decoder(target, cache);

  const std::vector<int32_t> greedyA = meta["greedy"]["a"], greedyB = meta["greedy"]["b"];
  GenerationRequest a{meta["prompts"]["a"], static_cast<int32_t>(greedyA.size()), {}, {}};
  // b stops at its 4th token (if that token appears earlier, at its first occurrence).
  const int32_t stop = greedyB[3];
  const size_t stopAt =
      static_cast<size_t>(std::find(greedyB.begin(), greedyB.end(), stop) - greedyB.begin());
  GenerationRequest b{meta["prompts"]["b"], static_cast<int32_t>(greedyB.size()), {stop}, {}};
  // c: the same prompt as a but only 2 tokens: it retires first, before a and b.
  GenerationRequest c{meta["prompts"]["a"], 2, {}, {}};
  std::vector<std::vector<int32_t>> streamed(3);
  const std::vector<GenerationResult> out = decoder.generate(
      {c, a, b},
      [&](int32_t r, int32_t token) { streamed[static_cast<size_t>(r)].push_back(token); });
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(streamed[r], out[r].tokens) << "request " << r;

  EXPECT_EQ(out[0].tokens, std::vector<int32_t>(greedyA.begin(), greedyA.begin() + 2));
  EXPECT_EQ(out[0].finish, FinishReason::kLength);
  EXPECT_EQ(out[1].tokens, greedyA);
  EXPECT_EQ(out[1].finish, FinishReason::kLength);
  EXPECT_EQ(out[2].tokens, std::vector<int32_t>(greedyB.begin(), greedyB.begin() + stopAt + 1));
  EXPECT_EQ(out[2].finish, FinishReason::kStop);
  EXPECT_EQ(cache.activeCount(), 0);
}

TEST(PlainDecoding, SampledDecodingIsRequestStableAndSeeded) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const nlohmann::json meta = fixtureMeta("qwen3");
  GenerationRequest a{meta["prompts"]["a"], 24, {}, {1.5f, 0, 1.0f, 1234}};
  GenerationRequest b{meta["prompts"]["b"], 24, {}, {0.9f, 50, 0.9f, 99}};
  auto run = [&](const std::vector<GenerationRequest>& rs) {
    kv::KvCacheManager cache(cacheFor(target, 3), MemorySpace::kHost);
    return DecodeEngine(target, cache).generate(rs);
  };
  const std::vector<GenerationResult> alone = run({a});
  const std::vector<GenerationResult> together = run({b, a});
  // Same request, same seed: the same tokens, whatever runs beside it (spec §3.6).
  EXPECT_EQ(together[1].tokens, alone[0].tokens);
  // A hot temperature on a random model leaves greedy: the sampler is really used.
  const std::vector<int32_t> greedy = meta["greedy"]["a"];
  EXPECT_NE(std::vector<int32_t>(alone[0].tokens.begin(), alone[0].tokens.begin() + 8),
            std::vector<int32_t>(greedy.begin(), greedy.begin() + 8));
  // The first token is drawn from the prompt's last row with request_uniform(seed, last
  // position, kTarget, 0), as the sampling reference draws it (spec §3.6).
  {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    const std::vector<float> logits = test::prefillLogits(target, cache, cache.admit(), a.prompt);
    const int64_t lastPosition = static_cast<int64_t>(a.prompt.size()) - 1;
    int32_t expected = -1;
    SamplingParams p;
    p.logits = logits.data();
    p.batch = 1;
    p.vocab = static_cast<int32_t>(logits.size());
    p.temperature = a.sampling.temperature;
    p.topK = a.sampling.topK;
    p.topP = a.sampling.topP;
    p.seeds = &a.sampling.seed;
    p.positions = &lastPosition;
    p.tokens = &expected;
    ref::sampleRows(p);
    EXPECT_EQ(alone[0].tokens[0], expected);
  }
  // Another seed gives another continuation.
  GenerationRequest c = a;
  c.sampling.seed = 4321;
  EXPECT_NE(run({c})[0].tokens, alone[0].tokens);
  // Temperature below 1e-3 is greedy.
  GenerationRequest g = a;
  g.sampling.temperature = 0.0005f;
  g.maxNewTokens = 8;
  EXPECT_EQ(run({g})[0].tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + 8));
}

TEST(PlainDecoding, BadRequestsAreClearErrors) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 8);
  kv::KvCacheManager cache(cacheFor(target, 2), MemorySpace::kHost);
  DecodeEngine decoder(target, cache);
  test::expectInvalidArgument([&] { decoder.generate({}); }, "requests.size()");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{}, 4, {}, {}}});
      },
      "requests[0].prompt.size()");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{1, 2}, 0, {}, {}}});
      },
      "requests[0].maxNewTokens");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{1, 2}, 300, {}, {}}});
      },
      "requests[0] prompt + maxNewTokens");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{1}, 1, {}, {}}, {{1}, 1, {}, {}}, {{1}, 1, {}, {}}});
      },
      "requests.size()");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{1}, 1, {}, {-1.0f, 0, 1.0f, 0}}});
      },
      "requests[0].sampling.temperature");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{1}, 1, {}, {1.0f, 0, 0.0f, 0}}});
      },
      "requests[0].sampling.topP");
  EXPECT_EQ(cache.activeCount(), 0);  // nothing was admitted by the rejected calls
}

INSTANTIATE_TEST_SUITE_P(Families, PlainDecodingCpu, ::testing::Values("qwen3", "llama", "qwen2"));

}  // namespace
}  // namespace es::runtime
