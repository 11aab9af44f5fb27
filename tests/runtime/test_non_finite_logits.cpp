// A model whose logits go non-finite ends only the requests it happens to, with
// FinishReason::kError and a message naming the generated token and its position, keeping the
// tokens chosen before; the other requests of the batch are unaffected. On the CPU backend, for
// greedy and sampled decoding, plain and speculative (replay draft; DFlash draft, which shares
// the target's embeddings, so its proposals go non-finite too: they are only verified).
//
// The model is the qwen3 fixture with one embedding row set to +inf (token X): the row of an
// input X gets NaN activations (RMSNorm of inf), so the logits it gives are NaN, while sequences
// without X compute exactly what the clean model computes. Request a generates
// X after a few tokens (it fails at the next one), request b ends its prompt with X (it fails at
// its first token), request c never meets X.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "support/poisoned_model.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

// How a variant decodes: block size 0 is plain decoding, else the replay draft of that block
// size, replaying `recordings` with a fifth of its drafts wrong, or with `dflash` a random
// DFlash draft of block 4.
struct Variant {
  SamplingConfig sampling;
  int32_t blockSize;
  bool dflash = false;
};

// The random DFlash draft (block 4), written once per process and removed at its exit.
const std::filesystem::path& dflashDraftDir() {
  struct DraftDir {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 ("es_non_finite_draft_" + std::to_string(::getpid()));
    DraftDir() {
      model::test_draft::DraftSpec spec;
      spec.blockSize = 4;
      model::test_draft::writeDraft(path, spec);
    }
    ~DraftDir() { std::filesystem::remove_all(path); }
  };
  static const DraftDir dir;
  return dir.path;
}

std::vector<GenerationResult> generate(const std::string& modelDir, const Variant& v,
                                       const std::vector<GenerationRequest>& requests,
                                       const std::vector<std::vector<int32_t>>& recordings) {
  auto backend = ops::makeCpuBackend();
  std::vector<int32_t> taps;
  if (v.dflash) {
    taps =
        model::DFlashDraft::requiredTargetTaps(dflashDraftDir(), model::loadModelConfig(modelDir));
  }
  model::TargetModel target(modelDir, *backend, 32, taps);
  const int32_t n = static_cast<int32_t>(requests.size());
  std::unique_ptr<model::DFlashDraft> draft;
  if (v.dflash)
    draft = std::make_unique<model::DFlashDraft>(dflashDraftDir(), *backend, target, 64, n);
  kv::KvCacheConfig c;
  c.maxBatchSize = n;
  c.maxSequenceLength = 256;
  c.dtype = DType::kF32;
  c.baseLayers = target.kvLayerShapes();
  if (draft) c.draftLayers = draft->kvLayerShapes();
  kv::KvCacheManager cache(c, MemorySpace::kHost);
  std::unique_ptr<DraftProposer> proposer;
  if (draft) {
    proposer = std::make_unique<DFlashProposer>(*draft);
  } else if (v.blockSize > 0) {
    proposer =
        std::make_unique<ReplayProposer>(*backend, v.blockSize, n, recordings,
                                         static_cast<int32_t>(target.config().vocab_size), 0.2f);
  }
  DecodeEngine decoder(target, cache, proposer.get());
  std::vector<std::vector<int32_t>> streamed(requests.size());
  std::vector<GenerationResult> out =
      decoder.generate(requests, [&](int32_t r, int32_t t) { streamed[r].push_back(t); });
  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_EQ(streamed[r], out[r].tokens) << "request " << r << ": streamed what it returned";
  }
  EXPECT_EQ(cache.activeCount(), 0);
  return out;
}

std::string expectedError(size_t index, size_t promptLength) {
  return "the target model's logits are not finite (NaN or inf) at generated token " +
         std::to_string(index) + " (position " + std::to_string(promptLength + index) +
         "); the model weights or activations overflowed";
}

