// The speculative decoder with a real DFlash draft (random weights, CPU backend): a batch of
// requests with different prompt lengths decodes exactly as plain greedy decoding does, while
// the draft's context follows the target's commits (prefill, round 0, accepted rows only), at
// full width and at verify widths below the block size.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/random_draft.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/dflash_proposer.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

TEST(DFlashSpeculative, BatchEqualsPlainGreedy) {
  const std::string targetDir = test::test_data_dir() + "/models/qwen3";
  const std::filesystem::path draftDir =
      std::filesystem::temp_directory_path() / "es_spec_random_draft";
  model::test_draft::DraftSpec spec;
  spec.blockSize = 4;
  model::test_draft::writeDraft(draftDir, spec);

  auto backend = ops::makeCpuBackend();
  const model::ModelConfig targetConfig = model::loadModelConfig(targetDir);
  const std::vector<int32_t> taps = model::DFlashDraft::requiredTargetTaps(draftDir, targetConfig);
  model::TargetModel target(targetDir, *backend, 64, taps);
  model::DFlashDraft draft(draftDir, *backend, target, 64, 3);

  std::mt19937 rng(3);
  std::vector<GenerationRequest> requests;
  for (int32_t length : {9, 31, 17}) {
    GenerationRequest r;
    for (int32_t i = 0; i < length; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % 384));
    r.maxNewTokens = 12 + length % 5;
    requests.push_back(r);
  }
  kv::KvCacheConfig c;
  c.maxBatchSize = 3;
  c.maxSequenceLength = 128;
  c.dtype = DType::kF32;
  c.baseLayers = target.kvLayerShapes();
  c.draftLayers = draft.kvLayerShapes();

  std::vector<GenerationResult> plain;
  {
    kv::KvCacheManager cache(c, MemorySpace::kHost);
    plain = DecodeEngine(target, cache).generate(requests);
  }
  kv::KvCacheManager cache(c, MemorySpace::kHost);
  DFlashProposer proposer(draft);
  DecodeEngine decoder(target, cache, &proposer);
  const std::vector<GenerationResult> spec_out = decoder.generate(requests);
  ASSERT_EQ(spec_out.size(), plain.size());
  for (size_t r = 0; r < plain.size(); ++r) {
    EXPECT_EQ(spec_out[r].tokens, plain[r].tokens) << "request " << r;
    EXPECT_EQ(spec_out[r].finish, plain[r].finish);
  }
  EXPECT_GT(decoder.stats().verifySteps, 0);
  std::filesystem::remove_all(draftDir);
}

// Verify widths W < BS with the DFlash draft (block 8): its layers run all 8 rows of a block,
// its lm_head only the first W (DraftProposalInputs::rowsPerBlock), and the engine verifies
// W rows. Alone and in a batch of 3, the output equals plain greedy decoding exactly.
TEST(DFlashSpeculative, VerifyWidthBelowTheBlockEqualsPlainGreedy) {
  const std::string targetDir = test::test_data_dir() + "/models/qwen3";
  const std::filesystem::path draftDir =
      std::filesystem::temp_directory_path() / "es_spec_random_draft_w";
  model::test_draft::DraftSpec spec;
  spec.blockSize = 8;
  model::test_draft::writeDraft(draftDir, spec);

  auto backend = ops::makeCpuBackend();
  const std::vector<int32_t> taps =
      model::DFlashDraft::requiredTargetTaps(draftDir, model::loadModelConfig(targetDir));
  model::TargetModel target(targetDir, *backend, 64, taps);
  model::DFlashDraft draft(draftDir, *backend, target, 64, 3);

  std::mt19937 rng(8);
  std::vector<GenerationRequest> batch;
  for (int32_t length : {9, 31, 17}) {
    GenerationRequest r;
    for (int32_t i = 0; i < length; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % 384));
    r.maxNewTokens = 10 + length % 5;
    batch.push_back(r);
  }
  std::vector<GenerationRequest> alone = {batch[1]};
  kv::KvCacheConfig c;
  c.maxBatchSize = 3;
  c.maxSequenceLength = 128;
  c.dtype = DType::kF32;
  c.baseLayers = target.kvLayerShapes();
  c.draftLayers = draft.kvLayerShapes();

  for (const std::vector<GenerationRequest>* requests : {&alone, &batch}) {
    std::vector<GenerationResult> plain;
    {
      kv::KvCacheManager cache(c, MemorySpace::kHost);
      plain = DecodeEngine(target, cache).generate(*requests);
    }
    for (const int32_t W : {2, 3, 5, 8}) {
      SCOPED_TRACE(::testing::Message() << "batch " << requests->size() << " W " << W);
      kv::KvCacheManager cache(c, MemorySpace::kHost);
      DFlashProposer proposer(draft);
      DecodeEngine decoder(target, cache, &proposer, EngineOptions{.verifyWidth = W});
      const std::vector<GenerationResult> out = decoder.generate(*requests);
      ASSERT_EQ(out.size(), plain.size());
      for (size_t r = 0; r < plain.size(); ++r) {
        EXPECT_EQ(out[r].tokens, plain[r].tokens) << "request " << r;
        EXPECT_EQ(out[r].finish, plain[r].finish);
      }
      EXPECT_GT(decoder.stats().verifySteps, 0);
      EXPECT_EQ(decoder.stats().acceptHistogram.size(), static_cast<size_t>(W) + 1);
    }
  }
  std::filesystem::remove_all(draftDir);
}

}  // namespace
}  // namespace es::runtime
