// Non-finite logits through the decode engine on the CUDA backend (bf16, CUDA graphs): the
// request they happen to ends with FinishReason::kError and a message naming the generated token
// and position, the others go on; greedy and sampled, plain and speculative (replay draft).
//
// As on the CPU (test_non_finite_logits.cpp), the qwen3 fixture with the embedding row of a
// token X set to +inf: request a generates X and fails at the next token, request b ends its
// prompt with X and fails at its first token, request c never meets X. The GPU's bf16 numerics
// may move a near-tie when the batch changes, so in the batch a's and c's tokens are checked by
// what they must hold rather than token for token.
//
// Speculative decoding on the GPU: the verify's tensor-core attention multiplies the V rows of
// keys masked for a row (later rows of the same block) by p = 0, and 0 * NaN is NaN, so a drafted
// X makes the earlier rows of its block non-finite too: the request fails at that block's first
// row, before X, whenever X is drafted (rightly or not). (The CPU reference attends only to
// visible keys: there a wrong draft X changes nothing and the request fails exactly after X.)
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/replay_proposer.h"
#include "support/poisoned_model.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

struct Variant {
  SamplingConfig sampling;
  int32_t blockSize;  // 0: plain decoding; else the replay draft (a fifth of its drafts wrong)
};

std::vector<GenerationResult> generate(const std::string& modelDir, const Variant& v,
                                       const std::vector<GenerationRequest>& requests,
                                       const std::vector<std::vector<int32_t>>& recordings) {
  auto backend = ops::makeCudaBackend();
  model::TargetModel target(modelDir, *backend, 64);
  const int32_t n = static_cast<int32_t>(requests.size());
  kv::KvCacheConfig c;
  c.maxBatchSize = n;
  c.maxSequenceLength = 256;
  c.dtype = DType::kBF16;
  c.baseLayers = target.kvLayerShapes();
  kv::KvCacheManager cache(c, MemorySpace::kDevice);
  std::unique_ptr<ReplayProposer> proposer;
  if (v.blockSize > 0) {
    proposer =
        std::make_unique<ReplayProposer>(*backend, v.blockSize, n, recordings,
                                         static_cast<int32_t>(target.config().vocab_size), 0.2f);
  }
  DecodeEngine decoder(target, cache, proposer.get());
  std::vector<std::vector<int32_t>> streamed(requests.size());
  std::vector<GenerationResult> out =
      decoder.generate(requests, [&](int32_t r, int32_t t) { streamed[r].push_back(t); });
  for (size_t r = 0; r < out.size(); ++r) EXPECT_EQ(streamed[r], out[r].tokens) << "request " << r;
  EXPECT_EQ(cache.activeCount(), 0);
  return out;
}

std::string expectedError(size_t index, size_t promptLength) {
  return "the target model's logits are not finite (NaN or inf) at generated token " +
         std::to_string(index) + " (position " + std::to_string(promptLength + index) +
         "); the model weights or activations overflowed";
}

bool has(const std::vector<int32_t>& s, int32_t t) {
  return std::find(s.begin(), s.end(), t) != s.end();
}

