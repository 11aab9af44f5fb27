#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/errors.h"
#include "support/test_util.h"

namespace es::cli {
namespace {

int runCli(std::vector<std::string> args) {
  args.insert(args.begin(), "edgespec");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return run(static_cast<int>(argv.size()), argv.data());
}

TEST(CliInspect, JsonPlanOnStdout) {
  testing::internal::CaptureStdout();
  ASSERT_EQ(runCli({"inspect", "--preset", "qwen3-8b", "--max-batch", "8", "--max-seq-len", "4096",
                    "--json"}),
            0);
  const nlohmann::json plan = nlohmann::json::parse(testing::internal::GetCapturedStdout());
  EXPECT_EQ(plan["num_pages"], 256);
  EXPECT_EQ(plan["base_layers"].size(), 36u);
  EXPECT_EQ(plan["total_bytes"], int64_t{36} * (int64_t{128} << 20));
}

TEST(CliInspect, PlanFromAModelFolder) {
  testing::internal::CaptureStdout();
  const std::string dir = test::test_data_dir() + "/models/llama";
  ASSERT_EQ(
      runCli({"inspect", "--model", dir, "--max-batch", "2", "--max-seq-len", "256", "--json"}), 0);
  const nlohmann::json plan = nlohmann::json::parse(testing::internal::GetCapturedStdout());
  ASSERT_EQ(plan["base_layers"].size(), 2u);  // the fixture's config: 2 layers, 1 KV head of 64
  EXPECT_EQ(plan["base_layers"][0]["num_kv_heads"], 1);
  EXPECT_EQ(plan["base_layers"][0]["head_dim"], 64);
  EXPECT_EQ(plan["num_pages"], 4);
}

TEST(CliInspect, TensorListOfAModelFolder) {
  testing::internal::CaptureStdout();
  const std::string dir = test::test_data_dir() + "/models/qwen2";
  ASSERT_EQ(runCli({"inspect", "--model", dir, "--tensors", "--json"}), 0);
  const nlohmann::json out = nlohmann::json::parse(testing::internal::GetCapturedStdout());
  // Qwen2, 2 layers: embed, norm, lm_head + 12 per layer (q/k/v with biases, o, 2 norms, 3 mlp).
  ASSERT_EQ(out["tensors"].size(), 3u + 2 * 12);
  bool sawBias = false;
  for (const auto& t : out["tensors"])
    sawBias |= t["name"] == "model.layers.1.self_attn.k_proj.bias";
  EXPECT_TRUE(sawBias);
}

TEST(CliInspect, BadInputIsAnErrorNamingTheArgument) {
  try {
    runCli({"inspect", "--max-batch", "-2"});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("maxBatchSize"), std::string::npos);
  }
  EXPECT_THROW(runCli({"inspect", "--swa-layers", "99", "--sliding-window", "512"}),
               InvalidArgument);
  EXPECT_THROW(runCli({"inspect", "--swa-layers", "1"}), InvalidArgument);  // no window given
  EXPECT_NE(runCli({"inspect", "--preset", "no-such-model"}), 0);           // parse error exit code
}

}  // namespace
}  // namespace es::cli
