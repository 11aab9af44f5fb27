// The engine builder (runtime/engine_builder.h) on the CPU backend: the KV capacity rule at its
// edges (a request of exactly the planned length runs to the end with every step accepting its
// whole width, one token more is refused), bad configuration values refused with the option
// named, and the tiny test models built plain and with their DFlash draft.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kv/page_geometry.h"
#include "model/safetensors_test_writer.h"
#include "runtime/engine_builder.h"
#include "runtime/kv_capacity.h"
#include "runtime/replay_proposer.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

std::string modelDir(const std::string& name) { return test::test_data_dir() + "/models/" + name; }

std::vector<int32_t> randomPrompt(int32_t length, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < length; ++i) prompt.push_back(static_cast<int32_t>(rng() % vocab));
  return prompt;
}

EngineConfig cpuConfig(const std::string& model) {
  return {.model = modelDir(model), .backend = "cpu", .longestPrompt = 8, .longestRequest = 16};
}

TEST(EngineBuilder, KvCapacityRule) {
  // Plain: prompt + maxNewTokens (one spare row: the last token is never written).
  EXPECT_EQ(kvCapacityTokens(100, 1, 1), 100);
  // Speculative: (W − 1) verify rows past the budget and (BS − 1) proposal rows past those.
  EXPECT_EQ(kvCapacityTokens(100, 16, 16), 130);
  EXPECT_EQ(kvCapacityTokens(100, 4, 16), 118);
  EXPECT_EQ(kvCapacityTokens(100, 2, 2), 102);
}

// The plan sizes the cache by the rule; the engine's request check uses the same rule, so a
// request of exactly longestRequest fits and one more token does not. The capacity is made a
// whole number of pages (no padding slack), and the replay draft accepts every row, so each step
// writes its whole width: the most a request can write.
TEST(EngineBuilder, CapacityEdgeWithFullAcceptance) {
  constexpr int32_t kBlock = 4, kWidth = 4;
  const int64_t margin = kvCapacityTokens(0, kWidth, kBlock);
  EngineConfig config = cpuConfig("qwen3");
  config.draft = {.kind = DraftKind::kReplay, .replayBlockSize = kBlock};
  config.longestPrompt = 40;
  config.longestRequest = 2 * kv::kTokensPerPage - margin;
  const std::unique_ptr<Engine> engine = buildEngine(config);
  EXPECT_EQ(engine->plan().verifyWidth, kWidth);  // auto on cpu: min(kCpuVerifyWidth, BS)
  EXPECT_EQ(engine->plan().kvCapacity, 2 * kv::kTokensPerPage);
  EXPECT_EQ(engine->cache().capacity(), 2 * kv::kTokensPerPage);
  EXPECT_THROW(engine->decoder(), InvalidArgument);  // a replay draft's caller builds it

  const int32_t vocab = static_cast<int32_t>(engine->target().config().vocab_size);
  const GenerationRequest request{.prompt = randomPrompt(40, 1, vocab),
                                  .maxNewTokens = static_cast<int32_t>(config.longestRequest - 40)};
  DecodeEngine plainDecoder(engine->target(), engine->cache());
  const std::vector<GenerationResult> plain = plainDecoder.generate({request});
  ASSERT_EQ(static_cast<int64_t>(plain[0].tokens.size()), request.maxNewTokens);

  ReplayProposer replay(engine->backend(), kBlock, 1,
                        ReplayProposer::recordingsOf({request}, plain), vocab, 0.0f);
  DecodeEngine decoder(engine->target(), engine->cache(), &replay, {.verifyWidth = kWidth});
  const std::vector<GenerationResult> spec = decoder.generate({request});
  EXPECT_EQ(spec[0].tokens, plain[0].tokens);
  EXPECT_GT(decoder.stats().meanAcceptLength(), kWidth - 0.5);

  GenerationRequest tooLong = request;
  ++tooLong.maxNewTokens;
  test::expectInvalidArgument([&] { decoder.generate({tooLong}); },
                              "requests[0] prompt + maxNewTokens");
  DecodeEngine plainAgain(engine->target(), engine->cache());
  // Plain decoding needs no margin: the same cache takes margin more tokens.
  tooLong.maxNewTokens += static_cast<int32_t>(margin) - 1;
  EXPECT_EQ(static_cast<int64_t>(plainAgain.generate({tooLong})[0].tokens.size()),
            tooLong.maxNewTokens);
  ++tooLong.maxNewTokens;
  test::expectInvalidArgument([&] { plainAgain.generate({tooLong}); },
                              "requests[0] prompt + maxNewTokens");
}

struct BadValue {
  const char* what;
  EngineConfig config;
  const char* option;
};

