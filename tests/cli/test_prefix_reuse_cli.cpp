// Prefix reuse from the command line on the CPU backend (qwen3 fixture): `generate
// --prefix-cache-pages` decodes a batch whose requests share a long prefix to the same tokens as
// without reuse while reusing the shared blocks; `inspect` reports the retained pages and their
// memory; `bench --prefix-reuse` times both modes and agrees on the first tokens; bad values
// name the flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/errors.h"
#include "model/gguf_fixture.h"
#include "model/random_draft.h"
#include "support/cli_test_util.h"
#include "support/test_util.h"

namespace es::cli {
namespace {

using test::runCli;
using test::runCliJson;

std::vector<nlohmann::json> jsonLines(const std::vector<std::string>& args) {
  testing::internal::CaptureStdout();
  int rc = -1;
  std::string error;
  try {
    rc = runCli(args);
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::istringstream lines(testing::internal::GetCapturedStdout());
  EXPECT_EQ(rc, 0) << error;
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(CliPrefixReuse, GenerateBatchSharingAPrefixEqualsNoReuse) {
  test::TempDir tmp;
  test::writeBytes(tmp / "q.gguf",
                   test::ggufFromFolder(test::test_data_dir() + "/models/qwen3").build());
  std::string shared;
  for (int i = 0; i < 9; ++i)
    shared += "the same long system text, line " + std::to_string(i) + ". ";
  const nlohmann::json requests = {shared + "first question?", shared + "a second, different one"};
  test::writeText(tmp / "in.json", requests.dump());
  const std::vector<std::string> base = {"generate",
                                         "--backend",
                                         "cpu",
                                         "--json",
                                         "--raw",
                                         "-n",
                                         "8",
                                         "--model",
                                         (tmp / "q.gguf").string(),
                                         "--input-file",
                                         (tmp / "in.json").string()};
  std::vector<std::string> reuse = base;
  reuse.insert(reuse.end(), {"--prefix-cache-pages", "4"});
  const std::vector<nlohmann::json> off = jsonLines(base), on = jsonLines(reuse);
  ASSERT_EQ(off.size(), 2u);
  ASSERT_EQ(on.size(), 2u);
  ASSERT_GT(on[1]["prompt_tokens"].get<int>(), 256);  // the shared text spans whole blocks
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(on[r]["tokens"], off[r]["tokens"]) << "request " << r;
  EXPECT_FALSE(off[0].contains("reused_prompt_tokens"));
  // The second request reuses the first one's complete blocks (stats are per call).
  EXPECT_GE(on[0]["reused_prompt_tokens"].get<int>(), 256);
  EXPECT_EQ(on[0]["reused_prompt_tokens"].get<int>() % 128, 0);

  for (const char* bad : {"-1", "2147483647"}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--prefix-cache-pages", bad});
    test::expectInvalidArgument([&] { runCli(args); }, "--prefix-cache-pages");
  }
}

TEST(CliPrefixReuse, InspectReportsTheRetainedPages) {
  const nlohmann::json plan =
      runCliJson({"inspect", "--preset", "qwen3-8b", "--max-batch", "8", "--max-seq-len", "4096",
                  "--prefix-cache-pages", "64", "--json"});
  EXPECT_EQ(plan["num_pages"], 256 + 64);
  EXPECT_EQ(plan["prefix_cache_pages"], 64);
  // 36 layers, K and V, 128 tokens of 8 heads x 128 bf16 each: 512 KiB a page per layer.
  EXPECT_EQ(plan["prefix_cache_bytes"], int64_t{64} * 36 * 2 * 128 * 8 * 128 * 2);
  testing::internal::CaptureStdout();
  ASSERT_EQ(runCli({"inspect", "--preset", "qwen3-8b", "--prefix-cache-pages", "64"}), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("prefix reuse: 64 retained pages"),
            std::string::npos);
  test::expectInvalidArgument(
      [] {
        runCli({"inspect", "--prefix-cache-pages", "-3"});
      },
      "--prefix-cache-pages");
  test::expectInvalidArgument(
      [] {
        runCli({"inspect", "--prefix-cache-pages", "2", "--num-pages", "100"});
      },
      "--num-pages");
}

TEST(CliPrefixReuse, BenchTimesFirstTokenWithAndWithoutReuse) {
  const std::string target = test::test_data_dir() + "/models/qwen3";
  test::TempDir tmp;
  model::test_draft::DraftSpec spec;
  spec.blockSize = 4;
  model::test_draft::writeDraft(tmp / "draft", spec);
  for (bool draft : {false, true}) {
    std::vector<std::string> args = {
        "bench", "--model",      target, "--backend",   "cpu", "--prefix-reuse", "--prompt-len",
        "300",   "--shared-len", "256",  "--ttft-runs", "2",   "--json"};
    if (draft) args.insert(args.end(), {"--draft", (tmp / "draft").string()});
    const nlohmann::json out = runCliJson(args);
    EXPECT_EQ(out["prefill_rows_reuse_off"], 300);
    EXPECT_EQ(out["prefill_rows_reuse_on"], 300 - 256);
    EXPECT_EQ(out["reused_tokens"], 256);
    EXPECT_EQ(out["first_token_identical"], 2);
    EXPECT_GT(out["ttft_ms_reuse_off"].get<double>(), 0.0);
    EXPECT_GT(out["ttft_ms_reuse_on"].get<double>(), 0.0);
  }
  test::expectInvalidArgument(
      [&] {
        runCli({"bench", "--model", target, "--backend", "cpu", "--prefix-reuse", "--prompt-len",
                "200", "--shared-len", "256"});
      },
      "--shared-len");
}

}  // namespace
}  // namespace es::cli
