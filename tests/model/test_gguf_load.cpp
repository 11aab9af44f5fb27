// Loading a .gguf directly (loadModelConfig, WeightStore::openGguf, TargetModel): GGUFs written
// from the HF fixture models give exactly the fixture's logits where the types are exact (F32,
// BF16), exactly the convert-then-load logits where they are quantised (Q8_0, Q4_1, F16, and the
// K-quants on a random model), tensors equal to the whole-tensor dequantiser (+ un-permutation),
// and clear errors for files that cannot load. With ES_SMOLLM2_GGUF: the real default model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "common/errors.h"
#include "kv/kv_cache_manager.h"
#include "model/gguf_convert.h"
#include "model/gguf_dequant.h"
#include "model/gguf_fixture.h"
#include "model/gguf_tokenizer.h"
#include "model/gguf_weights.h"
#include "model/safetensors_test_writer.h"
#include "model/target_model.h"
#include "model/weight_names.h"
#include "model/weight_store.h"
#include "ops/backend.h"
#include "support/decode_batch.h"
#include "support/test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace es::model {
namespace {

namespace fs = std::filesystem;

std::string fixtureDir(const std::string& family) {
  return test::test_data_dir() + "/models/" + family;
}

// The Llama fixture uses llama3 RoPE scaling, which GGUF has no metadata for (llama.cpp writes a
// rope_freqs tensor, unsupported here). Its GGUF gets plain RoPE at the same theta, and the
// reference is a copy of the fixture folder with that config.
// An HF folder: the fixture's weights with `config`'s RoPE replaced by plain RoPE.
void writePlainRopeFolder(const std::string& family, const fs::path& out) {
  fs::create_directories(out);
  fs::copy_file(fixtureDir(family) + "/model.safetensors", out / "model.safetensors");
  std::ifstream in(fixtureDir(family) + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  const double theta = config["rope_parameters"]["rope_theta"];
  config["rope_parameters"] = {{"rope_theta", theta}, {"rope_type", "default"}};
  test::writeText(out / "config.json", config.dump(2));
}

// The reference folder for `family` (plain-RoPE copy for llama) and the GGUF writer options.
struct Source {
  fs::path folder;
  test::GgufFromFolderOptions options;
};

Source sourceFor(const std::string& family, const test::TempDir& tmp) {
  Source s;
  s.folder = fixtureDir(family);
  if (family == "llama") {
    s.folder = tmp / "llama_plain_rope";
    writePlainRopeFolder(family, s.folder);
  }
  return s;
}

// Logits of every row of a prefill of `prompt`, then of `steps` greedy decode steps (CPU backend).
std::vector<float> runLogits(const fs::path& model_path, const std::vector<int32_t>& prompt,
                             int steps) {
  auto backend = ops::makeCpuBackend();
  TargetModel model(model_path, *backend, 64);
  const int64_t V = model.config().vocab_size;
  kv::KvCacheConfig kc;
  kc.maxBatchSize = 1;
  kc.maxSequenceLength = 128;
  kc.dtype = DType::kF32;
  kc.baseLayers = model.kvLayerShapes();
  kv::KvCacheManager cache(kc, MemorySpace::kHost);
  const int32_t slot = cache.admit();
  const int32_t L = static_cast<int32_t>(prompt.size());
  ForwardBatch b;
  for (int32_t i = 0; i < L; ++i) {
    b.tokens.push_back(prompt[i]);
    b.positions.push_back(i);
    b.tokenToSequence.push_back(slot);
    b.logitRows.push_back(i);
  }
  b.cuQSeqLens = {0, L};
  b.kvLengths = {L};
  ForwardResult r = model.forward(b, cache);
  cache.commitBase(slot, L);
  std::vector<float> all = r.logits;
  for (int s = 0; s < steps; ++s) {
    const float* last = all.data() + all.size() - V;
    const auto next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    r = model.forward(test::decodeBatch(cache, {slot}, {next}), cache);
    cache.commitBase(slot, 1);
    all.insert(all.end(), r.logits.begin(), r.logits.end());
  }
  return all;
}

// The fields that decide what the model computes.
void expectSameModel(const ModelConfig& got, const ModelConfig& want) {
  EXPECT_EQ(got.architecture, want.architecture);
  EXPECT_EQ(got.hidden_size, want.hidden_size);
  EXPECT_EQ(got.intermediate_size, want.intermediate_size);
  EXPECT_EQ(got.num_hidden_layers, want.num_hidden_layers);
  EXPECT_EQ(got.num_attention_heads, want.num_attention_heads);
  EXPECT_EQ(got.num_key_value_heads, want.num_key_value_heads);
  EXPECT_EQ(got.head_dim, want.head_dim);
  EXPECT_EQ(got.vocab_size, want.vocab_size);
  EXPECT_EQ(got.max_position_embeddings, want.max_position_embeddings);
  EXPECT_EQ(got.rms_norm_eps, want.rms_norm_eps);
  EXPECT_EQ(got.tie_word_embeddings, want.tie_word_embeddings);
  EXPECT_EQ(got.qkv_bias, want.qkv_bias);
  EXPECT_EQ(got.o_bias, want.o_bias);
  EXPECT_EQ(got.mlp_bias, want.mlp_bias);
  EXPECT_EQ(got.qk_norm, want.qk_norm);
  EXPECT_EQ(got.rope.type, want.rope.type);
  EXPECT_EQ(got.rope.theta, want.rope.theta);
  EXPECT_EQ(got.rope.factor, want.rope.factor);
  EXPECT_EQ(got.rope.original_max_position_embeddings, want.rope.original_max_position_embeddings);
  EXPECT_EQ(got.layer_types, want.layer_types);
}

const std::vector<int32_t> kPrompt = {5, 17, 300, 42, 7, 250, 99, 123, 64, 1};

class GgufLoadFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufLoadFixture, ConfigFromMetadataEqualsTheFolders) {
  test::TempDir tmp;
  const Source src = sourceFor(GetParam(), tmp);
  test::writeBytes(tmp / "m.gguf", test::ggufFromFolder(src.folder, src.options).build());
  const ModelConfig want = loadModelConfig(src.folder);
  const ModelConfig got = loadModelConfig(tmp / "m.gguf");
  EXPECT_EQ(got.source, (tmp / "m.gguf").string());
  expectSameModel(got, want);
  EXPECT_EQ(got.eos_token_ids,
            (std::vector<int64_t>{want.vocab_size - 3}));  // the test vocabulary's eos
}

TEST_P(GgufLoadFixture, ExactTypesGiveTheFixtureLogits) {
  test::TempDir tmp;
  Source src = sourceFor(GetParam(), tmp);
  // Norms F32, matrices BF16 (the fixture's own values, so both are exact), the embedding F32.
  src.options.type = [](const std::string& name) {
    return name.find("proj") != std::string::npos ? GgmlType::kBF16 : GgmlType::kF32;
  };
  test::writeBytes(tmp / "m.gguf", test::ggufFromFolder(src.folder, src.options).build());

  // Every tensor reads back as the folder's, bit for bit (q/k un-permuted).
  const WeightStore folder = WeightStore::openFolder(src.folder);
  const WeightStore gguf = WeightStore::open(tmp / "m.gguf");
  ASSERT_TRUE(gguf.isGguf());
  EXPECT_EQ(gguf.names(), folder.names());
  for (const std::string& name : folder.names()) {
    const TensorInfo& fi = folder.info(name);
    ASSERT_EQ(gguf.info(name).shape, fi.shape) << name;
    ASSERT_EQ(gguf.info(name).dtype, DType::kF32) << name;
    const HostTensor t = gguf.read(name);
    const TensorView v = folder.view(name);
    for (int64_t i = 0; i < fi.numel(); ++i) {
      ASSERT_EQ(t.view.as<float>()[i], loadAsFloat(v.data, fi.dtype, i))
          << name << " [" << i << "]";
    }
  }
  // And the model computes exactly what it computes from the folder.
  const auto want = runLogits(src.folder, kPrompt, 4);
  const auto got = runLogits(tmp / "m.gguf", kPrompt, 4);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got, want);
}

