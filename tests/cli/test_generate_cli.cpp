// `edgespec generate` and `edgespec bench` end to end on the CPU backend, on the qwen3 fixture
// (as a GGUF, so it carries a tokenizer): --draft (a random DFlash draft) gives exactly the
// tokens of plain generation, greedy; --stop ends the answer before a stop string; --input-file
// decodes a batch whose answers equal the requests run alone, and so does --one-at-a-time; bench
// reports the replay draft's tau and identical output; mismatched drafts and bad input files are
// clear errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/generate.h"
#include "common/errors.h"
#include "model/gguf_fixture.h"
#include "model/random_draft.h"
#include "runtime/engine_builder.h"
#include "support/cli_test_util.h"
#include "support/test_util.h"

namespace es::cli {
namespace {

namespace fs = std::filesystem;

using test::runCli;

nlohmann::json runJson(const std::vector<std::string>& args) { return test::runCliJson(args); }

TEST(CliDraft, GenerateWithADFlashDraftEqualsPlainGreedy) {
  test::TempDir tmp;
  const std::string target = test::test_data_dir() + "/models/qwen3";
  test::writeBytes(tmp / "q.gguf", test::ggufFromFolder(target).build());
  model::test_draft::DraftSpec spec;
  spec.blockSize = 4;
  model::test_draft::writeDraft(tmp / "draft", spec);
  const std::vector<std::string> base = {"generate",
                                         "--backend",
                                         "cpu",
                                         "--json",
                                         "-n",
                                         "20",
                                         "--raw",
                                         "--model",
                                         (tmp / "q.gguf").string(),
                                         "--prompt",
                                         "hello there general"};
  std::vector<std::string> withDraft = base;
  withDraft.insert(withDraft.end(), {"--draft", (tmp / "draft").string()});
  const nlohmann::json plain = runJson(base), spec_out = runJson(withDraft);
  EXPECT_EQ(spec_out["tokens"], plain["tokens"]);
  EXPECT_EQ(spec_out["text"], plain["text"]);
  ASSERT_TRUE(spec_out.contains("tau"));
  EXPECT_GE(spec_out["tau"].get<double>(), 1.0);
  EXPECT_FALSE(plain.contains("tau"));
  EXPECT_EQ(spec_out["verify_width"].get<int>(),
            runtime::kCpuVerifyWidth);  // auto on cpu (block 4)
  EXPECT_EQ(spec_out["accept_histogram"].size(), static_cast<size_t>(runtime::kCpuVerifyWidth) + 1);

  // --verify-width 2: the same tokens, steps of at most 2; 5 is above the block and refused.
  std::vector<std::string> narrow = withDraft;
  narrow.insert(narrow.end(), {"--verify-width", "2"});
  const nlohmann::json narrowOut = runJson(narrow);
  EXPECT_EQ(narrowOut["tokens"], plain["tokens"]);
  EXPECT_EQ(narrowOut["verify_width"].get<int>(), 2);
  EXPECT_EQ(narrowOut["accept_histogram"].size(), 3u);
  std::vector<std::string> wide = withDraft;
  wide.insert(wide.end(), {"--verify-width", "5"});
  test::expectInvalidArgument([&] { runCli(wide); }, "--verify-width");
}

TEST(CliGenerate, StopStringEndsTheAnswerBeforeIt) {
  test::TempDir tmp;
  test::writeBytes(tmp / "q.gguf",
                   test::ggufFromFolder(test::test_data_dir() + "/models/qwen3").build());
  const std::vector<std::string> base = {"generate",
                                         "--backend",
                                         "cpu",
                                         "--json",
                                         "-n",
                                         "24",
                                         "--raw",
                                         "--model",
                                         (tmp / "q.gguf").string(),
                                         "--prompt",
                                         "hello there general"};
  const nlohmann::json full = runJson(base);
  const std::string text = full["text"];
  ASSERT_GT(text.size(), 12u);
  const std::string stop = text.substr(text.size() / 2, 3);
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--stop", stop});
  const nlohmann::json cut = runJson(args);
  EXPECT_EQ(cut["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["finish_reason"], "stop");
  EXPECT_TRUE(cut["stop_string_hit"].get<bool>());
  EXPECT_LT(cut["tokens"].size(), full["tokens"].size());
  // The tokens are the full run's prefix: stopping changes nothing before the stop.
  for (size_t i = 0; i < cut["tokens"].size(); ++i) EXPECT_EQ(cut["tokens"][i], full["tokens"][i]);
}

// --prefill-chunk: a prompt longer than the chunk prefills in several forwards and gives the same
// tokens as one forward; the JSON reports the rows; bad values are refused by name.
TEST(CliGenerate, PrefillChunkIsExactAndChecked) {
  test::TempDir tmp;
  test::writeBytes(tmp / "q.gguf",
                   test::ggufFromFolder(test::test_data_dir() + "/models/qwen3").build());
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "the quick brown fox ";
  const std::vector<std::string> base = {"generate", "--backend", "cpu",
                                         "--json",   "-n",        "12",
                                         "--raw",    "--model",   (tmp / "q.gguf").string(),
                                         "--prompt", prompt};
  const nlohmann::json whole = runJson(base);
  ASSERT_GT(whole["prompt_tokens"].get<int>(), 32);   // at least three 16-row forwards below
  EXPECT_EQ(whole["prefill_chunk"].get<int>(), 256);  // auto on the cpu
  std::vector<std::string> chunked = base;
  chunked.insert(chunked.end(), {"--prefill-chunk", "16"});
  const nlohmann::json parts = runJson(chunked);
  EXPECT_EQ(parts["prefill_chunk"].get<int>(), 16);
  EXPECT_EQ(parts["tokens"], whole["tokens"]);
  for (const char* bad : {"8", "65537", "big", "16x", ""}) {
    SCOPED_TRACE(bad);
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--prefill-chunk", bad});
    test::expectInvalidArgument([&] { runCli(args); }, "--prefill-chunk");
  }
}

// auto: cuda takes the longest prompt rounded up to 256 rows, within [256, 4096]; cpu 256.
TEST(CliGenerate, PrefillChunkResolution) {
  EXPECT_EQ(runtime::resolvePrefillChunk(std::nullopt, "cpu", 5000), 256);
  EXPECT_EQ(runtime::resolvePrefillChunk(std::nullopt, "cuda", 1), 256);
  EXPECT_EQ(runtime::resolvePrefillChunk(std::nullopt, "cuda", 256), 256);
  EXPECT_EQ(runtime::resolvePrefillChunk(std::nullopt, "cuda", 257), 512);
  EXPECT_EQ(runtime::resolvePrefillChunk(std::nullopt, "cuda", 4096), 4096);
  EXPECT_EQ(runtime::resolvePrefillChunk(std::nullopt, "cuda", 100000),
            runtime::kMaxAutoPrefillChunk);
  EXPECT_EQ(runtime::resolvePrefillChunk(16, "cuda", 100000), 16);
  EXPECT_EQ(runtime::resolvePrefillChunk(65536, "cpu", 1), 65536);
}

TEST(CliGenerate, InputFileBatchEqualsRequestsAlone) {
  test::TempDir tmp;
  test::writeBytes(tmp / "q.gguf",
                   test::ggufFromFolder(test::test_data_dir() + "/models/qwen3").build());
  test::writeText(tmp / "in.json",
                  R"(["hello there", {"prompt": "general kenobi", "max_new_tokens": 5},
                      {"prompt": "a longer prompt with more words in it", "temperature": 0.8, "seed": 9}])");
  const std::vector<std::string> base = {
      "generate", "--backend", "cpu", "--json", "--raw", "--model", (tmp / "q.gguf").string()};
  std::vector<std::string> batch = base;
  batch.insert(batch.end(), {"-n", "12", "--input-file", (tmp / "in.json").string()});
  testing::internal::CaptureStdout();
  ASSERT_EQ(runCli(batch), 0);
  std::istringstream lines(testing::internal::GetCapturedStdout());
  std::vector<nlohmann::json> outs;
  for (std::string line; std::getline(lines, line);) outs.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(outs.size(), 3u);
  auto alone = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return runJson(a);
  };
  EXPECT_EQ(outs[0]["tokens"], alone({"--prompt", "hello there", "-n", "12"})["tokens"]);
  EXPECT_EQ(outs[1]["tokens"], alone({"--prompt", "general kenobi", "-n", "5"})["tokens"]);
  EXPECT_EQ(outs[1]["tokens"].size(), 5u);
  EXPECT_EQ(outs[2]["tokens"], alone({"--prompt", "a longer prompt with more words in it", "-n",
                                      "12", "--temperature", "0.8", "--seed", "9"})["tokens"]);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(outs[static_cast<size_t>(r)]["request"], r);

  std::vector<std::string> bad = base;
  bad.insert(bad.end(), {"--input-file", (tmp / "bad.json").string()});
  // Each bad file is refused naming the field (a FormatError for the file's shape, an
  // InvalidArgument for a value out of bounds); nothing is silently narrowed.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([{"text": "no prompt field"}])", "prompt"},
      {"[", "JSON"},
      {"[]", "1 to"},
      {R"([{"prompt": "a", "max_new_tokens": 4294967297}])", "max_new_tokens"},
      {R"([{"prompt": "a", "top_k": 2.9}])", "top_k"},
      {R"([{"prompt": "a", "seed": -1}])", "seed"},
      {R"([{"prompt": "a", "temperature": 1e300}])", "temperature"},
      {R"([{"prompt": "a", "max_tokens": 3}])", "max_tokens"},
      {R"([{"prompt": "a", "system": 5}])", "system"}};
  for (const auto& [text, field] : cases) {
    test::writeText(tmp / "bad.json", text);
    try {
      runCli(bad);
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  // A stop string must be whole UTF-8 characters (it cuts the answer where it starts).
  std::vector<std::string> badStop = base;
  badStop.insert(badStop.end(), {"--prompt", "hi", "--stop", std::string("\xa9")});
  EXPECT_THROW(runCli(badStop), InvalidArgument);
}

// --one-at-a-time: the file's requests decoded alone, one after another, in one process: each
// answer (and, with a draft, its own accept statistics) equals the request run by itself.
TEST(CliGenerate, OneAtATimeEqualsRequestsAlone) {
  test::TempDir tmp;
  test::writeBytes(tmp / "q.gguf",
                   test::ggufFromFolder(test::test_data_dir() + "/models/qwen3").build());
  model::test_draft::DraftSpec spec;
  spec.blockSize = 4;
  model::test_draft::writeDraft(tmp / "draft", spec);
  test::writeText(tmp / "in.json",
                  R"(["hello there", {"prompt": "general kenobi", "max_new_tokens": 5},
                      {"prompt": "a longer prompt with more words in it", "temperature": 0.8, "seed": 9}])");
  const std::vector<std::string> base = {
      "generate", "--backend", "cpu", "--json", "--raw", "--model", (tmp / "q.gguf").string()};
  for (const bool withDraft : {false, true}) {
    std::vector<std::string> extra;
    if (withDraft) extra = {"--draft", (tmp / "draft").string()};
    std::vector<std::string> seq = base;
    seq.insert(seq.end(), extra.begin(), extra.end());
    seq.insert(seq.end(), {"-n", "12", "--warmup", "--one-at-a-time", "--input-file",
                           (tmp / "in.json").string()});
    testing::internal::CaptureStdout();
    ASSERT_EQ(runCli(seq), 0);
    std::istringstream lines(testing::internal::GetCapturedStdout());
    std::vector<nlohmann::json> outs;
    for (std::string line; std::getline(lines, line);) outs.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(outs.size(), 3u);
    const std::vector<std::vector<std::string>> alone = {
        {"--prompt", "hello there", "-n", "12"},
        {"--prompt", "general kenobi", "-n", "5"},
        {"--prompt", "a longer prompt with more words in it", "-n", "12", "--temperature", "0.8",
         "--seed", "9"}};
    for (size_t r = 0; r < 3; ++r) {
      std::vector<std::string> a = base;
      a.insert(a.end(), extra.begin(), extra.end());
      a.insert(a.end(), alone[r].begin(), alone[r].end());
      const nlohmann::json want = runJson(a);
      EXPECT_EQ(outs[r]["request"], static_cast<int>(r));
      EXPECT_EQ(outs[r]["tokens"], want["tokens"]) << "request " << r << " draft " << withDraft;
      EXPECT_EQ(outs[r].contains("accept_histogram"), withDraft);
      if (withDraft) {
        EXPECT_EQ(outs[r]["accept_histogram"], want["accept_histogram"]) << "request " << r;
      }
    }
  }
  // It needs a file; and a batch file's limit of 64 requests does not apply to it.
  std::vector<std::string> noFile = base;
  noFile.insert(noFile.end(), {"--prompt", "hi", "--one-at-a-time"});
  test::expectInvalidArgument([&] { runCli(noFile); }, "--one-at-a-time");
  std::string many = "[";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"hi\"";
  test::writeText(tmp / "many.json", many + "]");
  std::vector<std::string> batch65 = base;
  batch65.insert(batch65.end(), {"-n", "2", "--input-file", (tmp / "many.json").string()});
  EXPECT_THROW(runCli(batch65), FormatError);
  std::vector<std::string> seq65 = batch65;
  seq65.push_back("--one-at-a-time");
  testing::internal::CaptureStdout();
  EXPECT_EQ(runCli(seq65), 0);
  std::istringstream lines(testing::internal::GetCapturedStdout());
  int count = 0;
  for (std::string line; std::getline(lines, line);)
    count += nlohmann::json::parse(line)["request"] == count ? 1 : 0;
  EXPECT_EQ(count, 65);
}

TEST(CliDraft, BenchReplayDraftAcceptsWholeBlocksAndMatchesPlain) {
  const std::string target = test::test_data_dir() + "/models/qwen3";
  const nlohmann::json out =
      runJson({"bench", "--model", target, "--backend", "cpu", "--replay", "--block-size", "4",
               "--prompt-len", "20", "--gen-len", "33", "--repeats", "2", "--json"});
  EXPECT_EQ(out["identical_prefix_fraction"].get<double>(), 1.0);
  EXPECT_GT(out["tau"].get<double>(),
            3.5);  // 32 tokens in blocks of 4 (the last one cut by the budget)
  EXPECT_GT(out["plain_tok_s"].get<double>(), 0.0);
  EXPECT_GT(out["verify_forward_ms"].get<double>(), 0.0);
  EXPECT_EQ(out["prefill_chunk"].get<int>(), 256);  // the default rows per target forward

  // --prefill-chunk 16: the 40-token prompt prefills in 3 forwards; the run is still exact.
  const nlohmann::json chunked =
      runJson({"bench", "--model", target, "--backend", "cpu", "--replay", "--block-size", "4",
               "--prompt-len", "40", "--gen-len", "9", "--repeats", "1", "--prefill-chunk", "16",
               "--json"});
  EXPECT_EQ(chunked["prefill_chunk"].get<int>(), 16);
  EXPECT_EQ(chunked["identical_prefix_fraction"].get<double>(), 1.0);
  test::expectInvalidArgument(
      [&] {
        runCli({"bench", "--model", target, "--backend", "cpu", "--prefill-chunk", "8"});
      },
      "--prefill-chunk");
}

// --verify-width W (bench): a replay draft of block 4 verified 2 rows at a time emits at most 2
// tokens a step, and still the plain tokens.
TEST(CliDraft, BenchVerifyWidthCapsTheTokensPerStep) {
  const std::string target = test::test_data_dir() + "/models/qwen3";
  const nlohmann::json out = runJson({"bench", "--model", target, "--backend", "cpu", "--replay",
                                      "--block-size", "4", "--verify-width", "2", "--prompt-len",
                                      "20", "--gen-len", "33", "--repeats", "2", "--json"});
  EXPECT_EQ(out["identical_prefix_fraction"].get<double>(), 1.0);
  EXPECT_EQ(out["verify_width"].get<int>(), 2);
  EXPECT_GT(out["tau"].get<double>(), 1.9);
  EXPECT_LE(out["tau"].get<double>(), 2.0);
  EXPECT_EQ(out["accept_histogram"].size(), 3u);
  EXPECT_THROW(runCli({"bench", "--model", target, "--backend", "cpu", "--replay", "--block-size",
                       "4", "--verify-width", "5"}),
               InvalidArgument);
}

// --verify-width: auto is the block size on cuda and kCpuVerifyWidth on cpu (never above the
// block); an explicit width must be an integer in [2, block size]; the flag's text is auto or an
// integer.
TEST(CliDraft, VerifyWidthResolution) {
  using runtime::kCpuVerifyWidth;
  using runtime::resolveVerifyWidth;
  EXPECT_EQ(resolveVerifyWidth(std::nullopt, "cuda", 16), 16);
  EXPECT_EQ(resolveVerifyWidth(std::nullopt, "cpu", 16), kCpuVerifyWidth);
  EXPECT_EQ(resolveVerifyWidth(std::nullopt, "cpu", 2), 2);
  EXPECT_EQ(resolveVerifyWidth(5, "cpu", 16), 5);
  EXPECT_EQ(resolveVerifyWidth(16, "cuda", 16), 16);
  EXPECT_EQ(resolveVerifyWidth(2, "cuda", 16), 2);
  for (const char* bad : {"1", "17", "0", "-3", "four", "4x", ""}) {
    SCOPED_TRACE(bad);
    test::expectInvalidArgument(
        [&] {
          resolveVerifyWidth(parseAutoOrInteger("generate", bad, "--verify-width"), "cpu", 16);
        },
        "--verify-width");
  }
  EXPECT_EQ(parseAutoOrInteger("generate", "auto", "--verify-width"), std::nullopt);
  EXPECT_EQ(parseAutoOrInteger("generate", "7", "--verify-width"), 7);
}

TEST(CliDraft, MismatchedDraftIsAClearError) {
  test::TempDir tmp;
  const std::string target = test::test_data_dir() + "/models/qwen3";
  test::writeBytes(tmp / "q.gguf", test::ggufFromFolder(target).build());
  model::test_draft::DraftSpec spec;
  spec.hidden = 64;  // the target's hidden size is 128
  spec.layers = 1;
  model::test_draft::writeDraft(tmp / "draft", spec);
  EXPECT_THROW(runCli({"generate", "--backend", "cpu", "-n", "4", "--raw", "--model",
                       (tmp / "q.gguf").string(), "--draft", (tmp / "draft").string()}),
               InvalidArgument);
  EXPECT_THROW(
      runCli({"bench", "--model", target, "--replay", "--draft", (tmp / "draft").string()}),
      InvalidArgument);
}

// The default model's draft (ES_CACHE_DIR/smollm2-135m-instruct-dflash, installed by
// tools/fetch_default_model.sh) runs only on a GPU backend: on the CPU, generate without --model
// decodes plainly; --draft still forces it; --no-draft together with --draft is an error.
TEST(CliDraft, DefaultDraftIsNotUsedOnTheCpu) {
  test::TempDir tmp;
  test::writeBytes(tmp / "q.gguf",
                   test::ggufFromFolder(test::test_data_dir() + "/models/qwen3").build());
  ASSERT_EQ(runCli({"convert", (tmp / "q.gguf").string(), (tmp / "smollm2-135m-instruct").string(),
                    "-q"}),
            0);
  model::test_draft::DraftSpec spec;
  spec.blockSize = 4;
  model::test_draft::writeDraft(tmp / "smollm2-135m-instruct-dflash", spec);
  const char* old = std::getenv("ES_CACHE_DIR");
  const std::string saved = old ? old : "";
  setenv("ES_CACHE_DIR", tmp.path().c_str(), 1);
  const std::vector<std::string> base = {"generate", "--backend", "cpu", "--json", "-n",
                                         "8",        "--raw",     "-p",  "hello"};
  const nlohmann::json plain = runJson(base);
  std::vector<std::string> forced = base;
  forced.insert(forced.end(), {"--draft", (tmp / "smollm2-135m-instruct-dflash").string()});
  const nlohmann::json withDraft = runJson(forced);
  std::vector<std::string> both = forced;
  both.push_back("--no-draft");
  EXPECT_THROW(runCli(both), InvalidArgument);
  if (old)
    setenv("ES_CACHE_DIR", saved.c_str(), 1);
  else
    unsetenv("ES_CACHE_DIR");
  EXPECT_FALSE(plain.contains("tau"));
  ASSERT_TRUE(withDraft.contains("tau"));
  EXPECT_EQ(withDraft["tokens"], plain["tokens"]);
}

// The default draft runs only where it is faster than plain decoding: the cuda backend with every
// request greedy (runtime::defaultDraftPays says why).
TEST(CliDraft, DefaultDraftOnlyOnTheGpuForGreedyRequests) {
  using runtime::defaultDraftPays;
  EXPECT_TRUE(defaultDraftPays("cuda", {0.0f}));
  EXPECT_TRUE(defaultDraftPays("cuda", {0.0f, 0.0f, 0.0f}));
  EXPECT_FALSE(defaultDraftPays("cuda", {1.0f}));
  EXPECT_FALSE(defaultDraftPays("cuda", {0.0f, 0.7f}));  // one sampled request of a batch
  EXPECT_FALSE(defaultDraftPays("cuda", {1e-6f}));
  EXPECT_FALSE(defaultDraftPays("cpu", {0.0f}));
  EXPECT_FALSE(defaultDraftPays("cpu", {0.0f, 0.0f}));
  EXPECT_FALSE(defaultDraftPays("cpu", {1.0f}));
}

}  // namespace
}  // namespace es::cli