TEST(EngineBuilder, BadValuesNameTheOption) {
  const std::string draft = modelDir("dflash_tiny/draft");
  auto with = [](auto change) {
    EngineConfig c = cpuConfig("qwen3");
    change(c);
    return c;
  };
  const std::vector<BadValue> cases = {
      {"no model", with([](EngineConfig& c) { c.model.clear(); }), "--model"},
      {"unknown backend", with([](EngineConfig& c) { c.backend = "gpu"; }), "--backend"},
      {"DFlash without a folder", with([](EngineConfig& c) { c.draft.kind = DraftKind::kDFlash; }),
       "--draft"},
      {"replay block 1",
       with([](EngineConfig& c) { c.draft = {.kind = DraftKind::kReplay, .replayBlockSize = 1}; }),
       "--block-size"},
      {"replay block 33",
       with([](EngineConfig& c) { c.draft = {.kind = DraftKind::kReplay, .replayBlockSize = 33}; }),
       "--block-size"},
      {"width without a draft", with([](EngineConfig& c) { c.verifyWidth = 4; }), "--verify-width"},
      {"width 1", with([](EngineConfig& c) {
         c.draft = {.kind = DraftKind::kReplay, .replayBlockSize = 4};
         c.verifyWidth = 1;
       }),
       "--verify-width"},
      {"width above the block", with([&](EngineConfig& c) {
         c.draft = {.kind = DraftKind::kDFlash, .dir = draft};
         c.model = modelDir("dflash_tiny/target");
         c.verifyWidth = 9;  // the draft's block is 8
       }),
       "--verify-width"},
      {"prefill chunk 8", with([](EngineConfig& c) { c.prefillChunk = 8; }), "--prefill-chunk"},
      {"prefill chunk 65537", with([](EngineConfig& c) { c.prefillChunk = 65537; }),
       "--prefill-chunk"},
      {"prefill budget 8", with([](EngineConfig& c) { c.prefillBudget = 8; }), "--prefill-budget"},
      {"prefill budget 65537", with([](EngineConfig& c) { c.prefillBudget = 65537; }),
       "--prefill-budget"},
      {"batch 0", with([](EngineConfig& c) { c.maxBatch = 0; }), "--batch"},
      {"batch 257", with([](EngineConfig& c) { c.maxBatch = kMaxEngineBatch + 1; }), "--batch"},
      {"no prompt", with([](EngineConfig& c) { c.longestPrompt = 0; }), "prompt length"},
      {"nothing to generate", with([](EngineConfig& c) { c.longestRequest = c.longestPrompt; }),
       "prompt + max new tokens"},
      {"too long for any cache", with([](EngineConfig& c) {
         c.draft = {.kind = DraftKind::kReplay, .replayBlockSize = 4};
         c.longestRequest = kv::kMaxKvCacheCapacity;
       }),
       "prompt + max new tokens"},
      {"negative prefix pages", with([](EngineConfig& c) { c.prefixCachePages = -1; }),
       "--prefix-cache-pages"},
      {"too many prefix pages",
       with([](EngineConfig& c) { c.prefixCachePages = kv::kMaxKvPoolPages; }),
       "--prefix-cache-pages"},
  };
  for (const BadValue& bad : cases) {
    SCOPED_TRACE(bad.what);
    test::expectInvalidArgument([&] { buildEngine(bad.config); }, bad.option);
  }
}

TEST(EngineBuilder, RulesForWidthChunkAndDefaultDraft) {
  EXPECT_EQ(resolveVerifyWidth(std::nullopt, "cuda", 16), 16);
  EXPECT_EQ(resolveVerifyWidth(std::nullopt, "cpu", 16), kCpuVerifyWidth);
  EXPECT_EQ(resolveVerifyWidth(std::nullopt, "cpu", 3), 3);
  EXPECT_EQ(resolvePrefillChunk(std::nullopt, "cpu", 5000), 256);
  EXPECT_EQ(resolvePrefillChunk(std::nullopt, "cuda", 257), 512);
  EXPECT_EQ(resolvePrefillChunk(std::nullopt, "cuda", 100000), kMaxAutoPrefillChunk);
  EXPECT_EQ(resolvePrefillBudget(std::nullopt, 512), 512);  // one forward's rows a step
  EXPECT_EQ(resolvePrefillBudget(64, 512), 64);
  EXPECT_TRUE(defaultDraftPays("cuda", {0.0f, 0.0f}));
  EXPECT_FALSE(defaultDraftPays("cuda", {0.0f, 0.5f}));
  EXPECT_FALSE(defaultDraftPays("cpu", {0.0f}));
}

