// tools/quant_accuracy on the tiny Qwen3 fixture (random weights, no tokenizer: prompts are
// token ids). A model against itself has KL 0, top-1 agreement 1 and the whole greedy
// continuation in common; its int4 quantization (group 64, what the fixture's intermediate size
// 192 allows) moves the next-token distributions (KL > 0) while agreement stays in (0, 1]; bad
// arguments end in one error line naming the flag or file and exit code 1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/quantize_folder.h"
#include "model/safetensors_test_writer.h"
#include "support/test_util.h"

namespace es {
namespace {

namespace fs = std::filesystem;

constexpr int kPrompts = 3;
constexpr int kTokens = 6;

std::string fixture() { return test::test_data_dir() + "/models/qwen3"; }

struct ToolRun {
  int exitCode = -1;
  std::string out;
  std::string err;
};

std::string readAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The tool with `args` (each single-quoted for the shell), stdout and stderr captured.
ToolRun runTool(const test::TempDir& tmp, const std::vector<std::string>& args) {
  std::string cmd = ES_QUANT_ACCURACY_BINARY;
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " >'" + (tmp / "out.txt").string() + "' 2>'" + (tmp / "err.txt").string() + "'";
  const int status = std::system(cmd.c_str());
  ToolRun r;
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = readAll(tmp / "out.txt");
  r.err = readAll(tmp / "err.txt");
  return r;
}

// kPrompts prompts of token ids below the fixture's vocab (384).
fs::path writePrompts(const test::TempDir& tmp) {
  const fs::path path = tmp / "prompts.jsonl";
  test::writeText(path,
                  "{\"tokens\": [5, 77, 120, 3, 250]}\n"
                  "{\"tokens\": [300, 17, 9]}\n"
                  "\n"
                  "{\"tokens\": [41, 41, 200, 383, 0, 12, 99]}\n"
                  "{\"tokens\": [1, 2]}\n");  // beyond --num-prompts
  return path;
}

nlohmann::json runJson(const test::TempDir& tmp, const std::vector<std::string>& quantized) {
  std::vector<std::string> args = {"--reference",   fixture(),
                                   "--prompts",     writePrompts(tmp).string(),
                                   "--num-prompts", std::to_string(kPrompts),
                                   "--tokens",      std::to_string(kTokens),
                                   "--json"};
  for (const std::string& q : quantized) {
    args.push_back("--quantized");
    args.push_back(q);
  }
  const ToolRun r = runTool(tmp, args);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(QuantAccuracy, AModelAgainstItselfAgreesExactly) {
  test::TempDir tmp;
  const nlohmann::json out = runJson(tmp, {fixture()});
  EXPECT_EQ(out["prompts"], kPrompts);
  ASSERT_EQ(out["models"].size(), 1u);
  const nlohmann::json& m = out["models"][0];
  // The fixture has no eos: every continuation runs the full kTokens.
  EXPECT_EQ(m["positions"], kPrompts * kTokens);
  EXPECT_EQ(m["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(m["kl_mean"].get<double>(), 0.0);
  EXPECT_EQ(m["kl_max"].get<double>(), 0.0);
  EXPECT_EQ(m["greedy_prefix_mean"].get<double>(), kTokens);
  EXPECT_EQ(m["greedy_full_match_fraction"].get<double>(), 1.0);
}

TEST(QuantAccuracy, Int4MovesTheDistributions) {
  test::TempDir tmp;
  model::QuantizeOptions int4;
  int4.group = 64;
  model::quantizeFolder(fixture(), tmp / "int4", int4);
  const nlohmann::json out = runJson(tmp, {(tmp / "int4").string(), fixture()});
  ASSERT_EQ(out["models"].size(), 2u);
  const nlohmann::json& q = out["models"][0];
  EXPECT_EQ(q["positions"], kPrompts * kTokens);
  EXPECT_GT(q["kl_mean"].get<double>(), 0.0);
  EXPECT_GT(q["kl_p99"].get<double>(), 0.0);
  EXPECT_GE(q["kl_max"].get<double>(), q["kl_p99"].get<double>());
  EXPECT_GT(q["top1_agreement"].get<double>(), 0.0);
  EXPECT_LE(q["top1_agreement"].get<double>(), 1.0);
  EXPECT_GE(q["greedy_prefix_mean"].get<double>(), 0.0);
  EXPECT_LE(q["greedy_prefix_mean"].get<double>(), kTokens);
  EXPECT_LT(q["weight_bytes"].get<int64_t>(), out["models"][1]["weight_bytes"].get<int64_t>());
  // The reference in the same run is still exact: the models do not disturb each other.
  EXPECT_EQ(out["models"][1]["kl_max"].get<double>(), 0.0);
}

TEST(QuantAccuracy, BadArgumentsErrorNamingThem) {
  test::TempDir tmp;
  const std::string prompts = writePrompts(tmp).string();
  const std::vector<std::string> base = {"--reference", fixture(), "--prompts", prompts};
  auto expectError = [&](std::vector<std::string> extra, const std::string& message) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const ToolRun r = runTool(tmp, args);
    EXPECT_EQ(r.exitCode, 1) << message;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  };
  expectError({"--quantized", fixture(), "--tokens", "0"},
              "quant_accuracy: argument '--tokens' = 0 must be in [1, 4096]");
  expectError({"--quantized", fixture(), "--num-prompts", "-2"},
              "quant_accuracy: argument '--num-prompts' = -2 must be in [1, 100000]");
  expectError({"--quantized", fixture(), "--backend", "tpu"},
              "quant_accuracy: argument '--backend' = tpu must be cpu or cuda");
  expectError({"--quantized", (tmp / "missing").string()}, (tmp / "missing").string());

  test::writeText(tmp / "bad.jsonl", "{\"tokens\": [1, 2]}\n{\"text\": \"hi\"}\n");
  const ToolRun bad = runTool(tmp, {"--reference", fixture(), "--quantized", fixture(), "--prompts",
                                    (tmp / "bad.jsonl").string()});
  EXPECT_EQ(bad.exitCode, 1);
  EXPECT_NE(bad.err.find("bad.jsonl: line 2: expected an object with a string 'prompt' or an "
                         "array 'tokens'"),
            std::string::npos)
      << bad.err;

  test::writeText(tmp / "big.jsonl", "{\"tokens\": [1, 384]}\n");
  const ToolRun big = runTool(tmp, {"--reference", fixture(), "--quantized", fixture(), "--prompts",
                                    (tmp / "big.jsonl").string()});
  EXPECT_EQ(big.exitCode, 1);
  EXPECT_NE(big.err.find("holds token id 384, not below the reference's vocab_size 384"),
            std::string::npos)
      << big.err;
}

}  // namespace
}  // namespace es
