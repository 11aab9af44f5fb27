// The decode engine on the CUDA backend (bf16, CUDA graphs) with the fixture target:
//  * replaying captured steps gives exactly the eager steps' tokens (greedy and sampled);
//  * greedy speculative decoding (replay draft at corruption 0 / 0.3, block 4 and 16; a random
//    DFlash draft) equals plain greedy decoding on the GPU: exactly at batch 1 (verify rows equal
//    decode rows bit for bit), and in a batch of 3 except after a near-tie, judged on the CPU
//    backend's f32 logits (there the verify's 48 rows take cuBLASLt and packed attention tiles);
//  * a ragged batch crossing the 128-token page and compacting as requests finish;
//  * the same at verify widths below the block size (EngineOptions::verifyWidth).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/random_draft.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/dflash_proposer.h"
#include "runtime/replay_proposer.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

constexpr double kNearTie = 2e-2;  // top-1/top-2 margin relative to (1 + max |logit|)

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch, DType dtype,
                           std::vector<kv::KvLayerShape> draftLayers = {}) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 256;
  c.dtype = dtype;
  c.baseLayers = m.kvLayerShapes();
  c.draftLayers = std::move(draftLayers);
  return c;
}

std::vector<GenerationRequest> raggedRequests(int32_t vocab, uint64_t seedBase = 0,
                                              float temperature = 0.0f) {
  std::mt19937 rng(11);
  std::vector<GenerationRequest> requests;
  for (const auto& [len, budget] : {std::pair{5, 17}, std::pair{131, 25}, std::pair{40, 31}}) {
    GenerationRequest q;
    for (int32_t i = 0; i < len; ++i) q.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    q.maxNewTokens = budget;  // different budgets: the batch compacts as requests finish
    q.sampling = {temperature, 0, 1.0f, seedBase + static_cast<uint64_t>(len)};
    requests.push_back(q);
  }
  return requests;
}

// The f32 CPU model judges a divergence: the prefix prompt + tokens[0, k) must end in a near-tie.
class NearTieJudge {
 public:
  NearTieJudge()
      : backend_(ops::makeCpuBackend()),
        model_(test::test_data_dir() + "/models/qwen3", *backend_, 256) {}
  double margin(const std::vector<int32_t>& prompt, const std::vector<int32_t>& tokens, size_t k) {
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), tokens.begin(), tokens.begin() + static_cast<int64_t>(k));
    kv::KvCacheManager cache(cacheFor(model_, 1, DType::kF32), MemorySpace::kHost);
    cache.admit();
    model::ForwardBatch b;
    b.tokens = seq;
    for (int32_t i = 0; i < static_cast<int32_t>(seq.size()); ++i) {
      b.positions.push_back(i);
      b.tokenToSequence.push_back(0);
    }
    b.cuQSeqLens = {0, static_cast<int32_t>(seq.size())};
    b.kvLengths = {static_cast<int32_t>(seq.size())};
    b.logitRows = {static_cast<int32_t>(seq.size()) - 1};
    const std::vector<float> row = model_.forward(b, cache).logits;
    std::vector<float> v = row;
    std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
    double scale = 0;
    for (float x : row) scale = std::max(scale, std::abs(static_cast<double>(x)));
    return (v[0] - v[1]) / (1.0 + scale);
  }

 private:
  std::unique_ptr<ops::Backend> backend_;
  model::TargetModel model_;
};

// Expects `got` to equal `want` up to a divergence after a near-tie; returns divergences seen.
int expectEqualUpToNearTies(NearTieJudge& judge, const std::vector<GenerationRequest>& requests,
                            const std::vector<GenerationResult>& want,
                            const std::vector<GenerationResult>& got) {
  int divergences = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    const std::vector<int32_t>& a = want[r].tokens;
    const std::vector<int32_t>& b = got[r].tokens;
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    if (k == a.size() && k == b.size()) continue;
    ++divergences;
    if (k == std::min(a.size(), b.size())) {
      ADD_FAILURE() << "request " << r << ": same tokens, different lengths";
      continue;
    }
    const double m = judge.margin(requests[r].prompt, a, k);
    EXPECT_LT(m, kNearTie) << "request " << r << " diverges at token " << k
                           << " where the f32 margin is " << m;
  }
  return divergences;
}

