// The target model on the CPU backend against transformers (fixtures made on the GPU machine by
// tools/make_fixtures.py: float32 references from the same bf16-rounded weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/safetensors.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "support/decode_batch.h"
#include "support/logit_checks.h"
#include "support/test_util.h"

namespace es::model {
namespace {

// fp32 end to end with a different summation order than torch: agreement to ~1e-5 relative is
// expected; this bound leaves a margin of ten.
constexpr double kLogitTolerance = 2e-4;

struct Fixture {
  std::string dir;
  nlohmann::json meta;
  SafetensorsFile reference;
};

Fixture loadFixture(const std::string& family) {
  const std::string dir = test::test_data_dir() + "/models/" + family;
  std::ifstream f(dir + "/reference.json");
  return {dir, nlohmann::json::parse(f), SafetensorsFile::open(dir + "/reference.safetensors")};
}

std::vector<float> referenceRows(const Fixture& fx, const std::string& name) {
  const TensorView v = fx.reference.view(name);
  const float* p = v.as<float>();
  return std::vector<float>(p, p + v.numel());
}

using test::argmaxOf;
using test::maxError;  // max |a - b| / (1 + |b|) over a range

kv::KvCacheConfig cacheFor(const TargetModel& m, int32_t batch, int32_t seq) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = seq;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  return c;
}

class TargetModelCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(TargetModelCpu, RaggedPrefillDecodeAndVerifyMatchTransformers) {
  const Fixture fx = loadFixture(GetParam());
  auto backend = ops::makeCpuBackend();
  TargetModel model(fx.dir, *backend, 320, {0, 1});
  ASSERT_EQ(model.config().num_hidden_layers, 2);
  const int64_t V = model.config().vocab_size, H = model.config().hidden_size;
  kv::KvCacheManager cache(cacheFor(model, 2, 512), MemorySpace::kHost);
  const int32_t s0 = cache.admit(), s1 = cache.admit();

  // Ragged prefill of prompts a (slot 0) and b (slot 1) in one forward.
  const std::vector<int32_t> a = fx.meta["prompts"]["a"], b = fx.meta["prompts"]["b"];
  const int32_t La = static_cast<int32_t>(a.size()), Lb = static_cast<int32_t>(b.size());
  ForwardBatch prefill;
  for (int32_t i = 0; i < La; ++i) {
    prefill.tokens.push_back(a[i]);
    prefill.positions.push_back(i);
    prefill.tokenToSequence.push_back(s0);
  }
  for (int32_t i = 0; i < Lb; ++i) {
    prefill.tokens.push_back(b[i]);
    prefill.positions.push_back(i);
    prefill.tokenToSequence.push_back(s1);
  }
  prefill.cuQSeqLens = {0, La, La + Lb};
  prefill.kvLengths = {La, Lb};
  for (int32_t r = 0; r < La + Lb; ++r) prefill.logitRows.push_back(r);
  const ForwardResult out = model.forward(prefill, cache);
  cache.commitBase(s0, La);
  cache.commitBase(s1, Lb);

  const std::vector<float> logitsA = referenceRows(fx, "logits_a"),
                           logitsB = referenceRows(fx, "logits_b");
  EXPECT_LT(maxError(out.logits.data(), logitsA.data(), La * V), kLogitTolerance);
  EXPECT_LT(maxError(out.logits.data() + La * V, logitsB.data(), Lb * V), kLogitTolerance);
  // Taps: [layer, row, H] against the per-layer outputs of transformers.
  const std::vector<float> tapsA = referenceRows(fx, "taps_a"), tapsB = referenceRows(fx, "taps_b");
  const int64_t T = La + Lb;
  for (int64_t l = 0; l < 2; ++l) {
    EXPECT_LT(maxError(out.taps.data() + l * T * H, tapsA.data() + l * La * H, La * H),
              kLogitTolerance)
        << "layer " << l;
    EXPECT_LT(maxError(out.taps.data() + l * T * H + La * H, tapsB.data() + l * Lb * H, Lb * H),
              kLogitTolerance)
        << "layer " << l;
  }

