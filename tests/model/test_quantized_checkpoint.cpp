// HF quantized checkpoints: quantization_config parsing, and the AWQ / GPTQ / FP8 tensors of
// tiny hand-built folders repacked into the backend layouts of common/quant_format.h. The packed
// inputs are built here from each format's definition (AutoAWQ's GEMM order map, GPTQ's k-major
// nibbles and z - 1 zeros, Qwen3-FP8's [128, 128] blocks, compressed-tensors' row scales), and
// the expected backend bytes are derived by hand or from the unpacked values, not by the reader.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/errors.h"
#include "common/json.h"
#include "common/quant_format.h"
#include "model/model_config.h"
#include "model/quantization_config.h"
#include "model/quantized_checkpoint.h"
#include "model/safetensors_test_writer.h"
#include "model/weight_names.h"
#include "model/weight_store.h"
#include "support/test_util.h"

namespace es::model {
namespace {

using nlohmann::json;
using test::FakeTensor;
using test::TempDir;

template <typename F>
void expectFormatError(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "missing '" << part << "' in: " << message;
    }
  }
}

std::vector<uint8_t> i32Bytes(const std::vector<uint32_t>& words) {
  std::vector<uint8_t> out;
  for (uint32_t w : words) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<uint8_t>(w >> (8 * b)));
  }
  return out;
}

std::vector<uint8_t> f16Bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out;
  for (float v : values) {
    const uint16_t bits = to_fp16(v).bits;
    out.push_back(static_cast<uint8_t>(bits & 0xff));
    out.push_back(static_cast<uint8_t>(bits >> 8));
  }
  return out;
}

std::vector<uint8_t> bf16Bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out;
  for (float v : values) {
    const uint16_t bits = to_bf16(v).bits;
    out.push_back(static_cast<uint8_t>(bits & 0xff));
    out.push_back(static_cast<uint8_t>(bits >> 8));
  }
  return out;
}

std::vector<uint8_t> f32Bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

float f32At(const std::vector<uint8_t>& bytes, size_t i) {
  float v;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

uint16_t u16At(const std::vector<uint8_t>& bytes, size_t i) {
  return static_cast<uint16_t>(bytes[2 * i] | bytes[2 * i + 1] << 8);
}

// Nibble (row, col) of a kInt4 data array [n, k / 2].
int nibble(const HostQuantizedMatrix& m, int64_t row, int64_t col) {
  const uint8_t byte = m.data[static_cast<size_t>(row * (m.k / 2) + col / 2)];
  return (col % 2 == 0) ? (byte & 15) : (byte >> 4);
}

QuantizationConfig configOf(const json& quantizationConfig) {
  return parseQuantizationConfig(json{{"quantization_config", quantizationConfig}},
                                 "q/config.json");
}

json awqJson() {
  return {{"quant_method", "awq"},
          {"bits", 4},
          {"group_size", 32},
          {"zero_point", true},
          {"version", "gemm"}};
}
json gptqJson() {
  return {{"quant_method", "gptq"}, {"bits", 4},   {"group_size", 32},
          {"desc_act", false},      {"sym", true}, {"checkpoint_format", "gptq"}};
}
json fp8BlockJson() {
  return {{"quant_method", "fp8"},
          {"fmt", "e4m3"},
          {"activation_scheme", "dynamic"},
          {"weight_block_size", {128, 128}}};
}
json ctJson(bool staticInput = false) {
  json input = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}};
  if (staticInput)
    input = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}, {"dynamic", false}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"input_activations", input},
              {"output_activations", nullptr},
              {"weights",
               {{"num_bits", 8},
                {"type", "float"},
                {"strategy", "channel"},
                {"symmetric", true},
                {"dynamic", false},
                {"group_size", nullptr}}}}}}}};
}

WeightStore storeOf(const TempDir& dir, const std::vector<FakeTensor>& tensors) {
  test::writeBytes(dir / "model.safetensors", test::makeSafetensors(tensors));
  return WeightStore::openFolder(dir.path());
}

// ---- quantization_config ------------------------------------------------------------------

