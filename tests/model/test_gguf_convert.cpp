// GGUF -> HF folder: Llama q/k un-permutation on hand-made matrices, conversion of tiny hand-made
// Llama/Qwen3 GGUFs that then load through the HF path, clear errors for what cannot be
// converted, and (when ES_SMOLLM2_GGUF names the real file) the SmolLM2-135M-Instruct GGUF.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/errors.h"
#include "model/gguf_convert.h"
#include "model/gguf_dequant.h"
#include "model/gguf_fixture.h"
#include "model/gguf_test_writer.h"
#include "model/gguf_tokenizer.h"
#include "model/safetensors_test_writer.h"
#include "model/weight_names.h"
#include "model/weight_store.h"
#include "tokenizer/bpe_tokenizer.h"

namespace es::model {
namespace {

using test::GgufTestWriter;

using test::permuteLikeLlamaCpp;

TEST(GgufConvert, UnpermuteHandMade) {
  // One head of 4 rows: the stored order is r0 r2 r1 r3.
  const std::vector<float> stored = {0, 0.5f, 20, 20.5f, 10, 10.5f, 30, 30.5f};
  std::vector<float> out(8);
  unpermuteLlamaRows(stored, out, 1, 4, 2);
  EXPECT_EQ(out, (std::vector<float>{0, 0.5f, 10, 10.5f, 20, 20.5f, 30, 30.5f}));

  // Three heads of 8 rows, 5 columns: un-permuting the permuted matrix gives it back, and each
  // output row h*d + j*d/2 + i is input row h*d + 2i + j.
  const int64_t n = 3, rows = 24, cols = 5, d = 8;
  std::vector<float> w(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = static_cast<float>(r * 100 + c);
  const auto p = permuteLikeLlamaCpp(w, n, rows, cols);
  EXPECT_NE(p, w);
  std::vector<float> back(w.size());
  unpermuteLlamaRows(p, back, n, rows, cols);
  EXPECT_EQ(back, w);
  for (int64_t h = 0; h < n; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        EXPECT_EQ(back[(h * d + j * (d / 2) + i) * cols], p[(h * d + 2 * i + j) * cols]);

  EXPECT_THROW(unpermuteLlamaRows(p, back, 5, rows, cols),
               InvalidArgument);  // 5 does not divide 24
  EXPECT_THROW(unpermuteLlamaRows(p, back, 24, rows, cols), InvalidArgument);  // odd head size 1
  std::vector<float> small(3);
  EXPECT_THROW(unpermuteLlamaRows(p, small, n, rows, cols), InvalidArgument);
}

TEST(GgufConvert, TensorNames) {
  EXPECT_EQ(hfTensorName("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(hfTensorName("output.weight"), "lm_head.weight");
  EXPECT_EQ(hfTensorName("output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(hfTensorName("blk.12.attn_output.weight"), "model.layers.12.self_attn.o_proj.weight");
  EXPECT_EQ(hfTensorName("blk.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(hfTensorName("blk.3.attn_k_norm.weight"), "model.layers.3.self_attn.k_norm.weight");
  EXPECT_EQ(hfTensorName("blk.1.attn_v.bias"), "model.layers.1.self_attn.v_proj.bias");
  EXPECT_EQ(hfTensorName("blk.x.attn_q.weight"), "");
  EXPECT_EQ(hfTensorName("blk.01.attn_q.weight"), "");
  EXPECT_EQ(hfTensorName("blk.1.attn_qkv.weight"), "");
  EXPECT_EQ(hfTensorName("rope_freqs.weight"), "");
}

// Bytes for `numel` elements of `type`, with scales that keep every value finite.
std::vector<uint8_t> randomTensorBytes(GgmlType type, uint64_t numel, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::vector<uint8_t> b;
  auto half = [&](uint16_t bits) {
    b.push_back(bits & 0xFF);
    b.push_back(bits >> 8);
  };
  switch (type) {
    case GgmlType::kF32:
      for (uint64_t i = 0; i < numel; ++i) {
        const float f = real(rng);
        const auto* p = reinterpret_cast<const uint8_t*>(&f);
        b.insert(b.end(), p, p + 4);
      }
      break;
    case GgmlType::kF16:
      for (uint64_t i = 0; i < numel; ++i) half(to_fp16(real(rng)).bits);
      break;
    case GgmlType::kBF16:
      for (uint64_t i = 0; i < numel; ++i) half(to_bf16(real(rng)).bits);
      break;
    case GgmlType::kQ8_0:
      for (uint64_t k = 0; k < numel / 32; ++k) {
        half(to_fp16(0.01f * (1 + k % 7)).bits);
        for (int j = 0; j < 32; ++j) b.push_back(static_cast<uint8_t>(byte(rng)));
      }
      break;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
      for (uint64_t k = 0; k < numel / 32; ++k) {
        half(to_fp16(0.02f * (1 + k % 5)).bits);
        if (type == GgmlType::kQ4_1) half(to_fp16(-0.1f).bits);
        for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(byte(rng)));
      }
      break;
    default:
      ADD_FAILURE() << "no generator for type " << static_cast<int>(type);
  }
  return b;
}

struct TinyModel {
  std::string arch = "llama";
  int64_t hidden = 64, heads = 2, kv_heads = 1, head_dim = 32, inter = 96, layers = 2, vocab = 40;
  bool with_output = false;
  std::vector<std::string> extra_tensors;  // added as F32 [hidden]
  GgmlType q_type = GgmlType::kQ4_1;
};

GgufTestWriter tinyGguf(const TinyModel& m) {
  std::mt19937 rng(7);
  GgufTestWriter w;
  const std::string a = m.arch;
  w.kvString("general.architecture", a);
  w.kvU32(a + ".block_count", static_cast<uint32_t>(m.layers));
  w.kvU32(a + ".context_length", 4096);
  w.kvU32(a + ".embedding_length", static_cast<uint32_t>(m.hidden));
  w.kvU32(a + ".feed_forward_length", static_cast<uint32_t>(m.inter));
  w.kvU32(a + ".attention.head_count", static_cast<uint32_t>(m.heads));
  w.kvU32(a + ".attention.head_count_kv", static_cast<uint32_t>(m.kv_heads));
  w.kvF32(a + ".rope.freq_base", 100000.0f);
  w.kvF32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (a == "qwen3") w.kvU32(a + ".attention.key_length", static_cast<uint32_t>(m.head_dim));
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < m.vocab; ++i) {
    tokens.push_back(i == 0 ? "<|endoftext|>" : i == 1 ? "<|im_start|>" : "t" + std::to_string(i));
    types.push_back(i < 2 ? 3 : 1);
  }
  w.kvString("tokenizer.ggml.model", "gpt2");
  w.kvString("tokenizer.ggml.pre", a == "llama" ? "smollm" : "qwen2");
  w.kvStringArray("tokenizer.ggml.tokens", tokens);
  w.kvI32Array("tokenizer.ggml.token_type", types);
  w.kvStringArray("tokenizer.ggml.merges", {"t 1"});
  w.kvU32("tokenizer.ggml.bos_token_id", 1);
  w.kvU32("tokenizer.ggml.eos_token_id", 0);
  w.kvString("tokenizer.chat_template", "{{ x }}");

  auto add = [&](const std::string& name, std::vector<uint64_t> dims, GgmlType type) {
    uint64_t numel = 1;
    for (uint64_t d : dims) numel *= d;
    w.tensor({name,
              std::move(dims),
              static_cast<uint32_t>(type),
              randomTensorBytes(type, numel, rng),
              {}});
  };
  const auto h = static_cast<uint64_t>(m.hidden), q = static_cast<uint64_t>(m.heads * m.head_dim),
             kv = static_cast<uint64_t>(m.kv_heads * m.head_dim),
             in = static_cast<uint64_t>(m.inter);
  add("token_embd.weight", {h, static_cast<uint64_t>(m.vocab)}, GgmlType::kQ8_0);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {h}, GgmlType::kF32);
    add(p + "attn_q.weight", {h, q}, m.q_type);
    add(p + "attn_k.weight", {h, kv}, GgmlType::kQ4_0);
    add(p + "attn_v.weight", {h, kv}, GgmlType::kF16);
    add(p + "attn_output.weight", {q, h}, GgmlType::kBF16);
    if (a == "qwen3") {
      add(p + "attn_q_norm.weight", {static_cast<uint64_t>(m.head_dim)}, GgmlType::kF32);
      add(p + "attn_k_norm.weight", {static_cast<uint64_t>(m.head_dim)}, GgmlType::kF32);
    }
    add(p + "ffn_norm.weight", {h}, GgmlType::kF32);
    add(p + "ffn_gate.weight", {h, in}, GgmlType::kQ4_1);
    add(p + "ffn_up.weight", {h, in}, GgmlType::kQ8_0);
    add(p + "ffn_down.weight", {in, h}, GgmlType::kF32);
  }
  add("output_norm.weight", {h}, GgmlType::kF32);
  if (m.with_output) add("output.weight", {h, static_cast<uint64_t>(m.vocab)}, GgmlType::kQ8_0);
  for (const std::string& name : m.extra_tensors) add(name, {h}, GgmlType::kF32);
  return w;
}

std::vector<float> floatsOf(const WeightStore& store, const std::string& name) {
  const TensorView v = store.view(name);
  EXPECT_EQ(v.dtype, DType::kF32);
  const auto* p = static_cast<const float*>(v.data);
  return std::vector<float>(p, p + store.info(name).numel());
}

TEST(GgufConvert, TinyLlamaLoadsThroughHfPath) {
  test::TempDir dir;
  test::writeBytes(dir / "tiny.gguf", tinyGguf(TinyModel{}).build());
  ConvertOptions options;
  options.dtype = DType::kF32;
  size_t progress_calls = 0;
  options.progress = [&](size_t done, size_t total, const std::string&) {
    ++progress_calls;
    EXPECT_LE(done, total);
  };
  const ConvertReport r = convertGgufToHf(dir / "tiny.gguf", dir / "hf", options);
  EXPECT_EQ(r.tensors, 1 + 2 * 9 + 1u);
  EXPECT_EQ(progress_calls, r.tensors);
  EXPECT_TRUE(r.unpermuted);

  const ModelConfig c = loadModelConfig(dir / "hf");
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.vocab_size, 40);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope.theta, 100000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);  // shortest decimal of the f32, not 9.99999974e-06
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{0}));
  const WeightStore store = WeightStore::openFolder(dir / "hf");
  EXPECT_NO_THROW(checkWeights(store, c));
  EXPECT_FALSE(store.contains("lm_head.weight"));

  // Values: the dequantised GGUF data, q/k rows un-permuted, the rest unchanged.
  const GgufFile g = GgufFile::open(dir / "tiny.gguf");
  const auto q = dequantizeTensor(g, g.info("blk.1.attn_q.weight"));
  EXPECT_EQ(floatsOf(store, "model.layers.1.self_attn.q_proj.weight"), [&] {
    std::vector<float> u(q.size());
    unpermuteLlamaRows(q, u, 2, 64, 64);
    return u;
  }());
  EXPECT_EQ(
      permuteLikeLlamaCpp(floatsOf(store, "model.layers.0.self_attn.k_proj.weight"), 1, 32, 64),
      dequantizeTensor(g, g.info("blk.0.attn_k.weight")));
  EXPECT_EQ(floatsOf(store, "model.layers.0.self_attn.v_proj.weight"),
            dequantizeTensor(g, g.info("blk.0.attn_v.weight")));
  EXPECT_EQ(floatsOf(store, "model.embed_tokens.weight"),
            dequantizeTensor(g, g.info("token_embd.weight")));
  EXPECT_EQ(floatsOf(store, "model.layers.1.mlp.down_proj.weight"),
            dequantizeTensor(g, g.info("blk.1.ffn_down.weight")));

  // Tokenizer files.
  std::ifstream tj(dir / "hf" / "tokenizer.json");
  const auto tok = nlohmann::json::parse(tj);
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_EQ(tok["model"]["vocab"]["t5"], 5);
  EXPECT_EQ(tok["model"]["merges"][0], "t 1");
  EXPECT_EQ(tok["added_tokens"].size(), 2u);
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"][0]["type"], "Digits");
  std::ifstream tc(dir / "hf" / "tokenizer_config.json");
  const auto tcfg = nlohmann::json::parse(tc);
  EXPECT_EQ(tcfg["chat_template"], "{{ x }}");
  EXPECT_EQ(tcfg["bos_token"], "<|im_start|>");
  EXPECT_EQ(tcfg["eos_token"], "<|endoftext|>");
}

TEST(GgufConvert, Bf16AndUntiedOutput) {
  test::TempDir dir;
  TinyModel m;
  m.with_output = true;
  test::writeBytes(dir / "tiny.gguf", tinyGguf(m).build());
  const ConvertReport r = convertGgufToHf(dir / "tiny.gguf", dir / "hf");  // default bf16
  EXPECT_FALSE(r.config.tie_word_embeddings);
  const WeightStore store = WeightStore::openFolder(dir / "hf");
  EXPECT_EQ(store.info("lm_head.weight").dtype, DType::kBF16);
  EXPECT_EQ(store.info("lm_head.weight").shape, (std::vector<int64_t>{40, 64}));
  const GgufFile g = GgufFile::open(dir / "tiny.gguf");
  const auto ref = dequantizeTensor(g, g.info("blk.0.ffn_up.weight"));
  const TensorView v = store.view("model.layers.0.mlp.up_proj.weight");
  const auto* b = static_cast<const bf16*>(v.data);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(b[i].bits, to_bf16(ref[i]).bits) << i;
}

TEST(GgufConvert, Qwen3IsNotPermuted) {
  test::TempDir dir;
  TinyModel m;
  m.arch = "qwen3";
  m.head_dim = 16;  // explicit key_length, not hidden / heads
  m.q_type = GgmlType::kQ8_0;
  test::writeBytes(dir / "tiny.gguf", tinyGguf(m).build());
  ConvertOptions options;
  options.dtype = DType::kF32;
  const ConvertReport r = convertGgufToHf(dir / "tiny.gguf", dir / "hf", options);
  EXPECT_FALSE(r.unpermuted);
  EXPECT_EQ(r.config.architecture, Architecture::kQwen3);
  EXPECT_EQ(r.config.head_dim, 16);
  EXPECT_TRUE(r.config.qk_norm);
  const WeightStore store = WeightStore::openFolder(dir / "hf");
  const GgufFile g = GgufFile::open(dir / "tiny.gguf");
  EXPECT_EQ(floatsOf(store, "model.layers.0.self_attn.q_proj.weight"),
            dequantizeTensor(g, g.info("blk.0.attn_q.weight")));
  EXPECT_TRUE(store.contains("model.layers.1.self_attn.k_norm.weight"));
  std::ifstream tj(dir / "hf" / "tokenizer.json");
  const auto tok = nlohmann::json::parse(tj);
  EXPECT_EQ(tok["normalizer"]["type"], "NFC");
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], kQwen2SplitRegex);
}