// Every tiny model builds plainly and decodes; the plan is the documented one.
TEST(EngineBuilder, BuildsTheTinyModelsPlain) {
  for (const char* name : {"qwen3", "qwen2", "llama", "qwen3_swa"}) {
    SCOPED_TRACE(name);
    EngineConfig config = cpuConfig(name);
    config.maxBatch = 2;
    config.longestPrompt = 12;
    config.longestRequest = 20;
    const std::unique_ptr<Engine> engine = buildEngine(config);
    const EnginePlan& plan = engine->plan();
    EXPECT_FALSE(plan.speculative);
    EXPECT_EQ(plan.verifyWidth, 1);
    EXPECT_EQ(plan.prefillChunk, 256);  // auto on cpu
    EXPECT_EQ(plan.maxTokens, 256);
    EXPECT_EQ(plan.prefillBudget, 256);
    EXPECT_EQ(plan.maxLogitRows, 2);
    EXPECT_EQ(plan.kvCapacity, 20);
    EXPECT_EQ(engine->draft(), nullptr);
    const int32_t vocab = static_cast<int32_t>(engine->target().config().vocab_size);
    const std::vector<GenerationResult> out =
        engine->decoder().generate({{.prompt = randomPrompt(12, 2, vocab), .maxNewTokens = 8},
                                    {.prompt = randomPrompt(5, 3, vocab), .maxNewTokens = 8}});
    EXPECT_EQ(out[0].tokens.size(), 8u);
    EXPECT_EQ(out[1].tokens.size(), 8u);
  }
}

// The DFlash pair builds with its draft (the target gets the draft's taps), verifies at the cpu
// width and gives plain greedy decoding's tokens; the explicit prefill chunk and width are kept.
TEST(EngineBuilder, BuildsTheTinyDFlashPair) {
  EngineConfig config = cpuConfig("dflash_tiny/target");
  config.draft = {.kind = DraftKind::kDFlash, .dir = modelDir("dflash_tiny/draft")};
  config.prefillChunk = 16;
  config.longestPrompt = 30;
  config.longestRequest = 46;
  for (const std::optional<int32_t> width : {std::optional<int32_t>(), std::optional<int32_t>(8)}) {
    config.verifyWidth = width;
    const std::unique_ptr<Engine> engine = buildEngine(config);
    const EnginePlan& plan = engine->plan();
    ASSERT_NE(engine->draft(), nullptr);
    EXPECT_TRUE(plan.speculative);
    EXPECT_EQ(plan.blockSize, 8);
    EXPECT_EQ(plan.verifyWidth, width.value_or(kCpuVerifyWidth));
    EXPECT_EQ(plan.prefillChunk, 16);
    EXPECT_EQ(plan.maxTokens, 16);
    EXPECT_EQ(plan.kvCapacity, kvCapacityTokens(46, plan.verifyWidth, 8));
    EXPECT_EQ(engine->target().tapLayers(), engine->draft()->requiredTargetTaps());
    const int32_t vocab = static_cast<int32_t>(engine->target().config().vocab_size);
    const GenerationRequest request{.prompt = randomPrompt(30, 4, vocab), .maxNewTokens = 16};
    const std::vector<GenerationResult> spec = engine->decoder().generate({request});
    EXPECT_EQ(engine->decoder().stepWidth(), plan.verifyWidth);
    DecodeEngine plain(engine->target(), engine->cache());
    EXPECT_EQ(spec[0].tokens, plain.generate({request})[0].tokens);
  }
}

// A copy of model folder `name` in `dir` whose config.json says max_position_embeddings =
// `positions`.
std::filesystem::path withMaxPositions(const test::TempDir& dir, const std::string& name,
                                       int64_t positions) {
  const std::filesystem::path out = dir / std::filesystem::path(name).filename().string();
  std::filesystem::copy(modelDir(name), out, std::filesystem::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(out / "config.json"));
  config["max_position_embeddings"] = positions;
  test::writeText(out / "config.json", config.dump());
  return out;
}