TEST(QuantizationConfig, AcceptedFormats) {
  EXPECT_EQ(parseQuantizationConfig(json{{"hidden_size", 8}}, "c").method, QuantMethod::kNone);
  EXPECT_EQ(parseQuantizationConfig(json{{"quantization_config", nullptr}}, "c").method,
            QuantMethod::kNone);

  const QuantizationConfig awq = configOf(awqJson());
  EXPECT_EQ(awq.method, QuantMethod::kAwq);
  EXPECT_EQ(awq.bits, 4);
  EXPECT_EQ(awq.group, 32);
  EXPECT_TRUE(awq.zeroPoint);
  EXPECT_EQ(awq.source, "q/config.json");
  // transformers' AwqConfig defaults: 4 bits, group 128, zero points, GEMM.
  const QuantizationConfig awqDefaults = configOf(json{{"quant_method", "awq"}});
  EXPECT_EQ(awqDefaults.group, 128);
  json awqList = awqJson();
  awqList["modules_to_not_convert"] = {"lm_head", "model.layers.0.mlp.down_proj"};
  const QuantizationConfig awqSkips = configOf(awqList);
  EXPECT_TRUE(awqSkips.isNotConverted("lm_head"));
  EXPECT_TRUE(awqSkips.isNotConverted("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(awqSkips.isNotConverted("model.layers.0.mlp"));

  json gptq = gptqJson();
  gptq["sym"] = false;
  gptq["group_size"] = 64;
  const QuantizationConfig g = configOf(gptq);
  EXPECT_EQ(g.method, QuantMethod::kGptq);
  EXPECT_EQ(g.group, 64);
  EXPECT_FALSE(g.symmetric);

  const QuantizationConfig fp8 = configOf(fp8BlockJson());
  EXPECT_EQ(fp8.method, QuantMethod::kFp8Block);
  EXPECT_EQ(fp8.blockN, 128);
  EXPECT_EQ(fp8.blockK, 128);
  EXPECT_EQ(fp8.group, 128);

  const QuantizationConfig ct = configOf(ctJson());
  EXPECT_EQ(ct.method, QuantMethod::kFp8Channel);
  EXPECT_EQ(ct.bits, 8);
  EXPECT_FALSE(ct.staticInputScale);
  EXPECT_TRUE(ct.isNotConverted("lm_head"));
  EXPECT_TRUE(configOf(ctJson(/*staticInput=*/true)).staticInputScale);
  json noInput = ctJson();
  noInput["config_groups"]["group_0"].erase("input_activations");
  EXPECT_FALSE(configOf(noInput).staticInputScale);
}

// The four seed configs of the fuzzer are real configs as their tools write them.
TEST(QuantizationConfig, FuzzSeedsAreTheRealConfigs) {
  const std::filesystem::path corpus =
      std::filesystem::path(test::test_data_dir()) / ".." / "fuzz" / "quant_config_corpus";
  EXPECT_EQ(loadQuantizationConfig(corpus / "awq.json").method, QuantMethod::kAwq);
  EXPECT_EQ(loadQuantizationConfig(corpus / "gptq.json").method, QuantMethod::kGptq);
  EXPECT_EQ(loadQuantizationConfig(corpus / "qwen3_fp8.json").method, QuantMethod::kFp8Block);
  const QuantizationConfig ct = loadQuantizationConfig(corpus / "compressed_tensors_fp8.json");
  EXPECT_EQ(ct.method, QuantMethod::kFp8Channel);
  EXPECT_EQ(ct.notConverted, std::vector<std::string>{"lm_head"});
}

TEST(QuantizationConfig, RejectedWithTheField) {
  struct Case {
    const char* what;
    std::function<json()> config;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"unknown method",
       [] {
         return json{{"quant_method", "bitsandbytes"}};
       },
       {"q/config.json", "quantization_config.quant_method = \"bitsandbytes\"",
        "supported: awq, gptq, fp8, compressed-tensors"}},
      {"no method",
       [] {
         return json{{"bits", 4}};
       },
       {"quantization_config.quant_method is missing"}},
      {"not an object",
       [] {
         return json{1, 2};
       },
       {"quantization_config must be an object"}},
      {"awq bits 8",
       [] {
         json j = awqJson();
         j["bits"] = 8;
         return j;
       },
       {"quantization_config.bits = 8 is not supported", "supported: 4"}},
      {"awq group 256",
       [] {
         json j = awqJson();
         j["group_size"] = 256;
         return j;
       },
       {"quantization_config.group_size = 256", "32, 64, 128"}},
      {"awq no zero point",
       [] {
         json j = awqJson();
         j["zero_point"] = false;
         return j;
       },
       {"quantization_config.zero_point = false"}},
      {"awq gemv",
       [] {
         json j = awqJson();
         j["version"] = "gemv";
         return j;
       },
       {"quantization_config.version = \"gemv\"", "gemm"}},
      {"awq llm-awq",
       [] {
         json j = awqJson();
         j["backend"] = "llm-awq";
         return j;
       },
       {"quantization_config.backend = \"llm-awq\""}},
      {"awq bits as text",
       [] {
         json j = awqJson();
         j["bits"] = "4";
         return j;
       },
       {"quantization_config.bits must be an integer, got \"4\""}},
      {"awq skip list of numbers",
       [] {
         json j = awqJson();
         j["modules_to_not_convert"] = {1};
         return j;
       },
       {"quantization_config.modules_to_not_convert[0] must be a string"}},
      {"gptq desc_act",
       [] {
         json j = gptqJson();
         j["desc_act"] = true;
         return j;
       },
       {"quantization_config.desc_act = true is not supported"}},
      {"gptq v2",
       [] {
         json j = gptqJson();
         j["checkpoint_format"] = "gptq_v2";
         return j;
       },
       {"quantization_config.checkpoint_format = \"gptq_v2\"", "\"gptq\""}},
      {"gptq GPTQModel format v2",
       [] {
         json j = gptqJson();
         j.erase("checkpoint_format");
         j["format"] = "gptq_v2";
         return j;
       },
       {"quantization_config.format = \"gptq_v2\""}},
      {"gptq 8 bits",
       [] {
         json j = gptqJson();
         j["bits"] = 8;
         return j;
       },
       {"quantization_config.bits = 8"}},
      {"gptq no bits",
       [] {
         json j = gptqJson();
         j.erase("bits");
         return j;
       },
       {"quantization_config.bits is missing"}},
      {"gptq per-channel",
       [] {
         json j = gptqJson();
         j["group_size"] = -1;
         return j;
       },
       {"quantization_config.group_size = -1"}},
      {"fp8 e5m2",
       [] {
         json j = fp8BlockJson();
         j["fmt"] = "e5m2";
         return j;
       },
       {"quantization_config.fmt = \"e5m2\""}},
      {"fp8 static",
       [] {
         json j = fp8BlockJson();
         j["activation_scheme"] = "static";
         return j;
       },
       {"quantization_config.activation_scheme = \"static\""}},
      {"fp8 block 64",
       [] {
         json j = fp8BlockJson();
         j["weight_block_size"] = {64, 64};
         return j;
       },
       {"quantization_config.weight_block_size = [64,64]", "[128, 128]"}},
      {"fp8 per tensor",
       [] {
         json j = fp8BlockJson();
         j.erase("weight_block_size");
         return j;
       },
       {"quantization_config.weight_block_size is missing", "per-tensor"}},
      {"ct int weights",
       [] {
         json j = ctJson();
         j["format"] = "pack-quantized";
         return j;
       },
       {"quantization_config.format = \"pack-quantized\""}},
      {"ct tensor strategy",
       [] {
         json j = ctJson();
         j["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
         return j;
       },
       {"quantization_config.config_groups.group_0.weights.strategy = \"tensor\"", "\"channel\""}},
      {"ct int type",
       [] {
         json j = ctJson();
         j["config_groups"]["group_0"]["weights"]["type"] = "int";
         return j;
       },
       {"quantization_config.config_groups.group_0.weights.type = \"int\""}},
      {"ct 4 bits",
       [] {
         json j = ctJson();
         j["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
         return j;
       },
       {"weights.num_bits = 4", "supported: 8"}},
      {"ct asymmetric",
       [] {
         json j = ctJson();
         j["config_groups"]["group_0"]["weights"]["symmetric"] = false;
         return j;
       },
       {"weights.symmetric = false"}},
      {"ct two groups",
       [] {
         json j = ctJson();
         j["config_groups"]["group_1"] = j["config_groups"]["group_0"];
         return j;
       },
       {"quantization_config.config_groups has 2 groups"}},
      {"ct attention targets",
       [] {
         json j = ctJson();
         j["config_groups"]["group_0"]["targets"] = {"re:.*q_proj"};
         return j;
       },
       {"group_0.targets = [\"re:.*q_proj\"]", "[\"Linear\"]"}},
      {"ct kv cache scheme",
       [] {
         json j = ctJson();
         j["kv_cache_scheme"] = {{"num_bits", 8}};
         return j;
       },
       {"quantization_config.kv_cache_scheme = {\"num_bits\":8}"}},
      {"ct output activations",
       [] {
         json j = ctJson();
         j["config_groups"]["group_0"]["output_activations"] = {{"num_bits", 8}};
         return j;
       },
       {"group_0.output_activations"}},
      {"ct int8 activations",
       [] {
         json j = ctJson();
         j["config_groups"]["group_0"]["input_activations"]["type"] = "int";
         return j;
       },
       {"input_activations.type = \"int\""}},
      {"ct frozen",
       [] {
         json j = ctJson();
         j["quantization_status"] = "frozen";
         return j;
       },
       {"quantization_config.quantization_status = \"frozen\""}},
      {"ct no weights",
       [] {
         json j = ctJson();
         j["config_groups"]["group_0"].erase("weights");
         return j;
       },
       {"quantization_config.config_groups.group_0.weights is missing"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    expectFormatError([&] { configOf(c.config()); }, c.expect);
  }
  expectFormatError([] { parseQuantizationConfig(json::array(), "x/config.json"); },
                    {"x/config.json", "must be a JSON object"});
}

// ---- AWQ ----------------------------------------------------------------------------------

// AutoAWQ's GEMM pack: nibble p of word j holds column 8j + order[p] (AWQ_ORDER).
constexpr int kPackOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// Packs rows [rows, cols] of 4-bit values (value(r, c)) AWQ-style into [rows, cols / 8] words.
std::vector<uint32_t> awqPack(int64_t rows, int64_t cols,
                              const std::function<int(int64_t, int64_t)>& value) {
  std::vector<uint32_t> words(static_cast<size_t>(rows * cols / 8), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols / 8; ++j) {
      for (int p = 0; p < 8; ++p) {
        words[static_cast<size_t>(r * cols / 8 + j)] |=
            static_cast<uint32_t>(value(r, 8 * j + kPackOrder[p])) << (4 * p);
      }
    }
  }
  return words;
}

TEST(QuantizedCheckpoint, AwqInterleaveByHand) {
  // n = 8, k = 32, G = 32: qweight rows 0 and 1 are 0x76543210, so nibble p holds p and, by the
  // order map, column c gets the nibble p with order[p] = c: c 0..7 <- 0, 4, 1, 5, 2, 6, 3, 7.
  std::vector<uint32_t> qweight(32, 0);
  qweight[0] = 0x76543210u;
  qweight[1] = 0x76543210u;
  const TempDir dir;
  const WeightStore store =
      storeOf(dir, {{"m.qweight", "I32", {32, 1}, i32Bytes(qweight)},
                    {"m.qzeros", "I32", {1, 1}, i32Bytes({0x76543210u})},
                    {"m.scales", "F16", {1, 8}, f16Bytes({1, 2, 3, 4, 5, 6, 7, 8})}});
  const QuantizationConfig config = configOf(awqJson());
  ASSERT_EQ(quantizedLinearFormat(store, config, "m.weight"), QuantFormat::kInt4);
  const HostQuantizedMatrix m = readQuantizedLinear(store, config, "m.weight", 8, 32);
  EXPECT_EQ(m.format, QuantFormat::kInt4);
  EXPECT_EQ(m.group, 32);
  ASSERT_EQ(m.data.size(), 8u * 16u);
  ASSERT_EQ(m.zeros.size(), 8u);
  ASSERT_EQ(m.scales.size(), 8u * 2u);
  const uint8_t firstByte[8] = {0x00, 0x44, 0x11, 0x55, 0x22, 0x66, 0x33, 0x77};
  const uint8_t zeros[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(m.data[static_cast<size_t>(c * 16)], firstByte[c]) << "row " << c;
    for (int b = 1; b < 16; ++b) EXPECT_EQ(m.data[static_cast<size_t>(c * 16 + b)], 0);
    EXPECT_EQ(m.zeros[static_cast<size_t>(c)], zeros[c]) << "row " << c;
    EXPECT_EQ(u16At(m.scales, static_cast<size_t>(c)), to_fp16(static_cast<float>(c + 1)).bits);
  }
  EXPECT_EQ(quantLayoutRejection(m.format, m.k, m.group), nullptr);
}

// A 4-bit value of (row, column) without short periods, so a block or chunk written to the
// wrong place shows.
int mixed4(int64_t a, int64_t b, uint32_t salt) {
  const uint32_t h = static_cast<uint32_t>(a) * 2654435761u ^
                     (static_cast<uint32_t>(b) * 40503u + salt) * 2246822519u;
  return static_cast<int>((h >> 13) & 15);
}

// Every element of an AWQ linear W [n, k] (group g) packed from the definition and read back.
void checkAwqRepack(int64_t n, int64_t k, int64_t g) {
  const int64_t groups = k / g;
  const auto q = [](int64_t c, int64_t kk) { return mixed4(c, kk, 1); };
  const auto z = [](int64_t c, int64_t grp) { return mixed4(c, grp, 2); };
  const auto s = [](int64_t grp, int64_t c) { return 0.5f + 0.25f * c + grp; };
  // qweight is W^T [k, n] packed; qzeros [groups, n] packed; scales [groups, n].
  const std::vector<uint32_t> qweight =
      awqPack(k, n, [&](int64_t kk, int64_t c) { return q(c, kk); });
  const std::vector<uint32_t> qzeros =
      awqPack(groups, n, [&](int64_t grp, int64_t c) { return z(c, grp); });
  std::vector<float> scales;
  for (int64_t grp = 0; grp < groups; ++grp) {
    for (int64_t c = 0; c < n; ++c) scales.push_back(s(grp, c));
  }
  const TempDir dir;
  const WeightStore store = storeOf(dir, {{"m.qweight", "I32", {k, n / 8}, i32Bytes(qweight)},
                                          {"m.qzeros", "I32", {groups, n / 8}, i32Bytes(qzeros)},
                                          {"m.scales", "F16", {groups, n}, f16Bytes(scales)}});
  json config = awqJson();
  config["group_size"] = g;
  const HostQuantizedMatrix m = readQuantizedLinear(store, configOf(config), "m.weight", n, k);
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t kk = 0; kk < k; ++kk) ASSERT_EQ(nibble(m, c, kk), q(c, kk)) << c << ", " << kk;
    for (int64_t grp = 0; grp < groups; ++grp) {
      ASSERT_EQ(m.zeros[static_cast<size_t>(c * groups + grp)], z(c, grp));
      ASSERT_EQ(u16At(m.scales, static_cast<size_t>(c * groups + grp)), to_fp16(s(grp, c)).bits);
    }
  }
}

TEST(QuantizedCheckpoint, AwqRepacksEveryElement) {
  checkAwqRepack(24, 128, 32);
  // qweight of 2 MiB: read in two chunks.
  checkAwqRepack(4096, 1024, 128);
}

// ---- GPTQ ---------------------------------------------------------------------------------

TEST(QuantizedCheckpoint, GptqZeroOffsetAndNibblesByHand) {
  // n = 8, k = 32, G = 32: qweight [4, 8]; word [0, 3] = 0x76543210 holds W[3][0..7] = 0..7,
  // which are bytes 0x10, 0x32, 0x54, 0x76 of backend row 3. qzeros [1, 1] = 0x000000e7: stored
  // zeros 7 (column 0) and 14 (column 1), 0 elsewhere, i.e. zero points 8, 15 and 1.
  std::vector<uint32_t> qweight(4 * 8, 0);
  qweight[3] = 0x76543210u;
  qweight[1 * 8 + 5] = 0xfedcba98u;  // W[5][8..15] = 8..15
  const TempDir dir;
  std::vector<uint32_t> gIdx(32, 0);
  const WeightStore store =
      storeOf(dir, {{"m.qweight", "I32", {4, 8}, i32Bytes(qweight)},
                    {"m.qzeros", "I32", {1, 1}, i32Bytes({0x000000e7u})},
                    {"m.scales", "F16", {1, 8}, f16Bytes({1, 1, 1, 1, 1, 1, 1, 0.5f})},
                    {"m.g_idx", "I32", {32}, i32Bytes(gIdx)}});
  const QuantizationConfig config = configOf(gptqJson());
  EXPECT_EQ(quantizedLinearTensorNames(store, config, "m.weight"),
            (std::vector<std::string>{"m.qweight", "m.qzeros", "m.scales", "m.g_idx"}));
  const HostQuantizedMatrix m = readQuantizedLinear(store, config, "m.weight", 8, 32);
  EXPECT_EQ(m.data[3 * 16 + 0], 0x10);
  EXPECT_EQ(m.data[3 * 16 + 1], 0x32);
  EXPECT_EQ(m.data[3 * 16 + 2], 0x54);
  EXPECT_EQ(m.data[3 * 16 + 3], 0x76);
  EXPECT_EQ(m.data[5 * 16 + 4], 0x98);
  EXPECT_EQ(m.data[5 * 16 + 7], 0xfe);
  EXPECT_EQ(m.data[0], 0);
  EXPECT_EQ(m.zeros, (std::vector<uint8_t>{8, 15, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(u16At(m.scales, 7), to_fp16(0.5f).bits);
}

// Every element of a GPTQ linear W [n, k] (group g) packed from the definition and read back.
void checkGptqRepack(int64_t n, int64_t k, int64_t g) {
  const int64_t groups = k / g;
  const auto q = [](int64_t c, int64_t kk) { return mixed4(c, kk, 3); };
  const auto z = [](int64_t c, int64_t grp) { return 1 + mixed4(c, grp, 4) % 15; };
  std::vector<uint32_t> qweight(static_cast<size_t>(k / 8 * n), 0);
  for (int64_t r = 0; r < k / 8; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      for (int p = 0; p < 8; ++p) {
        qweight[static_cast<size_t>(r * n + c)] |= static_cast<uint32_t>(q(c, 8 * r + p))
                                                   << (4 * p);
      }
    }
  }
  std::vector<uint32_t> qzeros(static_cast<size_t>(groups * n / 8), 0);
  std::vector<float> scales;
  std::vector<uint32_t> gIdx;
  for (int64_t grp = 0; grp < groups; ++grp) {
    for (int64_t j = 0; j < n / 8; ++j) {
      for (int p = 0; p < 8; ++p) {
        qzeros[static_cast<size_t>(grp * n / 8 + j)] |= static_cast<uint32_t>(z(8 * j + p, grp) - 1)
                                                        << (4 * p);
      }
    }
    for (int64_t c = 0; c < n; ++c) scales.push_back(0.125f * (c + 1) + grp);
  }
  for (int64_t kk = 0; kk < k; ++kk) gIdx.push_back(static_cast<uint32_t>(kk / g));
  json config = gptqJson();
  config["group_size"] = g;
  const TempDir dir;
  const WeightStore store = storeOf(dir, {{"m.qweight", "I32", {k / 8, n}, i32Bytes(qweight)},
                                          {"m.qzeros", "I32", {groups, n / 8}, i32Bytes(qzeros)},
                                          {"m.scales", "F16", {groups, n}, f16Bytes(scales)},
                                          {"m.g_idx", "I32", {k}, i32Bytes(gIdx)}});
  const HostQuantizedMatrix m = readQuantizedLinear(store, configOf(config), "m.weight", n, k);
  EXPECT_EQ(m.group, g);
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t kk = 0; kk < k; ++kk) ASSERT_EQ(nibble(m, c, kk), q(c, kk)) << c << ", " << kk;
    for (int64_t grp = 0; grp < groups; ++grp) {
      ASSERT_EQ(m.zeros[static_cast<size_t>(c * groups + grp)], z(c, grp));
      ASSERT_EQ(u16At(m.scales, static_cast<size_t>(c * groups + grp)),
                to_fp16(0.125f * (c + 1) + grp).bits);
    }
  }
}

TEST(QuantizedCheckpoint, GptqRepacksEveryElement) {
  checkGptqRepack(16, 192, 64);
  // qweight of 2 MiB: read in two chunks.
  checkGptqRepack(4096, 1024, 128);
}

// ---- FP8 ----------------------------------------------------------------------------------

// Weight bytes (r * 37 + c * 11 + 5) mod 256, NaN codes (0x7f, 0xff) replaced by 0x01.
std::vector<uint8_t> fp8Weight(int64_t n, int64_t k) {
  std::vector<uint8_t> out;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      uint8_t b = static_cast<uint8_t>((r * 37 + c * 11 + 5) & 0xff);
      if ((b & 0x7f) == 0x7f) b = 0x01;
      out.push_back(b);
    }
  }
  return out;
}

