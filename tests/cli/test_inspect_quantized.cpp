// `edgespec inspect --tensors` on a GGUF with quantized linears: each linear's format and bytes
// per layer (the stored blocks where kept quantized), and the totals.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf_fixture.h"
#include "model/quantize_folder.h"
#include "model/safetensors_test_writer.h"
#include "support/cli_test_util.h"
#include "support/test_util.h"

namespace es::cli {
namespace {

namespace fs = std::filesystem;

// The qwen3 fixture (hidden 128, intermediate 192, 4 q heads and 2 KV heads of 64, vocab 384,
// untied) with layer 0's projections Q8_0, layer 1's Q4_0, the lm_head Q4_1.
void writeMixedGguf(const fs::path& path) {
  test::GgufFromFolderOptions o;
  o.type = [](const std::string& name) {
    if (name == "lm_head.weight") return model::GgmlType::kQ4_1;
    if (name.find("proj.weight") == std::string::npos) return model::GgmlType::kF32;
    return name.starts_with("model.layers.0.") ? model::GgmlType::kQ8_0 : model::GgmlType::kQ4_0;
  };
  test::writeBytes(path, test::ggufFromFolder(test::test_data_dir() + "/models/qwen3", o).build());
}

TEST(CliInspectQuantized, LinearsPerLayerWithFormatAndBytes) {
  test::TempDir tmp;
  writeMixedGguf(tmp / "m.gguf");
  const nlohmann::json out =
      test::runCliJson({"inspect", "--model", (tmp / "m.gguf").string(), "--tensors", "--json"});
  const nlohmann::json& linears = out["linears"];
  ASSERT_EQ(linears.size(), 2u * 7 + 1);  // 7 per layer, then the lm_head
  // Rows x (k / 32 blocks) x block bytes (Q8_0 34, Q4_0 18, Q4_1 20).
  auto expect = [&](size_t i, const std::string& layer, const std::string& name,
                    const std::string& format, int64_t bytes) {
    SCOPED_TRACE(name);
    EXPECT_EQ(linears[i]["layer"], layer);
    EXPECT_EQ(linears[i]["name"], name);
    EXPECT_EQ(linears[i]["format"], format);
    EXPECT_EQ(linears[i]["bytes"], bytes);
  };
  expect(0, "0", "q_proj", "q8_0", 256 * 4 * 34);
  expect(1, "0", "k_proj", "q8_0", 128 * 4 * 34);
  expect(4, "0", "gate_proj", "q8_0", 192 * 4 * 34);
  expect(6, "0", "down_proj", "q8_0", 128 * 6 * 34);
  expect(7, "1", "q_proj", "q4_0", 256 * 4 * 18);
  expect(10, "1", "o_proj", "q4_0", 128 * 8 * 18);
  expect(14, "head", "lm_head", "q4_1", 384 * 4 * 20);
  int64_t quantized = 0, asBf16 = 0;
  for (const auto& e : linears) quantized += e["bytes"].get<int64_t>();
  // Elements of one layer's linears: q 256x128, k and v 128x128, o 128x256, gate and up 192x128,
  // down 128x192; then the lm_head 384x128.
  const int64_t layerElems = 256 * 128 + 2 * 128 * 128 + 128 * 256 + 3 * 192 * 128;
  asBf16 = 2 * (2 * layerElems + 384 * 128);
  EXPECT_EQ(out["linear_totals"]["quantized_bytes"], quantized);
  EXPECT_EQ(out["linear_totals"]["dense_bytes"], 0);
  EXPECT_EQ(out["linear_totals"]["quantized_as_bf16_bytes"], asBf16);

  // The text form: one line per layer, and the totals.
  testing::internal::CaptureStdout();
  ASSERT_EQ(test::runCli({"inspect", "--model", (tmp / "m.gguf").string(), "--tensors"}), 0);
  const std::string text = testing::internal::GetCapturedStdout();
  EXPECT_NE(text.find("layer 1: q_proj q4_0 18432 B;"), std::string::npos) << text;
  EXPECT_NE(text.find("head: lm_head q4_1 30720 B;"), std::string::npos) << text;
  EXPECT_NE(text.find("total: quantized"), std::string::npos) << text;
}

// A dense folder: every linear dense in its stored dtype, nothing quantized.
TEST(CliInspectQuantized, DenseFolderHasNoQuantizedLinears) {
  const nlohmann::json out = test::runCliJson(
      {"inspect", "--model", test::test_data_dir() + "/models/qwen2", "--tensors", "--json"});
  ASSERT_EQ(out["linears"].size(), 2u * 7 + 1);
  EXPECT_EQ(out["linear_totals"]["quantized_bytes"], 0);
  EXPECT_GT(out["linear_totals"]["dense_bytes"].get<int64_t>(), 0);
  for (const auto& e : out["linears"]) EXPECT_NE(e["format"], "q8_0");
}

// An AWQ folder (edgespec quantize --to int4 --group 64 of the qwen3 fixture) has no tensor of a
// linear's dense name: its linears are still listed, int4 with their packed bytes (n x k / 2 of
// nibbles, n x k / 64 f16 scales and u8 zero points), the lm_head dense bf16.
TEST(CliInspectQuantized, AwqFolderLinears) {
  test::TempDir tmp;
  model::quantizeFolder(test::test_data_dir() + "/models/qwen3", tmp / "q",
                        {.to = model::QuantizeTo::kInt4, .group = 64});
  const nlohmann::json out =
      test::runCliJson({"inspect", "--model", (tmp / "q").string(), "--tensors", "--json"});
  const nlohmann::json& linears = out["linears"];
  ASSERT_EQ(linears.size(), 2u * 7 + 1);
  auto int4Bytes = [](int64_t n, int64_t k) { return n * k / 2 + n * (k / 64) * 3; };
  EXPECT_EQ(linears[0]["name"], "q_proj");
  EXPECT_EQ(linears[0]["format"], "int4");
  EXPECT_EQ(linears[0]["bytes"], int4Bytes(256, 128));
  EXPECT_EQ(linears[13]["name"], "down_proj");
  EXPECT_EQ(linears[13]["bytes"], int4Bytes(128, 192));
  EXPECT_EQ(linears[14]["format"], "bf16");
  EXPECT_EQ(out["linear_totals"]["dense_bytes"], 384 * 128 * 2);
}

}  // namespace
}  // namespace es::cli
