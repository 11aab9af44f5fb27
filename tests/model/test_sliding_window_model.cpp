// A tiny sliding-window Qwen3 (layers [full, sliding, sliding], window 160 < prompts of 600 and
// 390 tokens) with its sliding layers in the bounded window pool, on the CPU backend, against
// transformers (tests/data/models/qwen3_swa, made by tools/sliding_window_fixture.py: float32
// from the same bf16-rounded weights, eager attention).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/safetensors.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "support/test_util.h"

namespace es::model {
namespace {

// fp32 end to end with a different summation order than torch (the reference attention sums in
// double): agreement to ~1e-5 relative is expected, as for the other fixtures
// (test_target_model); this bound leaves a margin of ten. The window itself moves row 599's
// logits by ~2 (logits_a_full), four orders of magnitude above it.
constexpr double kLogitTolerance = 2e-4;
constexpr int32_t kWindow = 160;

std::string fixtureDir() { return test::test_data_dir() + "/models/qwen3_swa"; }

std::vector<float> referenceRows(const SafetensorsFile& f, const std::string& name) {
  const TensorView v = f.view(name);
  return std::vector<float>(v.as<float>(), v.as<float>() + v.numel());
}

// max |a - b| / (1 + |b|).
double maxError(const float* got, const float* want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::abs(want[i])));
  }
  return worst;
}

kv::KvCacheConfig cacheFor(const TargetModel& m, kv::SlidingWindowStorage storage) {
  kv::KvCacheConfig c;
  c.maxBatchSize = 2;
  // The dense layout spans 2 * 16 pages, far more than the window pool's 2 * 7: a layer that
  // read the window pool through the dense table would miss its keys.
  c.maxSequenceLength = 2048;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  c.slidingWindowStorage = storage;
  return c;
}

struct ScenarioRun {
  std::vector<float> logitsA;  // [rows of ROWS_A, V]
  std::vector<float> logitsB;  // [rows of ROWS_B, V]
  std::vector<float> decodeA;  // [steps, V] decode rows of a
  std::vector<float> decodeB;  // [steps, V] decode rows of b
};