TEST(QuantizedCheckpoint, Fp8BlockShortLastBlocks) {
  // n = 130, k = 200: blocks of 128 rows and columns, the last ones short (2 rows, 72 columns):
  // weight_scale_inv [2, 2]; rows 0..127 carry block row 0's scales, rows 128 and 129 row 1's.
  const int64_t n = 130, k = 200;
  for (const char* dtype : {"F32", "BF16"}) {
    SCOPED_TRACE(dtype);
    const std::vector<float> blockScales = {0.5f, 2.0f, 0.25f, 4.0f};
    const std::vector<uint8_t> scaleBytes =
        std::string(dtype) == "F32" ? f32Bytes(blockScales) : bf16Bytes(blockScales);
    const TempDir dir;
    const WeightStore store = storeOf(dir, {{"m.weight", "F8_E4M3", {n, k}, fp8Weight(n, k)},
                                            {"m.weight_scale_inv", dtype, {2, 2}, scaleBytes}});
    const QuantizationConfig config = configOf(fp8BlockJson());
    ASSERT_EQ(quantizedLinearFormat(store, config, "m.weight"), QuantFormat::kFp8E4M3);
    const HostQuantizedMatrix m = readQuantizedLinear(store, config, "m.weight", n, k);
    EXPECT_EQ(m.format, QuantFormat::kFp8E4M3);
    EXPECT_EQ(m.group, 128);
    EXPECT_EQ(m.data, fp8Weight(n, k));
    EXPECT_TRUE(m.zeros.empty());
    ASSERT_EQ(m.scales.size(), static_cast<size_t>(n * 2 * 4));
    ASSERT_EQ(static_cast<int64_t>(m.scales.size()), n * scaleRowBytes(m.format, k, m.group));
    for (int64_t r : {0, 1, 127}) {
      EXPECT_EQ(f32At(m.scales, static_cast<size_t>(2 * r)), 0.5f) << r;
      EXPECT_EQ(f32At(m.scales, static_cast<size_t>(2 * r + 1)), 2.0f) << r;
    }
    for (int64_t r : {128, 129}) {
      EXPECT_EQ(f32At(m.scales, static_cast<size_t>(2 * r)), 0.25f) << r;
      EXPECT_EQ(f32At(m.scales, static_cast<size_t>(2 * r + 1)), 4.0f) << r;
    }
  }
}

