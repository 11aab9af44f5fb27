// An adaptive DecodeEngine (EngineOptions::adaptiveWidth) on the CUDA backend, captured steps
// keyed by (batch, sampled, W): at batch 1, where verify rows equal decode rows bit for bit,
// its greedy tokens equal plain greedy decoding exactly while its steps switch widths (replay
// draft of block 16, 30 % corrupted; a random DFlash draft of block 8); a sampled batch of 3
// gives the fixed-width engine's tokens (it runs at the largest width).
#include <gtest/gtest.h>

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

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch,
                           const model::DFlashDraft& draft) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 256;
  c.dtype = DType::kBF16;
  c.baseLayers = m.kvLayerShapes();
  c.draftLayers = draft.kvLayerShapes();
  return c;
}

std::vector<GenerationRequest> requestsOf(int32_t vocab, float temperature) {
  std::mt19937 rng(5);
  std::vector<GenerationRequest> requests;
  for (const auto& [len, budget] : {std::pair{5, 40}, std::pair{131, 33}, std::pair{40, 47}}) {
    GenerationRequest q;
    for (int32_t i = 0; i < len; ++i) q.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    q.maxNewTokens = budget;
    q.sampling = {temperature, 0, 1.0f, static_cast<uint64_t>(100 + len)};
    requests.push_back(q);
  }
  return requests;
}

int32_t widthsUsed(const SpeculationStats& s) {
  int32_t used = 0;
  for (int64_t steps : s.widthSteps) used += steps > 0;
  return used;
}

TEST(AdaptiveSpeculationGpu, BatchOneEqualsPlainGreedyExactlyAcrossWidths) {
  ES_SKIP_IF_NO_GPU();
  auto gpu = ops::makeCudaBackend();
  const std::string targetDir = test::test_data_dir() + "/models/qwen3";
  const std::filesystem::path draftDir =
      std::filesystem::temp_directory_path() / "es_adaptive_gpu_draft";
  model::test_draft::DraftSpec spec;
  spec.blockSize = 8;
  model::test_draft::writeDraft(draftDir, spec);
  const std::vector<int32_t> taps =
      model::DFlashDraft::requiredTargetTaps(draftDir, model::loadModelConfig(targetDir));
  model::TargetModel target(targetDir, *gpu, 64, taps);
  model::DFlashDraft draft(draftDir, *gpu, target, 64, 3);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);

  for (const GenerationRequest& request : requestsOf(V, 0.0f)) {
    SCOPED_TRACE(::testing::Message() << "prompt of " << request.prompt.size() << " tokens");
    const std::vector<GenerationRequest> one = {request};
    std::vector<int32_t> plain;
    {
      kv::KvCacheManager cache(cacheFor(target, 1, draft), MemorySpace::kDevice);
      plain = DecodeEngine(target, cache).generate(one)[0].tokens;
    }
    std::vector<int32_t> recording = request.prompt;
    recording.insert(recording.end(), plain.begin(), plain.end());
    {
      kv::KvCacheManager cache(cacheFor(target, 1, draft), MemorySpace::kDevice);
      ReplayProposer proposer(*gpu, 16, 1, {recording}, V, 0.3f);
      DecodeEngine decoder(target, cache, &proposer, {.adaptiveWidth = true, .explorePeriod = 2});
      EXPECT_EQ(decoder.generate(one)[0].tokens, plain) << "replay";
      EXPECT_GE(widthsUsed(decoder.stats()), 2);
    }
    kv::KvCacheManager cache(cacheFor(target, 1, draft), MemorySpace::kDevice);
    DFlashProposer proposer(draft);
    DecodeEngine decoder(target, cache, &proposer, {.adaptiveWidth = true, .explorePeriod = 2});
    EXPECT_EQ(decoder.generate(one)[0].tokens, plain) << "DFlash draft";
    EXPECT_GE(widthsUsed(decoder.stats()), 2);
  }

  // Sampled: every step at the largest width, the fixed-width engine's tokens.
  const std::vector<GenerationRequest> sampled = requestsOf(V, 0.9f);
  std::vector<GenerationResult> fixed;
  {
    kv::KvCacheManager cache(cacheFor(target, 3, draft), MemorySpace::kDevice);
    DFlashProposer proposer(draft);
    fixed = DecodeEngine(target, cache, &proposer).generate(sampled);
  }
  kv::KvCacheManager cache(cacheFor(target, 3, draft), MemorySpace::kDevice);
  DFlashProposer proposer(draft);
  DecodeEngine decoder(target, cache, &proposer, {.adaptiveWidth = true, .explorePeriod = 2});
  const std::vector<GenerationResult> out = decoder.generate(sampled);
  for (size_t r = 0; r < sampled.size(); ++r) {
    EXPECT_EQ(out[r].tokens, fixed[r].tokens) << "request " << r;
  }
  EXPECT_EQ(decoder.stats().widthSteps[8], decoder.stats().iterations);
  std::filesystem::remove_all(draftDir);
}

}  // namespace
}  // namespace es::runtime
