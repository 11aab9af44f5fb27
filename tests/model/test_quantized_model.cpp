// Models holding quantized linears (model/linear_weight.h) on the CPU backend: GGUF files whose
// projections and lm_head are Q8_0 / Q4_0 / Q4_1 (the fixture models, quantized here) or K-quants
// (a random Llama) load with those matrices kept quantized, and their logits equal those of the
// same file converted to an f32 folder exactly. Exactly, not within a tolerance: the quantized
// CPU linear multiplies each W row as the dense f32 path multiplies the f32 row holding the same
// dequantized values (ref/linear_ref.cpp), dequantization is exact in f32, and convert writes those
// f32 values; any mismatch is a wrong value, row or layout. The same holds with the matrices
// dequantized at upload (a backend that runs no quantized format), and for the DFlash draft
// scoring with a quantized target lm_head. Plus the store's quantized surface and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/quant_dequant.h"
#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/gguf_convert.h"
#include "model/gguf_fixture.h"
#include "model/linear_weight.h"
#include "model/quantize_folder.h"
#include "model/random_draft.h"
#include "model/safetensors_test_writer.h"
#include "model/safetensors_writer.h"
#include "model/target_model.h"
#include "model/weight_store.h"
#include "ops/backend.h"
#include "support/decode_batch.h"
#include "support/test_util.h"

namespace es::model {
namespace {

namespace fs = std::filesystem;

std::string fixtureDir(const std::string& family) {
  return test::test_data_dir() + "/models/" + family;
}

// The CPU backend, except that it runs no quantized format: models then dequantize at upload.
class CpuWithoutQuantized final : public ops::Backend {
 public:
  std::string name() const override { return "cpu-dense"; }
  MemorySpace space() const override { return cpu_->space(); }
  DType computeDtype() const override { return cpu_->computeDtype(); }
  void copyFromHost(void* d, const void* s, int64_t n) override { cpu_->copyFromHost(d, s, n); }
  void copyFromHostAsync(void* d, const void* s, int64_t n) override {
    cpu_->copyFromHostAsync(d, s, n);
  }
  void copyToHost(void* d, const void* s, int64_t n) override { cpu_->copyToHost(d, s, n); }
  void copy(void* d, const void* s, int64_t n) override { cpu_->copy(d, s, n); }
  void copy2D(void* d, int64_t dp, const void* s, int64_t sp, int64_t rb, int64_t r) override {
    cpu_->copy2D(d, dp, s, sp, rb, r);
  }
  void synchronize() override {}
  void embedding(const kernel::EmbeddingParams& p) override { cpu_->embedding(p); }
  void rmsNorm(const kernel::RmsNormParams& p) override { cpu_->rmsNorm(p); }
  void qkvRopeKvWrite(const kernel::QkvRopeKvWriteParams& p) override { cpu_->qkvRopeKvWrite(p); }
  void pagedAttention(const kernel::PagedAttentionParams& p) override { cpu_->pagedAttention(p); }
  void swiglu(const kernel::SwigluParams& p) override { cpu_->swiglu(p); }
  void gateUpSwiglu(const kernel::GateUpSwigluParams& p) override {
    ASSERT_FALSE(p.linear.quantized.has_value());
    cpu_->gateUpSwiglu(p);
  }
  void linear(const kernel::LinearParams& p) override {
    ASSERT_FALSE(p.quantized.has_value());
    cpu_->linear(p);
  }
  bool runsQuantized(QuantFormat) const override { return false; }
  void argmax(const ArgmaxParams& p) override { cpu_->argmax(p); }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF32& p) override {
    cpu_->dflashKvUpdate(p);
  }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF16& p) override {
    cpu_->dflashKvUpdate(p);
  }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsBF16& p) override {
    cpu_->dflashKvUpdate(p);
  }
  void eagleAccept(const kernel::EagleAcceptParams& p) override { cpu_->eagleAccept(p); }
  void dflashDeltaMetadata(const kernel::DFlashDeltaMetadataParams& p) override {
    cpu_->dflashDeltaMetadata(p);
  }
  void dflashProposalInputs(const kernel::DFlashProposalInputsParams& p) override {
    cpu_->dflashProposalInputs(p);
  }
  void dflashBaseVerifyInputs(const kernel::DFlashBaseVerifyInputsParams& p) override {
    cpu_->dflashBaseVerifyInputs(p);
  }
  void dflashLinearVerifyInputs(const kernel::DFlashLinearVerifyInputsParams& p) override {
    cpu_->dflashLinearVerifyInputs(p);
  }
  void specCommit(const kernel::SpecCommitParams& p) override { cpu_->specCommit(p); }
  void replayProposal(const kernel::ReplayProposalParams& p) override { cpu_->replayProposal(p); }
  void sampleRows(const SamplingParams& p) override { cpu_->sampleRows(p); }
  void specVerify(const SpecVerifyParams& p) override { cpu_->specVerify(p); }

 private:
  std::unique_ptr<ops::Backend> cpu_ = ops::makeCpuBackend();
};

