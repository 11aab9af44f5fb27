// config.json parsing: public model configs in both transformers dialects, every RoPE type, the
// DFlash draft fields and tap formula, and absurd values rejected with the field named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/errors.h"
#include "model/model_config.h"
#include "model/safetensors_test_writer.h"
#include "support/test_util.h"

namespace es::model {
namespace {

using nlohmann::json;

template <typename F>
void expectFormatError(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "missing '" << part << "' in: " << message;
    }
  }
}

ModelConfig parse(const json& j) { return parseModelConfig(j.dump(), "cfg.json"); }

// Field names and values as in the published Qwen/Qwen3-0.6B config.json (transformers 4.51).
const char* kQwen3_0_6B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// meta-llama/Llama-3.1-8B style (llama3 RoPE scaling, eos list).
const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "use_cache": true, "vocab_size": 128256})";

// HuggingFaceTB/SmolLM2-135M style: no head_dim (576 / 9 = 64), GQA 9/3, tied embeddings.
const char* kSmolLM2 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 0,
  "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536,
  "is_llama_config": true, "max_position_embeddings": 8192, "model_type": "llama",
  "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
  "rms_norm_eps": 1e-05, "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 49152})";

// Qwen/Qwen2.5-0.5B style: qkv bias, sliding_window present but disabled.
const char* kQwen25_0_5B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// A Qwen3 config as transformers 5.x writes it: rope_parameters, dtype, layer_types.
const char* kQwen3V5 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "dtype": "float16",
  "head_dim": 64, "hidden_act": "silu", "hidden_size": 256, "intermediate_size": 512,
  "layer_types": ["full_attention", "full_attention", "full_attention"],
  "max_position_embeddings": 4096, "model_type": "qwen3", "num_attention_heads": 4,
  "num_hidden_layers": 3, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
  "sliding_window": null, "tie_word_embeddings": false, "use_sliding_window": false,
  "vocab_size": 1024})";

// z-lab DFlash draft for Qwen3-8B (b16): 5 Qwen3 layers, explicit taps.
const char* kDFlashDraft = R"({
  "architectures": ["DFlashDraftModel"], "attention_bias": false, "attention_dropout": 0.0,
  "block_size": 16, "bos_token_id": 151643,
  "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
  "dtype": "bfloat16", "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "intermediate_size": 12288,
  "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention", "full_attention"],
  "max_position_embeddings": 40960, "max_window_layers": 5, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 5, "num_key_value_heads": 8,
  "num_target_layers": 36, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "tie_word_embeddings": false, "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

TEST(ModelConfig, Qwen3FromTransformers4) {
  ModelConfig c = parseModelConfig(kQwen3_0_6B, "qwen3/config.json");
  EXPECT_EQ(c.architecture, Architecture::kQwen3);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // explicit, != 1024 / 16
  EXPECT_EQ(c.qDim(), 2048);
  EXPECT_EQ(c.kvDim(), 1024);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_EQ(c.layer_types.size(), 28u);
  EXPECT_EQ(c.layer_types[27], LayerType::kFullAttention);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645}));
  EXPECT_FALSE(c.dflash.has_value());
  EXPECT_EQ(c.source, "qwen3/config.json");
  EXPECT_NE(c.summary().find("Qwen3ForCausalLM"), std::string::npos);
}

TEST(ModelConfig, Qwen3FromTransformers5) {
  ModelConfig c = parseModelConfig(kQwen3V5);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.dtype, DType::kF16);
  EXPECT_EQ(c.layer_types.size(), 3u);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(ModelConfig, LlamaWithLlama3Rope) {
  ModelConfig c = parseModelConfig(kLlama31_8B);
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.head_dim, 128);  // 4096 / 32
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
}

TEST(ModelConfig, SmolLM2DerivesHeadDimAndTies) {
  ModelConfig c = parseModelConfig(kSmolLM2);
  EXPECT_EQ(c.head_dim, 64);  // 576 / 9
  EXPECT_EQ(c.num_attention_heads / c.num_key_value_heads, 3);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope.theta, 100000.0);
  EXPECT_EQ(c.bos_token_id, 0);
}

TEST(ModelConfig, Qwen2HasQkvBiasAndDisabledWindow) {
  ModelConfig c = parseModelConfig(kQwen25_0_5B);
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.sliding_window.has_value());  // use_sliding_window: false
  for (LayerType t : c.layer_types) EXPECT_EQ(t, LayerType::kFullAttention);
}

