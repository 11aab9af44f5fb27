// tools/quant_accuracy on the tiny Qwen3 fixture (random weights, no tokenizer: prompts are
// token ids). A model against itself has KL 0, top-1 agreement 1 and the whole greedy
// continuation in common; its int4 quantization (group 64: 128 does not divide the fixture's
// intermediate size 192) moves the next-token distributions (KL > 0) while agreement stays in
// (0, 1], and its statistics equal those of an in-test reference (one decode step at a time, KL
// from plain f64 softmax); bad arguments end in one error line naming the flag or file and exit
// code 1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/quantize_folder.h"
#include "model/safetensors_test_writer.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "support/decode_batch.h"
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

// The prompts of writePrompts, for the in-test reference below.
const std::vector<std::vector<int32_t>> kPromptTokens = {
    {5, 77, 120, 3, 250}, {300, 17, 9}, {41, 41, 200, 383, 0, 12, 99}};

// One decode step at a time (a different path from the tool's one-forward teacher forcing):
// feeds `prompt` then `feed` (or, when `feed` is empty, its own argmax) and returns the logits
// [kTokens, V] of the rows after the prompt's last token and after each fed token.
std::vector<float> stepLogits(const std::string& dir, const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& feed, std::vector<int32_t>& argmaxes) {
  auto cpu = ops::makeCpuBackend();
  model::TargetModel m(dir, *cpu, 64);
  const auto V = static_cast<int32_t>(m.config().vocab_size);
  kv::KvCacheConfig kc;
  kc.maxBatchSize = 1;
  kc.maxSequenceLength = 64;
  kc.dtype = cpu->computeDtype();
  kc.baseLayers = m.kvLayerShapes();
  kv::KvCacheManager cache(kc, MemorySpace::kHost);
  const int32_t slot = cache.admit();
  std::vector<float> all;
  argmaxes.clear();
  for (size_t i = 0; i < prompt.size() + kTokens - 1; ++i) {
    const int32_t token = i < prompt.size() ? prompt[i]
                          : feed.empty()    ? argmaxes.back()
                                            : feed[i - prompt.size()];
    model::ForwardResult r = m.forward(test::decodeBatch(cache, {slot}, {token}), cache);
    cache.commitBase(slot, 1);
    if (i + 1 < prompt.size()) continue;
    all.insert(all.end(), r.logits.begin(), r.logits.end());
    argmaxes.push_back(static_cast<int32_t>(std::max_element(r.logits.begin(), r.logits.end()) -
                                            r.logits.begin()));
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kTokens) * V);
  return all;
}

// KL(p || q) of two logit rows: softmax in f64, summed directly.
double klOfRows(const float* p, const float* q, int64_t V) {
  auto probs = [V](const float* x) {
    const double mx = *std::max_element(x, x + V);
    std::vector<double> e(static_cast<size_t>(V));
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += e[static_cast<size_t>(v)] = std::exp(x[v] - mx);
    for (double& ev : e) ev /= sum;
    return e;
  };
  const std::vector<double> pp = probs(p), qq = probs(q);
  double kl = 0;
  for (size_t v = 0; v < pp.size(); ++v) kl += pp[v] * std::log(pp[v] / qq[v]);
  return kl;
}

TEST(QuantAccuracy, MatchesAStepByStepReference) {
  test::TempDir tmp;
  model::QuantizeOptions int4;
  int4.group = 64;
  model::quantizeFolder(fixture(), tmp / "int4", int4);
  const nlohmann::json out = runJson(tmp, {(tmp / "int4").string()});
  const nlohmann::json& q = out["models"][0];

  double klSum = 0;
  int matches = 0;
  double prefixSum = 0;
  for (const std::vector<int32_t>& prompt : kPromptTokens) {
    std::vector<int32_t> refTokens, qTokens, qOwn;
    const std::vector<float> ref = stepLogits(fixture(), prompt, {}, refTokens);
    const std::vector<float> forced =
        stepLogits((tmp / "int4").string(), prompt, refTokens, qTokens);
    stepLogits((tmp / "int4").string(), prompt, {}, qOwn);
    const int64_t V = static_cast<int64_t>(ref.size()) / kTokens;
    for (int r = 0; r < kTokens; ++r) {
      klSum += klOfRows(ref.data() + r * V, forced.data() + r * V, V);
      matches += refTokens[static_cast<size_t>(r)] == qTokens[static_cast<size_t>(r)] ? 1 : 0;
    }
    int same = 0;
    while (same < kTokens &&
           qOwn[static_cast<size_t>(same)] == refTokens[static_cast<size_t>(same)]) {
      ++same;
    }
    prefixSum += same;
  }
  const int positions = kPrompts * kTokens;
  EXPECT_EQ(q["top1_agreement"].get<double>(), static_cast<double>(matches) / positions);
  EXPECT_NEAR(q["kl_mean"].get<double>(), klSum / positions, 1e-6 * klSum / positions);
  EXPECT_EQ(q["greedy_prefix_mean"].get<double>(), prefixSum / kPrompts);
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