// Layer 0's projections Q8_0; layer 1's Q4_0 but v_proj Q4_1 (its q | k | v cannot share one
// quantized matrix: it loads as the parts q | k in Q4_0 and v in Q4_1); the lm_head Q8_0;
// everything else F32.
GgmlType mixedTypeOf(const std::string& name) {
  if (name == "lm_head.weight") return GgmlType::kQ8_0;
  if (name.find("proj.weight") == std::string::npos) return GgmlType::kF32;
  if (name.starts_with("model.layers.0.")) return GgmlType::kQ8_0;
  return name.find("v_proj") != std::string::npos ? GgmlType::kQ4_1 : GgmlType::kQ4_0;
}

// The Llama fixture's llama3 RoPE has no GGUF form: its GGUF is made from a copy with plain RoPE
// (as test_gguf_load.cpp does).
fs::path sourceFolder(const std::string& family, const fs::path& tmp) {
  if (family != "llama") return fixtureDir(family);
  const fs::path out = tmp / "llama_plain_rope";
  fs::create_directories(out);
  fs::copy_file(fixtureDir(family) + "/model.safetensors", out / "model.safetensors");
  std::ifstream in(fixtureDir(family) + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  const double theta = config["rope_parameters"]["rope_theta"];
  config["rope_parameters"] = {{"rope_theta", theta}, {"rope_type", "default"}};
  test::writeText(out / "config.json", config.dump(2));
  return out;
}

const std::vector<int32_t> kPrompt = {5, 77, 120, 3, 250, 9, 41, 300, 17};

struct ModelRun {
  std::vector<float> logits;  // the prefill's rows, then each greedy decode step's
  std::vector<int32_t> tokens;
  int64_t weightBytes = 0;
};

// A prefill of kPrompt and `steps` greedy decode steps on `backend`.
ModelRun runModel(const fs::path& path, ops::Backend& backend, int steps,
                  const std::function<void(const TargetModel&)>& inspect = {}) {
  TargetModel model(path, backend, 64);
  if (inspect) inspect(model);
  const int64_t V = model.config().vocab_size;
  kv::KvCacheConfig kc;
  kc.maxBatchSize = 1;
  kc.maxSequenceLength = 128;
  kc.dtype = DType::kF32;
  kc.baseLayers = model.kvLayerShapes();
  kv::KvCacheManager cache(kc, MemorySpace::kHost);
  const int32_t slot = cache.admit();
  const int32_t L = static_cast<int32_t>(kPrompt.size());
  ForwardBatch b;
  for (int32_t i = 0; i < L; ++i) {
    b.tokens.push_back(kPrompt[static_cast<size_t>(i)] % static_cast<int32_t>(V));
    b.positions.push_back(i);
    b.tokenToSequence.push_back(slot);
    b.logitRows.push_back(i);
  }
  b.cuQSeqLens = {0, L};
  b.kvLengths = {L};
  ModelRun run;
  run.weightBytes = model.weightBytes();
  ForwardResult r = model.forward(b, cache);
  cache.commitBase(slot, L);
  run.logits = r.logits;
  for (int s = 0; s < steps; ++s) {
    const float* last = run.logits.data() + run.logits.size() - V;
    const auto next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    run.tokens.push_back(next);
    r = model.forward(test::decodeBatch(cache, {slot}, {next}), cache);
    cache.commitBase(slot, 1);
    run.logits.insert(run.logits.end(), r.logits.begin(), r.logits.end());
  }
  return run;
}

fs::path convertToF32(const fs::path& gguf, const fs::path& out) {
  ConvertOptions f32;
  f32.dtype = DType::kF32;
  convertGgufToHf(gguf, out, f32);
  return out;
}

class QuantizedFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizedFixture, KeptQuantizedLogitsEqualTheF32Conversion) {
  test::TempDir tmp;
  test::GgufFromFolderOptions o;
  o.type = mixedTypeOf;
  test::writeBytes(tmp / "q.gguf",
                   test::ggufFromFolder(sourceFolder(GetParam(), tmp.path()), o).build());
  const fs::path hf = convertToF32(tmp / "q.gguf", tmp / "hf");
  auto cpu = ops::makeCpuBackend();
  const ModelRun quantized = runModel(tmp / "q.gguf", *cpu, 4, [](const TargetModel& m) {
    const auto& l0 = m.layers()[0];
    const auto& l1 = m.layers()[1];
    for (const LinearWeight* w : {&l0.qkv, &l0.o, &l0.gateUp, &l0.down}) {
      EXPECT_EQ(w->formatName(), "q8_0");
      EXPECT_EQ(w->dense.bytes(), 0);
    }
    EXPECT_EQ(l1.qkv.formatName(), "q4_0|q4_1");  // parts: q | k, then v
    ASSERT_EQ(l1.qkv.parts.size(), 2u);
    const int64_t qDim = m.config().qDim(), kvDim = m.config().kvDim();
    EXPECT_EQ(l1.qkv.parts[0].n, qDim + kvDim);
    EXPECT_EQ(l1.qkv.parts[1].n, kvDim);
    EXPECT_EQ(l1.qkv.n, qDim + 2 * kvDim);
    // Row ranges inside one part (the draft's k / v projections) resolve to that part.
    kernel::LinearParams p{.n = static_cast<int32_t>(kvDim), .dtype = DType::kF32};
    l1.qkv.fill(p, qDim + kvDim);
    ASSERT_TRUE(p.quantized.has_value());
    EXPECT_EQ(p.quantized->format, QuantFormat::kGgufQ4_1);
    EXPECT_EQ(p.quantized->data, l1.qkv.parts[1].data.data());
    l1.qkv.fill(p, qDim);
    EXPECT_EQ(p.quantized->format, QuantFormat::kGgufQ4_0);
    p.n = static_cast<int32_t>(2 * kvDim);
    test::expectInvalidArgument([&] { l1.qkv.fill(p, qDim); }, "rows");
    for (const LinearWeight* w : {&l1.o, &l1.gateUp, &l1.down}) EXPECT_EQ(w->formatName(), "q4_0");
    if (!m.config().tie_word_embeddings) EXPECT_EQ(m.lmHead().formatName(), "q8_0");
  });
  const ModelRun dense = runModel(hf, *cpu, 4);
  ASSERT_EQ(quantized.logits.size(), dense.logits.size());
  EXPECT_EQ(quantized.logits, dense.logits);
  EXPECT_EQ(quantized.tokens, dense.tokens);
  EXPECT_LT(quantized.weightBytes, dense.weightBytes);
  for (float v : quantized.logits) ASSERT_TRUE(std::isfinite(v));

