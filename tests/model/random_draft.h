#pragma once
// A tiny random DFlash draft for the Qwen3 fixture target (tests/data/models/qwen3: hidden 128,
// 2 layers, vocab 384), written as a z-lab draft folder (config.json + f32 model.safetensors).
// Shared by the draft model's tests and the speculative decoder's tests.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "model/safetensors_test_writer.h"

namespace es::model::test_draft {

using Vec = std::vector<double>;

// The draft's shape: its own heads (2 q / 1 kv of dim 64), its own RoPE theta.
struct DraftSpec {
  int64_t hidden = 128;
  int64_t layers = 2;
  int64_t heads = 2, kvHeads = 1, headDim = 64, inter = 96;
  int64_t blockSize = 4;
  int64_t maskTokenId = 383;
  std::string tapIds = "[0, 1]";  // JSON, or "" for none
  bool numTargetLayers = true;
  int64_t fcTaps = 2;  // columns of fc.weight / hidden
  bool maskEmbedding = false;
  double ropeTheta = 20000.0;
  uint32_t seed = 7;
};

// Weights by name as doubles (the values written, exactly: f32 on disk).
using Weights = std::map<std::string, Vec>;

inline Weights writeDraft(const std::filesystem::path& dir, const DraftSpec& s) {
  std::filesystem::create_directories(dir);
  nlohmann::json cfg = {{"architectures", {"DFlashDraftModel"}},
                        {"model_type", "qwen3"},
                        {"hidden_size", s.hidden},
                        {"intermediate_size", s.inter},
                        {"num_hidden_layers", s.layers},
                        {"num_attention_heads", s.heads},
                        {"num_key_value_heads", s.kvHeads},
                        {"head_dim", s.headDim},
                        {"vocab_size", 384},
                        {"max_position_embeddings", 1024},
                        {"rms_norm_eps", 1e-6},
                        {"rope_theta", s.ropeTheta},
                        {"attention_bias", false},
                        {"tie_word_embeddings", false},
                        {"block_size", s.blockSize},
                        {"torch_dtype", "bfloat16"}};
  nlohmann::json df = {{"mask_token_id", s.maskTokenId}};
  if (!s.tapIds.empty()) df["target_layer_ids"] = nlohmann::json::parse(s.tapIds);
  cfg["dflash_config"] = df;
  if (s.numTargetLayers) cfg["num_target_layers"] = 2;
  test::writeText(dir / "config.json", cfg.dump(2));

  std::mt19937 rng(s.seed);
  Weights w;
  std::vector<test::FakeTensor> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double mean, double stddev) {
    std::normal_distribution<float> dist(0.0f, static_cast<float>(stddev));
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> v(static_cast<size_t>(numel));
    for (float& x : v) x = static_cast<float>(mean) + dist(rng);
    w[name] = Vec(v.begin(), v.end());
    test::FakeTensor t{name, "F32", std::move(shape), {}};
    t.data.resize(v.size() * 4);
    std::memcpy(t.data.data(), v.data(), t.data.size());
    tensors.push_back(std::move(t));
  };
  const int64_t H = s.hidden, D = s.headDim, I = s.inter;
  add("fc.weight", {H, s.fcTaps * H}, 0, 1 / std::sqrt(double(s.fcTaps * H)));
  add("hidden_norm.weight", {H}, 1, 0.1);
  add("norm.weight", {H}, 1, 0.1);
  if (s.maskEmbedding) add("mask_embedding", {H}, 0, 0.5);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {H}, 1, 0.1);
    add(p + "post_attention_layernorm.weight", {H}, 1, 0.1);
    add(p + "self_attn.q_proj.weight", {s.heads * D, H}, 0, 1 / std::sqrt(double(H)));
    add(p + "self_attn.k_proj.weight", {s.kvHeads * D, H}, 0, 1 / std::sqrt(double(H)));
    add(p + "self_attn.v_proj.weight", {s.kvHeads * D, H}, 0, 1 / std::sqrt(double(H)));
    add(p + "self_attn.o_proj.weight", {H, s.heads * D}, 0, 1 / std::sqrt(double(s.heads * D)));
    add(p + "self_attn.q_norm.weight", {D}, 1, 0.1);
    add(p + "self_attn.k_norm.weight", {D}, 1, 0.1);
    add(p + "mlp.gate_proj.weight", {I, H}, 0, 1 / std::sqrt(double(H)));
    add(p + "mlp.up_proj.weight", {I, H}, 0, 1 / std::sqrt(double(H)));
    add(p + "mlp.down_proj.weight", {H, I}, 0, 1 / std::sqrt(double(I)));
  }
  test::writeBytes(dir / "model.safetensors", test::makeSafetensors(tensors));
  return w;
}

}  // namespace es::model::test_draft
