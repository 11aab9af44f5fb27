// Expected HF tensor names/shapes per architecture, and the check of a weight store against a
// config. The expected sets below are written out by hand from the HF module structure.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "model/model_config.h"
#include "model/safetensors_test_writer.h"
#include "model/weight_names.h"
#include "model/weight_store.h"
#include "support/test_util.h"

namespace es::model {
namespace {

using nlohmann::json;
using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

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

// Tiny configs: hidden 8, 2 query heads / 1 KV head of dim 4, intermediate 12, vocab 16, 2 layers.
json tinyConfig(const char* arch) {
  return json{
      {"architectures", {arch}}, {"hidden_size", 8},         {"intermediate_size", 12},
      {"num_hidden_layers", 2},  {"num_attention_heads", 2}, {"num_key_value_heads", 1},
      {"head_dim", 4},           {"vocab_size", 16},         {"tie_word_embeddings", false}};
}

ModelConfig configOf(const json& j) { return parseModelConfig(j.dump(), "tiny/config.json"); }

// Per-layer Qwen3 tensors (prefix "model.layers.i." or "layers.i."), shapes by hand:
// q [2*4, 8], k/v [1*4, 8], o [8, 2*4], q/k norm [4], gate/up [12, 8], down [8, 12].
Shapes qwen3Layer(const std::string& p) {
  return {{p + "input_layernorm.weight", {8}},     {p + "post_attention_layernorm.weight", {8}},
          {p + "self_attn.q_proj.weight", {8, 8}}, {p + "self_attn.k_proj.weight", {4, 8}},
          {p + "self_attn.v_proj.weight", {4, 8}}, {p + "self_attn.o_proj.weight", {8, 8}},
          {p + "self_attn.q_norm.weight", {4}},    {p + "self_attn.k_norm.weight", {4}},
          {p + "mlp.gate_proj.weight", {12, 8}},   {p + "mlp.up_proj.weight", {12, 8}},
          {p + "mlp.down_proj.weight", {8, 12}}};
}

Shapes qwen3Target() {
  Shapes s = {{"model.embed_tokens.weight", {16, 8}},
              {"model.norm.weight", {8}},
              {"lm_head.weight", {16, 8}}};
  for (int i = 0; i < 2; ++i) {
    for (auto& t : qwen3Layer("model.layers." + std::to_string(i) + ".")) s.push_back(t);
  }
  return s;
}

Shapes sorted(Shapes s) {
  std::sort(s.begin(), s.end());
  return s;
}

Shapes expectedOf(const ModelConfig& c) {
  Shapes s;
  for (const ExpectedTensor& e : expectedTensors(c)) s.emplace_back(e.name, e.shape);
  return sorted(s);
}

// Writes a model folder holding `tensors` (bf16, zero bytes) and opens it.
WeightStore storeWith(const test::TempDir& dir, const Shapes& tensors,
                      const std::string& dtype = "BF16") {
  std::vector<test::FakeTensor> fakes;
  for (const auto& [name, shape] : tensors) fakes.push_back(test::fakeTensor(name, dtype, shape));
  test::writeBytes(dir / "model.safetensors", test::makeSafetensors(fakes));
  return WeightStore::openFolder(dir.path());
}

TEST(WeightNames, Qwen3TargetSet) {
  const ModelConfig c = configOf(tinyConfig("Qwen3ForCausalLM"));
  EXPECT_EQ(expectedOf(c), sorted(qwen3Target()));
  EXPECT_EQ(expectedTensors(c).size(), 3u + 2u * 11u);
  EXPECT_EQ(layerPrefix(c, 1), "model.layers.1.");
}

TEST(WeightNames, LlamaTiedHasNoLmHeadNorQkNorm) {
  json j = tinyConfig("LlamaForCausalLM");
  j["tie_word_embeddings"] = true;
  const ModelConfig c = configOf(j);
  Shapes want;
  for (auto& t : qwen3Target()) {
    const bool qk_norm = t.first.find("self_attn.q_norm") != std::string::npos ||
                         t.first.find("self_attn.k_norm") != std::string::npos;
    if (t.first == "lm_head.weight" || qk_norm) continue;
    want.push_back(t);
  }
  EXPECT_EQ(want.size(), 2u + 2u * 9u);
  EXPECT_EQ(expectedOf(c), sorted(want));
}

TEST(WeightNames, Qwen2HasQkvBiasNoOBias) {
  const ModelConfig c = configOf(tinyConfig("Qwen2ForCausalLM"));
  const Shapes got = expectedOf(c);
  auto has = [&](const std::string& name, std::vector<int64_t> shape) {
    return std::find(got.begin(), got.end(), std::make_pair(name, shape)) != got.end();
  };
  EXPECT_TRUE(has("model.layers.1.self_attn.q_proj.bias", {8}));
  EXPECT_TRUE(has("model.layers.1.self_attn.k_proj.bias", {4}));
  EXPECT_TRUE(has("model.layers.1.self_attn.v_proj.bias", {4}));
  EXPECT_FALSE(has("model.layers.1.self_attn.o_proj.bias", {8}));
  EXPECT_FALSE(has("model.layers.1.self_attn.q_norm.weight", {4}));
  EXPECT_EQ(got.size(), 3u + 2u * 12u);  // 9 per layer + 3 biases
}

TEST(WeightNames, DFlashDraftSet) {
  json j = tinyConfig("DFlashDraftModel");
  j["block_size"] = 4;
  j["dflash_config"] = {{"mask_token_id", 15}, {"target_layer_ids", {1, 2, 3}}};
  const ModelConfig c = configOf(j);
  EXPECT_EQ(draftTapCount(c), 3);
  Shapes want = {{"fc.weight", {8, 24}},
                 {"hidden_norm.weight", {8}},
                 {"norm.weight", {8}},
                 {"mask_embedding", {8}}};
  for (int i = 0; i < 2; ++i) {
    for (auto& t : qwen3Layer("layers." + std::to_string(i) + ".")) want.push_back(t);
  }
  EXPECT_EQ(expectedOf(c), sorted(want));
  EXPECT_EQ(layerPrefix(c, 0), "layers.0.");

  // Without explicit taps the default formula taps one target layer per draft layer.
  j["dflash_config"].erase("target_layer_ids");
  EXPECT_EQ(draftTapCount(configOf(j)), 2);

  // Check a store: mask_embedding optional, detected when present.
  test::TempDir dir;
  Shapes without_mask = want;
  without_mask.erase(std::find_if(without_mask.begin(), without_mask.end(),
                                  [](const auto& t) { return t.first == "mask_embedding"; }));
  EXPECT_FALSE(checkWeights(storeWith(dir, without_mask), c).has_mask_embedding);
  test::TempDir dir2;
  EXPECT_TRUE(checkWeights(storeWith(dir2, want), c).has_mask_embedding);
  // A draft shipping its own embedding table is not the z-lab format.
  test::TempDir dir3;
  Shapes with_embed = want;
  with_embed.push_back({"model.embed_tokens.weight", {16, 8}});
  expectFormatError([&] { checkWeights(storeWith(dir3, with_embed), c); },
                    {"1 unexpected", "model.embed_tokens.weight [16, 8]"});
}

TEST(WeightCheck, CompleteStorePassesInEveryDType) {
  const ModelConfig c = configOf(tinyConfig("Qwen3ForCausalLM"));
  for (const char* dtype : {"BF16", "F16", "F32"}) {
    test::TempDir dir;
    WeightCheckReport r = checkWeights(storeWith(dir, qwen3Target(), dtype), c);
    EXPECT_TRUE(r.ignored.empty());
  }
}

TEST(WeightCheck, MissingTensor) {
  const ModelConfig c = configOf(tinyConfig("Qwen3ForCausalLM"));
  Shapes s = qwen3Target();
  s.erase(std::find_if(s.begin(), s.end(), [](const auto& t) {
    return t.first == "model.layers.1.self_attn.k_norm.weight";
  }));
  test::TempDir dir;
  const WeightStore store = storeWith(dir, s);
  expectFormatError([&] { checkWeights(store, c); },
                    {dir.path().string(), "Qwen3ForCausalLM", "tiny/config.json", "1 missing",
                     "model.layers.1.self_attn.k_norm.weight [4]"});
}

TEST(WeightCheck, WrongShape) {
  const ModelConfig c = configOf(tinyConfig("Qwen3ForCausalLM"));
  Shapes s = qwen3Target();
  for (auto& t : s) {
    if (t.first == "model.layers.0.self_attn.k_proj.weight") t.second = {8, 4};  // transposed
  }
  test::TempDir dir;
  expectFormatError([&] { checkWeights(storeWith(dir, s), c); },
                    {"1 with a wrong shape",
                     "model.layers.0.self_attn.k_proj.weight: expected [4, 8], found [8, 4]"});
}

TEST(WeightCheck, UnexpectedTensorIsAnError) {
  const ModelConfig c = configOf(tinyConfig("Qwen3ForCausalLM"));
  Shapes s = qwen3Target();
  s.push_back({"model.layers.0.self_attn.o_proj.bias", {8}});  // config says no attention bias
  test::TempDir dir;
  expectFormatError([&] { checkWeights(storeWith(dir, s), c); },
                    {"1 unexpected", "model.layers.0.self_attn.o_proj.bias [8]"});
}

TEST(WeightCheck, ToleratedExtras) {
  json j = tinyConfig("LlamaForCausalLM");
  j["tie_word_embeddings"] = true;
  const ModelConfig c = configOf(j);
  Shapes s;
  for (const ExpectedTensor& e : expectedTensors(c)) s.emplace_back(e.name, e.shape);
  s.push_back({"lm_head.weight", {16, 8}});  // tied: ignored
  s.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {2}});
  test::TempDir dir;
  WeightCheckReport r = checkWeights(storeWith(dir, s, "F32"), c);
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"lm_head.weight",
                                                 "model.layers.0.self_attn.rotary_emb.inv_freq"}));
}

