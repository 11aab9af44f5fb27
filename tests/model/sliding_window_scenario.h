#pragma once
// The sliding-window scenario shared by test_sliding_window_model (CPU backend, f32 KV in host
// memory) and test_sliding_window_model_gpu (CUDA backend, bf16 KV in device memory): a tiny
// sliding-window Qwen3 (layers [full, sliding, sliding], window 160 < prompts of 600 and 390
// tokens) against transformers (tests/data/models/qwen3_swa, made by
// tools/sliding_window_fixture.py: float32 from the same bf16-rounded weights, eager attention).
// Also used by the generation tests (runtime/sliding_window_generation_scenario.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "common/dtype.h"
#include "kv/kv_cache_manager.h"
#include "model/safetensors.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "support/decode_batch.h"
#include "support/test_util.h"

namespace es::model::swa {

inline constexpr int32_t kWindow = 160;
inline constexpr int32_t kPrivatePages = 7;  // per slot: 2 * (ceil(160/128) + 1) + 1

// Where a backend keeps the KV cache: the CPU backend runs in f32 on host memory, the CUDA
// backend in bf16 on device memory.
struct KvStorage {
  DType dtype;
  MemorySpace space;
};
inline constexpr KvStorage kHostF32{DType::kF32, MemorySpace::kHost};
inline constexpr KvStorage kDeviceBF16{DType::kBF16, MemorySpace::kDevice};

inline std::string fixtureDir() { return test::test_data_dir() + "/models/qwen3_swa"; }

inline kv::KvCacheConfig cacheFor(const TargetModel& m, kv::SlidingWindowStorage storage,
                                  DType dtype) {
  kv::KvCacheConfig c;
  c.maxBatchSize = 2;
  // The dense layout spans 2 * 16 pages, far more than the window pool's 2 * 7: a layer that
  // read the window pool through the dense table would miss its keys.
  c.maxSequenceLength = 2048;
  c.dtype = dtype;
  c.baseLayers = m.kvLayerShapes();
  c.slidingWindowStorage = storage;
  return c;
}

// The fixture: prompts, rows and continuation (reference.json), transformers' logits
// (reference.safetensors) and the model on a backend.
struct Fixture {
  nlohmann::json meta;
  SafetensorsFile reference;
  TargetModel model;

  Fixture(ops::Backend& backend, int32_t maxTokens)
      : meta(loadMeta()),
        reference(SafetensorsFile::open(fixtureDir() + "/reference.safetensors")),
        model(fixtureDir(), backend, maxTokens) {}

  static nlohmann::json loadMeta() {
    std::ifstream in(fixtureDir() + "/reference.json");
    return nlohmann::json::parse(in);
  }
  std::vector<float> rows(const std::string& name) const {
    const TensorView v = reference.view(name);
    return std::vector<float>(v.as<float>(), v.as<float>() + v.numel());
  }
  int32_t continuationSteps() const { return static_cast<int32_t>(meta["continuation"].size()); }
};

struct ScenarioRun {
  int64_t vocab = 0;
  std::vector<float> logitsA;  // [rows of ROWS_A, V]
  std::vector<float> logitsB;  // [rows of ROWS_B, V]
  std::vector<float> decodeA;  // [steps, V] decode rows of a
  std::vector<float> decodeB;  // [steps, V] decode rows of b