  // Greedy decode of both sequences together, one token each per step.
  const std::vector<int32_t> greedyA = fx.meta["greedy"]["a"], greedyB = fx.meta["greedy"]["b"];
  const std::vector<float> stepA = referenceRows(fx, "greedy_logits_a"),
                           stepB = referenceRows(fx, "greedy_logits_b");
  int32_t nextA = argmaxOf(out.logits.data() + (La - 1) * V, V);
  int32_t nextB = argmaxOf(out.logits.data() + (La + Lb - 1) * V, V);
  const int32_t steps = fx.meta["steps"];
  for (int32_t s = 0; s < steps; ++s) {
    ASSERT_EQ(nextA, greedyA[s]) << "step " << s;
    ASSERT_EQ(nextB, greedyB[s]) << "step " << s;
    if (s + 1 == steps) break;
    const ForwardResult r =
        model.forward(test::decodeBatch(cache, {s0, s1}, {nextA, nextB}), cache);
    cache.commitBase(s0, 1);
    cache.commitBase(s1, 1);
    EXPECT_LT(maxError(r.logits.data(), stepA.data() + (s + 1) * V, V), kLogitTolerance)
        << "step " << s;
    EXPECT_LT(maxError(r.logits.data() + V, stepB.data() + (s + 1) * V, V), kLogitTolerance)
        << "step " << s;
    nextA = argmaxOf(r.logits.data(), V);
    nextB = argmaxOf(r.logits.data() + V, V);
  }
}

TEST_P(TargetModelCpu, VerifyBlockEqualsDecodeStepsCausalAndTreeMask) {
  const Fixture fx = loadFixture(GetParam());
  auto backend = ops::makeCpuBackend();
  TargetModel model(fx.dir, *backend, 320);
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> a = fx.meta["prompts"]["a"], greedyA = fx.meta["greedy"]["a"];
  const std::vector<float> stepA = referenceRows(fx, "greedy_logits_a");
  const int32_t La = static_cast<int32_t>(a.size()), S = static_cast<int32_t>(greedyA.size()) - 1;
  for (auto mask : {kernel::AttentionMask::kCausal, kernel::AttentionMask::kPackedTree}) {
    kv::KvCacheManager cache(cacheFor(model, 1, 256), MemorySpace::kHost);
    const int32_t slot = cache.admit();
    ForwardBatch prefill;
    for (int32_t i = 0; i < La; ++i) {
      prefill.tokens.push_back(a[i]);
      prefill.positions.push_back(i);
      prefill.tokenToSequence.push_back(slot);
    }
    prefill.cuQSeqLens = {0, La};
    prefill.kvLengths = {La};
    model.forward(prefill, cache);
    cache.commitBase(slot, La);
    // Verify S greedy tokens at once: row i must give the logits of decode step i + 1.
    ForwardBatch verify;
    for (int32_t i = 0; i < S; ++i) {
      verify.tokens.push_back(greedyA[i]);
      verify.positions.push_back(La + i);
      verify.tokenToSequence.push_back(slot);
      verify.logitRows.push_back(i);
      verify.packedMask.push_back(static_cast<int32_t>((1u << (i + 1)) - 1u));  // causal as a tree
    }
    verify.cuQSeqLens = {0, S};
    verify.kvLengths = {La + S};
    verify.mask = mask;
    if (mask != kernel::AttentionMask::kPackedTree) verify.packedMask.clear();
    const ForwardResult r = model.forward(verify, cache);
    for (int32_t i = 0; i < S; ++i) {
      EXPECT_LT(maxError(r.logits.data() + i * V, stepA.data() + (i + 1) * V, V), kLogitTolerance)
          << "verify row " << i;
      EXPECT_EQ(argmaxOf(r.logits.data() + i * V, V), greedyA[i + 1]);
    }
  }
}

TEST_P(TargetModelCpu, ThreePagePrefill) {
  const Fixture fx = loadFixture(GetParam());
  auto backend = ops::makeCpuBackend();
  TargetModel model(fx.dir, *backend, 320);
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> prompt = fx.meta["prompts"]["long"];
  const int32_t L = static_cast<int32_t>(prompt.size());
  ASSERT_GT(L, 2 * kv::kTokensPerPage);
  kv::KvCacheManager cache(cacheFor(model, 2, 512), MemorySpace::kHost);
  cache.admit();
  const int32_t slot = cache.admit();  // slot 1: pages 4..7, not the first ones
  ForwardBatch prefill;
  for (int32_t i = 0; i < L; ++i) {
    prefill.tokens.push_back(prompt[i]);
    prefill.positions.push_back(i);
    prefill.tokenToSequence.push_back(slot);
  }
  // Batch entry b is page-table row b: row 0 takes part with no rows and no keys.
  prefill.cuQSeqLens = {0, 0, L};
  prefill.kvLengths = {0, L};
  prefill.logitRows = {L - 1};
  const ForwardResult r = model.forward(prefill, cache);
  const std::vector<float> want = referenceRows(fx, "logits_long_last");
  EXPECT_LT(maxError(r.logits.data(), want.data(), V), kLogitTolerance);
}

TEST(TargetModel, BadInputIsAClearError) {
  auto backend = ops::makeCpuBackend();
  TargetModel model(test::test_data_dir() + "/models/qwen3", *backend, 16);
  kv::KvCacheManager cache(cacheFor(model, 1, 128), MemorySpace::kHost);
  cache.admit();
  ForwardBatch b;
  b.tokens = {1, 999999};
  b.positions = {0, 1};
  b.tokenToSequence = {0, 0};
  b.cuQSeqLens = {0, 2};
  b.kvLengths = {2};
  test::expectInvalidArgument([&] { model.forward(b, cache); }, "token");
  b.tokens = {1, 2};
  b.positions = {0, 5000};
  test::expectInvalidArgument([&] { model.forward(b, cache); }, "position");
  b.positions = {0, 1};
  b.logitRows = {2};
  test::expectInvalidArgument([&] { model.forward(b, cache); }, "logitRows");
  test::expectInvalidArgument(
      [&] { TargetModel(test::test_data_dir() + "/models/qwen3", *backend, 0); }, "maxTokens");
  b.logitRows.assign(17, 0);  // more rows than the workspace holds (maxTokens 16)
  test::expectInvalidArgument([&] { model.forward(b, cache); }, "logitRows.size()");
}

// maxLogitRows bounds the logit rows (and their buffer) below maxTokens: the same logits for the
// rows asked, more rows refused by name, a smaller workspace, and a bad bound refused.
TEST(TargetModel, MaxLogitRowsBoundsTheLogitsOnly) {
  auto backend = ops::makeCpuBackend();
  const std::string dir = test::test_data_dir() + "/models/qwen3";
  TargetModel full(dir, *backend, 16);
  TargetModel narrow(dir, *backend, 16, {}, 2);
  EXPECT_EQ(full.maxLogitRows(), 16);
  EXPECT_EQ(narrow.maxLogitRows(), 2);
  EXPECT_LT(narrow.workspaceBytes(), full.workspaceBytes());
  ForwardBatch b;
  b.tokens = {5, 9, 13, 2, 7, 11, 3, 8, 1, 4};  // ten rows in one forward, logits for two
  for (int32_t i = 0; i < 10; ++i) {
    b.positions.push_back(i);
    b.tokenToSequence.push_back(0);
  }
  b.cuQSeqLens = {0, 10};
  b.kvLengths = {10};
  b.logitRows = {4, 9};
  std::vector<float> want, got;
  for (TargetModel* m : {&full, &narrow}) {
    kv::KvCacheManager cache(cacheFor(*m, 1, 128), MemorySpace::kHost);
    cache.admit();
    (m == &full ? want : got) = m->forward(b, cache).logits;
  }
  ASSERT_EQ(got.size(), 2u * full.config().vocab_size);
  EXPECT_EQ(got, want);
  kv::KvCacheManager cache(cacheFor(narrow, 1, 128), MemorySpace::kHost);
  cache.admit();
  b.logitRows = {1, 4, 9};
  test::expectInvalidArgument([&] { narrow.forward(b, cache); }, "logitRows.size()");
  test::expectInvalidArgument([&] { TargetModel(dir, *backend, 16, {}, 17); }, "maxLogitRows");
  test::expectInvalidArgument([&] { TargetModel(dir, *backend, 16, {}, -1); }, "maxLogitRows");
}

// On the CPU (f32 compute) a bf16 checkpoint's layer matrices stay bf16 (kernels/linear.h
// weightDtype); everything else is widened to f32. The logits tests above then run that path.
TEST(TargetModel, CpuKeepsBf16LayerMatricesInBf16) {
  const std::string dir = test::test_data_dir() + "/models/qwen3";
  const SafetensorsFile weights = SafetensorsFile::open(dir + "/model.safetensors");
  int64_t want = 0, matrixElements = 0;
  for (const TensorInfo& t : weights.tensors()) {
    ASSERT_EQ(t.dtype, DType::kBF16) << t.name;
    const bool matrix = t.name.find("_proj.weight") != std::string::npos;
    want += t.numel() * (matrix ? 2 : 4);
    if (matrix) matrixElements += t.numel();
  }
  ASSERT_GT(matrixElements, 0);
  auto backend = ops::makeCpuBackend();
  TargetModel model(dir, *backend, 16);
  EXPECT_EQ(model.weightBytes(), want) << "all f32 would be " << want + 2 * matrixElements;
}

TEST(TargetModel, CheckpointNotMatchingItsConfigIsAFormatError) {
  // The fixture's weights with a config that claims a third layer.
  const std::filesystem::path src = test::test_data_dir() + "/models/qwen3";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "es_three_layer_qwen3";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src / "model.safetensors", dir / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(src / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["num_hidden_layers"] = 3;
  config["layer_types"].push_back("full_attention");
  std::ofstream(dir / "config.json") << config.dump();
  auto backend = ops::makeCpuBackend();
  try {
    TargetModel model(dir, *backend, 16);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2."), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(TargetModel, SlidingWindowLayersMaskOldKeys) {
  // The qwen3 fixture with layer 0 marked sliding over 8 tokens: rows whose window still covers
  // the whole prefix are unchanged, later rows change; storage at full capacity here (the mask
  // alone; the bounded window pool is test_sliding_window_model's).
  const std::filesystem::path src = test::test_data_dir() + "/models/qwen3";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "es_sliding_qwen3";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src / "model.safetensors", dir / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(src / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["layer_types"] = {"sliding_attention", "full_attention"};
  config["sliding_window"] = 8;
  config["use_sliding_window"] = true;
  std::ofstream(dir / "config.json") << config.dump();
  auto backend = ops::makeCpuBackend();
  TargetModel full(src, *backend, 32), sliding(dir, *backend, 32);
  const std::vector<kv::KvLayerShape> shapes = sliding.kvLayerShapes();
  ASSERT_EQ(shapes.size(), 2u);
  for (const kv::KvLayerShape& l : shapes) EXPECT_EQ(l.kvCacheCapacity, 0);
  EXPECT_EQ(shapes[0].slidingWindow, 8);
  EXPECT_EQ(shapes[1].slidingWindow, 0);
  const Fixture fx = loadFixture("qwen3");
  const std::vector<int32_t> a = fx.meta["prompts"]["a"];
  auto logits = [&](TargetModel& m) {
    kv::KvCacheConfig config = cacheFor(m, 1, 128);
    config.slidingWindowStorage = kv::SlidingWindowStorage::kFullCapacity;
    kv::KvCacheManager cache(config, MemorySpace::kHost);
    cache.admit();
    ForwardBatch b;
    for (int32_t i = 0; i < 20; ++i) {
      b.tokens.push_back(a[i]);
      b.positions.push_back(i);
      b.tokenToSequence.push_back(0);
      b.logitRows.push_back(i);
    }
    b.cuQSeqLens = {0, 20};
    b.kvLengths = {20};
    return m.forward(b, cache).logits;
  };
  const std::vector<float> f = logits(full), w = logits(sliding);
  const int64_t V = full.config().vocab_size;
  for (int64_t row = 0; row < 20; ++row) {
    const double err = maxError(w.data() + row * V, f.data() + row * V, V);
    if (row < 8) {
      EXPECT_LT(err, 1e-6) << "row " << row << " sees its whole prefix in the window";
    } else {
      EXPECT_GT(err, 1e-4) << "row " << row << " must lose its oldest keys";
    }
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, TargetModelCpu, ::testing::Values("qwen3", "llama", "qwen2"));

}  // namespace
}  // namespace es::model