TEST(QuantizedCheckpoint, Fp8PerChannel) {
  const int64_t n = 3, k = 5;
  const TempDir dir;
  const WeightStore store =
      storeOf(dir, {{"m.weight", "F8_E4M3", {n, k}, fp8Weight(n, k)},
                    {"m.weight_scale", "BF16", {n, 1}, bf16Bytes({1.5f, 0.125f, 3.0f})}});
  const QuantizationConfig config = configOf(ctJson());
  const HostQuantizedMatrix m = readQuantizedLinear(store, config, "m.weight", n, k);
  EXPECT_EQ(m.format, QuantFormat::kFp8E4M3);
  EXPECT_EQ(m.group, k);
  EXPECT_EQ(m.data, fp8Weight(n, k));
  ASSERT_EQ(m.scales.size(), 12u);
  EXPECT_EQ(f32At(m.scales, 0), 1.5f);
  EXPECT_EQ(f32At(m.scales, 1), 0.125f);
  EXPECT_EQ(f32At(m.scales, 2), 3.0f);
  EXPECT_EQ(quantLayoutRejection(m.format, m.k, m.group), nullptr);

  // A static input scale is part of the linear's tensors and is checked, not applied.
  const TempDir dir2;
  const WeightStore withInput =
      storeOf(dir2, {{"m.weight", "F8_E4M3", {n, k}, fp8Weight(n, k)},
                     {"m.weight_scale", "F32", {n, 1}, f32Bytes({1.5f, 0.125f, 3.0f})},
                     {"m.input_scale", "F32", {1}, f32Bytes({0.02f})}});
  const QuantizationConfig staticConfig = configOf(ctJson(/*staticInput=*/true));
  EXPECT_EQ(quantizedLinearTensorNames(withInput, staticConfig, "m.weight"),
            (std::vector<std::string>{"m.weight", "m.weight_scale", "m.input_scale"}));
  const HostQuantizedMatrix s = readQuantizedLinear(withInput, staticConfig, "m.weight", n, k);
  EXPECT_EQ(s.scales, m.scales);
}