TEST(DecodeEngineGpu, GraphsReplayExactlyTheEagerSteps) {
  ES_SKIP_IF_NO_GPU();
  auto gpu = ops::makeCudaBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *gpu, 64);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  for (const float temperature : {0.0f, 0.9f}) {
    SCOPED_TRACE(::testing::Message() << "temperature " << temperature);
    const std::vector<GenerationRequest> requests = raggedRequests(V, 7, temperature);
    auto run = [&](bool graphs, DraftProposer* proposer) {
      kv::KvCacheManager cache(cacheFor(target, 3, DType::kBF16), MemorySpace::kDevice);
      DecodeEngine engine(target, cache, proposer, EngineOptions{graphs});
      return engine.generate(requests);
    };
    const std::vector<GenerationResult> eager = run(false, nullptr), graphed = run(true, nullptr);
    for (size_t r = 0; r < requests.size(); ++r) {
      EXPECT_EQ(graphed[r].tokens, eager[r].tokens) << "plain, request " << r;
      EXPECT_EQ(graphed[r].tokens.size(), static_cast<size_t>(requests[r].maxNewTokens));
    }
    const std::vector<std::vector<int32_t>> recordings =
        ReplayProposer::recordingsOf(requests, eager);
    ReplayProposer replayA(*gpu, 8, 3, recordings, V, 0.3f),
        replayB(*gpu, 8, 3, recordings, V, 0.3f);
    const std::vector<GenerationResult> specEager = run(false, &replayA),
                                        specGraphed = run(true, &replayB);
    for (size_t r = 0; r < requests.size(); ++r)
      EXPECT_EQ(specGraphed[r].tokens, specEager[r].tokens) << "speculative, request " << r;
  }
}

TEST(DecodeEngineGpu, ReplaySpeculationEqualsPlainGreedyUpToNearTies) {
  ES_SKIP_IF_NO_GPU();
  auto gpu = ops::makeCudaBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *gpu, 64);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<GenerationRequest> requests = raggedRequests(V);
  std::vector<GenerationResult> plain;
  {
    kv::KvCacheManager cache(cacheFor(target, 3, DType::kBF16), MemorySpace::kDevice);
    plain = DecodeEngine(target, cache).generate(requests);
  }
  const std::vector<std::vector<int32_t>> recordings =
      ReplayProposer::recordingsOf(requests, plain);
  NearTieJudge judge;
  int divergences = 0;
  for (const int32_t BS : {4, 16}) {
    for (const float corrupt : {0.0f, 0.3f}) {
      SCOPED_TRACE(::testing::Message() << "BS " << BS << " corrupt " << corrupt);
      kv::KvCacheManager cache(cacheFor(target, 3, DType::kBF16), MemorySpace::kDevice);
      ReplayProposer proposer(*gpu, BS, 3, recordings, V, corrupt);
      DecodeEngine decoder(target, cache, &proposer);
      const std::vector<GenerationResult> spec = decoder.generate(requests);
      divergences += expectEqualUpToNearTies(judge, requests, plain, spec);
      if (corrupt == 0.0f) {
        EXPECT_GT(decoder.stats().meanAcceptLength(), 0.6 * BS);
      }
      EXPECT_EQ(cache.activeCount(), 0);
    }
  }
  EXPECT_LE(divergences, 2) << "near-ties should be rare";
}

// The fixture target on the GPU with a random block-8 DFlash draft (written to a temporary
// folder named `name`) for up to maxBatch sequences.
struct TargetWithDraft {
  std::unique_ptr<ops::Backend> gpu = ops::makeCudaBackend();
  std::unique_ptr<model::TargetModel> target;
  std::unique_ptr<model::DFlashDraft> draft;

  TargetWithDraft(const char* name, int32_t maxBatch) {
    const std::string targetDir = test::test_data_dir() + "/models/qwen3";
    const std::filesystem::path draftDir = std::filesystem::temp_directory_path() / name;
    model::test_draft::DraftSpec spec;
    spec.blockSize = 8;
    model::test_draft::writeDraft(draftDir, spec);
    const std::vector<int32_t> taps =
        model::DFlashDraft::requiredTargetTaps(draftDir, model::loadModelConfig(targetDir));
    target = std::make_unique<model::TargetModel>(targetDir, *gpu, 64, taps);
    draft = std::make_unique<model::DFlashDraft>(draftDir, *gpu, *target, 64, maxBatch);
  }
};

