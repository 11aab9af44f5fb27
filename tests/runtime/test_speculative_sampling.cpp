// Sampled speculative decoding is lossless (spec §3.7): with the replay draft proposing the
// greedy continuation (accepted with probability p(x)) or always a wrong token (always the
// residual path), the second generated token of a fixed prompt, over many seeds, follows the
// target's filtered distribution given the first one. The reference distribution comes from a
// separate host forward of prompt + first token and the CPU sampling reference's row_probs;
// Pearson chi-square with a fixed 1e-3 threshold (fixed seeds: the test is deterministic).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "kernels/sampling.h"
#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/plain_decoder.h"
#include "runtime/replay_proposer.h"
#include "runtime/speculative_decoder.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

// Upper 0.001 quantiles of chi-square by degrees of freedom.
double chiSquareLimit(int dof) {
  static const double q999[] = {0,      10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124,
                                27.877, 29.588, 31.264, 32.909, 34.528, 36.123, 37.697, 39.252};
  return q999[dof];
}

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 64;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  return c;
}

TEST(SpeculativeSampling, SecondTokenFollowsTheTargetDistribution) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<int32_t> prompt = {11, 200, 37, 5, 90};
  const SamplingConfig sampling{1.0f, 4, 1.0f, 0};  // 4 candidates per row: few cells, all hit

  std::vector<int32_t> recording = prompt;
  {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    const std::vector<int32_t> greedy = PlainDecoder(target, cache).generate({{prompt, 8, {}, {}}})[0].tokens;
    recording.insert(recording.end(), greedy.begin(), greedy.end());
  }

  // p(second | prompt, first) for a first token, from a host forward.
  auto secondTokenProbs = [&](int32_t first) {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    cache.admit();
    std::vector<int32_t> tokens = prompt;
    tokens.push_back(first);
    model::ForwardBatch b;
    b.tokens = tokens;
    for (int32_t i = 0; i < static_cast<int32_t>(tokens.size()); ++i) {
      b.positions.push_back(i);
      b.tokenToSequence.push_back(0);
    }
    b.cuQSeqLens = {0, static_cast<int32_t>(tokens.size())};
    b.kvLengths = {static_cast<int32_t>(tokens.size())};
    b.logitRows = {static_cast<int32_t>(tokens.size()) - 1};
    const model::ForwardResult out = target.forward(b, cache);
    std::vector<float> probs(static_cast<size_t>(V));
    ref::row_probs(out.logits.data(), V, sampling.temperature, sampling.topK, sampling.topP,
                   TopPMode::kNucleus, probs.data());
    return probs;
  };

  for (const float corrupt : {0.0f, 1.0f}) {
    SCOPED_TRACE(::testing::Message() << "corrupt " << corrupt);
    constexpr int32_t kBatch = 3, kDraws = 1500;
    std::map<int32_t, std::map<int32_t, int64_t>> counts;  // first -> second -> count
    int64_t accepted = 0, rejected = 0;
    for (int32_t start = 0; start < kDraws; start += kBatch) {
      std::vector<GenerationRequest> requests;
      for (int32_t i = 0; i < kBatch; ++i) {
        SamplingConfig s = sampling;
        s.seed = static_cast<uint64_t>(1 + start + i + (corrupt > 0 ? 100000 : 0));
        requests.push_back({prompt, 3, {}, s});
      }
      kv::KvCacheManager cache(cacheFor(target, kBatch), MemorySpace::kHost);
      ReplayProposer proposer(*backend, 4, kBatch, std::vector<std::vector<int32_t>>(kBatch, recording), V, corrupt);
      SpeculativeDecoder decoder(target, proposer, cache);
      for (const GenerationResult& r : decoder.generate(requests)) ++counts[r.tokens[0]][r.tokens[1]];
      accepted += decoder.stats().acceptHistogram[2];
      rejected += decoder.stats().acceptHistogram[1];
    }
    if (corrupt == 0.0f) EXPECT_GT(accepted, 0) << "the accept path must be exercised";
    EXPECT_GT(rejected, 0);
    double chi = 0.0;
    int cells = 0;
    for (const auto& [first, seconds] : counts) {
      const std::vector<float> p = secondTokenProbs(first);
      int64_t n = 0;
      for (const auto& [token, c] : seconds) n += c;
      for (const auto& [token, c] : seconds) {
        EXPECT_GT(p[static_cast<size_t>(token)], 0.0f) << "token " << token << " is filtered out";
      }
      int groupCells = 0;
      for (int32_t x = 0; x < V; ++x) {
        const double e = static_cast<double>(p[static_cast<size_t>(x)]) * static_cast<double>(n);
        if (e < 5.0) continue;
        const auto it = seconds.find(x);
        const double c = it == seconds.end() ? 0.0 : static_cast<double>(it->second);
        chi += (c - e) * (c - e) / e;
        ++groupCells;
      }
      if (groupCells > 0) cells += groupCells - 1;
    }
    ASSERT_GT(cells, 0);
    ASSERT_LE(cells, 16);
    EXPECT_LT(chi, chiSquareLimit(cells)) << "chi-square " << chi << " with " << cells << " degrees of freedom";
  }
}

}  // namespace
}  // namespace es::runtime