TEST(WeightCheck, UntiedConfigNeedsLmHead) {
  json j = tinyConfig("LlamaForCausalLM");
  j["tie_word_embeddings"] = true;
  Shapes tied;
  for (const ExpectedTensor& e : expectedTensors(configOf(j))) tied.emplace_back(e.name, e.shape);
  j["tie_word_embeddings"] = false;
  test::TempDir dir;
  expectFormatError([&] { checkWeights(storeWith(dir, tied), configOf(j)); },
                    {"1 missing", "lm_head.weight [16, 8]"});
}

TEST(WeightCheck, ManyProblemsAreSummarised) {
  json j = tinyConfig("Qwen3ForCausalLM");
  j["num_hidden_layers"] = 4;  // the store only has layers 0 and 1: 22 tensors missing
  test::TempDir dir;
  expectFormatError([&] { checkWeights(storeWith(dir, qwen3Target()), configOf(j)); },
                    {"22 missing", "... and 14 more"});
}

TEST(WeightCheck, ShardedStoreIsCheckedAsOne) {
  const ModelConfig c = configOf(tinyConfig("Qwen3ForCausalLM"));
  const Shapes all = qwen3Target();
  std::vector<test::FakeTensor> a, b;
  std::string index = R"({"weight_map":{)";
  for (size_t i = 0; i < all.size(); ++i) {
    const bool first = i < all.size() / 2;
    (first ? a : b).push_back(test::fakeTensor(all[i].first, "BF16", all[i].second));
    if (i) index += ',';
    index += "\"" + all[i].first + "\":\"" + (first ? "a.safetensors" : "b.safetensors") + "\"";
  }
  index += "}}";
  test::TempDir dir;
  test::writeBytes(dir / "a.safetensors", test::makeSafetensors(a));
  test::writeBytes(dir / "b.safetensors", test::makeSafetensors(b));
  test::writeText(dir / "model.safetensors.index.json", index);
  WeightStore store = WeightStore::openFolder(dir.path());
  EXPECT_EQ(store.numFiles(), 2u);
  EXPECT_TRUE(checkWeights(store, c).ignored.empty());
}