TEST_P(GgufLoadFixture, QuantisedDirectLoadEqualsConvertThenLoad) {
  test::TempDir tmp;
  Source src = sourceFor(GetParam(), tmp);
  src.options.type = [](const std::string& name) {
    if (name.find("q_proj.weight") != std::string::npos ||
        name.find("up_proj") != std::string::npos) {
      return GgmlType::kQ4_1;
    }
    if (name.find("k_proj.weight") != std::string::npos ||
        name.find("embed") != std::string::npos) {
      return GgmlType::kQ8_0;
    }
    if (name.find("proj.weight") != std::string::npos || name == "lm_head.weight")
      return GgmlType::kF16;
    return GgmlType::kF32;
  };
  test::writeBytes(tmp / "m.gguf", test::ggufFromFolder(src.folder, src.options).build());
  ConvertOptions f32;
  f32.dtype = DType::kF32;
  convertGgufToHf(tmp / "m.gguf", tmp / "hf", f32);

  // Tensors: the direct read equals the whole-tensor dequantiser followed by the un-permutation.
  const GgufFile file = GgufFile::open(tmp / "m.gguf");
  const WeightStore gguf = WeightStore::openGguf(tmp / "m.gguf");
  const ModelConfig c = loadModelConfig(tmp / "m.gguf");
  for (const GgufTensorInfo& t : file.tensors()) {
    const std::string name = hfTensorName(t.name);
    std::vector<float> want = dequantizeTensor(file, t);
    if (c.architecture == Architecture::kLlama &&
        (name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight"))) {
      std::vector<float> u(want.size());
      const int64_t heads =
          name.ends_with("q_proj.weight") ? c.num_attention_heads : c.num_key_value_heads;
      const auto shape = t.rowMajorShape();
      unpermuteLlamaRows(want, u, heads, shape[0], shape[1]);
      want.swap(u);
    }
    const HostTensor got = gguf.read(name);
    ASSERT_EQ(std::vector<float>(got.view.as<float>(), got.view.as<float>() + want.size()), want)
        << name;
  }
  const auto want = runLogits(tmp / "hf", kPrompt, 4);
  const auto got = runLogits(tmp / "m.gguf", kPrompt, 4);
  EXPECT_EQ(got, want);
  // Quantisation moved the logits off the fixture's, but they still follow them closely: a
  // tensor scrambled the same way by both loaders (wrong permutation or block order) would not.
  const auto exact = runLogits(src.folder, kPrompt, 0);
  double sxy = 0, sxx = 0, syy = 0, mx = 0, my = 0;
  const size_t n = exact.size();
  for (size_t i = 0; i < n; ++i) mx += exact[i] / n, my += got[i] / n;
  for (size_t i = 0; i < n; ++i) {
    sxy += (exact[i] - mx) * (got[i] - my);
    sxx += (exact[i] - mx) * (exact[i] - mx);
    syy += (got[i] - my) * (got[i] - my);
  }
  const double correlation = sxy / std::sqrt(sxx * syy);
  std::printf("%s: correlation of quantised and exact logits %.5f\n", GetParam().c_str(),
              correlation);
  EXPECT_GT(correlation, 0.95);
}

INSTANTIATE_TEST_SUITE_P(Families, GgufLoadFixture, ::testing::Values("llama", "qwen2", "qwen3"));

// A random Llama with every matrix in a K-quant (hidden 256: whole super-blocks per row), a
// vocabulary above one read chunk (4200 x 256 > 2^20 elements), loaded directly and through
// convert, in f32 and bf16.
ModelConfig kQuantConfig() {
  ModelConfig c;
  c.architecture = Architecture::kLlama;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 4200;
  c.max_position_embeddings = 512;
  c.rms_norm_eps = 1e-5;
  c.rope.theta = 10000;
  c.tie_word_embeddings = true;
  return c;
}

GgmlType kQuantTypeOf(const std::string& name) {
  if (name.find("q_proj") != std::string::npos || name.find("o_proj") != std::string::npos ||
      name.find("down_proj") != std::string::npos) {
    return GgmlType::kQ4_K;
  }
  if (name.find("k_proj") != std::string::npos || name.find("gate_proj") != std::string::npos)
    return GgmlType::kQ5_K;
  return GgmlType::kQ6_K;  // v_proj, up_proj, the embedding
}

TEST(GgufLoad, KQuantsDirectEqualsConvertThenLoad) {
  test::TempDir tmp;
  test::writeBytes(tmp / "k.gguf", test::randomGguf(kQuantConfig(), kQuantTypeOf).build());
  const GgufFile file = GgufFile::open(tmp / "k.gguf");
  EXPECT_EQ(file.info("blk.1.attn_k.weight").ggmlType(), GgmlType::kQ5_K);
  EXPECT_EQ(file.info("token_embd.weight").ggmlType(), GgmlType::kQ6_K);
  ConvertOptions f32;
  f32.dtype = DType::kF32;
  convertGgufToHf(tmp / "k.gguf", tmp / "hf32", f32);
  convertGgufToHf(tmp / "k.gguf", tmp / "hf16");  // bf16

  const WeightStore direct32 = WeightStore::openGguf(tmp / "k.gguf", DType::kF32);
  const WeightStore direct16 = WeightStore::open(tmp / "k.gguf", DType::kBF16);
  const WeightStore folder32 = WeightStore::openFolder(tmp / "hf32");
  const WeightStore folder16 = WeightStore::openFolder(tmp / "hf16");
  for (const GgufTensorInfo& t : file.tensors()) {
    const std::string name = hfTensorName(t.name);
    std::vector<float> want = dequantizeTensor(file, t);
    const auto shape = t.rowMajorShape();
    if (name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight")) {
      std::vector<float> u(want.size());
      unpermuteLlamaRows(want, u, name.ends_with("q_proj.weight") ? 4 : 2, shape[0], shape[1]);
      want.swap(u);
    }
    const HostTensor a = direct32.read(name);
    const HostTensor b = direct16.read(name);
    ASSERT_EQ(b.view.dtype, DType::kBF16);
    const TensorView f32v = folder32.view(name), f16v = folder16.view(name);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(a.view.as<float>()[i], want[i]) << name << " [" << i << "]";
      ASSERT_EQ(f32v.as<float>()[i], want[i]) << name << " [" << i << "]";
      ASSERT_EQ(b.view.as<bf16>()[i].bits, to_bf16(want[i]).bits) << name << " [" << i << "]";
      ASSERT_EQ(f16v.as<bf16>()[i].bits, to_bf16(want[i]).bits) << name << " [" << i << "]";
    }
  }
  EXPECT_EQ(runLogits(tmp / "k.gguf", kPrompt, 3), runLogits(tmp / "hf32", kPrompt, 3));
}

