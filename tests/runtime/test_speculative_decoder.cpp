// Greedy speculative decoding is lossless: on the CPU backend (fp32) its output equals the plain
// greedy decoder's token for token, whatever the draft proposes. The replay proposer (the true
// continuation with deliberate mistakes) drives full, partial and zero accepts, bonus tokens,
// stop tokens inside an accepted block, the token budget, and compaction of a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
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

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 256;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  return c;
}

class SpeculativeDecodingCpu : public ::testing::TestWithParam<std::tuple<std::string, double>> {};

TEST_P(SpeculativeDecodingCpu, EqualsPlainGreedyForAnyDraftQuality) {
  const auto [family, errorRate] = GetParam();
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/" + family, *backend, 32);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  std::mt19937 rng(7);
  std::vector<int32_t> prompt(13);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % V);

  GenerationRequest request{prompt, 40, {}, {}};
  std::vector<int32_t> truth;  // the greedy continuation
  {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    truth = DecodeEngine(target, cache).generate({request})[0].tokens;
  }
  ASSERT_EQ(truth.size(), 40u);
  for (int32_t BS : {2, 4, 8}) {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    std::vector<int32_t> recording = prompt;
    recording.insert(recording.end(), truth.begin(), truth.end());
    ReplayProposer proposer(*backend, BS, 1, {recording}, V, static_cast<float>(errorRate));
    DecodeEngine decoder(target, cache, &proposer);
    std::vector<int32_t> streamed;
    const GenerationResult out =
        decoder.generate({request}, [&](int32_t, int32_t t) { streamed.push_back(t); })[0];
    EXPECT_EQ(out.tokens, truth) << "BS " << BS << " error rate " << errorRate;
    EXPECT_EQ(streamed, truth);
    const SpeculationStats& s = decoder.stats();
    EXPECT_EQ(s.acceptedTokens + 1, 40) << "every token but the prefill's comes from a verify";
    if (errorRate == 0.0) {
      // Perfect drafts: full blocks until the budget cuts the last one.
      EXPECT_EQ(s.verifySteps, (39 + BS - 1) / BS) << "BS " << BS;
    }
    if (errorRate == 1.0) {
      EXPECT_EQ(s.verifySteps, 39);  // every draft wrong: one token a step
    }
  }
}

TEST(SpeculativeDecoding, StopTokenInsideAnAcceptedBlock) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 250, 12};
  std::vector<int32_t> truth;
  {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    truth = DecodeEngine(target, cache).generate({{prompt, 30, {}, {}}})[0].tokens;
  }
  const int32_t stop = truth[9];
  const size_t stopAt =
      static_cast<size_t>(std::find(truth.begin(), truth.end(), stop) - truth.begin());
  kv::KvCacheManager plainCache(cacheFor(target, 1), MemorySpace::kHost);
  const GenerationResult plain =
      DecodeEngine(target, plainCache).generate({{prompt, 30, {stop}, {}}})[0];
  kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
  std::vector<int32_t> recording = prompt;
  recording.insert(recording.end(), truth.begin(), truth.end());
  ReplayProposer proposer(*backend, 8, 1, {recording}, V, 0.0f);
  const GenerationResult spec =
      DecodeEngine(target, cache, &proposer).generate({{prompt, 30, {stop}, {}}})[0];
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_EQ(spec.tokens.size(), stopAt + 1);
  EXPECT_EQ(spec.finish, FinishReason::kStop);
  EXPECT_EQ(cache.activeCount(), 0);
}

