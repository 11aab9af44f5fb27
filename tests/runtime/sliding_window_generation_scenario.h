#pragma once
// Generation far past the window with the sliding layers in the bounded window pool,
// through the DecodeEngine, shared by test_sliding_window_generation (CPU backend, f32 KV) and
// test_sliding_window_generation_gpu (CUDA backend, bf16 KV): the window pool's use stays flat
// while the dense pool's grows, and the tokens equal those of the same model with every layer
// stored at full capacity (the window then only a mask), for plain decoding and for speculative
// verify steps. Requests are sampled (seeded, request-stable): this random model's greedy output
// repeats one token, which would hardly depend on the context; sampled tokens vary. Token
// equality rests on logits that are bit-identical between the two layouts on the backend
// (test_sliding_window_model[_gpu] checks it; both test files say why it holds).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/sliding_window_scenario.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/replay_proposer.h"

namespace es::runtime::swa {

using model::swa::cacheFor;
using model::swa::fixtureDir;
using model::swa::kPrivatePages;  // 2 * (ceil(160/128) + 1) + 1
using model::swa::KvStorage;

struct Usage {
  int32_t maxBound = 0;       // most window pages bound in one slot
  int32_t maxOwned = 0;       // most window pages one slot owned (bound + pending + reserved)
  int32_t maxDensePages = 0;  // most dense pages one slot's committed length reaches
  int64_t observations = 0;
};

// Watches the window pool after every token the engine streams.
inline TokenCallback watch(const kv::KvCacheManager& cache, Usage& u) {
  return [&cache, &u](int32_t, int32_t) {
    const kv::SwaPageManager* w = cache.swaPages();
    for (int32_t s = 0; s < cache.activeCount(); ++s) {
      if (w) {
        EXPECT_EQ(w->boundPages(s) + w->pendingPages(s) + w->reservedPages(s), kPrivatePages);
        u.maxBound = std::max(u.maxBound, w->boundPages(s));
        u.maxOwned = std::max(u.maxOwned, static_cast<int32_t>(w->ownedPages(s).size()));
      }
      u.maxDensePages = std::max(u.maxDensePages, (cache.baseLength(s) + 127) / 128);
    }
    ++u.observations;
  };
}

inline std::vector<GenerationRequest> requests() {
  std::ifstream in(fixtureDir() + "/reference.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  // Prompt a (600 tokens) decodes 260 more, prompt b (390) 300 more: both end far past the
  // window, with different budgets so the batch compacts midway.
  return {GenerationRequest{
              meta["prompts"]["a"].get<std::vector<int32_t>>(), 260, {}, {1.0f, 0, 0.95f, 11}},
          GenerationRequest{
              meta["prompts"]["b"].get<std::vector<int32_t>>(), 300, {}, {0.9f, 40, 1.0f, 12}}};
}

// Plain decoding with the bounded window pool against full capacity, KV in `kv`.
inline void plainDecodingPastTheWindow(ops::Backend& backend, KvStorage kv) {
  // Prefill chunks of 256 rows: prompt a takes three, each bounded by the slot's reservation
  // (which, at 7 private pages, never cuts a chunk below 256: both layouts prefill alike).
  model::TargetModel target(fixtureDir(), backend, 256);
  const std::vector<GenerationRequest> reqs = requests();

  kv::KvCacheManager full(cacheFor(target, kv::SlidingWindowStorage::kFullCapacity, kv.dtype),
                          kv.space);
  ASSERT_EQ(full.swaPages(), nullptr);
  const std::vector<GenerationResult> want = DecodeEngine(target, full).generate(reqs);

  kv::KvCacheManager bounded(cacheFor(target, kv::SlidingWindowStorage::kBounded, kv.dtype),
                             kv.space);
  ASSERT_NE(bounded.swaPages(), nullptr);
  Usage u;
  DecodeEngine decoder(target, bounded);
  const std::vector<GenerationResult> got = decoder.generate(reqs, watch(bounded, u));
  ASSERT_EQ(got.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].tokens, want[r].tokens) << "request " << r;
    EXPECT_EQ(got[r].tokens.size(), static_cast<size_t>(reqs[r].maxNewTokens));
  }
  // Sampled outputs that vary (a sanity check of the premise above).
  for (const GenerationResult& r : got) {
    EXPECT_GT(std::set<int32_t>(r.tokens.begin(), r.tokens.end()).size(), 50u);
  }