// The committed fixtures were saved by transformers 5.x (tools/make_fixtures.py): real folders
// in the 5.x dialect must load and pass the check with no extras.
TEST(WeightCheck, TransformersFixtureFoldersLoad) {
  const std::filesystem::path root = std::filesystem::path(test::test_data_dir()) / "models";
  for (const char* name : {"llama", "qwen2", "qwen3"}) {
    SCOPED_TRACE(name);
    const std::filesystem::path dir = root / name;
    ASSERT_TRUE(std::filesystem::exists(dir / "config.json")) << dir;
    const ModelConfig c = loadModelConfig(dir);
    const WeightStore store = WeightStore::openFolder(dir);
    const WeightCheckReport r = checkWeights(store, c);
    EXPECT_TRUE(r.ignored.empty());
    EXPECT_EQ(store.size(), expectedTensors(c).size());
    // The reference outputs are safetensors too.
    EXPECT_GT(SafetensorsFile::open(dir / "reference.safetensors").tensors().size(), 0u);
  }
  // Values read from the llama fixture's config.json by hand.
  const ModelConfig llama = loadModelConfig(root / "llama");
  EXPECT_EQ(llama.architecture, Architecture::kLlama);
  EXPECT_EQ(llama.head_dim, 64);
  EXPECT_EQ(llama.num_attention_heads, 3);
  EXPECT_EQ(llama.num_key_value_heads, 1);
  EXPECT_TRUE(llama.tie_word_embeddings);
  EXPECT_EQ(llama.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(llama.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(llama.rope.theta, 500000.0);
  EXPECT_EQ(llama.rope.original_max_position_embeddings, 64);
  EXPECT_EQ(llama.dtype, DType::kBF16);
}

}  // namespace
}  // namespace es::model