void checkVariant(const Variant& v) {
  std::mt19937 rng(42);
  auto prompt = [&](size_t n) { return test::randomInts(rng, n, 0, 383); };
  GenerationRequest a{prompt(11), 24, {}, v.sampling};
  GenerationRequest c{prompt(9), 24, {}, v.sampling};
  // Drafts replay a plain run of the clean model (greedy: the true continuation).
  std::vector<std::vector<int32_t>> recordings;
  const Variant plain{v.sampling, 0, false};
  for (const GenerationRequest& q : {a, c}) {
    std::vector<int32_t> rec = q.prompt;
    const std::vector<int32_t> t =
        generate(test::PoisonedModel::fixtureDir(), plain, {q}, {})[0].tokens;
    rec.insert(rec.end(), t.begin(), t.end());
    recordings.push_back(rec);
  }
  const std::vector<GenerationResult> clean =
      generate(test::PoisonedModel::fixtureDir(), v, {a, c}, {recordings[0], recordings[1]});
  const std::vector<int32_t>& truthA = clean[0].tokens;
  const std::vector<int32_t>& truthC = clean[1].tokens;
  ASSERT_EQ(truthA.size(), 24u);
  // X: a's first generated token from the third on that is new to a's prompt and output so far
  // and that c never meets.
  auto has = [](const std::vector<int32_t>& s, int32_t t) {
    return std::find(s.begin(), s.end(), t) != s.end();
  };
  size_t k = 2;
  for (; k < truthA.size(); ++k) {
    const int32_t x = truthA[k];
    if (!has(a.prompt, x) && !has({truthA.begin(), truthA.begin() + k}, x) && !has(c.prompt, x) &&
        !has(truthC, x))
      break;
  }
  ASSERT_LT(k, truthA.size()) << "no suitable token in a's output";
  const int32_t x = truthA[k];
  // X last: the row that chooses b's first token is X's own.
  GenerationRequest b = c;
  b.prompt.push_back(x);

  const test::PoisonedModel poisoned("model.embed_tokens.weight", x, test::kBf16Inf);
  const std::vector<GenerationResult> out =
      generate(poisoned.dir(), v, {a, b, c}, {recordings[0], recordings[1], recordings[1]});
  // a: its tokens through X, then the error at the token after X.
  EXPECT_EQ(out[0].tokens, std::vector<int32_t>(truthA.begin(), truthA.begin() + k + 1));
  EXPECT_EQ(out[0].finish, FinishReason::kError);
  EXPECT_EQ(out[0].error, expectedError(k + 1, a.prompt.size()));
  // b: X is in its prompt: no token at all.
  EXPECT_TRUE(out[1].tokens.empty());
  EXPECT_EQ(out[1].finish, FinishReason::kError);
  EXPECT_EQ(out[1].error, expectedError(0, b.prompt.size()));
  // c: as with the clean model.
  EXPECT_EQ(out[2].tokens, truthC);
  EXPECT_EQ(out[2].finish, clean[1].finish);
  EXPECT_TRUE(out[2].error.empty());
}

TEST(NonFiniteLogits, GreedyPlain) { checkVariant({{}, 0}); }

TEST(NonFiniteLogits, SampledPlain) { checkVariant({{0.9f, 0, 0.95f, 11}, 0}); }

TEST(NonFiniteLogits, GreedySpeculativeReplay) { checkVariant({{}, 4}); }

TEST(NonFiniteLogits, SampledSpeculativeReplay) { checkVariant({{0.9f, 40, 0.95f, 11}, 4}); }

TEST(NonFiniteLogits, GreedySpeculativeDFlash) { checkVariant({{}, 4, true}); }

TEST(NonFiniteLogits, SampledSpeculativeDFlash) { checkVariant({{0.9f, 40, 0.95f, 11}, 4, true}); }

// NaN in an lm_head row makes that logit NaN in every row: every request fails at its first
// token, greedy or sampled, and the engine serves the next call.
TEST(NonFiniteLogits, NaNInTheLmHeadFailsEveryRequestAtItsFirstToken) {
  const test::PoisonedModel poisoned("lm_head.weight", 7, test::kBf16NaN);
  const GenerationRequest greedy{{3, 1, 4, 1, 5}, 8, {}, {}};
  const GenerationRequest sampled{{9, 2, 6}, 8, {}, {1.0f, 0, 1.0f, 5}};
  for (int32_t blockSize : {0, 4}) {
    const std::vector<GenerationResult> out =
        generate(poisoned.dir(), {{}, blockSize}, {greedy, sampled},
                 {{3, 1, 4, 1, 5, 6, 7, 8}, {9, 2, 6, 1, 2, 3}});
    ASSERT_EQ(out.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_TRUE(out[r].tokens.empty()) << "request " << r;
      EXPECT_EQ(out[r].finish, FinishReason::kError) << "request " << r;
    }
    EXPECT_EQ(out[0].error, expectedError(0, 5));
    EXPECT_EQ(out[1].error, expectedError(0, 3));
  }
}

TEST(NonFiniteLogits, FinishReasonNames) {
  EXPECT_STREQ(finishReasonName(FinishReason::kStop), "stop");
  EXPECT_STREQ(finishReasonName(FinishReason::kLength), "length");
  EXPECT_STREQ(finishReasonName(FinishReason::kError), "error");
}

}  // namespace
}  // namespace es::runtime
