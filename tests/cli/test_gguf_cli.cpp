// `edgespec generate` and `edgespec inspect` on a .gguf file: the same tokens as on the folder
// `edgespec convert` makes of it (f32, so both load identical weights), the tensor list with
// each tensor's GGUF origin, and clear errors. With ES_SMOLLM2_GGUF: the real default model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/errors.h"
#include "model/gguf_convert.h"
#include "model/gguf_fixture.h"
#include "model/safetensors_test_writer.h"
#include "support/cli_test_util.h"
#include "support/test_util.h"

namespace es::cli {
namespace {

namespace fs = std::filesystem;

using test::runCli;

nlohmann::json runJson(const std::vector<std::string>& args) { return test::runCliJson(args); }

std::string fixture(const std::string& family) {
  return test::test_data_dir() + "/models/" + family;
}

// The qwen2 fixture as a GGUF: projections Q8_0 (biases F32), the rest F32.
void writeQwen2Gguf(const fs::path& path) {
  test::GgufFromFolderOptions o;
  o.type = [](const std::string& name) {
    return name.find("proj.weight") != std::string::npos ? model::GgmlType::kQ8_0
                                                         : model::GgmlType::kF32;
  };
  test::writeBytes(path, test::ggufFromFolder(fixture("qwen2"), o).build());
}

TEST(CliGguf, InspectTensorsOfAGguf) {
  test::TempDir tmp;
  writeQwen2Gguf(tmp / "q.gguf");
  const nlohmann::json out =
      runJson({"inspect", "--model", (tmp / "q.gguf").string(), "--tensors", "--json"});
  ASSERT_EQ(out["tensors"].size(),
            3u + 2 * 12);  // as the HF folder: embed, norm, lm_head + 12 per layer
  bool sawQ = false;
  for (const auto& t : out["tensors"]) {
    EXPECT_EQ(t["dtype"], "f32");
    if (t["name"] == "model.layers.1.self_attn.q_proj.weight") {
      sawQ = true;
      EXPECT_EQ(t["gguf"], "blk.1.attn_q.weight Q8_0");
      EXPECT_EQ(t["shape"], nlohmann::json::array({128, 128}));
      EXPECT_EQ(t["bytes"], 128 * 128 * 4);
    }
  }
  EXPECT_TRUE(sawQ);
  // The text form names the origin too.
  testing::internal::CaptureStdout();
  ASSERT_EQ(runCli({"inspect", "--model", (tmp / "q.gguf").string(), "--tensors"}), 0);
  const std::string text = testing::internal::GetCapturedStdout();
  EXPECT_NE(text.find("<- blk.0.attn_k.bias F32"), std::string::npos) << text;
}

TEST(CliGguf, InspectPlanOfAGguf) {
  test::TempDir tmp;
  writeQwen2Gguf(tmp / "q.gguf");
  const nlohmann::json plan = runJson({"inspect", "--model", (tmp / "q.gguf").string(),
                                       "--max-batch", "2", "--max-seq-len", "256", "--json"});
  ASSERT_EQ(plan["base_layers"].size(), 2u);  // qwen2 fixture: 2 layers, 1 KV head of 64
  EXPECT_EQ(plan["base_layers"][0]["num_kv_heads"], 1);
  EXPECT_EQ(plan["base_layers"][0]["head_dim"], 64);
}

TEST(CliGguf, GenerateOnAGgufEqualsTheConvertedFolder) {
  test::TempDir tmp;
  writeQwen2Gguf(tmp / "q.gguf");
  model::ConvertOptions f32;
  f32.dtype = DType::kF32;
  model::convertGgufToHf(tmp / "q.gguf", tmp / "hf", f32);
  for (const bool raw : {false, true}) {
    std::vector<std::string> args = {"generate", "--backend", "cpu",      "--json",
                                     "-n",       "12",        "--prompt", "hello there"};
    if (raw) args.push_back("--raw");
    std::vector<std::string> a = args, b = args;
    a.insert(a.begin() + 1, {"--model", (tmp / "q.gguf").string()});
    b.insert(b.begin() + 1, {"--model", (tmp / "hf").string()});
    const nlohmann::json direct = runJson(a), converted = runJson(b);
    EXPECT_EQ(direct["tokens"], converted["tokens"]) << "raw " << raw;
    EXPECT_EQ(direct["prompt_tokens"], converted["prompt_tokens"]) << "raw " << raw;
    EXPECT_EQ(direct["text"], converted["text"]) << "raw " << raw;
    EXPECT_GT(direct["tokens"].size(), 0u);
    // The chat template adds its turn markers: the templated prompt is the longer one.
    if (!raw) {
      EXPECT_GT(direct["prompt_tokens"].get<int>(), 3);
    }
  }
}

TEST(CliGguf, GenerateErrorsNameTheFile) {
  test::TempDir tmp;
  try {
    runCli({"generate", "--backend", "cpu", "--model", (tmp / "none.gguf").string()});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("none.gguf"), std::string::npos) << e.what();
  }
  // A GGUF without tokenizer metadata cannot encode a prompt.
  test::GgufFromFolderOptions o;
  o.tokenizer = false;
  test::writeBytes(tmp / "notok.gguf", test::ggufFromFolder(fixture("qwen3"), o).build());
  try {
    runCli({"generate", "--backend", "cpu", "--model", (tmp / "notok.gguf").string()});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer.ggml"), std::string::npos) << e.what();
  }
  // Truncated: the GGUF reader's FormatError, naming the file.
  test::writeText(tmp / "cut.gguf", "GGUF\x03");
  EXPECT_THROW(runCli({"generate", "--backend", "cpu", "--model", (tmp / "cut.gguf").string()}),
               FormatError);
}

// The default model (ES_SMOLLM2_GGUF): generate on the GGUF gives the tokens of its f32 conversion.
TEST(CliGguf, RealSmolLM2GenerateEqualsConverted) {
  const char* path = std::getenv("ES_SMOLLM2_GGUF");
  if (path == nullptr || !fs::exists(path)) GTEST_SKIP() << "ES_SMOLLM2_GGUF not set";
  test::TempDir tmp;
  model::ConvertOptions f32;
  f32.dtype = DType::kF32;
  model::convertGgufToHf(path, tmp / "hf", f32);
  const std::vector<std::string> args = {
      "generate", "--backend", "cpu",      "--json",
      "-n",       "24",        "--prompt", "What is the capital of France?"};
  std::vector<std::string> a = args, b = args;
  a.insert(a.begin() + 1, {"--model", path});
  b.insert(b.begin() + 1, {"--model", (tmp / "hf").string()});
  const nlohmann::json direct = runJson(a), converted = runJson(b);
  EXPECT_EQ(direct["tokens"], converted["tokens"]);
  EXPECT_EQ(direct["prompt_tokens"], converted["prompt_tokens"]);
  EXPECT_NE(direct["text"].get<std::string>().find("Paris"), std::string::npos) << direct["text"];
}

}  // namespace
}  // namespace es::cli
