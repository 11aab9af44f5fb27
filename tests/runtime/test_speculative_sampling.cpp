// Sampled speculative decoding is lossless (spec §3.7): with the replay draft proposing the
// greedy continuation (accepted with probability p(x)) or always a wrong token (always the
// residual path), and with a draft that samples its proposals from its own distribution q
// (accepted with min(1, p / q)), the second generated token of a fixed prompt, over many seeds,
// follows the target's filtered distribution given the first one. The reference distribution comes
// from a separate host forward of prompt + first token and the CPU sampling reference's rowProbs;
// Pearson chi-square with a fixed 1e-3 threshold (fixed seeds: the test is deterministic).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "common/buffer.h"
#include "kernels/sampling.h"
#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/replay_proposer.h"
#include "support/forwarding_proposer.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

// Upper 0.001 quantiles of chi-square by degrees of freedom: the table up to 16, then the
// Wilson-Hilferty approximation (within 0.5 % from 16 on).
double chiSquareLimit(int dof) {
  static const double q999[] = {0,      10.828, 13.816, 16.266, 18.467, 20.515,
                                22.458, 24.322, 26.124, 27.877, 29.588, 31.264,
                                32.909, 34.528, 36.123, 37.697, 39.252};
  if (dof <= 16) return q999[dof];
  const double k = dof, z = 3.090232;  // the standard normal's upper 0.001 quantile
  const double c = 1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k));
  return k * c * c * c;
}

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 64;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  return c;
}

// p(second | prompt, first) under `sampling`'s filtering, from a host forward.
std::vector<float> secondTokenProbs(model::TargetModel& target, const std::vector<int32_t>& prompt,
                                    int32_t first, const SamplingConfig& sampling) {
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
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
  ref::rowProbs(out.logits.data(), V, sampling.temperature, sampling.topK, sampling.topP,
                TopPMode::kNucleus, probs.data());
  return probs;
}

// Pearson chi-square of the second tokens seen after each first token against the target's
// distribution (cells with expectation >= 5), and no filtered-out token ever emitted.
template <typename ProbsOf>
void expectSecondTokensFollow(const std::map<int32_t, std::map<int32_t, int64_t>>& counts,
                              ProbsOf probsOf, int32_t V) {
  double chi = 0.0;
  int cells = 0;
  for (const auto& [first, seconds] : counts) {
    const std::vector<float> p = probsOf(first);
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
  EXPECT_LT(chi, chiSquareLimit(cells))
      << "chi-square " << chi << " with " << cells << " degrees of freedom";
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
    const std::vector<int32_t> greedy =
        DecodeEngine(target, cache).generate({{prompt, 8, {}, {}}})[0].tokens;
    recording.insert(recording.end(), greedy.begin(), greedy.end());
  }

  auto secondTokenProbsOf = [&](int32_t first) {
    return secondTokenProbs(target, prompt, first, sampling);
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
      ReplayProposer proposer(*backend, 4, kBatch,
                              std::vector<std::vector<int32_t>>(kBatch, recording), V, corrupt);
      DecodeEngine decoder(target, cache, &proposer);
      for (const GenerationResult& r : decoder.generate(requests))
        ++counts[r.tokens[0]][r.tokens[1]];
      accepted += decoder.stats().acceptHistogram[2];
      rejected += decoder.stats().acceptHistogram[1];
    }
    if (corrupt == 0.0f) {
      EXPECT_GT(accepted, 0) << "the accept path must be exercised";
    }
    EXPECT_GT(rejected, 0);
    expectSecondTokensFollow(counts, secondTokenProbsOf, V);
  }
}

