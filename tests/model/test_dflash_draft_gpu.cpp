// The DFlash draft on the CUDA backend (bf16 weights, activations and draft KV cache; the §2.1
// kernel for the context K/V) against the same draft on the CPU backend (f32, checked against a
// double reference in test_dflash_draft.cpp). Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "safetensors_test_writer.h"
#include "support/test_util.h"

namespace es::model {
namespace {

// bf16 through the target's two layers, the fc and the draft layers: logits agree to a few 1e-2
// of their scale; argmax must agree except where the CPU's top-1/top-2 margin is a near-tie.
constexpr double kLogitTolerance = 8e-2;
constexpr double kNearTie = 5e-2;

std::string targetDir() { return test::test_data_dir() + "/models/qwen3"; }

// A random draft for the fixture target: 2 layers, 2 q / 1 kv heads of dim 64, block 8.
void writeDraft(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const nlohmann::json cfg = {
      {"architectures", {"DFlashDraftModel"}},
      {"model_type", "qwen3"},
      {"hidden_size", 128},
      {"intermediate_size", 96},
      {"num_hidden_layers", 2},
      {"num_attention_heads", 2},
      {"num_key_value_heads", 1},
      {"head_dim", 64},
      {"vocab_size", 384},
      {"max_position_embeddings", 1024},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 20000.0},
      {"block_size", 8},
      {"num_target_layers", 2},
      {"dflash_config", {{"mask_token_id", 383}, {"target_layer_ids", {0, 1}}}}};
  test::writeText(dir / "config.json", cfg.dump(2));
  std::mt19937 rng(3);
  std::vector<test::FakeTensor> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean, float stddev) {
    std::normal_distribution<float> dist(0.0f, stddev);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> v(static_cast<size_t>(numel));
    for (float& x : v) x = mean + dist(rng);
    test::FakeTensor t{name, "F32", std::move(shape), {}};
    t.data.resize(v.size() * 4);
    std::memcpy(t.data.data(), v.data(), t.data.size());
    tensors.push_back(std::move(t));
  };
  const float s128 = 1 / std::sqrt(128.0f);
  add("fc.weight", {128, 256}, 0, 1 / 16.0f);
  add("hidden_norm.weight", {128}, 1, 0.1f);
  add("norm.weight", {128}, 1, 0.1f);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {128}, 1, 0.1f);
    add(p + "post_attention_layernorm.weight", {128}, 1, 0.1f);
    add(p + "self_attn.q_proj.weight", {128, 128}, 0, s128);
    add(p + "self_attn.k_proj.weight", {64, 128}, 0, s128);
    add(p + "self_attn.v_proj.weight", {64, 128}, 0, s128);
    add(p + "self_attn.o_proj.weight", {128, 128}, 0, s128);
    add(p + "self_attn.q_norm.weight", {64}, 1, 0.1f);
    add(p + "self_attn.k_norm.weight", {64}, 1, 0.1f);
    add(p + "mlp.gate_proj.weight", {96, 128}, 0, s128);
    add(p + "mlp.up_proj.weight", {96, 128}, 0, s128);
    add(p + "mlp.down_proj.weight", {128, 96}, 0, 1 / std::sqrt(96.0f));
  }
  test::writeBytes(dir / "model.safetensors", test::makeSafetensors(tensors));
}

struct DraftRun {
  DraftProposal first;   // after the whole prefill as one delta
  DraftProposal second;  // after a second delta of 5 more target rows (a decode-like round)
};