// Prompt a in chunks of 100, 200 and 300 rows (slot 0; the first chunk in one ragged forward
// with all of prompt b in slot 1), then `steps` decode steps of both sequences. Every
// forward is one cache step: beginStep, forward, completeStep, commit.
ScenarioRun runScenario(TargetModel& model, kv::KvCacheManager& cache, const nlohmann::json& meta, int32_t steps) {
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> a = meta["prompts"]["a"], b = meta["prompts"]["b"];
  const std::vector<int32_t> rowsA = meta["rows"]["a"], rowsB = meta["rows"]["b"];
  const int32_t s0 = cache.admit(), s1 = cache.admit();
  ScenarioRun run;
  run.logitsA.resize(rowsA.size() * static_cast<size_t>(V));
  run.logitsB.resize(rowsB.size() * static_cast<size_t>(V));
  auto step = [&](ForwardBatch& f, std::vector<kv::SwaStepWrite> writes) {
    const int64_t id = cache.beginStep(writes);
    ForwardResult out = model.forward(f, cache);
    cache.completeStep(id);
    for (const kv::SwaStepWrite& w : writes) cache.commitBase(w.slot, w.count);
    return out;
  };
  // Adds rows [first, end) of `prompt` for `slot` and asks the logits of the wanted ones; `where`
  // collects (wanted index, logit row) pairs.
  auto addRows = [&](ForwardBatch& f, const std::vector<int32_t>& prompt, int32_t slot, int32_t first,
                     int32_t end, const std::vector<int32_t>& wanted, std::vector<std::pair<size_t, int32_t>>& where) {
    for (int32_t i = first; i < end; ++i) {
      const auto it = std::find(wanted.begin(), wanted.end(), i);
      if (it != wanted.end()) {
        where.push_back({static_cast<size_t>(it - wanted.begin()), static_cast<int32_t>(f.logitRows.size())});
        f.logitRows.push_back(static_cast<int32_t>(f.tokens.size()));
      }
      f.tokens.push_back(prompt[static_cast<size_t>(i)]);
      f.positions.push_back(i);
      f.tokenToSequence.push_back(slot);
    }
  };
  auto scatter = [&](const ForwardResult& out, const std::vector<std::pair<size_t, int32_t>>& where,
                     std::vector<float>& dst) {
    for (auto [index, row] : where) {
      std::copy_n(out.logits.begin() + row * V, V, dst.begin() + static_cast<int64_t>(index) * V);
    }
  };
  const int32_t La = static_cast<int32_t>(a.size()), Lb = static_cast<int32_t>(b.size());
  {
    ForwardBatch f;
    std::vector<std::pair<size_t, int32_t>> whereA, whereB;
    addRows(f, a, s0, 0, 100, rowsA, whereA);
    addRows(f, b, s1, 0, Lb, rowsB, whereB);
    f.cuQSeqLens = {0, 100, 100 + Lb};
    f.kvLengths = {100, Lb};
    const ForwardResult out = step(f, {{s0, 100}, {s1, Lb}});
    scatter(out, whereA, run.logitsA);
    scatter(out, whereB, run.logitsB);
  }
  for (auto [first, end] : {std::pair{100, 300}, std::pair{300, La}}) {
    ForwardBatch f;
    std::vector<std::pair<size_t, int32_t>> where;
    addRows(f, a, s0, first, end, rowsA, where);
    f.cuQSeqLens = {0, end - first};
    f.kvLengths = {end};
    scatter(step(f, {{s0, end - first}}), where, run.logitsA);
  }
  // Decode steps of both sequences, one row each, feeding the fixture's continuation (teacher
  // forced): a's logits at positions 600, 601, ... (crossing the page boundary at 640).
  const std::vector<int32_t> cont = meta["continuation"];
  for (int32_t i = 0; i < steps; ++i) {
    const int32_t t = cont[static_cast<size_t>(i) % cont.size()];
    ForwardBatch f;
    f.tokens = {t, t};
    f.positions = {cache.baseLength(s0), cache.baseLength(s1)};
    f.tokenToSequence = {s0, s1};
    f.cuQSeqLens = {0, 1, 2};
    f.kvLengths = {cache.baseLength(s0) + 1, cache.baseLength(s1) + 1};
    f.logitRows = {0, 1};
    const ForwardResult out = step(f, {{s0, 1}, {s1, 1}});
    run.decodeA.insert(run.decodeA.end(), out.logits.begin(), out.logits.begin() + V);
    run.decodeB.insert(run.decodeB.end(), out.logits.begin() + V, out.logits.end());
  }
  return run;
}

nlohmann::json loadMeta() {
  std::ifstream in(fixtureDir() + "/reference.json");
  return nlohmann::json::parse(in);
}