TEST(GgufLoad, StoreSurface) {
  test::TempDir tmp;
  test::writeBytes(tmp / "k.gguf", test::randomGguf(kQuantConfig(), kQuantTypeOf).build());
  const WeightStore s = WeightStore::openGguf(tmp / "k.gguf", DType::kBF16);
  EXPECT_EQ(s.source(), (tmp / "k.gguf").string());
  EXPECT_EQ(s.numFiles(), 0u);
  EXPECT_EQ(s.size(), 1u + 1 + 2 * 9);
  EXPECT_EQ(s.ggufOrigin("model.layers.1.self_attn.k_proj.weight"), "blk.1.attn_k.weight Q5_K");
  EXPECT_EQ(s.info("model.embed_tokens.weight").shape, (std::vector<int64_t>{4200, 256}));
  EXPECT_EQ(s.info("model.embed_tokens.weight").byteSize(), 4200u * 256 * 2);
  uint64_t total = 0;
  for (const std::string& n : s.names()) total += s.info(n).byteSize();
  EXPECT_EQ(s.totalTensorBytes(), total);
  EXPECT_NO_THROW(checkWeights(s, loadModelConfig(tmp / "k.gguf")));
  // No mapped view of a GGUF tensor: read() is the way, and the error says so.
  try {
    s.view("model.norm.weight");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("read()"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.fileOf("model.norm.weight"), InvalidArgument);
  EXPECT_THROW(s.read("model.layers.9.mlp.up_proj.weight"), InvalidArgument);
  EXPECT_THROW(WeightStore::openGguf(tmp / "k.gguf", DType::kI32), InvalidArgument);
  // GgufWeights::read checks the destination.
  const auto w = GgufWeights::open(tmp / "k.gguf", DType::kF32);
  std::vector<uint8_t> small(16);
  EXPECT_THROW(w->read(w->entries()[0], small), InvalidArgument);
  // Detection: by name (even when missing), or by magic; never a folder.
  EXPECT_TRUE(isGgufPath(tmp / "k.gguf"));
  EXPECT_TRUE(isGgufPath(tmp / "missing.gguf"));
  fs::copy_file(tmp / "k.gguf", tmp / "renamed.bin");
  EXPECT_TRUE(isGgufPath(tmp / "renamed.bin"));
  EXPECT_EQ(loadModelConfig(tmp / "renamed.bin").hidden_size, 256);
  test::writeText(tmp / "other.bin", "not a gguf");
  EXPECT_FALSE(isGgufPath(tmp / "other.bin"));
  fs::create_directories(tmp / "dir.gguf");
  EXPECT_FALSE(isGgufPath(tmp / "dir.gguf"));
}

// Message of the exception `f` throws, as type E; fails the test when it throws nothing.
template <typename E, typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

TEST(GgufLoad, ClearErrors) {
  test::TempDir tmp;
  auto backend = ops::makeCpuBackend();
  // Missing file: the path is named.
  std::string msg = errorOf<InvalidArgument>([&] { TargetModel(tmp / "none.gguf", *backend, 8); });
  EXPECT_NE(msg.find("none.gguf"), std::string::npos) << msg;

  // Truncated: a FormatError naming the file.
  auto bytes = test::randomGguf(kQuantConfig(), kQuantTypeOf).build();
  bytes.resize(bytes.size() / 2);
  test::writeBytes(tmp / "cut.gguf", bytes);
  msg = errorOf<FormatError>([&] { TargetModel(tmp / "cut.gguf", *backend, 8); });
  EXPECT_NE(msg.find("cut.gguf"), std::string::npos) << msg;

  // A tensor type that cannot be dequantised: named with its type, before any weight is read.
  auto w = test::randomGguf(kQuantConfig(), kQuantTypeOf);
  for (auto& t : w.tensors()) {
    if (t.name == "blk.1.ffn_up.weight") {
      t.type = static_cast<uint32_t>(GgmlType::kQ3_K);
      t.data.assign(t.data.size() / 210 * 110, 0);
    }
  }
  test::writeBytes(tmp / "q3.gguf", w.build());
  msg = errorOf<FormatError>([&] { WeightStore::open(tmp / "q3.gguf"); });
  EXPECT_NE(msg.find("blk.1.ffn_up.weight (Q3_K)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot be dequantised"), std::string::npos) << msg;
  EXPECT_THROW(TargetModel(tmp / "q3.gguf", *backend, 8), FormatError);

  // An unknown tensor and a missing one.
  auto extra = test::randomGguf(kQuantConfig(), kQuantTypeOf);
  extra.tensors().push_back(
      {"blk.0.attn_qkv.weight", {256}, 0, test::f32Bytes(std::vector<float>(256)), {}});
  auto& ts = extra.tensors();
  ts.erase(std::find_if(ts.begin(), ts.end(),
                        [](const auto& t) { return t.name == "blk.0.attn_norm.weight"; }));
  test::writeBytes(tmp / "extra.gguf", extra.build());
  msg = errorOf<FormatError>([&] { TargetModel(tmp / "extra.gguf", *backend, 8); });
  EXPECT_NE(msg.find("unknown tensors: blk.0.attn_qkv.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: model.layers.0.input_layernorm.weight"), std::string::npos) << msg;

  // Metadata without a supported config.
  test::GgufTestWriter arch;
  arch.kvString("general.architecture", "gemma");
  test::writeBytes(tmp / "gemma.gguf", arch.build());
  msg = errorOf<FormatError>([&] { loadModelConfig(tmp / "gemma.gguf"); });
  EXPECT_NE(msg.find("'general.architecture' = 'gemma' is unsupported"), std::string::npos) << msg;

  // Llama-3.1 RoPE frequency factors have no equivalent here: refused, not ignored.
  auto freqs = test::randomGguf(kQuantConfig(), kQuantTypeOf);
  freqs.tensors().push_back(
      {"rope_freqs.weight", {32}, 0, test::f32Bytes(std::vector<float>(32, 1.0f)), {}});
  test::writeBytes(tmp / "freqs.gguf", freqs.build());
  msg = errorOf<FormatError>([&] { TargetModel(tmp / "freqs.gguf", *backend, 8); });
  EXPECT_NE(msg.find("rope_freqs.weight"), std::string::npos) << msg;

  // Neither a folder nor a file.
  EXPECT_THROW(WeightStore::open(tmp / "nothing-here"), InvalidArgument);
}

// The real default model (ES_SMOLLM2_GGUF=/path/SmolLM2-135M-Instruct.Q4_1.gguf): the direct load
// equals the f32 converted folder (config, tokenizer, every tensor, logits of a chat prompt).
TEST(GgufLoad, RealSmolLM2DirectEqualsConverted) {
  const char* path = std::getenv("ES_SMOLLM2_GGUF");
  if (path == nullptr || !fs::exists(path)) GTEST_SKIP() << "ES_SMOLLM2_GGUF not set";
  test::TempDir tmp;
  ConvertOptions f32;
  f32.dtype = DType::kF32;
  convertGgufToHf(path, tmp / "hf", f32);

  const ModelConfig a = loadModelConfig(path), b = loadModelConfig(tmp / "hf");
  expectSameModel(a, b);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);

  // The tokenizer from the GGUF metadata encodes a chat prompt as the converted tokenizer.json
  // does.
  const tokenizer::TokenizerSpec sa = tokenizerSpecFromGguf(GgufFile::open(path));
  const tokenizer::TokenizerSpec sb = tokenizer::loadTokenizerJson(tmp / "hf" / "tokenizer.json");
  EXPECT_EQ(sa.vocab, sb.vocab);
  EXPECT_EQ(sa.merges, sb.merges);
  EXPECT_EQ(sa.chatTemplate, sb.chatTemplate);
  EXPECT_EQ(sa.eosId, sb.eosId);
  EXPECT_EQ(sa.bosId, sb.bosId);
  EXPECT_EQ(sa.addBos, sb.addBos);
  const std::string prompt =
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
  const std::vector<int32_t> ids = tokenizer::BpeTokenizer(sa).encode(prompt, true);
  EXPECT_EQ(ids, tokenizer::BpeTokenizer(sb).encode(prompt, true));

  const WeightStore direct = WeightStore::openGguf(path);
  const WeightStore folder = WeightStore::openFolder(tmp / "hf");
  ASSERT_EQ(direct.names(), folder.names());
  for (const std::string& name : {std::string("model.embed_tokens.weight"),
                                  std::string("model.layers.0.self_attn.q_proj.weight"),
                                  std::string("model.layers.29.self_attn.k_proj.weight"),
                                  std::string("model.layers.17.mlp.down_proj.weight")}) {
    const HostTensor t = direct.read(name);
    const TensorView v = folder.view(name);
    ASSERT_EQ(t.view.numel(), v.numel());
    EXPECT_EQ(std::memcmp(t.view.data, v.data, static_cast<size_t>(v.bytes())), 0) << name;
  }
  EXPECT_EQ(runLogits(path, ids, 8), runLogits(tmp / "hf", ids, 8));
}

}  // namespace
}  // namespace es::model