  // A backend that runs no quantized format: every matrix dense at upload, the same logits.
  CpuWithoutQuantized denseOnly;
  const ModelRun fallback = runModel(tmp / "q.gguf", denseOnly, 4, [](const TargetModel& m) {
    for (const auto& l : m.layers()) {
      for (const LinearWeight* w : {&l.qkv, &l.o, &l.gateUp, &l.down}) {
        EXPECT_FALSE(w->quantized());
      }
    }
    EXPECT_FALSE(m.lmHead().quantized());
  });
  EXPECT_EQ(fallback.logits, dense.logits);
  EXPECT_EQ(fallback.weightBytes, dense.weightBytes);
}

INSTANTIATE_TEST_SUITE_P(Families, QuantizedFixture, ::testing::Values("llama", "qwen2", "qwen3"));

// A random Llama (untied, hidden 256: whole K-quant super-blocks) with q | k Q4_K, v Q6_K in
// layer 0 and Q4_K in layer 1 (as Q4_K_M files mix them), o Q5_K, gate | up Q6_K, down Q4_K and
// the lm_head Q6_K: all kept quantized (layer 0's q | k | v as two parts), Llama q/k rows
// un-permuted as whole block rows.
TEST(QuantizedModel, KQuantLlamaEqualsTheF32Conversion) {
  ModelConfig c;
  c.architecture = Architecture::kLlama;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 400;
  c.max_position_embeddings = 512;
  c.rms_norm_eps = 1e-5;
  c.rope.theta = 10000;
  c.tie_word_embeddings = false;
  auto typeOf = [](const std::string& name) {
    if (name.find("o_proj") != std::string::npos) return GgmlType::kQ5_K;
    if (name.find("gate_proj") != std::string::npos || name.find("up_proj") != std::string::npos)
      return GgmlType::kQ6_K;
    if (name == "lm_head.weight" || name == "model.embed_tokens.weight") return GgmlType::kQ6_K;
    if (name == "model.layers.0.self_attn.v_proj.weight") return GgmlType::kQ6_K;
    return GgmlType::kQ4_K;
  };
  test::TempDir tmp;
  test::writeBytes(tmp / "k.gguf", test::randomGguf(c, typeOf).build());
  const fs::path hf = convertToF32(tmp / "k.gguf", tmp / "hf");
  auto cpu = ops::makeCpuBackend();
  const ModelRun quantized = runModel(tmp / "k.gguf", *cpu, 3, [](const TargetModel& m) {
    EXPECT_EQ(m.layers()[0].qkv.formatName(), "q4_k|q6_k");
    EXPECT_EQ(m.layers()[1].qkv.formatName(), "q4_k");
    // Q4_K: 144 bytes per 256 elements, Q6_K 210; q 4 heads, k and v 2 heads, of 64 rows.
    EXPECT_EQ(m.layers()[0].qkv.bytes(), (4 + 2) * 64 * 144 + 2 * 64 * 210);
    EXPECT_EQ(m.layers()[1].qkv.bytes(), (4 + 2 + 2) * 64 * 144);
    for (const auto& l : m.layers()) {
      EXPECT_EQ(l.o.formatName(), "q5_k");
      EXPECT_EQ(l.gateUp.formatName(), "q6_k");
      EXPECT_EQ(l.down.formatName(), "q4_k");
    }
    EXPECT_EQ(m.lmHead().formatName(), "q6_k");
  });
  const ModelRun dense = runModel(hf, *cpu, 3);
  EXPECT_EQ(quantized.logits, dense.logits);
  EXPECT_EQ(quantized.tokens, dense.tokens);
  for (float v : quantized.logits) ASSERT_TRUE(std::isfinite(v));
}