  // Flat: every slot owns its 7 private pages and binds at most ceil(160/128) + 1 (+1 while a
  // step enters a new page); the dense pool reached 6 and 6 pages (689 tokens).
  EXPECT_GT(u.observations, 500);
  EXPECT_EQ(u.maxOwned, kPrivatePages);
  EXPECT_LE(u.maxBound, 3);
  EXPECT_GE(u.maxDensePages, 6);
  EXPECT_EQ(decoder.stats().prefillRows, 990);
  // The engine retired both slots and completed every step: the pool is whole again.
  EXPECT_EQ(bounded.activeCount(), 0);
  EXPECT_EQ(bounded.swaPages()->freePoolPages(), bounded.plan().numSwaPages);
  EXPECT_EQ(bounded.lastCompletedStep(), bounded.lastIssuedStep());
}

// Speculative decoding (replay drafts, verify steps of 8 rows) with the bounded window pool
// against full capacity, KV in `kv`.
inline void speculativeVerifyStepsPastTheWindow(ops::Backend& backend, KvStorage kv) {
  model::TargetModel target(fixtureDir(), backend, 256);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  std::vector<GenerationRequest> reqs = requests();
  // Sharper sampling than the plain test's, so that replayed drafts are accepted now and then.
  for (GenerationRequest& q : reqs) {
    q.maxNewTokens = 200;
    q.sampling.temperature = 0.4f;
  }

  // Drafts: the plain run's own tokens, 30% corrupted, so verify steps of 8 rows accept partially
  // (rows past the committed length are scratch in the window pages too).
  std::vector<std::vector<int32_t>> recordings;
  {
    kv::KvCacheManager full(cacheFor(target, kv::SlidingWindowStorage::kFullCapacity, kv.dtype),
                            kv.space);
    const std::vector<GenerationResult> plain = DecodeEngine(target, full).generate(reqs);
    for (size_t r = 0; r < reqs.size(); ++r) {
      recordings.push_back(reqs[r].prompt);
      recordings.back().insert(recordings.back().end(), plain[r].tokens.begin(),
                               plain[r].tokens.end());
    }
  }
  auto speculate = [&](kv::SlidingWindowStorage storage, Usage& u, SpeculationStats& stats) {
    kv::KvCacheManager cache(cacheFor(target, storage, kv.dtype), kv.space);
    ReplayProposer proposer(backend, 8, 2, recordings, V, 0.3f);
    DecodeEngine decoder(target, cache, &proposer);
    std::vector<GenerationResult> out = decoder.generate(reqs, watch(cache, u));
    stats = decoder.stats();
    return out;
  };
  Usage fullUse, boundedUse;
  SpeculationStats fullStats, boundedStats;
  const std::vector<GenerationResult> want =
      speculate(kv::SlidingWindowStorage::kFullCapacity, fullUse, fullStats);
  const std::vector<GenerationResult> got =
      speculate(kv::SlidingWindowStorage::kBounded, boundedUse, boundedStats);
  for (size_t r = 0; r < reqs.size(); ++r) {
    EXPECT_EQ(got[r].tokens, want[r].tokens) << "request " << r;
    EXPECT_EQ(got[r].tokens.size(), 200u);
  }
  EXPECT_EQ(boundedStats.acceptHistogram, fullStats.acceptHistogram);
  for (const GenerationResult& r : got) {
    EXPECT_GT(std::set<int32_t>(r.tokens.begin(), r.tokens.end()).size(),
              8u);  // (about 15 on the CPU)
  }
  EXPECT_GT(boundedStats.meanAcceptLength(), 1.0);  // some multi-token accepts (about 1.05) ...
  EXPECT_LT(boundedStats.meanAcceptLength(), 7.5);  // ... and some rejections
  EXPECT_EQ(boundedUse.maxOwned, kPrivatePages);
  EXPECT_LE(boundedUse.maxBound, 3);
}

}  // namespace es::runtime::swa