// A proposer with a distribution (DraftProposer::proposalLogits): the replay draft's machinery
// with all-zero logits, so q is uniform over the vocabulary at any temperature (no top-k or
// top-p). The engine then samples every drafted token from q and the verify accepts it with
// min(1, p / q) = min(1, V p) — often, unlike a random DFlash draft, whose few favourite tokens
// the tiny target rarely ranks. rowDependent: logit 2 on tokens x ≡ r (mod 4) of logits row r,
// 0 elsewhere, so each row has its own q and a verify that paired a draft with another row's
// q would no longer be lossless.
class UniformProposer final : public test::ForwardingProposer {
 public:
  UniformProposer(ops::Backend& backend, int32_t blockSize, int32_t maxBatch,
                  std::vector<std::vector<int32_t>> recordings, int32_t vocab,
                  bool rowDependent = false)
      : ForwardingProposer(replay_),
        replay_(backend, blockSize, maxBatch, std::move(recordings), vocab, 0.0f),
        zeros_(backend.allocate(int64_t{maxBatch} * blockSize * vocab * 4)) {
    // [maxBatch·BS, V]: the engine reads the first B·W rows ([B, W, V]).
    std::vector<float> host(static_cast<size_t>(maxBatch) * blockSize * vocab, 0.0f);
    for (size_t i = 0; rowDependent && i < host.size(); ++i) {
      const size_t r = i / static_cast<size_t>(vocab), x = i % static_cast<size_t>(vocab);
      if (x % 4 == r % 4) host[i] = 2.0f;
    }
    backend.copyFromHost(zeros_.data(), host.data(), static_cast<int64_t>(host.size()) * 4);
  }
  const float* proposalLogits() const override { return zeros_.as<float>(); }

 private:
  ReplayProposer replay_;
  Buffer zeros_;
};

// Sampled proposals (q uniform) at block size BS, verifying W <= BS rows per step.
void expectSampledProposalsKeepTheTargetDistribution(int32_t blockSize, int32_t verifyWidth,
                                                     bool rowDependent) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<int32_t> prompt = {11, 200, 37, 5, 90};
  // T = 1, no top-k / top-p: the tiny target's rows are peaked enough for countable cells,
  // q stays uniform, every token can be proposed and accepted.
  const SamplingConfig sampling{1.0f, 0, 1.0f, 0};
  constexpr int32_t kBatch = 3, kDraws = 3000;
  const std::vector<int32_t> recording = {11, 200, 37, 5, 90, 1, 2, 3, 4, 5, 6, 7, 8};

  std::map<int32_t, std::map<int32_t, int64_t>> counts;
  int64_t accepted = 0, rejected = 0;
  for (int32_t start = 0; start < kDraws; start += kBatch) {
    std::vector<GenerationRequest> requests;
    for (int32_t i = 0; i < kBatch; ++i) {
      SamplingConfig s = sampling;
      s.seed = static_cast<uint64_t>(7 + start + i);
      requests.push_back({prompt, 3, {}, s});
    }
    kv::KvCacheManager cache(cacheFor(target, kBatch), MemorySpace::kHost);
    UniformProposer proposer(*backend, blockSize, kBatch,
                             std::vector<std::vector<int32_t>>(kBatch, recording), V, rowDependent);
    DecodeEngine decoder(target, cache, &proposer, EngineOptions{.verifyWidth = verifyWidth});
    for (const GenerationResult& r : decoder.generate(requests)) ++counts[r.tokens[0]][r.tokens[1]];
    const std::vector<int64_t>& h = decoder.stats().acceptHistogram;
    ASSERT_EQ(h.size(), static_cast<size_t>(verifyWidth) + 1);
    for (size_t n = 2; n < h.size(); ++n) accepted += h[n];
    rejected += h[1];
  }
  EXPECT_GT(accepted, 100) << "proposals drawn from q must be accepted often";
  EXPECT_GT(rejected, 100);
  expectSecondTokensFollow(
      counts, [&](int32_t first) { return secondTokenProbs(target, prompt, first, sampling); }, V);
}

TEST(SpeculativeSampling, SampledProposalsKeepTheTargetDistribution) {
  expectSampledProposalsKeepTheTargetDistribution(4, 4, false);
}

// The verify width W = 3 < BS = 6: the draft's distributions arrive as [B, W, V] rows (the
// engine samples W rows per block and hands rows 1 … W−1 to the verify as q), each row with
// its own q; a stride mix-up between BS and W would pair drafts with another row's q.
TEST(SpeculativeSampling, SampledProposalsKeepTheTargetDistributionAtAVerifyWidthBelowTheBlock) {
  expectSampledProposalsKeepTheTargetDistribution(6, 3, true);
}

}  // namespace
}  // namespace es::runtime