TEST(SlidingWindowModel, BoundedWindowPoolMatchesTransformers) {
  const nlohmann::json meta = loadMeta();
  const SafetensorsFile ref = SafetensorsFile::open(fixtureDir() + "/reference.safetensors");
  auto backend = ops::makeCpuBackend();
  TargetModel model(fixtureDir(), *backend, 512);
  ASSERT_EQ(model.config().sliding_window.value_or(0), kWindow);
  kv::KvCacheManager cache(cacheFor(model, kv::SlidingWindowStorage::kBounded), MemorySpace::kHost);
  const kv::KvCachePlan& plan = cache.plan();
  ASSERT_EQ(plan.base.size(), 3u);
  EXPECT_FALSE(plan.base[0].reduced);
  EXPECT_TRUE(plan.base[1].reduced && plan.base[2].reduced);
  EXPECT_EQ(plan.numSwaPages, 2 * 7);  // 2 slots * (2 * (ceil(160/128) + 1) + 1)
  EXPECT_EQ(plan.numPages, 2 * 16);

  const int32_t steps = meta["continuation"].size();
  const ScenarioRun run = runScenario(model, cache, meta, steps);
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> rowsA = meta["rows"]["a"], rowsB = meta["rows"]["b"];
  const std::vector<float> wantA = referenceRows(ref, "logits_a"), wantB = referenceRows(ref, "logits_b");
  for (size_t i = 0; i < rowsA.size(); ++i) {
    EXPECT_LT(maxError(run.logitsA.data() + i * V, wantA.data() + i * V, V), kLogitTolerance)
        << "prompt a row " << rowsA[i];
  }
  for (size_t i = 0; i < rowsB.size(); ++i) {
    EXPECT_LT(maxError(run.logitsB.data() + i * V, wantB.data() + i * V, V), kLogitTolerance)
        << "prompt b row " << rowsB[i];
  }
  // The window matters: full attention everywhere gives other logits for row 599.
  const std::vector<float> full = referenceRows(ref, "logits_a_full");
  EXPECT_GT(maxError(run.logitsA.data() + (rowsA.size() - 1) * V, full.data(), V), 100 * kLogitTolerance);
  // Decode steps past the window (positions 600 ... 659).
  const std::vector<float> wantDecode = referenceRows(ref, "decode_logits_a");
  for (int32_t i = 0; i < steps; ++i) {
    EXPECT_LT(maxError(run.decodeA.data() + int64_t{i} * V, wantDecode.data() + int64_t{i} * V, V), kLogitTolerance)
        << "decode position " << 600 + i;
  }
  // The window pool: each slot holds its 7 private pages, at most ceil(160/128) + 1 bound.
  for (int32_t s = 0; s < 2; ++s) {
    EXPECT_EQ(cache.swaPages()->ownedPages(s).size(), 7u);
    EXPECT_LE(cache.swaPages()->boundPages(s), 3);
  }
}

TEST(SlidingWindowModel, BoundedAndFullCapacityStorageGiveIdenticalLogits) {
  const nlohmann::json meta = loadMeta();
  auto backend = ops::makeCpuBackend();
  TargetModel model(fixtureDir(), *backend, 512);
  kv::KvCacheManager bounded(cacheFor(model, kv::SlidingWindowStorage::kBounded), MemorySpace::kHost);
  kv::KvCacheManager full(cacheFor(model, kv::SlidingWindowStorage::kFullCapacity), MemorySpace::kHost);
  ASSERT_EQ(full.swaPages(), nullptr);
  // The CPU reference reads the same keys in the same order through either table: bit for bit.
  const ScenarioRun a = runScenario(model, bounded, meta, 40), b = runScenario(model, full, meta, 40);
  EXPECT_EQ(a.logitsA, b.logitsA);
  EXPECT_EQ(a.logitsB, b.logitsB);
  EXPECT_EQ(a.decodeA, b.decodeA);
  EXPECT_EQ(a.decodeB, b.decodeB);
}

TEST(SlidingWindowModel, ForwardWithoutAStepIsRefused) {
  auto backend = ops::makeCpuBackend();
  TargetModel model(fixtureDir(), *backend, 64);
  kv::KvCacheManager cache(cacheFor(model, kv::SlidingWindowStorage::kBounded), MemorySpace::kHost);
  const int32_t s = cache.admit();
  ForwardBatch f;
  for (int32_t i = 0; i < 10; ++i) {
    f.tokens.push_back(i); f.positions.push_back(i); f.tokenToSequence.push_back(s);
  }
  f.cuQSeqLens = {0, 10};
  f.kvLengths = {10};
  // No beginStep: the window pages are unbound, the kernels would silently see no keys.
  test::expectInvalidArgument([&] { model.forward(f, cache); }, "slot");
  // A cache planned for another window than the model's is refused by name.
  kv::KvCacheConfig other = cacheFor(model, kv::SlidingWindowStorage::kBounded);
  for (kv::KvLayerShape& l : other.baseLayers) l.slidingWindow = l.slidingWindow ? 256 : 0;
  kv::KvCacheManager wrong(other, MemorySpace::kHost);
  wrong.admit();
  const kv::SwaStepWrite w{0, 10};
  wrong.beginStep({&w, 1});
  test::expectInvalidArgument([&] { model.forward(f, wrong); }, "cache layer 1 window");
}

}  // namespace
}  // namespace es::model