void expectConvertError(const GgufTestWriter& w, std::initializer_list<std::string> fragments) {
  test::TempDir dir;
  test::writeBytes(dir / "bad.gguf", w.build());
  try {
    convertGgufToHf(dir / "bad.gguf", dir / "hf");
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    for (const std::string& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "hf" / "model.safetensors"));  // nothing half-written
}

TEST(GgufConvert, ClearErrors) {
  TinyModel extra;
  extra.extra_tensors = {"blk.0.attn_qkv.weight"};
  expectConvertError(tinyGguf(extra), {"unknown tensors: blk.0.attn_qkv.weight"});

  GgufTestWriter q3 = tinyGguf(TinyModel{});
  auto& t = q3.tensors()[2];  // blk.0.attn_q.weight (64, 64) -> Q3_K needs 256-element rows
  t.dims = {256, 16};
  t.type =
      static_cast<uint32_t>(GgmlType::kQ3_K);  // a known layout this runtime does not dequantise
  t.data.assign(16 * 110, 0);
  expectConvertError(q3, {"blk.0.attn_q.weight (Q3_K)", "cannot be dequantised", "misshapen"});

  GgufTestWriter missing = tinyGguf(TinyModel{});
  missing.tensors().pop_back();  // output_norm.weight
  expectConvertError(missing, {"missing: model.norm.weight"});

  TinyModel arch;
  arch.arch = "gemma";
  expectConvertError(tinyGguf(arch), {"'general.architecture' = 'gemma' is unsupported"});

  TinyModel rope;
  rope.extra_tensors = {"rope_freqs.weight"};
  expectConvertError(tinyGguf(rope), {"rope_freqs.weight"});
}