  // Prompt a's last row (position 599), the one logits_a_full has a full-attention reference of.
  const float* lastPromptRowA() const {
    return logitsA.data() + logitsA.size() - static_cast<size_t>(vocab);
  }
};

// Prompt a in chunks of 100, 200 and 300 rows (slot 0; the first chunk in one ragged forward
// with all of prompt b in slot 1), then `steps` decode steps of both sequences. Every
// forward is one cache step: beginStep, forward, completeStep, commit.
inline ScenarioRun runScenario(TargetModel& model, kv::KvCacheManager& cache,
                               const nlohmann::json& meta, int32_t steps) {
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> a = meta["prompts"]["a"], b = meta["prompts"]["b"];
  const std::vector<int32_t> rowsA = meta["rows"]["a"], rowsB = meta["rows"]["b"];
  const int32_t s0 = cache.admit(), s1 = cache.admit();
  ScenarioRun run;
  run.vocab = V;
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
  auto addRows = [&](ForwardBatch& f, const std::vector<int32_t>& prompt, int32_t slot,
                     int32_t first, int32_t end, const std::vector<int32_t>& wanted,
                     std::vector<std::pair<size_t, int32_t>>& where) {
    for (int32_t i = first; i < end; ++i) {
      const auto it = std::find(wanted.begin(), wanted.end(), i);
      if (it != wanted.end()) {
        where.push_back(
            {static_cast<size_t>(it - wanted.begin()), static_cast<int32_t>(f.logitRows.size())});
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
    ForwardBatch f = test::decodeBatch(cache, {s0, s1}, {t, t});
    const ForwardResult out = step(f, {{s0, 1}, {s1, 1}});
    run.decodeA.insert(run.decodeA.end(), out.logits.begin(), out.logits.begin() + V);
    run.decodeB.insert(run.decodeB.end(), out.logits.begin() + V, out.logits.end());
  }
  return run;
}

// The whole scenario (every continuation step) with the sliding layers in the bounded window
// pool, KV in `kv`. Checks the plan (layer 0 dense, layers 1 and 2 in the window pool) before and
// the window pool after: each slot holds its 7 private pages, at most ceil(160/128) + 1 bound.
inline ScenarioRun runBounded(Fixture& fx, KvStorage kv) {
  EXPECT_EQ(fx.model.config().sliding_window.value_or(0), kWindow);
  kv::KvCacheManager cache(cacheFor(fx.model, kv::SlidingWindowStorage::kBounded, kv.dtype),
                           kv.space);
  const kv::KvCachePlan& plan = cache.plan();
  EXPECT_EQ(plan.base.size(), 3u);
  if (plan.base.size() == 3u) {
    EXPECT_FALSE(plan.base[0].reduced);
    EXPECT_TRUE(plan.base[1].reduced && plan.base[2].reduced);
  }
  EXPECT_EQ(plan.numSwaPages, 2 * kPrivatePages);  // 2 slots * (2 * (ceil(160/128) + 1) + 1)
  EXPECT_EQ(plan.numPages, 2 * 16);
  ScenarioRun run = runScenario(fx.model, cache, fx.meta, fx.continuationSteps());
  for (int32_t s = 0; s < 2; ++s) {
    EXPECT_EQ(cache.swaPages()->ownedPages(s).size(), static_cast<size_t>(kPrivatePages));
    EXPECT_LE(cache.swaPages()->boundPages(s), 3);
  }
  return run;
}

// Calls check(what, got, want, V) for every row transformers computed: prompt a's and b's rows
// (reference.json "rows") and a's decode rows past the window (positions 600 ... 659).
using RowCheck =
    std::function<void(const std::string& what, const float* got, const float* want, int64_t V)>;
inline void forEachReferenceRow(const Fixture& fx, const ScenarioRun& run, const RowCheck& check) {
  const int64_t V = run.vocab;
  auto rows = [&](const char* prompt, const std::vector<float>& got, const std::string& name) {
    const std::vector<int32_t> index = fx.meta["rows"][prompt];
    const std::vector<float> want = fx.rows(name);
    ASSERT_EQ(got.size(), index.size() * static_cast<size_t>(V));
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < index.size(); ++i) {
      check(std::string("prompt ") + prompt + " row " + std::to_string(index[i]),
            got.data() + i * V, want.data() + i * V, V);
    }
  };
  rows("a", run.logitsA, "logits_a");
  rows("b", run.logitsB, "logits_b");
  const std::vector<float> wantDecode = fx.rows("decode_logits_a");
  ASSERT_EQ(run.decodeA.size(), static_cast<size_t>(fx.continuationSteps()) * V);
  ASSERT_EQ(wantDecode.size(), run.decodeA.size());
  for (int32_t i = 0; i < fx.continuationSteps(); ++i) {
    check("decode position " + std::to_string(600 + i), run.decodeA.data() + int64_t{i} * V,
          wantDecode.data() + int64_t{i} * V, V);
  }
}

// The scenario's first `steps` decode steps with the sliding layers in the bounded window pool
// and with every layer stored at full capacity (the window then only a mask), on one model.
inline std::pair<ScenarioRun, ScenarioRun> runBoundedAndFullCapacity(ops::Backend& backend,
                                                                     KvStorage kv, int32_t steps) {
  const nlohmann::json meta = Fixture::loadMeta();
  TargetModel model(fixtureDir(), backend, 512);
  kv::KvCacheManager bounded(cacheFor(model, kv::SlidingWindowStorage::kBounded, kv.dtype),
                             kv.space);
  kv::KvCacheManager full(cacheFor(model, kv::SlidingWindowStorage::kFullCapacity, kv.dtype),
                          kv.space);
  EXPECT_NE(bounded.swaPages(), nullptr);
  EXPECT_EQ(full.swaPages(), nullptr);
  ScenarioRun a = runScenario(model, bounded, meta, steps);
  ScenarioRun b = runScenario(model, full, meta, steps);
  return {std::move(a), std::move(b)};
}

inline void expectIdenticalLogits(const ScenarioRun& a, const ScenarioRun& b) {
  EXPECT_EQ(a.logitsA, b.logitsA);
  EXPECT_EQ(a.logitsB, b.logitsB);
  EXPECT_EQ(a.decodeA, b.decodeA);
  EXPECT_EQ(a.decodeB, b.decodeB);
}

}  // namespace es::model::swa