TEST(DecodeEngineGpu, DFlashDraftEqualsPlainGreedyUpToNearTies) {
  ES_SKIP_IF_NO_GPU();
  TargetWithDraft setup("es_engine_gpu_draft", 3);
  model::TargetModel& target = *setup.target;
  model::DFlashDraft& draft = *setup.draft;
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<GenerationRequest> requests = raggedRequests(V);
  std::vector<GenerationResult> plain;
  {
    kv::KvCacheManager cache(cacheFor(target, 3, DType::kBF16, draft.kvLayerShapes()),
                             MemorySpace::kDevice);
    plain = DecodeEngine(target, cache).generate(requests);
  }
  kv::KvCacheManager cache(cacheFor(target, 3, DType::kBF16, draft.kvLayerShapes()),
                           MemorySpace::kDevice);
  DFlashProposer proposer(draft);
  DecodeEngine decoder(target, cache, &proposer);
  const std::vector<GenerationResult> out = decoder.generate(requests);
  NearTieJudge judge;
  EXPECT_LE(expectEqualUpToNearTies(judge, requests, plain, out), 1);
  EXPECT_GT(decoder.stats().verifySteps, 0);
  EXPECT_GE(decoder.stats().meanAcceptLength(), 1.0);
}

// Batch 1: the verify forward's rows equal decode rows bit for bit (the gemv keeps one K split
// for every m <= 16, attention splits keys at fixed boundaries), so greedy speculative decoding
// must give exactly the plain greedy tokens, with no near-tie allowance: replay drafts (block
// 4 and 16, corrupted or not) and a random DFlash draft (block 8), each request alone.
TEST(DecodeEngineGpu, BatchOneSpeculationEqualsPlainGreedyExactly) {
  ES_SKIP_IF_NO_GPU();
  TargetWithDraft setup("es_engine_gpu_draft_b1", 1);
  model::TargetModel& target = *setup.target;
  model::DFlashDraft& draft = *setup.draft;
  ops::Backend* gpu = setup.gpu.get();
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  int64_t multiTokenAccepts = 0;
  for (const GenerationRequest& request : raggedRequests(V)) {
    SCOPED_TRACE(::testing::Message() << "prompt of " << request.prompt.size() << " tokens");
    const std::vector<GenerationRequest> one = {request};
    std::vector<int32_t> plain;
    {
      kv::KvCacheManager cache(cacheFor(target, 1, DType::kBF16, draft.kvLayerShapes()),
                               MemorySpace::kDevice);
      plain = DecodeEngine(target, cache).generate(one)[0].tokens;
    }
    std::vector<int32_t> recording = request.prompt;
    recording.insert(recording.end(), plain.begin(), plain.end());
    for (const auto& [BS, corrupt] : {std::pair{4, 0.0f}, std::pair{16, 0.3f}}) {
      kv::KvCacheManager cache(cacheFor(target, 1, DType::kBF16, draft.kvLayerShapes()),
                               MemorySpace::kDevice);
      ReplayProposer proposer(*gpu, BS, 1, {recording}, V, corrupt);
      DecodeEngine decoder(target, cache, &proposer);
      EXPECT_EQ(decoder.generate(one)[0].tokens, plain)
          << "replay BS " << BS << " corrupt " << corrupt;
      multiTokenAccepts += decoder.stats().meanAcceptLength() > 1.5;
    }
    kv::KvCacheManager cache(cacheFor(target, 1, DType::kBF16, draft.kvLayerShapes()),
                             MemorySpace::kDevice);
    DFlashProposer proposer(draft);
    DecodeEngine decoder(target, cache, &proposer);
    EXPECT_EQ(decoder.generate(one)[0].tokens, plain) << "DFlash draft";
  }
  EXPECT_EQ(multiTokenAccepts, 6) << "the replay drafts must be accepted over several tokens";
}