// loadLinear's row operations on quantized rows: q | k | v concatenated (Llama q/k un-permuted)
// and gate | up interleaved by 8 rows give, row for row, the dense values of the same tensors.
TEST(QuantizedModel, LoadLinearRowsEqualTheDenseTensors) {
  test::TempDir tmp;
  test::GgufFromFolderOptions o;
  o.type = [](const std::string& name) {
    return name.find("proj.weight") != std::string::npos ? GgmlType::kQ8_0 : GgmlType::kF32;
  };
  test::writeBytes(tmp / "l.gguf",
                   test::ggufFromFolder(sourceFolder("llama", tmp.path()), o).build());
  const WeightStore store = WeightStore::openGguf(tmp / "l.gguf", DType::kF32);
  auto cpu = ops::makeCpuBackend();
  const std::string p = "model.layers.1.";
  auto denseRows = [&](const std::vector<std::string>& names) {
    std::vector<float> all;
    for (const std::string& n : names) {
      const HostTensor t = store.read(n);
      all.insert(all.end(), t.view.as<float>(), t.view.as<float>() + store.info(n).numel());
    }
    return all;
  };
  auto rowsOf = [](const LinearWeight& w) {
    std::vector<float> out(static_cast<size_t>(w.n * w.k));
    kernel::LinearParams p{.dtype = DType::kF32};
    w.fill(p);
    for (int64_t r = 0; r < w.n; ++r) {
      dequantizeRow(*p.quantized, w.k, r,
                    std::span<float>(out.data() + r * w.k, static_cast<size_t>(w.k)));
    }
    return out;
  };
  const std::vector<std::string> qkvNames = {
      p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"};
  const LinearWeight qkv = loadLinear(*cpu, store, qkvNames, DType::kF32);
  ASSERT_TRUE(qkv.quantized());
  EXPECT_EQ(qkv.n, store.info(qkvNames[0]).shape[0] + 2 * store.info(qkvNames[1]).shape[0]);
  EXPECT_EQ(rowsOf(qkv), denseRows(qkvNames));

  const std::vector<std::string> gateUpNames = {p + "mlp.gate_proj.weight",
                                                p + "mlp.up_proj.weight"};
  LinearWeight gateUp = loadLinear(*cpu, store, gateUpNames, DType::kF32);
  const int64_t features = gateUp.n / 2, k = gateUp.k;
  ASSERT_EQ(features % 8, 0);
  interleaveGateUp(*cpu, gateUp, features);
  const std::vector<float> halves = denseRows(gateUpNames), got = rowsOf(gateUp);
  for (int64_t r = 0; r < 2 * features; ++r) {
    // Interleaved row r: group r / 16, gate for (r % 16) < 8, else up, feature 8 group + r % 8.
    const int64_t feature = r / 16 * 8 + r % 8;
    const int64_t src = (r % 16 < 8 ? 0 : features) + feature;
    for (int64_t i = 0; i < k; ++i) {
      ASSERT_EQ(got[static_cast<size_t>(r * k + i)], halves[static_cast<size_t>(src * k + i)])
          << r << " " << i;
    }
  }
  // A row range of the fused matrix (the draft's k / v projections) starts at that row.
  kernel::LinearParams at{.dtype = DType::kF32};
  qkv.fill(at, 3);
  kernel::LinearParams base{.dtype = DType::kF32};
  qkv.fill(base);
  EXPECT_EQ(static_cast<const uint8_t*>(at.quantized->data),
            static_cast<const uint8_t*>(base.quantized->data) +
                3 * dataRowBytes(QuantFormat::kGgufQ8_0, k, 32));
}

// Dequantized at upload into bf16 (the CUDA backend's dtype while it runs no quantized format):
// the values a bf16 GGUF store reads, bit for bit, for a fused q | k | v of one format and of
// mixed formats alike.
TEST(QuantizedModel, DequantizedUploadInBf16EqualsTheBf16Store) {
  test::TempDir tmp;
  test::GgufFromFolderOptions o;
  o.type = mixedTypeOf;
  test::writeBytes(tmp / "q.gguf", test::ggufFromFolder(fixtureDir("qwen3"), o).build());
  const WeightStore f32Store = WeightStore::openGguf(tmp / "q.gguf", DType::kF32);
  const WeightStore bf16Store = WeightStore::openGguf(tmp / "q.gguf", DType::kBF16);
  CpuWithoutQuantized denseOnly;
  for (const char* layer : {"model.layers.0.", "model.layers.1."}) {
    const std::string p = layer;
    const std::vector<std::string> names = {p + "self_attn.q_proj.weight",
                                            p + "self_attn.k_proj.weight",
                                            p + "self_attn.v_proj.weight"};
    const LinearWeight w = loadLinear(denseOnly, f32Store, names, DType::kBF16);
    ASSERT_FALSE(w.quantized());
    EXPECT_EQ(w.formatName(), "bf16");
    std::vector<uint16_t> want;
    for (const std::string& n : names) {
      const HostTensor t = bf16Store.read(n);
      const auto* bits = static_cast<const uint16_t*>(t.view.data);
      want.insert(want.end(), bits, bits + bf16Store.info(n).numel());
    }
    ASSERT_EQ(w.dense.bytes(), static_cast<int64_t>(want.size() * 2));
    EXPECT_EQ(std::memcmp(w.dense.data(), want.data(), want.size() * 2), 0) << layer;
  }
}

TEST(QuantizedModel, StoreQuantizedSurfaceAndErrors) {
  test::TempDir tmp;
  test::GgufFromFolderOptions o;
  o.type = mixedTypeOf;
  test::writeBytes(tmp / "q.gguf", test::ggufFromFolder(fixtureDir("qwen3"), o).build());
  const WeightStore gguf = WeightStore::openGguf(tmp / "q.gguf", DType::kF32);
  EXPECT_EQ(gguf.quantFormat("model.layers.0.self_attn.q_proj.weight"), QuantFormat::kGgufQ8_0);
  EXPECT_EQ(gguf.quantFormat("model.layers.1.self_attn.v_proj.weight"), QuantFormat::kGgufQ4_1);
  EXPECT_EQ(gguf.quantFormat("lm_head.weight"), QuantFormat::kGgufQ8_0);
  EXPECT_EQ(gguf.quantFormat("model.norm.weight"), std::nullopt);
  EXPECT_EQ(gguf.quantFormat("model.embed_tokens.weight"), std::nullopt);
  const HostQuantizedMatrix m = gguf.readQuantized("model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(m.format, QuantFormat::kGgufQ4_0);
  EXPECT_EQ(m.group, 32);
  EXPECT_EQ(m.n, 128);
  EXPECT_EQ(m.k, 192);
  EXPECT_EQ(m.bytes(), 128 * 192 / 32 * 18);
  EXPECT_TRUE(m.scales.empty() && m.zeros.empty());
  test::expectInvalidArgument([&] { gguf.readQuantized("model.norm.weight"); }, "name");
  test::expectInvalidArgument([&] { gguf.readQuantized("no.such.weight"); }, "name");
  const WeightStore folder = WeightStore::openFolder(fixtureDir("qwen3"));
  EXPECT_EQ(folder.quantFormat("model.layers.0.self_attn.q_proj.weight"), std::nullopt);
  test::expectInvalidArgument(
      [&] { folder.readQuantized("model.layers.0.self_attn.q_proj.weight"); }, "name");
}

// The DFlash draft scores with the target's lm_head: kept quantized (Q8_0) it gives the draft
// logits of the f32 conversion's target exactly.
TEST(QuantizedModel, DraftWithAQuantizedTargetLmHead) {
  test::TempDir tmp;
  test::GgufFromFolderOptions o;
  o.type = mixedTypeOf;
  test::writeBytes(tmp / "q.gguf", test::ggufFromFolder(fixtureDir("qwen3"), o).build());
  const fs::path hf = convertToF32(tmp / "q.gguf", tmp / "hf");
  test_draft::writeDraft(tmp / "draft", test_draft::DraftSpec{});
  auto propose = [&](const fs::path& targetPath) {
    auto cpu = ops::makeCpuBackend();
    const std::vector<int32_t> taps =
        DFlashDraft::requiredTargetTaps(tmp / "draft", loadModelConfig(targetPath));
    TargetModel target(targetPath, *cpu, 64, taps);
    DFlashDraft draft(tmp / "draft", *cpu, target, 64, 1);
    kv::KvCacheConfig kc;
    kc.maxBatchSize = 1;
    kc.maxSequenceLength = 128;
    kc.dtype = DType::kF32;
    kc.baseLayers = target.kvLayerShapes();
    kc.draftLayers = draft.kvLayerShapes();
    kv::KvCacheManager cache(kc, MemorySpace::kHost);
    const int32_t slot = cache.admit();
    const int32_t L = static_cast<int32_t>(kPrompt.size());
    ForwardBatch b;
    for (int32_t i = 0; i < L; ++i) {
      b.tokens.push_back(kPrompt[static_cast<size_t>(i)]);
      b.positions.push_back(i);
      b.tokenToSequence.push_back(slot);
    }
    b.cuQSeqLens = {0, L};
    b.kvLengths = {L};
    target.forward(b, cache);
    cache.commitBase(slot, L);
    draft.appendContext(target, b.positions, b.tokenToSequence, cache);
    return draft.propose({42}, {L}, cache, /*wantLogits=*/true);
  };
  const DraftProposal quantized = propose(tmp / "q.gguf");
  const DraftProposal dense = propose(hf);
  ASSERT_FALSE(quantized.logits.empty());
  EXPECT_EQ(quantized.logits, dense.logits);
  EXPECT_EQ(quantized.tokens, dense.tokens);
}

// A quantized HF folder written by `edgespec quantize` (int4 AWQ, fp8 Qwen3-FP8 style) loads with
// its linears kept quantized through WeightStore::quantFormat / readQuantized
// (model/quantized_checkpoint.h), and its logits equal those of a folder holding the same values
// dense: each quantized linear dequantized to f32 by dequantizeRow, every other tensor copied.
// Exactly, for the reason given at the top of this file.
class QuantizedFolder : public ::testing::TestWithParam<QuantizeTo> {};

TEST_P(QuantizedFolder, KeptQuantizedLogitsEqualItsDequantizedValues) {
  test::TempDir tmp;
  const fs::path source = fixtureDir("qwen3");
  QuantizeOptions options{.to = GetParam(), .group = 64};  // the fixture's k: 128 and 192
  quantizeFolder(source, tmp / "q", options);

  const WeightStore original = WeightStore::openFolder(source);
  const WeightStore quantized = WeightStore::openFolder(tmp / "q");
  ASSERT_TRUE(quantized.quantization().quantized());
  std::vector<SafetensorsEntry> entries;
  std::vector<std::vector<uint8_t>> data;
  for (const std::string& name : original.names()) {
    if (quantized.quantFormat(name)) {
      const HostQuantizedMatrix m = quantized.readQuantized(name);
      std::vector<float> values(static_cast<size_t>(m.n * m.k));
      for (int64_t r = 0; r < m.n; ++r) {
        dequantizeRow(m.view(), m.k, r,
                      std::span<float>(values).subspan(static_cast<size_t>(r * m.k),
                                                       static_cast<size_t>(m.k)));
      }
      // The reader's values are those quantize approximated: within each format's rounding of
      // the original row (int4: half a step of the row's range / 15 at most; fp8: 3 mantissa
      // bits, plus a subnormal step of the row's largest block scale), so a wrong layout fails.
      const HostTensor h = original.read(name);
      ASSERT_EQ(h.view.dtype, DType::kBF16) << name;
      const auto* orig = static_cast<const bf16*>(h.view.data);
      for (int64_t r = 0; r < m.n; ++r) {
        float lo = 0.0f, hi = 0.0f, amax = 0.0f;
        for (int64_t c = 0; c < m.k; ++c) {
          const float v = to_float(orig[r * m.k + c]);
          lo = std::min(lo, v);
          hi = std::max(hi, v);
          amax = std::max(amax, std::fabs(v));
        }
        for (int64_t c = 0; c < m.k; ++c) {
          const float v = to_float(orig[r * m.k + c]);
          const float bound = GetParam() == QuantizeTo::kInt4
                                  ? (hi - lo) / 30.0f * 1.001f
                                  : std::fabs(v) / 16.0f + amax / 448.0f * 0x1p-9f;
          ASSERT_LE(std::fabs(values[static_cast<size_t>(r * m.k + c)] - v), bound)
              << name << " [" << r << ", " << c << "]";
        }
      }
      entries.push_back({.name = name,
                         .dtype = "F32",
                         .shape = {m.n, m.k},
                         .bytes = values.size() * sizeof(float)});
      const auto* b = reinterpret_cast<const uint8_t*>(values.data());
      data.emplace_back(b, b + entries.back().bytes);
    } else {
      const TensorInfo& t = original.info(name);
      ASSERT_EQ(t.dtype, DType::kBF16) << name;
      entries.push_back({.name = name, .dtype = "BF16", .shape = t.shape, .bytes = t.byteSize()});
      const HostTensor h = original.read(name);
      const auto* b = static_cast<const uint8_t*>(h.view.data);
      data.emplace_back(b, b + t.byteSize());
    }
  }
  fs::create_directories(tmp / "ref");
  fs::copy_file(source / "config.json", tmp / "ref" / "config.json");
  SafetensorsWriter writer(tmp / "ref" / "model.safetensors", entries, {}, "test");
  for (const std::vector<uint8_t>& d : data) writer.append(d);
  writer.finish();

  auto cpu = ops::makeCpuBackend();
  const std::string format = GetParam() == QuantizeTo::kInt4 ? "int4" : "fp8-e4m3";
  const ModelRun kept = runModel(tmp / "q", *cpu, 4, [&](const TargetModel& m) {
    for (const auto& l : m.layers()) {
      for (const LinearWeight* w : {&l.qkv, &l.o, &l.gateUp, &l.down}) {
        EXPECT_EQ(w->formatName(), format);
        EXPECT_EQ(w->dense.bytes(), 0);
      }
    }
    EXPECT_FALSE(m.lmHead().quantized());  // quantize keeps the lm_head in bf16
  });
  const ModelRun dense = runModel(tmp / "ref", *cpu, 4);
  ASSERT_EQ(kept.logits.size(), dense.logits.size());
  EXPECT_EQ(kept.logits, dense.logits);
  EXPECT_EQ(kept.tokens, dense.tokens);
  EXPECT_LT(kept.weightBytes, dense.weightBytes);
  for (float v : kept.logits) ASSERT_TRUE(std::isfinite(v));
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedFolder,
                         ::testing::Values(QuantizeTo::kInt4, QuantizeTo::kFp8));

}  // namespace
}  // namespace es::model
