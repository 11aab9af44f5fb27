// Generation far past the window with the sliding layers in the bounded window pool,
// through the DecodeEngine on the CPU backend: the window pool's use stays flat while the dense
// pool's grows, and the tokens equal those of the same model with every layer stored at full
// capacity, for plain decoding and for speculative verify steps (the scenario, shared with
// test_sliding_window_generation_gpu: runtime/sliding_window_generation_scenario.h). The CPU
// backend's logits are bit-identical between the two layouts (test_sliding_window_model), so the
// sampled tokens must be too.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/sliding_window_generation_scenario.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

TEST(SlidingWindowGeneration, PlainDecodingPastTheWindowKeepsTheWindowPoolFlat) {
  auto backend = ops::makeCpuBackend();
  swa::plainDecodingPastTheWindow(*backend, model::swa::kHostF32);
}

TEST(SlidingWindowGeneration, SpeculativeVerifyStepsPastTheWindowMatchFullCapacity) {
  auto backend = ops::makeCpuBackend();
  swa::speculativeVerifyStepsPastTheWindow(*backend, model::swa::kHostF32);
}

TEST(SlidingWindowGeneration, AFailedCallLeavesTheWindowPoolWhole) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(swa::fixtureDir(), *backend, 256);
  kv::KvCacheManager bounded(swa::cacheFor(target, kv::SlidingWindowStorage::kBounded, DType::kF32),
                             MemorySpace::kHost);
  DecodeEngine decoder(target, bounded);
  std::vector<GenerationRequest> reqs = swa::requests();
  int32_t seen = 0;
  EXPECT_THROW(decoder.generate(reqs,
                                [&](int32_t, int32_t) {
                                  if (++seen == 50) throw std::runtime_error("callback failure");
                                }),
               std::runtime_error);
  EXPECT_EQ(bounded.activeCount(), 0);
  EXPECT_EQ(bounded.swaPages()->freePoolPages(), bounded.plan().numSwaPages);
  // The engine and its cache serve the next call.
  for (GenerationRequest& q : reqs) q.maxNewTokens = 5;
  EXPECT_EQ(decoder.generate(reqs).size(), 2u);
}

}  // namespace
}  // namespace es::runtime