TEST(ModelConfig, DefaultsWhenOptionalFieldsAbsent) {
  json j = json::parse(kSmolLM2);
  for (const char* k :
       {"num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
        "rope_theta", "rope_scaling", "torch_dtype", "bos_token_id", "eos_token_id"}) {
    j.erase(k);
  }
  ModelConfig c = parse(j);
  EXPECT_EQ(c.num_key_value_heads, 9);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 2048);  // LlamaConfig default
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.dtype.has_value());
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());

  json q = json::parse(kQwen3_0_6B);
  q.erase("head_dim");
  EXPECT_EQ(parse(q).head_dim, 128);  // Qwen3Config's default, not 1024 / 16 = 64
  q.erase("max_position_embeddings");
  EXPECT_EQ(parse(q).max_position_embeddings, 32768);
}

TEST(ModelConfig, AttentionAndMlpBiasFlags) {
  json l = json::parse(kSmolLM2);
  l["attention_bias"] = true;
  l["mlp_bias"] = true;
  ModelConfig c = parse(l);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  EXPECT_TRUE(c.mlp_bias);
  json q = json::parse(kQwen3_0_6B);
  q["attention_bias"] = true;
  c = parse(q);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
}

TEST(ModelConfig, LinearRopeBothDialects) {
  json v4 = json::parse(kSmolLM2);
  v4["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ModelConfig c = parse(v4);
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 2.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 100000.0);

  json v5 = json::parse(kSmolLM2);
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 20000.0}};
  c = parse(v5);
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 20000.0);
}

TEST(ModelConfig, Llama3RopeInTransformers5) {
  json j = json::parse(kLlama31_8B);
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 32.0},          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
}

TEST(ModelConfig, YarnRopeBothDialects) {
  json v4 = json::parse(kQwen3_0_6B);
  v4["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig c = parse(v4);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_FALSE(c.rope.attention_factor.has_value());
  EXPECT_TRUE(c.rope.truncate);

  json v5 = json::parse(kQwen3V5);
  v5["rope_parameters"] = {
      {"rope_type", "yarn"}, {"rope_theta", 10000.0},   {"factor", 2.0},    {"beta_fast", 16.0},
      {"beta_slow", 2.0},    {"attention_factor", 0.8}, {"truncate", false}};
  c = parse(v5);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 0);  // absent
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 2.0);
  EXPECT_DOUBLE_EQ(*c.rope.attention_factor, 0.8);
  EXPECT_FALSE(c.rope.truncate);
}

