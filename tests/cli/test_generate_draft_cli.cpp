// `edgespec generate --draft DIR` (DFlash speculative decoding) and `edgespec bench` end to end on
// the CPU backend: the qwen3 fixture (as a GGUF, so it carries a tokenizer) with a random DFlash
// draft gives exactly the tokens of plain generation, greedy; bench reports the replay draft's
// tau and identical output; mismatched drafts are clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/errors.h"
#include "model/gguf_fixture.h"
#include "model/random_draft.h"
#include "support/test_util.h"

namespace es::cli {
namespace {

namespace fs = std::filesystem;

int runCli(std::vector<std::string> args) {
  args.insert(args.begin(), "edgespec");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return run(static_cast<int>(argv.size()), argv.data());
}

nlohmann::json runJson(const std::vector<std::string>& args) {
  testing::internal::CaptureStdout();
  const int rc = runCli(args);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  return nlohmann::json::parse(out);
}

TEST(CliDraft, GenerateWithADFlashDraftEqualsPlainGreedy) {
  test::TempDir tmp;
  const std::string target = test::test_data_dir() + "/models/qwen3";
  test::writeBytes(tmp / "q.gguf", test::ggufFromFolder(target).build());
  model::test_draft::DraftSpec spec;
  spec.blockSize = 4;
  model::test_draft::writeDraft(tmp / "draft", spec);
  const std::vector<std::string> base = {"generate", "--backend", "cpu", "--json", "-n", "20", "--raw",
                                         "--model", (tmp / "q.gguf").string(), "--prompt", "hello there general"};
  std::vector<std::string> withDraft = base;
  withDraft.insert(withDraft.end(), {"--draft", (tmp / "draft").string()});
  const nlohmann::json plain = runJson(base), spec_out = runJson(withDraft);
  EXPECT_EQ(spec_out["tokens"], plain["tokens"]);
  EXPECT_EQ(spec_out["text"], plain["text"]);
  ASSERT_TRUE(spec_out.contains("tau"));
  EXPECT_GE(spec_out["tau"].get<double>(), 1.0);
  EXPECT_FALSE(plain.contains("tau"));
}

TEST(CliDraft, BenchReplayDraftAcceptsWholeBlocksAndMatchesPlain) {
  const std::string target = test::test_data_dir() + "/models/qwen3";
  const nlohmann::json out = runJson({"bench", "--model", target, "--backend", "cpu", "--replay", "--block-size", "4",
                                      "--prompt-len", "20", "--gen-len", "33", "--repeats", "2", "--json"});
  EXPECT_EQ(out["identical_prefix_fraction"].get<double>(), 1.0);
  EXPECT_GT(out["tau"].get<double>(), 3.5);  // 32 tokens in blocks of 4 (the last one cut by the budget)
  EXPECT_GT(out["plain_tok_s"].get<double>(), 0.0);
  EXPECT_GT(out["verify_forward_ms"].get<double>(), 0.0);
}

TEST(CliDraft, MismatchedDraftIsAClearError) {
  test::TempDir tmp;
  const std::string target = test::test_data_dir() + "/models/qwen3";
  test::writeBytes(tmp / "q.gguf", test::ggufFromFolder(target).build());
  model::test_draft::DraftSpec spec;
  spec.hidden = 64;  // the target's hidden size is 128
  spec.layers = 1;
  model::test_draft::writeDraft(tmp / "draft", spec);
  EXPECT_THROW(runCli({"generate", "--backend", "cpu", "-n", "4", "--raw", "--model", (tmp / "q.gguf").string(),
                       "--draft", (tmp / "draft").string()}),
               InvalidArgument);
  EXPECT_THROW(runCli({"bench", "--model", target, "--replay", "--draft", (tmp / "draft").string()}), InvalidArgument);
}

}  // namespace
}  // namespace es::cli
