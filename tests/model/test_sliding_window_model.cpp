// A tiny sliding-window Qwen3 (layers [full, sliding, sliding], window 160 < prompts of 600 and
// 390 tokens) with its sliding layers in the bounded window pool, on the CPU backend, against
// transformers (tests/data/models/qwen3_swa, made by tools/sliding_window_fixture.py: float32
// from the same bf16-rounded weights, eager attention). The scenario is shared with
// test_sliding_window_model_gpu (model/sliding_window_scenario.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/sliding_window_scenario.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "support/logit_checks.h"
#include "support/test_util.h"

namespace es::model {
namespace {

// fp32 end to end with a different summation order than torch (the reference attention sums in
// double): agreement to ~1e-5 relative is expected, as for the other fixtures
// (test_target_model); this bound leaves a margin of ten. The window itself moves row 599's
// logits by up to 0.32 (maxError 0.31 against logits_a_full), three orders of magnitude above it.
constexpr double kLogitTolerance = 2e-4;

TEST(SlidingWindowModel, BoundedWindowPoolMatchesTransformers) {
  auto backend = ops::makeCpuBackend();
  swa::Fixture fx(*backend, 512);
  const swa::ScenarioRun run = swa::runBounded(fx, swa::kHostF32);
  swa::forEachReferenceRow(
      fx, run, [](const std::string& what, const float* got, const float* want, int64_t V) {
        EXPECT_LT(test::maxError(got, want, V), kLogitTolerance) << what;
      });
  // The window matters: full attention everywhere gives other logits for row 599.
  const std::vector<float> full = fx.rows("logits_a_full");
  EXPECT_GT(test::maxError(run.lastPromptRowA(), full.data(), run.vocab), 100 * kLogitTolerance);
}

TEST(SlidingWindowModel, BoundedAndFullCapacityStorageGiveIdenticalLogits) {
  auto backend = ops::makeCpuBackend();
  // The CPU reference reads the same keys in the same order through either table: bit for bit.
  const auto [bounded, full] = swa::runBoundedAndFullCapacity(*backend, swa::kHostF32, 40);
  swa::expectIdenticalLogits(bounded, full);
}

TEST(SlidingWindowModel, ForwardWithoutAStepIsRefused) {
  auto backend = ops::makeCpuBackend();
  TargetModel model(swa::fixtureDir(), *backend, 64);
  kv::KvCacheManager cache(swa::cacheFor(model, kv::SlidingWindowStorage::kBounded, DType::kF32),
                           MemorySpace::kHost);
  const int32_t s = cache.admit();
  ForwardBatch f;
  for (int32_t i = 0; i < 10; ++i) {
    f.tokens.push_back(i);
    f.positions.push_back(i);
    f.tokenToSequence.push_back(s);
  }
  f.cuQSeqLens = {0, 10};
  f.kvLengths = {10};
  // No beginStep: the window pages are unbound, the kernels would silently see no keys.
  test::expectInvalidArgument([&] { model.forward(f, cache); }, "slot");
  // A cache planned for another window than the model's is refused by name.
  kv::KvCacheConfig other = swa::cacheFor(model, kv::SlidingWindowStorage::kBounded, DType::kF32);
  for (kv::KvLayerShape& l : other.baseLayers) l.slidingWindow = l.slidingWindow ? 256 : 0;
  kv::KvCacheManager wrong(other, MemorySpace::kHost);
  wrong.admit();
  const kv::SwaStepWrite w{0, 10};
  wrong.beginStep({&w, 1});
  test::expectInvalidArgument([&] { model.forward(f, wrong); }, "cache layer 1 window");
}

}  // namespace
}  // namespace es::model