TEST(ModelConfig, RopeThetaPlacementAcrossDialects) {
  json j = json::parse(kQwen3V5);
  j["rope_parameters"] = {{"rope_type", "default"}};
  j["rope_theta"] = 5000.0;  // 4.x-style theta with a 5.x block lacking one
  EXPECT_DOUBLE_EQ(parse(j).rope.theta, 5000.0);
  j["rope_parameters"]["rope_theta"] = 5000.0;  // both, agreeing
  EXPECT_DOUBLE_EQ(parse(j).rope.theta, 5000.0);
  j["rope_parameters"]["rope_theta"] = 6000.0;
  expectFormatError([&] { parse(j); },
                    {"'rope_theta' = 5000", "rope_parameters.rope_theta' = 6000", "disagree"});
  json d = json::parse(kQwen3_0_6B);
  d["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(d).rope.type, RopeType::kDefault);
}

TEST(ModelConfig, SlidingWindowLayers) {
  json q = json::parse(kQwen25_0_5B);
  q["num_hidden_layers"] = 4;
  q["use_sliding_window"] = true;
  q["sliding_window"] = 4096;
  q["max_window_layers"] = 2;
  ModelConfig c = parse(q);
  ASSERT_EQ(c.layer_types.size(), 4u);
  EXPECT_EQ(c.layer_types[1], LayerType::kFullAttention);
  EXPECT_EQ(c.layer_types[2], LayerType::kSlidingAttention);
  EXPECT_EQ(c.layer_types[3], LayerType::kSlidingAttention);
  EXPECT_EQ(c.sliding_window, 4096);

  json v5 = json::parse(kQwen3V5);
  v5["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  v5["use_sliding_window"] = true;
  v5["sliding_window"] = 128;
  c = parse(v5);
  EXPECT_EQ(c.layer_types[0], LayerType::kSlidingAttention);
  EXPECT_EQ(c.layer_types[1], LayerType::kFullAttention);
  EXPECT_EQ(c.sliding_window, 128);

  v5["sliding_window"] = nullptr;
  expectFormatError([&] { parse(v5); }, {"layer 0 is sliding_attention", "'sliding_window'"});
  v5["layer_types"] = {"full_attention", "full_attention"};
  expectFormatError([&] { parse(v5); }, {"'layer_types'", "num_hidden_layers = 3"});
  v5["layer_types"] = {"full_attention", "chunked_attention", "full_attention"};
  expectFormatError([&] { parse(v5); }, {"'layer_types[1]' = \"chunked_attention\""});
}

TEST(ModelConfig, TapFormulaMatchesPythonRound) {
  EXPECT_EQ(defaultDFlashTargetLayerIds(30, 5),
            (std::vector<int64_t>{1, 8, 14, 20, 27}));  // 20.5 -> 20
  EXPECT_EQ(defaultDFlashTargetLayerIds(36, 5), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(defaultDFlashTargetLayerIds(36, 1), (std::vector<int64_t>{18}));
  EXPECT_EQ(defaultDFlashTargetLayerIds(29, 1), (std::vector<int64_t>{14}));
  // 1 + i*28/3: 10.33 -> 10, 19.67 -> 20.
  EXPECT_EQ(defaultDFlashTargetLayerIds(32, 4), (std::vector<int64_t>{1, 10, 20, 29}));
  // Step 0.5: 1.5 -> 2 and 2.5 -> 2 (both to even).
  EXPECT_EQ(defaultDFlashTargetLayerIds(6, 5), (std::vector<int64_t>{1, 2, 2, 2, 3}));
  // 2 draft layers: first and L_t - 3.
  EXPECT_EQ(defaultDFlashTargetLayerIds(28, 2), (std::vector<int64_t>{1, 25}));
  test::expectInvalidArgument([] { defaultDFlashTargetLayerIds(0, 5); }, "num_target_layers");
  test::expectInvalidArgument([] { defaultDFlashTargetLayerIds(36, 0); }, "num_draft_layers");
}

TEST(ModelConfig, DFlashDraftExplicitTaps) {
  ModelConfig c = parseModelConfig(kDFlashDraft);
  EXPECT_EQ(c.architecture, Architecture::kDFlashDraft);
  EXPECT_TRUE(c.isDraft());
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_hidden_layers, 5);
  ASSERT_TRUE(c.dflash.has_value());
  EXPECT_EQ(c.dflash->block_size, 16);
  EXPECT_EQ(c.dflash->mask_token_id, 151669);
  EXPECT_TRUE(c.dflash->target_layer_ids_explicit);
  EXPECT_EQ(c.dflash->target_layer_ids, (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(c.dflash->num_target_layers, 36);
  EXPECT_EQ(c.resolvedTargetLayerIds(36), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  test::expectInvalidArgument([&] { c.resolvedTargetLayerIds(30); }, "target_num_layers");
}

TEST(ModelConfig, DFlashDraftDefaultTaps) {
  json j = json::parse(kDFlashDraft);
  j["dflash_config"].erase("target_layer_ids");
  j["num_target_layers"] = 30;
  ModelConfig c = parse(j);
  EXPECT_FALSE(c.dflash->target_layer_ids_explicit);
  EXPECT_EQ(c.dflash->target_layer_ids, (std::vector<int64_t>{1, 8, 14, 20, 27}));

  j.erase("num_target_layers");  // nothing to compute from: resolved against the target later
  c = parse(j);
  EXPECT_TRUE(c.dflash->target_layer_ids.empty());
  EXPECT_EQ(c.resolvedTargetLayerIds(36), (std::vector<int64_t>{1, 9, 17, 25, 33}));

  j["num_hidden_layers"] = 1;
  j["layer_types"] = {"full_attention"};
  c = parse(j);
  EXPECT_EQ(c.resolvedTargetLayerIds(36), (std::vector<int64_t>{18}));

  json explicit_ids = json::parse(kDFlashDraft);
  explicit_ids.erase("num_target_layers");
  c = parse(explicit_ids);
  test::expectInvalidArgument([&] { c.resolvedTargetLayerIds(20); },
                              "target_num_layers");  // tap 33

  test::expectInvalidArgument([] { parseModelConfig(kQwen3_0_6B).resolvedTargetLayerIds(36); },
                              "architecture");
}

TEST(ModelConfig, DFlashDraftErrors) {
  json j = json::parse(kDFlashDraft);
  j["dflash_config"]["target_layer_ids"] = {1, 9, 36};
  expectFormatError([&] { parse(j); }, {"'dflash_config.target_layer_ids[2]' = 36", "[0, 35]"});
  j["dflash_config"]["target_layer_ids"] = {1, 9, 9};
  expectFormatError([&] { parse(j); }, {"taps layer 9 twice"});
  j["dflash_config"]["target_layer_ids"] = json::array();
  expectFormatError([&] { parse(j); }, {"'dflash_config.target_layer_ids'", "non-empty"});
  j = json::parse(kDFlashDraft);
  j["dflash_config"].erase("mask_token_id");
  expectFormatError([&] { parse(j); }, {"'dflash_config.mask_token_id' is missing"});
  j = json::parse(kDFlashDraft);
  j["dflash_config"]["mask_token_id"] = -1;
  expectFormatError([&] { parse(j); }, {"'dflash_config.mask_token_id' = -1"});
  j = json::parse(kDFlashDraft);
  j.erase("dflash_config");
  expectFormatError([&] { parse(j); }, {"'dflash_config' is missing"});
  j = json::parse(kDFlashDraft);
  j["block_size"] = 1;
  expectFormatError([&] { parse(j); }, {"'block_size' = 1", "[2, 1024]"});
  j.erase("block_size");
  expectFormatError([&] { parse(j); }, {"'block_size' is missing"});
  j = json::parse(kDFlashDraft);
  j["dflash_config"].erase("target_layer_ids");
  j["num_target_layers"] = 2;  // default taps 1 + i*(-2)/4 go negative
  expectFormatError([&] { parse(j); }, {"default DFlash tap", "num_target_layers = 2"});
}

TEST(ModelConfig, AbsurdSizesNameFieldValueAndLimit) {
  const json base = json::parse(kSmolLM2);
  struct Case {
    const char* field;
    json value;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"hidden_size", 0, "'hidden_size' = 0 must be in [1, 65536]"},
      {"hidden_size", -576, "'hidden_size' = -576"},
      {"hidden_size", 1000000000, "'hidden_size' = 1000000000 must be in [1, 65536]"},
      {"hidden_size", 576.5, "'hidden_size' = 576.5 must be an integer"},
      {"hidden_size", "576", "'hidden_size' = \"576\" must be an integer"},
      {"intermediate_size", 0, "'intermediate_size' = 0"},
      {"num_hidden_layers", 2000, "'num_hidden_layers' = 2000 must be in [1, 1024]"},
      {"num_attention_heads", 0, "'num_attention_heads' = 0"},
      {"num_key_value_heads", 0, "'num_key_value_heads' = 0"},
      {"vocab_size", 16777217, "'vocab_size' = 16777217 must be in [1, 16777216]"},
      {"head_dim", 2048, "'head_dim' = 2048 must be in [1, 1024]"},
      {"max_position_embeddings", 0, "'max_position_embeddings' = 0"},
      {"rms_norm_eps", 0, "'rms_norm_eps' = 0 must be finite"},
      {"rms_norm_eps", -1e-6, "'rms_norm_eps'"},
      {"rope_theta", 0, "'rope_theta' = 0"},
      {"rope_theta", -10000, "'rope_theta' = -10000"},
      {"tie_word_embeddings", "yes", "'tie_word_embeddings' = \"yes\" must be true or false"},
      {"num_hidden_layers", json::parse("18446744073709551615"),
       "'num_hidden_layers' = 18446744073709551615"},
      {"eos_token_id", -1, "'eos_token_id' = -1"},
      {"eos_token_id", {1, -2}, "'eos_token_id[1]' = -2"},
  };
  for (const Case& k : cases) {
    json j = base;
    j[k.field] = k.value;
    SCOPED_TRACE(k.field);
    expectFormatError([&] { parse(j); }, {"cfg.json", k.expect});
  }
  json j = base;
  j.erase("hidden_size");
  expectFormatError([&] { parse(j); }, {"required field 'hidden_size' is missing"});
}

TEST(ModelConfig, InconsistentHeads) {
  json j = json::parse(kSmolLM2);
  j["num_key_value_heads"] = 2;  // 9 % 2 != 0
  expectFormatError([&] { parse(j); },
                    {"'num_key_value_heads' = 2 must divide num_attention_heads = 9"});
  j = json::parse(kSmolLM2);
  j["num_attention_heads"] = 7;  // 576 % 7 != 0, no head_dim
  j["num_key_value_heads"] = 7;
  expectFormatError([&] { parse(j); }, {"'num_attention_heads' = 7 must divide hidden_size = 576"});
  j["head_dim"] = 64;  // explicit head_dim: hidden need not be heads * head_dim
  EXPECT_EQ(parse(j).head_dim, 64);
  j["head_dim"] = 63;
  expectFormatError([&] { parse(j); }, {"head_dim = 63 must be even"});
  j = json::parse(kSmolLM2);
  j["hidden_size"] = 9 * 2048;  // derived head_dim 2048 > 1024
  expectFormatError([&] { parse(j); },
                    {"head_dim = hidden_size / num_attention_heads = 2048", "limit 1024"});
}

TEST(ModelConfig, UnsupportedArchitectureActivationRopeAndDType) {
  json j = json::parse(kSmolLM2);
  j["architectures"] = {"MistralForCausalLM"};
  expectFormatError([&] { parse(j); },
                    {"unsupported architecture 'MistralForCausalLM'", "Qwen3ForCausalLM"});
  j.erase("architectures");
  expectFormatError([&] { parse(j); }, {"'architectures' is missing"});
  j["architectures"] = json::array();
  expectFormatError([&] { parse(j); }, {"'architectures'", "non-empty"});

  j = json::parse(kSmolLM2);
  j["hidden_act"] = "gelu";
  expectFormatError([&] { parse(j); }, {"'hidden_act' = 'gelu'"});

  j = json::parse(kSmolLM2);
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expectFormatError([&] { parse(j); },
                    {"'rope_scaling.type' = 'dynamic'", "unsupported RoPE type"});
  j["rope_scaling"] = {{"factor", 2.0}};
  expectFormatError([&] { parse(j); }, {"rope_scaling has no 'rope_type'"});
  j["rope_scaling"] = {{"type", "linear"}, {"rope_type", "yarn"}, {"factor", 2.0}};
  expectFormatError([&] { parse(j); }, {"must agree"});
  j["rope_scaling"] = {{"type", "linear"}};
  expectFormatError([&] { parse(j); }, {"'rope_scaling.factor' is missing"});
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 0.0}};
  expectFormatError([&] { parse(j); }, {"'rope_scaling.factor' = 0.0"});
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  expectFormatError([&] { parse(j); }, {"'rope_scaling.low_freq_factor' is missing"});
  j["rope_scaling"]["low_freq_factor"] = 4.0;
  expectFormatError([&] { parse(j); }, {"high_freq_factor' = 4 must be > low_freq_factor = 4"});
  j["rope_scaling"]["low_freq_factor"] = 1.0;
  j["rope_scaling"].erase("original_max_position_embeddings");
  expectFormatError([&] { parse(j); }, {"original_max_position_embeddings' is missing"});
  j["rope_scaling"] = "linear";
  expectFormatError([&] { parse(j); }, {"'rope_scaling'", "must be an object"});

  j = json::parse(kQwen3V5);
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}}};
  expectFormatError([&] { parse(j); }, {"per-layer-type"});

  j = json::parse(kSmolLM2);
  j["torch_dtype"] = "float8_e4m3fn";
  expectFormatError([&] { parse(j); }, {"'torch_dtype' = 'float8_e4m3fn'", "unsupported dtype"});
  j = json::parse(kQwen3V5);
  j["dtype"] = "int8";
  expectFormatError([&] { parse(j); }, {"'dtype' = 'int8'"});
}

TEST(ModelConfig, MalformedJson) {
  expectFormatError([] { parseModelConfig("{\"hidden_size\": ", "c.json"); },
                    {"c.json", "invalid JSON"});
  expectFormatError([] { parseModelConfig("[1, 2]", "c.json"); }, {"must be a JSON object"});
  std::string dup = kSmolLM2;
  dup.insert(dup.find('{') + 1, R"("hidden_size": 64, )");
  expectFormatError([&] { parseModelConfig(dup, "c.json"); }, {"duplicate JSON key 'hidden_size'"});
}

TEST(ModelConfig, LoadFromFolderOrFile) {
  test::TempDir dir;
  test::writeText(dir / "config.json", kQwen25_0_5B);
  ModelConfig c = loadModelConfig(dir.path());
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.source, (dir / "config.json").string());
  EXPECT_EQ(loadModelConfig(dir / "config.json").hidden_size, 896);
  test::expectInvalidArgument([&] { loadModelConfig(dir / "missing"); }, "path");
  test::writeText(dir / "bad.json", "{");
  expectFormatError([&] { loadModelConfig(dir / "bad.json"); }, {"bad.json"});
}

}  // namespace
}  // namespace es::model