// Verify widths W < BS (EngineOptions::verifyWidth) on the GPU, captured steps included:
// at batch 1 exactly the plain greedy tokens (W rows are within the gemv's row-invariant range
// like BS rows), replay drafts of block 16 at W = 2 and 5 and the random DFlash draft (block 8,
// lm_head over its first W rows only) at W = 3; a batch of 3 at W = 4 up to near-ties.
TEST(DecodeEngineGpu, VerifyWidthBelowTheBlockEqualsPlainGreedy) {
  ES_SKIP_IF_NO_GPU();
  TargetWithDraft setup("es_engine_gpu_draft_w", 3);
  model::TargetModel& target = *setup.target;
  model::DFlashDraft& draft = *setup.draft;
  ops::Backend* gpu = setup.gpu.get();
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<GenerationRequest> requests = raggedRequests(V);
  std::vector<GenerationResult> plain;
  {
    kv::KvCacheManager cache(cacheFor(target, 3, DType::kBF16, draft.kvLayerShapes()),
                             MemorySpace::kDevice);
    plain = DecodeEngine(target, cache).generate(requests);
  }
  const std::vector<std::vector<int32_t>> recordings =
      ReplayProposer::recordingsOf(requests, plain);
  int64_t fullWidthAccepts = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    SCOPED_TRACE(::testing::Message() << "request " << r << " alone");
    const std::vector<GenerationRequest> one = {requests[r]};
    std::vector<int32_t> plainOne;
    {
      kv::KvCacheManager cache(cacheFor(target, 1, DType::kBF16, draft.kvLayerShapes()),
                               MemorySpace::kDevice);
      plainOne = DecodeEngine(target, cache).generate(one)[0].tokens;
    }
    for (const auto& [W, corrupt] : {std::pair{2, 0.0f}, std::pair{5, 0.3f}}) {
      kv::KvCacheManager cache(cacheFor(target, 1, DType::kBF16, draft.kvLayerShapes()),
                               MemorySpace::kDevice);
      ReplayProposer proposer(*gpu, 16, 1, {recordings[r]}, V, corrupt);
      DecodeEngine decoder(target, cache, &proposer, EngineOptions{.verifyWidth = W});
      EXPECT_EQ(decoder.generate(one)[0].tokens, plainOne)
          << "replay BS 16 W " << W << " corrupt " << corrupt;
      ASSERT_EQ(decoder.stats().acceptHistogram.size(), static_cast<size_t>(W) + 1);
      if (corrupt == 0.0f)
        fullWidthAccepts += decoder.stats().acceptHistogram[static_cast<size_t>(W)] > 0;
    }
    kv::KvCacheManager cache(cacheFor(target, 1, DType::kBF16, draft.kvLayerShapes()),
                             MemorySpace::kDevice);
    DFlashProposer proposer(draft);
    DecodeEngine decoder(target, cache, &proposer, EngineOptions{.verifyWidth = 3});
    EXPECT_EQ(decoder.generate(one)[0].tokens, plainOne) << "DFlash draft W 3";
  }
  EXPECT_EQ(fullWidthAccepts, 3) << "uncorrupted replay drafts must fill whole verify widths";

  NearTieJudge judge;
  kv::KvCacheManager cache(cacheFor(target, 3, DType::kBF16, draft.kvLayerShapes()),
                           MemorySpace::kDevice);
  ReplayProposer proposer(*gpu, 16, 3, recordings, V, 0.0f);
  DecodeEngine decoder(target, cache, &proposer, EngineOptions{.verifyWidth = 4});
  const std::vector<GenerationResult> batch = decoder.generate(requests);
  EXPECT_LE(expectEqualUpToNearTies(judge, requests, plain, batch), 1);
  EXPECT_GT(decoder.stats().meanAcceptLength(), 0.6 * 4);
  DFlashProposer dflash(draft);
  kv::KvCacheManager cache2(cacheFor(target, 3, DType::kBF16, draft.kvLayerShapes()),
                            MemorySpace::kDevice);
  DecodeEngine withDraft(target, cache2, &dflash, EngineOptions{.verifyWidth = 3});
  EXPECT_LE(expectEqualUpToNearTies(judge, requests, plain, withDraft.generate(requests)), 1);
}

}  // namespace
}  // namespace es::runtime