// A batch of prompts of different lengths (crossing the 128-token page), different budgets and
// draft qualities per request: the replay draft is corrupted at 30 %, so each sequence accepts a
// different amount per step, requests finish at different steps and the batch compacts.
TEST(SpeculativeDecoding, RaggedBatchEqualsPlainGreedy) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 64);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  std::mt19937 rng(11);
  std::vector<GenerationRequest> requests;
  for (const auto& [len, budget] : {std::pair{5, 17}, std::pair{131, 25}, std::pair{40, 31}}) {
    std::vector<int32_t> prompt(static_cast<size_t>(len));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % V);
    requests.push_back({prompt, budget, {}, {}});
  }
  std::vector<GenerationResult> plain;
  {
    kv::KvCacheManager cache(cacheFor(target, 3), MemorySpace::kHost);
    plain = DecodeEngine(target, cache).generate(requests);
  }
  const std::vector<std::vector<int32_t>> recordings =
      ReplayProposer::recordingsOf(requests, plain);
  kv::KvCacheManager cache(cacheFor(target, 3), MemorySpace::kHost);
  ReplayProposer proposer(*backend, 4, 3, recordings, V, 0.3f, 5);
  DecodeEngine decoder(target, cache, &proposer);
  const std::vector<GenerationResult> spec = decoder.generate(requests);
  for (size_t r = 0; r < requests.size(); ++r)
    EXPECT_EQ(spec[r].tokens, plain[r].tokens) << "request " << r;
  const SpeculationStats& s = decoder.stats();
  EXPECT_GT(s.meanAcceptLength(), 1.2);  // 30 % corruption of 3 drafts: partial blocks
  EXPECT_LT(s.meanAcceptLength(), 3.5);
  EXPECT_GT(s.acceptHistogram[1], 0);
  EXPECT_GT(s.acceptHistogram[4], 0);
  EXPECT_EQ(cache.activeCount(), 0);
}

// stopWhen (e.g. a stop string seen by the caller) ends a request inside an accepted block.
TEST(SpeculativeDecoding, StopWhenEndsTheRequestAtThatToken) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 250, 12};
  std::vector<int32_t> truth;
  {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    truth = DecodeEngine(target, cache).generate({{prompt, 30, {}, {}}})[0].tokens;
  }
  std::vector<int32_t> recording = prompt;
  recording.insert(recording.end(), truth.begin(), truth.end());
  for (const bool speculative : {false, true}) {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    ReplayProposer proposer(*backend, 8, 1, {recording}, V, 0.0f);
    int seen = 0;
    GenerationRequest q{prompt, 30, {}, {}};
    q.stopWhen = [&seen] { return seen == 11; };
    const TokenCallback count = [&seen](int32_t, int32_t) { ++seen; };
    const GenerationResult out =
        speculative ? DecodeEngine(target, cache, &proposer).generate({q}, count)[0]
                    : DecodeEngine(target, cache).generate({q}, count)[0];
    EXPECT_EQ(out.tokens, std::vector<int32_t>(truth.begin(), truth.begin() + 11))
        << "speculative " << speculative;
    EXPECT_EQ(out.finish, FinishReason::kStop);
    EXPECT_EQ(seen, 11);
    EXPECT_EQ(cache.activeCount(), 0);
  }
}

// A failure in the middle of generate (here a throwing stopWhen) leaves the cache empty and the
// engine usable.
TEST(SpeculativeDecoding, AFailedCallLeavesTheEngineUsable) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  kv::KvCacheManager cache(cacheFor(target, 2), MemorySpace::kHost);
  const std::vector<int32_t> prompt = {5, 17, 99};
  ReplayProposer proposer(*backend, 4, 2, {{5, 17, 99}, {5, 17, 99}}, 384, 0.0f);
  DecodeEngine decoder(target, cache, &proposer);
  GenerationRequest failing{prompt, 10, {}, {}};
  int calls = 0;
  failing.stopWhen = [&calls]() -> bool {
    if (++calls == 4) throw std::runtime_error("caller failure");
    return false;
  };
  EXPECT_THROW(decoder.generate({failing, {prompt, 10, {}, {}}}), std::runtime_error);
  EXPECT_EQ(cache.activeCount(), 0);
  const std::vector<GenerationResult> again = decoder.generate({{prompt, 10, {}, {}}});
  EXPECT_EQ(again[0].tokens.size(), 10u);
}