// A model whose RoPE table is shorter than the positions the requests write is refused before it
// loads, naming the option, its max_position_embeddings and what the requests need (the draft's
// share included); exactly enough positions build.
TEST(EngineBuilder, TooFewPositionsNameTheModelAndWhatIsNeeded) {
  test::TempDir tmp;
  EngineConfig config = cpuConfig("dflash_tiny/target");
  config.longestPrompt = 30;
  config.longestRequest = 46;
  config.draft = {.kind = DraftKind::kDFlash,
                  .dir = withMaxPositions(tmp, "dflash_tiny/draft", 16)};
  // W = kCpuVerifyWidth = 4, BS = 8: 46 + 3 + 7 = 56 positions.
  const std::string needs =
      "but the longest request needs 56 positions (prompt + max new tokens = 46, plus 10 rows a "
      "speculative step at verify width 4 and block size 8 writes ahead)";
  test::expectInvalidArgument([&] { buildEngine(config); }, "--draft");
  try {
    buildEngine(config);
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("has max_position_embeddings = 16, " + needs), std::string::npos) << what;
    EXPECT_NE(what.find("or decode without this draft"), std::string::npos) << what;
  }
  std::filesystem::remove_all(config.draft.dir);
  config.draft.dir = withMaxPositions(tmp, "dflash_tiny/draft", 55);
  test::expectInvalidArgument([&] { buildEngine(config); }, "--draft");
  std::filesystem::remove_all(config.draft.dir);
  config.draft.dir = withMaxPositions(tmp, "dflash_tiny/draft", 56);
  EXPECT_NE(buildEngine(config), nullptr);

  // Plain decoding needs prompt + max new tokens positions of the target, no more.
  EngineConfig plain = cpuConfig("qwen3");
  plain.longestPrompt = 30;
  plain.longestRequest = 46;
  plain.model = withMaxPositions(tmp, "qwen3", 45);
  try {
    buildEngine(plain);
    ADD_FAILURE() << "45 positions accepted for 46";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("argument '--model' = " + plain.model.string() +
                                         " has max_position_embeddings = 45, but the longest "
                                         "request needs 46 positions (prompt + max new tokens = "
                                         "46); shorten the prompt or --max-new-tokens"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(plain.model);
  plain.model = withMaxPositions(tmp, "qwen3", 46);
  EXPECT_NE(buildEngine(plain), nullptr);
}

// onProgress hears the target's layers as they load, then each prompt's prefill chunk by chunk
// (the progress a front end prints for long work).
TEST(EngineBuilder, ProgressOfTheLoadAndThePrefill) {
  std::vector<std::string> heard;
  EngineConfig config = cpuConfig("qwen3");
  config.prefillChunk = 16;
  config.longestPrompt = 40;
  config.longestRequest = 42;
  config.onProgress = [&](const ProgressUpdate& u) {
    heard.push_back(std::string(u.task) + " " + std::to_string(u.done) + "/" +
                    std::to_string(u.total) + " " + std::string(u.unit));
  };
  const std::unique_ptr<Engine> engine = buildEngine(config);
  const std::vector<std::string> load = {"loading qwen3 0/2 layers", "loading qwen3 1/2 layers",
                                         "loading qwen3 2/2 layers"};
  EXPECT_EQ(heard, load);
  heard.clear();
  const int32_t vocab = static_cast<int32_t>(engine->target().config().vocab_size);
  engine->decoder().generate({{.prompt = randomPrompt(40, 5, vocab), .maxNewTokens = 2}});
  const std::vector<std::string> prefill = {"prefill 0/40 tokens", "prefill 16/40 tokens",
                                            "prefill 32/40 tokens", "prefill 40/40 tokens"};
  EXPECT_EQ(heard, prefill);
}

// --prefill-budget reaches the engine: a step prefills that many prompt rows (two 16-row chunks).
TEST(EngineBuilder, PrefillBudgetReachesTheEngine) {
  EngineConfig config = cpuConfig("qwen3");
  config.prefillChunk = 16;
  config.prefillBudget = 32;
  config.longestPrompt = 100;
  config.longestRequest = 102;
  const std::unique_ptr<Engine> engine = buildEngine(config);
  EXPECT_EQ(engine->plan().prefillBudget, 32);
  DecodeEngine& decoder = engine->decoder();
  const int32_t vocab = static_cast<int32_t>(engine->target().config().vocab_size);
  decoder.submit({.prompt = randomPrompt(100, 6, vocab), .maxNewTokens = 2});
  for (const int64_t rows : {32, 64, 96, 100}) {
    EXPECT_TRUE(decoder.step() || rows == 100);
    EXPECT_EQ(decoder.stats().prefillRows, rows);
  }
}

// The default draft resolves to plain decoding where it does not pay (the cpu backend), and says
// so; the explicit width then has no effect.
TEST(EngineBuilder, DefaultDraftSkippedOnTheCpu) {
  EngineConfig config = cpuConfig("dflash_tiny/target");
  config.draft = {.kind = DraftKind::kDefaultDFlash,
                  .dir = modelDir("dflash_tiny/draft"),
                  .temperatures = {0.0f}};
  config.verifyWidth = 4;
  std::vector<std::string> lines;
  config.onStatus = [&](const std::string& line) { lines.push_back(line); };
  const std::unique_ptr<Engine> engine = buildEngine(config);
  EXPECT_TRUE(engine->plan().defaultDraftSkipped);
  EXPECT_FALSE(engine->plan().speculative);
  EXPECT_EQ(engine->draft(), nullptr);
  EXPECT_EQ(engine->plan().verifyWidth, 1);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_NE(lines[0].find("plain decoding"), std::string::npos);
  EXPECT_NE(lines[1].find("--verify-width 4 has no effect"), std::string::npos);
}

}  // namespace
}  // namespace es::runtime