// The real default model, when present (ES_SMOLLM2_GGUF=/path/SmolLM2-135M-Instruct.Q4_1.gguf).
TEST(GgufConvert, RealSmolLM2) {
  const char* path = std::getenv("ES_SMOLLM2_GGUF");
  if (path == nullptr || !std::filesystem::exists(path)) GTEST_SKIP() << "ES_SMOLLM2_GGUF not set";
  const GgufFile g = GgufFile::open(path);
  EXPECT_EQ(g.tensors().size(), 272u);
  EXPECT_EQ(g.info("token_embd.weight").ggmlType(), GgmlType::kQ8_0);
  EXPECT_EQ(g.info("blk.0.attn_q.weight").ggmlType(), GgmlType::kQ4_1);
  const auto spec = tokenizerSpecFromGguf(g);
  EXPECT_EQ(spec.vocab.size(), 49152u);
  EXPECT_EQ(spec.merges.size(), 48900u);
  EXPECT_EQ(spec.addedTokens.size(), 17u);
  EXPECT_EQ(spec.vocab[2], "<|im_end|>");
  EXPECT_NE(spec.chatTemplate.find("<|im_start|>"), std::string::npos);
  // Ids from Hugging Face `tokenizers` on the converted tokenizer.json (an independent
  // implementation): digits split one by one, special tokens matched first.
  const tokenizer::BpeTokenizer tok(spec);
  EXPECT_EQ(tok.encode("Hello world, it's 2024!"),
            (std::vector<int32_t>{19556, 905, 28, 357, 506, 216, 34, 32, 34, 36, 17}));
  EXPECT_EQ(tok.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"),
            (std::vector<int32_t>{1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198}));

  test::TempDir dir;
  const ConvertReport r = convertGgufToHf(path, dir / "hf");
  const ModelConfig c = loadModelConfig(dir / "hf");
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rope.theta, 100000.0);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));
  const WeightStore store = WeightStore::openFolder(dir / "hf");
  EXPECT_NO_THROW(checkWeights(store, c));
  EXPECT_EQ(store.size(), 272u);
  EXPECT_EQ(store.info("model.layers.29.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{192, 576}));
  EXPECT_EQ(store.info("model.embed_tokens.weight").shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(r.tensors, 272u);
}

}  // namespace
}  // namespace es::model