TEST(SpeculativeDecoding, BadRequestsAreClearErrors) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 8);
  kv::KvCacheManager cache(cacheFor(target, 2), MemorySpace::kHost);
  ReplayProposer proposer(*backend, 8, 2, {{1, 2}, {2, 3}}, 384, 0.0f);
  DecodeEngine decoder(target, cache, &proposer);
  // Two sequences of 8-row blocks need 16 rows in one verify forward; maxTokens is 8.
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{1}, 4, {}, {}}, {{2}, 4, {}, {}}});
      },
      "requests.size()");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{1}, 250, {}, {}}});
      },
      "requests[0] prompt + maxNewTokens");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{1}, 4, {}, {-0.5f, 0, 1.0f, 1}}});
      },
      "requests[0].sampling.temperature");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{1}, 4, {}, {0.5f, 0, 0.0f, 1}}});
      },
      "requests[0].sampling.topP");
  test::expectInvalidArgument(
      [&] {
        decoder.generate({{{384}, 4, {}, {}}});
      },
      "requests[0].prompt token");
  EXPECT_EQ(cache.activeCount(), 0) << "a refused request leaves the cache untouched";
  // A draft that cannot take the target's 8-row forwards is refused at construction.
  ReplayProposer small(*backend, 4, 2, {{1}}, 384, 0.0f);
  struct Narrow final : DraftProposer {
    DraftProposer& inner;
    explicit Narrow(DraftProposer& p) : inner(p) {}
    int32_t blockSize() const override { return inner.blockSize(); }
    int32_t maxContextRows() const override { return 4; }
    int32_t maxBatch() const override { return 2; }
    void appendContext(const model::TargetModel&, const std::vector<int32_t>&,
                       const std::vector<int32_t>&, kv::KvCacheManager&) override {}
    void appendContext(const model::DraftContextDelta&, kv::KvCacheManager&) override {}
    void propose(const model::DraftProposalInputs& in, kv::KvCacheManager& c) override {
      inner.propose(in, c);
    }
  } narrow(small);
  kv::KvCacheManager cache2(cacheFor(target, 2), MemorySpace::kHost);
  test::expectInvalidArgument([&] { DecodeEngine(target, cache2, &narrow); }, "target maxTokens");
}

// Verify width W < BS (EngineOptions::verifyWidth): the draft proposes blocks of BS = 8 rows,
// each step verifies the anchor and the first W − 1 drafts only. Greedy output still equals
// plain decoding's, alone and in a ragged batch that compacts; a step emits at most W tokens
// (the histogram has W + 1 entries) and perfect drafts need ceil((maxNewTokens − 1) / W) steps
// per request, which a step that verified the whole block (or fewer rows than W), or read
// another request's drafts, would not.
TEST(SpeculativeDecoding, VerifyWidthBelowTheBlockEqualsPlainGreedy) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 64);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  constexpr int32_t BS = 8;
  std::mt19937 rng(5);
  std::vector<GenerationRequest> alone(1), batch;
  alone[0].prompt.resize(13);
  for (int32_t& t : alone[0].prompt) t = static_cast<int32_t>(rng() % V);
  alone[0].maxNewTokens = 40;
  for (const auto& [len, budget] : {std::pair{5, 17}, std::pair{131, 25}, std::pair{40, 31}}) {
    std::vector<int32_t> prompt(static_cast<size_t>(len));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % V);
    batch.push_back({prompt, budget, {}, {}});
  }
  for (const std::vector<GenerationRequest>* requests : {&alone, &batch}) {
    const int32_t n = static_cast<int32_t>(requests->size());
    std::vector<GenerationResult> plain;
    {
      kv::KvCacheManager cache(cacheFor(target, n), MemorySpace::kHost);
      plain = DecodeEngine(target, cache).generate(*requests);
    }
    const std::vector<std::vector<int32_t>> recordings =
        ReplayProposer::recordingsOf(*requests, plain);
    for (const int32_t W : {2, 3, 5, BS}) {
      for (const float corrupt : {0.0f, 0.3f}) {
        SCOPED_TRACE(::testing::Message() << "batch " << n << " W " << W << " corrupt " << corrupt);
        kv::KvCacheManager cache(cacheFor(target, n), MemorySpace::kHost);
        ReplayProposer proposer(*backend, BS, n, recordings, V, corrupt, 3);
        DecodeEngine decoder(target, cache, &proposer, EngineOptions{.verifyWidth = W});
        EXPECT_EQ(decoder.stepWidth(), W);
        EXPECT_EQ(decoder.blockSize(), BS);
        const std::vector<GenerationResult> spec = decoder.generate(*requests);
        for (int32_t r = 0; r < n; ++r) {
          EXPECT_EQ(spec[static_cast<size_t>(r)].tokens, plain[static_cast<size_t>(r)].tokens)
              << "request " << r;
        }
        const SpeculationStats& s = decoder.stats();
        ASSERT_EQ(s.acceptHistogram.size(), static_cast<size_t>(W) + 1);
        EXPECT_GT(s.acceptHistogram[static_cast<size_t>(W)], 0) << "full-width accepts";
        if (corrupt == 0.0f) {
          // Perfect drafts for every request (read from its own row of the [B, W] proposal):
          // W tokens a step until the budget cuts the last one.
          int64_t steps = 0, full = 0;
          for (const GenerationRequest& q : *requests) {
            steps += (q.maxNewTokens - 1 + W - 1) / W;
            full += (q.maxNewTokens - 1) / W;
          }
          EXPECT_EQ(s.verifySteps, steps);
          EXPECT_EQ(s.acceptHistogram[static_cast<size_t>(W)], full);
        }
        EXPECT_EQ(cache.activeCount(), 0);
      }
    }
  }
}