TEST(QuantizedCheckpoint, DenseLinearsStayDense) {
  const TempDir dir;
  const WeightStore store =
      storeOf(dir, {{"lm_head.weight", "BF16", {4, 8}, std::vector<uint8_t>(64, 0)},
                    {"m.weight", "F8_E4M3", {4, 8}, fp8Weight(4, 8)},
                    {"m.weight_scale", "F32", {4, 1}, f32Bytes({1, 1, 1, 1})}});
  const QuantizationConfig ct = configOf(ctJson());
  EXPECT_EQ(quantizedLinearFormat(store, ct, "lm_head.weight"), std::nullopt);
  EXPECT_EQ(quantizedLinearFormat(store, ct, "m.weight"), QuantFormat::kFp8E4M3);
  EXPECT_EQ(quantizedLinearFormat(store, QuantizationConfig{}, "m.weight"), std::nullopt);
  EXPECT_EQ(quantizedLinearFormat(store, ct, "m.bias"), std::nullopt);
  EXPECT_TRUE(quantizedLinearTensorNames(store, ct, "lm_head.weight").empty());
  test::expectInvalidArgument([&] { readQuantizedLinear(store, ct, "lm_head.weight", 4, 8); },
                              "weightName");
  test::expectInvalidArgument([&] { readQuantizedLinear(store, ct, "m.weight", 0, 8); }, "n, k");
}