void checkVariant(const Variant& v) {
  std::mt19937 rng(42);
  auto prompt = [&](size_t n) { return test::randomInts(rng, n, 0, 383); };
  GenerationRequest a{prompt(11), 24, {}, v.sampling};
  GenerationRequest c{prompt(9), 24, {}, v.sampling};
  const std::string clean = test::PoisonedModel::fixtureDir();
  std::vector<std::vector<int32_t>> recordings;
  for (const GenerationRequest& q : {a, c}) {
    std::vector<int32_t> rec = q.prompt;
    const std::vector<int32_t> t = generate(clean, {v.sampling, 0}, {q}, {})[0].tokens;
    rec.insert(rec.end(), t.begin(), t.end());
    recordings.push_back(rec);
  }
  const std::vector<int32_t> truthA = generate(clean, v, {a}, {recordings[0]})[0].tokens;
  const std::vector<int32_t> truthC = generate(clean, v, {c}, {recordings[1]})[0].tokens;
  ASSERT_EQ(truthA.size(), 24u);
  size_t k = 2;
  for (; k < truthA.size(); ++k) {
    const int32_t x = truthA[k];
    if (!has(a.prompt, x) && !has({truthA.begin(), truthA.begin() + k}, x) && !has(c.prompt, x) &&
        !has(truthC, x))
      break;
  }
  ASSERT_LT(k, truthA.size()) << "no suitable token in a's output";
  const int32_t x = truthA[k];
  GenerationRequest b = c;
  b.prompt.push_back(x);

  const test::PoisonedModel poisoned("model.embed_tokens.weight", x, test::kBf16Inf);
  const bool plain = v.blockSize == 0;
  // Alone, a is computed as in its clean run: its tokens through X, then the error (speculative:
  // possibly from X's verify block on, see above).
  {
    const GenerationResult alone = generate(poisoned.dir(), v, {a}, {recordings[0]})[0];
    const size_t n = alone.tokens.size();
    EXPECT_EQ(alone.finish, FinishReason::kError);
    EXPECT_EQ(alone.error, expectedError(n, a.prompt.size()));
    EXPECT_EQ(alone.tokens, std::vector<int32_t>(truthA.begin(), truthA.begin() + n));
    // Speculative: any block with X drafted in it (the true X, or a wrong or corrupted draft
    // earlier) may end it.
    if (plain) {
      EXPECT_EQ(n, k + 1);
    } else {
      EXPECT_LE(n, k + 1);
    }
  }
  const std::vector<GenerationResult> out =
      generate(poisoned.dir(), v, {a, b, c}, {recordings[0], recordings[1], recordings[1]});
  // a: fails right after its first X (speculative: or within X's verify block).
  EXPECT_EQ(out[0].finish, FinishReason::kError);
  EXPECT_EQ(out[0].error, expectedError(out[0].tokens.size(), a.prompt.size()));
  if (plain) {
    ASSERT_FALSE(out[0].tokens.empty());
    EXPECT_EQ(out[0].tokens.back(), x);
    EXPECT_FALSE(has({out[0].tokens.begin(), out[0].tokens.end() - 1}, x));
  }
  // b: no token at all.
  EXPECT_TRUE(out[1].tokens.empty());
  EXPECT_EQ(out[1].finish, FinishReason::kError);
  EXPECT_EQ(out[1].error, expectedError(0, b.prompt.size()));
  // c: never meets X, so no error (speculative: unless a wrong draft put X in its block).
  if (plain) {
    EXPECT_FALSE(has(out[2].tokens, x));
    EXPECT_NE(out[2].finish, FinishReason::kError);
    EXPECT_TRUE(out[2].error.empty());
  } else if (out[2].finish == FinishReason::kError) {
    EXPECT_EQ(out[2].error, expectedError(out[2].tokens.size(), c.prompt.size()));
  }
}

TEST(NonFiniteLogitsGpu, GreedyPlain) {
  ES_SKIP_IF_NO_GPU();
  checkVariant({{}, 0});
}

TEST(NonFiniteLogitsGpu, SampledPlain) {
  ES_SKIP_IF_NO_GPU();
  checkVariant({{0.9f, 0, 0.95f, 11}, 0});
}

TEST(NonFiniteLogitsGpu, GreedySpeculativeReplay) {
  ES_SKIP_IF_NO_GPU();
  checkVariant({{}, 4});
}

TEST(NonFiniteLogitsGpu, SampledSpeculativeReplay) {
  ES_SKIP_IF_NO_GPU();
  checkVariant({{0.9f, 40, 0.95f, 11}, 4});
}

// NaN in an lm_head row: every request fails at its first token, greedy or sampled.
TEST(NonFiniteLogitsGpu, NaNInTheLmHeadFailsEveryRequestAtItsFirstToken) {
  ES_SKIP_IF_NO_GPU();
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

}  // namespace
}  // namespace es::runtime