// A narrower verify needs fewer target rows per sequence: with maxTokens = 8 and BS = 8, one
// sequence fits a full-width step and two fit steps of W = 4.
TEST(SpeculativeDecoding, VerifyWidthSetsTheMaxBatch) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 8);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  kv::KvCacheManager cache(cacheFor(target, 2), MemorySpace::kHost);
  ReplayProposer proposer(*backend, 8, 2, {{1, 2, 3}, {4, 5, 6}}, V, 0.0f);
  EXPECT_EQ(DecodeEngine(target, cache, &proposer).maxBatch(), 1);
  DecodeEngine narrow(target, cache, &proposer, EngineOptions{.verifyWidth = 4});
  EXPECT_EQ(narrow.maxBatch(), 2);
  const std::vector<GenerationResult> out = narrow.generate({{{1}, 6, {}, {}}, {{4}, 6, {}, {}}});
  EXPECT_EQ(out[0].tokens.size(), 6u);
  EXPECT_EQ(out[1].tokens.size(), 6u);
}

// W outside [2, BS] (0 = BS aside) is refused at construction, naming the option and the limit;
// plain decoding (no proposer) takes no width.
TEST(SpeculativeDecoding, VerifyWidthOutsideTwoToTheBlockSizeIsAClearError) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
  ReplayProposer proposer(*backend, 8, 1, {{1, 2, 3}}, V, 0.0f);
  for (const int32_t W : {1, 9, -1}) {
    SCOPED_TRACE(::testing::Message() << "W " << W);
    test::expectInvalidArgument(
        [&] { DecodeEngine(target, cache, &proposer, EngineOptions{.verifyWidth = W}); },
        "EngineOptions::verifyWidth");
    try {
      DecodeEngine(target, cache, &proposer, EngineOptions{.verifyWidth = W});
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("[2, block size = 8]"), std::string::npos) << e.what();
    }
  }
  test::expectInvalidArgument(
      [&] { DecodeEngine(target, cache, nullptr, EngineOptions{.verifyWidth = 4}); },
      "EngineOptions::verifyWidth");
  EXPECT_EQ(DecodeEngine(target, cache, &proposer, EngineOptions{.verifyWidth = 0}).stepWidth(), 8);
}

INSTANTIATE_TEST_SUITE_P(DraftQuality, SpeculativeDecodingCpu,
                         ::testing::Combine(::testing::Values("qwen3", "llama"),
                                            ::testing::Values(0.0, 0.3, 1.0)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_err" +
                                  std::to_string(static_cast<int>(std::get<1>(info.param) * 10));
                         });

}  // namespace
}  // namespace es::runtime