// ---- bad inputs ---------------------------------------------------------------------------

// A valid linear W [16, 64] (G 32) in each format, before a case breaks it.
std::vector<FakeTensor> awqLinear() {
  return {{"m.qweight", "I32", {64, 2}, i32Bytes(std::vector<uint32_t>(128, 0x12345678u))},
          {"m.qzeros", "I32", {2, 2}, i32Bytes({0x88888888u, 0x88888888u, 0x1u, 0x2u})},
          {"m.scales", "F16", {2, 16}, f16Bytes(std::vector<float>(32, 0.5f))}};
}
std::vector<FakeTensor> gptqLinear() {
  std::vector<uint32_t> gIdx;
  for (uint32_t kk = 0; kk < 64; ++kk) gIdx.push_back(kk / 32);
  return {{"m.qweight", "I32", {8, 16}, i32Bytes(std::vector<uint32_t>(128, 0x12345678u))},
          {"m.qzeros", "I32", {2, 2}, i32Bytes(std::vector<uint32_t>(4, 0x77777777u))},
          {"m.scales", "F16", {2, 16}, f16Bytes(std::vector<float>(32, 0.5f))},
          {"m.g_idx", "I32", {64}, i32Bytes(gIdx)}};
}
std::vector<FakeTensor> fp8BlockLinear() {
  return {{"m.weight", "F8_E4M3", {16, 64}, fp8Weight(16, 64)},
          {"m.weight_scale_inv", "F32", {1, 1}, f32Bytes({0.5f})}};
}
std::vector<FakeTensor> fp8ChannelLinear() {
  return {{"m.weight", "F8_E4M3", {16, 64}, fp8Weight(16, 64)},
          {"m.weight_scale", "F32", {16, 1}, f32Bytes(std::vector<float>(16, 0.5f))}};
}

