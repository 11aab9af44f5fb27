// `edgespec generate` on a model whose logits go non-finite for one request of a batch: that
// request's JSON line says finish_reason "error" with the message, the other request's answer is
// the clean model's, and the command fails with "request R: <message>" (main() prints it as one
// line and exits 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/errors.h"
#include "model/gguf_fixture.h"
#include "model/safetensors_test_writer.h"
#include "support/cli_test_util.h"
#include "support/poisoned_model.h"
#include "support/test_util.h"

namespace es::cli {
namespace {

// The JSON lines `edgespec ARGS` prints, and the message of the error it ends with ("" if none).
struct CliRun {
  std::vector<nlohmann::json> lines;
  std::string error;
};

CliRun run(const std::vector<std::string>& args) {
  CliRun r;
  testing::internal::CaptureStdout();
  try {
    EXPECT_EQ(test::runCli(args), 0);
  } catch (const Error& e) {
    r.error = e.what();
  }
  std::istringstream out(testing::internal::GetCapturedStdout());
  for (std::string line; std::getline(out, line);) r.lines.push_back(nlohmann::json::parse(line));
  return r;
}

std::vector<std::string> args(const std::string& gguf, const std::string& input) {
  return {"generate", "--backend", "cpu", "--json",       "--raw", "-n",
          "6",        "--model",   gguf,  "--input-file", input};
}

TEST(CliGenerate, NonFiniteLogitsFailOnlyTheirRequestAndTheCommand) {
  test::TempDir tmp;
  test::writeBytes(tmp / "clean.gguf",
                   test::ggufFromFolder(test::PoisonedModel::fixtureDir()).build());
  test::writeText(tmp / "in.json", R"(["hello there", "general kenobi"])");
  const CliRun clean = run(args((tmp / "clean.gguf").string(), (tmp / "in.json").string()));
  ASSERT_EQ(clean.lines.size(), 2u);
  ASSERT_TRUE(clean.error.empty()) << clean.error;
  // X: the last token of the second prompt, which the first request never meets.
  const std::vector<int32_t> first = clean.lines[0]["prompt_ids"],
                             firstOut = clean.lines[0]["tokens"];
  const std::vector<int32_t> second = clean.lines[1]["prompt_ids"];
  const int32_t x = second.back();
  ASSERT_EQ(std::count(first.begin(), first.end(), x), 0);
  ASSERT_EQ(std::count(firstOut.begin(), firstOut.end(), x), 0);

  const test::PoisonedModel poisoned("model.embed_tokens.weight", x, test::kBf16Inf);
  test::writeBytes(tmp / "poisoned.gguf", test::ggufFromFolder(poisoned.dir()).build());
  const CliRun bad = run(args((tmp / "poisoned.gguf").string(), (tmp / "in.json").string()));
  const std::string message =
      "the target model's logits are not finite (NaN or inf) at generated token 0 (position " +
      std::to_string(second.size()) + "); the model weights or activations overflowed";
  EXPECT_EQ(bad.error, "request 1: " + message);
  ASSERT_EQ(bad.lines.size(), 2u);
  EXPECT_EQ(bad.lines[0]["tokens"], clean.lines[0]["tokens"]);
  EXPECT_EQ(bad.lines[0]["finish_reason"], clean.lines[0]["finish_reason"]);
  EXPECT_FALSE(bad.lines[0].contains("error"));
  EXPECT_EQ(bad.lines[1]["finish_reason"], "error");
  EXPECT_EQ(bad.lines[1]["error"], message);
  EXPECT_TRUE(bad.lines[1]["tokens"].empty());
}

}  // namespace
}  // namespace es::cli
