// Greedy speculative decoding is lossless: on the CPU backend (fp32) its output equals the plain
// greedy decoder's token for token, whatever the draft proposes. A scripted proposer (the true
// continuation with deliberate mistakes) drives full, partial and zero accepts, bonus tokens,
// stop tokens inside an accepted block and the token budget.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/plain_decoder.h"
#include "runtime/speculative_decoder.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

TEST(AcceptGreedyChain, AcceptsTheMatchingPrefixPlusOne) {
  // drafts row 0 is the anchor's re-prediction and never compared.
  EXPECT_EQ(acceptGreedyChain({9, 5, 6, 7}, {5, 6, 7, 8}, 10), (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(acceptGreedyChain({9, 5, 0, 7}, {5, 6, 7, 8}, 10), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(acceptGreedyChain({9, 4, 6, 7}, {5, 6, 7, 8}, 10), (std::vector<int32_t>{5}));
  EXPECT_EQ(acceptGreedyChain({9, 5, 6, 7}, {5, 6, 7, 8}, 2), (std::vector<int32_t>{5, 6}));
  test::expectInvalidArgument([] { acceptGreedyChain({1, 2}, {1}, 1); }, "drafts.size()");
  test::expectInvalidArgument([] { acceptGreedyChain({1, 2}, {1, 2}, 0); }, "budget");
}

// Proposes the true greedy continuation of one request (slot 0), corrupting each draft row with
// probability `errorRate`.
class ScriptedProposer final : public DraftProposer {
 public:
  ScriptedProposer(int32_t blockSize, int32_t promptLength, std::vector<int32_t> truth,
                   double errorRate, int32_t vocab)
      : blockSize_(blockSize), promptLength_(promptLength), truth_(std::move(truth)),
        errorRate_(errorRate), vocab_(vocab) {}

  int32_t blockSize() const override { return blockSize_; }
  int32_t maxContextRows() const override { return maxContextRows_; }
  int32_t maxBatch() const override { return 1; }
  int32_t maxContextRows_ = 1 << 20;

  void appendContext(const model::TargetModel&, const std::vector<int32_t>& positions,
                     const std::vector<int32_t>& owners, kv::KvCacheManager& cache) override {
    // The delta must continue the draft context exactly where it stands.
    int32_t expected = cache.draftLength(0);
    for (size_t i = 0; i < positions.size(); ++i) {
      if (owners[i] < 0) {
        EXPECT_EQ(positions[i], -1);
        continue;
      }
      EXPECT_EQ(owners[i], 0);
      EXPECT_EQ(positions[i], expected++);
    }
  }

  std::vector<int32_t> propose(const std::vector<int32_t>& anchors,
                               const std::vector<int32_t>& blockStarts,
                               kv::KvCacheManager& cache) override {
    EXPECT_EQ(anchors.size(), 1u);
    EXPECT_EQ(blockStarts[0], cache.baseLength(0));  // the draft lags nothing after a commit
    const int32_t emitted = blockStarts[0] - promptLength_ + 1;  // the anchor is truth[emitted-1]
    EXPECT_EQ(anchors[0], truth_[static_cast<size_t>(emitted - 1)]);
    std::vector<int32_t> block(static_cast<size_t>(blockSize_));
    block[0] = anchors[0];
    for (int32_t i = 1; i < blockSize_; ++i) {
      const size_t at = static_cast<size_t>(emitted - 1 + i);
      int32_t token = at < truth_.size() ? truth_[at] : 0;
      if (std::uniform_real_distribution<double>(0, 1)(rng_) < errorRate_) token = (token + 1) % vocab_;
      block[static_cast<size_t>(i)] = token;
    }
    ++proposals;
    return block;
  }

  int proposals = 0;

 private:
  int32_t blockSize_, promptLength_;
  std::vector<int32_t> truth_;
  double errorRate_;
  int32_t vocab_;
  std::mt19937 rng_{42};
};

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 256;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  return c;
}

class SpeculativeDecoderCpu : public ::testing::TestWithParam<std::tuple<std::string, double>> {};

TEST_P(SpeculativeDecoderCpu, EqualsPlainGreedyForAnyDraftQuality) {
  const auto [family, errorRate] = GetParam();
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/" + family, *backend, 32);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  std::mt19937 rng(7);
  std::vector<int32_t> prompt(13);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % V);

  GenerationRequest request{prompt, 40, {}, {}};
  std::vector<int32_t> truth;
  {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    truth = PlainDecoder(target, cache).generate({request})[0].tokens;
  }
  ASSERT_EQ(truth.size(), 40u);
  for (int32_t BS : {2, 4, 8}) {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    ScriptedProposer proposer(BS, static_cast<int32_t>(prompt.size()), truth, errorRate, V);
    SpeculativeDecoder decoder(target, proposer, cache);
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

TEST(SpeculativeDecoder, StopTokenInsideAnAcceptedBlock) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 250, 12};
  std::vector<int32_t> truth;
  {
    kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
    truth = PlainDecoder(target, cache).generate({{prompt, 30, {}, {}}})[0].tokens;
  }
  const int32_t stop = truth[9];
  const size_t stopAt = static_cast<size_t>(std::find(truth.begin(), truth.end(), stop) - truth.begin());
  kv::KvCacheManager plainCache(cacheFor(target, 1), MemorySpace::kHost);
  const GenerationResult plain = PlainDecoder(target, plainCache).generate({{prompt, 30, {stop}, {}}})[0];
  kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
  ScriptedProposer proposer(8, static_cast<int32_t>(prompt.size()), truth, 0.0, V);
  const GenerationResult spec = SpeculativeDecoder(target, proposer, cache).generate({{prompt, 30, {stop}, {}}})[0];
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_EQ(spec.tokens.size(), stopAt + 1);
  EXPECT_EQ(spec.finish, FinishReason::kStop);
  EXPECT_EQ(cache.activeCount(), 0);
}

TEST(SpeculativeDecoder, BadRequestsAreClearErrors) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 8);
  kv::KvCacheManager cache(cacheFor(target, 2), MemorySpace::kHost);
  ScriptedProposer proposer(8, 1, {1}, 0.0, 384);
  SpeculativeDecoder decoder(target, proposer, cache);
  // Two sequences of 8-row blocks need 16 rows in one verify forward; maxTokens is 8.
  test::expectInvalidArgument([&] { decoder.generate({{{1}, 4, {}, {}}, {{2}, 4, {}, {}}}); },
                              "requests.size() * blockSize");
  test::expectInvalidArgument([&] { decoder.generate({{{1}, 250, {}, {}}}); },
                              "requests[0] prompt + maxNewTokens + blockSize");
  test::expectInvalidArgument([&] { decoder.generate({{{1}, 4, {}, {0.8f, 0, 1.0f, 1}}}); },
                              "requests[0].sampling.temperature");
  proposer.maxContextRows_ = 4;  // a draft that cannot take the target's 8-row forwards
  test::expectInvalidArgument([&] { decoder.generate({{{1}, 4, {}, {}}}); }, "target maxTokens");
}

INSTANTIATE_TEST_SUITE_P(
    DraftQuality, SpeculativeDecoderCpu,
    ::testing::Combine(::testing::Values("qwen3", "llama"), ::testing::Values(0.0, 0.3, 1.0)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_err" + std::to_string(static_cast<int>(std::get<1>(info.param) * 10));
    });

}  // namespace
}  // namespace es::runtime