FakeTensor& tensorNamed(std::vector<FakeTensor>& tensors, const std::string& name) {
  for (FakeTensor& t : tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("no tensor " + name);
}
void dropTensor(std::vector<FakeTensor>& tensors, const std::string& name) {
  std::erase_if(tensors, [&](const FakeTensor& t) { return t.name == name; });
}
void setF32(FakeTensor& t, size_t i, float v) { std::memcpy(t.data.data() + 4 * i, &v, 4); }
void setF16(FakeTensor& t, size_t i, float v) {
  const uint16_t bits = to_fp16(v).bits;
  t.data[2 * i] = static_cast<uint8_t>(bits & 0xff);
  t.data[2 * i + 1] = static_cast<uint8_t>(bits >> 8);
}
void setU32(FakeTensor& t, size_t i, uint32_t v) {
  for (int b = 0; b < 4; ++b) t.data[4 * i + b] = static_cast<uint8_t>(v >> (8 * b));
}

TEST(QuantizedCheckpoint, ValidLinearsOfTheBadInputTable) {
  // The unbroken inputs of the table below read fine, so each case fails for its own reason.
  const std::vector<std::pair<json, std::vector<FakeTensor>>> valid = {
      {awqJson(), awqLinear()},
      {gptqJson(), gptqLinear()},
      {fp8BlockJson(), fp8BlockLinear()},
      {ctJson(), fp8ChannelLinear()}};
  for (const auto& [config, tensors] : valid) {
    const TempDir dir;
    const WeightStore store = storeOf(dir, tensors);
    EXPECT_TRUE(quantizedLinearProblems(store, configOf(config), "m.weight", 16, 64).empty());
    EXPECT_NO_THROW(readQuantizedLinear(store, configOf(config), "m.weight", 16, 64));
  }
}

TEST(QuantizedCheckpoint, BadTensorsNameTheTensor) {
  struct Case {
    const char* what;
    json config;
    std::function<std::vector<FakeTensor>()> tensors;
    std::vector<std::string> expect;
    int64_t n = 16;
    int64_t k = 64;
  };
  const std::string file = "model.safetensors: tensor ";
  const std::vector<Case> cases = {
      {"awq qweight transposed",
       awqJson(),
       [] {
         auto t = awqLinear();
         tensorNamed(t, "m.qweight").shape = {2, 64};
         return t;
       },
       {file + "'m.qweight': shape [2, 64], expected [64, 2]", "AWQ qweight [k, n / 8] i32",
        "n = 16, k = 64"}},
      {"awq scales bf16",
       awqJson(),
       [] {
         auto t = awqLinear();
         tensorNamed(t, "m.scales").dtype = "BF16";
         return t;
       },
       {file + "'m.scales': dtype bf16, expected f16"}},
      {"awq qzeros f32",
       awqJson(),
       [] {
         auto t = awqLinear();
         tensorNamed(t, "m.qzeros").dtype = "F32";
         return t;
       },
       {file + "'m.qzeros': dtype f32, expected i32"}},
      {"awq missing scales",
       awqJson(),
       [] {
         auto t = awqLinear();
         dropTensor(t, "m.scales");
         return t;
       },
       {"tensor 'm.scales' is missing", "AWQ linear 'm' needs .qweight, .qzeros, .scales"}},
      {"awq NaN scale",
       awqJson(),
       [] {
         auto t = awqLinear();
         setF16(tensorNamed(t, "m.scales"), 17, std::numeric_limits<float>::quiet_NaN());
         return t;
       },
       {file + "'m.scales' element [1, 1] = nan must be finite and >= 0"}},
      {"awq negative scale",
       awqJson(),
       [] {
         auto t = awqLinear();
         setF16(tensorNamed(t, "m.scales"), 3, -0.5f);
         return t;
       },
       {file + "'m.scales' element [0, 3] = -0.5 must be finite and >= 0"}},
      {"awq infinite scale",
       awqJson(),
       [] {
         auto t = awqLinear();
         setF16(tensorNamed(t, "m.scales"), 0, std::numeric_limits<float>::infinity());
         return t;
       },
       {file + "'m.scales' element [0, 0] = inf"}},
      {"awq n not a multiple of 8",
       awqJson(),
       [] { return awqLinear(); },
       {"AWQ linear 'm' [12, 64]: n = 12 must be a multiple of 8"},
       12,
       64},
      {"awq k not a multiple of the group",
       awqJson(),
       [] { return awqLinear(); },
       {"AWQ linear 'm' [16, 48]: k = 48 must be a multiple of group_size 32"},
       16,
       48},
      {"gptq g_idx out of order",
       gptqJson(),
       [] {
         auto t = gptqLinear();
         setU32(tensorNamed(t, "m.g_idx"), 5, 1);
         return t;
       },
       {file + "'m.g_idx' element [5] = 1, expected k / group_size = 0", "act-order"}},
      {"gptq g_idx short",
       gptqJson(),
       [] {
         auto t = gptqLinear();
         FakeTensor& g = tensorNamed(t, "m.g_idx");
         g.shape = {63};
         g.data.resize(63 * 4);
         return t;
       },
       {file + "'m.g_idx': shape [63], expected [64]"}},
      {"gptq zero point 16",
       gptqJson(),
       [] {
         auto t = gptqLinear();
         setU32(tensorNamed(t, "m.qzeros"), 3, 0x777f7777u);
         return t;
       },
       {file + "'m.qzeros' element [1, 1] nibble 4 = 15: zero point 16 of output feature 12, "
               "group 1"}},
      {"gptq qweight awq-shaped",
       gptqJson(),
       [] {
         auto t = gptqLinear();
         FakeTensor& q = tensorNamed(t, "m.qweight");
         q.shape = {64, 2};
         return t;
       },
       {file + "'m.qweight': shape [64, 2], expected [8, 16]", "GPTQ qweight [k / 8, n] i32"}},
      {"fp8 missing scale",
       fp8BlockJson(),
       [] {
         auto t = fp8BlockLinear();
         dropTensor(t, "m.weight_scale_inv");
         return t;
       },
       {"tensor 'm.weight_scale_inv' is missing",
        "FP8 block linear 'm' needs .weight, "
        ".weight_scale_inv"}},
      {"fp8 scale grid wrong",
       fp8BlockJson(),
       [] {
         auto t = fp8BlockLinear();
         FakeTensor& s = tensorNamed(t, "m.weight_scale_inv");
         s.shape = {1, 2};
         s.data = f32Bytes({1, 1});
         return t;
       },
       {file + "'m.weight_scale_inv': shape [1, 2], expected [1, 1]",
        "[ceil(n / 128), ceil(k / 128)]"}},
      {"fp8 weight bf16",
       fp8BlockJson(),
       [] {
         auto t = fp8BlockLinear();
         FakeTensor& w = tensorNamed(t, "m.weight");
         w.dtype = "BF16";
         w.data.resize(w.data.size() * 2);
         return t;
       },
       {file + "'m.weight': dtype bf16, expected f8_e4m3"}},
      {"fp8 scale f16",
       fp8BlockJson(),
       [] {
         auto t = fp8BlockLinear();
         FakeTensor& s = tensorNamed(t, "m.weight_scale_inv");
         s.dtype = "F16";
         s.data = f16Bytes({1});
         return t;
       },
       {file + "'m.weight_scale_inv': dtype f16, expected f32 or bf16"}},
      {"fp8 NaN scale",
       fp8BlockJson(),
       [] {
         auto t = fp8BlockLinear();
         setF32(tensorNamed(t, "m.weight_scale_inv"), 0, std::nanf(""));
         return t;
       },
       {file + "'m.weight_scale_inv' element [0, 0] = nan"}},
      {"fp8 NaN weight",
       fp8BlockJson(),
       [] {
         auto t = fp8BlockLinear();
         tensorNamed(t, "m.weight").data[2 * 64 + 9] = 0xff;
         return t;
       },
       {file + "'m.weight' element [2, 9] is NaN (byte 0xff)"}},
      {"fp8 weight shape",
       fp8BlockJson(),
       [] { return fp8BlockLinear(); },
       {file + "'m.weight': shape [16, 64], expected [16, 65]"},
       16,
       65},
      {"ct scale per tensor",
       ctJson(),
       [] {
         auto t = fp8ChannelLinear();
         FakeTensor& s = tensorNamed(t, "m.weight_scale");
         s.shape = {1};
         s.data = f32Bytes({1});
         return t;
       },
       {file + "'m.weight_scale': shape [1], expected [16, 1]"}},
      {"ct scale i32",
       ctJson(),
       [] {
         auto t = fp8ChannelLinear();
         tensorNamed(t, "m.weight_scale").dtype = "I32";
         return t;
       },
       {file + "'m.weight_scale': dtype i32, expected f32, bf16 or f16"}},
      {"ct negative scale",
       ctJson(),
       [] {
         auto t = fp8ChannelLinear();
         setF32(tensorNamed(t, "m.weight_scale"), 9, -1.0f);
         return t;
       },
       {file + "'m.weight_scale' element [9, 0] = -1 must be finite and >= 0"}},
      {"ct static input scale missing",
       ctJson(/*staticInput=*/true),
       [] { return fp8ChannelLinear(); },
       {"tensor 'm.input_scale' is missing"}},
      {"ct static input scale zero",
       ctJson(/*staticInput=*/true),
       [] {
         auto t = fp8ChannelLinear();
         t.push_back({"m.input_scale", "F32", {}, f32Bytes({0.0f})});
         return t;
       },
       {file + "'m.input_scale' = 0 must be finite and > 0"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const TempDir dir;
    const WeightStore store = storeOf(dir, c.tensors());
    const QuantizationConfig config = configOf(c.config);
    expectFormatError([&] { readQuantizedLinear(store, config, "m.weight", c.n, c.k); }, c.expect);
  }
}

// ---- checkWeights on a quantized folder ---------------------------------------------------

// A one-layer Qwen3 with hidden 32, 2 query heads / 1 KV head of dim 16, intermediate 64:
// q [32, 32], k / v [16, 32], o [32, 32], gate / up [64, 32], down [32, 64].
json quantTinyConfig(const json& quantizationConfig) {
  return json{{"architectures", {"Qwen3ForCausalLM"}},
              {"hidden_size", 32},
              {"intermediate_size", 64},
              {"num_hidden_layers", 1},
              {"num_attention_heads", 2},
              {"num_key_value_heads", 1},
              {"head_dim", 16},
              {"vocab_size", 16},
              {"tie_word_embeddings", false},
              {"quantization_config", quantizationConfig}};
}

struct Linear {
  std::string name;  // without ".weight"
  int64_t n;
  int64_t k;
};
const std::vector<Linear>& tinyLinears() {
  static const std::vector<Linear> linears = {
      {"model.layers.0.self_attn.q_proj", 32, 32}, {"model.layers.0.self_attn.k_proj", 16, 32},
      {"model.layers.0.self_attn.v_proj", 16, 32}, {"model.layers.0.self_attn.o_proj", 32, 32},
      {"model.layers.0.mlp.gate_proj", 64, 32},    {"model.layers.0.mlp.up_proj", 64, 32},
      {"model.layers.0.mlp.down_proj", 32, 64}};
  return linears;
}

// The dense tensors of the tiny Qwen3 (lm_head dense too), bf16.
std::vector<FakeTensor> tinyDense() {
  return {test::fakeTensor("model.embed_tokens.weight", "BF16", {16, 32}),
          test::fakeTensor("model.norm.weight", "BF16", {32}),
          test::fakeTensor("lm_head.weight", "BF16", {16, 32}),
          test::fakeTensor("model.layers.0.input_layernorm.weight", "BF16", {32}),
          test::fakeTensor("model.layers.0.post_attention_layernorm.weight", "BF16", {32}),
          test::fakeTensor("model.layers.0.self_attn.q_norm.weight", "BF16", {16}),
          test::fakeTensor("model.layers.0.self_attn.k_norm.weight", "BF16", {16})};
}

std::vector<FakeTensor> tinyAwq() {
  std::vector<FakeTensor> t = tinyDense();
  for (const Linear& l : tinyLinears()) {
    t.push_back({l.name + ".qweight",
                 "I32",
                 {l.k, l.n / 8},
                 i32Bytes(std::vector<uint32_t>(static_cast<size_t>(l.k * l.n / 8), 0x11111111u))});
    t.push_back({l.name + ".qzeros",
                 "I32",
                 {l.k / 32, l.n / 8},
                 i32Bytes(std::vector<uint32_t>(static_cast<size_t>(l.k / 32 * l.n / 8), 0u))});
    t.push_back({l.name + ".scales",
                 "F16",
                 {l.k / 32, l.n},
                 f16Bytes(std::vector<float>(static_cast<size_t>(l.k / 32 * l.n), 1.0f))});
  }
  return t;
}

TEST(QuantizedCheckpoint, CheckWeightsAcceptsAQuantizedFolder) {
  const json configJson = quantTinyConfig(awqJson());
  const ModelConfig model = parseModelConfig(configJson.dump(), "tiny/config.json");
  const QuantizationConfig quant = parseQuantizationConfig(configJson, "tiny/config.json");
  const TempDir dir;
  const WeightStore store = storeOf(dir, tinyAwq());
  EXPECT_NO_THROW(checkWeights(store, model, quant));
  // Without the quantization config the same folder is what it looks like to a dense loader.
  EXPECT_THROW(checkWeights(store, model), FormatError);
  for (const Linear& l : tinyLinears()) {
    const HostQuantizedMatrix m = readQuantizedLinear(store, quant, l.name + ".weight", l.n, l.k);
    EXPECT_EQ(nibble(m, l.n - 1, l.k - 1), 1);
  }
}

TEST(QuantizedCheckpoint, CheckWeightsListsQuantizedProblems) {
  const json configJson = quantTinyConfig(awqJson());
  const ModelConfig model = parseModelConfig(configJson.dump(), "tiny/config.json");
  const QuantizationConfig quant = parseQuantizationConfig(configJson, "tiny/config.json");
  std::vector<FakeTensor> tensors = tinyAwq();
  dropTensor(tensors, "model.layers.0.mlp.up_proj.qzeros");
  tensorNamed(tensors, "model.layers.0.mlp.down_proj.qweight").shape = {32, 8};
  tensors.push_back(test::fakeTensor("model.layers.0.self_attn.q_proj.weight", "BF16", {32, 32}));
  const TempDir dir;
  const WeightStore store = storeOf(dir, tensors);
  try {
    checkWeights(store, model, quant);
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    const std::string message = e.what();
    for (const std::string part :
         {"quantized as awq", "2 quantized linear problems",
          "tensor 'model.layers.0.mlp.up_proj.qzeros' is missing",
          "tensor 'model.layers.0.mlp.down_proj.qweight': shape [32, 8], expected [64, 4]",
          "1 unexpected", "model.layers.0.self_attn.q_proj.weight [32, 32]"}) {
      EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
    }
  }
}

TEST(QuantizedCheckpoint, CheckWeightsOnAnFp8Folder) {
  const json configJson = quantTinyConfig(fp8BlockJson());
  const ModelConfig model = parseModelConfig(configJson.dump(), "tiny/config.json");
  const QuantizationConfig quant = parseQuantizationConfig(configJson, "tiny/config.json");
  std::vector<FakeTensor> tensors = tinyDense();
  for (const Linear& l : tinyLinears()) {
    tensors.push_back({l.name + ".weight", "F8_E4M3", {l.n, l.k}, fp8Weight(l.n, l.k)});
    tensors.push_back({l.name + ".weight_scale_inv", "BF16", {1, 1}, bf16Bytes({0.5f})});
  }
  {
    const TempDir dir;
    const WeightStore store = storeOf(dir, tensors);
    EXPECT_NO_THROW(checkWeights(store, model, quant));
    // The dense path keeps rejecting FP8 tensors it cannot read.
    EXPECT_THROW(checkWeights(store, model), FormatError);
  }
  // An FP8 norm is not a linear: it stays a dense tensor with an unsupported dtype.
  tensorNamed(tensors, "model.norm.weight").dtype = "F8_E4M3";
  tensorNamed(tensors, "model.norm.weight").data.resize(32);
  const TempDir dir;
  const WeightStore store = storeOf(dir, tensors);
  try {
    checkWeights(store, model, quant);
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm.weight: f8_e4m3"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace es::model
