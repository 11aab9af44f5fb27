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

// `edgespec ARGS` must fail with an InvalidArgument whose message holds `fragment`.
void expectRefused(const std::vector<std::string>& args, const std::string& fragment) {
  try {
    runCli(args);
    ADD_FAILURE() << "accepted " << testing::PrintToString(args);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << testing::PrintToString(args) << ": " << e.what();
  }
}

TEST(CliInspect, BadInputIsAnErrorNamingTheArgument) {
  expectRefused({"inspect", "--max-batch", "-2"},
                "inspect: argument '--max-batch' = -2 must be an integer in [1, 65536]");
  EXPECT_THROW(runCli({"inspect", "--swa-layers", "99", "--sliding-window", "512"}),
               InvalidArgument);
  EXPECT_THROW(runCli({"inspect", "--swa-layers", "1"}), InvalidArgument);  // no window given
  EXPECT_NE(runCli({"inspect", "--preset", "no-such-model"}), 0);           // parse error exit code
}

// Every numeric flag: negative, zero where it means nothing, huge, fractional, trailing garbage,
// hexadecimal are range errors naming the flag; 0 is never read as "the preset's value".
TEST(CliInspect, NumericFlagsAreRangeChecked) {
  const std::string integer = "must be an integer in ";
  expectRefused({"inspect", "--layers", "0"}, "'--layers' = 0 " + integer + "[1, 1024]");
  expectRefused({"inspect", "--layers", "1025"}, "'--layers' = 1025 " + integer + "[1, 1024]");
  expectRefused({"inspect", "--head-dim", "0"}, "'--head-dim' = 0 " + integer + "[1, 1024]");
  expectRefused({"inspect", "--head-dim", "12"}, "'--head-dim' = 12 must be a multiple of 8");
  expectRefused({"inspect", "--kv-heads", "0"}, "'--kv-heads' = 0 " + integer + "[1, 1024]");
  expectRefused({"inspect", "--draft-layers", "-1"}, "'--draft-layers' = -1 " + integer);
  expectRefused({"inspect", "--draft-layers", "2000000000"},
                "'--draft-layers' = 2000000000 " + integer + "[0, 1024]");
  expectRefused({"inspect", "--max-batch", "0"}, "'--max-batch' = 0 " + integer);
  expectRefused({"inspect", "--max-batch", "1.5"}, "'--max-batch' = 1.5 " + integer);
  expectRefused({"inspect", "--max-seq-len", "99999999999"}, "'--max-seq-len' = 99999999999 ");
  expectRefused({"inspect", "--max-seq-len", "0x10"}, "'--max-seq-len' = 0x10 " + integer);
  expectRefused({"inspect", "--sliding-window", "0"}, "'--sliding-window' = 0 " + integer);
  expectRefused({"inspect", "--swa-layers", "1,-2"}, "'--swa-layers' = -2 " + integer);
  expectRefused({"inspect", "--num-pages", "-5"}, "'--num-pages' = -5 " + integer);
  expectRefused({"inspect", "--prefix-cache-pages", "7abc"},
                "'--prefix-cache-pages' = 7abc " + integer);
  // A batch whose pages overflow the pool names --max-batch and --max-seq-len.
  expectRefused({"inspect", "--max-seq-len", "2147483520", "--max-batch", "65536"},
                "'--max-batch' = 65536 must be <= 64 with --max-seq-len 2147483520");
  // The bounds themselves are accepted, and an override equal to the preset changes nothing.
  testing::internal::CaptureStdout();
  ASSERT_EQ(runCli({"inspect", "--preset", "smollm2-135m", "--layers", "1", "--head-dim", "8",
                    "--draft-layers", "0", "--json"}),
            0);
  const nlohmann::json plan = nlohmann::json::parse(testing::internal::GetCapturedStdout());
  ASSERT_EQ(plan["base_layers"].size(), 1u);
  EXPECT_EQ(plan["base_layers"][0]["head_dim"], 8);
}

}  // namespace
}  // namespace es::cli