// Prefill prompts a and long (slot 1, three pages) on `backend`, context in one delta, propose;
// then 5 verify-like target rows per sequence of which 3 are committed, a second delta, propose.
DraftRun runOn(ops::Backend& backend, const std::filesystem::path& draftDir,
               const nlohmann::json& meta) {
  TargetModel target(targetDir(), backend, 400, {0, 1});
  DFlashDraft draft(draftDir, backend, target, 400, 2);
  kv::KvCacheConfig c;
  c.maxBatchSize = 2;
  c.maxSequenceLength = 512;
  c.dtype = backend.computeDtype();
  c.baseLayers = target.kvLayerShapes();
  c.draftLayers = draft.kvLayerShapes();
  kv::KvCacheManager cache(c, backend.space());
  const std::vector<std::vector<int32_t>> prompts{meta["prompts"]["a"], meta["prompts"]["long"]};
  ForwardBatch pre;
  pre.cuQSeqLens = {0};
  for (size_t s = 0; s < prompts.size(); ++s) {
    const int32_t slot = cache.admit();
    for (size_t i = 0; i < prompts[s].size(); ++i) {
      pre.tokens.push_back(prompts[s][i]);
      pre.positions.push_back(static_cast<int32_t>(i));
      pre.tokenToSequence.push_back(slot);
    }
    pre.cuQSeqLens.push_back(static_cast<int32_t>(pre.tokens.size()));
    pre.kvLengths.push_back(static_cast<int32_t>(prompts[s].size()));
  }
  target.forward(pre, cache);
  std::vector<int32_t> lens;
  for (size_t s = 0; s < prompts.size(); ++s) {
    lens.push_back(static_cast<int32_t>(prompts[s].size()));
    cache.commitBase(static_cast<int32_t>(s), lens.back());
  }
  draft.appendContext(target.tapsDevice(), pre.positions, pre.tokenToSequence, cache);
  DraftRun run;
  run.first = draft.propose({17, 251}, lens, cache, true);
  for (int32_t s = 0; s < 2; ++s) cache.commitDraft(s, lens[static_cast<size_t>(s)]);

  // Verify-like forward: 5 rows per sequence, 3 committed (rows 3, 4 rejected -> padding).
  ForwardBatch v;
  std::vector<int32_t> dpos, down;
  v.cuQSeqLens = {0};
  for (int32_t s = 0; s < 2; ++s) {
    for (int32_t i = 0; i < 5; ++i) {
      v.tokens.push_back(10 + 7 * i + s);
      v.positions.push_back(lens[static_cast<size_t>(s)] + i);
      v.tokenToSequence.push_back(s);
      dpos.push_back(i < 3 ? lens[static_cast<size_t>(s)] + i : -1);
      down.push_back(i < 3 ? s : -1);
    }
    v.cuQSeqLens.push_back(5 * (s + 1));
    v.kvLengths.push_back(lens[static_cast<size_t>(s)] + 5);
  }
  target.forward(v, cache);
  draft.appendContext(target.tapsDevice(), dpos, down, cache);
  run.second = draft.propose({99, 300}, {lens[0] + 3, lens[1] + 3}, cache, true);
  return run;
}

TEST(DFlashDraftGpu, CudaMatchesCpu) {
  ES_SKIP_IF_NO_GPU();
  test::TempDir tmp;
  writeDraft(tmp / "draft");
  std::ifstream f(targetDir() + "/reference.json");
  const nlohmann::json meta = nlohmann::json::parse(f);
  auto cpu = ops::makeCpuBackend();
  auto gpu = ops::makeCudaBackend();
  const DraftRun want = runOn(*cpu, tmp / "draft", meta);
  const DraftRun got = runOn(*gpu, tmp / "draft", meta);
  const int64_t V = 384, BS = 8;
  int64_t nearTies = 0, rows = 0;
  for (const auto& [g, w] :
       {std::pair(&got.first, &want.first), std::pair(&got.second, &want.second)}) {
    ASSERT_EQ(g->logits.size(), static_cast<size_t>(2 * BS * V));
    for (int64_t r = 0; r < 2 * BS; ++r, ++rows) {
      const float* gr = g->logits.data() + r * V;
      const float* wr = w->logits.data() + r * V;
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < V; ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(gr[i]) - wr[i]));
        scale = std::max(scale, std::abs(static_cast<double>(wr[i])));
      }
      EXPECT_LT(worst / (1 + scale), kLogitTolerance) << "row " << r;
      std::vector<float> sorted(wr, wr + V);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (sorted[0] - sorted[1] < kNearTie) {
        ++nearTies;
        continue;
      }
      EXPECT_EQ(g->tokens[static_cast<size_t>(r)], w->tokens[static_cast<size_t>(r)])
          << "row " << r;
    }
  }
  std::printf("DFlash draft CUDA vs CPU: %lld of %lld rows are near-ties (margin < %.2g)\n",
              static_cast<long long>(nearTies), static_cast<long long>(rows), kNearTie);
}

// The CUDA backend's DFlash KV update takes fp16/bf16 caches only.
TEST(DFlashDraftGpu, CudaBackendRejectsF32KvUpdate) {
  ES_SKIP_IF_NO_GPU();
  auto gpu = ops::makeCudaBackend();
  kernel::DFlashKvUpdateParamsF32 p;
  test::expectInvalidArgument([&] { gpu->dflashKvUpdate(p); }, "dtype");
}

}  // namespace
}  // namespace es::model
